"""Tests of the ``indexed_elemwise`` pass, its op and its loop description.

Compiled functions are cached per graph structure (numba compiles are slow);
hypothesis varies only the data.
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.tensor.subtensor import AdvancedIncSubtensor1, AdvancedSubtensor1

import pmfast.loops.dispatch as dispatch
import pmfast.passes.indexed_elemwise as ie
import pmfast.passes.indexed_matching as im
from pmfast.loops import INC, SET, STORE, SUM, Gather, IndexedLoop, Read, Write, evaluate
from pmfast.loops.codegen import generate_source
from pmfast.mode import get_mode
from pmfast.passes import fired

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,  # reproducible in CI; compiled functions are reused across examples
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PASS = ["indexed_elemwise"]


def _fused_nodes(fn):
    """The loops fusion built around an Elemwise (not the identity loops of ``scatter_loops``)."""
    return [
        n
        for n in fn.maker.fgraph.toposort()
        if isinstance(n.op, ie.IndexedElemwise) and type(n.op.loop.scalar_op).__name__ != "Identity"
    ]


def _count(fn, op_type):
    return sum(isinstance(n.op, op_type) for n in fn.maker.fgraph.toposort())


def _py_reference(fn):
    """The compiled (rewritten) graph of ``fn`` run by the python linker: the ops' ``perform``."""
    fg = fn.maker.fgraph.clone()
    return pytensor.function(fg.inputs, fg.outputs, mode=Mode(linker="py", optimizer=None), accept_inplace=True)


@functools.cache
def _compiled(structure: str, *params):
    """(pmfast fn, stock fn, py-reference fn) for a named graph structure."""
    inputs, outputs = STRUCTURES[structure](*params)
    fused = pytensor.function(inputs, outputs, mode=get_mode(PASS))
    stock = pytensor.function(inputs, outputs, mode=get_mode("none"))
    return fused, stock, _py_reference(fused)


def _check(structure, args, *params, rtol=1e-10):
    fused, stock, ref = _compiled(structure, *params)
    copies = [np.copy(a) for a in args]
    got = fused(*args)
    want = stock(*copies)
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)  # inputs never mutated
    got_ref = ref(*copies)
    for g, w, r in zip(got, want, got_ref):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=1e-12)
    return fused


# --- graph structures ---------------------------------------------------------


def _seed(idx_dtype="int64"):
    x = pt.dvector("x")
    idx = pt.vector("idx", dtype=idx_dtype)
    value = pt.dvector("value")
    out = ((x[idx] - value) ** 2).sum()
    return [x, idx, value], [out, pytensor.grad(out, x)]


def _scalar_bcast():
    # a scalar (broadcast along the loop) and a non-gathered operand
    x = pt.dvector("x")
    idx = pt.lvector("idx")
    v = pt.dvector("v")
    s = pt.dscalar("s")
    out = pt.exp(x[idx] * s) + v
    cost = (out * v).sum()
    return [x, idx, v, s], [out, pytensor.grad(cost, x), pytensor.grad(cost, s)]


def _two_index():
    a = pt.dvector("a")
    b = pt.dvector("b")
    i = pt.lvector("i")
    j = pt.ivector("j")
    y = pt.dvector("y")
    mu = a[i] + b[j] * 2.0
    cost = ((y - mu) ** 2).sum()
    return [a, b, i, j, y], [cost, *pytensor.grad(cost, [a, b])]


def _inc_set(set_instead_of_inc: bool):
    x = pt.dvector("x")
    idx = pt.lvector("idx")
    v = pt.dvector("v")
    target = pt.dvector("target")  # a graph input: must never be written in place
    y = pt.sin(x[idx]) * v
    if set_instead_of_inc:
        res = pt.set_subtensor(target[idx], y)
    else:
        res = pt.inc_subtensor(target[idx], y)
    return [x, idx, v, target], [res]


def _multi_client():
    x = pt.dvector("x")
    idx = pt.lvector("idx")
    v = pt.dvector("v")
    y = pt.tanh(x[idx] + v)
    z = pt.zeros_like(x)
    res = pt.inc_subtensor(z[idx], y)
    return [x, idx, v], [res, y, y.sum()]


def _bcast_index():
    # index vector of static length 1: the gathered operand broadcasts
    x = pt.dvector("x")
    idx = pt.tensor("idx", dtype="int64", shape=(1,))
    v = pt.dvector("v")
    return [x, idx, v], [x[idx] * v + 1.0]


def _rows():
    # row gathers of a matrix (2-d loop): data times gathered rows, a row and a column broadcast
    beta = pt.dmatrix("beta")
    idx = pt.lvector("idx")
    X = pt.dmatrix("X")
    r = pt.tensor("r", dtype="float64", shape=(1, None))
    c = pt.tensor("c", dtype="float64", shape=(None, 1))
    eta = X * beta[idx] + r * c
    cost = (pt.sigmoid(eta) ** 2).sum()
    return [beta, idx, X, r, c], [cost, *pytensor.grad(cost, [beta, r])]


def _hier_logistic():
    # hier_logistic's shape: a partial Sum over the gathered rows' axis 1
    beta = pt.dmatrix("beta")
    idx = pt.ivector("idx")
    X = pt.dmatrix("X")
    y = pt.dvector("y")
    logit = (X * beta[idx]).sum(-1)
    cost = (y * logit - pt.softplus(logit)).sum()
    return [beta, idx, X, y], [cost, pytensor.grad(cost, beta)]


def _pairwise():
    # Bradley-Terry shape: the same parameter gathered twice; the gradient chains two scatters
    skill = pt.dvector("skill")
    p1 = pt.lvector("p1")
    p2 = pt.bvector("p2")
    y = pt.dvector("y")
    d = skill[p1] - skill[p2]
    cost = (y * d - pt.softplus(d)).sum() - (skill**2).sum()
    return [skill, p1, p2, y], [cost, pytensor.grad(cost, skill)]


def _lazy_switch():
    # Bernoulli(logit_p=skill[p1] - skill[p2]) as pymc writes it: bounds check on the
    # probability, a Switch on the observation between two softplus branches, nested Switches
    skill = pt.dvector("skill")
    p1 = pt.lvector("p1")
    p2 = pt.ivector("p2")
    y = pt.bvector("y")
    d = skill[p1] - skill[p2]
    p = pt.sigmoid(d)
    ok = pt.all(pt.ge(p, 0.0)) & pt.all(pt.le(p, 1.0)) & ~pt.any(pt.isnan(d) & (y > 1))
    lp = pt.switch(ok, pt.switch(pt.eq(y, 1), -pt.softplus(-d), -pt.softplus(d)), -np.inf)
    lp2 = pt.switch(d > 0, pt.exp(-d) * p, pt.switch(d < -1, pt.log1p(pt.exp(d)), 2 * d))
    cost = lp.sum() + lp2.sum()
    return [skill, p1, p2, y], [cost, pytensor.grad(cost, skill), lp2]


STRUCTURES = {
    "lazy_switch": _lazy_switch,
    "pairwise": _pairwise,
    "rows": _rows,
    "hier_logistic": _hier_logistic,
    "seed": _seed,
    "scalar_bcast": _scalar_bcast,
    "two_index": _two_index,
    "inc_set": _inc_set,
    "multi_client": _multi_client,
    "bcast_index": _bcast_index,
}


def _index_data(draw, n, size, dtype):
    info = np.iinfo(dtype)
    lo = max(-size, int(info.min))
    hi = min(size - 1, int(info.max))
    vals = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    return np.array(vals, dtype=dtype)


@st.composite
def seed_data(draw, dtype="int64"):
    size = draw(st.integers(1, 20))
    n = draw(st.integers(0, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    idx = _index_data(draw, n, size, dtype)
    return rng.normal(size=size), idx, rng.normal(size=n)


# --- the loop description (no compilation) --------------------------------------


def _gather(array, index):
    """A 1-d gather ``$array[$index[i0]]``."""
    return Read(array, (Gather(index, (0,)),))


def _composite():
    import pytensor.scalar as ps

    a, b = ps.float64("a"), ps.float64("b")
    d = a - b
    return ps.Composite([a, b], [d**2, 2 * d])


def test_loop_str_and_derived_facts():
    loop = IndexedLoop(_composite(), (_gather(0, 1), Read(2)), (Write(0), Write(1, INC, buffer=3, axes=(Gather(1),))))
    s = str(loop)
    assert "a0 = $0[$1[i0]]" in s and "a1 = $2[i0]" in s
    assert "for i0 < n0 = $1.shape[0]:" in s
    assert "out1 = copy($3)" in s and "out1[$1[i0]] += o1" in s
    assert loop.n_inputs == 4 and loop.n_outputs == 2 and loop.ndim == 1
    assert loop.dim_source(0) == (1, 0) and loop.dim_operands(0) == ((1, 0), (2, 0))
    assert "$3[$1[i0]] += o1" in loop.short()


def test_loop_validation():
    c = _composite()
    with pytest.raises(ValueError):
        IndexedLoop(c, (_gather(0, 1),), (Write(0),))  # wrong arity
    with pytest.raises(ValueError):
        IndexedLoop(c, (_gather(0, 1), Read(2)), (Write(0, INC, buffer=0, axes=(Gather(1),)),))  # buffer also read
    with pytest.raises(ValueError):
        IndexedLoop(c, (Read(0, (None,)), Read(2, (None,))), (Write(0),), ndim=1)  # no loop length
    with pytest.raises(ValueError):
        Write(0, STORE, buffer=1, axes=(Gather(2),))
    with pytest.raises(ValueError):
        IndexedLoop(c, (Read(0, (0, 5)), Read(2)), (Write(0),), ndim=2)  # loop dim 5 beyond ndim


def test_evaluate_matches_numpy():
    loop = IndexedLoop(_composite(), (_gather(0, 1), Read(2)), (Write(0), Write(1, INC, buffer=3, axes=(Gather(1),))))
    x = np.array([1.0, 2.0, 3.0])
    idx = np.array([0, -1, 2, 2, 0], dtype=np.int8)
    v = np.arange(5.0)
    buf = np.ones(3)
    o0, o1 = evaluate(loop, [x, idx, v, buf], ["float64", "float64"])
    d = x[idx] - v
    np.testing.assert_allclose(o0, d**2)
    want = buf.copy()
    np.add.at(want, idx, 2 * d)
    np.testing.assert_allclose(o1, want)
    assert buf.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(IndexError):
        evaluate(loop, [x, np.array([3]), np.ones(1), buf], ["float64", "float64"])
    loop_set = IndexedLoop(_composite(), (_gather(0, 1), Read(2)), (Write(1, SET, buffer=3, axes=(Gather(1),)),))
    (o,) = evaluate(loop_set, [x, np.array([0, 0]), np.array([5.0, 7.0]), buf], ["float64"])
    assert o[0] == 2 * (1.0 - 7.0)  # last write wins


def test_evaluate_all_any_writes():
    import pytensor.scalar as ps

    from pmfast.loops.codegen import generate_source
    from pmfast.loops.spec import ALL, ANY

    a = ps.float64("a")
    comp = ps.Composite([a], [a > 0, a < -1])
    loop = IndexedLoop(comp, (_gather(0, 1),), (Write(0, ALL), Write(1, ANY)))
    assert "out0 &= o0" in loop.short() and "out1 |= o1" in loop.short()
    assert "out0 = True" in str(loop) and "out1 = False" in str(loop)
    x = np.array([1.0, 2.0, -3.0])
    for idx, want in (([0, 1], (True, False)), ([0, 2], (False, True)), ([], (True, False))):
        got = evaluate(loop, [x, np.array(idx, dtype="int64")], ["bool", "bool"])
        assert (bool(got[0]), bool(got[1])) == want
        assert got[0].shape == ()
    src = generate_source(loop, ["float64", "int64"], ["bool", "bool"])
    assert "acc0 = True" in src and "acc1 = False" in src


def test_evaluate_sum_write():
    loop = IndexedLoop(_composite(), (_gather(0, 1), Read(2)), (Write(0, SUM), Write(0)))
    x = np.array([1.0, 2.0])
    idx = np.array([1, 0, 1], dtype=np.uint8)
    v = np.array([0.5, 0.25, 3.0])
    total, stored = evaluate(loop, [x, idx, v], ["float64", "float64"])
    assert total.shape == () and total == pytest.approx(((x[idx] - v) ** 2).sum())
    np.testing.assert_allclose(stored, (x[idx] - v) ** 2)
    (empty,) = evaluate(
        IndexedLoop(_composite(), (_gather(0, 1), Read(2)), (Write(0, SUM),)),
        [x, np.zeros(0, dtype=np.int64), np.zeros(0)],
        ["float64"],
    )
    assert empty == 0.0
    assert "out0 = 0" in str(loop) and "out0 += o0" in str(loop)


def test_generated_source_checks_bounds():
    loop = IndexedLoop(_composite(), (_gather(0, 1), Read(2)), (Write(1, INC, buffer=3, axes=(Gather(1),)),))
    same = IndexedLoop(loop.scalar_op, loop.reads, loop.writes, same_lengths=(((0, 0), (3, 0)),))
    assert "len($0, 0) == len($3, 0)" in same.short()
    for dt in ("int8", "uint16", "uint64", "int64"):
        src = generate_source(loop, ["float64", dt, "float64", "float64"], ["float64"])
        compile(src, "<test>", "exec")
        head, body = src.split("for i0 in range(n0):")
        # one check per addressed length, once per call, before the loop; none per row
        assert head.count("raise IndexError") == 2 and "raise IndexError" not in body
        assert body.count("[i0])") == 1  # one load per row for both addressed arrays
        assert ("+ size0_0 if j0 < 0" in body) == dt.startswith("int")  # negatives wrap (signed only)
        assert ("np.uint64(size0_0)" in head) == (dt == "uint64")
        # a signed index is scanned in its own dtype (int8: 64 values per AVX-512 max), not widened
        assert (f"hi1 = np.{dt}(-1)" in head) == dt.startswith("int")
        # x and the buffer proven equally long: one load per row serves both
        head, body = generate_source(same, ["float64", dt, "float64", "float64"], ["float64"]).split("for i0 in")
        assert body.count("[i0])") == 1 and "in3.shape[0] != size0_0" in head
    # a constant index array: its bounds are known, it is not scanned, positions never wrap
    known = IndexedLoop(loop.scalar_op, loop.reads, loop.writes, bounds=((1, 0, 4),))
    src = generate_source(known, ["float64", "int64", "float64", "float64"], ["float64"])
    head, body = src.split("for i0 in range(n0):")
    assert "for t in range" not in head and "if 4 >= size0_0:" in head and "if j0 < 0" not in body
    with pytest.raises(ValueError, match="same_lengths"):
        IndexedLoop(loop.scalar_op, loop.reads, loop.writes, same_lengths=(((2, 0), (3, 0)),))


# --- the pass on the seed example --------------------------------------------------


def test_seed_is_fused():
    fused, stock, _ = _compiled("seed", "int64")
    assert len(_fused_nodes(fused)) == 1
    assert _count(fused, AdvancedSubtensor1) == 0
    assert _count(fused, AdvancedIncSubtensor1) == 0
    assert _count(stock, AdvancedIncSubtensor1) == 1
    assert fired(fused) == {"indexed_elemwise": 1}
    assert fired(stock) == {}
    (node,) = _fused_nodes(fused)
    assert "IndexedElemwise" in str(node.op)
    assert [w.mode for w in node.op.loop.writes] == [SUM, INC]  # the cost's Sum is absorbed too
    assert node.op.loop.inplace  # the gradient's zeros buffer is written in place
    rng = np.random.default_rng(1)
    args = (rng.normal(size=15), rng.integers(-15, 15, 10_000), rng.normal(size=10_000))
    _check("seed", args, "int64")
    # the kernel as nutpie calls it
    got = fused.vm.jit_fn(*args)
    want = stock.vm.jit_fn(*args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


@SETTINGS
@given(seed_data())
def test_seed_hypothesis(args):
    _check("seed", args, "int64")


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "uint8", "uint32", "uint64"])
@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_seed_index_dtypes(dtype, data):
    args = data.draw(seed_data(dtype))
    fused = _check("seed", args, dtype)
    assert len(_fused_nodes(fused)) == 1


@pytest.mark.parametrize("dtype", ["int64", "int8", "uint64"])
def test_out_of_range_raises_index_error(dtype):
    fused, stock, ref = _compiled("seed", dtype)
    x = np.ones(5)
    bad = [5, 7] if dtype.startswith("u") else [5, -6]
    for b in bad:
        idx = np.array([0, b, 1], dtype=dtype)
        for f in (fused, stock, ref):
            with pytest.raises(IndexError):
                f(x, idx, np.ones(3))
    if dtype == "uint64":
        with pytest.raises(IndexError):
            fused(x, np.array([2**64 - 1], dtype=dtype), np.ones(1))


def test_without_sum_absorption(monkeypatch):
    monkeypatch.setattr(im, "FUSE_SUM", False)
    inputs, outputs = _seed()
    fn = pytensor.function(inputs, outputs, mode=get_mode(PASS))
    (node,) = _fused_nodes(fn)
    assert [w.mode for w in node.op.loop.writes] == [STORE, INC]
    _, stock, _ = _compiled("seed", "int64")
    args = (np.arange(3.0), np.array([2, 2, -1, 0]), np.ones(4))
    for g, w in zip(fn(*args), stock(*args)):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_length_mismatch_raises():
    fused, _, _ = _compiled("seed", "int64")
    with pytest.raises(ValueError):
        fused(np.ones(5), np.array([0, 1, 2]), np.ones(4))
    with pytest.raises(ValueError):  # no runtime broadcasting, like the stock Elemwise
        fused(np.ones(5), np.array([0, 1, 2]), np.ones(1))


# --- other patterns --------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_scalar_and_direct_operands(data):
    x, idx, v = data.draw(seed_data())
    s = data.draw(st.floats(-1, 1))
    fused = _check("scalar_bcast", (x, idx, v, np.float64(s)))
    assert len(_fused_nodes(fused)) >= 1
    assert _count(fused, AdvancedIncSubtensor1) == 0


@SETTINGS
@given(data=st.data())
def test_two_index_arrays(data):
    na = data.draw(st.integers(1, 10))
    nb = data.draw(st.integers(1, 10))
    n = data.draw(st.integers(0, 30))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    i = _index_data(data.draw, n, na, "int64")
    j = _index_data(data.draw, n, nb, "int32")
    fused = _check("two_index", (rng.normal(size=na), rng.normal(size=nb), i, j, rng.normal(size=n)))
    assert _count(fused, AdvancedSubtensor1) == 0
    assert _count(fused, AdvancedIncSubtensor1) == 0


@pytest.mark.parametrize("set_instead_of_inc", [False, True])
@SETTINGS
@given(data=st.data())
def test_inc_and_set_with_repeats(set_instead_of_inc, data):
    x, idx, v = data.draw(seed_data())
    target = np.random.default_rng(0).normal(size=x.shape[0])
    fused = _check("inc_set", (x, idx, v, target), set_instead_of_inc)
    assert _count(fused, AdvancedIncSubtensor1) == 0
    (node,) = _fused_nodes(fused)
    mode = SET if set_instead_of_inc else INC
    assert [w.mode for w in node.op.loop.writes] == [mode]
    assert node.op.loop.inplace == ()  # the target is a graph input


def test_set_last_write_wins():
    fused, stock, _ = _compiled("inc_set", True)
    x = np.array([0.5, 1.0])
    idx = np.array([1, 1, 1])
    v = np.array([1.0, 2.0, 3.0])
    out = fused(x, idx, v, np.zeros(2))[0]
    assert out[1] == np.sin(1.0) * 3.0
    np.testing.assert_array_equal(out, stock(x, idx, v, np.zeros(2))[0])


@SETTINGS
@given(seed_data())
def test_multi_client_output(args):
    fused = _check("multi_client", args)
    (node,) = _fused_nodes(fused)
    assert sorted(w.mode for w in node.op.loop.writes) == [INC, STORE, SUM]


@SETTINGS
@given(data=st.data())
def test_broadcast_index(data):
    size = data.draw(st.integers(1, 10))
    n = data.draw(st.integers(0, 20))
    idx = _index_data(data.draw, 1, size, "int64")
    fused = _check("bcast_index", (np.arange(size, dtype=float), idx, np.arange(n, dtype=float)))
    (node,) = _fused_nodes(fused)
    assert node.op.loop.reads[0].axes[0].dims == (None,)  # the index is read at 0


def test_broadcast_index_out_of_range_with_empty_loop():
    fused, stock, _ = _compiled("bcast_index")
    for f in (fused, stock):
        with pytest.raises(IndexError):
            f(np.ones(3), np.array([3]), np.ones(0))


@SETTINGS
@given(data=st.data())
def test_chained_scatters(data):
    skill, p1, y = data.draw(seed_data())
    p2 = _index_data(data.draw, p1.shape[0], min(skill.shape[0], 127), "int8")
    fused = _check("pairwise", (skill, p1, p2, y))
    assert _count(fused, AdvancedSubtensor1) == 0
    assert _count(fused, AdvancedIncSubtensor1) == 0
    assert any(w.also for n in _fused_nodes(fused) for w in n.op.loop.writes)


def test_evaluate_chained_inc():
    loop = IndexedLoop(
        _composite(),
        (_gather(0, 1), _gather(0, 2)),
        (Write(1, INC, buffer=3, axes=(Gather(1),), also=((0, (Gather(2),)),)),),
    )
    assert "out0[$1[i0]] += o1" in str(loop) and "out0[$2[i0]] += o0" in str(loop)
    x = np.arange(4.0)
    i1 = np.array([0, 1, 3, 3])
    i2 = np.array([1, 1, -1, 2], dtype=np.int16)
    (got,) = evaluate(loop, [x, i1, i2, np.ones(4)], ["float64"])
    d = x[i1] - x[i2]
    want = np.ones(4)
    np.add.at(want, i1, 2 * d)
    np.add.at(want, i2, d**2)
    np.testing.assert_allclose(got, want)
    with pytest.raises(ValueError):
        Write(0, SET, buffer=3, axes=(Gather(1),), also=((0, (Gather(2),)),))


# --- 2-d loops (gathers of rows) ----------------------------------------------


@st.composite
def rows_data(draw, idx_dtype="int64"):
    g = draw(st.integers(1, 8))
    k = draw(st.integers(0, 4))
    n = draw(st.integers(0, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    idx = _index_data(draw, n, g, idx_dtype)
    return rng.normal(size=(g, k)), idx, rng.normal(size=(n, k))


@SETTINGS
@given(data=st.data())
def test_row_gathers_2d(data):
    beta, idx, X = data.draw(rows_data())
    rng = np.random.default_rng(1)
    r = rng.normal(size=(1, beta.shape[1]))
    c = rng.normal(size=(idx.shape[0], 1))
    fused = _check("rows", (beta, idx, X, r, c))
    assert _count(fused, AdvancedSubtensor1) == 0
    assert _count(fused, AdvancedIncSubtensor1) == 0
    assert any(n.op.loop.ndim == 2 for n in _fused_nodes(fused))


@SETTINGS
@given(data=st.data())
def test_hier_logistic_shape(data):
    beta, idx, X = data.draw(rows_data("int32"))
    # pytensor 2.38.3's python AdvancedIncSubtensor1.perform (used by the py reference for the
    # scatter this graph keeps) wrongly flags a runtime broadcast when len(idx) == 1 and y is 2-d
    assume(idx.shape[0] != 1 or beta.shape[0] == 1)
    y = (np.random.default_rng(2).random(idx.shape[0]) < 0.5).astype(float)
    fused = _check("hier_logistic", (beta, idx, X, y))
    assert _count(fused, AdvancedSubtensor1) == 0
    # the gradient's scatter is fed by (y - sigmoid(logit))[:, None] * X: nothing ties
    # len(X) to len(idx) locally, but the gather loop checks len(X) == len(idx) at run
    # time (EqualLengths), so the scatter runs as an identity loop (scatter_loops)
    assert _count(fused, AdvancedIncSubtensor1) == 0


def _blocks():
    # 3-d loop: gathered (k, m) blocks, a broadcast middle axis
    beta = pt.dtensor3("beta")
    idx = pt.wvector("idx")
    X = pt.tensor("X", dtype="float64", shape=(None, 1, None))
    cost = (pt.tanh(beta[idx] * X) ** 2).sum()
    return [beta, idx, X], [cost, pytensor.grad(cost, beta)]


STRUCTURES["blocks"] = _blocks


@SETTINGS
@given(data=st.data())
def test_block_gathers_3d(data):
    g, k, m = data.draw(st.integers(1, 5)), data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    n = data.draw(st.integers(0, 12))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    idx = _index_data(data.draw, n, g, "int16")
    fused = _check("blocks", (rng.normal(size=(g, k, m)), idx, rng.normal(size=(n, 1, m))))
    (node,) = _fused_nodes(fused)
    assert node.op.loop.ndim == 3
    assert _count(fused, AdvancedIncSubtensor1) == 0


def test_row_gather_shape_errors():
    fused, stock, _ = _compiled("rows")
    beta = np.ones((3, 2))
    idx = np.array([0, 2])
    for X in (np.ones((2, 3)), np.ones((2, 1))):  # a wrong width, a runtime broadcast
        for f in (fused, stock):
            with pytest.raises(ValueError):
                f(beta, idx, X, np.ones((1, 2)), np.ones((2, 1)))
    for f in (fused, stock):
        with pytest.raises(IndexError):
            f(beta, np.array([0, 3]), np.ones((2, 2)), np.ones((1, 2)), np.ones((2, 1)))


# --- general integer-array indexing ------------------------------------------


def _columns(idx_dtype="int64"):
    # x[:, idx]: pytensor's canonical form is x.T[idx].T; the gradient scatters into zeros.T
    x = pt.dmatrix("x")
    idx = pt.vector("idx", dtype=idx_dtype)
    y = pt.dmatrix("y")
    cost = (pt.exp(x[:, idx]) * y).sum()
    return [x, idx, y], [cost, pytensor.grad(cost, x)]


def _nd_index():
    # v[I] for a matrix of indices I (pytensor gathers through I.reshape(-1) and reshapes back)
    v = pt.dvector("v")
    idx = pt.lmatrix("idx")
    y = pt.dmatrix("y")
    cost = (pt.sin(v[idx]) * y).sum()
    return [v, idx, y], [cost, pytensor.grad(cost, v)]


def _multi_index():
    # x[i, j]: numpy would broadcast a runtime length-1 index; specify_shape ties the lengths
    x = pt.dmatrix("x")
    i = pt.ivector("i")
    j = pt.lvector("j")
    w = pt.dvector("w")
    jj = pt.specify_shape(j, i.shape)
    cost = (pt.exp(x[i, jj]) * w).sum()
    return [x, i, j, w], [cost, pytensor.grad(cost, x)]


def _outer_index(i_dtype="int64", j_dtype="int64"):
    # x[i[:, None], j]: index arrays broadcast against each other into a 2-d loop
    x = pt.dmatrix("x")
    i = pt.vector("i", dtype=i_dtype)
    j = pt.vector("j", dtype=j_dtype)
    y = pt.dmatrix("y")
    cost = (pt.tanh(x[i[:, None], j]) * y).sum()
    return [x, i, j, y], [cost, pytensor.grad(cost, x)]


def _expanded_gather():
    # v[i][:, None] broadcast against a matrix operand
    v = pt.dvector("v")
    i = pt.lvector("i")
    y = pt.dmatrix("y")
    cost = (pt.exp(v[i][:, None]) * y).sum()
    return [v, i, y], [cost, pytensor.grad(cost, v)]


def _outer_set():
    # set_subtensor through two broadcasting index arrays
    x = pt.dmatrix("x")
    i = pt.lvector("i")
    j = pt.lvector("j")
    target = pt.dmatrix("target")
    return [x, i, j, target], [pt.set_subtensor(target[i[:, None], j], pt.exp(x[i[:, None], j]))]


def _loose_index():
    # x[i, j] with lengths nothing ties: numpy broadcasts an index of runtime length 1
    x = pt.dmatrix("x")
    i = pt.lvector("i")
    j = pt.bvector("j")
    w = pt.dvector("w")
    cost = (pt.exp(x[i, j]) * w).sum()
    return [x, i, j, w], [cost, pytensor.grad(cost, x)]


def _split_index():
    # x3[i, :, j]: index arrays separated by a slice, numpy puts their axis first
    x = pt.dtensor3("x")
    i = pt.lvector("i")
    j = pt.wvector("j")
    y = pt.dmatrix("y")
    cost = (pt.exp(x[i, :, pt.specify_shape(j, i.shape)]) * y).sum()
    return [x, i, j, y], [cost, pytensor.grad(cost, x)]


STRUCTURES.update(
    loose_index=_loose_index,
    split_index=_split_index,
    columns=_columns,
    nd_index=_nd_index,
    multi_index=_multi_index,
    outer_index=_outer_index,
    expanded_gather=_expanded_gather,
    outer_set=_outer_set,
)


def _no_advanced_indexing_left(fn):
    from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor

    for op_type in (AdvancedSubtensor1, AdvancedIncSubtensor1, AdvancedSubtensor, AdvancedIncSubtensor):
        assert _count(fn, op_type) == 0, op_type


@st.composite
def index_array(draw, shape, size, dtype="int64"):
    """Indices into an axis of length ``size`` (negative ones included where the dtype allows)."""
    n = int(np.prod(shape))
    return _index_data(draw, n, size, dtype).reshape(shape)


@SETTINGS
@given(data=st.data())
def test_column_gather_and_scatter(data):
    r, c, n = data.draw(st.integers(0, 5)), data.draw(st.integers(1, 8)), data.draw(st.integers(0, 12))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    idx = data.draw(index_array((n,), c))
    fused = _check("columns", (rng.normal(size=(r, c)), idx, rng.normal(size=(r, n))))
    assert len(_fused_nodes(fused)) == 2  # the gather + cost loop, the gradient's scatter loop
    _no_advanced_indexing_left(fused)
    gather, scatter = _fused_nodes(fused)
    assert str(gather.op.loop.reads[1]) == "$1[i0, $2[i1]]"  # x[:, idx] read from x itself
    assert [w.mode for w in scatter.op.loop.writes] == [INC]


def test_column_gather_transposed_form():
    # x.T[idx].T is the same read as x[:, idx]
    x = pt.dmatrix("x")
    idx = pt.lvector("idx")
    y = pt.dmatrix("y")
    cost = (pt.exp(x.T[idx].T) * y).sum()
    fused = pytensor.function([x, idx, y], [cost, pytensor.grad(cost, x)], mode=get_mode(PASS))
    stock, ref = _compiled("columns")[1:]
    _no_advanced_indexing_left(fused)
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(3, 5)), np.array([4, -5, 0, 0, 2, -1]), rng.normal(size=(3, 6)))
    for g, w in zip(fused(*args), stock(*args)):
        np.testing.assert_allclose(g, w, rtol=1e-10)


def test_column_gather_index_errors():
    fused, stock, ref = _compiled("columns")
    # with no rows the loop body never runs: the indices are still checked, as numpy (and the
    # op's perform) does; stock numba's gather of an empty array skips the check
    for x, fns in ((np.ones((2, 3)), (fused, stock, ref)), (np.ones((0, 3)), (fused, ref))):
        for f in fns:
            with pytest.raises(IndexError):
                f(x, np.array([0, 3]), np.ones((x.shape[0], 2)))
            with pytest.raises(IndexError):
                f(x, np.array([-4]), np.ones((x.shape[0], 1)))


@SETTINGS
@given(data=st.data())
def test_nd_index_gather_and_scatter(data):
    size, a, b = data.draw(st.integers(1, 9)), data.draw(st.integers(0, 5)), data.draw(st.integers(0, 5))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    idx = data.draw(index_array((a, b), size))
    fused = _check("nd_index", (rng.normal(size=size), idx, rng.normal(size=(a, b))))
    nodes = _fused_nodes(fused)  # sin (cost) and cos (gradient): two Elemwise, two loops
    assert all(str(n.op.loop.reads[1]) == "$1[$2[i0, i1]]" for n in nodes)
    assert sorted(w.mode for n in nodes for w in n.op.loop.writes) == [INC, SUM]
    _no_advanced_indexing_left(fused)


@SETTINGS
@given(data=st.data())
def test_multi_index_gather_and_scatter(data):
    r, c, n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)), data.draw(st.integers(0, 20))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    i = data.draw(index_array((n,), r, "int32"))
    j = data.draw(index_array((n,), c))
    fused = _check("multi_index", (rng.normal(size=(r, c)), i, j, rng.normal(size=n)))
    (node,) = _fused_nodes(fused)
    assert [w.mode for w in node.op.loop.writes] == [SUM, INC]  # repeated (i, j) pairs accumulate
    _no_advanced_indexing_left(fused)


@SETTINGS
@given(data=st.data())
def test_index_arrays_broadcast_at_runtime(data):
    r, c, n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)), data.draw(st.integers(0, 12))
    ni, nj = data.draw(st.sampled_from([(n, n), (1, n), (n, 1), (1, 1)]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    i = data.draw(index_array((ni,), r))
    j = data.draw(index_array((nj,), c, "int8"))
    nw = max(ni, nj) if 0 not in (ni, nj) else 0
    fused = _check("loose_index", (rng.normal(size=(r, c)), i, j, rng.normal(size=nw)))
    (node,) = _fused_nodes(fused)
    assert str(node.op.loop.reads[1]) == "$1[$2[~i0], $3[~i0]]"
    assert [w.mode for w in node.op.loop.writes] == [SUM, INC]
    _no_advanced_indexing_left(fused)


def test_index_arrays_broadcast_at_runtime_errors():
    fused, stock, _ = _compiled("loose_index")
    x = np.ones((3, 4))
    for i, j, w in (([0, 1], [0, 1, 2], 3), ([1], [2], 3), ([0, 1], [1], 3)):
        for f in (fused, stock):
            with pytest.raises(ValueError):
                f(x, np.array(i), np.array(j, dtype="int8"), np.ones(w))


@SETTINGS
@given(data=st.data())
def test_index_arrays_split_by_a_slice(data):
    a, b, c, n = (data.draw(st.integers(1, 4)) for _ in range(4))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    i = data.draw(index_array((n,), a))
    j = data.draw(index_array((n,), c, "int16"))
    fused = _check("split_index", (rng.normal(size=(a, b, c)), i, j, rng.normal(size=(n, b))))
    (node,) = _fused_nodes(fused)
    assert str(node.op.loop.reads[1]) == "$1[$2[i0], i1, $3[i0]]"
    _no_advanced_indexing_left(fused)


def test_four_dim_loop_from_a_3d_index():
    X = pt.dmatrix("X")
    idx = pt.ltensor3("idx")
    y = pt.dtensor4("y")
    cost = (pt.exp(X[idx]) * y).sum()
    inputs, outputs = [X, idx, y], [cost, pytensor.grad(cost, X)]
    fused = pytensor.function(inputs, outputs, mode=get_mode(PASS))
    stock = pytensor.function(inputs, outputs, mode=get_mode("none"))
    (node,) = _fused_nodes(fused)
    assert node.op.loop.ndim == 4 and str(node.op.loop.reads[1]) == "$1[$2[i0, i1, i2], i3]"
    # the gradient reshapes y to 2-d for a 2-d buffer: that scatter is left to stock
    assert _count(fused, AdvancedIncSubtensor1) == 1
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(3, 2)), rng.integers(-3, 3, (2, 3, 4)), rng.normal(size=(2, 3, 4, 2)))
    for g, w in zip(fused(*args), stock(*args)):
        np.testing.assert_allclose(g, w, rtol=1e-10)


def test_index_layout_follows_numpy():
    x = pt.dtensor3("x")
    i, j = pt.lvector("i"), pt.lmatrix("j")
    xv, iv, jv = np.zeros((2, 3, 4)), np.zeros(6, int), np.zeros((5, 6), int)
    full = slice(None)
    for index, value, want in (
        (x[:, i, j], xv[:, iv, jv], [("s", 0), ("b", 0), ("b", 1)]),  # adjacent index arrays stay in place
        (x[i, :, j], xv[iv, :, jv], [("b", 0), ("b", 1), ("s", 1)]),  # separated: their axes go first
        (x[j], xv[jv, full, full], [("b", 0), ("b", 1), ("s", 1), ("s", 2)]),
    ):
        layout = ie._layout(3, index.owner.inputs[1:])
        assert list(layout.out) == want and layout.bdim == 2
        assert value.shape == tuple(xv.shape[k] if kind == "s" else (5, 6)[k] for kind, k in layout.out)
    assert ie._layout(3, x[i, 1:].owner.inputs[1:]) is None  # a partial slice
    assert ie._layout(3, x[i, :, :, None].owner.inputs[1:]) is None  # newaxis


@pytest.mark.parametrize("dtypes", [("int8", "uint64"), ("int16", "uint8"), ("int32", "int64")])
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_broadcasting_index_arrays(dtypes, data):
    r, c = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    ni, nj = data.draw(st.integers(0, 7)), data.draw(st.integers(0, 7))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    i = data.draw(index_array((ni,), r, dtypes[0]))
    j = data.draw(index_array((nj,), c, dtypes[1]))
    fused = _check("outer_index", (rng.normal(size=(r, c)), i, j, rng.normal(size=(ni, nj))), *dtypes)
    (node,) = _fused_nodes(fused)
    assert node.op.loop.ndim == 2
    assert "$2[i0, 0]" in str(node.op.loop.reads[1])  # i[:, None]: index axis 1 read at 0
    _no_advanced_indexing_left(fused)


def test_broadcasting_index_arrays_errors():
    fused, stock, ref = _compiled("outer_index", "int32", "int64")
    x = np.ones((3, 4))
    for i, j in (([0, 3], [1]), ([0], [-5, 1])):
        args = (x, np.array(i, dtype="int32"), np.array(j), np.ones((len(i), len(j))))
        for f in (fused, ref):  # stock numba's AdvancedSubtensor does not bounds-check (pytensor 2.38.3)
            with pytest.raises(IndexError):
                f(*args)
    for f in (fused, stock):  # y of the wrong shape: the Elemwise refuses it
        with pytest.raises(ValueError):
            f(x, np.array([0, 1], dtype="int32"), np.array([1]), np.ones((2, 2)))


@SETTINGS
@given(data=st.data())
def test_expanded_gather_broadcasts_against_a_matrix(data):
    size, n, m = data.draw(st.integers(1, 8)), data.draw(st.integers(0, 15)), data.draw(st.integers(0, 4))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    i = data.draw(index_array((n,), size))
    fused = _check("expanded_gather", (rng.normal(size=size), i, rng.normal(size=(n, m))))
    assert _count(fused, AdvancedSubtensor1) == 0
    assert _count(fused, AdvancedIncSubtensor1) == 0


@SETTINGS
@given(data=st.data())
def test_set_through_broadcasting_indices_repeats(data):
    r, c = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    ni, nj = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 6))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    i = data.draw(index_array((ni,), r))
    j = data.draw(index_array((nj,), c))
    x = rng.normal(size=(r, c))
    fused = _check("outer_set", (x, i, j, rng.normal(size=(r, c))))
    (node,) = _fused_nodes(fused)
    assert [w.mode for w in node.op.loop.writes] == [SET]
    _no_advanced_indexing_left(fused)


def test_declines_unsupported_indexing():
    x = pt.dmatrix("x")
    i = pt.lvector("i")
    j = pt.lvector("j")
    t = pt.dmatrix("t")
    rng = np.random.default_rng(0)
    xv, iv = rng.normal(size=(3, 4)), np.array([0, 2, -1])
    cases = [
        ([x, i], pt.exp(x[i, 1:]), (xv, iv)),  # a partial slice
        ([x, i], pt.exp(x[None, i]), (xv, iv)),  # newaxis inside the indexing
    ]
    for inputs, out, args in cases:
        fused = pytensor.function(inputs, out, mode=get_mode(PASS))
        stock = pytensor.function(inputs, out, mode=get_mode("none"))
        assert not _fused_nodes(fused)
        np.testing.assert_allclose(fused(*args), stock(*args))
    # set through a column index: stock writes in idx-major order, the loop would not
    out = pt.set_subtensor(t[:, i], pt.exp(x[:, i]))
    fused = pytensor.function([x, i, t], out, mode=get_mode(PASS))
    assert all(w.mode == STORE for n in _fused_nodes(fused) for w in n.op.loop.writes)
    args = (xv, np.array([1, 1, 0]), np.zeros((3, 4)))
    np.testing.assert_allclose(fused(*args), pytensor.function([x, i, t], out, mode=get_mode("none"))(*args))


def test_general_loop_str_and_facts():
    import pytensor.scalar as ps

    a, b = ps.float64("a"), ps.float64("b")
    comp = ps.Composite([a, b], [a * b])
    # x[i[:, None], j] * y, scattered into buffer $4 at the same positions
    gi, gj = Gather(1, (0, None)), Gather(2, (1,))
    loop = IndexedLoop(comp, (Read(0, (gi, gj)), Read(3, (0, 1))), (Write(0, INC, buffer=4, axes=(gi, gj)),))
    assert loop.ndim == 2
    assert loop.short() == "Composite{(i0 * i1)}($0[$1[i0, 0], $2[i1]], $3[i0, i1]) -> $4[$1[i0, 0], $2[i1]] += o0"
    assert loop.dim_operands(0) == ((1, 0), (3, 0)) and loop.dim_operands(1) == ((2, 0), (3, 1))
    assert loop.dim_source(1) == (2, 0)
    assert {(a, ax) for a, ax, _ in loop.gathered()} == {(0, 0), (0, 1), (4, 0), (4, 1)}
    s = str(loop)
    assert "for i0 < n0 = $1.shape[0]:" in s and "  for i1 < n1 = $2.shape[0]:" in s
    x = np.arange(12.0).reshape(3, 4)
    i = np.array([[2], [-1], [0]], dtype=np.int8)
    j = np.array([3, 3, -4], dtype=np.uint64 if False else np.int16)
    y = np.arange(9.0).reshape(3, 3)
    buf = np.ones((3, 4))
    (got,) = evaluate(loop, [x, i, j, y, buf], ["float64"])
    want = buf.copy()
    np.add.at(want, (i, j[None, :]), x[i, j[None, :]] * y)
    np.testing.assert_allclose(got, want)
    with pytest.raises(IndexError):
        evaluate(loop, [x, i, np.array([4]), np.ones((3, 1)), buf], ["float64"])
    with pytest.raises(ValueError):  # y's columns must match j
        evaluate(loop, [x, i, j, np.ones((3, 2)), buf], ["float64"])
    with pytest.raises(ValueError):  # every term addresses every buffer axis
        Write(0, INC, buffer=4, axes=(gi, gj), also=((0, (gi,)),))
    with pytest.raises(ValueError):  # a buffer read by the loop
        IndexedLoop(comp, (Read(0, (gi, gj)), Read(4, (0, 1))), (Write(0, INC, buffer=4, axes=(gi, gj)),))


def test_loose_gathers_in_the_ir():
    import pytensor.scalar as ps

    a = ps.float64("a")
    comp = ps.Composite([a], [ps.exp(a)])
    gi, gj = Gather(1, (0,), loose=True), Gather(2, (0,), loose=True)
    loop = IndexedLoop(comp, (Read(0, (gi, gj)),), (Write(0),))
    assert str(loop.reads[0]) == "$0[$1[~i0], $2[~i0]]"
    assert loop.dim_operands(0) == () and loop.loose_groups(0) == (((1, 0), (2, 0)),)
    assert "for i0 < n0 = broadcast($1.shape[0], $2.shape[0]):" in str(loop)
    x = np.arange(12.0).reshape(3, 4)
    for i, j in (([2], [0, 3, -1]), ([0, 1, 2], [1]), ([1, 2], [3, 0]), ([1], [])):
        (got,) = evaluate(loop, [x, np.array(i), np.array(j, dtype=np.int64)], ["float64"])
        np.testing.assert_allclose(got, np.exp(x[np.array(i, dtype=int), np.array(j, dtype=int)]))
    with pytest.raises(ValueError):
        evaluate(loop, [x, np.array([0, 1]), np.array([0, 1, 2])], ["float64"])
    src = generate_source(loop, ["float64", "int64", "uint8"], ["float64"])
    compile(src, "<test>", "exec")
    assert "in1[i0 * st1_0]" in src and "in2[i0 * st2_0]" in src


def test_general_source_levels_and_prechecks():
    import pytensor.scalar as ps

    a, b = ps.float64("a"), ps.float64("b")
    comp = ps.Composite([a, b], [a * b])
    # x[:, idx] * c with c a column: idx loaded inside i1, c read once per i0
    loop = IndexedLoop(comp, (Read(0, (0, Gather(1, (1,)))), Read(2, (0, None))), (Write(0, SUM),))
    src = generate_source(loop, ["float64", "int32", "float64"], ["float64"])
    compile(src, "<test>", "exec")
    body = src.split("for i0 in range(n0):")[1]
    outer, inner = body.split("for i1 in range(n1):")
    assert "a1 = in2[i0, 0]" in outer and "in1[i1]" in inner
    head = src.split("for i0 in range(n0):")[0]
    assert "for t in range(in1.shape[0]):" in head  # every index checked, even when no row is visited
    ev = evaluate(loop, [np.ones((0, 2)), np.array([0, 1, 1]), np.ones((0, 1))], ["float64"])
    assert ev[0] == 0.0
    with pytest.raises(IndexError):
        evaluate(loop, [np.ones((0, 2)), np.array([2]), np.ones((0, 1))], ["float64"])


# --- declines -----------------------------------------------------------------


def test_declines_write_target_read_by_loop():
    # inc_subtensor(x[idx], f(x[idx])): the target is also a read source
    x = pt.dvector("x")
    idx = pt.lvector("idx")
    res = pt.inc_subtensor(x[idx], pt.exp(x[idx]))
    fused = pytensor.function([x, idx], res, mode=get_mode(PASS))
    stock = pytensor.function([x, idx], res, mode=get_mode("none"))
    for node in _fused_nodes(fused):
        assert all(w.mode == STORE for w in node.op.loop.writes)
    args = (np.arange(4.0), np.array([0, 0, 3]))
    np.testing.assert_allclose(fused(*args), stock(*args))


def test_declines_unproven_write_length():
    # y's length is not tied to the write index: AdvancedIncSubtensor1 may broadcast y
    x = pt.dvector("x")
    v = pt.dvector("v")
    idx = pt.lvector("idx")
    res = pt.inc_subtensor(x[idx], pt.exp(v))
    fused = pytensor.function([x, v, idx], res, mode=get_mode(PASS))
    stock = pytensor.function([x, v, idx], res, mode=get_mode("none"))
    # exp(v) may run as a loop of its own (it calls libm), never with the scatter inside
    assert not [w for n in _fused_nodes(fused) for w in n.op.loop.writes if w.buffer is not None]
    assert _count(fused, AdvancedIncSubtensor1) == 1
    args = (np.zeros(4), np.array([1.0]), np.array([0, 0, 3]))
    np.testing.assert_allclose(fused(*args), stock(*args))


def test_rewrite_never_raises(monkeypatch):
    def boom(fgraph, node):
        raise RuntimeError("boom")

    monkeypatch.setattr(im, "build_fused", boom)
    inputs, outputs = _seed()
    fn = pytensor.function(inputs, outputs, mode=get_mode(PASS))
    assert not _fused_nodes(fn)


# --- plugin and pymc ---------------------------------------------------------------


def test_plugin_enables_on_stock_numba_mode():
    from pmfast.plugin import enabled

    inputs, outputs = _seed()
    with enabled(PASS):
        fn = pytensor.function(inputs, outputs, mode="NUMBA")
    assert len(_fused_nodes(fn)) == 1
    assert fired(fn) == {"indexed_elemwise": 1}
    fn2 = pytensor.function(inputs, outputs, mode="NUMBA")
    assert not _fused_nodes(fn2)


def _radon(n_obs=300, n_counties=20, seed=0):
    import pymc as pm

    rng = np.random.default_rng(seed)
    county = rng.integers(0, n_counties, n_obs)
    floor = rng.integers(0, 2, n_obs).astype(float)
    y = rng.normal(size=n_obs)
    with pm.Model() as model:
        mu_a = pm.Normal("mu_a", 0, 1)
        sigma_a = pm.HalfNormal("sigma_a", 1)
        a = pm.Normal("a", mu_a, sigma_a, shape=n_counties)
        b = pm.Normal("b", 0, 1, shape=n_counties)
        sigma = pm.HalfNormal("sigma", 1)
        mu = a[county] + b[county] * floor
        pm.Normal("y", mu, sigma, observed=y)
    return model


def test_radon_like_model_logp_dlogp():
    model = _radon()
    fns = {
        name: model.logp_dlogp_function(ravel_inputs=True, mode=get_mode(p))
        for name, p in (("fused", PASS), ("stock", "none"))
    }
    fused_fn = fns["fused"]._pytensor_function
    assert len(_fused_nodes(fused_fn)) >= 1
    assert fired(fused_fn).get("indexed_elemwise", 0) >= 1
    assert _count(fused_fn, AdvancedIncSubtensor1) == 0
    assert not _fused_nodes(fns["stock"]._pytensor_function)
    for f in fns.values():
        f.set_extra_values({})
    rng = np.random.default_rng(3)
    n = sum(int(np.prod(v.shape)) for v in model.initial_point().values())
    for _ in range(3):
        q = rng.normal(size=n)
        lf, gf = fns["fused"](q)
        ls, gs = fns["stock"](q)
        np.testing.assert_allclose(lf, ls, rtol=1e-9)
        np.testing.assert_allclose(gf, gs, rtol=1e-9, atol=1e-12)


def test_plugin_reaches_scan_inner_graph():
    from pytensor.scan.op import Scan

    from pmfast.plugin import enabled

    x = pt.dvector("x")
    idx = pt.lmatrix("idx")
    v = pt.dvector("v")

    def step(i, x, v):  # the gather depends on the step: not pushed out of the scan
        c = ((x[i] - v) ** 2).sum()
        return c + pytensor.grad(c, x).sum()

    res = pytensor.scan(step, sequences=[idx], non_sequences=[x, v], return_updates=False)
    with enabled(PASS):
        fused = pytensor.function([x, idx, v], res, mode="NUMBA")
    stock = pytensor.function([x, idx, v], res, mode="NUMBA")
    (scan_node,) = [n for n in fused.maker.fgraph.toposort() if isinstance(n.op, Scan)]
    inner = [n for n in scan_node.op.fgraph.toposort() if isinstance(n.op, ie.IndexedElemwise)]
    assert len(inner) == 1
    assert fired(scan_node.op.fgraph) == {"indexed_elemwise": 1}
    args = (np.arange(4.0), np.array([[3, 0, 0, -2, 1], [1, 1, 1, 1, 1]]), np.linspace(0, 1, 5))
    np.testing.assert_allclose(fused(*args), stock(*args), rtol=1e-12)
    np.testing.assert_allclose(fused(*args), stock(*args), rtol=1e-12)  # the pushed-out buffer is reused


def test_write_into_view_of_a_read_source():
    # the target is a view of a loop operand: it must never be written in place
    x = pt.dvector("x")
    idx = pt.lvector("idx")
    base = x * 1.5
    res = pt.inc_subtensor(base[1:][idx], pt.exp(base[idx]))
    fused = pytensor.function([x, idx], res, mode=get_mode(PASS))
    stock = pytensor.function([x, idx], res, mode=get_mode("none"))
    (node,) = _fused_nodes(fused)
    assert node.op.loop.inplace == ()  # the DestroyHandler refuses: base[1:] aliases base
    args = (np.arange(5.0), np.array([0, 0, 3, -1]))
    np.testing.assert_allclose(fused(*args), stock(*args), rtol=1e-12)
    np.testing.assert_allclose(_py_reference(fused)(*args)[0], stock(*args), rtol=1e-12)


def test_too_wide_nodes_drop_scatters_then_decline():
    def build(n):
        bs = [pt.dvector(f"b{i}") for i in range(n)]
        idxs = [pt.lvector(f"i{i}") for i in range(n)]
        y = pt.dvector("y")
        cost = ((y - sum(b[i] for b, i in zip(bs, idxs))) ** 2).sum()
        return [*bs, *idxs, y], [cost, *pytensor.grad(cost, bs)]

    rng = np.random.default_rng(0)
    for n, scattered in ((8, True), (12, False)):
        inputs, outputs = build(n)
        fn = pytensor.function(inputs, outputs, mode=get_mode(PASS))
        (node,) = _fused_nodes(fn)
        assert len(node.inputs) <= ie.MAX_ARGS
        assert any(w.mode == INC for w in node.op.loop.writes) == scattered
        stock = pytensor.function(inputs, outputs, mode=get_mode("none"))
        args = [rng.normal(size=3) for _ in range(n)] + [rng.integers(-3, 3, 20) for _ in range(n)]
        args.append(rng.normal(size=20))
        for g, w in zip(fn(*args), stock(*args)):
            np.testing.assert_allclose(g, w, rtol=1e-10)
    # 16 gathers alone need 33 inputs: declined
    inputs, outputs = build(16)
    assert not _fused_nodes(pytensor.function(inputs, outputs, mode=get_mode(PASS)))


# --- lazily evaluated Switch branches in the scalar body ------------------------


def _scalar_graph():
    import pytensor.scalar as ps

    a, b = ps.float64("a"), ps.bool("b")
    shared = ps.exp(a)  # used in both branches: computed once, before the if
    heavy = ps.log1p(shared)
    out = ps.switch(b, ps.softplus(a) + shared, ps.switch(a > 0, heavy, shared * 2))
    cheap = ps.switch(b, a * 2, a + 1)  # cheap branches: stays a select
    return ps.Composite([a, b], [out, cheap])


def test_lazy_plan_and_source():
    from pmfast.loops.codegen import lazy_composite_plan, lazy_composite_source

    comp = _scalar_graph()
    order, context, lazy = lazy_composite_plan(comp.fgraph)
    names = {type(n.op.scalar_op if hasattr(n.op, "scalar_op") else n.op).__name__ for n in lazy}
    assert names == {"Switch"}
    assert len(lazy) == 2  # the outer switch and the nested one; not the cheap one
    exp_node = next(n for n in order if type(n.op).__name__ == "Exp")
    assert context[exp_node] == ()  # needed in both branches -> hoisted
    src, nodes, consts = lazy_composite_source(comp.fgraph)
    assert src.count("if ") == 2 and "else:" in src
    assert sum(type(n.op).__name__ == "Exp" for n in nodes) == 1
    assert sum(type(n.op).__name__ == "Log1p" for n in nodes) == 1
    # nothing expensive under a switch -> no lazy body
    import pytensor.scalar as ps

    a, b = ps.float64("a"), ps.bool("b")
    assert lazy_composite_source(ps.Composite([a, b], [ps.switch(b, a * 2, a - 1)]).fgraph) is None
    # an op that can raise (integer division by zero): stock evaluation of every branch is kept
    n, m = ps.int64("n"), ps.int64("m")
    raising = ps.Composite([a, b, n, m], [ps.switch(b, ps.exp(a), ps.cast(n // m, "float64"))])
    assert lazy_composite_source(raising.fgraph) is None


@st.composite
def lazy_data(draw):
    size = draw(st.integers(1, 12))
    n = draw(st.integers(0, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    special = draw(st.sampled_from([None, np.inf, -np.inf, np.nan, 40.0, -40.0]))
    skill = 3 * rng.normal(size=size)
    if special is not None:
        skill[draw(st.integers(0, size - 1))] = special
    p1 = _index_data(draw, n, size, "int64")
    p2 = _index_data(draw, n, size, "int32")
    y = rng.integers(0, 2, n).astype("int8")
    return skill, p1, p2, y


@SETTINGS
@given(lazy_data())
def test_lazy_switch_matches_stock(args):
    fused, stock, _ = _compiled("lazy_switch")
    got = fused(*args)
    want = stock(*[np.copy(a) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)  # also NaN where stock has NaN
    from pmfast.loops.codegen import lazy_composite_source

    lazy = [n for n in _fused_nodes(fused) if lazy_composite_source(n.op.loop.scalar_op.fgraph) is not None]
    assert lazy, "no fused loop got a lazy scalar body"
    from pytensor.tensor.math import All, Any

    from pytensor.tensor.basic import MakeVector

    # the parameter checks are absorbed as all/any writes (shape Asserts reduce MakeVectors: not checks)
    checks = [
        n
        for n in fused.maker.fgraph.toposort()
        if isinstance(n.op, All | Any) and not isinstance(getattr(n.inputs[0].owner, "op", None), MakeVector)
    ]
    assert not checks


def test_lazy_switch_structure_and_switch_off(monkeypatch):
    rng = np.random.default_rng(1)
    skill, p1, p2 = rng.normal(size=6), rng.integers(-6, 6, 30), rng.integers(-6, 6, 30).astype("int32")
    y = rng.integers(0, 2, 30).astype("int8")
    _check("lazy_switch", (skill, p1, p2, y))
    monkeypatch.setattr(dispatch, "LAZY_SWITCH", False)
    inputs, outputs = _lazy_switch()
    eager = pytensor.function(inputs, outputs, mode=get_mode(PASS))
    fused, _, _ = _compiled("lazy_switch")
    for g, w in zip(fused(skill, p1, p2, y), eager(skill, p1, p2, y)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    with pytest.raises(IndexError):
        fused(skill, np.array([6] * 30), p2, y)


def test_lift_switches_same_op_branches():
    import pytensor.scalar as ps

    from pmfast.loops.codegen import lazy_composite_source, lift_switches

    x, y = ps.float64("x"), ps.bool("y")
    lp = ps.switch(y, -ps.softplus(-x), -ps.softplus(x))
    comp = ps.Composite([x, y], [lp, -x])  # -x also used outside: the lifted graph still shares it
    fg, n = lift_switches(comp.fgraph)
    assert n == 2  # neg, then softplus
    names = [type(nd.op).__name__ for nd in fg.toposort()]
    assert names.count("Softplus") == 1 and names.count("Switch") == 1
    assert sum(type(nd.op).__name__ == "Switch" for nd in comp.fgraph.toposort()) == 1  # the original is untouched
    lifted = ps.Composite(fg.inputs, fg.outputs)
    for xv in (-50.0, -3.0, 0.0, 0.5, 20.0, 40.0, np.inf, -np.inf, np.nan):
        for yv in (True, False):
            got, want = lifted.impl(xv, yv), comp.impl(xv, yv)
            np.testing.assert_array_equal(np.asarray(got, dtype=float), np.asarray(want, dtype=float))
    src = lazy_composite_source(comp.fgraph)[0]
    assert "if " not in src  # nothing expensive left under a branch: a plain select


def test_lift_switches_declines():
    import pytensor.scalar as ps

    from pmfast.loops.codegen import lift_switches

    x, y = ps.float64("x"), ps.bool("y")
    f = ps.float32("f")
    e = ps.exp(x)
    # a branch used elsewhere, different ops, different input types: nothing lifted
    for outs in (
        [ps.switch(y, e, ps.exp(-x)), e],
        [ps.switch(y, ps.exp(x), ps.log1p(x))],
        [ps.switch(y, ps.exp(x), ps.exp(ps.cast(f, "float64")) * 1.0)],
        [ps.switch(y, ps.switch(y, x, x + 1), ps.switch(y, x * 2, x))],
    ):
        comp = ps.Composite([x, y, f], outs)
        fg, n = lift_switches(comp.fgraph)
        assert n == 0 and fg is comp.fgraph


def test_broadcast_reads_hoisted_before_the_loop():
    loop = IndexedLoop(_composite(), (_gather(0, 1), Read(2, (None,))), (Write(0, SUM), Write(1, STORE)))
    src = generate_source(loop, ["float64", "int64", "float64"], ["float64", "float64"])
    head, body = src.split("for i0 in range(n0):")
    assert "a1 = in2[0]" in head and "a1 =" not in body
    assert "a0 = in0[p1]" in body and "p1 = np.uint64(j0 + size0_0 if j0 < 0 else j0)" in body


@functools.cache
def _bernoulli_terms(math_loops: bool):
    """``(y * eta - softplus(eta)).sum()`` and its gradient, libm bodies (no vector_math), with and
    without :data:`dispatch.MATH_LOOPS`; the stock function."""
    eta, yv = pt.vector("eta", shape=(1003,)), pt.vector("yv", shape=(1003,))
    logp = (yv * eta - pt.softplus(eta)).sum()
    outs = [logp, pytensor.grad(logp, eta)]
    old = dispatch.MATH_LOOPS
    dispatch.MATH_LOOPS = math_loops
    try:
        fn = pytensor.function([eta, yv], outs, mode=get_mode(PASS))
    finally:
        dispatch.MATH_LOOPS = old
    return fn, pytensor.function([eta, yv], outs, mode=get_mode("none"))


def test_calls_math():
    import pytensor.scalar as ps

    from pmfast.vmath.ops import VmathExp

    a, b = ps.float64(), ps.float64()
    assert dispatch.calls_math(ps.exp) and dispatch.calls_math(ps.log1p)
    assert dispatch.calls_math(ps.Composite([a, b], [ps.add(ps.mul(a, b), ps.softplus(a))]))
    assert not dispatch.calls_math(ps.add) and not dispatch.calls_math(ps.Composite([a], [ps.sqrt(a * a)]))
    i, j = ps.int64(), ps.int64()
    assert not dispatch.calls_math(ps.Composite([i, j, a], [ps.exp(a) + ps.int_div(i, j)]))  # may raise
    assert not dispatch.calls_math(VmathExp(ps.upgrade_to_float, name="exp"))  # pmfast.vmath: will_vectorize's


def test_libm_body_runs_as_a_loop(monkeypatch):
    """A gather-free 1-d Elemwise calling libm runs as a loop with its Sum absorbed (no per-element
    call of the scalar core), same values as stock, also at the extremes; off: stock's Elemwise."""
    fn, stock = _bernoulli_terms(True)
    nodes = _fused_nodes(fn)
    assert len(nodes) == 2  # the logp terms and the gradient
    assert [SUM] in [[w.mode for w in n.op.loop.writes] for n in nodes]
    off, _ = _bernoulli_terms(False)
    assert not _fused_nodes(off)
    rng = np.random.default_rng(3)
    eta = np.concatenate([rng.normal(0, 3, 997), [0.0, -800.0, 800.0, 1e-300, -40.0, 40.0]])
    yv = rng.integers(0, 2, eta.size).astype(float)
    for got, want in zip(fn(eta, yv), stock(eta, yv)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    eta[:2] = np.nan, 1.0
    got, want = fn(eta, yv), stock(eta, yv)
    assert np.isnan(got[0]) and np.isnan(want[0])
    np.testing.assert_array_equal(np.isnan(got[1]), np.isnan(want[1]))


def test_short_static_libm_body_keeps_stock():
    """Below ``MIN_MATH_LOOP`` elements of static length, or of a length not static, the Elemwise
    stays stock's."""
    u = pt.vector("u")
    assert not _fused_nodes(pytensor.function([u], pt.exp(u).sum(), mode=get_mode(PASS)))
    v = pt.vector("v", shape=(im.MIN_MATH_LOOP - 1,))
    fn = pytensor.function([v], pt.exp(v).sum(), mode=get_mode(PASS))
    assert not _fused_nodes(fn)
    w = pt.vector("w", shape=(im.MIN_MATH_LOOP,))
    fn = pytensor.function([w], pt.exp(w).sum(), mode=get_mode(PASS))
    assert len(_fused_nodes(fn)) == 1
    np.testing.assert_allclose(fn(np.linspace(-1, 1, im.MIN_MATH_LOOP)), np.exp(np.linspace(-1, 1, im.MIN_MATH_LOOP)).sum(), rtol=1e-14)
