"""pmfast.compiler.cumop and .sort: pytensor's CumOp and ArgSort of a vector, bit for bit, without numba's transposes."""

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.tensor.extra_ops import CumOp

import pmfast
from pmfast import compiler
from pmfast.compiler import cumop

compiler.setup()

CASES = [(1, 0), (2, 0), (2, 1), (3, 1), (3, 2)]  # (ndim, axis)


def _node(ndim, axis, mode, dtype):
    x = pt.tensor(dtype=dtype, shape=(None,) * ndim)
    return CumOp(axis, mode)(x).owner


_fns: dict = {}


def _fn(ndim, axis, mode, dtype):
    """pmfast's node function for one CumOp (compiled once per case)."""
    k = (ndim, axis, mode, dtype)
    if k not in _fns:
        node = _node(ndim, axis, mode, dtype)
        fn, key = cumop.funcify(node.op, node)
        assert key.startswith("pmfast_cumop_")
        _fns[k] = numba.njit(lambda x: fn(x))  # the node function has no CPython wrapper
    return _fns[k]


def _reference(x, axis, mode):
    """pytensor's numba CumOp as numpy: numba's np.cumsum/cumprod of a vector (from 0 or 1), else
    running totals from x[0]."""
    if x.ndim == 1:
        out, acc = np.empty_like(x), x.dtype.type(0 if mode == "add" else 1)
        for i, v in enumerate(x):
            acc = acc + v if mode == "add" else acc * v
            out[i] = acc
        return out
    xa = np.moveaxis(x, axis, 0)
    res = np.empty(xa.shape, x.dtype)
    if xa.shape[0]:
        res[0] = xa[0]
    for m in range(1, xa.shape[0]):
        res[m] = res[m - 1] + xa[m] if mode == "add" else res[m - 1] * xa[m]
    return np.moveaxis(res, 0, axis)


@settings(max_examples=40, deadline=None)
@given(
    case=st.sampled_from(CASES),
    mode=st.sampled_from(["add", "mul"]),
    shape=st.lists(st.integers(0, 5), min_size=3, max_size=3),
    strided=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_cumop_matches_pytensors_order_bit_for_bit(case, mode, shape, strided, seed):
    ndim, axis = case
    rng = np.random.default_rng(seed)
    full = rng.normal(size=tuple(s * 2 if strided else s for s in shape[:ndim]))
    x = full[(slice(None, None, 2),) * ndim] if strided else full
    x.reshape(-1)[:: 7] = -0.0 if x.flags.c_contiguous else x.reshape(-1)[::7]  # signed zeros: a vector's cumsum starts from +0.0
    got = _fn(ndim, axis, mode, "float64")(x)
    want = _reference(x, axis, mode)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_int64_and_float32_keep_their_dtype():
    xi = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(_fn(2, 1, "add", "int64")(xi), np.cumsum(xi, axis=1))
    xf = np.linspace(0.5, 2, 12, dtype=np.float32).reshape(4, 3)
    got = _fn(2, 0, "mul", "float32")(xf)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _reference(xf, 0, "mul"))


def test_declines_what_numba_widens():
    for dtype in ("int32", "int8", "bool", "uint8"):
        node = _node(2, 0, "add", dtype)
        if node.outputs[0].type.dtype == dtype:
            assert cumop.funcify(node.op, node) is None


@pytest.mark.parametrize("mode", ["add", "mul"])
def test_graph_values_and_gradient_equal_stock(mode):
    x = pt.matrix("x")
    v = pt.vector("v")
    y = pt.cumsum(x, axis=1) if mode == "add" else pt.cumprod(x, axis=1)
    w = pt.cumsum(v) if mode == "add" else pt.cumprod(v)
    cost = (y**2).sum() + (w * pt.arange(w.shape[0])).sum() + pt.cumsum(x, axis=0)[-1].sum()
    outs = [cost, *pytensor.grad(cost, [x, v])]
    ours = pytensor.function([x, v], outs, mode=pmfast.get_mode())
    stock = pytensor.function([x, v], outs, mode="NUMBA")
    assert any(isinstance(n.op, CumOp) for n in ours.maker.fgraph.toposort())
    rng = np.random.default_rng(0)
    for shape in ((3, 4), (1, 5), (4, 1), (2, 0)):
        xv, vv = rng.normal(size=shape), rng.normal(size=shape[1])
        for a, b in zip(ours(xv, vv), stock(xv, vv), strict=True):  # the sums' order is pmfast's
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


def test_argsort_of_a_vector_equal_stock_with_ties():
    from pytensor.tensor.sort import ArgSortOp

    from pmfast.compiler import sort

    x = pt.vector("x")
    xi = pt.lvector("i")
    outs = [pt.argsort(x), pt.argsort(x, kind="mergesort"), pt.argsort(xi, axis=-1)]
    ours = pytensor.function([x, xi], outs, mode=pmfast.get_mode())
    stock = pytensor.function([x, xi], outs, mode="NUMBA")
    nodes = [n for n in ours.maker.fgraph.toposort() if isinstance(n.op, ArgSortOp)]
    assert len(nodes) == 3 and all(sort.funcify(n.op, n) is not None for n in nodes)
    m = pt.matrix("m")
    assert sort.funcify(pt.argsort(m).owner.op, pt.argsort(m).owner) is None
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 40):
        xv = rng.integers(0, 4, size=n).astype(float)  # many ties: quicksort's order is the algorithm's
        iv = rng.permutation(n)
        for a, b in zip(ours(xv, iv), stock(xv, iv), strict=True):
            np.testing.assert_array_equal(a, b)


def test_pivots_to_permutation_equal_stock_without_a_sort():
    """PivotToPermutations: pytensor's swaps, then (not ``inverse``) the inverse permutation by a scatter
    instead of numba's argsort: equal to stock for getrf's pivots and for any in-range pivots."""
    from pytensor.tensor.slinalg import PivotToPermutations

    from pmfast.compiler import sort

    p = pt.ivector("p")
    outs = [PivotToPermutations(inverse=False)(p), PivotToPermutations(inverse=True)(p)]
    ours = pytensor.function([p], outs, mode=pmfast.get_mode())
    stock = pytensor.function([p], outs, mode="NUMBA")
    nodes = [n for n in ours.maker.fgraph.toposort() if isinstance(n.op, PivotToPermutations)]
    assert len(nodes) == 2 and all(sort.funcify_pivots(n.op, n) is not None for n in nodes)
    rng = np.random.default_rng(4)
    for n in (0, 1, 2, 9, 50):
        getrf = np.array([rng.integers(i, n) for i in range(n)], dtype=np.int32)  # row i swapped with a row >= i
        anywhere = rng.integers(-n, n, size=n).astype(np.int32) if n else np.zeros(0, np.int32)
        for piv in (getrf, anywhere):
            for a, b in zip(ours(piv), stock(piv), strict=True):
                np.testing.assert_array_equal(a, b)
                assert a.dtype == b.dtype
