"""Scatter-adds left over by loop fusion run as ``IndexedElemwise`` loops too.

``indexed_elemwise`` puts a gradient scatter ``inc_subtensor(buf[idx], y)``
into the loop that computes ``y`` when it can. Some stay outside: ``y`` is
not an Elemwise output (a ``Softmax`` gradient, a Join), or it feeds more
scatters than one loop may take arguments (the zoo's ``wide_additive``: one
gradient scattered into 20 parameter blocks). Stock numba runs each of those
as a row-by-row copy through array views, which costs ~6× a plain loop on
short rows (measured: 70 µs vs 12 µs for a (2000, 20) ``y`` into (8, 20)).

This rewrite runs every remaining ``AdvancedIncSubtensor1`` (inc or set, not
inplace) of one ``y`` as one :class:`IndexedElemwise` loop with an identity
body: ``y`` is read once per element and written into up to
``MAX_SCATTERS`` buffers (``buf_j[idx_j[i], k] += y[i, k]``; repeated indices
accumulate like ``np.add.at``, ``set`` writes in order, bounds checked).

Safe only where the loop's length checks raise exactly when stock raises:
every non-broadcast axis of ``y`` must be proven equal to the index length
(axis 0) / the buffer's axis (the others) by :class:`EqualLengths`, or have a
static length other than 1 (stock would broadcast a runtime length of 1).
Buffers must not be read by the loop nor depend on another scatter of the
group; dtypes must match. Otherwise the scatter is left to stock.
"""

from __future__ import annotations

import logging

from pytensor.graph.traversal import ancestors
from pytensor.scalar.basic import identity
from pytensor.tensor.subtensor import AdvancedIncSubtensor1

from pmfast.loops.spec import INC, SET, Gather, IndexedLoop, Read, Write
from pmfast.passes.indexed_elemwise import IndexedElemwise, indexed_elemwise_pass
from pmfast.passes.lengths import EqualLengths
from pmfast.passes.registry import record
from pmfast.passes.rewriting import PassRewriter

_log = logging.getLogger(__name__)

#: Scatters per loop: one ``y`` plus a buffer and an index each stays within the
#: 30 arguments a numba call may take without quadratic compile cost (DESIGN.md).
MAX_SCATTERS = 14


def _axis_ok(eq: EqualLengths, y, d, other, od) -> bool:
    n = y.type.shape[d]
    return (n is not None and n != 1) or eq.same(y, d, other, od)


def scatter_ok(eq: EqualLengths, node) -> bool:
    """Can the ``AdvancedIncSubtensor1`` ``node`` run in an identity loop with stock semantics?"""
    if not isinstance(node.op, AdvancedIncSubtensor1) or node.op.inplace:
        return False
    buf, y, idx = node.inputs
    nd = buf.type.ndim
    if nd == 0 or y.type.ndim != nd or y.type.dtype != buf.type.dtype or node.outputs[0].type != buf.type:
        return False
    if idx.type.ndim != 1 or idx.type.dtype[:3] not in ("int", "uin"):
        return False
    if y is buf or y is idx or buf is idx:
        return False
    for d in range(nd):
        if y.type.broadcastable[d]:
            continue
        if not _axis_ok(eq, y, d, idx if d == 0 else buf, 0 if d == 0 else d):
            return False
    return True


def build_scatter_loop(y, scatters):
    """``(old outputs, new node)``: one identity loop doing the ``AdvancedIncSubtensor1`` ``scatters`` of ``y``."""
    nd = y.type.ndim
    inputs = [y]
    pos = {}

    def slot(v):
        if v not in pos:
            pos[v] = len(inputs)
            inputs.append(v)
        return pos[v]

    read = Read(0, tuple(None if b else d for d, b in enumerate(y.type.broadcastable)))
    writes = []
    for node in scatters:
        buf, _, idx = node.inputs
        i = slot(idx)
        b = len(inputs)
        inputs.append(buf)  # every buffer gets its own slot
        mode = SET if node.op.set_instead_of_inc else INC
        writes.append(Write(0, mode, buffer=b, axes=(Gather(i, (0,)), *range(1, nd))))
    loop = IndexedLoop(identity, (read,), tuple(writes), ndim=nd)
    op = IndexedElemwise(loop, [n.outputs[0].type for n in scatters])
    return [n.outputs[0] for n in scatters], op.make_node(*inputs)


def _groups(fgraph, eq):
    """Per ``y``: its eligible scatters, split into independent groups of at most ``MAX_SCATTERS``."""
    by_y: dict = {}
    for node in fgraph.toposort():
        if isinstance(node.op, AdvancedIncSubtensor1):
            try:
                if scatter_ok(eq, node):
                    by_y.setdefault(node.inputs[1], []).append(node)
            except Exception:
                _log.debug("scatter loops: declined %s", node, exc_info=True)
    for y, nodes in by_y.items():
        group: list = []
        outs: set = set()
        for node in nodes:
            buf, _, idx = node.inputs
            deps = set(ancestors([buf, idx]))
            if outs & deps:
                continue  # chained on another scatter of the group: a later round takes it
            group.append(node)
            outs.add(node.outputs[0])
            if len(group) == MAX_SCATTERS:
                yield y, group
                group, outs = [], set()
        if group:
            yield y, group


def _pairs(old, new):
    return list(zip(old, new.outputs, strict=True))


class ScatterLoops(PassRewriter):
    """Replace the remaining ``AdvancedIncSubtensor1`` nodes by identity ``IndexedElemwise`` loops."""

    reason = "pmfast.scatter_loops"
    #: rounds over the graph (a chained scatter waits one round for its buffer)
    MAX_ROUNDS = 4

    def apply(self, fgraph):
        n = 0
        for _ in range(self.MAX_ROUNDS):
            done = 0
            try:
                eq = EqualLengths(fgraph)
                groups = list(_groups(fgraph, eq))
            except Exception:
                _log.debug("scatter loops: stopped", exc_info=True)
                break
            for y, group in groups:
                if any(node not in fgraph.apply_nodes for node in group):
                    continue
                done += self.attempt(fgraph, lambda: _pairs(*build_scatter_loop(y, group)), y)
            n += done
            if not done:
                break
        if n:
            record(fgraph, "indexed_elemwise", n)


# Position 49.22: after loop fusion (49.2) took the scatters it can do inside
# the loop computing ``y`` (better: ``y`` is never stored), before the destroy
# handler (49.5); the inplace rewrite at 70.65 then makes these buffers
# destructive like those of the fused loops.
indexed_elemwise_pass.register(ScatterLoops(), 49.22, name="scatter_loops")
