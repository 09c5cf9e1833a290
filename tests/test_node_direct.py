"""pmfast.compiler.node_direct: node functions cached without pytensor's ``*args`` forwarder, same values."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from pytensor.link.numba.dispatch.basic import numba_funcify_ensure_cache
from pytensor.raise_op import Assert
from pytensor.tensor.basic import MakeVector

from pmfast import compiler
from pmfast.compiler import node_direct
from pmfast.mode import get_mode

compiler.setup()


def _graph():
    x = pt.vector("x", dtype="float64")
    y = pt.vector("y", dtype="float64")
    s = pt.switch(x > 0, pt.exp(-x) * y, pt.log1p(x * x) + y)  # a Composite: its scalar ops go through ensure_cache
    checked = Assert("x must not be empty")(s, x.shape[0] > 0)  # CheckAndRaise: a closure, keeps its forwarder
    v = pt.stack([checked.sum(), (checked * y).max(), x[0], y[-1]])  # MakeVector: pytensor's generated function
    return [x, y], [v, checked]


@functools.cache
def _compiled(mode: str):
    """The graph compiled by stock NUMBA (``"stock"``) or pmfast's linker with ``PMFAST_NODE_DIRECT`` = ``mode``."""
    inputs, outputs = _graph()
    if mode == "stock":
        return pytensor.function(inputs, outputs, mode="NUMBA")
    old = os.environ.get("PMFAST_NODE_DIRECT")
    os.environ["PMFAST_NODE_DIRECT"] = mode
    try:
        fn = pytensor.function(inputs, outputs, mode=get_mode("all"))
        fn(np.ones(2), np.ones(2))
    finally:
        if old is None:
            os.environ.pop("PMFAST_NODE_DIRECT")
        else:
            os.environ["PMFAST_NODE_DIRECT"] = old
    return fn


def _node_functions(fn):
    """The dispatchers the compiled graph function calls (its globals that are numba dispatchers)."""
    from numba.core.registry import CPUDispatcher

    return {k: v for k, v in fn.vm.jit_fn.py_func.__globals__.items() if isinstance(v, CPUDispatcher)}


def test_forwarder_of_generated_function_unwrapped():
    x = pt.scalar("x", dtype="float64")
    node = pt.stack([x, x + 1]).owner
    assert isinstance(node.op, MakeVector)
    wrapper, key = numba_funcify_ensure_cache(node.op, node=node)
    inner = node_direct.forwarded(wrapper)
    assert inner is not None and node_direct.cacheable_as_is(inner)
    fn, new_key = node_direct.unwrap(wrapper, key, True)
    assert new_key == key + node_direct.SUFFIX
    assert fn.py_func is not inner.py_func and fn.py_func.__code__ is inner.py_func.__code__
    assert node_direct.FORWARDER not in fn.py_func.__source__
    assert {k: v for k, v in fn.targetoptions.items() if k != "nopython"} == {
        k: v for k, v in inner.targetoptions.items() if k != "nopython"
    }
    assert fn._cache._impl.locator.get_disambiguator() == f"{new_key}_fastmath1"


def test_closure_and_plain_functions_keep_the_forwarder():
    x = pt.vector("x", dtype="float64")
    node = Assert("msg")(x, x.shape[0] > 0).owner
    wrapper, key = numba_funcify_ensure_cache(node.op, node=node)
    assert node_direct.forwarded(wrapper) is not None
    assert node_direct.forwarded(wrapper).py_func.__closure__ is not None
    assert node_direct.unwrap(wrapper, key, True) is None
    inner = node_direct.forwarded(numba_funcify_ensure_cache(MakeVector("float64"), node=pt.stack([x[0]]).owner)[0])
    assert node_direct.unwrap(inner, "k", True) is None  # not a forwarder itself


def test_graph_calls_no_forwarder_of_a_cacheable_function():
    on = _node_functions(_compiled("1"))
    off = _node_functions(_compiled("0"))
    assert any(node_direct.forwarded(d) is not None and node_direct.cacheable_as_is(node_direct.forwarded(d)) for d in off.values())
    for d in on.values():
        inner = node_direct.forwarded(d)
        assert inner is None or not node_direct.cacheable_as_is(inner)


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays("float64", st.integers(0, 7), elements=st.floats(-30, 30)),
    st.data(),
)
def test_same_bits_as_forwarders_and_stock(x, data):
    y = data.draw(hnp.arrays("float64", x.shape, elements=st.floats(-30, 30)))
    results = {}
    for mode in ("stock", "0", "1"):
        try:
            results[mode] = [np.asarray(o) for o in _compiled(mode)(x, y)]
        except (AssertionError, IndexError, ValueError) as exc:
            results[mode] = type(exc).__name__
    assert results["1"] == results["0"] if isinstance(results["0"], str) else isinstance(results["1"], list)
    if isinstance(results["0"], list):
        for a, b in zip(results["1"], results["0"], strict=True):
            assert a.tobytes() == b.tobytes()
        if isinstance(results["stock"], list):
            for a, b in zip(results["1"], results["stock"], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12)
