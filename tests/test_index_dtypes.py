"""index_dtypes: chained Subtensors with int8/int16 constant indices merge, without pytensor's overflow."""

import logging

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.tensor.subtensor import Subtensor

import pmfast
from pmfast.passes import fired

REWRITE_LOG = "pytensor.graph.rewriting.basic"


def _py_mode(passes):
    """pmfast's rewrites for ``passes`` with pytensor's Python linker (no numba compile per example)."""
    return Mode("py", pmfast.get_mode(passes).provided_optimizer)


def _index(x, value, dtype):
    """``x[value]`` with ``value`` an explicit ``dtype`` constant, as ``pt.as_tensor(0)`` builds (int8)."""
    return Subtensor((ps.ScalarType(dtype),))(x, ps.constant(np.dtype(dtype).type(value), dtype=dtype))


def _subtensors(f):
    return sum(isinstance(n.op, Subtensor) for n in f.maker.fgraph.apply_nodes)


def test_merges_where_stock_overflows(caplog):
    """Stock pytensor 2.38.3 logs an OverflowError and keeps two Subtensors; the pass merges them."""
    x = pt.vector("x", shape=(2002,))
    out = _index(x[1:2001], 0, "int8")
    v = np.arange(2002.0)
    with caplog.at_level(logging.ERROR, logger=REWRITE_LOG):
        stock = pytensor.function([x], out, mode=_py_mode("none"))
    assert "OverflowError" in caplog.text  # the bug this pass works around
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=REWRITE_LOG):
        fixed = pytensor.function([x], out, mode=_py_mode(["index_dtypes"]))
    assert caplog.text == ""
    assert fired(fixed) == {"index_dtypes": 1}
    assert _subtensors(fixed) == 1
    assert fixed(v) == stock(v) == v[1]


def test_plain_indices_merge_as_stock_and_do_not_count():
    """Without narrow constants the rewrite is pytensor's merge, and is not reported as firing."""
    x = pt.vector("x")
    out = x[2:][1:-1][3]
    f = pytensor.function([x], out, mode=_py_mode(["index_dtypes"]))
    assert fired(f) == {} and _subtensors(f) == 1
    assert f(np.arange(20.0)) == np.arange(20.0)[2:][1:-1][3]


def test_excludes_the_stock_rewrite_only_when_selected():
    assert "local_subtensor_merge" in pmfast.get_mode(["index_dtypes"]).provided_optimizer.exclude
    assert "local_subtensor_merge" not in pmfast.get_mode(["wide_split"]).provided_optimizer.exclude
    assert "local_subtensor_merge" not in pmfast.get_mode("none").provided_optimizer.exclude


@pytest.mark.parametrize("dtype", ["int8", "int64"])
def test_static_length_one_reversed_slice(dtype):
    """``x[1::-1][0]`` with ``x`` of static length 1 is ``x[0]``: stock merges before it squeezes the
    broadcastable index, and so must the pass (squeezed first, pytensor's ``local_dimshuffle_subtensor``
    made it ``x[1]``: an IndexError)."""
    x = pt.vector("x", shape=(1,))
    f = pytensor.function([x], _index(x[1::-1], 0, dtype), mode=_py_mode(["index_dtypes"]))
    assert f(np.array([7.0])) == 7.0


@st.composite
def _chains(draw):
    n = draw(st.integers(0, 300))
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
    first = slice(draw(bound), draw(bound), draw(st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2]))))
    m = len(range(n)[first])
    dtype = draw(st.sampled_from(["int8", "int16", "int32", "uint8", "int64"]))
    info = np.iinfo(dtype)
    if m and draw(st.booleans()):
        second = draw(st.integers(max(-m, info.min), min(m - 1, info.max)))
    else:
        lo = max(-m - 2, info.min)
        second = draw(st.integers(lo, max(lo, min(m + 2, info.max))))
    return n, first, second, dtype, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(_chains())
def test_chains_match_numpy(chain):
    """``x[a:b:c][i]`` for every dtype of ``i``, in- and out-of-range, static length or not: numpy's value or its IndexError."""
    n, first, second, dtype, static = chain
    x = pt.vector("x", shape=(n,) if static else (None,))
    out = _index(x[first], second, dtype)
    v = np.arange(float(n))
    try:
        expected = v[first][second]
    except IndexError:
        expected = None
    f = pytensor.function([x], out, mode=_py_mode(["index_dtypes"]), on_unused_input="ignore")
    if expected is None:
        with pytest.raises(IndexError):
            f(v)
    else:
        assert f(v) == expected


def test_stoch_vol_compiles_without_rewrite_failures(caplog):
    """A 2,000-step GaussianRandomWalk: no OverflowError logged by pmfast's compile, logp/grad as stock."""
    from pmfast.models import stoch_vol

    model = stoch_vol.build_model(n_steps=300)
    with caplog.at_level(logging.ERROR, logger=REWRITE_LOG):
        fn, x0 = pmfast.logp_dlogp_function(model, passes=["index_dtypes"])
    assert "OverflowError" not in caplog.text
    assert fired(fn).get("index_dtypes", 0) >= 1
    stock = pmfast.logp_dlogp_function(model, passes="none")[0]
    for a, b in zip(fn(x0), stock(x0)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
