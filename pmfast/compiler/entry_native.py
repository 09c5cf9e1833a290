"""Intrinsics for the entry's own glue: lowered straight to LLVM IR instead of as numba statements.

numba lowers every statement of an entry through Python code of its own, and
some of the entry's glue costs many statements (and much LLVM IR) for little:
writing the gradient's pieces into nutpie's buffer (a ``for`` loop per piece:
an iterator, a range, an indexed load and store per element), storing a
scalar in a stack slot and taking a view of it (a ``setitem`` and a slice),
and the lane-parallel vector sum (:mod:`pmfast.compiler.scalars`: inlined at each
call site, ~70 statements with 9 indexed loads and 10 loop-carried
variables). Each intrinsic here does the same loads, stores and float
operations, in the same order, in a few LLVM instructions built once per
call site. Their ``fadd``s get the entry's fast-math flags like the
statements' (numba sets them on the whole module), so the arithmetic is
unchanged.

A separate module from :mod:`pmfast.compiler.native`, whose source keys the
model-independent sampler callbacks (changing it would recompile those on
every machine).
"""

from __future__ import annotations

import operator

from llvmlite import ir
from numba.core import cgutils, types
from numba.np.arrayobj import load_item, make_array, populate_array, store_item

from pmfast.compiler.pure import intrinsic

#: Partial sums of :func:`lane_sum` (the order of its additions depends on it).
LANES = 32
#: Widths of :func:`lane_sum`'s block loops, in order: whole blocks of 32 into the 32 partial sums,
#: then whole blocks of 8 of what is left into the first 8 (a short vector still sums in 8 chains).
BLOCKS = (LANES, 8)
#: Lanes per LLVM vector in :func:`lane_sum` on a contiguous array (lane ``l`` of vector ``j`` is partial sum ``8 j + l``).
VECTOR = 8


def combine(s: list, add=operator.add):
    """The partial sums ``s`` added in :func:`lane_sum`'s fixed order: its blocks of :data:`VECTOR`
    lane by lane, pairwise (``(b0 + b1) + (b2 + b3)``), then the lanes pairwise
    (``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``)."""
    blocks = [s[k : k + VECTOR] for k in range(0, len(s), VECTOR)]
    while len(blocks) > 1:
        blocks = [[add(p, q) for p, q in zip(blocks[k], blocks[k + 1])] for k in range(0, len(blocks), 2)]
    lanes = blocks[0]
    while len(lanes) > 1:
        lanes = [add(lanes[k], lanes[k + 1]) for k in range(0, len(lanes), 2)]
    return lanes[0]


def _element_pointer(context, builder, arrty, ary, index):
    """Pointer to element ``index`` of the 1-d array ``ary`` (no wraparound: ``index`` is in range)."""
    return cgutils.get_item_pointer2(
        context,
        builder,
        data=ary.data,
        shape=cgutils.unpack_tuple(builder, ary.shape, 1),
        strides=cgutils.unpack_tuple(builder, ary.strides, 1),
        layout=arrty.layout,
        inds=[index],
        wraparound=False,
    )


def _is_contiguous_1d(ty) -> bool:
    return isinstance(ty, types.Array) and ty.ndim == 1 and ty.layout == "C"


def _store_then_view(ndim: int):
    def typer(typingctx, ary, k, value):
        if not (_is_contiguous_1d(ary) and isinstance(k, types.Integer) and isinstance(value, (types.Number, types.Boolean))):
            return None
        outty = types.Array(ary.dtype, ndim, "C")

        def codegen(context, builder, sig, args):
            src = make_array(ary)(context, builder, args[0])
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = builder.gep(src.data, [index])
            store_item(context, builder, ary, context.cast(builder, args[2], sig.args[2], ary.dtype), ptr)
            out = make_array(outty)(context, builder)
            itemsize = cgutils.intp_t(context.get_abi_sizeof(context.get_data_type(ary.dtype)))
            one = [cgutils.intp_t(1)] * ndim
            populate_array(out, data=ptr, shape=one, strides=[itemsize] * ndim, itemsize=itemsize, meminfo=None)
            return out._getvalue()

        return outty(ary, k, value), codegen

    return typer


def _store_cell_py(buf, k, value):
    buf[k] = value
    return buf[k, ...]


def _store_slot_py(buf, k, value):
    buf[k] = value
    return buf[k : k + 1]


store_cell = intrinsic(_store_then_view(0), py=_store_cell_py)
store_cell.__doc__ = """``store_cell(buf, k, value)``: ``buf[k] = value``, then a 0-d view of ``buf[k]`` (``buf``: contiguous 1-d, no meminfo)."""
store_slot = intrinsic(_store_then_view(1), py=_store_slot_py)
store_slot.__doc__ = """``store_slot(buf, k, value)``: ``buf[k] = value``, then ``buf[k:k + 1]`` as a view without meminfo."""


@intrinsic
def put_piece(typingctx, out, at, piece, n_out):
    """``put_piece(out, at, piece, n_out)``: copy the 1-d ``piece`` to ``out[at:at + len(piece)]``; the new offset.

    ``out`` is a raw pointer to ``n_out`` values; returns ``-1`` (and writes nothing) if the piece doesn't fit.
    Elements are converted to ``out``'s dtype as the assignment ``out[j] = piece[i]`` would.
    """
    if not (
        isinstance(out, types.CPointer)
        and isinstance(piece, types.Array)
        and piece.ndim == 1
        and isinstance(at, types.Integer)
        and isinstance(n_out, types.Integer)
    ):
        return None

    def codegen(context, builder, sig, args):
        dst, start, value, limit = args
        start = context.cast(builder, start, sig.args[1], types.intp)
        limit = context.cast(builder, limit, sig.args[3], types.intp)
        ary = make_array(piece)(context, builder, value)
        n = cgutils.unpack_tuple(builder, ary.shape, 1)[0]
        end = builder.add(start, n)
        result = cgutils.alloca_once_value(builder, cgutils.intp_t(-1))
        with builder.if_then(builder.icmp_signed("<=", end, limit), likely=True):
            with cgutils.for_range(builder, n) as loop:
                item = load_item(context, builder, piece, _element_pointer(context, builder, piece, ary, loop.index))
                item = context.cast(builder, item, piece.dtype, out.dtype)
                context.pack_value(builder, out.dtype, item, builder.gep(dst, [builder.add(start, loop.index)]))
            builder.store(end, result)
        return builder.load(result)

    return types.intp(out, at, piece, n_out), codegen


@put_piece.python
def _(out, at, piece, n_out):
    if at + len(piece) > n_out:
        return -1
    from pmfast.compiler.native import _memory

    dst = _memory(out, (n_out,), out.owner.dtype)
    dst[at : at + len(piece)] = piece
    return at + len(piece)


@intrinsic
def lane_sum(typingctx, x):
    """``lane_sum(x)``: the sum of the 1-d float64 array ``x`` in a fixed order.

    :data:`LANES` partial sums ``s[k] += x[i + k]`` over the whole blocks of
    32, then ``s[k] += x[i + k]`` for ``k < 8`` over the whole blocks of 8 left
    (:data:`BLOCKS`), combined pairwise (:func:`combine`), then the remaining
    elements added one by one. Without ``reassoc`` a vector's sum is otherwise one
    dependent chain (see :mod:`pmfast.compiler.scalars`); 32 chains keep the
    adder busy through its latency (4 vectors of 8, where 8 chains made one: ar2's
    five 4,997-element sums 0.7 µs each against stock's reassociated 0.38 µs).
    """
    if not (isinstance(x, types.Array) and x.ndim == 1 and x.dtype == types.float64):
        return None

    contiguous = x.layout == "C"

    def codegen(context, builder, sig, args):
        ary = make_array(x)(context, builder, args[0])
        n = cgutils.unpack_tuple(builder, ary.shape, 1)[0]
        f64 = ir.DoubleType()
        if contiguous:  # VECTOR lanes per register: LLVM's SLP pass leaves scalar chains scalar
            vec = ir.VectorType(f64, VECTOR)
            regs = [cgutils.alloca_once_value(builder, ir.Constant(vec, [0.0] * VECTOR)) for _ in range(LANES // VECTOR)]
        else:
            regs = [cgutils.alloca_once_value(builder, ir.Constant(f64, 0.0)) for _ in range(LANES)]
        i = cgutils.alloca_once_value(builder, cgutils.intp_t(0))

        def element(index):
            return load_item(context, builder, x, _element_pointer(context, builder, x, ary, index))

        def vector(index):
            ptr = builder.bitcast(_element_pointer(context, builder, x, ary, index), vec.as_pointer())
            return builder.load(ptr, align=8)

        for width in BLOCKS:
            lanes = cgutils.intp_t(width)
            head = builder.append_basic_block(f"lane_sum.head{width}")
            body = builder.append_basic_block(f"lane_sum.body{width}")
            done = builder.append_basic_block(f"lane_sum.done{width}")
            builder.branch(head)
            builder.position_at_end(head)
            at = builder.load(i)
            builder.cbranch(builder.icmp_signed("<=", builder.add(at, lanes), n), body, done)
            builder.position_at_end(body)
            at = builder.load(i)
            step = VECTOR if contiguous else 1
            for k in range(0, width, step):
                r = regs[k // step]
                index = builder.add(at, cgutils.intp_t(k)) if k else at
                builder.store(builder.fadd(builder.load(r), vector(index) if contiguous else element(index)), r)
            builder.store(builder.add(at, lanes), i)
            builder.branch(head)
            builder.position_at_end(done)
        if contiguous:  # the blocks' tree on whole vectors, then the lanes' (:func:`combine`)
            blocks = [builder.load(r) for r in regs]
            while len(blocks) > 1:
                blocks = [builder.fadd(blocks[k], blocks[k + 1]) for k in range(0, len(blocks), 2)]
            lanes = [builder.extract_element(blocks[0], cgutils.int32_t(k)) for k in range(VECTOR)]
            total = combine(lanes, builder.fadd)
        else:
            total = combine([builder.load(r) for r in regs], builder.fadd)
        acc = cgutils.alloca_once_value(builder, total)
        with cgutils.for_range_slice(builder, builder.load(i), n, cgutils.intp_t(1)) as (index, _):
            builder.store(builder.fadd(builder.load(acc), element(index)), acc)
        return builder.load(acc)

    return types.float64(x), codegen


@lane_sum.python
def _(x):
    s, i = [0.0] * LANES, 0
    for width in BLOCKS:
        while i + width <= len(x):
            for k in range(width):
                s[k] += float(x[i + k])
            i += width
    acc = combine(s)
    for j in range(i, len(x)):
        acc += float(x[j])
    return acc


def _put_piece_called(out, at, piece, n_out):
    if at < 0:
        return at
    return put_piece(out, at, piece, n_out)


#: ``put_piece`` as a function of its own, compiled once per machine and argument types (numba's
#: cache): an entry writing many pieces (a ``set_subtensor`` chain's, :mod:`pmfast.compiler.set_chain`)
#: calls it instead of holding a copy loop per piece for LLVM to optimise (hier_var 16 groups, 86
#: pieces: +2 to +8 CPU s of the entry's compile). A negative ``at`` (an earlier piece did not fit)
#: passes through: one check after the last piece.
put_piece_called = None


def _jit_put_piece_called():
    global put_piece_called
    if put_piece_called is None:
        import numba

        put_piece_called = numba.njit(cache=True)(_put_piece_called)
    return put_piece_called
