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
    steps = {"graph: shapes", "graph: model.logp", "graph: logp rewrite", "graph: grad", "graph: clone_replace", "graph: function graph"}
    assert steps | {"initial point"} <= set(t)
    assert t["graph build"] == pytest.approx(sum(t[k] for k in steps))
    assert r["pmfast_passes"] == pytest.approx(sum(v for k, v in t.items() if k.startswith("pmfast:")))
    assert r["rewrites"] == pytest.approx(sum(v for k, v in t.items() if not k.startswith(("graph", "initial point"))))
    assert 0 < r["rewritten_nodes"] < r["nodes"]
    stock = profile.rewrites_worker("wide_additive:n=3,n_obs=40", "stock", "all")
    assert not any(k.startswith("pmfast:") for k in stock["timings"]) and stock["pmfast_passes"] == 0


def test_growth_exponent(profile):
    assert profile.exponent([10, 20, 40], [1.0, 2.0, 4.0]) == pytest.approx(1.0)
    assert profile.exponent([10, 20, 40], [1.0, 4.0, 16.0]) == pytest.approx(2.0)


def test_growth_summary_rows(profile):
    def pm(nodes, scale):
        cpu = {"graphs + rewrites": 3.0 * scale, "numba: logp+grad kernel": 4.0 * scale, "numba: expand kernel": 1.0 * scale}
        return {"nodes": nodes, "cpu": 8.0 * scale, "worker_cpu": 0.0, "cpu_timings": cpu, "rewrite_cpu": 2.0 * scale}

    specs = ["m:n=1", "m:n=2", "m:n=4"]
    stock = [{"nodes": 100, "cpu": 10.0}, {"nodes": 200, "cpu": 40.0}, None]  # the largest over the timeout
    rows = profile.growth_summary(specs, [pm(100, 1), pm(200, 2), pm(400, 4)], stock)
    by = {r.split(" | ")[0].lstrip("| "): r for r in rows}
    assert by["pmfast total"].endswith("| 8.0 | 16.0 | 32.0 | 1.00 |")
    assert by["pmfast graph build"].startswith("| pmfast graph build | 1.0 | 2.0 | 4.0 |")
    assert by["pmfast numba + LLVM"].startswith("| pmfast numba + LLVM | 5.0 | 10.0 | 20.0 |")
    assert by["stock total"].endswith("| 10.0 | 40.0 | — | 2.00 |")
    assert "m:n=4 (400)" in rows[0]
