"""``bench/compile_profile.py --rewrites-only``: the graph stages timed without numba."""

from __future__ import annotations

import pytest
from conftest import load_bench


@pytest.fixture(scope="module")
def profile():
    return load_bench("compile_profile")


def test_rewrites_only_times_each_phase_and_pass(profile):
    r = profile.rewrites_worker("wide_additive:n=3,n_obs=40", "pmfast", "all")
    t = r["timings"]
    assert {"graph build", "canonicalize", "specialize", "pmfast:pmfast.indexed_elemwise.fusion"} <= set(t)
    assert r["pmfast_passes"] == pytest.approx(sum(v for k, v in t.items() if k.startswith("pmfast:")))
    assert r["rewrites"] == pytest.approx(sum(v for k, v in t.items() if k != "graph build"))
    assert 0 < r["rewritten_nodes"] < r["nodes"]
    stock = profile.rewrites_worker("wide_additive:n=3,n_obs=40", "stock", "all")
    assert not any(k.startswith("pmfast:") for k in stock["timings"]) and stock["pmfast_passes"] == 0


def test_growth_exponent(profile):
    assert profile.exponent([10, 20, 40], [1.0, 2.0, 4.0]) == pytest.approx(1.0)
    assert profile.exponent([10, 20, 40], [1.0, 4.0, 16.0]) == pytest.approx(2.0)
