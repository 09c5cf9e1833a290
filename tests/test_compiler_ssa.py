"""pmfast.compiler.ssa: numba's SSA reconstruction on fewer blocks gives numba's IR, statement for statement."""

import copy

import numba
import numpy as np
import pytest
from numba.core import ssa
from numba.core.compiler import run_frontend

from pmfast.compiler import ssa as fast


def _dump(blocks) -> str:
    lines = []
    for label, blk in blocks.items():
        lines.append(f"{label}:")
        lines += [f"  {type(s).__name__} {s} {sorted(v.name for v in s.list_vars())}" for s in blk.body]
    return "\n".join(lines)


def _loops(x, n):
    acc = 0.0
    j = 0
    for i in range(n):
        if x[i] > 0:
            acc += x[i]
            j = i
        else:
            acc -= 1.0
    while j > 0:
        j -= 2
        acc *= 0.5
    return acc, j


def _nested(a):
    total = 0.0
    for i in range(a.shape[0]):
        row = 0.0
        for k in range(a.shape[1]):
            row += a[i, k]
            if row > 10:
                break
        total += row
    k = 3
    return total + k


@numba.njit(inline="always")
def _helper(x):
    s = 0.0
    for v in x:
        s += v
    return s


@numba.njit
def _inlines(x):
    a = _helper(x)
    b = _helper(x[1:])
    c = _helper(x[2:])
    return a + b + c


def _undefined(flag):
    if flag:
        y = 1.0
    return y  # noqa: F821 — used before assignment on one path: numba warns, both versions the same


@pytest.mark.parametrize("func", [_loops, _nested, _undefined])
def test_same_ir_as_numba(func):
    blocks = run_frontend(func).blocks
    other = copy.deepcopy(blocks)
    want = _dump(_numba_run_ssa()(other))
    got = _dump(fast.run_ssa(blocks))
    assert got == want
    assert "phi" in got or func is _undefined


def _numba_run_ssa():
    """numba's own ``_run_ssa`` (also when pmfast's is installed)."""
    import importlib.util

    spec = importlib.util.find_spec("numba.core.ssa")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._run_ssa


def test_inlined_function_same_ir_and_values():
    """Through numba's whole pipeline (inlined loops: many violators), the same IR and the same values."""
    seen = []
    numba_run = _numba_run_ssa()

    def checking(blocks):
        want = _dump(numba_run(copy.deepcopy(blocks)))
        out = fast.run_ssa(blocks)
        seen.append(_dump(out) == want)
        return out

    saved = ssa._run_ssa
    ssa._run_ssa = checking
    try:
        x = np.arange(5.0)
        assert _inlines(x) == 10.0 + 10.0 + 9.0
    finally:
        ssa._run_ssa = saved
    assert seen and all(seen)


def test_installed():
    from pmfast import compiler

    compiler.setup()
    assert ssa._run_ssa._pmfast_scoped is fast.run_ssa
