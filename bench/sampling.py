"""Time per NUTS step inside nutpie's sampler: pmfast against nutpie's numba (stock) and JAX backends.

Each backend compiles the model, then ``nutpie.sample`` runs with the same seed, chains, cores,
tune and draws; the figure is the sampling wall time divided by the number of leapfrog steps
(warmup and draws), which is what a step costs the sampler (the kernel plus nutpie's own work).
Process CPU seconds are printed next to it (the machine is shared).

    python bench/sampling.py bradley_terry --chains 1 --cores 1 --backends pmfast,jax
    python bench/sampling.py bradley_terry --chains 2 --cores 2 --backends pmfast,stock --draws 2000
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path


#: ``--threads``: override pmfast's choice (``threads_for(chains, cores)``)
THREADS = None


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def compile_backend(model, backend: str, chains: int, cores: int):
    import nutpie

    import pmfast

    if backend == "pmfast":
        try:
            from pmfast.loops import threads
        except ImportError:  # an older pmfast (the "today" side of a comparison): no threads
            return pmfast.compile(model)
        with threads.using(threads.threads_for(chains, cores) if THREADS is None else THREADS):
            return pmfast.compile(model)
    if backend == "stock":
        return nutpie.compile_pymc_model(model)
    if backend == "jax":
        return nutpie.compile_pymc_model(model, backend="jax", gradient_backend="jax")
    raise ValueError(f"unknown backend {backend!r}")


def run(model_spec: str, backend: str, chains: int, cores: int, tune: int, draws: int, seed: int) -> dict:
    import nutpie

    from pmfast.loading import load_model

    model, _ = load_model(model_spec)
    t0, c0 = time.perf_counter(), cpu_seconds()
    compiled = compile_backend(model, backend, chains, cores)
    compile_s, compile_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    t0, c0 = time.perf_counter(), cpu_seconds()
    trace = nutpie.sample(
        compiled, chains=chains, cores=cores, tune=tune, draws=draws, seed=seed, progress_bar=False
    )
    sample_s, sample_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    steps = int(trace.sample_stats["n_steps"].sum())
    if "warmup_sample_stats" in trace.groups():
        steps += int(trace.warmup_sample_stats["n_steps"].sum())
    return {
        "model": model_spec,
        "backend": backend,
        "chains": chains,
        "cores": cores,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu,
        "sample_s": sample_s,
        "sample_cpu_s": sample_cpu,
        "steps": steps,
        # wall time of one step of one chain (chains run side by side on min(chains, cores) cores)
        "ms_per_step": 1e3 * sample_s * min(chains, cores) / steps,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--backends", default="pmfast,jax")
    ap.add_argument("--chains", type=int, default=1)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--tune", type=int, default=300)
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, help="pmfast's threads per kernel call (default: from chains and cores)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    global THREADS
    THREADS = a.threads
    results = []
    for backend in a.backends.split(","):
        r = run(a.model, backend, a.chains, a.cores, a.tune, a.draws, a.seed)
        results.append(r)
        print(
            f"{backend:<8} compile {r['compile_s']:6.1f} s (cpu {r['compile_cpu_s']:6.1f})  "
            f"sample {r['sample_s']:7.2f} s (cpu {r['sample_cpu_s']:7.2f})  {r['steps']:7d} steps  "
            f"{r['ms_per_step']:.3f} ms/step",
            flush=True,
        )
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
