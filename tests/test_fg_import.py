"""pmfast.fg_import: FunctionGraph imports walk the same nodes in the same order without copying the variable set."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.graph import fg
from pytensor.graph.traversal import toposort as pytensor_toposort

from pmfast import fg_import
from pmfast.compiler import patching, setup


def random_graph(draw_ops, n_inputs):
    """A DAG of scalar adds/muls over ``n_inputs`` inputs, each op reading two earlier variables."""
    xs = [pt.dscalar(f"x{i}") for i in range(n_inputs)]
    vs = list(xs)
    for kind, a, b in draw_ops:
        u, v = vs[a % len(vs)], vs[b % len(vs)]
        vs.append(u + v if kind else u * v)
    return xs, vs


ops = st.lists(st.tuples(st.booleans(), st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 4), st.lists(st.integers(0, 10**6), max_size=10), st.integers(1, 3))
def test_same_nodes_same_order_as_pytensor(draw_ops, n_inputs, blocker_ids, n_outputs):
    xs, vs = random_graph(draw_ops, n_inputs)
    blockers = {vs[i % len(vs)] for i in blocker_ids} | set(xs)
    outputs = vs[-n_outputs:]
    assert list(fg_import.toposort(outputs, blockers)) == list(pytensor_toposort(outputs, blockers=blockers))


def rewritten(graph_fn):
    x = pt.dvector("x")
    y = pt.dvector("y")
    out = graph_fn(x, y)
    f = pytensor.function([x, y], out, mode="FAST_RUN")
    return f, [str(n.op) for n in f.maker.fgraph.toposort()]


def model_graph(x, y):
    z = pt.exp(x) * 2 + pt.log1p(pt.exp(y)) - (x - y) ** 2 / 3
    return [pt.sum(z * pt.sigmoid(x)), pytensor.grad(pt.sum(z), [x, y])[0]]


def test_compile_scope_uses_the_live_walk():
    setup()
    a = pt.dscalar("a")
    b = a + 1
    with patching.compiling():
        assert fg.toposort([b], blockers={a}).gi_code is fg_import.toposort.__code__
    assert fg.toposort([b], blockers={a}).gi_code is not fg_import.toposort.__code__


@pytest.mark.parametrize("switch", ["1", "0"])
def test_rewritten_graph_and_values_unchanged(monkeypatch, switch):
    setup()
    monkeypatch.setenv("PMFAST_FG_IMPORT", switch)
    f_stock, nodes_stock = rewritten(model_graph)
    with patching.compiling():
        f_ours, nodes_ours = rewritten(model_graph)
    assert nodes_ours == nodes_stock
    x, y = np.linspace(-2, 2, 7), np.linspace(1, 3, 7)
    for a, b in zip(f_ours(x, y), f_stock(x, y)):
        np.testing.assert_array_equal(a, b)
