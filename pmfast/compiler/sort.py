"""pmfast's numba implementation of pytensor's ``ArgSortOp`` of a vector.

pytensor's ``argort_f(X, axis)`` swaps ``axis`` to the front, builds ``np.ndindex`` of the other
axes as a list and argsorts each slice, then swaps back: for a vector numba compiles
``np.swapaxes`` (twice), ``np.transpose``, ``np.arange``, the axis normaliser and the list of index
tuples next to every entry that uses one (an LU solve's pivots, bayesian_sem_workflow: ~1 CPU s of
functions of their own). For a vector and a constant axis 0 or -1 the only slice is the vector
itself, so the node function is ``np.argsort(X, kind)``: the same numba sort (quicksort or
mergesort, as pytensor picks) of the same values, so the same indices, ties included. Other
ArgSorts stay pytensor's.

The ArgSort of a vector that is a permutation of ``0..n-1`` by construction (the output of
``PivotToPermutations`` or of another vector ArgSort: pytensor's ``lu_solve(trans=True)`` argsorts
its pivots' permutation) is that permutation's inverse, one scatter: no ties, so every sort gives
those indices, and numba's quicksort (six functions, ~1 CPU s of bayesian_sem_workflow's cold
compile) is not compiled. ``PMFAST_ARGSORT_PERM=0`` sorts as above.
"""

from __future__ import annotations

import os

from pmfast.compiler import generated

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

_INVERSE_SRC = """def argsort(x, axis):
    n = x.shape[0]
    out = _pm_empty(n, _pm_i64)
    for i in range(n):
        out[x[i]] = i
    return out
"""


def _is_permutation(x) -> bool:
    """Whether vector ``x`` is, by the op that computes it, a permutation of ``0..len(x)-1``."""
    from pytensor.tensor.slinalg import PivotToPermutations
    from pytensor.tensor.sort import ArgSortOp

    owner = x.owner
    if owner is None or x.ndim != 1 or x.type.dtype != "int64":
        return False
    if type(owner.op) is PivotToPermutations:
        return True
    return type(owner.op) is ArgSortOp and owner.inputs[0].ndim == 1


def funcify(op, node):
    """``(numba function, cache key)`` for an ``ArgSortOp`` node of a vector, or None."""
    from pytensor.graph.basic import Constant

    x, axis = node.inputs
    if x.ndim != 1 or not isinstance(axis, Constant) or axis.ndim != 0 or int(axis.data) not in (0, -1):
        return None
    if node.outputs[0].type.dtype != "int64" or op.kind not in ("quicksort", "mergesort"):
        return None
    import numpy as np

    from pmfast.compiler import native

    if os.environ.get("PMFAST_ARGSORT_PERM", "1") != "0" and _is_permutation(x):
        src = _INVERSE_SRC
    else:
        src = f"def argsort(x, axis):\n    return np.argsort(x, kind={op.kind!r})\n"
    env = {"np": np, "_pm_empty": native.empty, "_pm_i64": np.int64}
    return generated.build(__name__, "argsort", src, env, "pmfast_argsort_", (VERSION, src, x.type.dtype))


#: pytensor's ``PivotToPermutations`` as two loops: ``p_inv`` by pytensor's swaps from ``0..n-1`` (a
#: negative pivot wraps around, as numba's indexing does), then, unless ``inverse``, its inverse
#: permutation by one scatter. pytensor argsorts ``p_inv`` instead: numba's quicksort (~1 CPU s of a
#: cold compile, bayesian_sem_workflow's LU solve); ``p_inv`` is a permutation (swaps of ``0..n-1``), so
#: its argsort has no ties and is exactly that inverse.
_PIVOTS_SRC = """def pivot_to_permutation(piv):
    n = piv.shape[0]
    p_inv = _pm_empty(n, _pm_i64)
    for i in range(n):
        p_inv[i] = i
    for i in range(n):
        j = piv[i]
        if j < 0:
            j += n
        t = p_inv[i]
        p_inv[i] = p_inv[j]
        p_inv[j] = t
    if {inverse}:
        return p_inv
    perm = _pm_empty(n, _pm_i64)
    for i in range(n):
        perm[p_inv[i]] = i
    return perm
"""


def funcify_pivots(op, node):
    """``(numba function, cache key)`` for a ``PivotToPermutations`` node of integer pivots, or None."""
    import numpy as np

    from pmfast.compiler import native

    (piv,) = node.inputs
    if piv.ndim != 1 or not piv.type.dtype.startswith(("int", "uint")) or node.outputs[0].type.dtype != "int64":
        return None
    src = _PIVOTS_SRC.format(inverse=bool(op.inverse))
    env = {"_pm_empty": native.empty, "_pm_i64": np.int64}
    return generated.build(__name__, "pivot_to_permutation", src, env, "pmfast_pivots_", (VERSION, src, piv.type.dtype))
