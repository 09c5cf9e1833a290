"""Per-gradient time inside nutpie's sampler: pmfast against stock nutpie (numba) and nutpie's JAX backend.

Each side of each model runs in its own process with an empty pytensor compiledir and numba cache
(:func:`pmfast.bench.cold_env`): compile, then ``nutpie.sample`` runs with the same seed and chains: a short
one, then (long, short) pairs. Sampling wall over the sum of ``n_steps`` (warmup and draws) mixes the
sampler's start-up into the per-gradient figure, so the figure is the difference of a long and a short
run's walls over the difference of their step counts (the median over the pairs); start-up is what the
short run spent beyond that, and the first call's extra (once per process: lazily compiled code, cache
loading) is the first short run's wall less the later ones'. Tiny models' long runs are lengthened and
heavy ones' shortened (:func:`run_lengths`). First run = compile + first-call extra + start-up + the
gradients of a 1000 + 1000 run: what a first ``nutpie.sample`` costs in a fresh process.

The first-call extra is the same on every side (~0.2–0.7 s): xarray's first ``DataArray`` in a process
imports ``dask.array`` to check for duck arrays. Nothing compiles then (tests/test_sampler_bench.py).

``pmfast bench --sampler`` is the command; ``python -m pmfast.sampler_bench SPEC --side stock|pmfast|jax``
is the worker, which prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIDES = ("stock", "pmfast", "jax")
#: Default run lengths: the long run's tune and draws, the short run's tune and draws.
LONG = (300, 300)
SHORT = (100, 100)
#: A side's long run is shortened (fewer draws, never skipped) when the short run predicts more than this.
BUDGET_S = 120.0
#: The (tune, draws) a first run is quoted for (issue 27: compile + 2 chains × (1000 + 1000)).
FIRST_RUN = (1000, 1000)
#: A long run the first short run predicts under this many seconds is lengthened (up to 30×).
MIN_WALL_S = 3.0
#: (long, short) pairs timed when they are cheap; per gradient is their median.
PAIRS = 3
#: A side's worker is stopped after this many seconds; its row then says so.
TIMEOUT_S = 3600.0
#: The start of the error a model with discrete free variables gets: no side can sample it with NUTS alone.
NOT_NUTS = "not NUTS-able"


class SamplerBenchError(RuntimeError):
    """A sampler-bench worker failed; the message says which model and side."""


def core_models(catalogue: Path, discrete: bool = True) -> list[str]:
    """The models of the catalogue's BENCHMARK_CORE.md, as file paths, in its order.

    Those under ``models/`` are continuous; those under ``models_*/`` (``models_discrete/``) are kept
    unless ``discrete`` is false: the bench reports them as not NUTS-able instead of sampling them.
    """
    from pmfast.loading import LoadError

    index = Path(catalogue) / "BENCHMARK_CORE.md"
    if not index.is_file():
        raise LoadError(f"no BENCHMARK_CORE.md in the catalogue {catalogue}: --core needs it")
    text = index.read_text()
    names = re.findall(r"`(models(?:_[a-z]+)?/[A-Za-z0-9_]+\.py)`", text)
    if not discrete:
        names = [n for n in names if n.startswith("models/")]
    return [str(Path(catalogue) / n) for n in dict.fromkeys(names)]


def discrete_variables(model) -> list[str]:
    """Names of the model's free variables with integer dtypes (NUTS cannot sample them)."""
    return [v.name for v in model.free_RVs if not v.dtype.startswith("float")]


def compile_side(model, side: str, initial_points=None):
    """Compile ``model`` as that side's user does (``initial_points``: nutpie's option of that name)."""
    import nutpie

    kw = {} if initial_points is None else {"initial_points": initial_points}
    if side == "stock":
        return nutpie.compile_pymc_model(model, backend="numba", **kw)
    if side == "jax":
        return nutpie.compile_pymc_model(model, backend="jax", gradient_backend="jax", **kw)
    if side == "pmfast":
        import pmfast

        return pmfast.compile(model, **kw)
    raise ValueError(f"unknown side {side!r}; expected one of {', '.join(SIDES)}")


def start_overrides(model, point) -> dict | None:
    """The model's own start, as nutpie's ``initial_points``, where its default one is not finite.

    A catalogue model's ``build_model`` returns ``(model, initial_point)`` (transformed values by
    value-variable name) and may then drop its variables' initvals: marginalized_gaussian_mixture_model's
    ordered ``mu`` then starts at its prior mean ``[0, 0, 0]``, whose ordered transform is
    ``[0, -inf, -inf]``, and nutpie's initialization fails on every side. There the returned point,
    mapped back through each transform, is every side's start; elsewhere (None) the default start.
    """
    if not point:
        return None
    default = model.initial_point()
    if all(np.all(np.isfinite(np.asarray(v, dtype=float))) for v in default.values()):
        return None
    overrides = {}
    for rv in model.free_RVs:
        value = model.rvs_to_values[rv]
        if value.name not in point:
            continue
        x = np.asarray(point[value.name], dtype=value.type.dtype)
        transform = model.rvs_to_transforms.get(rv)
        if transform is not None:
            x = np.asarray(transform.backward(x, *rv.owner.inputs).eval(), dtype=rv.type.dtype)
        overrides[rv.name] = x
    return overrides or None


def n_steps(trace) -> int:
    """Sum of leapfrog steps over draws and warmup, all chains."""
    steps = int(trace.sample_stats["n_steps"].sum())
    if "warmup_sample_stats" in trace.groups():
        steps += int(trace.warmup_sample_stats["n_steps"].sum())
    return steps


def timed_sample(compiled, chains: int, tune: int, draws: int, seed: int):
    """``nutpie.sample`` once: (trace, wall seconds, steps, process CPU seconds)."""
    import nutpie

    from pmfast.bench import process_cpu_s

    t0, c0 = time.perf_counter(), process_cpu_s()
    trace = nutpie.sample(compiled, chains=chains, cores=chains, tune=tune, draws=draws, seed=seed, progress_bar=False)
    wall, cpu = time.perf_counter() - t0, process_cpu_s() - c0
    return trace, wall, n_steps(trace), cpu


def scalar_summary(trace) -> dict:
    """Per scalar of the posterior: mean, sd and bulk ESS, keyed ``name[i,j]``."""
    import arviz as az

    ess = az.ess(trace.posterior)
    out = {}
    for name, da in trace.posterior.data_vars.items():
        values = np.asarray(da.values, dtype=float)
        flat = values.reshape(values.shape[0] * values.shape[1], -1)
        e = np.asarray(ess[name].values, dtype=float).reshape(-1)
        for i in range(flat.shape[1]):
            out[f"{name}[{i}]"] = (float(flat[:, i].mean()), float(flat[:, i].std()), float(e[i]))
    return out


def run_lengths(wall_first: float, short: tuple, long: tuple, budget: float = BUDGET_S, min_wall: float = MIN_WALL_S) -> tuple:
    """The long run's (tune, draws) and how many (long, short) pairs to time, from the first short run's wall.

    A long run the short one predicts to last more than ``budget`` is shortened (never below the short
    run); one predicted under ``min_wall`` (tiny models: a 600-draw run lasts 0.05 s, where a loaded
    machine's jitter is the figure) is lengthened, up to 30×; runs predicted under ``budget / 4``
    are timed :data:`PAIRS` times.
    """
    tune, draws = long
    estimate = wall_first * (tune + draws) / max(sum(short), 1)
    if estimate > budget:
        scale = budget / estimate
        tune, draws = max(short[0] + 1, int(tune * scale)), max(short[1] + 1, int(draws * scale))
    elif 0 < estimate < min_wall:
        scale = min(min_wall / estimate, 30.0)
        tune, draws = int(tune * scale), int(draws * scale)
    estimate = wall_first * (tune + draws) / max(sum(short), 1)
    return (tune, draws), PAIRS if estimate < budget / 4 else 1


def run_side(spec: str, side: str, chains: int, long: tuple, short: tuple, seed: int, budget: float = BUDGET_S,
             first_run: tuple = FIRST_RUN) -> dict:
    """Compile, run the short then (long, short) pairs; the per-gradient time and start-up from them.

    Per gradient is the median over the pairs of (long wall - short wall) / (long steps - short steps);
    every run has the same seed, so the same steps. First run = compile + the first call's extra +
    start-up + per gradient × the steps of a ``first_run`` = (tune, draws) run, those at the long
    run's steps per draw (``first_run_measured_s``: the same with the long run itself).
    """
    from pmfast.loading import load_model

    model, point = load_model(spec)
    discrete = discrete_variables(model)
    if discrete:
        raise ValueError(f"{NOT_NUTS}: discrete free variables {', '.join(discrete)} (nutpie samples continuous ones only)")
    from pmfast.bench import process_cpu_s

    overrides = start_overrides(model, point)
    t0, c0 = time.perf_counter(), process_cpu_s()
    compiled = compile_side(model, side, overrides)
    compile_s, compile_cpu_s = time.perf_counter() - t0, process_cpu_s() - c0
    _, wall_first, steps_first, _ = timed_sample(compiled, chains, *short, seed)
    (tune, draws), pairs = run_lengths(wall_first, short, long, budget)
    estimates, cpu_estimates, walls_a, walls_b = [], [], [], []
    for _ in range(pairs):
        trace, wall_b, steps_b, cpu_b = timed_sample(compiled, chains, tune, draws, seed)
        short_trace, wall_a, steps_a, cpu_a = timed_sample(compiled, chains, *short, seed)
        walls_a.append(wall_a)
        walls_b.append(wall_b)
        if steps_b > steps_a and wall_b > wall_a:
            estimates.append((wall_b - wall_a) / (steps_b - steps_a))
        else:
            estimates.append(wall_b / steps_b)
        cpu_estimates.append((cpu_b - cpu_a) / (steps_b - steps_a) if steps_b > steps_a and cpu_b > cpu_a else cpu_b / steps_b)
    per_grad = float(np.median(estimates))
    wall_a, wall_b = float(np.median(walls_a)), float(np.median(walls_b))
    startup = max(wall_a - per_grad * steps_a, 0.0)
    steps_first_run = steps_b * sum(first_run) / (tune + draws)
    return {
        "model": spec,
        "side": side,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "first_run_s": compile_s + (wall_first - wall_a) + startup + per_grad * steps_first_run,
        "first_run": list(first_run),
        "first_run_measured_s": compile_s + (wall_first - wall_a) + wall_b,
        "first_call_extra_s": wall_first - wall_a,
        "short": {"tune": short[0], "draws": short[1], "wall_s": wall_a, "steps": steps_a, "first_wall_s": wall_first, "first_steps": steps_first},
        "long": {"tune": tune, "draws": draws, "wall_s": wall_b, "steps": steps_b},
        "pairs": pairs,
        "per_grad_spread": [1e6 * min(estimates) * chains, 1e6 * max(estimates) * chains],
        "per_grad_us": 1e6 * per_grad * chains,
        "per_grad_cpu_us": 1e6 * float(np.median(cpu_estimates)),
        "startup_s": startup,
        "start": "the model's returned point" if overrides else "default",
        "posterior": scalar_summary(trace),
        "posterior_short": scalar_summary(short_trace),
    }


def check_sides(text) -> tuple:
    """Sides from a comma list (or a sequence), in the order given; ValueError names an unknown one."""
    sides = [s.strip() for s in (text.split(",") if isinstance(text, str) else text) if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise ValueError(f"unknown side {', '.join(map(repr, unknown)) or '(none given)'}; expected a comma list of {', '.join(SIDES)}")
    return tuple(dict.fromkeys(sides))


def catalogue_models(catalogue: Path, names=(), core: bool = False) -> list[str]:
    """Model files of a catalogue checkout: the core set and/or the named models (``BEST`` or ``models/BEST.py``)."""
    from pmfast.loading import LoadError

    catalogue = Path(catalogue)
    if not (catalogue / "models").is_dir():
        raise LoadError(f"not a model catalogue (no models/ directory): {catalogue}")
    specs = core_models(catalogue) if core else []
    for name in names:
        path = catalogue / name if name.endswith(".py") else catalogue / "models" / f"{name}.py"
        if not path.is_file():
            raise LoadError(f"unknown catalogue model {name!r}: no {path}")
        specs.append(str(path))
    return list(dict.fromkeys(specs))


#: A scalar whose sd is at most this fraction of its |mean| is constant over the draws (rounding in the mean and sd).
CONSTANT_RTOL = 1e-12
#: Constant scalars agree when their means differ by at most this, relative (the parity tolerance).
PARITY_RTOL = 1e-9


def _constant(mean: float, sd: float) -> bool:
    return sd == 0.0 or sd <= CONSTANT_RTOL * abs(mean)


def agreement(a: dict, b: dict) -> float:
    """Largest |Δmean| / sqrt(sd_a²/ess_a + sd_b²/ess_b) over the scalars both posteriors have (z-score scale).

    A scalar constant over both sides' draws (a deterministic of data only, such as observed values
    concatenated into a ``pm.Deterministic``) has no Monte-Carlo error: its sd is rounding in the mean
    (~1e-16), so an ulp between two runs of different lengths would read as tens of standard errors.
    Such scalars are compared by relative difference instead: 0 within :data:`PARITY_RTOL`, else inf.
    """
    worst = 0.0
    for key in a.keys() & b.keys():
        (ma, sa, ea), (mb, sb, eb) = a[key], b[key]
        if _constant(ma, sa) and _constant(mb, sb):
            if abs(ma - mb) > PARITY_RTOL * max(abs(ma), abs(mb)) and not (math.isnan(ma) and math.isnan(mb)):
                worst = math.inf
            continue
        se = math.sqrt(sa * sa / max(ea, 1.0) + sb * sb / max(eb, 1.0))
        if se > 0 and math.isfinite(se):
            worst = max(worst, abs(ma - mb) / se)
    return worst


def worker(spec: str, side: str, chains: int, long: tuple, short: tuple, seed: int, budget: float, timeout: float = TIMEOUT_S) -> dict:
    """:func:`run_side` in a fresh process with fresh caches; the result, or :class:`SamplerBenchError`."""
    from pmfast.bench import BLAS_ONE_THREAD, cold_env, run_worker

    cmd = [sys.executable, "-m", "pmfast.sampler_bench", spec, "--side", side, "--chains", str(chains), "--seed", str(seed)]
    cmd += ["--long", f"{long[0]},{long[1]}", "--short", f"{short[0]},{short[1]}", "--budget", str(budget)]
    with tempfile.TemporaryDirectory(prefix="pmfast-sampler-") as cache:
        env = cold_env({**BLAS_ONE_THREAD, **os.environ}, cache)
        return run_worker(cmd, env, f"{Path(spec).name} ({side})", SamplerBenchError, timeout=timeout)


def model_name(spec: str) -> str:
    """The name a spec is known by in ``lengths``: a file's stem, or a zoo name without its size arguments."""
    head = spec.partition(":")[0]
    return Path(head).stem if head.endswith(".py") else head


def parse_lengths(items) -> dict:
    """``NAME=TUNE,DRAWS[,SHORT]`` items as {name: ((tune, draws), (short, short) or None)}."""
    out = {}
    for item in items or ():
        name, eq, rest = item.partition("=")
        try:
            numbers = [int(x) for x in rest.split(",")]
            if not eq or not name.strip() or len(numbers) not in (2, 3) or min(numbers) < 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"bad run length {item!r}; expected NAME=TUNE,DRAWS or NAME=TUNE,DRAWS,SHORT (positive)") from None
        if len(numbers) == 3 and 2 * numbers[2] >= numbers[0] + numbers[1]:
            raise ValueError(f"bad run length {item!r}: the short run ({numbers[2]}) must be shorter than the long one")
        out[name.strip()] = ((numbers[0], numbers[1]), (numbers[2], numbers[2]) if len(numbers) == 3 else None)
    return out


def agreement_run(a: dict, b: dict) -> str:
    """Which posteriors two sides compare: the long runs' when they have the same (tune, draws), else the short runs'.

    A long run the budget shortened (a heavy model's stock side: malaria_hsgp's 273 + 273 against pmfast's
    1,000 + 1,000) has less warm-up and fewer draws than the other side's: its mean's error is not what its
    MCSE says, and the two read 5.1 MCSE apart where equal 1,000 + 1,000 runs are 4.2 apart (two pmfast
    seeds: 3.5). The short runs have the same lengths on every side."""
    same = a.get("long", {}).get("tune") == b.get("long", {}).get("tune") and a.get("long", {}).get("draws") == b.get("long", {}).get("draws")
    return "posterior" if same or "posterior_short" not in a or "posterior_short" not in b else "posterior_short"


def compare(specs, sides=SIDES, chains=1, long=LONG, short=SHORT, seed=0, budget=BUDGET_S, progress=None,
            lengths=None, timeout=TIMEOUT_S, on_row=None) -> list[dict]:
    """Per model, every side in its own fresh process; ratios and posterior agreement against stock.

    ``lengths``: per model name (:func:`model_name`), its own long run and short run (see
    :func:`parse_lengths`). A model no side can sample (discrete free variables) is tried once and
    reported with that error on every side. ``on_row(results so far)`` is called after each model.
    """
    results = []
    for spec in specs:
        row = {"model": spec, "sides": {}, "errors": {}}
        own_long, own_short = (lengths or {}).get(model_name(spec), (None, None))
        m_long, m_short = own_long or long, own_short or short
        if own_long is not None:
            row["lengths"] = {"long": list(m_long), "short": list(m_short)}
        for side in sides:
            if progress is not None:
                progress(spec, side)
            if any(e.partition(": ")[2].startswith(NOT_NUTS) for e in row["errors"].values()):
                row["errors"][side] = next(iter(row["errors"].values()))
                continue
            try:
                row["sides"][side] = worker(spec, side, chains, m_long, m_short, seed, budget, timeout)
            except SamplerBenchError as exc:
                row["errors"][side] = str(exc)
        stock = row["sides"].get("stock")
        row["ratio"], row["agreement"] = {}, {}
        row["cpu_ratio"] = {}
        for side, r in row["sides"].items():
            if stock is not None and side != "stock":
                row["ratio"][side] = r["per_grad_us"] / stock["per_grad_us"]
                if r.get("per_grad_cpu_us") and stock.get("per_grad_cpu_us"):
                    row["cpu_ratio"][side] = r["per_grad_cpu_us"] / stock["per_grad_cpu_us"]
                run = agreement_run(stock, r)
                row["agreement"][side] = agreement(stock[run], r[run])
                if run != "posterior":
                    row.setdefault("agreement_run", {})[side] = "short"
        for r in row["sides"].values():
            r.pop("posterior")
            r.pop("posterior_short", None)
        results.append(row)
        if on_row is not None:
            on_row(results)
    return results


def geomean(values) -> float:
    """Geometric mean of the positive finite values (nan if none)."""
    v = [x for x in values if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else math.nan


def geomeans(results, key: str = "ratio") -> dict:
    """Per non-stock side: geometric mean over models of its per-gradient ratio to stock (``cpu_ratio``: CPU-based)."""
    sides = {s for r in results for s in r.get(key, {})}
    return {s: geomean([r[key][s] for r in results if s in r.get(key, {})]) for s in sorted(sides)}


def _pair(text: str) -> tuple:
    tune, draws = (int(x) for x in text.split(","))
    return tune, draws


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pmfast.sampler_bench", description="One side of a sampler benchmark.")
    parser.add_argument("model")
    parser.add_argument("--side", choices=SIDES, default="pmfast")
    parser.add_argument("--chains", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long", type=_pair, default=LONG, help="tune,draws of the long run")
    parser.add_argument("--short", type=_pair, default=SHORT, help="tune,draws of the short run")
    parser.add_argument("--budget", type=float, default=BUDGET_S)
    ns = parser.parse_args(argv)
    stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            from pmfast.bench import _use_cold_cache

            _use_cold_cache()
            result = run_side(ns.model, ns.side, ns.chains, ns.long, ns.short, ns.seed, ns.budget)
    except Exception as exc:
        from pmfast.loading import one_line

        print(json.dumps({"error": one_line(f"{type(exc).__name__}: {exc}")}), file=stdout)
        return 1
    print(json.dumps(result), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
