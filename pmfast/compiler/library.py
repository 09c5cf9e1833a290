"""The numba code library a final function (an entry, a big graph function) is finalised in.

numba's lowering creates a function's code library, and ``finalize`` links the
functions it calls into its module, optimises it and emits machine code. pmfast
changes three things about that for its own final functions, each an option of
the compiler class (:func:`compiler`), carried out by a subclass of numba's
library class that a pass installs just before lowering:

* ``own_copies`` (every entry). numba links the functions an entry calls into its
  module as ``linkonce_odr`` definitions, and the object code exports them as
  weak symbols. A process that compiled (or loaded) a callee on its own already
  has that symbol in the JIT, and the entry's calls resolve to it; a process that
  loads the entry alone from the cache runs the entry's copies. The two are not
  always the same code (stoch_vol's chunked loop kernel: 28 FMAs compiled on its
  own, 26 as optimised inside the entry's module), so the first process on a
  machine got other values than every later one (12 of 12,018 gradient values,
  up to 2.7e-15 relative). After the module is optimised, the linked-in
  definitions are made internal: every process runs the code the entry was
  optimised with.
* ``release`` (big graphs). The lowering's Python objects (llvmlite IR, lowering
  state) form reference cycles that are garbage once lowering is done, but the
  collector rarely runs a full collection before ``finalize``, where the whole
  compile's memory peaks. The library frees them and trims the heap first. A full
  collection traverses every object the compile holds (hier_var 16 groups: 1.5 M
  objects, 1.7 CPU s, to free the entry's 0.26 M); instead the library keeps the
  IR modules it was given and, at ``finalize``, unlinks their functions, blocks and
  instructions (:func:`unlink_ir`), so reference counting frees them: numba has
  parsed their text by then and holds nothing of them (``PMFAST_IR_UNLINK=0``: the
  full collection).
* ``inline_threshold`` (a big graph's entry). The final module is optimised with
  that LLVM inlining threshold (numba leaves LLVM's default, 250 at O3).
* ``one_module_pass`` (a big graph's entry). numba runs LLVM's module pipeline twice
  on every final module: a "cheap" run (inlining, so that its reference-count pruning
  sees more increfs and decrefs in one function), then the full one. A big entry calls
  its node functions by symbol and inlines nothing (threshold 0): the first run only
  repeats the function simplification the full run does again (~3 of hier_var's
  ~19 CPU s of entry LLVM). It runs the full pipeline once (the reference-count
  pruning pass included, as numba adds it to every pass manager).
* ``function_opt`` and ``module_passes`` (a big graph's entry). numba optimises each
  function as its IR is added (the function pipeline at its O3), then the final module
  (the module pipeline at O3, which runs the function simplification again inside).
  A big entry is glue: calls by symbol, their status checks, array structs taken apart
  and rebuilt, reference counts. hier_var 16's (~14k LLVM instructions after
  optimisation) spent 2.1 CPU s in the function pipeline (InstCombine and
  CorrelatedValuePropagation most of it) and 1.2 s in the module pipeline, which
  found nothing more to do there than fold what GlobalDCE and IPSCCP see (the object
  is 1.3% larger without it). ``function_opt``: the function pipeline's level;
  ``module_passes`` False: no module pipeline (the reference-count pruning pass runs
  in the function pipeline too, as numba adds it to both).
* ``codegen_opt`` (a big graph's entry). Its machine code is emitted by a target
  machine of that codegen optimisation level (LLVM's ``CodeGenOptLevel``, 0-3; numba's
  JIT uses 3) and handed to numba's JIT through its object-code hook, as numba loads a
  cached object. A big entry is one function of ~1,200 calls whose array arguments
  stay live across many calls: at level 3, stack-slot colouring and the greedy register
  allocator took 5 of its 8 CPU s of machine code (hier_var, 8 groups); level 0 (fast
  instruction selection and register allocation) ~0.8 s. Its IR is optimised as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os

#: The options of :func:`compiler`, in the order they are given.
OPTIONS = ("own_copies", "release", "inline_threshold", "one_module_pass", "codegen_opt", "function_opt", "module_passes")


def release_memory(modules=None) -> None:
    """Free the lowering's garbage and hand free heap pages back to the OS (glibc only).

    ``modules``: the llvmlite IR modules lowered into the library being finalised, unlinked
    (:func:`unlink_ir`) instead of a full collection; None (or ``PMFAST_IR_UNLINK=0``): ``gc.collect()``.
    """
    if modules is not None and ir_unlink_enabled():
        for module in modules:
            unlink_ir(module)
    else:
        gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):  # not glibc
        pass


def ir_unlink_enabled() -> bool:
    """Whether a big entry's library frees its IR by unlinking it (``PMFAST_IR_UNLINK=0``: a full collection)."""
    return os.environ.get("PMFAST_IR_UNLINK", "1") != "0"


def unlink_ir(module) -> None:
    """Empty the objects an llvmlite IR module owns, so that reference counting frees them.

    Instructions point at their block and operands, blocks and arguments at their function, a
    function at its return value and back, the module at its functions: cycles the collector would
    have to find. The module's own objects (functions, their arguments, blocks and instructions:
    made for this module by its builders) are emptied; types and constants, which numba shares
    between modules, are left alone. Only for a module whose text the code library has already
    parsed: the module is unusable afterwards.
    """
    from llvmlite import ir

    for value in list(module.globals.values()):
        if isinstance(value, ir.Function):
            for block in value.blocks:
                for instruction in block.instructions:
                    instruction.__dict__.clear()
                block.__dict__.clear()
            for argument in value.args:
                argument.__dict__.clear()
            value.__dict__.clear()
    module.globals.clear()
    module.metadata.clear()
    module.namedmetadata.clear()


@contextlib.contextmanager
def inline_threshold(codegen, threshold: int):
    """While active, ``codegen``'s LLVM pass builders use inlining threshold ``threshold``.

    numba builds every pass manager through ``codegen._pass_builder``; the caller
    holds numba's compiler lock.
    """
    import llvmlite.binding as ll
    from numba.core import config

    def pass_builder(**kwargs):
        pto = ll.create_pipeline_tuning_options()
        pto.speed_level = kwargs.pop("opt", config.OPT)
        pto.loop_vectorization = kwargs.pop("loop_vectorize", config.LOOP_VECTORIZE)
        pto.slp_vectorization = kwargs.pop("slp_vectorize", config.SLP_VECTORIZE)
        pto.inlining_threshold = threshold
        return ll.create_pass_builder(codegen._tm, pto)

    codegen._pass_builder = pass_builder
    try:
        yield
    finally:
        del codegen._pass_builder


def optimize_once(library) -> None:
    """numba's ``_optimize_final_module`` without its first ("cheap") module pipeline run."""
    mpm, mpb = library._codegen._module_pass_manager()
    with library._recorded_timings.record("Module passes (full optimization)", mpb):
        mpm.run(library._final_module, mpb)


@functools.lru_cache(maxsize=None)
def target_machine(opt: int):
    """A target machine like numba's JIT's (host CPU and features, static relocation, JIT code
    model) whose code generation is optimised at level ``opt``."""
    import llvmlite.binding as ll
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    target = ll.Target.from_triple(ll.get_process_triple())
    return target.create_target_machine(
        cpu=codegen._get_host_cpu_name(),
        features=codegen._tm_features,
        opt=opt,
        reloc="static",
        codemodel="jitdefault",
        jit=True,
    )


def emit_with(library, opt: int) -> bytes | None:
    """The object code of ``library``'s final module emitted at codegen level ``opt`` (from a copy:
    code generation rewrites the IR it runs on), or None if the library caches no object code."""
    if not getattr(library, "_object_caching_enabled", False) or library._compiled_object is not None:
        return None
    return target_machine(opt).emit_object(library._final_module.clone())


@functools.lru_cache(maxsize=None)
def library_class(
    base: type,
    own_copies: bool,
    release: bool,
    threshold: int | None,
    one_pass: bool = False,
    codegen_opt: int | None = None,
    function_opt: int | None = None,
    module_passes: bool = True,
) -> type:
    """``base`` (numba's library class) finalising as the options say (see the module docstring)."""
    from llvmlite.binding import Linkage

    members = {}
    if function_opt is not None:

        def _optimize_functions(self, ll_module):
            ll_module.data_layout = self._codegen._data_layout
            for func in ll_module.functions:
                fpm, pb = self._codegen._function_pass_manager(opt=function_opt)
                with self._recorded_timings.record(f"Function passes on {func.name!r}", pb):
                    fpm.run(func, pb)

        members["_optimize_functions"] = _optimize_functions
    if release:

        def add_ir_module(self, ir_module):
            base.add_ir_module(self, ir_module)  # parsed: only the Python objects are left
            self.__dict__.setdefault("_pmfast_lowered", []).append(ir_module)

        def finalize(self):
            release_memory(self.__dict__.pop("_pmfast_lowered", None))
            return base.finalize(self)

        members["add_ir_module"] = add_ir_module
        members["finalize"] = finalize
    if not module_passes:

        def _optimize_final_module(self):
            pass  # the functions were optimised as they were added (see the module docstring)

        members["_optimize_final_module"] = _optimize_final_module
    elif threshold is not None or one_pass:

        def _optimize_final_module(self):
            optimize = optimize_once if one_pass else base._optimize_final_module
            if threshold is None:
                return optimize(self)
            with inline_threshold(self._codegen, threshold):
                return optimize(self)

        members["_optimize_final_module"] = _optimize_final_module
    if codegen_opt is not None:

        def _finalize_specific(self):
            obj = emit_with(self, codegen_opt)
            if obj is None:  # no object-code hook to go through: numba's JIT emits it
                return base._finalize_specific(self)
            self._compiled_object = obj  # numba's JIT takes it (and clears it) in its getbuffer hook
            base._finalize_specific(self)
            self._compiled_object, self._compiled = obj, True  # for numba's cache (serialize_using_object_code)

        members["_finalize_specific"] = _finalize_specific
    if own_copies:

        def _finalize_final_module(self):
            for fn in self._final_module.functions:
                if not fn.is_declaration and fn.linkage == Linkage.linkonce_odr:
                    fn.linkage = "internal"
            return base._finalize_final_module(self)

        members["_finalize_final_module"] = _finalize_final_module
    if not members:
        return base
    return type(f"Pmfast{base.__name__}", (base,), members)


def install(state, options: dict) -> None:
    """Give ``state`` (a numba pipeline's, before lowering) the library ``options`` ask for.

    What numba's ``NativeLowering`` would create (``create_library`` plus object
    caching), or the library the pipeline was given, with its class swapped.
    """
    library = state.library
    if library is None:
        library = state.targetctx.codegen().create_library(state.func_id.func_qualname)
        library.enable_object_caching()
        state.library = library
    library.__class__ = library_class(
        type(library),
        options.get("own_copies", False),
        options.get("release", False),
        options.get("inline_threshold"),
        options.get("one_module_pass", False),
        options.get("codegen_opt"),
        options.get("function_opt"),
        options.get("module_passes", True),
    )


_classes: dict = {}


def compiler(base=None, **options) -> type:
    """A numba compiler class: ``base``'s pipelines (numba's default) with the library ``options`` ask for.

    ``options``: ``own_copies``, ``release``, ``one_module_pass``, ``module_passes`` (bools),
    ``inline_threshold``, ``codegen_opt``, ``function_opt`` (ints or None); see the module docstring. The same arguments give the same class.
    """
    from numba.core.compiler import Compiler
    from numba.core.compiler_machinery import AnalysisPass, register_pass
    from numba.core.typed_passes import NativeLowering

    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise TypeError(f"unknown library options: {sorted(unknown)}")
    key = (base, tuple(sorted(options.items())))
    if key in _classes:
        return _classes[key]

    if "pass" not in _classes:

        @register_pass(mutates_CFG=False, analysis_only=False)
        class PmfastLibrary(AnalysisPass):
            _name = "pmfast_library"

            def __init__(self):
                AnalysisPass.__init__(self)

            def run_pass(self, state):
                install(state, type(state.pipeline).library_options)
                return False

        _classes["pass"] = PmfastLibrary

    library_pass = _classes["pass"]

    class PmfastCompiler(base if base is not None else Compiler):
        library_options = dict(options)

        def define_pipelines(self):
            pipelines = super().define_pipelines()
            for pm in pipelines:
                at = next((i for i, (p, _) in enumerate(pm.passes) if p is NativeLowering), None)
                if at is not None and not any(p is library_pass for p, _ in pm.passes):
                    pm.passes.insert(at, (library_pass, "pmfast's code library"))
                    pm.finalize()
            return pipelines

    _classes[key] = PmfastCompiler
    return PmfastCompiler
