"""pmfast against the hand-written limit: stock, pmfast and an expert's ``@njit`` loop, side by side.

For each model: the logp+gradient code nutpie runs, stock and pmfast, and a hand-written kernel (``bench/hand_loops.py``: one pass, libm math, no redundant
transcendentals), each checked against stock (logp and gradient to 1e-10 relative) and timed
**alternately** in this process on the timing thread's CPU clock, at points the sampler visits
(``--point typical``: the initial point plus seeded N(0, 0.3) noise; ``draw``: draws of a short
stock nutpie run), median of the repeats::

    python bench/limits.py                       # the six zoo models with indices
    python bench/limits.py bradley_terry poisson_attack_defence pairwise_probit --repeats 9
    python bench/limits.py --json out.json

Besides zoo names (``pmfast models``), two models written the common way, with plain numpy
index arrays, check that nothing is tuned to the zoo: ``poisson_attack_defence`` (40 teams,
30k games) and ``pairwise_probit`` (a per-judge scale ``exp(lj[judge])``, 60k votes).
A zoo model's ``_np`` variant (numpy indices) is timed against the hand loop of its twin.

What is timed is what the sampler runs: for stock, the graph function ``fn.vm.jit_fn``
(nutpie's cfunc calls it); for pmfast, the model's C-ABI **entry**
(:mod:`pmfast.compiler.entry`, the graph body with the gradient written into the caller's
buffer, called through its address as pmfast's sampler callback calls it). The pmfast graph
function (with its gradient Join) is shown as ``kernel`` for reference. The callback's
model-independent wrapper (dimension and finiteness checks) is left out on both sides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT = ("radon_intercept", "radon_slope", "crossed_effects", "irt_2pl", "bradley_terry", "hier_logistic")
TOL = 1e-10


def poisson_attack_defence(n_teams=40, n_games=30_000, seed=0):
    """Goals ~ Poisson(exp(intercept [+ home] + att[team] - def[opponent])), numpy index arrays."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    home = rng.integers(0, n_teams, n_games)
    away = (home + rng.integers(1, n_teams, n_games)) % n_teams
    att, dfn = 0.3 * rng.normal(size=n_teams), 0.3 * rng.normal(size=n_teams)
    yh = rng.poisson(np.exp(0.1 + 0.25 + att[home] - dfn[away]))
    ya = rng.poisson(np.exp(0.1 + att[away] - dfn[home]))
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 1.0)
        home_adv = pm.Normal("home_adv", 0.0, 1.0)
        sigma_att = pm.HalfNormal("sigma_att", 1.0)
        sigma_def = pm.HalfNormal("sigma_def", 1.0)
        a = pm.Normal("att", 0.0, sigma_att, shape=n_teams)
        d = pm.Normal("def", 0.0, sigma_def, shape=n_teams)
        pm.Poisson("home_goals", pm.math.exp(intercept + home_adv + a[home] - d[away]), observed=yh)
        pm.Poisson("away_goals", pm.math.exp(intercept + a[away] - d[home]), observed=ya)
    model._pmfast_hand_data = (home, away, yh.astype(np.float64), ya.astype(np.float64))
    return model


def pairwise_probit(n_items=100, n_judges=80, n_votes=60_000, seed=0):
    """y ~ Bernoulli(invprobit(exp(lj[judge]) * (s[a] - s[b]))), numpy index arrays."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    ia = rng.integers(0, n_items, n_votes)
    ib = (ia + rng.integers(1, n_items, n_votes)) % n_items
    judge = rng.integers(0, n_judges, n_votes)
    s_true, lj_true = rng.normal(size=n_items), 0.3 * rng.normal(size=n_judges)
    t = np.exp(lj_true[judge]) * (s_true[ia] - s_true[ib])
    from scipy.special import ndtr

    y = rng.binomial(1, ndtr(t))
    with pm.Model() as model:
        s = pm.Normal("s", 0.0, 1.0, shape=n_items)
        sigma_j = pm.HalfNormal("sigma_j", 0.5)
        lj = pm.Normal("lj", 0.0, sigma_j, shape=n_judges)
        pm.Bernoulli("y", p=pm.math.invprobit(pm.math.exp(lj[judge]) * (s[ia] - s[ib])), observed=y)
    model._pmfast_hand_data = (ia, ib, judge, y.astype(np.int64), n_items)
    return model


EXTRA = {"poisson_attack_defence": poisson_attack_defence, "pairwise_probit": pairwise_probit}


def load(name: str):
    """``(model, hand kernel, its data arguments)`` for a zoo name, its ``_np`` twin or an :data:`EXTRA` model."""
    import hand_loops

    from pmfast.loading import load_model

    if name in EXTRA:
        model = EXTRA[name]()
        consts = {"poisson_attack_defence": _poisson_const}
        data = model._pmfast_hand_data
        if name in consts:
            data = (*data, consts[name](data))
        return model, getattr(hand_loops, name), data
    model, _ = load_model(name)
    twin = name.removesuffix("_np")
    kernel, data_fn = hand_loops.HAND[twin]
    data = data_fn(model if twin == name else load_model(twin)[0])  # the _np variant: its twin's data
    return model, kernel, data


def _poisson_const(data):
    from scipy.special import gammaln

    return float(gammaln(data[2] + 1).sum() + gammaln(data[3] + 1).sum())


def rel(a, b) -> float:
    """Largest relative difference of two ``(logp, grad)`` results (grad: max |diff| / max |grad|)."""
    la, ga = float(np.asarray(a[0])), np.asarray(a[1], dtype=float).ravel()
    lb, gb = float(np.asarray(b[0])), np.asarray(b[1], dtype=float).ravel()
    d_logp = abs(la - lb) / max(abs(la), abs(lb), 1e-300)
    d_grad = np.abs(ga - gb).max(initial=0.0) / max(np.abs(ga).max(initial=0.0), np.abs(gb).max(initial=0.0), 1e-300)
    return float(max(d_logp, d_grad))


def measure(name: str, passes="all", repeats: int = 7, point: str = "typical") -> dict:
    import pmfast
    from pmfast.bench import bench_points, entry_timer, time_calls

    model, hand, data = load(name)
    sides = {}  # side -> (evaluate(x) -> (logp, grad), time(x) -> µs per call)

    def jitted(kernel, args):
        return (lambda x: kernel(*args(x)), lambda x: time_calls(kernel, args(x), repeats=1)[0][0])

    for side, selection in (("stock", "none"), ("kernel", passes)):
        fn, x0 = pmfast.logp_dlogp_function(model, selection)
        sides[side] = jitted(fn.vm.jit_fn, lambda x, fn=fn: pmfast.kernel_args(fn, x))
    evaluate, time_entry = entry_timer(fn)
    sides["pmfast"] = (evaluate, lambda x: time_entry(x)[0])
    sides["hand"] = jitted(hand, lambda x: (np.asarray(x, dtype="float64"), *data))
    points = bench_points(x0, point, model=model)
    parity = {}
    for side in ("pmfast", "kernel", "hand"):
        parity[side] = max(rel(sides["stock"][0](x), sides[side][0](x)) for x in points)
    times = {side: [] for side in sides}
    for r in range(repeats):  # repeat r: every side at point r (mod the number of points)
        x = points[r % len(points)]
        for side, (_, timer) in sides.items():
            times[side].append(timer(x))
    med = {side: statistics.median(t) for side, t in times.items()}
    return {
        "model": name,
        "point": point,
        "us": med,
        "us_repeats": times,
        "pmfast/hand": med["pmfast"] / med["hand"],
        "stock/hand": med["stock"] / med["hand"],
        "pmfast/stock": med["pmfast"] / med["stock"],
        "kernel/hand": med["kernel"] / med["hand"],
        "parity": parity,
        "fired": pmfast.fired(pmfast.logp_dlogp_function(model, passes)[0]) if passes != "none" else {},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT))
    ap.add_argument("--passes", default="all")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--point", choices=("typical", "draw", "initial"), default="typical")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    results = []
    print(f"{'model':<26}{'stock µs':>11}{'pmfast µs':>11}{'hand µs':>10}{'pm/hand':>9}{'st/hand':>9}{'pm/st':>7}{'kernel/hand':>12}  parity pm / hand")
    bad = False
    for name in a.models:
        r = measure(name, a.passes, a.repeats, a.point)
        results.append(r)
        us, par = r["us"], r["parity"]
        bad |= max(par.values()) > TOL
        print(
            f"{name:<26}{us['stock']:>11.1f}{us['pmfast']:>11.1f}{us['hand']:>10.1f}"
            f"{r['pmfast/hand']:>9.2f}{r['stock/hand']:>9.2f}{r['pmfast/stock']:>7.2f}{r['kernel/hand']:>12.2f}  {par['pmfast']:.1e} / {par['hand']:.1e}",
            flush=True,
        )
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    if bad:
        print(f"parity above {TOL:g} relative to stock", file=sys.stderr)
    return int(bad)


if __name__ == "__main__":
    sys.exit(main())
