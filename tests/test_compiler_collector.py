"""pmfast.compiler.collector: the cyclic garbage collector is paused while pmfast compiles."""

import gc

import pymc as pm
import pytest

import pmfast
from pmfast import nutpie_glue
from pmfast.compiler import collector


@pytest.fixture
def gc_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_restores_nests_and_survives_errors(gc_enabled, monkeypatch):
    monkeypatch.delenv("PMFAST_COMPILE_GC", raising=False)
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer compile is still running
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(gc_enabled, monkeypatch):
    monkeypatch.delenv("PMFAST_COMPILE_GC", raising=False)
    gc.disable()
    with collector.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_switch_leaves_the_collector_running(gc_enabled, monkeypatch):
    monkeypatch.setenv("PMFAST_COMPILE_GC", "1")
    with collector.paused():
        assert gc.isenabled()


def test_compile_runs_with_the_collector_paused(gc_enabled, monkeypatch):
    monkeypatch.delenv("PMFAST_COMPILE_GC", raising=False)
    seen = []

    def fake(model, mode, **kwargs):
        seen.append(gc.isenabled())
        return "compiled"

    monkeypatch.setattr(nutpie_glue, "_compile_numba", fake)
    with pm.Model() as model:
        pm.Normal("x")
    assert pmfast.compile(model) == "compiled"
    assert seen == [False]
    assert gc.isenabled()
