"""``bench/node_times.py --core``: one fresh process per model, failures recorded, a markdown table."""

from __future__ import annotations

import pytest
from conftest import load_bench


@pytest.fixture(scope="module")
def node_times():
    return load_bench("node_times")


@pytest.mark.slow
def test_core_profiles_each_model_in_its_own_process(node_times, tmp_path, tiny_model_source):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.py").write_text(tiny_model_source)
    (tmp_path / "models" / "broken.py").write_text("def build_model():\n    raise RuntimeError('no model here')\n")
    (tmp_path / "BENCHMARK_CORE.md").write_text("1. `models/broken.py` — fails\n2. `models/tiny.py` — a normal\n")
    results = node_times.run_core(str(tmp_path), "typical", "all", timeout=600, repeats=1, progress=lambda s: None)
    broken, tiny = results
    assert "no model here" in broken["error"]
    assert set(tiny["kernel"]) == {"stock", "pmfast"} and all(v[0] > 0 for v in tiny["kernel"].values())
    assert tiny["pmfast"] and all(row[0] > 0 for row in tiny["pmfast"])
    table = node_times.core_table(results).splitlines()
    assert len(table) == 4 and table[2].startswith("| broken | –") and table[3].startswith("| tiny |")


def test_short_label_names_indexed_loops(node_times):
    scatter = "IndexedElemwise{Composite{...}($0[i0], $1[$2[i0]]) -> $3[$2[i0]] += o0}(x, y, idx)"
    assert node_times.short_label(scatter) == "IndexedElemwise (gather, scatter-add)"
    assert node_times.short_label("IndexedElemwise{mul($0[$1[i0]]) -> out0[i0] = o0}(a, b)") == "IndexedElemwise (gather)"
    assert node_times.short_label("Dot(x, y)") == "Dot(x, y)" and len(node_times.short_label("Cos(" + "x" * 80 + ")")) == 40
