"""A big entry's body as a few functions compiled on their own, on both cores, called through addresses.

numba compiles one function at a time per process, and the cost of one function grows faster
than its size (its passes, LLVM's). A big entry (:mod:`pmfast.compiler.entry`) is therefore cut
into **parts**: consecutive runs of its statements (pytensor's schedule), each a numba function of
its own that takes the values it reads from earlier statements and returns those later ones read::

    def logp_part1(x, a, b):              logp_entry(x_, out_, logp_, ud_):
        <statements 120..239>                 ...views of the point and the shared arrays...
        return (_pm_canon(c), d)              a, b = _pm_part(_pm_tab, 0, logp_part0, (x,))
                                              c, d = _pm_part(_pm_tab, 1, logp_part1, (x, a, b))
                                              ...outputs written as before...

* **Types known before compiling.** A part's arguments are the point, shared arrays (C-contiguous
  views), 0-d values held as scalars (:mod:`pmfast.compiler.scalars`: float64, bool, int64) and
  what earlier parts return, which :func:`~pmfast.compiler.part_calls.canon` makes C-contiguous and writable (the array itself
  when it is, a copy otherwise). So every part's signature follows from the pytensor types alone
  (:func:`~pmfast.compiler.part_calls.boundary_type`) and any part can be compiled first, in any process.
* **On both cores.** Parts are cached (their key: the graph's key and their source). A forked
  worker (:mod:`pmfast.compiler.parallel`, only when a core is idle) compiles some of them into
  numba's cache while this process compiles the others; this process then loads the worker's
  (:func:`pmfast.nutpie_glue`). Which process compiles a part never changes its code: each part is
  finalised with its own copies of what it links (``own_copies``, :mod:`pmfast.compiler.library`).
* **Called through an address.** The entry reads a table of the parts' native addresses from a
  word of nutpie's ``user_data`` header (:mod:`pmfast.compiler.callbacks`) and calls each part with
  numba's calling convention (:func:`~pmfast.compiler.part_calls.call_part`; an exception inside propagates as from a direct
  call). A direct call would link every part's module into the entry and optimise and emit all of
  it again.
* **Where to cut** (:func:`plan`): the entry's statements weighed by about the LLVM instructions
  their lowering emits (:func:`weights`: a part's compile CPU follows them, ~0.09 ms each on
  bayesian_var_ireland's and bayesian_sem_workflow's parts; the bytecode of the node functions
  alone missed the loops, slicing and allocations they expand into, and counted functions the
  entry calls as if inlined: their parts came out 0.2-3.5 CPU s), cut into parts of
  about :data:`PART_WEIGHT`, each cut placed where the fewest values cross it (at most
  :data:`MAX_CROSSING`: numba's and LLVM's work on a tuple grows faster than its length). Only
  entries weighing at least :data:`SPLIT_MIN`: a call through an address and the values crossing
  it cost a few tens of nanoseconds, nothing next to such a graph's evaluation. The plan depends
  on the graph only.
* **Not big graphs** (:mod:`pmfast.linker`'s, whose entries call their node functions): their
  parts would each compile and link the node functions the graph shares between its groups, in
  both processes, and pass hundreds of values (hier_var 16 groups cut in 8: 277 CPU s here and
  111 in the worker).

``PMFAST_PARTS=0`` compiles every entry whole.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from numba.core import types

from pmfast.compiler.part_calls import boundary_type, call_part, canon

#: Entries weighing less than this (about the LLVM instructions their lowering emits, see
#: :func:`weights`; ~7 CPU s of compile) are compiled whole: every zoo model's logp entry
#: (7,000-49,000) and bayesian_var_ireland's (67,000), not bayesian_sem_workflow's (82,000). The
#: parts' calls and the arrays crossing them (copied when not C-contiguous) cost a small graph's
#: evaluation more than they save its compile: var_ireland cut in 2 / 4 evaluated in 3.68 / 4.67 µs
#: instead of 3.48, for ~0.3 CPU s less compile.
SPLIT_MIN = 75_000
#: Target weight of one part.
PART_WEIGHT = 10_000
#: Most parts per entry.
MAX_PARTS = 8
#: LLVM instructions the lowering of an inlined node function emits per bytecode instruction of it
#: (median over bayesian_var_ireland's and bayesian_sem_workflow's statements: 4-45; its slicing,
#: allocations and loops expand into numba's generic code).
LLVM_PER_BYTECODE = 20
#: Weight of a call of a node function the entry does not inline (compiled once on its own).
CALL_WEIGHT = 50
#: Weight of a statement that calls no node function (an intrinsic, a method, an index).
OPAQUE_WEIGHT = 100
#: Most values crossing one cut (each is an argument of a part and an item of the tuple another
#: returns: numba's and LLVM's work on tuples grows faster than their length).
MAX_CROSSING = 48
#: A cut may move this fraction of a part's weight away from its ideal place to cross fewer values.
SLACK = 0.3
#: What a view crossing a cut counts for, against 1 for another value: a part returns a view that
#: is not C-contiguous as a copy (:func:`~pmfast.compiler.part_calls.canon`).
VIEW_COST = 4


def enabled() -> bool:
    return os.environ.get("PMFAST_PARTS", "1") != "0"


def _assign(stmt: str) -> tuple[list[str], set[str]] | None:
    """``(targets, names read)`` of one body statement, or None if it is not a plain assignment."""
    node = ast.parse(stmt).body[0]
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return None
    t = node.targets[0]
    elts = t.elts if isinstance(t, ast.Tuple) else [t]
    if not all(isinstance(e, ast.Name) for e in elts):
        return None
    return [e.id for e in elts], {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}


def weights(body, env, inlined=None) -> list[int]:
    """Each statement's weight: about the LLVM instructions its lowering emits, which is what a part's
    compile costs (numba's lowering and LLVM's passes; ~0.09 ms each here, typing and numba's IR
    passes in proportion).

    A node function inlined into the entry (``inlined``: the names the inline plan picks; None: every
    plain jitted function) weighs :data:`LLVM_PER_BYTECODE` per bytecode instruction of its own (the
    loops, slicing and allocations it calls expand into numba's generic code there), straight-line
    scalar code (:mod:`pmfast.compiler.scalars`' ``scalar_core``) one per instruction, a called one
    :data:`CALL_WEIGHT` (compiled on its own, once); any other statement :data:`OPAQUE_WEIGHT`.
    """
    from pmfast.compiler import inline

    out = []
    for stmt in body:
        call = getattr(ast.parse(stmt).body[0], "value", None)
        w = OPAQUE_WEIGHT
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            fn = env.get(call.func.id)
            inner = inline.inner_function(fn)
            if inner is not None:
                if inlined is not None and call.func.id not in inlined:
                    w = CALL_WEIGHT
                elif inner.py_func.__name__ == "scalar_core":
                    w = max(inline.cost(fn), 1)
                else:
                    w = LLVM_PER_BYTECODE * max(inline.cost(fn), 1)
        out.append(w)
    return out


@dataclass(frozen=True)
class PartPlan:
    """Where an entry body is cut: ``bounds[k]:bounds[k + 1]`` are part ``k``'s statements."""

    bounds: tuple[int, ...]


def plan(body, env, passable, epilogue_reads, inlined=None, w=None) -> PartPlan | None:
    """Cut ``body`` into parts (see the module docstring), or None to compile it whole.

    ``passable(name)``: what a value crossing a cut costs (None: it can't cross; a value crosses if
    :func:`~pmfast.compiler.part_calls.boundary_type` knows its type or the part that reads it can rebuild it); ``epilogue_reads``:
    the names the entry's epilogue reads; ``inlined``: as for :func:`weights`; ``w``: the statements'
    :func:`weights` if the caller has them.
    """
    if not enabled():
        return None
    parsed = [_assign(s) for s in body]
    if any(p is None for p in parsed):
        return None
    w = weights(body, env, inlined) if w is None else w
    total = sum(w)
    if total < SPLIT_MIN:
        return None
    k = min(MAX_PARTS, max(2, round(total / PART_WEIGHT)))
    n = len(body)
    # values live across the cut before statement b: defined before b, read at or after b
    last_read: dict[str, int] = {}
    for i, (_, reads) in enumerate(parsed):
        for r in reads:
            last_read[r] = i
    for r in epilogue_reads:
        last_read[r] = n
    # difference arrays: a value defined at i and last read at e crosses the cuts i + 1 .. e
    delta, delta_bad = [0] * (n + 2), [0] * (n + 2)
    for i, (targets, _) in enumerate(parsed):
        for t in targets:
            end = min(last_read.get(t, -1), n)
            if end > i:
                cost = passable(t)
                delta[i + 1] += cost or 0
                delta[end + 1] -= cost or 0
                if cost is None:
                    delta_bad[i + 1] += 1
                    delta_bad[end + 1] -= 1
    crossing, blocked, c, bad = [0] * (n + 1), [False] * (n + 1), 0, 0
    for b in range(n + 1):
        c += delta[b]
        bad += delta_bad[b]
        crossing[b], blocked[b] = c, bad > 0
    cum = [0]
    for x in w:
        cum.append(cum[-1] + x)
    bounds = [0]
    for j in range(1, k):
        ideal = total * j / k
        lo, hi = ideal - SLACK * total / k, ideal + SLACK * total / k
        cands = [b for b in range(bounds[-1] + 1, n) if lo <= cum[b] <= hi and not blocked[b] and crossing[b] <= MAX_CROSSING]
        if not cands:
            continue
        bounds.append(min(cands, key=lambda b: (crossing[b], abs(cum[b] - ideal), b)))
    bounds.append(n)
    if len(bounds) < 3:
        return None
    return PartPlan(tuple(bounds))


#: Statements that make an array view of a scalar's stack slot (:mod:`pmfast.compiler.scalars`): a
#: part that reads the view makes its own (a view into another frame's stack would dangle).
VIEW_MAKERS = ("_pm_store_cell", "_pm_store_slot")


@dataclass
class PartSource:
    """One part: its function's name and source, argument names and types, returned names."""

    name: str
    source: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    argtypes: tuple
    body: tuple[str, ...]
    ops: tuple
    weight: int


@dataclass
class Split:
    """An entry body cut into parts: the parts, and the entry's own statements (calls, rebuilt views)."""

    parts: list[PartSource]
    calls: tuple[str, ...]
    buffers: tuple


def _view_makers(body) -> dict[str, tuple[str, str | None, tuple[str, ...]]]:
    """``{view: (statement, buffer, reads)}`` for the body's ``V = _pm_store_cell(buf, k, X)`` statements
    (``reads``: ``(X,)``)."""
    out = {}
    for stmt in body:
        node = ast.parse(stmt).body[0]
        value = getattr(node, "value", None)
        if (
            isinstance(node, ast.Assign)
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in VIEW_MAKERS
            and isinstance(node.targets[0], ast.Name)
            and len(value.args) == 3
            and isinstance(value.args[0], ast.Name)
            and isinstance(value.args[2], ast.Name)
        ):
            out[node.targets[0].id] = (stmt, value.args[0].id, (value.args[2].id,))
    return out


def _input_views(parsed, body, var_of: dict, inputs, slots=()) -> dict[str, tuple[str, None, tuple[str, ...]]]:
    """``{name: (statement, None, reads)}`` for statements that only view the entry's inputs or a
    scalar's stack slot (``slots``: the names :func:`_view_makers` found).

    A statement qualifies when its one output is a view (its op has a ``view_map``: a subtensor of
    the point, a dimshuffle; a one-element subtensor held as a scalar reads the point) and every
    body value it reads is an entry input, a slot's view or such a view. The entry's inputs (the
    point, the shared arrays) are never destroyed (pytensor keeps graph inputs intact), so their
    views are the same wherever they are made: the part that reads one makes it again instead of
    receiving it across a cut (bayesian_sem_workflow: the point's slices, each read from the top of
    the graph to its gradient, crossed every cut). A view of a slot's view must be made again where
    it is read: returned across a cut, it pointed into the returning part's stack frame (lkj_mvnormal
    cut in two: a dimshuffle of a slot read by the next part gave a wrong gradient).
    """
    out: dict = {}
    local = {t for p in parsed if p is not None for t in p[0]}
    for stmt, p in zip(body, parsed, strict=True):
        if p is None or len(p[0]) != 1:
            continue
        (name,) = p[0]
        var = var_of.get(name)
        owner = getattr(var, "owner", None)
        if owner is None or len(owner.outputs) != 1 or not getattr(owner.op, "view_map", None):
            continue
        reads = tuple(sorted(r for r in p[1] if r in inputs or r in local))
        if reads and all(r in inputs or r in out or r in slots for r in reads):
            out[name] = (stmt, None, reads)
    return out


def split(spec, env, var_of: dict, input_types: dict, inlined=None, w=None) -> Split | None:
    """Cut entry ``spec``'s body into parts, or None (see :func:`plan`).

    ``var_of`` maps body names to pytensor variables, ``input_types`` the entry's graph inputs to
    their numba types, ``inlined`` the node functions the entry inlines, ``w`` the body's
    :func:`weights` (computed here if None).
    """
    w = weights(spec.body, env, inlined) if w is None else w
    body = list(spec.body)
    parsed = [_assign(s) for s in body]
    makers = _view_makers(body)
    if all(p is not None for p in parsed):
        makers.update(_input_views(parsed, body, var_of, input_types, set(makers)))
    buffers = {b[0]: b for b in spec.buffers}
    ops = list(spec.ops) if len(spec.ops) == len(body) else [None] * len(body)

    def arg_type(name):
        if name in input_types:
            return input_types[name]
        var = var_of.get(name)
        if name in spec.scalars:
            import numba
            import numpy as np

            return numba.from_dtype(np.dtype(var.type.dtype)) if var is not None else None
        return boundary_type(var) if var is not None else None

    def passable(name):
        if name in makers:
            return 1 if makers[name][1] is not None else 0  # a slot's scalar crosses; an input's view doesn't
        if arg_type(name) is None:
            return None
        if name in spec.scalars:
            return 1
        owner = getattr(var_of.get(name), "owner", None)
        return VIEW_COST if owner is not None and getattr(owner.op, "view_map", None) else 1

    vector = 1 if spec.kind == "logp" else 0  # graph output index of the entry's vector output
    pieces = spec.pieces[vector] if spec.pieces[vector] is not None else (spec.outputs[vector],)
    epilogue = set(spec.outputs) | set(pieces)
    cut = plan(body, env, passable, epilogue, inlined, w)
    if cut is None:
        return None
    local = set(input_types) | set(buffers) | {t for p in parsed for t in p[0]}
    bounds = cut.bounds

    def need(r, defined, reads, rebuilt):
        """``r`` is read where ``defined`` holds: rebuild it (after what it reads) or read it."""
        if r not in local or r in defined or r in buffers:
            return
        if r in makers:
            for d in makers[r][2]:
                need(d, defined, reads, rebuilt)
            rebuilt.append(r)
            defined.add(r)
        elif r not in reads:
            reads.append(r)

    # what each part reads from outside it (views it rebuilds itself), in order of first use
    groups = []
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        defined, reads, rebuilt = set(), [], []
        for targets, names in parsed[lo:hi]:
            for r in sorted(names):
                need(r, defined, reads, rebuilt)
            defined |= set(targets)
        groups.append((lo, hi, reads, rebuilt))
    # the entry's epilogue reads views too: it rebuilds them in its own frame
    entry_rebuilt, entry_reads = [], []
    entry_defined = set(input_types)
    for r in sorted(epilogue):
        if r in makers:
            need(r, entry_defined, entry_reads, entry_rebuilt)
    needed_later = [set() for _ in groups]
    later = set(entry_reads) | {r for r in epilogue if r not in makers}
    for k in reversed(range(len(groups))):
        needed_later[k] = set(later)
        later |= set(groups[k][2])
    parts, calls, entry_buffers = [], [], {}
    for k, (lo, hi, reads, rebuilt) in enumerate(groups):
        defined = [t for p in parsed[lo:hi] for t in p[0]]
        outputs = [t for t in defined if t in needed_later[k] and t not in makers]
        argtypes = tuple(arg_type(r) for r in reads)
        if any(t is None for t in argtypes) or any(arg_type(o) is None for o in outputs):
            return None
        stmts = [makers[r][0] for r in rebuilt] + body[lo:hi]
        used = {n.id for s in stmts for n in ast.walk(ast.parse(s)) if isinstance(n, ast.Name)}
        name = f"{spec.kind}_part{k}"
        lines = [f"def {name}({', '.join(reads)}):"]
        lines += [f"    {b} = _pm_stack({n}, {dt})" for b, dt, n in spec.buffers if b in used]
        lines += ["    " + line for s in stmts for line in s.splitlines()]
        rets = [f"_pm_canon({o})" if isinstance(arg_type(o), types.Array) else o for o in outputs]
        lines.append(f"    return ({''.join(r + ', ' for r in rets)})")
        part_ops = tuple([None] * len(rebuilt) + ops[lo:hi])
        parts.append(PartSource(name, "\n".join(lines) + "\n", tuple(reads), tuple(outputs), argtypes, tuple(stmts), part_ops, sum(w[lo:hi])))
        target = "".join(o + ", " for o in outputs)
        call = f"_pm_part(_pm_tab, {k}, _pm_fn_{name}, ({''.join(r + ', ' for r in reads)}))"
        calls.append(f"{target}= {call}" if outputs else call)
    for r in entry_rebuilt:
        calls.append(makers[r][0])
        if makers[r][1] is not None:
            entry_buffers[makers[r][1]] = buffers[makers[r][1]]
    return Split(parts, tuple(calls), tuple(entry_buffers.values()))


@dataclass
class Part:
    """A part ready to compile (or load from numba's cache) for its argument types."""

    spec: PartSource
    key: str | None
    dispatcher: object

    def compile(self) -> None:
        self.dispatcher.compile(self.spec.argtypes)

    def in_cache(self) -> bool:
        from pmfast.compiler import cache

        return cache.has_index(self.dispatcher)

    def address(self) -> int:
        """The native address of the compiled part (numba's calling convention)."""
        cres = self.dispatcher.overloads[self.spec.argtypes]
        return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


def prepare(original, spec, fn, env: dict, plan: tuple, options: dict, E, w=None):
    """The entry for ``spec`` as parts and a thin entry calling them (a
    :class:`pmfast.compiler.entry.PreparedEntry`), or None to compile it whole.

    ``original`` is the spec before :mod:`pmfast.compiler.scalars` (its nodes give the values'
    types), ``env`` the entry's globals, ``plan`` the node functions the whole entry would inline
    (:mod:`pmfast.compiler.inline`: each part inlines those it calls), ``w`` the body's
    :func:`weights` (the caller's, computed once per entry). ``E`` is the module
    :mod:`pmfast.compiler.entry`, passed by it (this module stands below it and does not import it).
    """
    from dataclasses import replace

    import numba
    import numpy as np
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import cache, callbacks, entry_native, entry_spec, lean_ir, library, native
    from pmfast.linker import chunk_source

    if not original.nodes or len(original.nodes) != len(original.body):
        return None
    var_of: dict = {}
    for stmt, node in zip(original.body, original.nodes, strict=True):
        a = _assign(stmt)
        if a is not None and len(a[0]) == len(node.outputs):
            var_of.update(zip(a[0], node.outputs, strict=True))
    input_types = {spec.inputs[0]: types.Array(types.float64, 1, "C")}
    for slot, arg in zip(spec.shared, spec.inputs[1:], strict=True):
        input_types[arg] = types.Array(numba.from_dtype(np.dtype(slot.dtype)), slot.ndim, "C")
    cut = split(spec, env, var_of, input_types, plan, w)
    if cut is None:
        return None
    graph_key = CACHED_SRC_FUNCTIONS.get(fn.vm.jit_fn.py_func)
    key_options = {**options, "parts": 1}
    pipeline = library.compiler(own_copies=True)
    pipeline = lean_ir.pipeline(pipeline) if E.lean_ir_enabled() else pipeline
    common = dict(
        __name__=E.__name__,
        _pm_view=native.array_view,
        _pm_stack=native.stack_buffer,
        _pm_cell=native.cell,
        _pm_store_cell=entry_native.store_cell,
        _pm_store_slot=entry_native.store_slot,
        _pm_canon=canon,
    )
    built, inlined = [], []
    for ps in cut.parts:
        penv = {**env, **common}
        src, _ = chunk_source(ps.source)
        key = E.entry_key(spec, src, graph_key, key_options)
        if plan and not E._index_exists(ps.name, key):
            inlined += E._inline_calls(replace(spec, body=ps.body), penv, plan)
        py = compile_numba_function_src(src, ps.name, penv, penv)
        cache.register(py, key)
        dispatcher = numba_njit(
            py, no_cpython_wrapper=True, no_cfunc_wrapper=True, cache=key is not None,
            fastmath=E.entry_fastmath(), pipeline_class=pipeline,
        )
        built.append(Part(ps, key, dispatcher))
    name = f"{spec.kind}_entry"
    espec = replace(spec, body=(f"_pm_tab = _pm_ud[{callbacks.PARTS_WORD[spec.kind]}]", *cut.calls), buffers=cut.buffers)
    src, _ = chunk_source(entry_spec.generate_source(espec, name))
    key = E.entry_key(espec, src, graph_key, key_options)
    eenv = {
        **env,
        **common,
        "_pm_part": call_part,
        "_pm_put": entry_native.put_piece,
        "_pm_u64": np.uint64,
        "_pm_f64": np.float64,
        **{f"_pm_dt{i}": np.dtype(s.dtype).type for i, s in enumerate(spec.shared)},
        **{f"_pm_fn_{p.spec.name}": p.dispatcher for p in built},
    }
    py = compile_numba_function_src(src, name, eenv, eenv)
    cache.register(py, key)
    entry_pipeline = library.compiler(own_copies=True)
    entry_pipeline = lean_ir.pipeline(entry_pipeline) if E.lean_ir_enabled() else entry_pipeline
    dispatcher = numba_njit(
        py, no_cpython_wrapper=True, no_cfunc_wrapper=True, cache=key is not None,
        fastmath=E.entry_fastmath(), pipeline_class=entry_pipeline,
    )
    return E.PreparedEntry(
        espec, src, key, dispatcher, tuple(inlined), lambda: E.prepare_entry(original, fn, inline=False), tuple(built),
        sum(p.spec.weight for p in built),
    )

