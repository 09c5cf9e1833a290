"""The only module that touches nutpie's private helpers.

``nutpie.compile_pymc_model`` hard-codes the ``"NUMBA"`` mode. To compile with
a pmfast mode we repeat its numba path here with the mode as a parameter,
using the same private helpers it uses to build the graphs, the initial point
and the coordinates; the callbacks nutpie calls are pmfast's
(:mod:`pmfast.compiler`). ``tests/test_nutpie_glue.py`` fails loudly when
nutpie changes any of the helpers.
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
    "update_user_data",
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
    kernels: tuple = ()
    """The compiled entries (:class:`pmfast.compiler.entry.Entry`); ``user_data`` holds their addresses."""


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
    **unknown,
) -> PmfastCompiledModel:
    """``nutpie.compile_pymc_model(model, backend="numba")`` with ``mode`` instead of ``"NUMBA"``.

    ``stage(name, seconds_or_None)`` is called when a compile stage starts and ends.
    """
    if unknown:
        raise TypeError(
            f"pmfast.compile got unexpected options {sorted(unknown)} "
            "(nutpie passes these to numba.cfunc; pmfast compiles its callbacks itself)"
        )
    from pymc.initial_point import make_initial_point_fn

    from pmfast import compiler
    from pmfast.compiler import callbacks, entry
    from pymc.model.transform.optimization import freeze_dims_and_data

    check_nutpie()
    compiler.setup()
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
    user_data = callbacks.with_header(_np_compile.make_user_data(shared_vars, shared_data))

    def spec(kind, fn, n_out):
        names = [v.name for v in fn.get_shared()]
        return entry.describe(kind, fn, user_data, names, [shared_data[n].dtype for n in names], n_dim, n_out)

    entries = {}
    for kind, label, fn, n_out in (("logp", "logp+grad", logp_fn_pt, n_dim), ("expand", "expand", expand_fn_pt, n_expanded)):
        with timed(f"numba: {label} kernel") as t:
            entries[kind] = entry.compile_entry(spec(kind, fn, n_out), fn)
            t.rename(f"numba: {label} kernel" + (" (cached)" if entries[kind].cache_hit else ""))
    with timed("numba: logp+grad wrapper") as t:
        cfuncs = callbacks.compiled()
        t.rename("numba: logp+grad wrapper (cached)" if all(c.cache_hits for c in cfuncs.values()) else "numba: logp+grad wrapper")
    callbacks.set_header(user_data, entries["logp"].address, entries["expand"].address, n_dim, n_expanded)
    logp_cfunc, expand_cfunc = cfuncs["logp"], cfuncs["expand"]

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
        kernels=(entries["logp"], entries["expand"]),
    )


class _Timed:
    def __init__(self, name, timings, stage):
        self.name, self.timings, self.stage = name, timings, stage

    def __enter__(self):
        if self.stage is not None:
            self.stage(self.name, None)
        self.t0 = time.perf_counter()
        return self

    def rename(self, name):
        """Report the stage under ``name`` (e.g. once it is known to be a cache load)."""
        self.name = name

    def __exit__(self, *exc):
        self.timings[self.name] = time.perf_counter() - self.t0
        if self.stage is not None and exc[0] is None:
            self.stage(self.name, self.timings[self.name])
