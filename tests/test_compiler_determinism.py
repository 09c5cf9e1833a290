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


def test_a_composite_s_loop_key_does_not_change_when_pytensor_prints_it():
    """``Composite.__str__`` names the scalar variables used twice ``t<k>`` by their place in a set
    ordered by address (pytensor prints graphs while converting them): the loop pmfast writes for
    the Composite, and so its cache key, must not depend on those names."""
    import pytensor.scalar as ps
    from pytensor.tensor.elemwise import Elemwise

    from pmfast.compiler import elemwise

    a, b = ps.float64("a"), ps.float64("b")
    t = ps.exp(a) + b
    u = ps.log(t) * a
    comp = ps.Composite([a, b], [t * t + u * u])
    node = Elemwise(comp)(pt.vector("x"), pt.vector("y")).owner
    _, before = elemwise.funcify(node.op, node)
    str(comp)  # names t and u after their places in fgraph.variables
    assert any(v.name and v.name.startswith("t") for v in comp.fgraph.variables)
    _, after = elemwise.funcify(node.op, node)
    assert before is not None and after == before
