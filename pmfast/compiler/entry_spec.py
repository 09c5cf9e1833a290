"""What a compiled pytensor function's C-ABI entry point runs, as data: :class:`EntrySpec` and its source.

nutpie calls ``logp(dim, x, grad_out, logp_out, user_data)`` and
``expand(dim, n_expanded, x, out, user_data)``. pmfast splits each callback
in two: a model-independent wrapper (:mod:`pmfast.compiler.callbacks`,
compiled once per machine) that checks dimensions, maps exceptions and
non-finite values to nutpie's return codes, and calls through an address
the model-specific **entry**::

    logp_entry(x_, out_, logp_, ud_) -> 0        expand_entry(x_, out_, ud_) -> 0

The entry is the graph function's own body (one call line per node, as
pytensor generates it) between a prologue that views the raw pointers as
arrays (the point, and each shared variable's data pointer and shape read
from nutpie's ``user_data`` at call time, so ``with_data`` can swap arrays of
other lengths) and an epilogue that writes the outputs into the caller's
buffers.

An output made by a ``Join`` along axis 0 of vectors (nutpie's gradient and
expand outputs) that nothing else reads is not built: its pieces are
written into the caller's buffer at their offsets (no Join to compile, no
array to allocate and copy per call).

:func:`describe` reads an :class:`EntrySpec` off a compiled function without compiling
anything; :func:`generate_source` turns it into Python source. Compiling it:
:mod:`pmfast.compiler.entry`.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field, replace

import numpy as np

from pmfast.compiler.arity import MAX_ARITY

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
    drop: set[int] = set()
    ops, nodes = _statement_ops(fn, stmts)
    if at is not None and outputs.count(outputs[vector]) == 1:
        found = _join_pieces(fgraph, fgraph.outputs[vector], stmts[at])
        if found is not None:
            pieces[vector] = tuple(found)
            drop = {at}
        elif getattr(fn.vm.jit_fn, "targetoptions", {}).get("_dbg_optnone"):
            # a big graph's entry (never cut into parts, where each piece would cross every cut)
            from pmfast.compiler.set_chain import chain_pieces

            chain = chain_pieces(fgraph, fgraph.outputs[vector], stmts, nodes)
            if chain is not None:
                pieces[vector], drop = tuple(chain[0]), set(chain[1])
    body = tuple(ast.unparse(s) for i, s in enumerate(stmts) if i not in drop)
    ops = tuple(o for i, o in enumerate(ops) if i not in drop) if ops else ()
    nodes = tuple(o for i, o in enumerate(nodes) if i not in drop) if ops else ()
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
    many = len(pieces) > MAX_ARITY  # a set_subtensor chain's pieces (pmfast.compiler.set_chain): one raise
    for piece in pieces:  # each piece copied by an intrinsic: -1 if it doesn't fit (nothing written)
        if many:
            emit(f"    _pm_at = _pm_put_called(out_, _pm_at, {piece}, {spec.n_out})")
            continue
        emit(f"    _pm_at = _pm_put(out_, _pm_at, {piece}, {spec.n_out})")
        emit("    if _pm_at < 0:")
        emit(f"        raise ValueError('{spec.kind} entry: the outputs do not fit the {spec.n_out} values expected')")
    if many:
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
