import importlib
import subprocess
import sys

import numpy as np
import pytest
from pytensor.compile.mode import Mode

from pmfast import models

# Each model is evaluated by pytensor's python linker (fast_compile rewrites): no C thunks to compile with an empty
# compile directory. Its Elemwise.perform cannot run a node with > 32 operands (numpy's ufunc limit), which
# wide_additive at its default n=40 has; its size does not change what is checked.
PYTHON_MODE = Mode(linker="py", optimizer="fast_compile")
TEST_SIZES = {
    "wide_additive": {"n": 12},
    "hier_var": {"n_groups": 1},
    "bradley_terry_np": {"n_matches": 5000},
    "irt_2pl_np": {"n_persons": 60},
}


@pytest.mark.parametrize("name", list(models.ZOO))
def test_zoo_model(name):
    import pymc as pm

    model = models.load(name)(**TEST_SIZES.get(name, {}))
    assert isinstance(model, pm.Model)
    assert importlib.import_module(f"pmfast.models.{models.ZOO[name]}").__doc__.strip()
    assert len(model.free_RVs) >= 1
    assert all(rv.type.dtype.startswith("float") for rv in model.free_RVs), name
    point = model.initial_point()
    logp = model.compile_logp(mode=PYTHON_MODE)(point)
    dlogp = model.compile_dlogp(mode=PYTHON_MODE)(point)
    assert np.isfinite(logp)
    assert dlogp.size == sum(np.size(v) for v in point.values())
    assert np.all(np.isfinite(dlogp))


def test_unknown_name():
    with pytest.raises(KeyError, match="radon_intercept"):
        models.load("no_such_model")


def test_registry():
    assert models.DEFAULT in models.ZOO
    desc = dict(models.describe())
    assert set(desc) == set(models.ZOO)
    assert all(desc.values())


def test_import_is_cheap():
    code = "import sys; from pmfast import models; models.describe(); assert 'pymc' not in sys.modules and 'pytensor' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=models.__path__[0] + "/..")


def test_wide_additive_blocks():
    model = models.load("wide_additive")(n=3)
    assert sorted(rv.name for rv in model.free_RVs) == ["b_0", "b_1", "b_2"]
    assert all(rv.type.shape == (8, 20) for rv in model.free_RVs)
