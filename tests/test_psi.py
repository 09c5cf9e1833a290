"""pmfast.vmath.special.digamma against mpmath (and scipy.special.psi), and its use by pmfast's linker.

The sweeps print the maximum error in ulp of the exact value (mpmath at 40 digits) per
region, for digamma and for scipy's psi on the same points (``pytest -s`` shows them).
"""

import math

import mpmath as mp
import numba
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st

from pmfast.vmath.reference import mp_values, ulp_error
from pmfast.vmath.special import digamma

mp.mp.dps = 40
MAX_ULP = 4.0


@numba.njit
def _map(x, out):
    for i in range(x.size):
        out[i] = digamma(x[i])


def values(x):
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    _map(x, out)
    return out


def ulps(got, x):
    """Errors of ``got`` in ulp of the exact psi(x) (mpmath at 40 digits)."""
    return ulp_error(got, mp_values(mp.digamma, x))


def _report(name, x):
    e, es = ulps(values(x), x), ulps(sc.psi(x), x)
    print(f"\n{name}: {len(x)} points, max ulp {e.max():.3f} (scipy {es.max():.3f})")
    return e


rng = np.random.default_rng(20240611)
ROOT = 1.4616321449683622
REGIONS = {
    "tiny (0, 1e-300]": np.concatenate([[5e-324, 1e-320, 2.2250738585072014e-308], rng.uniform(1e-310, 1e-300, 200)]),
    "(1e-300, 1e-6)": 10.0 ** rng.uniform(-300, -6, 1500),
    "[1e-6, 0.99)": 10.0 ** rng.uniform(-6, math.log10(0.99), 2000),
    "[0.99, 10)": rng.uniform(0.99, 10.0, 4000),
    "root 1.4616 +- 1e-3": ROOT + rng.uniform(-1e-3, 1e-3, 1500),
    "root +- 64 ulp": ROOT + np.arange(-64, 65) * np.spacing(ROOT),
    "[10, 1e3)": rng.uniform(10.0, 1e3, 2000),
    "[1e3, 1e300]": 10.0 ** rng.uniform(3, 300, 1500),
    "(-1e-6, 0)": -(10.0 ** rng.uniform(-320, -6, 1500)),
    "near poles -n +- 1e-8": -np.repeat(np.arange(1.0, 1001.0), 2) + rng.uniform(-1e-8, 1e-8, 2000),
}


@pytest.mark.parametrize("region", list(REGIONS))
def test_sweep_ulp(region):
    x = REGIONS[region]
    assert _report(region, x).max() <= MAX_ULP


def _negative_roots(n):
    """The root of psi in (-k-1, -k) for k < n (mpmath)."""
    roots = [float(mp.findroot(mp.digamma, -0.504083008264455))]
    for k in range(1, n):
        roots.append(float(mp.findroot(mp.digamma, (-k - 1 + 1e-9, -k - 1e-9), solver="anderson")))
    return np.array(roots)


def test_negative_axis():
    """(-1e3, 0): a few ulp away from the roots of psi; near a root the reflection's terms
    psi(1 - x) and pi cot(pi x) cancel, and there the error is measured in ulp of the larger term."""
    x = -rng.uniform(1e-6, 1e3, 6000)
    got = values(x)
    scale = np.abs(sc.psi(1.0 - x)) + np.abs(np.pi / np.tan(np.pi * x))
    e = ulps(got, x)
    es = ulps(sc.psi(x), x)
    far = np.abs(sc.psi(x)) >= scale / 4  # no cancellation worse than a factor 4
    abs_err = np.array([float(abs(mp.mpf(float(g)) - mp.digamma(mp.mpf(float(v))))) for g, v in zip(got, x)])
    term_ulp = abs_err / np.spacing(scale)
    print(
        f"\n(-1e3, 0): {far.sum()} points away from roots, max ulp {e[far].max():.3f} (scipy {es[far].max():.3f}); "
        f"all points: max ulp {e.max():.1f} (scipy {es.max():.1f}), max error in ulp of the larger term {term_ulp.max():.3f}"
    )
    assert e[far].max() <= MAX_ULP
    assert term_ulp.max() <= MAX_ULP


def test_near_negative_roots():
    """Around the first 20 negative roots: error in ulp of the reflection's larger term (the exact
    value can be ~0 there); scipy's error is of the same order."""
    roots = _negative_roots(20)
    x = (roots[:, None] + np.linspace(-1e-3, 1e-3, 41)[None, :]).ravel()
    got = values(x)
    scale = np.abs(sc.psi(1.0 - x)) + np.abs(np.pi / np.tan(np.pi * x))
    ref = np.array([mp.digamma(mp.mpf(float(v))) for v in x])
    err = np.array([float(abs(mp.mpf(float(g)) - r)) for g, r in zip(got, ref)])
    err_sc = np.array([float(abs(mp.mpf(float(g)) - r)) for g, r in zip(sc.psi(x), ref)])
    print(f"\nnear negative roots: max {np.max(err / np.spacing(scale)):.3f} ulp of the larger term (scipy {np.max(err_sc / np.spacing(scale)):.3f})")
    assert np.max(err / np.spacing(scale)) <= MAX_ULP


SPECIALS = [0.0, -0.0, -1.0, -2.0, -3.0, -1e20, -(2.0**52), -(2.0**52) - 1, -4503599627370495.5, math.inf, -math.inf,
            math.nan, 5e-324, -5e-324, 1e-300, -1e-300, 1.7976931348623157e308, -1.7976931348623157e308, ROOT, 1.0, 2.0,
            0.5, -0.5, 10.0, 9.999999999999998, 0.99, 0.9899999999999999, -(2.0**-20), -(2.0**-20) * (1 + 2**-52)]


@pytest.mark.parametrize("x", SPECIALS)
def test_special_values(x):
    got, want = digamma(x), sc.psi(x)
    if math.isnan(want) or math.isinf(want):
        assert got == want or (math.isnan(got) and math.isnan(want)), (x, got, want)
    else:
        assert ulps([got], [x])[0] <= MAX_ULP, (x, got, want)
    assert values(np.array([x]))[0] == got or math.isnan(got)


def test_integer_argument():
    assert digamma(3) == digamma(3.0)


@settings(max_examples=1500, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_hypothesis(x):
    got, want = digamma(x), sc.psi(x)
    if not np.isfinite(want):
        assert (math.isnan(got) and math.isnan(want)) or got == want
        return
    ref = mp.digamma(mp.mpf(x))
    err = float(abs(mp.mpf(got) - ref) / np.spacing(abs(float(ref))))
    if x < 0:
        # relative error near the negative roots: measured against the reflection's terms
        scale = abs(sc.psi(1.0 - x)) + abs(math.pi / math.tan(math.pi * (x - round(x))))
        err = min(err, float(abs(mp.mpf(got) - ref)) / np.spacing(scale))
    assert err <= MAX_ULP, (x, got, want)


# --- pmfast's linker -------------------------------------------------------------------


def _fgraph_key(mode, outputs, inputs):
    import pytensor

    f = pytensor.function(inputs, outputs, mode=mode)
    return f, f.maker.fgraph


def test_pmfast_compile_caches_psi():
    """A graph with psi gets a cache key under pmfast's linker (stock: None, unchanged)."""
    import pytensor.tensor as pt
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    from pmfast.linker import ChunkedNumbaLinker
    from pmfast.mode import get_mode

    import pmfast.vmath as vm

    x = pt.dvector("x")
    with vm.disabled():  # else the vector_math pass computes psi with pmfast.vmath.gamma (tests/test_vmath_gamma.py)
        f, fgraph = _fgraph_key(get_mode(), pt.psi(x) * pt.exp(x), [x])
    _, key = ChunkedNumbaLinker().fgraph_convert(fgraph)
    assert key is not None
    _, stock_key = numba_funcify_and_cache_key(fgraph)
    assert stock_key is None  # stock NUMBA mode still calls scipy's psi (not cacheable)
    v = np.array([0.3, 1.5, 7.0, -2.5, 400.0])
    np.testing.assert_allclose(f(v), sc.psi(v) * np.exp(v), rtol=1e-14)


def test_negative_binomial_grad_matches_stock():
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    from pmfast.mode import get_mode

    rng = np.random.default_rng(1)
    y = rng.negative_binomial(3, 0.3, size=300)
    mu = pt.dvector("mu")
    alpha = pt.dscalar("alpha")
    logp = pm.logp(pm.NegativeBinomial.dist(mu=mu, alpha=alpha), y).sum()
    grads = pytensor.grad(logp, [mu, alpha])
    args = (rng.uniform(0.5, 20.0, 300), 2.7)
    ours = pytensor.function([mu, alpha], [logp, *grads], mode=get_mode())(*args)
    stock = pytensor.function([mu, alpha], [logp, *grads], mode="NUMBA")(*args)
    for a, b in zip(ours, stock):
        np.testing.assert_allclose(a, b, rtol=1e-12)
