"""pmfast.compiler: intrinsics, op implementations, entries, callbacks' return codes, forked compiles."""

import contextlib
import os
import threading

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pmfast
from pmfast import compiler
from pmfast.compiler import arity, callbacks, dot, elemwise, entry, entry_spec, inline, native, parallel, shape_ops
from pmfast.compiler.overloads import SliceShapeError
from conftest import join_gradient_model

compiler.setup()


def both(inputs, outputs):
    """The same graph compiled by pmfast's linker and by stock numba."""
    return (
        pytensor.function(inputs, outputs, mode=pmfast.get_mode(), on_unused_input="ignore"),
        pytensor.function(inputs, outputs, mode="NUMBA", on_unused_input="ignore"),
    )


def op_names(fn):
    return [type(n.op).__name__ for n in fn.maker.fgraph.toposort()]


# --- intrinsics and overloads --------------------------------------------------------------


@numba.njit
def _views(a, n):
    v = native.array_view(native.data_pointer(a), (n, 2), np.float64)
    e = native.empty((n,), np.float64)
    for i in range(n):
        e[i] = v[i, 1]
    return e


def test_view_and_empty_share_and_allocate():
    a = np.arange(6.0)
    np.testing.assert_array_equal(_views(a, 3), [1.0, 3.0, 5.0])


@numba.njit
def _assign(a, b):
    a[:] = b
    return a


def test_slice_assignment_error_keeps_numbas_message():
    """Inside pmfast's compiles the error is SliceShapeError with numba's message; outside, numba's own."""
    from pmfast.compiler import overloads, patching

    overloads.install()
    for scope, cls in ((patching.compiling, SliceShapeError), (contextlib.nullcontext, ValueError)):
        with scope(), pytest.raises(ValueError, match=r"cannot assign slice of shape \(4,\) from input of shape \(3,\)") as err:
            numba.njit(_assign.py_func)(np.zeros(3), np.zeros(4))
        assert type(err.value) is cls


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _callee(x_, out_, logp_, ud_):
    x = native.array_view(x_, 2, np.float64)
    if x[0] < 0:
        raise ValueError("negative")
    if x[0] > 10:
        raise SliceShapeError((1,), (int(x[0]),))  # an exception with runtime arguments
    logp_[0] = x[0] + x[1]
    return 0


@numba.njit
def _caller(address, x, logp):
    return native.call_native4(address, 7, native.data_pointer(x), native.data_pointer(x), native.data_pointer(logp), native.data_pointer(x))


def test_call_native_returns_error_code_for_exceptions():
    sig = entry_spec.signature("logp")
    _callee.compile(sig)
    address = native.native_address(_callee, sig)
    logp = np.zeros(1)
    assert _caller(address, np.array([1.0, 2.0]), logp) == 0 and logp[0] == 3.0
    assert _caller(address, np.array([-1.0, 2.0]), logp) == 7
    assert _caller(address, np.array([11.0, 2.0]), logp) == 7


# --- op implementations ---------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_dimshuffle_matches_stock(data):
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3]), min_size=ndim, max_size=ndim)))
    x = pt.tensor("x", shape=tuple(1 if s == 1 else None for s in shape))
    kept = [i for i in range(ndim) if shape[i] != 1 or data.draw(st.booleans())]
    order = data.draw(st.permutations(kept))
    order = list(order)
    for _ in range(data.draw(st.integers(0, 2))):
        order.insert(data.draw(st.integers(0, len(order))), "x")
    ours, stock = both([x], x.dimshuffle(*order) * 1.5)
    value = np.arange(np.prod(shape), dtype="float64").reshape(shape)
    np.testing.assert_array_equal(ours(value), stock(value))


def test_dimshuffle_view_checks_dropped_axes():
    node_fn = shape_ops.dimshuffle(pt.tensor(shape=(None, 1)).dimshuffle(0).owner.op, None)[0]
    fn = numba.njit(lambda a: node_fn(a))  # node functions have no Python entry point of their own
    assert fn(np.ones((3, 1))).shape == (3,)
    with pytest.raises(ValueError, match="squeeze axes with size not equal to one"):
        fn(np.ones((3, 2)))


@pytest.mark.parametrize(
    "make",
    [
        lambda X, v, w: pt.dot(X, v),
        lambda X, v, w: pt.dot(X.T, w),
        lambda X, v, w: pt.dot(w, X),
        lambda X, v, w: pt.dot(v, X.T),
        lambda X, v, w: pt.dot(v, v),
        lambda X, v, w: pt.dot(X[:, ::2], v[:3]),
        lambda X, v, w: pt.dot(X, X.T),
    ],
)
def test_dot_matches_stock(make):
    X, v, w = pt.dmatrix("X"), pt.dvector("v"), pt.dvector("w")
    ours, stock = both([X, v, w], make(X, v, w))
    rng = np.random.default_rng(0)
    args = rng.normal(size=(7, 5)), rng.normal(size=5), rng.normal(size=7)
    np.testing.assert_allclose(ours(*args), stock(*args), rtol=1e-13)


def test_dot_loop_refuses_mismatched_sizes():
    X, v = pt.dmatrix("X"), pt.dvector("v")
    ours, _ = both([X, v], pt.dot(X, v))
    assert [dot.kind(n) for n in ours.maker.fgraph.toposort() if type(n.op).__name__ == "Dot"] == [(2, "col")]
    with pytest.raises(ValueError, match="incompatible array sizes"):
        ours(np.ones((3, 4)), np.ones(5))


def test_specify_shape_message_matches_stock():
    x = pt.dvector("x")
    ours, stock = both([x], pt.specify_shape(x, (3,)) * 2.0)
    messages = []
    for fn in (ours, stock):
        with pytest.raises(AssertionError) as err:
            fn(np.ones(4))
        messages.append(str(err.value).splitlines()[0])
    assert messages[0] == messages[1] == "SpecifyShape: dim 0 of input has shape 4, expected 3."


def _split_fns(ndim, axis, n):
    x, sizes = pt.tensor("x", shape=(None,) * ndim), pt.lvector("sizes")
    ours, stock = both([x, sizes], [p * 1.0 for p in pt.split(x, sizes, n_splits=n, axis=axis)])
    assert "Split" in op_names(ours)
    return ours, stock


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_split_matches_stock(data):
    ndim = data.draw(st.integers(1, 3))
    axis = data.draw(st.integers(-ndim, ndim - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=2, max_size=4))
    shape = [data.draw(st.integers(0, 3)) for _ in range(ndim)]
    shape[axis] = sum(sizes)
    ours, stock = _split_fns(ndim, axis, len(sizes))
    value = np.arange(np.prod(shape), dtype="float64").reshape(shape)
    for a, b in zip(ours(value, np.array(sizes)), stock(value, np.array(sizes)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_split_errors_match_stock():
    ours, stock = _split_fns(2, 1, 3)
    for sizes, message in (([1, 1, 1], "Split sizes sum to 3; expected 4"), ([3, -1, 2], "Split sizes cannot be negative")):
        messages = []
        for fn in (ours, stock):
            with pytest.raises(ValueError) as err:
                fn(np.ones((2, 4)), np.array(sizes))
            messages.append(str(err.value).splitlines()[0])
        assert messages == [message, message]


def test_split_declines_a_runtime_axis():
    from pmfast.compiler import split

    x, sizes, axis = pt.dvector("x"), pt.lvector("sizes"), pt.lscalar("axis")
    node = pt.split(x, sizes, n_splits=2, axis=axis)[0].owner
    assert split.funcify(node.op, node) is None
    const = pt.split(x, sizes, n_splits=2, axis=-1)[0].owner
    assert split.split_axis(const) == 0


def test_elemwise_multi_output_broadcast_and_inplace_match_stock():
    x, y = pt.dmatrix("x"), pt.drow("y")
    k = pt.lvector("k")
    a = pt.exp(x) * y + 1.0
    c = pt.exp(pt.cumsum(x, axis=0)) * y  # written into cumsum's output
    outputs = [a, pt.log1p(a) - y, (a > 2).astype("int8"), pt.switch(k > 0, k * 2, -k), c]
    ours, stock = both([x, y, k], outputs)
    ews = [n.op for n in ours.maker.fgraph.apply_nodes if isinstance(n.op, pt.elemwise.Elemwise)]
    assert any(op.scalar_op.nout > 1 for op in ews) and any(op.inplace_pattern for op in ews)
    rng = np.random.default_rng(1)
    args = rng.normal(size=(4, 3)), rng.normal(size=(1, 3)), np.array([-2, 0, 3])
    for got, ref in zip(ours(*args), stock(*args), strict=True):
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)
    z = pt.dmatrix("z")
    ours, stock = both([x, z], pt.exp(x) + z)
    for fn in (ours, stock):  # no runtime broadcasting of a length that isn't statically 1
        with pytest.raises(ValueError):
            fn(args[0], rng.normal(size=(1, 3)))


def test_composite_with_a_wide_call_matches_stock():
    """A 40-term Add inside a Composite (pytensor writes ``add(*(x0, …))``) is called, not inlined:
    numba's inliner rejects star-args calls, and the compile used to fail without ``wide_split``."""
    scalars, arrays = [pt.dscalar(f"s{i}") for i in range(40)], [pt.dvector(f"a{i}") for i in range(5)]
    out = pt.add(*[pt.exp(arrays[k % 5] * scalars[k]) for k in range(40)])
    inputs = [*scalars, *arrays]
    ours = pytensor.function(inputs, out, mode=pmfast.get_mode("none"))  # no wide_split: one 45-input Composite
    stock = pytensor.function(inputs, out, mode="NUMBA")
    assert max(len(n.inputs) for n in ours.maker.fgraph.apply_nodes) > arity.MAX_ARITY
    rng = np.random.default_rng(2)
    args = [*(rng.normal(size=40) * 0.3), *(rng.normal(size=7) for _ in range(5))]
    np.testing.assert_allclose(ours(*args), stock(*args), rtol=1e-14)


def _composite_chain(n):
    """A vector Composite of ``n`` ``switch(k > i, a + i, a - i)`` steps (three scalar nodes each)."""
    a, k = pt.dvector("a"), pt.lvector("k")
    out = a
    for i in range(n):
        out = pt.switch(k > i, out + i, out - i)
    return [a, k], out


def _core_env(fn):
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
    from pytensor.scalar.basic import Composite, get_scalar_type

    node = next(n for n in fn.maker.fgraph.apply_nodes if isinstance(getattr(n.op, "scalar_op", None), Composite))
    comp = node.op.scalar_op
    scalar_node = comp.make_node(*[get_scalar_type(dtype=i.type.dtype)() for i in node.inputs])
    scalar_fn, _ = numba_funcify_and_cache_key(comp, node=scalar_node)
    ins = [f"i{j}" for j in range(len(node.inputs))]
    lines, env = elemwise._scalar_code(comp, scalar_fn, ins, [f"t{j}" for j in range(len(node.outputs))])
    return len(comp.fgraph.apply_nodes), env


def _inlined(env):
    return [name for name, v in env.items() if getattr(v, "targetoptions", {}).get("inline") == "always"]


def test_a_big_composites_core_calls_its_scalar_ops():
    """A core inlines its scalar op functions up to ``CORE_INLINE_MAX`` statements and calls them beyond:
    numba's passes after inlining grow with blocks x variables (ar2_scan's 405-node Composite took 35 CPU
    s to compile inlined, 3.4 called). Both give stock's values."""
    rng = np.random.default_rng(3)
    args = rng.normal(size=5), np.array([0, 3, 9, 20, 40])
    sizes = {}
    for n in (8, 30):
        inputs, out = _composite_chain(n)
        ours = pytensor.function(inputs, out, mode=pmfast.get_mode("none"))
        size, env = _core_env(ours)
        sizes[n] = size
        assert bool(_inlined(env)) == (size <= elemwise.CORE_INLINE_MAX), (size, _inlined(env))
        stock = pytensor.function(inputs, out, mode="NUMBA")
        np.testing.assert_array_equal(ours(*args), stock(*args))
    assert sizes[8] <= elemwise.CORE_INLINE_MAX < sizes[30]


def test_the_call_width_limit_is_defined_once():
    """Every module that chunks, splits or caps calls reads ``pmfast.compiler.arity.MAX_ARITY``:
    none defines its own 30, which could drift from the others'."""
    import pathlib
    import re

    root = pathlib.Path(pmfast.__file__).parent
    own = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "arity.py" and re.search(r"^\s*MAX_AR\w*\s*=\s*\d", path.read_text(), re.M)
    ]
    assert own == []


# --- inlining -------------------------------------------------------------------------------


def test_inlinable_rejects_what_numbas_inliner_cannot_handle():
    def plain(x):
        if x < 0:
            raise ValueError("negative")
        return x + 1

    def varargs(*xs):
        return xs[0]

    def dynamic(x):
        if x < 0:
            raise ValueError("negative", x)
        return x

    def fstring(x):
        if x < 0:
            raise ValueError(f"negative {x}")
        return x

    assert inline.inlinable(plain)
    assert not any(inline.inlinable(f) for f in (varargs, dynamic, fstring))


def _small(x):
    return x + 1


def _large(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] - x[i] / (1.0 + x[i])
    return s + x[0] - x[-1]


def test_inline_plan_inlines_every_candidate_within_the_budget_the_cheapest_beyond():
    small, large, other = numba.njit(_small), numba.njit(_large), numba.njit(_small)
    calls = [("a", "Elemwise", large), ("b", "DimShuffle", small), ("c", "Scan", other), ("b", "DimShuffle", small), ("d", "Sum", other)]
    assert inline.cost(large) > 2 * inline.cost(small)
    everything = 2 * inline.cost(small) + inline.cost(other) + inline.cost(large)  # b has two call sites
    assert inline.plan(calls, budget=everything) == ("a", "b", "d")  # Scan is never inlined
    assert inline.plan(calls, budget=everything - 1) == ("b", "d")  # the largest is called
    assert inline.plan(calls, budget=everything - 1, order="none") == ()
    assert inline.plan(calls) == ("a", "b", "d")


def test_small_entries_inline_everything_wide_ones_the_cheapest():
    """The plan on real graphs: a small model's entry inlines every candidate, wide_additive's
    the cheapest that fit in the budget (not all)."""
    import ast

    from pmfast.frontend import logp_dlogp_graph
    from pmfast.loading import load_model
    from pymc.pytensorf import compile as compile_pymc

    for spec, whole in (("golf_putting", True), ("wide_additive:n=20", False)):
        model, _ = load_model(spec)
        joined, logp, grad, _, _ = logp_dlogp_graph(model)
        with model:
            fn = compile_pymc((joined,), (logp, grad), mode=pmfast.get_mode())
        env = entry_spec.graph_function(fn.vm.jit_fn).__globals__
        order = fn.maker.linker.schedule(fn.maker.fgraph)
        stmts = [ast.parse(ast.unparse(s)).body[0] for s in ast.parse(fn.vm.jit_fn.py_func.__source__).body[0].body[:-1]]
        calls = [
            (s.value.func.id, type(n.op).__name__, env[s.value.func.id])
            for s, n in zip(stmts, order, strict=True)
            if isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name)
        ]
        candidates = {name for name, op, d in calls if inline.should_inline(op, d)}
        chosen = set(inline.plan(calls))
        assert candidates and chosen <= candidates, spec
        if whole:
            assert chosen == candidates, spec
        else:
            sites = {n: sum(c[0] == n for c in calls) for n in candidates}
            spent = sum(sites[n] * inline.cost(env[n]) for n in chosen)
            assert chosen and chosen != candidates and spent <= inline.BUDGET, spec
            assert min(sites[n] * inline.cost(env[n]) for n in candidates - chosen) > inline.BUDGET - spent


# --- entries and callbacks --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    """A model whose gradient is a Join of three pieces; compiled once."""
    model = join_gradient_model()
    return model, pmfast.compile(model)


def test_entry_writes_the_gradient_join_in_place(tiny):
    model, compiled = tiny
    spec = compiled.kernels[0].spec
    assert spec.pieces[1] is not None and len(spec.pieces[1]) == 2
    assert "join" not in compiled.kernels[0].source.lower()
    stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
    code, logp, grad = callbacks.logp_at(compiled, x0)
    ref_logp, ref_grad = stock(x0)
    assert code == 0
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)


def test_a_big_graphs_entry_is_optimised_and_calls_its_node_functions(tiny, monkeypatch):
    """A graph the linker compiles ``optnone`` (``OPTNONE_MIN_NODES``) gets an optimised entry: LLVM's
    inlining threshold 0, node functions called. An ``optnone`` entry ran every node call through
    unoptimised glue (eight_schools: 2.8 µs against 0.5 µs; hier_var's 1,900 nodes paid it per call)."""
    import pmfast.linker as lk
    from pmfast import nutpie_glue

    model, _ = tiny
    monkeypatch.setattr(lk, "OPTNONE_MIN_NODES", 1)
    fn, x0 = pmfast.logp_dlogp_function(model, passes="all")
    assert fn.vm.jit_fn.targetoptions.get("_dbg_optnone")
    kernel = nutpie_glue.logp_kernel(fn)
    dispatcher = kernel.entry.dispatcher
    assert not dispatcher.targetoptions.get("_dbg_optnone")
    from pmfast.compiler import lean_ir, library

    assert entry.BIG_ENTRY_INLINE_THRESHOLD == 0
    big = entry.big_llvm_options()  # its cheaper finalising (tests/test_compiler_big_llvm.py)
    lean = library.compiler(own_copies=True, release=True, inline_threshold=0, **big)
    assert dispatcher._compiler.pipeline_class is lean_ir.pipeline(lean)  # lean_ir's passes on the big entry's library
    assert dispatcher._compiler.pipeline_class.library_options == {"own_copies": True, "release": True, "inline_threshold": 0, **big}
    (cres,) = dispatcher.overloads.values()
    assert "optnone" not in cres.library.get_llvm_str()
    code, logp, grad = kernel(x0)
    ref_logp, ref_grad = pmfast.logp_dlogp_function(model, passes="none")[0](x0)
    assert code == 0
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)


def test_entry_fastmath_keeps_the_loops_sums_in_order(tiny):
    """Inlined node functions get the entry's flags: no ``reassoc`` (a fused loop's running sum would be
    split into two dependent operations per row), pytensor's other flags (FMA contraction) kept."""
    from pytensor import config

    _, compiled = tiny
    flags = compiled.kernels[0].dispatcher.targetoptions["fastmath"]
    if config.numba__fastmath:
        assert "reassoc" not in flags and {"contract", "nsz"} <= set(flags)
    else:
        assert not flags


def test_internal_subroutines_follow_the_callers_fastmath():
    """numba's ``np.sum`` is a memoised internal subroutine lowered with its caller's flags: a caller
    without ``reassoc`` compiled after one with pytensor's full set must not get the reassociated sum
    (the entry's draws then depended on what the process had compiled before)."""
    import re

    compiler.setup()
    full = {"nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc"}
    with_reassoc = numba.njit(fastmath=full)(lambda a: np.sum(a))
    without = numba.njit(fastmath=set(entry.FASTMATH))(lambda a: np.sum(a))
    a = np.linspace(-1.0, 1.0, 101)
    from pmfast.compiler import patching

    with patching.compiling():  # compile-scoped (pmfast.compiler.subroutines)
        with_reassoc(a), without(a)

    def fadd_flags(f):
        return set(re.findall(r"fadd ([a-z ]*?)double", str(f.overloads[f.signatures[0]].library._final_module)))

    assert fadd_flags(with_reassoc) == {"fast "}
    assert fadd_flags(without) and not {s for s in fadd_flags(without) if "fast" in s or "reassoc" in s}


def test_callback_return_codes(tiny):
    _, compiled = tiny
    x = np.zeros(compiled.n_dim)
    assert callbacks.logp_at(compiled, x)[0] == 0
    assert callbacks.logp_at(compiled, x, dim=compiled.n_dim + 1)[0] == -1
    x_inf = x.copy()
    x_inf[-1] = -1e6  # s = exp(-1e6) = 0: an infinite log density
    assert callbacks.logp_at(compiled, x_inf)[0] in (3, 4)
    code, values = callbacks.expand_at(compiled, x)
    assert code == 0 and values.size == compiled.n_expanded
    assert callbacks.expand_at(compiled, x, expanded=compiled.n_expanded + 1)[0] == -1


def test_callback_maps_exceptions_to_error_codes(tiny):
    """A shared array swapped for one of the wrong length makes the kernel raise: code 1."""
    _, compiled = tiny
    swapped = compiled.with_data(x=np.ones(5))
    assert callbacks.logp_at(swapped, np.zeros(compiled.n_dim))[0] == 1


def test_entry_refuses_outputs_that_do_not_fit():
    spec = entry_spec.EntrySpec("expand", 2, 3, 4, (), ("x",), (), ("x",), (None,))
    src = entry_spec.generate_source(spec)
    assert "do not fill the 3 values expected" in src and "do not fit" in src


# --- forked compiles --------------------------------------------------------------------------


def test_fork_runs_the_compile_in_a_child(tmp_path):
    marker = tmp_path / "done"
    child = parallel.fork(lambda: marker.write_text(str(os.getpid())))
    assert child is not None and child.wait()
    assert int(marker.read_text()) == child.pid != os.getpid()
    failing = parallel.fork(lambda: 1 / 0)
    assert failing is not None and not failing.wait()


def test_no_fork_while_other_threads_run():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert parallel.fork(lambda: None) is None
    finally:
        stop.set()
        t.join()


def test_cached_elemwise_code_tells_constants_apart():
    """Scalar code that differs only in a constant never shares a cache entry (both in one cache)."""
    x = pt.dvector("x")
    values = np.array([0.5, 1.0])
    for c in (2.0, 3.0, 2.5):
        (fn, _) = both([x], pt.exp(x * c) + 1.0)
        np.testing.assert_allclose(fn(values), np.exp(values * c) + 1.0, rtol=1e-15)


def test_cheap_frameinfo_names_the_caller_and_validation_still_raises():
    import sys

    from pytensor.graph import features
    from pytensor.graph.fg import FunctionGraph

    from pmfast.compiler import frames

    frames.install()

    def replace_all_validate():
        return features.inspect.getframeinfo(sys._getframe())

    from pmfast.compiler import patching

    with patching.compiling():
        info = replace_all_validate()
    assert (info.function, info.code_context) == ("replace_all_validate", None)
    outside = replace_all_validate()  # outside a pmfast compile: the real inspect
    assert outside.function == "replace_all_validate" and outside.code_context

    class Refuse(features.Feature):
        def validate(self, fgraph):
            raise features.InconsistencyError("refused")

    x = pt.dvector("x")
    fg = FunctionGraph([x], [x * 2], clone=False)
    fg.attach_feature(features.ReplaceValidate())
    fg.attach_feature(Refuse())
    with pytest.raises(features.InconsistencyError, match="refused"):
        fg.validate()


# --- Reshape: pmfast's straight-line code ----------------------------------------------


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_reshape_matches_stock(ndim):
    x, s = pt.dmatrix("x"), pt.lvector("s")
    ours, stock = both([x, s], x.reshape(s, ndim=ndim) * 2.0)
    assert "Reshape" in op_names(ours)
    good = {1: [[12], [-1]], 2: [[4, 3], [-1, 6], [2, -1], [12, 1]], 3: [[2, 3, 2], [2, -1, 3], [1, 1, 12]]}[ndim]
    bad = {1: [[11], [5]], 2: [[5, 3], [-1, -1], [5, -1]], 3: [[2, 2, 2], [-1, -1, 3], [0, -1, 2]]}[ndim]
    value = np.arange(12.0).reshape(3, 4)
    for v in (value, value.T, np.asfortranarray(value)):
        for shape in good:
            got, want = ours(v, np.array(shape)), stock(v, np.array(shape))
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        for shape in bad:
            messages = []
            for fn in (ours, stock):
                with pytest.raises(ValueError) as err:
                    fn(v, np.array(shape))
                messages.append(str(err.value).splitlines()[0])
            assert messages[0] == messages[1]


def test_raisers_are_cached_on_disk():
    """The error paths shared by every model are compiled once per machine (numba's disk cache)."""
    from numba.core.caching import FunctionCache

    from pmfast.compiler import overloads, patching

    overloads.install()
    assert isinstance(shape_ops._specify_shape_fail()._cache, FunctionCache)
    from numba.core.registry import cpu_target
    from numba.np import arrayobj

    templates = cpu_target.typing_context.resolve_value_type(arrayobj.raise_with_shape_context).templates
    cpu = [t for t in templates if getattr(t, "metadata", {}).get("target") == "CPU"]
    (alloc,) = cpu_target.typing_context.resolve_value_type(arrayobj._ol_array_allocate).templates
    with patching.compiling():
        assert cpu[0]._jit_options.get("cache") is True
        assert alloc._jit_options.get("cache") is True
    # numba's own outside pmfast's compiles
    assert not cpu[0]._jit_options.get("cache") and not alloc._jit_options.get("cache")
    assert alloc._overload_func is arrayobj._ol_array_allocate


_ALLOC_PROBE = """
import numba, numpy as np
import contextlib, sys
from numba.core import event
from pmfast.compiler import overloads, patching, subroutines
overloads.install()
subroutines.install()
names = []
class L(event.Listener):
    def on_start(self, ev):
        names.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev):
        pass
def f(n, m):
    a = np.empty(n)
    a[:] = np.ones(m)
    return a.sum()
with event.install_listener("numba:compile", L()):
    with patching.compiling() if sys.argv[1] == "in" else contextlib.nullcontext():
        try:
            numba.njit(f)(3, 4)
        except ValueError as e:
            print(e)
print(names)
"""


def test_allocator_and_slice_raiser_compiled_once_per_machine(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", _ALLOC_PROBE, scope], env=env, capture_output=True, text=True, check=True).stdout
            for scope in ("in", "in", "out")]
    for out in runs:
        assert out.splitlines()[0] == "cannot assign slice of shape (4,) from input of shape (3,)"
    assert "'_array_allocate'" in runs[0] and "'_raise_slice_shape'" in runs[0]
    assert "'_array_allocate'" not in runs[1] and "'_raise_slice_shape'" not in runs[1]
    # outside pmfast's compiles: numba's own implementations (its allocator closure, compiled again)
    assert "'_array_allocate'" not in runs[2] and "'_raise_slice_shape'" not in runs[2]
    assert "_ol_array_allocate.<locals>.impl" in runs[2] and "ol_raise_with_shape_context_cpu.<locals>.impl" in runs[2]


def test_entries_with_strided_constants_are_cacheable():
    """A folded constant that is a strided view (here the columns of a transposed slice) is copied
    C-contiguous into the entry's globals: numba embeds an 'A'-layout global by its address, which
    made the entry uncacheable and a worker's compile of it unusable here. Same values as stock."""
    import pymc as pm

    data = np.random.default_rng(0).normal(size=(2, 51))
    view = data.T[1:-1]
    assert not (view.flags.c_contiguous or view.flags.f_contiguous)
    env = entry.contiguous_constants({"c": view, "d": data, "k": 3})
    assert env["c"].flags.c_contiguous and not env["c"].flags.writeable and env["d"] is data and env["k"] == 3
    np.testing.assert_array_equal(env["c"], view)
    with pm.Model() as model:
        beta = pm.Normal("beta", size=2)
        pm.Normal("y", mu=(pt.as_tensor(data).T[1:-1] * beta).sum(1), sigma=1.0, observed=data[0, 1:-1])
    compiled = pmfast.compile(model)
    for kernel in compiled.kernels:
        cres = next(iter(kernel.dispatcher.overloads.values()))
        assert not cres.library._dynamic_globals
    stock = model.logp_dlogp_function(ravel_inputs=True, mode="NUMBA")
    stock.set_extra_values({})
    x = np.array([0.3, -0.7])
    code, logp, grad = callbacks.logp_at(compiled, x)
    ref_logp, ref_grad = stock._pytensor_function(x)
    assert code == 0
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)
