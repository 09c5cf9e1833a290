"""Every numba compile of one cold ``pmfast.compile``, and how many compile the same source.

    python bench/node_census.py MODEL [--catalogue DIR] [--top 25] [--json FILE]

Runs the compile in a fresh process with an empty pytensor/numba cache and the forked compile worker off
(``PMFAST_PARALLEL_COMPILE=0``: every compile is seen here), records each compile (a function and a
signature: ``bench/compile_profile.py`` counts functions by name) with its exclusive thread CPU, source,
cache key and the globals it reads, and prints per name: compiles, seconds, distinct sources, distinct
(source, argument types); then how many compiles repeat a source already compiled with the same
argument types (they differ only in globals: constants, literals, callees) and their seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict


def worker(spec: str, out: str) -> None:
    from numba.core import event

    import pmfast
    from pmfast.loading import load_model

    model, _ = load_model(spec)
    stack, rows = [], []

    class Listener(event.Listener):
        def on_start(self, ev):
            stack.append([ev.data["dispatcher"], ev.data.get("args"), time.thread_time(), 0.0])

        def on_end(self, ev):
            from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

            d, args, t0, child = stack.pop()
            dt = time.thread_time() - t0
            if stack:
                stack[-1][3] += dt
            f = getattr(d, "py_func", None)
            glob = {n: repr(f.__globals__[n])[:200] for n in f.__code__.co_names if n in f.__globals__} if f else {}
            rows.append({
                "name": getattr(f, "__qualname__", str(d)), "seconds": dt - child, "src": getattr(f, "__source__", None),
                "key": CACHED_SRC_FUNCTIONS.get(f) if f is not None else None, "args": str(args), "globals": glob,
            })  # fmt: skip

    event.register("numba:compile", Listener())
    c0 = time.process_time()
    pmfast.compile(model)
    with open(out, "w") as fh:
        json.dump({"cpu": time.process_time() - c0, "rows": rows}, fh)


def report(data: dict, top: int) -> None:
    rows = data["rows"]
    print(f"compile CPU {data['cpu']:.1f} s; numba compiles {len(rows)} ({sum(r['seconds'] for r in rows):.1f} s exclusive), "
          f"{len({(r['name'], r['src']) for r in rows})} distinct sources")
    by = defaultdict(list)
    for r in rows:
        by[r["name"]].append(r)
    print(f"  {'function':<44}{'compiles':>9}{'s':>7}{'sources':>9}{'src+types':>10}")
    for name, rs in sorted(by.items(), key=lambda kv: -sum(r["seconds"] for r in kv[1]))[:top]:
        print(f"  {name[:44]:<44}{len(rs):9d}{sum(r['seconds'] for r in rs):7.2f}{len({r['src'] for r in rs}):9d}"
              f"{len({(r['src'], r['args']) for r in rs}):10d}")
    seen = defaultdict(list)
    for r in rows:
        seen[(r["name"], r["src"], r["args"])].append(r)
    repeats = [r for rs in seen.values() for r in rs[1:]]
    per = defaultdict(lambda: [0, 0.0])
    for r in repeats:
        per[r["name"]][0] += 1
        per[r["name"]][1] += r["seconds"]
    print(f"  same source and types compiled again: {len(repeats)} compiles, {sum(r['seconds'] for r in repeats):.2f} s: "
          + ", ".join(f"{k} {n} ({s:.2f} s)" for k, (n, s) in sorted(per.items(), key=lambda kv: -kv[1][1])[:8]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--catalogue", help="pymc-model-catalogue checkout: a bare name loads DIR/models/NAME.py")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=2, metavar=("SPEC", "OUT"))
    args = ap.parse_args(argv)
    if args.worker:
        return worker(*args.worker)
    spec = args.model
    if args.catalogue and ":" not in spec and os.path.exists(os.path.join(args.catalogue, "models", spec + ".py")):
        spec = os.path.join(args.catalogue, "models", spec + ".py")
    with tempfile.TemporaryDirectory(prefix="pmfast-census-") as d:
        env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={d}", "NUMBA_CACHE_DIR": os.path.join(d, "numba-cache"),
               "PMFAST_PARALLEL_COMPILE": "0"}
        out = os.path.join(d, "census.json")
        subprocess.run([sys.executable, __file__, spec, "--worker", spec, out], env=env, check=True)
        with open(out) as fh:
            data = json.load(fh)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(data, fh)
    report(data, args.top)


if __name__ == "__main__":
    main()
