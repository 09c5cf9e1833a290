"""Shape_i and a matrix's ExtractDiag (compiler/small_ops.py): stock's values, no numba overloads compiled."""

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.basic import ExtractDiag
from pytensor.tensor.shape import Shape_i

from conftest import compiled_names

import pmfast
from pmfast.compiler import small_ops


@pytest.mark.parametrize("offset", [0, 1, -2, 5])
def test_extract_diag_equal_stock(offset):
    x = pt.matrix("x")
    outs = [ExtractDiag(offset=offset)(x), ExtractDiag(offset=offset, view=True)(x) * 2.0]
    ours = pytensor.function([x], outs, mode=pmfast.get_mode())
    stock = pytensor.function([x], outs, mode="NUMBA")
    nodes = [n for n in ours.maker.fgraph.toposort() if isinstance(n.op, ExtractDiag)]
    assert nodes and all(small_ops.funcify(n.op, n) is not None for n in nodes)
    rng = np.random.default_rng(7)
    for shape in ((4, 4), (3, 6), (6, 3), (0, 2), (1, 1)):
        for xv in (rng.normal(size=shape), np.asfortranarray(rng.normal(size=shape)), rng.normal(size=shape[::-1]).T):
            for a, b in zip(ours(xv), stock(xv), strict=True):
                np.testing.assert_array_equal(a, b)
                assert a.dtype == b.dtype and a.shape == b.shape


@pytest.mark.parametrize("offset", [0, 2, -1])
def test_extract_diag_of_a_stack_equal_stock(offset):
    x = pt.tensor3("x")
    outs = [ExtractDiag(offset=offset, axis1=1, axis2=2)(x)]
    ours = pytensor.function([x], outs, mode=pmfast.get_mode())
    stock = pytensor.function([x], outs, mode="NUMBA")
    nodes = [n for n in ours.maker.fgraph.toposort() if isinstance(n.op, ExtractDiag)]
    assert nodes and all(small_ops.funcify(n.op, n) is not None for n in nodes)
    rng = np.random.default_rng(9)
    for shape in ((2, 4, 4), (3, 2, 5), (1, 5, 2), (0, 3, 3), (2, 0, 3)):
        xv = rng.normal(size=shape)
        for xin in (xv, xv.transpose(0, 2, 1).copy().transpose(0, 2, 1)):
            for a, b in zip(ours(xin), stock(xin), strict=True):
                np.testing.assert_array_equal(a, b)
                assert a.dtype == b.dtype and a.shape == b.shape


def test_shape_i_equal_stock_without_numpy_overloads():
    x = pt.tensor3("x")
    outs = [Shape_i(1)(x), Shape_i(2)(x) * 3]
    ours = pytensor.function([x], outs, mode=pmfast.get_mode())
    stock = pytensor.function([x], outs, mode="NUMBA")
    assert any(isinstance(n.op, Shape_i) for n in ours.maker.fgraph.toposort())
    xv = np.zeros((2, 5, 7))
    for a, b in zip(ours(xv), stock(xv), strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype and a.shape == b.shape
    node = Shape_i(0)(pt.vector()).owner
    fn, _ = small_ops.funcify(node.op, node)

    @numba.njit
    def call(x):  # node functions have no CPython wrapper
        return fn(x)

    names = compiled_names(call, np.zeros(4))
    assert "shape_i" in names
    assert not [n for n in names if n.startswith(("np_shape", "np_asarray", "impl_np_array"))]  # pytensor's does


def test_switch_off(monkeypatch):
    node = Shape_i(0)(pt.vector()).owner
    assert small_ops.funcify(node.op, node) is not None
    monkeypatch.setenv("PMFAST_SMALL_OPS", "0")
    assert small_ops.funcify(node.op, node) is None


def test_lapack_layout_intrinsics_equal_overloads():
    """lapack's layout helpers as intrinsics: the same views and flags as the overloads, no function compiled."""
    from pmfast.compiler import lapack

    @numba.njit
    def native(a, r):
        return lapack.fortran_t_native(a), lapack.from_fortran_t_native(a, r), lapack.is_fortran_native(a)

    @numba.njit
    def overloads(a, r):
        return lapack.fortran_t(a), lapack.from_fortran_t(a, r), lapack.is_fortran(a)

    rng = np.random.default_rng(8)
    base = rng.normal(size=(3, 4))
    for a in (base, np.asfortranarray(base), base[:, ::2]):
        r = np.ascontiguousarray(a.T) if lapack._fortran_only(a) else np.ascontiguousarray(a)
        names = compiled_names(native, a, r)
        assert not [n for n in names if "lambda" in n]
        got, want = native(a, r), overloads(a, r)
        for g, w in zip(got[:2], want[:2], strict=True):
            assert numba.typeof(g) == numba.typeof(w)
            np.testing.assert_array_equal(g, w)
            assert np.shares_memory(g, w)
        assert got[2] == want[2] == lapack._fortran_only(a)
    assert lapack.layout_helpers()["_pm_ft"] is lapack.fortran_t_native


def test_lapack_switch_off(monkeypatch):
    from pmfast.compiler import lapack

    monkeypatch.setenv("PMFAST_LAPACK_INTRINSICS", "0")
    assert lapack.layout_helpers()["_pm_ft"] is lapack.fortran_t
