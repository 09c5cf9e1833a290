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


def idle_cores() -> float:
    """Cores not busy with other work right now (the 1-minute load average, this process's
    compile counted as one of the busy ones)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - non-Unix
        return float(available_cores())
    return available_cores() - max(0.0, load - 1.0)


def threads_for(chains: int, cores: int | None = None) -> int:
    """Threads per kernel call when nutpie runs ``chains`` chains on ``cores`` cores: the
    machine's cores left over, shared among the chains running at once (1 if none are).

    Only idle cores count: a parallel region waits for its slowest thread, and a thread that
    has to wait for a core held by another process makes a call slower than running it on one
    thread (measured on this project's shared 2-core machine at load 5-6: a Bradley-Terry call
    0.8-1.2 ms on one thread, 2.4-43 ms on two).
    """
    running = max(1, min(chains, cores or chains))
    n = min(available_cores(), int(idle_cores())) // running
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
