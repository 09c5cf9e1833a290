"""``unit_axes``: Elemwise work over arrays with length-1 axes done without those axes, so fusion merges it.

pytensor's canonicalizer lifts ``DimShuffle`` s through ``Elemwise`` (``local_dimshuffle_lift``):
``ExpandDims(f(a, b)) -> f(ExpandDims(a), ExpandDims(b))``. In a likelihood built on a row sum
(``logit_p = (X * beta[g]).sum(-1)``, pymc's Bernoulli) the gradient of the sum is an ``(n, 1)``
column broadcast against ``(n, k)``, and the lift pushes that column shape into the whole
gradient of the per-row logp: ``y * sigmoid(eta)``, its switches and constants all become
``(n, 1)`` Elemwise nodes. Fusion merges Elemwise nodes of one rank only, so this gradient stays
apart from the ``(n,)`` Composite that computes the logp terms of the same rows: one more pass
over the rows, a ``sigmoid`` computed twice, more allocations.

Rewrites, at 48.55 (repeated while one applies):

* ``lift``: an ``Elemwise`` whose outputs have some length-1 (broadcastable) axes and some other
  axes is computed without the length-1 axes, its outputs expanded back:
  ``f(ExpandDims(a), [[c]], v) -> ExpandDims(f(a, [c], Squeeze(v)))``. An input that is a
  ``DimShuffle`` inserting exactly those axes is read through; a constant is reshaped; any other
  input is squeezed (a view, but a node), so the rewrite is declined when it adds more squeezes
  than it saves (inputs read through, and clients that squeeze its outputs, which ``compose``
  removes). Elemwise whose outputs have one element are ``scalarize`` 's.
* ``compose``: a ``DimShuffle`` of a ``DimShuffle`` is one ``DimShuffle`` of the inner input, or
  that input itself when the two cancel (``Squeeze(ExpandDims(a)) -> a``): what ``lift`` leaves
  behind between neighbours.

Why it is safe: an Elemwise's output has a length-1 axis only where every input has one, so
dropping the axis from every input and re-inserting it in every output computes the same scalar
function on the same elements in the same order (a replacement of another type, e.g. a less
precise static shape, is declined). In-place Elemwise are left alone (none exist before 50.5).

Why 48.55: after canonicalize and specialize (whose ``local_dimshuffle_lift`` builds the columns)
and ``add_mul_fusion`` (48), before ``scalarize`` (48.6) and ``elemwise_fusion`` (49), which then
merges the 1-d gradient with the 1-d logp terms into one Composite that ``indexed_elemwise``
(49.2) fuses with its gathers and scatters.
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.tensor.basic import constant
from pytensor.tensor.elemwise import DimShuffle, Elemwise

from pmfast.passes.registry import register_pass
from pmfast.passes.rewriting import NodeRewritePass

PASS_NAME = "unit_axes"


def _unit_axes(node) -> tuple[int, ...] | None:
    """The length-1 axes of ``node``'s outputs when there are some and some other axes, else ``None``."""
    bc = node.outputs[0].type.broadcastable
    unit = tuple(d for d, b in enumerate(bc) if b)
    if not unit or len(unit) == len(bc):
        return None
    return unit


def _inserted(v, keep: list[int]):
    """The variable ``v`` is an ``ExpandDims`` of along the axes not in ``keep``, or ``None``.

    ``v = DimShuffle(a)`` with ``a.ndim == len(keep)`` and new order ``'x'`` on the dropped axes
    and ``0, 1, …`` in order on the kept ones.
    """
    owner = v.owner
    if owner is None or not isinstance(owner.op, DimShuffle):
        return None
    a = owner.inputs[0]
    order = list(owner.op.new_order)
    kept = [order[d] for d in keep]
    dropped = [order[d] for d in range(len(order)) if d not in keep]
    if a.type.ndim != len(keep) or kept != list(range(len(keep))) or any(o != "x" for o in dropped):
        return None
    return a


def lift(fgraph, node):
    """``node``'s outputs computed without their length-1 axes and expanded back, or ``None``."""
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern:
        return None
    unit = _unit_axes(node)
    if unit is None:
        return None
    ndim = node.outputs[0].type.ndim
    keep = [d for d in range(ndim) if d not in unit]
    args, read_through, squeezed = [], 0, 0
    for inp in node.inputs:
        if inp.type.ndim != ndim or not all(inp.type.broadcastable[d] for d in unit):
            return None
        a = _inserted(inp, keep)
        if a is not None:
            read_through += 1
        elif isinstance(inp, Constant):
            data = np.asarray(inp.data)
            a = constant(data.reshape([data.shape[d] for d in keep]), dtype=inp.type.dtype)
        else:
            a = inp.dimshuffle(keep)
            squeezed += 1
        args.append(a)
    squeezing_clients = sum(
        isinstance(c.op, DimShuffle) and c.outputs[0].type.ndim == len(keep)
        for o in node.outputs
        for c, _ in fgraph.clients.get(o, [])
    )
    if squeezed > read_through + squeezing_clients:
        return None
    outs = op.make_node(*args).outputs
    order = ["x"] * ndim
    for i, d in enumerate(keep):
        order[d] = i
    return [o.dimshuffle(order) for o in outs]


def compose(fgraph, node):
    """``DimShuffle(DimShuffle(a))`` as one ``DimShuffle`` of ``a``, or ``a`` when they cancel."""
    inner = node.inputs[0].owner
    if inner is None or not isinstance(inner.op, DimShuffle):
        return None
    a = inner.inputs[0]
    inner_order = inner.op.new_order
    order = ["x" if d == "x" else inner_order[d] for d in node.op.new_order]
    if order == list(range(a.type.ndim)):
        return [a]
    return [a.dimshuffle(order)]


def unit_axes(fgraph, node):
    """``lift`` for an Elemwise, ``compose`` for a DimShuffle."""
    return (lift if isinstance(node.op, Elemwise) else compose)(fgraph, node)


unit_axes_pass = register_pass(
    PASS_NAME, "Elemwise over (n, 1) columns computed on (n,), so fusion merges them with the 1-d terms"
)
unit_axes_pass.register(NodeRewritePass(unit_axes, (Elemwise, DimShuffle), PASS_NAME), 48.55, name="lift")
