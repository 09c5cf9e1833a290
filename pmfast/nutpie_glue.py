"""The only module that touches nutpie's private helpers.

``nutpie.compile_pymc_model`` hard-codes the ``"NUMBA"`` mode. To compile with
a pmfast mode we repeat its numba path here with the mode as a parameter,
using the same private helpers it uses. ``tests/test_nutpie_glue.py`` fails
loudly when nutpie changes any of them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from functools import wraps

import nutpie
import numpy as np
from nutpie import compile_pymc as _np_compile

NUTPIE_VERSION = "0.16.8"

PRIVATE_HELPERS = (
    "_make_functions",
    "make_user_data",
    "_make_c_logp_func",
    "_make_c_expand_func",
    "_prepare_dims_and_coords",
    "CompiledPyMCModel",
)


def check_nutpie() -> None:
    """Raise if the installed nutpie is not the one this glue was written against."""
    if nutpie.__version__ != NUTPIE_VERSION:
        raise RuntimeError(
            f"pmfast's nutpie glue was written for nutpie {NUTPIE_VERSION}, found {nutpie.__version__}"
        )
    missing = [h for h in PRIVATE_HELPERS if not hasattr(_np_compile, h)]
    if missing:
        raise RuntimeError(f"nutpie {nutpie.__version__} lacks private helpers pmfast uses: {missing}")


@dataclass(frozen=True)
class PmfastCompiledModel(_np_compile.CompiledPyMCModel):
    """nutpie's ``CompiledPyMCModel`` plus what pmfast knows about the compile."""

    passes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)


def _with_lock(func):
    lock = threading.Lock()

    @wraps(func)
    def wrapper(*args, **kwargs):
        with lock:
            return func(*args, **kwargs)

    return wrapper


def compile_numba(
    model,
    mode,
    *,
    passes: tuple[str, ...] = (),
    initial_points=None,
    jitter_rvs=None,
    default_initialization_strategy="support_point",
    var_names=None,
    freeze_model: bool | None = None,
    stage=None,
    **cfunc_kwargs,
) -> PmfastCompiledModel:
    """``nutpie.compile_pymc_model(model, backend="numba")`` with ``mode`` instead of ``"NUMBA"``.

    ``stage(name)`` is a context manager factory used to report compile stages.
    """
    from pmfast import wrappers
    from pymc.initial_point import make_initial_point_fn
    from pymc.model.transform.optimization import freeze_dims_and_data

    check_nutpie()
    timings: dict[str, float] = {}

    def timed(name):
        return _Timed(name, timings, stage)

    with timed("initial point"):
        if freeze_model:
            model = freeze_dims_and_data(model)
        if default_initialization_strategy == "support_point" and jitter_rvs is None:
            jitter_rvs = set(model.free_RVs)
        pymc_initial_point_fn = _with_lock(
            make_initial_point_fn(
                model=model,
                overrides=initial_points,
                default_strategy=default_initialization_strategy,
                jitter_rvs=jitter_rvs,
                return_transformed=True,
            )
        )

    with timed("graphs + rewrites"):
        n_dim, n_expanded, logp_fn_pt, expand_fn_pt, initial_point_fn, shape_info = (
            _np_compile._make_functions(
                model,
                mode=mode,
                compute_grad=True,
                join_expanded=True,
                pymc_initial_point_fn=pymc_initial_point_fn,
                var_names=var_names,
            )
        )

    shared_data, shared_vars = {}, {}
    seen = set()
    for val in [*logp_fn_pt.get_shared(), *expand_fn_pt.get_shared()]:
        if val.name in shared_data and val not in seen:
            raise ValueError(f"Shared variables must have unique names: {val.name}")
        shared_data[val.name] = np.array(val.get_value(), order="C", copy=True)
        shared_vars[val.name] = val
        seen.add(val)
    for val in shared_data.values():
        val.flags.writeable = False
    user_data = _np_compile.make_user_data(shared_vars, shared_data)

    callbacks = {
        "logp+grad": wrappers.logp_wrapper(
            n_dim,
            logp_fn_pt.vm.jit_fn,
            user_data,
            [v.name for v in logp_fn_pt.get_shared()],
            shared_data,
            **cfunc_kwargs,
        ),
        "expand": wrappers.expand_wrapper(
            n_dim,
            n_expanded,
            expand_fn_pt.vm.jit_fn,
            user_data,
            [v.name for v in expand_fn_pt.get_shared()],
            shared_data,
            **cfunc_kwargs,
        ),
    }
    cfuncs = {}
    for name, wrapper in callbacks.items():
        if not wrapper.cached:
            with timed(f"numba: {name} kernel"):
                wrapper.compile_kernel()
        with timed(f"numba: {name} wrapper" + (" (cached)" if wrapper.cached else "")):
            cfuncs[name] = wrapper.compile(**cfunc_kwargs)
    logp_cfunc, expand_cfunc = cfuncs["logp+grad"], cfuncs["expand"]

    dims, coords = _np_compile._prepare_dims_and_coords(model, shape_info)
    return PmfastCompiledModel(
        _n_dim=n_dim,
        dims=dims,
        _coords=coords,
        _shapes={name: tuple(shape) for name, _, shape in zip(*shape_info)},
        compiled_logp_func=logp_cfunc,
        compiled_expand_func=expand_cfunc,
        initial_point_func=initial_point_fn,
        shared_data=shared_data,
        user_data=user_data,
        n_expanded=n_expanded,
        shape_info=shape_info,
        logp_func=logp_fn_pt,
        expand_func=expand_fn_pt,
        passes=tuple(passes),
        timings=timings,
    )


class _Timed:
    def __init__(self, name, timings, stage):
        self.name, self.timings, self.stage = name, timings, stage

    def __enter__(self):
        if self.stage is not None:
            self.stage(self.name, None)
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.timings[self.name] = time.perf_counter() - self.t0
        if self.stage is not None and exc[0] is None:
            self.stage(self.name, self.timings[self.name])
