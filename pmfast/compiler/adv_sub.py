"""pmfast's numba implementation of ``AdvancedSubtensor`` with one constant index vector per axis.

``x[i0, i1]`` / ``x[:, i0, i1]`` with ``i0, i1, …`` constant integer vectors of one length ``n`` (a
matrix's diagonal read as ``K[i, i]``: gp_marginal_matern52's gradient; a packed lower triangle read
back). pytensor's code (``advanced_integer_vector_indexing``) broadcasts the index vectors to one
shape at run time with ``np.broadcast_shapes`` and ``np.broadcast_to``: numba compiles their generic
implementations (the shapes' list, ``_can_broadcast``, ``literal_unroll``, ``isinstance``,
``broadcast_to`` per signature) next to every entry that reads one, in every process
(gp_marginal_matern52: ~0.5 CPU s of a cold compile). Vectors of one static length broadcast to
themselves, so nothing can fail there: the node function is pytensor's loop without the
broadcasts, ``out[j, k] = x[j, i0[k], i1[k]]`` for ``k < n`` and every ``j`` of the leading sliced
axes, into a new C-contiguous array of shape ``(*x.shape[:s], n)``. The same numba getitem
(negative indices wrap, no bounds check), so the same values (pytensor returns a transposed view of
its buffer when ``s > 0``; the values and shape are the same). Other forms stay pytensor's.
"""

from __future__ import annotations

import numpy as np

from pmfast.compiler import generated
from pmfast.compiler.adv_inc import index_loop

#: Bump when the generated code changes (part of the cache key).
VERSION = 1


def _form(node) -> tuple[int, int] | None:
    """``(s, n)``: ``node`` reads ``x`` with ``s`` leading full slices and then, on every other axis
    (at least two), a constant integer index vector of one length ``n``; None for other forms."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.subtensor import AdvancedSubtensor

    if type(node.op) is not AdvancedSubtensor:
        return None
    x, *idxs = node.inputs
    (out,) = node.outputs
    if len(idxs) != x.ndim or out.type.dtype != x.type.dtype:
        return None
    s = 0
    while s < len(idxs) and isinstance(idxs[s], Constant) and isinstance(idxs[s].data, slice) and idxs[s].data == slice(None):
        s += 1
    if len(idxs) - s < 2 or out.type.ndim != s + 1:
        return None
    lengths = set()
    for idx in idxs[s:]:
        if not isinstance(idx, Constant) or getattr(idx.type, "ndim", None) != 1:
            return None
        if np.dtype(idx.type.dtype).kind not in "iu":
            return None
        lengths.add(int(np.asarray(idx.data).shape[0]))
    if len(lengths) != 1:
        return None
    (n,) = lengths
    return s, n


def source(ndim: int, n: int, s: int = 0) -> str:
    """Source of the node function ``advanced_integer_vector_indexing(x, idx0, …)``: ``s`` leading
    full slices, then index vectors of length ``n`` (``ndim`` arguments after ``x``)."""
    idx = [f"idx{k}" for k in range(ndim)]
    shape = "".join(f"x.shape[{a}], " for a in range(s)) + f"{n},"
    lines = [f"out = _pm_empty(({shape}), _pm_dtype)"]
    lines += index_loop(n, s, idx, f"out[{', '.join([*(f'j{a}' for a in range(s)), 'k'])}] = {{item}}")
    lines.append("return out")
    return f"def advanced_integer_vector_indexing(x, {', '.join(idx)}):\n" + "".join(f"    {line}\n" for line in lines)


def funcify(op, node):
    """``(numba function, cache key)`` for an ``AdvancedSubtensor`` node, or None (see :func:`_form`)."""
    from pmfast.compiler import arrays

    form = _form(node)
    if form is None:
        from pmfast.compiler import adv_broadcast

        return adv_broadcast.funcify_sub(op, node)
    s, n = form
    x = node.inputs[0]
    dtype = np.dtype(node.outputs[0].type.dtype)
    src = source(x.ndim, n, s)
    env = {"_pm_empty": arrays.empty2, "_pm_dtype": dtype.type}
    key_parts = (VERSION, src, dtype.str, arrays.VERSION)
    return generated.build(__name__, "advanced_integer_vector_indexing", src, env, "pmfast_adv_sub_", key_parts)
