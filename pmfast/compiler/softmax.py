"""pmfast's numba ``RowSoftmax`` (:mod:`pmfast.passes.softmax_rows`): one cached row loop for every model.

The pass's own numba implementation builds its row kernel as a closure per choice of outputs, with
``cache=False``, under two wrappers (``rows`` and the node function): three numba functions per node
compiled in every process, and numba's ``np.empty_like`` and ``np.empty`` overloads with them
(0.5-1 CPU s of each categorical or ordinal likelihood's cold compile: the discrete-choice GLMs,
sr11, the Gaussian mixtures). Here the loops are module-level functions with ``cache=True`` taking
the choice as run-time bools (:func:`rows` for a matrix, :func:`row` for a vector; compiled once per
machine and input layout), their outputs allocated by :func:`pmfast.compiler.native.empty`, and the
node function is one call, inlined into the entry.

Safe: the loops are the pass's, statement for statement (the same operations on the same values in
the same order, compiled without fast-math flags as the pass's kernel is), so the values are the
same bits; an empty vector raises the same ``ValueError`` (a matrix with empty rows gives empty
results, as the pass's kernel does). The unwanted output is a length-0 array that the node function
drops. ``PMFAST_SOFTMAX_CACHED=0``: the pass's implementation.
"""

from __future__ import annotations

import os

import numpy as np

from pmfast.compiler import generated, native

#: Bump when the loops or the node functions change (part of the keys).
VERSION = 2


def rows(x, want_sm, want_lsm):
    """``(softmax, log_softmax)`` of each row of the matrix ``x``; the one not wanted is ``(0, 0)``."""
    n, m = x.shape
    sm = native.empty((n, m) if want_sm else (0, 0), np.float64)
    lsm = native.empty((n, m) if want_lsm else (0, 0), np.float64)
    for i in range(n):
        mx = -np.inf
        for k in range(m):
            v = x[i, k]
            if v > mx or np.isnan(v):
                mx = v
                if np.isnan(v):
                    break
        s = 0.0
        for k in range(m):
            e = np.exp(x[i, k] - mx)
            if want_sm:
                sm[i, k] = e
            s += e
        if want_sm:
            for k in range(m):
                sm[i, k] = sm[i, k] / s
        if want_lsm:
            ls = np.log(s)
            for k in range(m):
                lsm[i, k] = (x[i, k] - mx) - ls
    return sm, lsm


def row(x, want_sm, want_lsm):
    """:func:`rows` of the vector ``x`` as one row; the one not wanted is ``(0,)``."""
    m = x.shape[0]
    if m == 0:  # stock: np.max of an empty vector
        raise ValueError("zero-size array to reduction operation maximum which has no identity")
    sm, lsm = _rows_jit(x[None, :], want_sm, want_lsm)
    return sm.reshape(sm.size), lsm.reshape(lsm.size)


_rows_jit = None  # :func:`rows` jitted, which :func:`row` calls: set by :func:`jitted`
_jitted: dict = {}


def jitted(name: str):
    """:func:`rows` or :func:`row` jitted once per process (``cache=True``: numba caches each per
    argument types on disk, keyed by this file, for every model)."""
    global _rows_jit
    if not _jitted:
        import numba

        _rows_jit = _jitted["rows"] = numba.njit(cache=True, fastmath=False)(rows)
        _jitted["row"] = numba.njit(cache=True, fastmath=False)(row)
    return _jitted[name]


def _source_hash() -> str:
    import hashlib
    from pathlib import Path

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def funcify(op, node):
    """``(numba function, cache key)`` of a ``RowSoftmax`` node, or None (the pass's implementation)."""
    from pmfast.compiler.pure import jit_off

    if os.environ.get("PMFAST_SOFTMAX_CACHED", "1") == "0" or jit_off():
        return None
    (x,) = node.inputs
    if x.type.dtype != "float64" or x.type.ndim not in (1, 2) or any(o.type.dtype != "float64" for o in node.outputs):
        return None
    want = [name in op.outputs for name in ("softmax", "log_softmax")]
    picks = [("softmax", "log_softmax").index(name) for name in op.outputs]
    call = f"_pm_impl(x, _pm_b({want[0]}), _pm_b({want[1]}))"
    if len(picks) == 1:
        src = f"def row_softmax(x):\n    return {call}[{picks[0]}]\n"
    else:
        src = f"def row_softmax(x):\n    _pm_r = {call}\n    return (_pm_r[{picks[0]}], _pm_r[{picks[1]}])\n"
    impl = jitted("row" if x.type.ndim == 1 else "rows")
    env = {"_pm_impl": impl, "_pm_b": np.bool_}
    key_parts = (VERSION, _source_hash(), src, x.type.ndim)
    return generated.build(__name__, "row_softmax", src, env, "pmfast_softmax_", key_parts)
