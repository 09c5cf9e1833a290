"""Installed, pmfast is one top-level package (its CLI and zoo live at pmfast.cli and pmfast.models)."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    [path] = out.glob("pmfast-*.whl")
    return path


def test_wheel_has_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"pmfast", next(t for t in tops if t.endswith(".dist-info"))}
    for module in ("pmfast/cli/app.py", "pmfast/models/radon_intercept.py", "pmfast/py.typed", "pmfast/__main__.py"):
        assert module in names
    dist_info = next(t for t in tops if t.endswith(".dist-info"))
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "pmfast = pmfast.cli.app:main" in entry_points


def test_no_top_level_models_or_cli_from_a_neutral_directory(tmp_path):
    code = "import importlib.util as u; assert u.find_spec('models') is None and u.find_spec('cli') is None"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_wheel_has_every_source_module(wheel):
    """pyproject.toml lists pmfast's packages by hand (cli/ and models/ are mapped): none may be left out."""
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {f"pmfast/{p.relative_to(ROOT / 'pmfast').as_posix()}" for p in (ROOT / "pmfast").rglob("*.py")}
    for folder in ("cli", "models"):
        sources |= {f"pmfast/{folder}/{p.relative_to(ROOT / folder).as_posix()}" for p in (ROOT / folder).rglob("*.py")}
    assert sources - names == set()
