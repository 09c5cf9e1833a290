"""The only module that touches nutpie's private helpers.

``nutpie.compile_pymc_model`` hard-codes the ``"NUMBA"`` mode. To compile with
a pmfast mode we repeat its numba path here with the mode as a parameter,
using the same private helpers it uses to build the graphs, the initial point
and the coordinates; the callbacks nutpie calls are pmfast's
(:mod:`pmfast.compiler`). ``tests/test_nutpie_glue.py`` fails loudly when
nutpie changes any of the helpers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
import types
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
    "_compute_shapes",
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
    cpu_timings: dict[str, float] = field(default_factory=dict)
    """CPU seconds of this process per stage (``timings`` are wall seconds)."""
    fallback: str | None = None
    """Why pmfast's compile failed, when nutpie's stock compile made this model instead."""
    derived_data: dict = field(default_factory=dict)
    """Arrays computed from ``shared_data`` by the ``data_hoist`` pass, read by the kernels like shared data."""
    derivations: tuple = ()
    """How ``derived_data`` is computed (:class:`pmfast.passes.data_hoist.Derivation`)."""

    def with_data(self, **updates):
        """nutpie's ``with_data``, and the arrays derived from the data computed again from the new data."""
        new = super().with_data(**updates)
        stale = [d for d in self.derivations if set(updates) & set(d.sources)]
        if not stale:
            return new
        derived = dict(self.derived_data)
        for derivation in stale:
            derived.update(derivation(new.shared_data))
        user_data = _np_compile.update_user_data(new.user_data, derived)
        return dataclasses.replace(new, user_data=user_data, derived_data=derived)


def as_pmfast_model(compiled, *, fallback: str | None = None) -> PmfastCompiledModel:
    """nutpie's own ``CompiledPyMCModel`` as a :class:`PmfastCompiledModel` with no passes."""
    import dataclasses

    fields = {f.name: getattr(compiled, f.name) for f in dataclasses.fields(_np_compile.CompiledPyMCModel)}
    return PmfastCompiledModel(**fields, passes=(), fallback=fallback)


#: Options of ``compile_numba`` (and so of ``pmfast.compile``) besides the model, mode, passes and stage.
COMPILE_OPTIONS = ("initial_points", "jitter_rvs", "default_initialization_strategy", "var_names", "freeze_model")


def check_options(kwargs) -> None:
    """Raise ``TypeError`` for options ``pmfast.compile`` does not take."""
    unknown = set(kwargs) - set(COMPILE_OPTIONS)
    if unknown:
        raise TypeError(
            f"pmfast.compile got unexpected options {sorted(unknown)} "
            "(nutpie passes these to numba.cfunc; pmfast compiles its callbacks itself)"
        )


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
    check_options(unknown)
    from pmfast import compiler
    from pmfast.compiler import collector, overloads, patching

    check_nutpie()
    compiler.setup()
    _install_trace_shapes()
    with patching.compiling(), collector.relaxed(), overloads.plain_errors(), _python_vm(), _creation_traces():
        return _compile_numba(
            model,
            mode,
            passes=passes,
            initial_points=initial_points,
            jitter_rvs=jitter_rvs,
            default_initialization_strategy=default_initialization_strategy,
            var_names=var_names,
            freeze_model=freeze_model,
            stage=stage,
        )


def _install_trace_shapes() -> None:
    """nutpie's ``_compute_shapes`` answered by :func:`pmfast.trace_shapes.trace_shapes` inside pmfast's compile.

    Installed once as a compile-scoped dispatch (:func:`pmfast.compiler.patching.scoped`): outside
    a pmfast compile, and in other threads, nutpie's own runs. Inside, nutpie's runs when
    ``trace_shapes`` declines (a shape that needs a draw), fails, or ``PMFAST_TRACE_SHAPES=0``.
    """
    from pmfast.compiler import patching

    if getattr(_np_compile._compute_shapes, "_pmfast", False):
        return
    _np_compile._compute_shapes = patching.scoped(_np_compile._compute_shapes, _shapes_without_point)


def _shapes_without_point(model):
    """The traced variables' shapes without an initial point, else nutpie's ``_compute_shapes``."""
    from pmfast import trace_shapes

    nutpies = _np_compile._compute_shapes.__wrapped__
    if not trace_shapes.enabled():
        return nutpies(model)
    try:
        shapes = trace_shapes.trace_shapes(model)
    except Exception:
        shapes = None
    return nutpies(model) if shapes is None else shapes


@contextlib.contextmanager
def _creation_traces():
    """pytensor's compile-time creation traces for the graphs pymc and nutpie build meanwhile.

    Every variable and node pytensor creates records the stack that created it
    (``tag.trace``, up to ``config.traceback__limit`` = 8 frames, each with its
    source line from ``linecache``), for error messages about the node. While
    rewriting, pytensor itself lowers the limit to ``traceback__compile_limit`` (0):
    the nodes a compile creates come from pytensor, not from the user's code. The
    logp graph, its gradient and nutpie's joined point are built by pymc and nutpie
    inside ``pmfast.compile`` (~4,700 nodes and variables for negbin: ~25 ms of a
    0.6 s warm compile), so pmfast extends the same limit to them. The model's own
    variables, created before, keep their traces. A limit the user set is left alone.
    """
    from pytensor import config

    param = config._config_var_dict["traceback__limit"]
    if not param.is_default or config.traceback__limit != param.default:
        yield
        return
    with config.change_flags(traceback__limit=config.traceback__compile_limit):
        yield


@contextlib.contextmanager
def _python_vm():
    """pytensor's Python VM for the helper functions compiled meanwhile (initial point, shapes).

    pymc and nutpie compile them in pytensor's ``FAST_COMPILE`` mode, whose VM
    imports pytensor's C VM extension, which a new compile directory first
    builds with the C compiler (~0.7 s). pmfast runs those two functions once
    per chain and needs no C VM: while it compiles, that import fails and
    pytensor falls back to its Python VM (as it does without a C compiler).
    Nothing changes if the C VM is already loaded.

    The VM also imports ``MissingGXX`` from ``pytensor.link.c.exceptions``,
    which imports setuptools (~70 ms); meanwhile a stand-in module defines
    the two exception classes, and the real module is importable again after.
    """
    name, errors = "pytensor.link.c.cvm", "pytensor.link.c.exceptions"
    if name in sys.modules:
        yield
        return
    sys.modules[name] = None
    stand_in = None
    if errors not in sys.modules:
        stand_in = types.ModuleType(errors)
        stand_in.MissingGXX = type("MissingGXX", (Exception,), {"__module__": errors})
        stand_in.CompileError = type("CompileError", (Exception,), {"__module__": errors})
        sys.modules[errors] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(name, "missing") is None:
            del sys.modules[name]
        if stand_in is not None and sys.modules.get(errors) is stand_in:
            del sys.modules[errors]


def _compile_numba(
    model, mode, *, passes, initial_points, jitter_rvs, default_initialization_strategy, var_names, freeze_model, stage
) -> PmfastCompiledModel:
    from pmfast.compiler import prefetch

    timings: dict[str, float] = {}
    cpu_timings: dict[str, float] = {}

    def timed(name):
        return _Timed(name, timings, stage, cpu_timings)

    try:  # the model's linear algebra compiled on the idle core during the graph stage
        fetch = prefetch.start(model)
    except Exception:
        fetch = None
    try:
        return _compile_stages(
            model, mode, fetch, timings, cpu_timings, timed, passes=passes, initial_points=initial_points,
            jitter_rvs=jitter_rvs, default_initialization_strategy=default_initialization_strategy,
            var_names=var_names, freeze_model=freeze_model,
        )
    finally:
        if fetch is not None:
            cpu_timings["numba: prefetch"] = fetch.finish()


def _compile_stages(
    model, mode, fetch, timings, cpu_timings, timed, *, passes, initial_points, jitter_rvs,
    default_initialization_strategy, var_names, freeze_model,
) -> PmfastCompiledModel:
    from pymc.initial_point import make_initial_point_fn
    from pymc.model.transform.optimization import freeze_dims_and_data

    from pmfast.compiler import callbacks, collector, entry, entry_spec, handover
    from pmfast.passes import data_hoist

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

    derivations = ()
    if data_hoist.PASS_NAME in passes:
        with timed("data_hoist"):
            logp_fn_pt, logp_derived = data_hoist.hoist(logp_fn_pt, "logp")
            expand_fn_pt, expand_derived = data_hoist.hoist(expand_fn_pt, "expand")
            derivations = tuple(d for d in (logp_derived, expand_derived) if d is not None)
    derived_names = {name for d in derivations for name in d.names}

    shared_data, shared_vars, derived_data = {}, {}, {}
    seen = set()
    for val in [*logp_fn_pt.get_shared(), *expand_fn_pt.get_shared()]:
        if val.name in shared_vars and val not in seen:
            raise ValueError(f"Shared variables must have unique names: {val.name}")
        store = derived_data if val.name in derived_names else shared_data
        store[val.name] = np.array(val.get_value(), order="C", copy=True)
        shared_vars[val.name] = val
        seen.add(val)
    for val in (*shared_data.values(), *derived_data.values()):
        val.flags.writeable = False
    user_data = callbacks.with_header(_np_compile.make_user_data(shared_vars, {**shared_data, **derived_data}))

    def spec(kind, fn, n_out):
        names = [v.name for v in fn.get_shared()]
        data = {**shared_data, **derived_data}
        return entry_spec.describe(kind, fn, user_data, names, [data[n].dtype for n in names], n_dim, n_out)

    prepared = {
        "logp": entry.prepare_entry(spec("logp", logp_fn_pt, n_dim), logp_fn_pt),
        "expand": entry.prepare_entry(spec("expand", expand_fn_pt, n_expanded), expand_fn_pt),
    }
    # a forked process (the other core) compiles the expand entry and the logp+grad entry's parts
    # while this one compiles the logp+grad entry (a whole one) or its parts too, each taking the next
    # as it is done, and the deferred callees this one sends it; this one then loads what the other
    # compiled (compiler.handover)
    expand, logp = prepared["expand"], prepared["logp"]
    entries = {}

    def compile_logp():
        entries["logp"] = logp.compile()

    if fetch is not None:
        fetch.stop()  # the child ends after the compile it is in
    collector.checkpoint()  # the graphs stay alive through the numba stage: its full collections skip them
    with timed("numba: logp+grad kernel") as t:
        worker = handover.share(handover.jobs(logp, expand) if logp.parts else handover.jobs(expand), None if logp.parts else compile_logp)
        try:
            if worker is not None and logp.parts:
                worker.finish()
            if "logp" not in entries:
                entries["logp"] = logp.compile()
        except BaseException:
            if worker is not None:
                worker.finish()
            raise
        shared = f" ({len(logp.parts)} parts, with a worker)" if worker and logp.parts else f" ({len(logp.parts)} parts)" if logp.parts else ""
        t.rename("numba: logp+grad kernel" + (" (cached)" if entries["logp"].cache_hit else "") + shared)
    with timed("numba: expand kernel") as t:
        if worker is not None:
            worker.finish()
            cpu_timings["numba: worker"] = worker.cpu_seconds
        entries["expand"] = expand.compile()
        t.rename("numba: expand kernel" + (" (cached)" if entries["expand"].cache_hit else "") + (" (in parallel)" if worker else ""))
    with timed("numba: logp+grad wrapper") as t:
        cfuncs = callbacks.compiled()
        t.rename("numba: logp+grad wrapper (cached)" if all(c.cache_hits for c in cfuncs.values()) else "numba: logp+grad wrapper")
    callbacks.set_header(
        user_data, entries["logp"].address, entries["expand"].address, n_dim, n_expanded,
        entries["logp"].table_address, entries["expand"].table_address,
    )
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
        cpu_timings=cpu_timings,
        derived_data=derived_data,
        derivations=derivations,
    )


class _Timed:
    def __init__(self, name, timings, stage, cpu_timings=None):
        self.name, self.timings, self.stage = name, timings, stage
        self.cpu_timings = {} if cpu_timings is None else cpu_timings

    def __enter__(self):
        if self.stage is not None:
            self.stage(self.name, None)
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def rename(self, name):
        """Report the stage under ``name`` (e.g. once it is known to be a cache load)."""
        self.name = name

    def __exit__(self, *exc):
        self.timings[self.name] = time.perf_counter() - self.t0
        self.cpu_timings[self.name] = time.process_time() - self.c0
        if self.stage is not None and exc[0] is None:
            self.stage(self.name, self.timings[self.name])


def logp_kernel(fn):
    """The sampler's logp+grad path for a compiled pytensor function ``fn(x) -> [logp, grad]``.

    ``fn`` is what :func:`pmfast.logp_dlogp_function` returns. Builds nutpie's
    ``user_data`` for its shared variables, compiles the entry
    (:mod:`pmfast.compiler.entry`) and returns ``kernel(x) -> (code, logp, grad)``
    calling the model-independent callback exactly as nutpie does. For tests
    and benchmarks of the code nutpie runs.
    """
    from pmfast import compiler
    from pmfast.compiler import callbacks, entry, entry_spec, overloads, patching

    compiler.setup()
    shared = list(fn.get_shared())
    shared_data = {v.name: np.array(v.get_value(), order="C", copy=True) for v in shared}
    user_data = callbacks.with_header(_np_compile.make_user_data({v.name: v for v in shared}, shared_data))
    n_dim = int(fn.maker.fgraph.inputs[0].type.shape[0])
    names = [v.name for v in shared]
    spec = entry_spec.describe("logp", fn, user_data, names, [shared_data[n].dtype for n in names], n_dim, n_dim)
    with patching.compiling(), overloads.plain_errors():
        compiled = entry.compile_entry(spec, fn)
    cfunc = callbacks.compiled()["logp"]
    callbacks.set_header(user_data, compiled.address, 0, n_dim, 0, compiled.table_address)

    class Kernel:
        entry = compiled
        user_data_ = user_data
        data = shared_data

        def __call__(self, x):
            model = _Callbacks(n_dim, cfunc, user_data)
            return callbacks.logp_at(model, x)

    return Kernel()


@dataclass(frozen=True)
class _Callbacks:
    n_dim: int
    compiled_logp_func: object
    user_data: np.ndarray
