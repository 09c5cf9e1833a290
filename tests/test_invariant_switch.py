"""Tests of ``sum(switch(c, x, v))`` → ``switch(c, sum(x), Σv)`` (part of ``indexed_elemwise``)."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.scalar.basic import Switch
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.math import Sum

import pmfast.passes.indexed_elemwise as ie
from pmfast.mode import get_mode

PASS = ["indexed_elemwise"]


def _sums_of_switch(fn) -> int:
    """Number of ``Sum`` nodes whose input is an elementwise Switch (or a Composite containing one at its root)."""
    n = 0
    for node in fn.maker.fgraph.toposort():
        if isinstance(node.op, Sum) and node.inputs[0].owner is not None:
            op = node.inputs[0].owner.op
            if isinstance(op, Elemwise) and isinstance(op.scalar_op, Switch):
                n += 1
    return n


@functools.cache
def _guarded(kind: str):
    """(pmfast, stock, rewrite-free) functions of a pymc-style guarded logp sum of a vector ``x``."""
    x = pt.vector("x")
    s = pt.scalar("s")
    ok = pt.all(pt.gt(x, 0)) & pt.gt(s, 0)
    if kind == "ninf":
        out = pt.sum(pt.switch(ok, pt.log(x) * s, -np.inf))
    elif kind == "ninf_reversed":
        out = pt.sum(pt.switch(pt.invert(ok), np.inf, pt.log(x) * s))
    elif kind == "zero":
        out = pt.sum(pt.switch(ok, pt.log(x) * s, 0.0))
    elif kind == "one":  # summing copies of 1.0 is not exact in general: declined
        out = pt.sum(pt.switch(ok, pt.log(x) * s, 1.0))
    elif kind == "partial":
        out = pt.sum(pt.switch(ok, pt.log(x)[None, :] * s, -np.inf), axis=1)
    else:
        raise KeyError(kind)
    mode_none = get_mode("none").excluding("fusion")
    return tuple(pytensor.function([x, s], out, mode=m) for m in (get_mode(PASS), get_mode("none"), mode_none))


@pytest.mark.parametrize("kind", ["ninf", "ninf_reversed", "zero"])
def test_switch_moves_out_of_the_sum(kind):
    fused, stock, plain = _guarded(kind)
    assert _sums_of_switch(plain) == 1  # the stock graph has the pattern
    assert _sums_of_switch(fused) == 0
    for x, s in [([1.0, 2.0, 3.0], 2.0), ([1.0, -2.0], 2.0), ([1.0, 2.0], -1.0), ([], 1.0), ([], -1.0)]:
        x = np.asarray(x)
        np.testing.assert_array_equal(fused(x, s), stock(x, s))


@pytest.mark.parametrize("kind", ["one", "partial"])
def test_declined(kind):
    fused, stock, _ = _guarded(kind)
    x = np.asarray([1.0, -2.0])
    np.testing.assert_array_equal(fused(x, 2.0), stock(x, 2.0))
    assert not any(
        isinstance(n.op, Elemwise) and isinstance(n.op.scalar_op, Switch) and n.outputs[0].type.ndim == 0
        for n in fused.maker.fgraph.toposort()
    )


@functools.cache
def _bernoulli_logit():
    """Bradley–Terry's likelihood: the parameter check and the logp terms read the same gathered values."""
    skill = pt.vector("skill")
    p1 = pt.vector("p1", dtype="int64")
    p2 = pt.vector("p2", dtype="int64")
    y = pt.vector("y", dtype="int64")
    eta = skill[p1] - skill[p2]
    p = pt.sigmoid(eta)
    ok = pt.all(pt.ge(p, 0)) & pt.all(pt.le(p, 1))
    terms = pt.switch(pt.eq(y, 1), -pt.softplus(-eta), -pt.softplus(eta))
    # as pymc builds it: the gradient is taken before the check becomes a switch
    outs = [pt.sum(pt.switch(ok, terms, -np.inf)), pytensor.grad(pt.sum(terms), skill)]
    return tuple(pytensor.function([skill, p1, p2, y], outs, mode=m) for m in (get_mode(PASS), get_mode("none")))


@settings(max_examples=10, deadline=None, derandomize=True)
@given(n=st.integers(0, 50), k=st.integers(1, 6), data=st.data())
def test_check_and_terms_run_as_one_loop(n, k, data):
    fused, stock = _bernoulli_logit()
    loops = [nd for nd in fused.maker.fgraph.toposort() if isinstance(nd.op, ie.IndexedElemwise)]
    assert len(loops) == 1  # checks (all), logp (sum) and both scatters in one loop
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    skill = rng.normal(size=k) * data.draw(st.sampled_from([1.0, 50.0, np.nan]))
    args = (skill, rng.integers(-k, k, n), rng.integers(-k, k, n), rng.integers(0, 2, n))
    for a, b in zip(fused(*args), stock(*args), strict=True):
        # the two scatters are interleaved in the loop (stock: one after the other):
        # the same sums, rounded in another order, so compare at the summands' scale
        scale = np.max(np.abs(b), initial=1.0, where=np.isfinite(b))
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13 * scale)


@functools.cache
def _sigmoid_checks(bound_ge: float):
    x = pt.vector("x")
    p = pt.sigmoid(x)
    out = [pt.all(pt.ge(p, bound_ge)), pt.all(pt.le(p, 1.0))]
    return tuple(pytensor.function([x], out, mode=m) for m in (get_mode(PASS), get_mode("none")))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(x=st.lists(st.sampled_from([0.0, -1.0, 2.5, 40.0, -800.0, 800.0, np.inf, -np.inf, np.nan]), max_size=6))
def test_sigmoid_bounds_check_is_not_nan(x):
    fused, stock = _sigmoid_checks(0.0)
    assert "sigmoid" not in pytensor.printing.debugprint(fused, file="str").lower()
    x = np.asarray(x, dtype="float64")
    assert [bool(v) for v in fused(x)] == [bool(v) for v in stock(x)]


def test_sigmoid_check_against_another_bound_is_kept():
    fused, stock = _sigmoid_checks(0.5)
    x = np.array([0.1, -0.1, np.nan])
    assert [bool(v) for v in fused(x)] == [bool(v) for v in stock(x)]
    assert "sigmoid" in pytensor.printing.debugprint(fused, file="str").lower()  # >= 0.5 is no NaN test
