"""pmfast's numba ``RowSoftmax`` (:mod:`pmfast.compiler.softmax`) against the pass's own implementation."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pmfast.compiler import ops
from pmfast.mode import get_mode
from pmfast.passes.softmax_rows import RowSoftmax

KINDS = ("softmax", "log_softmax", "both")


def _outputs(kind, x):
    outs = []
    if kind in ("softmax", "both"):
        outs.append(pt.special.softmax(x, axis=-1))
    if kind in ("log_softmax", "both"):
        outs.append(pt.special.log_softmax(x, axis=-1))
    return outs


@functools.cache
def _compiled(kind: str, ndim: int, cached: bool):
    """The softmax_rows graph of ``kind`` compiled by pmfast's linker, with this module's implementation or the pass's."""
    old = os.environ.get("PMFAST_SOFTMAX_CACHED")
    os.environ["PMFAST_SOFTMAX_CACHED"] = "1" if cached else "0"
    try:
        x = pt.tensor("x", shape=(None,) * ndim, dtype="float64")
        fn = pytensor.function([x], _outputs(kind, x), mode=get_mode(["softmax_rows"]))
        fn(np.ones((1,) * ndim))
    finally:
        if old is None:
            os.environ.pop("PMFAST_SOFTMAX_CACHED")
        else:
            os.environ["PMFAST_SOFTMAX_CACHED"] = old
    (node,) = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, RowSoftmax)]
    return fn, node


def _arrays(ndim):
    elements = st.one_of(st.floats(-40, 40), st.sampled_from([-np.inf, np.inf, np.nan, 700.0, -700.0]))
    return hnp.arrays("float64", hnp.array_shapes(min_dims=ndim, max_dims=ndim, min_side=0, max_side=9), elements=elements)


def _same_bits(got, ref):
    assert len(got) == len(ref)
    for a, b in zip(got, ref, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("ndim", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_node_function_is_this_modules(kind, ndim):
    _, node = _compiled(kind, ndim, True)
    fn, key = ops.funcify_and_cache_key(node.op, node)
    assert key.startswith("pmfast_softmax_")
    assert "_pm_impl" in fn.py_func.__source__
    os.environ["PMFAST_SOFTMAX_CACHED"] = "0"
    try:
        assert ops.funcify_and_cache_key(node.op, node) is None
    finally:
        os.environ.pop("PMFAST_SOFTMAX_CACHED")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(x=_arrays(2), kind=st.sampled_from(KINDS), strided=st.booleans())
def test_matrix_same_bits_as_the_pass(x, kind, strided):
    if strided:
        x = x[:, ::2]  # not contiguous
    fast, _ = _compiled(kind, 2, True)
    ref, _ = _compiled(kind, 2, False)
    _same_bits(fast(x), ref(x))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(x=_arrays(1), kind=st.sampled_from(KINDS))
def test_vector_same_bits_as_the_pass(x, kind):
    fast, _ = _compiled(kind, 1, True)
    ref, _ = _compiled(kind, 1, False)
    if x.size == 0:
        for fn in (fast, ref):
            with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
                fn(x)
        return
    _same_bits(fast(x), ref(x))


def test_against_numpy():
    x = np.random.default_rng(3).normal(size=(6, 5)) * 20
    sm, lsm = _compiled("both", 2, True)[0](x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(axis=-1, keepdims=True), rtol=1e-14)
    np.testing.assert_allclose(lsm, np.log(e / e.sum(axis=-1, keepdims=True)), rtol=1e-12, atol=1e-12)
