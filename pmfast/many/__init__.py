"""Many fits from one compile: :func:`fit_many`, here or on a Dask cluster.

Simulation-based calibration, cross-validation refits, one model per store:
only the data change, so the model is compiled once and each dataset is
swapped into the compiled model (nutpie's ``with_data``: same kernels, new
shared arrays, lengths free where the model's shapes follow its data).
"""

from __future__ import annotations

import numbers

from collections.abc import Callable, Iterable

from pmfast.many.fit import FitError, seeds

__all__ = ["FitError", "fit_many", "seeds"]


def fit_many(
    model,
    datasets: Iterable,
    *,
    client=None,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    seed=None,
    passes="all",
    errors: str = "return",
    progress: bool = True,
    on_result: Callable | None = None,
    **sample_kwargs,
) -> list:
    """Fit ``model`` to each dataset; one ``arviz.InferenceData`` per dataset, in input order.

    ``model``: a ``pm.Model`` (or, without a client, a model compiled by
    :func:`pmfast.compile` or nutpie's numba backend). ``datasets``: dicts
    mapping the model's ``pm.Data`` names to arrays. The model is compiled once (once per worker with a ``client``, a
    ``dask.distributed.Client``) and every dataset is fitted with its data
    swapped in; each result carries ``attrs["pmfast_dataset"]`` (its index) and
    ``attrs["pmfast_seed"]`` (its seed: derived from ``seed`` and the index,
    or taken from ``seed`` when it is a sequence of one int per dataset).

    A dataset that fails (a wrong name, shape or dtype, a non-finite logp at
    the start, a sampler error) gets a :class:`FitError` (``index``,
    ``reason``) in its slot and the other fits go on; ``errors="raise"`` raises
    the first one instead. ``on_result(index, result)`` is called as each fit
    finishes (the CLI writes files there). Ctrl-C stops: the fits done so far
    are returned, the others hold ``FitError(..., "not fitted: interrupted")``.
    Compile options (``initial_points``, ``jitter_rvs``…) go to
    :func:`pmfast.compile`, the rest of ``sample_kwargs`` to ``nutpie.sample``.
    """
    from pmfast.frontend import COMPILE_KWARGS, check_model, compile
    from pmfast.many.progress import FitProgress

    if errors not in ("return", "raise"):
        raise ValueError(f"errors must be 'return' or 'raise', got {errors!r}")
    for name, value in (("draws", draws), ("chains", chains)):
        if int(value) < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    if int(tune) < 0:
        raise ValueError(f"tune must be non-negative, got {tune}")
    compile_kwargs = {k: sample_kwargs.pop(k) for k in COMPILE_KWARGS if k in sample_kwargs}
    datasets = list(datasets)
    if seed is None or isinstance(seed, numbers.Integral):
        job_seeds = seeds(seed, len(datasets))
    else:
        job_seeds = [int(s) for s in seed]
        if len(job_seeds) != len(datasets):
            raise ValueError(f"seed has {len(job_seeds)} values for {len(datasets)} datasets")
    jobs = list(zip(range(len(datasets)), datasets, job_seeds))
    results: list = [None] * len(jobs)
    if client is not None:
        from pmfast.many import dask_runner

        distributed = dask_runner.require_distributed()
        if not isinstance(client, distributed.Client):
            raise TypeError(f"client must be a dask.distributed.Client, got {type(client).__name__}")
        check_model(model)
        threads = max(1, sum(client.nthreads().values()))
    elif hasattr(model, "with_data") and hasattr(model, "compiled_logp_func"):  # already compiled (numba backend)
        compiled, threads = model, 1
    else:
        compiled, threads = compile(model, passes=passes, progress=progress, **compile_kwargs), 1

    with FitProgress(len(jobs), progress) as bar:
        bar.running_now(min(threads, len(jobs)))

        def report(index, result):
            results[index] = result
            pending = sum(r is None for r in results)
            bar.finished(not isinstance(result, FitError), running=min(threads, pending))
            if on_result is not None:
                on_result(index, result)
            if isinstance(result, FitError) and errors == "raise":
                raise result

        try:
            if client is not None:
                dask_runner.run(
                    client, model, jobs, passes=passes, compile_kwargs=compile_kwargs, draws=draws, tune=tune,
                    chains=chains, sample_kwargs=sample_kwargs, report=report,
                )
            else:
                from pmfast.many.fit import fit_one

                for index, data, job_seed in jobs:
                    report(index, fit_one(compiled, index, data, job_seed, draws, tune, chains, sample_kwargs))
        except KeyboardInterrupt:
            for index, result in enumerate(results):
                if result is None:
                    results[index] = FitError(index, "not fitted: interrupted")
    return results
