"""A compiled pytensor function's C-ABI entry point: the model-specific part of a sampler callback.

nutpie calls ``logp(dim, x, grad_out, logp_out, user_data)`` and
``expand(dim, n_expanded, x, out, user_data)``. pmfast splits each callback
in two: a model-independent wrapper (:mod:`pmfast.compiler.callbacks`,
compiled once per machine) that checks dimensions, maps exceptions and
non-finite values to nutpie's return codes, and calls through an address
the model-specific **entry** built here::

    logp_entry(x_, out_, logp_, ud_) -> 0        expand_entry(x_, out_, ud_) -> 0

The entry is the graph function's own body (one call line per node, as
pytensor generates it) between a prologue that views the raw pointers as
arrays (the point, and each shared variable's data pointer and shape read
from nutpie's ``user_data`` at call time, so ``with_data`` can swap arrays of
other lengths) and an epilogue that writes the outputs into the caller's
buffers. Compiled as one numba function, the graph is linked, optimised and
turned into machine code once (a jitted graph function called from a jitted
wrapper is finalised twice: alone, then again inside the wrapper).

An output made by a ``Join`` along axis 0 of vectors (nutpie's gradient and
expand outputs) that nothing else reads is not built: its pieces are
written into the caller's buffer at their offsets (no Join to compile, no
array to allocate and copy per call).

:class:`EntrySpec` describes an entry without compiling anything
(``generate_source`` turns it into Python source); :func:`compile_entry`
jits it under a cache key covering everything the source depends on.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from dataclasses import dataclass, field, replace

import numpy as np

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

#: Argument names of the two entry kinds (pointers), before ``ud_``.
OUTPUT_ARGS = {"logp": ("out_", "logp_"), "expand": ("out_",)}


@dataclass(frozen=True)
class SharedSlot:
    """Where one shared array's data pointer and shape live in ``user_data`` (in uint64 words)."""

    name: str
    data_word: int
    shape_word: int
    ndim: int
    dtype: str


@dataclass(frozen=True)
class EntrySpec:
    """What an entry reads and writes, and the graph body it runs.

    ``inputs`` are the graph function's argument names (the point, then the
    shared variables in ``shared`` order); ``body`` its statements (source);
    ``outputs`` the returned names (logp graphs return ``(logp, grad)``,
    expand graphs ``(values,)``). ``pieces[k]`` (if not None) lists the
    names whose concatenation is output ``k``: its Join was dropped from
    ``body``.
    """

    kind: str
    n_in: int
    n_out: int
    ud_words: int
    shared: tuple[SharedSlot, ...]
    inputs: tuple[str, ...]
    body: tuple[str, ...]
    outputs: tuple[str, ...]
    pieces: tuple[tuple[str, ...] | None, ...]
    ops: tuple[str | None, ...] = ()
    """The op (class name) each ``body`` statement computes, when known."""
    env: tuple[tuple[str, object], ...] = ()
    """Globals the body needs beyond the graph function's (:mod:`pmfast.compiler.scalars`)."""
    scalars: frozenset = frozenset()
    """Names the body holds as numba floats instead of 0-d arrays."""
    buffers: tuple[tuple[str, str, int], ...] = ()
    """Stack buffers the body uses: ``(name, global naming its numpy type, slots)``."""
    nodes: tuple = field(default=(), compare=False, repr=False)
    """The graph node each ``body`` statement computes (when ``ops`` is known)."""


def shared_slots(user_data: np.ndarray, names, dtypes) -> tuple[SharedSlot, ...]:
    """The word offsets of ``names``' fields in nutpie's ``user_data`` record."""
    rec = user_data.dtype
    shared_dtype, shared_off = rec.fields["shared"][:2]
    data_dt, data_off = shared_dtype.fields["data"][:2]
    shape_dt, shape_off = shared_dtype.fields["shape"][:2]
    if rec.itemsize % 8:
        raise ValueError("user_data record is not 8-byte aligned")
    slots = []
    for name, dtype in zip(names, dtypes, strict=True):
        d = shared_off + data_off + data_dt.fields[name][1]
        s = shared_off + shape_off + shape_dt.fields[name][1]
        field_dt = shape_dt.fields[name][0]
        if d % 8 or s % 8:
            raise ValueError("user_data record is not 8-byte aligned")
        slots.append(SharedSlot(name, d // 8, s // 8, field_dt.shape[0] if field_dt.shape else 0, np.dtype(dtype).name))
    return tuple(slots)


def graph_function(jit_fn):
    """The Python graph function behind a pytensor numba function's ``vm.jit_fn``.

    pmfast's linker compiles the graph function itself; stock pytensor wraps
    it in ``def f(*args): return jitable_func(*args)``.
    """
    py_func = jit_fn.py_func
    inner = py_func.__globals__.get("jitable_func")
    if inner is not None and "jitable_func(*args)" in getattr(py_func, "__source__", ""):
        return inner.py_func
    return py_func


def _join_pieces(fgraph, output, assign: ast.Assign) -> list[str] | None:
    """The pieces of ``output`` if it is an axis-0 Join of vectors read by nothing but the caller."""
    from pytensor.graph.basic import Constant
    from pytensor.graph.fg import Output
    from pytensor.tensor.basic import Join

    node = output.owner
    if node is None or not isinstance(node.op, Join) or output.ndim != 1:
        return None
    axis = node.inputs[0]
    if not isinstance(axis, Constant) or int(axis.data) not in (0, -1):
        return None
    if any(i.ndim != 1 for i in node.inputs[1:]):
        return None
    if any(not isinstance(c.op, Output) for c, _ in fgraph.clients[output]):
        return None
    if not isinstance(assign.value, ast.Call):
        return None
    from pmfast.linker import call_args

    args = call_args(assign.value)
    if args is None or len(args) != len(node.inputs):
        return None
    return [ast.unparse(a) for a in args[1:]]


def describe(kind: str, fn, user_data, shared_names, shared_dtypes, n_in: int, n_out: int) -> EntrySpec:
    """The :class:`EntrySpec` of compiled pytensor function ``fn`` (``vm.jit_fn`` and ``maker.fgraph``)."""
    if kind not in OUTPUT_ARGS:
        raise ValueError(f"unknown entry kind {kind!r}")
    py_func = graph_function(fn.vm.jit_fn)
    tree = ast.parse(py_func.__source__)
    fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    inputs = tuple(a.arg for a in fdef.args.args)
    *stmts, ret = fdef.body
    if fdef.args.vararg or not isinstance(ret, ast.Return) or len(inputs) != 1 + len(shared_names):
        raise ValueError("unexpected graph function shape")
    value = ret.value
    outputs = tuple(ast.unparse(e) for e in value.elts) if isinstance(value, ast.Tuple) else (ast.unparse(value),)
    fgraph = fn.maker.fgraph
    if len(outputs) != len(OUTPUT_ARGS[kind]) or len(fgraph.outputs) != len(outputs):
        raise ValueError(f"a {kind} entry needs {len(OUTPUT_ARGS[kind])} outputs, the graph has {len(outputs)}")
    pieces: list[tuple[str, ...] | None] = [None] * len(outputs)
    vector = _graph_output_index(kind, 0)  # the entry's first output is the vector
    targets = {ast.unparse(s.targets[0]): i for i, s in enumerate(stmts) if isinstance(s, ast.Assign) and len(s.targets) == 1}
    at = targets.get(outputs[vector])
    drop = None
    if at is not None and outputs.count(outputs[vector]) == 1:
        found = _join_pieces(fgraph, fgraph.outputs[vector], stmts[at])
        if found is not None:
            pieces[vector] = tuple(found)
            drop = at
    body = tuple(ast.unparse(s) for i, s in enumerate(stmts) if i != drop)
    ops, nodes = _statement_ops(fn, stmts)
    ops = tuple(o for i, o in enumerate(ops) if i != drop) if ops else ()
    nodes = tuple(o for i, o in enumerate(nodes) if i != drop) if ops else ()
    slots = shared_slots(user_data, shared_names, shared_dtypes)
    return EntrySpec(kind, n_in, n_out, user_data.dtype.itemsize // 8, slots, inputs, body, outputs, tuple(pieces), ops, nodes=nodes)


def with_scalars(spec: EntrySpec, env: dict) -> EntrySpec | None:
    """``spec`` with its 0-d values held as numba scalars (:mod:`pmfast.compiler.scalars`), or None if nothing changes.

    ``env`` is the graph function's globals. ``PMFAST_ENTRY_SCALARS=0`` turns it off.
    """
    from pmfast.compiler import scalars

    if os.environ.get("PMFAST_ENTRY_SCALARS", "1") == "0" or not spec.nodes or len(spec.nodes) != len(spec.body):
        return None
    done = scalars.rewrite([ast.parse(s).body[0] for s in spec.body], spec.nodes, spec.ops, env)
    if done is None:
        return None
    new_env = tuple(sorted(done.env.items(), key=lambda kv: kv[0]))
    return replace(spec, body=tuple(done.body), ops=tuple(done.ops), env=new_env, scalars=done.scalars, buffers=done.buffers, nodes=())


def _statement_ops(fn, stmts) -> tuple[tuple[str | None, ...], tuple]:
    """The op class name and the node of each graph statement (pytensor emits one call per node, in the linker's schedule).

    Empty if the statements don't line up with the schedule.
    """
    from pmfast.compiler.inline import NEVER

    try:
        order = fn.maker.linker.schedule(fn.maker.fgraph)
    except Exception:
        return (), ()
    if len(order) != len(stmts):
        return (), ()
    names = []
    for node, stmt in zip(order, stmts):
        n_targets = len(stmt.targets[0].elts) if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple) else 1
        if not isinstance(stmt, ast.Assign) or n_targets != len(node.outputs):
            return (), ()
        mro = [c.__name__ for c in type(node.op).__mro__]
        names.append(next((c for c in mro if c in NEVER), mro[0]))
    return tuple(names), tuple(order)


def _graph_output_index(kind: str, k: int) -> int:
    """Which graph output the entry's output ``k`` (``out_``, then ``logp_``) is."""
    return {"logp": (1, 0), "expand": (0,)}[kind][k]


def generate_source(spec: EntrySpec, name: str = "entry") -> str:
    """Python source of the entry function ``name`` described by ``spec``."""
    outs = OUTPUT_ARGS[spec.kind]
    lines = [f"def {name}(x_, {', '.join(outs)}, ud_):"]
    emit = lines.append
    emit(f"    _pm_ud = _pm_view(ud_, {spec.ud_words}, _pm_u64)")
    emit(f"    {spec.inputs[0]} = _pm_view(x_, {spec.n_in}, _pm_f64)")
    for i, (slot, arg) in enumerate(zip(spec.shared, spec.inputs[1:], strict=True)):
        shape = "".join(f"_pm_ud[{slot.shape_word + k}], " for k in range(slot.ndim))
        emit(f"    {arg} = _pm_view(_pm_ud[{slot.data_word}], ({shape}), _pm_dt{i})")
    for buffer, dtype, n in spec.buffers:
        emit(f"    {buffer} = _pm_stack({n}, {dtype})")
    lines += ["    " + line for stmt in spec.body for line in stmt.splitlines()]
    # logp graphs return (logp, grad): the vector is graph output 1, entry output 0
    vector = _graph_output_index(spec.kind, 0)
    pieces = spec.pieces[vector] if spec.pieces[vector] is not None else (spec.outputs[vector],)
    emit("    _pm_at = 0")
    for piece in pieces:  # each piece copied by an intrinsic: -1 if it doesn't fit (nothing written)
        emit(f"    _pm_at = _pm_put(out_, _pm_at, {piece}, {spec.n_out})")
        emit("    if _pm_at < 0:")
        emit(f"        raise ValueError('{spec.kind} entry: the outputs do not fit the {spec.n_out} values expected')")
    emit(f"    if _pm_at != {spec.n_out}:")
    emit(f"        raise ValueError('{spec.kind} entry: the outputs do not fill the {spec.n_out} values expected')")
    if spec.kind == "logp":
        logp = spec.outputs[0]
        emit(f"    logp_[0] = {logp if logp in spec.scalars else logp + '[()]'}")
    emit("    return 0")
    return "\n".join(lines) + "\n"


def signature(kind: str):
    """The entry's numba signature."""
    from numba.core import types as t

    ptr = t.CPointer(t.float64)
    return t.int64(ptr, *(ptr for _ in OUTPUT_ARGS[kind]), t.voidptr)


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
    ``one_module_pass`` (``PMFAST_BIG_ONE_PASS=0``: numba's two module pipeline runs) and ``codegen_opt``
    (``PMFAST_BIG_CODEGEN_OPT``: 0-3, or ``numba`` for numba's JIT at its own level; default 0)."""
    options = {}
    if os.environ.get("PMFAST_BIG_ONE_PASS", "1") != "0":
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
