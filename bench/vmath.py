"""pmfast.vmath against libm (stock pytensor's numba scalar functions): a map and a reduction per function.

    python bench/vmath.py [--n 100000] [--repeats 9] [--functions exp,log,...] [--accuracy] [--json out.json]

For each function, over ``n`` values in a typical range: ``out[i] = f(x[i])`` (map) and
``s += f(x[i])`` (sum) in an ``@njit`` loop, with stock's scalar function (pytensor's
``numba_funcify`` of the scalar op: a libm call, or scipy's cython erfcx) and with the
pmfast.vmath kernel. The sum is compiled twice: with ``fastmath={"reassoc"}`` on the loop
(LLVM may then keep per-lane partial sums and vectorize) and without (the sum must stay
sequential: the loop runs one element at a time, which measures the scalar kernel).
Times are medians of the repeats on this thread's CPU clock, the variants interleaved;
the ``vector`` columns say whether the loop's LLVM IR works on vectors of doubles and
calls nothing but LLVM intrinsics (no libm: the kernel was inlined and widened).
``--accuracy`` adds the ulp table of docs/vmath.md: max error of the kernel and of stock's
function against :mod:`pmfast.vmath.reference` over its dense test sweep, and where.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import time

import numpy as np

SQRT_HALF = math.sqrt(0.5)

#: name -> (range of the inputs, stock pytensor scalar op or a formula over them)
RANGES = {
    "exp": (-20.0, 20.0),
    "expm1": (-2.0, 2.0),
    "log": (1e-3, 1e3),
    "log1p": (-0.5, 10.0),
    "softplus": (-20.0, 20.0),
    "sigmoid": (-20.0, 20.0),
    "log_sigmoid": (-20.0, 20.0),
    "erf": (-4.0, 4.0),
    "erfc": (-4.0, 10.0),
    "erfcx": (0.0, 20.0),
    "ndtr": (-8.0, 8.0),
    "log_ndtr": (-20.0, 8.0),
    "sin": (-100.0, 100.0),
    "cos": (-100.0, 100.0),
}


def stock_kernels() -> dict:
    """The scalar functions stock pytensor's numba backend compiles for each op (``numba_funcify``)."""
    import numba
    import pytensor.scalar as ps
    import pytensor.scalar.math as psm
    from pytensor.link.numba.dispatch.basic import numba_funcify

    def funcify(op):
        x = ps.float64()
        return numba_funcify(op, node=op.make_node(x))

    ops = {
        "exp": ps.exp,
        "expm1": ps.expm1,
        "log": ps.log,
        "log1p": ps.log1p,
        "softplus": psm.softplus,
        "sigmoid": psm.sigmoid,
        "erf": psm.erf,
        "erfc": psm.erfc,
        "erfcx": psm.erfcx,
        "sin": ps.sin,
        "cos": ps.cos,
    }
    k = {name: funcify(op) for name, op in ops.items()}
    softplus, erfc, erfcx = k["softplus"], k["erfc"], k["erfcx"]

    @numba.njit
    def log_sigmoid(x):  # pytensor's log_sigmoid(x) = -softplus(-x)
        return -softplus(-x)

    @numba.njit
    def ndtr(x):  # pm.math.invprobit
        return 0.5 * erfc(-x * SQRT_HALF)

    @numba.njit
    def log_ndtr(x):  # pymc's normal_lcdf(0, 1, x)
        if x < -1.0:
            return math.log(erfcx(-x * SQRT_HALF) / 2.0) - x * x / 2.0
        return math.log1p(-erfc(x * SQRT_HALF) / 2.0)

    k.update(log_sigmoid=log_sigmoid, ndtr=ndtr, log_ndtr=log_ndtr)
    return k


def loops(f):
    """``(map, sum_reassoc, sum_strict)`` njit loops calling the scalar function ``f``."""
    import numba

    def map_(x, out):
        for i in range(x.size):
            out[i] = f(x[i])

    def sum_(x):
        s = 0.0
        for i in range(x.size):
            s += f(x[i])
        return s

    return (
        numba.njit(map_),
        numba.njit(fastmath={"reassoc"})(sum_),
        numba.njit(sum_),
    )


def vectorized(dispatcher) -> bool:
    """Whether the loop's LLVM IR holds vector double operations and calls no function (all inlined)."""
    ir = dispatcher.inspect_llvm(dispatcher.signatures[0])
    body = ir.split("\ndefine ")[1].split("\n}\n")[0]  # the loop function (cpython wrapper follows)
    calls = re.findall(r"call [^@]*@([\w.$]+)", body)
    libm = re.compile(r"llvm\.(exp|exp2|exp10|log|log2|log10|pow|sin|cos|tan|erf)\b")  # lowered to libm calls
    return bool(re.search(r"<\d+ x double>", body)) and all(c.startswith("llvm.") and not libm.match(c) for c in calls)


def measure(name: str, n: int, repeats: int, stock) -> dict:
    import pmfast.vmath as vm

    lo, hi = RANGES[name]
    x = np.random.default_rng(0).uniform(lo, hi, n)
    out = np.empty_like(x)
    variants = {}
    for side, f in (("libm", stock), ("vmath", vm.KERNELS[name])):
        m, s, s_strict = loops(f)
        m(x, out)
        s(x)
        s_strict(x)
        variants[side] = {"map": (m, (x, out)), "sum": (s, (x,)), "sum_strict": (s_strict, (x,))}
    times = {(side, kind): [] for side in variants for kind in variants[side]}
    for _ in range(repeats):
        for side, kinds in variants.items():
            for kind, (fn, args) in kinds.items():
                t0 = time.thread_time()
                fn(*args)
                times[side, kind].append((time.thread_time() - t0) / n * 1e9)
    res = {"function": name, "n": n, "range": [lo, hi]}
    for (side, kind), ts in times.items():
        res[f"{side}_{kind}_ns"] = statistics.median(ts)
    for side, kinds in variants.items():
        res[f"{side}_map_vector"] = vectorized(kinds["map"][0])
        res[f"{side}_sum_vector"] = vectorized(kinds["sum"][0])
    return res


def accuracy(name: str, stock) -> dict:
    """Max ulp error (and where) of the kernel and of stock's scalar function over the test sweep."""
    import pmfast.vmath as vm
    from pmfast.vmath.reference import REFERENCES, sweep, ulp_error

    x = sweep(name, 20_000 if name in ("erf", "erfc", "erfcx", "ndtr", "log_ndtr") else 1_000_000)
    if name in ("sin", "cos"):  # the kernels' domain; beyond it they give NaN, their loops libm's value
        x = x[~(np.abs(x) > 2.0**30)]
    ref = REFERENCES[name](x)
    res = {}
    for side, f in (("vmath", vm.KERNELS[name]), ("libm", stock)):
        m, _, _ = loops(f)
        out = np.empty_like(x)
        with np.errstate(all="ignore"):
            m(x, out)
        err = ulp_error(out, ref)
        i = int(np.argmax(err))
        res[f"{side}_max_ulp"], res[f"{side}_worst_x"] = float(err[i]), float(x[i])
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--functions", default=",".join(RANGES))
    ap.add_argument("--accuracy", action="store_true", help="also print the ulp table (mpmath references: slow)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args(argv)
    stock = stock_kernels()
    rows = [measure(name, args.n, args.repeats, stock[name]) for name in args.functions.split(",")]
    if args.accuracy:
        for r in rows:
            r.update(accuracy(r["function"], stock[r["function"]]))
    print(f"n = {args.n}, ns per element, medians of {args.repeats} (thread CPU clock)")
    print(f"{'function':<12} {'libm map':>9} {'vmath map':>9} {'ratio':>6}   {'libm sum':>9} {'vmath sum':>9} {'ratio':>6}"
          f"   {'vmath scalar':>12}   vector (map, sum)")
    for r in rows:
        print(
            f"{r['function']:<12} {r['libm_map_ns']:9.2f} {r['vmath_map_ns']:9.2f} {r['vmath_map_ns'] / r['libm_map_ns']:6.2f}"
            f"   {r['libm_sum_ns']:9.2f} {r['vmath_sum_ns']:9.2f} {r['vmath_sum_ns'] / r['libm_sum_ns']:6.2f}"
            f"   {r['vmath_sum_strict_ns']:12.2f}   libm {r['libm_map_vector']!s:5} {r['libm_sum_vector']!s:5}"
            f" vmath {r['vmath_map_vector']!s:5} {r['vmath_sum_vector']!s:5}"
        )
    if args.accuracy:
        print()
        print("| function | max ulp | at x | stock max ulp (at x) | ns/elem scalar | ns/elem vectorized (map, sum) | stock ns/elem (map) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['function']} | {r['vmath_max_ulp']:.2f} | {r['vmath_worst_x']:.6g} |"
                f" {_ulp(r['libm_max_ulp'])} ({r['libm_worst_x']:.4g}) | {r['vmath_sum_strict_ns']:.1f} |"
                f" {r['vmath_map_ns']:.2f}, {r['vmath_sum_ns']:.2f} | {r['libm_map_ns']:.1f} |"
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


def _ulp(e: float) -> str:
    return "inf" if e == float("inf") else f"{e:.2f}" if e < 1e4 else f"{e:.1e}"


if __name__ == "__main__":
    main()
