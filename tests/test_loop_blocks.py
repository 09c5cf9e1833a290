"""Same-structure blocks of a chunked loop (pmfast/loops/blocks.py): one kernel compiled per
distinct block, called per copy; the same values as the fused kernel and as stock NUMBA."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pmfast.loops.dispatch as dispatch
from pmfast.loops import blocks, deferred
from pmfast.loops.op import IndexedElemwise
from pmfast.loops.spec import INC, SET, STORE, SUM, Gather, IndexedLoop, Read, Write
from pmfast.mode import get_mode
from pmfast.vmath.ops import VmathExp

SETTINGS = settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _copies(k: int, mode: str, shared_last: bool = False):
    """A loop over ``x[i0]`` (shared) and, per copy g, ``v_g[idx[i0]]``: ``exp(a) * x - a`` summed
    and ``exp(a) + x`` written with ``mode``; the copies' inputs interleaved as fusion leaves them."""
    x = ps.float64("x")
    ins, outs, reads, writes = [x], [], [Read(0)], []
    for g in range(k):
        a = ps.float64(f"a{g}")
        ins.append(a)
        e = VmathExp(ps.upgrade_to_float, name="vmath_exp")(a)
        outs += [e * x - a, e + x]
        reads.append(Read(2 + 2 * g, (Gather(1),)))
    for g in range(k):
        w = Write(2 * g + 1, mode, 3 + 2 * g, (Gather(1),)) if mode in (INC, SET) else Write(2 * g + 1, mode)
        writes += [Write(2 * g, SUM), w]
    loop = IndexedLoop(ps.Composite(ins, outs), tuple(reads), tuple(writes))
    types = [pt.dscalar().type, pt.dvector().type] * k
    inputs = [pt.dvector("x"), pt.lvector("idx")] + [pt.dvector(f"v{g // 2}") for g in range(2 * k)]
    node = IndexedElemwise(loop, types).make_node(*inputs[: loop.n_inputs])
    return node


def test_split_gives_the_same_block_per_copy():
    node = _copies(3, INC)
    parts = blocks.split(node.op.loop)
    assert len(parts) == 3
    assert len({b.loop.reads for b, _ in parts}) == 1 and len({b.loop.writes for b, _ in parts}) == 1
    assert [b.positions for b, _ in parts] == [(2, 1, 0, 3), (4, 1, 0, 5), (6, 1, 0, 7)]
    assert [b.writes for b, _ in parts] == [(0, 1), (2, 3), (4, 5)]


def test_split_declines_one_component_and_connected_copies():
    a, b = ps.float64("a"), ps.float64("b")
    loop = IndexedLoop(ps.Composite([a, b], [a * b, a + b]), (Read(0), Read(1)), (Write(0, SUM), Write(1, SUM)))
    assert len(blocks.split(loop)) == 2  # they share only inputs
    loop = IndexedLoop(ps.Composite([a, b], [a * b, ps.exp(a * b)]), (Read(0), Read(1)), (Write(0, SUM), Write(1, SUM)))
    assert len(blocks.split(loop)) == 1
    node = IndexedElemwise(loop, [pt.dscalar().type] * 2).make_node(pt.dvector(), pt.dvector())
    assert dispatch._blocked(loop, node, ["float64"] * 2, ["float64"] * 2, "loop") is None  # keeps its fused kernel
    # a scatter whose terms come from two components
    loop = IndexedLoop(
        ps.Composite([a, b], [ps.exp(a), ps.exp(b)]), (Read(0), Read(1)),
        (Write(0, INC, 2, (0,), also=((1, (0,)),)),),
    )  # fmt: skip
    assert blocks.split(loop) is None


_COMPILED: dict = {}


def _run(node, args, enabled: bool, monkeypatch, key=None):
    """``node``'s outputs on ``args``, compiled with the block split on or off (the function compiled
    once per ``key``: the same graph, only the inputs differ between the property test's examples)."""
    f = _COMPILED.get((key, enabled)) if key is not None else None
    if f is None:
        monkeypatch.setattr(blocks, "ENABLED", enabled)
        f = pytensor.function(node.inputs, node.outputs, mode=get_mode("none"))
        if key is not None:
            _COMPILED[(key, enabled)] = f
    return [np.asarray(r).copy() for r in f(*[np.copy(a) for a in args])]


@SETTINGS
@given(k=st.integers(2, 4), n=st.integers(1, 700), m=st.integers(1, 9), mode=st.sampled_from([INC, SET, STORE]),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_blocks_equal_the_fused_kernel_bit_for_bit(k, n, m, mode, seed, monkeypatch_module):
    node = _copies(k, mode)
    rng = np.random.default_rng(seed)
    args = [rng.normal(size=n), rng.integers(-m, m, n)] + [rng.normal(size=m) for _ in range(2 * k)]
    args = args[: len(node.inputs)]
    fused = _run(node, args, False, monkeypatch_module, key=(k, mode))
    split = _run(node, args, True, monkeypatch_module, key=(k, mode))
    for a, b in zip(fused, split, strict=True):
        assert a.tobytes() == b.tobytes()
    storage = [[None] for _ in node.outputs]
    node.op.perform(node, [np.copy(a) for a in args], storage)
    for a, (ref,) in zip(split, storage):
        np.testing.assert_allclose(a, ref, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_one_kernel_for_all_copies(monkeypatch):
    monkeypatch.setattr(blocks, "ENABLED", True)
    node = _copies(4, STORE)
    dtypes_in = [i.type.dtype for i in node.inputs]
    dtypes_out = [o.type.dtype for o in node.outputs]
    entry, kernels = dispatch._blocked(node.op.loop, node, dtypes_in, dtypes_out, "loop")
    assert len(kernels) == 1
    (name,) = [v[0] for v in kernels.values()]
    assert entry.count(f"{name}(0, n0, ") == 4
    f = pytensor.function(node.inputs, node.outputs, mode=get_mode("none"))
    f(np.ones(5), np.zeros(5, dtype="int64"), *[np.ones(2)] * (len(node.inputs) - 2))
    (bkey,) = kernels
    kernel_keys = [d for d in deferred.Deferred._by_key.values() if d.dispatcher.py_func.__name__ == "indexed_elemwise_block_kernel"]
    assert any(len(d.dispatcher.overloads) == 1 for d in kernel_keys)
    monkeypatch.setattr(blocks, "ENABLED", False)
    assert "blocks" not in repr(dispatch.numba_funcify_IndexedElemwise(node.op, node)[1])


def _hier_graph(k: int, n: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    idx = pt.constant(rng.integers(0, m, n).astype("uint8"))
    ins, terms = [], []
    for g in range(k):
        mu, ls = pt.dvector(f"mu{g}"), pt.dvector(f"ls{g}")
        ins += [mu, ls]
        s = pt.exp(ls[idx])
        terms.append((-0.5 * ((pt.constant(rng.normal(size=n)) - mu[idx]) / s) ** 2 - pt.log(s)).sum())
    logp = pt.add(*terms)
    return ins, [logp, *pytensor.grad(logp, ins)], [rng.normal(size=m) for _ in ins]


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(2, 4), n=st.integers(20, 600), m=st.integers(1, 8))
def test_hierarchical_logp_and_gradient_equal_stock(k, n, m):
    from collections import Counter

    ins, outs, vals = _hier_graph(k, n, m, seed=k * 1000 + n)
    ref = pytensor.function(ins, outs, mode="NUMBA")(*vals)
    # component split off: the k copies in one loop, run as k blocks; on: one loop per copy, one op
    for split in ("0", "1"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PMFAST_COMPONENT_SPLIT", split)
            f = pytensor.function(ins, outs, mode=get_mode("all"))
        loops = [nd for nd in f.maker.fgraph.apply_nodes if isinstance(nd.op, IndexedElemwise)]
        if split == "0":
            assert any(len(blocks.split(nd.op.loop) or ()) == k for nd in loops)
        else:
            assert max(Counter(nd.op for nd in loops).values()) >= k
        got = f(*vals)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
