"""Side-by-side timing of the ``scan_dedup`` pass (stock NUMBA pipeline vs + scan_dedup).

Run:  python bench/scan_dedup.py            (from /work/main; ~1-2 min, mostly numba compile)
      python bench/scan_dedup.py --repeats 15 --models

Times the kernel the way nutpie calls it: ``fn.vm.jit_fn(*inputs)``. Both
variants are compiled in one process; timing alternates stock/pmfast batch by
batch (each batch loops enough calls to last >= ~20 ms) for ``--repeats``
rounds; the table shows the median and the minimum per-call time of the rounds
(on a shared machine the minimum is the more stable figure).
Results are checked equal (rtol 1e-12; models: logp and gradient rel <= 1e-10)
before timing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _scan_counts(fn):
    from pytensor.scan.op import Scan

    ops = [n.op for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    return [(o.info.n_mit_sot, o.info.n_sit_sot, o.info.n_nit_sot) for o in ops]


def _batch(jit, args, n):
    t0 = time.perf_counter()
    for _ in range(n):
        jit(*args)
    return (time.perf_counter() - t0) / n


def _side_by_side(kernels, repeats):
    """Seconds per call for each ``name -> (jit_fn, args)``: batches of >= ~20 ms, variants
    interleaved batch by batch; per variant the median over ``repeats`` rounds and the minimum."""
    ns = {}
    for k, (jit, args) in kernels.items():
        jit(*args)
        ns[k] = max(1, int(0.02 / max(_batch(jit, args, 1), 1e-7)))
    times = {k: [] for k in kernels}
    for _ in range(repeats):
        for k, (jit, args) in kernels.items():
            times[k].append(_batch(jit, args, ns[k]))
    return {k: (float(np.median(v)), float(np.min(v))) for k, v in times.items()}


def two_trace(n=1000, steps=1000):
    """``def step(x, y): return exp(x) - 5, exp(y) - 5`` with ``outputs_info=[x0, x0]``; logp-like scalar output."""
    import pytensor
    import pytensor.tensor as pt

    x0 = pt.vector("x0")
    (a, b), _ = pytensor.scan(
        lambda x, y: (pt.exp(x) - 5, pt.exp(y) - 5), outputs_info=[x0, x0], n_steps=steps, return_updates=True
    )
    out = (a**2).sum() + (2 * b).sum()
    val = np.linspace(-1.0, 1.0, n) * 0.1
    return f"two-trace sit-sot, state {n}, {steps} steps", [x0], [out], [val]


def two_trace_outputs(n=1000, steps=1000):
    """The same two traces returned as outputs (both full traces)."""
    import pytensor
    import pytensor.tensor as pt

    x0 = pt.vector("x0")
    (a, b), _ = pytensor.scan(
        lambda x, y: (pt.exp(x) - 5, pt.exp(y) - 5), outputs_info=[x0, x0], n_steps=steps, return_updates=True
    )
    val = np.linspace(-1.0, 1.0, n) * 0.1
    return f"two-trace, both traces returned, state {n}, {steps} steps", [x0], [a, b], [val]


def forward_and_rop(n=1000, steps=1000):
    """A forward scan and its forward-mode (Rop) scan; scan_merge fuses them, the shared state is deduped."""
    import pytensor
    import pytensor.tensor as pt

    x0 = pt.vector("x0")
    v = pt.vector("v")
    a, _ = pytensor.scan(lambda x: pt.exp(x) * 0.1 + 0.1, outputs_info=[x0], n_steps=steps, return_updates=True)
    # Scan.R_op builds one forward scan carrying the primal state and its tangent;
    # scan_merge concatenates it with the forward scan (the primal state twice).
    jv = pytensor.gradient.Rop(a, x0, v, use_op_rop_implementation=True)
    out = (a**2).sum() + jv.sum()
    val = np.linspace(-1.0, 1.0, n) * 0.1
    return f"forward scan + its Rop scan, state {n}, {steps} steps", [x0, v], [out], [val, np.ones(n)]


def forward_and_grad(n=1000, steps=1000):
    """A forward scan and its reverse-mode gradient scan (logp + dlogp, as nutpie evaluates)."""
    import pytensor
    import pytensor.tensor as pt

    x0 = pt.vector("x0")
    a, _ = pytensor.scan(lambda x: pt.exp(x) * 0.1 + 0.1, outputs_info=[x0], n_steps=steps, return_updates=True)
    logp = (a**2).sum()
    g = pytensor.grad(logp, x0)
    val = np.linspace(-1.0, 1.0, n) * 0.1
    return f"forward scan + its gradient scan, state {n}, {steps} steps", [x0], [logp, g], [val]


CASES = [two_trace, two_trace_outputs, forward_and_rop, forward_and_grad]


def run_graph_case(case, repeats):
    import pytensor

    import pmfast
    import pmfast.passes.scan_dedup  # noqa: F401

    name, ins, outs, vals = case()
    fs = {
        "stock": pytensor.function(ins, outs, mode=pmfast.get_mode("none")),
        "pmfast": pytensor.function(ins, outs, mode=pmfast.get_mode(["scan_dedup"])),
    }
    res = {k: f(*vals) for k, f in fs.items()}
    for r0, r1 in zip(res["stock"], res["pmfast"], strict=True):
        np.testing.assert_allclose(r1, r0, rtol=1e-12, atol=0)
    t = _side_by_side({k: (f.vm.jit_fn, vals) for k, f in fs.items()}, repeats)
    return name, _scan_counts(fs["stock"]), _scan_counts(fs["pmfast"]), t["stock"], t["pmfast"]


def run_model(module, repeats, **kwargs):
    import importlib

    import pmfast

    model = importlib.import_module(f"models.{module}").build_model(**kwargs)
    fn_s, x0 = pmfast.logp_dlogp_function(model, passes="none")
    fn_p, _ = pmfast.logp_dlogp_function(model, passes=["scan_dedup"])
    args = pmfast.kernel_args(fn_s, x0)
    rs, rp = fn_s.vm.jit_fn(*args), fn_p.vm.jit_fn(*pmfast.kernel_args(fn_p, x0))
    for a, b in zip(rs, rp, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        rel = np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-300)) if a.size else 0.0
        assert rel <= 1e-10, (module, rel)
    t = _side_by_side({"stock": (fn_s.vm.jit_fn, args), "pmfast": (fn_p.vm.jit_fn, pmfast.kernel_args(fn_p, x0))}, repeats)
    label = module + "".join(f" {k}={v}" for k, v in kwargs.items())
    return f"model {label} (logp+dlogp)", _scan_counts(fn_s), _scan_counts(fn_p), t["stock"], t["pmfast"]


def main():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--models", action="store_true", help="also the zoo models ar2_scan, two_trace_scan")
    args = ap.parse_args()
    rows = [run_graph_case(c, args.repeats) for c in CASES]
    if args.models:
        rows += [
            run_model("ar2_scan", args.repeats),
            run_model("two_trace_scan", args.repeats),
            run_model("two_trace_scan", args.repeats, shared_rate=False),
        ]
    print(f"{'case':<56} {'scans stock (mit,sit,nit)':<27} {'scans pmfast':<27} "
          f"{'stock µs':>9} {'pmfast µs':>9} {'ratio':>5}   {'min: stock':>10} {'pmfast':>9} {'ratio':>5}")
    for name, cs, cp, (ms, ns), (mp, np_) in rows:
        print(f"{name:<56} {str(sorted(cs)):<27} {str(sorted(cp)):<27} "
              f"{ms * 1e6:>9.1f} {mp * 1e6:>9.1f} {mp / ms:>5.2f}   {ns * 1e6:>10.1f} {np_ * 1e6:>9.1f} {np_ / ns:>5.2f}")


if __name__ == "__main__":
    main()
