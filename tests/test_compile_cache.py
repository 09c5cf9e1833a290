"""The compile cache across processes: warm loads, unreadable entries, keys, concurrent writers."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from conftest import hierarchical_model
    import pmfast
    from pmfast.compiler import cache, callbacks

    n_groups, passes, draws = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    model = hierarchical_model(n_groups=n_groups)
    compiled = pmfast.compile(model, passes=passes)
    x = np.linspace(-1, 1, compiled.n_dim)
    code, logp, grad = callbacks.logp_at(compiled, x)
    out = {{"stats": dict(cache.stats), "keys": [k.key for k in compiled.kernels], "code": code,
           "timings": compiled.timings, "logp": logp, "grad": grad.tolist()}}
    if draws:
        import nutpie
        idata = nutpie.sample(compiled, draws=draws, tune=draws, chains=1, seed=7, progress_bar=False)
        out["mu"] = idata.posterior["mu"].values.ravel().tolist()
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("script") / "compile_once.py"
    path.write_text(SCRIPT.format(tests=os.path.dirname(__file__)))
    return path


def start(script, cache, n_groups=12, passes="none", draws=0, parallel=True):
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={cache}", "PMFAST_PARALLEL_COMPILE": str(int(parallel))}
    cmd = [sys.executable, str(script), str(n_groups), passes, str(draws)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run(script, tmp_path_factory):
    cache = tmp_path_factory.mktemp("compiledir")

    def run(**kwargs):
        return finish(start(script, cache, **kwargs))

    run.cache = cache
    return run


def assert_same_results(a, b):
    assert a["code"] == b["code"] == 0
    np.testing.assert_allclose(a["logp"], b["logp"], rtol=1e-14)
    np.testing.assert_allclose(a["grad"], b["grad"], rtol=1e-14)


def test_warm_path_hits_and_rebuilds_unreadable_entries(run):
    """One cache directory: cold, warm, entries truncated, warm again, another graph."""
    cold = run(parallel=False)
    warm = run()
    # two entries (logp+grad, expand) and two callbacks, compiled then loaded
    assert cold["stats"] == {"misses": 4} and warm["stats"] == {"hits": 4}
    assert warm["keys"] == cold["keys"]
    assert "numba: logp+grad kernel" in cold["timings"] and "numba: logp+grad kernel (cached)" in warm["timings"]
    assert "numba: logp+grad wrapper (cached)" in warm["timings"]
    assert_same_results(warm, cold)

    files = [p for p in (run.cache / "numba").iterdir() if ("entry" in p.name or "callback" in p.name) and p.suffix != ".lock"]
    assert {p.suffix for p in files} == {".nbi", ".nbc"}
    for path in files:
        path.write_bytes(path.read_bytes()[:7])
    rebuilt = run(parallel=False)
    assert rebuilt["stats"]["rebuilt"] >= 4 and rebuilt["stats"]["misses"] == 4
    assert_same_results(rebuilt, warm)
    again = run()
    assert again["stats"] == {"hits": 4}
    assert_same_results(again, warm)

    other = run(n_groups=13)
    # the callbacks are model-independent; the expand entry was compiled by a forked process
    assert other["stats"] == {"hits": 3, "misses": 1}
    assert "numba: expand kernel (cached) (in parallel)" in other["timings"]
    assert set(other["keys"]).isdisjoint(warm["keys"])


def test_two_processes_compile_one_model_into_one_empty_cache(script, tmp_path):
    """Both finish, both sample, with equal draws (each also forks its expand compile: four writers)."""
    procs = [start(script, tmp_path, draws=100) for _ in range(2)]
    a, b = (finish(p) for p in procs)
    assert_same_results(a, b)
    assert a["keys"] == b["keys"]
    assert a["mu"] == b["mu"] and len(a["mu"]) == 100


SHARED_CALLEE = textwrap.dedent(
    """
    import sys
    import numpy as np, pytensor, pytensor.tensor as pt
    import pmfast

    a, w = pt.matrix("a"), pt.matrix("w")
    x = pt.linalg.solve_triangular(pt.linalg.cholesky(a), w, lower=True)
    f = pytensor.function([a, w], x if sys.argv[1] == "A" else pt.exp(x).sum(0), mode=pmfast.get_mode())
    m = np.array([[4.0, 2.0], [2.0, 3.0]])
    print(repr(f(m, np.ones((2, 2))).tolist()))
    """
)


def test_a_graph_linking_a_cached_callee_loads_in_a_new_process(tmp_path):
    """Graph B reuses the linear algebra graph A cached (numba loads it); B, cached, runs again.

    A cached library lost the definitions of the process-wide symbols its code calls (the deferred
    callee's address), so B compiled against it was cached without them and its next load called
    address 0: a segfault."""
    script = tmp_path / "shared_callee.py"
    script.write_text(SHARED_CALLEE)
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'cache'}"}
    outs = []
    for graph in "ABBA":
        proc = subprocess.run([sys.executable, str(script), graph], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, (graph, proc.returncode, proc.stderr[-2000:])
        outs.append(proc.stdout.strip().splitlines()[-1])
    l = np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]]))
    x = np.linalg.solve(l, np.ones((2, 2)))
    assert outs[0] == outs[3] and outs[1] == outs[2]
    np.testing.assert_allclose(eval(outs[0]), x, rtol=1e-14)
    np.testing.assert_allclose(eval(outs[1]), np.exp(x).sum(0), rtol=1e-14)


def test_entry_keys_follow_versions(monkeypatch):
    """A pmfast, overload or numba version change gives a new key (a stale entry is never loaded)."""
    import numba

    import pmfast
    from pmfast.compiler import entry, entry_spec, overloads

    spec = entry_spec.EntrySpec("logp", 3, 3, 10, (), ("x",), ("y = f(x)",), ("lp", "y"), (None, None))
    key = entry.entry_key(spec, "src", "graph", {})
    assert key == entry.entry_key(spec, "src", "graph", {})
    assert entry.entry_key(spec, "src", None, {}) is None
    assert entry.entry_key(spec, "src2", "graph", {}) != key
    assert entry.entry_key(spec, "src", "graph2", {}) != key
    for mod, attr, value in ((pmfast, "__version__", "9.9"), (overloads, "VERSION", -1), (numba, "__version__", "0.0")):
        with monkeypatch.context() as m:
            m.setattr(mod, attr, value)
            assert entry.entry_key(spec, "src", "graph", {}) != key


DRAWS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import nutpie
    import pmfast
    import pmfast.compiler.inline
    from pmfast.models import radon_data

    pmfast.compiler.inline.BUDGET = {budget}
    sys.path.insert(0, {tests!r})
    if sys.argv[1] == "populate":
        # what a used machine holds: another model compiled by an earlier process
        from conftest import hierarchical_model

        pmfast.compile(hierarchical_model(n_groups=5))
        print(json.dumps({{}}))
        sys.exit()
    model = radon_data.build_model(n_obs=200, n_counties=12)
    if sys.argv[1] == "used":
        # and this model's graph evaluated as a plain pytensor function (its node functions
        # compiled and cached on their own)
        fn, x0 = pmfast.logp_dlogp_function(model)
        fn(x0)
    compiled = pmfast.compile(model)
    idata = nutpie.sample(compiled, draws=150, tune=150, chains=1, seed=7, progress_bar=False)
    print(json.dumps({{"draws": idata.posterior["mu_a"].values.ravel().tolist()}}))
    """
)


@pytest.mark.parametrize("budget", [4000, 150])
def test_same_draws_whatever_the_cache_held(tmp_path, budget):
    """One model and seed give the same draws compiled into an empty cache and into a used one
    (other processes, other caches). The used cache holds another model's compile, made by an
    earlier process, and the model's node functions compiled on their own: an entry that called those instead of inlining them (the inline choice once
    depended on the cache) rounded differently, and 300 NUTS steps amplify the last bit. With a
    small inline budget the entry calls most node functions: compiled now in one process, loaded
    from the cache in the other."""
    path = tmp_path / "draws.py"
    path.write_text(DRAWS_SCRIPT.format(tests=os.path.dirname(__file__), budget=budget))

    def start(kind, cache):
        env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={cache}", "NUMBA_CACHE_DIR": str(cache / "numba")}
        return subprocess.Popen([sys.executable, str(path), kind], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)

    empty, populate = start("empty", tmp_path / "empty"), start("populate", tmp_path / "used")
    empty, _ = finish(empty), finish(populate)
    used = finish(start("used", tmp_path / "used"))
    assert len(empty["draws"]) == 150
    assert used["draws"] == empty["draws"]
