"""pmfast.compiler.careduce: partial Sum/Prod/Max/Min over any axes of any layout, against numpy and stock."""

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pmfast
from pmfast import compiler
from pmfast.compiler import careduce

compiler.setup()

AXES = [(2, (0,)), (2, (1,)), (3, (0,)), (3, (1,)), (3, (2,)), (3, (0, 2)), (3, (1, 2)), (3, (0, 1))]
REDUCE = {"sum": (pt.sum, np.sum, 0.0), "prod": (pt.prod, np.prod, 1.0), "max": (pt.max, np.max, -np.inf), "min": (lambda x, axis: pt.math.Min(axis)(x), np.min, np.inf)}

_fns: dict = {}


def _fn(ndim, axes, kind, dtype):
    """pmfast's node function for one reduction (compiled once per case)."""
    k = (ndim, axes, kind, dtype)
    if k not in _fns:
        node = REDUCE[kind][0](pt.tensor(dtype=dtype, shape=(None,) * ndim), axis=axes).owner
        fn, key = careduce.funcify(node.op, node, max_ndim=3)  # the generated code is general; 3-D is declined by default
        assert key.startswith("pmfast_careduce_")
        _fns[k] = numba.njit(lambda x: fn(x))  # the node function has no CPython wrapper
    return _fns[k]


def _layout(full, how):
    """A view of ``full`` in one of several layouts (C, transposed, every other element, reversed)."""
    if how == "C":
        return full
    if how == "T":
        return full.T.copy().T  # F-ordered, same logical array
    if how == "step":
        return np.repeat(full, 2, axis=-1)[..., ::2]
    return full[::-1].copy()[::-1]  # negative strides


@settings(max_examples=30, deadline=None)
@given(
    case=st.sampled_from(AXES),
    kind=st.sampled_from(sorted(REDUCE)),
    shape=st.lists(st.sampled_from([0, 1, 2, 3, 5, 17, 40]), min_size=3, max_size=3),
    how=st.sampled_from(["C", "T", "step", "rev"]),
    dtype=st.sampled_from(["float64", "float32"]),
    seed=st.integers(0, 2**31),
)
def test_reduction_equals_numpy(case, kind, shape, how, dtype, seed):
    """Values as numpy's (sums and products to rounding: their terms may be added in another order),
    maxima and minima exactly; an empty reduced axis gives the identity, as pytensor's loops."""
    ndim, axes = case
    if dtype == "float32" and kind in ("sum", "prod"):
        kind = "max"  # pytensor sums and multiplies float32 in float64 (declined, below)
    rng = np.random.default_rng(seed)
    full = rng.normal(size=tuple(shape[:ndim])).astype(dtype)
    if kind == "prod":
        full = (1 + 0.1 * full).astype(dtype)  # products that neither vanish nor overflow
    x = _layout(full, how)
    got = _fn(ndim, axes, kind, dtype)(x)
    want_shape = tuple(n for k, n in enumerate(x.shape) if k not in axes)
    assert got.shape == want_shape and got.dtype == np.dtype(dtype)
    if any(x.shape[a] == 0 for a in axes):
        np.testing.assert_array_equal(got, np.full(want_shape, REDUCE[kind][2], dtype))
        return
    want = REDUCE[kind][1](x.astype(np.float64), axis=axes)
    n = int(np.prod([x.shape[a] for a in axes]))
    eps = np.finfo(dtype).eps
    if kind in ("max", "min"):
        np.testing.assert_array_equal(got, want.astype(dtype))
    elif kind == "sum":
        bound = (n + 1) * eps * np.sum(np.abs(x.astype(np.float64)), axis=axes) + np.finfo(dtype).tiny
        assert np.all(np.abs(got - want) <= bound)
    else:
        np.testing.assert_allclose(got, want, rtol=(n + 1) * eps)


def test_nan_skipped_by_max_as_pytensors_loops():
    x = np.array([[np.nan, 1.0, 2.0], [3.0, np.nan, -1.0]])
    np.testing.assert_array_equal(_fn(2, (1,), "max", "float64")(x), [2.0, 3.0])
    np.testing.assert_array_equal(_fn(2, (0,), "min", "float64")(x.T), [1.0, -1.0])


def test_declines_what_it_does_not_implement():
    m = pt.matrix("m")
    for out in (pt.sum(m), pt.all(m, axis=0), pt.sum(pt.imatrix(), axis=0), pt.sum(pt.fmatrix(), axis=0)):
        assert careduce.funcify(out.owner.op, out.owner) is None
    assert careduce.funcify(pt.sum(m, axis=1).owner.op, pt.sum(m, axis=1).owner) is not None
    t = pt.sum(pt.tensor3(), axis=1).owner
    assert careduce.funcify(t.op, t) is None and careduce.funcify(t.op, t, max_ndim=3) is not None


def test_graph_values_and_gradient_equal_stock():
    """In pmfast's mode (reductions of transposed views, of a product, a max along an axis):
    within rounding of stock's NUMBA mode, logp-like value and gradient."""
    z = pt.matrix("z")
    w = pt.tensor3("w")
    cost = (
        pt.sum(pt.sum(z.T, axis=0) ** 2)
        + pt.sum(z.T**2, axis=1).sum()
        + pt.max(z * 2.0, axis=0).sum()
        + pt.sum(w, axis=(0, 2)).dot(pt.arange(w.shape[1]))
        + pt.prod(1 + 0.01 * z, axis=1).sum()
    )
    outs = [cost, *pytensor.grad(cost, [z, w])]
    ours = pytensor.function([z, w], outs, mode=pmfast.get_mode())
    stock = pytensor.function([z, w], outs, mode="NUMBA")
    nodes = [n for n in ours.maker.fgraph.toposort() if careduce.implements(n.op, n)]
    assert nodes
    rng = np.random.default_rng(0)
    for zs, ws in (((7, 3), (2, 5, 4)), ((40, 2), (3, 1, 0)), ((0, 4), (1, 2, 3))):
        zv, wv = rng.normal(size=zs), rng.normal(size=ws)
        for a, b in zip(ours(zv, wv), stock(zv, wv), strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_on_by_default_and_off_with_the_switch(monkeypatch):
    from pmfast.compiler import ops

    node = pt.sum(pt.matrix(), axis=0).owner
    monkeypatch.delenv("PMFAST_CAREDUCE", raising=False)
    assert ops.funcify_and_cache_key(node.op, node)[1].startswith("pmfast_careduce_")
    monkeypatch.setenv("PMFAST_CAREDUCE", "0")
    assert ops.funcify_and_cache_key(node.op, node) is None


def test_only_partial_reductions_count_as_careduce_calls():
    """An entry calls a partial reduction it uses often (``inline._is_careduce``, by the node function's
    module); a Sum over every axis (``small_ops.sum_all``) is not one, whatever module it moves to."""
    from pmfast.compiler import inline, ops

    x = pt.matrix()
    partial, full = pt.sum(x, axis=0).owner, pt.sum(x).owner
    partial_fn, partial_key = ops.funcify_and_cache_key(partial.op, partial)
    full_fn, full_key = ops.funcify_and_cache_key(full.op, full)
    assert partial_key.startswith("pmfast_careduce_") and full_key.startswith("pmfast_sum_all_")
    assert inline._is_careduce(partial_fn) and not inline._is_careduce(full_fn)


def test_identity_reductions_kept_by_a_mode_without_canonicalize_stay_pytensors():
    """``Prod`` over no axes of a matrix and over all axes of a 0-d input: fast_run's ``local_useless_reduce``
    removes them (under stock NUMBA too); a mode running only numba-tagged rewrites keeps the node, which
    pmfast's linker then leaves to pytensor's code (declined here), the result equal to the input."""
    from pytensor.compile.mode import Mode
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery
    from pytensor.tensor.elemwise import CAReduce
    from pytensor.tensor.math import Prod

    from pmfast.linker import ChunkedNumbaLinker

    query = RewriteDatabaseQuery(include=["numba"], exclude=["cxx_only", "BlasOpt", "local_careduce_fusion"])
    mode = Mode(ChunkedNumbaLinker(), query)
    for x, axis, v in ((pt.matrix("m"), (), np.arange(6.0).reshape(3, 2)), (pt.scalar("s"), None, np.array(99.0))):
        out = Prod(axis=axis)(x)
        assert not careduce.implements(out.owner.op, out.owner)
        fn = pytensor.function([x], out, mode=mode)
        [node] = fn.maker.fgraph.apply_nodes
        assert isinstance(node.op, CAReduce)
        res = fn(v)
        assert res.shape == v.shape
        np.testing.assert_array_equal(res, v)


@pytest.mark.parametrize("axis,shape", [(0, (None, 3)), (1, (2, None)), ((0, 2), (None, 4, None))])
def test_few_static_outputs_emit_only_the_scalar_nest(axis, shape, monkeypatch):
    """Fewer than MANY_OUTPUTS outputs by static lengths: the run-time choice always takes the scalar nest,
    so only it is emitted (no strides read); the same values as with both nests (PMFAST_CAREDUCE_STATIC=0)
    for every layout."""
    x = pt.tensor(dtype="float64", shape=shape)
    node = pt.sum(x, axis=axis).owner
    fn, key = careduce.funcify(node.op, node, max_ndim=3)
    assert "strides" not in fn.py_func.__code__.co_names
    monkeypatch.setenv("PMFAST_CAREDUCE_STATIC", "0")
    both, key_both = careduce.funcify(node.op, node, max_ndim=3)
    assert "strides" in both.py_func.__code__.co_names and key_both != key
    rng = np.random.default_rng(7)
    full = rng.normal(size=[20 if d is None else d for d in shape])
    one, two = numba.njit(lambda v: fn(v)), numba.njit(lambda v: both(v))
    for how in ("C", "T", "step", "rev"):
        v = _layout(full, how)
        np.testing.assert_array_equal(one(v), two(v))
