"""Every replacement pmfast makes of numba's, pytensor's or Python's internals, in one list.

Each :class:`Patch` names what it replaces (``module:qualified.name``), the pmfast module that
holds the replacement and argues it equivalent, why it exists, its scope, and the tests of the
owner's suite that cover the replaced area:

* ``compile``: active only inside a pmfast compile and restored on the way out, exceptions
  included: :func:`compiling` (entered by :func:`pmfast.nutpie_glue.compile_numba`,
  :func:`~pmfast.nutpie_glue.logp_kernel`, :func:`pmfast.logp_dlogp_function` and pmfast's
  linker, including the lazy first-call compile of the graph functions it makes) counts a
  thread-local depth; the replacement, installed once, calls the original whenever that depth is
  0 (other threads, the user's own compiles), see :func:`scoped`;
* ``self-limiting``: installed once, but acts only on objects pmfast made (a library pmfast
  marked, a dispatcher pmfast registered) and calls the original for everything else;
* ``enabled``: between ``pmfast.enable()`` and ``pmfast.disable()`` (the plugin), restored after;
* ``bench``: only in the worker processes of pmfast's benchmarks;
* ``process``: installed on the first pmfast compile and kept: the module's docstring says why it
  cannot be scoped; the owner tests listed are the proof that nothing else changes
  (``tools/`` runs them with every patch installed).

This module imports nothing of pmfast's: it is the bottom of the import layering, so any module
may consult it. ``pmfast.compiler.patches()`` returns :data:`PATCHES`; docs/compile.md shows the
same table (a test keeps the two equal).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from dataclasses import dataclass

_state = threading.local()


def active() -> bool:
    """Whether this thread is inside a pmfast compile (:func:`compiling`).

    A ``compile``-scoped replacement is installed once and asks this on every call: outside a
    pmfast compile, and in every other thread, it calls the original. Nothing is installed or
    removed while another thread may be compiling, so there is no install/uninstall race.
    """
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def compiling():
    """The ``compile`` scope: this thread's pmfast compile, nested entries counted, left on any exit."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def scoped(original, replacement):
    """A function calling ``replacement`` inside :func:`compiling` and ``original`` outside it."""

    def dispatch(*args, **kwargs):
        if active():
            return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    dispatch.__name__ = getattr(original, "__name__", "dispatch")
    dispatch.__qualname__ = getattr(original, "__qualname__", dispatch.__name__)
    dispatch.__doc__ = getattr(original, "__doc__", None)
    dispatch.__wrapped__ = original
    dispatch._pmfast = True
    dispatch._pmfast_scoped = replacement  #: every compile-scoped replacement that asks :func:`active` has it
    return dispatch


@dataclass(frozen=True)
class Patch:
    target: str  #: ``module:qualified.name`` of what is replaced
    by: str  #: the pmfast module holding the replacement (its docstring argues it equivalent)
    why: str
    scope: str  #: one of :data:`SCOPES` (see the module docstring)
    owner_tests: tuple[str, ...] = ()

    def current(self):
        """The object now bound at :attr:`target`."""
        module, _, name = self.target.partition(":")
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj


SCOPES = ("compile", "self-limiting", "enabled", "bench", "process")

_NUMBA_OVERLOADS = ("numba.tests.test_array_manipulation", "numba.tests.test_exceptions", "numba.tests.test_array_constants")

PATCHES: tuple[Patch, ...] = (
    Patch(
        "numba.np.arrayobj:raise_with_shape_context",
        "pmfast.compiler.overloads",
        "the slice-assignment error path's message formatting was ~5 s of every cold compile; cached on disk (same message, same exception class; the overload's template answers per scope, its implementation cache included)",
        "compile",
        _NUMBA_OVERLOADS,
    ),
    Patch(
        "numba.np.arrayobj:_ol_array_allocate",
        "pmfast.compiler.overloads",
        "the array allocator's overload, compiled in every process, cached on disk instead (the same code; the overload's template answers per scope, its implementation cache included)",
        "compile",
        _NUMBA_OVERLOADS,
    ),
    Patch(
        "numba.core.typing.templates:_OverloadFunctionTemplate._get_impl",
        "pmfast.compiler.overloads",
        "overload implementations compiled inside pmfast's compiles (with its allocator and slice raiser) are memoised apart from numba's: neither scope reuses the other's compiled code",
        "compile",
        ("numba.tests.test_extending", "numba.tests.test_array_manipulation"),
    ),
    Patch(
        "numba.core.base:BaseContext.subtarget",
        "pmfast.compiler.subroutines",
        "internal subroutines (np.sum) memoised per fast-math flags: an entry's rounding does not depend on what the process compiled before",
        "compile",
        ("numba.tests.test_dispatcher", "numba.tests.test_array_manipulation"),
    ),
    Patch(
        "numba.core.ssa:_run_ssa",
        "pmfast.compiler.ssa",
        "SSA reconstruction visits only the blocks that mention each variable (~10% of a used machine's compile)",
        "compile",
        ("numba.tests.test_ssa",),
    ),
    Patch(
        "numba.core.analysis:compute_live_map",
        "pmfast.compiler.liveness",
        "live variables by work lists on integer bit sets, not sweeps of Python sets over every block until nothing grows (an inlined entry's post-processing: ~1 of 13 CPU s of bayesian_var_ireland's cold compile; the set unions 1.5 s more)",
        "compile",
        ("numba.tests.test_analysis", "numba.tests.test_ir_utils"),
    ),
    Patch(
        "numba.core.lowering:Lower._find_singly_assigned_variable, numba.core.ir:Global.__str__",
        "pmfast.compiler.lowering_scan",
        "a block's assignments counted once, not once per variable, and a global array's debug text (formatted for every statement lowered, debugging on or off) its dtype and shape, not its elements (hier_var 16 groups' logp entry: variables x statements, ~25 of 83 profiled CPU s; PMFAST_LINEAR_LOWER=0)",
        "compile",
        ("numba.tests.test_func_lifetime", "numba.tests.test_obj_lifetime", "numba.tests.test_ir"),
    ),
    Patch(
        "numba.core.runtime.context:NRTContext.get_meminfos",
        "pmfast.compiler.meminfos",
        "increfs and decrefs read only the members that can hold a reference, not every field (a 2-d array's decref: 12 dead extractvalues; 20% of bayesian_var_ireland's logp entry's instructions)",
        "compile",
        ("numba.tests.test_nrt", "numba.tests.test_nrt_refct"),
    ),
    Patch(
        "numba.core.inline_closurecall:InlineWorker.inline_function",
        "pmfast.compiler.inliner",
        "inlining without two deep copies of the callee's fresh IR (~7% of a used machine's compile)",
        "compile",
        ("numba.tests.test_ir_inlining", "numba.tests.test_inlining"),
    ),
    Patch(
        "numba.core.caching:Cache.load_overload",
        "pmfast.compiler.cache",
        "an unreadable cache entry of pytensor's cache directory is a miss, not an exception from deep inside the dispatcher; a library loaded from any numba cache keeps pmfast's own reload functions (its symbol definitions), so a caller linking it inherits them",
        "self-limiting",
        ("numba.tests.test_caching",),
    ),
    Patch(
        "numba.core.caching:Cache.save_overload",
        "pmfast.compiler.cache",
        "concurrent writers of one index in pytensor's cache directory serialised by a lock file; a failed save is a warning",
        "self-limiting",
        ("numba.tests.test_caching",),
    ),
    Patch(
        "numba.core.codegen:CPUCodeLibrary.finalize",
        "pmfast.loops.deferred",
        "links a deferred kernel (compiled in a forked worker) into the library that calls it",
        "self-limiting",
        ("numba.tests.test_dispatcher",),
    ),
    Patch(
        "numba.core.codegen:CPUCodeLibrary._verify_declare_only_symbols",
        "pmfast.compiler.symbols",
        "a module calling a symbol nobody defines raises UnresolvedSymbolError instead of LLVM aborting the process",
        "compile",
        ("numba.tests.test_dispatcher",),
    ),
    Patch(
        "llvmlite.binding:add_symbol (__powidf2, __powisf2)",
        "pmfast.compiler.symbols",
        "fast-math pow of an integer (llvm.powi) calls the compiler runtime, which numba's JIT does not resolve (process-wide from pmfast's first compile or pmfast.enable(), whose stock linker meets the same calls: a symbol added to LLVM's JIT cannot be removed; it only defines what was undefined)",
        "process",
        ("tests/link/numba/test_scalar.py::test_power_fastmath_bug",),
    ),
    Patch(
        "pytensor.link.numba.dispatch.basic:direct_cast, tuple_setitem",
        "pmfast.compiler.pure",
        "only with NUMBA_DISABLE_JIT=1, where nothing is compiled: the intrinsics pytensor's node functions call at run time get a pure-python version (the same intrinsics for numba), so a model evaluates as plain Python; pytensor's suite replaces them the same way for its pure-python evaluation",
        "process",
        ("tests/link/numba/",),
    ),
    Patch(
        "pytensor.link.numba.dispatch.basic:numba_njit",
        "pmfast.compiler.pure",
        "only with NUMBA_DISABLE_JIT=1, while pmfast's linker converts a graph: the plain function numba returns gets the py_func pytensor reads (stock pytensor fails there with AttributeError)",
        "compile",
        ("tests/link/numba/",),
    ),
    Patch(
        "llvmlite.binding:add_symbol (pmfast_dpotrf, pmfast_dtrsm, …)",
        "pmfast.compiler.lapack",
        "BLAS/LAPACK called by name from cacheable code: scipy's Cython routines under new names of pmfast's own (process-wide: LLVM keeps one symbol table; it only defines names nobody else uses)",
        "process",
        (),
    ),
    Patch(
        "llvmlite.binding:add_symbol (_pmfast_deferred_…)",
        "pmfast.loops.deferred",
        "a deferred callee (chunked kernel, linear algebra, a big entry's node function) called by a name of pmfast's own defined as its cached code's address, not linked and optimised again into every caller (process-wide: LLVM keeps one symbol table; a name always stands for the same cached code)",
        "process",
        (),
    ),
    Patch(
        "numba.core.errors:_termcolor_inst",
        "pmfast.compiler.overloads",
        "numba's error messages without terminal colour codes while pmfast compiles",
        "compile",
        ("numba.tests.test_exceptions",),
    ),
    Patch(
        "pytensor.tensor.extra_ops:set",
        "pmfast.compiler.determinism",
        "broadcast_shape_iter picks among equal lengths in a stable order, not by memory address: one graph in every process",
        "compile",
        ("tests/link/numba/", "tests/tensor/test_extra_ops.py"),
    ),
    Patch(
        "pytensor.graph.features:inspect",
        "pmfast.compiler.frames",
        "a failed graph validation's caller lookup without reading source files (~40 ms each)",
        "compile",
        ("tests/link/numba/", "tests/graph/test_features.py"),
    ),
    Patch(
        "pytensor.link.c.op:ExternalCOp.load_c_code",
        "pmfast.compiler.c_code",
        "C code files read once per class, not once per op instance (the numba backend never uses them)",
        "compile",
        ("tests/link/numba/", "tests/link/c/test_op.py"),
    ),
    Patch(
        "pytensor.tensor.variable:TensorConstant.signature",
        "pmfast.compiler.constants",
        "a constant's merge signature built once per constant, not once per comparison",
        "compile",
        ("tests/link/numba/", "tests/tensor/test_variable.py"),
    ),
    Patch(
        "pytensor.tensor.basic:infer_static_shape",
        "pmfast.compiler.static_shapes",
        "an Alloc's static shape folded from static types when every entry folds, before pytensor clones the entries' ancestors into a FunctionGraph (the logp+grad graph build grew with graph size times Blockwise nodes)",
        "compile",
        ("tests/tensor/test_basic.py", "tests/tensor/test_extra_ops.py"),
    ),
    Patch(
        "pytensor.tensor.rewriting.shape:ShapeFeature.set_shape, ShapeFeature.shape_ir",
        "pmfast.shape_lengths",
        "a static length's int64 constant made once per length and shape feature, not once per dimension of every imported variable (~46% of ShapeFeature.on_import on hier_var; PMFAST_SHAPE_LENGTHS=0)",
        "compile",
        ("tests/tensor/rewriting/test_shape.py", "tests/tensor/rewriting/test_basic.py"),
    ),
    Patch(
        "pytensor.graph.destroyhandler:_contains_cycle",
        "pmfast.destroy_cycles",
        "DestroyHandler's cycle check after every in-place candidate over apply nodes only, variables contracted into edges (the same answer for every graph and orderings; PMFAST_CYCLE_CHECK=0)",
        "compile",
        ("tests/graph/test_destroyhandler.py", "tests/tensor/rewriting/test_basic.py"),
    ),
    Patch(
        "pytensor.compile.function.types:Supervisor.validate",
        "pmfast.supervisor_check",
        "the Supervisor's check after every validated change answered from the destroyed roots in one refresh, not one destroyer query per protected variable and graph output (outputs x changes: 1.64 M queries in hier_var 32 groups' initial point; the same answer and exception; PMFAST_SUPERVISOR_CHECK=0)",
        "compile",
        ("tests/compile/function/test_types.py", "tests/graph/test_destroyhandler.py"),
    ),
    Patch(
        "pytensor.compile.mode:optdb[random_make_inplace].apply",
        "pmfast.inplace_scoped",
        "each RandomVariable made in place with the change judged locally (same inputs, the generator destroyed) instead of a whole-graph validation per variable (the initial point function's, in pymc's mode; PMFAST_INPLACE_SCOPED=0)",
        "compile",
        ("tests/tensor/random/rewriting/test_basic.py", "tests/graph/test_destroyhandler.py"),
    ),
    Patch(
        "pytensor.graph.fg:toposort",
        "pmfast.fg_import",
        "FunctionGraph.import_node's walk over the new nodes reads the graph's variable set in place instead of copying it at every import (the same nodes in the same order; PMFAST_FG_IMPORT=0)",
        "compile",
        ("tests/graph/test_fg.py", "tests/tensor/rewriting/test_basic.py"),
    ),
    Patch(
        "pytensor.scalar.basic:ScalarOp.supports_c_code",
        "pmfast.c_support",
        "elemwise fusion's question whether a scalar op has C code answered once per op object, input dtypes, input aliasing and output count, not once per node and pass (hier_var 8 groups: 6,049 questions; PMFAST_C_SUPPORT_MEMO=0)",
        "compile",
        ("tests/tensor/rewriting/test_elemwise.py", "tests/scalar/test_basic.py"),
    ),
    Patch(
        "pytensor.config:traceback__limit",
        "pmfast.nutpie_glue",
        "no creation traces for the graphs pymc and nutpie build inside pmfast.compile (a limit the user set is kept)",
        "compile",
    ),
    Patch(
        "nutpie.compile_pymc:_compute_shapes",
        "pmfast.nutpie_glue",
        "the traced variables' shapes by shape inference, without building and evaluating a second initial point function (nutpie's runs when a shape needs a draw; PMFAST_TRACE_SHAPES=0)",
        "compile",
    ),
    Patch(
        "sys.modules:pytensor.link.c.cvm",
        "pmfast.nutpie_glue",
        "pytensor's Python VM for the helper functions compiled meanwhile (no C VM build in a new compile directory)",
        "compile",
    ),
    Patch(
        "nutpie:compile_pymc_model",
        "pmfast.plugin",
        "the plugin: pm.sample(nuts_sampler=\"nutpie\") compiles through pmfast.compile (other backends go to nutpie's own)",
        "enabled",
    ),
    Patch(
        "pytensor.link.numba.cache:NUMBA_CACHE_PATH",
        "pmfast.bench",
        "a cold benchmark's pytensor numba cache inside its fresh NUMBA_CACHE_DIR",
        "bench",
    ),
    Patch(
        "gc:set_threshold, gc:freeze",
        "pmfast.compiler.collector",
        "the garbage collector's young collections spaced out, older objects frozen, while pmfast compiles",
        "compile",
    ),
)


def patches() -> tuple[Patch, ...]:
    """Every replacement pmfast makes (see the module docstring)."""
    return PATCHES


def markdown_table() -> str:
    """:data:`PATCHES` as the markdown table docs/compile.md shows."""
    rows = ["| replaces | by | scope | why | owner tests |", "|---|---|---|---|---|"]
    for p in PATCHES:
        tests = ", ".join(f"`{t}`" for t in p.owner_tests) or "—"
        rows.append(f"| `{p.target}` | `{p.by}` | {p.scope} | {p.why} | {tests} |")
    return "\n".join(rows)
