"""pmfast vs stock: compile seconds, peak RSS, logp+grad eval time and parity, one worker process per side.

``python -m pmfast.bench MODEL --passes P --repeats N [--cold]`` is the worker:
it measures one side with :func:`run_side` and prints the result as JSON
(``--pair``: both sides' eval, alternating, with :func:`interleaved_eval`).
Kernel times are CPU seconds of the timing thread by default (:data:`CLOCKS`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

MIN_REPEATS = 5
REPEAT_SECONDS = 0.1
DEFAULT_MODELS = ("eight_schools_noncentered", "radon_intercept", "poisson_offset")
RATIOS = {"compile": "compile_s", "rss": "rss_mb", "eval": "eval_us"}


class BenchError(RuntimeError):
    """A benchmark worker failed; the message says which model and side."""


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / (1024 * 1024) if sys.platform == "darwin" else kb / 1024


_loop = None


def njit_loop():
    """An njit function ``loop(f, n, args)`` that calls the jitted ``f(*args)`` n times."""
    global _loop
    if _loop is None:
        import numba

        @numba.njit
        def loop(f, n, args):
            acc = 0.0
            for _ in range(n):
                acc += f(*args)[0].sum()
            return acc

        _loop = loop
    return _loop


#: Timing clocks: ``cpu`` is this thread's CPU time (robust to other processes
#: sharing the cores: a kernel preempted for another job is not charged for the
#: wait), ``wall`` the elapsed time.
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def time_calls(jit_fn, args: tuple, repeats: int = 7, seconds: float = REPEAT_SECONDS, clock: str = "cpu"):
    """Microseconds per ``jit_fn(*args)`` call for each of ``repeats`` repeats.

    Each repeat times a loop of many calls that runs inside numba (falling back
    to a Python loop if numba can't call ``jit_fn`` as a first-class function),
    on ``clock`` (see :data:`CLOCKS`). Returns ``(times_us, calls_per_repeat, loop_kind)``.
    """
    now = CLOCKS[clock]
    try:
        loop = njit_loop()
        loop(jit_fn, 1, args)

        def run(n):
            loop(jit_fn, n, args)

        kind = "njit"
    except Exception:

        def run(n):
            for _ in range(n):
                jit_fn(*args)

        kind = "python"
    n = 1
    while True:
        t0 = now()
        run(n)
        dt = now() - t0
        if dt >= seconds / 10 or n >= 1 << 24:
            break
        n *= 10
    n = max(1, int(n * seconds / max(dt, 1e-9)))
    times = []
    for _ in range(repeats):
        t0 = now()
        run(n)
        times.append((now() - t0) / n * 1e6)
    return times, n, kind


def interleaved_eval(model_spec: str, passes="all", repeats: int = 7) -> dict:
    """Eval µs of both sides measured in one process, alternating stock and pmfast repeats.

    Load that comes and goes on a shared machine then hits both sides alike;
    the per-side workers' own eval figures are kept as ``eval_us_own``.
    Returns ``{"stock": [µs per repeat], "pmfast": [...]}``.
    """
    import pmfast
    from pmfast.loading import load_model

    model, _ = load_model(model_spec)
    fns = {}
    for side, selection in (("stock", "none"), ("pmfast", passes)):
        fn, x0 = pmfast.logp_dlogp_function(model, selection)
        fns[side] = (fn.vm.jit_fn, pmfast.kernel_args(fn, x0))
    times = {side: [] for side in fns}
    for _ in range(repeats):
        for side, (jit_fn, args) in fns.items():
            t, _, _ = time_calls(jit_fn, args, repeats=1)
            times[side].append(t[0])
    return times


def run_side(model_spec: str, passes="all", repeats: int = 7) -> dict:
    """Measure one side in this process: compile (graph + first kernel call), peak RSS, eval, values at x0."""
    import pmfast
    from pmfast.loading import load_model

    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be at least {MIN_REPEATS}, got {repeats}")
    selected = [p.name for p in pmfast.passes.select(passes)]
    model, _ = load_model(model_spec)
    rss_before = peak_rss_mb()
    t0 = time.perf_counter()
    fn, x0 = pmfast.logp_dlogp_function(model, passes)
    args = pmfast.kernel_args(fn, x0)
    out = fn.vm.jit_fn(*args)
    compile_s = time.perf_counter() - t0
    rss = peak_rss_mb()
    times, n, kind = time_calls(fn.vm.jit_fn, args, repeats)
    return {
        "model": model_spec,
        "passes": selected,
        "n_dim": int(x0.size),
        "compile_s": compile_s,
        "rss_mb": rss,
        "rss_compile_mb": rss - rss_before,
        "eval_us": statistics.median(times),
        "eval_us_repeats": times,
        "calls_per_repeat": n,
        "timing_loop": kind,
        "fired": pmfast.fired(fn),
        "logp": float(np.asarray(out[0])),
        "grad": np.asarray(out[1], dtype="float64").ravel().tolist(),
    }


def parity(a: dict, b: dict) -> dict:
    """Relative differences of two sides' logp and gradient at x0 (gradient: max |diff| / max |grad|)."""
    if a["n_dim"] != b["n_dim"]:
        return {"logp": math.nan, "grad": math.nan}
    ga, gb = np.asarray(a["grad"]), np.asarray(b["grad"])
    logp = abs(a["logp"] - b["logp"]) / max(abs(a["logp"]), abs(b["logp"]), 1e-300)
    scale = max(np.abs(ga).max(initial=0.0), np.abs(gb).max(initial=0.0), 1e-300)
    grad = float(np.abs(ga - gb).max(initial=0.0) / scale)
    return {"logp": float(logp) if np.isfinite(logp) else math.nan, "grad": grad}


def _worker(model_spec: str, passes, repeats: int, cold: bool, pair: bool = False) -> dict:
    selection = passes if isinstance(passes, str) else ",".join(passes) or "none"
    cmd = [sys.executable, "-m", "pmfast.bench", model_spec, "--passes", selection, "--repeats", str(repeats)]
    if pair:
        cmd.append("--pair")
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="pmfast-numba-") if cold else contextlib.nullcontext() as cache:
        if cold:
            env["NUMBA_CACHE_DIR"] = cache
            cmd.append("--cold")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = None
    if proc.returncode or not isinstance(result, dict) or "error" in result:
        tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        msg = (result or {}).get("error") if isinstance(result, dict) else None
        raise BenchError(f"{model_spec} (passes={selection}): {msg or (tail[-1] if tail else 'worker failed')}")
    return result


def compare(model_specs, passes="all", repeats: int = 7, cold: bool = False, progress=None) -> list[dict]:
    """Per model: stock (``passes="none"``) and pmfast (``passes``) measured in separate worker processes.

    Compile time, peak RSS and the values at x0 come from one process per side;
    eval time from a third process that times both sides alternately
    (:func:`interleaved_eval`). ``progress(model_spec, stage)`` is called before
    each worker starts. Each result holds both sides (without gradients),
    pmfast/stock ratios and parity.
    """
    results = []
    for spec in model_specs:
        sides = {}
        for side, selection in (("stock", "none"), ("pmfast", passes)):
            if progress is not None:
                progress(spec, side)
            sides[side] = _worker(spec, selection, repeats, cold)
        if progress is not None:
            progress(spec, "eval, interleaved")
        pair = _worker(spec, passes, repeats, cold=False, pair=True)
        for side, times in pair.items():
            sides[side]["eval_us_own"] = sides[side]["eval_us"]
            sides[side]["eval_us"] = statistics.median(times)
            sides[side]["eval_us_repeats"] = times
        stock, fast = sides["stock"], sides["pmfast"]
        result = {
            "model": spec,
            "stock": stock,
            "pmfast": fast,
            "ratios": {k: fast[key] / stock[key] if stock[key] else math.nan for k, key in RATIOS.items()},
            "parity": parity(stock, fast),
        }
        for side in sides.values():
            side.pop("grad")
        results.append(result)
    return results


def geomeans(results: list[dict]) -> dict:
    """Geometric mean over models of each pmfast/stock ratio."""
    out = {}
    for k in RATIOS:
        values = [r["ratios"][k] for r in results if r["ratios"][k] > 0]
        out[k] = math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan
    return out


def _use_cold_cache() -> None:
    """Point pytensor's numba cache (normally under its compiledir) into the fresh NUMBA_CACHE_DIR."""
    from pathlib import Path

    import pytensor.link.numba.cache as cache

    path = Path(os.environ.get("NUMBA_CACHE_DIR") or tempfile.mkdtemp(prefix="pmfast-numba-")) / "pytensor"
    path.mkdir(parents=True, exist_ok=True)
    cache.NUMBA_CACHE_PATH = path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pmfast.bench", description="Measure one side of a pmfast benchmark.")
    parser.add_argument("model")
    parser.add_argument("--passes", default="all")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cold", action="store_true", help="use a fresh numba cache (NUMBA_CACHE_DIR)")
    parser.add_argument("--pair", action="store_true", help="time stock and --passes alternately in this process")
    ns = parser.parse_args(argv)
    stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            if ns.cold:
                _use_cold_cache()
            if ns.pair:
                result = interleaved_eval(ns.model, ns.passes, ns.repeats)
            else:
                result = run_side(ns.model, ns.passes, ns.repeats)
    except Exception as exc:
        from pmfast.loading import one_line

        msg = str(exc) if type(exc).__module__.startswith("pmfast") else f"{type(exc).__name__}: {exc}"
        print(json.dumps({"error": one_line(msg)}), file=stdout)
        return 1
    print(json.dumps(result), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
