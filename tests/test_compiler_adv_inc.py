"""pmfast.compiler.adv_inc: x[i0, i1] = / += y with constant index vectors, bit for bit pytensor's values."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.subtensor import AdvancedIncSubtensor

import pmfast
from pmfast import compiler
from pmfast.compiler import adv_inc

compiler.setup()


def _both(inputs, outputs):
    return (
        pytensor.function(inputs, outputs, mode=pmfast.get_mode(), on_unused_input="ignore"),
        pytensor.function(inputs, outputs, mode="NUMBA", on_unused_input="ignore"),
    )


def test_tril_fill_set_and_inc_with_repeats_and_negative_indices_equal_stock():
    x = pt.matrix("x", shape=(4, 4))
    packed = pt.vector("p", shape=(10,))
    s = pt.scalar("s")
    r, c = np.tril_indices(4)
    rows = np.array([0, 1, 1, -1, 3, 0])  # repeats accumulate, -1 wraps
    cols = np.array([0, 2, 2, -2, 3, 0])
    three = pt.vector("t", shape=(6,))
    one = pt.vector("o", shape=(1,))
    outs = [
        pt.set_subtensor(pt.zeros((4, 4))[r, c], packed),  # the LKJ/Cholesky packing
        pt.inc_subtensor(x[rows, cols], three),
        pt.inc_subtensor(x[rows, cols], s),
        pt.set_subtensor(x[rows, cols], one),
        pt.inc_subtensor(x[rows, cols], one * 2.0),
    ]
    ours, stock = _both([x, packed, s, three, one], outs)
    nodes = [n for n in ours.maker.fgraph.toposort() if type(n.op) is AdvancedIncSubtensor]
    assert nodes and all(adv_inc._length(n) is not None for n in nodes)
    rng = np.random.default_rng(1)
    args = (rng.normal(size=(4, 4)), rng.normal(size=10), 0.7, rng.normal(size=6), rng.normal(size=1))
    for a, b in zip(ours(*args), stock(*args), strict=True):
        np.testing.assert_array_equal(a, b)


def test_batch_of_diagonals_equal_stock():
    x = pt.tensor3("x", shape=(3, 2, 2))
    y = pt.matrix("y", shape=(3, 2))
    y1 = pt.matrix("y1", shape=(3, 1))
    i = np.array([0, 1])
    rep = np.array([1, 1])
    outs = [pt.set_subtensor(x[:, i, i], y), pt.inc_subtensor(x[:, rep, i], y), pt.inc_subtensor(x[:, i, rep], y1)]
    ours, stock = _both([x, y, y1], outs)
    nodes = [n for n in ours.maker.fgraph.toposort() if type(n.op) is AdvancedIncSubtensor]
    assert len(nodes) == 3 and all(adv_inc._form(n) == (1, 2) for n in nodes)
    rng = np.random.default_rng(2)
    args = (rng.normal(size=(3, 2, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 1)))
    for a, b in zip(ours(*args), stock(*args), strict=True):
        np.testing.assert_array_equal(a, b)


def test_index_axis_of_y_known_at_run_time_only():
    x = pt.tensor3("x", shape=(2, 3, 3))
    y = pt.matrix("y", shape=(2, None))
    packed = pt.vector("p")
    r, c = np.tril_indices(3)
    outs = [pt.set_subtensor(x[:, [0, 1, 2], [0, 1, 2]], y), pt.inc_subtensor(x[0][r, c], packed)]
    ours, stock = _both([x, y, packed], outs)
    nodes = [n for n in ours.maker.fgraph.toposort() if type(n.op) is AdvancedIncSubtensor]
    assert len(nodes) == 2 and all(adv_inc._form(n) is not None for n in nodes)
    rng = np.random.default_rng(4)
    xv = rng.normal(size=(2, 3, 3))
    for m, p in ((3, 6), (1, 1), (3, 1)):
        args = (xv, rng.normal(size=(2, m)), rng.normal(size=p))
        for a, b in zip(ours(*args), stock(*args), strict=True):
            np.testing.assert_array_equal(a, b)
    for m, p in ((2, 6), (3, 5)):
        args = (xv, rng.normal(size=(2, m)), rng.normal(size=p))
        with pytest.raises(ValueError) as e_ours:
            ours(*args)
        with pytest.raises(ValueError) as e_stock:
            stock(*args)
        assert str(e_ours.value).splitlines()[0] == str(e_stock.value).splitlines()[0]


def test_declines_runtime_indices_and_unknown_lengths():
    """Not this module's form (run-time indices, an unknown batch length: adv_broadcast's, or pytensor's)."""
    x = pt.matrix("x")
    i = pt.lvector("i")
    x3 = pt.tensor3("x3")
    y2 = pt.matrix("y2")
    for out in (
        pt.set_subtensor(x[i, i], 1.0),
        pt.set_subtensor(x[[0, 1], 1:], 1.0),
        pt.set_subtensor(x3[:, [0, 1], [0, 1]], y2),  # the batch's length unknown
    ):
        node = out.owner
        if type(node.op) is AdvancedIncSubtensor:
            assert adv_inc._form(node) is None


def test_source_is_the_loop():
    src = adv_inc.source(2, 1, 3, 3, True, False)
    assert "x = _pm_copy(x)" in src and "x[idx0[k], idx1[k]] = y[k]" in src and "broadcast" not in src
    assert "y[0]" in adv_inc.source(2, 1, 1, 3, False, True)
