"""pmfast's Scan loop (:mod:`pmfast.compiler.scan`) against stock pytensor numba.

Two functions cover the op's features, each compiled once per side: a ``for`` graph (0-d sit-sot
states with non-sequences, as the Lotka–Volterra ODE; mit-sot taps over a sequence; a vector state
updated by ``set_subtensor``; int64 and float32 0-d states; a nit-sot of unknown row length; a
state of which only the last value is used, so ``scan_save_mem`` leaves a circular buffer; and the
gradient, a reverse scan with mit-mots) and a ``while`` graph. Hypothesis then draws run-time
inputs (the number of steps, 0 included, and the values) and compares every output with stock's.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytensor
import pytensor.tensor as pt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import assert_same_as_stock
from pytensor.scan.utils import until

import pmfast
from pmfast.compiler.entry_spec import graph_function


def scan(fn, **kw):
    return pytensor.scan(fn, return_updates=False, strict=False, **kw)


def for_graph():
    n = pt.lscalar("n")
    a, b, x0, y0 = pt.dscalars("a", "b", "x0", "y0")
    seq = pt.dvector("seq")
    z0 = pt.dvector("z0", shape=(3,))
    w0 = pt.dvector("w0", shape=(2,))
    v = pt.dvector("v")

    def ode(x, y, a, b):
        return x + (a * x - b * x * y) * 0.01, y + (-a * y + b * x * y) * 0.01

    xs, ys = scan(ode, outputs_info=[x0, y0], non_sequences=[a, b], n_steps=n)

    def taps(s, zm3, zm1, a):
        return zm1 * 0.5 + zm3 * a + s

    zs = scan(taps, sequences=[seq], outputs_info=[dict(initial=z0, taps=[-3, -1])], non_sequences=[a], n_steps=n)

    def vector_state(w, k, f, a, v):
        w_new = pt.set_subtensor(w[0], w[1] * a)
        w_new = pt.set_subtensor(w_new[1], w[0] + pt.cast(k, "float64"))
        return w_new, k + 1, pt.cast(f * np.float32(0.5) + np.float32(1), "float32"), v * w[0]

    k0 = pt.as_tensor(np.int64(3))
    f0 = pt.cast(x0, "float32")
    ws, ks, fs, rows = scan(vector_state, outputs_info=[w0, k0, f0, None], non_sequences=[a, v], n_steps=n)
    last = scan(lambda s, c: c * 0.9 + pt.sin(s), sequences=[seq], outputs_info=[y0], n_steps=n)[-1]
    cost = (xs**2).sum() + ys[-1] + (zs * seq[: zs.shape[0]]).sum() + ws.sum() + last
    grads = pytensor.grad(cost, [a, b, x0, y0, seq, z0, w0])
    return [n, a, b, x0, y0, seq, z0, w0, v], [cost, *grads, xs, ys, zs, ws, ks, fs, rows, last]


def while_graph():
    x0, limit = pt.dscalars("x0", "limit")
    n = pt.lscalar("n")

    def step(x, limit):
        x_new = x * 1.5 + 0.25
        return x_new, until(x_new > limit)

    xs = scan(step, outputs_info=[x0], non_sequences=[limit], n_steps=n)
    return [x0, limit, n], [xs, xs[-1]]


@pytest.fixture(scope="module")
def compiled():
    out = {}
    for name, build in (("for", for_graph), ("while", while_graph)):
        inputs, outputs = build()
        out[name] = (
            pytensor.function(inputs, outputs, mode="NUMBA"),
            pytensor.function(inputs, outputs, mode=pmfast.get_mode("all")),
        )
    return out


def generated_loops(fn) -> list[str]:
    """Sources of the pmfast Scan loops the graph function of ``fn`` calls."""
    env = graph_function(fn.vm.jit_fn).__globals__
    sources = (getattr(getattr(f, "py_func", None), "__source__", "") for f in env.values())
    return [s for s in sources if "while _pm_i < _pm_n" in s]


def for_values(rng, n, m):
    return [
        np.int64(n), 0.5, 0.02, 30.0, 6.0, rng.normal(size=m), rng.normal(size=3), rng.normal(size=2), rng.normal(size=4)
    ]


def test_every_scan_is_pmfast_loop(compiled):
    from pytensor.scan.op import Scan

    for stock, fast in compiled.values():
        n_scans = sum(isinstance(node.op, Scan) for node in fast.maker.fgraph.apply_nodes)
        assert n_scans and len(generated_loops(fast)) == n_scans
        assert not generated_loops(stock)


def test_step_values_are_scalars(compiled):
    """0-d taps are read as ``buf[p]`` into scalars, the 0-d Elemwises are scalar code, positions need no ``%``."""
    loops = generated_loops(compiled["for"][1])
    for src in loops:
        body = src.split("while _pm_i < _pm_n:")[1]
        assert body.count("_pm_scalar_") >= 5
        assert "np.asarray" not in body and not any("%" in line for line in body.splitlines() if "_pm_q" in line)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7])
def test_for_scan_matches_stock(compiled, n):
    stock, fast = compiled["for"]
    assert_same_as_stock(stock, fast, for_values(np.random.default_rng(n), n, max(n, 1)), rtol=1e-12)  # or the same exception (xs[-1] of no steps)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 12), extra=st.integers(0, 3), seed=st.integers(0, 2**16), x0=st.floats(-3, 3))
def test_for_scan_matches_stock_drawn(compiled, n, extra, seed, x0):
    stock, fast = compiled["for"]
    args = for_values(np.random.default_rng(seed), n, n + extra)
    args[3] = 30.0 + x0
    assert_same_as_stock(stock, fast, args, rtol=1e-12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x0=st.floats(-2, 2), limit=st.floats(-5, 200), n=st.integers(0, 15))
def test_while_scan_matches_stock(compiled, x0, limit, n):
    stock, fast = compiled["while"]
    assert_same_as_stock(stock, fast, [x0, limit, np.int64(n)], rtol=1e-12)


def test_random_step_declines_to_stock():
    """A step drawing random numbers (an untraced sit-sot: the generator) is left to stock's Scan."""
    from pytensor.scan.op import Scan

    rng = pytensor.shared(np.random.default_rng(0))
    x0 = pt.dscalar("x0")

    def step(x, rng):
        next_rng, e = pt.random.normal(0.0, 1.0, rng=rng).owner.outputs
        return x * 0.5 + e, next_rng

    xs, last_rng = scan(step, outputs_info=[x0, rng], n_steps=5)
    fn = pytensor.function([x0], xs, updates={rng: last_rng}, mode=pmfast.get_mode("all"))
    assert any(isinstance(node.op, Scan) and node.op.info.n_untraced_sit_sot for node in fn.maker.fgraph.apply_nodes)
    assert not generated_loops(fn)
    got = fn(1.0)
    rng.set_value(np.random.default_rng(0))
    want = pytensor.function([x0], xs, updates={rng: last_rng}, mode="NUMBA")(1.0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
