"""A fused Elemwise made of repeated, independent pieces as one node per piece (part of ``wide_split``).

Fusion ties together work that shares nothing: ``scalarize``'s siblings (49.05) merge every
independent 0-d Elemwise, and sibling fusion (49.18) merges loops that only read through the same
index. In a hierarchical model the per-group copies of one subgraph end up inside single wide
nodes (hier_var, 8 groups: 0-d Composites of 8 × 5 outputs, a scatter loop of 8 copies of
``out[j] += 1 + a * b``), whose code grows with the number of groups and is compiled once per
such node, while the copies are the same computation.

:func:`split_components` cuts an Elemwise Composite's scalar graph into its connected components
(values computed by scalar nodes connect; inputs and constants do not). When some component
repeats (:func:`signature`: the same scalar ops on the same outer input types, inputs numbered in
order of first use walking back from the outputs), each repeated component becomes an Elemwise of
its own and the components that do not repeat stay together in one node. Copies then have the
same scalar op and the same input types, so the linker compiles their node function once (one
dispatcher per key and types) and the entry calls it per group; the loops built from them later
(``indexed_elemwise``, ``wide_loop``) are per group too.

Safe: every output is the same scalar functions of the same values, in the same order (bit for
bit). Each piece iterates over the same elements as the fused node: for every axis on which the
fused node's output is not broadcastable, the piece reads an input that is not broadcastable
there (whose length the fused node checked equal to the others'), else the node is left whole;
the new outputs' types must equal the old ones (``PassRewriter.attempt``).

``PMFAST_COMPONENT_SPLIT=0`` turns it off.
"""

from __future__ import annotations

import logging
import os
from collections import Counter

from pytensor.graph.basic import Constant

from pmfast.loops.blocks import with_inputs
from pmfast.passes.rewriting import PassRewriter, record_nodes_added

_log = logging.getLogger(__name__)

#: Fewest outer inputs of a node worth splitting: narrower nodes compile in a blink whole.
MIN_INPUTS = 4

#: Largest shared scalar subgraph each piece computes again (:func:`_duplicable`).
DUP_MAX = 8


def enabled() -> bool:
    return os.environ.get("PMFAST_COMPONENT_SPLIT", "1") != "0"


def _duplicable(fgraph, ndim: int) -> set:
    """The scalar nodes of ``fgraph`` a piece may compute again rather than share: each with at most
    :data:`DUP_MAX` nodes above it, all duplicable, and cheap (:data:`CHEAP_SCALAR_OPS`) unless
    the loop is 0-d (one evaluation per call: a second ``exp`` of a hyperparameter costs nothing)."""
    from pmfast.loops.body import CHEAP_SCALAR_OPS, MAY_RAISE, _scalar_op_name

    size: dict = {}
    dup = set()
    for node in fgraph.toposort():
        name = _scalar_op_name(node.op)
        owners = {i.owner for i in node.inputs if i.owner is not None}
        if name in MAY_RAISE or (ndim and name not in CHEAP_SCALAR_OPS) or not owners <= dup:
            continue
        cone = 1 + sum(size[o] for o in owners)
        if cone <= DUP_MAX:
            size[node] = cone
            dup.add(node)
    return dup


def components(fgraph, ndim: int = 0):
    """``[(input indices, output indices), ...]``: the outputs of a scalar ``fgraph`` grouped by the
    scalar nodes they share, in order of their first output, inputs in order of first use walking
    back from the outputs; ``None`` if an output is an input or a constant.

    A *hub* is a :func:`_duplicable` node read by nodes of two or more groups: it joins no group,
    each group that reads it computes it itself (a hyperparameter's ``exp`` read by every group's
    terms). Groups are the connected components of the producer/consumer edges that do not start
    at a hub; hubs are found from the other side: every duplicable node read twice starts as a hub,
    and one whose readers all fall in one group joins it, until none does.
    """
    if any(o.owner is None for o in fgraph.outputs):
        return None
    order = fgraph.toposort()
    outputs = {o.owner for o in fgraph.outputs}
    readers: dict = {n: set() for n in order}
    for node in order:
        for i in node.inputs:
            if i.owner is not None:
                readers[i.owner].add(node)
    hubs = {n for n in _duplicable(fgraph, ndim) if len(readers[n]) + (n in outputs) >= 2}
    while True:
        parent = {n: n for n in order}

        def find(n):
            while parent[n] is not n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        for node in order:
            for i in node.inputs:
                m = i.owner
                if m is not None and m not in hubs:
                    a, b = find(m), find(node)
                    if a is not b:
                        parent[a] = b
        joined = {h for h in hubs if len({find(r) for r in readers[h]}) <= 1}
        if not joined:
            break
        hubs -= joined
    groups: dict = {}
    for k, o in enumerate(fgraph.outputs):
        groups.setdefault(find(o.owner), []).append(k)
    return [with_inputs(fgraph, outs) for outs in groups.values()]


def signature(fgraph, ins, outs, in_types) -> tuple:
    """A hashable description of a component: equal for two components that compute the same
    scalar ops, in the same order, on inputs of the same types (``in_types``: the outer input
    types, by input index), with the same constants."""
    index = {fgraph.inputs[k]: j for j, k in enumerate(ins)}
    ids: dict = {}
    steps = []

    def ref(v):
        if v in index:
            return ("i", index[v])
        if isinstance(v, Constant):
            return ("c", str(v.type), repr(v.data))
        return ("n", ids[v.owner], v.owner.outputs.index(v))

    seen = set()
    stack = [(fgraph.outputs[o], False) for o in reversed(outs)]
    while stack:
        v, done = stack.pop()
        node = v.owner
        if node is None or v in index:
            continue
        if done:
            if node not in ids:
                ids[node] = len(ids)
                steps.append((node.op, tuple(ref(i) for i in node.inputs)))
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((v, True))
        stack.extend((i, False) for i in reversed(node.inputs))
    return (
        tuple(in_types[k] for k in ins),
        tuple(steps),
        tuple(ref(fgraph.outputs[o]) for o in outs),
    )


def join_private(fgraph, comps, in_types):
    """``comps`` (:func:`components`) joined through the inputs they share, except the inputs
    shared by copies: an input read by pieces that are all different (a group's own value read by
    its log-density term and its gradient term) joins them, so the group reads it in one piece; one
    read by two pieces with the same :func:`signature` (a hyperparameter every group reads), or by
    pieces that repeat and pieces that do not (a total over the groups reading every group's value),
    joins nothing; two with the same signature and the same inputs are one. Returns ``(comps,
    signatures)``."""
    sigs = [signature(fgraph, ins, outs, in_types) for ins, outs in comps]
    parent = list(range(len(comps)))

    def find(c):
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    same: dict = {}  # the same computation on the same inputs twice: one piece
    for c, (ins, _) in enumerate(comps):
        first = same.setdefault((sigs[c], tuple(ins)), c)
        if first != c:
            parent[c] = first
    readers: dict = {}
    for c, (ins, _) in enumerate(comps):
        for k in ins:
            readers.setdefault(k, []).append(c)
    counts = Counter(sigs)
    for cs in readers.values():
        repeated = {counts[sigs[c]] > 1 for c in cs}
        if len(cs) > 1 and len({sigs[c] for c in cs}) == len(cs) and len(repeated) == 1:
            for c in cs[1:]:
                a, b = find(c), find(cs[0])
                if a != b:
                    parent[a] = b
    if all(find(c) == c for c in range(len(comps))):
        return comps, sigs
    merged: dict = {}
    for c in range(len(comps)):
        merged.setdefault(find(c), []).extend(comps[c][1])
    joined = [with_inputs(fgraph, sorted(outs)) for outs in merged.values()]
    return joined, [signature(fgraph, ins, outs, in_types) for ins, outs in joined]


def _pieces(comps, sigs):
    """Each repeated component alone, then the others together (if any): ``[(ins, outs), ...]``."""
    counts = Counter(sigs)
    pieces = [c for c, s in zip(comps, sigs, strict=True) if counts[s] > 1]
    rest = [c for c, s in zip(comps, sigs, strict=True) if counts[s] == 1]
    if rest:
        pieces.append((list(dict.fromkeys(k for ins, _ in rest for k in ins)), sorted(o for _, outs in rest for o in outs)))
    return pieces


def _piece_node(fgraph, node, ins, outs):
    """The Elemwise computing outputs ``outs`` of ``node`` from its inputs ``ins`` (scalar
    ``fgraph``: the node's flattened Composite), or ``None`` if it would iterate differently."""
    from pytensor.scalar.basic import Composite
    from pytensor.tensor.elemwise import Elemwise

    inputs = [node.inputs[k] for k in ins]
    for d, bcast in enumerate(node.outputs[0].type.broadcastable):
        if not bcast and all(v.type.broadcastable[d] for v in inputs):
            return None  # the piece alone would not run the full length of axis d
    scalar_ins = [fgraph.inputs[k] for k in ins]
    scalar_outs = [fgraph.outputs[o] for o in outs]
    inner = {n for n in _nodes_between(scalar_ins, scalar_outs)}
    only = next(iter(inner)) if len(inner) == 1 else None
    if only is not None and list(only.inputs) == scalar_ins and list(only.outputs) == scalar_outs:
        scalar_op = only.op  # one scalar op: as fusion leaves a lone node
    else:
        scalar_op = Composite(scalar_ins, scalar_outs)
    return Elemwise(scalar_op).make_node(*inputs)


def _nodes_between(ins, outs):
    from pytensor.graph.traversal import toposort

    return toposort(outs, blockers=ins)


def split_components(fgraph, node):
    """``node``'s outputs computed by one Elemwise per repeated component (see the module
    docstring), or ``None``: not a Composite Elemwise, inplace, narrow, or nothing repeats."""
    from pytensor.scalar.basic import Composite
    from pytensor.tensor.elemwise import Elemwise

    from pmfast.loops.body import flatten_composites

    op = node.op
    if not isinstance(op, Elemwise) or not isinstance(op.scalar_op, Composite) or op.inplace_pattern:
        return None
    if len(node.inputs) < MIN_INPUTS:
        return None
    sfg = flatten_composites(op.scalar_op.fgraph)
    comps = components(sfg, node.outputs[0].type.ndim)
    if not comps or len(comps) < 2:
        return None
    comps, sigs = join_private(sfg, comps, [v.type for v in node.inputs])
    if len(set(sigs)) == len(sigs):
        return None
    new = [None] * len(node.outputs)
    for ins, outs in _pieces(comps, sigs):
        piece = _piece_node(sfg, node, ins, outs)
        if piece is None:
            return None
        for o, v in zip(outs, piece.outputs, strict=True):
            new[o] = v
    if any(v is None for v in new):
        return None
    return new


class ComponentSplit(PassRewriter):
    """One walk over a snapshot of the toposort, splitting every node :func:`split_components` can."""

    reason = "pmfast.wide_split.components"

    def apply(self, fgraph):
        from pmfast.passes.registry import record

        if not enabled():
            return 0
        n, before = 0, len(fgraph.apply_nodes)
        for node in list(fgraph.toposort()):
            if node not in fgraph.apply_nodes:
                continue
            n += self.attempt(fgraph, lambda: _pairs(fgraph, node), node)
        if n:
            record(fgraph, "wide_split", n)
            record_nodes_added(fgraph, "wide_split", len(fgraph.apply_nodes) - before)
        return n


def _pairs(fgraph, node):
    new = split_components(fgraph, node)
    return None if new is None else list(zip(node.outputs, new, strict=True))
