"""Tests of the ``softmax_rows`` pass: last-axis softmax / log-softmax in one row loop."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from pytensor.compile.mode import Mode
from pytensor.tensor.special import LogSoftmax, Softmax

from pmfast.mode import get_mode
from pmfast.passes import fired
from pmfast.passes.softmax_rows import RowSoftmax

PASS = ["softmax_rows"]


@functools.cache
def _compiled(kind: str, ndim: int = 2, axis: int = -1, dtype: str = "float64"):
    x = pt.tensor("x", shape=(None,) * ndim, dtype=dtype)
    outs = []
    if kind in ("both", "softmax"):
        outs.append(pt.special.softmax(x, axis=axis))
    if kind in ("both", "log_softmax"):
        outs.append(pt.special.log_softmax(x, axis=axis))
    if kind == "categorical":  # pm.Categorical(logit_p=x): logp and its gradient
        y = pt.vector("y", dtype="int64")
        logp = pt.special.log_softmax(x, axis=-1)[pt.arange(x.shape[0]), y].sum()
        fns = [pytensor.function([x, y], [logp, pytensor.grad(logp, x)], mode=m) for m in (get_mode(PASS), get_mode("none"))]
        return tuple(fns)
    return tuple(pytensor.function([x], outs, mode=m) for m in (get_mode(PASS), get_mode("none")))


def _ops(fn):
    return [n.op for n in fn.maker.fgraph.toposort()]


def _matrices(ndim=2):
    elements = st.one_of(
        st.floats(-30, 30),
        st.sampled_from([-np.inf, np.inf, np.nan, 700.0, -700.0]),
    )
    return hnp.arrays("float64", hnp.array_shapes(min_dims=ndim, max_dims=ndim, min_side=0, max_side=7), elements=elements)


def _assert_same(got, ref):
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-300, equal_nan=True)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(x=_matrices())
def test_both_in_one_node(x):
    fast, stock = _compiled("both")
    ops = _ops(fast)
    assert [type(op) for op in ops] == [RowSoftmax] and ops[0].outputs == ("softmax", "log_softmax")
    assert fired(fast) == {"softmax_rows": 1}
    _assert_same(fast(x), stock(x))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(x=_matrices(ndim=1), kind=st.sampled_from(["softmax", "log_softmax"]))
def test_single_output_vector(x, kind):
    fast, stock = _compiled(kind, ndim=1)
    assert [op.outputs for op in _ops(fast)] == [(kind,)]
    if x.size == 0:  # stock: np.max of an empty vector raises; so does the pass
        for fn in (fast, stock):
            with pytest.raises(ValueError, match="zero-size"):
                fn(x)
        return
    _assert_same(fast(x), stock(x))


@settings(max_examples=10, deadline=None, derandomize=True)
@given(data=st.data())
def test_categorical_logp_and_gradient(data):
    fast, stock = _compiled("categorical")
    assert sum(isinstance(op, RowSoftmax) for op in _ops(fast)) == 1
    assert not any(isinstance(op, Softmax | LogSoftmax) for op in _ops(fast))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    n, m = data.draw(st.integers(0, 30)), data.draw(st.integers(1, 8))
    x, y = rng.normal(size=(n, m)) * 5, rng.integers(-m, m, n)
    _assert_same(fast(x, y), stock(x, y))


def test_declined_without_compiling():
    from pytensor.graph.rewriting.utils import rewrite_graph

    x3 = pt.tensor3("x3")
    out = rewrite_graph(pt.special.softmax(x3, axis=-1), include=("pmfast.softmax_rows",))
    assert isinstance(out.owner.op, Softmax)  # ndim 3: left to stock
    x = pt.matrix("x")
    out = rewrite_graph(pt.special.softmax(x, axis=-1), include=("pmfast.softmax_rows",))
    assert isinstance(out.owner.op, RowSoftmax)  # the same query does rewrite a matrix


@pytest.mark.parametrize("args", [dict(axis=0), dict(dtype="float32")])
def test_declined(args):
    fast, stock = _compiled("both", **args)
    assert not any(isinstance(op, RowSoftmax) for op in _ops(fast))
    x = np.random.default_rng(0).normal(size=(3,) * args.get("ndim", 2)).astype(args.get("dtype", "float64"))
    _assert_same(fast(x), stock(x))


def test_perform_matches_numba():
    fast, _ = _compiled("both")
    fg = fast.maker.fgraph.clone()
    py = pytensor.function(fg.inputs, fg.outputs, mode=Mode(linker="py", optimizer=None))
    x = np.random.default_rng(1).normal(size=(4, 6)) * 10
    _assert_same(py(x), fast(x))
