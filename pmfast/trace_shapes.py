"""The shapes of a model's traced variables without an initial point.

nutpie's ``_make_functions`` asks ``_compute_shapes(model)`` for the shape of every value variable,
free variable and deterministic. nutpie builds ``make_initial_point_fn`` a second time (pmfast has
already built one, with the user's strategy and jitter), evaluates it at seed 0 (the first call of
each ``OpFromGraph`` in it compiles its inner graph), and compiles a ``FAST_COMPILE`` function of
``var.shape`` for each variable with the point's arrays substituted for the value and free
variables: ~3 s of hier_var's (8 groups) ~34 s of graph building.

The point enters that function only through the shapes of its arrays, which are the shapes of the
variables themselves: a free variable's initial value has the variable's shape, and a transformed
one's is the transform's ``forward`` of it. :func:`trace_shapes` compiles the same shape outputs with
the value variables replaced by ``transform.forward(rv, *rv.owner.inputs)`` (untransformed free
variables stand for themselves) and asks pytensor's shape inference to remove every random
variable. If a shape still needs a random draw (no ``infer_shape`` reaches through it: a shape that
depends on a value, an ``OpFromGraph``), it returns ``None`` and the caller computes the shapes as
nutpie does. ``PMFAST_TRACE_SHAPES=0`` turns it off. ``tests/test_trace_shapes.py`` compares with
nutpie's ``_compute_shapes`` on zoo and catalogue models.
"""

from __future__ import annotations

import os


def enabled() -> bool:
    """``PMFAST_TRACE_SHAPES=0`` computes the shapes as nutpie does (an initial point evaluated)."""
    return os.environ.get("PMFAST_TRACE_SHAPES", "1") != "0"


def _needs_a_draw(fgraph) -> bool:
    """Whether the compiled shape graph still computes a random variable or any value behind an opaque op
    (an unused generator among its inputs is no draw)."""
    from pytensor.compile.builders import OpFromGraph
    from pytensor.tensor.random.op import RandomVariable
    from pytensor.tensor.random.type import RandomType

    for node in fgraph.apply_nodes:
        if isinstance(node.op, (RandomVariable, OpFromGraph)):
            return True
        if any(isinstance(v.type, RandomType) for v in (*node.inputs, *node.outputs)):
            return True
    return False


def trace_shapes(model) -> dict | None:
    """``{name: shape array}`` as nutpie's ``_compute_shapes(model)`` returns it, or ``None`` when a
    shape cannot be had without evaluating an initial point (see the module docstring)."""
    import pytensor
    from pytensor.tensor import as_tensor

    observed = list(model.observed_RVs)
    potentials = list(model.potentials)
    trace_vars = {
        var.name: var
        for var in model.value_vars + model.free_RVs + model.deterministics
        if var not in observed + potentials
    }
    # nutpie replaces each variable named like a key of the transformed initial point (a value
    # variable's name) by the point's array; that array has the shape of the free variable, or of its
    # transform's forward
    stand_ins = {}
    for rv in model.free_RVs:
        value = model.rvs_to_values[rv]
        var = trace_vars.get(value.name)
        if var is None:
            continue
        transform = model.rvs_to_transforms.get(rv)
        stand_in = rv if transform is None else transform.forward(rv, *rv.owner.inputs)
        if var is not stand_in:
            stand_ins[var] = stand_in
    givens = [(obs, model.rvs_to_values[obs]) for obs in observed] + list(stand_ins.items())
    fn = pytensor.function(
        inputs=[],
        outputs=[as_tensor(var.shape) for var in trace_vars.values()],
        givens=givens,
        mode="FAST_COMPILE",
        on_unused_input="ignore",
    )
    if _needs_a_draw(fn.maker.fgraph):
        return None
    return dict(zip(trace_vars.keys(), fn(), strict=True))
