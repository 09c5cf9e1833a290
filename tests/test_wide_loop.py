"""Tests of ``WideLoop``: a wide fused Composite as one loop of ≤ 24-wide stages (part of ``wide_split``).

The staging plan is tested without compiling (hypothesis over random scalar graphs, evaluated stage by
stage in Python against the Composite); the op against numpy (its ``perform``) and, compiled, against
stock numba on a few wide graphs: 0-d (a hierarchical VAR's logp/gradient), vectors with invariants
packed, matrices with broadcast axes.
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pmfast
from pmfast.passes.registry import fired
from pmfast.passes.wide_loop import LIMIT, MAX_ARITY, WideLoop, evaluate_plan, plan_stages

UNARY = [ps.exp, ps.log1p, ps.sqr, ps.tanh, ps.neg]


@st.composite
def scalar_graphs(draw):
    """A Composite over n float64 inputs: random unary/binary ops with shared sub-expressions, a wide Add/Mul, many outputs."""
    n = draw(st.integers(1, 90))
    ins = [ps.float64(f"x{i}") for i in range(n)]
    pool = list(ins)
    for _ in range(draw(st.integers(0, 120))):
        kind = draw(st.sampled_from(["unary", "binary", "switch"]))
        a = pool[draw(st.integers(0, len(pool) - 1))]
        if kind == "unary":
            pool.append(draw(st.sampled_from(UNARY))(a * 0.1))
        elif kind == "binary":
            b = pool[draw(st.integers(0, len(pool) - 1))]
            pool.append(draw(st.sampled_from([ps.add, ps.mul, ps.sub]))(a, b))
        else:
            b = pool[draw(st.integers(0, len(pool) - 1))]
            pool.append(ps.switch(ps.gt(a, b), a, b * 0.5))
    wide_n = draw(st.integers(min(2, len(pool)), len(pool)))
    wide = draw(st.sampled_from([ps.add, ps.mul]))(*[pool[-k] * 0.9 for k in range(1, wide_n + 1)])
    k_out = draw(st.integers(1, 60))
    outs = [wide] + [o + 0.0 for o in pool[len(ins) :][-k_out:]]
    return ps.Composite(ins, outs), n


@given(scalar_graphs(), st.integers(0, 2**16), st.sampled_from([4, 7, LIMIT]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_plan_is_narrow_ordered_and_exact(graph, seed, limit):
    comp, n = graph
    plan = plan_stages(comp, limit)
    defined = set()
    for stage in plan.stages:
        assert len(stage.inputs) <= limit and len(stage.outputs) <= limit
        assert len(stage.op.inputs) == len(stage.inputs)
        for kind, j in stage.inputs:  # only values computed before the stage
            assert (kind == "in" and 0 <= j < n) or (kind == "t" and j in defined)
        defined.update(stage.outputs)
    assert len(plan.results) == len(comp.outputs)
    values = list(np.random.default_rng(seed).normal(size=n))
    ref = comp.impl(*values)
    ref = ref if len(comp.outputs) > 1 else [ref]
    # the same scalar functions on the same values (a wide Add/Mul as a left fold): equal
    np.testing.assert_array_equal(evaluate_plan(plan, values), ref)


def _numba(inputs, outputs, passes):
    return pytensor.function(inputs, outputs, mode=pmfast.get_mode(passes))


def _loops(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, WideLoop)]


def _widest(fn):
    return max(len(n.inputs) for n in fn.maker.fgraph.apply_nodes)


@functools.cache
def _var_like(n: int):
    """A 0-d logp over n scalar parameters with shared terms and its gradient: one wide 0-d Composite per output."""
    xs = [pt.dscalar(f"s{i}") for i in range(n)]
    scale = pt.exp(xs[0])
    logp = sum(-0.5 * (x / scale) ** 2 - pt.log(scale) + pt.log1p(pt.exp(-x)) for x in xs[1:])
    grads = pytensor.grad(logp, xs)
    outs = [logp, *grads]
    return xs, outs, _numba(xs, outs, "wide_split"), _numba(xs, outs, "none")


def test_scalar_composite_runs_as_one_loop():
    xs, outs, fast, stock = _var_like(36)
    # wide_split only: the WideLoop, and (wide_components) the 35 gradient pieces as nodes of their own
    assert set(fired(fast)) == {"wide_split"}
    (loop,) = _loops(fast)
    assert len(loop.op.layout) > MAX_ARITY and _widest(fast) <= MAX_ARITY
    assert max(len(s.inputs) for s in plan_stages(loop.op.scalar_op).stages) <= LIMIT
    vals = [np.float64(v) for v in np.random.default_rng(0).normal(size=len(xs))]
    for a, b in zip(fast(*vals), stock(*vals), strict=True):
        # atol: a gradient of ~1e-3 from cancelling terms, contracted differently by LLVM's fast math
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


@functools.cache
def _vector_case(n_scalars: int, n_arrays: int, ndim: int, n_out: int = 2):
    scalars = [pt.dscalar(f"s{i}") for i in range(n_scalars)]
    arrays = [pt.tensor(f"arr{i}", dtype="float64", shape=(None,) * ndim) for i in range(n_arrays)]
    row = pt.tensor("row", dtype="float64", shape=(1,) * (ndim - 1) + (None,))  # broadcast on the leading axes
    acc = row
    for k, s in enumerate(scalars):
        a = arrays[k % n_arrays]
        acc = acc * pt.tanh(s) + pt.exp(a * s) if k % 2 else acc + s * a
    outs = [acc, pt.sqr(acc) + scalars[0]][:n_out]
    inputs = [*scalars, *arrays, row]
    return inputs, outs, _numba(inputs, outs, "wide_split"), _numba(inputs, outs, "none")


@pytest.mark.parametrize("ndim, n_out", [(1, 2), (2, 2), (1, 1)])
def test_array_composite_with_packed_invariants(ndim, n_out):
    inputs, outs, fast, stock = _vector_case(40, 5, ndim, n_out)
    (loop,) = _loops(fast)
    # every invariant (the 40 scalars, their tanh) arrives packed; the 5 arrays and the row are passed
    assert sum(w[0] == "pack" for w in loop.op.layout) >= 40
    assert len({w[1] for w in loop.op.layout if w[0] == "array"}) == 6
    assert _widest(fast) <= MAX_ARITY
    rng = np.random.default_rng(ndim)
    shape = (3, 4)[-ndim:] if ndim == 2 else (5,)
    vals = [np.float64(v) for v in rng.normal(size=40) * 0.3]
    vals += [rng.normal(size=shape) for _ in range(5)] + [rng.normal(size=(1,) * (ndim - 1) + shape[-1:])]
    for a, b in zip(fast(*vals), stock(*vals), strict=True):  # a list, also of one output
        np.testing.assert_allclose(a, b, rtol=1e-14)
    # mismatched lengths: an error, as stock's Elemwise raises
    bad = list(vals)
    bad[41] = rng.normal(size=tuple(d + 1 for d in shape))
    with pytest.raises(ValueError):
        fast(*bad)


def test_perform_matches_stock_numba():
    """WideLoop.perform (the numpy reference): the same rewrites, linked with pytensor's Python linker."""
    from pytensor.compile.mode import Mode
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery
    from pytensor.link.numba.linker import NumbaLinker

    inputs, outs, _, stock = _vector_case(40, 5, 1)
    query = RewriteDatabaseQuery(
        include=["fast_run", "numba", *NumbaLinker.required_rewrites, "pmfast.wide_split"],
        exclude=list(NumbaLinker.incompatible_rewrites),
    )
    py = pytensor.function(inputs, outs, mode=Mode(linker="py", optimizer=query))
    assert len(_loops(py)) == 1
    rng = np.random.default_rng(3)
    vals = [np.float64(v) for v in rng.normal(size=40) * 0.3] + [rng.normal(size=5) for _ in range(6)]
    for a, b in zip(py(*vals), stock(*vals), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_declined_with_too_many_arrays_or_gathers():
    # > LIMIT arrays: the loop would read them all (split_composite's business)
    inputs, outs, fast, _ = _vector_case(40, 30, 1)
    assert not _loops(fast)
    # gathered inputs: indexed_elemwise fuses those into the split pieces
    x = pt.dvector("x")
    idx = [pt.lvector(f"i{k}") for k in range(20)]
    s = [pt.dscalar(f"s{k}") for k in range(20)]
    out = sum(pt.exp(x[i] * c) for i, c in zip(idx, s))
    fn = _numba([x, *idx, *s], out, "wide_split")
    assert not _loops(fn)
