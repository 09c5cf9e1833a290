"""pmfast.compiler.basic_index: Subtensor / IncSubtensor with constant indices give stock's values, shapes and errors."""

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from conftest import assert_same_as_stock
from hypothesis import strategies as st
from pytensor.tensor.subtensor import IncSubtensor, Subtensor

import pmfast
from pmfast import compiler
from pmfast.compiler import basic_index

compiler.setup()

_bound = st.one_of(st.none(), st.integers(-7, 7))
_step = st.sampled_from([None, 1, 2, 3, -1, -2, -3])


@st.composite
def _index(draw, ndim):
    """A basic index of up to ``ndim`` entries: integers (out of range too) and slices."""
    n = draw(st.integers(1, ndim))
    out = []
    for _ in range(n):
        if draw(st.booleans()):
            out.append(draw(st.integers(-6, 5)))
        else:
            out.append(slice(draw(_bound), draw(_bound), draw(_step)))
    return tuple(out)


def _callable(node):
    """The node function ``basic_index`` makes for ``node``, callable from Python (pytensor's have no
    CPython wrapper)."""
    fn, key = basic_index.funcify(node.op, node)
    assert key is not None
    return numba.njit(fn.py_func)


def _node_fn(out, n_skip):
    node = out.owner
    return _callable(node), [np.asarray(c.data) for c in node.inputs[n_skip:]]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3), data=st.data(), order=st.sampled_from("CF"), dtype=st.sampled_from(["float64", "int32", "uint8"]))
def test_view_is_numpys(shape, data, order, dtype):
    """Values, shape, strides, memory and errors of ``x[idx]`` as numpy's (which stock's numba follows)."""
    idx = data.draw(_index(len(shape)))
    x = pt.tensor("x", shape=(None,) * len(shape), dtype=dtype)
    out = x[idx]
    if type(out.owner.op) is not Subtensor or out.ndim == 0:
        return
    fn, consts = _node_fn(out, 1)
    xv = np.asarray(np.arange(int(np.prod(shape))).reshape(shape), dtype=dtype, order=order)
    try:
        want = xv[idx]
    except IndexError:
        with pytest.raises(IndexError, match=basic_index.BOUNDS_MSG):
            fn(xv, *consts)
        return
    got = fn(xv, *consts)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if want.size > 1:
        assert got.strides == want.strides
    if want.size:
        assert np.shares_memory(got, xv)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data(), set_=st.booleans(), inplace=st.booleans())
def test_update_is_numpys(shape, data, set_, inplace):
    """``x[idx] += y`` / ``= y`` with ``y`` broadcast (fewer axes, length-1 axes, a scalar) as numpy's."""
    idx = data.draw(_index(len(shape)))
    xv = np.arange(int(np.prod(shape)), dtype="float64").reshape(shape)
    try:
        target = xv[idx]
    except IndexError:
        return
    k = data.draw(st.integers(0, np.ndim(target)))
    yshape = [data.draw(st.sampled_from([n, 1])) for n in np.shape(target)[np.ndim(target) - k :]]
    yv = np.asarray(np.random.default_rng(len(yshape)).normal(size=yshape))
    x = pt.tensor("x", shape=(None,) * len(shape))
    y = pt.tensor("y", shape=(None,) * len(yshape))
    out = pt.set_subtensor(x[idx], y) if set_ else pt.inc_subtensor(x[idx], y)
    node = out.owner
    assert type(node.op) is IncSubtensor
    if inplace:
        node = node.op.__class__(node.op.idx_list, inplace=True, set_instead_of_inc=node.op.set_instead_of_inc).make_node(*node.inputs)
    fn = _callable(node)
    consts = [np.asarray(c.data) for c in node.inputs[2:]]
    want = xv.copy()
    if set_:
        want[idx] = yv
    else:
        want[idx] += yv
    arg = xv.copy()
    got = fn(arg, yv, *consts)
    np.testing.assert_array_equal(got, want)
    assert (got is arg) == inplace or not inplace
    if not inplace:
        np.testing.assert_array_equal(arg, xv)  # the input is not written


def test_update_rejects_a_y_that_does_not_broadcast():
    x, y = pt.matrix("x"), pt.vector("y")
    out = pt.inc_subtensor(x[1:, 0], y)
    fn = _callable(out.owner)
    with pytest.raises(ValueError):
        fn(np.zeros((4, 2)), np.ones(2), *[np.asarray(c.data) for c in out.owner.inputs[2:]])


def _both(inputs, outputs):
    return (
        pytensor.function(inputs, outputs, mode=pmfast.get_mode(), on_unused_input="ignore"),
        pytensor.function(inputs, outputs, mode="NUMBA", on_unused_input="ignore"),
    )


def test_graphs_equal_stock_numba():
    """Through pmfast's mode against pytensor's NUMBA mode: reads, writes, their gradients, empty results."""
    x = pt.tensor3("x")
    v = pt.vector("v")
    y = pt.vector("y")
    cost = (x[1, ::-1] ** 2).sum() + (v[-7:10:2] * v[5:1:-2][:1].sum()).sum() + (x[::2, 1:, 0] * v[1]).sum()
    outs = [
        v[2:], v[::-1], v[3:1], x[1, ::-1], x[:, -1], x[::2, 1:, 0], x[1:3, 0] * 2,
        pt.inc_subtensor(x[1, :, 0], y), pt.set_subtensor(x[::-1, 1:3, -1], y[:2]), pt.inc_subtensor(x[:, 0], y[0]),
        pt.set_subtensor(v[1:4], 5.0), pt.inc_subtensor(v[::2], v[:3]), cost, *pt.grad(cost, [x, v]),
    ]
    ours, stock = _both([x, v, y], outs)
    ops = [n for n in ours.maker.fgraph.toposort() if type(n.op) in (Subtensor, IncSubtensor)]
    assert sum(basic_index.funcify(n.op, n) is not None for n in ops) >= 10
    xv = np.random.default_rng(0).normal(size=(3, 4, 5))
    vv, yv = np.arange(6.0), np.arange(4.0) + 100
    for a, b in zip(ours(xv, vv, yv), stock(xv, vv, yv), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    for args in ((xv[:1], vv, yv), (xv, vv[:0], yv)):  # x[1] out of range; empty vectors
        assert_same_as_stock(stock, ours, args)


def test_declines_other_forms():
    x, i = pt.vector("x"), pt.lscalar("i")
    m = pt.matrix("m")
    for out, skip in ((x[i:], 1), (x[i], 1), (m[1, 2], 1), (pt.inc_subtensor(x[1:], pt.ivector("iy")), 2)):
        node = out.owner
        assert basic_index.funcify(node.op, node) is None, out


def test_alloc_and_join_of_arrays_equal_stock_numba():
    """Alloc (a constant, a vector, a scalar, run-time lengths) and Join of matrices / 3-d arrays along
    each axis: stock's values, dtypes, shapes; the same error type for a run-time broadcast and for
    pieces whose other axes differ."""
    from pytensor.tensor.basic import Alloc, Join

    from pmfast.compiler import join

    v, m, n = pt.vector("v"), pt.matrix("m"), pt.matrix("n")
    k = pt.lscalar("k")
    t3 = pt.tensor3("t3")
    im = pt.imatrix("im")
    outs = [
        pt.alloc(np.zeros((1, 1)), 3, k), pt.alloc(v, k, v.shape[0]), pt.alloc(v[0], 2, k, 2), pt.alloc(v, k, 1, v.shape[0]) * 2, pt.alloc(v, 2, 4),
        pt.join(1, m, n), pt.join(0, m, m[:1] * 3, m), pt.join(-1, m, n) + 1, pt.join(2, t3, t3[:, :, :1]), pt.join(0, im, im * 2),
    ]
    ours, stock = _both([v, m, n, k, t3, im], outs)
    nodes = ours.maker.fgraph.toposort()
    assert sum(type(nd.op) is Alloc and basic_index.alloc_funcify(nd.op, nd) is not None for nd in nodes) >= 3
    assert sum(type(nd.op) is Join and join.array_axis(nd) is not None for nd in nodes) >= 4
    rng = np.random.default_rng(1)
    args = [rng.normal(size=4), rng.normal(size=(3, 2)), rng.normal(size=(3, 5)), 3, rng.normal(size=(2, 3, 4)), rng.integers(-5, 5, size=(2, 2)).astype("int32")]
    for a, b in zip(ours(*args), stock(*args), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    for bad in ({0: rng.normal(size=1)}, {2: rng.normal(size=(2, 5))}):  # v runtime length 1; n with 2 rows
        wrong = [bad.get(i, a) for i, a in enumerate(args)]
        with pytest.raises(ValueError) as want:
            stock(*wrong)
        with pytest.raises(type(want.value)):
            ours(*wrong)
