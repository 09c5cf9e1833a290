"""cholesky_grad: Cholesky.L_op's subgraph as one CholeskyGrad op; same values as stock, declines otherwise."""

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.graph.fg import FunctionGraph

import pmfast
from pmfast.passes.cholesky_grad import CholeskyGrad, match


def _cost(lower, batched=False):
    a, w = (pt.tensor3(n, shape=(1, None, None)) for n in "aw") if batched else (pt.matrix("a"), pt.matrix("w"))
    chol = pt.linalg.cholesky(a, lower=lower)
    diag = pt.diagonal(chol, axis1=-2, axis2=-1)
    cost = (chol * w).sum() + pt.log(diag).sum() + (pt.linalg.solve_triangular(chol, w, lower=lower) ** 2).sum()
    return a, w, cost


@functools.lru_cache(maxsize=None)
def _functions(lower, batched=False):
    """The gradient compiled with the pass (numba, and pytensor's python linker: CholeskyGrad.perform) and
    without it (stock NUMBA mode; pytensor's python linker for the (1, n, n) stacks, whose stock numba
    compile is ~40 of this file's cold seconds and checks stock's lowering rather than the pass)."""
    a, w, cost = _cost(lower, batched)
    grad = pytensor.grad(cost, a)
    with_pass = pmfast.get_mode("cholesky_grad")
    stock = pmfast.get_mode("none")
    if batched:
        stock = pytensor.compile.mode.Mode(linker="py", optimizer=stock.optimizer)
    return (
        pytensor.function([a, w], grad, mode=with_pass),
        pytensor.function([a, w], grad, mode=stock),
        pytensor.function([a, w], grad, mode=pytensor.compile.mode.Mode(linker="py", optimizer=with_pass.optimizer)),
    )


def test_fires_once_per_factorization_for_both_triangles():
    for lower, batched in ((True, False), (False, False), (True, True)):
        a, w, cost = _cost(lower, batched)
        fg = FunctionGraph([a, w], [pytensor.grad(cost, a)], clone=True)
        assert sum(match(n) is not None for n in fg.apply_nodes) == 1
        fast = _functions(lower, batched)[0]
        nodes = [n.op for n in fast.maker.fgraph.apply_nodes]
        assert [op for op in nodes if isinstance(op, CholeskyGrad)] == [CholeskyGrad(lower)]


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 8), lower=st.booleans(), batched=st.booleans(), seed=st.integers(0, 2**16))
def test_gradient_matches_stock_numba_and_python(n, lower, batched, seed):
    """Matrices, and (1, n, n) stacks (pymc's MvNormal factorizes its covariance as one)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, n))
    args = x @ x.T + n * np.eye(n), rng.normal(size=(n, n))
    if batched:
        args = tuple(v[None] for v in args)
    fast, stock, python = _functions(lower, batched)
    ref = stock(*args)
    np.testing.assert_allclose(fast(*args), ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(python(*args), ref, rtol=1e-9, atol=1e-12)


def test_not_positive_definite_gives_nan_like_stock():
    """A failed factorization (all NaN) gives all NaN; an infinite gradient of the factor NaN where
    stock's has it (pytensor's masks multiply; the triangle trmm skips is where stock's gemm would
    add 0 * inf: a NaN there in stock only, hence the upper-triangular infinities here)."""
    for lower in (True, False):
        fast, stock, python = _functions(lower)
        for args in ((-np.eye(3), np.ones((3, 3))), (np.eye(3), np.triu(np.full((3, 3), np.inf)))):
            ref = np.isnan(stock(*args))
            np.testing.assert_array_equal(np.isnan(fast(*args)), ref)
            np.testing.assert_array_equal(np.isnan(python(*args)), ref)


def test_declines_when_the_pattern_differs():
    """A hand-written look-alike with another mask (tril k=-1) or a second factor is left alone."""
    a, w = pt.matrix("a"), pt.matrix("w")
    chol = pt.linalg.cholesky(a)
    s = pt.linalg.solve_triangular(chol.T, pt.linalg.solve_triangular(chol.T, pt.tril(chol.T @ w, k=-1).T, lower=False).T, lower=False)
    near = pt.tril(s + s.T) - pt.diag(pt.diagonal(s))
    other = pt.linalg.cholesky(a + 1.0)
    s2 = pt.linalg.solve_triangular(other.T, pt.linalg.solve_triangular(chol.T, (pt.tril(chol.T @ w) - pt.diag(pt.diagonal(chol.T @ w) / 2.0)).T, lower=False).T, lower=False)
    mixed = pt.tril(s2 + s2.T) - pt.diag(pt.diagonal(s2))
    fg = FunctionGraph([a, w], [near, mixed], clone=True)
    assert not any(match(n) for n in fg.apply_nodes)
