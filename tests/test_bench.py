"""pmfast.bench: the worker's output, parity, and the timing loops."""

import json
import subprocess
import sys

import numpy as np
import pytest

from pmfast import bench


KEYS = {
    "model", "side", "passes", "n_dim", "compile_s", "compile_cpu_s", "rss_mb", "rss_compile_mb", "eval_us",
    "eval_us_repeats", "calls_per_repeat", "timing_loop", "fired", "logp", "grad", "point",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_model_source):
    path = tmp_path_factory.mktemp("models") / "tiny.py"
    path.write_text(tiny_model_source)
    return str(path)


def test_worker_prints_expected_keys(tiny):
    cmd = [sys.executable, "-m", "pmfast.bench", tiny, "--side", "stock", "--passes", "none", "--repeats", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == KEYS
    assert result["n_dim"] == 2 and len(result["grad"]) == 2 and len(result["eval_us_repeats"]) == 5
    assert result["compile_s"] > 0 and result["compile_cpu_s"] > 0 and result["rss_mb"] > 0 and result["eval_us"] > 0
    assert result["timing_loop"] == "ctypes" and result["side"] == "stock" and result["passes"] == []
    assert result["point"] == "typical"


def test_compile_model_is_what_each_sides_user_gets(tiny, monkeypatch):
    """The compile column times ``nutpie.compile_pymc_model(backend="numba")`` for stock and
    ``pmfast.compile`` for pmfast, each called once with the model."""
    import nutpie

    import pmfast
    from pmfast.loading import load_model

    calls = []
    monkeypatch.setattr(nutpie, "compile_pymc_model", lambda model, **kw: calls.append(("stock", kw)) or "s")
    monkeypatch.setattr(pmfast, "compile", lambda model, **kw: calls.append(("pmfast", kw)) or "p")
    model, _ = load_model(tiny)
    assert bench.compile_model(model, "stock") == "s" and bench.compile_model(model, "pmfast", "none") == "p"
    assert calls == [("stock", {"backend": "numba"}), ("pmfast", {"passes": "none"})]
    with pytest.raises(ValueError, match="unknown side"):
        bench.compile_model(model, "jax")


def test_cold_env_moves_every_cache():
    env = bench.cold_env({"PYTENSOR_FLAGS": "floatX=float64,base_compiledir=/old", "X": "1"}, "/fresh")
    assert env["NUMBA_CACHE_DIR"] == "/fresh" and env["X"] == "1"
    assert env["PYTENSOR_FLAGS"] == "floatX=float64,base_compiledir=/fresh"


def test_worker_reports_errors_as_json(tiny):
    proc = subprocess.run(
        [sys.executable, "-m", "pmfast.bench", f"{tiny}:missing", "--repeats", "5"], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "no function 'missing'" in json.loads(proc.stdout.strip().splitlines()[-1])["error"]


def test_sides_agree_through_the_sampler_callback(tiny):
    """Both sides' values come from the C callback nutpie calls; stock twice is bit-equal, pmfast close."""
    a, b = bench.run_side(tiny, "none", 5, side="stock"), bench.run_side(tiny, "none", 5, side="stock")
    c = bench.run_side(tiny, "all", 5, side="pmfast")
    assert np.isfinite(a["logp"]) and np.any(np.asarray(a["grad"]) != 0)
    assert bench.parity(a, b) == {"logp": 0.0, "grad": 0.0}
    assert max(bench.parity(a, c).values()) < 1e-10


def test_parity_is_relative():
    a = {"n_dim": 2, "logp": -10.0, "grad": [4.0, 0.0]}
    b = {"n_dim": 2, "logp": -10.001, "grad": [4.0, 1e-3]}
    p = bench.parity(a, b)
    assert p["logp"] == pytest.approx(1e-4, rel=1e-3) and p["grad"] == pytest.approx(2.5e-4)
    assert np.isnan(bench.parity(a, {**b, "n_dim": 3})["grad"])


def test_relative_difference_judges_on_the_values_scale():
    rd = bench.relative_difference
    assert rd([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert rd([1000.0, 1.0], [1000.0, 1.001]) == pytest.approx(1e-6)  # the gradient's scale, not the component's
    assert rd(2e-3, 1e-3) == 0.5 and rd(0.0, 0.0) == 0.0
    assert rd([np.inf], [1.0]) == np.inf and rd([np.inf], [-np.inf]) == np.inf and rd([1.0, 2.0], [1.0]) == np.inf
    assert rd([-np.inf, 1.0], [-np.inf, 1.0]) == 0.0 and rd([np.nan], [np.nan]) == 0.0


def test_run_side_needs_five_repeats(tiny):
    with pytest.raises(ValueError, match="at least 5"):
        bench.run_side(tiny, "none", 3)


def test_njit_timing_loop_returns_positive_times():
    import numba

    @numba.njit
    def kernel(x):
        return np.asarray(np.sum(x * x)), 2 * x

    times, n, kind = bench.time_calls(kernel, (np.arange(5.0),), repeats=5, seconds=0.01)
    assert kind == "njit" and n >= 1 and len(times) == 5 and min(times) > 0


def test_python_fallback_timing_loop():
    times, n, kind = bench.time_calls(lambda x: (x, x), (np.ones(2),), repeats=5, seconds=0.01)
    assert kind == "python" and len(times) == 5 and min(times) > 0


def test_geomeans():
    results = [{"ratios": {"compile": 2.0, "rss": 1.0, "eval": 0.5}}, {"ratios": {"compile": 8.0, "rss": 1.0, "eval": 2.0}}]
    means = bench.geomeans(results)
    assert {k: means[k] for k in ("compile", "rss", "eval")} == pytest.approx({"compile": 4.0, "rss": 1.0, "eval": 1.0})
    assert np.isnan(means["compile_cpu"])


def test_pair_worker_times_both_sides_alternately(tiny):
    cmd = [sys.executable, "-m", "pmfast.bench", tiny, "--passes", "all", "--repeats", "5", "--pair"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"stock", "pmfast"}
    assert all(len(v) == 5 and min(v) > 0 for v in result.values())


@pytest.mark.parametrize("clock", sorted(bench.CLOCKS))
def test_time_calls_clocks(clock):
    import numba

    @numba.njit
    def f(x):
        return (x * 2.0,)

    times, n, kind = bench.time_calls(f, (np.ones(10),), repeats=5, seconds=0.01, clock=clock)
    assert len(times) == 5 and min(times) > 0 and n >= 1 and kind == "njit"


def test_entry_timer_times_the_entry_nutpie_calls(tiny):
    import pmfast
    from pmfast.loading import load_model

    model, _ = load_model(tiny)
    fn, x0 = pmfast.logp_dlogp_function(model, "all")
    evaluate, timer = bench.entry_timer(fn)
    x = x0 + 0.25
    logp, grad = evaluate(x)
    ref_logp, ref_grad = fn(x)
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)
    times = timer(x, 3, seconds=0.01)
    assert len(times) == 3 and min(times) > 0


def test_workers_time_blas_on_one_thread(monkeypatch):
    """The thread CPU clock does not count a BLAS pool's threads: workers get one BLAS thread unless the user set it."""
    seen = {}

    def fake_run(cmd, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, stdout='{"model": "m"}', stderr="")

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    bench._worker("m", "none", 5, cold=False)
    assert seen["OPENBLAS_NUM_THREADS"] == "1" and seen["OMP_NUM_THREADS"] == "1" and seen["MKL_NUM_THREADS"] == "4"
