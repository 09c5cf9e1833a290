"""pmfast.compiler.constants: one merge signature per tensor constant, comparing as pytensor's does."""

import itertools

import numpy as np
import pytest
import pytensor.tensor as pt
from pytensor.tensor.variable import TensorConstant

from pmfast.compiler import constants, patching


@pytest.fixture(autouse=True)
def _in_a_pmfast_compile():
    """The replacement is compile-scoped: these tests run inside :func:`pmfast.compiler.patching.compiling`."""
    with patching.compiling():
        yield

VALUES = [np.arange(3.0), np.arange(3.0), np.array([1.0, np.nan, 2.0]), np.array([1.0, np.nan, 2.0]),
          np.array([np.nan]), np.array([np.inf, -np.inf]), np.float64(2.0), np.int64(2), np.zeros((2, 2))]


def _plain_signature(c):
    return TensorConstant.signature.__wrapped__(c)


def test_signatures_compare_and_hash_as_pytensors():
    constants.install()
    constants.install()  # idempotent
    assert not getattr(TensorConstant.signature.__wrapped__, "_pmfast", False)
    cs = [pt.constant(v) for v in VALUES]
    for a, b in itertools.product(cs, cs):
        assert a.equals(b) == (_plain_signature(a) == _plain_signature(b))
        assert hash(a.signature()) == hash(_plain_signature(a))


def test_one_signature_per_constant_until_its_data_changes():
    constants.install()
    c = pt.constant(np.arange(4.0))
    assert c.signature() is c.signature()
    old = c.signature()
    c.data = np.ones(4)  # a new data object: a new signature
    assert c.signature() is not old and not (c.signature() == old)


def test_outside_a_pmfast_compile_a_fresh_signature_per_call():
    constants.install()
    c = pt.constant(np.arange(5.0))
    depth = patching._state.depth
    patching._state.depth = 0  # leave the fixture's scope for this check
    try:
        assert c.signature() is not c.signature()
    finally:
        patching._state.depth = depth
