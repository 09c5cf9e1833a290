"""numpy's array constructors for the simple cases generated code uses, without numba's generic code.

``np.asarray(z)`` (Subtensor of a scalar), ``np.array(x)`` (a reduction's 0-d result),
``np.empty(shape, dtype)`` (Alloc, the fused loops' outputs) in a numba function call numba's
``@overload`` implementations, and each (implementation, signature) is a numba function of its
own, compiled through the whole pipeline in every new process: numba caches a user's function,
not the generic code it calls, and an entry inlines its node functions whatever the cache holds
(docs/compile.md, "Inlining"). A model pays ~0.05-0.25 CPU s per such function, cold or on a
used machine. Here the same cases are built by intrinsics (numba's own allocation, then a store
of the scalar converted to the array's dtype, as numba's ``arr[()] = x`` does) behind overloads
that numba inlines at its IR level: typed with the caller and lowered into it, nothing compiled
on its own and nothing cached. Any other case is handed to numpy's function, as before.

:func:`rewrite_source` points a generated source's calls at them; pmfast's linker applies it to
every source pytensor and pmfast generate for numba while pmfast compiles. The results are the
values and types numpy's functions give there, and the choice depends on the source and the
types only (never on a cache). This module is part of :func:`pmfast.linker.compile_salt`.
"""

from __future__ import annotations

import ast
import re

import numpy as np
from numba import types
from pmfast.compiler.native import _dtype_of
from pmfast.compiler.pure import intrinsic

_SCALARS = (types.Number, types.Boolean)


def _source_hash() -> str:
    import hashlib
    from pathlib import Path

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


#: Hash of this module: part of the cache key of code whose source :func:`rewrite_source` changed
#: (besides :func:`pmfast.linker.compile_salt`, which hashes it too).
VERSION = _source_hash()


def _new_0d(context, builder, arrty, value, valty):
    from numba.core.imputils import impl_ret_new_ref
    from numba.np.arrayobj import _empty_nd_impl, make_array, store_item

    ary = _empty_nd_impl(context, builder, arrty, [])
    data = make_array(arrty)(context, builder, ary._getvalue()).data
    store_item(context, builder, arrty, context.cast(builder, value, valty, arrty.dtype), data)
    return impl_ret_new_ref(context, builder, arrty, ary._getvalue())


def _fallback(typingctx, fn, args):
    """``fn(*args)`` as numba types and compiles it (its generic code, as before), or None."""
    try:
        sig = typingctx.resolve_function_type(typingctx.resolve_value_type(fn), args, {})
    except Exception:
        return None
    if sig is None:
        return None
    n = len(args)
    impl = {1: lambda a: fn(a), 2: lambda a, b: fn(a, b), 3: lambda a, b, c: fn(a, b, c)}[n]

    def codegen(context, builder, s, llargs):
        return context.compile_internal(builder, impl, s, llargs)

    return sig.return_type(*args), codegen


def _int_shape(shape) -> bool:
    if isinstance(shape, types.Integer):
        return True
    return isinstance(shape, types.BaseTuple) and all(isinstance(s, types.Integer) for s in shape)


@intrinsic(py=np.asarray)
def asarray1(typingctx, a):
    """``np.asarray(a)``: a scalar as a new 0-d array, an array itself."""
    if isinstance(a, _SCALARS):
        return _scalar_sig(a)
    if isinstance(a, types.Array):

        def codegen(context, builder, sig, args):
            from numba.core.imputils import impl_ret_borrowed

            return impl_ret_borrowed(context, builder, sig.return_type, args[0])

        return a(a), codegen
    return _fallback(typingctx, np.asarray, (a,))


def _scalar_sig(a, dtype=None):
    dt = a if dtype is None else _dtype_of(dtype)
    arrty = types.Array(dt, 0, "C")

    def codegen(context, builder, sig, args):
        return _new_0d(context, builder, arrty, args[0], sig.args[0])

    return (arrty(a) if dtype is None else arrty(a, dtype)), codegen


@intrinsic(py=np.array)
def array1(typingctx, a):
    """``np.array(a)``: a scalar as a new 0-d array."""
    if isinstance(a, _SCALARS):
        return _scalar_sig(a)
    return _fallback(typingctx, np.array, (a,))


@intrinsic(py=np.array)
def array2(typingctx, a, dtype):
    """``np.array(a, dtype)``: a scalar converted to ``dtype`` in a new 0-d array."""
    if isinstance(a, _SCALARS) and _dtype_of(dtype) is not None:
        return _scalar_sig(a, dtype)
    return _fallback(typingctx, np.array, (a, dtype))


@intrinsic(py=np.empty)
def empty1(typingctx, shape):
    """``np.empty(shape)``: float64."""
    if _int_shape(shape):
        return _empty_sig(shape, None)
    return _fallback(typingctx, np.empty, (shape,))


@intrinsic(py=np.empty)
def empty2(typingctx, shape, dtype):
    """``np.empty(shape, dtype)``."""
    if _int_shape(shape) and _dtype_of(dtype) is not None:
        return _empty_sig(shape, dtype)
    return _fallback(typingctx, np.empty, (shape, dtype))


def _empty_sig(shape, dtype):
    from numba.core.imputils import impl_ret_new_ref
    from numba.np.arrayobj import _empty_nd_impl, _parse_shape

    shapes = list(shape) if isinstance(shape, types.BaseTuple) else [shape]
    arrty = types.Array(types.float64 if dtype is None else _dtype_of(dtype), len(shapes), "C")

    def codegen(context, builder, sig, args):
        dims = _parse_shape(context, builder, sig.args[0], args[0])  # numba's checks and messages
        ary = _empty_nd_impl(context, builder, arrty, dims)
        return impl_ret_new_ref(context, builder, arrty, ary._getvalue())

    return (arrty(shape) if dtype is None else arrty(shape, dtype)), codegen


@intrinsic(py=np.full)
def full3(typingctx, shape, value, dtype):
    """``np.full(shape, value, dtype)`` of a scalar ``value``: a new C array, every item ``value``
    converted to ``dtype`` (numba's ``np.full`` stores it item by item with the same conversion)."""
    dt = _dtype_of(dtype)
    if not (_int_shape(shape) and dt is not None and isinstance(value, _SCALARS)):
        return _fallback(typingctx, np.full, (shape, value, dtype))
    shapes = list(shape) if isinstance(shape, types.BaseTuple) else [shape]
    arrty = types.Array(dt, len(shapes), "C")

    def codegen(context, builder, sig, args):
        from numba.core import cgutils
        from numba.core.imputils import impl_ret_new_ref
        from numba.np.arrayobj import _empty_nd_impl, _parse_shape, make_array, store_item

        dims = _parse_shape(context, builder, sig.args[0], args[0])
        ary = _empty_nd_impl(context, builder, arrty, dims)
        arr = make_array(arrty)(context, builder, ary._getvalue())
        item = context.cast(builder, args[1], sig.args[1], dt)
        with cgutils.for_range(builder, arr.nitems) as loop:
            store_item(context, builder, arrty, item, cgutils.gep_inbounds(builder, arr.data, loop.index))
        return impl_ret_new_ref(context, builder, arrty, ary._getvalue())

    return arrty(shape, value, dtype), codegen


@intrinsic(py=lambda a: np.array(a, order="C"))
def copy1(typingctx, a):
    """``np.copy(a)`` of an array: a new C-contiguous copy (numba's own copy code, lowered in place)."""
    if not isinstance(a, types.Array):
        return _fallback(typingctx, np.copy, (a,))
    ret = a.copy(layout="C", readonly=False)

    def codegen(context, builder, sig, args):
        from numba.np.arrayobj import _array_copy

        return _array_copy(context, builder, sig, args)

    return ret(a), codegen


@intrinsic(py=np.ascontiguousarray)
def ascontiguous1(typingctx, a):
    """``np.ascontiguousarray(a)`` of an array: numba's own code for it (the array itself when it is
    C-contiguous, checked at run time for layout 'A', else a C copy), lowered in place."""
    if not isinstance(a, types.Array):
        return _fallback(typingctx, np.ascontiguousarray, (a,))
    ret = a.copy(layout="C", ndim=max(a.ndim, 1), readonly=False)

    def codegen(context, builder, sig, args):
        from numba.np.arrayobj import _as_layout_array

        if a.layout == "A" and a.ndim > 0:
            return _as_c_layout(context, builder, sig, args)
        return _as_layout_array(context, builder, sig, args, output_layout="C")

    return ret(a), codegen


def _as_c_layout(context, builder, sig, args):
    """numba's ``_as_layout_array`` for an 'A' array and 'C' output, with the run-time contiguity
    check built in place (:func:`_is_c_contiguous`) instead of compiled as a subroutine."""
    from numba.core.imputils import impl_ret_borrowed
    from numba.np.arrayobj import _array_copy, make_array

    aryty = sig.args[0]
    ary = make_array(aryty)(context, builder, value=args[0])
    with builder.if_else(_is_c_contiguous(context, builder, aryty, ary)) as (then, orelse):
        with then:
            out_then = impl_ret_borrowed(context, builder, sig.return_type, args[0])
            then_blk = builder.block
        with orelse:
            out_orelse = _array_copy(context, builder, sig, args)
            orelse_blk = builder.block
    phi = builder.phi(out_then.type)
    phi.add_incoming(out_then, then_blk)
    phi.add_incoming(out_orelse, orelse_blk)
    return phi


def _is_c_contiguous(context, builder, aryty, ary):
    """``numba.np.numpy_support.is_contiguous(shape, strides, itemsize)`` for an array of static
    ``ndim``, as straight-line IR. numba's function skips the inner and the outer axes of length
    <= 1, checks the innermost remaining stride against the item size and each axis between the
    first and the last remaining one by ``strides[ax] * dims[ax] == strides[ax - 1]``. Here every
    one of those conditions is computed and kept only where it applies: the item size test at the
    last long axis, the pair test at ``ax`` when a long axis comes before ``ax`` and one at or after
    it; true when no axis is long."""
    from llvmlite import ir
    from numba.core import cgutils

    nd = aryty.ndim
    intp = context.get_value_type(types.intp)
    dims = cgutils.unpack_tuple(builder, ary.shape, nd)
    strides = cgutils.unpack_tuple(builder, ary.strides, nd)
    itemsize = ir.Constant(intp, context.get_abi_sizeof(context.get_value_type(aryty.dtype)))
    true, false = cgutils.true_bit, cgutils.false_bit
    long = [builder.icmp_signed(">", d, ir.Constant(intp, 1)) for d in dims]
    before = [false]  # before[k]: some axis < k is long
    for k in range(nd):
        before.append(builder.or_(before[k], long[k]))
    after = [false] * (nd + 1)  # after[k]: some axis >= k is long
    for k in reversed(range(nd)):
        after[k] = builder.or_(after[k + 1], long[k])
    ok = true
    inner_ok = false
    for k in range(nd):
        inner = builder.and_(long[k], builder.not_(after[k + 1]))
        inner_ok = builder.or_(inner_ok, builder.and_(inner, builder.icmp_signed("==", strides[k], itemsize)))
    for ax in range(1, nd):
        applies = builder.and_(before[ax], after[ax])
        pair = builder.icmp_signed("==", builder.mul(strides[ax], dims[ax]), strides[ax - 1])
        ok = builder.and_(ok, builder.or_(builder.not_(applies), pair))
    return builder.or_(builder.not_(after[0]), builder.and_(inner_ok, ok))


def _unified(typingctx, values):
    """The type numba gives the list literal ``[*values]``'s items, or None."""
    if not isinstance(values, types.BaseTuple) or not len(values) or not all(isinstance(v, _SCALARS) for v in values):
        return None
    try:
        t = typingctx.unify_types(*values)
    except Exception:
        return None
    return t if isinstance(t, _SCALARS) else None


@intrinsic(py=lambda values, dtype: np.array(list(values), dtype))
def tuple_array(typingctx, values, dtype):
    """``np.array([v0, v1, ...], dtype)`` of scalars, written ``tuple_array((v0, v1, ...), dtype)``: a new
    1-d C array; as numba, each value converted to the list's item type, then to ``dtype``."""
    dt, item = _dtype_of(dtype), _unified(typingctx, values)
    if item is None:
        return None  # not a list numba builds (arrays, mixed types): nor could it type np.array of it
    if dt is None:
        return _list_fallback(typingctx, values, dtype, item)
    arrty = types.Array(dt, 1, "C")

    def codegen(context, builder, sig, args):
        from numba.core import cgutils
        from numba.core.imputils import impl_ret_new_ref
        from numba.np.arrayobj import _empty_nd_impl, make_array, store_item

        n = len(sig.args[0])
        ary = _empty_nd_impl(context, builder, arrty, [context.get_constant(types.intp, n)])
        data = make_array(arrty)(context, builder, ary._getvalue()).data
        for i, (v, t) in enumerate(zip(cgutils.unpack_tuple(builder, args[0], n), sig.args[0], strict=True)):
            v = context.cast(builder, context.cast(builder, v, t, item), item, dt)
            store_item(context, builder, arrty, v, cgutils.gep_inbounds(builder, data, i))
        return impl_ret_new_ref(context, builder, arrty, ary._getvalue())

    return arrty(values, dtype), codegen


def _list_fallback(typingctx, values, dtype, item):
    """``np.array([*values], dtype)`` by numba's generic code (a ``dtype`` the intrinsic doesn't read)."""
    fb = _fallback(typingctx, np.array, (types.List(item), dtype))
    if fb is None:
        return None
    retty, uni = fb[0].return_type, types.UniTuple(item, len(values))

    def impl(vals, dtype):
        return np.array(list(vals), dtype)

    def codegen(context, builder, sig, args):
        from numba.core import cgutils

        parts = cgutils.unpack_tuple(builder, args[0], len(values))
        tup = context.make_tuple(builder, uni, [context.cast(builder, v, t, item) for v, t in zip(parts, sig.args[0], strict=True)])
        return context.compile_internal(builder, impl, retty(uni, sig.args[1]), [tup, args[1]])

    return retty(values, dtype), codegen


#: (numpy function, number of arguments) -> name of its replacement in a rewritten source
_TARGET = {("asarray", 1): "_pm_asarray1", ("ascontiguousarray", 1): "_pm_ascontiguous1", ("array", 1): "_pm_array1", ("array", 2): "_pm_array2",
           ("empty", 1): "_pm_empty1", ("empty", 2): "_pm_empty2", ("full", 3): "_pm_full3", ("copy", 1): "_pm_copy1"}
#: name in a rewritten source -> the intrinsic it stands for
NAMES = {"_pm_tuple_array": tuple_array, "_pm_asarray1": asarray1, "_pm_ascontiguous1": ascontiguous1, "_pm_array1": array1, "_pm_array2": array2, "_pm_empty1": empty1, "_pm_empty2": empty2, "_pm_full3": full3, "_pm_copy1": copy1}
_CALL = re.compile(r"\bnp\.(asarray|array|empty|full|copy|ascontiguousarray)\b")


def _calls(src: str):
    """``[(start, end, replacement)]`` (character offsets) for the calls of ``src`` to replace, or None
    if one can't be (more arguments than ``(a, dtype)``, ``*args``, another keyword)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    lines = src.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno, col):  # ast columns are UTF-8 byte offsets; generated sources are ASCII
        return starts[lineno - 1] + col

    out = []
    for node in ast.walk(tree):
        f = node.func if isinstance(node, ast.Call) else None
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "np"):
            continue
        if f.attr not in ("asarray", "array", "empty", "full", "copy", "ascontiguousarray"):
            continue
        args = list(node.args)
        if any(isinstance(a, ast.Starred) for a in args) or any(k.arg != "dtype" for k in node.keywords):
            return None
        args += [k.value for k in node.keywords]
        name = _TARGET.get((f.attr, len(args)))
        if name is None:
            return None
        parts = [ast.get_source_segment(src, a) for a in args]
        if any(p is None for p in parts):
            return None
        if f.attr == "array" and len(args) == 2 and isinstance(args[0], ast.List):
            if not args[0].elts or any(isinstance(e, ast.Starred) for e in args[0].elts):
                return None
            elts = [ast.get_source_segment(src, e) for e in args[0].elts]
            if any(e is None for e in elts):
                return None
            name, parts = "_pm_tuple_array", ["(" + "".join(f"{e}, " for e in elts) + ")", parts[1]]
        start = offset(node.lineno, node.col_offset)
        end = offset(node.end_lineno, node.end_col_offset)
        out.append((start, end, f"{name}({', '.join(parts)})"))
    return out


def rewrite_source(src: str, global_env: dict | None) -> str:
    """``src`` with its ``np.asarray(a)``, ``np.array(a[, dtype])`` and ``np.empty(shape[, dtype])``
    calls pointed at this module's intrinsics (their names added to ``global_env``), or ``src``
    unchanged when its ``np`` is not numpy, one of the names is taken, a call passes other
    arguments, or calls are nested in each other's arguments."""
    if global_env is None or global_env.get("np") is not np or not src.isascii() or not _CALL.search(src):
        return src
    if any(name in src or global_env.get(name, fn) is not fn for name, fn in NAMES.items()):
        return src
    calls = _calls(src)
    if not calls or len(calls) != len(_CALL.findall(src)):
        return src
    calls.sort()
    if any(a[1] > b[0] for a, b in zip(calls, calls[1:])):
        return src
    pieces, pos = [], 0
    for start, end, text in calls:
        pieces += [src[pos:start], text]
        pos = end
    global_env.update(NAMES)
    return "".join(pieces) + src[pos:]


__all__ = ["NAMES", "VERSION", "tuple_array", "array1", "array2", "asarray1", "ascontiguous1", "empty1", "empty2", "full3", "copy1", "rewrite_source"]
