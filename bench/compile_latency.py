"""Cold and warm compile time, pmfast.compile vs nutpie.compile_pymc_model, each in a fresh process.

    python bench/compile_latency.py [MODELS...] [--passes all] [--json FILE]

Per model and side, a fresh pytensor compile directory (and so numba cache) is
made; the first process compiles cold, the next ones (``--warm N``) find the
cache of the first. Times exclude imports and model building. Reports medians.
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

DEFAULT = ("radon_intercept", "radon_slope", "eight_schools_noncentered", "irt_2pl")


def worker(model_spec: str, side: str, passes: str) -> dict:
    t0 = time.perf_counter()
    import nutpie

    import pmfast
    from pmfast.compiler import cache
    from pmfast.loading import load_model

    t_import = time.perf_counter() - t0
    model, _ = load_model(model_spec)
    t0 = time.perf_counter()
    if side == "stock":
        compiled = nutpie.compile_pymc_model(model)
        timings = {}
    else:
        compiled = pmfast.compile(model, passes=passes)
        timings = compiled.timings
    return {
        "compile_s": time.perf_counter() - t0,
        "import_s": t_import,
        "timings": timings,
        "cache": dict(cache.stats),
        "n_dim": int(compiled.n_dim),
    }


def run(model_spec: str, side: str, passes: str, compiledir: str) -> dict:
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
    cmd = [sys.executable, __file__, "--worker", model_spec, side, "--passes", passes]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{model_spec} {side}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT))
    ap.add_argument("--passes", default="all")
    ap.add_argument("--warm", type=int, default=3, help="warm processes per side")
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "SIDE"))
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.passes)))
        return
    rows = []
    print(f"{'model':<28}{'side':<8}{'cold s':>9}{'warm s':>9}  warm stages")
    for spec in args.models:
        row = {"model": spec}
        for side in ("stock", "pmfast"):
            with tempfile.TemporaryDirectory(prefix="pmfast-latency-") as d:
                cold = run(spec, side, args.passes, d)
                warm = [run(spec, side, args.passes, d) for _ in range(args.warm)]
            w = statistics.median(r["compile_s"] for r in warm)
            row[side] = {"cold_s": cold["compile_s"], "warm_s": w, "warm_runs": warm, "cold_run": cold}
            stages = ", ".join(f"{k} {v:.2f}" for k, v in warm[-1]["timings"].items())
            print(f"{spec:<28}{side:<8}{cold['compile_s']:9.2f}{w:9.2f}  {stages}", flush=True)
        row["cold_ratio"] = row["pmfast"]["cold_s"] / row["stock"]["cold_s"]
        row["warm_ratio"] = row["pmfast"]["warm_s"] / row["stock"]["warm_s"]
        print(f"{'':<28}{'ratio':<8}{row['cold_ratio']:9.2f}{row['warm_ratio']:9.2f}", flush=True)
        rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
