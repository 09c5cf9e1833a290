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

Compile-scoped and private: only contexts derived inside a pmfast compile
(:func:`pmfast.compiler.patching.compiling`, this thread) get a per-flags memo,
and those memos live in this module (keyed by the parent memo), never inside
numba's dict; a user's compile derives its context exactly as numba does and
shares numba's memo with the user's other compiles only.
"""

from __future__ import annotations

import threading

from pmfast.compiler.patching import scoped

#: Per parent memo (by ``id``, with the memo kept alive beside it): its family of per-flags memos.
_families: dict[int, tuple[dict, dict]] = {}
#: The memos pmfast made (by ``id``): a context derived from one stays in its family.
_members: dict[int, tuple[dict, dict]] = {}
_lock = threading.Lock()

_installed = False


def flags_key(fastmath) -> frozenset:
    """A context's fast-math flags as a hashable set (empty when fast math is off)."""
    flags = getattr(fastmath, "flags", fastmath)
    return frozenset(flags) if flags else frozenset()


def _memo_for(parent: dict, fastmath) -> dict:
    """The memo of ``fastmath`` in the family of ``parent`` (created on first use; pmfast-private)."""
    with _lock:
        member = _members.get(id(parent))
        if member is not None and member[0] is parent:
            family = member[1]
        else:
            entry = _families.get(id(parent))
            if entry is None or entry[0] is not parent:
                entry = _families[id(parent)] = (parent, {})
            family = entry[1]
        key = flags_key(fastmath)
        memo = family.get(key)
        if memo is None:
            memo = family[key] = {}
            _members[id(memo)] = (memo, family)
        return memo


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

    BaseContext.subtarget = scoped(numba_subtarget, subtarget)
    _installed = True
