"""Tests of :class:`pmfast.passes.lengths.EqualLengths`: only lengths that must be equal are claimed equal."""

from __future__ import annotations

import itertools

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.graph.fg import FunctionGraph

from pmfast.passes.lengths import EqualLengths


def _lengths(inputs, outputs):
    fg = FunctionGraph(inputs, outputs, clone=False)
    return EqualLengths(fg)


def test_elemwise_ties_its_non_broadcast_inputs():
    a, b, c = pt.vector("a"), pt.vector("b"), pt.vector("c")
    out = pt.exp(a) * b
    eq = _lengths([a, b, c], [out, c + 1])
    assert eq.same(a, 0, b, 0) and eq.same(out, 0, a, 0)
    assert not eq.same(a, 0, c, 0)


def test_broadcast_axes_are_not_tied():
    a, m = pt.vector("a"), pt.matrix("m")
    out = a[:, None] + m  # a's axis 0 with m's axis 0; m's axis 1 free
    eq = _lengths([a, m], [out])
    assert eq.same(a, 0, m, 0) and eq.same(out, 1, m, 1)
    assert not eq.same(a, 0, m, 1)


def test_dimshuffle_maps_axes():
    m, n = pt.matrix("m"), pt.matrix("n")
    out = m.T * n
    eq = _lengths([m, n], [out])
    assert eq.same(m, 1, n, 0) and eq.same(m, 0, n, 1)
    assert not eq.same(m, 0, n, 0)


def test_scatter_result_has_the_buffer_shape_and_softmax_keeps_shape():
    buf, y, idx, x = pt.matrix("buf"), pt.matrix("y"), pt.vector("idx", dtype="int64"), pt.matrix("x")
    out = pt.inc_subtensor(buf[idx], y)
    sm = pt.special.softmax(x, axis=-1)
    eq = _lengths([buf, y, idx, x], [out, sm])
    assert eq.same(out, 0, buf, 0) and eq.same(out, 1, buf, 1)
    assert eq.same(sm, 0, x, 0) and eq.same(sm, 1, x, 1)
    assert not eq.same(out, 0, idx, 0)


def test_static_lengths():
    a, b = pt.tensor("a", shape=(5,)), pt.tensor("b", shape=(5,))
    c = pt.tensor("c", shape=(4,))
    eq = _lengths([a, b, c], [a + 1, b + 1, c + 1])
    assert eq.same(a, 0, b, 0) and not eq.same(a, 0, c, 0)


def _expr(draw, leaves):
    """A random elementwise/dimshuffle expression over vector leaves, as a matrix or vector."""
    kind = draw(st.sampled_from(["leaf", "add", "mul", "exp", "outer"]))
    if kind == "leaf":
        return draw(st.sampled_from(leaves))
    if kind == "exp":
        return pt.exp(_expr(draw, leaves))
    if kind == "outer":
        a, b = draw(st.sampled_from(leaves)), draw(st.sampled_from(leaves))
        return (a[:, None] * b[None, :]).sum(axis=1)
    a, b = _expr(draw, leaves), _expr(draw, leaves)
    return a + b if kind == "add" else a * b


@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_claims_hold_whenever_the_graph_runs(data):
    leaves = [pt.vector(f"v{k}") for k in range(4)]
    outs = [_expr(data.draw, leaves) for _ in range(2)]
    eq = _lengths(leaves, outs)
    fn = pytensor.function(leaves, outs, mode="FAST_COMPILE", on_unused_input="ignore")
    claimed = [(a, b) for a, b in itertools.combinations(range(4), 2) if eq.same(leaves[a], 0, leaves[b], 0)]
    for lengths in itertools.product([1, 2, 3], repeat=4):
        try:
            fn(*[np.ones(n) for n in lengths])
        except ValueError:
            continue
        for a, b in claimed:
            assert lengths[a] == lengths[b]


def test_gather_and_alloc_rules():
    x, idx, b = pt.matrix("x"), pt.vector("idx", dtype="int64"), pt.matrix("b")
    g = x[idx]
    z = pt.zeros_like(b)  # Alloc(0, Shape_i{0}(b), Shape_i{1}(b)) once rewritten
    fn = pytensor.function([x, idx, b], [g, z + 1], mode="FAST_RUN")
    fg = fn.maker.fgraph
    eq = EqualLengths(fg)
    (gnode,) = [n for n in fg.toposort() if type(n.op).__name__ == "AdvancedSubtensor1"]
    xi, ii = gnode.inputs
    assert eq.same(gnode.outputs[0], 0, ii, 0) and eq.same(gnode.outputs[0], 1, xi, 1)
    assert not eq.same(gnode.outputs[0], 0, xi, 0)
    (anode,) = [n for n in fg.toposort() if type(n.op).__name__ == "Alloc"]
    bi = [i for i in fg.inputs if i.name == "b"][0]
    assert eq.same(anode.outputs[0], 0, bi, 0) and eq.same(anode.outputs[0], 1, bi, 1)
