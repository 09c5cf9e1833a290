"""Loop bodies: the statements that evaluate a node's scalar op for one element.

The fused loop evaluates its ``Composite`` (the scalar graph ``FusionOptimizer`` built) inline:
:func:`scalar_body` emits one statement per inner node, each calling that node's *stock* numba
scalar function (so each value is computed by the same code as stock), spliced into the loop
source rather than called as a function (a call that LLVM does not inline spills every register
around the loop's ``exp`` calls: 424 vs 339 µs on a 30k-row Poisson loop). On the way:

* **Switch lifting** (:func:`lift_switches`): ``switch(c, f(a, u), f(b, u))`` ->
  ``f(switch(c, a, b), u)``;
* **lazy Switches** (:func:`lazy_composite_plan`): a Switch one of whose branches owns an
  expensive op (not in :data:`CHEAP_SCALAR_OPS`) becomes ``if``/``else``; every other Switch
  stays a select (a mispredicted branch costs more than cheap arithmetic).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bump whenever :func:`scalar_body` changes the code it generates.
BODY_VERSION = 3

#: Scalar ops cheap enough that a branch made only of them is not worth a
#: conditional jump (a mispredicted branch costs more than the arithmetic):
#: a Switch is evaluated lazily only if one of its branches owns an op not
#: listed here (``exp``, ``log1p``, ``softplus``, ``sigmoid``, ``pow``...).
CHEAP_SCALAR_OPS = frozenset(
    {
        "Add", "Sub", "Mul", "Neg", "TrueDiv", "IntDiv", "Abs", "Sqr", "Identity", "Cast",
        "LT", "GT", "LE", "GE", "EQ", "NEQ", "AND", "OR", "XOR", "Invert", "Switch",
        "Maximum", "Minimum", "Second", "Sign", "Reciprocal",
    }
)  # fmt: skip


#: Scalar ops whose numba code can raise (integer division by zero): a graph
#: containing one keeps the stock evaluation of every Switch branch.
MAY_RAISE = frozenset({"IntDiv", "Mod"})


def _scalar_op_name(op) -> str:
    name = type(op).__name__
    if name == "Cast" or name.startswith("Convert") or name.startswith("Cast"):
        return "Cast"
    return name


def lazy_composite_plan(fgraph):
    """Where each node of a Composite's inner ``fgraph`` is evaluated.

    Returns ``(order, context, lazy)``: ``order`` the toposorted nodes,
    ``context[node]`` a tuple of ``(switch_node, branch)`` pairs (branch 1:
    condition true, 2: false) under which the node's value is needed — the
    longest common prefix over all its uses, so a value needed in two places
    is computed once, in the innermost block enclosing both — and ``lazy`` the
    Switch nodes emitted as ``if``/``else`` (a branch owns an expensive op).
    """
    from pytensor.scalar.basic import Switch

    order = list(fgraph.toposort())
    switches = [n for n in order if isinstance(n.op, Switch)]
    out_vars = set(fgraph.outputs)

    def prefix(a, b):
        k = 0
        while k < len(a) and k < len(b) and a[k] == b[k]:
            k += 1
        return a[:k]

    def plan(lazy):
        need: dict = {}  # variable -> context

        def demand(var, ctx):
            need[var] = ctx if var not in need else prefix(need[var], ctx)

        for v in out_vars:
            demand(v, ())
        context = {}
        for node in reversed(order):
            ctxs = [need[o] for o in node.outputs if o in need]
            if not ctxs:
                continue  # dead (not an ancestor of an output)
            ctx = ctxs[0]
            for c in ctxs[1:]:
                ctx = prefix(ctx, c)
            context[node] = ctx
            if node in lazy:
                cond, x, y = node.inputs
                demand(cond, ctx)
                demand(x, (*ctx, (node, 1)))
                demand(y, (*ctx, (node, 2)))
            else:
                for i in node.inputs:
                    demand(i, ctx)
        return context

    # which switches pay off: one whose branch (evaluated lazily) owns an expensive op
    lazy = set(switches)
    context = plan(lazy)
    worth = set()
    for s in switches:
        if s not in context:
            continue
        owned = [
            n
            for n in order
            if n in context and any(step[0] is s for step in context[n]) and n is not s
        ]
        if any(_scalar_op_name(n.op) not in CHEAP_SCALAR_OPS for n in owned):
            worth.add(s)
    if worth != lazy:
        lazy = worth
        context = plan(lazy)
    return order, context, lazy


#: Most Switch liftings done on one scalar graph (a bound: the rewrite never loops).
MAX_LIFTS = 64


def lift_switches(fgraph):
    """``switch(c, f(a, u), f(b, u))`` -> ``f(switch(c, a, b), u)``, repeatedly, on a clone.

    Both branches apply the same op ``f`` (same props, same types) and are used
    by nothing else: the lifted form evaluates ``f`` once, on the selected
    argument, without a branch (pymc's Bernoulli: ``switch(y, -softplus(-x),
    -softplus(x))`` becomes ``-softplus(switch(y, -x, x))``). The same scalar
    functions see the same values, so results are identical. Returns
    ``(fgraph, n_lifted)``; ``fgraph`` is the input graph if nothing was lifted.
    """
    from pytensor.scalar.basic import Switch, switch

    def candidate(fg, node):
        if not isinstance(node.op, Switch):
            return None
        cond, x, y = node.inputs
        out = node.outputs[0]
        xo, yo = x.owner, y.owner
        if xo is None or yo is None or xo is yo or xo.op != yo.op or isinstance(xo.op, Switch):
            return None
        if len(xo.outputs) != 1 or len(xo.inputs) != len(yo.inputs) or not xo.inputs:
            return None
        if not (x.type == y.type == out.type):
            return None
        if len(fg.clients[x]) != 1 or len(fg.clients[y]) != 1 or x in fg.outputs or y in fg.outputs:
            return None
        new_inputs = []
        for a, b in zip(xo.inputs, yo.inputs):
            if a is b:
                new_inputs.append(a)
            elif a.type != b.type:
                return None
            else:
                new_inputs.append(switch(cond, a, b))
        new = xo.op.make_node(*new_inputs).outputs[0]
        return new if new.type == out.type else None

    n = 0
    fg = None
    while n < MAX_LIFTS:
        cur = fg or fgraph
        for node in cur.toposort():
            new = candidate(cur, node)
            if new is not None:
                if fg is None:  # clone on the first lifting; redo the match on the clone
                    fg = fgraph.clone()
                    break
                fg.replace(node.outputs[0], new, reason="pmfast.lift_switch")
                n += 1
                break
        else:
            break
    return (fg if n else fgraph), n



@dataclass(frozen=True)
class Body:
    """Statements computing outputs ``out_names`` from inputs ``in_names``.

    ``nodes[k]`` is the Apply node whose numba function the statements call as
    ``{prefix}f{k}``; ``consts[k]`` the constant they read as ``{prefix}c{k}``.
    """

    lines: tuple[str, ...]
    nodes: tuple
    consts: tuple
    prefix: str
    lazy: bool  # a Switch became if/else, or a Switch was lifted

    def env(self, funcify) -> dict:
        """The globals the statements need; ``funcify(node)`` gives a node's numba function."""
        env = {f"{self.prefix}f{k}": funcify(n) for k, n in enumerate(self.nodes)}
        env.update({f"{self.prefix}c{k}": np.dtype(c.type.dtype).type(c.data) for k, c in enumerate(self.consts)})
        return env


def scalar_body(fgraph, in_names, out_names, prefix: str = "s_", lazy: bool = True, lift: bool = True) -> Body:
    """The statements evaluating the scalar graph ``fgraph``: outputs assigned to ``out_names``.

    Unless an op may raise: with ``lift``, Switches are lifted; with ``lazy``, expensive
    branches are evaluated only when taken. Otherwise every node is evaluated, in topological
    order (Switches are selects: what a vectorized loop needs).
    """
    n_lifted = 0
    safe = not any(_scalar_op_name(n.op) in MAY_RAISE for n in fgraph.apply_nodes)
    if lift and safe:
        fgraph, n_lifted = lift_switches(fgraph)
    if lazy and safe:
        order, context, lazy_nodes = lazy_composite_plan(fgraph)
    else:
        order, context, lazy_nodes = list(fgraph.toposort()), None, set()
    names: dict = dict(zip(fgraph.inputs, in_names))
    consts: list = []
    nodes: list = []
    lines: list[str] = []
    counter = [0]

    def name(v):
        if v not in names:
            if getattr(v, "owner", None) is None:  # a constant
                names[v] = f"{prefix}c{len(consts)}"
                consts.append(v)
            else:  # pragma: no cover - emitted before use by construction
                raise ValueError(f"{v} used before it is computed")
        return names[v]

    def fresh():
        counter[0] += 1
        return f"{prefix}t{counter[0]}"

    def block(ctx, ind):
        for node in order:
            if context is not None and context.get(node) != ctx:
                continue
            if node in lazy_nodes:
                cond, x, y = node.inputs
                out = node.outputs[0]
                out_name = fresh()
                dt = np.dtype(out.type.dtype).name
                lines.append(f"{ind}if {name(cond)}:")
                block((*ctx, (node, 1)), ind + "    ")
                lines.append(f"{ind}    {out_name} = np.{dt}({name(x)})")
                lines.append(f"{ind}else:")
                block((*ctx, (node, 2)), ind + "    ")
                lines.append(f"{ind}    {out_name} = np.{dt}({name(y)})")
                names[out] = out_name
                continue
            args = ", ".join(name(i) for i in node.inputs)
            f = f"{prefix}f{len(nodes)}"
            nodes.append(node)
            outs = [fresh() for _ in node.outputs]
            if len(outs) == 1:
                lines.append(f"{ind}{outs[0]} = {f}({args})")
            else:
                lines.append(f"{ind}({', '.join(outs)},) = {f}({args})")
            for o, nm in zip(node.outputs, outs):
                names[o] = nm

    block((), "")
    for v, out in zip(fgraph.outputs, out_names, strict=True):
        lines.append(f"{out} = {name(v)}")
    return Body(tuple(lines), tuple(nodes), tuple(consts), prefix, bool(lazy_nodes or n_lifted))


def op_body(scalar_op, in_types, out_names, prefix: str = "s_", lazy: bool = True, lift: bool = True) -> Body:
    """:func:`scalar_body` of ``scalar_op`` applied to scalars of ``in_types``: a Composite's
    inner graph, or the single node of any other scalar op."""
    from pytensor.graph.fg import FunctionGraph

    if hasattr(scalar_op, "fgraph"):
        fgraph = flatten_composites(scalar_op.fgraph)
    else:
        node = scalar_op.make_node(*[t() for t in in_types])
        fgraph = FunctionGraph(node.inputs, node.outputs, clone=False)
    in_names = [f"a{k}" for k in range(len(fgraph.inputs))]
    return scalar_body(fgraph, in_names, out_names, prefix, lazy, lift)


def flatten_composites(fgraph):
    """``fgraph`` with every nested ``Composite`` node replaced by its inner graph (on a clone; the
    graph itself if there is none): each inner node then becomes a statement of the loop body
    instead of a call of the nested Composite's function, which LLVM may not inline."""
    from pytensor.graph.replace import clone_replace
    from pytensor.scalar.basic import Composite

    if not any(isinstance(n.op, Composite) for n in fgraph.apply_nodes):
        return fgraph
    fg = fgraph.clone()
    while True:
        nested = next((n for n in fg.toposort() if isinstance(n.op, Composite)), None)
        if nested is None:
            return fg
        inner = nested.op.fgraph
        outs = clone_replace(inner.outputs, dict(zip(inner.inputs, nested.inputs)))
        fg.replace_all(list(zip(nested.outputs, outs)), reason="pmfast.flatten_composite")


def body_ops(scalar_op) -> list:
    """The scalar ops a loop over ``scalar_op`` runs: a Composite's inner ops (nested ones
    flattened, :func:`flatten_composites`), or ``scalar_op`` itself."""
    if not hasattr(scalar_op, "fgraph"):
        return [scalar_op]
    return [n.op for n in flatten_composites(scalar_op.fgraph).apply_nodes]


#: Scalar ops whose numba code is branch-free arithmetic LLVM can widen: no libm call, nothing
#: that raises (besides these, pmfast.vmath's ops).
VECTOR_SAFE_OPS = (CHEAP_SCALAR_OPS - {"IntDiv"}) | {"IsNan", "IsInf", "Sqrt", "Floor", "Ceil", "Trunc"}


def is_vmath(op) -> bool:
    """Is ``op`` a pmfast.vmath scalar op (a branch-free, inlinable kernel)?"""
    from pmfast.vmath.ops import VmathOp

    return isinstance(op, VmathOp)


def vectorizable(body: Body) -> bool:
    """Is a loop running ``body`` worth vectorizing: only :data:`VECTOR_SAFE_OPS` and pmfast.vmath
    ops, at least one of them a vmath op? (Cheap arithmetic alone gains less from SIMD than the
    chunked form costs in buffer traffic: radon's 919-row loop 1.07 µs plain, 1.58 µs chunked.)"""
    if not all(_scalar_op_name(n.op) in VECTOR_SAFE_OPS or is_vmath(n.op) for n in body.nodes):
        return False
    return any(is_vmath(n.op) for n in body.nodes)


def lazy_composite_source(fgraph, func_name: str = "lazy_scalar"):
    """Python source of ``func_name(i0, ...)`` evaluating ``fgraph`` with lazy Switches.

    Returns ``(source, node_globals, const_globals)``: the source calls node ``k``'s scalar
    function as ``f{k}`` and reads constant ``c{k}``. ``None`` if there is nothing to make lazy
    (the caller keeps the stock Composite).
    """
    ins = [f"i{k}" for k in range(len(fgraph.inputs))]
    outs = [f"r{k}" for k in range(len(fgraph.outputs))]
    body = scalar_body(fgraph, ins, outs, prefix="")
    if not body.lazy:
        return None
    lines = ["    " + line for line in body.lines]
    lines.append(f"    return {outs[0]}" if len(outs) == 1 else f"    return ({', '.join(outs)},)")
    return f"def {func_name}({', '.join(ins)}):\n" + "\n".join(lines) + "\n", list(body.nodes), list(body.consts)
