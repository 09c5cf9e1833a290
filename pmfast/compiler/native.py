"""numba intrinsics the generated entry points and callbacks are made of.

Intrinsics are lowered straight to LLVM IR: unlike numba's generic
overloads (``numba.carray``, ``np.all``…) they have no implementation to
type and compile in every new process, which is what makes them the cheap
way to write glue code (see :mod:`pmfast.compiler.overloads`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types

from pmfast.compiler.pure import intrinsic
from numba.np.arrayobj import make_array, populate_array

#: Field index of the unwrap function in numba's ``excinfo_t`` (non-null for a dynamic exception).
_EXC_UNWRAP_FIELD = 3
_EXC_ARGS_FIELD = 2


def _dtype_of(dtype):
    if isinstance(dtype, types.NumberClass):
        return dtype.dtype
    if isinstance(dtype, types.DType):
        return dtype.dtype
    if isinstance(dtype, types.TypeRef):
        return dtype.instance_type
    return None


@intrinsic
def array_view(typingctx, address, shape, dtype):
    """``array_view(address, shape, dtype)``: a C-contiguous array over memory owned by someone else.

    ``address`` is an integer or a pointer, ``shape`` an integer or a tuple of
    integers, ``dtype`` a numpy scalar type (``np.float64``). No meminfo: the
    array never owns or frees the memory (``numba.carray`` without its
    overload to compile).
    """
    dt = _dtype_of(dtype)
    if dt is None or not isinstance(address, (types.Integer, types.CPointer, types.RawPointer)):
        return None
    shapes = list(shape) if isinstance(shape, types.BaseTuple) else [shape]
    if not all(isinstance(s, types.Integer) for s in shapes):
        return None
    arrty = types.Array(dt, len(shapes), "C")

    def codegen(context, builder, sig, args):
        address, shape, _ = args
        ary = make_array(arrty)(context, builder)
        ptrty = context.get_data_type(dt).as_pointer()
        if isinstance(sig.args[0], types.Integer):
            data = builder.inttoptr(address, ptrty)
        else:
            data = builder.bitcast(address, ptrty)
        values = cgutils.unpack_tuple(builder, shape) if isinstance(sig.args[1], types.BaseTuple) else [shape]
        dims = [context.cast(builder, v, t, types.intp) for v, t in zip(values, shapes)]
        itemsize = context.get_abi_sizeof(context.get_data_type(dt))
        strides, step = [], cgutils.intp_t(itemsize)
        for d in reversed(dims):
            strides.append(step)
            step = builder.mul(step, d)
        populate_array(ary, data=data, shape=dims, strides=list(reversed(strides)), itemsize=cgutils.intp_t(itemsize), meminfo=None)
        return ary._getvalue()

    return arrty(address, shape, dtype), codegen


@array_view.python
def _(address, shape, dtype):
    return _memory(address, tuple(shape) if isinstance(shape, tuple) else (shape,), np.dtype(dtype))


def _memory(address, shape, dtype, strides=None):
    """Pure Python: an ndarray over the memory at ``address`` (an integer or a :class:`Pointer`)."""
    import ctypes

    shape = tuple(int(n) for n in shape)
    if strides is None:
        strides = tuple(int(np.prod(shape[k + 1 :], dtype=np.int64)) * dtype.itemsize for k in range(len(shape)))
    extent = dtype.itemsize + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
    buffer = (ctypes.c_char * max(extent, 1)).from_address(int(address))
    return np.ndarray(shape, dtype, buffer=buffer, strides=strides)


class Pointer(int):
    """Pure Python: what :func:`data_pointer` returns, the data's address (an ``int``), holding on to the array."""

    def __new__(cls, ary):
        self = super().__new__(cls, ary.__array_interface__["data"][0])
        self.owner = ary
        return self


def _native_call(context, builder, address, argtys, args, error_code):
    """Call the numba-compiled function at ``address`` (numba's calling convention) returning int64.

    Its status is checked here instead of propagated: an exception raised
    inside becomes ``error_code`` (a dynamic exception's heap-allocated info is
    freed), so the caller needs no try/except.
    """
    call_conv = context.call_conv
    fnty = call_conv.get_function_type(types.int64, argtys)
    fn = builder.inttoptr(address, fnty.as_pointer())
    retty = context.get_value_type(types.int64)
    ret = cgutils.alloca_once_value(builder, retty(0))
    excinfo_t = fnty.args[1].pointee
    excinfo = cgutils.alloca_once_value(builder, excinfo_t(None))
    packed = list(call_conv._get_arg_packer(argtys).as_arguments(builder, args))
    code = builder.call(fn, [ret, excinfo, *packed])
    ok = builder.icmp_signed("==", code, code.type(0))
    with builder.if_then(builder.not_(ok), likely=False):
        info = builder.load(excinfo)
        with builder.if_then(cgutils.is_not_null(builder, info)):
            unwrap = builder.load(builder.gep(info, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), _EXC_UNWRAP_FIELD)]))
            with builder.if_then(cgutils.is_not_null(builder, unwrap)):
                exc_args = builder.load(builder.gep(info, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), _EXC_ARGS_FIELD)]))
                with builder.if_then(cgutils.is_not_null(builder, exc_args)):
                    context.nrt.free(builder, exc_args)
                context.nrt.free(builder, builder.bitcast(info, cgutils.voidptr_t))
    return builder.select(ok, builder.load(ret), retty(error_code))


def _typed_call(address, error_code, args):
    if not isinstance(address, types.Integer) or not isinstance(error_code, types.IntegerLiteral):
        return None
    code, argtys = error_code.literal_value, list(args)

    def codegen(context, builder, sig, llargs):
        return _native_call(context, builder, llargs[0], argtys, llargs[2:], code)

    return types.int64(address, error_code, *args), codegen


@intrinsic(prefer_literal=True)
def call_native3(typingctx, address, error_code, a0, a1, a2):
    """``call_native3(address, error_code, a0, a1, a2)``: call the numba function at ``address``.

    Its result is ``int64``; an exception it raises returns ``error_code``.
    """
    return _typed_call(address, error_code, (a0, a1, a2))


@intrinsic(prefer_literal=True)
def call_native4(typingctx, address, error_code, a0, a1, a2, a3):
    """:func:`call_native3` with four arguments."""
    return _typed_call(address, error_code, (a0, a1, a2, a3))


def native_address(dispatcher, sig) -> int:
    """Address of the compiled ``dispatcher`` for ``sig`` under numba's calling convention."""
    cres = dispatcher.overloads[tuple(sig.args)]
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


DIMSHUFFLE_SQUEEZE_MSG = "DimShuffle: Attempting to squeeze axes with size not equal to one"


def dimshuffle_spec(new_order, drop) -> str:
    """The literal :func:`dimshuffle` takes: ``"0,x,1|2"`` (output axes from input axes or ``x``, then dropped axes)."""
    return ",".join("x" if o == -1 else str(o) for o in new_order) + "|" + ",".join(map(str, drop))


@intrinsic(prefer_literal=True)
def dimshuffle(typingctx, x, spec):
    """``dimshuffle(x, spec)``: pytensor's DimShuffle as a view of ``x`` (see :func:`dimshuffle_spec`).

    Output axes are input axes or new broadcastable axes (length 1, stride
    0); a dropped axis must have length 1 (else ``ValueError``, pytensor's
    message). Layout ``A``, like numba's ``as_strided`` that pytensor uses.
    A scalar ``x`` (some numba implementations return scalars for 0-d
    results) is first stored in a new 0-d array.
    """
    if isinstance(x, (types.Number, types.Boolean)) and isinstance(spec, types.StringLiteral):
        arrty0 = types.Array(x, 0, "C")

        def scalar_codegen(context, builder, sig, args):
            from numba.np.arrayobj import _empty_nd_impl, store_item

            ary = _empty_nd_impl(context, builder, arrty0, [])
            store_item(context, builder, arrty0, args[0], ary.data)  # the data model's type (a bool is a byte)
            n_out = sig.return_type.ndim
            return _dimshuffle_codegen(context, builder, arrty0, sig.return_type, ary._getvalue(), [-1] * n_out, (), True)

        n_out = len([a for a in spec.literal_value.split("|")[0].split(",") if a])
        return types.Array(x, n_out, "A")(x, spec), scalar_codegen
    if not isinstance(x, types.Array) or not isinstance(spec, types.StringLiteral):
        return None
    axes, dropped = spec.literal_value.split("|")
    order = [-1 if a == "x" else int(a) for a in axes.split(",") if a]
    drop = [int(a) for a in dropped.split(",") if a]
    if any(o >= x.ndim for o in order) or any(d >= x.ndim for d in drop):
        return None
    outty = types.Array(x.dtype, len(order), "A", readonly=not x.mutable)

    def codegen(context, builder, sig, args):
        return _dimshuffle_codegen(context, builder, x, outty, args[0], order, drop, new_ref=False)

    return outty(x, spec), codegen


@dimshuffle.python
def _(x, spec):
    axes, dropped = spec.split("|")
    order = [-1 if a == "x" else int(a) for a in axes.split(",") if a]
    if not isinstance(x, np.ndarray):
        x = np.array(x)
        order = [-1] * len(order)
    for d in (int(a) for a in dropped.split(",") if a):
        if x.shape[d] != 1:
            raise ValueError(DIMSHUFFLE_SQUEEZE_MSG)
    shape = tuple(1 if o == -1 else x.shape[o] for o in order)
    strides = tuple(0 if o == -1 else x.strides[o] for o in order)
    return np.lib.stride_tricks.as_strided(x, shape, strides, writeable=x.flags.writeable)


def _dimshuffle_codegen(context, builder, xty, outty, value, order, drop, new_ref):
    from numba.core.imputils import impl_ret_borrowed, impl_ret_new_ref

    meminfo, parent, itemsize, data, shapes, strides = array_fields(builder, value, xty.ndim)
    one, zero = cgutils.intp_t(1), cgutils.intp_t(0)
    for d in drop:
        with builder.if_then(builder.icmp_signed("!=", shapes[d], one), likely=False):
            context.call_conv.return_user_exc(builder, ValueError, (DIMSHUFFLE_SQUEEZE_MSG,))
    out = array_value(
        context, builder, outty, meminfo, parent, itemsize, data,
        [one if o == -1 else shapes[o] for o in order], [zero if o == -1 else strides[o] for o in order],
    )
    ret = impl_ret_new_ref if new_ref else impl_ret_borrowed
    return ret(context, builder, outty, out)


@intrinsic
def empty(typingctx, shape, dtype):
    """``empty(shape, dtype)``: a new C-contiguous array (``np.empty`` without its overload to compile)."""
    dt = _dtype_of(dtype)
    shapes = list(shape) if isinstance(shape, types.BaseTuple) else [shape]
    if dt is None or not all(isinstance(s, types.Integer) for s in shapes):
        return None
    arrty = types.Array(dt, len(shapes), "C")

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_new_ref
        from numba.np.arrayobj import _empty_nd_impl

        values = cgutils.unpack_tuple(builder, args[0]) if isinstance(sig.args[0], types.BaseTuple) else [args[0]]
        dims = [context.cast(builder, v, t, types.intp) for v, t in zip(values, shapes)]
        ary = _empty_nd_impl(context, builder, arrty, dims)
        return impl_ret_new_ref(context, builder, arrty, ary._getvalue())

    return arrty(shape, dtype), codegen


@empty.python
def _(shape, dtype):
    return np.empty(shape, dtype)


@intrinsic(prefer_literal=True)
def stack_buffer(typingctx, n, dtype):
    """``stack_buffer(n, dtype)``: ``n`` slots of ``dtype`` in the calling function's stack frame, as a 1-d array.

    ``n`` is a literal. The memory lives until the function returns; the array
    has no meminfo (views of it never own or free anything). The entry keeps
    its 0-d values there when a node function needs them as arrays
    (:mod:`pmfast.compiler.scalars`): no heap allocation per call.
    """
    dt = _dtype_of(dtype)
    if dt is None or not isinstance(n, types.IntegerLiteral):
        return None
    count = n.literal_value
    arrty = types.Array(dt, 1, "C")

    def codegen(context, builder, sig, args):
        llty = context.get_data_type(dt)
        itemsize = context.get_abi_sizeof(llty)
        slots = cgutils.alloca_once(builder, llty, size=count)
        ary = make_array(arrty)(context, builder)
        step = cgutils.intp_t(itemsize)
        populate_array(ary, data=slots, shape=[cgutils.intp_t(count)], strides=[step], itemsize=step, meminfo=None)
        return ary._getvalue()

    return arrty(n, dtype), codegen


@stack_buffer.python
def _(n, dtype):
    return np.empty(n, dtype)


@intrinsic
def cell(typingctx, ary, k):
    """``cell(ary, k)``: a 0-d view of element ``k`` of the contiguous 1-d array ``ary`` (no meminfo)."""
    if not (isinstance(ary, types.Array) and ary.ndim == 1 and ary.layout == "C" and isinstance(k, types.Integer)):
        return None
    outty = types.Array(ary.dtype, 0, "C")

    def codegen(context, builder, sig, args):
        src = make_array(ary)(context, builder, args[0])
        index = context.cast(builder, args[1], sig.args[1], types.intp)
        out = make_array(outty)(context, builder)
        itemsize = cgutils.intp_t(context.get_abi_sizeof(context.get_data_type(ary.dtype)))
        populate_array(out, data=builder.gep(src.data, [index]), shape=[], strides=[], itemsize=itemsize, meminfo=None)
        return out._getvalue()

    return outty(ary, k), codegen


@cell.python
def _(ary, k):
    return ary[k, ...]


@intrinsic
def c_reshape(typingctx, ary, shape):
    """``c_reshape(ary, shape)``: the C-contiguous array ``ary`` viewed with the C-contiguous ``shape``
    (a tuple of integers, whose product the caller has checked equals ``ary.size``): what numba's
    ``ary.reshape(shape)`` returns for such an array, without its shape normaliser compiled as a
    subroutine. Borrows ``ary``'s memory (meminfo and parent), as numba's reshape does."""
    if not (isinstance(ary, types.Array) and ary.layout == "C" and isinstance(shape, types.BaseTuple)):
        return None
    shapes = list(shape)
    if not shapes or not all(isinstance(s, types.Integer) for s in shapes):
        return None
    outty = ary.copy(ndim=len(shapes), layout="C")

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_borrowed

        src = make_array(ary)(context, builder, args[0])
        values = cgutils.unpack_tuple(builder, args[1], len(shapes))
        dims = [context.cast(builder, v, t, types.intp) for v, t in zip(values, shapes)]
        strides, step = [], src.itemsize
        for d in reversed(dims):
            strides.append(step)
            step = builder.mul(step, d)
        out = make_array(outty)(context, builder)
        populate_array(out, data=src.data, shape=dims, strides=list(reversed(strides)), itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, outty, out._getvalue())

    return outty(ary, shape), codegen


@c_reshape.python
def _(ary, shape):
    out = ary.view()
    out.shape = tuple(shape)  # a view of the same memory, never a copy
    return out


@intrinsic
def data_pointer(typingctx, ary):
    """``data_pointer(ary)``: the array's data as a ``CPointer`` of its dtype (for calls into C-ABI code)."""
    if not isinstance(ary, types.Array):
        return None
    ptrty = types.CPointer(ary.dtype)

    def codegen(context, builder, sig, args):
        return make_array(ary)(context, builder, args[0]).data

    return ptrty(ary), codegen


@data_pointer.python
def _(ary):
    return Pointer(ary)


@intrinsic
def blas_dgemv(typingctx, trans, m, n, a, lda, x, y):
    """``blas_dgemv(trans, m, n, a, lda, x, y)``: ``y = op(A) @ x`` by BLAS (float64, unit strides).

    ``A`` is column-major ``m × n`` at pointer ``a`` with leading dimension
    ``lda``; ``op`` is the transpose when ``trans`` is the literal ``"t"``.
    The call goes to numba's own BLAS wrapper (``numba_xxgemv``, resolved by
    name, so the compiled code can be cached), as ``np.dot`` does, without
    the overloads ``np.dot`` compiles around it.
    """
    if not isinstance(trans, types.StringLiteral) or trans.literal_value not in ("n", "t"):
        return None
    if not all(isinstance(t, types.CPointer) and t.dtype == types.float64 for t in (a, x, y)):
        return None
    from numba.np.linalg import ensure_blas

    ensure_blas()
    code = ord(trans.literal_value)

    def codegen(context, builder, sig, args):
        from numba.np.linalg import check_blas_return, ll_char, ll_void_p, make_constant_slot

        _, m_, n_, a_, lda_, x_, y_ = args
        intp = cgutils.intp_t
        fnty = ir.FunctionType(ir.IntType(32), [ll_char, ll_char, intp, intp, ll_void_p, ll_void_p, intp, ll_void_p, ll_void_p, ll_void_p])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemv")
        alpha = make_constant_slot(context, builder, types.float64, 1.0)
        beta = make_constant_slot(context, builder, types.float64, 0.0)
        cast = [context.cast(builder, v, t, types.intp) for v, t in ((m_, sig.args[1]), (n_, sig.args[2]), (lda_, sig.args[4]))]
        res = builder.call(
            fn,
            (
                ll_char(ord("d")),
                ll_char(code),
                cast[0],
                cast[1],
                builder.bitcast(alpha, ll_void_p),
                builder.bitcast(a_, ll_void_p),
                cast[2],
                builder.bitcast(x_, ll_void_p),
                builder.bitcast(beta, ll_void_p),
                builder.bitcast(y_, ll_void_p),
            ),
        )
        check_blas_return(context, builder, res)
        return context.get_dummy_value()

    return types.none(trans, m, n, a, lda, x, y), codegen


@blas_dgemv.python
def _(trans, m, n, a, lda, x, y):
    f64 = np.dtype(np.float64)
    matrix = _memory(a, (m, n), f64, (8, 8 * lda))
    if trans == "t":
        m, n, matrix = n, m, matrix.T
    _memory(y, (m,), f64)[:] = matrix @ _memory(x, (n,), f64)


def array_fields(builder, value, ndim):
    """``(meminfo, parent, itemsize, data, shape, strides)`` of an array struct ``value`` (numba's
    array data model), read with ``extractvalue``: no stack copy of the struct."""
    shape = [builder.extract_value(value, [5, k]) for k in range(ndim)]
    strides = [builder.extract_value(value, [6, k]) for k in range(ndim)]
    return builder.extract_value(value, 0), builder.extract_value(value, 1), builder.extract_value(value, 3), builder.extract_value(value, 4), shape, strides


def array_value(context, builder, arrty, meminfo, parent, itemsize, data, shape, strides):
    """The array struct of type ``arrty`` with these fields (numba's array data model, ``nitems`` the
    product of ``shape``), built with ``insertvalue``: what ``populate_array`` stores field by field
    into a stack copy and loads back, in a few instructions."""
    nitems = cgutils.intp_t(1)
    for k, n in enumerate(shape):
        nitems = n if k == 0 else builder.mul(nitems, n)
    value = ir.Constant(context.get_value_type(arrty), ir.Undefined)
    for field, v in ((0, meminfo), (1, parent), (2, nitems), (3, itemsize), (4, data)):
        value = builder.insert_value(value, v, field)
    for k, (n, s) in enumerate(zip(shape, strides)):
        value = builder.insert_value(value, n, [5, k])
        value = builder.insert_value(value, s, [6, k])
    return value
