"""``indexed_elemwise``: fuse integer gathers and scatter-adds into the Elemwise loop.

Matches an ``Elemwise`` node (typically the ``Composite`` built by
``FusionOptimizer``; ndim 1..3, not inplace, numeric dtypes) and rewrites it,
together with

* **reads**: inputs produced by ``AdvancedSubtensor1`` (axis-0 gather) through
  an integer index vector (``beta[group]``, also rows of a matrix) — the
  gathered array is never materialised, the loop reads ``beta[group[i], k]``
  (bounds-checked, negative indices wrap, any integer dtype);
* **writes**: outputs consumed (as the ``y`` operand) by ``AdvancedIncSubtensor1``
  (``inc`` and ``set``) — the gradient's ``inc_subtensor(zeros[idx], g(x[idx], ...))``
  — done in the same loop (``buffer[idx[i]] += o``; repeated indices
  accumulate like ``np.add.at``; ``set`` is sequential, last write wins);
  chained ``inc`` scatters into one buffer (``x[p1] - x[p2]`` gradients) are
  accumulated together; a full ``Sum`` of an output becomes an accumulator;

into one :class:`IndexedElemwise` op whose props are a
:class:`pmfast.loops.IndexedLoop` description and whose numba implementation is
one generated loop. Outputs with other clients are still materialised.

Declined (the graph is left as is): gathers that are not ``AdvancedSubtensor1``
(``x[:, idx]``), inplace Elemwise, Elemwise of ndim > 3, scatters whose
``y`` shape cannot be proven equal to the index length / buffer shape (so
``AdvancedIncSubtensor1``'s broadcasting of ``y`` is never needed), dtype
changes on write, write targets that are also read by the loop or that depend
on the Elemwise itself, non-numeric dtypes. Any exception while matching is
logged at debug level and the node is skipped: the pass never breaks
compilation. See ``docs/passes/indexed_elemwise.md``.
"""

from __future__ import annotations

import logging
from hashlib import sha256

import numpy as np

from pmfast.loops.codegen import LAZY_VERSION, generate_source, lazy_composite_source, source_key
from pmfast.loops.spec import ALL, ANY, INC, REDUCTIONS, SET, STORE, SUM, IndexedLoop, Read, Write, evaluate
from pmfast.passes.registry import record, register_pass

_log = logging.getLogger(__name__)

PASS_NAME = "indexed_elemwise"
#: Part of every cache key of the generated numba code.
VERSION = "indexed_elemwise-1"

from pytensor.graph.basic import Apply  # noqa: E402
from pytensor.graph.op import Op  # noqa: E402
from pytensor.graph.rewriting.basic import (  # noqa: E402
    GraphRewriter,
    WalkingGraphRewriter,
    node_rewriter,
)
from pytensor.graph.traversal import ancestors  # noqa: E402
from pytensor.tensor.basic import as_tensor_variable  # noqa: E402
from pytensor.tensor.elemwise import Elemwise  # noqa: E402
from pytensor.tensor.math import All, Any, Sum  # noqa: E402
from pytensor.tensor.subtensor import AdvancedIncSubtensor1, AdvancedSubtensor1  # noqa: E402


def _pmfast_version() -> str:
    try:
        import pmfast

        return str(getattr(pmfast, "__version__", "0"))
    except Exception:  # pragma: no cover
        return "0"


class IndexedElemwise(Op):
    """An Elemwise loop with gathered reads and scattered (inc/set) writes.

    ``loop`` is the :class:`~pmfast.loops.IndexedLoop` (node input/output
    positions); ``out_types`` the types of the node outputs, one per write.
    """

    __props__ = ("loop", "out_types")

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
        for r in loop.reads:
            if inputs[r.array].type.ndim != loop.ndim:
                raise TypeError("IndexedElemwise reads arrays of the loop's ndim only")
        idx_pos = {r.index for r in loop.reads if r.index is not None}
        idx_pos |= {p for w in loop.writes for _, p in w.terms()}
        for p in idx_pos:
            t = inputs[p].type
            if t.ndim != 1 or np.dtype(t.dtype).kind not in "iu":
                raise TypeError("IndexedElemwise index arrays must be integer vectors")
        for w, t in zip(loop.writes, self.out_types):
            if w.buffer is not None and inputs[w.buffer].type.ndim != loop.ndim:
                raise TypeError("IndexedElemwise writes into buffers of the loop's ndim only")
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

        loop = self.loop
        shape = [shapes[loop.driver()][0]]
        for d in range(1, loop.ndim):
            src = loop.dim_source(d)
            shape.append(constant(1, dtype="int64") if src is None else shapes[src][d])
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
        loop = IndexedLoop(
            self.loop.scalar_op,
            self.loop.reads,
            self.loop.writes,
            tuple(sorted(set(self.loop.inplace) | set(buffers))),
        )
        return IndexedElemwise(loop, self.out_types)

    def __str__(self) -> str:
        return f"IndexedElemwise{{{self.loop.short()}}}"



try:
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.basic import (
        numba_funcify_and_cache_key,
        numba_funcify_ensure_cache,
        register_funcify_and_cache_key,
    )
    from pytensor.scalar.basic import Composite, get_scalar_type

    def lazy_scalar_fn(scalar_op):
        """A numba function for the Composite ``scalar_op`` whose expensive Switch
        branches are evaluated only when taken (stock evaluates both), or ``None``.

        Every inner node is still computed by its stock numba function; only
        the order and the skipping of unused branches differ, so the values
        are the same bit for bit.
        """
        if not LAZY_SWITCH or not isinstance(scalar_op, Composite):
            return None
        res = lazy_composite_source(scalar_op.fgraph, func_name="lazy_scalar")
        if res is None:
            return None
        src, nodes, consts = res
        env = {"np": np}
        for k, n in enumerate(nodes):
            env[f"f{k}"], _ = numba_funcify_ensure_cache(n.op, node=n)
        for k, c in enumerate(consts):
            env[f"c{k}"] = np.dtype(c.type.dtype).type(c.data)
        fn = compile_numba_function_src(src, "lazy_scalar", env, write_to_disk=True)
        return numba_basic.numba_njit(fn)

    @register_funcify_and_cache_key(IndexedElemwise)
    def numba_funcify_IndexedElemwise(op, node, **kwargs):
        loop = op.loop
        scalar_inputs = [get_scalar_type(dtype=node.inputs[r.array].type.dtype)() for r in loop.reads]
        scalar_node = loop.scalar_op.make_node(*scalar_inputs)
        scalar_fn, scalar_key = numba_funcify_and_cache_key(loop.scalar_op, node=scalar_node, **kwargs)
        lazy = None
        try:
            lazy = lazy_scalar_fn(loop.scalar_op)
        except Exception:  # never fail compilation: keep the stock Composite
            _log.debug("indexed_elemwise: lazy scalar body declined", exc_info=True)
        if lazy is not None:
            scalar_fn = lazy
        in_dtypes = [i.type.dtype for i in node.inputs]
        out_dtypes = [o.type.dtype for o in node.outputs]
        src = generate_source(loop, in_dtypes, out_dtypes, func_name="indexed_elemwise_loop")
        fn = compile_numba_function_src(
            src,
            "indexed_elemwise_loop",
            {"np": np, "scalar_fn": scalar_fn},
            write_to_disk=True,
        )
        # The loop itself is compiled without fast-math flags: measured on the
        # seed, pytensor's default set (contract/afn/arcp/nsz...) slows the
        # gather/scatter loop by ~25%, and IEEE order keeps scatters and sums
        # deterministic. The scalar function keeps pytensor's flags, as in stock.
        jitted = numba_basic.numba_njit(fn, fastmath=False)
        if scalar_key is None:
            key = None
        else:
            key = sha256(
                str(
                    (
                        "pmfast",
                        _pmfast_version(),
                        VERSION,
                        "IndexedElemwise",
                        source_key(loop, in_dtypes, out_dtypes),
                        tuple(str(t) for t in op.out_types),
                        scalar_key,
                        ("lazy", LAZY_VERSION) if lazy is not None else "stock",
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
#: expensive op (``pmfast.loops.codegen.lazy_composite_source``); stock numba
#: evaluates both. Switch off to measure without it.
LAZY_SWITCH = True

#: Largest Elemwise ndim fused (gathers act on axis 0; the other axes are inner loops).
MAX_NDIM = 3

#: Widest fused node: node inputs, node outputs and scalar inputs each at most
#: this. Past 30 items CPython compiles a call/tuple as BUILD_LIST + appends,
#: which numba types in O(n^2) (DESIGN.md); measured here with 40 gathered
#: terms and their scatters in one loop (121 node inputs): compile 16 s stock ->
#: 165 s fused. A too-wide node is retried without its scatters, then declined
#: (wide nodes are ``wide_split``'s business).
MAX_ARGS = 30


def _is_int_vector(v) -> bool:
    return v.type.ndim == 1 and np.dtype(v.type.dtype).kind in "iu"


def _gather(v):
    """``(source, index)`` if ``v`` is a supported gather ``source[index]``, else ``None``."""
    node = v.owner
    if node is None or not isinstance(node.op, AdvancedSubtensor1):
        return None
    src, idx = node.inputs
    if src.type.ndim < 1 or not _is_int_vector(idx):
        return None
    if np.dtype(src.type.dtype).kind not in _NUMERIC:
        return None
    return src, idx


def _loop_length_vars(var) -> list:
    """If ``var`` is a ``store`` output of an :class:`IndexedElemwise`, the variables
    whose axis-0 length that loop checked equal to ``var``'s (it raises otherwise)."""
    owner = var.owner
    if owner is None or not isinstance(owner.op, IndexedElemwise):
        return []
    k = owner.outputs.index(var)
    loop = owner.op.loop
    if loop.writes[k].mode != STORE:
        return []
    return [owner.inputs[p] for p in loop.length_checked()]


def _length_proven(fgraph, node, out, widx) -> bool:
    """Is ``len(out) == len(widx)`` guaranteed whenever the graph runs without error?

    Elemwise refuses runtime broadcasting, so the output length equals that of
    every non-broadcastable input; an input gathered through ``widx`` (or
    ``widx`` itself, or an input the ShapeFeature knows has ``widx``'s length)
    pins it. Equal static lengths do too.
    """
    if out.type.broadcastable[0]:
        return False
    n_static = out.type.shape[0]
    if n_static is not None and n_static == widx.type.shape[0]:
        return True
    sf = getattr(fgraph, "shape_feature", None)
    candidates = [out]
    for inp in node.inputs:
        if inp.type.broadcastable[0]:
            continue
        if inp is widx:
            return True
        g = _gather(inp)
        if g is not None and g[1] is widx:
            return True
        if _loop_length_vars(inp) and any(v is widx for v in _loop_length_vars(inp)):
            return True
        candidates.append(inp)
    if sf is not None:
        for c in candidates:
            try:
                if c in sf.shape_of and widx in sf.shape_of and sf.same_shape(c, widx, 0, 0):
                    return True
            except Exception:
                continue
    return False


def _dim_proven(fgraph, node, out, target, d) -> bool:
    """Is ``out.shape[d] == target.shape[d]`` (``d >= 1``) guaranteed whenever the graph runs?

    Same reasoning as :func:`_length_proven`: every input not broadcastable on
    axis ``d`` (and the array a gathered input comes from) has ``out``'s length there.
    """
    if out.type.broadcastable[d]:
        return False
    if out.type.shape[d] is not None and out.type.shape[d] == target.type.shape[d]:
        return True
    sf = getattr(fgraph, "shape_feature", None)
    if sf is None:
        return False
    candidates = [out]
    for inp in node.inputs:
        if inp.type.broadcastable[d]:
            continue
        candidates.append(inp)
        g = _gather(inp)
        if g is not None:
            candidates.append(g[0])
    for c in candidates:
        try:
            if c in sf.shape_of and target in sf.shape_of and sf.same_shape(c, target, d, d):
                return True
        except Exception:
            continue
    return False


def _depends_on(vars_, node) -> bool:
    outs = set(node.outputs)
    return any(a in outs for a in ancestors(vars_))


def _is_full_sum(client, out) -> bool:
    """``client`` is ``Sum`` over all of the 1-d float ``out``, accumulating in ``out``'s dtype."""
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


def build_fused(fgraph, node):
    """Return ``(replacements, new_node)`` for an Elemwise ``node``, or ``None`` to decline."""
    res = _build_fused(fgraph, node, scatters=True)
    if res is _TOO_WIDE:
        res = _build_fused(fgraph, node, scatters=False)
    return None if res is _TOO_WIDE else res


_TOO_WIDE = object()


def _build_fused(fgraph, node, scatters: bool):
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

    reads = []
    read_vars = set()
    n_gathers = 0
    for inp in node.inputs:
        g = _gather(inp)
        if g is not None:
            src, idx = g
            reads.append(Read(pos(src), pos(idx), broadcast=inp.type.broadcastable))
            read_vars.update((src, idx))
            n_gathers += 1
        else:
            reads.append(Read(pos(inp), None, broadcast=inp.type.broadcastable))
            read_vars.add(inp)

    clients = fgraph.clients
    outputs_set = set(fgraph.outputs)
    node_outputs = list(node.outputs)

    def scatter_ok(client, out, target) -> bool:
        """``client`` = ``AdvancedIncSubtensor1(target, out, widx)`` can be done in the loop."""
        widx = client.inputs[2]
        return (
            not client.op.inplace
            and client.inputs[1] is out
            and client.inputs[0] is not out
            and widx is not out
            and target.type.ndim == ndim
            and not any(out.type.broadcastable)
            and _is_int_vector(widx)
            and target.type.dtype == out.type.dtype
            and client.outputs[0].type.dtype == target.type.dtype
            and all(_dim_proven(fgraph, node, out, target, d) for d in range(1, ndim))
            and _length_proven(fgraph, node, out, widx)
            and not _depends_on([widx], node)
        )

    def chain_of(first):
        """Further ``inc`` scatters of this node's outputs into ``first``'s result, in order."""
        chain = []
        cur = first
        while not cur.op.set_instead_of_inc:
            cl = clients.get(cur.outputs[0], [])
            if len(cl) != 1 or cur.outputs[0] in outputs_set:
                break
            nxt, i = cl[0]
            if (
                i != 0
                or not isinstance(getattr(nxt, "op", None), AdvancedIncSubtensor1)
                or nxt.op.set_instead_of_inc
                or nxt.inputs[1] not in node_outputs
                or not scatter_ok(nxt, nxt.inputs[1], cur.outputs[0])
            ):
                break
            chain.append((node_outputs.index(nxt.inputs[1]), nxt))
            cur = nxt
        return chain

    # first pass: the scatters done in the loop (and the chained ones they absorb)
    primaries: dict = {}  # client -> chain
    chained = set()
    for k, out in enumerate(node.outputs if scatters else ()):
        for client, i in clients.get(out, []):
            if (
                i == 1
                and isinstance(getattr(client, "op", None), AdvancedIncSubtensor1)
                and client not in primaries
                and scatter_ok(client, out, client.inputs[0])
                and client.inputs[0] not in read_vars
                and not _depends_on([client.inputs[0]], node)
            ):
                primaries[client] = []
    for client in primaries:
        chain = [(k2, c2) for k2, c2 in chain_of(client) if c2 not in primaries]
        primaries[client] = chain
        chained.update(c for _, c in chain)

    writes = []
    out_types = []
    replaced = []  # old variable for each node output of the new node
    n_scatters = 0
    for k, out in enumerate(node.outputs):
        keep = out in outputs_set
        scatters = []
        sums = []
        for client, i in clients.get(out, []):
            if FUSE_SUM and _is_full_sum(client, out):
                sums.append((SUM, client))
            elif FUSE_SUM and _full_bool_reduction(client, out) is not None:
                sums.append((_full_bool_reduction(client, out), client))
            elif client in primaries and i == 1:
                scatters.append(client)
            elif client in chained and i == 1:
                pass  # done by its chain's first scatter
            else:
                keep = True
        if keep:
            writes.append(("store", k, None))
            out_types.append(out.type)
            replaced.append(out)
        for red, client in sums:
            writes.append((red, k, client))
            out_types.append(client.outputs[0].type)
            replaced.append(client.outputs[0])
        for client in scatters:
            mode = SET if client.op.set_instead_of_inc else INC
            last = primaries[client][-1][1] if primaries[client] else client
            writes.append((mode, k, client))
            out_types.append(last.outputs[0].type)
            replaced.append(last.outputs[0])
            n_scatters += 1

    if n_gathers == 0 and n_scatters == 0:
        return None

    # write index arrays may be shared with reads; buffers always get their own slot
    spec_writes = []
    for mode, k, client in writes:
        if mode == "store":
            spec_writes.append(Write(k, STORE))
        elif mode in REDUCTIONS:
            spec_writes.append(Write(k, mode))
        else:
            target, _, widx = client.inputs
            widx_pos = pos(widx)
            also = tuple((k2, pos(c2.inputs[2])) for k2, c2 in primaries[client])
            buf_pos = len(new_inputs)
            new_inputs.append(target)
            spec_writes.append(Write(k, mode, buffer=buf_pos, index=widx_pos, also=also))

    if len(new_inputs) > MAX_ARGS or len(spec_writes) > MAX_ARGS or len(reads) > MAX_ARGS:
        return _TOO_WIDE
    loop = IndexedLoop(op.scalar_op, tuple(reads), tuple(spec_writes))
    new_op = IndexedElemwise(loop, out_types)
    new_node = new_op.make_node(*new_inputs)
    for old, new in zip(replaced, new_node.outputs):
        if old.type != new.type:
            return None
    return list(zip(replaced, new_node.outputs)), new_node


class IndexedElemwiseFusion(GraphRewriter):
    """Graph rewriter: fuse every eligible Elemwise with its gathers and scatters."""

    def add_requirements(self, fgraph):
        from pytensor.graph.features import ReplaceValidate

        fgraph.attach_feature(ReplaceValidate())

    def apply(self, fgraph):
        n = 0
        for node in list(fgraph.toposort()):
            if node not in fgraph.apply_nodes or not isinstance(node.op, Elemwise):
                continue
            try:
                res = build_fused(fgraph, node)
                if res is None:
                    continue
                pairs, _ = res
                fgraph.replace_all_validate(pairs, reason=PASS_NAME)
                n += 1
            except Exception:
                _log.debug("indexed_elemwise: declined %s", node, exc_info=True)
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

# Position 70.65: next to stock ``local_inplace_AdvancedIncSubtensor1`` (70.6),
# after the destroy handler is attached, so the validation of the inplace
# replacement (buffer not needed elsewhere, not a protected input) is pytensor's.
indexed_elemwise_pass.register(
    WalkingGraphRewriter(indexed_elemwise_inplace, failure_callback=WalkingGraphRewriter.warn_inplace),
    70.65,
    name="inplace",
)
