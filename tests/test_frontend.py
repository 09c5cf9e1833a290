import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytest

import pmfast
from pmfast.frontend import logp_dlogp_graph


@pytest.fixture(scope="module")
def compiled(small_model):
    return pmfast.compile(small_model)


def test_compile_returns_what_nutpie_samples(compiled, small_model):
    import nutpie

    assert isinstance(compiled, nutpie.compile_pymc.CompiledPyMCModel)
    assert compiled.n_dim == sum(int(np.prod(np.shape(v))) for v in small_model.initial_point().values())
    assert "graphs + rewrites" in compiled.timings
    assert any(stage.startswith("numba: logp+grad wrapper") for stage in compiled.timings)
    idata = nutpie.sample(compiled, draws=1000, tune=500, chains=4, seed=1, progress_bar=False)
    assert float(az.rhat(idata).to_array().max()) <= 1.01
    assert idata.posterior["z"].shape == (4, 1000, 12)


def test_sample_returns_inference_data(small_model):
    idata = pmfast.sample(small_model, draws=200, tune=200, chains=2, seed=3, progress=False)
    assert idata.posterior["mu"].shape == (2, 200)
    assert idata.attrs["pmfast_interrupted"] is False
    assert idata.attrs["pmfast_compile_seconds"] > 0


def test_sample_keeps_draws_on_interrupt(small_model, monkeypatch):
    """Ctrl-C during sampling returns the draws so far, flagged as interrupted."""
    import importlib

    nutpie_sample = importlib.import_module("nutpie.sample")

    def interrupted_wait(self, *, timeout=None):
        try:
            self._sampler.wait(0.5)
        except TimeoutError:
            pass
        raise KeyboardInterrupt

    monkeypatch.setattr(nutpie_sample._BackgroundSampler, "wait", interrupted_wait)
    idata = pmfast.sample(small_model, draws=100_000, tune=100, chains=2, seed=3, progress=False)
    assert idata.attrs["pmfast_interrupted"] is True
    assert 0 < idata.posterior.sizes["draw"] < 100_000


def test_passes_none_is_identical_to_stock(small_model):
    fn, x0 = pmfast.logp_dlogp_function(small_model, passes="none")
    joined, logp, grad, _, _ = logp_dlogp_graph(small_model)
    with small_model:
        stock = pm.pytensorf.compile((joined,), (logp, grad), mode="NUMBA")
    for x in (x0, x0 + 0.3):
        (a, ga), (b, gb) = fn(x), stock(x)
        assert a == b and np.array_equal(ga, gb)
    assert [str(n.op) for n in fn.maker.fgraph.toposort()] == [
        str(n.op) for n in stock.maker.fgraph.toposort()
    ]


def test_compile_none_matches_nutpie(small_model):
    import nutpie

    ours = pmfast.compile(small_model, passes="none")
    theirs = nutpie.compile_pymc_model(small_model)
    x = np.linspace(-1, 1, ours.n_dim)
    (a, ga), (b, gb) = ours.logp_func(x), theirs.logp_func(x)
    assert a == b and np.array_equal(ga, gb)
    assert ours.shapes == theirs.shapes and ours.n_dim == theirs.n_dim


def test_logp_dlogp_function_kernel_is_what_nutpie_calls(small_model):
    fn, x0 = pmfast.logp_dlogp_function(small_model)
    logp, grad = fn.vm.jit_fn(*pmfast.kernel_args(fn, x0))
    ref_logp, ref_grad = fn(x0)
    assert np.isfinite(logp) and logp == ref_logp
    np.testing.assert_array_equal(grad, ref_grad)
    assert grad.shape == x0.shape


def test_discrete_free_variable_is_a_clear_error():
    with pm.Model() as model:
        pm.Poisson("k", 3.0)
    with pytest.raises(pmfast.ModelError, match="discrete free variables .*k"):
        pmfast.compile(model)


def test_not_a_model_is_a_clear_error():
    with pytest.raises(pmfast.ModelError, match="expected a pymc.Model"):
        pmfast.compile("model.py")


@pytest.mark.parametrize("kw", [{"draws": 0}, {"chains": -1}, {"tune": -5}])
def test_bad_sample_sizes(small_model, kw):
    with pytest.raises(ValueError, match="must be"):
        pmfast.sample(small_model, **kw)


def test_nutpie_kwargs_pass_through(small_model, compiled):
    assert compiled.n_expanded == compiled.n_dim + 2  # default: tau and sigma on their own scale
    compiled = pmfast.compile(small_model, passes="none", var_names=["mu"], initial_points={"mu": 0.5})
    point = compiled.initial_point_func(0)
    assert point.shape == (compiled.n_dim,)
    assert compiled.n_expanded == compiled.n_dim  # only mu requested: tau, sigma not expanded


def _call_logp_cfunc(compiled, x, user_data, dim=None):
    import ctypes

    c_logp = ctypes.CFUNCTYPE(
        ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
    )(compiled.compiled_logp_func.address)
    grad, logp = np.zeros(compiled.n_dim), np.zeros(())
    rc = c_logp(dim or compiled.n_dim, x.ctypes.data, grad.ctypes.data, logp.ctypes.data, user_data.ctypes.data)
    return rc, float(logp), grad


def test_sampler_callback_reads_shared_data_at_call_time(compiled):
    """pmfast's cacheable C wrapper: same values as the pytensor function, data swapped without recompiling."""
    x = np.linspace(-0.5, 0.5, compiled.n_dim)
    rc, logp, grad = _call_logp_cfunc(compiled, x, compiled.user_data)
    ref_logp, ref_grad = compiled.logp_func(x)
    # the callback inlines the graph's node functions into one function: equal up to rounding
    assert rc == 0
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-12)
    assert _call_logp_cfunc(compiled, x, compiled.user_data, dim=compiled.n_dim + 1)[0] == -1

    new_x = compiled.shared_data["x"] * 2.0
    swapped = compiled.with_data(x=new_x)
    rc, logp2, grad2 = _call_logp_cfunc(swapped, x, swapped.user_data)
    (shared_x,) = [v for v in compiled.logp_func.get_shared() if v.name == "x"]
    old = shared_x.get_value()
    shared_x.set_value(new_x)
    try:
        ref_logp2, ref_grad2 = compiled.logp_func(x)
    finally:
        shared_x.set_value(old)
    assert rc == 0 and logp2 != logp
    np.testing.assert_allclose(logp2, ref_logp2, rtol=1e-12)
    np.testing.assert_allclose(grad2, ref_grad2, rtol=1e-12, atol=1e-12)
    assert swapped.compiled_logp_func is compiled.compiled_logp_func
