"""pmfast's numba implementation of ``Subtensor`` and ``IncSubtensor`` with constant indices, and ``Alloc``.

``x[2:]``, ``x[:, 1]``, ``x[::-1, 0]``, ``z[1:3, 0] += y``: basic indexing whose integers and slice
bounds are all graph constants (pytensor's rewrites make most of a model's indices so: a point's
slices, a Cholesky factor's entries, a VAR's lags). pytensor's node function builds a tuple of
``slice`` objects and indexes with it: numba lowers its generic slice normalisation (the ``None``
defaults, the clamps, the length's division) per axis at every call site, and ``z[idx] += y`` as a
view, a broadcasting ufunc into it and a copy back (bayesian_sem_workflow's entries: ~20% of the
LLVM instructions they emit). Here the indices are read from the graph when the node function is
generated and handed to two intrinsics as a string literal (:func:`spec`):

* :func:`view` makes ``x[spec]`` with only what depends on the axis lengths left to run time: the
  clamps of a constant bound (Python's slice rules for its sign and the step's), the length, a
  negative integer's wrap-around and its bounds check (``IndexError``, numba's message, as
  pytensor's node function compiled with ``boundscheck=True`` raises). The view has numba's type for
  that indexing (:func:`result_type`, numba's own rules) and borrows ``x``'s memory.
* :func:`update` writes ``y`` into such a view (``set``) or adds it (``inc``), broadcasting ``y`` as
  numpy does (leading axes added, length-1 axes repeated; other lengths: ``ValueError``): the loop
  numba's setitem and in-place add run, in C order, without their temporaries.

``Alloc`` fills its new array with :func:`update` too (:func:`alloc_funcify`: pytensor's checks and
allocation, then the broadcast copy numba's ``res[...] = val`` lowers generically), and so does a
``Join`` of arrays (:mod:`pmfast.compiler.join`).

Results, dtypes, shapes and views are stock's (tests compare with pytensor's NUMBA mode, negative
steps, out-of-range bounds and empty results included). Forms declined (pytensor's code stays): a
non-constant index, a step of 0, a 0-d result (the entry's scalars handle ``x[i]``), an
``IncSubtensor`` whose ``y`` has another dtype than ``x`` or is not a number array.
"""

from __future__ import annotations

import numpy as np
from numba.core import cgutils, types
from numba.np.arrayobj import make_array

from pmfast.compiler import generated, native
from pmfast.compiler.pure import intrinsic

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

#: numba's message for an integer index out of range (``boundscheck=True``).
BOUNDS_MSG = "index is out of bounds"
#: The message of a ``y`` that does not broadcast to the indexed view.
SHAPE_MSG = "IncSubtensor: y does not broadcast to the indexed shape"


def _int(c) -> int | None:
    """The Python int a scalar integer graph constant holds, or None."""
    a = np.asarray(getattr(c, "data", None))
    if a.ndim != 0 or a.dtype.kind not in "iu":
        return None
    return int(a)


def spec(node, n_skip: int) -> str | None:
    """The index of a ``Subtensor``/``IncSubtensor`` ``node`` as a literal, or None if not all constant.

    One item per index entry, ``;``-separated: ``i<k>`` an integer, ``s<start>:<stop>:<step>`` a
    slice (``_`` for ``None``). ``n_skip``: inputs before the indices (1: ``x``; 2: ``x, y``).
    """
    from pytensor.graph.basic import Constant
    from pytensor.graph.type import Type

    idx = iter(node.inputs[n_skip:])
    items = []

    def value(entry):
        if entry is None:
            return "_"
        if not isinstance(entry, Type):
            return None
        c = next(idx, None)
        if not isinstance(c, Constant):
            return None
        v = _int(c)
        return None if v is None else str(v)

    for entry in node.op.idx_list:
        if isinstance(entry, slice):
            parts = [value(e) for e in (entry.start, entry.stop, entry.step)]
            if any(p is None for p in parts) or parts[2] == "0":
                return None
            items.append("s" + ":".join(parts))
        else:
            v = value(entry)
            if v is None or v == "_":
                return None
            items.append("i" + v)
    if next(idx, None) is not None:
        return None
    return ";".join(items)


def parse(literal: str) -> list:
    """``[("i", k) | ("s", start, stop, step)]`` from a :func:`spec` literal (``None`` for ``_``)."""
    out = []
    for item in literal.split(";") if literal else ():
        if item[0] == "i":
            out.append(("i", int(item[1:])))
        else:
            out.append(("s", *(None if p == "_" else int(p) for p in item[1:].split(":"))))
    return out


def result_type(x, items):
    """numba's type of the view ``x[items]`` (its own rules: a step other than 1 breaks contiguity; one
    element: a 0-d view), or None."""
    from numba.core.typing.arraydecl import get_array_index_type

    idx = [types.intp if it[0] == "i" else (types.slice2_type if it[3] in (None, 1) else types.slice3_type) for it in items]
    if len(items) > x.ndim:
        return None
    if len(items) == x.ndim and all(it[0] == "i" for it in items):
        return x.copy(ndim=0, layout="C")  # one element's 0-d view (an IncSubtensor's target)
    res = get_array_index_type(x, types.Tuple(idx) if len(idx) != 1 else idx[0])
    if res is None or not isinstance(res.result, types.Array):
        return None
    return res.result


def _view_codegen(context, builder, xty, value, items, outty, arg=None):
    """The view ``x[items]`` (an array struct of type ``outty`` borrowing ``x``'s memory). ``arg(v)``
    gives an index or bound value's (LLVM intp, known non-negative) (default: ``v`` a literal int;
    :mod:`pmfast.compiler.node_dedup` reads some from arguments); steps are literal ints."""
    meminfo, parent, itemsize, xdata, shapes, strides = native.array_fields(builder, value, xty.ndim)
    intp = cgutils.intp_t
    zero = intp(0)
    offset = zero
    out_shape, out_strides = [], []

    def smin(a, b):
        return builder.select(builder.icmp_signed("<", a, b), a, b)

    def smax(a, b):
        return builder.select(builder.icmp_signed(">", a, b), a, b)

    if arg is None:
        def arg(v):
            return intp(v), v >= 0

    for axis, it in enumerate(items):
        n, stride = shapes[axis], strides[axis]
        if it[0] == "i":
            c, nonneg = arg(it[1])
            k = c if nonneg else builder.add(n, c)
            bad = builder.or_(builder.icmp_signed("<", k, zero), builder.icmp_signed(">=", k, n))
            with builder.if_then(bad, likely=False):
                context.call_conv.return_user_exc(builder, IndexError, (BOUNDS_MSG,))
            offset = builder.add(offset, builder.mul(k, stride))
            continue
        _, start, stop, step = it
        step = 1 if step is None else step
        if step > 0:
            lo, hi = zero, n
        else:
            lo, hi = intp(-1), builder.sub(n, intp(1))

        def bound(c, default):
            if c is None:
                return default
            c, nonneg = arg(c)
            if nonneg:
                return smin(c, hi)
            return smax(builder.add(n, c), lo)

        a = bound(start, zero if step > 0 else hi)
        b = bound(stop, n if step > 0 else intp(-1))
        # Python's slice length: ceil((b - a) / step) when positive, else 0
        span = builder.sub(b, a) if step > 0 else builder.sub(a, b)
        mag = abs(step)
        length = span if mag == 1 else builder.sdiv(builder.add(span, intp(mag - 1)), intp(mag))
        length = smax(length, zero)
        offset = builder.add(offset, builder.mul(a, stride))
        out_shape.append(length)
        out_strides.append(stride if step == 1 else builder.mul(stride, intp(step)))
    out_shape += shapes[len(items):]
    out_strides += strides[len(items):]
    data = builder.inttoptr(builder.add(builder.ptrtoint(xdata, intp), offset), xdata.type)
    return native.array_value(context, builder, outty, meminfo, parent, itemsize, data, out_shape, out_strides)


@intrinsic(prefer_literal=True)
def view(typingctx, x, literal):
    """``view(x, spec)``: ``x[spec]`` for a :func:`spec` literal, a view with numba's type for it."""
    if not (isinstance(x, types.Array) and isinstance(literal, types.StringLiteral)):
        return None
    items = parse(literal.literal_value)
    outty = result_type(x, items)
    if outty is None:
        return None

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_borrowed

        return impl_ret_borrowed(context, builder, outty, _view_codegen(context, builder, x, args[0], items, outty))

    return outty(x, literal), codegen


def _py_index(literal):
    return tuple(it[1] if it[0] == "i" else slice(*it[1:]) for it in parse(literal))


@view.python
def _(x, literal):
    return x[(*_py_index(literal), ...)]  # with the Ellipsis one element is a 0-d view, as compiled


@intrinsic(prefer_literal=True)
def update(typingctx, v, y, inc):
    """``update(v, y, inc)``: ``v[...] += y`` (``inc`` a literal True) or ``v[...] = y``, ``y`` an array
    (0-d included) of ``v``'s dtype broadcast as numpy does; returns nothing."""
    if not (isinstance(v, types.Array) and isinstance(inc, types.BooleanLiteral)):
        return None
    scalar = isinstance(y, (types.Integer, types.Float))
    if not (scalar or isinstance(y, types.Array)):
        return None
    if (y if scalar else y.dtype) != v.dtype or (not scalar and y.ndim > v.ndim) or not isinstance(v.dtype, (types.Integer, types.Float)) or not v.mutable:
        return None
    add = inc.literal_value

    def codegen(context, builder, sig, args):
        intp = cgutils.intp_t
        va = make_array(v)(context, builder, args[0])
        vshape = cgutils.unpack_tuple(builder, va.shape, v.ndim)
        vstrides = cgutils.unpack_tuple(builder, va.strides, v.ndim)
        yndim = 0 if scalar else y.ndim
        if not scalar:
            ya = make_array(y)(context, builder, args[1])
            yshape = cgutils.unpack_tuple(builder, ya.shape, y.ndim)
            ystrides = cgutils.unpack_tuple(builder, ya.strides, y.ndim)
        lead = v.ndim - yndim
        bstrides = [intp(0)] * lead
        one = intp(1)
        for k in range(yndim):
            ys, vs = yshape[k], vshape[lead + k]
            same = builder.icmp_signed("==", ys, vs)
            ok = builder.or_(same, builder.icmp_signed("==", ys, one))
            with builder.if_then(builder.not_(ok), likely=False):
                context.call_conv.return_user_exc(builder, ValueError, (SHAPE_MSG,))
            bstrides.append(builder.select(same, ystrides[k], intp(0)))
        bshape = vshape  # y's index along a broadcast axis is always 0 (stride 0)
        fixed = None
        if scalar:
            fixed = args[1]
        elif y.ndim == 0:
            fixed = builder.load(ya.data)
        with cgutils.loop_nest(builder, vshape, intp) as idx:
            vp = cgutils.get_item_pointer2(context, builder, va.data, vshape, vstrides, v.layout, idx)
            if fixed is None:
                yp = cgutils.get_item_pointer2(context, builder, ya.data, bshape, bstrides, "A", idx)
                val = builder.load(yp)
            else:
                val = fixed
            if add:
                old = builder.load(vp)
                val = builder.fadd(old, val) if isinstance(v.dtype, types.Float) else builder.add(old, val)
            builder.store(val, vp)
        return context.get_dummy_value()

    return types.none(v, y, inc), codegen


@update.python
def _(v, y, inc):
    if inc:
        v[...] += y
    else:
        v[...] = y


def _sub_source(n_idx: int) -> str:
    args = "".join(f", idx_{k}" for k in range(n_idx))
    return f"def subtensor(x{args}):\n    return _pm_view(x, SPEC)\n"


def _inc_source(n_idx: int, inplace: bool, set_: bool) -> str:
    args = "".join(f", idx_{k}" for k in range(n_idx))
    name = "set_subtensor" if set_ else "inc_subtensor"
    first = "z = x" if inplace else "z = _pm_copy1(x)"
    return f"def {name}(x, y{args}):\n    {first}\n    _pm_update(_pm_view(z, SPEC), y, {not set_})\n    return z\n"


def alloc_source(node) -> str:
    """pytensor's ``Alloc`` node function (the shape's items, its run-time broadcast checks, ``np.empty``)
    with the fill ``res[...] = val`` written by :func:`update`."""
    from pytensor.tensor.basic import Alloc

    n = len(node.inputs) - 1
    lines = [f"sh{k}_item = sh{k}.item()" for k in range(n)]
    lines.append(f"scalar_shape = ({''.join(f'sh{k}_item, ' for k in range(n))})")
    for i, static in enumerate(node.inputs[0].type.shape[::-1]):
        if static is None:
            lines.append(f"if val.shape[{-i - 1}] == 1 and scalar_shape[{-i - 1}] != 1:")
            lines.append(f"    raise ValueError({Alloc._runtime_broadcast_error_msg!r})")
    lines += ["res = _pm_empty(scalar_shape, _pm_dtype)", "_pm_update(res, val, False)", "return res"]
    args = "".join(f", sh{k}" for k in range(n))
    return f"def alloc(val{args}):\n" + "".join(f"    {line}\n" for line in lines)


def alloc_funcify(op, node):
    """``(numba function, cache key)`` for an ``Alloc`` of a number dtype, or None.

    pytensor's fill ``res[...] = val`` is numba's broadcasting setitem (~350-480 LLVM instructions
    per call site: bayesian_var_ireland's entries have six); :func:`update` does the same
    broadcast and copy. The checks and the allocation are pytensor's.
    """
    from pmfast.compiler import arrays

    val, *shape = node.inputs
    dtype = np.dtype(node.outputs[0].type.dtype)
    if val.type.dtype != dtype or dtype.kind not in "iuf" or val.type.ndim > len(shape):
        return None
    src = alloc_source(node)
    env = {"_pm_empty": arrays.empty2, "_pm_dtype": dtype.type, "_pm_update": update}
    return generated.build(__name__, "alloc", src, env, "pmfast_alloc_", (VERSION, src, dtype.str, arrays.VERSION))


def funcify(op, node):
    """``(numba function, cache key)`` for a ``Subtensor``/``IncSubtensor`` node with constant indices, or None."""
    from pytensor.tensor.subtensor import IncSubtensor, Subtensor

    from pmfast.compiler import arrays

    (out,) = node.outputs
    if out.type.ndim == 0:
        return None
    if type(op) is Subtensor:
        literal = spec(node, 1)
        if literal is None:
            return None
        src = _sub_source(len(node.inputs) - 1)
    elif type(op) is IncSubtensor:
        x, y = node.inputs[:2]
        if y.type.dtype != x.type.dtype or np.dtype(x.type.dtype).kind not in "iuf":
            return None
        literal = spec(node, 2)
        if literal is None:
            return None
        src = _inc_source(len(node.inputs) - 2, bool(op.inplace), bool(op.set_instead_of_inc))
    else:
        return None
    name = src.split("(")[0][4:]
    env = {"_pm_view": view, "_pm_update": update, "_pm_copy1": arrays.copy1, "SPEC": literal}
    return generated.build(__name__, name, src, env, f"pmfast_{name}_", (VERSION, src, literal, arrays.VERSION))

