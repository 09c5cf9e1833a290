"""The pmfast command line: help, models, clean errors, sample (incl. Ctrl-C), inspect and bench."""

import functools
import json
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from pmfast.cli.app import app

TINY_EXTRAS = '''


def with_point():
    return build_model(), {"mu": 0.2}


def discrete():
    with pm.Model() as m:
        pm.Poisson("k", 3.0)
    return m


def not_a_model():
    return 42


def broken():
    raise RuntimeError("kaboom")
'''

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_model_source):
    path = tmp_path_factory.mktemp("models") / "tiny.py"
    path.write_text(tiny_model_source + TINY_EXTRAS)
    (path.parent / "crashes.py").write_text("import no_such_module_pmfast\n")
    return path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_clean_error(result, *facts):
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fact in facts:
        assert fact in lines[0], lines[0]


def test_help_is_fast_and_lazy():
    code = "import pmfast.cli.app, sys; assert 'pymc' not in sys.modules and 'nutpie' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pmfast", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert time.perf_counter() - t0 < 10
    for command in ("sample", "bench", "inspect", "models", "fit-many"):
        assert command in proc.stdout


@pytest.mark.parametrize("command", ["sample", "bench", "inspect", "models", "fit-many"])
def test_command_help(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert "Usage" in result.output


def _description(output: str) -> list[str]:
    """The rendered help's description: the lines between the usage line and the first option box."""
    lines = output.splitlines()
    start = next(i for i, ln in enumerate(lines) if "Usage" in ln) + 1
    end = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("╭")), len(lines))
    return [ln.strip() for ln in lines[start:end]]


@pytest.mark.parametrize("width", [64, 100, 150])
@pytest.mark.parametrize("command", ["sample", "bench", "inspect", "models", "fit-many"])
def test_command_help_reads_as_prose(command, width, monkeypatch):
    """Every line of a help paragraph but its last is full: rich broke it because the next word did not fit."""
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", width)  # read from TERMINAL_WIDTH once, at its import
    monkeypatch.setenv("COLUMNS", str(width))
    result = invoke(command, "--help")
    assert result.exit_code == 0
    text = _description(result.output)
    assert sum(map(len, text)) > 30
    assert max(map(len, text)) <= width
    for line, following in zip(text, text[1:]):
        if line and following:
            assert len(line) + 1 + len(following.split()[0]) > width - 4, (line, following)


def test_reflow_keeps_paragraphs_lists_and_code():
    from pmfast.cli.app import reflow

    doc = """First line
    goes on.

    Second paragraph,
    two lines.
    - a list item
      indented more

        code
    """
    assert reflow(doc) == "First line goes on.\n\nSecond paragraph, two lines.\n- a list item\n  indented more\n\n    code"
    assert reflow(None) is None


def test_models_lists_the_zoo():
    from pmfast import models

    result = invoke("models")
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert len(lines) == len(models.ZOO)
    assert any(line.startswith("*") and models.DEFAULT in line for line in lines)


@pytest.mark.parametrize(
    "args, facts",
    [
        (["{dir}/missing.py"], ["not found", "missing.py"]),
        (["{tiny}:nope"], ["no function", "nope"]),
        (["{tiny}:not_a_model"], ["returned int", "pymc.Model"]),
        (["{tiny}:discrete"], ["discrete", "NUTS", "k"]),
        (["{tiny}:broken"], ["tiny.py", "failed", "RuntimeError: kaboom"]),
        (["{dir}/crashes.py"], ["crashes.py failed", "ModuleNotFoundError"]),
        (["no_such_zoo_model"], ["unknown zoo model", "no_such_zoo_model"]),
        (["radon_intercept:n_obs"], ["bad size argument"]),
        (["radon_intercept:bogus=1"], ["radon_intercept failed", "TypeError", "bogus"]),
        (["{tiny}", "--passes", "no_such_pass"], ["unknown pass", "no_such_pass"]),
        (["{tiny}", "--draws", "0"], ["--draws", "positive"]),
        (["{tiny}", "--chains", "-2"], ["--chains", "positive"]),
        (["{tiny}", "--tune", "-1"], ["--tune", "non-negative"]),
    ],
)
def test_sample_bad_input(tiny, args, facts):
    args = [a.format(tiny=tiny, dir=tiny.parent) for a in args]
    assert_clean_error(invoke("sample", *args, "--no-progress"), *facts)


@pytest.mark.parametrize(
    "args, facts",
    [
        (["inspect", "no_such_zoo_model"], ["unknown zoo model"]),
        (["inspect", "{tiny}", "--passes", "no_such_pass"], ["unknown pass"]),
        (["bench", "{tiny}:nope", "--repeats", "5"], ["no function", "nope"]),
        (["bench", "no_such_zoo_model"], ["unknown zoo model"]),
        (["bench", "{tiny}", "--passes", "no_such_pass"], ["unknown pass"]),
        (["bench", "{tiny}", "--repeats", "2"], ["--repeats"]),
    ],
)
def test_other_commands_bad_input(tiny, args, facts):
    args = [a.format(tiny=tiny) for a in args]
    assert_clean_error(invoke(*args), *facts)


def test_sample_writes_trace_and_plot(tiny, tmp_path):
    import arviz as az

    out, png = tmp_path / "trace.nc", tmp_path / "trace.png"
    result = invoke(
        "sample", f"{tiny}:with_point", "--draws", 100, "--tune", 100, "--chains", 2, "--seed", 1,
        "--out", out, "--plot", png,
    )
    assert result.exit_code == 0, result.output
    assert "mu" in result.stdout and "r_hat" in result.stdout
    assert "compile" in result.stderr and "sampling" in result.stderr
    assert out.is_file() and png.stat().st_size > 1000
    assert not list(tmp_path.glob(".*.tmp"))
    idata = az.from_netcdf(out)
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 100
    assert "mu" in idata.posterior


def test_interrupted_sample_still_writes_draws(tiny, tmp_path, monkeypatch):
    import arviz as az
    import nutpie  # noqa: F401

    background = sys.modules["nutpie.sample"]._BackgroundSampler

    def wait(self, *, timeout=None):
        time.sleep(1.0)
        raise KeyboardInterrupt

    monkeypatch.setattr(background, "wait", wait)
    out = tmp_path / "partial.nc"
    result = invoke("sample", tiny, "--draws", 10**7, "--tune", 50, "--chains", 2, "--out", out, "--no-progress")
    assert result.exit_code == 130, result.output
    assert "interrupted" in result.stderr
    assert "Traceback" not in result.output
    idata = az.from_netcdf(out)
    assert 0 < idata.posterior.sizes["draw"] < 10**7
    assert int(idata.attrs["pmfast_interrupted"]) == 1


def test_inspect(tiny):
    result = invoke("inspect", tiny, "--dprint")
    assert result.exit_code == 0, result.output
    for fact in ("passes fired", "nodes by op", "total", "numba: logp+grad wrapper", "_unconstrained_point"):
        assert fact in result.stdout


def test_bench_json(tiny, tmp_path):
    report = tmp_path / "bench.json"
    result = invoke("bench", tiny, "--repeats", 5, "--json", report)
    assert result.exit_code == 0, result.output
    assert "geomean" in result.stdout and "tiny.py:build_model" in result.stdout
    data = json.loads(report.read_text())
    [r] = data["results"]
    for side in ("stock", "pmfast"):
        assert r[side]["compile_s"] > 0 and r[side]["rss_mb"] > 0 and r[side]["eval_us"] > 0
        assert len(r[side]["eval_us_repeats"]) == 5
    assert r["stock"]["passes"] == []
    assert r["parity"]["logp"] < 1e-8 and r["parity"]["grad"] < 1e-8
    assert set(r["ratios"]) == set(data["geomean"]) == {"compile", "compile_cpu", "rss", "eval"}
    assert r["stock"]["side"] == "stock" and r["pmfast"]["side"] == "pmfast" and r["stock"]["compile_cpu_s"] > 0


def test_bench_table_shows_specs_whole_in_80_columns():
    from pmfast.cli.report import bench_lines

    side = {"compile_s": 12.3, "rss_mb": 1234.5, "eval_us": 3941.2}
    spec = "/some/dir/football_pairwise_comparisons.py:probit"
    results = [
        {"model": m, "stock": side, "pmfast": side, "ratios": {"compile": 0.5, "rss": 0.9, "eval": 1.0},
         "parity": {"logp": 1e-13, "grad": 2e-12}}
        for m in (spec, "wide_additive:n=160")
    ]
    lines = bench_lines(results, {"compile": 0.5, "rss": 0.9, "eval": 1.0}, "all", True)
    assert "football_pairwise_comparisons.py:probit" in lines
    assert "wide_additive:n=160" in lines
    assert "/some/dir" not in "\n".join(lines)
    assert max(map(len, lines)) <= 80


def test_python_m_pmfast_beside_a_users_models_and_cli_packages(tmp_path):
    """From a project holding its own ``models`` and ``cli`` packages, the zoo and CLI are pmfast's."""
    for name in ("models", "cli"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the user package was imported')\n")
    run = functools.partial(subprocess.run, cwd=tmp_path, capture_output=True, text=True)
    listed = run([sys.executable, "-m", "pmfast", "models"])
    assert listed.returncode == 0, listed.stderr
    from pmfast import models

    assert len(listed.stdout.strip().splitlines()) == len(models.ZOO)
    inspected = run([sys.executable, "-m", "pmfast", "inspect", "radon_intercept", "--passes", "none"])
    assert inspected.returncode == 0, inspected.stderr
    assert "nodes by op" in inspected.stdout
