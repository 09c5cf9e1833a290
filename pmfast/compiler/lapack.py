"""BLAS and LAPACK called from numba code that numba can cache: :func:`call` and a few array views.

scipy ships BLAS/LAPACK as Cython functions (``scipy.linalg.cython_blas`` /
``cython_lapack``, Fortran calling convention: every argument by pointer). A
numba function that holds one's address as a constant can't be cached (the
address changes from process to process); pytensor fetches it at run time
through an object-mode function and a global slot, which numba compiles again
in every process (``get_trtrs_pointer``… ~0.1-0.25 CPU s each), on top of the
``@overload`` implementations around them.

Here each routine pmfast uses gets a process-wide symbol name,
``pmfast_<d|s><routine>``, bound to scipy's address with llvmlite's
``add_symbol`` (:func:`define_symbols`). Compiled code calls the symbol by
name, like numba's own BLAS helpers (``numba_xxgemm``): the machine code is
the same in every process, numba caches it, and the JIT's linker resolves the
name when the code is loaded. That is a process-wide addition (LLVM keeps one
symbol table) of names nobody else uses; it replaces nothing
(:mod:`pmfast.compiler.patching` lists it).

:func:`call` is one intrinsic for every routine: ``call("potrf", (uplo, n, a,
lda))`` stores each scalar argument in a stack slot of the type the routine's
signature (:data:`ROUTINES`) says (``c`` a character given as its code, ``i``
a 32-bit integer, ``f`` a scalar of the arrays' dtype, ``p`` an array whose
data pointer is passed, ``q`` an int32 array), passes the pointers, and for a
LAPACK routine appends ``info`` and returns it (BLAS routines return 0). The
precision (``d`` or ``s``) is the first array argument's dtype.
"""

from __future__ import annotations

import threading

import numpy as np

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import overload
from pmfast.compiler.pure import intrinsic
from numba.np.arrayobj import make_array, populate_array

#: routine: (scipy module, argument kinds; see the module docstring). LAPACK routines take ``info`` last.
ROUTINES = {
    "trsm": ("blas", "ccccii" "fpipi"),  # side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb
    "trmm": ("blas", "ccccii" "fpipi"),  # side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb
    "trsv": ("blas", "ccci" "pipi"),  # uplo, trans, diag, n, a, lda, x, incx
    "gemm": ("blas", "cciii" "fpipi" "fpi"),  # transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc
    "gemv": ("blas", "cii" "fpipi" "fpi"),  # trans, m, n, alpha, a, lda, x, incx, beta, y, incy
    "potrf": ("lapack", "cipi"),  # uplo, n, a, lda
    "trtri": ("lapack", "ccipi"),  # uplo, diag, n, a, lda
    "getrf": ("lapack", "iipiq"),  # m, n, a, lda, ipiv
    "getrs": ("lapack", "ciipiqpi"),  # trans, n, nrhs, a, lda, ipiv, b, ldb
}
_KINDS = {types.float64: "d", types.float32: "s"}

_lock = threading.Lock()
_defined: set[str] = set()


def symbol(kind: str, routine: str) -> str:
    return f"pmfast_{kind}{routine}"


def define_symbols() -> None:
    """Bind every ``pmfast_<kind><routine>`` to scipy's function (once per process)."""
    if len(_defined) == 2 * len(ROUTINES):
        return
    import llvmlite.binding as ll
    from numba.extending import get_cython_function_address

    with _lock:
        for routine, (module, _) in ROUTINES.items():
            for kind in _KINDS.values():
                name = symbol(kind, routine)
                if name not in _defined:
                    ll.add_symbol(name, get_cython_function_address(f"scipy.linalg.cython_{module}", kind + routine))
                    _defined.add(name)


define_symbols.pmfast_reload = True  # see pmfast.compiler.cache.inherit_reload


def _literal_str(value) -> str | None:
    return value.literal_value if isinstance(value, types.StringLiteral) else None


@intrinsic(prefer_literal=True)
def call(typingctx, routine, args):
    """``call(ROUTINE, (a0, a1, …))``: the BLAS/LAPACK routine of :data:`ROUTINES`; LAPACK's ``info`` (int64), or 0."""
    name = _literal_str(routine)
    if name not in ROUTINES or not isinstance(args, types.BaseTuple):
        return None
    module, spec = ROUTINES[name]
    argtys = list(args)
    if len(argtys) != len(spec):
        return None
    arrays = [t for t, k in zip(argtys, spec) if k == "p"]
    if not arrays or not all(isinstance(t, types.Array) for t in arrays):
        return None
    dtype = arrays[0].dtype
    if dtype not in _KINDS or any(t.dtype != dtype for t in arrays):
        return None
    for t, k in zip(argtys, spec):
        if k in "ci" and not isinstance(t, types.Integer):
            return None
        if k == "f" and not isinstance(t, (types.Float, types.Integer)):
            return None
        if k == "q" and not (isinstance(t, types.Array) and t.dtype == types.int32):
            return None
    lapack = module == "lapack"
    sym = symbol(_KINDS[dtype], name)

    def codegen(context, builder, sig, llargs):
        values = cgutils.unpack_tuple(builder, llargs[1], len(spec))
        i8, i32 = ir.IntType(8), ir.IntType(32)
        pointers = []
        for value, t, k in zip(values, argtys, spec):
            if k == "c":
                pointers.append(cgutils.alloca_once_value(builder, builder.trunc(value, i8) if value.type.width > 8 else value))
            elif k == "i":
                pointers.append(cgutils.alloca_once_value(builder, context.cast(builder, value, t, types.int32)))
            elif k == "f":
                pointers.append(cgutils.alloca_once_value(builder, context.cast(builder, value, t, dtype)))
            else:
                pointers.append(make_array(t)(context, builder, value).data)
        info = cgutils.alloca_once_value(builder, i32(0))
        if lapack:
            pointers.append(info)
        fnty = ir.FunctionType(ir.VoidType(), [p.type for p in pointers])
        fn = cgutils.get_or_insert_function(builder.module, fnty, sym)
        builder.call(fn, pointers)
        # the symbols are defined again whenever numba loads this code (or a caller's) from its cache
        context.active_code_library._reload_init.add(define_symbols)
        return builder.sext(builder.load(info), ir.IntType(64))

    return types.int64(routine, args), codegen


@intrinsic
def c_view(typingctx, ary):
    """``c_view(ary)``: ``ary`` (any layout, checked C-contiguous by the caller) typed as a writable C array,
    sharing its memory. Writable: the callers write through it only into an input their op destroys
    (pytensor's destroy handler never lets an op destroy a constant or a protected input)."""
    if not isinstance(ary, types.Array) or ary.ndim < 1:
        return None
    outty = ary.copy(layout="C", readonly=False)

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_borrowed

        src = make_array(ary)(context, builder, args[0])
        out = make_array(outty)(context, builder)
        populate_array(
            out,
            data=src.data,
            shape=cgutils.unpack_tuple(builder, src.shape, ary.ndim),
            strides=cgutils.unpack_tuple(builder, src.strides, ary.ndim),
            itemsize=src.itemsize,
            meminfo=src.meminfo,
            parent=src.parent,
        )
        return impl_ret_borrowed(context, builder, outty, out._getvalue())

    return outty(ary), codegen


@c_view.python
def _(ary):
    return ary


@intrinsic
def as_any(typingctx, ary):
    """``as_any(ary)``: ``ary`` typed as a writable 'A'-layout array (the same value: numba's array
    model does not depend on the layout). Callers pass it to one implementation compiled once
    for every layout (the writes go only into inputs their op destroys, see :func:`c_view`)."""
    if not isinstance(ary, types.Array):
        return None
    outty = ary.copy(layout="A", readonly=False)

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_borrowed

        return impl_ret_borrowed(context, builder, outty, args[0])

    return outty(ary), codegen


@as_any.python
def _(ary):
    return ary


@intrinsic
def layout(typingctx, ary):
    """``layout(ary)``: 1 if the 1-d or 2-d array is C-contiguous (or empty), 2 if only F-contiguous, 0 otherwise (run time)."""
    if not isinstance(ary, types.Array) or ary.ndim not in (1, 2):
        return None

    def codegen(context, builder, sig, args):
        src = make_array(ary)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, src.shape, ary.ndim)
        strides = cgutils.unpack_tuple(builder, src.strides, ary.ndim)
        itemsize = src.itemsize
        one = cgutils.intp_t(1)

        def fits(dims):
            # numba's is_contiguous: a length-1 axis's stride doesn't matter
            ok = cgutils.true_bit
            step = itemsize
            for d in dims:
                unit = builder.icmp_signed("==", shape[d], one)
                ok = builder.and_(ok, builder.or_(unit, builder.icmp_signed("==", strides[d], step)))
                step = builder.mul(step, shape[d])
            return ok

        empty = cgutils.false_bit
        for d in range(ary.ndim):
            empty = builder.or_(empty, builder.icmp_signed("==", shape[d], cgutils.intp_t(0)))
        c_ok = builder.or_(empty, fits(list(reversed(range(ary.ndim)))))
        f_ok = fits(list(range(ary.ndim)))
        i64 = ir.IntType(64)
        return builder.select(c_ok, i64(1), builder.select(f_ok, i64(2), i64(0)))

    return types.int64(ary), codegen


@layout.python
def _(ary):
    return np.int64(1 if ary.size == 0 or ary.flags.c_contiguous else 2 if ary.flags.f_contiguous else 0)


def _fortran_only(ary) -> bool:
    """A 2-d array numba types Fortran-ordered (F-contiguous and not C-contiguous: numba types an
    array that is both as C)."""
    return ary.ndim == 2 and ary.flags.f_contiguous and not ary.flags.c_contiguous


def fortran_t(ary):
    """``ary.T`` (a C view of the same memory) if ``ary`` is typed Fortran-ordered, else ``ary``.

    Chosen at typing time from ``ary``'s numba type (:func:`_typed_f`), so an op that may destroy an
    F-ordered input works in its memory and returns an F-ordered result (:func:`from_fortran_t`),
    while every other caller keeps its C-typed result; these Python versions decide from the flags,
    as numba types an array passed from Python."""
    return ary.T if _fortran_only(ary) else ary


def from_fortran_t(ary, result):
    """``result.T`` if ``ary`` is typed Fortran-ordered (``result`` was computed on :func:`fortran_t`), else ``result``."""
    return result.T if _fortran_only(ary) else result


def is_fortran(ary):
    """Whether ``ary`` is typed Fortran-ordered (a constant of each compiled version)."""
    return _fortran_only(ary)


def _typed_f(ary) -> bool:
    return isinstance(ary, types.Array) and ary.ndim == 2 and ary.layout == "F"


@overload(fortran_t)
def _(ary):
    return (lambda ary: ary.T) if _typed_f(ary) else (lambda ary: ary)


@overload(from_fortran_t)
def _(ary, result):
    return (lambda ary, result: result.T) if _typed_f(ary) else (lambda ary, result: result)


@overload(is_fortran)
def _(ary):
    return (lambda ary: True) if _typed_f(ary) else (lambda ary: False)


# The same three as intrinsics (``PMFAST_LAPACK_INTRINSICS=0``: the overloads above). An overload's
# implementation is a numba function of its own, compiled per argument types in every cold process
# where a node function that calls it is typed (the destroying ops' node functions, inlined into an
# entry: six lambdas, ~0.2-0.3 CPU s of bayesian_var_ireland's and bayesian_sem_workflow's main
# process); an intrinsic is typed by a Python function and lowered in place (numba's ``.T``).


def _transpose(context, builder, aryty, value):
    """numba's lowering of ``ary.T`` for ``aryty`` (a borrowed view)."""
    return context.get_getattr(aryty, "T")(context, builder, aryty, value, "T")


def _borrowed(context, builder, ty, value):
    from numba.core.imputils import impl_ret_borrowed

    return impl_ret_borrowed(context, builder, ty, value)


@intrinsic
def fortran_t_native(typingctx, ary):
    """:func:`fortran_t`."""
    if not isinstance(ary, types.Array):
        return None
    if _typed_f(ary):
        restype = typingctx.resolve_getattr(ary, "T")

        def codegen(context, builder, sig, args):
            return _transpose(context, builder, sig.args[0], args[0])

        return restype(ary), codegen

    def codegen(context, builder, sig, args):
        return _borrowed(context, builder, sig.return_type, args[0])

    return ary(ary), codegen


@fortran_t_native.python
def _(ary):
    return fortran_t(ary)


@intrinsic
def from_fortran_t_native(typingctx, ary, result):
    """:func:`from_fortran_t`."""
    if not isinstance(ary, types.Array) or not isinstance(result, types.Array):
        return None
    if _typed_f(ary):
        restype = typingctx.resolve_getattr(result, "T")

        def codegen(context, builder, sig, args):
            return _transpose(context, builder, sig.args[1], args[1])

        return restype(ary, result), codegen

    def codegen(context, builder, sig, args):
        return _borrowed(context, builder, sig.return_type, args[1])

    return result(ary, result), codegen


@from_fortran_t_native.python
def _(ary, result):
    return from_fortran_t(ary, result)


@intrinsic
def is_fortran_native(typingctx, ary):
    """:func:`is_fortran`."""
    if not isinstance(ary, types.Array):
        return None
    flag = _typed_f(ary)

    def codegen(context, builder, sig, args):
        return context.get_constant(types.boolean, flag)

    return types.boolean(ary), codegen


@is_fortran_native.python
def _(ary):
    return is_fortran(ary)


def layout_helpers() -> dict:
    """The names linalg's node functions call for :func:`fortran_t`, :func:`from_fortran_t`, :func:`is_fortran`."""
    import os

    if os.environ.get("PMFAST_LAPACK_INTRINSICS", "1") == "0":
        return {"_pm_ft": fortran_t, "_pm_back": from_fortran_t, "_pm_isf": is_fortran}
    return {"_pm_ft": fortran_t_native, "_pm_back": from_fortran_t_native, "_pm_isf": is_fortran_native}
