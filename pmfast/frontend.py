"""Model → logp/dlogp graphs → pmfast mode → compiled model, and sampling it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

from pmfast.mode import PassSelection, get_mode
from pmfast.passes import registry

COMPILE_KWARGS = (
    "initial_points",
    "jitter_rvs",
    "var_names",
    "freeze_model",
    "default_initialization_strategy",
)


class ModelError(ValueError):
    """The model can't be compiled for NUTS (e.g. it has discrete free variables)."""


class FallbackWarning(UserWarning):
    """pmfast could not compile the model; it was compiled by nutpie's stock numba backend instead."""


def fallback_enabled() -> bool:
    """Whether a failed pmfast compile falls back to nutpie's stock compile (``PMFAST_FALLBACK=0``: raise)."""
    import os

    return os.environ.get("PMFAST_FALLBACK", "1") != "0"


def check_model(model) -> None:
    """Raise :class:`ModelError` for models NUTS can't sample."""
    import pymc as pm

    if not isinstance(model, pm.Model):
        raise ModelError(f"expected a pymc.Model, got {type(model).__name__}")
    if not model.free_RVs:
        raise ModelError("the model has no free random variables to sample")
    discrete = [rv.name for rv in model.free_RVs if rv.type.dtype.startswith(("int", "uint", "bool"))]
    if discrete:
        raise ModelError(
            f"the model has discrete free variables ({', '.join(discrete)}); "
            "NUTS samples continuous variables only: marginalize them or use pm.sample with a compound step"
        )


def stage_printer(stream=sys.stderr) -> Callable[[str, float | None], None]:
    """A ``stage(name, seconds)`` callback that prints compile progress lines."""

    def stage(name, seconds):
        if seconds is None:
            print(f"[pmfast] {name} …", file=stream, flush=True)
        else:
            print(f"[pmfast] {name}: {seconds:.2f} s", file=stream, flush=True)

    return stage


def compile(model, *, passes: PassSelection = "all", progress: bool | Callable = False, **kwargs):
    """Compile ``model`` for nutpie with pmfast's passes; a drop-in for ``nutpie.compile_pymc_model``.

    Returns nutpie's ``CompiledPyMCModel`` (a subclass carrying ``passes`` and
    stage ``timings``), ready for ``nutpie.sample``. ``kwargs`` are those of
    ``nutpie.compile_pymc_model`` for the numba backend.
    """
    from pmfast import nutpie_glue

    check_model(model)
    selected = tuple(p.name for p in registry.select(passes))
    backend = kwargs.pop("backend", "numba")
    if str(backend).lower() != "numba":
        raise ValueError(f"pmfast compiles for the numba backend only, got backend={backend!r}")
    nutpie_glue.check_options(kwargs)
    stage = stage_printer() if progress is True else (progress or None)
    try:
        return nutpie_glue.compile_numba(model, get_mode(selected), passes=selected, stage=stage, **kwargs)
    except Exception as error:
        if not fallback_enabled():
            raise
        return _stock_fallback(model, error, kwargs)


def _stock_fallback(model, error: Exception, kwargs: dict):
    """The model compiled by ``nutpie.compile_pymc_model`` (numba backend) after pmfast failed with ``error``.

    pmfast never stops a model that stock samples: a failure inside pmfast's passes or
    code generation (a bug, an op or dtype it does not handle) costs a stock compile and a
    :class:`FallbackWarning` naming the error, not the user's session. An error stock raises
    too (the model's own) is stock's, raised from pmfast's.
    """
    import warnings

    import nutpie

    from pmfast import nutpie_glue

    warnings.warn(
        f"pmfast could not compile this model ({type(error).__name__}: {error}); "
        "compiling it with nutpie's stock numba backend instead (PMFAST_FALLBACK=0 raises)",
        FallbackWarning,
        stacklevel=3,
    )
    compiled = nutpie.compile_pymc_model(model, backend="numba", **kwargs)
    return nutpie_glue.as_pmfast_model(compiled, fallback=f"{type(error).__name__}: {error}")


def sample(
    model,
    *,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    seed: int | None = None,
    passes: PassSelection = "all",
    progress: bool = True,
    **kwargs,
):
    """Compile ``model`` with pmfast and sample it with nutpie; returns ``arviz.InferenceData``.

    ``kwargs`` go to :func:`compile` when they are compile options, else to
    ``nutpie.sample`` (``cores``, ``target_accept``, …). A ``KeyboardInterrupt``
    during sampling returns the draws so far, with
    ``idata.attrs["pmfast_interrupted"] = True``.
    """
    import nutpie

    for name, value in (("draws", draws), ("chains", chains)):
        if int(value) < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    if int(tune) < 0:
        raise ValueError(f"tune must be non-negative, got {tune}")
    compile_kwargs = {k: kwargs.pop(k) for k in COMPILE_KWARGS if k in kwargs}
    from pmfast.loops import threads  # large loops share the cores the chains leave idle (#13)

    with threads.using(threads.threads_for(chains, kwargs.get("cores"))):
        compiled = compile(model, passes=passes, progress=progress, **compile_kwargs)
    t0 = time.perf_counter()
    sampler = nutpie.sample(
        compiled,
        draws=draws,
        tune=tune,
        chains=chains,
        seed=seed,
        progress_bar=progress,
        blocking=False,
        **kwargs,
    )
    interrupted = False
    try:
        idata = sampler.wait()
    except KeyboardInterrupt:
        interrupted = True
        idata = sampler.abort()
    except BaseException:
        sampler.cancel()
        raise
    idata.attrs["pmfast_interrupted"] = interrupted
    idata.attrs["pmfast_passes"] = ",".join(compiled.passes) or "none"
    idata.attrs["pmfast_compile_seconds"] = float(sum(compiled.timings.values()))
    idata.attrs["pmfast_sample_seconds"] = time.perf_counter() - t0
    return idata


def logp_dlogp_graph(model):
    """The raveled logp and gradient graphs exactly as nutpie builds them.

    Returns ``(joined, logp, grad, names, shapes)`` where ``joined`` is the one
    float64 input vector.
    """
    import pytensor
    import pytensor.tensor as pt
    from pymc.initial_point import make_initial_point_fn

    check_model(model)
    point = make_initial_point_fn(model=model, return_transformed=True)(0)
    value_vars = [model.rvs_to_values[rv] for rv in model.free_RVs]
    shapes = [tuple(np.shape(point[v.name])) for v in value_vars]
    rewrites = ["canonicalize", "stabilize"]
    if not model.check_bounds:
        rewrites.append("local_remove_check_parameter")
    logp = pytensor.graph.rewrite_graph(model.logp(), include=rewrites)
    grad = pt.concatenate([pt.as_tensor(g).ravel() for g in pytensor.grad(logp, value_vars)])
    sizes = [int(np.prod(s)) for s in shapes]
    joined = pt.TensorType("float64", shape=(sum(sizes),))(name="_unconstrained_point")
    offsets = np.cumsum([0, *sizes])
    replacements = {
        v: joined[offsets[i] : offsets[i + 1]].reshape(shapes[i]).astype(v.dtype)
        for i, v in enumerate(value_vars)
    }
    logp, grad = pytensor.clone_replace([logp, grad], replacements)
    return joined, logp, grad, [v.name for v in value_vars], shapes


def logp_dlogp_function(model, passes: PassSelection = "all", *, seed: int = 0):
    """The compiled raveled logp+gradient function nutpie samples, and its start point.

    Returns ``(fn, x0)``: ``fn(x) -> [logp, grad]`` takes one float64 vector;
    ``fn.vm.jit_fn(x, *shared)`` is the kernel nutpie calls. ``x0`` is the
    raveled initial point (value variables in ``model.free_RVs`` order).
    """
    from pymc.initial_point import make_initial_point_fn
    from pymc.pytensorf import compile as compile_pymc

    from pmfast.compiler import patching

    from pmfast.passes import data_hoist

    joined, logp, grad, names, _ = logp_dlogp_graph(model)
    selected = [p.name for p in registry.select(passes)]
    with model, patching.compiling():
        fn = compile_pymc((joined,), (logp, grad), mode=get_mode(selected))
        if data_hoist.PASS_NAME in selected:
            fn, _ = data_hoist.hoist(fn, "logp")
    point = make_initial_point_fn(model=model, return_transformed=True)(seed)
    x0 = np.concatenate([np.asarray(point[n], dtype="float64").ravel() for n in names])
    return fn, x0


def kernel_args(fn, x) -> tuple:
    """Arguments for ``fn.vm.jit_fn`` as nutpie passes them: the point, then shared values."""
    return (np.asarray(x, dtype="float64"), *[np.asarray(s.get_value()) for s in fn.get_shared()])
