"""Reference counting that reads only the fields that can hold a reference.

numba emits every incref and decref through ``NRTContext.get_meminfos``, which walks a value's data
model and calls each member's getter before asking whether the member holds a meminfo: a decref of a
2-d array extracts its meminfo, parent, nitems, itemsize, data, both shape and both stride entries
(12 ``extractvalue``s, one call), though only the meminfo is read. Dead, LLVM deletes them, but
numba builds each in Python and LLVM parses and deletes each: in bayesian_var_ireland's logp entry
the 652 ``del``s emitted 8,418 of its 40,915 instructions (20.6%).

:func:`get_meminfos` walks the same model in the same order and skips a member whose model can't hold
a meminfo, found from the model alone: it has none itself (``has_nrt_meminfo``) and neither has any
member its ``traverse`` lists, recursively (a model that lists itself, directly or not, counts as
holding one). The list of meminfos is the same, so the same calls are emitted in the same order; only
dead reads are left out (numba's getters emit nothing else, except a struct getter's type check,
which can't fail on a value of its own model). ``PMFAST_LEAN_REFS=0``: numba's walk.

Compile-scoped (:func:`install`).
"""

from __future__ import annotations

import os

_installed = False
#: (data model manager id, type) -> whether the type's model can't hold a meminfo
_empty: dict = {}


def enabled() -> bool:
    return os.environ.get("PMFAST_LEAN_REFS", "1") != "0"


def holds_none(dmm, ty, builder, _seen=()) -> bool:
    """Whether a value of ``ty`` holds no meminfo (its model and every member's, recursively)."""
    key = (id(dmm), ty)
    hit = _empty.get(key)
    if hit is not None:
        return hit
    if ty in _seen:
        return False
    model = dmm[ty]
    out = not model.has_nrt_meminfo() and all(holds_none(dmm, m, builder, (*_seen, ty)) for m, _ in model.traverse(builder))
    if not _seen:
        _empty[key] = out
    return out


def get_meminfos(self, builder, ty, val):
    """``NRTContext.get_meminfos`` without reading members that hold no meminfo (same list)."""
    if not enabled():
        return _original(self, builder, ty, val)
    dmm = self._context.data_model_manager
    datamodel = dmm[ty]
    meminfos = []
    if datamodel.has_nrt_meminfo():
        meminfos.append((ty, datamodel.get_nrt_meminfo(builder, val)))
    for mtyp, getter in datamodel.traverse(builder):
        if holds_none(dmm, mtyp, builder):
            continue
        meminfos.extend(self.get_meminfos(builder, mtyp, getter(val)))
    return meminfos


_original = None


def install() -> None:
    """Make ``NRTContext.get_meminfos`` :func:`get_meminfos` inside pmfast's compiles (once per process)."""
    global _installed, _original
    if _installed:
        return
    from numba.core.runtime.context import NRTContext

    from pmfast.compiler.patching import scoped

    _original = NRTContext.get_meminfos
    NRTContext.get_meminfos = scoped(_original, get_meminfos)
    _installed = True
