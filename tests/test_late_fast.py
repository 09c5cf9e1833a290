"""pmfast.inplace_fast, ``late`` wrappers: rewriters after the destroy handler take the same decisions
with a renamed node (same inputs, same ``destroy_map``) left unvalidated."""

import numpy as np
import pytensor.tensor as pt
from hypothesis import given, settings
from pytensor.compile import optdb
from pytensor.graph.basic import equal_computations
from pytensor.graph.rewriting.basic import WalkingGraphRewriter, node_rewriter

from pmfast import inplace_fast

from test_inplace_fast import destroy_maps, evaluate, fgraph_of, fgraph_of_outputs, programs, run

TOTALS = {"renamed": 0, "validated": 0}


@node_rewriter(None)
def rebuild(fgraph, node):
    """Every node made again from its op and inputs: a rename, or (a view) a change left to pytensor."""
    return node.op.make_node(*node.inputs).outputs


def _late(fg, fast: bool):
    rewriter = WalkingGraphRewriter(rebuild, ignore_newtrees=True)
    if fast:
        rewriter = inplace_fast.FastInplace(rewriter, check=True, late=True)
    rewriter.add_requirements(fg)
    rewriter.apply(fg)
    if fast:
        counts = getattr(fg, "_pmfast_inplace_fast", {})
        assert not counts.get("check_failed")
        for key in TOTALS:
            TOTALS[key] += counts.get(key, 0)
    return fg


@settings(max_examples=60, deadline=None, derandomize=True)
@given(programs())
def test_renamed_nodes_after_inplace_stages_same_as_pytensor(program):
    """After pytensor's in-place stages, every node rebuilt: check mode validates each verdict
    (a disagreement raises), and graph, destroy maps and values equal pytensor's path."""
    reference = fgraph_of(program)
    stock = _late(run(fgraph_of(program), False), False)
    fast = _late(run(fgraph_of(program), False), True)
    assert equal_computations(stock.outputs, fast.outputs, stock.inputs, fast.inputs)
    assert destroy_maps(stock) == destroy_maps(fast)
    fast.validate()
    values = [np.linspace(0.1, 0.9, 4) * (i + 1) for i in range(len(fast.inputs))]
    for want, got in zip(evaluate(reference, values), evaluate(fast, values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)


@node_rewriter(None)
def through_a_row(fgraph, node):
    """An Elemwise (in place or not) made again on its inputs as rows, its outputs squeezed back:
    views -> the same op -> views, the chain a Blockwise without batch dims becomes."""
    from pytensor.tensor.elemwise import Elemwise

    if not isinstance(node.op, Elemwise) or any(i.type.ndim != 1 for i in node.inputs):
        return None
    new = node.op.make_node(*(pt.shape_padleft(i) for i in node.inputs))
    return [o.squeeze(0) for o in new.outputs]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(programs())
def test_chains_after_inplace_stages_same_as_pytensor(program):
    """After pytensor's in-place stages, every vector Elemwise made a chain through a row: check mode
    validates each verdict; graph, destroy maps and values equal pytensor's path."""
    reference = fgraph_of(program)
    graphs = []
    for fast in (False, True):
        fg = run(fgraph_of(program), False)
        rewriter = WalkingGraphRewriter(through_a_row, ignore_newtrees=True)
        if fast:
            rewriter = inplace_fast.FastInplace(rewriter, check=True, late=True)
        rewriter.add_requirements(fg)
        rewriter.apply(fg)
        graphs.append(fg)
    stock, fast = graphs
    counts = getattr(fast, "_pmfast_inplace_fast", {})
    assert not counts.get("check_failed")
    TOTALS["chain"] = TOTALS.get("chain", 0) + counts.get("chain", 0)
    assert equal_computations(stock.outputs, fast.outputs, stock.inputs, fast.inputs)
    assert destroy_maps(stock) == destroy_maps(fast)
    values = [np.linspace(0.1, 0.9, 4) * (i + 1) for i in range(len(fast.inputs))]
    for want, got in zip(evaluate(reference, values), evaluate(fast, values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_random_programs_make_chains():
    TOTALS["chain"] = 0
    test_chains_after_inplace_stages_same_as_pytensor()
    assert TOTALS["chain"] > 0, TOTALS


def test_random_programs_rename_destroyers():
    """The property test above saw in-place nodes renamed without validation, and views validated."""
    TOTALS.update(renamed=0, validated=0)
    test_renamed_nodes_after_inplace_stages_same_as_pytensor()
    assert TOTALS["renamed"] > 0 and TOTALS["validated"] > 0, TOTALS


@node_rewriter(None)
def intolerant(fgraph, node):
    """An in-place IncSubtensor remade without its tolerance of aliased inputs."""
    op = node.op
    if getattr(op, "destroyhandler_tolerate_aliased", None):
        return type(op)(op.idx_list, op.inplace, op.set_instead_of_inc).make_node(*node.inputs).outputs
    return None


def test_aliased_destroyer_is_left_to_pytensor():
    """An in-place set_subtensor of ``e[:2]`` from ``e[2:]`` is valid only while its op tolerates the
    aliasing: the same op without that tolerance is no rename; pytensor's validation refuses it."""
    from pytensor.compile.function.types import std_fgraph
    from pytensor.compile.io import In, Out

    x = pt.dvector("x")
    e = pt.exp(x)
    s = pt.subtensor.set_subtensor(e[:2], e[2:4], inplace=True, tolerate_inplace_aliasing=True)
    fg, _ = std_fgraph([In(x)], [Out(pt.sin(s))], accept_inplace=True, force_clone=True)
    (handler,) = optdb.__db__["add_destroy_handler"]
    handler.add_requirements(fg)
    rewriter = inplace_fast.FastInplace(
        WalkingGraphRewriter(intolerant, failure_callback=WalkingGraphRewriter.warn_inplace), check=True, late=True
    )
    rewriter.add_requirements(fg)
    rewriter.apply(fg)
    counts = fg._pmfast_inplace_fast
    assert counts["renamed"] == 0 and counts["validated"] == 1 and not counts["check_failed"], counts
    (node,) = [n for n in fg.apply_nodes if n.op.destroy_map]
    assert node.op.destroyhandler_tolerate_aliased


def _unbatched_solve():
    a, y = pt.dmatrix("a"), pt.dvector("y")
    lower = pt.tril(pt.exp(a)) + 3 * pt.eye(3)
    out = pt.linalg.solve_triangular(lower, pt.exp(y), lower=True)
    return fgraph_of_outputs([out.sum() + out], [a, y])


def _useless_blockwise(fg, fast: bool):
    for name in ("blockwise_inplace", "local_useless_unbatched_blockwise"):
        (rewriter,) = optdb.__db__[name]
        if fast and name in inplace_fast.LATE:
            rewriter = inplace_fast.FastInplace(rewriter, check=True, late=True)
        rewriter.add_requirements(fg)
        rewriter.apply(fg)
    return fg


def test_unbatched_blockwise_renamed_to_its_core_op():
    """stock ``local_useless_unbatched_blockwise`` on an in-place Blockwise without batch dims:
    its core op, same inputs and destroy map, taken as a rename; same graph as pytensor's path."""
    stock, fast = _useless_blockwise(_unbatched_solve(), False), _useless_blockwise(_unbatched_solve(), True)
    assert fast._pmfast_inplace_fast["renamed"] == 1, fast._pmfast_inplace_fast
    assert equal_computations(stock.outputs, fast.outputs, stock.inputs, fast.inputs)
    assert destroy_maps(stock) == destroy_maps(fast)
    assert any("SolveTriangular" in op and dm for op, dm in destroy_maps(fast))


def test_late_switch_off_runs_rewriter_unwrapped(monkeypatch):
    monkeypatch.setenv("PMFAST_LATE_FAST", "0")
    fast = _useless_blockwise(_unbatched_solve(), True)
    assert not getattr(fast, "_pmfast_inplace_fast", None)


def test_late_wiring():
    """Stock ``LATE`` entries wrapped beside their position; pmfast's indexed in-place pass wrapped."""
    import pmfast
    from pmfast.passes import indexed_elemwise  # noqa: F401  (registers the pass)

    query = pmfast.get_mode("all").provided_optimizer
    assert set(inplace_fast.LATE) <= set(query.exclude)
    for name in inplace_fast.LATE:
        (wrapper,) = optdb.__db__[name + inplace_fast.SUFFIX]
        assert wrapper.late and optdb.__position__[name + inplace_fast.SUFFIX] == optdb.__position__[name]
    (inplace_pass,) = optdb.__db__["pmfast.indexed_elemwise.inplace"]
    assert isinstance(inplace_pass, inplace_fast.FastInplace) and inplace_pass.late


def _rv_function():
    import pytensor
    from pytensor.compile.mode import get_mode

    rng = pytensor.shared(np.random.default_rng(0))
    mu = pt.dvector("mu")
    next_rng, draws = pt.random.normal(mu, 1.0, rng=rng).owner.outputs
    next_rng2, more = pt.random.uniform(draws, 2.0, rng=next_rng).owner.outputs
    mode = get_mode("FAST_COMPILE").including("random_make_inplace")
    return pytensor.function([mu], [draws, more], updates={rng: next_rng2}, mode=mode)


def test_random_make_inplace_judged_inside_the_compile(monkeypatch):
    """Inside pmfast's compile, pymc-style functions' RandomVariables go in place through the judged
    path (counted), with the same graph as pytensor's path outside it and with the switch off."""
    from pmfast import compiler
    from pmfast.compiler import patching

    compiler.setup()
    outside = _rv_function().maker.fgraph
    assert not getattr(outside, "_pmfast_inplace_fast", None)
    with patching.compiling():
        inside = _rv_function().maker.fgraph
        monkeypatch.setenv("PMFAST_INPLACE_SCOPED", "0")
        off = _rv_function().maker.fgraph
    assert inside._pmfast_inplace_fast["proven"] == 2, inside._pmfast_inplace_fast
    assert not getattr(off, "_pmfast_inplace_fast", None)
    for fg in (inside, off):
        assert equal_computations(outside.outputs, fg.outputs, outside.inputs, fg.inputs)
        assert destroy_maps(outside) == destroy_maps(fg)
    assert sum(bool(dm) for _, dm in destroy_maps(inside)) == 2


def _batched_cholesky():
    a = pt.tensor3("a", shape=(1, 3, 3))
    spd = a @ a.mT + 3 * pt.eye(3)
    chol = pt.linalg.cholesky(spd)
    return fgraph_of_outputs([chol.sum() + chol], [a])


def test_unbatched_blockwise_with_a_batch_dim_is_a_judged_chain():
    """A Blockwise with a length-1 batch dim becomes squeeze -> core op (in place on the squeezed
    view) -> expand: judged as a chain (check mode validates it), same graph as pytensor's path."""
    stock, fast = _useless_blockwise(_batched_cholesky(), False), _useless_blockwise(_batched_cholesky(), True)
    counts = fast._pmfast_inplace_fast
    assert counts["chain"] >= 1 and not counts["check_failed"], counts
    assert equal_computations(stock.outputs, fast.outputs, stock.inputs, fast.inputs)
    assert destroy_maps(stock) == destroy_maps(fast)
    assert any("Cholesky" in op and dm for op, dm in destroy_maps(fast))
