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

The op is :mod:`pmfast.loops.op` and its numba dispatch :mod:`pmfast.loops.dispatch`; the
matching is :mod:`pmfast.passes.indexed_gathers` (reads, length proofs) and
:mod:`pmfast.passes.indexed_matching` (scatters, reductions, :func:`build_fused`). This module
holds the rewriters and their registration.
"""

from __future__ import annotations

import logging

from pytensor.graph.rewriting.basic import WalkingGraphRewriter, node_rewriter
from pytensor.tensor.elemwise import Elemwise

from pmfast.inplace_fast import FastInplace
from pmfast.loops.dispatch import will_vectorize
from pmfast.loops.op import IndexedElemwise
from pmfast.passes.indexed_gathers import _layout, keyed_shapes  # noqa: F401  (_layout re-exported for tests)
from pmfast.passes.indexed_matching import (  # noqa: F401  (re-exported: sibling_fusion, tests)
    MAX_ARGS,
    _full_bool_reduction,
    _fused_pairs,
    _is_full_sum,
    squeezed,
)
from pmfast.passes.lengths import EqualLengths
from pmfast.passes.registry import record, register_pass
from pmfast.passes.rewriting import PassRewriter, record_nodes_added

try:  # re-exported for tests; absent without the numba backend, as before
    from pmfast.loops.dispatch import loop_form, numba_funcify_IndexedElemwise  # noqa: F401
except ImportError:  # pragma: no cover - numba backend unavailable
    pass

_log = logging.getLogger(__name__)

PASS_NAME = "indexed_elemwise"


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
    ``vectorize_all``: also the gather-free 1-d nodes whose body vectorizes or calls libm, see
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
            with keyed_shapes(fgraph):  # each shape entry canonicalized once in the pass
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
# loop when the loop vectorizes or the body calls libm (``calls_math``), which is known once
# ``vector_math`` (49.3) has put pmfast.vmath ops into their bodies; still before the destroy
# handler (49.5).
indexed_elemwise_pass.register(SqueezeColumns(), 49.34, name="squeeze_columns")
indexed_elemwise_pass.register(IndexedElemwiseFusion(vectorize_all=True), 49.35, name="vector_loops")

# Position 70.65: next to stock ``local_inplace_AdvancedIncSubtensor1`` (70.6),
# after the destroy handler is attached, so the validation of the inplace
# replacement (buffer not needed elsewhere, not a protected input) is pytensor's,
# each change judged locally when that is certain (pmfast/inplace_fast.py).
indexed_elemwise_pass.register(
    FastInplace(
        WalkingGraphRewriter(indexed_elemwise_inplace, failure_callback=WalkingGraphRewriter.warn_inplace), late=True
    ),
    70.65,
    name="inplace",
)
