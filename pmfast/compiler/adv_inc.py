"""pmfast's numba implementation of ``AdvancedIncSubtensor`` with one constant index vector per axis.

``x[i0, i1] = y`` / ``x[i0, i1] += y`` with ``i0, i1`` integer vectors (a lower triangle filled
from a packed vector: ``LKJCholeskyCov``, a VAR's or an SEM's covariance factor). pytensor's code
(``vector_integer_advanced_indexing``) broadcasts the indices and ``y`` to one shape at run time
with ``np.broadcast_shapes`` and ``np.broadcast_to``: numba compiles their generic implementations
(``_can_broadcast``, the shapes' list, ``broadcast_to`` per signature, tuple hashing) next to every
entry that uses one, in every process (bayesian_var_ireland: ~0.9 CPU s of functions of their own).

Here, when the leading axes of ``x`` are indexed with full slices (``x[:, i0, i1]``, a batch of
diagonals) and the others with constant integer vectors of one length ``n``, and ``y`` is 0-d or has
the sliced axes' static lengths and then ``n`` or 1 (or a length known at run time only, checked
there with numba's ``broadcast_to`` message), nothing else can fail to broadcast, so the node
function is pytensor's loop without the broadcasts: the copy of ``x`` (unless in place), then
``x[j, i0[k], i1[k]] = y[j, k]`` (or ``+=``; ``k`` outermost, so repeated indices accumulate in
pytensor's order) for ``k < n`` and every ``j`` of the sliced axes, with ``y[j, 0]`` or ``y[()]``
for a broadcast ``y``. The same numba
setitem (negative indices wrap, no bounds check, ``y`` cast to ``x``'s dtype), so the same values.
Other forms stay pytensor's.
"""

from __future__ import annotations

import numpy as np

from pmfast.compiler import generated

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

#: numba's ``np.broadcast_to`` error (``_can_broadcast``), which pytensor's code raises for a ``y``
#: whose index axis is neither ``n`` nor 1 long.
_BROADCAST_ERROR = "operands could not be broadcast together with remapped shapes"


def _form(node) -> tuple[int, int] | None:
    """``(s, n)``: ``node`` indexes ``s`` leading axes with full slices and the others with constant
    index vectors of one length ``n``, and ``y`` cannot fail to broadcast; None for other forms."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.subtensor import AdvancedIncSubtensor

    op = node.op
    if type(op) is not AdvancedIncSubtensor:
        return None
    if not op.set_instead_of_inc and op.ignore_duplicates:
        return None
    x, y, *idxs = node.inputs
    if not idxs or len(idxs) != x.ndim or node.outputs[0].type.dtype != x.type.dtype:
        return None
    s = 0
    while s < len(idxs) and isinstance(idxs[s], Constant) and isinstance(idxs[s].data, slice) and idxs[s].data == slice(None):
        s += 1
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
    if y.ndim == 0:
        return s, n
    # y's leading axes are x's sliced ones (statically equal lengths), its last the index one
    lead_x, lead_y = x.type.shape[:s], y.type.shape[:-1]
    if y.ndim == s + 1 and y.type.shape[-1] in (n, 1, None) and None not in lead_x and lead_x == lead_y:
        return s, n
    return None


def _length(node) -> int | None:
    """The index vectors' length if pmfast implements ``node`` (see :func:`_form`), else None."""
    form = _form(node)
    return None if form is None else form[1]


def index_loop(n: int, s: int, idx: list[str], statement: str) -> list[str]:
    """Lines of the loop over the ``n`` positions ``k`` of the index vectors, one loop per leading full
    slice (``j0, j1, …``) inside it, and ``statement`` innermost, where ``{item}`` stands for the element
    of ``x`` read or written there (``x[j0, …, idx_s[k], …]``). Shared with :mod:`pmfast.compiler.adv_sub`."""
    lead = [f"j{a}" for a in range(s)]
    item = f"x[{', '.join([*lead, *(f'{i}[k]' for i in idx[s:])])}]"
    lines = [f"for k in range({n}):"]
    lines += ["    " * (a + 1) + f"for j{a} in range(x.shape[{a}]):" for a in range(s)]
    lines.append("    " * (s + 1) + statement.format(item=item))
    return lines


def source(ndim: int, y_ndim: int, y_len: int | None, n: int, set_: bool, inplace: bool, s: int = 0) -> str:
    """Source of the node function ``name(x, y, idx0, …)``: ``s`` leading full slices, then index vectors."""
    name = f"{'set' if set_ else 'inc'}_advanced_integer_vector_indexing"
    idx = [f"idx{k}" for k in range(ndim)]
    lead = [f"j{a}" for a in range(s)]
    lines = []
    if y_ndim == 0:
        value = "y[()]"
    elif y_len is None:  # checked at run time as numba's broadcast_to checks it (its message)
        lines += [
            f"m = y.shape[{y_ndim - 1}]",
            f"if m != {n} and m != 1:",
            f"    raise ValueError({_BROADCAST_ERROR!r})",
            f"step = 1 if m == {n} else 0",
        ]
        value = f"y[{', '.join([*lead, 'k * step'])}]"
    else:
        value = f"y[{', '.join([*lead, '0' if y_len == 1 and n != 1 else 'k'])}]"
    lines += [] if inplace else ["x = _pm_copy(x)"]
    lines += index_loop(n, s, idx, f"{{item}} {'=' if set_ else '+='} {value}")
    lines.append("return x")
    return f"def {name}(x, y, {', '.join(idx)}):\n" + "".join(f"    {line}\n" for line in lines)


def funcify(op, node):
    """``(numba function, cache key)`` for an ``AdvancedIncSubtensor`` node, or None (see :func:`_length`)."""
    from pmfast.compiler import arrays

    form = _form(node)
    if form is None:
        from pmfast.compiler import adv_broadcast

        return adv_broadcast.funcify_inc(op, node)
    lead, n = form
    x, y = node.inputs[:2]
    src = source(x.ndim, y.ndim, y.type.shape[-1] if y.ndim else None, n, op.set_instead_of_inc, op.inplace, lead)
    env = {"_pm_copy": arrays.copy1}
    return generated.build(__name__, src.split("(")[0][4:], src, env, "pmfast_adv_inc_", (VERSION, src, arrays.VERSION))
