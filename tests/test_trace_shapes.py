"""pmfast.trace_shapes: the traced variables' shapes without an initial point, equal to nutpie's."""

import os
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from nutpie import compile_pymc

from pmfast import nutpie_glue, trace_shapes
from pmfast.compiler import patching
from pmfast.loading import load_model

CATALOGUE = Path(os.environ.get("PMFAST_CATALOGUE", "/work/catalogue"))
NUTPIES = getattr(compile_pymc._compute_shapes, "__wrapped__", compile_pymc._compute_shapes)


def _nutpies(model):
    with nutpie_glue._python_vm(), nutpie_glue._creation_traces():
        return NUTPIES(model)


def assert_same(ours, theirs):
    assert ours is not None, "declined"
    assert list(ours) == list(theirs)
    for name in theirs:
        assert ours[name].dtype == theirs[name].dtype, name
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def _transformed_model():
    """Transforms that change the value's shape (simplex, ordered, Cholesky-packed), deterministics on them."""
    with pm.Model(coords={"k": range(4), "g": range(3)}) as model:
        w = pm.Dirichlet("w", a=np.ones(4), dims="k")
        cuts = pm.Normal("cuts", mu=np.arange(3.0), sigma=1, transform=pm.distributions.transforms.ordered, shape=3)
        chol, _, _ = pm.LKJCholeskyCov("chol", n=3, eta=2.0, sd_dist=pm.Exponential.dist(1.0, shape=3))
        x = pm.Normal("x", 0, 1, dims=("g", "k"))
        pm.Deterministic("wx", x * w, dims=("g", "k"))
        pm.Deterministic("cov", chol @ chol.T)
        pm.Deterministic("both", pt.concatenate([cuts, w]))
        pm.Normal("y", (x * w).sum(1), 1, observed=np.zeros(3))
    return model


@pytest.mark.parametrize("name", ["eight_schools_centered", "hier_var:n_groups=3", "wide_additive", "stoch_vol", "lkj_mvnormal", "ar2_scan"])
def test_zoo_shapes_equal_nutpies(name):
    model, _ = load_model(name)
    assert_same(trace_shapes.trace_shapes(model), _nutpies(model))


def test_transformed_values_and_deterministics_equal_nutpies():
    model = _transformed_model()
    theirs = _nutpies(model)
    assert theirs["w_simplex__"].tolist() == [3] and theirs["chol_cholesky-cov-packed__"].tolist() == [6]
    assert_same(trace_shapes.trace_shapes(model), theirs)


@pytest.mark.skipif(not (CATALOGUE / "models").is_dir(), reason="no model catalogue checkout")
@pytest.mark.parametrize("name", ["bayesian_var_ireland", "CFA_SEM_indirect", "GLM_missing_values_auto_impute", "copula_gaussian"])
def test_catalogue_shapes_equal_nutpies(name):
    model, _ = load_model(str(CATALOGUE / "models" / f"{name}.py"))
    assert_same(trace_shapes.trace_shapes(model), _nutpies(model))


def _value_dependent_model():
    with pm.Model() as model:
        x = pm.Normal("x", 3.0, 1.0)
        pm.Deterministic("d", pt.zeros(pt.cast(pt.floor(pt.abs(x)), "int64") + 1))
    return model


def test_a_shape_that_needs_a_draw_declines():
    assert trace_shapes.trace_shapes(_value_dependent_model()) is None


def test_the_glue_asks_nutpie_when_declined_and_outside_a_compile(monkeypatch):
    """Inside a compile: ours, or nutpie's when ours declines or is switched off; outside: nutpie's."""
    nutpie_glue._install_trace_shapes()
    installed = compile_pymc._compute_shapes
    nutpie_glue._install_trace_shapes()
    assert compile_pymc._compute_shapes is installed and installed.__wrapped__ is NUTPIES
    calls, ours = [], []
    monkeypatch.setattr(installed, "__wrapped__", lambda model: calls.append(model) or NUTPIES(model))
    real = trace_shapes.trace_shapes
    monkeypatch.setattr(trace_shapes, "trace_shapes", lambda model: ours.append(model) or real(model))

    plain = load_model("eight_schools_centered")[0]
    with patching.compiling():
        assert_same(installed(plain), _nutpies(plain))
    assert calls == [] and ours == [plain]
    installed(plain)  # outside a compile: nutpie's own, through the dispatch's original
    assert calls == [] and ours == [plain]

    dependent = _value_dependent_model()
    with patching.compiling():
        shapes = installed(dependent)
    assert calls == [dependent] and ours[-1] is dependent and shapes["d"].tolist() == [4]

    monkeypatch.setenv("PMFAST_TRACE_SHAPES", "0")
    with patching.compiling():
        installed(plain)
    assert calls[-1] is plain and len(calls) == 2 and len(ours) == 2


def test_compiled_model_shapes_equal_nutpies():
    """Through pmfast.compile: the model's shape_info (names, slices, shapes) as nutpie's own shapes give."""
    import pmfast

    model = _transformed_model()
    compiled = pmfast.compile(model)
    theirs = _nutpies(model)
    names, _, shapes = compiled.shape_info
    for name, shape in zip(names, shapes, strict=True):
        assert tuple(shape) == tuple(theirs[name]), name
