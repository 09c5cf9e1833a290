"""early_diag: diag(v) inlined before canonicalize; one Cholesky per marginal GP gradient, same values."""

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.basic import AllocDiag

import pmfast
from pmfast.frontend import logp_dlogp_graph


def _marginal_gp(n=12):
    import pymc as pm

    rng = np.random.default_rng(3)
    x = np.linspace(0, 5, n)[:, None]
    y = np.sin(x[:, 0]) + 0.3 * rng.normal(size=n)
    with pm.Model() as model:
        ell = pm.Gamma("ell", alpha=2, beta=1)
        eta = pm.HalfCauchy("eta", beta=5)
        gp = pm.gp.Marginal(cov_func=eta**2 * pm.gp.cov.Matern52(1, ell))
        sigma = pm.HalfCauchy("sigma", beta=5)
        gp.marginal_likelihood("y", X=x, y=y, sigma=sigma)
    return model


def _rewritten(outputs, inputs, passes):
    fg = FunctionGraph(inputs, outputs, clone=True)
    pmfast.get_mode(passes).optimizer.rewrite(fg)
    return fg


def _count(fg, name):
    return sum(name in str(n.op) for n in fg.apply_nodes)


@functools.lru_cache(maxsize=None)
def _gp_functions():
    model = _marginal_gp()
    joined, logp, grad, _, _ = logp_dlogp_graph(model)
    fast = pytensor.function([joined], [logp, grad], mode=pmfast.get_mode("early_diag"))
    stock = pytensor.function([joined], [logp, grad], mode=pmfast.get_mode("none"))
    return joined, logp, grad, fast, stock


def test_marginal_gp_factorizes_once_per_gradient():
    joined, logp, grad, _, _ = _gp_functions()
    assert _count(_rewritten([logp, grad], [joined], "none"), "Cholesky") == 2  # the duplicate it removes
    fast = _rewritten([logp, grad], [joined], "early_diag")
    assert _count(fast, "Cholesky") == 1
    # diag(v)'s gradient (a plain OpFromGraph numba would compile on its own) inlined too
    assert not [n for n in fast.apply_nodes if type(n.op).__name__ == "OpFromGraph"]


@settings(max_examples=10, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=3, max_size=3))
def test_marginal_gp_logp_and_gradient_match_stock(point):
    _, _, _, fast, stock = _gp_functions()
    for got, ref in zip(fast(np.array(point)), stock(np.array(point)), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


@functools.lru_cache(maxsize=None)
def _diag_functions():
    v = pt.vector("v")
    x = pt.matrix("x")
    d = pt.diag(v)
    outs = [(d * x).sum() + pt.linalg.det(pt.diag(v**2)), pt.grad((d * x).sum() + (pt.diag(v) ** 2).sum(), v), d]
    return (
        pytensor.function([v, x], outs, mode=pmfast.get_mode("early_diag")),
        pytensor.function([v, x], outs, mode=pmfast.get_mode("none")),
    )


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_diag_values_match_stock(n, seed):
    rng = np.random.default_rng(seed)
    args = rng.normal(size=n), rng.normal(size=(n, n))
    fast, stock = _diag_functions()
    for got, ref in zip(fast(*args), stock(*args), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_declines_next_to_linear_algebra_and_outputs():
    """det(diag(v)) keeps pytensor's rewrite (prod(v)); a diag that is an output is left for late inlining."""
    v = pt.vector("v")
    det_fg = _rewritten([pt.linalg.det(pt.diag(v))], [v], "early_diag")
    assert not any("Det" in str(n.op) for n in det_fg.apply_nodes)
    fg = FunctionGraph([v], [pt.diag(v)], clone=True)
    from pmfast.passes.early_diag import inline_diag

    (node,) = [n for n in fg.apply_nodes if isinstance(n.op, AllocDiag)]
    assert inline_diag.transform(fg, node) is None


def test_user_opfromgraph_kept_diag_gradient_inlined():
    """A user's small OpFromGraph stays a node (pytensor's tests look for it); diag(v)'s gradient, built
    by OpFromGraph.L_op from the AllocDiag node, is inlined."""
    from pytensor.compile.builders import OpFromGraph

    x, v = pt.vector("x"), pt.vector("v")
    user = OpFromGraph([x], [pt.exp(x)[0].set(1)])(x)
    fg = _rewritten([user], [x], "early_diag")
    assert [n for n in fg.apply_nodes if type(n.op) is OpFromGraph]
    cost = (pt.diag(v) ** 2).sum()
    grad = pytensor.grad(cost, v)
    assert [n for n in FunctionGraph([v], [grad], clone=True).apply_nodes if type(n.op) is OpFromGraph]
    fg = _rewritten([grad], [v], "early_diag")
    assert not [n for n in fg.apply_nodes if type(n.op) is OpFromGraph]
    f = pytensor.function([v], grad, mode=pmfast.get_mode("early_diag"))
    np.testing.assert_allclose(f(np.array([1.0, -2.0, 3.0])), [2.0, -4.0, 6.0])


_UNARY = (pt.exp, pt.log1p, pt.sqr, pt.tanh, lambda t: t * 2.0 + 1.0)


@settings(max_examples=25, deadline=None)
@given(
    chain=st.lists(st.integers(0, len(_UNARY) - 1), min_size=1, max_size=6),
    offset=st.integers(-2, 2),
    grad=st.booleans(),
)
def test_inner_graph_inlining_equals_pytensors_without_copies(chain, offset, grad):
    """``inline_inner_graph`` gives the graph pytensor's ``inline_ofg_node`` gives (structurally equal
    outputs), computed on the node's own inputs: the inputs' ancestors are not copied."""
    from pytensor.graph.basic import equal_computations
    from pytensor.graph.traversal import applys_between
    from pytensor.tensor.rewriting.ofg import inline_ofg_node

    from pmfast.passes.early_diag import inline_inner_graph

    x = pt.dvector("x")
    v = x
    for k in chain:
        v = _UNARY[k](v)
    d = pt.diag(v, k=offset)
    out = (d * pt.arange(d.shape[0])[:, None]).sum()
    if grad:
        out = pytensor.grad(out, x).sum()
    fg = FunctionGraph([x], [out], clone=False)
    nodes = [n for n in fg.toposort() if isinstance(n.op, pytensor.compile.builders.OpFromGraph)]
    assert nodes
    for node in nodes:
        theirs, ours = inline_ofg_node(node), inline_inner_graph(node)
        assert equal_computations(theirs, ours)
        inner = {n for n in applys_between(node.inputs, ours) if not set(n.outputs) & set(node.inputs)}
        assert len(inner) == len(node.op.fgraph.apply_nodes)
        outside = set(applys_between([x], ours)) - inner
        assert outside <= set(fg.apply_nodes), "an ancestor of the node's inputs was copied"
        copied = set(applys_between([x], theirs)) - set(fg.apply_nodes)
        assert len(copied) > len(node.op.fgraph.apply_nodes)  # pytensor's copies the inputs' ancestors


def test_the_pipeline_gives_the_same_graph_either_way(monkeypatch):
    """The whole mode on a marginal GP's logp and gradient: the same rewritten graph whether
    ``early_diag`` inlines with its own clone or with pytensor's (``PMFAST_INLINE_INNER_ONLY=0``)."""
    from pytensor.graph.basic import equal_computations

    joined, logp, grad, _, _ = _gp_functions()
    ours = _rewritten([logp, grad], [joined], "all")
    monkeypatch.setenv("PMFAST_INLINE_INNER_ONLY", "0")
    theirs = _rewritten([logp, grad], [joined], "all")
    assert len(ours.apply_nodes) == len(theirs.apply_nodes)
    assert equal_computations(ours.outputs, theirs.outputs, [ours.inputs[0]], [theirs.inputs[0]])
