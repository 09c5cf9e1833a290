"""The vector_math pass on zoo models: parity with stock and logp+grad time, switch on and off.

    python bench/vmath_zoo.py [MODEL ...] [--repeats 7] [--json out.json]

    python bench/vmath_zoo.py --compile [MODEL ...] [--repeats 3]

MODEL is a zoo name or spec (``wide_additive:n=12``), as for ``pmfast bench``.
``--compile``: cold compile of all passes with the switch on and off instead, each in a
fresh process with a fresh, empty pytensor compile directory (the vmath kernels' own
cache is left warm: they compile once per install); wall and process CPU seconds of
``pmfast.logp_dlogp_function`` plus the first call, medians, the two settings alternating.

Per model, five kernels compiled in this process: ``stock`` (no pmfast pass),
``vmath`` (the vector_math pass alone: stock Elemwise loops with vmath bodies),
``pmfast-libm`` (all passes, ``pmfast.vmath`` disabled), ``pmfast`` (all passes) and
``no-fused`` (all passes but indexed_elemwise, whose fused loops stay scalar).
Parity: relative logp difference and max |grad diff| / max |grad| against stock, at
the initial point and at a typical point (initial point + seeded N(0, 0.3) noise).
Times: ``fn.vm.jit_fn`` in a numba loop (:func:`pmfast.bench.time_calls`) at the typical
point, on this thread's CPU clock, the kernels alternating; medians of the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

DEFAULT = ("hier_logistic", "bradley_terry", "irt_2pl", "stoch_vol", "poisson_offset")
SIDES = ("stock", "vmath", "pmfast-libm", "pmfast", "no-fused")


def _parity(got, ref) -> tuple[float, float]:
    (lp, g), (rlp, rg) = got, ref
    g, rg = np.asarray(g).ravel(), np.asarray(rg).ravel()
    logp = abs(float(lp) - float(rlp)) / max(abs(float(rlp)), 1e-300)
    grad = float(np.abs(g - rg).max(initial=0.0) / max(np.abs(rg).max(initial=0.0), 1e-300))
    return logp, grad


def measure(name: str, repeats: int) -> dict:
    import pmfast
    import pmfast.vmath as vm
    from pmfast.bench import time_calls
    from pmfast.loading import load_model

    model, _ = load_model(name)
    fns = {}
    no_fused = [p.name for p in pmfast.passes.available() if p.name != "indexed_elemwise"]
    for side, passes, on in (("stock", "none", True), ("vmath", ["vector_math"], True),
                             ("pmfast-libm", "all", False), ("pmfast", "all", True), ("no-fused", no_fused, True)):
        if on:
            fns[side] = pmfast.logp_dlogp_function(model, passes)
        else:
            with vm.disabled():
                fns[side] = pmfast.logp_dlogp_function(model, passes)
    x0 = fns["stock"][1]
    x1 = x0 + 0.3 * np.random.default_rng(0).normal(size=x0.shape)
    res = {"model": name, "n_dim": int(x0.size), "parity": {}, "fired": pmfast.fired(fns["pmfast"][0]).get("vector_math", 0)}
    for side, (fn, _) in fns.items():
        if side != "stock":
            res["parity"][side] = max(
                (_parity(fn(x), fns["stock"][0](x)) for x in (x0, x1)), key=lambda p: max(p)
            )
    args = {side: (fn.vm.jit_fn, pmfast.kernel_args(fn, x1)) for side, (fn, _) in fns.items()}
    times = {side: [] for side in fns}
    for _ in range(repeats):
        for side, (jit_fn, a) in args.items():
            times[side].append(time_calls(jit_fn, a, repeats=1)[0][0])
    res["eval_us"] = {side: statistics.median(t) for side, t in times.items()}
    return res


def compile_worker(name: str) -> dict:
    import time

    t_wall, t_cpu = time.perf_counter(), time.process_time()
    import pmfast
    from pmfast.loading import load_model

    model, _ = load_model(name)
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    fn, x0 = pmfast.logp_dlogp_function(model, "all")
    fn.vm.jit_fn(*pmfast.kernel_args(fn, x0))
    return {"wall_s": time.perf_counter() - t_wall, "cpu_s": time.process_time() - t_cpu,
            "fired": pmfast.fired(fn).get("vector_math", 0)}


def compile_times(name: str, repeats: int) -> dict:
    import os
    import subprocess
    import sys
    import tempfile

    runs: dict = {"on": [], "off": []}
    for _ in range(repeats):
        for setting in runs:
            with tempfile.TemporaryDirectory(prefix="pmfast-vmath-compile-") as d:
                env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={d}",
                       "PMFAST_VECTOR_MATH": "1" if setting == "on" else "0"}
                out = subprocess.run([sys.executable, __file__, "--compile-worker", name], env=env,
                                     capture_output=True, text=True)
                if out.returncode:
                    raise RuntimeError(f"{name}: {out.stderr.strip().splitlines()[-1:]}")
                runs[setting].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {setting: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "fired")}
            for setting, rs in runs.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    ap.add_argument("--compile", action="store_true", help="cold compile, switch on vs off")
    ap.add_argument("--compile-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.compile_worker:
        print(json.dumps(compile_worker(args.compile_worker)))
        return
    rows = []
    if args.compile:
        print(f"{'model':<28} {'vmath':>6} {'on cpu s':>9} {'off cpu s':>9} {'ratio':>6}   {'on wall':>8} {'off wall':>8}")
        for name in args.models:
            r = compile_times(name, args.repeats)
            rows.append({"model": name, **r})
            on, off = r["on"], r["off"]
            print(f"{name:<28} {on['fired']:>6} {on['cpu_s']:9.2f} {off['cpu_s']:9.2f} {on['cpu_s'] / off['cpu_s']:6.2f}"
                  f"   {on['wall_s']:8.2f} {off['wall_s']:8.2f}", flush=True)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)
        return
    print(f"{'model':<16} {'stock µs':>9} {'vmath':>7} {'pmfast-libm':>11} {'pmfast':>7} {'no-fused':>8}   "
          f"max parity vs stock (logp, grad)")
    for name in args.models:
        r = measure(name, args.repeats)
        rows.append(r)
        t = r["eval_us"]
        lp, gr = (max(r["parity"][s][i] for s in SIDES[1:]) for i in (0, 1))
        print(f"{name:<16} {t['stock']:9.1f} {t['vmath'] / t['stock']:7.3f} {t['pmfast-libm'] / t['stock']:11.3f}"
              f" {t['pmfast'] / t['stock']:7.3f} {t['no-fused'] / t['stock']:8.3f}   {lp:.1e}, {gr:.1e}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
