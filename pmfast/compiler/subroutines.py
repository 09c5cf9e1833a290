"""numba's internal subroutines (``context.compile_internal``) kept apart per fast-math flags.

Some of numba's lowerings compile a Python helper as a subroutine of the
function being lowered (``BaseContext.compile_subroutine``): ``np.sum`` and
``arr.sum()`` among them. The helper is lowered with the calling context's
fast-math flags, but numba memoises it in a dict keyed by the helper's code,
signature and error model only, and every target context derived from one
(``subtarget``, one per compile) shares that dict. So the first compile in a
process fixes the flags of the helper for all later ones: a reduction
compiled for a node function with pytensor's flags (``reassoc`` lets LLVM
vectorise the sum) was reused by an entry compiled without ``reassoc``
(:func:`pmfast.compiler.entry.entry_fastmath`), and the entry's sum rounded
one way in a fresh process and another in a process that had evaluated the
model with pytensor first: the same seed gave different draws.

:func:`install` makes each derived context use the memo of its own flags:
contexts with equal flags still share one, so nothing is compiled more than
once per set of flags. Memos filled before :func:`install` are left to the
contexts that held them and never reached from a later compile.
"""

from __future__ import annotations

#: Where a memo keeps the per-flags memos of its family (never a numba key: those are tuples).
_FAMILY = object()

_installed = False


def flags_key(fastmath) -> frozenset:
    """A context's fast-math flags as a hashable set (empty when fast math is off)."""
    flags = getattr(fastmath, "flags", fastmath)
    return frozenset(flags) if flags else frozenset()


def _memo_for(parent: dict, fastmath) -> dict:
    """The memo of ``fastmath`` in the family of ``parent`` (created on first use)."""
    family = parent.setdefault(_FAMILY, {})
    key = flags_key(fastmath)
    if key not in family:
        family[key] = {_FAMILY: family}
    return family[key]


def install() -> None:
    """Give derived target contexts a subroutine memo per fast-math flags (once per process)."""
    global _installed
    if _installed:
        return
    from numba.core.base import BaseContext

    numba_subtarget = BaseContext.subtarget

    def subtarget(self, **kws):
        obj = numba_subtarget(self, **kws)
        if obj.cached_internal_func is self.cached_internal_func:
            obj.cached_internal_func = _memo_for(self.cached_internal_func, obj.fastmath)
        return obj

    subtarget.__doc__ = numba_subtarget.__doc__
    BaseContext.subtarget = subtarget
    _installed = True
