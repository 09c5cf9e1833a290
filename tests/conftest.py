import contextlib
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

# a failed pmfast compile raises in the tests instead of falling back to nutpie's stock compile
os.environ.setdefault("PMFAST_FALLBACK", "0")


def hierarchical_model(n_obs=200, n_groups=12, seed=0):
    """A small varying-intercept model shared by the tests."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    group = rng.integers(0, n_groups, n_obs)
    x = rng.normal(size=n_obs)
    y = 0.5 + rng.normal(size=n_groups)[group] * 0.3 + 0.8 * x + rng.normal(size=n_obs) * 0.5
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        z = pm.Normal("z", 0, 1, shape=n_groups)
        beta = pm.Normal("beta", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        xd = pm.Data("x", x)
        pm.Normal("y", mu + tau * z[group] + beta * xd, sigma, observed=y)
    return model


@contextlib.contextmanager
def big_graph_entries(cache_dir, threshold: int | None = 1):
    """Inside: graphs of ``threshold`` nodes or more compile as big ones (``pmfast.linker.OPTNONE_MIN_NODES``;
    None: the linker's own), into the pytensor numba cache ``cache_dir`` (empty: an entry loaded from a
    cache has no LLVM module left to inspect); both restored after."""
    import pytensor.link.numba.cache as numba_cache

    import pmfast.linker as lk

    saved, saved_cache = lk.OPTNONE_MIN_NODES, numba_cache.NUMBA_CACHE_PATH
    numba_cache.NUMBA_CACHE_PATH = cache_dir
    if threshold is not None:
        lk.OPTNONE_MIN_NODES = threshold
    try:
        yield
    finally:
        lk.OPTNONE_MIN_NODES, numba_cache.NUMBA_CACHE_PATH = saved, saved_cache


def join_gradient_model():
    """A tiny model whose gradient is a Join of three pieces (a vector, a scalar, a shared array's slope)."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1, shape=2)
        s = pm.HalfNormal("s", 1)
        xd = pm.Data("x", np.array([0.5, -1.0, 2.0]))
        pm.Normal("y", mu[0] + mu[1] * xd, s, observed=np.array([1.0, 0.0, 3.0]))
    return model


TINY_MODEL_SOURCE = '''
import numpy as np
import pymc as pm


def build_model():
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 1.0)
        s = pm.HalfNormal("s", 1.0)
        pm.Normal("y", mu, s, observed=np.array([0.1, -0.3, 0.5, 1.2]))
    return m
'''


def load_bench(name: str):
    """The script ``bench/<name>.py`` as a module (bench/ is not a package)."""
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_same_as_stock(stock, ours, args, rtol: float = 0.0):
    """``ours(*args)`` gives ``stock(*args)``'s outputs (shapes, dtypes, values: equal, or to ``rtol``),
    or, where stock raises, raises the same exception type."""
    try:
        want = stock(*args)
    except Exception as err:
        with pytest.raises(type(err)):
            ours(*args)
        return
    for w, g in zip(want, ours(*args), strict=True):
        w, g = np.asarray(w), np.asarray(g)
        assert w.shape == g.shape and w.dtype == g.dtype
        if rtol:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-300)
        else:
            np.testing.assert_array_equal(g, w)


def compiled_names(fn, *args) -> list[str]:
    """Call ``fn(*args)``; the names of the numba functions compiled meanwhile, in order."""
    from numba.core import event

    names = []

    class Names(event.Listener):
        def on_start(self, ev):
            d = ev.data["dispatcher"]
            names.append(getattr(d, "__qualname__", None) or d.py_func.__qualname__)

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Names()):
        fn(*args)
    return names


def run_cold(script: str, cache_dir, **env) -> list[str]:
    """Run ``script`` in a fresh Python with empty pytensor and numba caches under ``cache_dir``, pmfast's
    parallel compile on, no fallback, and ``env`` set; the words of its last output line."""
    import subprocess
    import sys

    env = {**os.environ, "PMFAST_PARALLEL_COMPILE": "1", "NUMBA_CACHE_DIR": str(Path(cache_dir) / "numba"),
           "PYTENSOR_FLAGS": f"base_compiledir={cache_dir}", "PMFAST_FALLBACK": "0", **env}
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip().splitlines()[-1].split()


@pytest.fixture(scope="session")
def tiny_model_source():
    """Source of a two-parameter model file (``build_model``), for CLI and bench tests."""
    return TINY_MODEL_SOURCE


@pytest.fixture(scope="session")
def small_model():
    return hierarchical_model()


@pytest.fixture
def probe_pass():
    """A throwaway pass (``x ** 2 -> x * x`` at 1.7) to test the registry and plugin."""
    import pytensor.tensor as pt
    from pytensor.graph.rewriting.basic import in2out, node_rewriter
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.scalar import Pow
    from pytensor.tensor.basic import get_underlying_scalar_constant_value

    from pmfast.passes import record, register_pass, unregister_pass

    @node_rewriter([Elemwise])
    def square_to_mul(fgraph, node):
        if not isinstance(node.op.scalar_op, Pow):
            return None
        x, e = node.inputs
        try:
            if get_underlying_scalar_constant_value(e) != 2:
                return None
        except Exception:
            return None
        record(fgraph, "probe")
        return [pt.mul(x, x)]

    p = register_pass("probe", "test-only: rewrite x ** 2 as x * x")
    p.register(in2out(square_to_mul), position=1.7, name="square_to_mul")
    yield p
    unregister_pass("probe")
