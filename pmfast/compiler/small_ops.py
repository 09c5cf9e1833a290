"""``Shape_i``, the 2-d ``ExtractDiag`` and ``Sum`` over every axis without numba's generic ``np.shape``/``np.asarray``/``np.diag``/``np.array``.

pytensor's node functions call numpy functions whose numba ``@overload`` implementations are numba
functions of their own, compiled in every cold process next to the entry that inlines the node
(issue #29, found with a compile listener naming each compile's caller):

* ``Shape_i``: ``np.asarray(np.shape(x)[i])``: numba's ``np_shape``, ``np_asarray`` (twice) and
  ``np.array`` implementations (bayesian_var_ireland's logp entry: ~0.3 CPU s). Here
  ``arrays.asarray1(x.shape[i])``: the same 0-d int64 array, built in place.
* ``ExtractDiag`` of a matrix: ``np.diag(x, k)`` (then ``.copy()`` unless a view): numba's
  ``diag_impl``, its ``np.empty`` and the allocator (bayesian_sem_workflow, bayesian_var_ireland's
  expand entry: ~0.4-0.6 CPU s). Here numba's own ``diag_impl`` loop written out (its length rule
  and reads), into a new C array as numba's returns: the same values, bit for bit. A stack of
  matrices (3-d, axes 1 and 2; bayesian_sem_workflow, ~1 CPU s of its cold compile): pytensor's
  n-d loop (its length rule, a new C array) without its ``np.empty`` and slicing.

* ``Sum`` over every axis (:func:`sum_all`): ``np.array(array.sum())``, whose ``np.array`` of a
  scalar is numba generic code compiled in every process.

``PMFAST_SMALL_OPS=0`` keeps pytensor's ``Shape_i`` and ``ExtractDiag`` (the sources differ, so do the keys).
"""

from __future__ import annotations

import os

from pmfast.compiler import generated

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

#: Bump when :func:`sum_all` changes (part of its cache key; 9 continues the count of
#: ``pmfast.compiler.ops``, where it was).
SUM_ALL_VERSION = 9

_SHAPE_I_SRC = "def shape_i(x):\n    return _pm_asarray(x.shape[{i}])\n"

_DIAG_SRC = """def extract_diag(x):
    rows, cols = x.shape
    k = {k}
    if k < 0:
        rows = rows + k
    if k > 0:
        cols = cols - k
    n = max(min(rows, cols), 0)
    out = _pm_empty(n, _pm_dtype)
    if k >= 0:
        for i in range(n):
            out[i] = x[i, k + i]
    else:
        for i in range(n):
            out[i] = x[i - k, i]
    return out
"""


_DIAG3_SRC = """def extract_diag(x):
    b, rows, cols = x.shape
    k = {k}
    if k >= 0:
        n = min(rows, max(0, cols - k))
    else:
        n = min(cols, max(0, rows + k))
    out = _pm_empty((b, n), _pm_dtype)
    for j in range(b):
        if k >= 0:
            for i in range(n):
                out[j, i] = x[j, i, i + k]
        else:
            for i in range(n):
                out[j, i] = x[j, i - k, i]
    return out
"""


def enabled() -> bool:
    return os.environ.get("PMFAST_SMALL_OPS", "1") != "0"


def funcify(op, node):
    """``(numba function, cache key)`` for a ``Shape_i`` or 2-d ``ExtractDiag`` node, or None (pytensor's)."""
    from pytensor.tensor.basic import ExtractDiag
    from pytensor.tensor.shape import Shape_i

    if not enabled() or node is None:
        return None
    if type(op) is Shape_i:
        return _shape_i(op, node)
    if type(op) is ExtractDiag:
        return _extract_diag(op, node)
    return None


def _build(src: str, name: str, env: dict, extra) -> tuple:
    return generated.build(__name__, name, src, env, f"pmfast_{name}_", (VERSION, src, extra))


def _shape_i(op, node):
    from pmfast.compiler import arrays

    (x,) = node.inputs
    if node.outputs[0].type.dtype != "int64" or not 0 <= op.i < x.type.ndim:
        return None
    return _build(_SHAPE_I_SRC.format(i=int(op.i)), "shape_i", {"_pm_asarray": arrays.asarray1}, (x.type.ndim, arrays.VERSION))


def _extract_diag(op, node):
    import numpy as np

    from pmfast.compiler import native

    (x,) = node.inputs
    out = node.outputs[0]
    if (x.type.ndim, op.axis1, op.axis2) == (2, 0, 1):
        src = _DIAG_SRC
    elif (x.type.ndim, op.axis1, op.axis2) == (3, 1, 2):  # pytensor's n-d loop for a stack of matrices
        src = _DIAG3_SRC
    else:
        return None
    if out.type.dtype != x.type.dtype or x.type.dtype not in ("float64", "float32", "int64", "int32", "bool"):
        return None
    env = {"_pm_empty": native.empty, "_pm_dtype": np.dtype(x.type.dtype).type}
    return _build(src.format(k=int(op.offset)), "extract_diag", env, x.type.dtype)


def sum_all(op, node):
    """``(numba function, key)`` of a ``Sum`` over every axis accumulating in its output dtype, or None.

    pytensor's is ``np.array(array.sum())``, whose ``np.array`` of a scalar is numba generic code
    compiled in every process; here the same sum goes into a 0-d array through
    :func:`pmfast.compiler.arrays.array1` (same flags: pytensor's ``numba_njit``).
    """
    import numpy as np

    from pmfast.compiler import arrays

    axes = op.axis if op.axis is not None else tuple(range(node.inputs[0].ndim))
    acc_dtype = getattr(op, "acc_dtype", None) or node.outputs[0].type.dtype
    if node.inputs[0].ndim != len(axes) or np.dtype(node.outputs[0].type.dtype) != acc_dtype:
        return None
    src = "def impl_sum(array):\n    return _pm_array1(array.sum())\n"
    key_parts = (SUM_ALL_VERSION, src, arrays.VERSION, node.outputs[0].type.dtype)
    return generated.build(__name__, "impl_sum", src, {"_pm_array1": arrays.array1}, "pmfast_sum_all_", key_parts)
