"""pmfast's numba implementation of pytensor's ``Split`` (the gradient of a ``Join``).

pytensor's splits with ``np.cumsum`` and ``np.split`` and formats its size
error as an f-string in numba: numba's unicode machinery, ``np.array_split``
and ``cumsum`` are compiled in every new process (~1.3 s of stoch_vol's
compile, which splits its gradient). Here, for a constant axis and at least
two pieces (the common case), the node function is straight-line code
generated for that axis and piece count: the same checks in the same order,
the same views (pytensor's ``Split`` declares each output a view of its
input), the size error raised with its numbers and formatted in Python
(:class:`SplitSizeError`, a ``ValueError`` with pytensor's message).

The entry inlines it (:mod:`pmfast.compiler.inline`): the views are
:func:`slice_axis` (a few LLVM instructions each, where numba's slicing lowers
its slice normalisation per piece) and the size errors are raised by
:func:`pmfast.compiler.raisers.shape_fail`, one function for every model
cached on disk by numba (an
inlined function can't raise an exception built from runtime values). Called
as a function of its own, it cost ~0.2 CPU s of stoch_vol's compile on a used
machine (the only zoo model that splits; two signatures).
"""

from __future__ import annotations

import numpy as np

from numba.core import cgutils, types
from numba.np.arrayobj import make_array, populate_array

from pmfast.compiler import generated, raisers
from pmfast.compiler.pure import intrinsic
from pmfast.compiler.raisers import SplitSizeError  # noqa: F401  (raised by the jitted check)

#: Bump when the generated code changes (part of the cache key).
VERSION = 2


def view_layout(ary, axis: int) -> str:
    """The layout numba gives ``x[:, …, a:b]`` (``axis`` slices) of an array of type ``ary``."""
    return "C" if ary.layout == "C" and axis == 0 else "A"


@intrinsic(prefer_literal=True)
def slice_axis(typingctx, x, axis, start, stop):
    """``slice_axis(x, axis, start, stop)``: the view ``x[:, …, start:stop]`` along the literal ``axis``.

    The caller has checked ``0 <= start <= stop <= x.shape[axis]`` (no clamping).
    The view has numba's type for that slice (:func:`view_layout`) and borrows
    ``x``'s memory, as numba's slicing does.
    """
    if not (isinstance(x, types.Array) and isinstance(axis, types.IntegerLiteral)):
        return None
    if not (isinstance(start, types.Integer) and isinstance(stop, types.Integer)):
        return None
    a = axis.literal_value
    if not 0 <= a < x.ndim:
        return None
    outty = x.copy(layout=view_layout(x, a))

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_borrowed

        src = make_array(x)(context, builder, args[0])
        lo = context.cast(builder, args[2], sig.args[2], types.intp)
        hi = context.cast(builder, args[3], sig.args[3], types.intp)
        shape = cgutils.unpack_tuple(builder, src.shape, x.ndim)
        strides = cgutils.unpack_tuple(builder, src.strides, x.ndim)
        base = builder.ptrtoint(src.data, cgutils.intp_t)
        data = builder.inttoptr(builder.add(base, builder.mul(lo, strides[a])), src.data.type)
        shape[a] = builder.sub(hi, lo)
        out = make_array(outty)(context, builder)
        populate_array(out, data=data, shape=shape, strides=strides, itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, outty, out._getvalue())

    return outty(x, axis, start, stop), codegen


@slice_axis.python
def _(x, axis, start, stop):
    return x[(slice(None),) * axis + (slice(start, stop),)]


def split_source(ndim: int, axis: int, n: int) -> str:
    """Source of ``split(x, axis, sizes)`` returning ``n`` views of ``x`` along ``axis``.

    Straight-line code (the entry inlines it): pytensor's checks (the number
    of sizes; then no size negative, then their sum the axis' length, tested
    together and told apart by :func:`pmfast.compiler.raisers.shape_fail`,
    which raises pytensor's error), then the views (:func:`slice_axis`).
    """
    sizes = [f"s{k}" for k in range(n)]
    lines = [
        "def split(x, axis, sizes):",
        f"    if sizes.shape[0] != {n}:",
        "        raise ValueError('Length of splits is not equal to n_splits')",
    ]
    lines += [f"    {s} = sizes[{k}]" for k, s in enumerate(sizes)]
    lines.append("    e0 = 0")
    lines += [f"    e{k + 1} = e{k} + {s}" for k, s in enumerate(sizes)]
    lines.append(f"    neg = {' | '.join(f'({s} < 0)' for s in sizes)}")
    lines += [f"    if neg | (e{n} != x.shape[{axis}]):", f"        _pm_fail(1, _pm_i64(e{n}), x.shape[{axis}], _pm_i64(neg))"]
    pieces = ", ".join(f"_pm_slice(x, {axis}, e{k}, e{k + 1})" for k in range(n))
    lines.append(f"    return ({pieces},)")
    return "\n".join(lines) + "\n"


def split_axis(node) -> int | None:
    """The (non-negative) constant axis ``node`` splits along, or None when pmfast doesn't implement it."""
    from pytensor.graph.basic import Constant

    x, axis, sizes = node.inputs
    if node.op.len_splits < 2 or not isinstance(axis, Constant) or axis.ndim != 0:
        return None
    if sizes.ndim != 1 or sizes.type.dtype not in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"):
        return None
    a = int(axis.data)
    if not -x.ndim <= a < x.ndim:
        return None
    return a % x.ndim


def funcify(op, node):
    """``(numba function, cache key)`` for a ``Split`` node, or None (see :func:`split_axis`)."""

    axis = split_axis(node)
    if axis is None:
        return None
    src = split_source(node.inputs[0].ndim, axis, op.len_splits)
    env = {"_pm_fail": raisers.shape_fail(), "_pm_slice": slice_axis, "_pm_i64": np.int64}
    return generated.build(__name__, "split", src, env, "pmfast_split_", (VERSION, src))
