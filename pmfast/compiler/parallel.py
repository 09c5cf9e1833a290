"""Compiling a cacheable numba function in a forked process, on the other core.

numba compiles under one global lock, so one process compiles one function
at a time. The expand entry does not depend on the logp+grad entry: a child
forked once both graphs exist compiles it into the on-disk cache while this
process compiles logp+grad; this process then loads it (a cache hit). The
child does nothing but that compile and leaves with ``os._exit``.

No fork (the caller compiles here) when the platform has no ``fork``, the
function can't be cached, other threads are running (one could hold a lock
the child needs), or ``PMFAST_PARALLEL_COMPILE=0``. A child that fails or
is still running :data:`TIMEOUT` seconds after it is waited for is ignored
(killed) and the function is compiled here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

#: Seconds to wait for a child once this process needs its result.
TIMEOUT = 300.0


def enabled() -> bool:
    """Whether compiles may be forked (see the module docstring)."""
    return (
        hasattr(os, "fork")
        and os.environ.get("PMFAST_PARALLEL_COMPILE", "1") != "0"
        and threading.active_count() == 1
    )


class Child:
    """A forked compile: :meth:`wait` says whether it finished successfully."""

    def __init__(self, pid: int):
        self.pid = pid
        self.status: int | None = None
        self.cpu_seconds = 0.0

    def poll(self) -> bool:
        """Whether the child has exited (reaped here, its status kept for :meth:`wait`)."""
        if self.status is None:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                self.cpu_seconds = usage.ru_utime + usage.ru_stime
        return self.status is not None

    def wait(self, timeout: float = TIMEOUT) -> bool:
        deadline = time.monotonic() + timeout
        while self.status is None:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                self.cpu_seconds = usage.ru_utime + usage.ru_stime
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                _, self.status, _ = os.wait4(self.pid, 0)
                break
            time.sleep(0.005)
        return os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 0


def fork(compile_fn: Callable[[], None]) -> Child | None:
    """Run ``compile_fn`` in a forked child; None if not forked (see :func:`enabled`)."""
    if not enabled():
        return None
    pid = os.fork()
    if pid:
        return Child(pid)
    code = 1
    try:
        compile_fn()
        code = 0
    finally:
        os._exit(code)
