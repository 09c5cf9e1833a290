"""pmfast.compiler.adv_sub: x[i0, i1] / x[:, i0, i1] with constant index vectors, bit for bit pytensor's values."""

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.tensor.subtensor import AdvancedSubtensor

import pmfast
from pmfast import compiler
from pmfast.compiler import adv_sub

compiler.setup()


def _both(inputs, outputs):
    return (
        pytensor.function(inputs, outputs, mode=pmfast.get_mode(), on_unused_input="ignore"),
        pytensor.function(inputs, outputs, mode="NUMBA", on_unused_input="ignore"),
    )


def test_reads_equal_stock_with_repeats_negative_indices_and_leading_slices():
    x = pt.matrix("x", shape=(4, 4))
    xd = pt.matrix("xd")  # lengths known at run time only
    x3 = pt.tensor3("x3", shape=(None, 3, 3))
    xi = pt.imatrix("xi")
    r, c = np.tril_indices(4)
    rows = np.array([0, 1, 1, -1, 3, 0], dtype="int32")  # repeats, -1 wraps
    cols = np.array([0, 2, 2, -2, 3, 0], dtype="int8")
    ucols = np.array([0, 2, 2, 1, 3, 0], dtype="uint8")
    i = np.arange(3)
    outs = [x[r, c], x[rows, cols], x[rows, ucols], xd[rows, i[[0, 1, 2, 0, 1, 2]]], x3[:, i, i[::-1]], xi[i, i] * 2, (x[i, i] ** 2).sum()]
    ours, stock = _both([x, xd, x3, xi], outs)
    nodes = [n for n in ours.maker.fgraph.toposort() if type(n.op) is AdvancedSubtensor]
    assert len(nodes) >= 5 and all(adv_sub._form(n) is not None for n in nodes)
    assert any(adv_sub._form(n)[0] == 1 for n in nodes)
    rng = np.random.default_rng(3)
    args = (rng.normal(size=(4, 4)), rng.normal(size=(4, 5)), rng.normal(size=(2, 3, 3)), rng.integers(-9, 9, size=(3, 3)).astype("int32"))
    for a, b in zip(ours(*args), stock(*args), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_gradient_through_a_diagonal_read_equals_stock():
    x = pt.matrix("x", shape=(5, 5))
    m = x @ x.T  # a matrix product's diagonal, as gp_marginal_matern52's gradient reads one
    i = np.arange(5)
    cost = (pt.exp(m[i, i]) * m[i, i[::-1]]).sum()
    ours, stock = _both([x], [m[i, i], cost, pt.grad(cost, x)])  # the read as an output stays a read
    assert any(adv_sub._form(n) is not None for n in ours.maker.fgraph.toposort())
    xv = np.random.default_rng(5).normal(size=(5, 5))
    for a, b in zip(ours(xv), stock(xv), strict=True):
        np.testing.assert_array_equal(a, b)


def test_declines_other_forms():
    """Not this module's form (run-time indices and broadcasting index arrays are adv_broadcast's)."""
    x = pt.matrix("x")
    x3 = pt.tensor3("x3")
    iv = pt.lvector("i")
    for out in (
        x[iv, iv],  # run-time indices
        x[[0, 1], 1:],  # a slice after the vector
        x3[[0, 1], [0, 1]],  # a trailing axis without an index
        x[np.array([0, 1]), np.array([[0], [1]])],  # a matrix index: broadcasts
    ):
        node = out.owner
        if type(node.op) is AdvancedSubtensor:
            assert adv_sub._form(node) is None


def test_source_is_the_loop():
    src = adv_sub.source(2, 3)
    assert "out[k] = x[idx0[k], idx1[k]]" in src and "broadcast" not in src
    src = adv_sub.source(3, 2, 1)
    assert "(x.shape[0], 2,)" in src and "out[j0, k] = x[j0, idx1[k], idx2[k]]" in src
