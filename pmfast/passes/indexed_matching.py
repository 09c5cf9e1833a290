"""Matching for ``indexed_elemwise``: which scatters and full reductions of an Elemwise's outputs
the loop absorbs, and :func:`build_fused`, which turns the node with its gathers
(:mod:`pmfast.passes.indexed_gathers`), scatters and reductions into one
:class:`~pmfast.loops.op.IndexedElemwise` node; :func:`squeezed` for ``(n, 1)`` columns. The
switches and caps the matching reads (``FUSE_SUM``, ``MAX_NDIM``, ``MAX_ARGS``) live here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytensor.scalar as ps
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.tensor.basic import MakeVector
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import All, Any, Sum
from pytensor.tensor.shape import Reshape
from pytensor.tensor.subtensor import AdvancedIncSubtensor

from pmfast.compiler.arity import MAX_ARITY
from pmfast.loops.dispatch import calls_math, will_vectorize
from pmfast.loops.op import IndexedElemwise
from pmfast.loops.spec import ALL, ANY, INC, REDUCTIONS, SET, STORE, SUM, Gather, IndexedLoop, Read, Write
from pmfast.passes.indexed_gathers import (
    _INC_OPS,
    _NUMERIC,
    _flattened_index,
    _gather_read,
    _indexed_axes,
    _indices_agree,
    _is_shape_of,
    _layout,
    _Lengths,
    _walk_views,
    shape_keys,
)

#: Also absorb a ``Sum`` (over all axes) of a fused output into the
#: loop as a ``"sum"`` write (a 0-d accumulator), and an ``All`` / ``Any`` of a
#: boolean output (pymc's parameter checks) as an ``"all"`` / ``"any"`` write,
#: so that output is never materialised. Switch off to measure the pass without it.
FUSE_SUM = True

#: Largest Elemwise ndim fused (one nested loop per dim).
MAX_NDIM = 4

#: Widest fused node: node inputs, node outputs and scalar inputs each at most
#: this. Past 30 items CPython compiles a call/tuple as BUILD_LIST + appends,
#: which numba types in O(n^2) (DESIGN.md); measured here with 40 gathered
#: terms and their scatters in one loop (121 node inputs): compile 16 s stock ->
#: 165 s fused. A too-wide node is retried without its scatters, then declined
#: (wide nodes are ``wide_split``'s business).
MAX_ARGS = MAX_ARITY


def _loop_dims_of(y, out):
    """Loop dim of each axis of ``y``, a ``DimShuffle`` chain of the node output ``out`` (no new axes)."""
    base, entries = _walk_views(y, list(range(y.type.ndim))) or (None, None)
    if base is not out or None in entries:
        return None
    dims = [None] * y.type.ndim
    for d, ya in enumerate(entries):
        dims[ya] = d
    return None if None in dims else dims


@dataclass(frozen=True)
class _Scatter:
    """A scatter of a node output into ``buffer`` as the loop can do it."""

    mode: str
    buffer: object
    axes: tuple  # per buffer axis: loop dim or Gather of an index variable
    proofs: tuple  # (loop dim, variable, axis): lengths that must be proven equal
    in_loop_order: bool  # y's axes follow the loop dims (needed for set: same write order as stock)
    index_vars: tuple
    loose: bool = False  # index lengths not proven equal: the node must gather through the same indices


def _scatter_of(fgraph, client, out, ndim: int) -> _Scatter | None:
    """How ``client`` (an ``AdvancedIncSubtensor1`` / ``AdvancedIncSubtensor``) scatters ``out``, or ``None``."""
    op = client.op
    if not isinstance(op, _INC_OPS) or op.inplace:
        return None
    if isinstance(op, AdvancedIncSubtensor) and op.ignore_duplicates and not op.set_instead_of_inc:
        return None
    mode = SET if op.set_instead_of_inc else INC
    buf, y, *indices = client.inputs
    flat = _flattened_index(indices[0]) if len(indices) == 1 else None
    if flat is not None and buf.type.ndim == 1 and flat.type.ndim == ndim:
        # grad of v[I] for an ND index I: inc_subtensor(zeros[I.reshape(-1)], g.reshape(-1))
        if y.owner is None or not isinstance(y.owner.op, Reshape) or y.owner.inputs[0] is not out:
            return None
        if not _is_flattening_shape(y.owner.inputs[1], flat):
            return None
        axes = (Gather(flat, tuple(range(ndim))),)
        proofs = tuple((d, flat, d) for d in range(ndim))
        return _Scatter(mode, buf, axes, proofs, True, (flat,))
    dims = _loop_dims_of(y, out)
    layout = _layout(buf.type.ndim, indices)
    if dims is None or layout is None or len(layout.out) != len(dims):
        return None
    loose = not _indices_agree(fgraph, layout)
    axes = _indexed_axes(layout, buf.type.ndim, dims, loose)
    if axes is None:
        return None
    proofs = []
    for d, (kind, k) in zip(dims, layout.out):
        pairs = [(buf, k)] if kind == "s" else layout.aligned(k)
        if not pairs:
            return None  # every index broadcasts there: y would be broadcast into the region
        if kind == "s" or not loose:
            proofs.append((d, *pairs[0]))
    index_vars = tuple(i for _, i in layout.arrays)
    return _Scatter(mode, buf, tuple(axes), tuple(proofs), dims == sorted(dims), index_vars, loose)


def _is_flattening_shape(shp, idx) -> bool:
    """``shp`` is ``[-1]`` or ``[prod(idx.shape)]`` (as pytensor builds it): a flattening of ``idx``'s shape."""
    if isinstance(shp, Constant):
        return np.array_equal(np.asarray(shp.data), [-1])
    node = shp.owner
    if node is None or not isinstance(node.op, MakeVector) or len(node.inputs) != 1:
        return False
    prod = node.inputs[0]
    op = getattr(prod.owner, "op", None)
    factors = prod.owner.inputs if isinstance(op, Elemwise) and isinstance(op.scalar_op, ps.Mul) else [prod]
    return len(factors) == idx.type.ndim and all(_is_shape_of(f, idx, j) for j, f in enumerate(factors))


def _via_views(fgraph, out, client, i):
    """The inc node that ``client`` (consuming ``out`` at input ``i``) leads to as its ``y``:
    directly or through single-client ``DimShuffle`` s / one flattening ``Reshape``."""
    v, node = out, client
    outputs = set(fgraph.outputs)
    while True:
        if isinstance(node.op, _INC_OPS):
            return node if i == 1 and node.inputs[1] is v else None
        if not isinstance(node.op, DimShuffle | Reshape) or i != 0:
            return None
        v = node.outputs[0]
        cl = fgraph.clients.get(v, [])
        if v in outputs or len(cl) != 1:
            return None
        node, i = cl[0]


def _y_output(y, node_outputs):
    """The node output ``y`` is a view chain of, or ``None``."""
    while y not in node_outputs:
        if y.owner is None or not isinstance(y.owner.op, DimShuffle | Reshape):
            return None
        y = y.owner.inputs[0]
    return y


def _depends_on(vars_, node) -> bool:
    outs = set(node.outputs)
    return any(a in outs for a in ancestors(vars_))


def _is_full_sum(client, out) -> bool:
    """``client`` is ``Sum`` over all of the float ``out``, accumulating in ``out``'s dtype."""
    c_op = getattr(client, "op", None)
    if not isinstance(c_op, Sum) or client.inputs[0] is not out:
        return False
    if c_op.axis is not None and sorted(c_op.axis) != list(range(out.type.ndim)):
        return False
    dt = out.type.dtype
    return (
        np.dtype(dt).kind == "f"
        and c_op.dtype == dt
        and c_op.acc_dtype == dt
        and client.outputs[0].type.dtype == dt
        and client.outputs[0].type.ndim == 0
    )


def _full_bool_reduction(client, out):
    """``ALL`` / ``ANY`` if ``client`` is ``All`` / ``Any`` over all of the boolean ``out``, else ``None``."""
    c_op = getattr(client, "op", None)
    if not isinstance(c_op, All | Any) or client.inputs[0] is not out:
        return None
    if c_op.axis is not None and sorted(c_op.axis) != list(range(out.type.ndim)):
        return None
    if out.type.dtype != "bool" or client.outputs[0].type.dtype != "bool" or client.outputs[0].type.ndim != 0:
        return None
    return ALL if isinstance(c_op, All) else ANY


def _nan_marked(op) -> bool:
    """Does the Elemwise's body call pmfast.vmath's sin or cos? Their ``VmathElemwise`` recomputes a
    result holding a NaN with libm (huge arguments); a fused loop would not: such nodes stay as they are."""
    from pmfast.vmath.ops import NAN_MARKED, kernels

    return bool(kernels(op.scalar_op) & NAN_MARKED)


def build_fused(fgraph, node, vectorize_all: bool = False):
    """Return ``(replacements, new_node)`` for an Elemwise ``node``, or ``None`` to decline.
    ``vectorize_all``: also a 1-d node that gathers and scatters nothing, if its body vectorizes
    (:func:`will_vectorize`) or calls math functions (:func:`calls_math`)."""
    res = _build_fused(fgraph, node, scatters=True, vectorize_all=vectorize_all)
    if res is _TOO_WIDE:
        res = _build_fused(fgraph, node, scatters=False, vectorize_all=vectorize_all)
    return None if res is _TOO_WIDE else res


_TOO_WIDE = object()


def _build_fused(fgraph, node, scatters: bool, vectorize_all: bool = False):
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern or _nan_marked(op):
        return None
    ndim = node.outputs[0].type.ndim
    if ndim < 1 or ndim > MAX_NDIM or any(v.type.ndim != ndim for v in (*node.inputs, *node.outputs)):
        return None
    if any(np.dtype(v.type.dtype).kind not in _NUMERIC for v in (*node.inputs, *node.outputs)):
        return None

    new_inputs: list = []
    positions: dict = {}

    def pos(var):
        if var not in positions:
            positions[var] = len(new_inputs)
            new_inputs.append(var)
        return positions[var]

    def at_positions(axes):
        return tuple(replace(a, index=pos(a.index)) if isinstance(a, Gather) else a for a in axes)

    reads = []
    read_vars = set()
    loose_reads = set()  # the Gathers of each read through indices of unproven equal lengths
    n_gathers = 0
    for inp in node.inputs:
        g = _gather_read(fgraph, inp)
        if g is not None:
            src, axes = g
            reads.append(Read(pos(src), at_positions(axes)))
            read_vars.add(src)
            gathers = frozenset(a for a in axes if isinstance(a, Gather))
            read_vars.update(a.index for a in gathers)
            if any(a.loose for a in gathers):
                loose_reads.add(gathers)
            n_gathers += 1
        else:
            reads.append(Read(pos(inp), tuple(None if b else d for d, b in enumerate(inp.type.broadcastable))))
            read_vars.add(inp)

    clients = fgraph.clients
    outputs_set = set(fgraph.outputs)
    node_outputs = list(node.outputs)
    lengths = _Lengths(fgraph, node)

    def scatter_ok(client, out, target) -> _Scatter | None:
        """The scatter ``client`` of ``out`` into ``target``, if the loop can do it."""
        sc = _scatter_of(fgraph, client, out, ndim)
        if (
            sc is None
            or client.inputs[0] is not target
            or target is out
            or any(out.type.broadcastable)
            or target.type.dtype != out.type.dtype
            or client.outputs[0].type.dtype != target.type.dtype
            or (sc.mode == SET and not sc.in_loop_order)
            # loose indices: the node's gather through the same indices pins their broadcast
            # length to the loop's (stock's Elemwise checks it), so y is never broadcast
            or (sc.loose and frozenset(a for a in sc.axes if isinstance(a, Gather)) not in loose_reads)
            or _depends_on(list(sc.index_vars), node)
        ):
            return None
        return sc if all(lengths.equal(d, v, a) for d, v, a in sc.proofs) else None

    def chain_of(first):
        """Further ``inc`` scatters of this node's outputs into ``first``'s result, in order."""
        chain = []
        cur = first
        while not cur.op.set_instead_of_inc:
            cl = clients.get(cur.outputs[0], [])
            if len(cl) != 1 or cur.outputs[0] in outputs_set:
                break
            nxt, i = cl[0]
            if i != 0 or not isinstance(getattr(nxt, "op", None), _INC_OPS) or nxt.op.set_instead_of_inc:
                break
            out2 = _y_output(nxt.inputs[1], node_outputs)
            sc = None if out2 is None else scatter_ok(nxt, out2, cur.outputs[0])
            if sc is None:
                break
            chain.append((node_outputs.index(out2), nxt, sc))
            cur = nxt
        return chain

    # first pass: the scatters done in the loop (and the chained ones they absorb)
    primaries: dict = {}  # inc node -> (its _Scatter, chain)
    chained = set()
    for out in node.outputs if scatters else ():
        for client, i in clients.get(out, []):
            inc = _via_views(fgraph, out, client, i)
            if inc is None or inc in primaries:
                continue
            sc = scatter_ok(inc, out, inc.inputs[0])
            if sc is not None and inc.inputs[0] not in read_vars and not _depends_on([inc.inputs[0]], node):
                primaries[inc] = (sc, [])
    for inc, (sc, _) in list(primaries.items()):
        chain = [c for c in chain_of(inc) if c[1] not in primaries]
        primaries[inc] = (sc, chain)
        chained.update(c[1] for c in chain)

    writes = []
    out_types = []
    replaced = []  # old variable for each node output of the new node
    n_scatters = 0
    for k, out in enumerate(node.outputs):
        keep = out in outputs_set
        incs = []
        sums = []
        for client, i in clients.get(out, []):
            inc = _via_views(fgraph, out, client, i) if scatters else None
            if FUSE_SUM and _is_full_sum(client, out):
                sums.append((SUM, client))
            elif FUSE_SUM and _full_bool_reduction(client, out) is not None:
                sums.append((_full_bool_reduction(client, out), client))
            elif inc in primaries:
                incs.append(inc)
            elif inc in chained:
                pass  # done by its chain's first scatter
            else:
                keep = True
        if keep:
            writes.append((STORE, k, None))
            out_types.append(out.type)
            replaced.append(out)
        for red, client in sums:
            writes.append((red, k, client))
            out_types.append(client.outputs[0].type)
            replaced.append(client.outputs[0])
        for inc in incs:
            sc, chain = primaries[inc]
            last = chain[-1][1] if chain else inc
            writes.append((sc.mode, k, inc))
            out_types.append(last.outputs[0].type)
            replaced.append(last.outputs[0])
            n_scatters += 1

    if n_gathers == 0 and n_scatters == 0:
        # nothing gathered or scattered: a loop pays when it vectorizes its pmfast.vmath calls and
        # sums them in lanes, or when its body calls math functions (stock's Elemwise reaches its
        # scalar code through a call LLVM does not inline, spilling around each libm call);
        # for branch-free arithmetic stock's Elemwise + vectorized Sum is as good
        if not (vectorize_all and ndim == 1 and ((will_vectorize(op.scalar_op) and _long_enough(node)) or _math_loop(node))):
            return None

    # index arrays may be shared with reads; buffers always get their own slot
    spec_writes = []
    for mode, k, inc in writes:
        if inc is None or mode in REDUCTIONS:
            spec_writes.append(Write(k, mode))
            continue
        sc, chain = primaries[inc]
        axes = at_positions(sc.axes)
        also = tuple((k2, at_positions(sc2.axes)) for k2, _, sc2 in chain)
        buf_pos = len(new_inputs)
        new_inputs.append(sc.buffer)
        spec_writes.append(Write(k, mode, buffer=buf_pos, axes=axes, also=also))

    if len(new_inputs) > MAX_ARGS or len(spec_writes) > MAX_ARGS or len(reads) > MAX_ARGS:
        return _TOO_WIDE
    loop = IndexedLoop(op.scalar_op, tuple(reads), tuple(spec_writes), ndim=ndim)
    loop = replace(loop, bounds=index_bounds(loop, new_inputs), same_lengths=same_lengths(fgraph, loop, new_inputs))
    new_op = IndexedElemwise(loop, out_types)
    new_node = new_op.make_node(*new_inputs)
    for old, new in zip(replaced, new_node.outputs):
        if old.type != new.type:
            return None
    return list(zip(replaced, new_node.outputs)), new_node


def index_bounds(loop: IndexedLoop, inputs) -> tuple:
    """``(position, lo, hi)`` of every constant index array of ``loop`` (checked once per call,
    never scanned)."""
    out = []
    for p in sorted({g.index for _, _, g in loop.gathered()}):
        v = inputs[p]
        if isinstance(v, Constant) and np.asarray(v.data).size:
            data = np.asarray(v.data)
            out.append((p, int(data.min()), int(data.max())))
    return tuple(out)


def same_lengths(fgraph, loop: IndexedLoop, inputs) -> tuple:
    """Groups of the gathered ``(array, axis)`` pairs of ``loop`` whose lengths are provably equal
    (same variable, equal static lengths, the ShapeFeature, or the graph-wide :class:`EqualLengths`):
    a parameter vector and its gradient buffer share one position per index load."""
    keys = shape_keys(fgraph)
    graph = getattr(fgraph, "_pmfast_equal_lengths", None)

    def equal(a, b) -> bool:
        (va, xa), (vb, xb) = (inputs[a[0]], a[1]), (inputs[b[0]], b[1])
        if va is vb and xa == xb:
            return True
        sa, sb = va.type.shape[xa], vb.type.shape[xb]
        if sa is not None and sa == sb:
            return True
        return (keys is not None and keys.same(va, xa, vb, xb)) or (graph is not None and graph.same(va, xa, vb, xb))

    groups: list[list] = []
    for pair in dict.fromkeys((a, ax) for a, ax, _ in loop.gathered()):
        for g in groups:
            if equal(g[0], pair):
                g.append(pair)
                break
        else:
            groups.append([pair])
    return tuple(tuple(g) for g in groups if len(g) > 1)


#: A gather-free Elemwise calling libm becomes a loop only from this static length on (a length
#: that is not static, ``pm.Data``, may be short: declined): a few calls cost less than compiling
#: one more loop, and on a µs-scale model the loop's checks weigh (golf_putting's 31 erf terms
#: of ``pm.Data``: 2.12 → 2.27 µs entry).
MIN_MATH_LOOP = 32


def _long_enough(node) -> bool:
    """Is the 1-d ``node`` not known to be shorter than its body's vmath kernels need to beat libm
    (:func:`pmfast.vmath.elemwise.libm_below`: gammaln, digamma, erf)? The chunked loop runs each
    chunk's last ``n mod 8`` elements one at a time, where those kernels cost 2-5x libm; a
    ``VmathElemwise`` (what the node is now) switches to libm below that length at run time. A
    length that is not static stays a chunked loop where the body is wide (at least
    :data:`WIDE_BODY` outputs): a wide ``VmathElemwise`` body may not vectorize (the NB GLM's
    10-output body: 633 µs as one, 102 µs chunked, 242 stock); a narrow one vectorizes as a
    ``VmathElemwise`` and keeps its run-time switch to libm (golf_putting's 2-output body over its
    19 distances: 1.06x stock chunked, 0.87x not)."""
    from pmfast.vmath.elemwise import libm_below

    n = node.outputs[0].type.shape[0]
    below = libm_below(node.op.scalar_op)
    if n is None:
        return below == 0 or len(node.outputs) >= WIDE_BODY
    return n >= below


#: Outputs from which a loop body counts as wide for :func:`_long_enough`.
WIDE_BODY = 4


def _math_loop(node) -> bool:
    """Does the 1-d gather-free Elemwise ``node`` pay as a plain loop (:func:`calls_math`)?"""
    n = node.outputs[0].type.shape[0]
    return n is not None and n >= MIN_MATH_LOOP and calls_math(node.op.scalar_op)


def _fused_pairs(fgraph, node, vectorize_all: bool = False):
    """The replacement pairs of :func:`build_fused`, or ``None``."""
    res = build_fused(fgraph, node, vectorize_all)
    return None if res is None else res[0]


def squeezed(node):
    """``node``'s outputs computed by a 1-d Elemwise when all its output axes but one have static
    length 1 (``(n, 1)`` columns), as views of the 1-d results; ``None`` otherwise. Declines a body
    with vmath's sin/cos: the 1-d node is a plain ``Elemwise``, and their NaN-marked kernels are only
    right inside ``VmathElemwise``'s lowering (which recomputes NaN lanes with libm)."""
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern or _nan_marked(op):
        return None
    bc = node.outputs[0].type.broadcastable
    keep = [d for d, b in enumerate(bc) if not b]
    if len(bc) < 2 or len(keep) != 1:
        return None
    (k,) = keep
    ins = [i.dimshuffle([k] if not i.type.broadcastable[k] else ["x"]) for i in node.inputs]
    flat = Elemwise(op.scalar_op).make_node(*ins)
    pattern = ["x" if d != k else 0 for d in range(len(bc))]
    return [o.dimshuffle(pattern) for o in flat.outputs]
