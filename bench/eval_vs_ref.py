"""Kernel eval of this checkout vs a reference checkout (e.g. main), normalised by stock.

    python bench/eval_vs_ref.py --ref-python /path/to/ref-venv/bin/python [MODELS...] [--rounds 3] [--json FILE]

Two installs can't share a process, so each round runs ``python -m pmfast.bench
MODEL --pair`` (stock and pmfast timed alternately on the thread CPU clock)
once with each interpreter; the figure compared is each side's pmfast/stock
eval ratio (stock is the same code in both, which cancels the machine's load).
Reports the median over rounds of ``ratio(this) / ratio(ref)`` per model:
above 1.05 means this checkout's kernel is more than 5% slower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from pmfast import models

SIZES = {"wide_additive": "wide_additive:n=12"}


def pair(python: str, spec: str, repeats: int, compiledir: str) -> dict:
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
    cmd = [python, "-m", "pmfast.bench", spec, "--pair", "--repeats", str(repeats)]
    # a neutral working directory: each interpreter imports its own install, not a checkout in the cwd
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if out.returncode:
        raise RuntimeError(f"{python} {spec}: {out.stdout[-500:]} {out.stderr[-500:]}")
    times = json.loads(out.stdout.strip().splitlines()[-1])
    return {side: statistics.median(t) for side, t in times.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(models.ZOO))
    ap.add_argument("--ref-python", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dirs = {side: tempfile.mkdtemp(prefix=f"pmfast-eval-{side}-") for side in ("this", "ref")}
    pythons = {"this": sys.executable, "ref": args.ref_python}
    rows = []
    print(f"{'model':<28}{'stock µs':>10}{'this µs':>10}{'ref µs':>10}{'this/ref':>10}  per round")
    for name in args.models:
        spec = SIZES.get(name, name)
        rounds = []
        for _ in range(args.rounds):
            r = {side: pair(pythons[side], spec, args.repeats, dirs[side]) for side in ("this", "ref")}
            rounds.append(r)
        rel = [(r["this"]["pmfast"] / r["this"]["stock"]) / (r["ref"]["pmfast"] / r["ref"]["stock"]) for r in rounds]
        row = {
            "model": spec,
            "this_over_ref": statistics.median(rel),
            "rounds": rounds,
            "stock_us": statistics.median(r["this"]["stock"] for r in rounds),
            "this_us": statistics.median(r["this"]["pmfast"] for r in rounds),
            "ref_us": statistics.median(r["ref"]["pmfast"] for r in rounds),
        }
        rows.append(row)
        print(
            f"{spec:<28}{row['stock_us']:10.2f}{row['this_us']:10.2f}{row['ref_us']:10.2f}{row['this_over_ref']:10.3f}  "
            + " ".join(f"{x:.3f}" for x in rel),
            flush=True,
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
