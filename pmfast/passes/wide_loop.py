"""A wide fused Elemwise as ONE loop whose calls all stay ≤ 24 arguments (part of ``wide_split``).

``elemwise_fusion`` builds Composites of up to 1024 inputs; numba compiles
calls with more than 30 arguments in O(n²) (see ``wide_split``), and a
Composite's kernel is a chain of such calls: the graph function's call, the
Elemwise's ``store_core_outputs`` and the scalar function itself (measured:
a 121-input Composite costs 11 s of CPU in those three alone). Splitting the
Composite into several Elemwise nodes keeps every call narrow but runs
several loops, each materialising the values the next one reads.

:class:`WideLoop` keeps the single loop and narrows every call instead:

* **Staging** (:func:`plan_stages`, a description testable without
  compiling): the Composite's scalar graph is cut, in topological order,
  into stages of at most :data:`LIMIT` inputs and outputs each — every stage
  a plain ≤ 24-input Composite — whose values pass from stage to stage as
  scalars inside the loop body, never stored. A wide inner Add/Mul is first
  cut into a left fold of ≤ 24-operand Add/Mul (numba evaluates an n-ary
  ``add`` as ``x0 + x1 + …`` left to right, so this is the same sequence of
  operations, bit for bit).
* **Packed invariants** (:func:`wide_loop`, the graph rewrite): inputs that
  every element reads alike (broadcastable on every axis) arrive packed, one
  array per dtype and ndim: 0-d values (also from behind an ``ExpandDims``)
  in a chunked ``MakeVector``, others in ``Join``s of ≤ 24; the loop unpacks
  them once. The other inputs are passed as arrays: at most ``LIMIT``, and
  ``MAX_ARITY`` arguments in all, or the rewrite declines.
* **Codegen** (:func:`loop_source`): one generated function, a loop nest over
  the output shape (runtime shape checks as stock's Elemwise), calling each
  stage's numba function (pytensor's own Composite code) per element.

Every stage computes the same scalar functions on the same values as the
Composite did: the outputs are bit-identical to stock's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from hashlib import sha256

import numpy as np
from pytensor.graph.basic import Apply, Constant
from pytensor.graph.op import Op
from pytensor.tensor.basic import as_tensor_variable
from pytensor.tensor.type import TensorType

from pmfast.compiler.arity import MAX_ARITY

_log = logging.getLogger(__name__)

#: Most inputs / outputs of a stage, and arrays passed to the loop (CPython's 30, minus headroom).
LIMIT = 24
#: Part of every cache key of the generated code.
VERSION = "wide_loop-1"


@dataclass(frozen=True)
class Stage:
    """One ≤ LIMIT-wide piece of the scalar graph.

    ``inputs`` are refs to values computed before it: ``("in", k)`` the
    Composite's input ``k``, ``("t", j)`` value ``j`` of an earlier stage;
    ``outputs`` the value ids it defines, in the order its ``op`` returns them.
    """

    op: object  # a pytensor.scalar Composite
    inputs: tuple
    outputs: tuple


@dataclass(frozen=True)
class Plan:
    """The stages of a Composite and, for each of its outputs, the ref holding it."""

    stages: tuple
    results: tuple

    def width(self) -> int:
        """The widest stage (inputs or outputs)."""
        return max((max(len(s.inputs), len(s.outputs)) for s in self.stages), default=0)


class _Decline(Exception):
    pass


def _narrow_assoc(outputs, limit):
    """The scalar graph of ``outputs`` with every Add/Mul of > ``limit`` operands as a left fold of ≤ ``limit``-operand nodes."""
    import pytensor.scalar as ps
    from pytensor.graph.replace import clone_replace
    from pytensor.graph.traversal import toposort

    wide = [n for n in toposort(outputs) if type(n.op) in (ps.Add, ps.Mul) and len(n.inputs) > limit]
    if not wide:
        return list(outputs)
    memo = {}
    for node in toposort(outputs):
        if node not in wide:
            continue
        ins = [memo.get(i, i) for i in node.inputs]
        acc = node.op(*ins[:limit])
        rest = ins[limit:]
        while rest:
            acc = node.op(acc, *rest[: limit - 1])
            rest = rest[limit - 1 :]
        if acc.type != node.outputs[0].type:
            raise _Decline("dtype of a partial fold")
        memo[node.outputs[0]] = acc
    # rebuild the graph on top of the folds (each fold refers to the original inputs)
    return clone_replace(list(outputs), replace=memo)


def plan_stages(composite, limit: int = LIMIT) -> Plan:
    """Cut ``composite``'s scalar graph into stages of ≤ ``limit`` inputs and outputs.

    Greedy over the topological order: a node joins the current stage unless
    that would give the stage more than ``limit`` inputs (values from outside
    it) or more than ``limit`` escaping values (read by later stages or
    returned); then the stage is closed. Raises ``ValueError`` if one node
    alone needs more (a wide inner op other than Add/Mul).
    """
    import pytensor.scalar as ps
    from pytensor.graph.replace import clone_replace
    from pytensor.graph.traversal import toposort

    fg = composite.fgraph
    inputs = list(fg.inputs)
    try:
        outputs = _narrow_assoc(list(fg.outputs), limit)
    except _Decline as exc:
        raise ValueError(str(exc)) from None
    if any(isinstance(o, Constant) or o in inputs for o in outputs):
        raise ValueError("an output is a constant or an input")
    nodes = list(toposort(outputs, blockers=inputs))
    clients: dict = {}
    for n in nodes:
        for v in n.inputs:
            clients.setdefault(v, set()).add(n)
    finals = set(outputs)
    ref = {v: ("in", k) for k, v in enumerate(inputs)}
    stages: list = []

    def close(group, ext, esc):
        new_in = [v.type() for v in ext]
        new_out = clone_replace(list(esc), replace=dict(zip(ext, new_in, strict=True)))
        ids = []
        for o in esc:
            ref[o] = ("t", sum(len(st.outputs) for st in stages) + len(ids))
            ids.append(ref[o][1])
        stages.append(Stage(ps.Composite(new_in, new_out), tuple(ref[v] for v in ext), tuple(ids)))

    group: set = set()
    ext: dict = {}  # values read from outside the stage (ordered)
    esc: dict = {}  # values the stage defines that later stages or the results read (ordered)
    for node in nodes:
        reads = [v for v in node.inputs if not isinstance(v, Constant) and v.owner not in group]
        done = {v for v in node.inputs if v in esc and v not in finals and clients[v] <= group | {node}}
        n_ext = len(ext.keys() | set(reads))
        n_esc = len(esc) - len(done) + len(node.outputs)
        if group and (n_ext > limit or n_esc > limit):
            close(group, list(ext), list(esc))
            group, ext, esc = set(), {}, {}
            reads = [v for v in node.inputs if not isinstance(v, Constant)]
            done = set()
        if len(set(reads)) > limit or len(node.outputs) > limit:
            raise ValueError(f"a scalar node needs more than {limit} inputs or outputs: {node}")
        group.add(node)
        ext.update(dict.fromkeys(reads))
        for v in done:
            del esc[v]
        esc.update(dict.fromkeys(node.outputs))
    if group:
        close(group, list(ext), list(esc))
    return Plan(tuple(stages), tuple(ref[o] for o in outputs))


def evaluate_plan(plan: Plan, values: list):
    """The Composite's outputs for scalar ``values``, computed stage by stage in Python (the reference)."""
    temps = {}

    def read(r):
        return values[r[1]] if r[0] == "in" else temps[r[1]]

    for stage in plan.stages:
        outs = stage.op.impl(*[read(r) for r in stage.inputs])
        if len(stage.outputs) == 1:
            outs = [outs]
        temps.update(zip(stage.outputs, outs, strict=True))
    return [read(r) for r in plan.results]


class WideLoop(Op):
    """An Elemwise ``scalar_op`` (a wide Composite) as one loop whose inputs arrive as arrays and packed invariants.

    ``layout[k]`` says where Composite input ``k`` comes from: ``("array", j)``
    node input ``j`` (an array of the loop's ndim, read per element or
    broadcast), or ``("pack", j, i)`` element ``[i, 0, …]`` of node input ``j``
    (a ``(k, 1, …, 1)`` pack of loop invariants).
    ``out_types`` are the original Elemwise's output types.
    """

    __props__ = ("scalar_op", "layout", "out_types")

    def __init__(self, scalar_op, layout, out_types):
        self.scalar_op = scalar_op
        self.layout = tuple(layout)
        self.out_types = tuple(out_types)

    @property
    def ndim(self) -> int:
        return self.out_types[0].ndim

    def make_node(self, *inputs):
        inputs = [as_tensor_variable(i) for i in inputs]
        for where in self.layout:
            t = inputs[where[1]].type
            if where[0] == "array" and t.ndim != self.ndim:
                raise TypeError(f"WideLoop array input {where[1]} must have ndim {self.ndim}")
            if where[0] == "pack" and (t.ndim < 1 or not all(t.broadcastable[1:])):
                raise TypeError(f"WideLoop pack input {where[1]} must be (k, 1, ..., 1)")
        return Apply(self, inputs, [t() for t in self.out_types])

    def _arrays(self):
        return sorted({w[1] for w in self.layout if w[0] == "array"})

    def infer_shape(self, fgraph, node, shapes):
        from pytensor.tensor.basic import constant

        shape = []
        for d in range(self.ndim):
            src = next((j for j in self._arrays() if not node.inputs[j].type.broadcastable[d]), None)
            shape.append(constant(1, dtype="int64") if src is None else shapes[src][d])
        return [tuple(shape) for _ in node.outputs]

    def perform(self, node, inputs, output_storage):
        arrays = {j: np.asarray(inputs[j]) for j in self._arrays()}
        shape = np.broadcast_shapes(*[a.shape for a in arrays.values()]) if arrays else ()
        for j, a in arrays.items():
            for d, (n, bc) in enumerate(zip(a.shape, node.inputs[j].type.broadcastable)):
                if not bc and n != shape[d]:
                    raise ValueError(f"WideLoop input {j} has length {n} on axis {d}, the loop {shape[d]}")
        outs = [np.empty(shape, dtype=t.dtype) for t in self.out_types]
        for idx in np.ndindex(*shape):
            vals = []
            for where in self.layout:
                if where[0] == "array":
                    a = arrays[where[1]]
                    vals.append(a[tuple(0 if a.shape[d] == 1 else i for d, i in enumerate(idx))])
                else:
                    pack = inputs[where[1]]
                    vals.append(pack[(where[2],) + (0,) * (pack.ndim - 1)])
            res = self.scalar_op.impl(*vals)
            if len(outs) == 1:
                res = [res]
            for o, r in zip(outs, res, strict=True):
                o[idx] = r
        for k, o in enumerate(outs):
            output_storage[k][0] = o

    def __str__(self) -> str:
        n_packed = sum(w[0] == "pack" for w in self.layout)
        return f"WideLoop{{{len(self.layout)} inputs, {n_packed} packed}}"


def _dtype_expr(dtype: str) -> str:
    return "np.bool_" if dtype == "bool" else f"np.{np.dtype(dtype).name}"


def loop_source(op: WideLoop, in_types, plan: Plan, func_name: str = "wide_loop") -> str:
    """Python source of the loop function: ``stage{k}`` are the stages' scalar functions (globals)."""
    ndim = op.ndim
    n_in = len(in_types)
    arrays = op._arrays()
    args = [f"a{j}" for j in range(n_in)]
    lines = [f"def {func_name}({', '.join(args)}):"]
    # invariants: unpacked once
    for k, where in enumerate(op.layout):
        if where[0] == "pack":
            at = ", ".join([str(where[2])] + ["0"] * (in_types[where[1]].ndim - 1))
            lines.append(f"    i{k} = a{where[1]}[{at}]")
    # loop shape and checks (stock Elemwise refuses runtime broadcasting of non-broadcastable axes)
    for d in range(ndim):
        srcs = [j for j in arrays if not in_types[j].broadcastable[d]]
        if not srcs:
            lines.append(f"    n{d} = 1")
            continue
        lines.append(f"    n{d} = a{srcs[0]}.shape[{d}]")
        for j in srcs[1:]:
            lines.append(f"    if a{j}.shape[{d}] != n{d}:")
            lines.append(f"        raise ValueError('WideLoop: input shapes do not match on axis {d}')")
    shape = "(" + "".join(f"n{d}, " for d in range(ndim)) + ")"
    for k, t in enumerate(op.out_types):
        lines.append(f"    out{k} = np.empty({shape}, dtype={_dtype_expr(t.dtype)})")
    ind = "    "
    for d in range(ndim):
        lines.append(f"{ind}for k{d} in range(n{d}):")
        ind += "    "
    for k, where in enumerate(op.layout):
        if where[0] != "array":
            continue
        t = in_types[where[1]]
        idx = ", ".join("0" if t.broadcastable[d] else f"k{d}" for d in range(ndim))
        lines.append(f"{ind}i{k} = a{where[1]}[{idx or '()'}]")

    def name(r):
        return f"i{r[1]}" if r[0] == "in" else f"t{r[1]}"

    for s, stage in enumerate(plan.stages):
        lhs = ", ".join(f"t{v}" for v in stage.outputs) + ("," if len(stage.outputs) == 1 else "")
        call = f"stage{s}({', '.join(name(r) for r in stage.inputs)})"
        if len(stage.outputs) == 1:
            lines.append(f"{ind}t{stage.outputs[0]} = {call}")
        else:
            lines.append(f"{ind}{lhs} = {call}")
    where = ", ".join(f"k{d}" for d in range(ndim)) or "()"
    for k, r in enumerate(plan.results):
        lines.append(f"{ind}out{k}[{where}] = {name(r)}")
    outs = [f"out{k}" for k in range(len(op.out_types))]
    if len(outs) == 1:  # the graph function assigns a single output as is
        lines.append("    return out0")
    else:
        chunks = [outs[i : i + LIMIT] for i in range(0, len(outs), LIMIT)]
        lines.append("    return " + " + ".join("(" + ", ".join(c) + ",)" for c in chunks))
    return "\n".join(lines) + "\n"


try:
    from pmfast import __version__ as pmfast_version
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, register_funcify_and_cache_key

    @register_funcify_and_cache_key(WideLoop)
    def numba_funcify_WideLoop(op, node, **kwargs):
        plan = plan_stages(op.scalar_op)
        env = {"np": np}
        keys = []
        for s, stage in enumerate(plan.stages):
            scalar_node = stage.op.make_node(*[i.type() for i in stage.op.inputs])
            env[f"stage{s}"], key = numba_funcify_and_cache_key(stage.op, node=scalar_node, **kwargs)
            keys.append(key)
        in_types = [i.type for i in node.inputs]
        src = loop_source(op, in_types, plan)
        fn = compile_numba_function_src(src, "wide_loop", env, write_to_disk=True)
        jitted = numba_basic.numba_njit(fn)
        if any(k is None for k in keys):
            return jitted, None
        key = sha256(
            str(("pmfast", pmfast_version, VERSION, src, tuple(map(str, in_types)), tuple(keys))).encode()
        ).hexdigest()
        return jitted, key

except ImportError:  # pragma: no cover - numba backend unavailable
    _log.debug("numba dispatch for WideLoop not registered", exc_info=True)


def _invariant_source(var):
    """The 0-d value every element of the loop reads from ``var`` (``var`` itself, or behind an ExpandDims), or ``None``."""
    from pytensor.tensor.elemwise import DimShuffle

    if var.type.ndim == 0:
        return var
    node = var.owner
    if node is not None and isinstance(node.op, DimShuffle) and node.inputs[0].type.ndim == 0:
        return node.inputs[0]
    return None


def _pack(members, dtype: str, ndim: int):
    """One ``(k, 1, …, 1)`` array of the invariants ``members`` (0-d: a chunked MakeVector; else Joins of ≤ LIMIT)."""
    from pytensor.tensor.basic import MakeVector, join

    from pmfast.passes.wide_joins import _chunked_make_vector

    if ndim == 0:
        return _chunked_make_vector(MakeVector(dtype), members)
    level = list(members)
    while len(level) > 1:
        level = [level[i] if len(level[i : i + LIMIT]) == 1 else join(0, *level[i : i + LIMIT]) for i in range(0, len(level), LIMIT)]
    return level[0]


def wide_loop(fgraph, node):
    """A wide Composite Elemwise ``node`` (> MAX_ARITY inputs) as one :class:`WideLoop`, or ``None``.

    Declined when: not a Composite Elemwise, inplace, ≤ MAX_ARITY inputs; an
    input is an integer-array gather (``indexed_elemwise`` fuses those into
    the loop split by ``split_composite`` instead); more than ``LIMIT``
    inputs must be passed as arrays (numba lowers a loop body reading 120
    arrays in ~40 s: worse than the Composite); the scalar graph can't be
    staged.
    """
    from pytensor.scalar.basic import Composite
    from pytensor.tensor.elemwise import Elemwise

    from pmfast.passes.wide_chunks import input_weight

    op = node.op
    if not isinstance(op, Elemwise) or not isinstance(op.scalar_op, Composite) or op.destroy_map:
        return None
    if len(node.inputs) <= MAX_ARITY or any(input_weight(i) > 1 for i in node.inputs):
        return None
    try:
        plan_stages(op.scalar_op)
    except ValueError:
        return None
    layout: list = [None] * len(node.inputs)
    arrays: dict = {}  # variable -> node input position
    packs: dict = {}  # (dtype, ndim) -> distinct invariants: 0-d values, or all-broadcastable arrays
    for k, var in enumerate(node.inputs):
        if all(var.type.broadcastable):
            src = _invariant_source(var)
            member = src if src is not None else var
            members = packs.setdefault((member.type.dtype, member.type.ndim), [])
            if member not in members:
                members.append(member)
            layout[k] = ("pack", (member.type.dtype, member.type.ndim), members.index(member))
        else:
            arrays.setdefault(var, len(arrays))
            layout[k] = ("array", var)
    if len(arrays) > LIMIT or len(arrays) + len(packs) > MAX_ARITY:
        return None  # measured: numba lowers a loop body reading 120 arrays in 40 s
    new_inputs = list(arrays)
    pack_pos = {}
    for (dtype, ndim), members in packs.items():
        pack_pos[(dtype, ndim)] = len(new_inputs)
        new_inputs.append(_pack(members, dtype, ndim))
    layout = [("array", arrays[w[1]]) if w[0] == "array" else ("pack", pack_pos[w[1]], w[2]) for w in layout]
    new_op = WideLoop(op.scalar_op, layout, [o.type for o in node.outputs])
    return new_op(*new_inputs, return_list=True)
