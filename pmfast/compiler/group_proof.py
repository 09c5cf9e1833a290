"""A repeated group's proof: its copies isomorphic to its template, cut into convex stages, and a schedule.

The checks :func:`pmfast.compiler.entry_groups.plan` runs on each group :func:`~pmfast.compiler.entry_groups.find`
proposes (see that module's docstring, **Proof**): :func:`_verify` maps every copy one to one onto the
first (same callees, same internal wiring) and names the group's arguments and outputs;
:func:`_split_stages` cuts a group where a copy reads its own earlier values through a node outside it;
:func:`_schedule` orders the statements with each copy contiguous, or answers None when the data
dependencies or pytensor's destroy orderings (:func:`_orderings`) forbid it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np


@dataclass
class _Stmt:
    targets: tuple[str, ...]
    fn: str | None  # callee name (None: not a plain call, never grouped)
    args: tuple[str, ...]
    unpack: bool = False  # ``a, = f()`` / ``a, b = f()``: the call returns a tuple


@dataclass
class Group:
    """One distinct group: ``copies[c][p]`` is the statement of copy ``c`` at template position ``p``."""

    copies: list[list[int]]
    params: list[list[str]] = None  # params[c]: the values copy c passes
    param_names: list[str] = None  # the template's names for them
    outputs: list[list[str]] = None  # outputs[c]: copy c's names of the returned values
    output_names: list[str] = None
    lines: list[str] = None  # the template's statements


def _readonly(v):
    if isinstance(v, np.ndarray) and v.flags.writeable:
        v = v.view()
        v.flags.writeable = False
    return v


def _same_typing(v) -> bool:
    """Whether numba types ``v`` (an array: a read-only view of it) as an argument as it types it as a
    global (an array: read-only)."""
    from numba import typeof
    from numba.core import types
    from numba.core.typing.typeof import Purpose

    try:
        const = types.maybe_literal(v) or typeof(v, Purpose.constant)
        arg = typeof(_readonly(v), Purpose.argument)
    except Exception:
        return False
    if isinstance(const, types.Array):
        const = const.copy(readonly=True)
    return types.unliteral(const) == arg and isinstance(arg, (types.Array, types.Integer, types.Float, types.Boolean))


def _split_stages(g: Group, stmts, preds) -> list[Group]:
    """``g`` cut where a copy reads a value computed outside it from its own earlier statements (a wide
    fused node taking every group's forward values and feeding their backward parts): each stage is
    convex (no path leaves it and comes back), so it can run as one call."""
    m = len(g.copies)
    pos = [{s: p for p, s in enumerate(copy)} for copy in g.copies]
    lb = [0] * len(g.copies[0])
    first = min(min(copy) for copy in g.copies)
    changed = True
    while changed:
        changed = False
        for c in range(m):
            reach: dict[int, int] = {}
            for i in range(first, len(stmts)):
                p = pos[c].get(i)
                if p is None:
                    r = max((reach.get(u, -1) for u in preds[i]), default=-1)
                    if r >= 0:
                        reach[i] = r
                    continue
                st = lb[p]
                for u in preds[i]:
                    if u in pos[c]:
                        st = max(st, reach[u])
                    elif reach.get(u, -1) >= 0:
                        st = max(st, reach[u] + 1)
                reach[i] = st
                if st > lb[p]:
                    lb[p], changed = st, True
    out = []
    for k in sorted(set(lb)):
        keep = [p for p in range(len(lb)) if lb[p] == k]
        out.append(Group([[copy[p] for p in keep] for copy in g.copies]))
    return out


def _verify(g: Group, stmts, env, inputs, produced: set, users: dict, live_out: set) -> bool:
    """Check ``g``'s copies are isomorphic to its template and fill in its arguments and outputs.

    A value from outside is one argument per distinct tuple of the copies' values (its name ``p<q>``);
    the template's own values are named ``v<position>_<output>``."""
    where = {s: (c, p) for c, copy in enumerate(g.copies) for p, s in enumerate(copy)}
    prod = {}
    for s in where:
        for k, t in enumerate(stmts[s].targets):
            prod[t] = (s, k)
    tpl = g.copies[0]
    m = len(g.copies)
    slot: dict[tuple, str] = {}
    lines, params, pvals = [], [], [[] for _ in range(m)]
    for p, s0 in enumerate(tpl):
        t = stmts[s0]
        for c in range(m):
            u = stmts[g.copies[c][p]]
            if env.get(u.fn) is not env.get(t.fn) or u.unpack != t.unpack or len(u.targets) != len(t.targets) or len(u.args) != len(t.args):
                return False
        args = []
        for j, a0 in enumerate(t.args):
            inner0 = prod.get(a0)
            inner0 = inner0 if inner0 is not None and where[inner0[0]][0] == 0 else None
            vs = []
            for c in range(m):
                a = stmts[g.copies[c][p]].args[j]
                inner = prod.get(a)
                inner = inner if inner is not None and where[inner[0]][0] == c else None
                if (inner0 is None) != (inner is None):
                    return False
                if inner0 is not None and (where[inner[0]][1] != where[inner0[0]][1] or inner[1] != inner0[1]):
                    return False
                vs.append(a)
            if inner0 is not None:
                args.append(f"v{where[inner0[0]][1]}_{inner0[1]}")
                continue
            vs = tuple(vs)
            if vs not in slot:
                is_global = [v not in inputs and v not in produced and v in env for v in vs]
                if all(is_global) and len(set(vs)) == 1:
                    slot[vs] = vs[0]  # the same global in every copy: left global
                else:
                    if any(glob and not _same_typing(env[v]) for v, glob in zip(vs, is_global)):
                        return False
                    slot[vs] = f"p{len(params)}"
                    params.append(slot[vs])
                    for c in range(m):
                        pvals[c].append(vs[c])
            args.append(slot[vs])
        targets = ", ".join(f"v{p}_{k}" for k in range(len(t.targets)))
        lines.append(f"{targets}{',' if t.unpack and len(t.targets) == 1 else ''} = {t.fn}({', '.join(args)})")
    out_pos: list[tuple[int, int]] = []
    seen = set()
    for copy in g.copies:
        mine = set(copy)
        for p, s in enumerate(copy):
            for k, t in enumerate(stmts[s].targets):
                if (p, k) not in seen and (t in live_out or any(u not in mine for u, _ in users.get(t, ()))):
                    seen.add((p, k))
                    out_pos.append((p, k))
    out_pos.sort()
    g.param_names, g.params, g.lines = params, pvals, lines
    g.output_names = [f"v{p}_{k}" for p, k in out_pos]
    g.outputs = [[stmts[copy[p]].targets[k] for p, k in out_pos] for copy in g.copies]
    return bool(out_pos)


def _schedule(stmts, groups: list[Group], orderings: dict[int, list[int]]) -> list | None:
    """The new statement order: units (a statement, or ``(g, c)``: copy c of group g), or None on a cycle."""
    unit_of: dict[int, object] = {}
    for gi, g in enumerate(groups):
        for c, copy in enumerate(g.copies):
            for p, s in enumerate(copy):
                unit_of[s] = (gi, c)
    # within a copy the template order must respect the destroy orderings
    for after, before in orderings.items():
        for b in before:
            ua, ub = unit_of.get(after), unit_of.get(b)
            if ua is not None and ua == ub:
                gi, c = ua
                copy = groups[gi].copies[c]
                if copy.index(b) > copy.index(after):
                    return None
    prod = {}
    for i, st in enumerate(stmts):
        for t in st.targets:
            prod[t] = i
    units: dict[object, int] = {}  # unit -> first statement index
    for i in range(len(stmts)):
        u = unit_of.get(i, i)
        units.setdefault(u, i)
    deps: dict[object, set] = {u: set() for u in units}
    for i, st in enumerate(stmts):
        u = unit_of.get(i, i)
        pre = [prod[a] for a in st.args if a in prod] + list(orderings.get(i, ()))
        for p in pre:
            v = unit_of.get(p, p)
            if v != u:
                deps[u].add(v)
    waiting = {u: len(d) for u, d in deps.items()}
    clients: dict[object, list] = {u: [] for u in units}
    for u, d in deps.items():
        for v in d:
            clients[v].append(u)
    heap = [(units[u], u) for u, w in waiting.items() if w == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, u = heapq.heappop(heap)
        out.append(u)
        for w in clients[u]:
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(heap, (units[w], w))
    return out if len(out) == len(units) else None


def _orderings(fn, nodes) -> dict[int, list[int]] | None:
    """pytensor's extra orderings (destroy handler: readers before an in-place writer) as statement indices."""
    try:
        ords = fn.maker.fgraph.orderings()
    except Exception:
        return None
    index = {n: i for i, n in enumerate(nodes)}
    out = {}
    for after, befores in ords.items():
        a = index.get(after)
        if a is not None:  # the gradient's dropped Join has no statement
            out[a] = [index[b] for b in befores if b in index]
    return out
