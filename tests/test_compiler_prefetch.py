"""pmfast.compiler.prefetch: the model's linear algebra compiled by a child during the graph stage."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pmfast
from pmfast.compiler import linalg, prefetch


def _mvnormal_model():
    with pm.Model() as model:
        sd = pm.HalfNormal("sd", shape=3)
        cov = pt.diag(sd**2) + 0.1
        pm.MvNormal("y", mu=np.zeros(3), cov=cov, observed=np.ones((5, 3)))
    return model


def test_signatures_are_what_the_node_functions_call():
    """The predicted argument types are exactly those linalg's node functions type (else the child's
    compiles would be wasted): every implementation a graph and its gradient compile is covered."""
    a = pt.matrix("a")
    b = pt.matrix("b")
    v = pt.vector("v")
    spd = a @ a.T + 3 * pt.eye(3)
    chol = pt.linalg.cholesky(spd)
    cost = (
        pt.linalg.solve_triangular(chol, b, lower=True).sum()
        + pt.linalg.solve_triangular(chol, v, lower=True).sum()
        + pt.linalg.solve(spd + a, b, assume_a="gen").sum()
        + chol.sum()
    )
    outs = [cost, *pytensor.grad(cost, [a, b, v])]
    fn = pytensor.function([a, b, v], outs, mode=pmfast.get_mode())
    rng = np.random.default_rng(0)
    fn(rng.normal(size=(3, 3)), rng.normal(size=(3, 2)), rng.normal(size=3))
    seen = set()
    for name in prefetch.SIGNATURES:
        impl = linalg.jitted(name)
        sigs = {tuple(s) for s in impl.overloads}
        if sigs:
            assert sigs == {prefetch.argtypes(name)}, name
            seen.add(name)
    assert {"cholesky", "cholesky_grad", "solve_triangular2", "solve_triangular1", "dot"} <= seen
    assert seen & {"lu_factor", "solve_general2"}


def test_wanted_and_the_gate(monkeypatch):
    model = _mvnormal_model()
    assert prefetch._may_need(model)
    assert prefetch.wanted(model)[:3] == ["cholesky", "cholesky_grad", "solve_triangular2"]
    with pm.Model() as plain:
        pm.Normal("x", 0, 1, observed=np.ones(3))
    assert not prefetch._may_need(plain)
    assert prefetch.start(plain) is None
    monkeypatch.setenv("PMFAST_PREFETCH", "0")
    assert prefetch.start(model) is None


SCRIPT = """
import hashlib, numpy as np, pymc as pm, pytensor.tensor as pt, pmfast
from pmfast.compiler import callbacks
with pm.Model() as model:
    sd = pm.HalfNormal("sd", shape=3)
    pm.MvNormal("y", mu=np.zeros(3), cov=pt.diag(sd**2) + 0.1, observed=np.ones((5, 3)))
cm = pmfast.compile(model)
code, logp, grad = callbacks.logp_at(cm, np.linspace(-1, 1, cm.n_dim))
assert code == 0
print(hashlib.sha256(np.float64(logp).tobytes() + grad.tobytes()).hexdigest(), "numba: prefetch" in cm.cpu_timings)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_cold_compile_with_and_without_the_child(tmp_path):
    out = {}
    for flag in ("always", "0"):
        cache = tmp_path / flag
        env = {**os.environ, "PMFAST_PREFETCH": flag, "PMFAST_PARALLEL_COMPILE": "1", "NUMBA_CACHE_DIR": str(cache / "numba"),
               "PYTENSOR_FLAGS": f"base_compiledir={cache}", "PMFAST_FALLBACK": "0"}
        res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-3000:]
        out[flag] = res.stdout.split()[-2:]
    assert out["always"][1] == "True" and out["0"][1] == "False"
    assert out["always"][0] == out["0"][0]
