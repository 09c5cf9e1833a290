"""pmfast.compiler.lowering_scan: numba's singly-assigned-variable scan in linear time, cheap debug text
of global arrays; the same answers as numba's."""

from __future__ import annotations

import numba
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.core import ir, lowering, utils
from numba.core.compiler import run_frontend

from pmfast import compiler
from pmfast.compiler import lowering_scan, patching

compiler.setup()
NUMBA_SCAN = lowering.Lower._find_singly_assigned_variable.__wrapped__


def _scan(fn, func_ir):
    """``_singly_assigned_vars`` of ``fn`` run on a stand-in ``Lower`` of ``func_ir``."""
    low = type("L", (), {})()
    low.func_ir, low.blocks = func_ir, utils.SortedMap(func_ir.blocks.items())
    fn(low)
    return low._singly_assigned_vars


def _program(ops) -> str:
    """A function of ``a`` and ``b`` from ``ops``: assignments (some reassigning a name), branches, loops."""
    lines, names = ["def f(a, b):", "    v0 = a + b"], ["a", "b", "v0"]
    for kind, i, j in ops:
        x, y = names[i % len(names)], names[j % len(names)]
        new = f"v{len(names)}"
        if kind == 0:
            lines.append(f"    {new} = {x} * {y} + 1.0")
        elif kind == 1:  # reassign an existing name in the same block
            lines.append(f"    {x} = {x} - {y}")
            continue
        elif kind == 2:
            lines += [f"    if {x} > {y}:", f"        {new} = {x}", "    else:", f"        {new} = {y}"]
        else:
            lines += [f"    {new} = {x}", "    for k in range(3):", f"        {new} = {new} + {y} * k"]
        names.append(new)
    lines.append(f"    return {names[-1]}")
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=25))
def test_same_set_as_numba(ops):
    env: dict = {}
    exec(_program(ops), env)
    func_ir = run_frontend(env["f"])
    assert _scan(lowering_scan.find_singly_assigned_variable, func_ir) == _scan(NUMBA_SCAN, func_ir)


def test_same_set_on_compiled_functions(monkeypatch):
    """Inside real compiles (numba's IR as lowered: after SSA and dels), both scans agree on every function."""
    seen = []

    def both(self):
        lowering_scan.find_singly_assigned_variable(self)
        ours = set(self._singly_assigned_vars)
        NUMBA_SCAN(self)
        seen.append(len(ours))
        assert ours == self._singly_assigned_vars

    monkeypatch.setattr(lowering.Lower, "_find_singly_assigned_variable", both)

    @numba.njit
    def g(x, n):
        t = 0.0
        for i in range(n):
            t = t + x[i] if x[i] > 0 else t - 1.0
        y = x * 2.0
        y = y + t
        return y.sum(), t

    g(np.arange(5.0), 4)
    assert seen and max(seen) > 0


def test_long_block_scanned_once():
    """A straight-line function of 300 assignments: numba lists the block's statements once per
    variable; inside a pmfast compile the block is listed a constant number of times."""
    body = ["def h(a):", "    v0 = a + 1.0"] + [f"    v{i} = v{i - 1} * 1.0001 + a" for i in range(1, 300)] + ["    return v299"]
    env: dict = {}
    exec("\n".join(body) + "\n", env)
    calls = [0]
    original = ir.Block.find_insts

    def counted(self, cls=None):
        if cls is ir.Assign:
            calls[0] += 1
        return original(self, cls)

    ir.Block.find_insts = counted
    try:
        with patching.compiling():
            numba.njit(env["h"])(1.0)
        inside = calls[0]
        calls[0] = 0
        numba.njit(env["h"])(2.0)  # outside: numba's own scan
        outside = calls[0]
    finally:
        ir.Block.find_insts = original
    assert outside >= 300
    assert inside < 10


def test_global_array_text():
    g = ir.Global("c", np.zeros((58, 3)), ir.Loc("x", 1))
    with patching.compiling():
        assert str(g) == "global(c: array(float64, (58, 3)))"
        assert str(ir.Global("k", 3, ir.Loc("x", 1))) == "global(k: 3)"
    assert "0." in str(g)  # numba's text outside a pmfast compile


def test_switch_off(monkeypatch):
    monkeypatch.setenv("PMFAST_LINEAR_LOWER", "0")
    g = ir.Global("c", np.zeros(3), ir.Loc("x", 1))
    with patching.compiling():
        assert str(g) == "global(c: [0. 0. 0.])"


def test_same_llvm_ir_either_way(monkeypatch):
    """A function with a loop and a long straight-line tail lowers to the same LLVM IR with the switch
    on and off (numba's per-dispatcher numbers in symbol names aside: ``B<n>v<digits>`` masked before long
    numbers, else a counter followed by a masked number escapes the mask)."""
    import re

    src = "def h(a, n):\n    t = 0.0\n    for k in range(n):\n        t = t + k * a\n    v0 = a + t\n"
    src += "".join(f"    v{i} = v{i - 1} * 1.0001 + a\n" for i in range(1, 60)) + "    return v59\n"
    env: dict = {}
    exec(src, env)

    def llvm(flag):
        monkeypatch.setenv("PMFAST_LINEAR_LOWER", flag)
        with patching.compiling():
            d = numba.njit(env["h"])
            d(1.0, 3)
        text = d.inspect_llvm(d.signatures[0])
        return re.sub(r"\[\d+ x i8\]", "[n x i8]", re.sub(r"\d{9,}", "A", re.sub(r"B\d+v\d+", "Bv", text)))

    assert llvm("1") == llvm("0")
