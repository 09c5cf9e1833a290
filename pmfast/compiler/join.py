"""pmfast's numba implementation of pytensor's ``Join`` along a constant axis.

pytensor's is ``join(axis, *tensors): return np.concatenate(tensors, axis.item())``:
three numba functions of their own compiled next to an entry that uses it, in
every process whose cache doesn't hold them (the ``*args`` forwarder, ``join``
and numba's ``np.concatenate`` implementation: ~0.2 CPU s of stoch_vol's compile
on a used machine, where no other model joins), and none of them inlined
(``*args``). Here, for vectors of the output's dtype and a constant axis, the
node function is ``join(axis, t0, …, tk)`` returning :func:`concat_vectors` of
its pieces: a plain function the entry inlines, whose work is one allocation
and one ``memcpy`` per contiguous piece, lowered straight to LLVM IR.

An earlier replacement copied the pieces with a numba loop per piece and made
stoch_vol's eval 7.8% slower than ``np.concatenate`` (docs/compile.md); a
``memcpy`` is what numpy does for contiguous pieces. A strided piece (an 'A'
array whose stride is not its item size at run time) is copied element by
element. Same values as ``np.concatenate`` (a copy, never a view, also of a
single piece); vectors of one dtype can't mismatch, so there is no error to
reproduce.

A Join of arrays of 2 or more axes along a constant axis (pieces of the output's number dtype: a
VAR's per-equation columns joined into a matrix) is numpy's check that the other axes match (its
``ValueError`` message), one allocation and each piece copied into its slice of the output
(:func:`pmfast.compiler.split.slice_axis`, :func:`pmfast.compiler.basic_index.update`); pytensor's
compiled ``np.concatenate`` with its generic shape code (~0.3 CPU s and ~1,350 LLVM instructions
linked into each entry that joins, bayesian_var_ireland's two). Other Joins (a runtime axis, mixed
dtypes, bools, more than :data:`pmfast.compiler.arity.MAX_ARITY` inputs) stay pytensor's.
"""

from __future__ import annotations

import numpy as np
from numba.core import cgutils, types
from numba.np.arrayobj import make_array

from pmfast.compiler import generated
from pmfast.compiler.arity import MAX_ARITY
from pmfast.compiler.pure import intrinsic

#: Bump when the generated code changes (part of the cache key).
VERSION = 1


@intrinsic
def concat_vectors(typingctx, pieces):
    """``concat_vectors((a, b, …))``: a new C-contiguous vector of the 1-d arrays' elements in order.

    The pieces have one dtype; each is copied with ``memcpy`` when contiguous
    (statically 'C'/'F', or an 'A' piece whose stride is its item size or
    which has at most one element), element by element otherwise.
    """
    if not isinstance(pieces, types.BaseTuple) or len(pieces) == 0:
        return None
    arrays = list(pieces)
    if not all(isinstance(a, types.Array) and a.ndim == 1 for a in arrays):
        return None
    dtype = arrays[0].dtype
    if any(a.dtype != dtype for a in arrays):
        return None
    outty = types.Array(dtype, 1, "C")

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_new_ref
        from numba.np.arrayobj import _empty_nd_impl

        values = cgutils.unpack_tuple(builder, args[0], len(arrays))
        arys = [make_array(t)(context, builder, v) for t, v in zip(arrays, values)]
        lengths = [cgutils.unpack_tuple(builder, a.shape, 1)[0] for a in arys]
        total = lengths[0]
        for n in lengths[1:]:
            total = builder.add(total, n)
        out = _empty_nd_impl(context, builder, outty, [total])
        itemsize = context.get_abi_sizeof(context.get_data_type(dtype))
        at = cgutils.intp_t(0)
        for t, ary, n in zip(arrays, arys, lengths):
            dst = builder.gep(out.data, [at])
            if t.layout in "CF":
                cgutils.raw_memcpy(builder, dst, ary.data, n, itemsize)
            else:
                stride = cgutils.unpack_tuple(builder, ary.strides, 1)[0]
                dense = builder.or_(
                    builder.icmp_signed("==", stride, cgutils.intp_t(itemsize)),
                    builder.icmp_signed("<=", n, cgutils.intp_t(1)),
                )
                with builder.if_else(dense, likely=True) as (contiguous, strided):
                    with contiguous:
                        cgutils.raw_memcpy(builder, dst, ary.data, n, itemsize)
                    with strided:
                        base = builder.ptrtoint(ary.data, cgutils.intp_t)
                        with cgutils.for_range(builder, n) as loop:
                            addr = builder.add(base, builder.mul(loop.index, stride))
                            src = builder.inttoptr(addr, ary.data.type)
                            builder.store(builder.load(src), builder.gep(dst, [loop.index]))
            at = builder.add(at, n)
        return impl_ret_new_ref(context, builder, outty, out._getvalue())

    return outty(pieces), codegen


@concat_vectors.python
def _(pieces):
    return np.concatenate(pieces)


def join_source(n: int) -> str:
    """Source of ``join(axis, t0, …, t{n-1})`` concatenating ``n`` vectors."""
    names = [f"t{k}" for k in range(n)]
    return f"def join(axis, {', '.join(names)}):\n    return _pm_concat(({''.join(v + ', ' for v in names)}))\n"


def joins_vectors(node) -> bool:
    """Whether pmfast implements ``node`` (a ``Join``): vectors of the output's dtype, a constant axis 0 or -1."""
    from pytensor.graph.basic import Constant

    axis, *tensors = node.inputs
    out = node.outputs[0]
    if not isinstance(axis, Constant) or axis.ndim != 0 or int(axis.data) not in (0, -1):
        return False
    if not tensors or len(node.inputs) > MAX_ARITY or out.ndim != 1:
        return False
    return all(t.ndim == 1 and t.type.dtype == out.type.dtype for t in tensors)


#: numpy's message for pieces whose other axes differ.
SHAPE_MSG = "all the input array dimensions except for the concatenation axis must match exactly"


def array_axis(node) -> int | None:
    """The axis of a ``Join`` of arrays of 2 or more axes pmfast implements (a constant axis, pieces of
    the output's number dtype, at most :data:`MAX_ARITY` inputs), or None."""
    from pytensor.graph.basic import Constant

    axis, *tensors = node.inputs
    out = node.outputs[0]
    if not isinstance(axis, Constant) or axis.ndim != 0 or out.ndim < 2 or not tensors or len(node.inputs) > MAX_ARITY:
        return None
    a = int(axis.data)
    a = a + out.ndim if a < 0 else a
    if not 0 <= a < out.ndim or np.dtype(out.type.dtype).kind not in "iuf":
        return None
    if not all(t.ndim == out.ndim and t.type.dtype == out.type.dtype for t in tensors):
        return None
    return a


def join_arrays_source(n: int, ndim: int, axis: int) -> str:
    """Source of ``join(axis, t0, …)``: numpy's shape check, then each piece copied into its slice of the
    output (:func:`pmfast.compiler.split.slice_axis`, :func:`pmfast.compiler.basic_index.update`)."""
    names = [f"t{k}" for k in range(n)]
    lines = []
    for t in names[1:]:
        for d in range(ndim):
            if d != axis:
                lines += [f"if {t}.shape[{d}] != t0.shape[{d}]:", f"    raise ValueError({SHAPE_MSG!r})"]
    lines.append("e0 = 0")
    for k, t in enumerate(names):
        lines.append(f"e{k + 1} = e{k} + {t}.shape[{axis}]")
    shape = "".join(f"e{n}, " if d == axis else f"t0.shape[{d}], " for d in range(ndim))
    lines.append(f"out = _pm_empty(({shape}), _pm_dtype)")
    for k, t in enumerate(names):
        lines.append(f"_pm_update(_pm_slice(out, {axis}, e{k}, e{k + 1}), {t}, False)")
    lines.append("return out")
    return f"def join(axis, {', '.join(names)}):\n" + "".join(f"    {line}\n" for line in lines)


def funcify(op, node):
    """``(numba function, cache key)`` for a ``Join`` node, or None (see :func:`joins_vectors`,
    :func:`array_axis`)."""

    if not joins_vectors(node):
        axis = array_axis(node)
        if axis is None:
            return None
        from pmfast.compiler import arrays, basic_index, split

        out = node.outputs[0]
        src = join_arrays_source(len(node.inputs) - 1, out.ndim, axis)
        dtype = np.dtype(out.type.dtype)
        env = {"_pm_empty": arrays.empty2, "_pm_dtype": dtype.type, "_pm_update": basic_index.update, "_pm_slice": split.slice_axis}
        key_parts = (VERSION, basic_index.VERSION, src, dtype.str)
        return generated.build(__name__, "join", src, env, "pmfast_join_arrays_", key_parts)
    src = join_source(len(node.inputs) - 1)
    return generated.build(__name__, "join", src, {"_pm_concat": concat_vectors}, "pmfast_join_", (VERSION, src))
