"""pmfast.compiler.inliner: numba's inliner without copying the callee's fresh IR gives the same code."""

import copy
import re

import numba
import numpy as np
from numba.core import inline_closurecall

from pmfast import compiler
from pmfast.compiler import inliner, patching


@numba.njit(inline="always")
def _acc(x, k):
    s = 0.0
    for v in x:
        if v > k:
            s += v * 2.0
        else:
            s -= 1.0
    return s


@numba.njit(inline="always")
def _scaled(x):
    return _acc(x, 0.5) + _acc(x[1:], 1.5) * np.float64(3.0)


def _caller(x):
    a = _scaled(x)
    b = _acc(x, -1.0)
    return a - b


def _llvm(dispatcher) -> str:
    text = "".join(dispatcher.inspect_llvm().values())
    text = re.sub(r"B\d+v\d+B\d+\w+", "B", text)  # numba's unique names and ABI tags
    text = re.sub(r'\[\d+ x i8\] c"([^"]*_ZN)', r'[K x i8] c"\1', text)  # strings holding those names
    text = re.sub(r"B\d+", "B", text)  # block labels: numba numbers them process-wide
    text = re.sub(r"_v\d+", "_v", text)  # inlined variables: named after the callee's numbered function id
    text = re.sub(r"[ \t]+", " ", text)  # comments aligned after those labels
    return re.sub(r"\d{9,}", "N", text)


def test_same_code_fewer_copies(monkeypatch):
    # the inliner's code alone: inside a compile, lean reference counts (compiler/meminfos, tested
    # in test_compiler_meminfos) emit fewer instructions, so the IR's value names would differ
    monkeypatch.setenv("PMFAST_LEAN_REFS", "0")
    compiler.setup()
    x = np.linspace(-2.0, 3.0, 11)
    stock = numba.njit(_caller)  # outside a pmfast compile: numba's own inliner
    want = stock(x)

    copies = []
    deepcopy = copy.deepcopy

    def counting(obj, memo=None):
        copies.append(type(obj).__name__)
        return deepcopy(obj, memo)

    copy.deepcopy = counting
    try:
        outside = numba.njit(_caller)
        outside(x)
        outside_copies = list(copies)
        copies.clear()
        with patching.compiling():
            fast = numba.njit(_caller)
            got = fast(x)
    finally:
        copy.deepcopy = deepcopy
    assert got == want
    assert "Block" in outside_copies  # outside pmfast's compile numba copies as it always does
    assert "Block" not in copies  # the callee's blocks were not copied
    assert _llvm(fast) == _llvm(stock)
