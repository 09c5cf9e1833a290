"""Sibling fusion: Elemwise nodes that read the same data merge into one loop.

``FusionOptimizer`` fuses along producer–consumer edges only: ``f(x[idx])``
and ``g(x[idx])`` with no edge between them (a logp term and a gradient term
that share nothing but the gather; pymc's two checks ``all(p >= 0)`` and
``all(p <= 1)``) stay two Elemwise nodes, and ``indexed_elemwise`` would run
two loops, each reading the shared data. This rewrite merges such siblings
into one multi-output Composite first, so the data is read once, in one loop.

Siblings are *loop candidates* — Elemwise nodes (not inplace, same output
ndim, numeric) that gather (``x[idx]`` inputs) or whose outputs all feed full
``Sum`` / ``All`` / ``Any`` reductions (never stored) — that

* read common data: the same input, not broadcast, or through the same
  index vector (``x[idx]`` and ``y[idx]``), and
* have the same iteration shape: every axis is pinned by an input they share
  that is not broadcast there (the same variable, or the same index vector
  for the gathered axis 0), or the ShapeFeature proves it; so wherever both
  nodes ran before, the merged node runs too, over the same elements;
* and neither depends on the other (no path between them, which also makes
  the merged node acyclic).

The merged Composite computes each original scalar graph on the union of the
inputs: the same scalar functions on the same values, so every output is
bit-for-bit what it was. Merges stop at ``MAX_INPUTS`` outer inputs (counting
one more per gathered input: the loop will read ``x`` and ``idx``), so fused
kernels stay within the 30-argument call limit. Each merge removes one node;
the rewrite terminates.
"""

from __future__ import annotations

import logging
import os
import sys

import numpy as np
from pytensor.graph.basic import Apply
from pytensor.graph.features import Feature
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import ancestors
from pytensor.scalar.basic import Composite, get_scalar_type, identity
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.subtensor import AdvancedSubtensor1

from pmfast.passes.indexed_elemwise import _full_bool_reduction, _is_full_sum, indexed_elemwise_pass
from pmfast.passes import sibling_walk
from pmfast.passes.rewriting import PassRewriter

_log = logging.getLogger(__name__)

#: Widest merged node, weighted like ``wide_split`` (a gathered input counts 2),
#: minus room for the scatter buffers/indices ``indexed_elemwise`` may add.
MAX_INPUTS = 24

#: Most merges in one graph (a bound on work, not needed for termination).
MAX_MERGES = 256

_NUMERIC = "biuf"


def _gather_key(var):
    """The index vector ``var`` is gathered through on axis 0, or ``None``."""
    node = var.owner
    if node is not None and isinstance(node.op, AdvancedSubtensor1):
        return node.inputs[1]
    return None


def _eligible(node) -> bool:
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern:
        return False
    nd = node.outputs[0].type.ndim
    if nd == 0 or any(v.type.ndim != nd for v in (*node.inputs, *node.outputs)):
        return False
    return all(np.dtype(v.type.dtype).kind in _NUMERIC for v in (*node.inputs, *node.outputs))


def _memo_enabled() -> bool:
    return os.environ.get("PMFAST_SIBLING_MEMO", "1") != "0"


def _weight(inputs) -> int:
    return sum(2 if _gather_key(v) is not None else 1 for v in inputs)


def _same_shape(fgraph, a, b) -> bool:
    """Do Elemwise nodes ``a`` and ``b`` (same ndim) iterate over the same shape?"""
    out_a, out_b = a.outputs[0], b.outputs[0]
    if out_a.type.broadcastable != out_b.type.broadcastable:
        return False
    sf = getattr(fgraph, "shape_feature", None)
    for d, bcast in enumerate(out_a.type.broadcastable):
        if bcast:
            continue
        pins_a = {v for v in a.inputs if not v.type.broadcastable[d]}
        pins_b = {v for v in b.inputs if not v.type.broadcastable[d]}
        if pins_a & pins_b:
            continue
        if d == 0:
            idx_a = {_gather_key(v) for v in pins_a} - {None}
            idx_b = {_gather_key(v) for v in pins_b} - {None}
            if idx_a & idx_b:
                continue
        try:
            if sf is not None and sf.same_shape(out_a, out_b, d, d):
                continue
        except Exception:
            pass
        return False
    return True


def _shares_data(a, b) -> bool:
    """Do ``a`` and ``b`` read a common array: the same input (not broadcast), or through the same index?"""
    nd = a.outputs[0].type.ndim
    direct_a = {v for v in a.inputs if not all(v.type.broadcastable[:nd])}
    direct_b = {v for v in b.inputs if not all(v.type.broadcastable[:nd])}
    if direct_a & direct_b:
        return True
    ka = {_gather_key(v) for v in a.inputs} - {None}
    kb = {_gather_key(v) for v in b.inputs} - {None}
    return bool(ka & kb)


def _reduced_only(fgraph, node) -> bool:
    """Is every output of ``node`` used only by full Sum / All / Any reductions (so never stored)?"""
    outputs = set(fgraph.outputs)
    for out in node.outputs:
        clients = fgraph.clients.get(out, [])
        if not clients or out in outputs:
            return False
        for client, _ in clients:
            if not (_is_full_sum(client, out) or _full_bool_reduction(client, out) is not None):
                return False
    return True


def _loop_candidate(fgraph, node, eligible=None) -> bool:
    """A node ``indexed_elemwise`` will run as a loop: it gathers, or it only feeds full reductions.

    ``eligible`` (a dict) memoises :func:`_eligible`, which reads only the node's op and its
    variables' ndim and dtype: a replacement in the graph swaps an input for one of the same
    type (pytensor converts it or refuses), so the answer for a node never changes.
    ``PMFAST_SIBLING_MEMO=0``: no memo.
    """
    if eligible is None:
        ok = _eligible(node)
    else:
        ok = eligible.get(node)
        if ok is None:
            ok = eligible[node] = _eligible(node)
    if not ok:
        return False
    return any(_gather_key(v) is not None for v in node.inputs) or _reduced_only(fgraph, node)


def _scalar_outputs(node, scalar_inputs):
    """The scalar graph of Elemwise ``node`` applied to ``scalar_inputs`` (Composites inlined)."""
    sop = node.op.scalar_op
    if isinstance(sop, Composite):
        return clone_replace(sop.outputs, replace=dict(zip(sop.inputs, scalar_inputs, strict=True)))
    outs = sop.make_node(*scalar_inputs).outputs
    return list(outs)


def merge_siblings(a, b) -> Apply:
    """One Elemwise node computing the outputs of ``a`` then those of ``b``."""
    return merge_group([a, b])


def merge_group(nodes) -> Apply:
    """One Elemwise node computing the outputs of ``nodes``, in order (inputs: the union, first seen first)."""
    inputs = list(dict.fromkeys(v for n in nodes for v in n.inputs))
    scalars = {v: get_scalar_type(v.type.dtype)() for v in inputs}
    outs = [o for n in nodes for o in _scalar_outputs(n, [scalars[v] for v in n.inputs])]
    # a Composite output may not be one of its inputs: route those through identity
    ins = [scalars[v] for v in inputs]
    outs = [identity(o) if o in ins else o for o in outs]
    comp = Composite(ins, outs)
    return Elemwise(comp).make_node(*inputs)


class SiblingFusion(PassRewriter):
    """Merge Elemwise siblings that share gathered data (see the module docstring), one pair at a time.

    A merged pair is one node, so the graph shrinks with every merge; a pair whose replacement is
    declined is not offered again; at most ``max_merges`` merges.
    """

    reason = "pmfast.sibling_fusion"
    max_merges = MAX_MERGES

    def apply(self, fgraph):
        if _onepass_enabled():
            return sibling_walk.one_pass(self, fgraph, sys.modules[__name__])
        merges, declined = 0, set()
        eligible = {} if _memo_enabled() else None
        memo = _SearchMemo() if _incremental_enabled() else None
        if memo is not None:
            fgraph.attach_feature(memo)
        try:
            while merges < self.max_merges:
                try:
                    pair = self._find_pair(fgraph, declined, eligible, memo)
                except Exception:
                    _log.debug("%s: pair search stopped", self.reason, exc_info=True)
                    break
                if pair is None:
                    break
                a, b = pair
                build = lambda: list(zip([*a.outputs, *b.outputs], merge_siblings(a, b).outputs, strict=True))  # noqa: E731
                if self.attempt(fgraph, build, pair):
                    merges += 1
                else:
                    declined.add(pair)
        finally:
            if memo is not None:
                fgraph.remove_feature(memo)

    @staticmethod
    def _find_pair(fgraph, declined, eligible=None, memo=None):
        """The first pair ``(a, b)`` in toposort order (``a`` first) that may merge, or None.

        Only pairs that share data can merge, so each ``a`` is paired with the later nodes that
        share one of its data keys (:func:`_data_keys`), in toposort order: the same first pair
        as trying every later node. A pair found dependent (a path from ``a`` to ``b``) stays
        dependent as pairs merge (merging never removes a path), so it joins ``declined``.
        ``eligible`` memoises :func:`_eligible` per node across searches (the pass's dict);
        ``memo`` (a :class:`_SearchMemo`) each node's candidacy and data keys, and the path
        search walks up from ``b`` only through nodes after ``a`` in the toposort.
        """
        order = fgraph.toposort()
        if memo is None:
            nodes = [n for n in order if _loop_candidate(fgraph, n, eligible)]
            keys = {n: _data_keys(n) for n in nodes}
        else:
            nodes = [n for n in order if memo.candidate(fgraph, n, eligible)]
            keys = {n: memo.keys(n) for n in nodes}
        pos = {n: k for k, n in enumerate(nodes)}
        rank = None if memo is None else {n: k for k, n in enumerate(order)}
        sharing: dict = {}
        for n in nodes:
            for key in keys[n]:
                sharing.setdefault(key, []).append(n)
        for i, a in enumerate(nodes):
            later = {b for key in keys[a] for b in sharing[key] if pos[b] > i}
            for b in sorted(later, key=pos.__getitem__):
                if (a, b) in declined:
                    continue
                if not _same_shape(fgraph, a, b):
                    continue
                if _weight(set(a.inputs) | set(b.inputs)) > MAX_INPUTS:
                    continue
                if len(a.outputs) + len(b.outputs) > MAX_INPUTS:
                    continue
                # b comes after a in the toposort: only b can depend on a
                if _depends(b, a, rank) if rank is not None else set(a.outputs) & set(ancestors(b.inputs)):
                    declined.add((a, b))
                    continue
                return a, b
        return None


def _onepass_enabled() -> bool:
    return os.environ.get("PMFAST_SIBLING_ONEPASS", "1") != "0"


def _incremental_enabled() -> bool:
    return os.environ.get("PMFAST_SIBLING_INCREMENTAL", "1") != "0"


def _depends(b, a, rank) -> bool:
    """Is there a path from ``a`` to ``b`` (``rank``: every node's toposort position, ``a`` before ``b``)?

    Every node on such a path sits between ``a`` and ``b`` in the toposort, so the walk up from
    ``b``'s inputs stops at nodes ranked before ``a``: the same answer as searching all of ``b``'s
    ancestors for ``a``'s outputs, without visiting the graph above ``a``.
    """
    floor = rank[a]
    stack = [v.owner for v in b.inputs if v.owner is not None]
    seen = set()
    while stack:
        node = stack.pop()
        if node is a:
            return True
        if node in seen or rank[node] < floor:
            continue
        seen.add(node)
        stack.extend(v.owner for v in node.inputs if v.owner is not None)
    return False


class _SearchMemo(Feature):
    """Each node's candidacy (:func:`_loop_candidate`) and data keys, kept across the pass's searches.

    A node's answers read its inputs (their owners, for gathers), its outputs' clients and the
    graph's outputs. Attached to the graph while the pass runs, the memo forgets a node whenever
    one of those can have changed: its input was replaced (``on_change_input``; the owners of the
    old and the new variable gain or lose a client, a graph output moves), or a client of one of
    its outputs was imported or pruned. The searches then see what recomputing everything would.
    ``PMFAST_SIBLING_INCREMENTAL=0``: recomputed at every search.
    """

    def __init__(self):
        self._candidate: dict = {}
        self._keys: dict = {}

    def candidate(self, fgraph, node, eligible) -> bool:
        ok = self._candidate.get(node)
        if ok is None:
            ok = self._candidate[node] = _loop_candidate(fgraph, node, eligible)
        return ok

    def keys(self, node) -> set:
        keys = self._keys.get(node)
        if keys is None:
            keys = self._keys[node] = _data_keys(node)
        return keys

    def _forget(self, node) -> None:
        self._candidate.pop(node, None)
        self._keys.pop(node, None)

    def _forget_producers(self, node) -> None:
        self._forget(node)
        for v in node.inputs:
            if v.owner is not None:
                self._forget(v.owner)

    def on_import(self, fgraph, node, reason):
        self._forget_producers(node)

    def on_prune(self, fgraph, node, reason):
        self._forget_producers(node)

    def on_change_input(self, fgraph, node, i, r, new_r, reason=None):
        if node != "output":
            self._forget(node)
        for v in (r, new_r):
            if v.owner is not None:
                self._forget(v.owner)


def _data_keys(node) -> set:
    """What ``node`` reads that another node may share (:func:`_shares_data`): ``(ndim, input)`` for
    each input not broadcast on every axis, ``(ndim, index)`` for each gathered input's index."""
    nd = node.outputs[0].type.ndim
    keys = {(nd, "input", v) for v in node.inputs if not all(v.type.broadcastable[:nd])}
    keys |= {(nd, "index", k) for k in (_gather_key(v) for v in node.inputs) if k is not None}
    return keys


# Position 49.18: after ``elemwise_fusion`` (49) built the Composites and
# ``wide_split`` (49.15) cut the wide ones (merging is capped below its chunk
# size, so nothing it splits is re-widened), before ``indexed_elemwise``'s
# loop fusion (49.2), which then runs each merged node as one loop.
indexed_elemwise_pass.register(SiblingFusion(), 49.18, name="siblings")
