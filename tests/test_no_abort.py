"""Nothing pmfast compiles aborts the process: integer and bool exponents, unresolvable symbols, fallback.

``x ** k`` with an integer or bool ``k`` used to abort Python under pmfast (``LLVM ERROR: Symbol
not found: __powidf2``): an Elemwise core inlined pytensor's Pow function, which pytensor compiles
without fast math for exactly that reason, and lowered it with the core's fast-math flags. Each
test here would kill the test process if that came back, which fails the run.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")


def _functions(inputs, outputs):
    import pytensor

    import pmfast

    stock = pytensor.function(inputs, outputs, mode="NUMBA")
    ours = pytensor.function(inputs, outputs, mode=pmfast.get_mode("all"))
    return stock, ours


def _assert_same(stock, ours, args, rtol=1e-12):
    for a, b in zip(stock(*args), ours(*args), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=rtol, atol=0)


@st.composite
def power_graphs(draw):
    """A graph raising float data to integer/bool exponents in one of the forms pmfast lowers."""
    exponent_dtype = draw(st.sampled_from(INT_DTYPES))
    base_dtype = draw(st.sampled_from(("float64", "float32")))
    form = draw(st.sampled_from(("array", "scalar", "constant", "gather", "composite", "zero_d")))
    n = draw(st.integers(0, 7))
    return exponent_dtype, base_dtype, form, n


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(power_graphs(), st.integers(0, 2**32 - 1))
def test_integer_exponents_match_stock(case, seed):
    import pytensor.tensor as pt

    exponent_dtype, base_dtype, form, n = case
    rng = np.random.default_rng(seed)
    high = 2 if exponent_dtype == "bool" else 5
    k_values = rng.integers(0, high, size=n).astype(exponent_dtype)
    x_values = rng.uniform(0.5, 1.5, size=n).astype(base_dtype)
    x = pt.vector("x", dtype=base_dtype)
    if form == "array":
        k = pt.vector("k", dtype=exponent_dtype)
        inputs, outputs, args = [x, k], [x**k], [x_values, k_values]
    elif form == "scalar":
        k = pt.scalar("k", dtype=exponent_dtype)
        inputs, outputs, args = [x, k], [x**k], [x_values, np.asarray(high - 1, dtype=exponent_dtype)]
    elif form == "constant":
        # a constant pytensor does not turn into multiplications
        big = np.asarray(1 if exponent_dtype == "bool" else 77, dtype=exponent_dtype)
        inputs, outputs, args = [x], [pt.abs(x) ** pt.constant(big)], [x_values]
    elif form == "gather":
        k = pt.vector("k", dtype=exponent_dtype)
        idx = pt.vector("idx", dtype="int64")
        idx_values = rng.integers(0, max(n, 1), size=2 * n) if n else np.zeros(0, dtype="int64")
        inputs, outputs = [x, k, idx], [(x[idx] ** k[idx] * 2.0).sum()]
        args = [x_values, k_values, idx_values]
    elif form == "composite":
        k = pt.vector("k", dtype=exponent_dtype)
        y = pt.vector("y", dtype="float64")
        inputs, outputs = [x, k, y], [pt.exp(-(x**k) * y) + x**k, (x**k).sum()]
        args = [x_values, k_values, rng.normal(size=n)]
    else:  # zero_d: all-scalar arithmetic
        s = pt.scalar("s", dtype="float64")
        k = pt.scalar("k", dtype=exponent_dtype)
        inputs, outputs = [s, k], [s**k + 1.0, pt.log1p(pt.abs(s) ** k)]
        args = [np.float64(rng.uniform(0.5, 1.5)), np.asarray(high - 1, dtype=exponent_dtype)]
    stock, ours = _functions(inputs, outputs)
    _assert_same(stock, ours, args, rtol=1e-6 if base_dtype == "float32" else 1e-12)


def polynomial_model(n: int = 60, seed: int = 1):
    """The regression users met: powers of x as data, of every integer width and bool, and ``|b| ** 600``."""
    import pymc as pm
    import pytensor.tensor as pt

    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=n)
    y = 0.3 + 0.8 * x - 0.5 * x**2 + rng.normal(size=n) * 0.2
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, size=3)
        mu = 0.0
        for dtype in INT_DTYPES:
            powers = pm.Data(f"powers_{dtype}", np.arange(3).astype(dtype) if dtype != "bool" else np.array([0, 1, 1], dtype=bool))
            mu = mu + ((x[:, None] ** powers) * b).sum(-1) / len(INT_DTYPES)
        c = pm.Normal("c", 0, 0.1)
        mu = mu + pt.abs(c) ** 600
        pm.Normal("y", mu, 0.2, observed=y)
    return model


def test_polynomial_regression_entry_matches_stock():
    """The kernel nutpie calls (pmfast's entry) for every exponent dtype at once, against stock."""
    from pmfast import nutpie_glue
    from pmfast.frontend import logp_dlogp_function

    model = polynomial_model()
    stock, x0 = logp_dlogp_function(model, passes="none")
    fn, _ = logp_dlogp_function(model, passes="all")
    kernel = nutpie_glue.logp_kernel(fn)
    rng = np.random.default_rng(0)
    for x in (x0, x0 + rng.normal(size=x0.size) * 0.3, x0 - 0.7):
        logp, grad = (np.asarray(v) for v in stock(x))
        code, logp_ours, grad_ours = kernel(x)
        assert code == 0
        np.testing.assert_allclose(logp_ours, logp, rtol=1e-12)
        np.testing.assert_allclose(grad_ours, grad, rtol=1e-10, atol=1e-300)


@pytest.mark.slow
def test_polynomial_regression_samples_as_stock():
    """``pmfast.sample`` on the polynomial regression: posterior means within Monte-Carlo error of stock's."""
    import arviz as az
    import nutpie

    import pmfast

    model = polynomial_model()
    ours = pmfast.sample(model, draws=500, tune=500, chains=2, seed=3, progress=False)
    stock = nutpie.sample(nutpie.compile_pymc_model(model), draws=500, tune=500, chains=2, seed=3, progress_bar=False)
    for name in ("b", "c"):
        a, b = az.summary(ours, var_names=[name]), az.summary(stock, var_names=[name])
        se = np.sqrt(a["mcse_mean"] ** 2 + b["mcse_mean"] ** 2).to_numpy()
        assert np.all(np.abs(a["mean"].to_numpy() - b["mean"].to_numpy()) <= 5 * se + 1e-12), (a, b)


def test_an_unresolvable_symbol_is_a_python_error():
    """A module calling a symbol nobody defines raises inside a pmfast compile instead of aborting."""
    import numba
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    from pmfast.compiler import patching, symbols

    symbols.install()

    @intrinsic
    def undefined_call(typingctx, x):
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType()])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "pmfast_test_undefined_symbol")
            return builder.call(fn, args)

        return types.float64(types.float64), codegen

    with patching.compiling():
        with pytest.raises(symbols.UnresolvedSymbolError, match="pmfast_test_undefined_symbol"):

            @numba.njit("float64(float64)")
            def calls_nothing(x):
                return undefined_call(x)

        @numba.njit("float64(float64, float64)", fastmath=True)
        def fine(x, y):
            return np.power(x, y) + np.exp(x)

    assert fine(2.0, 3.0) == pytest.approx(8.0 + np.exp(2.0))


def test_fast_math_integer_powers_link():
    """``__powidf2``/``__powisf2`` (fast-math ``pow`` of an integer: LLVM's ``powi``) resolve from the runtime."""
    import llvmlite.binding as ll
    import numba

    from pmfast.compiler import patching, symbols

    symbols.install()
    with patching.compiling():

        @numba.njit("float64(float64, int8)", fastmath=True)
        def fast_power(x, k):
            return np.power(x, k)

        @numba.njit("float32(float32, int32)", fastmath=True)
        def fast_power32(x, k):
            return np.power(x, k)

    assert ll.address_of_symbol("__powidf2") and ll.address_of_symbol("__powisf2")
    for k in (-3, 0, 1, 7):
        assert fast_power(1.5, k) == pytest.approx(1.5**k, rel=1e-15)
        assert fast_power32(np.float32(1.5), k) == pytest.approx(1.5**k, rel=1e-6)


def test_a_failed_compile_falls_back_to_stock(monkeypatch, small_model):
    """An error inside pmfast's compile costs a stock compile and a warning, not the user's session."""
    import nutpie

    import pmfast
    from pmfast import nutpie_glue
    from pmfast.compiler import symbols

    def broken(*args, **kwargs):
        raise symbols.UnresolvedSymbolError("numba function 'f' would call undefined symbols: __powidf2")

    monkeypatch.setattr(nutpie_glue, "compile_numba", broken)
    monkeypatch.setenv("PMFAST_FALLBACK", "1")
    with pytest.warns(pmfast.FallbackWarning, match="__powidf2"):
        compiled = pmfast.compile(small_model)
    assert compiled.passes == () and "UnresolvedSymbolError" in compiled.fallback
    idata = nutpie.sample(compiled, draws=30, tune=30, chains=1, progress_bar=False, seed=1)
    assert idata.posterior["mu"].shape == (1, 30)
    monkeypatch.setenv("PMFAST_FALLBACK", "0")
    with pytest.raises(symbols.UnresolvedSymbolError), warnings.catch_warnings():
        warnings.simplefilter("error", pmfast.FallbackWarning)
        pmfast.compile(small_model)


_FLOAT32_POWER = """
import sys
import numpy as np, pytensor, pytensor.tensor as pt
import pmfast
d0 = pytensor.shared(np.array([3, 4, 1, 0, 2], dtype="uint8"), name="d0")
d1 = pytensor.shared(np.array([2, 3, 5, 7, 1], dtype="uint8"), name="d1")
out = pt.sqr(d1 ** abs(d0 - 0.5 * d0))  # float32 pow of uint8 data: LLVM's powi -> __powisf2
if sys.argv[1] == "mode":
    fn = pytensor.function([], [out], mode=pmfast.get_mode("all"))
else:
    with pmfast.enabled():
        fn = pytensor.function([], [out], mode="NUMBA")
print(repr(fn()[0].tolist()))
"""


@pytest.mark.parametrize("way", ["mode", "plugin"])
def test_a_float32_power_of_integer_data_links_in_a_fresh_process(way, tmp_path):
    """In a process that never compiled through pmfast's sampler path, ``pmfast.get_mode`` and the
    plugin (the stock linker) link the ``__powisf2`` call LLVM makes of it: stock aborts there."""
    import ast
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}"}
    run = subprocess.run([sys.executable, "-c", _FLOAT32_POWER, way], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    d0, d1 = np.array([3, 4, 1, 0, 2], dtype="uint8"), np.array([2, 3, 5, 7, 1], dtype="uint8")
    want = np.square(d1.astype("float32") ** np.abs(d0 - np.float32(0.5) * d0))
    np.testing.assert_allclose(ast.literal_eval(run.stdout.strip().splitlines()[-1]), want, rtol=1e-6)
