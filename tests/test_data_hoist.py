"""data_hoist: data-only subgraphs as inputs computed once per dataset (pmfast/passes/data_hoist.py)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pmfast
from pmfast.compiler.callbacks import logp_at
from pmfast.passes import data_hoist, scalar_split

WITHOUT = [p.name for p in pmfast.passes.available() if p.name != data_hoist.PASS_NAME]
#: every pass by name: a mode naming data_hoist marks (get_mode("all") leaves it to pmfast's compile paths)
EVERY_PASS = [p.name for p in pmfast.passes.available()]


def hsgp_model(n=30, seed=0):
    """A 1-d HSGP regression: its basis is sines of the pm.Data coordinates."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-3, 3, n))
    y = np.sin(x) + rng.normal(0, 0.3, n)
    with pm.Model() as model:
        X = pm.Data("X", x[:, None])
        ls = pm.Gamma("ls", mu=1.5, sigma=0.5)
        eta = pm.HalfNormal("eta", 1.0)
        gp = pm.gp.HSGP(m=[10], c=1.5, cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ls=ls))
        f = gp.prior("f", X=X)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", f, sigma, observed=y)
    return model


def log_pow_model(n=40, seed=1):
    """A regression on log(x) and x**1.5 of pm.Data."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 3.0, n)
    y = 1.0 + 0.5 * np.log(x) - 0.2 * x**1.5 + rng.normal(0, 0.2, n)
    with pm.Model() as model:
        xd = pm.Data("x", x)
        a, b, c = (pm.Normal(k, 0, 1) for k in "abc")
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", a + b * pt.log(xd) + c * xd**1.5, sigma, observed=y)
    return model


def _points(x0, n=3, seed=0):
    rng = np.random.default_rng(seed)
    return [x0 + rng.normal(0, 0.3, x0.shape) for _ in range(n)]


def _rel(a, b):
    a, b = np.asarray(a, dtype="float64"), np.asarray(b, dtype="float64")
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


def _scalar_ops(fgraph):
    from pytensor.tensor.elemwise import Elemwise

    return {type(s).__name__ for n in fgraph.apply_nodes if isinstance(n.op, Elemwise) for s in data_hoist._scalar_ops(n.op.scalar_op)}


@pytest.mark.parametrize("build", [hsgp_model, log_pow_model], ids=["hsgp", "log_pow"])
def test_logp_and_gradient_match_stock(build):
    model = build()
    stock, x0 = pmfast.logp_dlogp_function(model, "none")
    hoisted, _ = pmfast.logp_dlogp_function(model, "all")
    assert pmfast.fired(hoisted).get(data_hoist.PASS_NAME, 0) >= 1
    names = [v.name for v in hoisted.get_shared()]
    assert any(n.startswith(data_hoist.HOISTED_PREFIX) for n in names)
    for x in _points(x0):
        (lp, g), (lp_ref, g_ref) = hoisted(x), stock(x)
        assert _rel(lp, lp_ref) < 1e-12
        assert _rel(g, g_ref) < 1e-12


def _kernel_fgraphs(build):
    model = build()
    before, _ = pmfast.logp_dlogp_function(model, WITHOUT)
    after, _ = pmfast.logp_dlogp_function(model, "all")
    return before.maker.fgraph, after.maker.fgraph


def _no_data_work_left(fgraph):
    leaves = [v for v in fgraph.inputs[1:]]
    return [v for v in data_hoist.boundaries(fgraph, leaves) if data_hoist.worth(v, leaves)] == []


def test_hoisted_basis_leaves_the_kernel():
    """No node of the kernel computes the HSGP basis's sines any more."""
    before, after = _kernel_fgraphs(hsgp_model)
    assert {"VmathSin", "Sin"} & _scalar_ops(before)
    assert not {"VmathSin", "Sin"} & _scalar_ops(after)
    assert _no_data_work_left(after)


def test_hoisted_log_and_pow_leave_the_kernel():
    """log(x) and x**1.5, fused into the likelihood's loop before, are inputs now: x is read by nothing."""
    before, after = _kernel_fgraphs(log_pow_model)
    x_before = next(v for v in before.inputs if v.name == "x")
    x_after = next(v for v in after.inputs if v.name == "x")
    assert before.clients[x_before]
    assert not after.clients[x_after]
    assert _no_data_work_left(after)


@pytest.fixture(scope="module")
def hsgp_compiled():
    model = hsgp_model()
    return model, pmfast.compile(model)


def test_with_data_recomputes_derived_values(hsgp_compiled):
    """A data swap derives the hoisted arrays again: the same logp and gradient as a fresh compile."""
    import pymc as pm

    from pmfast.many.fit import swap_data

    model, compiled = hsgp_compiled
    assert compiled.derived_data and compiled.derivations
    assert not set(compiled.derived_data) & set(compiled.shared_data)
    new_x = np.sort(np.random.default_rng(5).uniform(-2.5, 2.5, 30))[:, None]
    swapped = compiled.with_data(X=new_x)
    via_fit_many = swap_data(compiled, {"X": new_x})
    with model:
        pm.set_data({"X": new_x})
    fresh = pmfast.compile(model)
    with model:
        pm.set_data({"X": compiled.shared_data["X"]})
    x0 = compiled.initial_point_func(0)
    for x in _points(x0):
        code, lp, g = logp_at(swapped, x)
        code_f, lp_f, g_f = logp_at(fresh, x)
        code_o, lp_o, _ = logp_at(compiled, x)
        assert code == code_f == code_o == 0
        assert _rel(lp, lp_f) < 1e-12 and _rel(g, g_f) < 1e-12
        assert _rel(logp_at(via_fit_many, x)[1], lp_f) < 1e-12
        assert _rel(lp_o, lp_f) > 1e-6  # the old data's logp differs: a stale basis would be caught
    for name, value in swapped.derived_data.items():
        assert not np.array_equal(value, compiled.derived_data[name])
    # the original is unchanged, and a swap of no derivation's source keeps the derived arrays
    assert compiled.with_data().derived_data is not None
    np.testing.assert_array_equal(compiled.shared_data["X"], hsgp_compiled[0]["X"].get_value())


def _outer_model(transform):
    x = pytensor.shared(np.linspace(0.1, 1.0, 30), name="x")
    z = pytensor.shared(np.linspace(-1.0, 1.0, 40), name="z")
    theta = pt.dvector("theta")
    outer = transform(x[:, None] * z[None, :])
    logp = -((pt.dot(outer, theta) - 1.0) ** 2).sum()
    return pytensor.function([theta], [logp, pytensor.grad(logp, theta)], mode=pmfast.get_mode(WITHOUT))


def test_large_cheap_array_from_small_data_is_not_hoisted():
    """x[:, None] * z[None, :] (1,200 values from 70) costs no more to make than to read: it stays."""
    fn = _outer_model(lambda o: o)
    assert data_hoist.hoist(fn) == (fn, None)
    hoisted, derivation = data_hoist.hoist(_outer_model(pt.sin))
    assert derivation is not None and len(derivation.names) == 1
    theta = np.linspace(-0.5, 0.5, 40)
    ref = _outer_model(pt.sin)(theta)
    for a, b in zip(hoisted(theta), ref, strict=True):
        assert _rel(a, b) < 1e-12


def test_destroyed_and_stateful_data_are_not_hoisted():
    """A data variable an in-place node overwrites, and a random draw, stay in the graph."""
    from pytensor.compile.mode import Mode

    x = pytensor.shared(np.linspace(0.5, 2.0, 5), name="x")
    p = pt.dvector("p")
    lx = pt.log(x)
    rng = pytensor.shared(np.random.default_rng(0), name="rng")
    noise = pt.random.normal(0, 1, size=5, rng=rng)
    out = (lx * p).sum() + pt.exp(lx).sum() + noise.sum()
    fn = pytensor.function([p], out, mode=Mode("py", "fast_run"))
    new, derivation = data_hoist.hoist(fn)
    if derivation is not None:
        assert not any("rng" in s for s in derivation.sources)
        for node in new.maker.fgraph.apply_nodes:
            for positions in getattr(node.op, "destroy_map", {}).values():
                assert not any(node.inputs[i] in new.maker.fgraph.inputs for i in positions)
    v = np.linspace(0, 1, 5)
    a, b = new(v), fn(v)
    assert np.isfinite(a) and np.isfinite(b)


_UNARY = {"log": pt.log, "exp": lambda v: pt.exp(v / 4), "sqr": pt.sqr, "sin": pt.sin, "neg": lambda v: -v, "sqrt": pt.sqrt}


def _expr(draw, leaves, depth):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(["unary", "add", "mul", "sum"]))
    if kind == "unary":
        return _UNARY[draw(st.sampled_from(sorted(_UNARY)))](_expr(draw, leaves, depth - 1))
    if kind == "sum":
        return _expr(draw, leaves, depth - 1).sum() + pt.zeros(5)
    left, right = _expr(draw, leaves, depth - 1), _expr(draw, leaves, depth - 1)
    return left + right if kind == "add" else left * right


@st.composite
def data_expressions(draw):
    x = pytensor.shared(np.linspace(0.5, 2.0, 5), name="x")
    w = pytensor.shared(np.array([1.5, 0.7, 2.2, 1.1, 0.9]), name="w")
    exprs = [_expr(draw, [x, w], 3) for _ in range(draw(st.integers(1, 3)))]
    return x, w, exprs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data_expressions())
def test_generated_data_expressions(case):
    """Random expressions of two shared vectors, combined with a parameter: hoisting keeps the values
    and the gradient, and derives them again from new data."""
    from pytensor.compile.mode import Mode

    x, w, exprs = case
    p = pt.dvector("p")
    logp = sum((pt.tanh(e) * p + pt.sqr(p) * e / 10).sum() for e in exprs)
    fn = pytensor.function([p], [logp, pytensor.grad(logp, p)], mode=Mode("py", "fast_run"))
    new, derivation = data_hoist.hoist(fn)
    v = np.linspace(-1, 1, 5)
    for a, b in zip(new(v), fn(v), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)
    if derivation is not None:
        data = {"x": np.linspace(0.6, 1.9, 5), "w": np.array([1.0, 2.0, 0.8, 1.3, 0.5])}
        derived = derivation(data)
        x.set_value(data["x"])
        w.set_value(data["w"])
        for sv in new.get_shared():
            if sv.name in derived:
                sv.set_value(derived[sv.name])
        for a, b in zip(new(v), fn(v), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)


def test_pass_is_selectable():
    assert data_hoist.PASS_NAME in [p.name for p in pmfast.passes.available()]
    assert pmfast.passes.select([data_hoist.PASS_NAME])[0].position == 47.4
    model = log_pow_model()
    fn, _ = pmfast.logp_dlogp_function(model, WITHOUT)
    assert not any(v.name.startswith(data_hoist.HOISTED_PREFIX) for v in fn.get_shared())


def test_scalar_data_value_is_hoisted_as_0d():
    """sum(log(x)) is a 0-d hoisted input (stored as a 0-d array, not a 1-element vector)."""
    x = pytensor.shared(np.linspace(0.5, 2.0, 7), name="x")
    p = pt.dvector("p")
    logp = (pt.sqr(p) * pt.log(x).sum()).sum()
    fn = pytensor.function([p], [logp, pytensor.grad(logp, p)], mode=pmfast.get_mode(EVERY_PASS))
    new, derivation = data_hoist.hoist(fn)
    assert derivation is not None
    (value,) = derivation({"x": x.get_value()}).values()
    assert value.ndim == 0 and value == pytest.approx(np.log(x.get_value()).sum(), rel=1e-14)
    v = np.linspace(-1, 1, 3)
    for a, b in zip(new(v), fn(v), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_plugin_neither_marks_nor_hoists():
    """Under pmfast.enable() the stock NUMBA mode cannot take new inputs: no HoistMark either; nor
    under get_mode("all") (a bare pytensor.function never hoists); a mode naming the pass marks."""
    x = pytensor.shared(np.linspace(0.5, 2.0, 7), name="x")
    p = pt.dvector("p")
    out = (p * pt.log(x)).sum()
    with pmfast.enabled():
        assert data_hoist.PASS_NAME not in pmfast.is_enabled()
        fn = pytensor.function([p], out, mode="NUMBA")
    assert not any(isinstance(n.op, data_hoist.HoistMark) for n in fn.maker.fgraph.apply_nodes)
    bare = pytensor.function([p], out, mode=pmfast.get_mode("all"))
    assert not any(isinstance(n.op, data_hoist.HoistMark) for n in bare.maker.fgraph.apply_nodes)
    marked = pytensor.function([p], out, mode=pmfast.get_mode(EVERY_PASS))
    assert any(isinstance(n.op, data_hoist.HoistMark) for n in marked.maker.fgraph.apply_nodes)


def test_plugin_routes_nutpie_with_data_hoist_after_a_nested_scope():
    """pmfast.compile, which nutpie's compile is routed to, hoists; a nested scope restores that."""
    import nutpie

    with pmfast.enabled():
        assert data_hoist.PASS_NAME in nutpie.compile_pymc_model.passes
        with pmfast.enabled(["scalarize"]):
            assert data_hoist.PASS_NAME not in nutpie.compile_pymc_model.passes
        assert data_hoist.PASS_NAME in nutpie.compile_pymc_model.passes
    assert not hasattr(nutpie.compile_pymc_model, "passes")


def test_a_failing_derivation_declines(monkeypatch):
    """Anything failing inside the hoisting leaves the compiled function as it was."""
    fn = _outer_model(pt.sin)

    def broken(*args):
        raise RuntimeError("no derivation today")

    monkeypatch.setattr(data_hoist.data_eval.NumpyGraph, "__call__", broken)
    monkeypatch.setattr(data_hoist, "_derivation_mode", broken)
    assert data_hoist.hoist(fn) == (fn, None)


def hsgp_periodic_model(n=60, seed=2):
    """A periodic HSGP (pm.gp.HSGPPeriodic) on pm.Data times: fusion puts the basis's row count
    (``X.shape[0]``) into one scalar Composite with arithmetic on the point."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 10, n))
    y = np.sin(2 * np.pi * t / 3.0) + rng.normal(0, 0.3, n)
    with pm.Model() as model:
        X = pm.Data("t", t)
        amp = pm.HalfNormal("amp", 1.0)
        ls = pm.LogNormal("ls", 0.0, 1.0)
        gp = pm.gp.HSGPPeriodic(m=8, scale=amp, cov_func=pm.gp.cov.Periodic(1, period=3.0, ls=ls))
        f = gp.prior("f", X=X[:, None])
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", f, sigma, observed=y)
    return model


def test_periodic_basis_behind_a_fused_row_count_is_hoisted():
    """The cos/sin basis whose Alloc reads a row count fused with the point's arithmetic leaves the
    kernel (split_scalar_composites), and logp and gradient match stock's."""
    model = hsgp_periodic_model()
    stock, x0 = pmfast.logp_dlogp_function(model, "none")
    fast, _ = pmfast.logp_dlogp_function(model, "all")
    assert not {"VmathSin", "Sin", "VmathCos", "Cos"} & _scalar_ops(fast.maker.fgraph)
    for x in _points(x0):
        (lp, g), (lp_ref, g_ref) = fast(x), stock(x)
        assert _rel(lp, lp_ref) < 1e-12
        assert _rel(g, g_ref) < 1e-12


def test_split_scalar_composites_gives_data_outputs_a_node():
    """A 0-d composite of a shared shape and a point coordinate: its shape-only output gets its own
    node (all of whose inputs are data), the other output stays; the function's values are unchanged."""
    from pytensor.graph.fg import FunctionGraph
    from pytensor.scalar.basic import Composite
    from pytensor.tensor.elemwise import Elemwise

    x = pytensor.shared(np.linspace(0.5, 2.0, 7), name="x")
    p = pt.dscalar("p")
    from pytensor import scalar as ps

    sn, sa = ps.int64(), ps.float64()

    comp = Composite([sn, sa], [ps.maximum(sn, 0) * 2, ps.exp(sa) + ps.cast(sn, "float64")])
    rows, e = Elemwise(comp)(x.shape[0], p)
    out = pt.alloc(x[0], rows).sum() + e
    fg = FunctionGraph([p, x], [out], clone=False)
    pairs = scalar_split.split_scalar_composites(fg, lambda: data_hoist._data_region(fg, [x], set()))
    assert len(pairs) == 1
    (old, new), = pairs
    from pytensor.graph.traversal import ancestors

    assert x in ancestors([new]) and p not in ancestors([new]) and p in ancestors([old])
    assert out in fg.outputs and fg.clients[new]
    fn = pytensor.function([p], fg.outputs[0], mode="FAST_COMPILE")
    assert fn(0.3) == pytest.approx(14 * 0.5 + np.exp(0.3) + 7, rel=1e-14)
