"""pytensor's broadcast shapes are built in the arrays' order, whatever the variables' addresses."""

import pytensor.tensor as pt
from pytensor.graph.basic import equal_computations
from pytensor.tensor.extra_ops import broadcast_shape

from pmfast.compiler import determinism, patching


def _first_length(xs):
    (length,) = broadcast_shape(*xs)
    # two lengths that can't be proven equal: Assert(first, all(first == others))
    return length.owner.inputs[0]


def test_the_first_unknown_length_is_the_first_arrays():
    determinism.install()
    with patching.compiling():
        for trial in range(40):  # fresh variables at new addresses each time
            xs = [pt.vector(f"x{trial}_{k}") for k in range(3)]
            for order in (xs, xs[::-1], [xs[1], xs[0], xs[2]]):
                assert equal_computations([_first_length(order)], [order[0].shape[0]])


def test_outside_a_pmfast_compile_the_builtin_set():
    from pytensor.tensor import extra_ops

    determinism.install()
    assert type(extra_ops.set()) is set
    with patching.compiling():
        assert type(extra_ops.set()) is not set


def test_with_a_plain_set_the_order_follows_addresses(monkeypatch):
    """pytensor's own behaviour (why :mod:`pmfast.compiler.determinism` exists): with a builtin set, some
    trials take another array's length first."""
    from pytensor.tensor import extra_ops

    monkeypatch.setattr(extra_ops, "set", set)
    other = 0
    for trial in range(40):
        xs = [pt.vector(f"x{trial}_{k}") for k in range(3)]
        for order in (xs, xs[::-1]):
            other += not equal_computations([_first_length(order)], [order[0].shape[0]])
    assert other > 0
