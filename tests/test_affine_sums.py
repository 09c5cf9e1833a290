"""Tests of ``affine_sums``: a fused loop's sums with loop-invariant factors applied once, after the loop."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.scalar.basic import TrueDiv

from pmfast.loops.op import IndexedElemwise
from pmfast.loops.spec import SUM
from pmfast.mode import get_mode
from pmfast.passes import fired

WITH = ["indexed_elemwise", "scalarize", "affine_sums"]
WITHOUT = ["indexed_elemwise", "scalarize"]


def _gaussian(static: bool):
    """A Gaussian likelihood over gathered means and its gradient: logp, d/dmu, d/dsigma, d/dbeta, d/da."""
    rng = np.random.default_rng(0)
    n, k = 60, 7
    idx = rng.integers(0, k, n)
    xv, yv = rng.normal(size=n), rng.normal(size=n)
    a, mu, sigma, beta = pt.vector("a"), pt.scalar("mu"), pt.scalar("sigma"), pt.scalar("beta")
    if static:
        x, y, g = pt.constant(xv), pt.constant(yv), pt.constant(idx)
        shared = []
    else:  # lengths unknown when compiling, like pm.Data
        x, y, g = (pytensor.shared(v, name=nm) for v, nm in ((xv, "x"), (yv, "y"), (idx, "g")))
        shared = [x, y, g]
    r = y - (mu + a[g] + beta * x)
    logp = pt.sum(-0.5 * pt.sqr(r / sigma) - pt.log(sigma) - 0.9189385332046727)
    grads = pt.grad(logp, [mu, sigma, beta, a])
    return [a, mu, sigma, beta], [logp, *grads], shared


@functools.cache
def _functions(static: bool):
    ins, outs, shared = _gaussian(static)
    return tuple(pytensor.function(ins, outs, mode=get_mode(p)) for p in (WITH, WITHOUT, "none")) + (shared,)


def _loops(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, IndexedElemwise)]


def _point(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=7), 0.3, 0.8, -0.4]


@pytest.mark.parametrize("static", [True, False])
def test_factors_leave_the_loop_and_values_match_stock(static):
    on, off, stock, _ = _functions(static)
    assert fired(on).get("affine_sums") == 1
    assert "affine_sums" not in fired(off)
    # the loop no longer divides by sigma for its sums: the only division left is the scatter's
    (loop,) = _loops(on)
    (loop_off,) = _loops(off)
    n_div = lambda node: sum(isinstance(n.op, TrueDiv) for n in node.op.loop.scalar_op.fgraph.toposort())  # noqa: E731
    assert n_div(loop) < n_div(loop_off)
    # Σ r next to Σ r²: the loop accumulates r, r*r and r*x, one sum each
    assert sum(w.mode == SUM for w in loop.op.loop.writes) == 3
    for seed in range(3):
        p = _point(seed)
        for got, want in zip(on(*p), stock(*p), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sigma", [0.0, np.inf, np.nan])
def test_non_finite_factors_stay_non_finite(sigma):
    on, _, stock, _ = _functions(True)
    p = _point()
    p[2] = sigma
    for got, want in zip(on(*p), stock(*p), strict=True):
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))


def test_empty_loop_sums_to_zero():
    """Length 0 (not known when compiling): every sum is 0, as stock's, even with an infinite factor."""
    on, _, stock, shared = _functions(False)
    saved = [s.get_value() for s in shared]
    try:
        for s in shared:
            s.set_value(s.get_value()[:0])
        p = _point()
        p[2] = np.inf  # log(sigma) = inf: n * (c - log sigma) would be nan without the guard on n
        for got, want in zip(on(*p), stock(*p), strict=True):
            np.testing.assert_array_equal(got, want)
    finally:
        for s, v in zip(shared, saved, strict=True):
            s.set_value(v)


def test_declined_without_invariant_factors():
    rng = np.random.default_rng(0)
    a = pt.vector("a")
    g = pt.constant(rng.integers(0, 5, 40))
    y = pt.constant(rng.normal(size=40))
    out = pt.sum(pt.exp(a[g]) * y)  # no loop-invariant factor: nothing to take out
    fn = pytensor.function([a], [out, pt.grad(out, a)], mode=get_mode(WITH))
    assert _loops(fn) and "affine_sums" not in fired(fn)
