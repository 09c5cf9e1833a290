"""pmfast.vmath's sin and cos: against libm (math.sin/cos) and long double, and through the vector_math pass,
where arguments beyond the kernels' range get libm's values."""

import math

import numba
import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.tensor.elemwise import Elemwise

import pmfast.vmath as vm
from pmfast.mode import get_mode
from pmfast.vmath.elemwise import VmathElemwise, has_nan
from pmfast.vmath.ops import kernels, nan_shows, vmath_scalar_op
from pmfast.vmath.reference import REFERENCES, ulp_error
from pmfast.vmath.trig import TRIG_MAX

LIBM = {"sin": math.sin, "cos": math.cos}


@numba.njit
def _map_sin(x, out):
    for i in range(x.size):
        out[i] = vm.sin(x[i])


@numba.njit
def _map_cos(x, out):
    for i in range(x.size):
        out[i] = vm.cos(x[i])


def kernel(name, x):
    """The kernel over ``x`` in a loop LLVM widens."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    (_map_sin if name == "sin" else _map_cos)(x, out)
    return out


def ulps_from_libm(name, x):
    got = kernel(name, x)
    ref = np.array([LIBM[name](v) for v in x])
    return np.abs(got - ref) / np.spacing(np.abs(ref)), got, ref


@pytest.mark.parametrize("name", ["sin", "cos"])
@settings(max_examples=300, deadline=None)
@given(x=st.one_of(st.floats(-TRIG_MAX, TRIG_MAX), st.floats(-10.0, 10.0), st.floats(-1e-5, 1e-5)))
def test_hypothesis_against_libm(name, x):
    """Within 1 ulp of libm (glibc's sin/cos, correctly rounded almost everywhere) up to 2^30."""
    err, got, ref = ulps_from_libm(name, np.array([x]))
    assert err[0] <= 1.0, (name, x, got[0], ref[0])
    assert got[0] == ref[0] or abs(got[0] - ref[0]) <= 2.3e-16 * abs(ref[0]) or abs(ref[0]) < 1e-300


@pytest.mark.parametrize("name", ["sin", "cos"])
@settings(max_examples=100, deadline=None)
@given(x=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
def test_any_double_libm_or_nan(name, x):
    """Any double: libm's value within 1 ulp up to 2^30 (sin keeps -0.0), NaN beyond and for inf and NaN."""
    got = kernel(name, np.array([x]))[0]
    if not abs(x) <= TRIG_MAX:
        assert math.isnan(got)
        return
    ref = LIBM[name](x)
    assert abs(got - ref) <= np.spacing(abs(ref)), (x, got, ref)
    if ref == 0:
        assert math.copysign(1, got) == math.copysign(1, ref)


def test_specials():
    x = np.array([0.0, -0.0, 5e-324, -5e-324, 2.0**-27, -(2.0**-40), np.inf, -np.inf, np.nan, TRIG_MAX,
                  np.nextafter(TRIG_MAX, np.inf), -TRIG_MAX, 1e300, -1e300])
    s, c = kernel("sin", x), kernel("cos", x)
    assert s[:6].tolist() == x[:6].tolist() and np.array_equal(np.signbit(s[:6]), np.signbit(x[:6]))
    assert c[:6].tolist() == [1.0] * 6
    assert np.isnan(s[6:9]).all() and np.isnan(c[6:9]).all()
    assert s[9] == math.sin(TRIG_MAX) and c[11] == math.cos(-TRIG_MAX)
    assert np.isnan(s[10]) and np.isnan(s[12:]).all() and np.isnan(c[12:]).all()


#: in each binade below 2^30, a double very close to a multiple of pi/2 (continued fractions of
#: (pi/2) 2^(52-e)): 45.553093477052 is 2^-60.5 from 29 pi/2, 14461176.67027838 2^-59.0 from 9206271 pi/2
HARD = [45.553093477052, 91.106186954104, 182.212373908208, 364.424747816416, 728.849495632832, 1457.698991265664,
        2915.397982531328, 5830.795965062656, 11661.591930125313, 23323.183860250625, 46066.74387591393,
        92133.48775182787, 138200.2316277418, 321307.9594422229, 642615.9188844458, 1698673.2849629424,
        3397346.5699258847, 6794693.139851769, 14461176.67027838, 28922353.34055676, 57844706.68111352,
        115689413.36222704, 231378826.72445408, 462757653.44890815, 925515306.8978163]


def near_multiples_of_half_pi(n=20_000, seed=0):
    """The doubles nearest ``k pi/2`` for random ``k`` up to 2^30 / (pi/2), and :data:`HARD`: the hardest reductions."""
    rng = np.random.default_rng(seed)
    k = np.unique(np.concatenate([np.arange(1, 2000), rng.integers(1, int(TRIG_MAX / (np.pi / 2)), n)]))
    x = (k.astype(np.longdouble) * np.longdouble("1.570796326794896619231321691639751442"))
    x = np.concatenate([x.astype(np.float64), HARD])
    x = x[np.abs(x) <= TRIG_MAX]
    return np.concatenate([x, -x, np.nextafter(x, np.inf), np.nextafter(x, 0)])


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_near_multiples_of_half_pi(name):
    """Where ``r`` is tiny and every lost bit of the reduction shows: within 1 ulp of long double."""
    x = near_multiples_of_half_pi()
    err = ulp_error(kernel(name, x), REFERENCES[name](x))
    assert err.max() <= 1.0, (x[np.argmax(err)], err.max())


# --- the vector_math pass ---------------------------------------------------------------------------------------

a, b = pt.vectors("a", "b")
M = pt.matrix("m")


def compile_pair(ins, outs):
    return (pytensor.function(ins, outs, mode=get_mode("none")), pytensor.function(ins, outs, mode=get_mode(["vector_math"])))


def trig_nodes(fn):
    return [n for n in fn.maker.fgraph.apply_nodes
            if isinstance(n.op, VmathElemwise) and kernels(n.op.scalar_op) & {"sin", "cos"}]


@pytest.fixture(scope="module")
def hsgp_like():
    """sin(a b) sin(c d) and its gradient's cos, as in an HSGP basis."""
    out = pt.sin(a * 3.0) * pt.sin(b * 0.5)
    cost = (out * pt.arange(out.shape[0])).sum()
    return compile_pair([a, b], [out, *pytensor.grad(cost, [a, b])])


def test_hsgp_like_graph_converted_and_close(hsgp_like):
    stock, fast = hsgp_like
    assert trig_nodes(fast) and not trig_nodes(stock)
    rng = np.random.default_rng(1)
    A, B = rng.uniform(-50, 50, 1000), rng.uniform(-50, 50, 1000)
    for got, ref in zip(fast(A, B), stock(A, B), strict=True):
        assert np.allclose(got, ref, rtol=1e-15, atol=1e-15 * np.abs(ref).max())


@pytest.mark.parametrize("bad", [1e10, -3e300, np.inf, np.nan])
def test_beyond_the_range_libms_values(hsgp_like, bad):
    """One argument beyond 2^30 (or inf, NaN): the node is recomputed by stock's loop, bit for bit."""
    stock, fast = hsgp_like
    rng = np.random.default_rng(2)
    A, B = rng.uniform(-5, 5, 100), rng.uniform(-5, 5, 100)
    A[17] = bad
    A0 = A.copy()
    for got, ref in zip(fast(A, B), stock(A, B), strict=True):
        assert np.array_equal(got, ref, equal_nan=True)
    assert np.array_equal(A, A0, equal_nan=True)


def test_inplace_node_recomputed_from_intact_inputs():
    """The inplace rewrites make ``sin(M @ a)``'s node destroy its input; the trig lowering writes fresh
    outputs instead, so the libm fallback reads the intact input: stock's values bit for bit."""
    d = pt.dot(M, a)
    stock, fast = compile_pair([M, a], pt.sin(d) * 2.0 + pt.cos(d))
    (node,) = trig_nodes(fast)
    assert node.op.destroy_map
    Mv = np.random.default_rng(3).normal(size=(50, 3))
    av = np.array([1.0, 2.0, 3.0])
    assert np.allclose(fast(Mv, av), stock(Mv, av), rtol=1e-15, atol=1e-15)
    Mv[7, 0] = 1e12
    assert np.array_equal(fast(Mv, av), stock(Mv, av))


def test_nan_that_could_hide_keeps_libm():
    """A comparison or Maximum of sin's value could turn its NaN into a number: sin stays libm there."""
    x = ps.float64("x")
    hidden = ps.Composite([x], [ps.switch(ps.gt(ps.sin(x), 0.0), 1.0, x)])
    shown = ps.Composite([x], [ps.switch(ps.gt(x, 0.0), ps.sin(x) * 2.0, ps.cos(x))])
    assert not nan_shows(hidden.fgraph, hidden.fgraph.outputs[0].owner.inputs[0].owner.inputs[0])
    assert vmath_scalar_op(hidden, ["float64"], ["float64"], nan_marked=True) is None
    assert kernels(vmath_scalar_op(shown, ["float64"], ["float64"], nan_marked=True)) == {"sin", "cos"}
    assert vmath_scalar_op(shown, ["float64"], ["float64"]) is None  # fused loops: no libm fallback
    fn = pytensor.function([a], pt.maximum(pt.sin(a), 0.0) * 3.0, mode=get_mode(["vector_math"]))
    assert not trig_nodes(fn)


def test_has_nan():
    x = np.zeros((3, 37))
    assert not has_nan(x)
    x[2, 36] = np.nan
    assert has_nan(x)
    assert not has_nan(np.array([np.inf, -np.inf]))


def test_not_fused_into_loops():
    """The indexed/vector loops pass leaves trig VmathElemwise nodes alone (their fallback is in their lowering)."""
    from pmfast.passes.indexed_matching import _nan_marked

    fn = pytensor.function([a], pt.sin(a), mode=get_mode(["vector_math"]))
    (node,) = trig_nodes(fn)
    assert _nan_marked(node.op)
    assert not _nan_marked(Elemwise(ps.exp))
