"""Sibling fusion's one walk (``PMFAST_SIBLING_ONEPASS``) against the restart search: same merges, same values, linear work."""

from __future__ import annotations

import numpy as np
import pytest
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.subtensor import advanced_subtensor1

import pmfast.passes.sibling_fusion as sf

FUNCS = (pt.exp, pt.sin, pt.cos, pt.tanh, pt.log1p)


def _terms(spec):
    """Inputs and outputs of a graph of gathered terms: ``spec`` lists (data, index, func, weighted, summed, uses_previous)."""
    xs = [pt.vector(f"x{i}") for i in range(3)]
    idxs = [pt.vector(f"i{i}", dtype="int64") for i in range(2)]
    ws = [pt.vector(f"w{i}") for i in range(2)]  # one per index vector: same length as its gathers
    outs = []
    for k, (d, i, f, weighted, summed, uses_previous) in enumerate(spec):
        t = FUNCS[f](advanced_subtensor1(xs[d], idxs[i]) * pt.constant(np.full(1, k + 1.0)))  # a 1-d constant: the gather node is a candidate
        if weighted:
            t = t * ws[i]
        if uses_previous and outs and outs[-1].ndim == 0:
            t = t + outs[-1]  # depends on the previous term's sum: never merged with it
        outs.append(pt.sum(t) if summed else t)
    s = pt.sum([pt.sum(o) for o in outs])
    return [*xs, *idxs, *ws], [*outs, *pytensor.grad(s, xs, disconnected_inputs="ignore")]


def _run(spec, onepass, pin=False):
    """The sibling pass on a fresh graph of ``spec``: (graph, merges, toposorts, last_stats)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PMFAST_SIBLING_ONEPASS", "1" if onepass else "0")
        return _apply(spec, pin)


def _apply(spec, pin):
    ins, outs = _terms(spec) if isinstance(spec, list) else spec
    fg = FunctionGraph(ins, outs, clone=True)
    if pin:  # w0 read as length 5 by its clients, whose outputs keep an unknown length: they merge with nothing
        w0 = fg.inputs[5]
        pinned = pt.specify_shape(w0, (5,))
        for node, i in list(fg.clients[w0]):
            if node != "output" and node not in (pinned.owner,):
                fg.change_node_input(node, i, pinned)
    fg.attach_feature(ShapeFeature())
    rewriter = sf.SiblingFusion()
    rewriter.add_requirements(fg)
    sorts = [0]
    real = fg.toposort
    fg.toposort = lambda: sorts.__setitem__(0, sorts[0] + 1) or real()
    before = len(fg.apply_nodes)
    rewriter.apply(fg)
    return fg, before - len(fg.apply_nodes), sorts[0], getattr(rewriter, "last_stats", None)


def _values(fg, args):
    fn = pytensor.function(fg.inputs, fg.outputs, mode=Mode(linker="py", optimizer=None), on_unused_input="ignore")
    return fn(*args)


TERM = st.tuples(
    st.integers(0, 2), st.integers(0, 1), st.integers(0, len(FUNCS) - 1), st.booleans(), st.booleans(), st.booleans()
)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(spec=st.lists(TERM, min_size=1, max_size=12), seed=st.integers(0, 2**16), pin=st.booleans())
def test_one_walk_merges_as_the_restart_search(spec, seed, pin):
    """On random sibling graphs (shared gathers and index vectors, stored and reduced terms,
    terms that depend on others, inputs of a pinned length their clients' types don't know) the walk makes the restart search's merges (the same graph), with
    one toposort, and every output equals the unmerged graph's."""
    walk, n_walk, sorts_walk, _ = _run(spec, True, pin)
    restart, n_restart, sorts_restart, _ = _run(spec, False, pin)
    assert n_walk == n_restart
    assert pytensor.printing.debugprint(walk, file="str", id_type="") == pytensor.printing.debugprint(restart, file="str", id_type="")
    assert sorts_walk == 1
    assert sorts_restart == n_restart + 1
    rng = np.random.default_rng(seed)
    n = 5 if pin else int(rng.integers(2, 9))  # (n = 1 broadcasts against the shape-(1,) constants: pytensor refuses at run time)
    args = [rng.normal(size=4) for _ in range(3)] + [rng.integers(-4, 4, n) for _ in range(2)] + [rng.normal(size=n) for _ in range(2)]
    ins, outs = _terms(spec)
    ref = pytensor.function(ins, outs, mode=Mode(linker="py", optimizer=None), on_unused_input="ignore")(*args)
    for got in (_values(walk, args), _values(restart, args)):
        for g, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-13, atol=1e-15)


def _blocks(n_groups):
    """``n_groups`` copies of a hier_var-like block (own data, index and weights): per block two reduced terms and a stored one."""
    ins, outs = [], []
    for g in range(n_groups):
        x, idx, w = pt.vector(f"x{g}"), pt.vector(f"i{g}", dtype="int64"), pt.vector(f"w{g}")
        gx = advanced_subtensor1(x, idx)
        outs += [pt.sum(pt.exp(gx * pt.constant(np.full(1, 2.0))) * w), pt.sum(pt.sin(gx * pt.constant(np.full(1, 3.0)))), pt.cos(gx) * w]
        ins += [x, idx, w]
    return ins, [*outs, *pytensor.grad(pt.sum([pt.sum(o) for o in outs]), ins[::3])]


def test_one_walk_work_grows_linearly():
    """One toposort, and pairs tested and path-search steps in proportion to the graph, as it grows
    4x; the restart search makes the same merges with one toposort per merge."""
    work = {}
    for n_groups in (4, 16):
        _, merges, sorts, stats = _run(_blocks(n_groups), True)
        assert sorts == 1 and merges >= n_groups and stats["merges"] == merges
        work[n_groups] = stats
        _, merges_restart, sorts_restart, _ = _run(_blocks(n_groups), False)
        assert merges_restart == merges and sorts_restart == merges + 1
    for k in ("pairs", "steps", "merges"):
        assert work[16][k] <= 4 * 1.25 * work[4][k], (k, work)
