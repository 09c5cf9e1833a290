"""Numba code generation for :class:`pmfast.loops.spec.IndexedLoop`.

The loop is emitted as Python source (one nested ``for i<d> in range(n<d>)``
per loop dim; index loads and reads at the outermost level where their loop
dims are bound, the scalar function call and all writes inline) and jitted
by numba. Index arrays are bounds-checked element by
element (``IndexError``, never an out-of-bounds access); negative indices
wrap like numpy. Operand lengths are checked against the loop shape
(``ValueError``, like the stock Elemwise's refusal of runtime broadcasting).
The source depends only on the loop description and the dtypes, which is
what the cache key must cover (see :func:`source_key`).
"""

from __future__ import annotations

import numpy as np

from pmfast.loops.spec import ALL, ANY, INC, SET, STORE, SUM, Gather, IndexedLoop

#: Bump whenever the generated source changes shape.
CODEGEN_VERSION = 12

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


def _level(dims) -> int:
    """Loop nesting level at which a value depending on loop ``dims`` is available (0: before the loops)."""
    return max(dims, default=-1) + 1


def _checked_index(lines: list[str], var: str, at: str, kind: str, size: str) -> None:
    """Load index ``at`` into ``var`` as an int64 position below ``size``; negatives wrap."""
    if kind == "signed":
        lines.append(f"{var} = np.int64({at})")
        lines.append(f"if {var} < 0:")
        lines.append(f"    {var} += {size}")
        lines.append(f"if {var} < 0 or {var} >= {size}:")
        lines.append(_IDX_ERR)
    elif kind == "unsigned":
        lines.append(f"{var} = np.int64({at})")
        lines.append(f"if {var} >= {size}:")
        lines.append(_IDX_ERR)
    else:  # uint64: compare in uint64; below the size it fits int64
        lines.append(f"{var}_u = {at}")
        lines.append(f"if {var}_u >= u{size}:")
        lines.append(_IDX_ERR)
        lines.append(f"{var} = np.int64({var}_u)")


def _subscript(array: str, parts) -> str:
    return f"{array}[{', '.join(parts)}]" if parts else f"{array}[()]"


def generate_source(
    loop: IndexedLoop,
    input_dtypes,
    output_dtypes,
    func_name: str = "indexed_loop",
) -> str:
    """Python source of the loop function ``func_name(in0, in1, ...)``.

    One ``for i<d> in range(n<d>)`` per loop dim; every value (index
    position, read) is computed at the outermost level where all loop dims it
    depends on are bound. The source expects ``np`` and ``scalar_fn`` (the
    jitted scalar op) in its globals.
    """
    nd = loop.ndim
    args = [f"in{p}" for p in range(len(input_dtypes))]
    body: list[str] = []
    emit = body.append
    # per nesting level (0: before the loops): index loads, then reads; the body goes innermost
    loads: list[list[str]] = [[] for _ in range(nd + 1)]
    reads: list[list[str]] = [[] for _ in range(nd + 1)]
    inner: list[str] = []

    for d in range(nd):
        _emit_dim(body, loop, d)

    kinds = {g.index: _index_kind(input_dtypes[g.index]) for _, _, g in loop.gathered()}
    for array, ax in dict.fromkeys((a, ax) for a, ax, _ in loop.gathered()):
        emit(f"size{array}_{ax} = in{array}.shape[{ax}]")
        if "u64" in kinds.values():
            emit(f"usize{array}_{ax} = np.uint64(size{array}_{ax})")

    shape = "(" + "".join(f"n{d}, " for d in range(nd)) + ")"
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

    gather_var: dict = {}

    def position(array: int, ax: int, a) -> str:
        if a is None:
            return "0"
        if not isinstance(a, Gather):
            return f"i{a}"
        key = (array, ax, a)
        if key not in gather_var:
            var = gather_var[key] = f"j{len(gather_var)}"
            at = _subscript(f"in{a.index}", _index_position(a))
            level = _level(a.loop_dims())
            _checked_index(loads[level], var, at, kinds[a.index], f"size{array}_{ax}")
            _precheck_skipped(body, a, level, kinds[a.index], f"size{array}_{ax}")
        return gather_var[key]

    for k, r in enumerate(loop.reads):
        at = _subscript(f"in{r.array}", [position(r.array, ax, a) for ax, a in enumerate(r.axes)])
        level = _level(r.loop_dims()) if HOIST_INVARIANT_READS else nd
        # a read is placed where its position is known: before the loop when it is
        # invariant, so that LLVM can hoist what the scalar function computes from it
        # (it cannot prove a load inside the loop unaffected by the loop's stores)
        reads[level].append(f"a{k} = {at}")

    nout = getattr(loop.scalar_op, "nout", 1)
    call_args = ", ".join(f"a{k}" for k in range(len(loop.reads)))
    if nout == 1:
        inner.append(f"o0 = scalar_fn({call_args})")
    else:
        inner.append(f"({', '.join(f'o{k}' for k in range(nout))},) = scalar_fn({call_args})")

    here = [f"i{d}" for d in range(nd)]
    for k, w in enumerate(loop.writes):
        if w.mode == STORE:
            inner.append(f"{_subscript(f'out{k}', here)} = o{w.output}")
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
            for o, axes in w.terms():
                at = _subscript(f"out{k}", [position(w.buffer, ax, a) for ax, a in enumerate(axes)])
                inner.append(f"{at} {op} o{o}")

    # level 0 (invariant reads, index arrays of static length 1) runs even when the loop is
    # empty: a stock gather would have checked those indices
    body.extend(loads[0] + reads[0])
    ind = ""
    for d in range(nd):
        emit(f"{ind}for i{d} in range(n{d}):")
        ind += "    "
        body.extend(ind + line for line in loads[d + 1] + reads[d + 1])
    body.extend(ind + line for line in inner)
    for k, w in enumerate(loop.writes):
        if w.mode in (SUM, ALL, ANY):
            emit(f"out{k} = np.array(acc{k})")
    emit(f"return {outs[0]}" if len(outs) == 1 else f"return ({', '.join(outs)},)")
    return f"def {func_name}({', '.join(args)}):\n" + "\n".join("    " + line for line in body) + "\n"


def _emit_dim(body: list[str], loop: IndexedLoop, d: int) -> None:
    """``n<d>`` and the checks of every operand along loop dim ``d``; strides of loose indices."""
    ops = loop.dim_operands(d)
    groups = loop.loose_groups(d)
    loose = list(dict.fromkeys(pair for g in groups for pair in g))
    if ops:
        body.append(f"n{d} = in{ops[0][0]}.shape[{ops[0][1]}]")
    else:  # numpy's broadcast of the loose index lengths
        body.append(f"n{d} = 1")
        for p, ax in loose:
            body.append(f"if in{p}.shape[{ax}] != 1:")
            body.append(f"    n{d} = in{p}.shape[{ax}]")
    for p, ax in ops[1:]:
        body.append(f"if in{p}.shape[{ax}] != n{d}:")
        body.append(_LEN_ERR)
    for p, ax in loose:
        body.append(f"if in{p}.shape[{ax}] != 1 and in{p}.shape[{ax}] != n{d}:")
        body.append(_LEN_ERR)
        body.append(f"st{p}_{ax} = 0 if in{p}.shape[{ax}] == 1 else 1")
    for g in groups:
        body.append(f"if n{d} != 1 and {' and '.join(f'in{p}.shape[{ax}] != n{d}' for p, ax in g)}:")
        body.append(_LEN_ERR)


def _index_position(g: Gather) -> list[str]:
    """Subscripts of index array ``g`` at the current loop position."""
    out = []
    for j, e in enumerate(g.dims):
        if e is None:
            out.append("0")
        else:
            out.append(f"i{e} * st{g.index}_{j}" if g.loose else f"i{e}")
    return out


def _precheck_skipped(body: list[str], g: Gather, level: int, kind: str, size: str) -> None:
    """Check every index of ``g`` up front when an enclosing loop it does not run along is empty.

    An index loaded inside loop ``i<e>`` (``e`` not one of its dims) is never
    loaded when ``n<e> == 0``; the stock gather would still have checked it.
    """
    skipped = [e for e in range(level) if e not in g.loop_dims()]
    if not skipped:
        return
    body.append(f"if {' or '.join(f'n{e} == 0' for e in skipped)}:")
    body.append(f"    for v in in{g.index}.flat:")
    lines: list[str] = []
    _checked_index(lines, "v_", "v", kind, size)
    body.extend("        " + line for line in lines)


def source_key(loop: IndexedLoop, input_dtypes, output_dtypes) -> str:
    """Everything :func:`generate_source` depends on besides the scalar function."""
    return repr(
        (
            CODEGEN_VERSION,
            HOIST_INVARIANT_READS,
            loop.ndim,
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
