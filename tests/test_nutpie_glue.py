"""Fails loudly when nutpie changes the private helpers pmfast's glue relies on."""

import inspect

import nutpie
import pytest
from nutpie import compile_pymc

from pmfast import nutpie_glue


def test_nutpie_version_pinned():
    assert nutpie.__version__ == nutpie_glue.NUTPIE_VERSION
    nutpie_glue.check_nutpie()


def test_private_helper_signatures():
    sig = inspect.signature(compile_pymc._make_functions)
    assert list(sig.parameters) == [
        "model",
        "mode",
        "compute_grad",
        "join_expanded",
        "pymc_initial_point_fn",
        "var_names",
    ]
    assert list(inspect.signature(compile_pymc.make_user_data).parameters) == ["shared_vars", "shared_data"]
    assert list(inspect.signature(compile_pymc.update_user_data).parameters) == ["user_data", "user_data_storage"]
    assert list(inspect.signature(compile_pymc._prepare_dims_and_coords).parameters) == [
        "model",
        "shape_info",
    ]


def test_compiled_model_fields_cover_ours():
    import dataclasses

    theirs = {f.name for f in dataclasses.fields(compile_pymc.CompiledPyMCModel)}
    ours = {f.name for f in dataclasses.fields(nutpie_glue.PmfastCompiledModel)}
    assert ours - theirs == {"passes", "timings", "cpu_timings", "kernels", "fallback", "derived_data", "derivations"}


def test_glue_mirrors_nutpie_numba_path():
    """nutpie's own numba path still builds its functions, user data and coordinates the way our glue does."""
    src = inspect.getsource(compile_pymc._compile_pymc_model_numba)
    for call in ("_make_functions(", "make_user_data(shared_vars, shared_data)", "_prepare_dims_and_coords(model, shape_info)"):
        assert call in src, call
    assert 'mode="NUMBA"' in src
    # with_data rebuilds user_data from a copy of ours: pmfast's header in front survives
    src = inspect.getsource(compile_pymc.CompiledPyMCModel.with_data)
    assert "self.user_data.copy()" in src and "update_user_data(user_data, shared_data)" in src
    assert 'user_data["shared"]' in inspect.getsource(compile_pymc.update_user_data)


def test_unknown_options_are_refused_in_one_line(small_model):
    import pytest

    with pytest.raises(TypeError, match="unexpected options"):
        nutpie_glue.compile_numba(small_model, None, fastmath=True)


def test_with_data_of_another_length_samples():
    """fit_many's path: one compile, data of other lengths swapped in through nutpie's with_data."""
    import numpy as np
    import pymc as pm

    import pmfast
    from pmfast.compiler import callbacks

    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    with pm.Model() as model:
        xd = pm.Data("x", x)
        yd = pm.Data("y", 1.0 + 2.0 * x + rng.normal(size=30))
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        s = pm.HalfNormal("s", 1)
        pm.Normal("obs", a + b * xd, s, observed=yd, shape=xd.shape)
    compiled = pmfast.compile(model)

    x2 = rng.normal(size=500)
    y2 = -1.0 - 3.0 * x2 + 0.1 * rng.normal(size=500)
    swapped = compiled.with_data(x=x2, y=y2)
    point = np.array([-1.0, -3.0, np.log(0.1)])
    code, logp, grad = callbacks.logp_at(swapped, point)
    with model:
        pm.set_data({"x": x2, "y": y2})
    ref_logp, ref_grad = pmfast.logp_dlogp_function(model, passes="none")[0](point)
    assert code == 0
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-10)

    idata = nutpie.sample(swapped, draws=200, tune=200, chains=1, seed=1, progress_bar=False)
    assert abs(float(idata.posterior["b"].mean()) + 3.0) < 0.05
    assert callbacks.logp_at(compiled, point)[1] != logp  # the original keeps its own data


def test_python_vm_stands_in_for_the_c_exceptions_module_and_restores_it():
    import importlib
    import sys

    name = "pytensor.link.c.exceptions"
    saved = [sys.modules.pop(m) for m in ("pytensor.link.c.cvm", name) if m in sys.modules]
    try:
        with nutpie_glue._python_vm():
            from pytensor.link.c.exceptions import MissingGXX

            assert not hasattr(sys.modules[name], "__file__")  # the stand-in, not the setuptools import
            assert issubclass(MissingGXX, Exception)
            with pytest.raises(ImportError):
                import pytensor.link.c.cvm  # noqa: F401  (blocked: pytensor falls back to its Python VM)
    finally:
        assert name not in sys.modules or hasattr(sys.modules[name], "__file__")
        real = importlib.import_module(name)
        from setuptools.errors import CompileError

        assert issubclass(real.CompileError, CompileError)
        for m in saved:
            sys.modules[m.__name__] = m


def test_creation_traces_use_the_compile_limit_unless_the_user_set_one():
    import pytensor.tensor as pt
    from pytensor import config

    with nutpie_glue._creation_traces():
        assert config.traceback__limit == config.traceback__compile_limit
        quiet = pt.dvector() + 1.0
    assert quiet.tag.trace == []  # as pytensor's rewrites leave the variables they create
    assert config.traceback__limit == 8
    assert pt.dvector().exp().tag.trace  # recorded again after
    try:
        config.traceback__limit = 3  # the user's choice
        with nutpie_glue._creation_traces():
            assert config.traceback__limit == 3
    finally:
        config.traceback__limit = 8
