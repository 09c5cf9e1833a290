import numpy as np
import pytensor
import pytensor.tensor as pt

import pmfast
from pmfast.passes import fired


def _compile_stock():
    x = pt.dvector("x")
    return pytensor.function([x], (pt.exp(x) ** 2).sum(), mode="NUMBA")


def _numba_tagged():
    from pytensor.compile import optdb

    return {e for e in optdb.__db__["numba"] if getattr(e, "name", "").startswith("pmfast.")}


def test_enable_disable_switches_stock_numba_mode(probe_pass):
    before = _numba_tagged()
    assert fired(_compile_stock()) == {}
    pmfast.enable(["probe"])
    try:
        assert pmfast.is_enabled() == ["probe"]
        assert fired(_compile_stock()) == {"probe": 1}
    finally:
        pmfast.disable()
    assert fired(_compile_stock()) == {}
    assert _numba_tagged() == before
    assert pmfast.is_enabled() == []


def test_enabled_context_restores_state(probe_pass):
    with pmfast.enabled("all"):
        assert "probe" in pmfast.is_enabled()
        inside = fired(_compile_stock())
        assert inside["probe"] == 1 and set(inside) <= set(pmfast.is_enabled())
    assert pmfast.is_enabled() == []
    assert fired(_compile_stock()) == {}


def test_enabled_context_restores_on_error(probe_pass):
    try:
        with pmfast.enabled(["probe"]):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert pmfast.is_enabled() == []


def test_plugin_reaches_nutpie_compile(probe_pass, small_model):
    """nutpie.compile_pymc_model, routed to pmfast.compile, runs the enabled passes."""
    import nutpie

    with pmfast.enabled(["probe"]):
        compiled = nutpie.compile_pymc_model(small_model)
    assert fired(compiled).get("probe", 0) >= 1
    x0 = np.zeros(compiled.n_dim)
    stock = pmfast.logp_dlogp_function(small_model, passes="none")[0]
    logp, grad = compiled.logp_func(x0)
    slogp, sgrad = stock(x0)
    np.testing.assert_allclose(logp, slogp, rtol=1e-12)
    np.testing.assert_allclose(grad, sgrad, rtol=1e-12, atol=1e-12)


def test_plugin_routes_pm_sample_to_pmfast_compile(small_model, monkeypatch):
    """pm.sample(nuts_sampler="nutpie") under the plugin samples pmfast's compiled model; disable() restores nutpie."""
    import nutpie
    import pymc as pm

    from pmfast.nutpie_glue import PmfastCompiledModel

    original = nutpie.compile_pymc_model
    sampled = []
    nutpie_sample = nutpie.sample

    def spy(compiled, *args, **kwargs):
        sampled.append(compiled)
        return nutpie_sample(compiled, *args, **kwargs)

    monkeypatch.setattr(nutpie, "sample", spy)
    with pmfast.enabled():
        idata = pm.sample(
            nuts_sampler="nutpie", draws=100, tune=100, chains=1, random_seed=3, progressbar=False, model=small_model
        )
        assert nutpie.compile_pymc_model is not original
    assert nutpie.compile_pymc_model is original
    assert idata.posterior["z"].shape == (1, 100, 12)
    (compiled,) = sampled
    assert isinstance(compiled, PmfastCompiledModel)
    assert "indexed_elemwise" in compiled.passes and fired(compiled).get("indexed_elemwise", 0) >= 1
    assert any(stage.startswith("numba: logp+grad kernel") for stage in compiled.timings)
    with pmfast.enabled():
        pmfast.enable(["probe"] if "probe" in pmfast.is_enabled() else [])  # re-enabling routes once
        assert nutpie.compile_pymc_model.__wrapped__ is original
    assert nutpie.compile_pymc_model is original and pmfast.is_enabled() == []
