"""pmfast.vmath kernels against high-precision references: dense sweeps, special values, hypothesis, vectorization."""

import re

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pmfast.vmath as vm
from pmfast.vmath.reference import REFERENCES, SPECIALS, sweep, ulp_error

MAX_ULP = 2.0
NAMES = sorted(vm.KERNELS)
#: kernels within MAX_ULP of a reference everywhere (gammaln, digamma, log1mexp: tests/test_vmath_gamma.py)
ULP_NAMES = sorted(REFERENCES)
#: the erf family's references are mpmath (slow): fewer sweep points
SWEEP_N = {"erf": 1500, "erfc": 1500, "erfcx": 1500, "ndtr": 1500, "log_ndtr": 1500}

_maps: dict = {}


def vmap(name):
    """``f(x) -> out``: the kernel over an array in an @njit loop (the loop LLVM vectorizes)."""
    if name not in _maps:
        f = vm.KERNELS[name]

        @numba.njit
        def loop(x, out):
            for i in range(x.size):
                out[i] = f(x[i])

        def run(x):
            x = np.ascontiguousarray(x, dtype=np.float64)
            out = np.empty_like(x)
            loop(x, out)
            return out

        run.loop = loop
        _maps[name] = run
    return _maps[name]


def assert_ulp(name, x, got=None):
    got = vmap(name)(x) if got is None else got
    err = ulp_error(got, REFERENCES[name](x))
    i = int(np.argmax(err))
    assert err[i] <= MAX_ULP, f"{name}({x[i]!r}) = {got[i]!r}: {err[i]:.2f} ulp"


@pytest.mark.parametrize("name", ULP_NAMES)
def test_dense_sweep_within_2_ulp(name):
    assert_ulp(name, sweep(name, SWEEP_N.get(name, 100_000)))


@pytest.mark.parametrize("name", ULP_NAMES)
def test_special_values(name):
    """inf, -inf, nan, +-0, subnormals, the largest doubles: as the reference (signed zeros included)."""
    got = vmap(name)(SPECIALS)
    ref = REFERENCES[name](SPECIALS).astype(np.float64)
    assert_ulp(name, SPECIALS, got)
    zero = ref == 0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(ref[zero])), (SPECIALS[zero], got[zero], ref[zero])


def test_overflow_and_underflow_edges():
    exp, expm1, erfc, ndtr = (vmap(n) for n in ("exp", "expm1", "erfc", "ndtr"))
    assert exp(np.array([709.78]))[0] < np.inf and exp(np.array([709.79]))[0] == np.inf
    assert exp(np.array([-745.13]))[0] == 5e-324 and exp(np.array([-745.14]))[0] == 0.0
    assert expm1(np.array([-800.0, 710.0])).tolist() == [-1.0, np.inf]
    assert 0 < erfc(np.array([27.2]))[0] < 1e-320 and erfc(np.array([27.3]))[0] == 0.0
    assert ndtr(np.array([-38.4]))[0] > 0 and ndtr(np.array([-38.5]))[0] == 0.0


@pytest.mark.parametrize("name", ULP_NAMES)
@settings(max_examples=150, deadline=None)
@given(x=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
def test_hypothesis_any_double(name, x):
    assert_ulp(name, np.array([x]))


@settings(max_examples=150, deadline=None)
@given(x=st.floats(-40.0, 40.0))
def test_hypothesis_against_numpy(x):
    """Within 2 ulp of numpy/scipy where they compute the same function, or closer to the truth than
    they are (scipy's erfc is off by up to ~4 ulp around x = 3.4)."""
    from scipy import special

    cases = {
        "exp": (x, np.exp), "expm1": (x, np.expm1), "log": (abs(x) + 1e-300, np.log), "log1p": (abs(x), np.log1p),
        "sigmoid": (x, special.expit), "erf": (x, special.erf), "erfc": (x, special.erfc), "ndtr": (x, special.ndtr),
    }
    for name, (arg, ref) in cases.items():
        got, r = vm.KERNELS[name](arg), float(ref(arg))
        if got == r or abs(got - r) <= 2 * np.spacing(abs(r)):
            continue
        truth = REFERENCES[name](np.array([arg]))
        assert ulp_error([got], truth)[0] <= min(MAX_ULP, ulp_error([r], truth)[0]), (name, arg, got, r)


@pytest.mark.parametrize("name", NAMES)
def test_scalar_call_equals_vectorized_loop(name):
    """The widened loop computes the same bits as a call per element (no contraction, no reordering)."""
    x = sweep(name if name in REFERENCES else "log", 300) * (1 if name in REFERENCES else -1 if name == "log1mexp" else 1)
    loop = vmap(name)(x)
    scalar = np.array([vm.KERNELS[name](v) for v in x])
    assert np.array_equal(loop, scalar, equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_loop_vectorizes(name):
    """The map loop's LLVM IR works on vectors of doubles and calls nothing but LLVM intrinsics."""
    run = vmap(name)
    run(np.linspace(-1, 1, 64))
    ir = run.loop.inspect_llvm(run.loop.signatures[0])
    body = ir.split("\ndefine ")[1].split("\n}\n")[0]
    assert re.search(r"<\d+ x double>", body), f"{name}: the loop did not vectorize"
    calls = re.findall(r"call [^@]*@([\w.$]+)", body)
    assert all(c.startswith("llvm.") and not re.match(r"llvm\.(exp|log|pow)", c) for c in calls), calls


def test_fastmath_caller_does_not_change_the_kernels():
    """numba makes callees inherit the caller's fastmath flags unless they set theirs: the kernels set
    fastmath=False, so a caller compiled with pytensor's flags (reassoc would fold the shifter) gets
    the same values."""
    flags = {"arcp", "contract", "afn", "reassoc", "nsz"}
    x = np.linspace(-30.0, 30.0, 1001)
    for name in ("exp", "log_ndtr", "sigmoid"):
        f = vm.KERNELS[name]

        @numba.njit(fastmath=flags)
        def loop(x, out):
            for i in range(x.size):
                out[i] = f(x[i])

        out = np.empty_like(x)
        loop(x, out)
        assert np.array_equal(out, vmap(name)(x), equal_nan=True), name


def test_version_hashes_every_source_file(tmp_path, monkeypatch):
    from pmfast.vmath import _cache

    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(_cache, "PACKAGE_DIR", tmp_path)
    v1 = _cache._source_version()
    (tmp_path / "b.py").write_text("C = (1.0,)\n")
    v2 = _cache._source_version()
    (tmp_path / "b.py").write_text("C = (1.5,)\n")
    assert len({v1, v2, _cache._source_version()}) == 3


def test_kernels_cache_with_the_version_stamp():
    from pmfast.vmath._cache import VERSION, VmathCacheLocator

    loc = vm.exp._cache._impl.locator
    assert isinstance(loc, VmathCacheLocator) and loc.get_source_stamp() == VERSION


def test_switch():
    assert vm.is_enabled()
    with vm.disabled():
        assert not vm.is_enabled()
        vm.enable()
        assert vm.is_enabled()
    assert vm.is_enabled()
