"""Numba code generation for :class:`pmfast.loops.spec.IndexedLoop`.

The loop is emitted as Python source (``for i in range(n)``, then one nested
loop per further axis; all reads, the scalar function call and all writes
inline) and jitted by numba. Index arrays are bounds-checked element by
element (``IndexError``, never an out-of-bounds access); negative indices
wrap like numpy. Operand lengths are checked against the loop shape
(``ValueError``, like the stock Elemwise's refusal of runtime broadcasting).
The source depends only on the loop description and the dtypes, which is
what the cache key must cover (see :func:`source_key`).
"""

from __future__ import annotations

import numpy as np

from pmfast.loops.spec import ALL, ANY, INC, SET, STORE, SUM, IndexedLoop

#: Bump whenever the generated source changes shape.
CODEGEN_VERSION = 7

#: Read operands of static length 1 on every axis once, before the loop.
HOIST_INVARIANT_READS = True

_LEN_ERR = '    raise ValueError("indexed_elemwise: loop operands have incompatible shapes")'
_IDX_ERR = '    raise IndexError("indexed_elemwise: index out of bounds")'


def _index_kind(dtype) -> str:
    dt = np.dtype(dtype)
    if dt.kind == "i":
        return "signed"
    if dt.kind == "u":
        return "u64" if dt.itemsize == 8 else "unsigned"
    raise TypeError(f"index dtype {dt} is not an integer dtype")


def generate_source(
    loop: IndexedLoop,
    input_dtypes,
    output_dtypes,
    func_name: str = "indexed_loop",
) -> str:
    """Python source of the loop function ``func_name(in0, in1, ...)``.

    The source expects ``np`` and ``scalar_fn`` (the jitted scalar op) in its globals.
    """
    nin = len(input_dtypes)
    nd = loop.ndim
    args = [f"in{p}" for p in range(nin)]
    body: list[str] = []
    emit = body.append

    # --- the iteration space and its checks
    drv = loop.driver()
    emit(f"n = in{drv}.shape[0]")
    for p in loop.length_checked():
        if p != drv:
            emit(f"if in{p}.shape[0] != n:")
            emit(_LEN_ERR)
    for d in range(1, nd):
        src = loop.dim_source(d)
        emit(f"m{d} = {1 if src is None else f'in{src}.shape[{d}]'}")
        for p in loop.dim_checked(d):
            if p != src:
                emit(f"if in{p}.shape[{d}] != m{d}:")
                emit(_LEN_ERR)

    # the axis-0 sizes that gathered / scattered arrays are checked against
    sized = sorted({a for a, _ in loop.gathered()} | {w.buffer for w in loop.writes if w.buffer is not None})
    for a in sized:
        emit(f"size{a} = in{a}.shape[0]")
        if _index_kind_any_u64(loop, input_dtypes):
            emit(f"usize{a} = np.uint64(size{a})")

    # --- outputs
    shape = "(" + ", ".join(["n"] + [f"m{d}" for d in range(1, nd)]) + ",)"
    outs = []
    for k, (w, dt) in enumerate(zip(loop.writes, output_dtypes, strict=True)):
        if w.mode == STORE:
            emit(f"out{k} = np.empty({shape}, dtype=np.{np.dtype(dt).name})")
        elif w.mode == SUM:
            emit(f"acc{k} = np.{np.dtype(dt).name}(0)")
        elif w.mode in (ALL, ANY):
            emit(f"acc{k} = {w.mode == ALL}")
        elif w.buffer in loop.inplace:
            emit(f"out{k} = in{w.buffer}")
        else:
            emit(f"out{k} = in{w.buffer}.copy()")
        outs.append(f"out{k}")

    def checked_index(lines: list[str], var: str, index_pos: int, size_of: int, at: str) -> None:
        kind = _index_kind(input_dtypes[index_pos])
        if kind == "signed":
            lines.append(f"{var} = np.int64(in{index_pos}[{at}])")
            lines.append(f"if {var} < 0:")
            lines.append(f"    {var} += size{size_of}")
            lines.append(f"if {var} < 0 or {var} >= size{size_of}:")
            lines.append(_IDX_ERR)
        elif kind == "unsigned":
            lines.append(f"{var} = np.int64(in{index_pos}[{at}])")
            lines.append(f"if {var} >= size{size_of}:")
            lines.append(_IDX_ERR)
        else:  # uint64: compare in uint64; below the size it fits int64
            lines.append(f"{var}_u = in{index_pos}[{at}]")
            lines.append(f"if {var}_u >= usize{size_of}:")
            lines.append(_IDX_ERR)
            lines.append(f"{var} = np.int64({var}_u)")

    hoisted: list[str] = []  # broadcast (index-length-1) gathers: checked once, before the loop
    outer: list[str] = []  # per i: gathered row indices, write row indices
    inner: list[str] = []  # per (i, k1, ...): reads, scalar call, writes

    def pos(d: int, bcast: bool) -> str:
        return "0" if bcast else ("i" if d == 0 else f"k{d}")

    gather_var: dict[tuple[int, int, bool], str] = {}
    for k, r in enumerate(loop.reads):
        trail = [pos(d, b) for d, b in enumerate(r.broadcast)][1:]
        if r.index is None:
            at = [pos(0, r.broadcast[0]), *trail]
        else:
            key = (r.array, r.index, r.broadcast[0])
            if key not in gather_var:
                var = f"j{len(gather_var)}"
                gather_var[key] = var
                if r.broadcast[0]:
                    checked_index(hoisted, var, r.index, r.array, "0")
                else:
                    checked_index(outer, var, r.index, r.array, "i")
            at = [gather_var[key], *trail]
        if HOIST_INVARIANT_READS and all(r.broadcast):
            # loop-invariant (static length 1 on every axis): read once, before the
            # loop, so that LLVM can hoist what the scalar function computes from it
            # (it cannot prove a load inside the loop unaffected by the loop's stores)
            hoisted.append(f"a{k} = in{r.array}[{', '.join(at)}]")
        else:
            inner.append(f"a{k} = in{r.array}[{', '.join(at)}]")

    nout = getattr(loop.scalar_op, "nout", 1)
    call_args = ", ".join(f"a{k}" for k in range(len(loop.reads)))
    if nout == 1:
        inner.append(f"o0 = scalar_fn({call_args})")
    else:
        inner.append(f"({', '.join(f'o{k}' for k in range(nout))},) = scalar_fn({call_args})")

    trail_pos = "".join(f", k{d}" for d in range(1, nd))
    for k, w in enumerate(loop.writes):
        if w.mode == STORE:
            inner.append(f"out{k}[i{trail_pos}] = o{w.output}")
        elif w.mode == SUM:
            inner.append(f"acc{k} += np.{np.dtype(output_dtypes[k]).name}(o{w.output})")
        elif w.mode == ALL:
            inner.append(f"if not o{w.output}:")
            inner.append(f"    acc{k} = False")
        elif w.mode == ANY:
            inner.append(f"if o{w.output}:")
            inner.append(f"    acc{k} = True")
        else:
            assert w.mode in (INC, SET)
            op = "+=" if w.mode == INC else "="
            for t, (o, p) in enumerate(w.terms()):
                var = f"w{k}" if t == 0 else f"w{k}_{t}"
                checked_index(outer, var, p, w.buffer, "i")
                inner.append(f"out{k}[{var}{trail_pos}] {op} o{o}")

    # broadcast gathers are checked even when n == 0: the stock gather would have raised
    body.extend(hoisted)
    emit("for i in range(n):")
    ind = "    "
    body.extend(ind + line for line in outer)
    for d in range(1, nd):
        emit(f"{ind}for k{d} in range(m{d}):")
        ind += "    "
    body.extend(ind + line for line in inner)
    for k, w in enumerate(loop.writes):
        if w.mode in (SUM, ALL, ANY):
            emit(f"out{k} = np.array(acc{k})")
    if len(outs) == 1:
        emit(f"return {outs[0]}")
    else:
        emit(f"return ({', '.join(outs)},)")

    return f"def {func_name}({', '.join(args)}):\n" + "\n".join("    " + line for line in body) + "\n"


def _index_kind_any_u64(loop: IndexedLoop, input_dtypes) -> bool:
    idx = {r.index for r in loop.reads if r.index is not None} | {p for w in loop.writes for _, p in w.terms()}
    return any(_index_kind(input_dtypes[p]) == "u64" for p in idx)


def source_key(loop: IndexedLoop, input_dtypes, output_dtypes) -> str:
    """Everything :func:`generate_source` depends on besides the scalar function."""
    return repr(
        (
            CODEGEN_VERSION,
            HOIST_INVARIANT_READS,
            loop.reads,
            loop.writes,
            loop.inplace,
            tuple(np.dtype(d).name for d in input_dtypes),
            tuple(np.dtype(d).name for d in output_dtypes),
        )
    )



#: Bump whenever :func:`lazy_composite_source` changes the code it generates.
LAZY_VERSION = 2

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


def lazy_composite_source(fgraph, func_name: str = "lazy_scalar"):
    """Python source of ``func_name(i0, ...)`` evaluating ``fgraph`` with lazy Switches.

    Returns ``(source, node_globals, const_globals)``: the source calls the
    node ``k``'s scalar function as ``f{k}`` (``node_globals[k]`` is that
    Apply node, whose numba function the caller supplies) and reads constant
    ``c{k}`` (``const_globals[k]`` is the pytensor ``Constant``). ``None`` if
    there is nothing to make lazy (the caller keeps the stock Composite).
    """
    if any(_scalar_op_name(n.op) in MAY_RAISE for n in fgraph.apply_nodes):
        return None  # stock evaluates (and raises in) every branch: keep it
    fgraph, n_lifted = lift_switches(fgraph)
    order, context, lazy = lazy_composite_plan(fgraph)
    if not lazy and not n_lifted:
        return None
    names: dict = {}
    for k, v in enumerate(fgraph.inputs):
        names[v] = f"i{k}"
    consts: list = []
    nodes: list = []

    def name(v):
        if v not in names:
            if getattr(v, "owner", None) is None:  # a constant
                names[v] = f"c{len(consts)}"
                consts.append(v)
            else:  # pragma: no cover - emitted before use by construction
                raise ValueError(f"{v} used before it is computed")
        return names[v]

    lines: list[str] = []
    counter = [0]

    def fresh():
        counter[0] += 1
        return f"t{counter[0]}"

    def block(ctx, ind):
        for node in order:
            if context.get(node) != ctx:
                continue
            if node in lazy:
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
            f = f"f{len(nodes)}"
            nodes.append(node)
            outs = [fresh() for _ in node.outputs]
            if len(outs) == 1:
                lines.append(f"{ind}{outs[0]} = {f}({args})")
            else:
                lines.append(f"{ind}({', '.join(outs)},) = {f}({args})")
            for o, nm in zip(node.outputs, outs):
                names[o] = nm

    block((), "    ")
    ret = [name(v) for v in fgraph.outputs]
    lines.append(f"    return {ret[0]}" if len(ret) == 1 else f"    return ({', '.join(ret)},)")
    args = ", ".join(f"i{k}" for k in range(len(fgraph.inputs)))
    return f"def {func_name}({args}):\n" + "\n".join(lines) + "\n", nodes, consts
