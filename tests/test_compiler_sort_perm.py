"""The ArgSort of a permutation (compiler/sort.py): its inverse by one scatter, no numba sort."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.slinalg import PivotToPermutations
from pytensor.tensor.sort import ArgSortOp

import pmfast
from pmfast.compiler import sort


def _argsort_nodes(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, ArgSortOp)]


def _calls_np_argsort(node) -> bool:
    fn, _ = sort.funcify(node.op, node)
    return "argsort" in fn.py_func.__code__.co_names


@pytest.mark.parametrize("inverse", [True, False])
def test_argsort_of_pivot_permutation_equal_stock(inverse):
    p = pt.ivector("p")
    x = pt.vector("x")
    perm = PivotToPermutations(inverse=inverse)(p)
    outs = [pt.argsort(perm), pt.argsort(pt.argsort(x)), x[pt.argsort(perm)]]
    ours = pytensor.function([p, x], outs, mode=pmfast.get_mode())
    stock = pytensor.function([p, x], outs, mode="NUMBA")
    nodes = _argsort_nodes(ours)
    by_input = {type(n.inputs[0].owner.op) if n.inputs[0].owner else None: n for n in nodes}
    assert not _calls_np_argsort(by_input[PivotToPermutations])
    outer = [n for n in nodes if n.inputs[0].owner is not None and isinstance(n.inputs[0].owner.op, ArgSortOp)]
    assert outer and not _calls_np_argsort(outer[0])
    inner = [n for n in nodes if n.inputs[0].owner is None]
    assert inner and _calls_np_argsort(inner[0])  # a vector of values may tie: numba's sort
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 9, 50):
        piv = np.array([rng.integers(i, n) for i in range(n)], dtype=np.int32)  # getrf's form
        xv = rng.integers(0, 3, size=n).astype(float)  # ties
        for a, b in zip(ours(piv, xv), stock(piv, xv), strict=True):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype


def test_switch_off_sorts(monkeypatch):
    p = pt.ivector("p")
    node = pt.argsort(PivotToPermutations(inverse=True)(p)).owner
    _, key_on = sort.funcify(node.op, node)
    monkeypatch.setenv("PMFAST_ARGSORT_PERM", "0")
    assert _calls_np_argsort(node)
    assert sort.funcify(node.op, node)[1] != key_on


def test_solve_gradient_equal_python_linker():
    """A general solve's gradient argsorts its LU pivots' permutation (``lu_solve(trans=True)``); against
    the python linker (scipy), as stock NUMBA compiles its generic solve for a minute cold."""
    a = pt.matrix("a")
    b = pt.vector("b")
    y = pt.linalg.solve(a, b, assume_a="gen")
    cost = (y**2).sum()
    outs = [cost, *pytensor.grad(cost, [a, b])]
    ours = pytensor.function([a, b], outs, mode=pmfast.get_mode())
    ref = pytensor.function([a, b], outs, mode=pytensor.compile.mode.Mode(linker="py", optimizer="fast_run"))
    nodes = _argsort_nodes(ours)
    assert nodes and not any(_calls_np_argsort(n) for n in nodes)
    rng = np.random.default_rng(6)
    for n in (1, 3, 6):
        av, bv = rng.normal(size=(n, n)), rng.normal(size=n)
        for u, v in zip(ours(av, bv), ref(av, bv), strict=True):
            np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-14)
