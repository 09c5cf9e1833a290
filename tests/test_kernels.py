"""Kernels at the hand-written limit (#13): shared transcendentals, lifted gathers, lean index code,
chunked vectorizable loops, threads.

Compiled functions are cached per graph structure and mode; hypothesis varies only the data.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pmfast.passes.indexed_elemwise as ie
import pmfast.vmath
from pmfast.loops import threads
from pmfast.loops.body import flatten_composites, op_body, vectorizable
from pmfast.loops.chunked import CHUNK, LANES, generate_chunked
from pmfast.loops.spec import ALL, INC, SUM, Gather, IndexedLoop, Read, Write
from pmfast.loops.stack import stack_array
from pmfast.mode import get_mode
from pmfast.passes import fired
from pmfast.passes.gather_lifting import known_length
from pmfast.passes.shared_math import magnitude_key, share_transcendentals

SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _fn(inputs, outputs, passes, vmath=True, n_threads=1):
    previous = pmfast.vmath.is_enabled()
    (pmfast.vmath.enable if vmath else pmfast.vmath.disable)()
    try:
        with threads.using(n_threads):
            return pytensor.function(inputs, outputs, mode=get_mode(passes))
    finally:
        (pmfast.vmath.enable if previous else pmfast.vmath.disable)()


def _loops(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, ie.IndexedElemwise)]


def _forms(fn):
    return [ie.loop_form(n.op.loop, n)[0] for n in _loops(fn)]


# --- stack buffers ------------------------------------------------------------------


def test_stack_array_is_a_usable_array():
    @numba.njit
    def f(x):
        a = stack_array(16, np.float64)
        b = stack_array(4, np.bool_)
        for t in range(16):
            a[t] = x * t
        b[:] = True
        return a.sum(), a.shape[0], b.all()

    assert f(0.5) == (60.0, 16, True)


# --- shared transcendentals -----------------------------------------------------------


def test_magnitude_keys():
    a, b, y = ps.float64("a"), ps.float64("b"), ps.bool("y")
    d = a - b
    assert magnitude_key(-d) == magnitude_key(d) == magnitude_key(b - a) == magnitude_key(ps.switch(y, -d, d))
    assert magnitude_key(-1.0 * a * b) == magnitude_key(a * b) != magnitude_key(b * a)  # factor order kept
    assert magnitude_key(a + b) != magnitude_key(a - b)
    c = ps.float64("c")
    assert magnitude_key(a * b * c) is not magnitude_key(-1.0 * a * b * c)  # 3 factors may reorder


def _ulps(x, y):
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    gap = np.abs(np.spacing(np.maximum(np.abs(x), np.abs(y))))
    return np.where(same, 0.0, np.abs(x - y) / np.where(gap > 0, gap, 1e-320))


def _exact(x, y):
    """The family's true values at ``d = x``, in long double."""
    d = np.longdouble(x)
    sp = lambda v: np.log1p(np.exp(v)) if v < 30 else v + np.log1p(np.exp(-v))  # noqa: E731
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    return [float(sp(-d if y else d)), float(sig(-d)), float(sig(d)), float(sp(d))]


def test_shared_family_within_two_ulp_of_stock():
    a, b, y = ps.float64("a"), ps.float64("b"), ps.bool("y")
    d = a - b
    outs = [ps.softplus(ps.switch(y, -d, d)), ps.sigmoid(b - a), ps.sigmoid(d), ps.softplus(d)]
    comp = ps.Composite([a, b, y], outs)
    fg, n = share_transcendentals(comp.fgraph)
    assert n == 4
    ops = [type(nd.op).__name__ for nd in fg.apply_nodes]
    assert ops.count("Exp") == 1 and ops.count("Log1p") == 1 and "Sigmoid" not in ops and "Softplus" not in ops
    shared = ps.Composite(fg.inputs, fg.outputs)
    xs = np.concatenate([np.linspace(-800, 800, 4001), [0.0, -0.0, 1e-310, -1e-310, 18.0, 33.3, -37.0, 36.9]])
    for yv in (True, False):
        for xv in xs:
            for got, want, exact in zip(shared.impl(xv, 0.0, yv), comp.impl(xv, 0.0, yv), _exact(xv, yv)):
                # where stock underflows (sigmoid(x < -709) = 0), the shared form keeps the subnormal
                assert _ulps(got, want) <= 2 or _ulps(got, exact) <= 1, (xv, yv, got, want)
    for special in (np.inf, -np.inf, np.nan):
        got, want = shared.impl(special, 0.0, True), comp.impl(special, 0.0, True)
        np.testing.assert_array_equal(np.asarray(got, dtype=float), np.asarray(want, dtype=float))


def test_single_members_and_other_dtypes_are_left_alone():
    a, f = ps.float64("a"), ps.float32("f")
    for outs in ([ps.sigmoid(a)], [ps.sigmoid(f), ps.softplus(-f)]):
        comp = ps.Composite([a, f], outs)
        fg, n = share_transcendentals(comp.fgraph)
        assert n == 0 and fg is comp.fgraph


@functools.cache
def _logistic(passes: str, vmath: bool):
    x = pt.dvector("x")
    y = pt.dvector("y")
    cost = (y * pt.log(pt.sigmoid(x)) + (1 - y) * pt.log1p(-pt.sigmoid(x))).sum()
    return _fn([x, y], [cost, pytensor.grad(cost, x)], passes, vmath), _fn([x, y], [cost, pytensor.grad(cost, x)], "none")


@SETTINGS
@given(st.integers(0, 600), st.integers(0, 2**32 - 1))
def test_logistic_terms_shared_and_vectorized(n, seed):
    rng = np.random.default_rng(seed)
    x, y = 8 * rng.normal(size=n), rng.integers(0, 2, n).astype(float)
    for vmath, rtol in ((False, 1e-12), (True, 1e-10)):
        fast, stock = _logistic("shared_math,vector_math,indexed_elemwise" if vmath else "shared_math", vmath)
        for got, want in zip(fast(x, y), stock(x, y)):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)
    fast, _ = _logistic("shared_math,vector_math,indexed_elemwise", True)
    assert fired(fast).get("shared_math") and "chunked" in _forms(fast)  # a gather-free reduction loop


# --- lifted gathers ------------------------------------------------------------------------


@functools.cache
def _lifted(n_idx: int, n_x: int):
    lj = pt.tensor("lj", dtype="float64", shape=(n_x,))
    d = pt.dvector("d")
    idx = np.random.default_rng(0).integers(0, n_x, n_idx)
    cost = (pt.exp(2 * lj[idx]) * d + pt.exp(lj[idx])).sum()
    outs = [cost, pytensor.grad(cost, lj)]
    return _fn([lj, d], outs, "gather_lifting", vmath=False), _fn([lj, d], outs, "none"), idx


def test_gather_lifting_computes_on_the_short_array():
    fast, stock, idx = _lifted(500, 7)
    assert fired(fast).get("gather_lifting", 0) >= 2  # the mul, then the exp
    exps = [n for n in fast.maker.fgraph.toposort() if "exp" in str(n.op).lower()]
    assert exps and all(n.outputs[0].type.shape[0] == 7 for n in exps)  # exp over the 7 sources only
    rng = np.random.default_rng(1)
    lj, d = rng.normal(size=7), rng.normal(size=500)
    for got, want in zip(fast(lj, d), stock(lj, d)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_gather_lifting_declines_longer_sources():
    fast, _, _ = _lifted(5, 7)
    assert "gather_lifting" not in fired(fast)


def test_known_length():
    assert known_length(pt.tensor("a", shape=(4,))) == 4
    assert known_length(pt.constant(np.arange(3))) == 3
    assert known_length(pytensor.shared(np.arange(6))) == 6
    assert known_length(pt.dvector("v")) is None


# --- the chunked form --------------------------------------------------------------------------


def _composite():
    a, b, y = ps.float64("a"), ps.float64("b"), ps.float64("y")
    d = a - b
    return ps.Composite([a, b, y], [y * d - ps.softplus(d), y - ps.sigmoid(d), ps.sigmoid(d) - y, ps.isnan(d)])


def test_chunked_source_structure():
    comp = _composite()
    loop = IndexedLoop(
        comp,
        (Read(0, (Gather(1),)), Read(0, (Gather(2),)), Read(3)),
        (Write(0, SUM), Write(1, INC, buffer=4, axes=(Gather(1),), also=((2, (Gather(2),)),)), Write(3, ALL)),
        same_lengths=(((0, 0), (4, 0)),),
    )
    body = op_body(comp, [ps.float64] * 3, [f"o{k}" for k in range(4)], lazy=False)
    dtypes = ["float64", "int32", "int64", "float64", "float64"]
    sources = generate_chunked(loop, dtypes, ["float64", "float64", "bool"], body, ["float64"] * 3 + ["bool"], "f")
    names = [name for name, _ in sources]
    assert names == ["f_kernel", "f"]
    kernel, entry = (src for _, src in sources)
    compute = kernel.split("for t in range(m):")[1]
    assert "raise" not in kernel and "stack_array" in kernel
    assert not any(line.strip().startswith(("if ", "else")) for line in compute.splitlines())  # selects only
    assert kernel.count(f"for t in range(0, mr, {LANES}):") == 1 and f"l0_{LANES - 1}" in kernel
    assert "raise IndexError" in entry and "np.ascontiguousarray(in0)" in entry
    threaded = generate_chunked(loop, dtypes, ["float64", "float64", "bool"], body, ["float64"] * 3 + ["bool"], "f", 2)
    assert [name for name, _ in threaded] == ["f_kernel", "f_blocks", "f"] and "prange" in threaded[1][1]


def test_nd_index_arrays_are_flattened_once():
    from pmfast.loops.codegen import generate_source

    a = ps.float64("a")
    loop = IndexedLoop(ps.Composite([a], [ps.exp(a)]), (Read(0, (Gather(1, (0, 1)),)),), (Write(0, SUM),))
    src = generate_source(loop, ["float64", "int32"], ["float64"])
    assert src.count(".ravel()") == 1 and "for t in range(flat1.shape[0]):" in src  # not per element


def test_nested_composites_are_flattened():
    x = ps.float64("x")
    inner = ps.Composite([x], [ps.exp(x) + 1.0])
    outer = ps.Composite([x], [inner(x) * 2.0])
    fg = flatten_composites(outer.fgraph)
    assert not any(isinstance(n.op, ps.Composite) for n in fg.apply_nodes)
    assert ps.Composite(fg.inputs, fg.outputs).impl(0.3) == outer.impl(0.3)
    body = op_body(outer, [ps.float64], ["o0"], lazy=False)
    assert not vectorizable(body)  # libm exp: not worth vectorizing


def _pairwise():
    skill = pt.dvector("skill")
    p1 = pt.vector("p1", dtype="int32")
    p2 = pt.vector("p2", dtype="int64")
    y = pt.dvector("y")
    d = skill[p1] - skill[p2]
    cost = (y * d - pt.softplus(d)).sum() + pt.all(pt.sigmoid(d) >= 0)
    return [skill, p1, p2, y], [cost, pytensor.grad(cost, skill)]


@functools.cache
def _pairwise_fns(vmath: bool, n_threads: int = 1):
    inputs, outputs = _pairwise()
    return _fn(inputs, outputs, "all", vmath, n_threads), _fn(inputs, outputs, "none")


@st.composite
def pairwise_data(draw):
    size = draw(st.integers(1, 30))
    n = draw(st.sampled_from([0, 1, 7, CHUNK - 1, CHUNK, CHUNK + 9, 3 * CHUNK + 5]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p1 = rng.integers(-size, size, n).astype("int32")  # negative indices wrap
    p2 = rng.integers(0, size, n)
    return 3 * rng.normal(size=size), p1, p2, rng.integers(0, 2, n).astype(float)


@SETTINGS
@given(pairwise_data())
def test_chunked_loop_matches_stock(args):
    for vmath, rtol in ((True, 1e-10), (False, 1e-12)):
        fast, stock = _pairwise_fns(vmath)
        assert _forms(fast) == (["chunked"] if vmath else ["plain"])
        copies = [np.copy(a) for a in args]
        for got, want in zip(fast(*args), stock(*copies)):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-11)
        for a, c in zip(args, copies):
            np.testing.assert_array_equal(a, c)


def test_chunked_loop_is_deterministic_and_checks_indices():
    fast, _ = _pairwise_fns(True)
    rng = np.random.default_rng(3)
    skill, p1, p2, y = rng.normal(size=9), rng.integers(0, 9, 2000).astype("int32"), rng.integers(0, 9, 2000), np.ones(2000)
    first = fast(skill, p1, p2, y)
    for _ in range(3):
        for a, b in zip(fast(skill, p1, p2, y), first):
            np.testing.assert_array_equal(a, b)
    for bad in (9, -10):
        p = p1.copy()
        p[1234] = bad
        with pytest.raises(IndexError):
            fast(skill, p, p2, y)


def test_threads_split_rows_whatever_the_thread_count():
    fast, stock = _pairwise_fns(True, n_threads=2)
    with threads.using(2):
        assert any(name.endswith("_blocks") for name in _kernel_globals(fast))
    assert not any(name.endswith("_blocks") for name in _kernel_globals(fast))
    rng = np.random.default_rng(4)
    n = threads.MIN_ROWS + 3 * CHUNK + 11
    args = (rng.normal(size=40), rng.integers(0, 40, n).astype("int32"), rng.integers(0, 40, n), rng.integers(0, 2, n) * 1.0)
    previous = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = fast(*args)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = fast(*args)
    finally:
        numba.set_num_threads(previous)
    for a, b, want in zip(one, two, stock(*args)):
        np.testing.assert_array_equal(a, b)  # the same bits on one thread and on two
        np.testing.assert_allclose(a, want, rtol=1e-10)


def _kernel_globals(fn):
    names = []
    for node in _loops(fn):
        src = ie.numba_funcify_IndexedElemwise(node.op, node)[0].py_func.__globals__
        names += list(src)
    return names


def test_threads_for(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    assert threads.threads_for(chains=8) == 1 and threads.threads_for(chains=6, cores=8) == 1
    assert threads.threads_for(chains=1, cores=1) == 8 and threads.threads_for(chains=1) == 8
    assert threads.threads_for(chains=4, cores=2) == (4 if threads.threadsafe_layer() else 1)
    assert threads.threads_for(chains=3) == (2 if threads.threadsafe_layer() else 1)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (7.0, 7.0, 7.0))  # the load does not matter
    assert threads.threads_for(chains=1, cores=1) == 8
    with threads.using(3):
        assert threads.THREADS == 3
    assert threads.THREADS == 1
    with pytest.raises(ValueError):
        with threads.using(0):
            pass
