"""Fits spread over a Dask cluster: the model travels once per worker, each worker compiles it at most once.

The client pickles the model (cloudpickle) and broadcasts the bytes to every
worker; a fit task finds the compiled model in its worker process's cache
under a token of (model bytes, passes, compile options), compiling it on the
first task only (under a lock, so concurrent tasks in one worker wait for
that one compile; workers sharing a filesystem share pmfast's on-disk
compile cache, so later workers' compiles are warm). A worker that dies
mid-fit loses nothing: the scheduler runs its tasks again on another worker.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import uuid

from pmfast.loading import USER_MODULE_PREFIX
from pmfast.many.fit import FitError, fit_one

DASK_EXTRA = 'dask is not installed: install pmfast\'s dask extra (pip install "pmfast[dask]") to use a client or --scheduler'

#: Compiled models of this (worker) process, by token, most recently used last.
_compiled: dict[str, object] = {}
#: Compiled models a worker keeps (a long-lived cluster serves many fit_many calls).
KEEP_COMPILED = 4
_lock = threading.Lock()
#: Compiles done in this process, by token (read by tests and reported in attrs).
compiles: dict[str, int] = {}


def require_distributed():
    """``dask.distributed``, or an ImportError that names pmfast's ``dask`` extra."""
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(DASK_EXTRA) from exc
    return distributed


def _compiled_model(blob: bytes, token: str, passes, compile_kwargs: dict):
    with _lock:
        if token not in _compiled:
            import pickle

            import pmfast

            model = pickle.loads(blob)
            _compiled[token] = pmfast.compile(model, passes=passes, **compile_kwargs)
            compiles[token] = compiles.get(token, 0) + 1
            while len(_compiled) > KEEP_COMPILED:
                _compiled.pop(next(iter(_compiled)))
        _compiled[token] = _compiled.pop(token)
        return _compiled[token]


def worker_fit(blob, token, passes, compile_kwargs, index, data, seed, draws, tune, chains, sample_kwargs):
    """The task run on a worker: a fit's ``InferenceData`` or a :class:`FitError`."""
    from distributed import get_worker

    try:
        compiled = _compiled_model(blob, token, passes, compile_kwargs)
    except Exception as exc:
        return FitError(index, f"compiling the model on a worker failed: {type(exc).__name__}: {exc}")
    worker = get_worker()
    kwargs = dict(sample_kwargs)
    kwargs.setdefault("cores", worker.state.nthreads)
    result = fit_one(compiled, index, data, seed, draws, tune, chains, kwargs)
    if not isinstance(result, FitError):
        result.attrs["pmfast_worker"] = f"{worker.address} (pid {os.getpid()}, {compiles.get(token, 0)} compile)"
    return result


def run(client, model, jobs, *, passes, compile_kwargs, draws, tune, chains, sample_kwargs, report):
    """Submit one task per ``(index, data, seed)`` job; call ``report(index, result)`` as each finishes.

    Returns when every job has reported; ``report`` raising (``errors="raise"``,
    Ctrl-C) cancels the jobs still pending.
    """
    import cloudpickle
    from distributed import as_completed

    for name, module in list(sys.modules.items()):
        if name.startswith(USER_MODULE_PREFIX):  # model files loaded by pmfast: workers can't import them
            cloudpickle.register_pickle_by_value(module)
    blob = cloudpickle.dumps(model)
    token = hashlib.sha256(blob + repr((passes, sorted(compile_kwargs.items()))).encode()).hexdigest()
    [shared_blob] = client.scatter([blob], broadcast=True, hash=False)
    run_id = uuid.uuid4().hex[:8]
    futures = {
        client.submit(
            worker_fit, shared_blob, token, passes, compile_kwargs, index, data, seed, draws, tune, chains,
            sample_kwargs, key=f"pmfast-fit-{run_id}-{index}",
        ): index
        for index, data, seed in jobs
    }
    try:
        for future in as_completed(futures):
            index = futures.pop(future)
            try:
                result = future.result()
            except Exception as exc:  # KilledWorker after repeated worker deaths, a lost connection…
                result = FitError(index, f"the cluster could not run it: {type(exc).__name__}: {exc}")
            report(index, result)
    finally:
        if futures:
            client.cancel(list(futures))
        client.cancel([shared_blob])
