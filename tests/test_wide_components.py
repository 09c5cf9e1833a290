"""Tests of ``wide_components``: a fused Elemwise of repeated independent pieces as one node per piece.

Random Composites made of copies of one scalar graph (each copy on inputs of its own, all reading
shared hyperparameters, some through a shared subexpression), with or without a piece that does not
repeat, are split and evaluated by pytensor's Python linker against the fused node: the same bits.
Then hier_var's rewritten graph (no node left with repeated pieces) and, compiled, its logp and
gradient against the switch off (bit for bit) and stock numba.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.elemwise import Elemwise

from pmfast.passes import wide_components
from pmfast.passes.wide_components import components, split_components

PY = Mode(linker="py", optimizer=None)
UNARY0 = [ps.exp, ps.log1p, ps.sqr, ps.tanh, ps.neg]  # any op may be recomputed in a 0-d piece
CHEAP = [ps.sqr, ps.neg, ps.abs]  # only cheap ones in a loop's piece


@st.composite
def templates(draw, ndim):
    """``(build, n_private, n_shared)``: ``build(private, shared, hubs)`` the scalar outputs of one copy."""
    n_private = draw(st.integers(1, 3))
    n_shared = draw(st.integers(0, 2))
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        steps.append(
            (
                draw(st.sampled_from(["unary", "binary"])),
                draw(st.sampled_from(UNARY0 if ndim == 0 else CHEAP)),
                draw(st.sampled_from([ps.add, ps.mul, ps.sub])),
                draw(st.integers(0, 10**6)),
                draw(st.integers(0, 10**6)),
            )
        )
    n_out = draw(st.integers(1, 3))

    def build(private, shared, hubs):
        pool = [*private, *shared, *hubs]
        for kind, un, bi, a, b in steps:
            x = pool[a % len(pool)]
            pool.append(un(x) if kind == "unary" else bi(x, pool[b % len(pool)]))
        # every output reads a private input, so copies are separate but for the hubs
        return [ps.add(o, private[0]) for o in pool[-n_out:]]

    return build, n_private, n_shared


def _fused(ndim, template, copies, hub_op, rest):
    build, n_private, n_shared = template
    shared = [ps.float64(f"h{k}") for k in range(n_shared)]
    hub_in = ps.float64("g")
    hubs = [hub_op(hub_in)]
    ins, outs = [*shared, hub_in], []
    for c in range(copies):
        private = [ps.float64(f"p{c}_{k}") for k in range(n_private)]
        ins += private
        outs += build(private, shared, hubs)
    if rest:
        r = ps.float64("r")
        ins.append(r)
        outs.append(ps.mul(ps.exp(r) if ndim == 0 else ps.sqr(r), hubs[0]))
    comp = ps.Composite(ins, outs)
    n_broadcast = n_shared + 1
    tensors = [
        pt.tensor(f"t{k}", shape=(1,) * ndim if k < n_broadcast else (None,) * ndim, dtype="float64") for k in range(len(ins))
    ]
    return Elemwise(comp).make_node(*tensors), n_broadcast


def _values(node, n_broadcast, seed, length=5):
    rng = np.random.default_rng(seed)
    ndim = node.outputs[0].type.ndim
    return [
        rng.uniform(0.1, 1.0, size=(1,) * ndim if k < n_broadcast else (length,) * ndim) for k in range(len(node.inputs))
    ]


@given(st.data(), st.sampled_from([0, 1]), st.integers(2, 5), st.booleans(), st.integers(0, 2**16))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_split_copies_compute_the_same_bits(data, ndim, copies, rest, seed):
    template = data.draw(templates(ndim))
    hub_op = data.draw(st.sampled_from(UNARY0 if ndim == 0 else CHEAP))
    node, n_broadcast = _fused(ndim, template, copies, hub_op, rest)
    assume(len(node.inputs) >= wide_components.MIN_INPUTS)
    assume(len(node.inputs) + len(node.outputs) <= 32)  # the reference: numpy's ufunc of the Composite
    fg = FunctionGraph(node.inputs, node.outputs, clone=False)
    new = split_components(fg, node)
    assert new is not None
    assert [v.type for v in new] == [o.type for o in node.outputs]
    pieces = {v.owner for v in new}
    assert copies <= len(pieces) <= len(node.outputs)
    # copies are equal ops (one compiled node function for all): fewer ops than pieces
    assert len({p.op for p in pieces}) < len(pieces)
    vals = _values(node, n_broadcast, seed)
    ref = pytensor.function(node.inputs, node.outputs, mode=PY, on_unused_input="ignore")(*vals)
    got = pytensor.function(node.inputs, new, mode=PY, on_unused_input="ignore")(*vals)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)


def test_nothing_repeats_declines():
    x, y = ps.float64("x"), ps.float64("y")
    comp = ps.Composite([x, y], [ps.exp(x), ps.sqr(y) + 1.0])
    node = Elemwise(comp).make_node(pt.vector("v0"), pt.vector("v1"))
    assert split_components(None, node) is None  # narrow, and nothing repeats
    assert len({wide_components.signature(comp.fgraph, i, o, [pt.vector().type] * 2) for i, o in components(comp.fgraph)}) == 2


def test_piece_that_would_run_shorter_declines():
    """Copies reading only broadcast inputs would run over one element where the fused node ran n."""
    a, b, r, s = (ps.float64(n) for n in "abrs")
    comp = ps.Composite([a, b, r, s], [ps.sqr(a), ps.sqr(b), ps.neg(r) + s])
    t = [pt.tensor("a", shape=(1,)), pt.tensor("b", shape=(1,)), pt.vector("r"), pt.vector("s")]
    node = Elemwise(comp).make_node(*t)
    assert len(components(comp.fgraph, 1)) == 3
    assert split_components(None, node) is None


def test_hub_is_recomputed_per_piece_only_when_cheap_in_a_loop():
    g, p, q = ps.float64("g"), ps.float64("p"), ps.float64("q")
    for hub, ndim, split in ((ps.exp, 0, True), (ps.exp, 1, False), (ps.sqr, 1, True)):
        h = hub(g)
        fg = FunctionGraph([g, p, q], [ps.mul(h, p), ps.mul(h, q)])
        comps = components(fg, ndim)
        assert (len(comps) == 2) is split, (hub, ndim)


def test_switch_off(monkeypatch):
    monkeypatch.setenv("PMFAST_COMPONENT_SPLIT", "0")
    assert not wide_components.enabled()


def _rewritten_hier_var(monkeypatch, switch: str, n_groups: int = 3):
    import pmfast
    from pmfast import models

    monkeypatch.setenv("PMFAST_COMPONENT_SPLIT", switch)
    from pymc.model.transform.optimization import freeze_dims_and_data

    model = freeze_dims_and_data(models.load("hier_var")(n_groups=n_groups))
    logp = model.logp()
    grads = pytensor.grad(logp, model.value_vars)
    fg = FunctionGraph(model.value_vars, [logp, *grads], clone=True)
    pmfast.get_mode("all").optimizer.rewrite(fg)
    return fg


def test_hier_var_groups_get_nodes_of_their_own(monkeypatch):
    """No node of hier_var's rewritten graph is left with repeated pieces; the copies share ops."""
    from collections import Counter

    from pmfast.loops.op import IndexedElemwise

    def repeated(fg):
        return [n for n in fg.apply_nodes if split_components(fg, n) is not None]

    off = _rewritten_hier_var(monkeypatch, "0")
    on = _rewritten_hier_var(monkeypatch, "1")
    assert repeated(off) and not repeated(on)
    loops = Counter(n.op for n in on.apply_nodes if isinstance(n.op, IndexedElemwise))
    assert max(loops.values()) >= 3  # one loop per group, the same op for the three

    def widest(fg):
        return max(len(n.outputs) for n in fg.apply_nodes if isinstance(n.op, Elemwise | IndexedElemwise))

    assert widest(on) < widest(off)


@pytest.mark.slow
def test_hier_var_parity(monkeypatch):
    """Compiled: logp and gradient against the switch off and stock numba at three points."""
    import pmfast
    from pmfast import models

    model = models.load("hier_var")(n_groups=2)
    results = {}
    for side, switch, passes in (("stock", "1", "none"), ("off", "0", "all"), ("on", "1", "all")):
        monkeypatch.setenv("PMFAST_COMPONENT_SPLIT", switch)
        fn, x0 = pmfast.logp_dlogp_function(model, passes=passes)
        rng = np.random.default_rng(0)
        results[side] = [fn(x) for x in (x0, x0 + 0.1 * rng.normal(size=x0.shape), x0 - 0.2 * rng.normal(size=x0.shape))]
    for (ls, gs), (lo, go), (ln, gn) in zip(results["stock"], results["off"], results["on"], strict=True):
        np.testing.assert_allclose(ln, ls, rtol=1e-9)
        np.testing.assert_allclose(gn, gs, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(gs).max()))
        # the same scalar functions (fast-math may contract the smaller functions differently)
        np.testing.assert_allclose(gn, go, rtol=1e-14, atol=1e-14 * max(1.0, np.abs(go).max()))
