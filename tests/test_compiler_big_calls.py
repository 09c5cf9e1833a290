"""A big graph's entry calls its node functions by symbol (pmfast/compiler/entry.py, ``PMFAST_BIG_CALLS``):
placeholders defined as the callees' own machine code, nothing linked into the entry."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

import pmfast
from conftest import big_graph_entries, join_gradient_model
from pmfast.compiler import callbacks, entry
from pmfast.loops import deferred

PLACEHOLDER = "_pmfast_deferred_"


def _final_module(kernel):
    (cres,) = kernel.dispatcher.overloads.values()
    return cres.library._final_module


def _points(x0):
    return [x0, x0 + 0.3, x0 - 1.1, x0 * 2.5]


@pytest.fixture(scope="module")
def forced_big(tmp_path_factory):
    """The tiny model compiled as a big graph (threshold lowered), by symbol and linked, and stock's function.

    Compiled into an empty cache: an entry loaded from the cache has no LLVM module left to inspect."""
    model = join_gradient_model()
    env = os.environ.get("PMFAST_BIG_CALLS")
    try:
        with big_graph_entries(tmp_path_factory.mktemp("entries")):
            os.environ["PMFAST_BIG_CALLS"] = "1"
            by_symbol = pmfast.compile(model)
            os.environ["PMFAST_BIG_CALLS"] = "0"
            linked = pmfast.compile(model)
    finally:
        if env is None:
            os.environ.pop("PMFAST_BIG_CALLS", None)
        else:
            os.environ["PMFAST_BIG_CALLS"] = env
    stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
    return by_symbol, linked, stock, x0


def test_the_big_entry_links_no_node_function(forced_big):
    by_symbol, linked, _, _ = forced_big
    for compiled, want in ((by_symbol, True), (linked, False)):
        kernel = compiled.kernels[0]
        assert kernel.dispatcher._compiler.pipeline_class.library_options["inline_threshold"] == 0  # a big entry
        module = _final_module(kernel)
        declared = [f.name for f in module.functions if f.is_declaration and f.name.startswith(PLACEHOLDER)]
        defined = [f.name for f in module.functions if not f.is_declaration]
        assert bool(declared) == want
        if want:  # the entry itself and numba's wrappers only: no node function's code
            assert len(defined) <= 3, defined
            assert not any("elemwise" in d or "subtensor" in d for d in defined)
    assert by_symbol.kernels[0].key != linked.kernels[0].key


def test_the_big_entry_gives_the_linked_entrys_values(forced_big):
    by_symbol, linked, stock, x0 = forced_big
    for x in _points(x0):
        code, logp, grad = callbacks.logp_at(by_symbol, x)
        code_l, logp_l, grad_l = callbacks.logp_at(linked, x)
        ref_logp, ref_grad = stock(x)
        assert code == code_l == 0
        assert logp == logp_l and np.array_equal(grad, grad_l)  # bit for bit
        np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)


def test_an_error_raised_by_a_callee_propagates():
    """A callee's exception reaches the caller as from a direct call (numba's status codes)."""
    import uuid

    src = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x * 2.0\n"
    env = {"__name__": __name__}
    exec(compile(src, "<string>", "exec"), env)
    from pmfast.compiler import cache

    key = f"pmfast_test_bigcall_{uuid.uuid4().hex}"
    cache.register(env["f"], key)
    deferred.install()
    callee = deferred.Deferred(numba.njit(env["f"], cache=True, no_cpython_wrapper=True), key, None)

    @numba.njit
    def caller(x):
        return callee(x) + 1.0

    assert caller(2.0) == 5.0
    with pytest.raises(ValueError, match="negative"):
        caller(-1.0)
    (cres,) = caller.overloads.values()
    assert any(f.name.startswith(PLACEHOLDER) and f.is_declaration for f in cres.library._final_module.functions)


_RELOAD = """
import sys
import numpy as np
import pmfast, pmfast.linker as lk
from pmfast.compiler import callbacks
from conftest import join_gradient_model
lk.OPTNONE_MIN_NODES = 1
compiled = pmfast.compile(join_gradient_model())
kernel = compiled.kernels[0]
x0 = np.array([0.2, -0.4, 0.1])
code, logp, grad = callbacks.logp_at(compiled, x0)
print(int(kernel.cache_hit), code, repr(float(logp)), *(repr(float(g)) for g in grad))
"""


def test_a_cached_big_entry_loads_in_a_new_process(tmp_path):
    """A second process loads the entry from the cache and defines its callees' symbols first: with
    the callees cached, and with their cache entries gone (compiled again there)."""
    script = tmp_path / "reload.py"
    script.write_text(_RELOAD)

    def run(cache):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache / "numba"), "PYTENSOR_FLAGS": f"base_compiledir={cache / 'pytensor'}"}
        env.pop("PMFAST_BIG_CALLS", None)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])  # conftest's model
        r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout.split()

    first = run(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.copytree(tmp_path / "a", tmp_path / "c")
    removed = 0
    for path in (tmp_path / "c").rglob("*.nb[ic]"):
        if "entry" not in path.name and "callback" not in path.name:
            path.unlink()
            removed += 1
    assert removed
    second, third = run(tmp_path / "b"), run(tmp_path / "c")
    assert first[0] == "0" and second[0] == "1" and third[0] == "1"  # compiled, then loaded twice
    assert first[1:] == second[1:] == third[1:]
    assert first[1] == "0"
