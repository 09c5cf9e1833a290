"""Benchmark of the ``wide_split`` pass (and pmfast's chunked-call linker): stock vs pmfast, cold caches.

Each side runs in its own subprocess with a fresh ``NUMBA_CACHE_DIR`` and a
fresh pytensor ``base_compiledir`` (pytensor's numba cache lives under it), so
every compile is cold. Per side: compile seconds (``logp_dlogp_function`` +
the first ``fn.vm.jit_fn`` call), peak RSS of the process
(``getrusage(RUSAGE_SELF).ru_maxrss``), eval µs (median of ≥ 5 repeats, each
a loop of many ``fn.vm.jit_fn`` calls inside numba, as nutpie calls it), and
logp + gradient at the initial point for parity.

    PYTHONPATH=. python bench/wide_split.py                       # everything (≈ 17 min here, ~4.3 GB peak)
    PYTHONPATH=. python bench/wide_split.py --wide 40 --many 15,30 # a quick subset
    PYTHONPATH=. python bench/wide_split.py --wide 80,160 --many 15,30,60 --json out.json
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python bench/wide_split.py --wide "" --many "" --var 10 --linker-eval

``--linker-eval`` adds, per model, one process timing three kernels alternately
on the CPU clock: stock, pmfast, and pmfast with the linker's ``optnone``
threshold (``pmfast.linker.OPTNONE_MIN_NODES``) lifted — how much of an eval
difference is the graph and how much the linker. Set
``OPENBLAS_NUM_THREADS=1`` for models with matrix ops (``hier_var``): with
OpenBLAS's threads on a loaded 2-core machine, the timing thread's CPU clock
charges their spin-waits (62 ms instead of 80 µs per call measured).

Models: ``wide_additive`` (zoo; n separate (8, 20) blocks gathered and added
into a categorical likelihood), ``many_vars`` (defined here: k separate
free variables of shape (4,), each with its own normal likelihood: a k-way
gradient Join and a wide logp sum) and ``hier_var`` (zoo; a hierarchical VAR
over n countries whose logp and gradient fuse into 0-d Composites of
~12n inputs: ``WideLoop``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PASSES = "wide_split"


def many_vars(k=60, n_obs=50, seed=0):
    """k separate free variables ``mu_i`` (shape 4), each with its own observed normal likelihood."""
    import numpy as np
    import pymc as pm

    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        for i in range(k):
            mu = pm.Normal(f"mu_{i}", 0.0, 1.0, shape=4)
            pm.Normal(f"y_{i}", mu[rng.integers(0, 4, n_obs)], 1.0, observed=rng.normal(size=n_obs))
    return model


def build(model_name: str, size: int):
    if model_name == "wide_additive":
        from pmfast import models

        return models.load("wide_additive")(n=size, n_obs=2000)
    if model_name == "many_vars":
        return many_vars(size)
    if model_name == "hier_var":
        from pmfast import models

        return models.load("hier_var")(n_groups=size)
    raise ValueError(model_name)


def linker_eval(model_name: str, size: int, repeats: int) -> dict:
    """Eval µs of stock, pmfast and pmfast without the linker's optnone, alternating in this process (CPU clock)."""
    import pmfast
    import pmfast.linker
    from pmfast.bench import time_calls

    model = build(model_name, size)
    fns = {}
    for label, passes, optnone_min in (
        ("stock", "none", None),
        ("pmfast", PASSES, None),
        ("pmfast, linker optnone off", PASSES, 10**9),
    ):
        saved = pmfast.linker.OPTNONE_MIN_NODES
        if optnone_min is not None:
            pmfast.linker.OPTNONE_MIN_NODES = optnone_min
        try:
            fn, x0 = pmfast.logp_dlogp_function(model, passes)
            args = pmfast.kernel_args(fn, x0)
            fn.vm.jit_fn(*args)  # compile now, with the threshold in force
        finally:
            pmfast.linker.OPTNONE_MIN_NODES = saved
        fns[label] = (fn.vm.jit_fn, args, len(fn.maker.fgraph.apply_nodes))
    times = {label: [] for label in fns}
    for _ in range(repeats):
        for label, (jit_fn, args, _) in fns.items():
            times[label].append(time_calls(jit_fn, args, repeats=1)[0][0])
    med = {label: statistics.median(t) for label, t in times.items()}
    return {
        "model": model_name,
        "size": size,
        "eval_us": med,
        "eval_us_repeats": times,
        "nodes": {label: f[2] for label, f in fns.items()},
        "ratios": {label: med[label] / med["stock"] for label in med},
    }


def worker(model_name: str, size: int, passes: str, repeats: int, out_path: str) -> None:
    """Measure one side in this (fresh) process and write JSON to ``out_path``."""
    import numpy as np

    import pmfast
    import pmfast.passes.wide_split  # noqa: F401  (registers the pass even if not yet in BUILTIN)
    # pmfast.bench's worker (``run_side``) measures wall-clock compile only and
    # loads models from specs; this one also needs compile CPU seconds, the
    # widest node and the linker's stats, so it reuses the pieces instead.
    from pmfast.bench import peak_rss_mb, time_calls

    model = build(model_name, size)
    t0, c0 = time.perf_counter(), time.process_time()
    fn, x0 = pmfast.logp_dlogp_function(model, passes)
    args = pmfast.kernel_args(fn, x0)
    out = fn.vm.jit_fn(*args)
    compile_s = time.perf_counter() - t0
    compile_cpu_s = time.process_time() - c0
    rss = peak_rss_mb()
    times, n, kind = time_calls(fn.vm.jit_fn, args, repeats)
    wide = max((len(nd.inputs) for nd in fn.maker.fgraph.apply_nodes), default=0)
    result = {
        "model": model_name,
        "size": size,
        "passes": passes,
        "linker": type(fn.maker.linker).__name__,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "linker_stats": getattr(fn.maker.linker, "stats", {}),
        "rss_mb": rss,
        "eval_us": statistics.median(times),
        "eval_us_repeats": times,
        "calls_per_repeat": n,
        "timing_loop": kind,
        "max_node_inputs": wide,
        "nodes": len(fn.maker.fgraph.apply_nodes),
        "fired": pmfast.fired(fn),
        "logp": float(np.asarray(out[0])),
        "grad": np.asarray(out[1], dtype="float64").ravel().tolist(),
    }
    Path(out_path).write_text(json.dumps(result))


def run_side(model_name: str, size: int, passes: str, repeats: int) -> dict:
    """One side in a subprocess with cold numba and pytensor caches."""
    with tempfile.TemporaryDirectory(prefix="wide-split-bench-") as tmp:
        env = dict(os.environ)
        env["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba")
        env["PYTENSOR_FLAGS"] = ",".join(
            filter(None, [env.get("PYTENSOR_FLAGS", ""), f"base_compiledir={Path(tmp) / 'pytensor'}"])
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, __file__, "--worker", model_name, str(size), passes, str(repeats), str(out)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode or not out.exists():
            raise RuntimeError(f"{model_name}({size}) passes={passes} failed:\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def compare(model_name: str, size: int, repeats: int) -> dict:
    from pmfast.bench import parity as side_parity

    stock = run_side(model_name, size, "none", repeats)
    fast = run_side(model_name, size, PASSES, repeats)
    stock["n_dim"] = fast["n_dim"] = len(stock["grad"])
    parity = side_parity(stock, fast)  # pmfast.bench's definition (relative logp, max |Δgrad| / max |grad|)
    stock.pop("grad"), fast.pop("grad")
    ratios = {k: fast[k] / stock[k] for k in ("compile_s", "rss_mb", "eval_us")}
    return {"model": model_name, "size": size, "stock": stock, "pmfast": fast, "ratios": ratios, "parity": parity}


def show(r: dict) -> str:
    s, f, q, p = r["stock"], r["pmfast"], r["ratios"], r["parity"]
    return (
        f"{r['model']:<14}{r['size']:>5} | compile {s['compile_s']:7.1f} s → {f['compile_s']:6.1f} s ({q['compile_s']:.3f}×)"
        f" | CPU {s['compile_cpu_s']:7.1f} s → {f['compile_cpu_s']:6.1f} s ({f['compile_cpu_s'] / s['compile_cpu_s']:.3f}×)"
        f" | peak RSS {s['rss_mb']:6.0f} → {f['rss_mb']:5.0f} MB ({q['rss_mb']:.3f}×)"
        f" | eval {s['eval_us']:8.1f} → {f['eval_us']:8.1f} µs ({q['eval_us']:.3f}×)"
        f" | nodes {s['nodes']} → {f['nodes']}, widest {s['max_node_inputs']} → {f['max_node_inputs']}"
        f" | parity logp {p['logp']:.1e} grad {p['grad']:.1e}"
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        model_name, size, passes, repeats, out = argv[1:6]
        worker(model_name, int(size), passes, int(repeats), out)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wide", default="80,160", help="wide_additive sizes n (comma list; empty to skip)")
    ap.add_argument("--many", default="15,30,60", help="many_vars sizes k (comma list; empty to skip)")
    ap.add_argument("--var", default="", help="hier_var sizes n_groups (comma list; empty to skip)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--linker-eval", action="store_true", help="also time stock / pmfast / pmfast without optnone alternately")
    ap.add_argument("--no-compile", action="store_true", help="skip the cold per-side compile runs")
    ap.add_argument("--json", default=None, help="write all results here")
    ns = ap.parse_args(argv)
    jobs = (
        [("many_vars", int(k)) for k in ns.many.split(",") if k]
        + [("wide_additive", int(n)) for n in ns.wide.split(",") if n]
        + [("hier_var", int(n)) for n in ns.var.split(",") if n]
    )
    if ns.linker_eval:
        for model_name, size in jobs:
            r = linker_eval(model_name, size, ns.repeats)
            print(
                f"{model_name:<14}{size:>5} | eval µs (CPU clock, alternating): "
                + ", ".join(f"{k} {v:.1f} ({r['ratios'][k]:.3f}×, {r['nodes'][k]} nodes)" for k, v in r["eval_us"].items()),
                flush=True,
            )
        if ns.no_compile:
            return 0
    results = []
    for model_name, size in jobs:
        r = compare(model_name, size, ns.repeats)
        results.append(r)
        print(show(r), flush=True)
    for name in ("wide_additive", "many_vars", "hier_var"):
        rs = [r for r in results if r["model"] == name]
        for a, b in zip(rs, rs[1:]):
            for side in ("stock", "pmfast"):
                g = b[side]["compile_s"] / a[side]["compile_s"]
                print(f"{name} {side}: compile growth {a['size']} → {b['size']}: {g:.2f}×")
    if ns.json:
        Path(ns.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
