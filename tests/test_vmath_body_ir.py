"""A vmath body's pytensor scalar functions inlined at numba's IR level (``PMFAST_VMATH_BODY_IR``)."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from pytensor.scalar.basic import Composite, get_scalar_type

from pmfast.mode import get_mode
from pmfast.vmath import elemwise as ve
from pmfast.vmath.elemwise import VmathElemwise

v = pt.vector("v")
CASES = {
    "exp_affine": lambda v: pt.exp(2 * v * v + v),
    "softplus_clip": lambda v: pt.log1p(pt.exp(v * 2)) * pt.clip(v, -1.5, 1.5) / (v * v + 1),
    "sqrt_switch": lambda v: pt.sqrt(pt.abs(v)) + pt.switch(v > 0, pt.cos(v), -pt.sin(v)) - pt.exp(-v * v),
}


@functools.cache
def _compiled(case: str, ir: bool):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PMFAST_VMATH_BODY_IR", "1" if ir else "0")
        fn = pytensor.function([v], CASES[case](v), mode=get_mode(["vector_math"]))
        fn(np.ones(3))  # compiled under this setting
    return fn


def _vmath_node(fn):
    (node,) = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, VmathElemwise)]
    return node


@pytest.mark.parametrize("case", sorted(CASES))
def test_body_inlines_pytensors_functions_only_when_on(case, monkeypatch):
    node = _vmath_node(_compiled(case, True))
    assert isinstance(node.op.scalar_op, Composite)
    scalar_node = node.op.scalar_op.make_node(*[get_scalar_type(dtype=i.type.dtype)() for i in node.inputs])
    bodies = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("PMFAST_VMATH_BODY_IR", flag)
        body, key = ve.inlined_body(node.op.scalar_op, scalar_node)
        called = [g for g in body.py_func.__globals__.values() if hasattr(g, "targetoptions")]
        bodies[flag] = (key, {g.targetoptions.get("inline") for g in called})
    assert bodies["1"][0] != bodies["0"][0]  # the key follows the switch
    assert "always" in bodies["1"][1] and "always" not in bodies["0"][1]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    x=hnp.arrays("float64", st.integers(0, 40), elements=st.one_of(st.floats(-30, 30), st.sampled_from([np.nan, np.inf, -np.inf, 0.0]))),
    case=st.sampled_from(sorted(CASES)),
)
def test_same_bits_either_way(x, case):
    on, off = _compiled(case, True)(x), _compiled(case, False)(x)
    assert on.tobytes() == off.tobytes()
