"""A big graph's entry is finalised more cheaply (pmfast/compiler/entry.py ``big_llvm_options``,
pmfast/compiler/library.py ``one_module_pass`` / ``codegen_opt`` / ``function_opt`` / ``module_passes``, pmfast/loops/deferred.py shared call slots):
only where intended, with the same values."""

from __future__ import annotations

import os
import re
import uuid

import numba
import numpy as np
import pytest
from numba.core import codegen

import pmfast
from conftest import big_graph_entries, join_gradient_model
from pmfast.compiler import cache, callbacks, library
from pmfast.loops import deferred


def _callee():
    src = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x * 2.0\n"
    env = {"__name__": __name__}
    exec(compile(src, "<string>", "exec"), env)
    key = f"pmfast_test_bigllvm_{uuid.uuid4().hex}"
    cache.register(env["f"], key)
    deferred.install()
    return deferred.Deferred(numba.njit(env["f"], cache=True, no_cpython_wrapper=True), key, None)


def _lowered_ir(monkeypatch, fn, *args):
    """``fn(*args)`` compiled; the unoptimised IR of its module calling by symbol."""
    seen = []
    orig = codegen.CPUCodeLibrary.add_ir_module

    def add_ir_module(self, module):
        seen.append(str(module))
        return orig(self, module)

    monkeypatch.setattr(codegen.CPUCodeLibrary, "add_ir_module", add_ir_module)
    fn.compile(tuple(numba.typeof(a) for a in args))
    (module,) = [m for m in seen if "call i32 @\"_pmfast_deferred_" in m]  # the caller's own (not its wrappers)
    return module


@pytest.mark.parametrize("shared", [True, False])
def test_calls_by_symbol_share_one_exception_slot(monkeypatch, shared):
    """Three calls of a callee: one return and one exception slot with shared slots, three each without;
    the same values and the same error propagated either way (from any of the calls)."""
    monkeypatch.setenv("PMFAST_CALL_SLOTS", "1" if shared else "0")
    callee = _callee()

    @numba.njit
    def caller(a, b, c):
        return callee(a) + callee(b) * 10.0 + callee(c) * 100.0

    ir = _lowered_ir(monkeypatch, caller, 1.0, 2.0, 3.0)
    body = ir[ir.index("define") :]
    excinfo = len(re.findall(r"%\"?excinfo[.\d]*\"? = alloca", body))
    assert excinfo == (1 if shared else 3)
    assert caller(1.0, 2.0, 3.0) == 2.0 + 40.0 + 600.0
    for bad in ((-1.0, 2.0, 3.0), (1.0, -2.0, 3.0), (1.0, 2.0, -3.0)):
        with pytest.raises(ValueError, match="negative"):
            caller(*bad)
    assert caller(0.5, 0.25, 0.125) == 1.0 + 5.0 + 25.0  # after errors: the slots hold nothing stale


def test_one_module_pass_and_codegen_level_apply_to_a_library_when_asked(monkeypatch):
    """A library with the two options emits its object at the asked level and runs the module pipeline once
    (its cheap run skipped); the same function without them goes through numba's JIT and both runs."""
    emitted, once = [], []
    orig_emit, orig_once = library.emit_with, library.optimize_once
    monkeypatch.setattr(library, "emit_with", lambda lib, opt: (emitted.append(opt), orig_emit(lib, opt))[1])
    monkeypatch.setattr(library, "optimize_once", lambda lib: (once.append(lib.name), orig_once(lib))[1])

    def f(x):
        return np.sqrt(x * x + 1.0).sum()

    x = np.linspace(-2.0, 2.0, 11)
    cheap = numba.njit(pipeline_class=library.compiler(own_copies=True, one_module_pass=True, codegen_opt=0))(f)
    assert cheap(x) == pytest.approx(np.sqrt(x * x + 1.0).sum(), rel=1e-15)
    assert emitted == [0] and len(once) == 1
    (cres,) = cheap.overloads.values()
    assert cres.library._compiled_object  # kept for numba's cache
    emitted.clear(), once.clear()
    plain = numba.njit(pipeline_class=library.compiler(own_copies=True))(f)
    assert plain(x) == cheap(x)
    assert emitted == [] and once == []


def _finalised_with(monkeypatch, **options):
    """A small module finalised in a code library with ``options``: (function pipeline levels, module pipeline runs, result)."""
    import ctypes

    from llvmlite import ir
    from numba.core import config
    from numba.core.registry import cpu_target

    cg = cpu_target.target_context.codegen()
    levels, modules = [], []
    cls = type(cg)
    orig_f, orig_m = cls._function_pass_manager, cls._module_pass_manager
    monkeypatch.setattr(cls, "_function_pass_manager", lambda self, **kw: (levels.append(int(kw.get("opt", config.OPT))), orig_f(self, **kw))[1])
    monkeypatch.setattr(cls, "_module_pass_manager", lambda self, **kw: (modules.append(1), orig_m(self, **kw))[1])
    name = f"pmfast_test_lean_{uuid.uuid4().hex}"
    lib = cg.create_library(name)
    lib.__class__ = library.library_class(
        type(lib), options.get("own_copies", False), False, None, False, None, options.get("function_opt"), options.get("module_passes", True)
    )
    module = cg._create_empty_module(name)
    f64 = ir.DoubleType()
    fn = ir.Function(module, ir.FunctionType(f64, [f64]), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    t = b.fmul(fn.args[0], fn.args[0])
    b.ret(b.fadd(t, ir.Constant(f64, 1.0)))
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        lib.add_ir_module(module)
        lib.finalize()
    result = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(lib.get_pointer_to_function(name))(3.0)
    return levels, modules, result


def test_function_pipeline_alone_at_its_level_when_asked(monkeypatch):
    """``function_opt`` and no ``module_passes``: the function pipeline at that level, no module pipeline;
    numba's library: the function pipeline at numba's level, then the module pipeline."""
    from numba.core import config

    levels, modules, result = _finalised_with(monkeypatch, function_opt=1, module_passes=False)
    assert levels == [1] and modules == [] and result == 10.0
    levels, modules, result = _finalised_with(monkeypatch)
    assert levels == [int(config.OPT)] and modules and result == 10.0


@pytest.fixture(scope="module")
def big_and_small(tmp_path_factory):
    """The tiny model compiled as a big graph (threshold lowered) and as a small one, into an empty cache."""
    model = join_gradient_model()
    cache = tmp_path_factory.mktemp("entries")
    with big_graph_entries(cache):
        big = pmfast.compile(model)
    with big_graph_entries(cache, threshold=None):
        small = pmfast.compile(model)
    stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
    return big, small, stock, x0


def test_the_cheaper_finalising_is_for_big_entries_only(big_and_small):
    from pmfast.compiler import entry

    big, small, _, _ = big_and_small
    for compiled, want in ((big, True), (small, False)):
        kernel = compiled.kernels[0]
        options = kernel.dispatcher._compiler.pipeline_class.library_options
        assert options.get("module_passes", True) == (not want)
        assert options.get("function_opt") == (entry.BIG_ENTRY_FUNCTION_OPT if want else None)
        assert ("codegen_opt" in options) == want
        (cres,) = kernel.dispatcher.overloads.values()
        assert ("_finalize_specific" in type(cres.library).__dict__) == want
    assert big.kernels[0].key != small.kernels[0].key


def test_a_big_entry_gives_stock_values(big_and_small):
    big, small, stock, x0 = big_and_small
    for x in (x0, x0 + 0.3, x0 - 1.1, x0 * 2.5):
        code, logp, grad = callbacks.logp_at(big, x)
        ref_logp, ref_grad = stock(x)
        assert code == 0
        np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-300)


def test_big_llvm_options_follow_the_environment(monkeypatch):
    from pmfast.compiler import entry

    for name in ("PMFAST_BIG_ONE_PASS", "PMFAST_BIG_CODEGEN_OPT", "PMFAST_BIG_LEAN_LLVM", "PMFAST_BIG_FUNCTION_OPT"):
        monkeypatch.delenv(name, raising=False)
    lean = {"module_passes": False, "function_opt": entry.BIG_ENTRY_FUNCTION_OPT}
    assert entry.big_llvm_options() == {**lean, "codegen_opt": entry.BIG_ENTRY_CODEGEN_OPT}
    monkeypatch.setenv("PMFAST_BIG_FUNCTION_OPT", "2")
    assert entry.big_llvm_options()["function_opt"] == 2
    monkeypatch.setenv("PMFAST_BIG_LEAN_LLVM", "0")
    assert entry.big_llvm_options() == {"one_module_pass": True, "codegen_opt": entry.BIG_ENTRY_CODEGEN_OPT}
    monkeypatch.setenv("PMFAST_BIG_ONE_PASS", "0")
    monkeypatch.setenv("PMFAST_BIG_CODEGEN_OPT", "numba")
    assert entry.big_llvm_options() == {}
    monkeypatch.setenv("PMFAST_BIG_CODEGEN_OPT", "2")
    assert entry.big_llvm_options() == {"codegen_opt": 2}
    assert os.environ["PMFAST_BIG_CODEGEN_OPT"] == "2"
