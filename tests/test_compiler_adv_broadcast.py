"""pmfast.compiler.adv_broadcast: advanced indexing with index arrays that broadcast, bit for bit numpy's and
pytensor's values, their errors, and no numpy broadcasting code compiled."""

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor
from pytensor.tensor.type_other import SliceConstant, slicetype

import pmfast
from pmfast import compiler
from pmfast.compiler import adv_broadcast, adv_inc, adv_sub

from conftest import compiled_names

compiler.setup()

INT_DTYPES = ("int64", "int32", "uint8", "uint16")


@st.composite
def indexing(draw, inc: bool):
    """``(x, lead slices s, index arrays, static shapes of the index variables, y, y's static shape)``."""
    ndim = draw(st.integers(1, 3))
    s = draw(st.integers(0, ndim - 1))
    x_shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    nb = draw(st.integers(0, 2))
    b_shape = tuple(draw(st.integers(1, 4)) for _ in range(nb))
    idxs, static = [], []
    for axis in range(s, ndim):
        k = draw(st.integers(0, nb))
        shape = tuple(d if draw(st.booleans()) else 1 for d in b_shape[nb - k:])
        dtype = draw(st.sampled_from(INT_DTYPES))
        n = x_shape[axis]
        lo = -n if np.dtype(dtype).kind == "i" else 0
        vals = draw(st.lists(st.integers(lo, n - 1), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        idxs.append(np.array(vals, dtype=dtype).reshape(shape))
        static.append(tuple(d if draw(st.booleans()) else None for d in shape))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.normal(size=x_shape)
    if not inc:
        return x, s, idxs, static, None, None
    target = (*x_shape[:s], *np.broadcast_shapes(*(i.shape for i in idxs)))
    k = draw(st.integers(0, len(target)))
    y_shape = tuple(d if draw(st.booleans()) else 1 for d in target[len(target) - k:])
    y_static = tuple(d if draw(st.booleans()) else None for d in y_shape)
    return x, s, idxs, static, rng.normal(size=y_shape), y_static


def _index_vars(x, s, idxs, static):
    """``x``'s variable and the node's index inputs: constant full slices (as rewritten graphs hold them)."""
    xv = pt.tensor("x", dtype="float64", shape=(None,) * x.ndim)
    ivs = [pt.tensor(f"i{k}", dtype=str(i.dtype), shape=sh) for k, (i, sh) in enumerate(zip(idxs, static))]
    return xv, (SliceConstant(slicetype, slice(None)),) * s + tuple(ivs)


def _reference_inc(x, s, idxs, y, set_):
    """pytensor's loop in numpy: ``B`` in C order, the sliced axes inside."""
    b_shape = np.broadcast_shapes(*(i.shape for i in idxs))
    bi = [np.broadcast_to(i, b_shape) for i in idxs]
    lead = x.shape[:s]
    yb = np.broadcast_to(y, (*lead, *b_shape))
    out = x.copy()
    for b in np.ndindex(b_shape):
        pos = tuple(int(i[b]) for i in bi)
        for j in np.ndindex(lead):
            if set_:
                out[j + pos] = yb[j + b]
            else:
                out[j + pos] += yb[j + b]
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=indexing(inc=False))
def test_read_equals_numpy(case):
    """Index arrays of any shapes that broadcast, static lengths or not, after leading full slices."""
    x, s, idxs, static, _, _ = case
    xv, index = _index_vars(x, s, idxs, static)
    node = AdvancedSubtensor()(xv, *index).owner
    assume(adv_sub._form(node) is None)
    fn, key = adv_sub.funcify(node.op, node)
    assert key.startswith("pmfast_adv_bcast_sub_")
    got = numba.njit(fn.py_func)(x, *((slice(None),) * s), *idxs)
    want = x[(slice(None),) * s + tuple(idxs)]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=indexing(inc=True), set_=st.booleans())
def test_set_and_inc_equal_the_loop(case, set_):
    """Repeated positions accumulate (or the last one wins) in pytensor's order: bit for bit its loop."""
    x, s, idxs, static, y, y_static = case
    xv, index = _index_vars(x, s, idxs, static)
    yv = pt.tensor("y", dtype="float64", shape=y_static)
    node = AdvancedIncSubtensor(set_instead_of_inc=set_)(xv, yv, *index).owner
    assume(adv_inc._form(node) is None)
    fn, key = adv_inc.funcify(node.op, node)
    assert key.startswith("pmfast_adv_bcast_inc_")
    x0 = x.copy()
    got = numba.njit(fn.py_func)(x, y, *((slice(None),) * s), *idxs)
    np.testing.assert_array_equal(x, x0)  # not in place: x is copied
    np.testing.assert_array_equal(got, _reference_inc(x, s, idxs, y, set_))


def _both(inputs, outputs):
    return (
        pytensor.function(inputs, outputs, mode=pmfast.get_mode(), on_unused_input="ignore"),
        pytensor.function(inputs, outputs, mode="NUMBA", on_unused_input="ignore"),
    )


def test_take_along_axis_and_its_gradient_equal_stock_and_compile_no_broadcasting():
    """A categorical likelihood's read ``p[arange(n)[:, None], value[:, None]]`` and its gradient, with the
    value as data (a run-time index) and as a constant; no numpy broadcasting code compiled for them."""
    p = pt.matrix("p", shape=(None, 4))
    value = pt.lvector("value")
    const = np.array([3, 0, 1, 1, 2, 3, 0])
    outs = []
    for v in (value, pt.as_tensor(const)):
        picked = pt.take_along_axis(pt.log(p), v[:, None], axis=1)
        total = (picked**2).sum()
        outs += [picked, pytensor.grad(total, p)]
    ours, stock = _both([p, value], outs)
    nodes = [n for n in ours.maker.fgraph.apply_nodes if type(n.op) in (AdvancedSubtensor, AdvancedIncSubtensor)]
    assert len(nodes) == 4
    rng = np.random.default_rng(3)
    args = (rng.uniform(0.1, 1.0, size=(7, 4)), rng.integers(-4, 4, size=7))
    names = compiled_names(ours, *args)
    assert not any("broadcast" in n for n in names), names
    for a, b in zip(ours(*args), stock(*args), strict=True):
        np.testing.assert_array_equal(a, b)


def test_errors_equal_stock():
    """Index arrays that don't broadcast, and a y that doesn't: pytensor's exception and first line."""
    x = pt.matrix("x")
    i = pt.lvector("i")
    j = pt.lvector("j")
    y = pt.vector("y")
    outs = [x[i[:, None], j[None, :]].sum(), pt.inc_subtensor(x[i, j], y).sum()]
    ours, stock = _both([x, i, j, y], outs)
    xv = np.arange(12.0).reshape(3, 4)
    ok = (xv, np.array([0, 2]), np.array([1, 3]), np.array([1.0, 2.0]))
    for a, b in zip(ours(*ok), stock(*ok), strict=True):
        np.testing.assert_array_equal(a, b)
    for bad in ((xv, np.array([0, 2]), np.array([1, 3, 0]), np.array([1.0])),
                (xv, np.array([0, 2]), np.array([1, 3]), np.array([1.0, 2.0, 3.0]))):
        with pytest.raises(ValueError) as e_ours:
            ours(*bad)
        with pytest.raises(ValueError) as e_stock:
            stock(*bad)
        assert str(e_ours.value).splitlines()[0] == str(e_stock.value).splitlines()[0]


def test_switch_and_declined_forms(monkeypatch):
    x = pt.matrix("x")
    i = pt.lvector("i")
    read = x[i[:, None], i[None, :]].owner
    assert adv_sub.funcify(read.op, read) is not None
    monkeypatch.setenv("PMFAST_ADV_BROADCAST", "0")
    assert adv_sub.funcify(read.op, read) is None
    monkeypatch.delenv("PMFAST_ADV_BROADCAST")
    for out in (
        pt.set_subtensor(x[[0, 1], 1:], 1.0),  # a slice after the index: not every remaining axis indexed
        x[pt.as_tensor(np.array([True, False])), 0],  # a boolean index
    ):
        node = out.owner
        fn = (adv_inc.funcify if type(node.op) is AdvancedIncSubtensor else adv_sub.funcify)(node.op, node)
        assert fn is None
    src = adv_broadcast.inc_source(2, 0, [(5, 1), (None, 1)], (None, 1), (5, 3), (), False, True)
    assert src is None  # a y of 3 along a length-1 axis never broadcasts
