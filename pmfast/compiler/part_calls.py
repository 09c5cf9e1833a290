"""How a part (:mod:`pmfast.compiler.parts`) is called across a cut: the types that cross it and the call.

* :func:`boundary_type`: the numba type of a value crossing a cut, from its pytensor type alone
  (a C-contiguous array, or a scalar), so every part's signature is known before anything compiles.
* :func:`canon`: what a part returns, as a C-contiguous writable array (itself when it is one).
* :func:`call_part`: a call to the part whose native address is in a table, with numba's calling
  convention (an exception inside propagates as from a direct call), without linking the part's
  module into the caller.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types

from pmfast.compiler.pure import intrinsic


def boundary_type(var):
    """The numba type of pytensor variable ``var`` crossing a cut (a canonical array), or None."""
    import numba
    import numpy as np
    from pytensor.scalar.basic import ScalarType
    from pytensor.tensor.type import TensorType

    vtype = getattr(var, "type", None)
    try:
        if isinstance(vtype, TensorType):
            return types.Array(numba.from_dtype(np.dtype(vtype.dtype)), vtype.ndim, "C")
        if isinstance(vtype, ScalarType):
            return numba.from_dtype(np.dtype(vtype.dtype))
    except (NotImplementedError, TypeError, numba.core.errors.NumbaError):
        return None
    return None


@intrinsic
def canon(typingctx, a):
    """``canon(a)``: array ``a`` as a C-contiguous, writable array (``a`` itself if it is one, else a
    copy); any other value as it is. What a part returns, so that its callers' types are known."""
    if not isinstance(a, types.Array):

        def same(context, builder, sig, args):
            from numba.core.imputils import impl_ret_borrowed

            return impl_ret_borrowed(context, builder, a, args[0])

        return a(a), same
    ret = a.copy(layout="C", readonly=False)

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_borrowed
        from numba.np.arrayobj import _array_copy

        from pmfast.compiler.arrays import _as_c_layout

        if a.mutable and a.layout == "C":
            return impl_ret_borrowed(context, builder, ret, args[0])
        if a.mutable and a.ndim > 0:
            return _as_c_layout(context, builder, sig, args)
        return _array_copy(context, builder, sig, args)

    return ret(a), codegen


@canon.python
def _(a):
    if not isinstance(a, np.ndarray):
        return a
    return a if a.flags.writeable and a.flags.c_contiguous else np.array(a, order="C")


@intrinsic(prefer_literal=True)
def call_part(typingctx, table, slot, part, args):
    """``call_part(table, slot, part, args)``: call the part at ``table[slot]`` with the tuple ``args``.

    ``table`` is the address of a uint64 array of native addresses, ``slot`` a literal int, ``part``
    the part's dispatcher (compiled for ``args``' types before the entry is: its result type is the
    call's). Lowered as numba lowers a direct call (its calling convention, errors propagated), to
    the address read from the table.
    """
    if not isinstance(slot, types.IntegerLiteral) or not isinstance(part, types.Dispatcher):
        return None
    if not isinstance(table, types.Integer) or not isinstance(args, types.BaseTuple):
        return None
    argtypes = tuple(types.unliteral(t) for t in args.types)
    dispatcher = part.dispatcher
    if argtypes not in dispatcher.overloads:
        dispatcher.compile(argtypes)
    restype = dispatcher.overloads[argtypes].signature.return_type
    k = slot.literal_value

    def codegen(context, builder, sig, llargs):
        call_conv = context.call_conv
        fnty = call_conv.get_function_type(restype, argtypes)
        base = builder.inttoptr(llargs[0], ir.IntType(64).as_pointer())
        address = builder.load(builder.gep(base, [ir.Constant(ir.IntType(64), k)]))
        fn = builder.inttoptr(address, fnty.as_pointer())
        values = cgutils.unpack_tuple(builder, llargs[3], len(argtypes))
        values = [context.cast(builder, v, t0, t1) for v, t0, t1 in zip(values, args.types, argtypes)]
        retty = call_conv.get_return_type(restype).pointee
        ret = cgutils.alloca_once(builder, retty)
        builder.store(cgutils.get_null_value(retty), ret)
        excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
        packed = list(call_conv._get_arg_packer(argtypes).as_arguments(builder, values))
        code = builder.call(fn, [ret, excinfo, *packed])
        status = call_conv._get_return_status(builder, code, builder.load(excinfo))
        with cgutils.if_unlikely(builder, status.is_error):
            call_conv.return_status_propagate(builder, status)
        return context.get_returned_value(builder, restype, builder.load(ret))

    return restype(table, slot, part, args), codegen


@call_part.python
def _(table, slot, part, args):
    return part(*args)
