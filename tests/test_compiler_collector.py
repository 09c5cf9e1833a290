"""pmfast.compiler.collector: the cyclic garbage collector is made cheaper, not stopped, while pmfast compiles."""

import gc
import weakref

import pymc as pm
import pytest

import pmfast
from pmfast import nutpie_glue
from pmfast.compiler import collector


@pytest.fixture
def gc_default(monkeypatch):
    monkeypatch.delenv("PMFAST_COMPILE_GC", raising=False)
    was, thresholds = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*thresholds)
    (gc.enable if was else gc.disable)()


def _relaxed_state():
    return gc.isenabled(), gc.get_threshold()[0], gc.get_freeze_count() > 0


def test_relaxed_restores_nests_and_survives_errors(gc_default):
    assert gc.get_freeze_count() == 0
    with collector.relaxed():
        assert _relaxed_state() == (True, collector.YOUNG_THRESHOLD, True)
        with collector.relaxed():
            assert _relaxed_state() == (True, collector.YOUNG_THRESHOLD, True)
        assert _relaxed_state() == (True, collector.YOUNG_THRESHOLD, True)  # the outer compile still runs
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), collector.relaxed():
        raise RuntimeError
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_cycles_made_during_a_compile_are_still_collected(gc_default):
    class Node:
        pass

    with collector.relaxed():
        a = Node()
        a.self = a
        ref = weakref.ref(a)
        del a
        junk = [[] for _ in range(2 * collector.YOUNG_THRESHOLD)]  # enough allocations for a young collection
        assert ref() is None
    del junk


def test_a_disabled_collector_stays_as_it_is(gc_default):
    gc.disable()
    with collector.relaxed():
        assert _relaxed_state() == (False, 700, False)
    assert _relaxed_state() == (False, 700, False)


def test_switch_leaves_the_collector_as_it_is(gc_default, monkeypatch):
    monkeypatch.setenv("PMFAST_COMPILE_GC", "1")
    with collector.relaxed():
        assert _relaxed_state() == (True, 700, False)


def test_compile_runs_with_the_collector_relaxed(gc_default, monkeypatch):
    seen = []

    def fake(model, mode, **kwargs):
        seen.append(_relaxed_state())
        return "compiled"

    monkeypatch.setattr(nutpie_glue, "_compile_numba", fake)
    with pm.Model() as model:
        pm.Normal("x")
    assert pmfast.compile(model) == "compiled"
    assert seen == [(True, collector.YOUNG_THRESHOLD, True)]
    assert _relaxed_state() == (True, 700, False)


def test_checkpoint_freezes_what_the_stages_left_until_the_compile_ends(gc_default, monkeypatch):
    class Node:
        pass

    monkeypatch.delenv("PMFAST_GC_CHECKPOINT", raising=False)
    collector.checkpoint()  # outside a compile: nothing
    assert gc.get_freeze_count() == 0
    with collector.relaxed():
        kept = [Node() for _ in range(1000)]
        before = gc.get_freeze_count()
        collector.checkpoint()
        assert gc.get_freeze_count() >= before + len(kept)  # skipped by the later collections
        monkeypatch.setenv("PMFAST_GC_CHECKPOINT", "0")
        after = gc.get_freeze_count()
        more = [Node() for _ in range(1000)]
        collector.checkpoint()
        assert gc.get_freeze_count() == after  # switched off: nothing frozen
    assert gc.get_freeze_count() == 0  # all unfrozen with the compile: collectable again
    del kept, more


def test_garbage_frozen_at_a_checkpoint_is_freed_after_the_compile(gc_default, monkeypatch):
    class Node:
        pass

    monkeypatch.delenv("PMFAST_GC_CHECKPOINT", raising=False)
    with collector.relaxed():
        a = Node()
        a.self = a
        ref = weakref.ref(a)
        del a
        collector.checkpoint()
        gc.collect()
        assert ref() is not None  # frozen: a collection during the compile skips it
    gc.collect()
    assert ref() is None
