"""The handover worker compiles the model's linear algebra before its first job; an expand entry calls
a partial reduction it makes several calls of (pmfast.compiler.handover.early_linalg, inline.careduce_called)."""

from __future__ import annotations

import os

import pytensor.tensor as pt
import pytest
from conftest import run_cold

from pmfast.compiler import careduce, handover, inline, linalg, prefetch


def _careduce_fn():
    x = pt.matrix("x")
    node = x.sum(axis=0).owner
    fn, key = careduce.funcify(node.op, node)
    assert key is not None
    return fn


def _other_fn():
    from pytensor.link.numba.dispatch.basic import numba_njit

    return numba_njit(lambda a: a + 1.0)


def test_plan_calls_a_repeated_careduce_only_when_asked():
    red, other = _careduce_fn(), _other_fn()
    calls = [("careduce", "Sum", red), ("careduce", "Sum", red), ("other", "Elemwise", other)]
    assert inline.plan(calls) == ("careduce", "other")
    assert inline.plan(calls, call_careduce=True) == ("other",)
    # one call site: inlined (a separate compile would cost more than the one copy)
    assert inline.plan(calls[1:], call_careduce=True) == ("careduce", "other")


def test_careduce_called_switch(monkeypatch):
    monkeypatch.delenv("PMFAST_CAREDUCE_CALL", raising=False)
    assert inline.careduce_called("expand") and not inline.careduce_called("logp")
    monkeypatch.setenv("PMFAST_CAREDUCE_CALL", "0")
    assert not inline.careduce_called("expand")
    monkeypatch.setenv("PMFAST_CAREDUCE_CALL", "all")
    assert inline.careduce_called("logp")


def test_early_linalg_lists_what_is_not_compiled(monkeypatch):
    monkeypatch.setattr(linalg, "used", {("cholesky", "float64"): None, ("lu_factor", "float64"): None, ("nope", "float64"): None})
    monkeypatch.setattr("pmfast.compiler.cache.has_index", lambda fn: False)
    fn = linalg.jitted("cholesky")
    monkeypatch.setattr(fn, "overloads", {})
    monkeypatch.setattr(linalg.jitted("lu_factor"), "overloads", {})  # an earlier test may have compiled it here
    assert handover.early_linalg() == [("cholesky", "float64"), ("lu_factor", "float64")]
    monkeypatch.setattr(fn, "overloads", {prefetch.argtypes("cholesky"): None})
    assert handover.early_linalg() == [("lu_factor", "float64")]
    monkeypatch.setenv("PMFAST_WORKER_LINALG_FIRST", "0")
    assert handover.early_linalg() == []


SCRIPT = """
import hashlib, logging, os, sys, numpy as np, pymc as pm, pytensor.tensor as pt, pmfast
from pmfast.compiler import callbacks
os.makedirs(os.environ["NUMBA_CACHE_DIR"], exist_ok=True)
log = os.path.join(os.environ["NUMBA_CACHE_DIR"], "worker.log")
h = logging.FileHandler(log); logging.getLogger("pmfast.compiler").addHandler(h); logging.getLogger("pmfast.compiler").setLevel(logging.DEBUG)
with pm.Model() as model:
    sd = pm.HalfNormal("sd", shape=3)
    z = pm.Normal("z", shape=(4, 3))
    pm.Deterministic("a", (z * sd).sum(axis=0))
    pm.Deterministic("b", (z ** 2).sum(axis=0))
    pm.MvNormal("y", mu=np.zeros(3), cov=pt.diag(sd**2) + 0.1, observed=np.ones((5, 3)))
cm = pmfast.compile(model)
x = np.linspace(-1, 1, cm.n_dim)
code, logp, grad = callbacks.logp_at(cm, x)
code2, expanded = callbacks.expand_at(cm, x)
assert code == 0 and code2 == 0
h.flush()
first = sum("first in" in line for line in open(log))
print(hashlib.sha256(np.float64(logp).tobytes() + grad.tobytes()).hexdigest(), hashlib.sha256(expanded.tobytes()).hexdigest(), first)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_cold_compile_both_ways_same_bits(tmp_path):
    """Early linear algebra and called reductions move or share compile work only: the same logp,
    gradient and expanded values bit for bit; with the switch on the worker compiled linalg first."""
    on = run_cold(SCRIPT, tmp_path / "on", PMFAST_PREFETCH="0")
    off = run_cold(SCRIPT, tmp_path / "off", PMFAST_PREFETCH="0", PMFAST_WORKER_LINALG_FIRST="0", PMFAST_CAREDUCE_CALL="0")
    assert on[:2] == off[:2]
    assert int(on[2]) >= 2 and int(off[2]) == 0
