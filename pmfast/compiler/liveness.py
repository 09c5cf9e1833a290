"""numba's live-variable analysis with work lists instead of sweeps over every block.

``numba.core.analysis.compute_live_map`` (which numba's post-processor runs after every pass that
changes the control flow: ``VariableLifetime``) solves two data-flow problems by sweeping all blocks,
in the dict's order, until no set grows: the variables used or defined in a block reaching each
block (forwards), then the variables live at each block's entry (backwards). Each sweep unions
sets of every block's variables; the number of sweeps grows with how far a change travels against
the dict's order. After numba inlines an entry's node functions, each callee's blocks sit at the
end of the dict while control returns to the caller's blocks before them, so the sweeps number in
the dozens (bayesian_var_ireland's entry: 416 blocks, 2,774 variables, 0.9 of the 1.5 CPU s this
analysis took in a 13 CPU s cold compile).

:func:`compute_live_map` solves the same equations with work lists, first in the control flow's
topological order (its reverse for liveness), then a block whose set grew queues only the blocks
its set flows to. Both are chaotic iterations of the same monotone equations from
the same initial sets, so both end at their least solution: the same sets (``live_map`` in the
blocks' order, as numba's). ``tests/test_compiler_liveness.py`` compares them on random control
flow graphs and on numba's own functions. The sets are solved as integer bit sets
(``PMFAST_LIVENESS_BITS=0``: Python sets): the same sets, so the same IR and code, no key changes.

Compile-scoped (:func:`install`: numba's function outside pmfast's compiles and in other threads).
"""

from __future__ import annotations

import os
from collections import defaultdict, deque

_installed = False


def _order(cfg, labels) -> list:
    """``labels`` in the control flow's topological order (back edges ignored), the others after:
    the first pass over them in this order (or its reverse, for a backward problem) settles every
    set of a loop-free graph."""
    try:
        topo = [b for b in cfg.topo_order() if b in labels]
    except (AttributeError, KeyError):
        topo = []
    seen = set(topo)
    return topo + [b for b in labels if b not in seen]


def _settle(order, neighbours, sets, flow, admit=lambda block: True) -> None:
    """Grow ``sets[v] |= flow(b, v)`` along each edge ``b → v`` of ``neighbours(b)`` until nothing grows:
    a work list started in ``order``; a block whose set grew is visited again if ``admit`` takes it."""
    work, queued = deque(order), set(order)
    while work:
        b = work.popleft()
        queued.discard(b)
        for v, _ in neighbours(b):
            dst = sets[v]
            n = len(dst)
            dst |= flow(b, v)
            if len(dst) != n and admit(v) and v not in queued:
                work.append(v)
                queued.add(v)


def _sets_compute_live_map(cfg, blocks, var_use_map, var_def_map):
    """:func:`compute_live_map` on Python sets (``PMFAST_LIVENESS_BITS=0``)."""
    forward = _order(cfg, var_def_map)
    reach: dict = defaultdict(set)
    for b in var_def_map:
        reach[b] |= var_def_map[b] | var_use_map[b]
    _settle(forward, cfg.successors, reach, lambda b, s: reach[b], admit=var_def_map.__contains__)
    live_map = {b: set(var_use_map[b]) for b in blocks.keys()}
    backward = _order(cfg, live_map)[::-1]
    _settle(backward, cfg.predecessors, live_map, lambda b, p: (live_map[b] & reach[p]) - var_def_map[p])
    return live_map


def _settle_bits(order, neighbours, sets, flow, admit=lambda block: True) -> None:
    """:func:`_settle` on integer bit sets (immutable: each grown set is stored anew)."""
    work, queued = deque(order), set(order)
    while work:
        b = work.popleft()
        queued.discard(b)
        for v, _ in neighbours(b):
            dst = sets[v]
            grown = dst | flow(b, v)
            if grown != dst:
                sets[v] = grown
                if admit(v) and v not in queued:
                    work.append(v)
                    queued.add(v)


def _names(bits: int, names: list) -> set:
    """The names whose bits are set in ``bits``."""
    out, text, i = set(), bin(bits)[:1:-1], -1
    while (i := text.find("1", i + 1)) >= 0:
        out.add(names[i])
    return out


def compute_live_map(cfg, blocks, var_use_map, var_def_map):
    """The variables live at the entry of each block (numba's ``compute_live_map``, same result).

    The sets are integers with one bit per variable while they are solved: a block's reaching set
    holds every variable used or defined upstream of it (thousands, after inlining), and a union of
    two such sets is then a few hundred machine words instead of a hash per element
    (bayesian_var_ireland's cold compile spent 1.45 CPU s here with sets).
    ``PMFAST_LIVENESS_BITS=0``: sets, as before (the same result)."""
    if os.environ.get("PMFAST_LIVENESS_BITS", "1") == "0":
        return _sets_compute_live_map(cfg, blocks, var_use_map, var_def_map)
    index: dict = {}
    names: list = []

    def bits(group) -> int:
        m = 0
        for n in group:
            i = index.get(n)
            if i is None:
                i = index[n] = len(names)
                names.append(n)
            m |= 1 << i
        return m

    use = {b: bits(u) for b, u in var_use_map.items()}
    defs = {b: bits(d) for b, d in var_def_map.items()}
    # reaching uses and definitions: D[b] >= use[b] | def[b] for the blocks of var_def_map, and
    # D[s] >= D[b] for each successor s of such a block b
    reach: dict = defaultdict(int)
    for b in var_def_map:
        reach[b] |= defs[b] | use[b]
    _settle_bits(_order(cfg, var_def_map), cfg.successors, reach, lambda b, s: reach[b], admit=var_def_map.__contains__)
    # liveness: L[b] >= use[b], and L[p] >= (L[b] & D[p]) - def[p] for each predecessor p of b
    live = {b: use[b] if b in use else bits(var_use_map[b]) for b in blocks.keys()}

    def defined(p) -> int:
        m = defs.get(p)
        if m is None:
            m = defs[p] = bits(var_def_map[p])
        return m

    _settle_bits(_order(cfg, live)[::-1], cfg.predecessors, live, lambda b, p: live[b] & reach[p] & ~defined(p))
    return {b: _names(m, names) for b, m in live.items()}


def install() -> None:
    """Make ``numba.core.analysis.compute_live_map`` use :func:`compute_live_map` inside pmfast's
    compiles (installed once per process; numba's post-processor looks it up on the module)."""
    global _installed
    if _installed:
        return
    from numba.core import analysis

    from pmfast.compiler.patching import scoped

    analysis.compute_live_map = scoped(analysis.compute_live_map, compute_live_map)
    _installed = True
