"""Many fits of one model: pmfast.fit_many vs a loop of pmfast.sample / pm.sample(nuts_sampler="nutpie") + pm.set_data.

    python bench/fit_many.py [--datasets 24] [--draws 300] [--tune 300] [--chains 2] [--dask] [--json FILE]

The model is the zoo's ``radon_data`` (919 rows, 85 counties, all data in
pm.Data); each dataset is simulated with its own seed. Every way is timed in
a fresh process after one warm-up process has filled the compile caches
(warm caches, cold process: what a user's second script run sees), wall and
CPU seconds from before the model is built to the last fit; the loops compile
once per dataset because that is what they do. ``--dask`` adds fit_many on a
LocalCluster of 2 worker processes (cluster start-up reported apart).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WAYS = ("fit_many", "pmfast.sample loop", "pm.sample nutpie loop")


def run_way(way: str, n: int, draws: int, tune: int, chains: int) -> dict:
    import numpy as np
    import pymc as pm

    import pmfast
    from pmfast.models import radon_data

    datasets = [radon_data.dataset(seed=100 + i) for i in range(n)]
    fit = {"draws": draws, "tune": tune, "chains": chains}
    t0, c0 = time.perf_counter(), time.process_time()
    model = radon_data.build_model()
    extra = {}
    if way == "fit_many":
        results = pmfast.fit_many(model, datasets, seed=1, progress=False, **fit)
    elif way == "fit_many dask":
        import logging

        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            client.run(lambda: __import__("pmfast.many.fit"))
            extra["cluster_start_s"] = time.perf_counter() - t0
            results = pmfast.fit_many(model, datasets, client=client, seed=1, progress=False, **fit)
    else:
        results = []
        for i, data in enumerate(datasets):
            with model:
                pm.set_data(data)
            if way == "pmfast.sample loop":
                results.append(pmfast.sample(model, seed=i, progress=False, **fit))
            else:
                results.append(pm.sample(model=model, nuts_sampler="nutpie", random_seed=i, progressbar=False, **fit))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    failed = sum(isinstance(r, pmfast.FitError) for r in results)
    beta = [float(np.asarray(r.posterior["beta"]).mean()) for r in results if not isinstance(r, pmfast.FitError)]
    return {"way": way, "wall_s": wall, "cpu_s": cpu, "fits": len(results), "failed": failed, "beta_means": beta, **extra}


def measure(way: str, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", way, "--datasets", str(args.datasets), "--draws", str(args.draws),
           "--tune", str(args.tune), "--chains", str(args.chains)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{way}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=24)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--dask", action="store_true", help="also fit_many on a LocalCluster of 2 workers")
    parser.add_argument("--json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        import contextlib

        with contextlib.redirect_stdout(sys.stderr):
            result = run_way(args.worker, args.datasets, args.draws, args.tune, args.chains)
        print(json.dumps(result))
        return 0
    ways = WAYS + (("fit_many dask",) if args.dask else ())
    print(f"warm-up (fills the compile caches) …  load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    warm = argparse.Namespace(**{**vars(args), "datasets": 1})
    for way in ("fit_many", "pm.sample nutpie loop"):
        measure(way, warm)
    results = []
    for way in ways:
        r = measure(way, args)
        results.append(r)
        extra = f"  (cluster start {r['cluster_start_s']:.1f} s)" if "cluster_start_s" in r else ""
        print(f"{way:<24} {r['wall_s']:7.1f} s wall {r['cpu_s']:7.1f} s CPU  {r['fits'] - r['failed']}/{r['fits']} fits{extra}")
    base = results[0]["wall_s"]
    for r in results[1:]:
        print(f"  {r['way']} / fit_many: {r['wall_s'] / base:.1f}×")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "load": os.getloadavg(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
