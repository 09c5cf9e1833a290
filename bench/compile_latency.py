"""Compile latency, pmfast vs stock nutpie, every measurement in a fresh process.

    python bench/compile_latency.py [MODELS...] [--scenarios cold,used,warm,plugin,firstrun]
                                    [--repeats 2] [--warm 3] [--sides stock,pmfast] [--json FILE]

Scenarios (each side of each run is its own process; seconds exclude imports
and model building unless stated):

* ``cold``: empty pytensor/numba caches (a fresh ``base_compiledir`` and ``NUMBA_CACHE_DIR``):
  ``nutpie.compile_pymc_model`` vs ``pmfast.compile``; with side ``jax`` (``--sides
  stock,pmfast,jax``), nutpie's JAX backend: its compile and its first jit (a first short
  ``nutpie.sample``, 1 chain x 10 + 10 draws, where XLA compiles), wall = both. Each reports its
  peak RSS (``peak_rss_mb``: the process; ``peak_rss_children_mb``: its largest forked child).
* ``warm``: the same call again in ``--warm`` new processes on the cold run's
  cache (median).
* ``used``: a new model on a used machine: one process compiles every other
  model of the run into a fresh cache, then ``pmfast.compile`` of the model
  is timed (on copies of that cache, ``--repeats`` times).
* ``plugin``: warm cache, ``pm.sample(nuts_sampler="nutpie")`` under
  ``pmfast.enabled()`` vs ``pmfast.sample``, same draws (wall of the call).
* ``firstrun``: empty caches, compile + 2 chains x 1,000 tune + 1,000 draws
  with one seed: pmfast vs nutpie's JAX backend (total wall incl. compile).

Every figure comes with the process's CPU seconds (its forked children
included) and the load average at the start of the run: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT = (
    "radon_intercept",
    "radon_slope",
    "eight_schools_noncentered",
    "eight_schools_centered",
    "irt_2pl",
    "hier_logistic",
    "crossed_effects",
    "bradley_terry",
    "poisson_offset",
    "negbin",
    "stoch_vol",
)
SCENARIOS = ("cold", "warm", "used", "plugin", "firstrun")
FIRSTRUN = {"draws": 1000, "tune": 1000, "chains": 2, "seed": 1}
PLUGIN = {"draws": 500, "tune": 500, "chains": 2}


def _cpu() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _quiet():
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("pytensor").setLevel(logging.CRITICAL)


def worker(task: str, side: str, specs: list[str]) -> dict:
    """One measurement in this (fresh) process; see the module docstring."""
    _quiet()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    import nutpie
    import pymc as pm

    import pmfast
    from pmfast.loading import load_model

    try:
        from pmfast.compiler import cache
    except ImportError:  # a reference checkout from before pmfast.compiler (--ref-python)
        from pmfast import wrappers as cache

    out = {"import_s": time.perf_counter() - t0, "load": load}
    if task == "populate":
        for spec in specs:
            pmfast.compile(load_model(spec)[0])
        return out
    (spec,) = specs
    model, _ = load_model(spec)
    w0, c0 = time.perf_counter(), _cpu()
    if task == "compile" and side == "jax":
        compiled = nutpie.compile_pymc_model(model, backend="jax", gradient_backend="pytensor")
        out["compile_s"] = time.perf_counter() - w0
        nutpie.sample(compiled, chains=1, tune=10, draws=10, seed=1, progress_bar=False)
        out["jit_s"] = time.perf_counter() - w0 - out["compile_s"]
    elif task == "compile":
        compiled = nutpie.compile_pymc_model(model) if side == "stock" else pmfast.compile(model)
        out.update(
            timings=getattr(compiled, "timings", {}), cpu_timings=getattr(compiled, "cpu_timings", {}), cache=dict(cache.stats)
        )
    elif task == "sample":
        kw = {**PLUGIN, "random_seed": 1, "progressbar": False}
        if side == "plugin":
            with pmfast.enabled():
                pm.sample(nuts_sampler="nutpie", model=model, **kw)
        else:
            pmfast.sample(model, draws=kw["draws"], tune=kw["tune"], chains=kw["chains"], seed=1, progress=False)
    elif task == "firstrun":
        if side == "jax":
            compiled = nutpie.compile_pymc_model(model, backend="jax", gradient_backend="pytensor")
        else:
            compiled = pmfast.compile(model)
        out["compile_s"] = time.perf_counter() - w0
        nutpie.sample(compiled, progress_bar=False, **FIRSTRUN)
    else:
        raise ValueError(task)
    out.update(wall_s=time.perf_counter() - w0, cpu_s=_cpu() - c0, load_end=os.getloadavg()[0])
    from pmfast.bench import peak_rss_mb

    out.update(peak_rss_mb=peak_rss_mb(), peak_rss_children_mb=peak_rss_mb(children=True))
    return out


PYTHONS = {"stock": sys.executable, "pmfast": sys.executable}


#: Where the workers' Python bytecode lives (set by :func:`bytecode`), or None: the environment's setting.
PYCACHE: str | None = None


def bytecode(tmp: str) -> None:
    """Workers import pmfast's (and pmfast's dependencies') modules from bytecode, as an installed package does.

    A checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (as on these machines) has no ``.pyc``
    files, so every worker would compile from source the modules ``pmfast.compile`` imports
    on first use (its passes, loop codegen and compiler: ~45 ms of a warm compile) while an
    installed pmfast has them compiled at installation. The bytecode goes to a directory of
    this run (``PYTHONPYCACHEPREFIX``), compiled once here before any measurement.
    """
    global PYCACHE
    import compileall

    import pmfast

    PYCACHE = os.path.join(tmp, "pycache")
    sys.pycache_prefix = PYCACHE
    compileall.compile_dir(os.path.dirname(pmfast.__file__), quiet=1)
    sys.pycache_prefix = None


def run(task: str, side: str, specs, compiledir: str) -> dict:
    # numba's own cache (pmfast.vmath kernels) lives beside pytensor's: a fresh compiledir is a cold machine
    env = {
        **os.environ,
        "PYTENSOR_FLAGS": f"base_compiledir={compiledir}",
        "NUMBA_CACHE_DIR": os.path.join(compiledir, "numba-cache"),
    }
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
    python = PYTHONS.get(side, sys.executable)
    cmd = [python, os.path.abspath(__file__), "--worker", task, "pmfast" if side == "ref" else side, *specs]
    # a neutral working directory: each interpreter imports its own install
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if out.returncode:
        raise RuntimeError(f"{task} {side} {specs}: {out.stderr.strip().splitlines()[-3:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs, key="wall_s"):
    return statistics.median(r[key] for r in runs)


def _fmt(runs) -> str:
    rss = max(r.get("peak_rss_mb", 0) for r in runs)
    kids = max(r.get("peak_rss_children_mb", 0) for r in runs)
    extra = f", compile {_median(runs, 'compile_s'):.2f} + jit {_median(runs, 'jit_s'):.2f}" if "jit_s" in runs[0] else ""
    return f"{_median(runs):6.2f} s (cpu {_median(runs, 'cpu_s'):5.2f}, load {max(r['load'] for r in runs):.1f}, rss {rss:.0f}/{kids:.0f} MB{extra})"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--repeats", type=int, default=2, help="runs per side for cold, used, plugin and firstrun")
    ap.add_argument("--warm", type=int, default=3, help="warm processes per side")
    ap.add_argument("--json")
    ap.add_argument("--sides", default="stock,pmfast", help="sides for cold and warm (e.g. pmfast alone)")
    ap.add_argument("--ref-python", help="also time pmfast.compile of a reference install (side 'ref': cold, warm)")
    ap.add_argument("--source-imports", action="store_true", help="keep the environment's bytecode setting (see bytecode())")
    ap.add_argument("--worker", nargs="+", metavar="ARG")
    args = ap.parse_args(argv)
    if args.worker:
        task, side, *specs = args.worker
        print(json.dumps(worker(task, side, specs)))
        return
    scenarios = args.scenarios.split(",")
    sides = (*args.sides.split(","), "ref") if args.ref_python else tuple(args.sides.split(","))
    if args.ref_python:
        PYTHONS["ref"] = args.ref_python
    results: dict = {"models": args.models, "scenarios": scenarios, "sides": sides, "rows": {}}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)

    tmp = tempfile.mkdtemp(prefix="pmfast-latency-")
    if not args.source_imports:
        bytecode(tmp)
    try:
        for spec in args.models:
            row = results["rows"].setdefault(spec, {})
            dirs = {}
            if "cold" in scenarios or "warm" in scenarios or "plugin" in scenarios:
                for side in sides:
                    cold = []
                    for r in range(args.repeats):
                        d = tempfile.mkdtemp(dir=tmp)
                        cold.append(run("compile", side, [spec], d))
                        dirs[side] = d
                    row[f"cold_{side}"] = cold
                    print(f"{spec:<28}cold  {side:<7}{_fmt(cold)}", flush=True)
                if "cold_stock" in row and "cold_pmfast" in row:
                    row["cold_ratio"] = _median(row["cold_pmfast"]) / _median(row["cold_stock"])
                    row["cold_ratio_cpu"] = _median(row["cold_pmfast"], "cpu_s") / _median(row["cold_stock"], "cpu_s")
                    print(f"{spec:<28}cold  ratio  {row['cold_ratio']:.2f} (cpu {row['cold_ratio_cpu']:.2f})", flush=True)
            if "warm" in scenarios:
                for side in sides:
                    row[f"warm_{side}"] = [run("compile", side, [spec], dirs[side]) for _ in range(args.warm)]
                    print(f"{spec:<28}warm  {side:<7}{_fmt(row[f'warm_{side}'])}", flush=True)
            if "plugin" in scenarios:
                for r in range(args.repeats):
                    for side in ("pmfast", "plugin"):
                        row.setdefault(f"plugin_{side}", []).append(run("sample", side, [spec], dirs["pmfast"]))
                for side in ("pmfast", "plugin"):
                    print(f"{spec:<28}sample {side:<6}{_fmt(row[f'plugin_{side}'])}", flush=True)
                row["plugin_ratio"] = _median(row["plugin_plugin"]) / _median(row["plugin_pmfast"])
            if "used" in scenarios:
                for side in ("pmfast",):
                    base = tempfile.mkdtemp(dir=tmp)
                    others = [m for m in args.models if m != spec]
                    row[f"used_populate_{side}"] = run("populate", side, others, base)
                    used = []
                    for r in range(args.repeats):
                        d = tempfile.mkdtemp(dir=tmp)
                        shutil.copytree(base, d, dirs_exist_ok=True)
                        used.append(run("compile", side, [spec], d))
                    row[f"used_{side}"] = used
                    print(f"{spec:<28}used  {side:<7}{_fmt(used)}", flush=True)
            if "firstrun" in scenarios:
                for r in range(args.repeats):
                    for side in ("jax", "pmfast"):
                        d = tempfile.mkdtemp(dir=tmp)
                        row.setdefault(f"firstrun_{side}", []).append(run("firstrun", side, [spec], d))
                for side in ("jax", "pmfast"):
                    runs = row[f"firstrun_{side}"]
                    print(f"{spec:<28}first {side:<7}{_fmt(runs)} compile {_median(runs, 'compile_s'):.2f}", flush=True)
            save()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    save()


if __name__ == "__main__":
    main()
