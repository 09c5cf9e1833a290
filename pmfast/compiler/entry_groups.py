"""Repeated groups of a big entry's statements: one numba function per distinct group, called per copy.

A big graph's entry (:func:`pmfast.compiler.entry.prepare_entry`, the node functions called by
symbol) is one straight line of node calls, and a hierarchical model's is mostly ``k`` copies of one
per-group subgraph: hier_var (8 groups) has 1,198 statements, 998 of them in 8 (or 7) copies of three
groups. numba types and lowers every statement, and LLVM optimises the result, per copy. Here the
copies are found in the statement list and each distinct group becomes a function of its own
(``_pm_group<n>``: the copy's statements in its schedule order, the values it reads from outside as
arguments, those read outside as a returned tuple), compiled like the entry and called from it by
symbol (:class:`pmfast.loops.deferred.Deferred`), once per copy.

**Finding copies** (:func:`find`). Each statement ``t = f(a, b)`` gets a class: its callee (the
node function's cache key), its arity and the classes of its arguments' producers (an entry input or
a global counts by its kind only), so equal classes compute the same tree of node functions from
different leaves. Seeds are the classes with several members, deepest first; from the seed's
members (one per copy) a group grows backward (the producers of an argument, when each copy's is a
distinct unclaimed statement with the same callee and output) and forward (the one consumer per
copy in the same argument position). Fusion puts several groups' work into one wide node, whose
outputs then feed the copies at different output positions: such a node is not part of a group, it
is an argument of each copy.

**Proof** (:mod:`pmfast.compiler.group_proof`): every copy's statements map one to one onto the
first copy's (the template), with the same callee objects and the same internal wiring; a value
from outside is an argument (one per distinct tuple of the copies' values), a
global that differs between copies only if numba types it as an argument as it types the global
(arrays are passed read-only views: a global array is typed read-only). The new statement order
(each copy contiguous, in the template's order; everything else as before) must respect the data
dependencies and pytensor's destroy orderings (``fgraph.orderings()``: a value is read before an
in-place op overwrites it); a group that makes that impossible is dropped. The same node functions
run on the same values, so the results are the same bits.

**Copies that differ.** A row the copies don't all agree on may drop up to a quarter of the seed's
copies (those outside the largest agreeing set; they stay inline or group among themselves), and
with many copies a group needs fewer statements (:func:`min_statements`): hier_var's copies differ
where one of them destroys a buffer all read (``PMFAST_GROUP_SUBSETS=0``: every copy or no row, 8
statements). Such an in-place copy calls its plain twin's node function inside a group
(:mod:`pmfast.compiler.group_twins`).

Declined (the entry as before, byte for byte) when no group of at least :data:`MIN_STATEMENTS`
statements repeats, or ``PMFAST_ENTRY_GROUPS=0``. The groups' keys are part of the entry's key.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from pmfast.compiler.group_proof import Group, _orderings, _readonly, _schedule, _split_stages, _Stmt, _verify

#: Bump whenever the generated group functions or the grouping change.
GROUPS_VERSION = 1

#: A group smaller than this (statements per copy) stays inline: its call glue would cost about
#: what its statements do.
MIN_STATEMENTS = 8
#: With many copies a group of as few as this many statements is still called (``min_statements``).
MIN_STATEMENTS_MANY = 3
#: ... when its copies hold at least this many statements in all.
MIN_SAVED = 48


def enabled() -> bool:
    """``PMFAST_ENTRY_GROUPS=0`` turns the grouping off."""
    return os.environ.get("PMFAST_ENTRY_GROUPS", "1") != "0"


def subsets_enabled() -> bool:
    """Whether a group may drop a few of its copies to grow further (``PMFAST_GROUP_SUBSETS=0``: every
    seed member or no row), and whether many copies lower the size a group needs (:func:`min_statements`)."""
    return os.environ.get("PMFAST_GROUP_SUBSETS", "1") != "0"


def min_statements(copies: int) -> int:
    """The statements per copy a group (or stage) needs: :data:`MIN_STATEMENTS`, or, with many copies,
    as few as :data:`MIN_STATEMENTS_MANY` when they make :data:`MIN_SAVED` statements in all."""
    if not subsets_enabled():
        return MIN_STATEMENTS
    return max(MIN_STATEMENTS_MANY, min(MIN_STATEMENTS, -(-MIN_SAVED // copies)))


def _parse(body, inputs, env) -> list[_Stmt]:
    from pmfast.linker import call_args

    out = []
    for s in body:
        try:
            node = ast.parse(s).body
        except SyntaxError:
            node = []
        st = _Stmt((), None, ())
        if len(node) == 1 and isinstance(node[0], ast.Assign) and len(node[0].targets) == 1:
            tgt, val = node[0].targets[0], node[0].value
            names = tgt.elts if isinstance(tgt, ast.Tuple) else [tgt]
            if all(isinstance(n, ast.Name) for n in names) and isinstance(val, ast.Call) and isinstance(val.func, ast.Name) and not val.keywords:
                args = call_args(val)
                if args is not None and all(isinstance(a, ast.Name) for a in args):
                    st = _Stmt(tuple(n.id for n in names), val.func.id, tuple(a.id for a in args), isinstance(tgt, ast.Tuple))
        out.append(st)
    return out


def _callee_key(env, name):
    """The identity of a called node function: a :class:`Deferred`'s key (calls by symbol only)."""
    from pmfast.loops.deferred import Deferred

    fn = env.get(name)
    return fn.key if isinstance(fn, Deferred) and fn.restype is None else None


def _leaf(env, name, inputs):
    if name in inputs:
        return ("in",)
    v = env.get(name)
    return ("g", type(v).__name__, str(getattr(v, "dtype", "")), getattr(v, "ndim", -1))


def find(stmts: list[_Stmt], env: dict, inputs) -> list[Group]:
    """The repeated groups of ``stmts`` (not yet verified), deepest seeds first."""
    n = len(stmts)
    prod: dict[str, tuple[int, int]] = {}
    users: dict[str, list[tuple[int, int]]] = {}
    local = []
    intern: dict = {}
    cls, depth = [], []
    for i, st in enumerate(stmts):
        key = _callee_key(env, st.fn) if st.fn else None
        local.append((key, len(st.targets), len(st.args), st.unpack) if key is not None else ("opaque", i))
        labels, d = [], 1
        for j, a in enumerate(st.args):
            users.setdefault(a, []).append((i, j))
            if a in prod:
                p, k = prod[a]
                labels.append((cls[p], k))
                d = max(d, depth[p] + 1)
            else:
                labels.append(_leaf(env, a, inputs))
        cls.append(intern.setdefault((local[i], tuple(labels)), len(intern)))
        depth.append(d)
        for k, t in enumerate(st.targets):
            prod[t] = (i, k)
    members: dict[int, list[int]] = {}
    for i, c in enumerate(cls):
        members.setdefault(c, []).append(i)
    seeds = sorted((c for c, m in members.items() if len(m) > 1 and local[m[0]][0] != "opaque"), key=lambda c: -depth[members[c][0]])
    claim: dict[int, tuple[int, int]] = {}
    groups: list[Group] = []
    subsets = subsets_enabled()
    for c in seeds:
        seed = [i for i in members[c] if i not in claim]
        if len(seed) < 2:
            continue
        gid = len(groups)
        rows = [list(seed)]
        for s in seed:
            claim[s] = (gid, 0)
        todo = [0]
        budget = [len(seed) // 4 if subsets else 0]  # copies that may still be dropped

        def take(row):
            for s in row:
                claim[s] = (gid, len(rows))
            rows.append(list(row))
            todo.append(len(rows) - 1)

        def agree(buckets):
            """The copies (positions) to keep for a candidate row: all, or all but those outside the
            largest bucket when at most ``budget`` copies fall outside it; None: no row."""
            m = len(rows[0])
            best = max(buckets.values(), key=len, default=[])
            if len(best) == m:
                return best
            if len(best) < 2 or m - len(best) > budget[0]:
                return None
            return best

        def shrink(keep):
            budget[0] -= len(rows[0]) - len(keep)
            for r, row in enumerate(rows):
                for q, s in enumerate(row):
                    if q not in keep:
                        del claim[s]
                rows[r] = [row[q] for q in keep]

        while todo:
            row = rows[todo.pop()]
            for j in range(len(stmts[row[0]].args)):
                buckets: dict = {}
                for q, s in enumerate(row):
                    p = prod.get(stmts[s].args[j])
                    if p is not None and local[p[0]][0] != "opaque" and p[0] not in claim:
                        buckets.setdefault((local[p[0]], p[1]), []).append(q)
                keep = agree(buckets)
                if keep is None:
                    continue
                ps = [prod[stmts[row[q]].args[j]][0] for q in keep]
                if len(set(ps)) != len(ps):
                    continue
                if len(keep) < len(row):
                    shrink(keep)
                    row = [row[q] for q in keep]
                take(ps)
            for k in range(len(stmts[row[0]].targets)):
                per_copy = []
                for s in row:
                    d: dict = {}
                    for u, j in users.get(stmts[s].targets[k], ()):
                        d.setdefault((local[u], j), []).append(u)
                    per_copy.append(d)
                for key in {key: None for d in per_copy for key in d}:
                    if key[0][0] == "opaque" or len(per_copy) != len(row):
                        continue
                    buckets = {}
                    for q, d in enumerate(per_copy):
                        us = d.get(key, ())
                        if len(us) == 1 and us[0] not in claim:
                            buckets.setdefault(0, []).append(q)
                    keep = agree(buckets)
                    if keep is None:
                        continue
                    us = [per_copy[q][key][0] for q in keep]
                    if len(set(us)) != len(us):
                        continue
                    if len(keep) < len(row):
                        shrink(keep)
                        per_copy = [per_copy[q] for q in keep]
                        row = [row[q] for q in keep]
                    take(us)
        order = sorted(range(len(rows)), key=lambda p: rows[p][0])  # template order: copy 0's schedule
        m = len(rows[0])
        groups.append(Group([[rows[p][c] for p in order] for c in range(m)]))
        if len(rows) < min_statements(m):
            for row in rows:
                for s in row:
                    del claim[s]
            groups[-1] = None
    return [g for g in groups if g is not None]


@dataclass
class Plan:
    """The grouped entry: its new ``body``, the globals to add (group callers, read-only views) and
    the groups' keys (part of the entry's key)."""

    body: tuple[str, ...]
    env: dict
    keys: tuple[str, ...]
    groups: list[Group]
    sources: tuple[str, ...]


def _groups(stmts, env, inputs, produced, users, live_out, orderings):
    """``(groups, order)``: the verified groups and the new statement order, or None."""
    groups = find(stmts, env, inputs)
    if not groups:
        return None
    preds = [[] for _ in stmts]
    prod = {t: i for i, st in enumerate(stmts) for t in st.targets}
    for i, st in enumerate(stmts):
        preds[i] = sorted({prod[a] for a in st.args if a in prod} | set(orderings.get(i, ())))
    staged = [s for g in groups for s in _split_stages(g, stmts, preds) if len(s.copies[0]) >= min_statements(len(s.copies))]
    groups = [g for g in staged if _verify(g, stmts, env, inputs, produced, users, live_out)]
    while groups:
        order = _schedule(stmts, groups, orderings)
        if order is not None:
            return groups, order
        groups.pop()
    return None


def plan(spec, env: dict, fn, graph_key, options: dict, jit, entry_key) -> Plan | None:
    """Group ``spec``'s repeated statements (see the module docstring), or None (the entry as it is).

    ``env``: the entry's globals with the node functions as :class:`Deferred` callers; ``jit(src,
    name, env, key)``: a dispatcher compiled as the entry is; ``entry_key``: the entry's key function
    (:func:`pmfast.compiler.entry.entry_key`, passed in: the entry module imports this one).
    """
    from pmfast.compiler import group_twins
    from pmfast.linker import chunk_source
    from pmfast.loops.deferred import Deferred

    if not enabled() or graph_key is None or not spec.nodes or len(spec.nodes) != len(spec.body):
        return None
    inputs = set(spec.inputs)
    stmts = _parse(spec.body, inputs, env)
    produced = [t for st in stmts for t in st.targets]
    if len(set(produced)) != len(produced) or inputs & set(produced):
        return None
    produced = set(produced)
    users: dict = {}
    for i, st in enumerate(stmts):
        for j, a in enumerate(st.args):
            users.setdefault(a, []).append((i, j))
    live_out = set(spec.outputs) | {p for ps in spec.pieces if ps for p in ps}
    orderings = _orderings(fn, spec.nodes)
    if orderings is None:
        return None
    swaps = group_twins.twins(stmts, spec.nodes)
    own = {i: stmts[i].fn for i in swaps}
    for i, twin in swaps.items():
        stmts[i].fn = twin
    while True:  # a twin that joins no group: the statement calls its own function again
        found = _groups(stmts, env, inputs, produced, users, live_out, {a: b for a, b in orderings.items() if a not in swaps})
        grouped = {s for g in found[0] for copy in g.copies for s in copy} if found else set()
        stray = [i for i in swaps if i not in grouped]
        if not stray:
            break
        for i in stray:
            stmts[i].fn = own[i]
            del swaps[i]
    if found is None:
        return None
    groups, order = found
    new_env, keys, sources, calls = {}, [], [], {}
    for gi, g in enumerate(groups):
        name = f"_pm_group{gi}"
        lines = [f"def {name}({', '.join(g.param_names)}):"]
        lines += ["    " + line for line in g.lines]
        lines.append(f"    return ({', '.join(g.output_names)},)")
        src, _ = chunk_source("\n".join(lines) + "\n")
        callees = tuple(env[stmts[s].fn].key for s in g.copies[0])
        key = entry_key(spec, src, graph_key, {**options, "group": callees, "groups_version": GROUPS_VERSION})
        key = "pmfast_group_" + key.removeprefix("pmfast_entry_")
        genv = {**env, "__name__": __name__}
        dispatcher = jit(src, name, genv, key)
        new_env[name] = Deferred(dispatcher, key, None)
        keys.append(key)
        sources.append(src)
        for c in range(len(g.copies)):
            for v in g.params[c]:
                if v not in inputs and v not in produced:
                    new_env[v] = _readonly(env[v])
            line = f"{', '.join(g.outputs[c])}, = {name}({', '.join(g.params[c])})"
            calls[(gi, c)], _ = chunk_source(line)
            calls[(gi, c)] = calls[(gi, c)].strip()
    body = tuple(calls[u] if isinstance(u, tuple) else spec.body[u] for u in order)
    return Plan(body, new_env, tuple(keys), groups, tuple(sources))
