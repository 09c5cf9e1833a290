"""How many threads a large fused loop runs on: chosen when compiling, from chains and cores.

nutpie runs one chain per thread. With fewer chains than cores, the cores left idle can share
each kernel call: a chunked loop (:mod:`pmfast.loops.chunked`) then splits its rows into
:data:`BLOCKS` fixed blocks run by ``using(n)`` threads, each block scattering into its own
buffer and summing into its own partial totals, combined in block order afterwards — so a
result does not depend on how many threads actually ran.

The setting is read when a loop is compiled (part of its cache key)::

    with pmfast.loops.threads.using(pmfast.loops.threads.threads_for(chains=1, cores=1)):
        compiled = pmfast.compile(model)

``pmfast.sample`` does this from its ``chains`` and ``cores``. The default is 1 (no threads).
"""

from __future__ import annotations

import contextlib
import os

#: Threads per kernel call for loops compiled now (1: none). Set with :func:`using`.
THREADS = 1
#: Rows below which a threaded loop runs on its calling thread alone (checked at run time).
MIN_ROWS = 16384
#: Fixed blocks a threaded loop is split into (the threads share them; results depend on this
#: number only, never on the thread count).
BLOCKS = 8


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def threadsafe_layer() -> bool:
    """Can several threads launch numba parallel regions at once? (OpenMP or TBB; numba's own
    ``workqueue`` layer aborts on concurrent launches.)"""
    import numba
    from numba.np.ufunc import parallel

    if getattr(parallel, "_is_initialized", False):
        return numba.threading_layer() in ("omp", "tbb")
    for module in ("numba.np.ufunc.tbbpool", "numba.np.ufunc.omppool"):
        try:
            __import__(module)
            return True
        except ImportError:
            continue
    return False


def threads_for(chains: int, cores: int | None = None) -> int:
    """Threads per kernel call when nutpie runs ``chains`` chains on ``cores`` cores (nutpie's
    default: every core): the machine's cores shared among the chains running at once.

    From the counts alone, so a model compiles the same way on a busy and an idle machine (a
    choice from the load average would change kernels, their cache keys and their timings with
    whatever else ran that minute). On a machine shared with other work, pass ``cores=1`` or
    compile under ``using(1)``: a parallel region waits for its slowest thread (measured here at
    load 5-6: a Bradley-Terry call 0.8-1.2 ms on one thread, 2.4-43 ms on two).
    """
    running = max(1, min(chains, cores or available_cores()))
    n = available_cores() // running
    if n <= 1:
        return 1
    if running > 1 and not threadsafe_layer():
        return 1  # several chains would launch parallel regions concurrently
    return n


@contextlib.contextmanager
def using(n: int):
    """Compile loops inside this block for ``n`` threads per call."""
    global THREADS
    if int(n) < 1:
        raise ValueError(f"threads must be at least 1, got {n}")
    previous, THREADS = THREADS, int(n)
    try:
        yield
    finally:
        THREADS = previous
