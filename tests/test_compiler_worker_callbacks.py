"""pmfast.compiler.handover: a worker with no job left compiles nutpie's callbacks into numba's cache,
so a cold compile loads them instead of compiling them after its entry; the same values either way."""

from __future__ import annotations

import os

import pytest
from conftest import run_cold

SCRIPT = """
import hashlib, numpy as np, pmfast
from pmfast.compiler import callbacks
from pmfast.loading import load_model
model, _ = load_model("radon_intercept")
cm = pmfast.compile(model)
x = np.linspace(-1, 1, cm.n_dim)
code, logp, grad = callbacks.logp_at(cm, x)
assert code == 0
wrapper = [k for k in cm.timings if k.startswith("numba: logp+grad wrapper")]
print(hashlib.sha256(np.float64(logp).tobytes() + grad.tobytes()).hexdigest(), "worker" if "numba: worker" in cm.cpu_timings else "alone", "cached" if wrapper == ["numba: logp+grad wrapper (cached)"] else "compiled")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_the_worker_compiles_the_callbacks(tmp_path):
    out = {flag: run_cold(SCRIPT, tmp_path / flag, PMFAST_WORKER_CALLBACKS=flag) for flag in ("1", "0")}
    assert out["1"][1:] == ["worker", "cached"]
    assert out["0"][1:] == ["worker", "compiled"]
    assert out["1"][0] == out["0"][0]
