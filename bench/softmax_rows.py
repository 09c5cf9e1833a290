"""Benchmark of the ``softmax_rows`` pass: a categorical logp and its gradient, stock vs pmfast.

    PYTHONPATH=. python bench/softmax_rows.py [--rows 2000] [--classes 20] [--repeats 7]

Both functions are compiled in this process (no cross-side cache effects: the graphs
differ); kernel time is ``fn.vm.jit_fn`` called in a numba loop, median of the repeats.
"""

from __future__ import annotations

import argparse
import statistics


def main(argv=None) -> None:
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    from pmfast.bench import time_calls
    from pmfast.mode import get_mode

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)

    x = pt.matrix("x")
    y = pt.vector("y", dtype="int64")
    logp = pt.special.log_softmax(x, axis=-1)[pt.arange(x.shape[0]), y].sum()
    outs = [logp, pytensor.grad(logp, x)]
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(args.rows, args.classes)), rng.integers(0, args.classes, args.rows))
    res = {}
    for side, mode in (("stock", get_mode("none")), ("pmfast", get_mode(["softmax_rows"]))):
        fn = pytensor.function([x, y], outs, mode=mode)
        times, _, _ = time_calls(fn.vm.jit_fn, data, repeats=args.repeats)
        res[side] = (statistics.median(times), fn(*data))
    (a, ra), (b, rb) = res["stock"], res["pmfast"]
    diff = max(float(np.max(np.abs(u - v) / np.maximum(np.abs(u), 1e-300))) for u, v in zip(ra, rb))
    print(f"categorical logp+grad, logits ({args.rows}, {args.classes})")
    print(f"  stock  {a:9.1f} µs\n  pmfast {b:9.1f} µs   ratio {b / a:.3f}   max rel diff {diff:.1e}")


if __name__ == "__main__":
    main()
