"""The sampler bench (`pmfast bench --sampler`): its pure functions, option checks, and one end-to-end run."""

import json
import math

import numpy as np

import pytest
from typer.testing import CliRunner

from pmfast import sampler_bench as sb
from pmfast.cli.app import app
from pmfast.cli.report import sampler_table, write_json, write_sampler_plot

runner = CliRunner()


def side(per_grad, posterior=None, compile_s=1.0):
    return {
        "compile_s": compile_s, "per_grad_us": per_grad, "startup_s": 0.01, "first_call_extra_s": 0.2,
        "first_run_s": compile_s + 1.0, "posterior": posterior or {"mu[0]": (0.0, 1.0, 400.0)},
    }


@pytest.fixture
def fake_workers(monkeypatch):
    """Workers answering from a table instead of processes: {(model, side): per-gradient µs or an error}."""
    table = {}

    def worker(spec, s, *args):
        value = table[spec, s]
        if isinstance(value, str):
            raise sb.SamplerBenchError(value)
        return side(*value) if isinstance(value, tuple) else side(value)

    monkeypatch.setattr(sb, "worker", worker)
    return table


def test_agreement_is_in_monte_carlo_standard_errors():
    a = {"x[0]": (0.0, 1.0, 100.0), "y[0]": (5.0, 2.0, 400.0)}
    b = {"x[0]": (0.3, 1.0, 100.0), "y[0]": (5.0, 2.0, 400.0), "only_b[0]": (9.0, 1.0, 10.0)}
    assert sb.agreement(a, b) == pytest.approx(0.3 / math.sqrt(2 / 100))
    assert sb.agreement(a, a) == 0.0


def test_agreement_compares_constant_scalars_by_value():
    """A deterministic of data only (time_series_generative_graph_ar2's ``ar`` holds the observed series) is
    constant over the draws: an ulp between runs of different lengths, over a rounding-level sd, read 86 MCSE."""
    a = {"c[0]": (-1.21914961882704, 2.220446049250313e-16, 3836.0), "z[0]": (0.0, 0.0, 1.0)}
    b = {"c[0]": (-1.2191496188270405, 2.220446049250313e-16, 3620.0), "z[0]": (0.0, 0.0, 1.0)}
    assert sb.agreement(a, b) == 0.0
    assert sb.agreement({"c[0]": (1.0, 0.0, 1.0)}, {"c[0]": (2.0, 0.0, 1.0)}) == math.inf
    varying = {"c[0]": (-1.2191496188270405, 0.1, 3620.0)}
    assert sb.agreement(a, varying) == pytest.approx(4e-16 / math.sqrt(0.01 / 3620), rel=0.5)


def test_compare_ratios_and_agreement_against_stock(fake_workers):
    fake_workers.update({("m", "stock"): 100.0, ("m", "pmfast"): 50.0, ("m", "jax"): "jax exploded"})
    (row,) = sb.compare(["m"], sides=("stock", "pmfast", "jax"))
    assert row["ratio"] == {"pmfast": 0.5}
    assert row["agreement"] == {"pmfast": 0.0}
    assert row["errors"] == {"jax": "jax exploded"}
    assert all("posterior" not in r for r in row["sides"].values())


def test_agreement_uses_runs_of_equal_length(monkeypatch):
    """A heavy side's budget-shortened long run is not compared with the other side's full one: the short runs are."""
    near, far = {"mu[0]": (0.0, 1.0, 400.0)}, {"mu[0]": (1.0, 1.0, 400.0)}
    rows = {"stock": {**side(100.0, far), "long": {"tune": 273, "draws": 273}, "posterior_short": near},
            "pmfast": {**side(50.0, near), "long": {"tune": 1000, "draws": 1000}, "posterior_short": near}}
    monkeypatch.setattr(sb, "worker", lambda spec, s, *args: dict(rows[s]))
    (row,) = sb.compare(["m"], sides=("stock", "pmfast"))
    assert row["agreement"] == {"pmfast": 0.0} and row["agreement_run"] == {"pmfast": "short"}
    assert "(short)" in "\n".join(sampler_table([row], {}))
    rows["stock"]["long"] = {"tune": 1000, "draws": 1000}
    (row,) = sb.compare(["m"], sides=("stock", "pmfast"))
    assert row["agreement"]["pmfast"] == pytest.approx(1 / math.sqrt(2 / 400)) and "agreement_run" not in row


def test_compare_without_stock_has_no_ratios(fake_workers):
    fake_workers.update({("m", "pmfast"): 50.0})
    (row,) = sb.compare(["m"], sides=("pmfast",))
    assert row["ratio"] == {} and row["agreement"] == {}


def test_geomeans_per_side():
    results = [{"ratio": {"pmfast": 0.5, "jax": 2.0}}, {"ratio": {"pmfast": 2.0}}, {"ratio": {"pmfast": 0.125}}]
    means = sb.geomeans(results)
    assert means["pmfast"] == pytest.approx(0.5)
    assert means["jax"] == pytest.approx(2.0)
    assert math.isnan(sb.geomean([]))


def test_check_sides():
    assert sb.check_sides("pmfast, stock,pmfast") == ("pmfast", "stock")
    with pytest.raises(ValueError, match="'numpy'"):
        sb.check_sides("stock,numpy")
    with pytest.raises(ValueError):
        sb.check_sides("")


def test_core_models_in_order_discrete_ones_optional(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "BENCHMARK_CORE.md").write_text(
        "1. `models/a.py` — x\n2. `models/b_c.py` — y\n3. `models/a.py` again\n4. `models_discrete/d.py` — z\n"
    )
    continuous = [str(tmp_path / "models/a.py"), str(tmp_path / "models/b_c.py")]
    assert sb.core_models(tmp_path) == continuous + [str(tmp_path / "models_discrete/d.py")]
    assert sb.core_models(tmp_path, discrete=False) == continuous


def test_a_model_no_side_can_sample_is_tried_once(fake_workers):
    calls = []
    fake_workers.update({("d.py", "stock"): f"d.py (stock): {sb.NOT_NUTS}: discrete free variables z"})
    original = sb.worker
    sb.worker = lambda spec, s, *a: calls.append(s) or original(spec, s, *a)
    try:
        (row,) = sb.compare(["d.py"], sides=("stock", "pmfast", "jax"))
    finally:
        sb.worker = original
    assert calls == ["stock"]
    assert set(row["errors"]) == {"stock", "pmfast", "jax"} and not row["sides"]
    assert all(sb.NOT_NUTS in e for e in row["errors"].values())


def test_per_model_lengths(fake_workers, monkeypatch):
    seen = {}
    monkeypatch.setattr(sb, "worker", lambda spec, s, chains, long, short, *a: seen.setdefault(spec, (long, short)) and side(1.0))
    lengths = sb.parse_lengths(["big=50,60,20", "mid=80,90"])
    assert lengths == {"big": ((50, 60), (20, 20)), "mid": ((80, 90), None)}
    rows = sb.compare(["/c/models/big.py", "/c/models/mid.py", "zoo:n=3"], sides=("stock",), long=(300, 300), short=(100, 100),
                      lengths=lengths)
    assert seen == {"/c/models/big.py": ((50, 60), (20, 20)), "/c/models/mid.py": ((80, 90), (100, 100)),
                    "zoo:n=3": ((300, 300), (100, 100))}
    assert rows[0]["lengths"] == {"long": [50, 60], "short": [20, 20]} and "lengths" not in rows[2]
    for bad in ("big", "big=1", "big=10,x", "=10,10", "big=10,10,10", "big=0,10"):
        with pytest.raises(ValueError, match="bad run length"):
            sb.parse_lengths([bad])


def test_a_worker_past_its_timeout_is_an_error_row(tmp_path):
    import sys

    from pmfast.bench import run_worker

    with pytest.raises(sb.SamplerBenchError, match="slow.py \\(stock\\): timed out after 1 s"):
        run_worker([sys.executable, "-c", "import time; time.sleep(30)"], {}, "slow.py (stock)", sb.SamplerBenchError, timeout=1)


def test_partial_json_after_each_model(fake_workers, tmp_path):
    fake_workers.update({("a.py", "stock"): 10.0, ("b.py", "stock"): "boom"})
    snapshots = []
    sb.compare(["a.py", "b.py"], sides=("stock",), on_row=lambda rows: snapshots.append([r["model"] for r in rows]))
    assert snapshots == [["a.py"], ["a.py", "b.py"]]


def test_catalogue_models_by_name(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "BEST.py").write_text("")
    assert sb.catalogue_models(tmp_path, ["BEST", "models/BEST.py"]) == [str(tmp_path / "models" / "BEST.py")]
    with pytest.raises(ValueError, match="unknown catalogue model 'nope'"):
        sb.catalogue_models(tmp_path, ["nope"])
    with pytest.raises(ValueError, match="BENCHMARK_CORE.md"):
        sb.catalogue_models(tmp_path, core=True)
    with pytest.raises(ValueError, match="not a model catalogue"):
        sb.catalogue_models(tmp_path / "models", ["BEST"])


def test_table_rows_ratios_and_failures(fake_workers):
    fake_workers.update({("/c/models/BEST.py", "stock"): 10.0, ("/c/models/BEST.py", "pmfast"): (7.0, None, 2.0),
                         ("/c/models/BEST.py", "jax"): "boom"})
    results = sb.compare(["/c/models/BEST.py"], sides=("stock", "pmfast", "jax"))
    lines = sampler_table(results, sb.geomeans(results))
    assert lines[0].startswith("| model | side | compile s")
    assert len({line.count("|") for line in lines}) == 1
    (pm_row,) = [ln for ln in lines if "| pmfast |" in ln and "BEST" in ln]
    assert "7 (0.70×)" in pm_row and "| 2.0 |" in pm_row
    assert any("| jax | failed: boom" in ln for ln in lines)
    assert lines[-1].startswith("| geometric mean | pmfast |") and "0.70×" in lines[-1]


def test_plot_and_atomic_json(fake_workers, tmp_path):
    fake_workers.update({("m.py", "stock"): 10.0, ("m.py", "pmfast"): 5.0})
    results = sb.compare(["m.py"], sides=("stock", "pmfast"))
    write_sampler_plot(results, sb.geomeans(results), tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    write_json({"results": results}, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["ratio"] == {"pmfast": 0.5}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(TypeError):
        write_json({"bad": object()}, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["results"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    "args, fact",
    [
        (["--sampler"], "--sampler needs models"),
        (["--sampler", "--catalogue", "/no/such/dir", "--core"], "catalogue directory not found"),
        (["--sampler", "--core"], "need --catalogue"),
        (["--core"], "need --sampler"),
        (["--length", "BEST=10,10"], "need --sampler"),
        (["--sampler", "eight_schools_noncentered", "--length", "BEST=10"], "--length: bad run length"),
        (["--sampler", "eight_schools_noncentered", "--timeout", "0"], "--timeout"),
        (["--sampler", "eight_schools_noncentered", "--sides", "stock,numpy"], "unknown side 'numpy'"),
        (["--sampler", "eight_schools_noncentered", "--chains", "0"], "--chains"),
        (["--sampler", "eight_schools_noncentered", "--short", "1000"], "--short"),
        (["--sampler", "no_such_zoo_model"], "unknown zoo model"),
        (["--sampler", "eight_schools_noncentered", "--plot", "/no/such/dir/p.png"], "directory does not exist"),
    ],
)
def test_bad_options_are_one_clean_error(args, fact):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fact in lines[0], result.stderr


def test_unknown_catalogue_model(tmp_path):
    (tmp_path / "models").mkdir()
    result = runner.invoke(app, ["bench", "--sampler", "--catalogue", str(tmp_path), "--models", "BEST,nope"])
    assert result.exit_code == 1 and "unknown catalogue model 'BEST'" in result.stderr


@pytest.mark.slow
def test_end_to_end_on_a_tiny_model(tmp_path, tiny_model_source):
    model = tmp_path / "tiny.py"
    model.write_text(tiny_model_source)
    out, plot = tmp_path / "s.json", tmp_path / "s.png"
    result = runner.invoke(app, ["bench", "--sampler", str(model), "--sides", "stock,pmfast", "--chains", "1",
                                 "--tune", "60", "--draws", "60", "--short", "20", "--json", str(out), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    (row,) = payload["results"]
    assert set(row["sides"]) == {"stock", "pmfast"} and not row["errors"]
    for r in row["sides"].values():
        assert r["compile_s"] > 0 and r["per_grad_us"] > 0 and r["long"]["steps"] > r["short"]["steps"]
        assert r["first_run_s"] > r["compile_s"]
    assert row["agreement"]["pmfast"] < 5
    assert "| tiny.py | pmfast |" in result.stdout
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_first_sample_compiles_nothing(monkeypatch):
    """The first nutpie.sample of a pmfast-compiled model compiles no numba function (no lazy kernels):
    what the first call costs beyond later ones is xarray's first DataArray (it imports dask.array to
    check for duck arrays), which stock pays alike."""
    import nutpie
    import xarray
    from numba.core.dispatcher import Dispatcher

    import pmfast
    from pmfast.loading import load_model

    model, initial_point = load_model("eight_schools_noncentered")
    compiled = pmfast.compile(model, initial_points=initial_point)
    xarray.DataArray(np.zeros(2))
    compiles = []
    original = Dispatcher.compile

    def spy(self, sig):
        compiles.append(self.py_func.__qualname__)
        return original(self, sig)

    monkeypatch.setattr(Dispatcher, "compile", spy)
    trace = nutpie.sample(compiled, chains=1, cores=1, tune=20, draws=20, seed=1, progress_bar=False)
    assert trace.posterior["mu"].shape == (1, 20)
    assert compiles == [], compiles


def test_run_lengths_stretch_tiny_runs_and_shorten_heavy_ones():
    # 200 short draws in 0.02 s: a 600-draw run predicts 0.06 s, lengthened to reach MIN_WALL_S (≤ 30×), timed PAIRS times
    (tune, draws), pairs = sb.run_lengths(0.02, (100, 100), (300, 300), budget=120, min_wall=3.0)
    assert (tune, draws) == (9000, 9000) and pairs == sb.PAIRS
    (tune, draws), pairs = sb.run_lengths(0.5, (100, 100), (300, 300), budget=120, min_wall=3.0)
    assert (tune, draws) == (600, 600) and pairs == sb.PAIRS
    # a run predicted at 300 s is cut to the budget and timed once; never below the short run
    (tune, draws), pairs = sb.run_lengths(100.0, (100, 100), (300, 300), budget=120, min_wall=3.0)
    assert (tune, draws) == (120, 120) and pairs == 1
    assert sb.run_lengths(1000.0, (100, 100), (300, 300), budget=120, min_wall=3.0) == ((101, 101), 1)
    (tune, draws), pairs = sb.run_lengths(2.0, (100, 100), (300, 300), budget=120, min_wall=3.0)
    assert (tune, draws) == (300, 300) and pairs == sb.PAIRS


def test_start_overrides_only_where_the_default_start_is_not_finite():
    """marginalized_gaussian_mixture_model drops its initvals: an ordered ``mu`` at its prior mean is
    ``[0, -inf, -inf]`` transformed, and nutpie's initialization fails on every side."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0, shape=3, transform=pm.distributions.transforms.ordered, initval=[1.0, 2.0, 3.0])
        pm.Normal("y", mu.sum(), 1.0, observed=[0.5])
    point = model.initial_point()
    model.rvs_to_initial_values = {rv: None for rv in model.free_RVs}
    assert not np.isfinite(model.initial_point()["mu_ordered__"]).all()
    overrides = sb.start_overrides(model, point)
    np.testing.assert_allclose(overrides["mu"], [1.0, 2.0, 3.0])
    with pm.Model() as fine:
        pm.Normal("x", 0.0, 1.0)
    assert sb.start_overrides(fine, fine.initial_point()) is None
    assert sb.start_overrides(model, None) is None
