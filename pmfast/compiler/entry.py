"""Compiling an entry (:mod:`pmfast.compiler.entry_spec`): one numba function per callback, keyed and cached.

Compiled as one numba function, the graph is linked, optimised and turned into machine code once
(a jitted graph function called from a jitted wrapper is finalised twice: alone, then again inside
the wrapper). :func:`prepare_entry` decides how: which node functions are inlined
(:mod:`pmfast.compiler.inline`), whether a big graph's entry calls them by symbol, groups repeated
statements (:mod:`pmfast.compiler.entry_groups`) or is cut into parts
(:mod:`pmfast.compiler.parts`); :func:`compile_entry` jits it under a cache key covering everything
the source depends on (:func:`entry_key`).
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from dataclasses import dataclass, replace

import numpy as np

from pmfast.compiler.entry_spec import EntrySpec, generate_source, graph_function, signature, with_scalars

#: Bump whenever the generated source or its compilation changes.
ENTRY_VERSION = 7


def entry_fastmath():
    """The entry's fast-math flags: pytensor's set without ``reassoc`` (or none when pytensor's are off).

    Node functions inlined into the entry are typed and lowered with the entry's flags, not
    their own (:mod:`pmfast.compiler.inline`): the fused loops, compiled without fast math on
    their own, got ``reassoc`` there, and LLVM used it to split a loop's running sum
    ``acc += c + k * sq`` into ``(acc + c) + k * sq``, two dependent operations per row on the
    sum instead of one (radon_intercept: 8 cycles a row instead of 5). Contraction (FMA) and the
    other flags stay as pytensor sets them.
    """
    from pytensor import config

    return set(FASTMATH) if config.numba__fastmath else False


#: The flags of :func:`entry_fastmath` (pytensor's ``numba_njit`` default set minus ``reassoc``).
FASTMATH = ("afn", "arcp", "contract", "nsz")

#: How the entry of a big graph (one the linker compiles ``optnone``, see :mod:`pmfast.linker`) is
#: compiled: ``None``: ``optnone`` too; an int: optimised, with LLVM's inlining threshold set to it
#: (0: a node function is inlined only where that costs less than the call). Either way its node
#: functions are called, never inlined at numba's level.
BIG_ENTRY_INLINE_THRESHOLD: int | None = 0

#: The codegen optimisation level of a big graph's entry machine code (``PMFAST_BIG_CODEGEN_OPT``; see
#: :func:`big_llvm_options`): 0 is LLVM's fast instruction selection and register allocation.
BIG_ENTRY_CODEGEN_OPT = 0

#: The function pipeline's level for a big graph's entry, optimised without a module pipeline
#: (``PMFAST_BIG_FUNCTION_OPT``; see :func:`big_llvm_options`).
BIG_ENTRY_FUNCTION_OPT = 1

@dataclass
class Entry:
    """A compiled entry: the dispatcher (kept alive: the address points into its code), address, key.

    ``table``: the native addresses of its parts (:mod:`pmfast.compiler.parts`), whose address goes
    into ``user_data``'s header (None for an entry compiled whole); ``parts`` keeps them alive.
    """

    spec: EntrySpec
    source: str
    key: str | None
    dispatcher: object
    address: int
    cache_hit: bool
    table: np.ndarray | None = None
    parts: tuple = ()

    @property
    def table_address(self) -> int:
        return 0 if self.table is None else int(self.table.ctypes.data)


def call_slots_enabled() -> bool:
    """Whether the entry's calls by symbol share their slots (:func:`pmfast.loops.deferred.call_slots_enabled`)."""
    from pmfast.loops import deferred

    return deferred.call_slots_enabled()


def lean_ir_enabled() -> bool:
    """Whether entries are compiled with :mod:`pmfast.compiler.lean_ir`'s passes (``PMFAST_LEAN_IR=0``: not)."""
    return os.environ.get("PMFAST_LEAN_IR", "1") != "0"


def entry_key(spec: EntrySpec, src: str, graph_key: str | None, options: dict) -> str | None:
    """The numba cache key of an entry, or None if its graph can't be cached."""
    if graph_key is None:
        return None
    import numba
    from pytensor import config

    from pmfast import __version__
    from pmfast.compiler import inline, overloads
    from pmfast.linker import compile_salt

    ident = (
        ENTRY_VERSION,
        __version__,
        overloads.VERSION,
        compile_salt(),
        numba.__version__,
        graph_key,
        src,
        [s.dtype for s in spec.shared],
        bool(config.numba__fastmath),
        FASTMATH,
        sorted(options.items()),
        lean_ir_enabled(),
        call_slots_enabled(),
        *(("careduce_called",) if inline.careduce_called(spec.kind) else ()),
    )
    return "pmfast_entry_" + hashlib.sha256(repr(ident).encode()).hexdigest()


@dataclass
class PreparedEntry:
    """An entry ready to compile: :meth:`compile` compiles it or loads it from numba's cache.

    ``inlined`` lists the node functions inlined into it
    (:mod:`pmfast.compiler.inline`); ``fallback`` prepares the same entry
    without them, used if numba fails to compile the inlined one.
    """

    spec: EntrySpec
    source: str
    key: str | None
    dispatcher: object
    inlined: tuple[str, ...] = ()
    fallback: object = None
    parts: tuple = ()
    """The entry's parts (:class:`pmfast.compiler.parts.Part`), compiled before it; () if compiled whole."""
    weight: int = 0
    """What it costs to compile, in :func:`pmfast.compiler.parts.weights`' units."""
    grouped: bool = False
    """Whether repeated statement groups are functions of their own (:mod:`pmfast.compiler.entry_groups`)."""

    def in_cache(self) -> bool:
        """Whether numba's cache has an index for this entry (the compile will most likely be a load)."""
        from pmfast.compiler import cache

        return cache.has_index(self.dispatcher) and all(p.in_cache() for p in self.parts)

    def compile(self) -> Entry:
        from pmfast.compiler import cache, native

        sig = signature(self.spec.kind)
        try:
            for part in self.parts:
                part.compile()
            self.dispatcher.compile(sig)
        except Exception as err:
            if not (self.inlined or self.grouped):
                raise
            what = "inlined node functions" if self.inlined else "statement groups"
            cache.log.warning("pmfast: compiling the %s entry with %s failed (%s); without them", self.spec.kind, what, type(err).__name__)
            return self.fallback().compile()
        hit = cache.count(self.dispatcher, self.key)
        table = np.array([p.address() for p in self.parts], dtype=np.uint64) if self.parts else None
        address = native.native_address(self.dispatcher, sig)
        return Entry(self.spec, self.source, self.key, self.dispatcher, address, hit, table, self.parts)


def _inline_plan(spec: EntrySpec, env: dict) -> tuple[str, ...]:
    """The node functions of ``spec``'s body :func:`pmfast.compiler.inline.plan` picks to inline (depends on the graph only)."""
    from pmfast.compiler import inline

    if len(spec.ops) != len(spec.body):
        return ()
    calls = []
    for stmt, op in zip(spec.body, spec.ops):
        call = getattr(ast.parse(stmt).body[0], "value", None)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            calls.append((call.func.id, op, env.get(call.func.id)))
    return inline.plan(calls, call_careduce=inline.careduce_called(spec.kind))


def _called_names(spec: EntrySpec) -> set[str]:
    """The names ``spec``'s body calls (``f(...)`` anywhere in a statement)."""
    return {c.func.id for s in spec.body for c in ast.walk(ast.parse(s)) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}


def _inline_calls(spec: EntrySpec, env: dict, names) -> tuple[str, ...]:
    """Rebind, in ``env``, the functions ``names`` (those ``spec``'s body calls) to inlined copies.

    The entry's source stays the same (and so its cache key and numba's
    index key, which hashes the bytecode): only what the names refer to
    changes. Returns the names rebound.
    """
    from pmfast.compiler import inline

    called = _called_names(spec)
    done = []
    for name in names:
        copy = inline.inline_version(env[name]) if name in called else None
        if copy is not None:
            env[name] = copy
            done.append(name)
    return tuple(done)


def big_calls_enabled() -> bool:
    """Whether a big graph's entry calls its node functions by symbol (``PMFAST_BIG_CALLS=0``: links them)."""
    return os.environ.get("PMFAST_BIG_CALLS", "1") != "0"


def big_llvm_options() -> dict:
    """How a big graph's entry is finalised beyond its inlining threshold (:mod:`pmfast.compiler.library`):
    ``one_module_pass`` (``PMFAST_BIG_ONE_PASS=0``: numba's two module pipeline runs), ``codegen_opt``
    (``PMFAST_BIG_CODEGEN_OPT``: 0-3, or ``numba`` for numba's JIT at its own level; default 0), and
    the function pipeline alone at ``BIG_ENTRY_FUNCTION_OPT`` (``PMFAST_BIG_FUNCTION_OPT``), no module
    pipeline (``PMFAST_BIG_LEAN_LLVM=0``: the function pipeline at numba's level, then the module one)."""
    options = {}
    if os.environ.get("PMFAST_BIG_LEAN_LLVM", "1") != "0":
        options["module_passes"] = False
        options["function_opt"] = int(os.environ.get("PMFAST_BIG_FUNCTION_OPT", str(BIG_ENTRY_FUNCTION_OPT)))
    elif os.environ.get("PMFAST_BIG_ONE_PASS", "1") != "0":
        options["one_module_pass"] = True
    level = os.environ.get("PMFAST_BIG_CODEGEN_OPT", str(BIG_ENTRY_CODEGEN_OPT))
    if level in ("0", "1", "2", "3"):
        options["codegen_opt"] = int(level)
    return options


def _calls_by_symbol(spec: EntrySpec, env: dict) -> tuple[str, ...]:
    """Rebind, in ``env``, the cached node functions ``spec``'s body calls to
    :class:`pmfast.loops.deferred.Deferred` callers typed as direct calls: each call is lowered to a
    placeholder symbol defined as the address of the callee's own machine code, so no node function
    is linked into the entry and optimised again. Returns the names rebound."""
    from numba.core.dispatcher import Dispatcher
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    from pmfast.loops import deferred

    deferred.install()
    called = _called_names(spec)
    done = []
    for name in sorted(called):
        fn = env.get(name)
        if not isinstance(fn, Dispatcher):
            continue
        key, src = CACHED_SRC_FUNCTIONS.get(fn.py_func), _sources(fn)
        if key is None or src is None:
            continue
        node = hashlib.sha256(f"{key}\n{src}".encode()).hexdigest()
        env[name] = deferred.Deferred(fn, f"pmfast_node_{node}", None)
        done.append(name)
    return tuple(done)


def _sources(fn) -> str | None:
    """The generated source of node function ``fn`` and of the jitted functions it calls by name, or None.

    A node's cache key can stand for functions of several arities (pytensor's MakeVector: one key,
    ``def makevector(*args): return jitable_func(*args)`` forwarding to a function of 19 or 24
    arguments): what tells them apart is the source of what they call.
    """
    from numba.core.dispatcher import Dispatcher

    src = getattr(fn.py_func, "__source__", None)
    if src is None:
        return None
    env = fn.py_func.__globals__
    called = []
    for name in sorted(set(fn.py_func.__code__.co_names)):
        g = env.get(name)
        if isinstance(g, Dispatcher):
            inner = getattr(g.py_func, "__source__", None)
            if inner is None:
                return None
            called.append(f"{name}:\n{inner}")
    return "\n".join([src, *called])


def _index_exists(name: str, key: str | None) -> bool:
    """Whether numba's cache has an index for the generated function ``name`` cached under ``key``."""
    from pytensor.link.numba.cache import NUMBA_CACHE_PATH

    return key is not None and any(NUMBA_CACHE_PATH.glob(f"*{name}-{key}*.nbi"))


def contiguous_constants(env: dict) -> dict:
    """``env`` with each array neither C- nor F-contiguous replaced by a C-contiguous read-only copy.

    numba embeds a global array of layout 'A' by its address (a *dynamic global*): a function
    holding one is never cached, so every compile of it, warm ones included, starts over, and a
    forked worker's compile of it can't be handed over (:mod:`pmfast.compiler.handover`): this
    process compiled it again. bayesian_var_ireland's logp and expand entries each read two (a
    constant's column slices, strides (8, 408)). A copy holds the same values; graph constants are
    never written.
    """
    out = dict(env)
    for name, value in env.items():
        if isinstance(value, np.ndarray) and not (value.flags.c_contiguous or value.flags.f_contiguous):
            copy = np.ascontiguousarray(value)
            copy.flags.writeable = False
            out[name] = copy
    return out


def prepare_entry(spec: EntrySpec, fn, inline: bool = True, groups: bool = True) -> PreparedEntry:
    """The entry for ``spec`` as a numba dispatcher under its cache key; ``fn`` is the pytensor function it came from.

    ``inline``: inline node functions that are not in the cache (:mod:`pmfast.compiler.inline`);
    ``groups``: a big graph's repeated statement groups as functions (:mod:`pmfast.compiler.entry_groups`).
    """
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import cache, entry_native, lean_ir, library, native

    original = spec
    py_graph = graph_function(fn.vm.jit_fn)
    name = f"{spec.kind}_entry"
    env = contiguous_constants(py_graph.__globals__)
    options = {}
    big = bool(getattr(fn.vm.jit_fn, "targetoptions", {}).get("_dbg_optnone"))  # a big graph: see pmfast.linker
    threshold = BIG_ENTRY_INLINE_THRESHOLD
    if big and threshold is None:
        options["_dbg_optnone"] = True
    plan = _inline_plan(spec, env) if inline and not big else ()
    if plan:
        # 0-d values as scalars where the node functions are inlined (the scalar forms are
        # inlined too): a called function would be one more function to compile per process
        scalar_spec = with_scalars(spec, env)
        if scalar_spec is not None:
            spec = scalar_spec
            plan = plan + tuple(n for n, _ in spec.env if n.startswith("_pm_scalar_"))
    env.update(spec.env)
    from pmfast.compiler import parts

    w = parts.weights(spec.body, env, plan)  # once: the cut's plan and the entry's weight both read them
    if not big:
        prepared = parts.prepare(original, spec, fn, env, plan, options, sys.modules[__name__], w)
        if prepared is not None:
            return prepared
    by_symbol = big and big_calls_enabled() and bool(_calls_by_symbol(spec, env))
    # the key covers the computation (the source calling every node function): whether some
    # of them are inlined into the compiled code doesn't change what it computes
    llvm = big_llvm_options() if big else {}
    key_options = {**options, "big": threshold, "calls": "symbol" if by_symbol else "linked", **llvm} if big else options
    graph_key = CACHED_SRC_FUNCTIONS.get(fn.vm.jit_fn.py_func)
    grouped = None
    if by_symbol and groups:
        from pmfast.compiler import entry_groups

        def jit_group(gsrc, gname, genv, gkey):
            py = compile_numba_function_src(gsrc, gname, genv, genv)
            cache.register(py, gkey)
            gpipe = library.compiler(own_copies=True, inline_threshold=threshold, **llvm)
            return numba_njit(
                py, no_cpython_wrapper=True, no_cfunc_wrapper=True, cache=True, fastmath=entry_fastmath(),
                pipeline_class=lean_ir.pipeline(gpipe) if lean_ir_enabled() else gpipe, **options,
            )

        grouped = entry_groups.plan(spec, env, fn, graph_key, key_options, jit_group, entry_key)
        if grouped is not None:
            spec = replace(spec, body=grouped.body, ops=(), nodes=())
            env.update(grouped.env)
            key_options = {**key_options, "groups": grouped.keys}
    src = generate_source(spec, name)
    key = entry_key(spec, src, graph_key, key_options)
    inlined: tuple[str, ...] = ()
    if plan and not _index_exists(name, key):
        inlined = _inline_calls(spec, env, plan)
    env.update(
        __name__=__name__,  # a real module: numba pickles the environment by module name
        _pm_view=native.array_view,
        _pm_stack=native.stack_buffer,
        _pm_cell=native.cell,
        _pm_store_cell=entry_native.store_cell,
        _pm_store_slot=entry_native.store_slot,
        _pm_put=entry_native.put_piece,
        _pm_put_called=entry_native._jit_put_piece_called(),
        _pm_u64=np.uint64,
        _pm_f64=np.float64,
        **{f"_pm_dt{i}": np.dtype(s.dtype).type for i, s in enumerate(spec.shared)},
    )
    py_func = compile_numba_function_src(src, name, env, env)
    cache.register(py_func, key)
    # every entry runs its own copies of what it links in; a big graph's frees the lowering's
    # garbage first and is optimised with its own inlining threshold (pmfast.compiler.library)
    pipeline = library.compiler(own_copies=True, release=big, inline_threshold=threshold if big else None, **llvm)
    options["pipeline_class"] = lean_ir.pipeline(pipeline) if lean_ir_enabled() else pipeline
    dispatcher = numba_njit(
        py_func, no_cpython_wrapper=True, no_cfunc_wrapper=True, cache=key is not None, fastmath=entry_fastmath(), **options
    )
    weight = sum(w)
    fallback = lambda: prepare_entry(original, fn, inline=False, groups=grouped is None)  # noqa: E731
    return PreparedEntry(spec, src, key, dispatcher, inlined, fallback, weight=weight, grouped=grouped is not None)


def compile_entry(spec: EntrySpec, fn) -> Entry:
    """Compile (or load from numba's cache) the entry for ``spec``; ``fn`` is the pytensor function it came from."""
    return prepare_entry(spec, fn).compile()
