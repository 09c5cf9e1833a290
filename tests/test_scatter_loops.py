"""Tests of the scatter loops: left-over ``AdvancedIncSubtensor1`` nodes run as identity ``IndexedElemwise`` loops."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.tensor.subtensor import AdvancedIncSubtensor1

import pmfast.passes.indexed_elemwise as ie
import pmfast.passes.scatter_loops as sl
from pmfast.mode import get_mode

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)
PASS = ["indexed_elemwise"]


def _categorical(k: int):
    """``k`` gathered (5, 4) blocks summed into a categorical likelihood; logp and every block's gradient."""
    y = pt.vector("y", dtype="int64")
    bs = [pt.matrix(f"b{j}") for j in range(k)]
    idx = [pt.vector(f"i{j}", dtype="int64") for j in range(k)]
    logits = sum(b[i] for b, i in zip(bs, idx))
    logp = pt.special.log_softmax(logits, axis=-1)[pt.arange(logits.shape[0]), y].sum()
    return [y, *bs, *idx], [logp, *pytensor.grad(logp, bs)]


def _softmax_scatters(k: int):
    """``k`` scatters of ``softmax(b[idx])`` (not an Elemwise output) by the same index."""
    b = pt.tensor("b", shape=(None, 4))  # the class axis: static, as pymc's reshaped parameters are
    idx = pt.vector("idx", dtype="int64")
    zs = [pt.tensor(f"z{j}", shape=(None, 4)) for j in range(k)]
    y = pt.special.softmax(b[idx], axis=-1)
    return [b, idx, *zs], [pt.inc_subtensor(z[idx], y) for z in zs]


def _softmax_set(static: bool):
    """``set_subtensor(z[idx], softmax(x))``: ``y`` is not an Elemwise output."""
    shape = (6, 3) if static else (None, 3)
    x = pt.tensor("x", shape=shape)
    z = pt.matrix("z")
    idx = pt.tensor("idx", shape=shape[:1], dtype="int32")
    out = pt.set_subtensor(z[idx], pt.special.softmax(x, axis=-1))
    return [x, z, idx], [out * 2.0]


def _chained():
    """``inc(inc(z, y, i1), y, i2)``: the second scatter's buffer is the first's result."""
    x, z = pt.matrix("x"), pt.matrix("z")
    i1, i2 = pt.vector("i1", dtype="int64"), pt.vector("i2", dtype="int64")
    yv = pt.special.softmax(x, axis=-1)
    yv = pt.specify_shape(yv, (6, 3))
    out = pt.inc_subtensor(pt.inc_subtensor(z[i1], yv)[i2], yv)
    return [x, z, i1, i2], [out]


STRUCTURES = {
    "categorical3": lambda: _categorical(3),
    "softmax3": lambda: _softmax_scatters(3),
    "set_static": lambda: _softmax_set(True),
    "set_unknown": lambda: _softmax_set(False),
    "chained": _chained,
}


@functools.cache
def _compiled(name):
    ins, outs = STRUCTURES[name]()
    return tuple(pytensor.function(ins, outs, mode=m) for m in (get_mode(PASS), get_mode("none")))


def _nodes(fn, op_type):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, op_type)]


def _scatter_loops(fn):
    return [n for n in _nodes(fn, ie.IndexedElemwise) if type(n.op.loop.scalar_op).__name__ == "Identity"]


def _check(name, args):
    fast, stock = _compiled(name)
    for got, ref in zip(fast(*[np.copy(a) for a in args]), stock(*args), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)


def _categorical_args(draw, k):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = draw(st.integers(0, 30))
    return [rng.integers(0, 4, n)] + [rng.normal(size=(5, 4)) for _ in range(k)] + [rng.integers(-5, 5, n) for _ in range(k)]


@SETTINGS
@given(data=st.data())
def test_one_loop_for_all_scatters_of_one_y(data):
    fast, _ = _compiled("softmax3")
    assert not _nodes(fast, AdvancedIncSubtensor1)
    (loop,) = _scatter_loops(fast)
    assert [w.mode for w in loop.op.loop.writes] == ["inc"] * 3
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    n, rows = data.draw(st.integers(0, 20)), data.draw(st.integers(1, 5))
    args = [rng.normal(size=(rows, 4)), rng.integers(-rows, rows, n)] + [rng.normal(size=(rows, 4)) for _ in range(3)]
    _check("softmax3", args)


@SETTINGS
@given(data=st.data())
def test_gradient_scatters_join_the_loop_computing_them(data):
    # the categorical gradient is an Elemwise of the softmax: with the lengths proven
    # graph-wide (the gathers' loop checks), its three scatters run inside its loop
    fast, _ = _compiled("categorical3")
    assert not _nodes(fast, AdvancedIncSubtensor1) and not _scatter_loops(fast)
    assert any(sum(w.mode == "inc" for w in n.op.loop.writes) == 3 for n in _nodes(fast, ie.IndexedElemwise))
    _check("categorical3", _categorical_args(data.draw, 3))


def test_scatters_beyond_the_cap_take_a_second_loop(monkeypatch):
    monkeypatch.setattr(sl, "MAX_SCATTERS", 2)  # three scatters of one y: a loop of 2, then 1
    ins, outs = _softmax_scatters(3)
    fast = pytensor.function(ins, outs, mode=get_mode(PASS))
    assert not _nodes(fast, AdvancedIncSubtensor1)
    assert sorted(len(n.op.loop.writes) for n in _scatter_loops(fast)) == [1, 2]
    _, stock = _compiled("softmax3")
    rng = np.random.default_rng(3)
    args = [rng.normal(size=(5, 4)), rng.integers(-5, 5, 9)] + [rng.normal(size=(5, 4)) for _ in range(3)]
    for got, ref in zip(fast(*[np.copy(a) for a in args]), stock(*args), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)


def test_the_cap_keeps_loops_within_30_arguments():
    assert 1 + 2 * sl.MAX_SCATTERS <= 30


@SETTINGS
@given(data=st.data())
def test_set_with_repeats_matches_stock(data):
    fast, _ = _compiled("set_static")
    (loop,) = _scatter_loops(fast)
    assert loop.op.loop.writes[0].mode == "set"
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    rows = data.draw(st.integers(1, 4))
    _check("set_static", [rng.normal(size=(6, 3)), rng.normal(size=(rows, 3)), rng.integers(-rows, rows, 6).astype("int32")])


def test_unproven_length_is_left_to_stock():
    fast, _ = _compiled("set_unknown")
    assert not _scatter_loops(fast) and len(_nodes(fast, AdvancedIncSubtensor1)) == 1
    rng = np.random.default_rng(0)
    # a length-1 y broadcasts into every indexed row in stock: still the stock node
    _check("set_unknown", [rng.normal(size=(1, 3)), rng.normal(size=(4, 3)), np.array([0, 2, 3], dtype="int32")])


@SETTINGS
@given(data=st.data())
def test_chained_scatters(data):
    fast, _ = _compiled("chained")
    assert not _nodes(fast, AdvancedIncSubtensor1)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    rows = data.draw(st.integers(1, 5))
    _check("chained", [rng.normal(size=(6, 3)), rng.normal(size=(rows, 3)), rng.integers(-rows, rows, 6), rng.integers(-rows, rows, 6)])


def test_out_of_range_raises():
    fast, _ = _compiled("categorical3")
    args = [np.zeros(3, dtype="int64")] + [np.zeros((5, 4))] * 3 + [np.array([0, 1, 5])] * 3
    with pytest.raises(IndexError):
        fast(*args)


def test_rewrite_never_raises(monkeypatch):
    def boom(*a):
        raise RuntimeError("boom")

    monkeypatch.setattr(sl, "build_scatter_loop", boom)
    ins, outs = _categorical(2)
    fn = pytensor.function(ins, outs, mode=get_mode(PASS))
    assert not _scatter_loops(fn)
