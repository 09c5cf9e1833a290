"""pmfast.compiler.linalg: Cholesky, SolveTriangular, CholeskySolve, general Solve and matrix Dot by LAPACK/BLAS.

Each lowering against scipy (direct calls of the generated functions, every memory layout) and
against stock pytensor NUMBA (compiled graphs: values, NaN on failure, the same errors).
"""

import functools

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.tensor.math import Dot
from pytensor.tensor.slinalg import Cholesky, CholeskySolve, Solve, SolveTriangular

import pmfast
from pmfast import compiler
from pmfast.compiler import linalg
from pmfast.compiler.patching import compiling

compiler.setup()


@numba.njit
def _call1(f, a):
    return f(a)


@numba.njit
def _call2(f, a, b):
    return f(a, b)


@functools.lru_cache(maxsize=None)
def _lowered(op, dtype, b_ndim=2):
    """pmfast's function for ``op`` (inputs of ``dtype``), callable from Python."""
    ins = [pt.matrix(dtype=dtype)]
    if not isinstance(op, Cholesky):
        ins.append(pt.matrix(dtype=dtype) if b_ndim == 2 else pt.vector(dtype=dtype))
    node = op.make_node(*ins)
    with compiling():
        fn, key = (linalg.funcify_dot if isinstance(op, Dot) else linalg.funcify)(op, node)
    assert key.startswith("pmfast_")
    if len(ins) == 1:
        return lambda a: _call1(fn, a)
    return lambda a, b: _call2(fn, a, b)


def _layouts(x):
    """``x`` as C-contiguous, F-contiguous and strided (neither) arrays with the same values."""
    wide = np.zeros((x.shape[0], 2 * x.shape[1]) if x.ndim == 2 else 2 * x.shape[0], dtype=x.dtype)
    strided = wide[:, ::2] if x.ndim == 2 else wide[::2]
    strided[...] = x
    return [np.array(x, order="C"), np.array(x, order="F"), strided]


def _layout_pairs(x, y):
    """Three pairs of layouts of ``x`` and ``y`` that between them give each argument every layout."""
    xs, ys = _layouts(x), _layouts(y)
    return [(xs[0], ys[0]), (xs[1], ys[2]), (xs[2], ys[1])]


def _spd(rng, n, dtype):
    a = rng.normal(size=(n, n))
    return (a @ a.T + n * np.eye(n)).astype(dtype)


def _tol(dtype):
    return {"rtol": 1e-10, "atol": 1e-12} if dtype == "float64" else {"rtol": 2e-4, "atol": 1e-5}


sizes = st.integers(0, 9)


# each props combination is a function compiled by numba: a few that flip every flag both ways
CHOLESKY_PROPS = [(True, False, "float64"), (False, True, "float64"), (True, True, "float32")]
TRIANGULAR_PROPS = [(True, False, 2, False, "float64"), (False, True, 1, True, "float64"), (True, True, 1, False, "float64"),
                    (False, False, 2, True, "float64"), (True, False, 2, False, "float32")]
CHO_SOLVE_PROPS = [(True, 2, "float64"), (False, 1, "float64"), (False, 2, "float32")]
# (overwrite_a, overwrite_b, b_ndim, dtype)
SOLVE_PROPS = [(False, False, 2, "float64"), (True, False, 2, "float64"), (False, True, 1, "float64"), (True, False, 1, "float32")]


@settings(max_examples=40, deadline=None)
@given(n=sizes, props=st.sampled_from(CHOLESKY_PROPS), seed=st.integers(0, 2**16))
def test_cholesky_matches_scipy_for_every_layout(n, props, seed):
    lower, overwrite, dtype = props
    rng = np.random.default_rng(seed)
    s = _spd(rng, n, dtype)
    f = _lowered(Cholesky(lower=lower, overwrite_a=overwrite), dtype)
    for a in _layouts(s):
        got = f(a)
        ref = sl.cholesky(s, lower=lower) if n else np.zeros((0, 0), dtype)
        np.testing.assert_allclose(got, ref, **_tol(dtype))
        assert got.dtype == dtype
        # a destroyed F-ordered input holds the result, F-ordered (as stock's); every other result is C
        assert got.flags.c_contiguous or (overwrite and a.flags.f_contiguous and np.shares_memory(got, a))


def test_cholesky_reads_one_triangle_and_fails_to_nan():
    rng = np.random.default_rng(1)
    s = _spd(rng, 6, "float64")
    junk = s + np.triu(rng.normal(size=(6, 6)) * 100, 1)  # upper triangle ignored when lower
    np.testing.assert_allclose(_lowered(Cholesky(lower=True), "float64")(junk), np.linalg.cholesky(s), rtol=1e-12)
    for bad in (-s, s - 100 * np.eye(6)):
        assert np.isnan(_lowered(Cholesky(lower=True), "float64")(bad)).all()
    # NaN input: whatever scipy's potrf makes of it (OpenBLAS's reports success), as stock returns
    nans = np.full((6, 6), np.nan)
    ref = sl.cholesky(nans, lower=True, check_finite=False)
    np.testing.assert_array_equal(_lowered(Cholesky(lower=True), "float64")(nans), ref)
    with pytest.raises(np.linalg.LinAlgError, match="must be square"):
        _lowered(Cholesky(lower=True), "float64")(np.ones((2, 3)))
    assert _lowered(Cholesky(lower=True), "float64")(np.ones((0, 3))).shape == (0, 3)


def test_cholesky_overwrites_a_contiguous_input_in_place():
    s = _spd(np.random.default_rng(2), 5, "float64")
    for lower in (True, False):
        ref = sl.cholesky(s, lower=lower)
        for a in (s.copy(), np.asfortranarray(s)):
            out = _lowered(Cholesky(lower=lower, overwrite_a=True), "float64")(a)
            assert np.shares_memory(out, a) and out.flags.f_contiguous == a.flags.f_contiguous
            np.testing.assert_allclose(out, ref, rtol=1e-12)
    strided = _layouts(s)[2]
    _lowered(Cholesky(lower=True, overwrite_a=True), "float64")(strided)
    np.testing.assert_array_equal(strided, s)  # neither C nor F: copied, as stock


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 12), k=st.integers(0, 5), props=st.sampled_from(TRIANGULAR_PROPS), seed=st.integers(0, 2**16))
def test_solve_triangular_matches_scipy_for_every_layout(n, k, props, seed):
    lower, unit, b_ndim, overwrite, dtype = props
    rng = np.random.default_rng(seed)
    t = rng.normal(size=(n, n)) + 4 * np.eye(n)
    t = (np.tril(t) if lower else np.triu(t)).astype(dtype)
    b = rng.normal(size=(n, k) if b_ndim == 2 else n).astype(dtype)
    f = _lowered(SolveTriangular(lower=lower, unit_diagonal=unit, b_ndim=b_ndim, overwrite_b=overwrite), dtype, b_ndim)
    ref = sl.solve_triangular(t, b, lower=lower, unit_diagonal=unit) if b.size else np.zeros(b.shape, dtype)
    for a, rhs in _layout_pairs(t, b):
        got = f(a, rhs)
        np.testing.assert_allclose(got, ref, **_tol(dtype))
        assert got.shape == b.shape and got.dtype == dtype


def test_solve_triangular_singular_and_shape_errors_as_stock():
    f = _lowered(SolveTriangular(lower=True, b_ndim=2), "float64")
    t = np.tril(np.ones((3, 3)))
    t[1, 1] = 0.0
    assert np.isnan(f(t, np.ones((3, 2)))).all()
    unit = _lowered(SolveTriangular(lower=True, unit_diagonal=True, b_ndim=2), "float64")
    np.testing.assert_allclose(unit(t, np.ones((3, 2))), sl.solve_triangular(t, np.ones((3, 2)), lower=True, unit_diagonal=True))
    with pytest.raises(np.linalg.LinAlgError, match="do not conform"):
        f(np.eye(3), np.ones((2, 2)))
    with pytest.raises(np.linalg.LinAlgError, match="must be square"):
        f(np.ones((3, 2)), np.ones((3, 2)))
    assert f(np.eye(3), np.ones((3, 0))).shape == (3, 0)



@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 9), k=st.integers(0, 4), props=st.sampled_from(SOLVE_PROPS), seed=st.integers(0, 2**16))
def test_general_solve_matches_scipy_for_every_layout(n, k, props, seed):
    overwrite_a, overwrite_b, b_ndim, dtype = props
    f = _lowered(Solve(assume_a="gen", b_ndim=b_ndim, overwrite_a=overwrite_a, overwrite_b=overwrite_b), dtype, b_ndim)
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(n, n)) + n * np.eye(n)).astype(dtype)
    b = rng.normal(size=(n, k) if b_ndim == 2 else n).astype(dtype)
    ref = sl.solve(a, b) if b.size else np.zeros(b.shape, dtype)
    for x, rhs in _layout_pairs(a, b):
        got = f(x.copy(order="K"), rhs.copy(order="K"))
        np.testing.assert_allclose(got, ref, **_tol(dtype))
        assert got.shape == b.shape and got.dtype == dtype


def test_general_solve_singular_and_shape_errors_as_stock():
    for b_ndim in (1, 2):
        f = _lowered(Solve(assume_a="gen", b_ndim=b_ndim), "float64", b_ndim)
        rhs = np.ones((3, 2)) if b_ndim == 2 else np.ones(3)
        singular = np.ones((3, 3))
        singular[2] = 0.0
        assert np.isnan(f(singular, rhs)).all()
        with pytest.raises(np.linalg.LinAlgError, match="do not conform"):
            f(np.eye(3), rhs[:2])
        with pytest.raises(np.linalg.LinAlgError, match="must be square"):
            f(np.ones((3, 2)), rhs)
        empty = np.ones((3, 0)) if b_ndim == 2 else np.ones(0)
        assert f(np.ones((3, 2)), empty).shape == empty.shape  # an empty right-hand side is checked for nothing

@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 12), k=st.integers(0, 4), props=st.sampled_from(CHO_SOLVE_PROPS), seed=st.integers(0, 2**16))
def test_cho_solve_matches_scipy_for_every_layout(n, k, props, seed):
    lower, b_ndim, dtype = props
    rng = np.random.default_rng(seed)
    c = (sl.cholesky(_spd(rng, n, "float64"), lower=lower) if n else np.zeros((0, 0))).astype(dtype)
    b = rng.normal(size=(n, k) if b_ndim == 2 else n).astype(dtype)
    f = _lowered(CholeskySolve(lower=lower, b_ndim=b_ndim), dtype, b_ndim)
    ref = sl.cho_solve((c, lower), b) if b.size else np.zeros(b.shape, dtype)
    for a, rhs in _layout_pairs(c, b):
        np.testing.assert_allclose(f(a, rhs), ref, **_tol(dtype))


@settings(max_examples=30, deadline=None)
@given(m=sizes, k=sizes, n=sizes, dtype=st.sampled_from(["float64", "float32"]), seed=st.integers(0, 2**16))
def test_matrix_dot_matches_numpy_for_every_layout(m, k, n, dtype, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(m, k)).astype(dtype), rng.normal(size=(k, n)).astype(dtype)
    f = _lowered(Dot(), dtype)
    for a, b in _layout_pairs(x, y):
        got = f(a, b)
        np.testing.assert_allclose(got, x @ y, **_tol(dtype))
        assert got.flags.c_contiguous and got.dtype == dtype
    with pytest.raises(ValueError, match="matrix \\* matrix"):
        f(np.ones((m, k + 1), dtype), y)


# --- compiled graphs: pmfast's mode against stock NUMBA ------------------------------------------


@functools.lru_cache(maxsize=None)
def _graph_pair():
    """logp-like graph using every lowered op, with its gradient: (pmfast fn, stock fn)."""
    a = pt.matrix("a")
    b = pt.matrix("b")
    v = pt.vector("v")
    s = a @ a.T + pt.eye(a.shape[0]) * 3.0
    chol = pt.linalg.cholesky(s)
    z = pt.linalg.solve_triangular(chol, b, lower=True)
    w = pt.linalg.solve_triangular(chol.T, v, lower=False)
    cost = (z**2).sum() + (w * v).sum() + pt.log(pt.diagonal(chol)).sum()
    outs = [cost, *pytensor.grad(cost, [a, b, v]), chol, pt.linalg.cho_solve((chol, True), b)]  # no gradient
    fast = pytensor.function([a, b, v], outs, mode=pmfast.get_mode())
    stock = pytensor.function([a, b, v], outs, mode="NUMBA")
    return fast, stock


def test_graph_uses_pmfast_lowerings():
    fast, _ = _graph_pair()
    ops = {type(n.op).__name__ for n in fast.maker.fgraph.apply_nodes}
    assert {"Cholesky", "SolveTriangular", "CholeskySolve"} <= ops


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 7), k=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_graph_and_gradient_match_stock(n, k, seed):
    rng = np.random.default_rng(seed)
    args = rng.normal(size=(n, n)), rng.normal(size=(n, k)), rng.normal(size=n)
    fast, stock = _graph_pair()
    for got, ref in zip(fast(*args), stock(*args), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_graph_not_positive_definite_gives_stock_nans():
    fast, stock = _graph_pair()
    a = np.full((3, 3), np.nan)
    args = a, np.ones((3, 2)), np.ones(3)
    for got, ref in zip(fast(*args), stock(*args), strict=True):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))


@settings(max_examples=25, deadline=None)
@given(n=sizes, overwrite=st.booleans(), seed=st.integers(0, 2**16))
def test_lu_factor_matches_scipy_for_every_layout(n, overwrite, seed):
    from pytensor.tensor.slinalg import LUFactor

    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, n))
    op = LUFactor(overwrite_a=overwrite)
    node = op.make_node(pt.matrix())
    with compiling():
        fn, _ = linalg.funcify(op, node)
    ref_lu, ref_piv = sl.lu_factor(a) if n else (np.zeros((0, 0)), np.zeros(0, np.int32))
    for x in _layouts(a):
        lu, piv = _call1(fn, x)
        np.testing.assert_allclose(lu, ref_lu, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(piv, ref_piv)
        assert piv.dtype == np.int32
    singular = np.zeros((3, 3))
    assert np.isnan(_call1(fn, singular)[0]).all()


def test_one_compile_serves_every_props():
    """The node functions are one-line calls: lower and upper, unit or not, every layout, share one implementation."""
    f64 = np.eye(3), np.ones((3, 2))
    for props in [(True, False, 2, False, "float64"), (False, True, 2, False, "float64"), (False, False, 2, True, "float64")]:
        lower, unit, b_ndim, overwrite, dtype = props
        _lowered(SolveTriangular(lower=lower, unit_diagonal=unit, b_ndim=b_ndim, overwrite_b=overwrite), dtype, b_ndim)(*f64)
    for layouts in [(np.eye(3), np.ones((3, 2))), (np.asfortranarray(np.eye(3)), np.ones((6, 2))[::2])]:
        _lowered(SolveTriangular(lower=True, b_ndim=2), "float64", 2)(*layouts)
    impl = linalg.jitted("solve_triangular2")
    sigs = [s for s in impl.signatures if s[0].dtype == numba.float64]
    assert len(sigs) == 1 and sigs[0][0].layout == "A", impl.signatures


def test_readonly_inputs_compile_and_are_not_written():
    """Graph constants arrive as read-only arrays (never destroyed: an op overwriting its input gets a
    writable one); the implementations, whose props are run-time flags, still type and copy them."""
    s = _spd(np.random.default_rng(5), 4, "float64")
    b = np.ones((4, 3))
    for x in (s, b):
        x.setflags(write=False)
    before = s.copy(), b.copy()
    np.testing.assert_allclose(_lowered(Cholesky(lower=True), "float64")(s), np.linalg.cholesky(s), rtol=1e-12)
    ref = sl.solve_triangular(np.tril(s), b, lower=True)
    np.testing.assert_allclose(_lowered(SolveTriangular(lower=True, b_ndim=2), "float64")(s, b), ref, rtol=1e-12)
    np.testing.assert_allclose(_lowered(CholeskySolve(lower=True, b_ndim=2), "float64")(s, b), sl.cho_solve((s, True), b), rtol=1e-12)
    np.testing.assert_allclose(_lowered(Dot(), "float64")(s, b), s @ b, rtol=1e-12)
    np.testing.assert_array_equal(s, before[0])
    np.testing.assert_array_equal(b, before[1])


def test_keys_cover_every_file_the_node_functions_call_into(monkeypatch):
    """The source hash in every key (and deferred symbol) reads the file of each implementation and
    shared piece, and changes when any file it reads changes (a kernel moved to another module must
    bring that module into the hash)."""
    import inspect
    from pathlib import Path

    from pmfast.compiler import lapack, linalg_kernels

    files = set(linalg.keyed_files())
    pieces = [*linalg_kernels.IMPLEMENTATIONS.values(), *(getattr(linalg_kernels, p) for p in linalg_kernels.SHARED)]
    called = {inspect.getsourcefile(getattr(f, "py_func", f)) for f in pieces}
    assert called | {linalg.__file__, lapack.__file__} <= files
    assert set(linalg._OPS) == set(linalg_kernels.IMPLEMENTATIONS)
    base = linalg._source_hash()
    read = Path.read_bytes
    for path in files:
        monkeypatch.setattr(Path, "read_bytes", lambda self, p=path: read(self) + (b"#" if str(self) == p else b""))
        assert linalg._source_hash() != base, path
    monkeypatch.setattr(Path, "read_bytes", read)
    assert linalg._source_hash() == base
