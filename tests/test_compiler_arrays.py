"""pmfast.compiler.arrays: numpy's array constructors in generated sources without numba's generic code."""

import numba
import numpy as np
import pytest

from pmfast.compiler import arrays

SRC = '''
def f(x, y, n, b, i):
    a = np.asarray(x[0])
    c = np.asarray(x)
    d = np.array(x.sum())
    e = np.array(b, dtype=np.bool_)
    g = np.empty((n,), dtype=np.float64)
    h = np.empty(n)
    q = np.asarray(i)
    r = np.array(i, dtype=np.float32)
    s = np.empty((n, 2), dtype=np.int32)
    u = np.ascontiguousarray(x)
    v = np.ascontiguousarray(y)
    w = np.ascontiguousarray(x[::2])
    k = np.array([x[1].item(), i], dtype=np.float64)
    m = np.array([b, b], dtype=np.bool_)
    o = np.full((n, 2), i, dtype=np.float64)
    p = np.full((n,), x[1], dtype=np.int32)
    cx = np.copy(x)
    cy = np.copy(y)
    g[:] = 1.0
    h[:] = 2.0
    s[:] = 3
    return a, c, d, e, g, h, q, r, s, u, v, w, k, m, o, p, cx, cy
'''


def _build(src, rewrite):
    env = {"np": np}
    if rewrite:
        src = arrays.rewrite_source(src, env)
    exec(src, env)
    return numba.njit(env["f"]), src


def test_same_values_types_and_aliasing():
    fast, src = _build(SRC, True)
    stock, _ = _build(SRC, False)
    assert src.count("_pm_") == 18 and "np.copy" not in src and "np.asarray" not in src and "np.empty" not in src and "np.full" not in src
    x, y = np.arange(6.0), np.arange(12.0).reshape(3, 4)[:, ::2]
    got, want = fast(x, y, 3, True, 7), stock(x, y, 3, True, 7)
    for g, w in zip(got, want, strict=True):
        assert numba.typeof(g) == numba.typeof(w)
        assert np.array_equal(g, w)
    assert got[1] is x and got[9] is x  # asarray / ascontiguousarray of a C array: the array itself
    assert got[10].flags.c_contiguous and not np.shares_memory(got[10], y)  # a copy of a strided array
    assert not np.shares_memory(got[16], x) and got[17].flags.c_contiguous and not np.shares_memory(got[17], y)
    with pytest.raises(ValueError, match="negative dimensions not allowed"):
        fast(x, y, -1, True, 7)


_GENERIC_PROBE = """
import numpy as np, numba, sys
sys.path.insert(0, {tests!r})
from conftest import compiled_names
from test_compiler_arrays import SRC, _build
fn, _ = _build(SRC, {rewrite})
names = compiled_names(fn, np.arange(4.0), np.ones((2, 4))[:, ::2], 2, False, 1)
print([n for n in names if "<locals>" in n])
"""


@pytest.mark.parametrize("rewrite", [True, False])
def test_no_generic_code_compiled(rewrite):
    """The rewritten function compiles no numba overload implementation; as written, it compiles
    several (each in a fresh process: numba keeps the implementations it compiled per process)."""
    import ast
    import os
    import subprocess
    import sys

    code = _GENERIC_PROBE.format(tests=os.path.dirname(__file__), rewrite=rewrite)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    generic = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    # numba's allocator (``Array._allocate``, what every new array calls) is the one left
    generic = [n for n in generic if not n.startswith("_ol_array_allocate.")]
    if rewrite:
        assert generic == []
    else:
        assert len(generic) >= 4, generic


def test_other_cases_fall_back_to_numpy():
    src = '''
def f(x, b):
    m = np.array([b, 2], dtype="float32")
    q = np.asarray([1.0, 2.0])
    e = np.empty(x.shape, dtype=x.dtype)
    z = np.ascontiguousarray(2.5)
    u = np.full(3, b, dtype="float32")
    return m, q, e.shape, z, u
'''
    fast, new = _build(src, True)
    stock, _ = _build(src, False)
    assert "_pm_" in new
    got, want = fast(np.arange(3.0), True), stock(np.arange(3.0), True)
    for g, w in zip(got, want, strict=True):
        assert numba.typeof(g) == numba.typeof(w) and np.array_equal(g, w)


@pytest.mark.parametrize(
    "src, env",
    [
        ("def f(x):\n    return np.array(x, copy=False)\n", {"np": np}),
        ("def f(x):\n    return np.empty(x, np.float64, 'C')\n", {"np": np}),
        ("def f(x):\n    return np.asarray(x, np.float64)\n", {"np": np}),
        ("def f(x):\n    return np.asarray(*x)\n", {"np": np}),
        ("def f(x):\n    return np.asarray(x)\n", {"np": object()}),
        ("def f(x):\n    return np.asarray(x) + _pm_array1\n", {"np": np}),
        ("def f(x):\n    return np.asarray(np.array(x))\n", {"np": np}),
    ],
)
def test_declines(src, env):
    """Calls with other arguments, an ``np`` that is not numpy, a taken name, nested calls: unchanged."""
    assert arrays.rewrite_source(src, dict(env)) == src


@numba.njit
def _contig(a):
    return arrays.ascontiguous1(a)


@numba.njit
def _contig_slice(a, i0, i1, j0, j1, js):
    return arrays.ascontiguous1(a[i0:i1, :, j0:j1:js])  # an 'A' view of a C array


def test_ascontiguous_layout_a_checks_in_place():
    """An 'A' array is returned as is exactly when numba's ``is_contiguous`` says so (numba's own
    check, compiled as a subroutine before), else copied; checked on views with axes of length
    0 and 1, reversed and broadcast strides."""
    from numba.np.numpy_support import is_contiguous

    rng = np.random.default_rng(3)
    base = np.arange(400.0)
    views = [base[::2], base[5:6], base[:0], base[::-1], base[3:40][::-3]]
    for _ in range(300):
        nd = int(rng.integers(1, 4))
        shape = tuple(int(rng.choice([0, 1, 1, 2, 3, 4])) for _ in range(nd))
        strides = tuple(int(rng.choice([0, 8, 16, 24, 32, 96, -8])) for _ in range(nd))
        if any(s < 0 for s in strides):
            continue
        views.append(np.lib.stride_tricks.as_strided(base, shape, strides))
        c = np.zeros(shape)  # a C array seen as 'A' through a reversed-twice view
        views.append(c[(slice(None, None, -1),) * nd][(slice(None, None, -1),) * nd])
    from numba.core.base import BaseContext

    internal = []
    compile_internal = BaseContext.compile_internal

    def recording(self, builder, impl, sig, args, locals=None):
        internal.append(getattr(impl, "__name__", impl))
        return compile_internal(self, builder, impl, sig, args, locals)

    BaseContext.compile_internal = recording
    try:
        checked = [(v, _contig(v)) for v in views if numba.typeof(v).layout == "A"]
    finally:
        BaseContext.compile_internal = compile_internal
    assert "is_contiguous" not in internal  # checked in place, not compiled as a subroutine
    a = np.arange(5 * 2 * 6.0).reshape(5, 2, 6)
    for _ in range(300):
        i0, j0 = int(rng.integers(0, 4)), int(rng.choice([0, 0, 1, 2]))
        i1, j1 = i0 + int(rng.integers(0, 3)), int(rng.choice([6, 6, j0 + 1, j0 + 2]))
        js = int(rng.choice([1, 1, 2, 3]))
        checked.append((a[i0:i1, :, j0:j1:js], _contig_slice(a, i0, i1, j0, j1, js)))
    n_same = n_copy = 0
    for v, got in checked:
        assert got.flags.c_contiguous and got.shape == v.shape
        np.testing.assert_array_equal(got, v)
        want = is_contiguous(v.shape, v.strides, v.itemsize)
        if got.size:
            assert (got.ctypes.data == v.ctypes.data and got.strides == v.strides) == want, (v.shape, v.strides)
            n_same += want
            n_copy += not want
    assert n_same > 20 and n_copy > 20
