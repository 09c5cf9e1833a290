"""pmfast.destroy_cycles: the apply-node cycle check answers as pytensor's ``_contains_cycle`` does."""

import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.graph import destroyhandler
from pytensor.graph.fg import FunctionGraph

from pmfast import compiler, destroy_cycles
from pmfast.compiler import patching


def _original():
    f = destroyhandler._contains_cycle
    return getattr(f, "__wrapped__", f)


@st.composite
def graphs(draw):
    """A random DAG of elemwise nodes, and orderings between random pairs of its nodes (maybe cyclic,
    maybe naming a node or variable outside the graph)."""
    n_in = draw(st.integers(1, 3))
    xs = [pt.dvector(f"x{i}") for i in range(n_in)]
    vars_ = list(xs)
    for _ in range(draw(st.integers(1, 12))):
        a = vars_[draw(st.integers(0, len(vars_) - 1))]
        b = vars_[draw(st.integers(0, len(vars_) - 1))]
        vars_.append(draw(st.sampled_from([pt.add, pt.mul, pt.sub]))(a, b))
    outs = vars_[len(xs):][-draw(st.integers(1, 3)):]
    fg = FunctionGraph(xs, outs, clone=False)
    nodes = sorted(fg.apply_nodes, key=str)
    orderings = {}
    outside = (pt.dvector("y") + 1).owner
    for _ in range(draw(st.integers(0, 4))):
        node = nodes[draw(st.integers(0, len(nodes) - 1))]
        kind = draw(st.sampled_from(["node", "node", "node", "variable", "outside_node", "outside_var"]))
        if kind == "node":
            parent = nodes[draw(st.integers(0, len(nodes) - 1))]
        elif kind == "variable":
            parent = draw(st.sampled_from(sorted(fg.variables, key=str)))
        elif kind == "outside_node":
            parent = outside
        else:
            parent = outside.outputs[0]
        orderings.setdefault(node, set()).add(parent)
    return fg, orderings


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_same_answer_as_pytensor(case):
    fg, orderings = case
    assert destroy_cycles.contains_cycle(fg, orderings) == _original()(fg, orderings)


def test_finds_a_cycle_through_orderings():
    x = pt.dvector("x")
    a = pt.exp(x)
    b = pt.log(a)
    fg = FunctionGraph([x], [b], clone=False)
    ordering = {a.owner: {b.owner}}  # a after b, while b reads a
    assert destroy_cycles.contains_cycle(fg, ordering) is True
    assert destroy_cycles.contains_cycle(fg, {b.owner: {a.owner}}) is False
    assert _original()(fg, ordering) is True


def test_a_missing_parent_counts_as_a_cycle():
    x = pt.dvector("x")
    fg = FunctionGraph([x], [pt.exp(x)], clone=False)
    (node,) = fg.apply_nodes
    stray = (pt.dvector("z") * 2).owner
    assert destroy_cycles.contains_cycle(fg, {node: {stray}}) is True
    assert _original()(fg, {node: {stray}}) is True


def test_installed_compile_scoped(monkeypatch):
    compiler.setup()
    installed = destroyhandler._contains_cycle
    assert getattr(installed, "_pmfast", False)
    calls = []
    monkeypatch.setattr(destroy_cycles, "contains_cycle", lambda fg, o: calls.append(1) or False)
    x = pt.dvector("x")
    fg = FunctionGraph([x], [pt.exp(x)], clone=False)
    installed(fg, {})
    assert calls == []
    with patching.compiling():
        installed(fg, {})
        assert calls == [1]
        monkeypatch.setenv("PMFAST_CYCLE_CHECK", "0")
        installed(fg, {})
        assert calls == [1]


@pytest.mark.parametrize("passes", ["all", "none"])
def test_inplace_rewrites_same_graph(monkeypatch, passes):
    """A mode's in-place choices are the same with either check, and the check did run."""
    import numpy as np
    import pytensor

    import pmfast

    compiler.setup()
    real, calls = destroy_cycles.contains_cycle, []
    monkeypatch.setattr(destroy_cycles, "contains_cycle", lambda fg, o: calls.append(1) or real(fg, o))
    texts = []
    for on in ("1", "0"):
        monkeypatch.setenv("PMFAST_CYCLE_CHECK", on)
        x = pt.dvector("x")
        y = pt.exp(x)
        z = pt.log1p(y) * y
        outs = [z, (y + 1).sum(), pt.set_subtensor(z[:2], x[1:3]), pt.inc_subtensor(y[1:], 2.0)]
        with patching.compiling():
            fn = pytensor.function([x], outs, mode=pmfast.get_mode(passes))
        texts.append(pytensor.printing.debugprint(fn, file="str", print_type=True, id_type="", print_destroy_map=True))
        if on == "1":
            assert calls, "the in-place rewrites validated through the apply-node check"
            n_on = len(calls)
        else:
            assert len(calls) == n_on, "PMFAST_CYCLE_CHECK=0: pytensor's check only"
        xv = np.arange(4.0)
        np.testing.assert_allclose(fn(xv)[1], (np.exp(xv) + 1).sum())
    assert texts[0] == texts[1]
