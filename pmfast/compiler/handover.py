"""Two processes compiling one model's functions: a forked worker hands its compiled code over.

numba compiles one function at a time per process. :func:`share` forks a worker
(:mod:`pmfast.compiler.parallel`) and both processes take jobs (an entry's parts, the expand entry:
:func:`jobs`) from one pipe, one byte per job, so each job is compiled once and the faster process
takes more. The worker writes each compiled function to a file (numba's own serialisation of a
compile result: the object code, the linkable module, the environment, as its on-disk cache
stores them); this process loads them into the same dispatchers (:func:`adopt`) as a cache hit
would. No on-disk cache is needed: a part that numba won't cache (it embeds a ctypes function
pointer, e.g. pytensor's LAPACK calls: a *dynamic global*) is handed over too. Such an address
was valid in the worker, a fork of this process; it is valid here when it points into the same
file mapped at the same place, which :func:`_where` checks for each of them (an address into
anonymous memory, or memory mapped after the fork, is refused: the function is compiled here).

**Deferred callees in the same queue** (:mod:`pmfast.loops.deferred`: chunked kernels, linear
algebra). While a worker shares the compile, it is also the one that takes this process's deferred
compiles: a call typed here is sent to it (:func:`request`, a second pipe) instead of to a third
process, which on two cores took the core from the worker and this process, and this process waited
for it at each resolution. The worker takes requests before its next job. Each deferred compile is
*claimed* by the process that starts it (:func:`obtain`: a file created exclusively in the shared
directory), so each is compiled once: the process that needs one the worker has not taken (it is
busy with a part) takes it back and compiles it here; one the other process is compiling is waited
for and then loaded from numba's cache. A claimant compiles nothing that waits on the other process,
so neither can wait on the other forever.

Where a function is compiled never changes its code (the same source, types and flags give the
same object code), so the bits of a model's results don't depend on the worker. Without a fork
(``PMFAST_PARALLEL_COMPILE=0``, threads, no ``fork``), everything is compiled here.
"""

from __future__ import annotations

import os
import pickle
import logging
import select
import shutil
import time
import tempfile
from dataclasses import dataclass

log = logging.getLogger("pmfast.compiler")

#: Most jobs handed out (one byte each).
MAX_JOBS = 255

#: While a worker shares the compile: the directory of claims (in both processes) and, in this
#: process, the worker (:func:`request` writes to it).
_claims: str | None = None
_active: Shared | None = None
#: The process that forked the worker (in the worker: its parent is gone if this changes).
_parent: int | None = None


@dataclass
class Job:
    """Compile ``dispatcher`` for ``argtypes`` (``run``: what does it, e.g. a part's entry compile)."""

    weight: int
    dispatcher: object
    argtypes: tuple
    run: object


def jobs(*entries) -> list[Job]:
    """What of prepared ``entries`` (:class:`pmfast.compiler.entry.PreparedEntry`) two processes can
    compile apart, heaviest first: each part not in the cache, and each entry compiled whole that is
    not. A part's entry is compiled after them, where it is needed."""
    from pmfast.compiler import entry_spec

    out = []
    for e in entries:
        if e.parts:
            out += [Job(p.spec.weight, p.dispatcher, p.spec.argtypes, p.compile) for p in e.parts if not p.in_cache()]
        elif not e.in_cache():
            out.append(Job(e.weight, e.dispatcher, tuple(entry_spec.signature(e.spec.kind).args), lambda d=e.dispatcher, k=e.spec.kind: d.compile(entry_spec.signature(k))))
    return sorted(out, key=lambda j: -j.weight)[:MAX_JOBS]


def _where(address: int):
    """``(file, offset)`` of the file mapping ``address`` points into in this process, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                path = fields[5].strip() if len(fields) > 5 else ""
                if not path.startswith("/"):
                    return None
                return path, int(fields[2], 16) + address - lo
    return None


def _addresses(library) -> list[int]:
    """The dynamic addresses ``library``'s code embeds (numba names each global after its address; LLVM
    suffixes a second one of a name with ``.1`` when it links modules)."""
    prefix = "numba.dynamic.globals."
    return sorted({int(name[len(prefix):].split(".")[0], 16) for name in library._dynamic_globals if name.startswith(prefix)})


def _export(job: Job, path: str) -> None:
    """Write ``job``'s compile result to ``path`` (in the worker)."""
    from numba.core.serialize import dumps

    cres = job.dispatcher.overloads[job.argtypes]
    places = {a: _where(a) for a in _addresses(cres.library)}
    if any(p is None for p in places.values()):
        return
    data = dumps((cres._reduce(), places))
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)


def adopt(job: Job, path: str) -> bool:
    """Load the compile result the worker wrote to ``path`` into ``job``'s dispatcher; False if it
    can't be used here (not written, or an embedded address that is not the same here)."""
    from numba.core.compiler import CompileResult

    dispatcher = job.dispatcher
    if job.argtypes in dispatcher.overloads:
        return True
    try:
        with open(path, "rb") as f:
            payload, places = pickle.loads(f.read())
    except (OSError, EOFError, pickle.UnpicklingError):
        return False
    if any(_where(a) != p for a, p in places.items()):
        return False
    ctx = dispatcher.targetctx
    cres = CompileResult._rebuild(ctx, *payload)
    ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
    dispatcher.add_overload(cres)
    return True


def sharing() -> bool:
    """Whether a worker of :func:`share` compiles beside this process (or this is that worker)."""
    return _claims is not None


def request(name: str, payload: bytes) -> None:
    """Hand the deferred compile ``name`` (``payload``: pickled ``(key, argtypes)``) to the worker, which
    takes it before its next job (once; nothing if there is no worker or the message would not be
    written whole: this process compiles it when it needs it, :func:`obtain`)."""
    worker = _active
    data = len(payload).to_bytes(4, "little") + payload
    if worker is None or worker.req_w is None or name in worker.sent or len(data) > select.PIPE_BUF:
        return
    try:
        os.write(worker.req_w, data)  # non-blocking, at most PIPE_BUF bytes: all or nothing
    except OSError:
        return
    worker.sent.add(name)


def obtain(name: str, compile_fn, needed: bool = True) -> None:
    """Compile a deferred function (``compile_fn``) once between the two processes: claim ``name`` and
    compile it here, or (if ``needed`` here) wait until the process that claimed it is done and then
    call ``compile_fn`` (a load from numba's cache, or a compile if that failed or left nothing cached)."""
    where = _claims
    if where is None:
        return compile_fn()
    try:
        os.close(os.open(os.path.join(where, "claim-" + name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        if not needed:
            return None
        _wait_done(os.path.join(where, "done-" + name))
    except OSError:
        pass
    else:
        try:
            return compile_fn()
        finally:
            try:
                os.close(os.open(os.path.join(where, "done-" + name), os.O_CREAT | os.O_WRONLY))
            except OSError:
                pass
    return compile_fn()


def _wait_done(path: str) -> None:
    """Until ``path`` exists, the other process is gone, or :data:`parallel.TIMEOUT` passes."""
    from pmfast.compiler import parallel

    deadline = time.monotonic() + parallel.TIMEOUT
    parent = _parent
    while not os.path.exists(path) and time.monotonic() < deadline:
        if _active is not None and _active.child.poll():
            return
        if _active is None and parent is not None and os.getppid() != parent:
            return
        time.sleep(0.002)


def _take_requests(fd: int, buffer: bytearray, pending: list, block: bool) -> bool:
    """Move the whole requests readable on ``fd`` into ``pending`` (waiting for one if ``block``); False at end of file."""
    while True:
        readable, _, _ = select.select([fd], [], [], None if block else 0)
        if not readable:
            return True
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        buffer += chunk
        while len(buffer) >= 4 and len(buffer) >= 4 + (size := int.from_bytes(buffer[:4], "little")):
            pending.append(bytes(buffer[4 : 4 + size]))
            del buffer[: 4 + size]
        block = False


def early_linalg() -> list[tuple[str, str]]:
    """The linear-algebra implementations (``(name, dtype)``) this compile's node functions call that
    neither this process nor numba's cache holds: the worker compiles them before its first job.

    This process needs each when it finalises the entry (or part) calling it. Requested as its call
    is typed, it waited until the worker had finished the job it was in: bayesian_sem_workflow's main
    process blocked ~4.8 s (load 5) on ``_solve_triangular2`` and ``_cholesky_grad``, which the worker
    started only after a 4-CPU-s part. Compiled first, they are ready before any entry is finalised,
    and the job pipe gives the worker's share of the parts to this process meanwhile.
    ``PMFAST_WORKER_LINALG_FIRST=0``: none (requests as they come)."""
    from pmfast.compiler import cache, linalg, prefetch

    if os.environ.get("PMFAST_WORKER_LINALG_FIRST", "1") == "0":
        return []
    out = []
    for name, dtype in linalg.used:
        if name not in prefetch.SIGNATURES:
            continue
        fn = linalg.jitted(name)
        if prefetch.argtypes(name, dtype) in fn.overloads or cache.has_index(fn):
            continue
        out.append((name, dtype))
    return out


def _compile_early(name: str, dtype: str) -> None:
    """In the worker: compile implementation ``name`` for ``dtype`` into numba's cache, claimed as a
    deferred compile where its calls are deferred (so this process waits for it instead of compiling
    it again); an error is left to the process that needs it."""
    from pmfast.compiler import linalg, prefetch
    from pmfast.loops import deferred

    argtypes = prefetch.argtypes(name, dtype)
    impl = linalg._deferred(name, dtype) if name in linalg._RESULT_NDIM else None
    t0 = time.process_time()
    try:
        if impl is not None:
            deferred.serve(pickle.dumps((impl.key, argtypes)))
        else:
            linalg.jitted(name).compile(argtypes)
    except Exception:
        pass
    log.debug("pmfast: the worker compiled %s (%s) first in %.2f CPU s", name, dtype, time.process_time() - t0)


def _work(r: int, req_r: int, req_w: int, todo: list[Job], outdir: str, early=()) -> None:
    """The worker (in the child): the linear algebra of :func:`early_linalg`, then deferred compiles
    this process was sent, then the next job from pipe ``r`` (:func:`_drain`'s, one at a time); when
    the jobs are gone, requests until the parent closes their pipe."""
    from pmfast.loops import deferred

    os.close(req_w)  # the parent's end: the pipe ends when the parent closes it
    for name, dtype in early:
        _compile_early(name, dtype)
    buffer, pending, jobs_left, more = bytearray(), [], True, True
    while True:
        if more:
            more = _take_requests(req_r, buffer, pending, block=not jobs_left and not pending)
        if pending:
            deferred.serve(pending.pop(0))
            continue
        if jobs_left:
            jobs_left = _drain(r, todo, outdir, once=True)
            if not jobs_left:
                _idle()
            continue
        if not more:
            return


def _idle() -> None:
    """In the worker, once its jobs are gone: compile nutpie's two callbacks into numba's cache (model-
    independent, compiled once per machine: on a cold one, ~0.3 CPU s this process would spend after
    its entry), so this process loads them. ``PMFAST_WORKER_CALLBACKS=0``: this process compiles them.
    An error is left to this process, which compiles them where it needs them."""
    if os.environ.get("PMFAST_WORKER_CALLBACKS", "1") == "0":
        return
    from pmfast.compiler import callbacks

    t0 = time.process_time()
    try:
        callbacks.compiled()
    except Exception:
        return
    log.debug("pmfast: the worker compiled or loaded the callbacks in %.2f CPU s", time.process_time() - t0)


def _drain(r: int, todo: list[Job], outdir: str | None, once: bool = False) -> bool:
    """Compile the jobs whose numbers this process reads from pipe ``r`` until it is empty (one byte
    each: both processes read the same pipe, so each job is taken once), or only the next one
    (``once``); False when none was left. The worker (``outdir``) writes each result there (unless
    numba's cache holds it). A job's error is left to whoever compiles it again where it's needed."""
    from pmfast.compiler import cache

    while job := os.read(r, 1):
        i = job[0]
        t0 = time.process_time()
        try:
            todo[i].run()
            if outdir is not None and not cache.has_index(todo[i].dispatcher):
                _export(todo[i], os.path.join(outdir, f"{i}.nbr"))
        except Exception:
            pass
        log.debug("pmfast: %s compiled job %d (weight %d) in %.2f CPU s", "the worker" if outdir else "this process", i, todo[i].weight, time.process_time() - t0)
        if once:
            return True
    return False


class Shared:
    """The worker of :func:`share`: :meth:`finish` waits for it and adopts what it compiled."""

    def __init__(self, child, todo: list[Job], outdir: str, req_w: int | None = None):
        self.child, self.todo, self.outdir, self.req_w = child, todo, outdir, req_w
        self.adopted = 0
        self.sent: set[str] = set()
        self.cpu_seconds = 0.0
        self._done = False

    def finish(self) -> None:
        """Wait for the worker; adopt what it compiled that numba's cache doesn't hold (the rest
        this process loads from the cache, as any cached function)."""
        from pmfast.compiler import cache

        global _active, _claims
        if self._done:
            return
        self._done = True
        if self.req_w is not None:
            os.close(self.req_w)  # the worker leaves once it has no job and no request left
            self.req_w = None
        try:
            self.child.wait()
            self.cpu_seconds = self.child.cpu_seconds
            for i, job in enumerate(self.todo):
                path = os.path.join(self.outdir, f"{i}.nbr")
                if job.argtypes in job.dispatcher.overloads or not os.path.exists(path) or cache.has_index(job.dispatcher):
                    continue
                self.adopted += adopt(job, path)
        finally:
            if _active is self:
                _active, _claims = None, None
            shutil.rmtree(self.outdir, ignore_errors=True)


def share(todo: list[Job], first=None) -> Shared | None:
    """Compile ``todo`` here and in a forked worker at once, each taking the next job as it finishes
    one; this process runs ``first()`` (if given) before it takes any. Returns the worker (call its
    ``finish()`` before using what the jobs compile) or None if nothing was forked (then everything
    was compiled here)."""
    import sys
    from functools import partial

    from pmfast.compiler import parallel
    from pmfast.loops import deferred

    global _active, _claims, _parent
    deferred.share_hooks = sys.modules[__name__]
    r, w = os.pipe()
    os.write(w, bytes(range(len(todo))))
    os.close(w)
    outdir = tempfile.mkdtemp(prefix="pmfast-handover-") if len(todo) > (first is None) else None
    child = None
    if outdir is not None and _claims is None:
        req_r, req_w = os.pipe()
        _claims, _parent = outdir, os.getpid()
        child = parallel.fork(partial(_work, r, req_r, req_w, todo, outdir, early_linalg()))
        os.close(req_r)
        if child is None:
            os.close(req_w)
            _claims = None
        else:
            os.set_blocking(req_w, False)
            _active = Shared(child, todo, outdir, req_w)
    if child is None and outdir is not None:
        shutil.rmtree(outdir, ignore_errors=True)
    worker = _active if child is not None else None
    try:
        if first is not None:
            first()
        _drain(r, todo, None)
    except BaseException:
        if worker is not None:
            worker.finish()
        raise
    finally:
        os.close(r)
    return worker
