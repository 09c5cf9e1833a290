"""pmfast vs stock: compile seconds, peak RSS, logp+grad eval time and parity, one worker process per side.

``python -m pmfast.bench MODEL --side stock|pmfast --passes P --repeats N [--cold]`` is the worker:
it measures one side with :func:`run_side` and prints the result as JSON
(``--pair``: both sides' eval, alternating, with :func:`interleaved_eval`).
Kernel times are CPU seconds of the timing thread by default (:data:`CLOCKS`).

Kernels are timed at points the sampler visits (:func:`bench_points`), never only at the
initial point: there every skill difference of a Bradley–Terry model is 0, every sign test
predicts, and a branchy kernel looks ~1.5x faster than it runs inside nutpie.
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
RATIOS = {"compile": "compile_s", "compile_cpu": "compile_cpu_s", "rss": "rss_mb", "eval": "eval_us"}

#: Where kernels are timed: ``typical`` (default) the initial point plus seeded N(0, POINT_SCALE)
#: noise on every unconstrained coordinate, ``draw`` draws of a short stock nutpie run
#: (:func:`posterior_draws`), ``initial`` the initial point alone (hides branch mispredictions).
POINTS = ("typical", "draw", "initial")
#: Noise scale of ``typical`` points: a posterior scale of the zoo's unconstrained coordinates.
POINT_SCALE = 0.3
#: How many points a timing cycles through (one per repeat, the same for both sides).
N_POINTS = 4


#: Worker environment defaults: BLAS on the timing thread. Kernels are timed on the thread's CPU clock,
#: which does not count a BLAS pool's threads, and on a loaded machine their spin-waits made
#: marginal_gp's stock kernel read 5.5 ms instead of 0.4 ms. A user's setting still wins.
BLAS_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class BenchError(RuntimeError):
    """A benchmark worker failed; the message says which model and side."""


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident set size of this process so far, in MB (``children``: of the largest of its
    waited-for children, e.g. a compile's forked workers)."""
    kb = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF).ru_maxrss
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


def time_runs(run, repeats: int = 7, seconds: float = REPEAT_SECONDS, clock: str = "cpu") -> tuple[list, int]:
    """Microseconds per call for each of ``repeats`` repeats of ``run(n)`` (n calls, n scaled so a
    repeat lasts about ``seconds``) on ``clock`` (:data:`CLOCKS`). Returns ``(times_us, n)``."""
    now = CLOCKS[clock]
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
    return times, n


def time_calls(
    jit_fn, args: tuple, repeats: int = 7, seconds: float = REPEAT_SECONDS, clock: str = "cpu", njit: bool = True
):
    """Microseconds per ``jit_fn(*args)`` call for each of ``repeats`` repeats.

    Each repeat times a loop of many calls that runs inside numba (falling back
    to a Python loop if numba can't call ``jit_fn`` as a first-class function, or if ``njit`` is false),
    on ``clock`` (see :data:`CLOCKS`). Returns ``(times_us, calls_per_repeat, loop_kind)``.
    """
    try:
        if not njit:
            raise TypeError("a Python loop was asked for")
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
    times, n = time_runs(run, repeats, seconds, clock)
    return times, n, kind


_entry_loop = None


def entry_timer(fn):
    """``(evaluate, time)`` of the logp+grad entry that nutpie's callback calls for compiled function ``fn``
    (:func:`pmfast.logp_dlogp_function`'s): ``evaluate(x) -> (logp, grad)`` through the callback,
    ``time(x, repeats=1) -> [µs per call]`` calling the entry through its address from an njit loop,
    as the callback does (views of the point and the shared data, the graph, the gradient written into
    the caller's buffer: no ``Join``, no output arrays)."""
    global _entry_loop
    import numba

    from pmfast import nutpie_glue
    from pmfast.compiler.native import call_native4, data_pointer

    if _entry_loop is None:

        @numba.njit
        def loop(address, n, x, out, logp, user_data):
            acc = 0.0
            for _ in range(n):
                call_native4(address, 1, data_pointer(x), data_pointer(out), data_pointer(logp), data_pointer(user_data))
                acc += logp[0]
            return acc

        _entry_loop = loop
    kernel = nutpie_glue.logp_kernel(fn)
    user_data = np.ndarray((kernel.user_data_.dtype.itemsize,), np.uint8, buffer=kernel.user_data_)

    def evaluate(x):
        code, logp, grad = kernel(np.asarray(x, dtype="float64"))
        if code:
            raise BenchError(f"the entry returned error code {code}")
        return np.asarray(logp), grad

    def timer(x, repeats: int = 1, seconds: float = REPEAT_SECONDS):
        x = np.ascontiguousarray(x, dtype="float64")
        out, logp = np.zeros(x.size), np.zeros(1)
        return time_runs(lambda n: _entry_loop(kernel.entry.address, n, x, out, logp, user_data), repeats, seconds)[0]

    return evaluate, timer


def posterior_draws(model, n: int = N_POINTS, seed: int = 0, tune: int = 300) -> np.ndarray:
    """``n`` unconstrained draws (rows) of one short stock nutpie chain: points the sampler visits."""
    import nutpie

    compiled = nutpie.compile_pymc_model(model)
    trace = nutpie.sample(
        compiled, draws=n, tune=tune, chains=1, seed=seed, progress_bar=False, store_unconstrained=True
    )
    draws = np.asarray(trace.sample_stats["unconstrained_draw"])  # (chain, draw, n_dim)
    return draws.reshape(-1, draws.shape[-1])[:n].astype("float64")


def bench_points(x0, point: str = "typical", *, model=None, n: int = N_POINTS, seed: int = 0) -> list:
    """The points kernels are timed at (see :data:`POINTS`); the first is also where parity is taken."""
    x0 = np.asarray(x0, dtype="float64")
    if point == "initial":
        return [x0]
    if point == "typical":
        rng = np.random.default_rng(seed)
        return [x0 + rng.normal(0.0, POINT_SCALE, x0.shape) for _ in range(n)]
    if point == "draw":
        if model is None:
            raise ValueError("point='draw' needs the model")
        return list(posterior_draws(model, n, seed))
    raise ValueError(f"unknown point {point!r}; expected one of {', '.join(POINTS)}")


def interleaved_eval(model_spec: str, passes="all", repeats: int = 7, point: str = "typical") -> dict:
    """Eval µs of both sides as nutpie calls them, measured in one process, alternating stock and pmfast.

    Stock: its graph function's kernel ``fn.vm.jit_fn`` (nutpie's numba backend calls it from a
    cfunc that then copies the gradient out; that copy is not timed). pmfast: the C-ABI entry
    :func:`pmfast.compile` hands nutpie (:func:`entry_timer`). Load that comes and goes on a shared
    machine then hits both sides alike; the per-side workers' own eval figures are kept as
    ``eval_us_own``. Returns ``{"stock": [µs per repeat], "pmfast": [...]}``.
    """
    import pmfast
    from pmfast.loading import load_model

    model, _ = load_model(model_spec)
    stock, x0 = pmfast.logp_dlogp_function(model, "none")
    fast, _ = pmfast.logp_dlogp_function(model, passes)
    timers = {
        "stock": lambda x, r=1: time_calls(stock.vm.jit_fn, pmfast.kernel_args(stock, x), repeats=r)[0],
        "pmfast": entry_timer(fast)[1],
    }
    points = bench_points(x0, point, model=model)
    times = {side: [] for side in timers}
    for r in range(repeats):  # repeat r: both sides at point r (mod the number of points)
        x = points[r % len(points)]
        for side, timer in timers.items():
            times[side] += timer(x, 1)
    return times


SIDES = ("stock", "pmfast")


def compile_model(model, side: str, passes="all"):
    """Compile ``model`` as a user of that side does: ``side="stock"`` is stock nutpie's numba backend
    (``nutpie.compile_pymc_model(model, backend="numba")``), ``"pmfast"`` is :func:`pmfast.compile`
    with ``passes`` (its C-ABI entry path, what ``pmfast.sample`` and nutpie then run)."""
    if side == "stock":
        import nutpie

        return nutpie.compile_pymc_model(model, backend="numba")
    if side == "pmfast":
        import pmfast

        return pmfast.compile(model, passes=passes)
    raise ValueError(f"unknown side {side!r}; expected one of {', '.join(SIDES)}")


def process_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (pmfast compiles the expand entry in a fork)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def model_x0(model, compiled) -> np.ndarray:
    """The raveled initial point (seed 0), value variables in ``model.free_RVs`` order (nutpie's)."""
    from pymc.initial_point import make_initial_point_fn

    point = make_initial_point_fn(model=model, return_transformed=True)(0)
    names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    x0 = np.concatenate([np.asarray(point[n], dtype="float64").ravel() for n in names])
    if x0.size != compiled.n_dim:
        raise BenchError(f"the initial point has {x0.size} values, the compiled model {compiled.n_dim}")
    return x0


def run_side(model_spec: str, passes="all", repeats: int = 7, point: str = "typical", side: str = "pmfast") -> dict:
    """Measure one side in this process: compile time (wall and CPU, :func:`compile_model`: the model
    compiled for nutpie as each side's user gets it), peak RSS, and the logp and gradient at the first
    bench point (:func:`bench_points`; parity is compared there) from the sampler's C callback.

    ``eval_us`` here is that callback called from Python through ctypes (``timing_loop: "ctypes"``:
    it includes a call overhead of about a microsecond); :func:`compare`'s eval column comes from
    the interleaved kernels (:func:`interleaved_eval`) instead.
    """
    import pmfast
    from pmfast.compiler.callbacks import logp_at
    from pmfast.loading import load_model

    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be at least {MIN_REPEATS}, got {repeats}")
    selected = [] if side == "stock" else [p.name for p in pmfast.passes.select(passes)]
    model, _ = load_model(model_spec)
    rss_before = peak_rss_mb()
    t0, c0 = time.perf_counter(), process_cpu_s()
    compiled = compile_model(model, side, passes)
    compile_s, compile_cpu_s = time.perf_counter() - t0, process_cpu_s() - c0
    rss = peak_rss_mb()
    x0 = model_x0(model, compiled)
    points = bench_points(x0, point, model=model)
    code, logp, grad = logp_at(compiled, points[0])
    if code:
        raise BenchError(f"{model_spec} ({side}): the logp callback returned error code {code} at the first bench point")
    times, n = [], 0
    for r in range(repeats):
        x = np.ascontiguousarray(points[r % len(points)])
        t, n, _ = time_calls(lambda: logp_at(compiled, x), (), 1, njit=False)
        times += t
    return {
        "model": model_spec,
        "side": side,
        "passes": selected,
        "n_dim": int(x0.size),
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "rss_mb": rss,
        "rss_compile_mb": rss - rss_before,
        "eval_us": statistics.median(times),
        "eval_us_repeats": times,
        "calls_per_repeat": n,
        "timing_loop": "ctypes",
        "fired": pmfast.fired(compiled),
        "point": point,
        "logp": logp,
        "grad": np.asarray(grad, dtype="float64").ravel().tolist(),
    }


def relative_difference(a, b) -> float:
    """max |a - b| over the finite entries, relative to the largest such |a| or |b|: a gradient is judged
    on its own scale, so a component that is a near-cancelling sum of large terms is not read as an
    error. Non-finite entries must match exactly (the same infinity, or NaN on both sides), else inf."""
    a, b = np.atleast_1d(np.asarray(a, dtype=float)), np.atleast_1d(np.asarray(b, dtype=float))
    if a.shape != b.shape:
        return math.inf
    finite = np.isfinite(a)
    if np.any(finite != np.isfinite(b)) or np.any((a[~finite] != b[~finite]) & ~(np.isnan(a[~finite]) & np.isnan(b[~finite]))):
        return math.inf
    if not finite.any():
        return 0.0
    scale = max(np.abs(a[finite]).max(), np.abs(b[finite]).max(), 1e-300)
    return float(np.abs(a[finite] - b[finite]).max() / scale)


def parity(a: dict, b: dict) -> dict:
    """Two sides' logp and gradient at x0 as :func:`relative_difference`s (nan when their dimensions differ)."""
    if a["n_dim"] != b["n_dim"]:
        return {"logp": math.nan, "grad": math.nan}
    return {"logp": relative_difference(a["logp"], b["logp"]), "grad": relative_difference(a["grad"], b["grad"])}


def cold_env(env: dict, cache: str) -> dict:
    """``env`` for a process on a cold machine: pytensor's compiledir and numba's cache in the empty ``cache``."""
    flags = [f for f in env.get("PYTENSOR_FLAGS", "").split(",") if f and not f.startswith("base_compiledir=")]
    return {**env, "NUMBA_CACHE_DIR": cache, "PYTENSOR_FLAGS": ",".join([*flags, f"base_compiledir={cache}"])}


def _worker(
    model_spec: str, passes, repeats: int, cold: bool, pair: bool = False, point: str = "typical", side: str = "pmfast"
) -> dict:
    selection = passes if isinstance(passes, str) else ",".join(passes) or "none"
    cmd = [sys.executable, "-m", "pmfast.bench", model_spec, "--passes", selection, "--repeats", str(repeats)]
    cmd += ["--point", point, "--side", side]
    if pair:
        cmd.append("--pair")
    env = {**BLAS_ONE_THREAD, **os.environ}
    with tempfile.TemporaryDirectory(prefix="pmfast-numba-") if cold else contextlib.nullcontext() as cache:
        if cold:
            env = cold_env(env, cache)
            cmd.append("--cold")
        return run_worker(cmd, env, f"{model_spec} ({'pair' if pair else side}, passes={selection})", BenchError)


def run_worker(cmd: list[str], env: dict, label: str, error: type[Exception], timeout: float | None = None) -> dict:
    """Run a bench worker process; the JSON of its last stdout line.

    A worker that exits non-zero, prints no JSON object, reports ``error`` or runs longer than
    ``timeout`` seconds raises ``error`` with ``label`` and the worker's message (or its last stderr line).
    """
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise error(f"{label}: timed out after {timeout:.0f} s") from None
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = None
    if proc.returncode or not isinstance(result, dict) or "error" in result:
        tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        msg = result.get("error") if isinstance(result, dict) else None
        raise error(f"{label}: {msg or (tail[-1] if tail else 'worker failed')}")
    return result


def compare(
    model_specs, passes="all", repeats: int = 7, cold: bool = False, progress=None, point: str = "typical"
) -> list[dict]:
    """Per model: stock and pmfast (``passes``) measured in separate worker processes.

    Compile time (what a user of each side waits for, :func:`compile_model`: stock nutpie's
    numba ``compile_pymc_model`` against :func:`pmfast.compile`), peak RSS and the values at the
    first bench point come from one process per side (``cold``: each with an empty pytensor
    compiledir and numba cache, :func:`cold_env`);
    eval time from a third process that times both sides alternately
    (:func:`interleaved_eval`), at ``point`` (:data:`POINTS`). ``progress(model_spec, stage)`` is called before
    each worker starts. Each result holds both sides (without gradients),
    pmfast/stock ratios and parity.
    """
    results = []
    for spec in model_specs:
        sides = {}
        for side, selection in (("stock", "none"), ("pmfast", passes)):
            if progress is not None:
                progress(spec, side)
            sides[side] = _worker(spec, selection, repeats, cold, point=point, side=side)
        if progress is not None:
            progress(spec, "eval, interleaved")
        pair = _worker(spec, passes, repeats, cold=False, pair=True, point=point)
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
        values = [r["ratios"][k] for r in results if r["ratios"].get(k, 0) > 0]
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
    parser.add_argument("--side", choices=SIDES, default="pmfast", help="compile as stock nutpie or as pmfast.compile")
    parser.add_argument("--point", choices=POINTS, default="typical", help="where kernels are timed")
    ns = parser.parse_args(argv)
    stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            if ns.cold:
                _use_cold_cache()
            if ns.pair:
                result = interleaved_eval(ns.model, ns.passes, ns.repeats, ns.point)
            else:
                result = run_side(ns.model, ns.passes, ns.repeats, ns.point, ns.side)
    except Exception as exc:
        from pmfast.loading import one_line

        msg = str(exc) if type(exc).__module__.startswith("pmfast") else f"{type(exc).__name__}: {exc}"
        print(json.dumps({"error": one_line(msg)}), file=stdout)
        return 1
    print(json.dumps(result), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
