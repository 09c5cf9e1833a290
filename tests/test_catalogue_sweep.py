"""bench/catalogue_sweep.py: each outcome of a model, found in a fresh process, and the summary."""

import json
import subprocess
import sys
from pathlib import Path

from conftest import load_bench

SWEEP = Path(__file__).resolve().parents[1] / "bench" / "catalogue_sweep.py"

DISCRETE = '''
import pymc as pm


def build_model():
    with pm.Model() as model:
        n = pm.Poisson("n", 3.0)
        pm.Normal("y", n, 1.0, observed=[1.0, 2.0])
    return model, None
'''

OUTSIDE = '''
import pymc as pm


def build_model():
    with pm.Model() as model:
        s = pm.Normal("s", 0.0, 1.0)  # used as a scale: its initial point fails the check sigma > 0
        pm.Normal("y", 0.0, s, observed=[1.0, 2.0])
    return model, None
'''

BROKEN = '''
def build_model():
    raise RuntimeError("this model does not build")
'''


def test_the_sweep_reports_each_outcome(tmp_path, tiny_model_source):
    models = tmp_path / "catalogue" / "models"
    models.mkdir(parents=True)
    (models / "tiny.py").write_text(tiny_model_source)
    (models / "discrete.py").write_text(DISCRETE)
    (models / "broken.py").write_text(BROKEN)
    (models / "outside.py").write_text(OUTSIDE)
    out = tmp_path / "sweep.json"
    proc = subprocess.run(
        [sys.executable, str(SWEEP), "--catalogue", str(tmp_path / "catalogue"), "--cache", str(tmp_path / "cache"), "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = {r["model"]: r for r in json.loads(out.read_text())["records"]}
    assert records["tiny"]["status"] == "ok" and records["tiny"]["parity"] < 1e-12 and records["tiny"]["compile_cpu_s"] > 0
    assert records["discrete"]["status"] == "declined" and "discrete" in records["discrete"]["message"]
    assert records["broken"]["status"] == "error" and "does not build" in records["broken"]["message"]
    assert records["outside"]["status"] == "ok", records["outside"]  # where pytensor's check raises, pmfast's callback fails too
    assert "declined 1, error 1, ok 2" in proc.stdout and "error: broken" in proc.stdout


def test_a_missing_catalogue_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, str(SWEEP), "--catalogue", str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert proc.returncode == 2 and "checkout of the model catalogue" in proc.stderr
