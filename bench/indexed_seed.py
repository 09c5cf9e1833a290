"""Seed benchmark of the ``indexed_elemwise`` pass.

``out = ((x[idx] - value)**2).sum()`` and ``grad(out, x)``, x: 15, idx/value: 10,000.
Times the whole compiled graph as nutpie calls it (``fn.vm.jit_fn(*args)``),
stock NUMBA vs pmfast ``indexed_elemwise`` vs a hand-written single ``@njit``
loop doing the same work, side by side in one process.

    PYTHONPATH=. python bench/indexed_seed.py [--calls 2000] [--repeats 7] [--clock wall|cpu]
    PYTHONPATH=. python bench/indexed_seed.py zoo [MODEL ...]    # zoo kernels, CPU clock
    PYTHONPATH=. python bench/indexed_seed.py indexing           # general integer-array indexing, CPU clock
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np


@numba.njit(cache=True)
def hand_loop(x, idx, value):
    """The reference: one pass, gather + square + sum + scatter-add of the gradient."""
    n = x.shape[0]
    grad = np.zeros(n)
    total = 0.0
    for i in range(idx.shape[0]):
        j = idx[i]
        if j < 0:
            j += n
        if j < 0 or j >= n:
            raise IndexError("index out of bounds")
        d = x[j] - value[i]
        total += d * d
        grad[j] += 2.0 * d
    return np.asarray(total), grad


def build(passes):
    import pytensor
    import pytensor.tensor as pt

    from pmfast.mode import get_mode

    x = pt.dvector("x")
    idx = pt.lvector("idx")
    value = pt.dvector("value")
    out = ((x[idx] - value) ** 2).sum()
    return pytensor.function([x, idx, value], [out, pytensor.grad(out, x)], mode=get_mode(passes))


def time_us(f, args, calls, repeats, clock=time.perf_counter):
    f(*args)
    ts = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(calls):
            f(*args)
        ts.append((clock() - t0) / calls * 1e6)
    return float(np.median(ts))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=15)
    ap.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: time.perf_counter; cpu: time.process_time (robust to other processes on a shared machine)",
    )
    a = ap.parse_args(argv)
    clock = time.perf_counter if a.clock == "wall" else time.process_time

    import pmfast.passes.indexed_matching as im
    from pmfast.passes import fired

    rng = np.random.default_rng(0)
    args = (rng.normal(size=a.groups), rng.integers(0, a.groups, a.n), rng.normal(size=a.n))
    stock = build("none")
    fused = build(["indexed_elemwise"])
    im.FUSE_SUM = False
    try:
        fused_nosum = build(["indexed_elemwise"])
    finally:
        im.FUSE_SUM = True
    assert fired(fused).get("indexed_elemwise"), "pass did not fire"
    ref = hand_loop(*args)
    for f in (stock, fused, fused_nosum):
        got = f.vm.jit_fn(*args)
        np.testing.assert_allclose(got[0], ref[0], rtol=1e-9)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-9)

    variants = {
        "stock": stock.vm.jit_fn,
        "pmfast": fused.vm.jit_fn,
        "pmfast (no sum)": fused_nosum.vm.jit_fn,
        "hand loop": hand_loop,
    }
    # interleave the variants so that machine noise hits them alike
    res = {k: [] for k in variants}
    for _ in range(a.rounds):
        for k, f in variants.items():
            res[k].append(time_us(f, args, a.calls, a.repeats, clock))
    best = {k: float(np.min(v)) for k, v in res.items()}
    med = {k: float(np.median(v)) for k, v in res.items()}
    print(f"clock={a.clock}  n={a.n} groups={a.groups}  {a.rounds} rounds x {a.repeats} repeats x {a.calls} calls")
    print(f"{'variant':<16} {'best us':>8} {'median us':>10}   ratios (best)")
    for k in variants:
        ratios = f"/stock {best[k] / best['stock']:.3f}  /hand {best[k] / best['hand loop']:.3f}"
        print(f"{k:<16} {best[k]:8.2f} {med[k]:10.2f}   {ratios}")
    return best


def zoo(names, clock=time.process_time, calls=200, repeats=5, rounds=3):
    """Zoo models' logp+grad kernels (``fn.vm.jit_fn``), stock vs the pass alone."""
    from pmfast import models
    import pmfast

    rows = []
    for name in names:
        model = models.load(name)()
        stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
        fast, _ = pmfast.logp_dlogp_function(model, passes=["indexed_elemwise"])
        a_s, a_f = pmfast.kernel_args(stock, x0), pmfast.kernel_args(fast, x0)
        res = {"stock": [], "pmfast": []}
        for _ in range(rounds):
            res["stock"].append(time_us(stock.vm.jit_fn, a_s, calls, repeats, clock))
            res["pmfast"].append(time_us(fast.vm.jit_fn, a_f, calls, repeats, clock))
        s, f = min(res["stock"]), min(res["pmfast"])
        ms, mf = float(np.median(res["stock"])), float(np.median(res["pmfast"]))
        print(
            f"{name:20s} stock {s:9.1f} us  pmfast {f:9.1f} us  ratio {f / s:.3f}"
            f"   (medians {ms:9.1f} / {mf:9.1f} us, ratio {mf / ms:.3f})",
            flush=True,
        )
        rows.append((name, s, f))
    return rows


def _indexing_graphs(rng):
    """``(name, inputs, outputs, args)``: cost + gradient through general integer-array indexing."""
    import pytensor
    import pytensor.tensor as pt

    out = []
    x, y = pt.dmatrix("x"), pt.dmatrix("y")
    idx = pt.lvector("idx")
    cost = (pt.exp(x[:, idx]) * y).sum()
    args = (rng.normal(size=(100, 15)), rng.integers(0, 15, 200), rng.normal(size=(100, 200)))
    out.append(("x[:, idx] 100x200", [x, idx, y], [cost, pytensor.grad(cost, x)], args))
    i, j, w = pt.lvector("i"), pt.lvector("j"), pt.dvector("w")
    cost = ((x[i, j] - w) ** 2).sum()
    n = 10_000
    args = (rng.normal(size=(20, 30)), rng.integers(0, 20, n), rng.integers(0, 30, n), rng.normal(size=n))
    out.append(("x[i, j] 10k (loose)", [x, i, j, w], [cost, pytensor.grad(cost, x)], args))
    cost = ((x[i, pt.specify_shape(j, i.shape)] - w) ** 2).sum()
    out.append(("x[i, j] 10k (proven)", [x, i, j, w], [cost, pytensor.grad(cost, x)], args))
    cost = (pt.tanh(x[i[:, None], j]) * y).sum()
    args = (rng.normal(size=(20, 30)), rng.integers(0, 20, 100), rng.integers(0, 30, 100), rng.normal(size=(100, 100)))
    out.append(("x[i[:, None], j] 100x100", [x, i, j, y], [cost, pytensor.grad(cost, x)], args))
    return out


def indexing(clock=time.process_time, calls=500, repeats=5, rounds=3):
    """Stock vs the pass on general integer-array indexing (cost and gradient), ``fn.vm.jit_fn``."""
    import pytensor

    from pmfast.mode import get_mode

    rows = []
    for name, inputs, outputs, args in _indexing_graphs(np.random.default_rng(0)):
        stock = pytensor.function(inputs, outputs, mode=get_mode("none"))
        fast = pytensor.function(inputs, outputs, mode=get_mode(["indexed_elemwise"]))
        for g, w in zip(fast.vm.jit_fn(*args), stock.vm.jit_fn(*args)):
            np.testing.assert_allclose(g, w, rtol=1e-9)
        res = {"stock": [], "pmfast": []}
        for _ in range(rounds):
            res["stock"].append(time_us(stock.vm.jit_fn, args, calls, repeats, clock))
            res["pmfast"].append(time_us(fast.vm.jit_fn, args, calls, repeats, clock))
        s, f = min(res["stock"]), min(res["pmfast"])
        print(f"{name:26s} stock {s:9.1f} us  pmfast {f:9.1f} us  ratio {f / s:.3f}", flush=True)
        rows.append((name, s, f))
    return rows


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1 and sys.argv[1] == "zoo":
        zoo(sys.argv[2:] or ["radon_intercept", "radon_slope", "crossed_effects", "irt_2pl", "bradley_terry"])
    elif len(sys.argv) > 1 and sys.argv[1] == "indexing":
        indexing()
    else:
        main()
