"""numba's ``inline="always"`` inliner without its two deep copies of a callee's fresh IR.

numba's ``InlineInlinables`` pass inlines a call by translating the callee's
bytecode to IR afresh (``InlineWorker.run_untyped_passes``) and handing that
IR to ``InlineWorker.inline_ir``, which deep-copies it twice, block by block:
once because it will mutate the IR (the IR is new and nobody else holds it),
once more to return an untouched copy (``InlineInlinables`` drops it). An
entry inlines its node functions (:mod:`pmfast.compiler.inline`), each call
site its own inlining, and deep-copying numba IR (every ``Var``, ``Loc`` and
expression) was ~7% of a used machine's compile of negbin.

:func:`install` makes ``InlineWorker.inline_function`` (the path that always
starts from a fresh IR; numba's other callers of ``inline_ir`` are untouched)
skip both copies. The inlined IR is the same: a copy's constants, globals and
free variables keep their values (numba's ``__deepcopy__`` doesn't copy them)
and its per-block copies of the callee's scope compare equal to the one scope
they came from (``inline_ir`` asserts there is one), whose variables are
renamed into the caller's scope either way.

Compile-scoped: outside a pmfast compile (:func:`pmfast.compiler.patching.compiling`)
and in every other thread, ``inline_function`` is numba's own and the module's
``copy.deepcopy`` copies (the skip flag is per thread).
"""

from __future__ import annotations

import copy
import threading
import types

from pmfast.compiler.patching import scoped

_installed = False
_skip = threading.local()
#: numba's own ``InlineWorker.inline_function`` (set by :func:`install`).
numba_inline_function = None


def _deepcopy(obj, memo=None):
    """``copy.deepcopy``, except while :func:`install`'s ``inline_function`` runs: the object itself."""
    return obj if getattr(_skip, "on", False) else copy.deepcopy(obj, memo)


def install() -> None:
    """Patch numba's ``InlineWorker.inline_function`` (once per process; see the module docstring)."""
    global _installed, numba_inline_function
    if _installed:
        return
    from numba.core import inline_closurecall

    shim = types.ModuleType("copy")
    shim.__dict__.update(copy.__dict__)
    shim.deepcopy = _deepcopy
    inline_closurecall.copy = shim
    numba_inline_function = inline_closurecall.InlineWorker.inline_function

    def inline_function(self, caller_ir, block, i, function, arg_typs=None):
        callee_ir = self.run_untyped_passes(function)
        freevars = function.__code__.co_freevars
        _skip.on = True
        try:
            return self.inline_ir(caller_ir, block, i, callee_ir, freevars, arg_typs=arg_typs)
        finally:
            _skip.on = False

    inline_closurecall.InlineWorker.inline_function = scoped(numba_inline_function, inline_function)
    _installed = True
