"""pmfast.compiler.prefetch: the model's linear algebra compiled by a child during the graph stage."""

from __future__ import annotations

import os

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from conftest import run_cold

import pmfast
from pmfast.compiler import linalg, prefetch


def _mvnormal_model():
    with pm.Model() as model:
        sd = pm.HalfNormal("sd", shape=3)
        cov = pt.diag(sd**2) + 0.1
        pm.MvNormal("y", mu=np.zeros(3), cov=cov, observed=np.ones((5, 3)))
    return model


#: per implementation: its props and the node function's argument types (a layout of each kind)
_NODES = {
    "cholesky": ((False, False), ("C2",)),
    "cholesky_grad": ((True,), ("C2", "C2")),
    "solve_triangular2": ((True, False, False), ("C2", "F2")),
    "solve_triangular1": ((True, False, False), ("C2", "C1")),
    "cho_solve2": ((True, False), ("C2", "A2")),
    "cho_solve1": ((True, False), ("C2", "C1")),
    "solve_general2": ((False, False), ("F2", "C2")),
    "solve_general1": ((False, False), ("C2", "C1")),
    "lu_factor": ((False,), ("C2",)),
    "dot": ((), ("C2", "A2")),
}


def _array(code):
    from numba.core import types

    return types.Array(types.float64, int(code[1]), code[0])


@pytest.mark.parametrize("name", sorted(prefetch.SIGNATURES))
def test_signatures_are_what_the_node_functions_call(name, monkeypatch):
    """The predicted argument types are those linalg's node functions call the implementation with
    (else the child's compiles would be wasted): the node function's call typed, nothing compiled."""
    from numba.core import compiler, typed_passes
    from numba.core.registry import cpu_target

    from pmfast.loops import deferred

    props, args = _NODES[name]
    node_fn, _ = linalg._build(name, props, "float64")
    seen = []
    monkeypatch.setattr(deferred.Deferred, "request", lambda self, argtypes: seen.append((self.key, argtypes)))
    from pmfast import compiler as pm_compiler
    from pmfast.compiler import patching

    pm_compiler.setup()
    with patching.compiling():
        interp = compiler.run_frontend(node_fn.py_func)
        ctx = cpu_target.typing_context
        ctx.refresh()
        typed_passes.type_inference_stage(ctx, cpu_target.target_context, interp, tuple(map(_array, args)), None)
    impl = node_fn.py_func.__globals__["_pm_impl"]
    if isinstance(impl, deferred.Deferred):
        assert {a for k, a in seen if k == impl.key} == {prefetch.argtypes(name)}
    else:  # lu_factor: not predicted, called directly
        assert prefetch.argtypes(name) in {tuple(s) for s in impl.overloads}


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
    out = {flag: run_cold(SCRIPT, tmp_path / flag, PMFAST_PREFETCH=flag) for flag in ("always", "0")}
    assert out["always"][1] == "True" and out["0"][1] == "False"
    assert out["always"][0] == out["0"][0]
