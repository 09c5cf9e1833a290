"""pmfast.vmath.gamma: gammaln, digamma and log1mexp against mpmath, scipy and stock numba; vectorized; in graphs."""

import math
import re

import mpmath
import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.special as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import pmfast
from pmfast.mode import get_mode
from pmfast.vmath.elemwise import VmathElemwise
from pmfast.vmath.gamma import digamma, gammaln, log1mexp
from pmfast.vmath.ops import VmathGammaLn, VmathLog1mexp, VmathPsi, contains_vmath

RNG = np.random.default_rng(7)
ROOTS = [1.0, 2.0, 1.4616321449683622, -0.5040830082644554, -2.457024738220800]
POINTS = np.concatenate([
    RNG.uniform(0, 60, 300), 10 ** RNG.uniform(-300, 300, 200), -(10 ** RNG.uniform(-8, 12, 200)), RNG.uniform(-30, 3, 300),
    [r + d for r in ROOTS for d in (-1e-6, -1e-12, 0.0, 1e-12, 1e-6)], [0.5, 7.999999, 8.0, 8.000001, 1e-8, 3.5e-310],
])


@numba.njit
def _map(f, a):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = f(a[i])
    return out


def _check(kernel, exact, tol):
    got = _map(kernel, POINTS)
    for x, g in zip(POINTS, got):
        ref = exact(x)
        if not mpmath.isfinite(ref) or not math.isfinite(float(ref)):
            continue
        err = abs(mpmath.mpf(float(g)) - ref) / max(abs(ref), 1)
        assert err <= tol, (x, float(g), float(ref))


def test_gammaln_against_mpmath():
    mpmath.mp.dps = 40
    _check(gammaln, lambda x: mpmath.loggamma(x).real if not (x <= 0 and x == int(x)) else mpmath.inf, 1e-14)


def test_digamma_against_mpmath():
    mpmath.mp.dps = 40
    _check(digamma, lambda x: mpmath.digamma(x) if not (x <= 0 and x == int(x)) else mpmath.nan, 1e-14)


@numba.njit
def _stock_lgamma(a):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = math.lgamma(a[i])
    return out


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -2.0, -7.0, -1e300, 1.0, 2.0, 5e-324, 1e306])


def test_special_values_as_scipy_and_libm():
    g = _map(gammaln, SPECIALS)
    np.testing.assert_array_equal(g[[0, 1, 2, 3, 5, 6, 7, 8, 12]], np.inf)
    assert np.isnan(g[4]) and abs(g[9]) < 1e-14 and abs(g[10]) < 1e-14  # roots: absolute accuracy (module doc)
    np.testing.assert_allclose(g[11], _stock_lgamma(SPECIALS[11:12])[0], rtol=1e-15)
    d = _map(digamma, SPECIALS)
    ref = sp.psi(SPECIALS)
    assert np.array_equal(np.isnan(d), np.isnan(ref)), (d, ref)
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(d[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)])
    np.testing.assert_allclose(d[finite], ref[finite], rtol=1e-14)


def test_log1mexp_as_pytensor():
    x = -np.concatenate([10 ** RNG.uniform(-300, 2.8, 2000), [0.0, math.log(2), 1e-20, np.inf]])
    ref = np.where(x < math.log(0.5), np.log1p(-np.exp(x)), np.log(-np.expm1(x)))
    got = _map(log1mexp, x)
    np.testing.assert_allclose(got, ref, rtol=4e-16)
    assert np.isnan(_map(log1mexp, np.array([0.5, np.nan]))).all()


def test_integer_arguments():
    @numba.njit
    def ints(a):
        return np.array([gammaln(v) for v in a]), np.array([digamma(v) for v in a])

    a = np.arange(1, 300, dtype=np.int64)
    g, d = ints(a)
    np.testing.assert_allclose(g, sp.gammaln(a), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(d, sp.psi(a), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("kernel", [gammaln, digamma, log1mexp])
def test_the_map_vectorizes(kernel):
    @numba.njit
    def loop(a, out):
        for i in range(a.size):
            out[i] = kernel(a[i])

    loop(np.ones(4), np.ones(4))
    ir = loop.inspect_llvm(loop.signatures[0])
    assert re.search(r"<\d+ x double>", ir)
    assert not re.findall(r"call [^@\n]*@(?!llvm\.|NRT|numba)\w*(gammaln|digamma|lgamma|log1mexp|log1p|expm1|_log|_exp)\w*", ir)


# --- in graphs: the vector_math pass --------------------------------------------------------------------------

_fns: dict = {}


def _negbin_fns():
    """A NegativeBinomial-style logp over counts and its gradient (gammaln and psi per element), stock and vmath."""
    if not _fns:
        mu, alpha = pt.vector("mu"), pt.scalar("alpha")
        y = pt.vector("y", dtype="int64")
        terms = (pt.gammaln(y + alpha) - pt.gammaln(alpha) - pt.gammaln(y + 1)
                 + alpha * pt.log(alpha / (alpha + mu)) + y * pt.log(mu / (alpha + mu)))
        logp = terms.sum() + pt.log1mexp(-alpha)
        outs = [logp, *pytensor.grad(logp, [mu, alpha])]
        _fns["stock"] = pytensor.function([mu, alpha, y], outs, mode=get_mode("none"))
        _fns["vmath"] = pytensor.function([mu, alpha, y], outs, mode=get_mode(["vector_math"]))
    return _fns["stock"], _fns["vmath"]


def test_negbin_graph_converted():
    _, fast = _negbin_fns()
    kinds = set()
    for node in fast.maker.fgraph.apply_nodes:
        if isinstance(node.op, VmathElemwise):
            kinds |= {type(n.op) for n in node.op.scalar_op.fgraph.apply_nodes} if hasattr(node.op.scalar_op, "fgraph") else {type(node.op.scalar_op)}
    assert {VmathGammaLn, VmathPsi} <= kinds
    assert pmfast.fired(fast)["vector_math"] >= 1
    assert any(contains_vmath(n.op.scalar_op) for n in fast.maker.fgraph.apply_nodes if hasattr(n.op, "scalar_op"))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), alpha=st.floats(0.05, 200), scale=st.floats(0.01, 100), seed=st.integers(0, 2**31))
def test_hypothesis_negbin_logp_and_gradient_against_stock(n, alpha, scale, seed):
    stock, fast = _negbin_fns()
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0.01, 1.0, n) * scale
    y = rng.integers(0, 200, n)
    ref, got = stock(mu, alpha, y), fast(mu, alpha, y)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12, atol=1e-12)
    for g, r in zip(got[1:], ref[1:]):
        np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-12 * max(1.0, np.abs(r).max()))


def test_small_static_loops_and_the_switch_keep_libm():
    import pmfast.vmath as vm

    x = pt.vector("x", shape=(8,))
    fn = pytensor.function([x], pt.gammaln(x), mode=get_mode(["vector_math"]))
    assert not any(isinstance(n.op, VmathElemwise) for n in fn.maker.fgraph.apply_nodes)
    z = pt.vector("z")
    fn = pytensor.function([z], pt.gammaln(z), mode=get_mode(["vector_math"]))
    assert any(isinstance(n.op, VmathElemwise) for n in fn.maker.fgraph.apply_nodes)
    short, long = RNG.uniform(0.1, 30, 63), RNG.uniform(0.1, 30, 64)  # LIBM_BELOW: libm's loop below 64 at run time
    np.testing.assert_array_equal(fn(short), _stock_lgamma(short))
    np.testing.assert_allclose(fn(long), _stock_lgamma(long), rtol=1e-14, atol=1e-14)
    assert not np.array_equal(fn(long), _stock_lgamma(long))
    with vm.disabled():
        fn = pytensor.function([z], pt.gammaln(z), mode=get_mode(["vector_math"]))
    assert not any(isinstance(n.op, VmathElemwise) for n in fn.maker.fgraph.apply_nodes)
    a = RNG.uniform(0.1, 30, 50)
    np.testing.assert_array_equal(fn(a), _stock_lgamma(a))
