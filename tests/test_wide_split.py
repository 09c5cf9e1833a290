"""Tests of the ``wide_split`` pass and pmfast's chunked-call numba linker.

Most tests rewrite graphs with the exact NUMBA-mode rewrite query (stock +
``pmfast.wide_split``) but link them with pytensor's Python linker: no numba
compile, so hypothesis can vary arities and shapes cheaply. A few tests
compile with numba end to end (stock vs pmfast) on small graphs.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.link.numba.linker import NumbaLinker

import pmfast
from pmfast.linker import ChunkedNumbaLinker, chunk_source
from pmfast.passes import wide_split as ws
from pmfast.passes.registry import fired

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def rewrite_mode(passes=("wide_split",)):
    """The NUMBA-mode rewrites (plus ``passes``), linked with the Python linker (no numba compile)."""
    tags = [f"pmfast.{p}" for p in passes]
    query = RewriteDatabaseQuery(
        include=["fast_run", "numba", *NumbaLinker.required_rewrites, *tags],
        exclude=list(NumbaLinker.incompatible_rewrites),
    )
    return Mode(linker="py", optimizer=query)


def widest(fn, types=None):
    nodes = fn.maker.fgraph.apply_nodes
    return max((len(n.inputs) for n in nodes if types is None or isinstance(n.op, types)), default=0)


def splittable_wide(fn):
    """Nodes the pass is meant to split that still have > 30 inputs."""
    from pytensor.raise_op import CheckAndRaise
    from pytensor.tensor.basic import Join, MakeVector
    from pytensor.tensor.elemwise import Elemwise

    bad = []
    for n in fn.maker.fgraph.apply_nodes:
        if len(n.inputs) <= ws.MAX_ARITY:
            continue
        if isinstance(n.op, Join | MakeVector | CheckAndRaise):
            bad.append(n)
        elif isinstance(n.op, Elemwise) and ws.is_assoc(n.op.scalar_op):
            bad.append(n)
    return bad


# ----------------------------------------------------------------------------
# chunking helpers
# ----------------------------------------------------------------------------


@given(st.lists(st.integers(1, 30), min_size=1, max_size=300), st.integers(2, 30))
@settings(max_examples=200, deadline=None)
def test_balanced_chunks_cover_in_order_within_limit(weights, limit):
    chunks = ws.balanced_chunks(weights, limit)
    assert [i for c in chunks for i in c] == list(range(len(weights)))
    for c in chunks:
        assert c, "no empty chunks"
        assert sum(weights[i] for i in c) <= limit or len(c) == 1
    # never more than twice the minimal number of chunks
    assert len(chunks) <= 2 * max(1, -(-sum(weights) // limit)) + sum(w > limit // 2 for w in weights)


@given(st.integers(31, 2000))
@settings(max_examples=100, deadline=None)
def test_balanced_tree_of_unit_weights_is_narrow_and_balanced(n):
    calls = []

    def combine(items):
        calls.append(len(items))
        return object()

    ws.balanced_tree(list(range(n)), [1] * n, combine)
    assert max(calls) <= ws.CHUNK
    # equal-size chunks per level (sibling nodes share a signature): at most 2 distinct sizes per level
    assert len(set(calls[: -(-n // ws.CHUNK)])) <= 2


# ----------------------------------------------------------------------------
# Add / Mul
# ----------------------------------------------------------------------------


@given(n=st.integers(31, 140), op=st.sampled_from(["add", "mul"]), length=st.integers(1, 4))
@SETTINGS
def test_wide_add_mul_split_parity_and_arity(n, op, length):
    xs = [pt.dvector(f"x{i}") for i in range(n)]
    out = pt.add(*xs) if op == "add" else pt.mul(*xs)
    fn = pytensor.function(xs, out, mode=rewrite_mode())
    rng = np.random.default_rng(n)
    vals = [rng.uniform(0.9, 1.1, size=length) for _ in xs]
    ref = np.sum(vals, axis=0) if op == "add" else np.prod(vals, axis=0)
    np.testing.assert_allclose(fn(*vals), ref, rtol=1e-12)
    assert widest(fn) <= ws.CHUNK
    assert fired(fn) == {"wide_split": 1}


@given(n=st.integers(16, 90), multi=st.booleans())
@SETTINGS
def test_gathered_add_counts_index_inputs_and_terminates(n, multi):
    """x_i[idx_i] (or x_i[idx_i, jdx_i]) operands weigh 1 + index arrays; the rewrite fires once."""
    rng = np.random.default_rng(n)
    xs, idxs, terms, vals = [], [], [], []
    for i in range(n):
        if multi:
            x = pt.dmatrix(f"x{i}")
            a, b = pt.lvector(f"a{i}"), pt.lvector(f"b{i}")
            terms.append(x[a, b])
            idxs += [a, b]
            vals_i = [rng.normal(size=(3, 4)), rng.integers(0, 3, 7), rng.integers(0, 4, 7)]
        else:
            x = pt.dvector(f"x{i}")
            a = pt.lvector(f"a{i}")
            terms.append(x[a])
            idxs.append(a)
            vals_i = [rng.normal(size=5), rng.integers(0, 5, 7)]
        xs.append(x)
        vals.append(vals_i)
    out = pt.add(*terms)
    inputs = [v for i in range(n) for v in ([xs[i], idxs[2 * i], idxs[2 * i + 1]] if multi else [xs[i], idxs[i]])]
    fn = pytensor.function(inputs, out, mode=rewrite_mode())
    flat = [v for vi in vals for v in vi]
    if multi:
        ref = sum(v[0][v[1], v[2]] for v in vals)
    else:
        ref = sum(v[0][v[1]] for v in vals)
    np.testing.assert_allclose(fn(*flat), ref, rtol=1e-12)
    weight = 3 if multi else 2
    assert fired(fn) == ({"wide_split": 1} if n * weight > ws.MAX_ARITY else {})
    from pytensor.tensor.elemwise import Elemwise

    for node in fn.maker.fgraph.apply_nodes:
        if isinstance(node.op, Elemwise):
            assert sum(ws.input_weight(i) for i in node.inputs) <= max(ws.CHUNK, ws.MAX_ARITY if n * weight <= 30 else 0)


def test_rewriter_is_idempotent_and_bounded():
    """Running the graph rewriter again on its own output changes nothing."""
    from pytensor.graph.fg import FunctionGraph

    xs = [pt.dvector(f"x{i}") for i in range(700)]
    fg = FunctionGraph(xs, [pt.add(*xs), pt.mul(*xs[:40])], clone=False)
    rewriter = ws.WideSplit()
    assert rewriter.apply(fg) == 2
    n_nodes = len(fg.apply_nodes)
    assert max(len(n.inputs) for n in fg.apply_nodes) <= ws.CHUNK
    assert rewriter.apply(fg) == 0
    assert len(fg.apply_nodes) == n_nodes


def test_narrow_or_mixed_dtype_nodes_are_declined():
    xs = [pt.dvector(f"x{i}") for i in range(30)]
    fn = pytensor.function(xs, pt.add(*xs), mode=rewrite_mode())
    assert fired(fn) == {}
    ys = [pt.dvector(f"y{i}") for i in range(20)] + [pt.fvector(f"f{i}") for i in range(20)]
    from pytensor.graph.fg import FunctionGraph
    from pytensor.tensor.elemwise import Elemwise
    import pytensor.scalar as ps

    node = Elemwise(ps.add).make_node(*ys)
    # Elemwise upcasts: inputs of another dtype than the output -> declined
    fg = FunctionGraph(ys, node.outputs, clone=False)
    assert ws.WideSplit().apply(fg) == 0


# ----------------------------------------------------------------------------
# Composite (built by fusion)
# ----------------------------------------------------------------------------


@given(n=st.integers(31, 80), shared_term=st.booleans())
@SETTINGS
def test_wide_composite_split(n, shared_term):
    xs = [pt.dvector(f"x{i}") for i in range(n)]
    terms = [pt.exp(x) * 0.5 for x in xs]
    out = pt.log1p(pt.add(*terms) ** 2)
    if shared_term:
        out = out + terms[0]  # term 0 is used outside the sum: its sub-expression is shared
    fn = pytensor.function(xs, out, mode=rewrite_mode())
    vals = [np.full(3, 0.01 * i) for i in range(n)]
    ref = np.log1p(sum(np.exp(v) * 0.5 for v in vals) ** 2)
    if shared_term:
        ref = ref + np.exp(vals[0]) * 0.5
    np.testing.assert_allclose(fn(*vals), ref, rtol=1e-12)
    if not shared_term:
        assert fired(fn) == {"wide_split": 1}
        assert widest(fn) <= ws.CHUNK
    # shared sub-expressions: split or declined, never wrong (checked above)


# ----------------------------------------------------------------------------
# Join, MakeVector, CheckAndRaise
# ----------------------------------------------------------------------------


def _set_subtensors(fn):
    from pytensor.tensor.subtensor import IncSubtensor

    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, IncSubtensor)]


@given(n=st.integers(30, 120), static=st.booleans(), axis=st.sampled_from([0, 1, -1]))
@SETTINGS
def test_wide_join_becomes_one_inplace_buffer(n, static, axis):
    rng = np.random.default_rng(n)
    # zero-length static inputs are dropped from the Join by canonicalisation
    lengths = rng.integers(1 if static else 0, 4, n)
    if axis == 0 and static:
        xs = [pt.tensor(f"x{i}", shape=(int(k),), dtype="float64") for i, k in enumerate(lengths)]
        vals = [rng.normal(size=int(k)) for k in lengths]
    elif axis == 0:
        xs = [pt.dvector(f"x{i}") for i in range(n)]
        vals = [rng.normal(size=int(k)) for k in lengths]
    else:
        xs = [pt.tensor(f"x{i}", shape=(2, int(k) if static else None), dtype="float64") for i, k in enumerate(lengths)]
        vals = [rng.normal(size=(2, int(k))) for k in lengths]
    out = pt.concatenate([x * 2 for x in xs], axis=axis)  # n tensors + the axis: > 30 call arguments
    fn = pytensor.function(xs, out, mode=rewrite_mode())
    np.testing.assert_array_equal(fn(*vals), np.concatenate([v * 2 for v in vals], axis=axis))
    assert splittable_wide(fn) == []
    sets = _set_subtensors(fn)
    assert len(sets) == n
    assert all(s.op.inplace and s.op.set_instead_of_inc for s in sets)
    from pytensor.tensor.basic import AllocEmpty, Join

    assert sum(isinstance(n_.op, AllocEmpty) for n_ in fn.maker.fgraph.apply_nodes) == 1
    assert not any(isinstance(n_.op, Join) for n_ in fn.maker.fgraph.apply_nodes)


def test_join_with_unknown_non_axis_dims_is_declined():
    xs = [pt.dmatrix(f"x{i}") for i in range(35)]
    fn = pytensor.function(xs, pt.concatenate(xs, axis=0), mode=rewrite_mode())
    assert fired(fn) == {}
    vals = [np.ones((1, 2))] * 34 + [np.ones((1, 3))]
    with pytest.raises(ValueError):
        fn(*vals)  # stock Join semantics (shape check) kept


@given(n=st.integers(31, 800))
@SETTINGS
def test_wide_make_vector(n):
    xs = [pt.dscalar(f"s{i}") for i in range(n)]
    out = pt.stack(xs) * 3
    fn = pytensor.function(xs, out, mode=rewrite_mode())
    vals = list(np.arange(n, dtype="float64"))
    np.testing.assert_array_equal(fn(*vals), np.arange(n) * 3.0)
    assert splittable_wide(fn) == []
    assert fired(fn).get("wide_split", 0) >= 1


@given(n=st.integers(31, 100), bad=st.integers(-1, 99))
@SETTINGS
def test_wide_check_and_raise(n, bad):
    from pytensor.raise_op import Assert

    x = pt.dvector("x")
    cs = [pt.dscalar(f"c{i}") for i in range(n)]
    out = Assert("boom")(x, *[c > 0 for c in cs]) * 2
    fn = pytensor.function([x, *cs], out, mode=rewrite_mode())
    assert splittable_wide(fn) == []
    vals = [1.0] * n
    if 0 <= bad < n:
        vals[bad] = -1.0
        with pytest.raises(AssertionError, match="boom"):
            fn(np.ones(2), *vals)
    else:
        np.testing.assert_array_equal(fn(np.ones(2), *vals), 2 * np.ones(2))


# ----------------------------------------------------------------------------
# the chunked-call linker
# ----------------------------------------------------------------------------


@given(n=st.integers(0, 200), tup=st.booleans())
@settings(max_examples=60, deadline=None)
def test_chunk_source_preserves_python_semantics(n, tup):
    args = ", ".join(f"a{i}" for i in range(n))
    body = f"return ({args}{',' if n == 1 else ''})" if tup else f"return g({args})"
    src = f"def f({args}):\n    {body}\n"
    new, changed = chunk_source(src)
    assert (changed > 0) == (n > 30)
    if n <= 30:
        assert new == src  # untouched byte for byte
    env_a, env_b = {"g": lambda *a: a}, {"g": lambda *a: a}
    exec(src, env_a)
    exec(new, env_b)
    assert env_a["f"](*range(n)) == env_b["f"](*range(n))


def test_get_mode_linker_choice():
    assert type(pmfast.get_mode("none").linker) is NumbaLinker
    assert isinstance(pmfast.get_mode("wide_split").linker, ChunkedNumbaLinker)


def _numba_fn(inputs, outputs, passes):
    return pytensor.function(inputs, outputs, mode=pmfast.get_mode(passes))


def test_chunked_linker_on_unsplittable_wide_node():
    """A 40-input fused Composite of maximum() (not Add/Mul: never split) and 41 outputs."""
    n = 40
    xs = [pt.dvector(f"x{i}") for i in range(n)]
    m = xs[0]
    for x in xs[1:]:
        m = pt.maximum(m, x)
    outs = [m] + [x * 2 for x in xs]
    fn = _numba_fn(xs, outs, "wide_split")
    assert widest(fn) == n  # the Composite stays whole
    assert fn.maker.linker.stats["chunked_sites"] >= 2  # its call line and the 41-output return
    rng = np.random.default_rng(0)
    vals = [rng.normal(size=3) for _ in xs]
    res = fn(*vals)
    np.testing.assert_array_equal(res[0], np.max(vals, axis=0))
    for r, v in zip(res[1:], vals, strict=True):
        np.testing.assert_array_equal(r, 2 * v)


def test_numba_end_to_end_parity_gathered_gradient_join():
    """Stock vs pmfast numba on a gathered wide sum and its 36-way gradient Join."""
    n = 36
    rng = np.random.default_rng(1)
    xs = [pt.dvector(f"x{i}") for i in range(n)]
    idx = [pt.constant(rng.integers(0, 3, 50)) for _ in range(n)]
    s = pt.add(*[x[i] for x, i in zip(xs, idx, strict=True)])
    logp = -(pt.log1p(s**2)).sum() + pt.add(*[(x**2).sum() for x in xs]) * -0.5
    grad = pt.concatenate([g.ravel() for g in pytensor.grad(logp, xs)])
    vals = [rng.normal(size=3) for _ in xs]
    stock = _numba_fn(xs, [logp, grad], "none")
    fast = _numba_fn(xs, [logp, grad], "wide_split")
    a, b = stock(*vals), fast(*vals)
    np.testing.assert_allclose(b[0], a[0], rtol=1e-10)
    np.testing.assert_allclose(b[1], a[1], rtol=1e-10, atol=1e-12)
    assert splittable_wide(fast) == []
    assert fired(fast)["wide_split"] >= 2
    sets = _set_subtensors(fast)
    assert len(sets) == n and all(s_.op.inplace for s_ in sets)


def test_wide_additive_final_graph_invariants():
    """The zoo's wide model (n=40): nothing splittable stays > 30 wide; the gradient Join is one buffer."""
    from pmfast import models
    from pymc.pytensorf import compile as compile_pymc

    from pmfast.frontend import logp_dlogp_graph

    model = models.load("wide_additive")(n=40, n_obs=50)
    joined, logp, grad, _, _ = logp_dlogp_graph(model)
    with model:
        fn = compile_pymc((joined,), (logp, grad), mode=rewrite_mode())
    assert splittable_wide(fn) == []
    assert widest(fn) <= ws.MAX_ARITY
    assert fired(fn)["wide_split"] >= 3  # logit Add, logp Add, gradient Join (+ MakeVector of shape checks)
    sets = _set_subtensors(fn)
    assert len(sets) == 40 and all(s.op.inplace for s in sets)


def _small_graph():
    xs = [pt.dvector(f"x{i}") for i in range(3)]
    out = pt.add(*[pt.exp(x).sum() for x in xs])
    vals = [np.arange(3.0) + i for i in range(3)]
    return xs, out, vals


def test_linker_final_function_is_the_graph_function():
    """No ``*args`` wrapper around the graph function (numba would finalise the whole program twice)."""
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    xs, out, vals = _small_graph()
    stock = _numba_fn(xs, out, "none")
    fast = _numba_fn(xs, out, "wide_split")
    assert "jitable_func" in stock.vm.jit_fn.py_func.__code__.co_names  # the stock wrapper
    py_func = fast.vm.jit_fn.py_func
    assert "jitable_func" not in py_func.__code__.co_names
    assert py_func.__code__.co_argcount == len(xs)  # the graph function's own signature, not *args
    # cacheable across processes: a stable file name and a key for pytensor's cache locator
    assert py_func.__code__.co_filename == "<string>"
    assert CACHED_SRC_FUNCTIONS[py_func].endswith("_pmfast_direct" + __import__("pmfast.linker").linker.VERSION)
    np.testing.assert_allclose(fast(*vals), stock(*vals), rtol=1e-14)
    legacy = pytensor.function(xs, out, mode=Mode(ChunkedNumbaLinker(direct=False), pmfast.get_mode("wide_split").optimizer))
    assert "jitable_func" in legacy.vm.jit_fn.py_func.__code__.co_names


def test_linker_big_graph_is_optnone_and_frees_garbage_before_codegen(monkeypatch):
    """From OPTNONE_MIN_NODES nodes on: optnone, and the lean pipeline runs gc before finalising the library."""
    import pmfast.linker as lk
    from pmfast.compiler import library

    calls = []
    orig = library.release_memory
    monkeypatch.setattr(library, "release_memory", lambda *modules: (calls.append(1), orig(*modules)))
    xs, out, vals = _small_graph()
    stock = _numba_fn(xs, out, "none")
    small = _numba_fn(xs, out, "wide_split")
    assert not small.vm.jit_fn.targetoptions.get("_dbg_optnone")
    small(*vals)
    assert calls == []
    monkeypatch.setattr(lk, "OPTNONE_MIN_NODES", 1)
    big = _numba_fn(xs, out, "wide_split")
    jit_fn = big.vm.jit_fn
    assert jit_fn.targetoptions.get("_dbg_optnone")
    assert jit_fn._compiler.pipeline_class is lk._lean_compiler()
    np.testing.assert_allclose(big(*vals), stock(*vals), rtol=1e-14)
    assert len(calls) == 1  # the final function's library only, not every kernel's
    (cres,) = jit_fn.overloads.values()
    assert type(cres.library).__name__.startswith("Pmfast")
    assert "optnone" in cres.library.get_llvm_str()


def _count(fn, pred):
    return sum(1 for n in fn.maker.fgraph.apply_nodes if pred(n))


def _is_sum(n):
    from pytensor.tensor.math import Sum

    return isinstance(n.op, Sum)


@given(
    runs=st.lists(st.tuples(st.sampled_from([3, 4, 6]), st.integers(1, 14)), min_size=3, max_size=8).filter(
        lambda r: sum(k for _, k in r) > 30
    ),
    perm_seed=st.integers(0, 10**6),
    gap=st.booleans(),
)
@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
def test_block_sums_batched_in_wide_add(runs, perm_seed, gap):
    """Σ_i sum(f(x[a_i:b_i].reshape(…))) + other → each run of contiguous equal-size blocks as one row-sum."""
    rng = np.random.default_rng(perm_seed)
    sizes = [s for s, k in runs for _ in range(k)]
    starts = list(np.cumsum([0, *sizes])[:-1])
    if gap:  # a hole in the middle: the run there breaks
        starts = starts[: len(sizes) // 2] + [a + 1 for a in starts[len(sizes) // 2 :]]
    x = pt.dvector("x")
    terms = [
        pt.sum(pt.exp(-0.5 * x[int(a) : int(a) + s].reshape((s // 2 if s % 2 == 0 else s, -1)) ** 2))
        for a, s in zip(starts, sizes, strict=True)
    ]
    # another (non-fusable) term; a fusable scalar term would make the Add a Composite (not batched)
    y = pt.dvector("y")
    order = rng.permutation(len(terms) + 1)
    operands = [(terms + [pt.sum(pt.log1p(y**2))])[i] for i in order]
    fn = pytensor.function([x, y], pt.add(*operands), mode=rewrite_mode())
    xv, yv = rng.normal(size=int(starts[-1] + sizes[-1])), np.array([0.3, -1.0])
    expected = sum(np.exp(-0.5 * xv[int(a) : int(a) + s] ** 2).sum() for a, s in zip(starts, sizes, strict=True))
    np.testing.assert_allclose(fn(xv, yv), expected + np.log1p(yv**2).sum(), rtol=1e-13)
    assert widest(fn) <= ws.MAX_ARITY
    # maximal runs of contiguous equal-size blocks: 2 Sums each (rows, then total), 1 for a lone block
    lengths = [1]
    for i in range(1, len(sizes)):
        if sizes[i] == sizes[i - 1] and starts[i] == starts[i - 1] + sizes[i - 1]:
            lengths[-1] += 1
        else:
            lengths.append(1)
    assert _count(fn, _is_sum) == sum(2 if k > 1 else 1 for k in lengths) + 1


def test_block_sums_not_batched_when_shared_or_not_contiguous():
    from pytensor.tensor.math import Sum

    x = pt.dvector("x")
    n, m = 35, 4
    terms = [pt.sum(pt.exp(x[i * m : (i + 1) * m])) for i in range(n)]
    # every other block overlaps its neighbour: no contiguous run of equal blocks
    skew = [pt.sum(pt.exp(x[i * m + (i % 2) : i * m + (i % 2) + m])) for i in range(n)]
    fn_skew = pytensor.function([x], pt.add(*skew), mode=rewrite_mode())
    assert _count(fn_skew, lambda nd: isinstance(nd.op, Sum)) >= n - 1  # (fusion may merge a pair or so)
    # each block sum also used elsewhere: batching would compute them twice
    fn_shared = pytensor.function([x], [pt.add(*terms), pt.stack(terms[:3])], mode=rewrite_mode())
    assert _count(fn_shared, lambda nd: isinstance(nd.op, Sum)) >= 3
    # an invalid reshape (4 elements into 3 rows) keeps raising
    bad = [pt.sum(pt.exp(x[i * m : (i + 1) * m].reshape((3, -1)))) for i in range(n)]
    fn_bad = pytensor.function([x], pt.add(*bad), mode=rewrite_mode())
    assert _count(fn_bad, lambda nd: isinstance(nd.op, Sum)) >= n - 1
    xv = np.random.default_rng(0).normal(size=n * m + 2)
    with pytest.raises(ValueError):
        fn_bad(xv)
    np.testing.assert_allclose(fn_shared(xv)[0], np.exp(xv[: n * m]).sum(), rtol=1e-13)
    np.testing.assert_allclose(
        fn_skew(xv), sum(np.exp(xv[i * m + (i % 2) : i * m + (i % 2) + m]).sum() for i in range(n)), rtol=1e-13
    )


@given(n=st.integers(31, 80), shared_col=st.booleans())
@SETTINGS
def test_make_vector_of_scalar_elemwise_vectorized(n, shared_col):
    """MakeVector(eq(a_i, b_i) …) → eq(MakeVector(a…), MakeVector(b…)): one Eq node instead of n."""
    from pytensor.scalar import EQ
    from pytensor.tensor.elemwise import Elemwise

    a = [pt.lscalar(f"a{i}") for i in range(n)]
    b = pt.lscalar("b")
    bs = [b] * n if shared_col else [pt.lscalar(f"b{i}") for i in range(n)]
    out = pt.stack([pt.eq(ai, bi) for ai, bi in zip(a, bs, strict=True)])
    inputs = a + ([b] if shared_col else bs)
    fn = pytensor.function(inputs, out, mode=rewrite_mode())
    assert _count(fn, lambda nd: isinstance(nd.op, Elemwise) and isinstance(nd.op.scalar_op, EQ)) == 1
    assert widest(fn) <= ws.MAX_ARITY
    rng = np.random.default_rng(n)
    av = rng.integers(0, 3, n)
    bv = [1] if shared_col else list(rng.integers(0, 3, n))
    np.testing.assert_array_equal(fn(*av, *bv), av == (bv[0] if shared_col else np.asarray(bv)))


def test_make_vector_not_vectorized_when_an_element_is_shared():
    from pytensor.scalar import EQ
    from pytensor.tensor.elemwise import Elemwise

    n = 40
    a = [pt.lscalar(f"a{i}") for i in range(n)]
    b = pt.lscalar("b")
    eqs = [pt.eq(ai, b) for ai in a]
    fn = pytensor.function([*a, b], [pt.stack(eqs), eqs[0] * 2], mode=rewrite_mode())
    assert _count(fn, lambda nd: isinstance(nd.op, Elemwise) and isinstance(nd.op.scalar_op, EQ)) >= n - 1
    vals = list(range(n))
    res = fn(*vals, 3)
    np.testing.assert_array_equal(res[0], np.arange(n) == 3)


def test_chunk_source_comma_count_boundary():
    """The unparsed fast path (fewer than MAX_ARITY commas) never skips a site that needs chunking."""
    wide = "x = g(" + ", ".join(f"a{i}" for i in range(31)) + ")\n"  # 31 items, exactly 30 commas
    assert wide.count(",") == 30
    assert chunk_source(wide)[1] == 1
    narrow = "x = g(" + ", ".join(f"a{i}" for i in range(30)) + ")\n"
    assert chunk_source(narrow) == (narrow, 0)
