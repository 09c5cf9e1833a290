"""Tests of ``unit_axes``: Elemwise over ``(n, 1)`` columns computed as 1-d, so fusion merges them.

Graphs are compiled with the rewrites and run by pytensor's Python linker (the rewrites are graph
rewrites; the numba side is covered by the zoo parity test on ``hier_logistic``), against the
stock pipeline.
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.traversal import ancestors
from pytensor.tensor.elemwise import DimShuffle, Elemwise

from pmfast.loops.op import IndexedElemwise
from pmfast.mode import get_mode

N_ROWS = 60


def _mode(passes):
    return Mode(linker="py", optimizer=get_mode(passes).optimizer)


def _bernoulli_row_sum():
    """pymc's Bernoulli with ``logit_p`` a row sum of gathered coefficients (zoo ``hier_logistic``'s shape)."""
    import pymc as pm

    rng = np.random.default_rng(0)
    group = rng.integers(0, 5, N_ROWS)
    X = np.column_stack([np.ones(N_ROWS), rng.normal(size=(N_ROWS, 2))])
    y = rng.integers(0, 2, N_ROWS)
    with pm.Model() as model:
        g = pm.Data("g", group)
        x = pm.Data("X", X)
        mu = pm.Normal("mu", 0.0, 1.0, shape=3)
        sigma = pm.HalfNormal("sigma", 0.5, shape=3)
        z = pm.Normal("z", 0.0, 1.0, shape=(5, 3))
        beta = mu + sigma * z
        pm.Bernoulli("y", logit_p=(x * beta[g]).sum(-1), observed=y)
    return model


@functools.cache
def _compiled(passes):
    from pmfast.frontend import logp_dlogp_graph

    joined, logp, grad, _, _ = logp_dlogp_graph(_bernoulli_row_sum())
    return pytensor.function([joined], [logp, grad], mode=_mode(passes))


def _column_elemwise(fn) -> list:
    """Elemwise nodes (not fused loops) over arrays with a length-1 axis and a longer one."""
    return [
        n
        for n in fn.maker.fgraph.toposort()
        if type(n.op) is Elemwise and n.outputs[0].type.ndim > 1 and 1 <= sum(n.outputs[0].type.broadcastable) < n.outputs[0].type.ndim
    ]


def _row_elemwise(fn) -> list:
    """Elemwise nodes (not fused loops) computing something per row."""
    return [n for n in fn.maker.fgraph.toposort() if type(n.op) is Elemwise and n.outputs[0].type.shape[:1] in ((N_ROWS,), (None,))]


def _point(seed=1):
    fn = _compiled("none")
    n = fn.maker.fgraph.inputs[0].type.shape[0]
    return np.random.default_rng(seed).normal(0.0, 0.3, n)


def test_row_sum_gradient_fused_with_the_logp_terms():
    without = _compiled(("indexed_elemwise",))
    fused = _compiled(("indexed_elemwise", "unit_axes"))
    assert _column_elemwise(without)  # canonicalize's DimShuffle lift made (n, 1) gradient nodes
    assert not _column_elemwise(fused)
    # the per-row gradient is computed by the Composite of the logp terms, and read by the
    # scatter loop of beta's gradient through a column view
    assert len(_row_elemwise(fused)) < len(_row_elemwise(without))
    scatters = [n for n in fused.maker.fgraph.toposort() if isinstance(n.op, IndexedElemwise) and n.op.loop.writes and any(w.buffer is not None for w in n.op.loop.writes)]
    assert scatters
    feeders = {i.owner.inputs[0].owner for n in scatters for i in n.inputs if i.owner is not None and isinstance(i.owner.op, DimShuffle)}
    logp_side = set(ancestors([fused.maker.fgraph.outputs[0]]))
    # (an Elemwise, or the loop it became: its body calls libm, dispatch.calls_math)
    assert any(isinstance(f.op, Elemwise | IndexedElemwise) and set(f.outputs) & logp_side for f in feeders if f is not None)


def test_parity_with_stock():
    stock, fused = _compiled("none"), _compiled(("indexed_elemwise", "unit_axes"))
    for seed in (1, 2):
        x = _point(seed)
        for a, b in zip(stock(x), fused(x), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0)


def test_declined_where_it_would_add_a_node():
    x = pt.matrix("x", shape=(4, 1))
    out = pt.exp(x)  # nothing to read through, no squeezing client: a squeeze would be extra
    stock = pytensor.function([x], out, mode=_mode("none"))
    fused = pytensor.function([x], out, mode=_mode(["unit_axes"]))
    assert len(fused.maker.fgraph.apply_nodes) == len(stock.maker.fgraph.apply_nodes)
    v = np.arange(4.0).reshape(4, 1)
    np.testing.assert_array_equal(fused(v), np.exp(v))


def test_chain_of_columns_lifted_and_composed():
    v = pt.vector("v", shape=(5,))
    c = v[:, None]
    out = pt.exp(c) * 2.0 + pt.log1p(c * c)  # columns all the way: one 1-d Composite, one view
    stock = pytensor.function([v], out, mode=_mode("none"))
    fused = pytensor.function([v], out, mode=_mode(["unit_axes"]))
    assert not _column_elemwise(fused) and _column_elemwise(stock)
    assert sum(isinstance(n.op, DimShuffle) for n in fused.maker.fgraph.apply_nodes) == 1
    a = np.linspace(-1.0, 2.0, 5)
    np.testing.assert_array_equal(fused(a), stock(a))
