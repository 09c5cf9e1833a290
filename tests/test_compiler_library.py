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
    monkeypatch.setattr(library, "release_memory", lambda: (released.append(1), orig_release())[1])
    monkeypatch.setattr(library, "inline_threshold", lambda cg, t: (thresholds.append(t), orig_threshold(cg, t))[1])
    cls = lean_ir.pipeline(library.compiler(own_copies=True, release=True, inline_threshold=0))
    fn = numba.njit(pipeline_class=cls)(_caller)
    assert fn(X) == numba.njit(_caller)(X)
    assert released == [1] and thresholds == [0]  # the entry's library only, not its callee's
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
