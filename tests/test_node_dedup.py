"""pmfast.compiler.node_dedup: basic-index node functions of big graphs read their constant bounds from
their arguments: the same views and errors as basic_index's, fewer functions compiled."""

import tempfile
from pathlib import Path

import numba
import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from conftest import big_graph_entries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytensor.tensor.subtensor import IncSubtensor, Subtensor

import pmfast
from pmfast import compiler
from pmfast.compiler import basic_index, node_dedup

compiler.setup()

_dtypes = st.sampled_from(["int8", "uint8", "int16", "int32", "int64", "uint16"])


@st.composite
def _const(draw, lo, hi):
    """A graph constant in ``[lo, hi]`` of a dtype that holds it (pytensor makes small-dtype constants)."""
    v = draw(st.integers(lo, hi))
    dtype = draw(_dtypes)
    if not (np.iinfo(dtype).min <= v <= np.iinfo(dtype).max):
        dtype = "int64"
    return ps.constant(v, dtype=dtype)


@st.composite
def _index(draw, ndim):
    n = draw(st.integers(1, ndim))
    out = []
    for _ in range(n):
        if draw(st.booleans()):
            out.append(draw(_const(-6, 5)))
        else:
            bound = st.one_of(st.none(), _const(-7, 7))
            step = st.sampled_from([None, 1, 2, -1, -3])
            s = draw(step)
            out.append(slice(draw(bound), draw(bound), None if s is None else ps.constant(s, dtype="int8")))
    return tuple(out)


def _both(node):
    """The node functions of ``node`` made by node_dedup and by basic_index, callable from Python."""
    ours = node_dedup.funcify(node.op, node)
    theirs = basic_index.funcify(node.op, node)
    assert theirs is not None
    return (None if ours is None else numba.njit(ours[0].py_func)), numba.njit(theirs[0].py_func)


def _run(fn, args):
    try:
        return fn(*args), None
    except Exception as err:  # noqa: BLE001  (compared by type and message)
        return None, err


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3), data=st.data(), dtype=st.sampled_from(["float64", "int32"]))
def test_view_and_update_equal_basic_index(shape, data, dtype):
    """Values, shapes, strides, shared memory and errors of ``x[idx]`` and ``x[idx] += y`` as basic_index's,
    over index constants of every integer dtype (their arguments' numba types), negative values and steps."""
    idx = data.draw(_index(len(shape)))
    x = pt.tensor("x", shape=(None,) * len(shape), dtype=dtype)
    out = x[idx]
    if out.owner is None or type(out.owner.op) is not Subtensor or out.ndim == 0:
        return
    # as the graph function passes them (numpy scalars), or as 0-d arrays
    consts = [np.asarray(c.data)[()] if data.draw(st.booleans()) else np.asarray(c.data) for c in out.owner.inputs[1:]]
    ours, theirs = _both(out.owner)
    if ours is None:
        assert "a" not in node_dedup.form(basic_index.spec(out.owner, 1))
        return
    xv = np.asarray(np.arange(int(np.prod(shape))).reshape(shape), dtype=dtype)
    (got, e1), (want, e2) = _run(ours, (xv, *consts)), _run(theirs, (xv, *consts))
    assert type(e1) is type(e2) and str(e1) == str(e2)
    if e2 is not None:
        return
    assert got.dtype == want.dtype and got.shape == want.shape and got.strides == want.strides
    np.testing.assert_array_equal(got, want)
    assert np.shares_memory(got, xv) == np.shares_memory(want, xv)
    if want.size == 0:
        return
    y = pt.tensor("y", shape=(None,) * want.ndim, dtype=dtype)
    for set_ in (False, True):
        inc = pt.set_subtensor(x[idx], y) if set_ else pt.inc_subtensor(x[idx], y)
        node = inc.owner
        assert type(node.op) is IncSubtensor
        ours, theirs = _both(node)
        yv = np.asarray(np.ones(want.shape) * 7, dtype=dtype)
        a, b = ours(xv.copy(), yv, *consts), theirs(xv.copy(), yv, *consts)
        np.testing.assert_array_equal(a, b)


def test_form_names_each_nonnegative_value_once():
    assert node_dedup.form("s13:31:_") == "sa0:a1:_"
    assert node_dedup.form("i2;i1") == "ia0;ia1"
    assert node_dedup.form("s_:-1:2;i-3;s4:_:-1") == "s_:-1:2;i-3;sa3:_:-1"
    assert node_dedup.parse("sa0:-1:_;ia1") == [("s", ("a", 0), -1, None), ("i", ("a", 1))]


def _compile_count(build, monkeypatch, value):
    """numba functions compiled making and calling ``build()``'s function as a big graph, into an empty cache,
    with PMFAST_NODE_DEDUP=value; and its outputs."""
    from numba.core import event

    monkeypatch.setenv("PMFAST_NODE_DEDUP", value)
    count = [0]

    class Count(event.Listener):
        def on_start(self, ev):
            count[0] += 1

        def on_end(self, ev):
            pass

    inputs, outputs, args = build()
    listener = Count()
    event.register("numba:compile", listener)
    try:
        with big_graph_entries(Path(tempfile.mkdtemp(prefix="pmfast-nd-"))):
            fn = pytensor.function(inputs, outputs, mode=pmfast.get_mode())
            got = fn(*args)
    finally:
        event.unregister("numba:compile", listener)
    return count[0], got


def _sliced_graph():
    """Same-structure reads and writes of one vector that differ only in their constant bounds (a point's
    slices, gradient pieces put in place)."""
    v, y = pt.vector("v"), pt.vector("y")
    parts = [v[k : k + 3] for k in range(0, 18, 3)]
    outs = [pt.set_subtensor(y[k : k + 3], p * 2.0) for p, k in zip(parts, range(0, 18, 3))]
    outs += [p.sum() for p in parts] + [pt.inc_subtensor(y[2:7], v[1:6]), pt.inc_subtensor(y[9:14], v[4:9])]
    rng = np.random.default_rng(0)
    return [v, y], outs, (rng.normal(size=18), rng.normal(size=18))


def test_big_graph_compiles_fewer_functions_with_stocks_values(monkeypatch):
    """One node function per index form: fewer numba compiles than one per constant, outputs bit for bit
    stock NUMBA's (and the dedup-off path's)."""
    n_on, on = _compile_count(_sliced_graph, monkeypatch, "1")
    n_off, off = _compile_count(_sliced_graph, monkeypatch, "0")
    inputs, outputs, args = _sliced_graph()
    stock = pytensor.function(inputs, outputs, mode="NUMBA")(*args)
    for a, b, c in zip(on, off, stock, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)
    # 6 set_subtensor + 6 + 2 subtensor + 2 inc_subtensor node functions of 1 + 1 + 1 forms
    assert n_on <= n_off - 10, (n_on, n_off)


def test_small_graphs_keep_basic_indexs_functions():
    """Outside a big graph's conversion nothing changes: basic_index's literal, its key."""
    v = pt.vector("v")
    node = v[2:5].owner
    assert not node_dedup.active()
    from pmfast.compiler import ops

    fn, key = ops.funcify_and_cache_key(node.op, node)
    assert key == basic_index.funcify(node.op, node)[1]
    with node_dedup.scope(True):
        assert ops.funcify_and_cache_key(node.op, node)[1].startswith("pmfast_nd_subtensor_")
    other = v[7:9].owner
    with node_dedup.scope(True):
        assert ops.funcify_and_cache_key(other.op, other)[1] == ops.funcify_and_cache_key(node.op, node)[1]


@pytest.mark.parametrize("value", ["0"])
def test_switch_off_restores_basic_index(monkeypatch, value):
    monkeypatch.setenv("PMFAST_NODE_DEDUP", value)
    v = pt.vector("v")
    node = v[2:5].owner
    from pmfast.compiler import ops

    with node_dedup.scope(True):
        assert ops.funcify_and_cache_key(node.op, node)[1] == basic_index.funcify(node.op, node)[1]
