"""Python's cyclic garbage collector paused while pmfast compiles a model.

A compile allocates millions of objects (pytensor graphs and their rewrites, numba IR,
type-inference constraints, llvmlite IR builders) and keeps a few hundred thousand of them
alive until it ends. CPython's collector runs a young collection every 700 net container
allocations and, every so often, a full one that traverses every object the process holds
(the imported libraries included): irt_2pl's compile on a used machine ran ~630 young and
3 full collections, 0.8-1.0 CPU s of its ~6.6, and found little to free (reference counting
frees almost everything the compile drops).

:func:`paused` disables the collector for the duration and restores it after. Objects are
freed by reference counting as before; only reference cycles made during the compile wait for
the collector's next run after it (stoch_vol: ~8% more peak memory). Nothing compiled
depends on when the collector runs (the same LLVM IR and machine code either way). Nested
and concurrent compiles share one pause: the collector runs again when the last one ends.
``PMFAST_COMPILE_GC=1`` leaves the collector alone.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading

_lock = threading.Lock()
_depth = 0
_restore = False


def enabled() -> bool:
    """Whether compiles pause the collector (``PMFAST_COMPILE_GC=1`` turns it off)."""
    return os.environ.get("PMFAST_COMPILE_GC", "0") != "1"


@contextlib.contextmanager
def paused():
    """Disable the cyclic garbage collector inside the block (if it was enabled), then restore it."""
    global _depth, _restore
    if not enabled():
        yield
        return
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()
