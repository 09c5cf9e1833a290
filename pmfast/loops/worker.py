"""The forked process that compiles deferred functions (:mod:`pmfast.loops.deferred`) into numba's cache.

A :class:`~pmfast.loops.deferred.Deferred` call typed in this process is sent, as ``(key,
argtypes)``, through a pipe to one worker forked for the whole compile (:class:`Worker`), so the
functions the requests share are compiled once; the worker runs only when a core is idle right now
(:func:`spare_core`). Where a function is compiled never changes what it computes, only when it is
ready: the caller loads the worker's result from the cache, or compiles it itself when the worker
failed or is gone.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import pickle

log = logging.getLogger("pmfast.compiler")


class Worker:
    """The forked process compiling deferred functions into numba's cache, as their calls are
    typed: requests ``(key, argtypes)`` arrive through a pipe; when the pipe closes (:meth:`finish`,
    once a caller's library needs the results) it compiles what is left and exits. One process for
    all of a compile's requests, so the functions they share (scalar math) are compiled once."""

    current: Worker | None = None
    exit_hook = False

    def __init__(self, child, fd: int):
        self.child, self.fd = child, fd
        self.deferreds: list[Deferred] = []

    @classmethod
    def send(cls, deferred: Deferred, argtypes: tuple) -> bool:
        """Send a request (forking the worker if none is running); False when no fork is possible."""
        from pmfast.compiler import parallel

        if cls.current is None:
            if not (parallel.enabled() and spare_core()):
                return False
            r, w = os.pipe()
            child = parallel.fork(functools.partial(_serve, r, w, type(deferred)._by_key))
            os.close(r)
            if child is None:
                os.close(w)
                return False
            cls.current = cls(child, w)
            if not cls.exit_hook:
                atexit.register(cls.finish)
                # another process forked meanwhile (an expand entry's child) must not hold the
                # pipe open: the worker would wait for it to exit before seeing the end
                os.register_at_fork(after_in_child=cls._forget)
                cls.exit_hook = True
        data = pickle.dumps((deferred.key, argtypes))
        try:
            os.write(cls.current.fd, len(data).to_bytes(4, "little") + data)
        except OSError:  # the worker is gone: what it was sent is compiled here
            cls.finish()
            return False
        cls.current.deferreds.append(deferred)
        return True

    @classmethod
    def _forget(cls) -> None:
        """In a forked child: the parent's worker is not this process's."""
        if cls.current is not None:
            try:
                os.close(cls.current.fd)
            except OSError:
                pass
            cls.current = None

    @classmethod
    def finish(cls) -> None:
        """Close the pipe and wait for the worker (its requests are then in the cache or failed)."""
        worker, cls.current = cls.current, None
        if worker is None:
            return
        os.close(worker.fd)
        if not worker.child.wait():
            log.info("pmfast: the forked compile of deferred functions failed; compiling them here")
        for deferred in worker.deferreds:
            deferred._requested.clear()


def spare_core() -> bool:
    """Is a core idle right now (fewer other runnable tasks than cores minus ours)?

    The worker only pays on a core nobody else uses: with every core busy (another job), it takes
    its CPU from the compile it was meant to relieve (stoch_vol with one core busy elsewhere: the
    parent 0.9 CPU s lighter but 0.3 s later). Linux's instantaneous count of runnable tasks
    (``/proc/loadavg``, which includes this process); elsewhere, assume one is. Where the kernel is
    compiled never changes what it computes (the same bits either way), only when it is ready.
    """
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return True
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if running - 1 < cores - 1:
        return True
    # this compile's own children (the expand entry's, about to finish) leave the core to the worker
    return running - 1 - _running_children() < cores - 1


def _running_children() -> int:
    """How many of this process's children are running now (from ``/proc/<pid>/stat``)."""
    me, n = os.getpid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        n += state == "R" and int(ppid) == me
    return n


def _serve(r: int, w: int, registry: dict) -> None:
    """The worker's loop (in the child): compile each request; stop when the pipe closes."""
    os.close(w)
    failed = False
    with os.fdopen(r, "rb") as pipe:
        while head := pipe.read(4):
            key, argtypes = pickle.loads(pipe.read(int.from_bytes(head, "little")))
            try:
                registry[key].dispatcher.compile(argtypes)
            except Exception:  # the caller compiles it again and sees the error
                failed = True
    if failed:
        raise RuntimeError("a deferred compile failed")
