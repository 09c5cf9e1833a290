"""Where a pmfast.vmath loop starts beating libm: one Elemwise ``f(x)`` per function and vector length.

    python bench/vmath_crossover.py [--lengths 4,8,...] [--functions exp,log1p,...] [--repeats 7]

Each function is compiled three ways: stock (libm scalar body), ``vector_math`` with
:data:`pmfast.vmath.elemwise.LIBM_BELOW` empty (always the vmath loop) and with its
default (the libm loop below that length). ``x`` has no static length (like ``pm.Data``).
Times: µs per call of the compiled function, medians of the repeats on this thread's CPU
clock, the three variants interleaved. This measured the crossover that sets ``LIBM_BELOW``:
LLVM widens the vmath loop 8 doubles at a time and interleaves it, so a short loop runs
mostly in its scalar remainder, where the inlined kernels are slower than libm.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

FUNCTIONS = {
    "exp": lambda pt, x: pt.exp(x),
    "log": lambda pt, x: pt.log(pt.abs(x) + 0.5),
    "log1p": lambda pt, x: pt.log1p(pt.abs(x)),
    "softplus": lambda pt, x: pt.softplus(x),
    "sigmoid": lambda pt, x: pt.sigmoid(x),
    "erf": lambda pt, x: pt.erf(x),
    "erfc": lambda pt, x: pt.erfc(x),
    "logistic": lambda pt, x: (lambda s: 3.0 * pt.log(s) + 5.0 * pt.log1p(-s))(pt.sigmoid(x)),
    "poisson": lambda pt, x: 3.0 * x - pt.exp(x) - pt.log(pt.abs(x) + 1.0),
    # golf putting's shape: a probability from erf, then a binomial's log(p) and log1p(-p)
    "binomial_erf": lambda pt, x: (lambda p: 3.0 * pt.log(p) + 5.0 * pt.log1p(-p))(0.5 + 0.49 * pt.erf(x)),
}


def compile_variants(name: str) -> dict:
    import pytensor
    import pytensor.tensor as pt

    import pmfast.vmath.elemwise as ve
    from pmfast.mode import get_mode

    x = pt.vector("x", dtype="float64")
    out = FUNCTIONS[name](pt, x)
    fns = {"stock": pytensor.function([x], out, mode=get_mode("none"))}
    default = ve.LIBM_BELOW
    try:
        ve.LIBM_BELOW = {}
        fns["vmath"] = pytensor.function([x], out, mode=get_mode("vector_math"))
    finally:
        ve.LIBM_BELOW = default
    fns["branch"] = pytensor.function([x], out, mode=get_mode("vector_math"))
    return {k: f.vm.jit_fn for k, f in fns.items()}


def main(argv=None) -> None:
    from pmfast.bench import time_calls

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4,8,12,16,24,31,32,48,64,128")
    ap.add_argument("--functions", default=",".join(FUNCTIONS))
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    lengths = [int(n) for n in args.lengths.split(",")]
    rng = np.random.default_rng(0)
    print(f"{'function':<14}{'n':>5}{'stock µs':>10}{'vmath ×':>9}{'branch ×':>10}")
    for name in args.functions.split(","):
        fns = compile_variants(name)
        for n in lengths:
            x = rng.uniform(-2.0, 2.0, n)
            times = {k: [] for k in fns}
            for _ in range(args.repeats):
                for k, f in fns.items():
                    times[k].append(time_calls(f, (x,), repeats=1, seconds=0.02)[0][0])
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{name:<14}{n:>5}{med['stock']:>10.3f}{med['vmath'] / med['stock']:>9.2f}{med['branch'] / med['stock']:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
