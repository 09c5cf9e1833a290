"""``indexed_elemwise``: fuse integer-array gathers and scatters into the Elemwise loop.

Matches an ``Elemwise`` node (typically the ``Composite`` built by
``FusionOptimizer``; ndim 1..4, not inplace, numeric dtypes) and rewrites it,
together with

* **reads**: inputs produced by integer-array indexing — ``AdvancedSubtensor1``
  (``beta[group]``), ``AdvancedSubtensor`` with integer arrays and full slices
  (``x[i, j]``, ``x[i[:, None], j]``, ``x3[:, i, j]``), the reshaped gather
  of an ND index (``v[I]``), with ``DimShuffle`` s around them (``x[:, idx]``
  is ``x.T[idx].T`` here) — the gathered array is never materialised, the
  loop reads ``x[i0, idx[i1]]`` (bounds-checked, negative indices wrap, any
  integer dtype);
* **writes**: outputs consumed (as ``y``, possibly transposed or flattened) by
  ``AdvancedIncSubtensor1`` / ``AdvancedIncSubtensor`` (``inc`` and ``set``)
  — the gradients of those reads — done in the same loop (repeated indices
  accumulate like ``np.add.at``; ``set`` writes in stock's order); chained
  ``inc`` scatters into one buffer are accumulated together; a full ``Sum``
  / ``All`` / ``Any`` of an output becomes an accumulator;

into one :class:`IndexedElemwise` op whose props are a
:class:`pmfast.loops.IndexedLoop` description and whose numba implementation is
one generated loop nest. Outputs with other clients are still materialised.

Index arrays whose lengths are not provably equal (``x[i, j]`` with two
``pm.Data`` vectors) are read ``loose``: numpy's runtime broadcasting of a
length-1 index array is kept.

Declined (the graph is left as is): partial slices, newaxis or scalars inside
the indexing, inplace Elemwise, Elemwise of ndim > 4, scatters whose ``y``
shape cannot be proven equal to the indexed region (so the stock op's
broadcasting of ``y`` is never needed), ``set`` with a transposed ``y``, dtype
changes on write, write targets that are also read by the loop or that depend
on the Elemwise itself, non-numeric dtypes. Any exception while matching is
logged at debug level and the node is skipped: the pass never breaks
compilation. See ``docs/passes/indexed_elemwise.md``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from hashlib import sha256

import numpy as np

from pmfast.loops.body import BODY_VERSION, is_vmath, op_body, vectorizable
from pmfast.loops import threads as loop_threads
from pmfast.loops.chunked import CHUNKED_VERSION, chunkable, generate_chunked, threadable
from pmfast.loops.codegen import generate_source, source_key
from pmfast.loops.spec import ALL, ANY, INC, REDUCTIONS, SET, STORE, SUM, Gather, IndexedLoop, Read, Write, evaluate
from pmfast.passes.lengths import EqualLengths
from pmfast.passes.registry import record, register_pass
from pmfast.passes.rewriting import PassRewriter, record_nodes_added

_log = logging.getLogger(__name__)

PASS_NAME = "indexed_elemwise"
#: Part of every cache key of the generated numba code.
VERSION = "indexed_elemwise-2"

import pytensor.scalar as ps  # noqa: E402
from pytensor.graph.basic import Apply, Constant  # noqa: E402
from pytensor.graph.op import Op  # noqa: E402
from pytensor.graph.rewriting.basic import (  # noqa: E402
    WalkingGraphRewriter,
    node_rewriter,
)
from pytensor.graph.traversal import ancestors  # noqa: E402
from pytensor.tensor.basic import as_tensor_variable  # noqa: E402
from pytensor.tensor.basic import MakeVector  # noqa: E402
from pytensor.tensor.elemwise import DimShuffle, Elemwise  # noqa: E402
from pytensor.tensor.math import All, Any, Sum  # noqa: E402
from pytensor.tensor.shape import Reshape, Shape_i, SpecifyShape  # noqa: E402
from pytensor.tensor.subtensor import (  # noqa: E402
    AdvancedIncSubtensor,
    AdvancedIncSubtensor1,
    AdvancedSubtensor,
    AdvancedSubtensor1,
    MakeSlice,
)
from pytensor.tensor.type import TensorType  # noqa: E402
from pytensor.tensor.type_other import SliceType  # noqa: E402


class IndexedElemwise(Op):
    """An Elemwise loop with gathered reads and scattered (inc/set) writes.

    ``loop`` is the :class:`~pmfast.loops.IndexedLoop` (node input/output
    positions); ``out_types`` the types of the node outputs, one per write.
    """

    __props__ = ("loop", "out_types")
    #: vector_math converts this loop's body to pmfast.vmath ops: codegen needs them to choose the
    #: chunked (vectorized) form, and maps them back to libm where the loop stays scalar
    vectorizes_scalar_body = True

    def __init__(self, loop: IndexedLoop, out_types):
        self.loop = loop
        self.out_types = tuple(out_types)
        if len(self.out_types) != len(loop.writes):
            raise ValueError("one output type per write")
        self.destroy_map = {
            k: [w.buffer] for k, w in enumerate(loop.writes) if w.buffer is not None and w.buffer in loop.inplace
        }

    def make_node(self, *inputs):
        inputs = [as_tensor_variable(i) for i in inputs]
        loop = self.loop
        if len(inputs) != loop.n_inputs:
            raise TypeError(f"IndexedElemwise expects {loop.n_inputs} inputs, got {len(inputs)}")
        for array, axes in loop.accesses():
            if inputs[array].type.ndim != len(axes):
                raise TypeError(f"IndexedElemwise addresses ${array} with {len(axes)} axes")
        for _, _, g in loop.gathered():
            t = inputs[g.index].type
            if t.ndim != len(g.dims) or np.dtype(t.dtype).kind not in "iu":
                raise TypeError(f"IndexedElemwise index ${g.index} must be an integer array of ndim {len(g.dims)}")
        return Apply(self, inputs, [t() for t in self.out_types])

    def perform(self, node, inputs, output_storage):
        outs = evaluate(self.loop, inputs, [t.dtype for t in self.out_types])
        for k, (w, out) in enumerate(zip(self.loop.writes, outs)):
            if w.buffer is not None and w.buffer in self.loop.inplace:
                buf = inputs[w.buffer]
                buf[...] = out
                out = buf
            output_storage[k][0] = out

    def infer_shape(self, fgraph, node, shapes):
        from pytensor.tensor.basic import constant

        from pytensor.tensor.extra_ops import broadcast_shape_iter

        loop = self.loop
        shape = []
        for d in range(loop.ndim):
            src = loop.dim_source(d)
            loose = [(shapes[p][ax],) for g in loop.loose_groups(d) for p, ax in g]
            if src is not None:
                shape.append(shapes[src[0]][src[1]])
            elif loose:
                shape.append(broadcast_shape_iter(loose, arrays_are_shapes=True)[0])
            else:
                shape.append(constant(1, dtype="int64"))
        out = []
        for w in loop.writes:
            if w.mode == STORE:
                out.append(tuple(shape))
            elif w.mode in REDUCTIONS:
                out.append(())
            else:
                out.append(tuple(shapes[w.buffer]))
        return out

    def clone_inplace(self, buffers) -> IndexedElemwise:
        loop = replace(self.loop, inplace=tuple(sorted(set(self.loop.inplace) | set(buffers))))
        return IndexedElemwise(loop, self.out_types)

    def __str__(self) -> str:
        return f"IndexedElemwise{{{self.loop.short()}}}"



try:
    from pmfast import __version__ as pmfast_version
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.basic import (
        numba_funcify_and_cache_key,
        numba_funcify_ensure_cache,
        register_funcify_and_cache_key,
    )
    import numba
    from pytensor.scalar.basic import get_scalar_type

    from pmfast.loops.stack import stack_array

    def vmath_version() -> str:
        from pmfast.vmath import VERSION as vmath_key

        return vmath_key

    def _node_fn(node, vector: bool):
        """A scalar node's numba function: pmfast.vmath's kernel itself (the cache wrapper
        pytensor puts around it is a call LLVM does not inline) in a vectorized loop, libm (the
        stock op it subclasses) in a scalar one, where the kernels are slower."""
        op = node.op
        if is_vmath(op):
            from pmfast.vmath import KERNELS
            from pmfast.vmath.ops import SUBSTITUTES

            if vector:
                return KERNELS[op.kernel]
            stock = next(b for b in type(op).__mro__ if b in SUBSTITUTES)
            op = stock(op.output_types_preference, name=op.name)
        return numba_funcify_ensure_cache(op, node=node)[0]

    def loop_body(loop, node, vector: bool = False):
        """The loop's scalar body as statements (:func:`pmfast.loops.body.op_body`) and their
        globals. ``vector``: for the chunked form (every Switch a select)."""
        in_types = [get_scalar_type(dtype=node.inputs[r.array].type.dtype) for r in loop.reads]
        nout = getattr(loop.scalar_op, "nout", 1)
        outs = [f"o{k}" for k in range(nout)]
        body = op_body(loop.scalar_op, in_types, outs, lazy=LAZY_SWITCH and not vector)
        return body, body.env(lambda n: _node_fn(n, vector))

    def loop_form(loop, node):
        """``("chunked", body, env)`` when the loop can run vectorized, else ``("plain", body, env)``."""
        if CHUNKED and chunkable(loop):
            body, env = loop_body(loop, node, vector=True)
            if vectorizable(body):
                return "chunked", body, env
        body, env = loop_body(loop, node)
        return "plain", body, env

    @register_funcify_and_cache_key(IndexedElemwise)
    def numba_funcify_IndexedElemwise(op, node, **kwargs):
        loop = op.loop
        scalar_inputs = [get_scalar_type(dtype=node.inputs[r.array].type.dtype)() for r in loop.reads]
        scalar_node = loop.scalar_op.make_node(*scalar_inputs)
        scalar_fn, scalar_key = numba_funcify_and_cache_key(loop.scalar_op, node=scalar_node, **kwargs)
        env = {"np": np, "scalar_fn": scalar_fn, "stack_array": stack_array}
        form, body = "stock", None
        try:
            form, body, body_env = loop_form(loop, node)
            env.update(body_env)
        except Exception:  # never fail compilation: call the stock scalar function
            _log.debug("indexed_elemwise: inline scalar body declined", exc_info=True)
            form, body = "stock", None
        in_dtypes = [i.type.dtype for i in node.inputs]
        out_dtypes = [o.type.dtype for o in node.outputs]
        name = "indexed_elemwise_loop"
        # The loops are compiled without fast-math flags: measured on the seed, pytensor's
        # default set (contract/afn/arcp/nsz...) slows the gather/scatter loop by ~25%, and IEEE
        # order keeps scatters and sums deterministic. The scalar functions keep their own flags.
        threads = 1
        if form == "chunked":
            body_dtypes = [o.type.dtype for o in scalar_node.outputs]
            threads = loop_threads.THREADS if threadable(loop) else 1
            sources = generate_chunked(loop, in_dtypes, out_dtypes, body, body_dtypes, name, threads)
            env["prange"] = numba.prange
            for fname, fsrc in sources[:-1]:
                f = compile_numba_function_src(fsrc, fname, env, write_to_disk=True)
                flags = {"parallel": True} if fname.endswith("_blocks") else {}
                env[fname] = numba_basic.numba_njit(f, fastmath=False, error_model="numpy", **flags)
            src = "".join(fsrc for _, fsrc in sources)
            fn = compile_numba_function_src(sources[-1][1], name, env, write_to_disk=True)
        else:
            src = generate_source(loop, in_dtypes, out_dtypes, func_name=name, body=body)
            fn = compile_numba_function_src(src, name, env, write_to_disk=True)
        jitted = numba_basic.numba_njit(fn, fastmath=False)
        if scalar_key is None:
            key = None
        else:
            key = sha256(
                str(
                    (
                        "pmfast",
                        pmfast_version,
                        VERSION,
                        "IndexedElemwise",
                        source_key(loop, in_dtypes, out_dtypes),
                        sha256(src.encode()).hexdigest(),  # a codegen change never reuses a stale loop
                        tuple(str(t) for t in op.out_types),
                        scalar_key,
                        (form, BODY_VERSION, LAZY_SWITCH, CHUNKED_VERSION, vmath_version(), threads),
                    )
                ).encode()
            ).hexdigest()
        return jitted, key

except ImportError:  # pragma: no cover - numba backend unavailable
    _log.debug("numba dispatch for IndexedElemwise not registered", exc_info=True)



_NUMERIC = "biuf"

#: Also absorb a ``Sum`` (over all axes) of a fused output into the
#: loop as a ``"sum"`` write (a 0-d accumulator), and an ``All`` / ``Any`` of a
#: boolean output (pymc's parameter checks) as an ``"all"`` / ``"any"`` write,
#: so that output is never materialised. Switch off to measure the pass without it.
FUSE_SUM = True

#: Evaluate the scalar Composite's Switch branches lazily when a branch owns an
#: expensive op (``pmfast.loops.body.scalar_body``); stock numba evaluates
#: both. Switch off to measure without it.
LAZY_SWITCH = True

#: Run 1-d loops whose body vectorizes (branch-free arithmetic and pmfast.vmath's kernels) in
#: the chunked form (:mod:`pmfast.loops.chunked`). Switch off to measure without it.
CHUNKED = True



def will_vectorize(scalar_op) -> bool:
    """Will a loop over ``scalar_op`` run in the chunked, vectorized form
    (:func:`pmfast.loops.body.vectorizable`): branch-free arithmetic and pmfast.vmath ops only, at
    least one of the latter (``vector_math``, 49.3, has run when the reduction loops are built)?"""
    if not CHUNKED:
        return False
    from pmfast.loops.body import VECTOR_SAFE_OPS, _scalar_op_name, flatten_composites, is_vmath

    ops = [n.op for n in flatten_composites(scalar_op.fgraph).apply_nodes] if hasattr(scalar_op, "fgraph") else [scalar_op]
    if not all(_scalar_op_name(op) in VECTOR_SAFE_OPS or is_vmath(op) for op in ops):
        return False
    return any(is_vmath(op) for op in ops)


#: Largest Elemwise ndim fused (one nested loop per dim).
MAX_NDIM = 4

#: Widest fused node: node inputs, node outputs and scalar inputs each at most
#: this. Past 30 items CPython compiles a call/tuple as BUILD_LIST + appends,
#: which numba types in O(n^2) (DESIGN.md); measured here with 40 gathered
#: terms and their scatters in one loop (121 node inputs): compile 16 s stock ->
#: 165 s fused. A too-wide node is retried without its scatters, then declined
#: (wide nodes are ``wide_split``'s business).
MAX_ARGS = 30

_INC_OPS = (AdvancedIncSubtensor1, AdvancedIncSubtensor)


def _is_int_array(v) -> bool:
    return isinstance(v.type, TensorType) and v.type.ndim >= 1 and np.dtype(v.type.dtype).kind in "iu"


def _is_full_slice(v) -> bool:
    if isinstance(v, Constant) and isinstance(v.type, SliceType):
        return v.data == slice(None, None, None)
    node = v.owner
    if node is not None and isinstance(node.op, MakeSlice):
        return all(isinstance(a, Constant) and a.data is None for a in node.inputs)
    return False


@dataclass(frozen=True)
class _Layout:
    """Numpy advanced indexing of an array by full slices and integer arrays.

    ``arrays``: ``(array axis, index variable)`` pairs; ``out``: per result
    axis, ``("s", array axis)`` (a sliced axis) or ``("b", k)`` (axis ``k``
    of the index arrays' broadcast shape, of ndim ``bdim``).
    """

    arrays: tuple
    out: tuple
    bdim: int

    def aligned(self, k: int):
        """``(index variable, its axis)`` pairs running along broadcast axis ``k``, not of static length 1."""
        pairs = []
        for _, idx in self.arrays:
            j = k - (self.bdim - idx.type.ndim)
            if j >= 0 and not idx.type.broadcastable[j]:
                pairs.append((idx, j))
        return pairs


def _layout(ndim: int, indices) -> _Layout | None:
    """How ``array[indices]`` (full slices and integer arrays only) lays out its result, or ``None``."""
    if len(indices) > ndim:
        return None
    kinds = []
    for v in indices:
        if _is_int_array(v):
            kinds.append(v)
        elif _is_full_slice(v):
            kinds.append(None)
        else:
            return None  # a partial slice, a boolean mask, newaxis, a scalar index
    kinds += [None] * (ndim - len(indices))
    adv = [k for k, v in enumerate(kinds) if v is not None]
    if not adv:
        return None
    bdim = max(kinds[k].type.ndim for k in adv)
    slices = [("s", k) for k, v in enumerate(kinds) if v is None]
    bcast = [("b", k) for k in range(bdim)]
    if adv == list(range(adv[0], adv[-1] + 1)):  # adjacent index arrays stay in place
        out = [t for t in slices if t[1] < adv[0]] + bcast + [t for t in slices if t[1] > adv[-1]]
    else:  # separated by a slice: numpy puts the broadcast axes first
        out = bcast + slices
    return _Layout(tuple((k, kinds[k]) for k in adv), tuple(out), bdim)


def _indexed_axes(layout: _Layout, ndim: int, entries, loose: bool = False):
    """Axis entries of ``array[...]``'s result -> entries of ``array``'s axes (Gathers hold index variables)."""
    bentry = {}
    axes = [None] * ndim
    for e, (kind, k) in zip(entries, layout.out, strict=True):
        if kind == "s":
            axes[k] = e
        elif isinstance(e, Gather):
            return None  # an index array read through another index: not supported
        else:
            bentry[k] = e
    for ax, idx in layout.arrays:
        off = layout.bdim - idx.type.ndim
        dims = []
        for j, static_one in enumerate(idx.type.broadcastable):
            e = bentry[off + j]
            if static_one:
                dims.append(None)
            elif e is None:
                return None
            else:
                dims.append(e)
        axes[ax] = Gather(idx, tuple(dims), loose)
    return axes


def _walk_views(var, entries):
    """Follow ``DimShuffle`` s down from ``var``: ``(base, entries per base axis)``, or ``None``.

    ``entries`` has one entry per axis of ``var``; a new (``'x'``) axis must have
    entry ``None``; a dropped (length-1) axis of the base gets ``None``.
    """
    entries = list(entries)
    while var.owner is not None and isinstance(var.owner.op, DimShuffle):
        base = var.owner.inputs[0]
        new = [None] * base.type.ndim
        for e, o in zip(entries, var.owner.op.new_order, strict=True):
            if o == "x":
                if e is not None:
                    return None
            else:
                new[o] = e
        var, entries = base, new
    return var, entries


def _flattened_index(v):
    """``I`` if ``v`` is ``I.reshape(-1)`` (``Reshape{1}(I, [-1])``) of an integer array ``I``."""
    node = v.owner
    if node is None or not isinstance(node.op, Reshape) or node.op.ndim != 1:
        return None
    idx, shp = node.inputs
    if not (isinstance(shp, Constant) and np.array_equal(np.asarray(shp.data), [-1]) and _is_int_array(idx)):
        return None
    return idx


def _is_shape_of(v, var, axis: int) -> bool:
    return v.owner is not None and isinstance(v.owner.op, Shape_i) and v.owner.op.i == axis and v.owner.inputs[0] is var


def _nd_gather(var):
    """``(source, I)`` if ``var`` is pytensor's form of ``source[I]`` for an ND index ``I``:
    ``AdvancedSubtensor1(source, I.reshape(-1)).reshape((*I.shape, *source.shape[1:]))``."""
    node = var.owner
    gathered, shp = node.inputs
    if gathered.owner is None or not isinstance(gathered.owner.op, AdvancedSubtensor1):
        return None
    src, flat = gathered.owner.inputs
    idx = _flattened_index(flat)
    if idx is None or var.type.ndim != idx.type.ndim + src.type.ndim - 1:
        return None
    want = [(idx, j) for j in range(idx.type.ndim)] + [(src, b) for b in range(1, src.type.ndim)]
    if shp.owner is None or not isinstance(shp.owner.op, MakeVector) or len(shp.owner.inputs) != len(want):
        return None
    if not all(_is_shape_of(e, v, ax) for e, (v, ax) in zip(shp.owner.inputs, want)):
        return None
    return src, idx


def _through_index(var, entries, fgraph):
    """``(array, its axis entries)`` if ``var`` is an integer-array indexing of ``array``, else ``None``."""
    node = var.owner
    if node is None:
        return None
    if isinstance(node.op, Reshape):
        nd = _nd_gather(var)
        if nd is None:
            return None
        src, idx = nd
        layout = _layout(src.type.ndim, [idx])  # the same layout as numpy's src[idx]
    elif isinstance(node.op, AdvancedSubtensor1 | AdvancedSubtensor):
        src, *indices = node.inputs
        layout = _layout(src.type.ndim, indices)
    else:
        return None
    if layout is None or len(layout.out) != var.type.ndim:
        return None
    axes = _indexed_axes(layout, src.type.ndim, entries, not _indices_agree(fgraph, layout))
    return None if axes is None else (src, axes)


def _gather_read(fgraph, var):
    """``(source, axes)`` if the Elemwise input ``var`` reads ``source`` through integer arrays.

    Forms: ``AdvancedSubtensor1``, ``AdvancedSubtensor`` with integer arrays and
    full slices, the reshaped gather of an ND index, each possibly between
    ``DimShuffle`` s (``x.T[idx].T``, ``x[idx][:, None]``). ``axes`` holds
    :class:`Gather` s of index *variables*, loose if their lengths are not
    provably equal (:func:`_indices_agree`).
    """
    walked = _walk_views(var, [None if b else d for d, b in enumerate(var.type.broadcastable)])
    if walked is None:
        return None
    res = _through_index(*walked, fgraph)
    if res is None:
        return None
    src, axes = _walk_views(*res) or (None, None)
    if src is None or np.dtype(src.type.dtype).kind not in _NUMERIC:
        return None
    return src, axes


def _producer_equal_axes(v, a: int):
    """``(variable, axis)`` pairs whose length ``v``'s producer guarantees equal to ``v.shape[a]``."""
    node = v.owner
    if node is None:
        return []
    op = node.op
    if isinstance(op, DimShuffle):
        o = op.new_order[a]
        return [] if o == "x" else [(node.inputs[0], o)]
    if isinstance(op, Elemwise):
        return [] if v.type.broadcastable[a] else [(i, a) for i in node.inputs if not i.type.broadcastable[a]]
    if isinstance(op, SpecifyShape):
        s = node.inputs[1 + a]
        pairs = [(node.inputs[0], a)]
        if s.owner is not None and isinstance(s.owner.op, Shape_i):
            pairs.append((s.owner.inputs[0], s.owner.op.i))
        return pairs
    if isinstance(op, AdvancedSubtensor1 | AdvancedSubtensor):
        layout = _layout(node.inputs[0].type.ndim, node.inputs[1:])
        if layout is None or len(layout.out) != v.type.ndim:
            return []
        kind, k = layout.out[a]
        if kind == "s":
            return [(node.inputs[0], k)]
        aligned = layout.aligned(k)  # several: any of them may have broadcast at runtime
        return aligned if len(aligned) == 1 else []
    if isinstance(op, _INC_OPS):
        return [(node.inputs[0], a)]
    if isinstance(op, IndexedElemwise):
        w = op.loop.writes[node.outputs.index(v)]
        if w.mode == STORE:
            return [(node.inputs[p], ax) for p, ax in op.loop.dim_operands(a)]
        if w.mode in (INC, SET):
            return [(node.inputs[w.buffer], a)]
    return []


#: Most (variable, axis) pairs visited by one length proof.
_PROOF_LIMIT = 256


def _equal_axes(seeds) -> set:
    """Every ``(variable, axis)`` whose length provably equals the seeds' (walking producers only:
    they ran, and checked their operands, before the node that consumes them)."""
    seen: set = set()
    todo = list(seeds)
    while todo and len(seen) < _PROOF_LIMIT:
        pair = todo.pop()
        if pair in seen:
            continue
        seen.add(pair)
        todo.extend(_producer_equal_axes(*pair))
    return seen


class _Lengths:
    """What is known about the lengths of the Elemwise ``node``'s dims, given that it runs.

    Elemwise refuses runtime broadcasting, so dim ``d``'s length is that of
    every input not of static length 1 there, and (through their producers)
    of whatever those inputs were checked against.
    """

    def __init__(self, fgraph, node):
        self.node = node
        self.sf = getattr(fgraph, "shape_feature", None)
        #: graph-wide facts (:class:`~pmfast.passes.lengths.EqualLengths`), when the rewriter built them
        self.graph = getattr(fgraph, "_pmfast_equal_lengths", None)
        self._known: dict = {}

    def known(self, d: int) -> set:
        if d not in self._known:
            vs = (*self.node.inputs, *self.node.outputs)
            self._known[d] = _equal_axes([(v, d) for v in vs if not v.type.broadcastable[d]])
        return self._known[d]

    def equal(self, d: int, var, axis: int) -> bool:
        """Is ``var.shape[axis]`` equal to dim ``d``'s length whenever the graph runs without error?"""
        out = self.node.outputs[0]
        if out.type.broadcastable[d] or var.type.broadcastable[axis]:
            return False
        if out.type.shape[d] is not None and out.type.shape[d] == var.type.shape[axis]:
            return True
        known = self.known(d)
        if (var, axis) in known or any(_same_shape(self.sf, v, a, var, axis) for v, a in known):
            return True
        return self.graph is not None and self.graph.same(out, d, var, axis)


def _same_shape(sf, v, a, w, b) -> bool:
    if sf is None:
        return False
    try:
        return v in sf.shape_of and w in sf.shape_of and bool(sf.same_shape(v, w, a, b))
    except Exception:
        return False


def _indices_agree(fgraph, layout: _Layout) -> bool:
    """Are the index arrays' lengths along each broadcast axis provably equal?

    Numpy broadcasts an index array of runtime length 1 against the others.
    Proven equal, the loop reads them strictly (checked equal to the loop
    dim); otherwise loosely (:class:`~pmfast.loops.spec.Gather` ``loose``).
    """
    sf = getattr(fgraph, "shape_feature", None)
    for k in range(layout.bdim):
        pairs = layout.aligned(k)
        for v, a in pairs[1:]:
            w, b = pairs[0]
            static = w.type.shape[b]
            if v is w or (static is not None and static == v.type.shape[a]):
                continue
            if (v, a) in _equal_axes([(w, b)]) or (w, b) in _equal_axes([(v, a)]) or _same_shape(sf, w, b, v, a):
                continue
            return False
    return True


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


def build_fused(fgraph, node, vectorize_all: bool = False):
    """Return ``(replacements, new_node)`` for an Elemwise ``node``, or ``None`` to decline.
    ``vectorize_all``: also a 1-d node that gathers and scatters nothing, if its body vectorizes
    (:func:`will_vectorize`)."""
    res = _build_fused(fgraph, node, scatters=True, vectorize_all=vectorize_all)
    if res is _TOO_WIDE:
        res = _build_fused(fgraph, node, scatters=False, vectorize_all=vectorize_all)
    return None if res is _TOO_WIDE else res


_TOO_WIDE = object()


def _build_fused(fgraph, node, scatters: bool, vectorize_all: bool = False):
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern:
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
        # nothing gathered or scattered: a loop pays only when it vectorizes its pmfast.vmath
        # calls (stock's Elemwise reaches a scalar function through a call LLVM does not inline)
        # and sums them in lanes; otherwise stock's Elemwise + vectorized Sum is as good
        if not (vectorize_all and ndim == 1 and will_vectorize(op.scalar_op)):
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
    sf = getattr(fgraph, "shape_feature", None)
    graph = getattr(fgraph, "_pmfast_equal_lengths", None)

    def equal(a, b) -> bool:
        (va, xa), (vb, xb) = (inputs[a[0]], a[1]), (inputs[b[0]], b[1])
        if va is vb and xa == xb:
            return True
        sa, sb = va.type.shape[xa], vb.type.shape[xb]
        if sa is not None and sa == sb:
            return True
        return _same_shape(sf, va, xa, vb, xb) or (graph is not None and graph.same(va, xa, vb, xb))

    groups: list[list] = []
    for pair in dict.fromkeys((a, ax) for a, ax, _ in loop.gathered()):
        for g in groups:
            if equal(g[0], pair):
                g.append(pair)
                break
        else:
            groups.append([pair])
    return tuple(tuple(g) for g in groups if len(g) > 1)


def _fused_pairs(fgraph, node, vectorize_all: bool = False):
    """The replacement pairs of :func:`build_fused`, or ``None``."""
    res = build_fused(fgraph, node, vectorize_all)
    return None if res is None else res[0]


def squeezed(node):
    """``node``'s outputs computed by a 1-d Elemwise when all its output axes but one have static
    length 1 (``(n, 1)`` columns), as views of the 1-d results; ``None`` otherwise."""
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern:
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


class SqueezeColumns(PassRewriter):
    """Graph rewriter: an Elemwise over an ``(n, 1)`` column whose body vectorizes runs as a 1-d
    Elemwise (then a chunked loop, 49.35), its results viewed as columns again."""

    reason = PASS_NAME

    def apply(self, fgraph):
        before = len(fgraph.apply_nodes)
        for node in list(fgraph.toposort()):
            if node in fgraph.apply_nodes and isinstance(node.op, Elemwise) and will_vectorize(node.op.scalar_op):
                self.attempt(fgraph, lambda node=node: list(zip(node.outputs, squeezed(node) or [])), node)
        # the column views (DimShuffles: no copies) are the nodes this adds by design
        if len(fgraph.apply_nodes) != before:
            record_nodes_added(fgraph, PASS_NAME, len(fgraph.apply_nodes) - before)


class IndexedElemwiseFusion(PassRewriter):
    """Graph rewriter: fuse every eligible Elemwise with its gathers and scatters (with
    ``vectorize_all``: also the gather-free 1-d nodes whose body vectorizes, see
    :func:`build_fused`)."""

    reason = PASS_NAME

    def __init__(self, vectorize_all: bool = False):
        super().__init__()
        self.vectorize_all = vectorize_all

    def apply(self, fgraph):
        n = 0
        try:
            # facts about the graph as it is now; variables created below have none
            # (``same`` then answers False: the conservative side)
            fgraph._pmfast_equal_lengths = EqualLengths(fgraph)
        except Exception:
            _log.debug("indexed_elemwise: no graph-wide length facts", exc_info=True)
        try:
            for node in list(fgraph.toposort()):
                if node not in fgraph.apply_nodes or not isinstance(node.op, Elemwise):
                    continue
                n += self.attempt(fgraph, lambda: _fused_pairs(fgraph, node, self.vectorize_all), node)
        finally:
            fgraph.__dict__.pop("_pmfast_equal_lengths", None)
        if n:
            record(fgraph, PASS_NAME, n)


@node_rewriter([IndexedElemwise], inplace=True)
def indexed_elemwise_inplace(fgraph, node):
    """Write the scattered buffers in place when the destroy handler allows it."""
    try:
        loop = node.op.loop
        cand = []
        for w in loop.writes:
            if w.buffer is None or w.buffer in loop.inplace:
                continue
            buf = node.inputs[w.buffer]
            others = [v for p, v in enumerate(node.inputs) if p != w.buffer]
            if buf in others or buf in fgraph.inputs:
                continue
            if buf.owner is None:  # constants and other roots: keep the copy
                continue
            if fgraph.has_destroyers([buf]):
                continue
            cand.append(w.buffer)
        if not cand:
            return None
        return node.op.clone_inplace(cand).make_node(*node.inputs).outputs
    except Exception:
        _log.debug("indexed_elemwise_inplace: declined %s", node, exc_info=True)
        return None


indexed_elemwise_pass = register_pass(
    PASS_NAME,
    "fuse integer gathers (x[idx]) and scatter-adds (inc_subtensor) into the Elemwise loop",
)

# Position 49.2: after ``elemwise_fusion`` (49), so gathers and scatters already
# surround one Composite Elemwise (we fuse the whole Composite, not its pieces),
# and before ``add_destroy_handler`` (49.5) / ``inplace_elemwise`` (50.5), so
# no Elemwise or AdvancedIncSubtensor1 has been made inplace yet (we only match
# non-inplace nodes and never have to reason about destroyed buffers here).
indexed_elemwise_pass.register(IndexedElemwiseFusion(), 49.2, name="fusion")

# Position 49.35: gather-free 1-d Elemwise nodes (a likelihood's terms, their gradient) pay as a
# loop only when the loop vectorizes, which is known once ``vector_math`` (49.3) has put
# pmfast.vmath ops into their bodies; still before the destroy handler (49.5).
indexed_elemwise_pass.register(SqueezeColumns(), 49.34, name="squeeze_columns")
indexed_elemwise_pass.register(IndexedElemwiseFusion(vectorize_all=True), 49.35, name="vector_loops")

# Position 70.65: next to stock ``local_inplace_AdvancedIncSubtensor1`` (70.6),
# after the destroy handler is attached, so the validation of the inplace
# replacement (buffer not needed elsewhere, not a protected input) is pytensor's.
indexed_elemwise_pass.register(
    WalkingGraphRewriter(indexed_elemwise_inplace, failure_callback=WalkingGraphRewriter.warn_inplace),
    70.65,
    name="inplace",
)
