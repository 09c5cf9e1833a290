"""Stock Elemwise lowering with pmfast.vmath bodies: two graphs, and what each part of the lowering buys.

    python bench/vmath_graphs.py [--repeats 7]

Graphs: ``exp(2*x*y + y)`` on (200, 500) matrices (a map), and a logistic regression's
logp and gradient, ``(y*eta - softplus(eta)).sum()`` with ``eta = X @ b``, X (100000, 4).
Sides, each compiled in this process and timed alternately (``fn.vm.jit_fn`` in a numba
loop, this thread's CPU clock, medians): ``stock`` (no pass); ``vmath ops only`` (the
vmath scalar ops in pytensor's own lowering: body not inlined, inputs as they come);
``+ inlined body``; ``+ contiguous inputs`` (= the ``vector_math`` pass).
"""

from __future__ import annotations

import argparse
import statistics


def graphs():
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    rng = np.random.default_rng(0)
    x, y = pt.matrices("x", "y")
    yield "exp(2*x*y + y), (200, 500)", [x, y], [pt.exp(2 * x * y + y)], (rng.normal(size=(200, 500)),) * 2
    b, X, yy = pt.vector("b"), pt.matrix("X"), pt.vector("y")
    eta = X @ b
    logp = (yy * eta - pt.softplus(eta)).sum()
    data = (0.3 * rng.normal(size=4), rng.normal(size=(100_000, 4)), rng.integers(0, 2, 100_000).astype(float))
    yield "logistic regression logp+grad, X (100000, 4)", [b, X, yy], [logp, pytensor.grad(logp, b)], data


def main(argv=None) -> None:
    import numpy as np
    import pytensor

    import pmfast.vmath.elemwise as ve
    from pmfast.bench import time_calls
    from pmfast.mode import get_mode

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    sides = (("stock", "none", True, True), ("vmath ops only", ["vector_math"], False, False),
             ("+ inlined body", ["vector_math"], True, False), ("+ contiguous inputs", ["vector_math"], True, True))
    for title, ins, outs, vals in graphs():
        fns = {}
        for side, passes, inline, contiguous in sides:
            ve.INLINE_BODY, ve.CONTIGUOUS_INPUTS = inline, contiguous
            fns[side] = pytensor.function(ins, outs, mode=get_mode(passes))
            fns[side](*vals)
        ve.INLINE_BODY = ve.CONTIGUOUS_INPUTS = True
        ref = fns["stock"](*vals)
        times = {side: [] for side in fns}
        for _ in range(args.repeats):
            for side, fn in fns.items():
                times[side].append(time_calls(fn.vm.jit_fn, vals, repeats=1)[0][0])
        print(title)
        for side, fn in fns.items():
            t = statistics.median(times[side])
            diff = max(float(np.max(np.abs(a - r) / np.maximum(np.abs(r), 1e-300))) for a, r in zip(fn(*vals), ref))
            print(f"  {side:<22} {t:9.1f} µs  {t / statistics.median(times['stock']):6.3f}   max rel diff {diff:.1e}")


if __name__ == "__main__":
    main()
