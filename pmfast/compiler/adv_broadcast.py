"""pmfast's numba implementation of ``AdvancedSubtensor``/``AdvancedIncSubtensor`` with integer index arrays
that broadcast together.

``x[i, j]`` / ``x[i, j] += y`` where the index arrays broadcast to one shape ``B`` (pymc's
``take_along_axis``, a categorical likelihood and its gradient: ``p[arange(n)[:, None], value[:, None]]``,
``(n, 1)`` each; a vector and a 0-d index, ``x[idx, 0]``), after ``s`` leading full slices, every
remaining axis indexed. pytensor's code (``vector_integer_advanced_indexing``) broadcasts the indices
(and ``y``) at run time with ``np.broadcast_shapes`` and ``np.broadcast_to``: numba compiles their
generic implementations (the shapes' list, ``_can_broadcast``, ``broadcast_to`` per index dtype and
rank, ``literal_unroll``, ``isinstance``; ~1-2.5 CPU s of a cold compile of a categorical or ordinal
model) next to every entry that uses one, in every process. :mod:`pmfast.compiler.adv_sub` and
:mod:`pmfast.compiler.adv_inc` cover index vectors of one static length; this module the rest.

Here ``B``'s lengths are the index arrays' static lengths where those decide it, else computed at
run time as ``np.broadcast_shapes`` does (an index's length 1 broadcasts; two other lengths raise
its ``ValueError``). The node function is pytensor's loop over ``B`` in C order (so repeated indices
accumulate in pytensor's order), the leading sliced axes innermost, each index array read at the
loop's position (at 0 along its length-1 axes: a broadcast view reads there too), ``y`` likewise
against ``(*x.shape[:s], *B)`` (numba's ``broadcast_to`` message where it cannot be). The same numba
getitem/setitem on ``x`` (negative indices wrap, no bounds check, ``y`` cast to ``x``'s dtype), so
the same values. A read returns a new C-contiguous ``(*x.shape[:s], *B)`` array (pytensor's is a
transposed view of its buffer when ``s > 0``; same values and shape). ``PMFAST_ADV_BROADCAST=0``
leaves these forms to pytensor.
"""

from __future__ import annotations

import os

import numpy as np

from pmfast.compiler import generated

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

#: numba's ``np.broadcast_shapes`` error, raised for index arrays that do not broadcast together.
SHAPE_MISMATCH = "shape mismatch: objects cannot be broadcast to a single shape"
#: numba's ``np.broadcast_to`` error (``_can_broadcast``), raised for a ``y`` that does not broadcast.
BROADCAST_ERROR = "operands could not be broadcast together with remapped shapes"


def enabled() -> bool:
    return os.environ.get("PMFAST_ADV_BROADCAST", "1") != "0"


def form(x, idxs):
    """``(s, shapes, lengths)`` when ``x[idxs]`` is ``s`` leading full slices then integer index arrays
    on every other axis: ``shapes`` each index's static shape, ``lengths`` ``B``'s static lengths (None
    where only the run time knows); None for other forms (or index arrays that can never broadcast)."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.type import TensorType

    if len(idxs) != x.ndim:
        return None
    s = 0
    while s < len(idxs) and isinstance(idxs[s], Constant) and isinstance(idxs[s].data, slice) and idxs[s].data == slice(None):
        s += 1
    adv = idxs[s:]
    if not adv or not all(isinstance(i.type, TensorType) and np.dtype(i.type.dtype).kind in "iu" for i in adv):
        return None
    shapes = [tuple(i.type.shape) for i in adv]
    nb = max(len(sh) for sh in shapes)
    lengths = []
    for t in range(nb):
        dims = [sh[t - (nb - len(sh))] for sh in shapes if t >= nb - len(sh)]
        if None in dims:
            lengths.append(None)
            continue
        long = {d for d in dims if d != 1}
        if len(long) > 1:
            return None
        lengths.append(long.pop() if long else 1)
    return s, shapes, tuple(lengths)


def _prologue(names, shapes, lengths):
    """Lines computing ``B``'s run-time lengths ``n0, n1, ...`` and each index's step along each of its
    axes, and the subscript of each index's element at ``B`` position ``(b0, b1, ...)``."""
    nb = len(lengths)
    lines, reads = [], []
    for t, n in enumerate(lengths):
        if n is not None:
            lines.append(f"n{t} = {n}")
            continue
        lines.append(f"n{t} = 1")
        for a, sh in enumerate(shapes):
            p = t - (nb - len(sh))
            if p < 0 or sh[p] == 1:
                continue
            lines += [f"l = {names[a]}.shape[{p}]",
                      "if l != 1:",
                      f"    if n{t} != 1 and n{t} != l:",
                      f"        raise ValueError({SHAPE_MISMATCH!r})",
                      f"    n{t} = l"]
    for a, sh in enumerate(shapes):
        off = nb - len(sh)
        sub = []
        for p, d in enumerate(sh):
            t = p + off
            if d == 1:
                sub.append("0")
            elif d is not None and lengths[t] == d:
                sub.append(f"b{t}")
            else:  # 1 or n_t at run time: read at 0 along a length-1 axis
                lines.append(f"st{a}_{p} = 0 if {names[a]}.shape[{p}] == 1 else 1")
                sub.append(f"b{t} * st{a}_{p}")
        reads.append(f"{names[a]}[{', '.join(sub)}]" if sub else f"{names[a]}[()]")
    return lines, reads


def _loops(nb: int, s: int, statement: str) -> list[str]:
    """The loop nest over ``B`` (outer, C order) and the ``s`` leading sliced axes (inner) around ``statement``."""
    lines = [" " * (4 * t) + f"for b{t} in range(n{t}):" for t in range(nb)]
    lines += [" " * (4 * (nb + a)) + f"for j{a} in range(x.shape[{a}]):" for a in range(s)]
    lines.append(" " * (4 * (nb + s)) + statement)
    return lines


def sub_source(ndim: int, s: int, shapes, lengths) -> str:
    """Source of ``advanced_integer_vector_indexing(x, idx0, ...)`` (``ndim`` index arguments, the first
    ``s`` full slices)."""
    names = [f"idx{k}" for k in range(ndim)]
    lines, reads = _prologue(names[s:], shapes, lengths)
    nb = len(lengths)
    shape = "".join(f"x.shape[{a}], " for a in range(s)) + "".join(f"n{t}, " for t in range(nb))
    lines.append(f"out = _pm_empty(({shape}), _pm_dtype)")
    item = f"x[{', '.join([*(f'j{a}' for a in range(s)), *reads])}]"
    out = f"out[{', '.join([*(f'j{a}' for a in range(s)), *(f'b{t}' for t in range(nb))]) or '()'}]"
    lines += _loops(nb, s, f"{out} = {item}")
    lines.append("return out")
    return f"def advanced_integer_vector_indexing(x, {', '.join(names)}):\n" + "".join(f"    {ln}\n" for ln in lines)


def inc_source(ndim: int, s: int, shapes, lengths, y_shape, x_lead, set_: bool, inplace: bool) -> str | None:
    """Source of ``set_/inc_advanced_integer_vector_indexing(x, y, idx0, ...)``, or None when ``y``'s
    static shape can never broadcast to ``(*x.shape[:s], *B)`` (``x_lead``: ``x``'s static lengths there)."""
    names = [f"idx{k}" for k in range(ndim)]
    lines, reads = _prologue(names[s:], shapes, lengths)
    nb = len(lengths)
    target = [*x_lead, *lengths]
    target_expr = [*(f"x.shape[{a}]" for a in range(s)), *(f"n{t}" for t in range(nb))]
    loop_vars = [*(f"j{a}" for a in range(s)), *(f"b{t}" for t in range(nb))]
    if len(y_shape) > len(target):
        return None
    off = len(target) - len(y_shape)
    sub = []
    for q, m in enumerate(y_shape):
        t = q + off
        if m == 1:
            sub.append("0")
        elif m is not None and target[t] is not None:
            if m != target[t]:
                return None
            sub.append(loop_vars[t])
        else:  # checked at run time as numba's broadcast_to checks it (its message)
            lines += [f"m = y.shape[{q}]",
                      f"if m != {target_expr[t]} and m != 1:",
                      f"    raise ValueError({BROADCAST_ERROR!r})",
                      f"sy{q} = 0 if m == 1 else 1"]
            sub.append(f"{loop_vars[t]} * sy{q}")
    value = f"y[{', '.join(sub)}]" if sub else "y[()]"
    lines += [] if inplace else ["x = _pm_copy(x)"]
    item = f"x[{', '.join([*(f'j{a}' for a in range(s)), *reads])}]"
    lines += _loops(nb, s, f"{item} {'=' if set_ else '+='} {value}")
    lines.append("return x")
    name = f"{'set' if set_ else 'inc'}_advanced_integer_vector_indexing"
    return f"def {name}(x, y, {', '.join(names)}):\n" + "".join(f"    {ln}\n" for ln in lines)


def funcify_sub(op, node):
    """``(numba function, cache key)`` for an ``AdvancedSubtensor`` node of this module's form, or None."""
    from pytensor.tensor.subtensor import AdvancedSubtensor

    from pmfast.compiler import arrays

    if not enabled() or type(op) is not AdvancedSubtensor:
        return None
    x, *idxs = node.inputs
    found = form(x, idxs)
    if found is None or node.outputs[0].type.dtype != x.type.dtype:
        return None
    s, shapes, lengths = found
    if node.outputs[0].type.ndim != s + len(lengths):
        return None
    dtype = np.dtype(x.type.dtype)
    src = sub_source(x.ndim, s, shapes, lengths)
    env = {"_pm_empty": arrays.empty2, "_pm_dtype": dtype.type}
    key_parts = (VERSION, src, dtype.str, arrays.VERSION)
    return generated.build(__name__, "advanced_integer_vector_indexing", src, env, "pmfast_adv_bcast_sub_", key_parts)


def funcify_inc(op, node):
    """``(numba function, cache key)`` for an ``AdvancedIncSubtensor`` node of this module's form, or None."""
    from pytensor.tensor.subtensor import AdvancedIncSubtensor

    from pmfast.compiler import arrays

    if not enabled() or type(op) is not AdvancedIncSubtensor:
        return None
    if not op.set_instead_of_inc and op.ignore_duplicates:
        return None
    x, y, *idxs = node.inputs
    found = form(x, idxs)
    if found is None or node.outputs[0].type.dtype != x.type.dtype:
        return None
    s, shapes, lengths = found
    src = inc_source(x.ndim, s, shapes, lengths, tuple(y.type.shape), tuple(x.type.shape[:s]),
                     op.set_instead_of_inc, op.inplace)
    if src is None:
        return None
    env = {"_pm_copy": arrays.copy1}
    key_parts = (VERSION, src, arrays.VERSION)
    return generated.build(__name__, src.split("(")[0][4:], src, env, "pmfast_adv_bcast_inc_", key_parts)
