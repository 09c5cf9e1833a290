"""pmfast's numba ``Dot`` where one side is a float64 vector, and the dispatch of the rest.

pytensor calls ``np.dot``, whose numba implementation (BLAS calls behind layout checks and copies)
costs ~0.7 s to compile in a new process. pytensor's rewrites turn ``X @ beta`` into matrix ×
column (one side of static length 1). Here matrix × vector is the same BLAS matrix-vector product
(numba's own wrapper, :func:`pmfast.compiler.native.blas_dgemv`) when the matrix is C- or
F-contiguous (the design matrix, the gradient's transpose of it), a loop otherwise, with numba's
error for sizes that don't match; vector · vector is a loop. Matrix × matrix is one ``gemm``
(:func:`pmfast.compiler.linalg.funcify_dot`); other products stay pytensor's.
"""

from __future__ import annotations

import numpy as np

from pmfast.compiler import generated

#: Bump when the generated code changes (part of the cache key; 9 continues the count of
#: ``pmfast.compiler.ops``, where this code was).
VERSION = 9

_DOT_SOURCES = {
    # (x.ndim, y.ndim): source of dot(x, y); the loop runs along the contiguous axis
    (1, 1): """
def dot(x, y):
    if x.shape[0] != y.shape[0]:
        raise ValueError("incompatible array sizes for np.dot(a, b) (vector * vector)")
    acc = 0.0
    for i in range(x.shape[0]):
        acc += x[i] * y[i]
    out = _pm_empty((), _pm_f64)
    out[()] = acc
    return out
""",
    (2, 1): """
def dot(x, y):
    m, k = x.shape
    if y.shape[0] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * vector)")
    out = _pm_empty(m, _pm_f64)
    if x.strides[0] >= x.strides[1]:
        for i in range(m):
            acc = 0.0
            for j in range(k):
                acc += x[i, j] * y[j]
            out[i] = acc
    else:
        for i in range(m):
            out[i] = 0.0
        for j in range(k):
            yj = y[j]
            for i in range(m):
                out[i] += x[i, j] * yj
    return out
""",
    # matrix x column (static length-1 second axis): matrix x vector; BLAS when the matrix is contiguous
    (2, "col"): """
def dot(x, y):
    m, k = x.shape
    if y.shape[0] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * matrix)")
    out = _pm_empty((m, 1), _pm_f64)
    c_layout = x.strides[1] == 8 and (x.strides[0] == 8 * k or m == 1)
    f_layout = x.strides[0] == 8 and (x.strides[1] == 8 * m or k == 1)
    if m > 0 and k > 0 and (c_layout or f_layout):
        v = y[:, 0]
        if v.strides[0] != 8:
            v = _pm_empty(k, _pm_f64)
            for j in range(k):
                v[j] = y[j, 0]
        if c_layout:
            _pm_gemv("t", k, m, _pm_ptr(x), k, _pm_ptr(v), _pm_ptr(out))
        else:
            _pm_gemv("n", m, k, _pm_ptr(x), m, _pm_ptr(v), _pm_ptr(out))
        return out
    for i in range(m):
        acc = 0.0
        for j in range(k):
            acc += x[i, j] * y[j, 0]
        out[i, 0] = acc
    return out
""",
    # row (static length-1 first axis) x matrix: vector x matrix, i.e. (y.T @ x.T).T
    ("row", 2): """
def dot(x, y):
    k, n = y.shape
    if x.shape[1] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * matrix)")
    out = _pm_empty((1, n), _pm_f64)
    c_layout = y.strides[1] == 8 and (y.strides[0] == 8 * n or k == 1)
    f_layout = y.strides[0] == 8 and (y.strides[1] == 8 * k or n == 1)
    if n > 0 and k > 0 and (c_layout or f_layout):
        v = x[0]
        if v.strides[0] != 8:
            v = _pm_empty(k, _pm_f64)
            for i in range(k):
                v[i] = x[0, i]
        if c_layout:
            _pm_gemv("n", n, k, _pm_ptr(y), n, _pm_ptr(v), _pm_ptr(out))
        else:
            _pm_gemv("t", k, n, _pm_ptr(y), k, _pm_ptr(v), _pm_ptr(out))
        return out
    for j in range(n):
        acc = 0.0
        for i in range(k):
            acc += x[0, i] * y[i, j]
        out[0, j] = acc
    return out
""",
    (1, 2): """
def dot(x, y):
    k, n = y.shape
    if x.shape[0] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (vector * matrix)")
    out = _pm_empty(n, _pm_f64)
    if y.strides[1] >= y.strides[0]:
        for j in range(n):
            acc = 0.0
            for i in range(k):
                acc += x[i] * y[i, j]
            out[j] = acc
    else:
        for j in range(n):
            out[j] = 0.0
        for i in range(k):
            xi = x[i]
            for j in range(n):
                out[j] += xi * y[i, j]
    return out
""",
}


def _build(node):
    """``(numba function, key)`` of the :data:`_DOT_SOURCES` loop for ``node``."""
    from pmfast.compiler import native

    src = _DOT_SOURCES[kind(node)].lstrip()
    env = {"_pm_empty": native.empty, "_pm_f64": np.float64, "_pm_gemv": native.blas_dgemv, "_pm_ptr": native.data_pointer}
    return generated.build(__name__, "dot", src, env, "pmfast_dot_", (VERSION, src))


def kind(node):
    """Which of :data:`_DOT_SOURCES` computes ``node`` (None: none of them)."""
    x, y = node.inputs
    if not all(v.type.dtype == "float64" for v in (x, y, *node.outputs)):
        return None
    if (x.ndim, y.ndim) == (2, 2):
        if y.type.shape[1] == 1:
            return (2, "col")
        if x.type.shape[0] == 1:
            return ("row", 2)
        return None
    return (x.ndim, y.ndim) if (x.ndim, y.ndim) in _DOT_SOURCES else None


def funcify(op, node):
    """pmfast's ``(numba function, cache key)`` for the ``Dot`` ``node``, or None (pytensor's)."""
    if kind(node) is not None:
        return _build(node)
    from pmfast.compiler import linalg

    return linalg.funcify_dot(op, node)
