"""The vector_math pass: pytensor graphs computed with pmfast.vmath, against stock numba and numpy."""

import re

import numba
import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.scalar.basic import Composite
from pytensor.tensor.elemwise import Elemwise

import pmfast
import pmfast.vmath as vm
from pmfast.mode import get_mode
from pmfast.passes.vector_math import converted_op
from pmfast.vmath.elemwise import VmathElemwise
from pmfast.vmath.ops import SUBSTITUTES, VmathGammaLn, VmathLog1mexp, VmathOp, VmathPsi, contains_vmath
from pmfast.vmath.reference import REFERENCES, ulp_error

VM = ["vector_math"]


def compile_pair(ins, outs):
    """``(stock, vmath)`` functions of the same graph."""
    return (pytensor.function(ins, outs, mode=get_mode("none")), pytensor.function(ins, outs, mode=get_mode(VM)))


def vmath_nodes(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Elemwise) and contains_vmath(n.op.scalar_op)]


def assert_ulp_close(got, ref, ulps=4):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    both = np.isfinite(ref)
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
    err = np.abs(got[both] - ref[both]) / np.spacing(np.abs(ref[both]))
    assert err.max(initial=0) <= ulps, err.max()


x, y = pt.matrices("x", "y")
v = pt.vector("v")
RNG = np.random.default_rng(0)
X, Y = RNG.normal(size=(200, 500)), RNG.normal(size=(200, 500))


@pytest.fixture(scope="module")
def exp_map():
    return compile_pair([x, y], pt.exp(2 * x * y + y))


def test_exp_map_uses_vmath_and_agrees(exp_map):
    stock, fast = exp_map
    assert pmfast.fired(fast) == {"vector_math": 1}
    (node,) = vmath_nodes(fast)
    assert type(node.op) is VmathElemwise and isinstance(node.op.scalar_op, Composite)
    assert not vmath_nodes(stock)
    assert_ulp_close(fast(X, Y), stock(X, Y), ulps=2)


def test_switch_off_is_stock_bit_for_bit():
    with vm.disabled():
        fn = pytensor.function([x, y], pt.exp(2 * x * y + y), mode=get_mode(VM))
    assert not vmath_nodes(fn) and pmfast.fired(fn) == {}
    stock = pytensor.function([x, y], pt.exp(2 * x * y + y), mode=get_mode("none"))
    assert np.array_equal(fn(X, Y), stock(X, Y))


def test_every_substituted_op():
    """Each scalar op the pass knows, in one graph: all converted, all within a few ulp of stock."""
    w = RNG.uniform(-5, 5, 4001)
    outs = [pt.exp(v), pt.expm1(v), pt.log(pt.abs(v)), pt.log1p(pt.abs(v)), pt.softplus(v), pt.sigmoid(v),
            -pt.softplus(-v), pt.erf(v), pt.erfc(v), pt.sin(v * 7), pt.cos(v * 7), pt.erfcx(v)]
    stock, fast = compile_pair([v], outs)
    kinds = {type(n.op) for node in vmath_nodes(fast) for n in _walk(node.op.scalar_op)}
    assert set(SUBSTITUTES.values()) - {VmathGammaLn, VmathPsi, VmathLog1mexp} <= kinds  # those: tests/test_vmath_gamma.py
    *got, got_erfcx = fast(w)
    *ref, _ = stock(w)  # scipy's erfcx loses ~10 ulp for x < 0 (rounded x^2 in exp): compare with mpmath
    for a, b in zip(got, ref, strict=True):
        assert_ulp_close(a, b, ulps=4)
    assert ulp_error(got_erfcx, REFERENCES["erfcx"](w)).max() <= 2


def _walk(op):
    if isinstance(op, Composite):
        for n in op.fgraph.apply_nodes:
            yield from _walk(n.op)
    else:
        yield type("n", (), {"op": op})


@pytest.mark.parametrize(
    "case",
    ["strided column", "reversed", "broadcast", "short last axis", "short last axis, two outputs", "scalar input",
     "two outputs", "int input", "special values"],
)
def test_layouts_broadcasting_and_specials(case):
    m = pt.matrix("m")
    s = pt.dscalar("s")
    i = pt.lvector("i")
    M = RNG.normal(size=(300, 3))
    ins, outs, vals = {
        "strided column": ([m], pt.softplus(m[:, 1]) * m[:, 0], [M]),
        "reversed": ([v], pt.sigmoid(v[::-1]), [RNG.normal(size=1001)]),
        "broadcast": ([m, v], pt.log1p(pt.exp(m[:, 0][:, None] + v[None, :])), [M, RNG.normal(size=7)]),
        "short last axis": ([m, v], pt.sigmoid(v[None, :] - m[:, 1][:, None]), [M, RNG.normal(size=4)]),
        "short last axis, two outputs": ([m], [pt.exp(m).sum(0), pt.exp(m) * m], [M]),
        "scalar input": ([s, v], pt.erfc(s * v), [np.float64(0.7), RNG.normal(size=50)]),
        "two outputs": ([v], [pt.exp(v).sum(), pt.exp(v) * 2], [RNG.normal(size=99)]),
        "int input": ([i], pt.exp(i), [np.arange(-5, 5)]),
        "special values": ([v], [pt.exp(v), pt.log(v), pt.sigmoid(v), pt.erfc(v)],
                           [np.tile([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, 1e308, -800.0, 800.0], 4)]),
    }[case]
    stock, fast = compile_pair(ins, outs)
    if case != "int input":
        assert vmath_nodes(fast)
    for got, ref in zip(_list(fast(*vals)), _list(stock(*vals)), strict=True):
        assert_ulp_close(got, ref, ulps=4)


def _list(r):
    return r if isinstance(r, list) else [r]


@pytest.fixture(scope="module")
def erf_map():
    return compile_pair([v], pt.erf(v) * v)


@numba.njit
def _kernel_erf_times(xs):
    out = np.empty_like(xs)
    for k in range(xs.size):
        out[k] = vm.erf(xs[k]) * xs[k]
    return out


def test_short_erf_loops_run_stocks_loop(erf_map):
    """An erf loop of unknown length runs stock's libm loop below its crossover (stock's values bit
    for bit) and the vmath loop from it on (the kernel's values bit for bit)."""
    from pmfast.vmath.elemwise import libm_below

    stock, fast = erf_map
    (node,) = vmath_nodes(fast)
    below = libm_below(node.op.scalar_op)
    assert 8 < below < 1000
    for n in (0, 1, 7, below - 1, below, below + 9, 1001):
        w = RNG.uniform(-3, 3, n)
        if n < below:
            assert np.array_equal(fast(w), stock(w))
        else:
            assert np.array_equal(fast(w), _kernel_erf_times(w))


def test_short_static_erf_and_scalar_bodies_keep_libm():
    """Declined: an erf loop of static length below the crossover, and bodies that call a libm
    function vmath lacks (their loop cannot vectorize). Converted: exp at that static length."""
    from pmfast.vmath.elemwise import libm_below, vectorizable

    short = pt.tensor("w20", dtype="float64", shape=(20,))
    assert not vmath_nodes(compile_pair([short], pt.erf(short) * 2)[1])
    assert vmath_nodes(compile_pair([short], pt.exp(short) * 2)[1])
    for scalar_call in (pt.arctan(v), pt.tanh(v), v ** 2.5):
        stock, fast = compile_pair([v], pt.exp(v) + scalar_call)
        assert not vmath_nodes(fast) and pmfast.fired(fast) == {}
    from pmfast.vmath.ops import vmath_scalar_op

    a = ps.float64("a")
    body = Composite([a], [ps.exp(a) * 2 + ps.sqrt(ps.abs(a))])
    assert not vectorizable(body)  # libm's exp
    assert vectorizable(vmath_scalar_op(body, ["float64"], ["float64"]))
    body = vmath_scalar_op(Composite([a], [ps.exp(a) + ps.arctan(a)]), ["float64"], ["float64"])
    assert not vectorizable(body) and libm_below(body) == np.inf


def test_libm_scalar_op_inverts_the_conversion():
    from pmfast.vmath.ops import libm_scalar_op, vmath_scalar_op

    import pytensor.scalar.math as psm

    a, b = ps.float64("a"), ps.float64("b")
    inner = Composite([a], [psm.erfc(a) * 2])
    body = Composite([a, b], [ps.log1p(ps.exp(a)) + inner(b), psm.sigmoid(b)])
    converted = vmath_scalar_op(body, ["float64"] * 2, ["float64"] * 2)
    assert contains_vmath(converted) and not contains_vmath(libm_scalar_op(converted))
    assert libm_scalar_op(converted) == body and libm_scalar_op(body) is body


def test_runtime_broadcasting_refused_like_stock():
    """A (n, 1) value where the graph says (n, m): both lowerings raise ValueError (short and long last axes)."""
    m1, m2 = pt.matrices("m1", "m2")
    stock, fast = compile_pair([m1, m2], pt.exp(m1 + m2))
    for shape in ((50, 3), (50, 40)):
        a, b = RNG.normal(size=shape), RNG.normal(size=(shape[0], 1))
        for fn in (stock, fast):
            with pytest.raises(ValueError):
                fn(a, b)
        assert_ulp_close(fast(a, a), stock(a, a), ulps=2)


def test_float32_keeps_libm():
    f = pt.fvector("f")
    fn = pytensor.function([f], pt.exp(f), mode=get_mode(VM))
    assert not vmath_nodes(fn) and pmfast.fired(fn) == {}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-700, 700), min_size=1, max_size=64))
def test_hypothesis_logistic_terms_against_numpy(vals):
    """y*eta - softplus(eta) and its gradient term against numpy on random vectors (incl. length 1)."""
    fn = _logistic_fn()
    eta = np.array(vals)
    yv = (np.arange(eta.size) % 2).astype("float64")
    logp, g = fn(eta, yv)
    ref_terms = yv * eta - np.logaddexp(0.0, eta)
    np.testing.assert_allclose(logp, ref_terms.sum(), rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(g, yv - 1 / (1 + np.exp(-eta)), rtol=1e-14, atol=5e-16)  # y - sigmoid cancels


_cache: dict = {}


def _logistic_fn():
    if "f" not in _cache:
        eta, yy = pt.vectors("eta", "yy")
        logp = (yy * eta - pt.softplus(eta)).sum()
        _cache["f"] = pytensor.function([eta, yy], [logp, pytensor.grad(logp, eta)], mode=get_mode(VM))
        assert vmath_nodes(_cache["f"])
    return _cache["f"]


def test_the_elemwise_loop_vectorizes():
    """The compiled VmathElemwise loop holds vector double arithmetic and calls no scalar function."""
    from pytensor.link.numba.dispatch.basic import numba_funcify

    node = VmathElemwise(SUBSTITUTES[ps.Exp](ps.upgrade_to_float_no_complex, name="vexp")).make_node(v)
    fn = numba_funcify(node.op, node=node)

    @numba.njit
    def call(a):
        return fn(a)

    call(np.ones(8))
    ir = call.inspect_llvm(call.signatures[0])
    assert re.search(r"fmul <\d+ x double>", ir)
    assert not re.findall(r"call [^@\n]*@(?!llvm\.|NRT|numba)\w*(exp|kernel)\w*", ir)


def test_cache_keys_follow_the_switch_and_the_vmath_version(monkeypatch):
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    import pmfast.vmath.elemwise as ve
    import pmfast.vmath.ops as vo

    stock_node = pt.exp(v).owner
    vm_node = VmathElemwise(SUBSTITUTES[ps.Exp](ps.upgrade_to_float_no_complex, name="vexp")).make_node(v)
    k_stock = numba_funcify_and_cache_key(stock_node.op, node=stock_node)[1]
    k_vm = numba_funcify_and_cache_key(vm_node.op, node=vm_node)[1]
    assert k_stock and k_vm and k_stock != k_vm
    monkeypatch.setattr(ve, "VERSION", "other")
    monkeypatch.setattr(vo, "VERSION", "other")
    assert numba_funcify_and_cache_key(vm_node.op, node=vm_node)[1] not in (k_vm, None)


def test_loop_ops_opt_in():
    """Ops with a scalar body are converted only if they declare that their loop vectorizes it."""
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class Loop(Op):
        __props__ = ("scalar_op",)

        def __init__(self, scalar_op):
            self.scalar_op = scalar_op

        def make_node(self, a):
            return Apply(self, [a], [a.type()])

        def perform(self, node, inputs, out):
            out[0][0] = inputs[0]

    class VectorLoop(Loop):
        vectorizes_scalar_body = True

    body = Composite([a := ps.float64()], [ps.exp(a) + 1])
    assert converted_op(Loop(body).make_node(v)) is None
    new = converted_op(VectorLoop(body).make_node(v))
    assert type(new) is VectorLoop and contains_vmath(new.scalar_op)


def test_inplace_keeps_the_vmath_lowering():
    fn = pytensor.function([v], pt.exp(v * 2) + pt.log1p(pt.exp(v)), mode=get_mode(VM))
    nodes = vmath_nodes(fn)
    assert nodes and all(isinstance(n.op, VmathElemwise) for n in nodes)
    w = RNG.normal(size=33)
    assert_ulp_close(fn(w), np.exp(w * 2) + np.log1p(np.exp(w)), ulps=4)


def test_plugin_stock_numba_mode():
    with pmfast.enabled(VM):
        fn = pytensor.function([v], pt.sigmoid(v), mode="NUMBA")
    assert vmath_nodes(fn)
    assert not vmath_nodes(pytensor.function([v], pt.sigmoid(v), mode="NUMBA"))


# entries after vector_math that read its vmath ops to decide, and build no new scalar bodies:
# indexed_elemwise's vector loops take the Elemwise nodes whose converted body vectorizes
READS_VMATH = {"pmfast.indexed_elemwise.squeeze_columns", "pmfast.indexed_elemwise.vector_loops"}


def test_registered_after_every_body_building_pass():
    positions = {p.name: p for p in pmfast.passes.available()}
    vm_pos = positions["vector_math"].position
    entries = [(name, pos) for n, p in positions.items() if n != "vector_math" for name, pos in p.entries]
    assert max(pos for name, pos in entries if pos < 49.5 and name not in READS_VMATH) < vm_pos
    assert all(vm_pos < pos < 49.5 for name, pos in entries if name in READS_VMATH)
    assert vm_pos < 49.5


def test_pass_declines_on_error(monkeypatch):
    """A conversion that raises is declined: the graph compiles with libm."""
    import pmfast.vmath.ops as vo

    monkeypatch.setattr(vo, "vmath_scalar_op", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    fn = pytensor.function([v], pt.exp(v), mode=get_mode(VM))
    assert not vmath_nodes(fn)
    assert np.array_equal(fn(np.ones(3)), np.exp(np.ones(3)))


def test_vmath_op_types():
    for stock, sub in SUBSTITUTES.items():
        assert issubclass(sub, stock) and issubclass(sub, VmathOp)
        assert sub.kernel in vm.KERNELS


def test_plain_loop_is_inlinable_and_equals_the_overload(monkeypatch):
    """pmfast's linker gets the loop as a plain function of the inputs (entries inline it: no function of
    its own, no ``*args`` forwarder) calling no numpy broadcasting or layout overload; the same values as
    the overload it replaces (``PMFAST_VMATH_PLAIN=0``) on the flat path (a short last axis, a broadcast
    input, a Fortran-ordered input)."""
    import inspect

    from pmfast.compiler import ops

    m = pt.matrix("m", shape=(None, 5))
    c = pt.matrix("c", shape=(1, 5))
    col = pt.matrix("col", shape=(None, 1))
    out = pt.log1p(pt.exp(m * c - col))

    def build():
        return pytensor.function([m, c, col], out, mode=get_mode(VM))

    fn = build()
    (node,) = vmath_nodes(fn)
    found = ops.funcify_and_cache_key(node.op, node)
    assert found is not None and found[1] is not None
    code = found[0].py_func.__code__
    assert code.co_argcount == len(node.inputs) and not code.co_flags & inspect.CO_VARARGS
    assert not {"broadcast_to", "ascontiguousarray"} & set(code.co_names)
    rng = np.random.default_rng(5)
    args = (rng.normal(size=(40, 5)), rng.normal(size=(1, 5)), rng.normal(size=(40, 1)))
    monkeypatch.setenv("PMFAST_VMATH_PLAIN", "0")
    assert ops.funcify_and_cache_key(node.op, node) is None
    old = build()
    np.testing.assert_array_equal(fn(*args), old(*args))
    np.testing.assert_array_equal(fn(np.asfortranarray(args[0]), *args[1:]), old(*args))
