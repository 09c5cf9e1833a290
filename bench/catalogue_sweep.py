"""Every model of the PyMC model catalogue through ``pmfast.compile``, each in a fresh process.

    python bench/catalogue_sweep.py --catalogue CATALOGUE [NAMES...] [--timeout 600] [--json FILE]

Models nobody here wrote, as a new user meets them: for each ``models/<name>.py`` (all of them
unless NAMES are given), a fresh process builds the model, times ``pmfast.compile`` (wall and CPU,
its forked worker included, with ``PMFAST_FALLBACK=0``: a failed pmfast compile is an error here,
not stock's compile; on one numba/pytensor cache the sweep shares: a new model on a used
machine, the first ones cold), and compares the logp and gradient nutpie would get (the sampler's
C callback) with pytensor's pure-Python evaluation of the model's logp/dlogp graph (stock's
rewrites, each op's ``perform``: no compiler; without the rewrites, pytensor's stabilizations are
missing and e.g. frailty_coxph's gradient is NaN where stock's is finite) at the initial point and
at a point jittered around it. Outcomes:

* ``ok``: compiled, and parity is the largest relative difference of logp and gradient;
* ``declined``: pmfast refused the model with a ``ModelError`` a user can act on (discrete free
  variables: NUTS cannot sample them);
* ``error``: any other exception (its class and message), ``timeout``, or ``crash`` (the process
  died: a signal, an LLVM abort; the return code says which).

Prints one line per model as it goes, then a summary; ``--json`` writes every record.
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

#: a relative difference above this (logp or any gradient component, where stock's is finite) is a mismatch
PARITY = 1e-9


def one(path: str) -> dict:
    """Compile the model at ``path`` with pmfast in this process and check it (see the module docstring)."""
    import numpy as np
    from pymc.logprob.utils import ParameterValueError
    from pytensor.compile.mode import Mode

    import pmfast
    from pmfast.bench import model_x0, peak_rss_mb, process_cpu_s, relative_difference
    from pmfast.compiler.callbacks import logp_at
    from pmfast.frontend import ModelError
    from pmfast.loading import load_model

    model, _ = load_model(path)
    out = {"n_free": len(model.free_RVs)}
    t0, c0 = time.perf_counter(), process_cpu_s()
    try:
        compiled = pmfast.compile(model)
    except ModelError as exc:
        return {**out, "status": "declined", "message": f"{type(exc).__name__}: {exc}"[:300]}
    out.update(compile_s=time.perf_counter() - t0, compile_cpu_s=process_cpu_s() - c0)
    out["peak_rss_mb"] = peak_rss_mb()
    out["n_dim"] = int(compiled.n_dim)

    reference = model.logp_dlogp_function(ravel_inputs=True, mode=Mode(linker="py", optimizer="fast_run"))
    reference.set_extra_values({})
    x0 = model_x0(model, compiled)
    rng = np.random.default_rng(0)
    worst = 0.0
    for x in (x0, x0 + 0.1 * rng.normal(size=x0.size)):
        code, logp, grad = logp_at(compiled, x)
        try:
            ref_logp, ref_grad = reference(x)
        except ParameterValueError:  # a parameter check fails here: outside the support, no logp to compare
            if not code and np.isfinite(logp):
                return {**out, "status": "error", "message": f"logp {logp} where pytensor's parameter check fails"}
            continue
        if code and np.isfinite(ref_logp):
            return {**out, "status": "error", "message": f"the logp callback returned {code} where pytensor's logp is {ref_logp}"}
        if not code:
            worst = max(worst, relative_difference(logp, ref_logp), relative_difference(grad, ref_grad))
    out.update(status="ok", parity=worst, mismatch=worst > PARITY)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="catalogue model names (file stems); default every model")
    parser.add_argument("--catalogue", required=True, type=Path, help="a checkout of ricardoV94/pymc-model-catalogue")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per model")
    parser.add_argument("--cache", type=Path, help="the numba/pytensor cache the sweep shares (default: a fresh one)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        try:
            record = one(args.one)
        except Exception as exc:  # noqa: BLE001  (reported, not raised: the sweep goes on)
            record = {"status": "error", "message": f"{type(exc).__name__}: {exc}"[:500]}
        print("PMFAST_SWEEP " + json.dumps(record), flush=True)
        return 0

    models = args.catalogue / "models"
    if not models.is_dir():
        parser.error(f"{models} is not a directory: --catalogue must be a checkout of the model catalogue")
    paths = [models / f"{n}.py" for n in args.names] if args.names else sorted(p for p in models.glob("*.py") if not p.name.startswith("_"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such model: {', '.join(missing)}")
    cache = args.cache or Path(tempfile.mkdtemp(prefix="pmfast-sweep-"))
    env = dict(os.environ, PMFAST_FALLBACK="0", NUMBA_CACHE_DIR=str(cache / "numba"), PYTENSOR_FLAGS=f"base_compiledir={cache / 'pytensor'}")
    records = []
    load = os.getloadavg()[0]
    print(f"{len(paths)} models, cache {cache}, load {load:.1f}", flush=True)
    for i, path in enumerate(paths, 1):
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--catalogue", str(args.catalogue), "--one", str(path)],
                env=env, capture_output=True, text=True, timeout=args.timeout,
            )
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PMFAST_SWEEP ")), None)
            if line is not None:
                record = json.loads(line.removeprefix("PMFAST_SWEEP "))
            else:
                record = {"status": "crash", "returncode": proc.returncode, "message": proc.stderr[-500:]}
        except subprocess.TimeoutExpired:
            record = {"status": "timeout", "message": f"over {args.timeout:.0f} s"}
        record.update(model=path.stem, wall_s=time.perf_counter() - t0, load=os.getloadavg()[0])
        records.append(record)
        detail = (
            f"compile {record['compile_s']:.1f} s (CPU {record['compile_cpu_s']:.1f}), parity {record['parity']:.1e}"
            if record["status"] == "ok"
            else record.get("message", "")[:160].replace("\n", " ")
        )
        print(f"[{i}/{len(paths)}] {path.stem}: {record['status']} {detail}", flush=True)
        if args.json:
            args.json.write_text(json.dumps({"catalogue": str(args.catalogue), "records": records}, indent=1))

    print(summary(records))
    return 0


def summary(records: list[dict]) -> str:
    """Counts by outcome, the compile-time distribution, the slowest compiles, and what failed."""
    by = {}
    for r in records:
        by.setdefault(r["status"], []).append(r)
    lines = [", ".join(f"{k} {len(v)}" for k, v in sorted(by.items()))]
    ok = by.get("ok", [])
    if ok:
        cpu = sorted(r["compile_cpu_s"] for r in ok)
        lines.append(
            f"compile CPU s over {len(ok)}: median {statistics.median(cpu):.1f}, 90th percentile {cpu[max(0, -(-9 * len(cpu) // 10) - 1)]:.1f}, "
            f"max {cpu[-1]:.1f}; over 10 s: {sum(c > 10 for c in cpu)}"
        )
        lines.append("slowest: " + ", ".join(f"{r['model']} {r['compile_cpu_s']:.1f}" for r in sorted(ok, key=lambda r: -r["compile_cpu_s"])[:10]))
        bad = [r for r in ok if r["mismatch"]]
        lines.append(f"parity above {PARITY:g}: " + (", ".join(f"{r['model']} {r['parity']:.1e}" for r in bad) or "none"))
    for status in ("error", "crash", "timeout"):
        for r in by.get(status, []):
            lines.append(f"{status}: {r['model']}: {r.get('message', '')[:300]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
