"""Python's cyclic garbage collector made cheaper while pmfast compiles a model.

A compile allocates millions of objects (pytensor graphs and their rewrites, numba IR,
type-inference constraints, llvmlite IR builders) and keeps a few hundred thousand of them
alive until it ends. CPython runs a young collection every 700 net container allocations and,
every so often, a full one that traverses every object the process holds (the imported
libraries included): irt_2pl's compile on a used machine ran ~630 young and 3 full
collections, 0.8-1.0 CPU s of its ~6.6, and found little to free (reference counting frees
almost everything the compile drops).

:func:`relaxed` freezes what the process holds when the compile starts (``gc.freeze``: the
collections during the compile skip those objects) and raises the young threshold to
:data:`YOUNG_THRESHOLD`; both are restored after. The collector keeps running, so reference
cycles made during the compile are still freed as it goes: switching it off instead doubled
hier_var's peak memory (1.3 → 2.6 GB). Nothing compiled depends on when the collector runs
(the same LLVM IR and machine code either way). Nested and concurrent compiles share one
setting, restored when the last one ends; a collector the user disabled is left alone.
``PMFAST_COMPILE_GC=1`` leaves the collector as it is.

:func:`checkpoint`, called between a compile's stages, freezes what the stages so far left alive
(the rewritten graphs the numba stage reads): the full collections during the numba stage, which
traverse every object not frozen, then skip them too. Garbage cycles not yet collected at the
checkpoint wait for the compile's end (the first full collection after :func:`relaxed` unfreezes).
``PMFAST_GC_CHECKPOINT=0`` makes it do nothing.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading

#: Net container allocations between young collections during a compile (CPython's default: 700).
YOUNG_THRESHOLD = 20_000

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None


def enabled() -> bool:
    """Whether compiles relax the collector (``PMFAST_COMPILE_GC=1`` turns it off)."""
    return os.environ.get("PMFAST_COMPILE_GC", "0") != "1"


def checkpoint() -> None:
    """Inside :func:`relaxed`: freeze what the process holds now (``PMFAST_GC_CHECKPOINT=0``: nothing)."""
    if os.environ.get("PMFAST_GC_CHECKPOINT", "1") == "0":
        return
    with _lock:
        if _saved is not None:
            gc.freeze()


@contextlib.contextmanager
def relaxed():
    """Inside the block: objects older than it frozen, young collections every :data:`YOUNG_THRESHOLD`."""
    global _depth, _saved
    if not enabled():
        yield
        return
    with _lock:
        if _depth == 0 and gc.isenabled():
            _saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(YOUNG_THRESHOLD, _saved[0]), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                gc.unfreeze()
                _saved = None
