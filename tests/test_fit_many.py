"""pmfast.fit_many and `pmfast fit-many`: one compile, many datasets, here and on a Dask LocalCluster."""

import os
import signal
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import pmfast
from pmfast import FitError
from pmfast.cli.app import app
from pmfast.models import radon_data

SIZE = {"n_obs": 200, "n_counties": 12}
FIT = {"draws": 150, "tune": 150, "chains": 2}

MODEL_FILE = '''
import numpy as np
import pymc as pm
from pmfast.models import radon_data


def build_model():
    return radon_data.build_model(n_obs=200, n_counties=12)
'''


def dataset(seed, **size):
    return radon_data.dataset(**{**SIZE, **size}, seed=seed)


def mixed_datasets():
    """Good datasets (one of another length) with four broken ones between them; broken index -> what its reason names."""
    data = [dataset(seed) for seed in range(8)]
    data[2] = dataset(2, n_obs=120)  # another length: fine, the shapes follow the data
    data[1] = {"county_idx": data[1]["county_idx"], "flor": data[1]["floor"]}
    data[4] = dict(data[4], y=data[4]["y"][:-3])
    data[5] = dict(data[5], county_idx=data[5]["county_idx"] + 50)
    data[6] = dict(data[6], county_idx=data[6]["county_idx"].astype("float64"))
    broken = {1: "'flor'", 4: "y (197,)", 5: "IndexError", 6: "float64"}
    return data, broken


@pytest.fixture(scope="module")
def model():
    return radon_data.build_model(**SIZE)


@pytest.fixture(scope="module")
def compiled(model):
    return pmfast.compile(model)


@pytest.fixture(scope="module")
def local_run(compiled):
    data, broken = mixed_datasets()
    return data, broken, pmfast.fit_many(compiled, data, seed=7, progress=False, **FIT)


def check_results(results, data, broken, draws=FIT["draws"]):
    assert len(results) == len(data)
    for i, result in enumerate(results):
        if i in broken:
            assert isinstance(result, FitError) and isinstance(result, ValueError)
            assert result.index == i and broken[i] in result.reason and "\n" not in result.reason
        else:
            assert not isinstance(result, FitError), result
            assert result.attrs["pmfast_dataset"] == i
            assert result.posterior.sizes["chain"] == FIT["chains"] and result.posterior.sizes["draw"] == draws


def test_seeds_depend_on_seed_and_index_only():
    a, b = pmfast.many.seeds(3, 5), pmfast.many.seeds(3, 8)
    assert a == b[:5] and len(set(b)) == 8
    assert pmfast.many.seeds(4, 5) != a
    assert all(0 <= s < 2**63 for s in b)


def test_broken_datasets_get_a_fit_error_and_the_others_complete(local_run):
    data, broken, results = local_run
    check_results(results, data, broken)
    seeds = pmfast.many.seeds(7, len(data))
    assert [r.attrs["pmfast_seed"] for r in results if not isinstance(r, FitError)] == [
        seeds[i] for i in range(len(data)) if i not in broken
    ]


def test_the_data_are_swapped(compiled, local_run):
    """Each fit sees its own data: the floor effect follows the data's."""
    data, _, results = local_run
    flipped = dict(data[0], y=data[0]["y"] + 3.0 * data[0]["floor"])  # floor effect -0.6 -> +2.4
    [fit] = pmfast.fit_many(compiled, [flipped], seed=1, progress=False, **FIT)
    assert float(results[0].posterior["beta"].mean()) < 0 < 1.5 < float(fit.posterior["beta"].mean())


def test_errors_raise_stops_at_the_first_failure(compiled):
    data, _ = mixed_datasets()
    seen = []
    with pytest.raises(FitError, match="dataset 1: unknown data name 'flor'"):
        pmfast.fit_many(compiled, data, errors="raise", progress=False, on_result=lambda i, r: seen.append(i), **FIT)
    assert seen == [0, 1]


def test_non_finite_logp_at_the_start():
    import pymc as pm

    with pm.Model() as m:
        lam = pm.HalfNormal("lam", 1.0)
        pm.Exponential("y", lam, observed=pm.Data("y_data", np.array([0.5, 1.0, 2.0])))
    results = pmfast.fit_many(m, [{"y_data": [1.0, 2.0]}, {"y_data": [1.0, -2.0]}], progress=False, **FIT)
    assert not isinstance(results[0], FitError)
    assert isinstance(results[1], FitError) and "logp is not finite" in results[1].reason


def test_deterministics_sized_by_the_data():
    import pymc as pm

    with pm.Model() as m:
        x = pm.Data("x", np.linspace(0, 1, 5))
        b = pm.Normal("b")
        mu = pm.Deterministic("mu", b * x)
        pm.Normal("y", mu, 1.0, observed=pm.Data("y_data", np.zeros(5)))
    data = [{"x": np.ones(n), "y_data": np.zeros(n)} for n in (5, 7)]
    results = pmfast.fit_many(m, data, progress=False, **FIT)
    assert not isinstance(results[0], FitError)
    assert isinstance(results[1], FitError) and "Deterministics" in results[1].reason


def test_ctrl_c_keeps_the_fits_done(compiled):
    def interrupt_after_two(index, result):
        if index == 1:
            raise KeyboardInterrupt

    results = pmfast.fit_many(compiled, [dataset(s) for s in range(4)], progress=False, on_result=interrupt_after_two, **FIT)
    assert [isinstance(r, FitError) for r in results] == [False, False, True, True]
    assert results[2].reason == "not fitted: interrupted"


@pytest.mark.parametrize(
    "kwargs, message",
    [({"errors": "ignore"}, "errors"), ({"draws": 0}, "draws"), ({"tune": -1}, "tune"), ({"seed": [1, 2]}, "seed has 2")],
)
def test_bad_options(compiled, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pmfast.fit_many(compiled, [dataset(0)], progress=False, **kwargs)


def assert_same_posterior(a, b, names=("mu_a", "beta", "sigma", "sigma_a")):
    """Equal means within Monte-Carlo error (5 standard errors of the difference)."""
    import arviz as az

    for name in names:
        x, y = az.summary(a, var_names=[name]), az.summary(b, var_names=[name])
        se = np.hypot(x["mcse_mean"].iloc[0], y["mcse_mean"].iloc[0])
        assert abs(x["mean"].iloc[0] - y["mean"].iloc[0]) < 5 * se + 1e-3, name


def test_posterior_matches_a_separate_sample(compiled):
    """A fit equals, within Monte-Carlo error, pmfast.sample of a model built with the same data."""
    [fit] = pmfast.fit_many(compiled, [dataset(11)], seed=1, progress=False, draws=500, tune=500, chains=2)
    alone = pmfast.sample(radon_data.build_model(**SIZE, seed=11), draws=500, tune=500, chains=2, seed=2, progress=False)
    assert_same_posterior(fit, alone)


def test_dask_missing_names_the_extra(monkeypatch, compiled):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"pmfast\[dask\]"):
        pmfast.fit_many(compiled, [dataset(0)], client=object(), progress=False)
    result = CliRunner().invoke(app, ["fit-many", "x.py", "--out", "o", "--scheduler", "local"])
    assert result.exit_code != 0


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    import logging

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    ) as cluster, distributed.Client(cluster) as client:
        yield client


def test_dask_same_fits_as_local(cluster, model, local_run):
    data, broken, local = local_run
    results = pmfast.fit_many(model, data, client=cluster, seed=7, progress=False, **FIT)
    check_results(results, data, broken)
    for mine, theirs in zip(results, local):
        if isinstance(mine, FitError):
            assert mine.reason == theirs.reason
        else:
            # The same posterior. Not asserted bit for bit: a worker's fit has differed from the
            # local one in the last bits about once in a few cold suite runs (cause not found;
            # NUTS amplifies any such difference into other draws), see the #14 note.
            assert_same_posterior(mine, theirs)
    per_worker = {}
    for r in results:
        if not isinstance(r, FitError):
            address, compiles = r.attrs["pmfast_worker"].split(" (")[0], int(r.attrs["pmfast_worker"].split(", ")[1][0])
            per_worker[address] = max(per_worker.get(address, 0), compiles)
    assert per_worker and all(n == 1 for n in per_worker.values())


def test_dask_worker_killed_mid_run_loses_nothing(cluster, model):
    data, broken = mixed_datasets()
    data = data + [dataset(seed) for seed in range(20, 28)]
    pids = cluster.run(os.getpid)
    killed = []

    def kill_a_busy_worker(index, result):
        if killed:
            return
        busy = [w for w, keys in cluster.processing().items() if keys]
        if busy:
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed.append(busy[0])

    results = pmfast.fit_many(
        model, data, client=cluster, seed=7, progress=False, on_result=kill_a_busy_worker, draws=300, tune=300, chains=2
    )
    assert killed
    check_results(results, data, broken, draws=300)


def test_cli_fit_many_writes_resumes_and_lists_failures(tmp_path):
    import arviz as az

    model_file = tmp_path / "radon.py"
    model_file.write_text(MODEL_FILE)
    files = []
    for i in range(3):
        path = tmp_path / f"d{i}.npz"
        np.savez(path, **dataset(i))
        files.append(path)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **dict(dataset(9), county_idx=dataset(9)["county_idx"] + 99))
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_text("not numpy")
    out = tmp_path / "fits"
    args = ["fit-many", str(model_file), str(files[0]), str(bad), str(files[1]), str(corrupt), "--out", str(out),
            "--draws", "100", "--tune", "100", "--chains", "2", "--seed", "5", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert sorted(p.name for p in out.iterdir()) == ["d0.nc", "d1.nc"]
    assert "2 failed" in result.stderr and "bad.npz" in result.stderr and "IndexError" in result.stderr
    assert "corrupt.npz: cannot read it: not an .npz file" in result.stderr
    first = az.from_netcdf(out / "d1.nc")
    assert first.attrs["pmfast_data_file"] == "d1.npz" and first.attrs["pmfast_dataset"] == 2
    # rerun with one more file and without the broken ones: the written fits are kept, only d2 is new
    before = (out / "d1.nc").stat().st_mtime_ns
    args = [a for a in args if a not in (str(bad), str(corrupt))]
    args.insert(4, str(files[2]))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 of 3 fits already" in result.stderr
    assert (out / "d1.nc").stat().st_mtime_ns == before
    assert sorted(p.name for p in out.iterdir()) == ["d0.nc", "d1.nc", "d2.nc"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["{missing}"], "data file not found"),
        (["{d0}", "{d0}"], "distinct names"),
        (["{d0}", "--workers", "2"], "--workers needs --scheduler local"),
        (["{d0}", "--chains", "0"], "--chains must be positive"),
    ],
)
def test_cli_fit_many_bad_input(tmp_path, extra, message):
    d0 = tmp_path / "d0.npz"
    np.savez(d0, **dataset(0))
    extra = [e.format(missing=tmp_path / "missing.npz", d0=d0) for e in extra]
    result = CliRunner().invoke(app, ["fit-many", "radon_data", *extra, "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
