"""sum_of_products: sum(x * y, axis=k) of broadcast 3-d factors as one matrix product, values as stock."""

import functools
import itertools

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st

import pmfast

# (summed axis, axis spanned by x only, axis spanned by y only): every arrangement of three axes
ARRANGEMENTS = list(itertools.permutations(range(3)))


def _factors(arrangement):
    """Matrix inputs and 3-d factors laid out by ``arrangement`` = (r, a, b)."""
    r, a, b = arrangement
    xm, ym = pt.matrix("xm"), pt.matrix("ym")  # xm: (a, r), ym: (r, b)
    x_order = ["x"] * 3
    x_order[a], x_order[r] = 0, 1
    y_order = ["x"] * 3
    y_order[r], y_order[b] = 0, 1
    return xm, ym, xm.dimshuffle(x_order), ym.dimshuffle(y_order)


@functools.lru_cache(maxsize=None)
def _functions(arrangement):
    r = arrangement[0]
    xm, ym, x, y = _factors(arrangement)
    out = (x * y).sum(axis=r)
    cost = (out * pt.arange(out.size, dtype="float64").reshape(out.shape)).sum()
    outs = [out, *pytensor.grad(cost, [xm, ym])]
    return (
        pytensor.function([xm, ym], outs, mode=pmfast.get_mode("sum_of_products")),
        pytensor.function([xm, ym], outs, mode=pmfast.get_mode("none")),
    )


def test_every_arrangement_becomes_one_dot():
    for arrangement in ARRANGEMENTS:
        fast, stock = _functions(arrangement)
        names = [type(n.op).__name__ for n in fast.maker.fgraph.apply_nodes]
        assert "Sum" not in names[:1] and names.count("Dot") >= 1
        assert not any(type(n.op).__name__ == "Sum" and n.inputs[0].ndim == 3 for n in fast.maker.fgraph.apply_nodes)
        assert any(type(n.op).__name__ == "Sum" and n.inputs[0].ndim == 3 for n in stock.maker.fgraph.apply_nodes)


@settings(max_examples=30, deadline=None)
@given(arrangement=st.sampled_from(ARRANGEMENTS), m=st.integers(1, 5), k=st.integers(0, 40), n=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_values_and_gradients_match_stock(arrangement, m, k, n, seed):
    rng = np.random.default_rng(seed)
    args = rng.normal(size=(m, k)), rng.normal(size=(k, n))
    fast, stock = _functions(arrangement)
    for got, ref in zip(fast(*args), stock(*args), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_declines_without_the_broadcast_pattern_or_with_other_clients():
    x, y = pt.tensor3("x"), pt.tensor3("y")
    p = x * y
    fn = pytensor.function([x, y], [p.sum(axis=0)], mode=pmfast.get_mode("sum_of_products"))
    assert not any(type(n.op).__name__ == "Dot" for n in fn.maker.fgraph.apply_nodes)
    xm, ym, a, b = _factors(ARRANGEMENTS[0])
    prod = a * b
    fn = pytensor.function([xm, ym], [prod.sum(axis=0), prod], mode=pmfast.get_mode("sum_of_products"))
    assert not any(type(n.op).__name__ == "Dot" for n in fn.maker.fgraph.apply_nodes)
