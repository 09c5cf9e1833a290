"""Tests of sibling fusion: Elemwise nodes sharing gathered data run as one loop (part of ``indexed_elemwise``)."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.subtensor import AdvancedIncSubtensor1, AdvancedSubtensor1

import pmfast.passes.indexed_elemwise as ie
import pmfast.passes.sibling_fusion as sf
from pmfast.mode import get_mode

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True)


def _structure(kind):
    x = pt.vector("x")
    y = pt.vector("y")
    idx = pt.vector("idx", dtype="int64")
    idx2 = pt.vector("idx2", dtype="int64")
    a = pt.vector("a")
    g = x[idx]
    if kind == "same_gather":  # logp-like and gradient-like terms sharing only the gather
        s = pt.sum(pt.log(pt.abs(g) + 1.0) * a)
        return [x, y, idx, idx2, a], [pt.sum(pt.exp(-g) + a), s, pytensor.grad(s, x)]
    if kind == "same_index":  # x[idx] and y[idx]: same loop length, different arrays
        return [x, y, idx, idx2, a], [pt.sum(pt.exp(-g)), pt.sum(pt.cos(y[idx]) * a)]
    if kind == "dependent":  # the second needs a reduction of the first: no merge
        s1 = pt.sum(pt.exp(-g))
        return [x, y, idx, idx2, a], [s1, pt.sum(pt.cos(g) * s1 + a)]
    if kind == "other_index":  # different index vectors (lengths unrelated): no merge
        return [x, y, idx, idx2, a], [pt.sum(pt.exp(-g) * a), pt.sum(pt.cos(x[idx2]))]
    raise KeyError(kind)


@functools.cache
def _compiled(kind):
    ins, outs = _structure(kind)
    fns = [pytensor.function(ins, outs, mode=m, on_unused_input="ignore") for m in (get_mode(["indexed_elemwise"]), get_mode("none"))]
    return tuple(fns)


def _loops(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, ie.IndexedElemwise)]


def _data(draw, n_eq: bool = True):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    k = draw(st.integers(1, 8))
    n = draw(st.integers(0, 40))
    n2 = n if n_eq else draw(st.integers(0, 40))
    return (
        rng.normal(size=k),
        rng.normal(size=k),
        rng.integers(-k, k, n),  # repeated and negative indices
        rng.integers(-k, k, n2),
        rng.normal(size=n),
    )


def _check(kind, args):
    fused, stock = _compiled(kind)
    for got, ref in zip(fused(*args), stock(*args), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)


@SETTINGS
@given(data=st.data())
def test_siblings_sharing_a_gather_run_as_one_loop(data):
    fused, _ = _compiled("same_gather")
    (loop,) = _loops(fused)
    assert sum(w.mode == "inc" for w in loop.op.loop.writes) == 1  # the gradient scatter is in it too
    assert not any(isinstance(n.op, AdvancedSubtensor1 | AdvancedIncSubtensor1) for n in fused.maker.fgraph.toposort())
    _check("same_gather", _data(data.draw))


@SETTINGS
@given(data=st.data())
def test_siblings_sharing_an_index_run_as_one_loop(data):
    fused, _ = _compiled("same_index")
    assert len(_loops(fused)) == 1
    _check("same_index", _data(data.draw))


@SETTINGS
@given(data=st.data())
def test_dependent_nodes_are_not_merged(data):
    fused, _ = _compiled("dependent")
    assert len(_loops(fused)) == 2
    _check("dependent", _data(data.draw))


@SETTINGS
@given(data=st.data())
def test_other_index_is_not_merged(data):
    fused, _ = _compiled("other_index")
    assert len(_loops(fused)) == 2
    _check("other_index", _data(data.draw, n_eq=False))


def test_merge_width_is_capped():
    x = pt.vector("x")
    idx = pt.vector("idx", dtype="int64")
    g = x[idx]
    vs = [pt.vector(f"v{k}") for k in range(sf.MAX_INPUTS)]
    outs = [pt.sum(pt.exp(g * v)) for v in vs]  # 24 siblings, each with its own input
    fn = pytensor.function([x, idx, *vs], outs, mode=get_mode(["indexed_elemwise"]))
    widths = [sum(2 if sf._gather_key(v) is not None else 1 for v in n.inputs) for n in fn.maker.fgraph.toposort()]
    assert max(widths) <= sf.MAX_INPUTS + 6
    assert 1 < len(_loops(fn)) < len(vs)  # merged, but not into one over-wide node
    rng = np.random.default_rng(0)
    args = [rng.normal(size=5), rng.integers(0, 5, 7)] + [rng.normal(size=7) for _ in vs]
    ref = pytensor.function([x, idx, *vs], outs, mode=get_mode("none"))(*args)
    np.testing.assert_allclose(fn(*args), ref, rtol=1e-12)


def test_rewrite_never_raises(monkeypatch):
    def boom(a, b):
        raise RuntimeError("boom")

    monkeypatch.setattr(sf, "merge_siblings", boom)
    ins, outs = _structure("same_gather")
    fn = pytensor.function(ins, outs, mode=get_mode(["indexed_elemwise"]), on_unused_input="ignore")
    assert len(_loops(fn)) == 2  # declined, each sibling its own loop


@functools.cache
def _checks():
    """pymc's two parameter checks on one vector, and a reduced term of another vector: two siblings."""
    p, q = pt.vector("p"), pt.vector("q")
    outs = [pt.all(pt.ge(p, 0)), pt.all(pt.le(p, 1)), pt.sum(pt.exp(q))]
    return tuple(pytensor.function([p, q], outs, mode=m) for m in (get_mode(["indexed_elemwise"]), get_mode("none")))


@SETTINGS
@given(data=st.data())
def test_reduced_siblings_sharing_an_input_merge(data):
    fast, stock = _checks()
    composites = [n for n in fast.maker.fgraph.toposort() if isinstance(n.op, ie.IndexedElemwise | Elemwise)]
    # the two checks of p merge (one node, both reductions); q's sum shares nothing with them
    assert len(composites) == 2
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    n = data.draw(st.integers(0, 20))
    args = (rng.uniform(-0.2, 1.2, n), rng.normal(size=3))
    for got, ref in zip(fast(*args), stock(*args), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-15)


def test_eligibility_memo_same_graph(monkeypatch):
    """The pass's eligibility memo (PMFAST_SIBLING_MEMO) leaves the merged graph as it was, and is used (restart search)."""
    monkeypatch.setenv("PMFAST_SIBLING_ONEPASS", "0")
    seen = []
    real = sf._eligible
    monkeypatch.setattr(sf, "_eligible", lambda n: seen.append(n) or real(n))
    texts, counts = [], []
    for memo in ("1", "0"):
        monkeypatch.setenv("PMFAST_SIBLING_MEMO", memo)
        seen.clear()
        ins, outs = _structure("same_gather")
        outs = outs + [pt.sum(pt.sin(ins[0][ins[2]]) * ins[4]), pt.sum(pt.cos(ins[1][ins[2]]))]
        fn = pytensor.function(ins, outs, mode=get_mode(["indexed_elemwise"]), on_unused_input="ignore")
        texts.append(pytensor.printing.debugprint(fn, file="str", print_type=True, id_type=""))
        counts.append((len(seen), len(set(seen))))
    assert texts[0] == texts[1]
    (calls_memo, nodes_memo), (calls_plain, _) = counts
    assert calls_memo == nodes_memo, "with the memo, each node's eligibility is computed once"
    assert calls_plain > calls_memo, "without it, again at every search"


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 2**10), st.integers(0, 2**10), st.sampled_from(["add", "mul", "exp"])), min_size=1, max_size=25))
def test_bounded_path_search_matches_ancestors(steps):
    """``_depends`` (the walk up from ``b`` that stops above ``a``) answers as a search of all of ``b``'s ancestors."""
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.traversal import ancestors

    values = [pt.vector(f"v{i}") for i in range(3)]
    ins = list(values)
    for i, j, op in steps:
        a, b = values[i % len(values)], values[j % len(values)]
        values.append(pt.exp(a) if op == "exp" else (a + b if op == "add" else a * b))
    fg = FunctionGraph(ins, values[3:], clone=False)
    order = fg.toposort()
    rank = {n: k for k, n in enumerate(order)}
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            assert sf._depends(b, a, rank) == bool(set(a.outputs) & set(ancestors(b.inputs)))


def _many_siblings(n_terms):
    """Gathers through two index vectors and full sums: siblings that merge in several rounds, and some that can't."""
    x, y = pt.vector("x"), pt.vector("y")
    idx, idx2 = pt.vector("idx", dtype="int64"), pt.vector("idx2", dtype="int64")
    a = pt.vector("a")
    funcs = (pt.exp, pt.sin, pt.cos, pt.log1p, pt.tanh)
    outs = []
    for k in range(n_terms):
        g = (x if k % 3 else y)[idx if k % 4 else idx2]
        term = funcs[k % len(funcs)](g * (k + 1.0))
        outs.append(pt.sum(term * a) if k % 4 else pt.sum(term))
    s = pt.sum(outs)
    return [x, y, idx, idx2, a], [*outs, *pytensor.grad(s, [x, y])]


def test_search_memo_same_graph(monkeypatch):
    """The searches' memo (PMFAST_SIBLING_INCREMENTAL) merges the same pairs in the same order, and saves work (restart search)."""
    monkeypatch.setenv("PMFAST_SIBLING_ONEPASS", "0")
    from pytensor.compile.mode import Mode

    calls = []
    real = sf._loop_candidate
    monkeypatch.setattr(sf, "_loop_candidate", lambda *a: calls.append(a[1]) or real(*a))
    texts, counts = [], []
    for flag in ("1", "0"):
        monkeypatch.setenv("PMFAST_SIBLING_INCREMENTAL", flag)
        calls.clear()
        ins, outs = _many_siblings(14)
        mode = get_mode(["indexed_elemwise"])
        fn = pytensor.function(ins, outs, mode=Mode(linker="py", optimizer=mode.provided_optimizer), on_unused_input="ignore")
        texts.append(pytensor.printing.debugprint(fn, file="str", print_type=True, id_type=""))
        counts.append(len(calls))
    assert texts[0] == texts[1]
    assert "IndexedElemwise" in texts[0] or "Composite" in texts[0]
    assert counts[0] < counts[1] / 2, counts
