"""The data_hoist pass on one model: per-gradient entry time with and without it, stock beside, and parity.

    python bench/data_hoist.py MODEL [--repeats 7] [--points 3]

Compiles the logp+grad function three ways (stock ``"none"``; pmfast's passes without
``data_hoist``; all passes) and times the three entries alternately at ``--points`` typical points
(the initial point plus N(0, 0.3) noise; thread CPU clock, median of the repeats), as
``pmfast bench`` times its eval column. Parity: relative logp and gradient differences of each
pmfast side against stock at every point.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--points", type=int, default=3)
    args = parser.parse_args(argv)

    import pmfast
    from pmfast.bench import bench_points, entry_timer, time_calls
    from pmfast.loading import load_model
    from pmfast.passes import data_hoist

    model, _ = load_model(args.model)
    without = [p.name for p in pmfast.passes.available() if p.name != data_hoist.PASS_NAME]
    stock, x0 = pmfast.logp_dlogp_function(model, "none")
    sides = {"stock": stock, "no_hoist": pmfast.logp_dlogp_function(model, without)[0], "hoist": pmfast.logp_dlogp_function(model, "all")[0]}
    print("hoisted:", pmfast.fired(sides["hoist"]).get(data_hoist.PASS_NAME, 0), "outputs")
    timers = {"stock": lambda x, r=1: time_calls(stock.vm.jit_fn, pmfast.kernel_args(stock, x), repeats=r)[0]}
    evals = {}
    for name in ("no_hoist", "hoist"):
        evals[name], timers[name] = entry_timer(sides[name])
    points = bench_points(x0, "typical", n=args.points)
    for k, x in enumerate(points):
        ref_logp, ref_grad = stock(x)
        for name in ("no_hoist", "hoist"):
            logp, grad = evals[name](x)
            dl = abs(float(logp) - float(ref_logp)) / max(abs(float(ref_logp)), 1e-300)
            dg = np.max(np.abs(grad - ref_grad)) / max(np.max(np.abs(ref_grad)), 1e-300)
            print(f"point {k} {name:>8}: logp rel {dl:.1e}, grad rel {dg:.1e}")
    times = {name: [] for name in timers}
    for r in range(args.repeats):
        for name, timer in timers.items():
            times[name] += timer(points[r % len(points)], 1)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, m in med.items():
        print(f"{name:>8}: {m:9.2f} µs per gradient ({m / med['stock']:.3f}× stock)")
    print(f"hoist / no_hoist: {med['hoist'] / med['no_hoist']:.3f}×")


if __name__ == "__main__":
    main()
