"""data_eval: hoisted data computed by numpy, as pytensor's reference does (pmfast/passes/data_eval.py)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, event, given, note, reject, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode

import pmfast
import pmfast.compiler.symbols
from pmfast.passes import data_eval, data_hoist

EVERY_PASS = [p.name for p in pmfast.passes.available()]
# the reference graphs are compiled by the stock linker, which aborts on LLVM's powi of a float32
# power of integer data unless the helpers are defined (tests/test_no_abort.py tests that pmfast does)
pmfast.compiler.symbols.define_helpers()
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "float32", "float64"]

_UNARY = {
    "log1p": pt.log1p, "exp": lambda v: pt.exp(v / 4), "sqrt": pt.sqrt, "sqr": pt.sqr, "abs": abs,
    "gammaln": lambda v: pt.gammaln(v + 1), "softplus": pt.softplus, "log1mexp": lambda v: pt.log1mexp(-(v + 1.0)),
    "sigmoid": pt.sigmoid, "cast32": lambda v: pt.cast(v, "float32"), "sum": lambda v: v.sum(axis=0, keepdims=True),
}
_BINARY = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - 0.5 * b, "div": lambda a, b: a / (b + 1),
    "pow": lambda a, b: a ** abs(b) if b.dtype.startswith("float") else a ** pt.cast(b > 0, "int8"),
    "max": pt.maximum, "switch": lambda a, b: pt.switch(a > 1, a, b),
    "add3": lambda a, b: a + b + 1.5 * a,
}


def _leaf_values(draw, n):
    """``n`` non-negative arrays of drawn dtypes, shapes (5,), (1,) or (0,) broadcasting against (5,).

    Integers are 0 or 1, so that no integer intermediate overflows: where one does, pytensor's
    backends disagree among themselves (C wraps each scalar op's result, numba computes in int64
    within a fused loop, the ``py`` linker in Python ints)."""
    length = draw(st.sampled_from([5, 0]))
    values = []
    for _ in range(n):
        dtype = draw(st.sampled_from(DTYPES))
        size = draw(st.sampled_from([length, 1]))
        top = 4 if dtype.startswith("float") else 1
        values.append(np.asarray(draw(st.lists(st.integers(0, top), min_size=size, max_size=size)), dtype=dtype))
    return values


def _expr(draw, leaves, depth):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(leaves))
    if draw(st.booleans()):
        return _UNARY[draw(st.sampled_from(sorted(_UNARY)))](_expr(draw, leaves, depth - 1))
    return _BINARY[draw(st.sampled_from(sorted(_BINARY)))](_expr(draw, leaves, depth - 1), _expr(draw, leaves, depth - 1))


@st.composite
def data_graphs(draw):
    values = _leaf_values(draw, draw(st.integers(1, 3)))
    leaves = [pytensor.shared(v, name=f"d{k}", shape=(1,) if v.size == 1 else (None,)) for k, v in enumerate(values)]
    try:
        return values, [_expr(draw, leaves, 3) for _ in range(draw(st.integers(1, 2)))]
    except (TypeError, ValueError, NotImplementedError):  # no such op on these dtypes (a bool minus)
        reject()


def _dtypes(fgraph) -> set:
    """Every dtype of ``fgraph``'s variables, those inside its Composites included."""
    from pytensor.scalar.basic import Composite
    from pytensor.tensor.elemwise import Elemwise

    out = {v.type.dtype for n in fgraph.apply_nodes for v in (*n.inputs, *n.outputs) if hasattr(v.type, "dtype")}
    for n in fgraph.apply_nodes:
        if isinstance(n.op, Elemwise) and isinstance(n.op.scalar_op, Composite):
            out |= _dtypes(n.op.scalar_op.fgraph)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data_graphs())
def test_fused_data_graphs_match_numba(case):
    """Random fused (Composite) graphs of data of every dtype, broadcast and empty: the evaluator's
    values and dtypes are those of the same rewritten graph compiled by numba (what the kernel
    computed before the data were hoisted), and the inputs are left as they were. (Where float32 is computed, to
    float32's precision: numpy's SIMD ``expf`` and libm's differ in the last place.)"""
    values, outs = case
    fn = pytensor.function([], outs, mode="NUMBA")
    note(pytensor.dprint(fn, file="str", print_type=True))
    fgraph = fn.maker.fgraph
    shared = {s.name: s for s in fn.get_shared()}
    args = [np.array(shared[v.name].get_value()) for v in fgraph.inputs]
    before = [a.copy() for a in args]
    evaluate = data_eval.evaluator(fgraph.inputs, fgraph.outputs, lambda: lambda *a: fn())
    event("numpy" if isinstance(evaluate, data_eval.WithFallback) else "declined: numba")
    got = evaluate(*args)
    want = fn()
    rtol = 1e-5 if "float32" in _dtypes(fgraph) else 1e-12
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=0, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
    for a, b in zip(args, before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_narrow_integer_arithmetic_is_numbas():
    """Inside numba's loop an int8 or bool sum is a 64-bit integer: (b + b) * 0.5 of a bool b is 1.0
    though pytensor declares b + b a bool, 200 + 100 of uint8 does not wrap. numpy computes what
    fits the declared dtype so, and leaves to numba what does not."""
    b = pytensor.shared(np.array([True, False]), name="b", shape=(2,))
    u = pytensor.shared(np.array([200, 3], dtype="uint8"), name="u", shape=(2,))
    for out, evaluated_by in [
        ((b + b) * 0.5 + b, "numba"),  # True + True = 2: not a bool
        ((u + u) * 0.5, "numba"),  # 400: not a uint8
        ((u - 2) * 1.5 + (u // 3) * 0.25, "numpy"),
        ((b + 0) * 0.5 + pt.sqr(pt.cast(b, "float64")), "numpy"),
    ]:
        fn = pytensor.function([], [out], mode="NUMBA")
        fgraph = fn.maker.fgraph
        evaluate = data_eval.evaluator(fgraph.inputs, fgraph.outputs, lambda fn=fn: lambda *a: fn())
        values = evaluate(*[s.get_value() for s in fgraph.inputs])
        np.testing.assert_array_equal(values[0], fn()[0])
        assert evaluate.evaluated_by == evaluated_by


def _derivation(fn):
    new, derivation = data_hoist.hoist(fn)
    assert derivation is not None
    return new, derivation


def test_gathered_data_is_evaluated_by_numpy_like_numba():
    """log(x[idx]) of two pm.Data-like shared arrays is an IndexedElemwise of pmfast's: numpy computes
    what the numba derivation computes, and the hoisted function what the original does."""
    x = pytensor.shared(np.linspace(0.5, 3.0, 7), name="x")
    idx = pytensor.shared(np.array([0, 6, 2, 2, -1, 3], dtype="int16"), name="idx")
    p = pt.dvector("p")
    logp = (pt.log(x[idx]) * p + pt.sqr(p) * pt.gammaln(x[idx])).sum()
    fn = pytensor.function([p], [logp, pytensor.grad(logp, p)], mode=pmfast.get_mode(EVERY_PASS))
    new, derivation = _derivation(fn)
    data = {"x": np.linspace(0.7, 2.0, 7), "idx": np.array([1, 1, 5, 0, -2, 4], dtype="int16")}
    got = derivation(data)
    evaluator = derivation.fn.fn
    assert evaluator.evaluated_by == "numpy"
    want = evaluator.fallback()(*[data[s] for s in derivation.sources])
    for g, w in zip(got.values(), [want[k] for k in derivation.fn.keep], strict=True):
        # scipy's gammaln and numba's math.lgamma differ by rounding: relatively large near its zeros
        np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-14 * np.abs(w).max())
    v = np.linspace(-1, 1, 6)
    for a, b in zip(new(v), fn(v), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "int64"])
def test_integer_powers_of_data(dtype):
    """x[:, None] ** powers with integer (and bool) powers as data (#28's polynomial design matrix)
    is hoisted, computed by numpy, and the function's values are the original's."""
    x = pytensor.shared(np.linspace(-1.5, 2.0, 6), name="x")
    powers = pytensor.shared(np.arange(3).astype(dtype), name="powers")
    b = pt.dvector("b")
    logp = -(((x[:, None] ** powers) * b).sum(-1) ** 2).sum()
    fn = pytensor.function([b], [logp, pytensor.grad(logp, b)], mode=pmfast.get_mode(EVERY_PASS))
    new, derivation = _derivation(fn)
    assert derivation.fn.fn.evaluated_by == "numpy"
    v = np.array([0.3, -0.2, 0.1])
    for a, c in zip(new(v), fn(v), strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-14)


def test_an_op_numpy_cannot_run_is_compiled():
    """A node that is not pytensor's (nor an Elemwise of scalar ops) makes the evaluator compile."""
    from pytensor.compile.builders import OpFromGraph

    x = pt.dvector("x")
    ofg = OpFromGraph([x], [pt.exp(x)])
    y = ofg(x)
    with pytest.raises(data_eval.Unsupported):
        data_eval.NumpyGraph([x], [y])
    compiled = []
    fn = data_eval.evaluator([x], [y], lambda: compiled.append(1) or pytensor.function([x], [y], mode=Mode("py", None)))
    assert compiled == [1] and np.allclose(fn(np.zeros(2))[0], 1.0)


def test_a_failing_evaluation_falls_back_for_good():
    calls = []

    def broken(*args):
        raise ValueError("integers to negative integer powers")

    fn = data_eval.WithFallback(broken, lambda: (calls.append(1), lambda *a: ["numba"])[1])
    assert fn(1) == ["numba"] and fn(2) == ["numba"]
    assert calls == [1] and fn.evaluated_by == "numba"
