"""pmfast's Elemwise lowering (pmfast/compiler/elemwise.py) on in-place nodes.

The bug these pin: the node function's cache key left out the inplace pattern
(a global of the generated source, not part of it). An in-place node and a
plain node with the same scalar op and types shared one key, so the linker's
per-conversion dedup, numba's on-disk cache and the whole graph's key all
handed one node the other's code. Run for a plain node, the in-place loop
overwrites an input the graph reads again (stop 16's test_scan_dedup
``mixed_kinds`` failure: a gradient Scan's two ``3 * x[::-1]`` / ``4 * x[::-1]``
nodes, one of them in-place).

Graphs are built with explicit in-place nodes (``optimizer=None``: what runs
is what was built) from a recipe, plain data a test can print, and compared
with numpy, with stock numba, and inside a Scan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.link.numba.linker import NumbaLinker
from pytensor.scan.op import Scan
from pytensor.tensor.elemwise import Elemwise

import pmfast
from pmfast.compiler import ops
from pmfast.linker import ChunkedNumbaLinker

PMFAST = Mode(ChunkedNumbaLinker(), optimizer=None)
STOCK = Mode(NumbaLinker(), optimizer=None)

OPS = {  # name: (scalar op, arity, numpy)
    "add": (ps.add, 2, np.add),
    "mul": (ps.mul, 2, np.multiply),
    "sub": (ps.sub, 2, np.subtract),
    "add3": (ps.add, 3, lambda a, b, c: a + b + c),
    "mul3": (ps.mul, 3, lambda a, b, c: a * b * c),
    "sin": (ps.sin, 1, np.sin),
    "tanh": (ps.tanh, 1, np.tanh),
}
LEAVES = ("X", "Y", "row", "col", "c")
BARRIERS = {"T": lambda a: a.T, "cumsum": lambda a: np.cumsum(a, axis=0)}  # not Elemwise: fusion stops there  # matrices, views of a vector input, a (1, 1) constant


@dataclass(frozen=True)
class Step:
    """One node: ``op`` of pool entries ``args``, in-place on ``args[inplace]``.

    ``op`` is an Elemwise (:data:`OPS`) or a barrier: ``"T"`` a transposed view,
    ``"cumsum"`` along axis 0 (a new buffer).
    """

    op: str
    args: tuple[int, ...]
    inplace: int | None = None


@dataclass(frozen=True)
class Recipe:
    """A graph over the pool ``LEAVES + step outputs``; ``outputs`` index that pool."""

    steps: tuple[Step, ...]
    outputs: tuple[int, ...]


def pool_bcast(steps) -> list[tuple[bool, bool]]:
    """Static broadcastable pattern of every pool entry."""
    out = [(False, False), (False, False), (True, False), (False, True), (True, True)]
    for s in steps:
        pats = [out[a] for a in s.args]
        out.append(pats[0][::-1] if s.op == "T" else tuple(all(p[d] for p in pats) for d in (0, 1)))
    return out


def roots(steps) -> list[int | None]:
    """The node output whose buffer each pool entry is (None: a graph input, a view of one, a constant)."""
    out: list[int | None] = [None] * len(LEAVES)
    for k, s in enumerate(steps):
        out.append(out[s.args[0]] if s.op == "T" else len(LEAVES) + k)  # a view's buffer is its input's
    return out


def inplace_slots(steps, outputs, k) -> list[int]:
    """Slots step ``k`` may overwrite: an intermediate buffer no other slot, later step or output reads.

    The rules pytensor's DestroyHandler enforces on a rewritten graph (it rejects
    a node reading the destroyed buffer through a second input, e.g. ``u + u.T``).
    """
    s, bc, root = steps[k], pool_bcast(steps), roots(steps)
    if s.op in BARRIERS:
        return []
    out_bc = bc[len(LEAVES) + k]
    later = {root[a] for t in steps[k + 1 :] for a in t.args} | {root[o] for o in outputs}
    slots = []
    for j, a in enumerate(s.args):
        others = {root[b] for i, b in enumerate(s.args) if i != j}
        if root[a] is not None and bc[a] == out_bc and root[a] not in later | others:
            slots.append(j)
    return slots


@st.composite
def recipes(draw, max_steps=6):
    steps: list[Step] = []
    for _ in range(draw(st.integers(2, max_steps))):
        n = len(LEAVES) + len(steps)
        op = draw(st.sampled_from([*BARRIERS, *OPS]))
        arity = 1 if op in BARRIERS else OPS[op][1]
        # lean towards the latest entries, so chains and re-reads are common
        args = tuple(draw(st.integers(0, n - 1).map(lambda i, n=n: n - 1 - i // 2 if i % 2 else i)) for _ in range(arity))
        steps.append(Step(op, args))
    n = len(LEAVES) + len(steps)
    last = n - 1 if steps[-1].op != "T" else n - 2
    extra = draw(st.sets(st.integers(len(LEAVES), n - 1), max_size=2))
    outputs = tuple(sorted({last, *extra}))
    for k in range(len(steps)):
        slots = inplace_slots(steps, outputs, k)
        if slots and draw(st.integers(0, 3)):  # in-place three times in four
            steps[k] = Step(steps[k].op, steps[k].args, draw(st.sampled_from(slots)))
    return Recipe(tuple(steps), outputs)


def build(recipe, leaves, inplace=True):
    """The recipe's output variables from the five leaf variables (``inplace=False``: every node plain)."""
    pool = list(leaves)
    for s in recipe.steps:
        if s.op in BARRIERS:
            pool.append(pool[s.args[0]].T if s.op == "T" else pt.cumsum(pool[s.args[0]], axis=0))
            continue
        scalar_op = OPS[s.op][0]
        pattern = {} if s.inplace is None or not inplace else {0: s.inplace}
        pool.append(Elemwise(scalar_op, pattern)(*(pool[a] for a in s.args)))
    return [pool[o] for o in recipe.outputs]


def evaluate(recipe, x, y, v, c):
    """numpy's values of the recipe's outputs."""
    pool = [x, y, v[None, :], v[:, None], np.full((1, 1), c)]
    for s in recipe.steps:
        fn = BARRIERS[s.op] if s.op in BARRIERS else OPS[s.op][2]
        pool.append(fn(*(pool[a] for a in s.args)))
    return [pool[o] for o in recipe.outputs]


C = 0.75


def symbolic_leaves():
    x, y, v = pt.matrix("x"), pt.matrix("y"), pt.vector("v")
    return [x, y, v], [x, y, v[None, :], v[:, None], pt.constant(np.full((1, 1), C))]


def compile_outside(recipe, mode):
    inputs, leaves = symbolic_leaves()
    return pytensor.function(inputs, build(recipe, leaves), mode=mode, accept_inplace=True, on_unused_input="ignore")


def compile_in_scan(recipe, mode, n_steps=3):
    """The recipe as a Scan's step on a state ``X`` (``X <- tanh(X)``) and non-sequences Y, v; outputs traced.

    Scan refuses in-place nodes in the graph it is given: the step is built plain
    and numba's Scan lowering runs the mode's rewrites (``inplace_elemwise``
    among them) on it, so the in-place nodes are the ones pytensor makes there.
    The outputs are the step's own (no Elemwise after them to fuse with).
    """
    inputs, _ = symbolic_leaves()
    x0, y, v = inputs

    def step(x, y, v):
        outs = build(recipe, [x, y, v[None, :], v[:, None], pt.constant(np.full((1, 1), C))], inplace=False)
        return [pt.tanh(x), *(pt.broadcast_to(o, x.shape) for o in outs)]

    outs = pytensor.scan(
        step,
        outputs_info=[x0] + [None] * len(recipe.outputs),
        non_sequences=[y, v],
        n_steps=n_steps,
        mode=mode,
        return_updates=False,
    )
    return pytensor.function(inputs, outs, mode=mode, accept_inplace=True, on_unused_input="ignore")


def scan_reference(recipe, x, y, v, n_steps=3):
    traces = [[] for _ in range(len(recipe.outputs) + 1)]
    for _ in range(n_steps):
        outs = [np.tanh(x), *(np.broadcast_to(o, x.shape) for o in evaluate(recipe, x, y, v, C))]
        for t, o in zip(traces, outs):
            t.append(o)
        x = outs[0]
    return [np.stack(t) for t in traces]


def values(n, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)


def assert_all_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def elemwise_nodes(f):
    return [n for n in f.maker.fgraph.toposort() if type(n.op) is Elemwise]


def inner_inplace_elemwise(f):
    """In-place Elemwise nodes of ``f``'s Scans' inner graphs (as rewritten when the Scan was lowered)."""
    return [
        n
        for s in f.maker.fgraph.toposort()
        if isinstance(s.op, Scan)
        for n in s.op.fgraph.toposort()
        if isinstance(n.op, Elemwise) and n.op.inplace_pattern
    ]


# --- the pinned minimal graph --------------------------------------------------------------

# u = cumsum(sin(X)); v = c * u in place on u; w = cumsum(v); z = c * w NOT in place (w is
# an output, read after z). The two Muls have one scalar op and the same types: with the inplace pattern
# out of the key, z ran v's in-place loop and overwrote w. The cumsums keep fusion from
# merging the Muls, in a Scan's inner graph too, where pytensor's inplace_elemwise makes v
# in-place.
PINNED = Recipe(
    steps=(Step("sin", (0,)), Step("cumsum", (5,)), Step("mul", (4, 6), inplace=1), Step("cumsum", (7,)), Step("mul", (4, 8))),
    outputs=(9, 8),
)


def test_inplace_and_plain_elemwise_keys_differ():
    x = pt.matrix("x")
    c = pt.constant(np.full((1, 1), 3.0))
    plain, inplace = (Elemwise(ps.mul, pattern)(c, x).owner for pattern in ({}, {0: 1}))
    assert ops.funcify_and_cache_key(plain.op, plain)[1] != ops.funcify_and_cache_key(inplace.op, inplace)[1]


def test_pinned_inplace_graph_matches_numpy():
    f = compile_outside(PINNED, PMFAST)
    assert [dict(n.op.inplace_pattern) for n in elemwise_nodes(f)] == [{}, {0: 1}, {}]
    x, y, v = values(3, 0)
    want = evaluate(PINNED, x, y, v, C)
    np.testing.assert_allclose(want[0], 0.75 * np.cumsum(0.75 * np.cumsum(np.sin(x), axis=0), axis=0))
    assert_all_close(f(x, y, v), want)


# --- generated graphs ----------------------------------------------------------------------

_seen_keys: dict[str, tuple] = {}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipe=recipes(), n=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_generated_inplace_graphs_match_numpy_and_stock(recipe, n, seed):
    x, y, v = values(n, seed)
    want = evaluate(recipe, x, y, v, C)
    ours = compile_outside(recipe, PMFAST)
    assert_all_close(ours(x, y, v), want)
    assert_all_close(compile_outside(recipe, STOCK)(x, y, v), want)
    # a key names one implementation: same key, same op (inplace pattern included) and types
    for node in elemwise_nodes(ours):
        key = ops.funcify_and_cache_key(node.op, node)[1]
        what = (node.op, tuple(i.type for i in node.inputs), tuple(o.type for o in node.outputs))
        assert _seen_keys.setdefault(key, what) == what


def test_pinned_graph_in_scan_matches_numpy():
    f = compile_in_scan(PINNED, pmfast.get_mode())
    assert [n.op.scalar_op for n in inner_inplace_elemwise(f)] == [ps.mul]  # v, not z
    x, y, v = values(3, 1)
    assert_all_close(f(x, y, v), scan_reference(PINNED, x, y, v))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipe=recipes(max_steps=5), n=st.integers(1, 3), seed=st.integers(0, 2**16))
@example(  # sin of a (1, n) row squeezed to 1-d by indexed_elemwise, hoisted out of the Scan: gave -1.0
    recipe=Recipe(steps=(Step("T", (0,), None), Step("cumsum", (2,), None), Step("sin", (6,), None)), outputs=(7,)), n=1, seed=0)
def test_generated_graphs_in_scan_match_numpy(recipe, n, seed):
    x, y, v = values(n, seed)
    assert_all_close(compile_in_scan(recipe, pmfast.get_mode())(x, y, v), scan_reference(recipe, x, y, v))


def test_recipes_generate_inplace_nodes_of_every_kind():
    """The generator reaches what the tests are for: in-place on broadcast inputs, on views, next to re-reads."""
    kinds = set()

    @settings(max_examples=1000, deadline=None, database=None, derandomize=True)
    @given(recipe=recipes())
    def collect(recipe):
        bc = pool_bcast(recipe.steps)
        for k, s in enumerate(recipe.steps):
            if s.inplace is None:
                continue
            a = s.args[s.inplace]
            kinds.add("inplace")
            kinds.update({"broadcast"} if any(bc[a]) else set())
            kinds.update({"view"} if a >= len(LEAVES) and recipe.steps[a - len(LEAVES)].op == "T" else set())
            kinds.update({"reread"} if len(set(s.args)) < len(s.args) else set())

    collect()
    assert kinds == {"inplace", "broadcast", "view", "reread"}
