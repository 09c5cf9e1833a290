"""Sibling fusion in one walk: after a merge the search goes on from the merged node, not from the start.

The restart search (:meth:`SiblingFusion._find_pair`) takes a fresh toposort after every merge
and tries every candidate again with every later one: work ~ merges × graph. Here one toposort
ranks the nodes; its candidates, in that order, are the *anchors*. An anchor grows by its
partners (candidates sharing a data key, :func:`_data_keys`), nearest rank first, until none fits;
the merged node takes the anchor's place and the walk moves on to the next anchor. A pair once
rejected (shape, width, a path between them) is never offered again: merging only widens a node
and adds paths, and the merged node is a new node whose pairs are new. Each pair is tested once.

The path search (:func:`_above`, the bounded walk of ``_depends``) needs the ranks to stay a
topological order of the changing graph. A merge of ``u`` (ranked first) and ``v`` proves ``v``
independent of ``u`` by collecting ``v``'s ancestors ranked after ``u``; the merged node takes
``u``'s rank and those ancestors move, in their order, just before it (after all their other
producers, ranked before ``u``). Nothing else moves, so every edge still points to a higher rank.
Ranks are floats; if spacing them runs out of precision, one new toposort ranks the graph again.

``PMFAST_SIBLING_ONEPASS=0``: the restart search.
"""

from __future__ import annotations

import logging

from pytensor.tensor.utils import broadcast_static_dim_lengths


_log = logging.getLogger(__name__)


class _Stale(Exception):
    """A node without a rank: rank the graph again."""


def _rank_all(fgraph, stats) -> dict:
    stats["toposorts"] += 1
    return {n: float(k) for k, n in enumerate(fgraph.toposort())}


def _above(v, u, rank, stats):
    """``v``'s ancestors ranked after ``u`` (a list), or ``None`` if ``v`` depends on ``u``."""
    floor = rank[u]
    stack = [i.owner for i in v.inputs if i.owner is not None]
    seen: dict = {}
    while stack:
        node = stack.pop()
        stats["steps"] += 1
        if node is u:
            return None
        if node in seen:
            continue
        r = rank.get(node)
        if r is None:
            raise _Stale
        if r < floor:
            continue
        seen[node] = None
        stack.extend(i.owner for i in node.inputs if i.owner is not None)
    return list(seen)


def _fits(sf, fgraph, u, v, rank, stats):
    """``v``'s ancestors after ``u`` if ``u`` (ranked first) and ``v`` may merge, else ``None``."""
    stats["pairs"] += 1
    if not sf._same_shape(fgraph, u, v):
        return None
    if sf._weight(set(u.inputs) | set(v.inputs)) > sf.MAX_INPUTS:
        return None
    if len(u.outputs) + len(v.outputs) > sf.MAX_INPUTS:
        return None
    if not _same_static_shape(u, v):
        return None
    return _above(v, u, rank, stats)


def _same_static_shape(u, v) -> bool:
    """Would the merged node's outputs keep ``u``'s and ``v``'s static shapes (as Elemwise computes them)?

    If not, the replacement is declined for a type change anyway (``PassRewriter.attempt``):
    knowing it first saves building the merged Composite (its inner graph and its checks).
    """
    shape = _broadcast_shape(dict.fromkeys((*u.inputs, *v.inputs)))
    return shape is not None and all(o.type.shape == shape for o in (*u.outputs, *v.outputs))


def _broadcast_shape(inputs) -> tuple | None:
    """The static shape Elemwise gives its output from ``inputs``, or None if their static lengths clash."""
    try:
        return tuple(broadcast_static_dim_lengths(d) for d in zip(*(i.type.shape for i in inputs), strict=True))
    except ValueError:
        return None


def _move_before(nodes, target, rank) -> bool:
    """Give ``nodes`` (ancestors of a merged node, ranked after its first member) ranks just below
    ``target``'s, in their order, above all their other producers; ``False`` if floats run out."""
    if not nodes:
        return True
    inside = set(nodes)
    top = rank[target]
    low = max((rank[i.owner] for n in nodes for i in n.inputs if i.owner is not None and i.owner not in inside), default=top - 1.0)
    nodes = sorted(nodes, key=rank.__getitem__)
    step = (top - low) / (len(nodes) + 1)
    new = [low + step * (k + 1) for k in range(len(nodes))]
    if not all(a < b for a, b in zip([low, *new], [*new, top])):
        return False
    rank.update(zip(nodes, new))
    return True


def _stuck(node) -> bool:
    """Does ``node``'s output have a static shape its own inputs contradict (an input was replaced by one
    of a more precise type)? Then every merge changes its outputs' type (:func:`_same_static_shape`:
    a length other than 1 stays in the union's broadcast), so it merges with nothing."""
    dims = _broadcast_shape(node.inputs)
    if dims is None:
        return True
    return any(s is not None and s != 1 and s != o for s, o in zip(dims, node.outputs[0].type.shape, strict=True))


def _keys(sf, node) -> set:
    """``node``'s data keys, each with its output's static shape: nodes whose outputs differ in static
    shape never merge (:func:`_same_static_shape`), so they are not offered to each other."""
    shape = node.outputs[0].type.shape
    return {(shape, key) for key in sf._data_keys(node)}


def one_pass(rewriter, fgraph, sf) -> int:
    """Merge siblings in one walk (see the module docstring); the number of merges.

    ``sf``: :mod:`pmfast.passes.sibling_fusion`, whose matching rules (candidates, data keys,
    shapes, widths, the merge) the walk applies; passed in, as that module calls this one."""
    stats = {"toposorts": 0, "pairs": 0, "steps": 0, "merges": 0, "moved": 0, "reranks": 0}
    rewriter.last_stats = stats
    try:
        return _walk(rewriter, fgraph, stats, sf)
    except Exception:
        _log.debug("%s: walk stopped", rewriter.reason, exc_info=True)
        return stats["merges"]


def _walk(rewriter, fgraph, stats, sf) -> int:
    eligible: dict = {}
    rank = _rank_all(fgraph, stats)
    anchors = [n for n in sorted(rank, key=rank.__getitem__) if sf._loop_candidate(fgraph, n, eligible) and not _stuck(n)]
    keys = {n: _keys(sf, n) for n in anchors}
    sharing: dict = {}
    for n in anchors:
        for key in keys[n]:
            sharing.setdefault(key, []).append(n)
    rejected: set = set()
    nodes = fgraph.apply_nodes
    for group in anchors:
        while group in nodes and stats["merges"] < rewriter.max_merges:
            partners = {b for key in keys[group] for b in sharing[key] if b is not group and b in nodes}
            found = None
            for b in sorted(partners, key=rank.__getitem__):
                pair = frozenset((group, b))
                if pair in rejected:
                    continue
                u, v = (group, b) if rank[group] < rank[b] else (b, group)
                try:
                    above = _fits(sf, fgraph, u, v, rank, stats)
                except _Stale:
                    rank = _rank_all(fgraph, stats)
                    above = _fits(sf, fgraph, u, v, rank, stats)
                if above is None:
                    rejected.add(pair)
                    continue
                found = u, v, above
                break
            if found is None:
                break
            u, v, above = found
            made = []

            def build(u=u, v=v, made=made):
                made.append(sf.merge_siblings(u, v))
                return list(zip([*u.outputs, *v.outputs], made[-1].outputs, strict=True))

            if not rewriter.attempt(fgraph, build, (u, v)):
                rejected.add(frozenset((u, v)))
                continue
            stats["merges"] += 1
            m = made[-1]
            if m not in nodes or not sf._loop_candidate(fgraph, m, eligible):
                break  # not expected: the merged node is imported as built and gathers or only feeds reductions
            rank[m] = rank[u]
            stats["moved"] += len(above)
            if not _move_before(above, m, rank):
                stats["reranks"] += 1
                rank = _rank_all(fgraph, stats)
            keys[m] = _keys(sf, m)
            for key in keys[m]:
                sharing.setdefault(key, []).append(m)
            group = m
    return stats["merges"]
