"""A big entry's repeated statement groups compiled once and called per copy (pmfast/compiler/entry_groups.py,
``PMFAST_ENTRY_GROUPS``)."""

from __future__ import annotations

import types

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pmfast
from conftest import big_graph_entries, compiled_names
from pmfast.compiler import entry_groups
from pmfast.compiler.entry import entry_key
from pmfast.loops.deferred import Deferred

# ---- the planner on synthetic statement lists, run as Python ----


def _f_add(a, b):
    return a + b


def _f_mul(a, b):
    return a * b - 0.5


def _f_sub(a, b):
    return a - 2.0 * b


def _f_wide(*xs):
    return tuple(x * 0.25 + 1.0 for x in xs)


def _f_sum(*xs):
    return sum(xs)


_FUNCS = {"f_add": _f_add, "f_mul": _f_mul, "f_sub": _f_sub, "f_sum": _f_sum}


def _env(k: int) -> dict:
    env = {name: Deferred(numba.njit(f), f"test_groups_{name}", None) for name, f in _FUNCS.items()}
    env[f"f_wide{k}"] = Deferred(numba.njit(_f_wide), f"test_groups_f_wide{k}", None)
    return env


def _program(k: int, ops: list[tuple[int, int, int]], wide_at: int | None, order_seed: int):
    """``k`` copies of one block (statements ``ops``: (function, arg a, arg b) over the block's earlier
    values, value 0 the copy's constant ``c<g>`` plus the input), interleaved at random, an optional
    wide node taking every copy's value ``wide_at`` and feeding each copy back, and a shared sum."""
    rng = np.random.default_rng(order_seed)
    names = list(_FUNCS)[:3]
    copies = []
    for g in range(k):
        vals = [f"t{g}_0"]
        body = [f"t{g}_0 = f_add(x, c{g})"]
        for i, (f, a, b) in enumerate(ops):
            if wide_at is not None and i == wide_at:
                vals.append(f"w{g}")  # the wide node's output for this copy
            a, b = vals[a % len(vals)], vals[b % len(vals)]
            body.append(f"t{g}_{i + 1} = {names[f]}({a}, {b})")
            vals.append(f"t{g}_{i + 1}")
        copies.append(body)
    stmts = []
    if wide_at is None:
        pos = [0] * k
        while any(p < len(c) for p, c in zip(pos, copies)):
            g = rng.choice([g for g in range(k) if pos[g] < len(copies[g])])
            stmts.append(copies[g][pos[g]])
            pos[g] += 1
    else:  # each copy's statements before the wide node, the node, the rest
        cut = wide_at + 1
        for part in (slice(0, cut), slice(cut, None)):
            if part.start == cut:
                stmts.append(f"{', '.join(f'w{g}' for g in range(k))} = f_wide{k}({', '.join(f't{g}_{wide_at}' for g in range(k))})")
            for g in rng.permutation(k):
                stmts += copies[g][part]
    stmts.append(f"total = f_sum({', '.join(f't{g}_{len(ops)}' for g in range(k))})")
    return stmts


def _dead(stmts, result: str) -> bool:
    """Whether a statement of copy 0 is not read, directly or not, by ``result``."""
    args = {line.split(" = ")[0]: line.split("(", 1)[1].rstrip(")").split(", ") for line in stmts if line.startswith("t0_")}
    live, todo = set(), [result]
    while todo:
        v = todo.pop()
        if v in args and v not in live:
            live.add(v)
            todo += args[v]
    return len(live) < len(args)


def _spec(stmts):
    return types.SimpleNamespace(
        kind="logp", body=tuple(stmts), inputs=("x",), nodes=tuple(range(len(stmts))), outputs=("total",),
        pieces=(None,), shared=(),
    )


def _fn():
    fgraph = types.SimpleNamespace(orderings=lambda: {})
    return types.SimpleNamespace(maker=types.SimpleNamespace(fgraph=fgraph))


def _run(body, env, consts) -> float:
    plain = {name: (v.dispatcher.py_func if isinstance(v, Deferred) else v) for name, v in env.items()}
    scope = {**plain, **consts, "x": 0.75}
    src = "def run():\n" + "".join(f"    {line}\n" for line in body) + "    return total\n"
    exec(src, scope)
    return scope["run"]()


def _plan(stmts, env, fn=None):
    made = {}

    def jit(src, name, genv, key):
        scope = dict(genv)
        exec(src, scope)
        made[name] = src
        return numba.njit(scope[name])

    return entry_groups.plan(_spec(stmts), env, fn or _fn(), "graph-key", {}, jit, entry_key), made


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(2, 5),
    ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9), st.integers(0, 9)), min_size=8, max_size=20),
    wide=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_grouped_program_computes_the_same(k, ops, wide, seed):
    wide_at = len(ops) // 2 if wide else None
    stmts = _program(k, ops, wide_at, seed)
    env = _env(k)
    consts = {f"c{g}": np.int64(g + 1) for g in range(k)}
    env.update(consts)
    plan, made = _plan(stmts, env)
    want = _run(stmts, env, consts)
    rhs = [line.split(" = ")[1] for line in stmts if line.startswith("t0_")]
    if plan is None:
        # copies with nothing between them group unless a copy repeats a statement (merged by pytensor)
        # or computes values its result never reads (removed by pytensor: groups grow along the uses)
        assert wide or len(set(rhs)) < len(rhs) or _dead(stmts, f"t0_{len(ops)}")
        return  # a stage under MIN_STATEMENTS: declined, the entry is unchanged
    assert _run(plan.body, {**env, **plan.env}, consts) == want  # same operations on the same values: same bits
    for g in plan.groups:
        assert len(g.copies) == k
    assert len(plan.body) < len(stmts)


def test_one_function_per_distinct_block():
    ops = [(0, 0, 0), (1, 1, 0), (2, 2, 1), (0, 3, 2), (1, 4, 4), (2, 5, 3), (0, 6, 1), (1, 7, 0), (2, 8, 8)]
    stmts = _program(4, ops, None, 3)
    env = _env(4)
    env.update({f"c{g}": np.int64(g) for g in range(4)})
    plan, made = _plan(stmts, env)
    assert plan is not None and len(plan.groups) == 1 and len(made) == 1
    assert sum("_pm_group0(" in line for line in plan.body) == 4
    assert len(plan.body) == 1 + 4  # the shared sum and four calls


def test_a_wide_node_between_copies_cuts_them_in_stages():
    """Each copy's statements before the shared node and after it are two groups (one call each per copy)."""
    ops = [(i % 3, i, i * 7 + 3) for i in range(16)]
    stmts = _program(3, ops, 8, 5)
    env = _env(3)
    consts = {f"c{g}": np.int64(g + 1) for g in range(3)}
    env.update(consts)
    plan, made = _plan(stmts, env)
    assert plan is not None and len(made) == 2
    assert _run(plan.body, {**env, **plan.env}, consts) == _run(stmts, env, consts)
    wide = next(i for i, line in enumerate(plan.body) if "f_wide3(" in line)
    assert all("_pm_group0(" in line for line in plan.body[:wide])
    assert all("_pm_group1(" in line for line in plan.body[wide + 1 : -1])


def test_small_or_unrepeated_blocks_decline():
    ops = [(0, 0, 0), (1, 1, 0), (2, 2, 1)]  # 4 statements per copy < MIN_STATEMENTS
    stmts = _program(3, ops, None, 0)
    env = _env(3)
    env.update({f"c{g}": np.int64(g) for g in range(3)})
    assert _plan(stmts, env)[0] is None
    one = _program(1, [(0, 0, 0)] * 12, None, 0)
    assert _plan(one, env)[0] is None


def test_destroy_orderings_that_cross_copies_decline():
    """A copy's statement must run after a statement outside it that in turn needs the copy: no schedule."""
    ops = [(0, 0, 0), (1, 1, 0), (2, 2, 1), (0, 3, 2), (1, 4, 4), (2, 5, 3), (0, 6, 1), (1, 7, 0), (2, 8, 8)]
    stmts = _program(2, ops, None, 0)
    env = _env(2)
    env.update({"c0": np.int64(1), "c1": np.int64(2)})
    total = len(stmts) - 1
    first = stmts.index("t0_0 = f_add(x, c0)")
    fn = _fn()
    # the shared sum (which reads both copies' last values) must precede copy 0's first statement
    fn.maker.fgraph.orderings = lambda: {first: [total]}
    assert _plan(stmts, env, fn)[0] is None


def test_switch_off(monkeypatch):
    monkeypatch.setenv("PMFAST_ENTRY_GROUPS", "0")
    stmts = _program(3, [(0, 0, 0), (1, 1, 0), (2, 2, 1)] * 4, None, 0)
    env = _env(3)
    env.update({f"c{g}": np.int64(g) for g in range(3)})
    assert _plan(stmts, env)[0] is None


# ---- a small model compiled as a big graph ----


def _blocks_model(k: int):
    import pymc as pm

    rng = np.random.default_rng(0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        for g in range(k):
            a = pm.Normal(f"a{g}", mu, 1, shape=3)
            s = pm.HalfNormal(f"s{g}", 1)
            x = rng.normal(size=(10, 3))
            pm.Normal(f"y{g}", pm.math.dot(x, a) + pm.math.exp(a).sum(), s, observed=rng.normal(size=10))
    return model


@pytest.fixture(scope="module")
def compiled_blocks(tmp_path_factory):
    from pmfast import nutpie_glue

    model = _blocks_model(3)
    plans, kernels = [], []
    orig = entry_groups.plan

    def spy(*args, **kwargs):
        plans.append(orig(*args, **kwargs))
        return plans[-1]

    with pytest.MonkeyPatch.context() as mp, big_graph_entries(tmp_path_factory.mktemp("groups")):
        mp.setattr(entry_groups, "plan", spy)
        fn, x0 = pmfast.logp_dlogp_function(model, "all")
        mp.setenv("PMFAST_ENTRY_GROUPS", "1")
        names_on = compiled_names(lambda: kernels.append(nutpie_glue.logp_kernel(fn)))
        on = kernels[0]
        mp.setenv("PMFAST_ENTRY_GROUPS", "0")
        off = nutpie_glue.logp_kernel(fn)
    stock, _ = pmfast.logp_dlogp_function(model, passes="none")
    return on, off, stock, x0, names_on, plans


def test_model_groups_are_bit_for_bit(compiled_blocks):
    on, off, stock, x0, _, plans = compiled_blocks
    assert plans[0] is not None and all(len(g.copies) == 3 for g in plans[0].groups)
    assert on.entry.key != off.entry.key
    for x in (x0, x0 + 0.3, x0 - 1.1, x0 * 2.5):
        code, logp, grad = on(x)
        code0, logp0, grad0 = off(x)
        ref_logp, ref_grad = stock(x)
        assert code == code0 == 0
        assert logp == logp0 and np.array_equal(grad, grad0)
        np.testing.assert_allclose(logp, ref_logp, rtol=1e-10)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10)


def test_model_compiles_one_function_per_group(compiled_blocks):
    _, _, _, _, names, plans = compiled_blocks
    groups = [n for n in names if n.startswith("_pm_group")]
    assert sorted(groups) == sorted(f"_pm_group{i}" for i in range(len(plans[0].groups)))


# ---- copies that differ: a subset grows on, an in-place copy calls its twin ----


def _odd_program(k: int, odd: int, at: int):
    """``k`` copies of a 12-statement chain with a 3-statement side chain from its value ``at``; the side
    chain of copy ``odd`` starts with ``f_odd`` (the same sum under another key, as an in-place node
    function is another function). Both chains end in the shared sum."""
    stmts = []
    for g in range(k):
        prev = f"c{g}"
        for i in range(12):
            stmts.append(f"t{g}_{i} = {'f_add' if i % 2 == 0 else 'f_sub'}({prev}, x)")
            prev = f"t{g}_{i}"
        stmts.append(f"s{g}_0 = {'f_odd' if g == odd else 'f_add'}(t{g}_{at}, x)")
        stmts.append(f"s{g}_1 = f_sub(s{g}_0, x)")
        stmts.append(f"s{g}_2 = f_mul(s{g}_1, x)")
    stmts.append(f"total = f_sum({', '.join(f't{g}_11, s{g}_2' for g in range(k))})")
    return stmts


def _odd_env(k):
    env = _env(k)
    env["f_odd"] = Deferred(numba.njit(_f_add), "test_groups_f_odd", None)
    consts = {f"c{g}": np.int64(g + 1) for g in range(k)}
    env.update(consts)
    return env, consts


@pytest.mark.parametrize("subsets", ["1", "0"])
def test_one_differing_copy_leaves_the_others_grouped(monkeypatch, subsets):
    monkeypatch.setenv("PMFAST_GROUP_SUBSETS", subsets)
    k = 8
    stmts = _odd_program(k, odd=3, at=6)
    env, consts = _odd_env(k)
    plan, _ = _plan(stmts, env)
    want = _run(stmts, env, consts)
    assert plan is not None and _run(plan.body, {**env, **plan.env}, consts) == want
    shape = [(len(g.copies), len(g.copies[0])) for g in plan.groups]
    if subsets == "0":  # a row must hold in every copy: the side chains stay inline
        assert shape == [(k, 12)] and len(plan.body) == k + 3 * k + 1
    else:  # the odd copy left out (inline), the side chain grouped with the rest
        assert shape == [(k - 1, 15)] and len(plan.body) == (k - 1) + 15 + 1


def _inplace_nodes(stmts, inplace_at):
    """A graph node per statement: an ``inc_subtensor`` (in place at ``inplace_at``) for ``f_add``/``f_odd``."""
    import pytensor.tensor as pt
    from pytensor.tensor.subtensor import IncSubtensor

    x, y = pt.vector("x", shape=(3,)), pt.scalar("y")
    idx = pt.constant(0, dtype="int64")
    plain, inplace = (IncSubtensor([idx.type], inplace=b) for b in (False, True))
    other = pt.exp(x).owner
    return [
        (inplace if i in inplace_at else plain).make_node(x, y, idx) if " f_add(" in s or " f_odd(" in s else other
        for i, s in enumerate(stmts)
    ]


def test_an_in_place_copy_calls_its_twin_in_the_group():
    """The odd copy's statement is an in-place variant of the others': it calls their node function,
    all eight copies are one group, and its destroy ordering (after another copy) no longer binds."""
    from pmfast.compiler import group_twins

    k = 8
    stmts = _odd_program(k, odd=3, at=6)
    odd = stmts.index("s3_0 = f_odd(t3_6, x)")
    nodes = _inplace_nodes(stmts, {odd})
    env, consts = _odd_env(k)
    parsed = entry_groups._parse(stmts, {"x"}, env)
    assert group_twins.twins(parsed, nodes) == {odd: "f_add"}
    later = stmts.index("t7_0 = f_add(c7, x)")
    fn = _fn()
    fn.maker.fgraph.orderings = lambda: {nodes[odd]: [nodes[later]]}  # readers first
    spec = _spec(stmts)
    spec.nodes = tuple(nodes)
    made = {}

    def jit(src, name, genv, key):
        scope = dict(genv)
        exec(src, scope)
        made[name] = src
        return numba.njit(scope[name])

    plan = entry_groups.plan(spec, env, fn, "graph-key", {}, jit, entry_key)
    assert plan is not None and [len(g.copies) for g in plan.groups] == [k]
    assert "f_odd" not in "".join(plan.body) + "".join(made.values())
    assert _run(plan.body, {**env, **plan.env}, consts) == _run(stmts, env, consts)


def test_twins_only_for_a_minority_of_in_place_statements(monkeypatch):
    from pmfast.compiler import group_twins

    stmts = _odd_program(4, odd=1, at=2)
    env, _ = _odd_env(4)
    parsed = entry_groups._parse(stmts, {"x"}, env)
    adds = [i for i, s in enumerate(stmts) if " f_add(" in s]
    assert group_twins.twins(parsed, _inplace_nodes(stmts, set(adds))) == {}  # every one in place: none
    most = set(adds[: len(adds) // 2 + 1])
    assert group_twins.twins(parsed, _inplace_nodes(stmts, most)) == {}  # more in place than plain
    assert set(group_twins.twins(parsed, _inplace_nodes(stmts, {adds[0]}))) == {adds[0]}
    monkeypatch.setenv("PMFAST_GROUP_TWINS", "0")
    assert group_twins.twins(parsed, _inplace_nodes(stmts, {adds[0]})) == {}
