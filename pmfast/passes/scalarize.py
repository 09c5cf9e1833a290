"""``scalarize``: elementwise work on one-element arrays done on 0-d values, so fusion merges it.

A model's scalar parameters reach its gradient as one-element vectors: nutpie's gradient is a
``Join`` of one vector per value variable, so the gradient of ``mu`` is built as ``(1,)``-shaped
arrays, ``f(ExpandDims(a), ExpandDims(b))``, next to the 0-d ``Composite`` that computes the
priors and transforms of the same scalars (``Exp``, ``Log``, the logp terms). pytensor's fusion
merges Elemwise nodes of the same rank only, so these stay a handful of separate nodes, each an
allocation, a call and its reference counting in the compiled graph function: on the µs-scale
models of the zoo (radon: 919 rows in ~1 µs) this costs more than the loop over the data.

Rewrites, at 48.6 (repeated while one applies):

* ``lift``: an ``Elemwise`` whose outputs have one element (every axis broadcastable) computed
  on 0-d inputs, then expanded: ``f(ExpandDims(a), [c], v) -> ExpandDims(f(a, c, Squeeze(v)))``.
  An input that is an ``ExpandDims`` of a 0-d variable is read through; a constant becomes its
  0-d value; any other input (a slice ``x[:1]`` of the point) is squeezed, which adds a node, so
  the rewrite is declined when it would add more squeezes than it saves (``ExpandDims`` inputs
  read through, and clients of its outputs that squeeze them, which ``compose`` removes).
* ``compose``: a ``DimShuffle`` of a ``DimShuffle`` of a 0-d variable is that variable, expanded
  to the outer rank (``Squeeze(ExpandDims(s)) -> s``): what ``lift`` leaves behind between
  neighbours. A squeeze of a one-element constant slice of a vector is the element
  (``Squeeze(x[87:88]) -> x[87]``), which the final merge shares with the ``x[87]`` the priors
  already read.

and at 49.05, after ``elemwise_fusion`` (49) built the 0-d Composites:

* ``siblings``: 0-d Elemwise nodes with no path between them merged into one multi-output
  Composite (fusion merges producer and consumer only; the scalar work after a loop is several
  independent pieces: one per parameter's gradient). Capped at ``MAX_INPUTS`` inputs and
  outputs, before ``wide_split`` (49.15) and the loop passes.

Why it is safe: every array involved has exactly one element, so the scalar function sees the
same values in the same order and the output, expanded, has the old type (checked: a
replacement of another type is declined). A merged Composite computes each original scalar
graph on the union of the inputs, bit for bit (:func:`pmfast.passes.sibling_fusion.merge_siblings`).
In-place Elemwise are left alone (none exist before position 50.5 anyway).

Why 48.6: after ``add_mul_fusion`` (48), gather lifting (48.4) and the parameter-check rewrite
(48.5), whose sums and switches it then sees in their final form; before ``elemwise_fusion``
(49), which then builds one 0-d Composite for the scalar work on each side of the loops.
"""

from __future__ import annotations

import logging

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.scalar.basic import ScalarConstant
from pytensor.tensor.basic import constant
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.subtensor import Subtensor, get_idx_list

from pmfast.passes.registry import record, register_pass
from pmfast.passes.rewriting import NodeRewritePass, PassRewriter
from pmfast.passes.sibling_fusion import merge_group

_log = logging.getLogger(__name__)


PASS_NAME = "scalarize"


def _expanded_scalar(v):
    """The 0-d variable ``v`` is an ``ExpandDims`` of, or ``None``."""
    owner = v.owner
    if owner is not None and isinstance(owner.op, DimShuffle) and owner.inputs[0].type.ndim == 0:
        return owner.inputs[0]
    return None


def _expand(s, ndim: int):
    return s if ndim == 0 else s.dimshuffle(["x"] * ndim)


def lift(fgraph, node):
    """``node``'s outputs computed on 0-d inputs and expanded, or ``None``."""
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern:
        return None
    ndim = node.outputs[0].type.ndim
    if ndim == 0 or not all(all(o.type.broadcastable) for o in node.outputs):
        return None
    args, read_through, squeezed = [], 0, 0
    for inp in node.inputs:
        if not all(inp.type.broadcastable):
            return None
        s = _expanded_scalar(inp)
        if s is not None:
            read_through += 1
        elif isinstance(inp, Constant):
            s = constant(np.asarray(inp.data).reshape(()), dtype=inp.type.dtype)
        else:
            s = inp.dimshuffle([])
            squeezed += 1
        args.append(s)
    squeezing_clients = sum(
        isinstance(c.op, DimShuffle) and c.outputs[0].type.ndim == 0
        for o in node.outputs
        for c, _ in fgraph.clients.get(o, [])
    )
    if squeezed > read_through + squeezing_clients:
        return None
    outs = op.make_node(*args).outputs
    return [_expand(o, ndim) for o in outs]


def _element(fgraph, v):
    """``x[k]`` if ``v`` is a one-element slice ``x[k:k+1]`` of a vector with constant ``0 <= k``, else ``None``."""
    owner = v.owner
    if owner is None or not isinstance(owner.op, Subtensor) or owner.inputs[0].type.ndim != 1:
        return None
    (idx,) = get_idx_list(owner.inputs, owner.op.idx_list)
    if not isinstance(idx, slice) or idx.step is not None:
        return None
    bounds = []
    for b in (idx.start, idx.stop):
        if b is None:
            bounds.append(None)
        elif isinstance(b, ScalarConstant):
            bounds.append(int(b.data))
        else:
            return None
    start = 0 if bounds[0] is None else bounds[0]
    if start < 0 or bounds[1] != start + 1:
        return None
    x = owner.inputs[0]
    for client, _ in fgraph.clients.get(x, []):  # the x[k] the graph already has (index constants differ in dtype)
        if isinstance(client.op, Subtensor) and client.outputs[0].type.ndim == 0:
            (k,) = get_idx_list(client.inputs, client.op.idx_list)
            if isinstance(k, ScalarConstant) and int(k.data) == start:
                return client.outputs[0]
    return x[start]


def compose(fgraph, node):
    """``DimShuffle(DimShuffle(s))`` for a 0-d ``s`` as ``s`` expanded to the outer rank; ``Squeeze(x[k:k+1])`` as ``x[k]``."""
    s = _expanded_scalar(node.inputs[0])
    if s is not None:
        return [_expand(s, node.outputs[0].type.ndim)]
    if node.outputs[0].type.ndim == 0:
        e = _element(fgraph, node.inputs[0])
        return None if e is None else [e]
    return None


#: Most inputs (and outputs) of a merged 0-d Composite: below ``wide_split``'s 30-argument calls.
MAX_INPUTS = 24

#: Candidate 0-d nodes looked at per graph (a bound on the ancestry bitsets' width).
MAX_CANDIDATES = 2048

#: Open groups a candidate is offered to (the oldest one closes when another opens): a bound on the search.
MAX_OPEN = 64


def _scalar_node(node) -> bool:
    op = node.op
    return (
        isinstance(op, Elemwise)
        and not op.inplace_pattern
        and all(v.type.ndim == 0 and np.dtype(v.type.dtype).kind in "biuf" for v in (*node.inputs, *node.outputs))
    )


class _Group:
    """Candidates merged into one node: their outer inputs, output count, member bits, and (once two or
    more) ``closure``: the bits of every candidate the merged node depends on, its members included."""

    __slots__ = ("members", "inputs", "n_out", "bits", "closure")

    def __init__(self, node, k: int):
        self.members = [node]
        self.inputs = dict.fromkeys(node.inputs)
        self.n_out = len(node.outputs)
        self.bits = 1 << k
        self.closure = 0

    def fits(self, node) -> bool:
        new = sum(v not in self.inputs for v in dict.fromkeys(node.inputs))
        return len(self.inputs) + new <= MAX_INPUTS and self.n_out + len(node.outputs) <= MAX_INPUTS


def _closure(bits: int, merged) -> int:
    """``bits`` (candidates) with everything they depend on once each group of ``merged`` is one node."""
    while True:
        new = bits
        for g in merged:
            if g.bits & new:
                new |= g.closure
        if new == bits:
            return bits
        bits = new


def sibling_groups(fgraph) -> list[list]:
    """The 0-d Elemwise candidates of ``fgraph`` packed into groups that may each merge into one node.

    One pass in toposort order, first fit: a candidate joins the oldest open group it fits (caps
    on inputs and outputs) and does not depend on, in the graph where every group so far is one
    node. Dependencies are bitsets over candidates: ``anc`` (the original graph, one pass) closed
    over each multi-member group's ``closure`` (kept transitive as groups grow). A candidate comes
    after every member of the groups it is offered to, so none of them depends on it: the merged
    graph stays acyclic. Groups never merge with each other: the candidate that opened a group was
    refused by the older ones, and refusals persist (merging only adds paths; inputs only grow).
    """
    order = fgraph.toposort()
    cands = [n for n in order if _scalar_node(n)][:MAX_CANDIDATES]
    if len(cands) < 2:
        return []
    index = {n: k for k, n in enumerate(cands)}
    anc: dict = {}  # node -> bits of the candidates it depends on, itself included
    for node in order:
        bits = 0
        for v in node.inputs:
            if v.owner is not None:
                bits |= anc[v.owner]
        k = index.get(node)
        anc[node] = bits if k is None else bits | (1 << k)
    merged: list[_Group] = []  # the groups of two or more
    open_: list[_Group] = []
    for k, node in enumerate(cands):
        deps = _closure(anc[node], merged)
        target = next((g for g in open_ if not g.bits & deps and g.fits(node)), None)
        if target is None:
            open_.append(_Group(node, k))
            if len(open_) > MAX_OPEN:
                open_.pop(0)
            continue
        if not target.closure:
            target.closure = _closure(anc[target.members[0]], merged)
            merged.append(target)
        target.members.append(node)
        target.inputs.update(dict.fromkeys(node.inputs))
        target.n_out += len(node.outputs)
        target.bits |= 1 << k
        target.closure |= deps
        for g in merged:  # groups downstream of target now depend on what it depends on
            if g is not target and g.closure & target.bits:
                g.closure |= target.closure
    return [g.members for g in merged]


class ScalarSiblings(PassRewriter):
    """Merge 0-d Elemwise nodes with no path between them (see the module docstring): one pass
    (:func:`sibling_groups`), one merged node per group, linear in the graph."""

    reason = "pmfast.scalarize.siblings"

    def apply(self, fgraph):
        try:
            groups = sibling_groups(fgraph)
        except Exception:
            _log.debug("%s: group search stopped", self.reason, exc_info=True)
            return 0
        merges = 0
        for members in groups:
            build = lambda m=members: list(zip([o for n in m for o in n.outputs], merge_group(m).outputs, strict=True))  # noqa: E731
            if self.attempt(fgraph, build, members):
                merges += len(members) - 1
        if merges:
            record(fgraph, PASS_NAME, merges)
        return merges


def scalarize(fgraph, node):
    """``lift`` for an Elemwise, ``compose`` for a DimShuffle."""
    return (lift if isinstance(node.op, Elemwise) else compose)(fgraph, node)


scalarize_pass = register_pass(PASS_NAME, "Elemwise on one-element arrays as 0-d Elemwise, so fusion merges the scalar work")
scalarize_pass.register(NodeRewritePass(scalarize, (Elemwise, DimShuffle), PASS_NAME), 48.6, name="lift")
scalarize_pass.register(ScalarSiblings(), 49.05, name="siblings")
