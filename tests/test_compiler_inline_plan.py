"""``inline.plan`` beyond the budget: greedy choices by call sites or by cost, on synthetic calls."""

from __future__ import annotations

import numba
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmfast.compiler import inline


def _one(x):
    return x + 1


def _two(x):
    y = x * 2.0
    return y - x / (1.0 + y)


def _three(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] - x[i] / (1.0 + x[i])
    return s + x[0] - x[-1]


FUNCS = [numba.njit(f) for f in (_one, _two, _three)]
# distinct dispatchers of equal cost: ties
TWINS = [numba.njit(_two), numba.njit(_two), numba.njit(_two)]


def _costs(calls):
    sites, disp = {}, {}
    for name, _, d in calls:
        sites[name] = sites.get(name, 0) + 1
        disp[name] = d
    return {n: sites[n] * inline.cost(disp[n]) for n in sites}, sites


def test_within_the_budget_every_order_inlines_everything():
    calls = [("a", "Elemwise", FUNCS[2]), ("b", "Sum", FUNCS[0]), ("b", "Sum", FUNCS[0]), ("c", "Scan", FUNCS[1])]
    costs, _ = _costs(calls[:3])
    total = sum(costs.values())
    for order in ("none", "sites", "cost"):
        assert inline.plan(calls, budget=total, order=order) == ("a", "b")  # Scan never
    assert inline.plan(calls, budget=total - 1, order="none") == ()


def test_beyond_the_budget_greedy_fill():
    one, two, three = (inline.cost(f) for f in FUNCS)
    assert one < two < three
    # a: one site of the largest; b: three sites of the smallest; c: one site of the middle one
    calls = [("a", "Elemwise", FUNCS[2]), ("b", "Sum", FUNCS[0]), ("c", "Sum", FUNCS[1]), ("b", "Sum", FUNCS[0]), ("b", "Sum", FUNCS[0])]
    total = three + 3 * one + two
    # fewest call sites first: a and c (one site each), then b if it fits
    assert inline.plan(calls, budget=three + two, order="sites") == ("a", "c")
    assert inline.plan(calls, budget=total - 1, order="sites") == ("a", "c")  # b no longer fits
    # cheapest in total first (b's three sites cost 3 * one)
    by_cost = sorted([("a", three), ("b", 3 * one), ("c", two)], key=lambda kv: kv[1])
    budget = by_cost[0][1] + by_cost[1][1]
    chosen = inline.plan(calls, budget=budget, order="cost")
    assert set(chosen) == {by_cost[0][0], by_cost[1][0]}
    assert list(chosen) == [n for n in ("a", "b", "c") if n in chosen]  # in call order
    # one that does not fit is skipped, later smaller ones still taken
    assert inline.plan(calls, budget=two, order="sites") == ("c",)
    assert inline.plan(calls, budget=0, order="cost") == ()


def test_ties_go_to_the_first_call():
    calls = [("x", "Elemwise", TWINS[0]), ("y", "Elemwise", TWINS[1]), ("z", "Elemwise", TWINS[2])]
    c = inline.cost(TWINS[0])
    for order in ("sites", "cost"):
        assert inline.plan(calls, budget=2 * c, order=order) == ("x", "y")
        assert inline.plan(calls[::-1], budget=2 * c, order=order) == ("z", "y")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 2)), min_size=1, max_size=14), st.integers(0, 2000), st.sampled_from(["sites", "cost"]))
def test_plan_fits_the_budget_and_is_maximal(raw, budget, order):
    # one dispatcher per name (the first one seen), as an entry's names are
    fn = {}
    calls = [(n, "Elemwise", fn.setdefault(n, FUNCS[k])) for n, k in raw]
    costs, sites = _costs(calls)
    chosen = inline.plan(calls, budget=budget, order=order)
    assert chosen == inline.plan(list(calls), budget=budget, order=order)  # deterministic
    if sum(costs.values()) <= budget:
        assert set(chosen) == set(costs)
        return
    assert sum(costs[n] for n in chosen) <= budget
    left = budget - sum(costs[n] for n in chosen)
    assert all(costs[n] > left for n in costs if n not in chosen)  # nothing else would fit


def test_unknown_order_is_an_error():
    calls = [("a", "Elemwise", FUNCS[2])]
    with pytest.raises(KeyError):
        inline.plan(calls, budget=0, order="biggest")
