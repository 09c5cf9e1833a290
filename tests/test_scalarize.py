"""Tests of ``scalarize``: Elemwise on one-element arrays as 0-d Elemwise, 0-d siblings merged.

Graphs are compiled with the rewrites and run by pytensor's Python linker (the rewrites are graph
rewrites; the numba side is covered by the zoo parity test), against numpy and the stock pipeline.
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.subtensor import Subtensor

from pmfast.mode import get_mode

PASS = ["scalarize"]


def _mode(passes):
    return Mode(linker="py", optimizer=get_mode(passes).optimizer)


def _ops(fn, kind) -> list:
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, kind)]


def _one_element_elemwise(fn) -> int:
    return sum(n.outputs[0].type.ndim > 0 for n in _ops(fn, Elemwise))


@functools.cache
def _gradient_like():
    """A point ``x`` and a gradient Join of one-element pieces: nutpie's layout for scalar parameters."""
    x = pt.vector("x", shape=(5,))
    mu, log_s, z = x[0], x[1], x[2:4]
    s = pt.exp(log_s)
    g_mu = pt.exp(mu)[None] * x[4:5] - 2.0  # ExpandDims(0-d) times a one-element slice
    g_s = (s * z.sum())[None] + 1.0
    g_last = x[4:5] * 0.5 + s[None]
    logp = -0.5 * mu**2 - s + log_s
    out = pt.concatenate([g_mu, g_s, z * s, g_last])
    return [x], [logp, out]


@functools.cache
def _compiled(passes):
    ins, outs = _gradient_like()
    return pytensor.function(ins, outs, mode=_mode(passes))


def test_gradient_pieces_become_scalar_work():
    stock, fused = _compiled("none"), _compiled(tuple(PASS))
    assert _one_element_elemwise(stock) >= 3  # the pattern is there without the pass
    assert _one_element_elemwise(fused) == 1  # only z * s (two elements) stays a vector Elemwise
    assert len(fused.maker.fgraph.apply_nodes) < len(stock.maker.fgraph.apply_nodes)
    x = np.array([0.3, -0.2, 1.5, -0.7, 2.0])
    for a, b in zip(stock(x), fused(x), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-15, atol=0)


def test_zero_d_siblings_merge_into_one_composite():
    fused = _compiled(tuple(PASS))
    scalar = [n for n in _ops(fused, Elemwise) if n.outputs[0].type.ndim == 0]
    assert len(scalar) == 1


def test_declined_where_it_would_add_a_node():
    x = pt.vector("x", shape=(3,))
    out = pt.exp(x[:1])  # nothing to read through, no squeezing client: a squeeze would be extra
    stock = pytensor.function([x], out, mode=_mode("none"))
    fused = pytensor.function([x], out, mode=_mode(PASS))
    assert len(fused.maker.fgraph.apply_nodes) == len(stock.maker.fgraph.apply_nodes)
    np.testing.assert_array_equal(fused(np.arange(3.0)), np.exp([0.0]))


def test_switch_off_leaves_the_graph_alone():
    ins, outs = _gradient_like()
    without = pytensor.function(ins, outs, mode=_mode("none"))
    assert _one_element_elemwise(without) == _one_element_elemwise(_compiled("none"))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    data=st.data(),
    with_start=st.booleans(),
    values=st.lists(st.floats(-5, 5, allow_nan=False), min_size=6, max_size=6),
)
def test_squeezed_slice_is_the_element(n, data, with_start, values):
    """``Squeeze(x[k:k+1]) -> x[k]``, also for negative ``k`` (declined) and a missing start (``x[:1]``)."""
    k = data.draw(st.integers(-n, n - 1)) if with_start else 0
    x = pt.vector("x", shape=(n,))
    piece = x[k : k + 1] if with_start and k != -1 else (x[:1] if not with_start else x[-1:])
    s = pt.scalar("s")
    out = pt.squeeze(piece) * s + pt.exp(s)
    fn = pytensor.function([x, s], out, mode=_mode(PASS))
    xv = np.asarray(values[:n])
    want = np.squeeze(xv[k : k + 1] if with_start and k != -1 else (xv[:1] if not with_start else xv[-1:])) * 1.5 + np.exp(1.5)
    np.testing.assert_allclose(fn(xv, 1.5), want, rtol=1e-15)
    squeezes = [n for n in _ops(fn, DimShuffle) if n.outputs[0].type.ndim == 0]
    # a non-negative constant start: the squeeze became an element read (for n == 1 pytensor
    # drops the slice as useless: the squeeze of the input itself stays)
    if n > 1 and (not with_start or k >= 0):
        assert not squeezes
        assert all(n.outputs[0].type.ndim == 0 for n in _ops(fn, Subtensor))


_UNARY = (pt.exp, pt.tanh, pt.sin, pt.sqr)
_BINARY = (pt.add, pt.mul, pt.sub, pt.maximum)


@st.composite
def _scalar_dags(draw):
    """Random graphs of 0-d Elemwise nodes on up to 30 scalar inputs (wide enough to reach the caps)."""
    n_in = draw(st.integers(1, 30))
    values = [pt.scalar(f"s{i}") for i in range(n_in)]
    ins = list(values)
    for _ in range(draw(st.integers(2, 40))):
        if draw(st.booleans()):
            values.append(draw(st.sampled_from(_UNARY))(draw(st.sampled_from(values))))
        else:
            a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            values.append(draw(st.sampled_from(_BINARY))(a, b))
    outs = draw(st.lists(st.sampled_from(values[n_in:]), min_size=1, max_size=12, unique_by=id))
    return ins, outs


def _depends(a, b) -> bool:
    from pytensor.graph.traversal import ancestors

    return bool(set(a.outputs) & set(ancestors(b.inputs)))


@settings(max_examples=60, deadline=None)
@given(dag=_scalar_dags(), seed=st.integers(0, 2**16))
def test_siblings_merge_is_exact_acyclic_and_maximal(dag, seed):
    """The merged graph computes the same values bit for bit, is acyclic, and leaves no pair that could
    still merge: every two 0-d nodes left are dependent or together past ``MAX_INPUTS``."""
    from pytensor.graph.fg import FunctionGraph

    from pmfast.passes.scalarize import MAX_INPUTS, ScalarSiblings

    ins, outs = dag
    fgraph = FunctionGraph(ins, outs, clone=True)
    rewriter = ScalarSiblings()
    rewriter.add_requirements(fgraph)
    before = len(fgraph.apply_nodes)
    merges = rewriter.apply(fgraph)
    assert len(fgraph.apply_nodes) == before - merges
    assert len(fgraph.toposort()) == len(fgraph.apply_nodes)
    fgraph.check_integrity()
    nodes = [n for n in fgraph.apply_nodes if isinstance(n.op, Elemwise)]
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            wide = len(set(a.inputs) | set(b.inputs)) > MAX_INPUTS or len(a.outputs) + len(b.outputs) > MAX_INPUTS
            assert wide or _depends(a, b) or _depends(b, a)
    x = np.random.default_rng(seed).uniform(-1, 1, len(ins))
    py = Mode(linker="py", optimizer=None)
    fn = functools.partial(pytensor.function, mode=py, on_unused_input="ignore")
    want = fn(ins, outs)(*x)
    got = fn(fgraph.inputs, fgraph.outputs)(*x)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(w, g)
