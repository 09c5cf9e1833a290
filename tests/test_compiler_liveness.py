"""pmfast.compiler.liveness: work-list live variables equal numba's sweeps, block for block."""

import numba
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.core import analysis
from numba.core.compiler import run_frontend
from numba.core.controlflow import CFGraph

from pmfast.compiler import liveness
from pmfast.compiler.patching import scoped

#: numba's own function, whatever is installed
NUMBA = getattr(analysis.compute_live_map, "__wrapped__", analysis.compute_live_map)


def _cfg(n, edges):
    g = CFGraph()
    for b in range(n):
        g.add_node(b)
    for a, b in edges:
        g.add_edge(a, b)
    g.set_entry_point(0)
    g.process()
    return g


@st.composite
def _problems(draw):
    """A random control flow graph (loops, joins, unreachable blocks, blocks listed in any order)
    with random use/def sets over a few variables."""
    n = draw(st.integers(1, 14))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n, unique=True))
    names = [f"v{i}" for i in range(draw(st.sampled_from([8, 150])))]  # 150: bit sets wider than a word
    order = draw(st.permutations(range(n)))
    use = {b: set(draw(st.lists(st.sampled_from(names), max_size=12))) for b in order}
    defs = {b: set(draw(st.lists(st.sampled_from(names), max_size=12))) - use[b] for b in order}
    return _cfg(n, edges), {b: None for b in order}, use, defs


@settings(max_examples=400, deadline=None)
@given(_problems())
def test_equals_numba_on_random_graphs(problem):
    cfg, blocks, use, defs = problem
    ours = liveness.compute_live_map(cfg, blocks, use, defs)
    theirs = NUMBA(cfg, blocks, use, defs)
    assert list(ours) == list(theirs)
    assert ours == theirs
    assert liveness._sets_compute_live_map(cfg, blocks, use, defs) == theirs


def test_sets_switch(monkeypatch):
    """``PMFAST_LIVENESS_BITS=0`` solves on sets (the same answer, by the other code)."""
    cfg, blocks, use, defs = _inlined_shape(5)
    calls = []
    monkeypatch.setattr(liveness, "_sets_compute_live_map", lambda *a: calls.append(1) or NUMBA(*a))
    monkeypatch.setenv("PMFAST_LIVENESS_BITS", "0")
    assert liveness.compute_live_map(cfg, blocks, use, defs) == NUMBA(cfg, blocks, use, defs) and calls == [1]
    monkeypatch.setenv("PMFAST_LIVENESS_BITS", "1")
    assert liveness.compute_live_map(cfg, blocks, use, defs) == NUMBA(cfg, blocks, use, defs) and calls == [1]


def _inlined_shape(n):
    """Blocks of a caller whose inlined callees' blocks sit after it in the dict (as numba's inliner
    leaves them): the caller's chain 0 → 100 → 1 → 101 → 2 … and each callee block defines a value the
    caller's next block reads."""
    order = list(range(n)) + [100 + k for k in range(n)]
    edges = [(k, 100 + k) for k in range(n)] + [(100 + k, k + 1) for k in range(n - 1)]
    g = CFGraph()
    for b in order:
        g.add_node(b)
    for a, b in edges:
        g.add_edge(a, b)
    g.set_entry_point(0)
    g.process()
    use = {b: ({f"r{b - 101}"} if b >= 101 else set()) | ({f"r{b - 1}", "x"} if 0 < b < 100 else {"x"}) for b in order}
    defs = {b: ({f"r{b - 100}"} if b >= 100 else {f"t{b}"}) for b in order}
    return g, {b: None for b in order}, use, defs


def test_equals_numba_on_an_inlined_chain():
    cfg, blocks, use, defs = _inlined_shape(200)  # 800 variables: many words per bit set
    assert liveness.compute_live_map(cfg, blocks, use, defs) == NUMBA(cfg, blocks, use, defs)


def _func(a, n):
    acc = 0.0
    for i in range(n):
        if a[i] > 0:
            acc += a[i]
        else:
            while acc > 1:
                acc *= 0.5
    return acc


def test_equals_numba_on_a_numba_function():
    from numba.core import postproc

    func_ir = run_frontend(_func)
    vlt = postproc.VariableLifetime(func_ir.blocks)
    u = vlt.usedefs
    ours = liveness.compute_live_map(vlt.cfg, func_ir.blocks, u.usemap, u.defmap)
    assert ours == NUMBA(vlt.cfg, func_ir.blocks, u.usemap, u.defmap) and any(ours.values())


def test_installed_compile_scoped_only():
    from pmfast import compiler
    from pmfast.compiler import patching

    compiler.setup()
    current = analysis.compute_live_map
    assert current._pmfast_scoped is liveness.compute_live_map and current.__wrapped__ is NUMBA
    calls = []
    probe = scoped(NUMBA, lambda *a: calls.append(1) or liveness.compute_live_map(*a))
    cfg, blocks, use, defs = _inlined_shape(3)
    probe(cfg, blocks, use, defs)
    assert not calls
    with patching.compiling():
        probe(cfg, blocks, use, defs)
    assert calls == [1]
    assert numba.njit(_func)(np.ones(3), 3) == 3.0  # a user's compile, outside the scope
