"""pmfast.compiler.library: the options of an entry's code library take effect, alone or together."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from llvmlite.binding import Linkage

from pmfast.compiler import lean_ir, library


def _callee(x):
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = np.exp(x[i]) * 2.0 + np.log1p(x[i] * x[i])
    return out


_callee_jit = numba.njit(_callee)


def _caller(x):
    return _callee_jit(x).sum() + _callee_jit(x + 1.0)[0]


X = np.linspace(0.0, 1.0, 7)


def _cres(dispatcher):
    (cres,) = dispatcher.overloads.values()
    return cres


def _linkages(dispatcher):
    cres = _cres(dispatcher)
    own = cres.fndesc.llvm_func_name
    return {fn.linkage for fn in cres.library._final_module.functions if not fn.is_declaration and fn.name != own}


@pytest.mark.parametrize("lean", [False, True], ids=["numba", "lean_ir"])
def test_an_entry_runs_its_own_copies_of_the_functions_it_calls(lean):
    """The functions linked into an entry are internal to its module: a process that compiled a callee on
    its own (its symbol already in the JIT) and one that loads the entry alone run the same code. With or
    without lean_ir's passes (``PMFAST_LEAN_IR=0`` once turned this off too)."""
    plain = numba.njit(_caller)
    cls = library.compiler(own_copies=True)
    own = numba.njit(pipeline_class=lean_ir.pipeline(cls) if lean else cls)(_caller)
    assert own(X) == plain(X)
    assert Linkage.linkonce_odr in _linkages(plain)  # numba's own way: weak copies of what it links in
    assert Linkage.linkonce_odr not in _linkages(own) and Linkage.internal in _linkages(own)


def test_release_and_threshold_survive_lean_ir(monkeypatch):
    """A big graph's entry: garbage released and its own inlining threshold, under lean_ir's passes too
    (stop 23's dels pass created the library first and these two were silently lost)."""
    released, thresholds = [], []
    orig_release, orig_threshold = library.release_memory, library.inline_threshold
    monkeypatch.setattr(library, "release_memory", lambda modules=None: (released.append(modules), orig_release(modules))[1])
    monkeypatch.setattr(library, "inline_threshold", lambda cg, t: (thresholds.append(t), orig_threshold(cg, t))[1])
    cls = lean_ir.pipeline(library.compiler(own_copies=True, release=True, inline_threshold=0))
    fn = numba.njit(pipeline_class=cls)(_caller)
    assert fn(X) == numba.njit(_caller)(X)
    assert len(released) == 1 and thresholds == [0]  # the entry's library only, not its callee's
    assert released[0] and all(not m.globals for m in released[0])  # its lowered IR unlinked, no full collection
    assert Linkage.linkonce_odr not in _linkages(fn)


def test_no_options_leave_numbas_library():
    fn = numba.njit(pipeline_class=library.compiler())(_caller)
    assert fn(X) == numba.njit(_caller)(X)
    assert not type(_cres(fn).library).__name__.startswith("Pmfast")
    assert Linkage.linkonce_odr in _linkages(fn)


def test_the_same_options_give_the_same_class_and_unknown_ones_fail():
    assert library.compiler(release=True) is library.compiler(release=True)
    assert library.compiler(release=True) is not library.compiler(release=True, own_copies=True)
    with pytest.raises(TypeError, match="unknown library options"):
        library.compiler(inline=3)


def _lowered_module():
    """A small llvmlite IR module as numba's lowering leaves one: functions, blocks, instructions, metadata."""
    from llvmlite import ir

    module = ir.Module("m")
    f64 = ir.DoubleType()
    fn = ir.Function(module, ir.FunctionType(f64, [f64, f64]), "f")
    callee = ir.Function(module, ir.FunctionType(f64, [f64]), "g")
    entry, done = fn.append_basic_block("entry"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    s = b.fadd(*fn.args)
    b.call(callee, [s])
    b.branch(done)
    b.position_at_end(done)
    b.ret(b.fmul(s, s))
    module.add_named_metadata("n", module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
    return module, [fn, entry, done, s, fn.args[0]]


def test_unlinked_ir_is_freed_by_reference_counting():
    """What unlink_ir leaves holds no reference cycle: every object goes without the collector
    (which a big entry's release no longer runs: a full collection traversed the whole compile's objects)."""
    import gc
    import weakref

    module, objects = _lowered_module()
    text = str(module)
    refs = [weakref.ref(o) for o in objects]
    del objects
    was = gc.isenabled()
    gc.disable()
    try:
        library.unlink_ir(module)
        assert not module.globals and str(module) != text and str(_lowered_module()[0]) == text
        del module
        assert all(r() is None for r in refs)
    finally:
        if was:
            gc.enable()


def test_ir_unlink_switch_restores_the_full_collection(monkeypatch):
    """``PMFAST_IR_UNLINK=0``: a full collection as before; on: the modules unlinked, no collection."""
    collected = []
    monkeypatch.setattr(library.gc, "collect", lambda *a: collected.append(a) or 0)
    module, _ = _lowered_module()
    library.release_memory([module])
    assert collected == [] and not module.globals
    monkeypatch.setenv("PMFAST_IR_UNLINK", "0")
    module, _ = _lowered_module()
    library.release_memory([module])
    assert collected == [()] and module.globals
