"""PyMC's parameter checks, made loop-friendly (part of ``indexed_elemwise``).

* ``sum(switch(c, x, v))`` → ``switch(c, sum(x), Σv)`` for a loop-invariant ``c``;
* ``sigmoid(x) >= 0`` / ``sigmoid(x) <= 1`` → ``~isnan(x)`` (a ``logit_p``'s ``0 <= p <= 1``).

Sum of a switch on a loop-invariant condition:

PyMC guards every logp term with its parameter checks,
``switch(all(checks), logp_terms, -inf)``, and sums it. When a check reads the
same elementwise values as the terms (Bradley–Terry, any Bernoulli with
``logit_p``: ``0 <= sigmoid(x[i]) <= 1``), the switch's condition is a
reduction over the very loop that computes the terms, so the terms' loop has
to wait for it: two loops, and the shared intermediates materialised between
them. With the condition moved outside the sum, nothing elementwise depends
on the reduction any more: ``elemwise_fusion`` builds one Composite for the
checks and the terms, and ``indexed_elemwise`` runs it as one loop with the
checks as ``all`` accumulators.

Why it is safe: ``c`` broadcasts on every axis, so every element selects the
same branch. When ``c`` holds, both sides are the same ``Sum`` of the same
``x`` (same order, same bits). Otherwise the sum of ``size(x)`` copies of the
constant ``v`` is computed exactly, which restricts ``v`` to ``0`` (always
``0``) and ``±inf`` (``v``, or ``0`` for an empty ``x``). ``x`` is computed
either way, as before (an elementwise switch evaluates both branches).
"""

from __future__ import annotations

import logging

import numpy as np
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.scalar.basic import GE, LE, Switch
from pytensor.scalar.math import Sigmoid
from pytensor.tensor.basic import as_tensor_variable, get_underlying_scalar_constant_value, stack, switch
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Sum, eq, invert, isnan, prod
from pytensor.tensor.exceptions import NotScalarConstantError

from pmfast.passes.indexed_elemwise import indexed_elemwise_pass

_log = logging.getLogger(__name__)


def _scalar_condition(c):
    """The 0-d boolean behind ``c`` if ``c`` broadcasts on every axis, else ``None``."""
    if not all(c.type.broadcastable) or c.type.dtype != "bool":
        return None
    if c.owner is not None and isinstance(c.owner.op, DimShuffle) and c.owner.inputs[0].type.ndim == 0:
        return c.owner.inputs[0]
    return c.dimshuffle() if c.type.ndim else c


def _exact_constant_sum_value(v):
    """``v`` as a float if summing copies of it is exact (0 or ±inf), else ``None``."""
    if not all(v.type.broadcastable):
        return None
    try:
        val = float(get_underlying_scalar_constant_value(v))
    except (NotScalarConstantError, TypeError, ValueError):
        return None
    return val if val == 0.0 or np.isinf(val) else None


def _size(fgraph, x):
    """``x.size`` from the ShapeFeature's shape of ``x`` (in terms of the inputs), so
    that asking for it does not keep ``x`` itself alive (it could then not stay
    inside a fused loop)."""
    sf = getattr(fgraph, "shape_feature", None)
    shape = sf.shape_of.get(x) if sf is not None else None
    if shape is None:
        return x.size
    return prod(stack([as_tensor_variable(d, dtype="int64") for d in shape])) if shape else 1


@node_rewriter([Sum])
def local_sum_of_invariant_switch(fgraph, node):
    """``Sum(switch(c, x, v))`` over all axes, ``c`` broadcast on every axis, ``v`` a constant 0/±inf.

    Becomes ``switch(c, Sum(x), Σv)`` (either branch order), with the same
    ``Sum`` op. Declined for partial sums, other constants, other dtypes.
    """
    try:
        (inp,) = node.inputs
        if node.op.axis is not None and sorted(node.op.axis) != list(range(inp.type.ndim)):
            return None
        sw = inp.owner
        if sw is None or not isinstance(sw.op, Elemwise) or not isinstance(sw.op.scalar_op, Switch):
            return None
        if inp.type.ndim == 0 or len(fgraph.clients[inp]) != 1:
            return None
        c, a, b = sw.inputs
        cond = _scalar_condition(c)
        if cond is None:
            return None
        for x, v, x_first in ((a, b, True), (b, a, False)):
            val = _exact_constant_sum_value(v)
            if val is None or x.type.dtype != inp.type.dtype or x.type.ndim != inp.type.ndim:
                continue
            if x.type.broadcastable != inp.type.broadcastable:
                continue  # x itself is broadcast: its Sum would count fewer elements
            out = node.outputs[0]
            total = node.op(x)
            const = np.asarray(val, dtype=out.type.dtype)
            if val == 0.0 or all(d is not None and d > 0 for d in x.type.shape):
                other = const
            else:
                other = switch(eq(_size(fgraph, x), 0), np.asarray(0, dtype=out.type.dtype), const)
            new = switch(cond, total, other) if x_first else switch(cond, other, total)
            if new.type.dtype != out.type.dtype or new.type.ndim != 0:
                return None
            return [new]
        return None
    except Exception:
        _log.debug("invariant switch: declined %s", node, exc_info=True)
        return None


def _sigmoid_input(v):
    node = v.owner
    if node is not None and isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, Sigmoid):
        return node.inputs[0]
    return None


@node_rewriter([Elemwise])
def local_sigmoid_bounds_check(fgraph, node):
    """``sigmoid(x) >= 0`` and ``sigmoid(x) <= 1`` (pymc's ``0 <= p <= 1`` check of a
    ``logit_p``) become ``~isnan(x)``.

    ``sigmoid(x) = 1 / (1 + exp(-x))`` lies in ``[0, 1]`` for every ``x`` but
    NaN, so both comparisons are exactly "``x`` is not NaN"; the check then no
    longer computes an ``exp`` per element (the sigmoid may still be needed
    elsewhere, e.g. by the gradient, where it is computed as before).
    """
    try:
        sop = node.op.scalar_op
        if not isinstance(sop, GE | LE) or node.outputs[0].type.dtype != "bool":
            return None
        a, b = node.inputs
        x = _sigmoid_input(a)
        if x is None or np.dtype(x.type.dtype).kind != "f":
            return None
        try:
            bound = float(get_underlying_scalar_constant_value(b))
        except (NotScalarConstantError, TypeError, ValueError):
            return None
        if (isinstance(sop, GE) and bound != 0.0) or (isinstance(sop, LE) and bound != 1.0):
            return None
        new = invert(isnan(x))
        if new.type != node.outputs[0].type:  # the bound broadcast x to more axes: keep stock
            return None
        return [new]
    except Exception:
        _log.debug("sigmoid bounds check: declined %s", node, exc_info=True)
        return None


# Position 48.5: after ``specialize`` (2) and ``add_mul_fusion`` (48), when pymc's
# checks have become switches (``local_check_parameter_to_ninf_switch``,
# canonicalize) and nothing re-runs canonicalize; before ``elemwise_fusion`` (49),
# so fusion sees the checks and the terms as one elementwise graph.
indexed_elemwise_pass.register(in2out(local_sum_of_invariant_switch), 48.5, name="sum_of_invariant_switch")
indexed_elemwise_pass.register(in2out(local_sigmoid_bounds_check), 48.5, name="sigmoid_bounds_check")
