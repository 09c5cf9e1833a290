"""An entry output built by a chain of set_subtensor into an empty vector is written piece by piece
(pmfast/compiler/set_chain.py, ``PMFAST_SET_CHAIN``)."""

from __future__ import annotations

import ast

import numpy as np
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.graph.fg import FunctionGraph

import pmfast
from conftest import big_graph_entries
from pmfast.compiler.set_chain import chain_pieces


def _chain(lengths, order, *, gap=False, overlap=False, bad_length=False, extra_client=False, n=None):
    """An AllocEmpty of the total length and one set_subtensor per piece, applied in ``order``."""
    xs = [pt.vector(f"p{k}", shape=(m,)) for k, m in enumerate(lengths)]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int)
    total = int(sum(lengths)) if n is None else n
    if gap:
        starts[-1] += 1
        total += 1
    if overlap and len(lengths) > 1:
        starts[-1] -= 1
    buf = pt.empty((total,))
    mid = None
    for k in order:
        stop = starts[k] + lengths[k] + (1 if bad_length and k == order[0] else 0)
        buf = pt.set_subtensor(buf[int(starts[k]) : int(stop)], xs[k])
        if mid is None:
            mid = buf
    outs = [buf, mid.sum()] if extra_client and len(order) > 1 else [buf]
    fg = FunctionGraph(xs, outs, clone=False)
    nodes = fg.toposort()
    names = {v: f"p{k}" for k, v in enumerate(xs)}
    stmts = []
    for i, node in enumerate(nodes):
        for j, o in enumerate(node.outputs):
            names[o] = f"v{i}_{j}"
        args = [names.get(v, f"c{i}_{a}") for a, v in enumerate(node.inputs)]
        stmts.append(ast.parse(f"{names[node.outputs[0]]} = f{i}({', '.join(args)})").body[0])
    return fg, stmts, nodes


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 4), min_size=1, max_size=7),
    seed=st.integers(0, 10_000),
    flaw=st.sampled_from([None, "gap", "overlap", "bad_length", "extra_client", "short_alloc"]),
)
def test_pieces_only_for_an_exact_cover(lengths, seed, flaw):
    order = list(np.random.default_rng(seed).permutation(len(lengths)))
    try:
        fg, stmts, nodes = _chain(
            lengths, order, gap=flaw == "gap", overlap=flaw == "overlap", bad_length=flaw == "bad_length",
            extra_client=flaw == "extra_client", n=sum(lengths) + 1 if flaw == "short_alloc" else None,
        )
    except ValueError:  # pytensor refuses the value's static length for the slice
        return
    found = chain_pieces(fg, fg.outputs[0], stmts, nodes)
    exact = flaw is None or (flaw in ("overlap", "extra_client") and len(lengths) == 1)
    if not exact:
        assert found is None
        return
    pieces, dropped = found
    assert pieces == [f"p{k}" for k in range(len(lengths))]  # slice order, not chain order
    assert len(dropped) == len(lengths) + 1  # the links and the AllocEmpty
    assert all(type(nodes[i].op).__name__ in ("IncSubtensor", "AllocEmpty") for i in dropped)


def test_switch_off(monkeypatch):
    fg, stmts, nodes = _chain([2, 3], [1, 0])
    assert chain_pieces(fg, fg.outputs[0], stmts, nodes) is not None
    monkeypatch.setenv("PMFAST_SET_CHAIN", "0")
    assert chain_pieces(fg, fg.outputs[0], stmts, nodes) is None


def _many_free_variables():
    """More free variables than a Join takes (compiler.arity.MAX_ARITY): the gradient is a set_subtensor chain."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        xs = [pm.Normal(f"a{g}", mu, 1, shape=1 + g % 2) for g in range(33)]
        pm.Normal("y", pm.math.sum([x.sum() for x in xs]), 1, observed=np.array([0.5, -1.0]))
    return model


@pytest.fixture(scope="module")
def chain_kernels(tmp_path_factory):
    from pmfast import nutpie_glue
    from pmfast.compiler import entry_spec

    model = _many_free_variables()
    specs, orig = [], entry_spec.describe

    def spy(*args, **kwargs):
        specs.append(orig(*args, **kwargs))
        return specs[-1]

    with pytest.MonkeyPatch.context() as mp, big_graph_entries(tmp_path_factory.mktemp("chain")):
        mp.setattr(entry_spec, "describe", spy)  # only a big graph's entry drops its chain
        fn, x0 = pmfast.logp_dlogp_function(model, "all")
        on = nutpie_glue.logp_kernel(fn)
        mp.setenv("PMFAST_SET_CHAIN", "0")
        off = nutpie_glue.logp_kernel(fn)
    stock, _ = pmfast.logp_dlogp_function(model, passes="none")
    return on, off, stock, x0, specs


@pytest.mark.slow
def test_model_gradient_written_piece_by_piece(chain_kernels):
    on, off, stock, x0, specs = chain_kernels
    assert specs[0].pieces[1] is not None and specs[1].pieces[1] is None
    assert not any("set_subtensor" in line for line in specs[0].body[-5:])
    assert on.entry.key != off.entry.key
    for x in (x0, x0 + 0.3, x0 - 1.1, x0 * 2.5):
        code, logp, grad = on(x)
        code0, logp0, grad0 = off(x)
        ref_logp, ref_grad = stock(x)
        assert code == code0 == 0
        assert logp == logp0 and np.array_equal(grad, grad0)
        np.testing.assert_allclose(logp, ref_logp, rtol=1e-10)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10)
