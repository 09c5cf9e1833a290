"""pmfast.compiler.arrays: numpy's array constructors in generated sources without numba's generic code."""

import numba
import numpy as np
import pytest
from numba.core import event

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
    g[:] = 1.0
    h[:] = 2.0
    s[:] = 3
    return a, c, d, e, g, h, q, r, s, u, v, w, k, m
'''


def _build(src, rewrite):
    env = {"np": np}
    if rewrite:
        src = arrays.rewrite_source(src, env)
    exec(src, env)
    return numba.njit(env["f"]), src


class _Compiled(event.Listener):
    """Names of the numba functions compiled while active."""

    def __init__(self):
        self.names = []

    def on_start(self, ev):
        d = ev.data["dispatcher"]
        self.names.append(getattr(d, "__qualname__", None) or d.py_func.__qualname__)

    def on_end(self, ev):
        pass


def test_same_values_types_and_aliasing():
    fast, src = _build(SRC, True)
    stock, _ = _build(SRC, False)
    assert src.count("_pm_") == 14 and "np.asarray" not in src and "np.empty" not in src
    x, y = np.arange(6.0), np.arange(12.0).reshape(3, 4)[:, ::2]
    got, want = fast(x, y, 3, True, 7), stock(x, y, 3, True, 7)
    for g, w in zip(got, want, strict=True):
        assert numba.typeof(g) == numba.typeof(w)
        assert np.array_equal(g, w)
    assert got[1] is x and got[9] is x  # asarray / ascontiguousarray of a C array: the array itself
    assert got[10].flags.c_contiguous and not np.shares_memory(got[10], y)  # a copy of a strided array
    with pytest.raises(ValueError, match="negative dimensions not allowed"):
        fast(x, y, -1, True, 7)


_GENERIC_PROBE = """
import numpy as np, numba, sys
from numba.core import event
sys.path.insert(0, {tests!r})
from test_compiler_arrays import SRC, _build, _Compiled
fn, _ = _build(SRC, {rewrite})
listener = _Compiled()
with event.install_listener("numba:compile", listener):
    fn(np.arange(4.0), np.ones((2, 4))[:, ::2], 2, False, 1)
print([n for n in listener.names if "<locals>" in n])
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
    return m, q, e.shape, z
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
