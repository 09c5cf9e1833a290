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

When it applies (a rewrite pays for what it adds, or does not apply):

* ``x`` reads an integer-array gather: ``indexed_elemwise`` will run ``x``
  and its sum as one loop, which the switch no longer splits (a check on
  ``x``'s elements joins that loop as an ``all`` accumulator). That loop pays
  for a DimShuffle of ``c`` to 0-d and, for ``v = ±inf`` with a length not
  known statically, "is ``x`` empty": the length of each axis of ``x`` comes
  from facts the graph already has — a graph input that the elementwise ops
  computing ``x`` tie to that axis (:class:`~pmfast.passes.lengths.EqualLengths`
  over ``x``'s own ancestors, which stay in the graph) — as one ``Shape_i``.
  Never a symbolic broadcast shape: pytensor builds those with
  ``Assert('Could not broadcast dimensions')`` chains (+57 nodes, 1.73× eval on
  a 3 µs golf-putting model before this rule). No such input: declined.
* No gather: only if the rewrite adds no node (``c`` already 0-d behind a
  DimShuffle, no length needed, the sum's clients 0-d Elemwise that the new
  switch fuses into) and no check in ``c`` reduces an intermediate that ``x``
  also computes. With such a check, fusion merges checks and terms into one
  Composite, which numba runs slower than stock's two (golf putting 1.09×,
  stochastic volatility 1.18×, measured interleaved on the CPU clock); the
  win comes only from the loop above. A check on data or scalars moves out
  cheaply (eight schools: 0.88×).

Each rewrite is counted as an ``indexed_elemwise`` firing.
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors, toposort
from pytensor.scalar.basic import GE, LE, Switch
from pytensor.scalar.math import Sigmoid
from pytensor.tensor.basic import get_underlying_scalar_constant_value, switch
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.math import Sum, eq, invert, isnan, or_
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.shape import Shape_i
from pytensor.tensor.subtensor import AdvancedSubtensor, AdvancedSubtensor1

from pmfast.passes.indexed_elemwise import PASS_NAME, indexed_elemwise_pass
from pmfast.passes.lengths import EqualLengths
from pmfast.passes.rewriting import NodeRewritePass

def _exact_constant_sum_value(v):
    """``v`` as a float if summing copies of it is exact (0 or ±inf), else ``None``."""
    if not all(v.type.broadcastable):
        return None
    try:
        val = float(get_underlying_scalar_constant_value(v))
    except (NotScalarConstantError, TypeError, ValueError):
        return None
    return val if val == 0.0 or np.isinf(val) else None


def _lengths_of(fgraph, x):
    """The length of each non-static axis of ``x`` as ``Shape_i`` of a graph input, or ``None``.

    The facts come from the ops computing ``x`` (``x`` stays in the graph, so
    they still hold at run time): an input tied to axis ``d`` of ``x`` by them
    has ``x``'s length there whenever the graph runs without error.
    """
    lengths = EqualLengths()
    for node in toposort([x]):
        lengths.add_node(node)
    graph_inputs = set(fgraph.inputs)
    roots = [v for v in ancestors([x]) if v.owner is None and not isinstance(v, Constant) and v in graph_inputs]
    out = []
    for d, n in enumerate(x.type.shape):
        if n is not None:
            continue
        src = next(
            ((v, k) for v in roots for k in range(v.type.ndim) if lengths.same(x, d, v, k)),
            None,
        )
        if src is None:
            return None
        out.append(Shape_i(src[1])(src[0]))
    return out


def _elementwise_nodes(var, ndim: int) -> set:
    """Apply nodes among ``var``'s ancestors that compute arrays of ``ndim`` axes, not broadcast on all of them."""
    return {
        n
        for n in toposort([var])
        if any(o.type.ndim == ndim and not all(o.type.broadcastable) for o in n.outputs)
    }


def _shares_elementwise_work(cond, x) -> bool:
    """Does a reduction in ``cond`` read elementwise values that ``x``'s computation also computes?

    (A check on the terms' own intermediates: ``0 <= p <= 1`` of the ``p`` the
    terms use, ``sigma > 0`` of an elementwise ``sigma``.)
    """
    ndim = x.type.ndim
    computed = _elementwise_nodes(x, ndim)
    for node in toposort([cond]):
        if isinstance(node.op, CAReduce) and node.inputs[0].type.ndim == ndim:
            if _elementwise_nodes(node.inputs[0], ndim) & computed:
                return True
    return False


def _gathers(x) -> bool:
    """Does the elementwise region computing ``x`` read an integer-array gather (a loop ``indexed_elemwise`` fuses)?"""
    stack, seen = [x], set()
    while stack:
        v = stack.pop()
        node = v.owner
        if node is None or node in seen:
            continue
        seen.add(node)
        if isinstance(node.op, AdvancedSubtensor1 | AdvancedSubtensor):
            return True
        if isinstance(node.op, Elemwise | DimShuffle):
            stack.extend(node.inputs)
    return False


def _free_condition(c):
    """The 0-d boolean ``c`` broadcasts, if reading it costs no new node (``c`` is 0-d or a DimShuffle of a 0-d value)."""
    if c.type.ndim == 0:
        return c
    if c.owner is not None and isinstance(c.owner.op, DimShuffle) and c.owner.inputs[0].type.ndim == 0:
        return c.owner.inputs[0]
    return None


def sum_of_invariant_switch(fgraph, node):
    """``Sum(switch(c, x, v))`` over all axes, ``c`` broadcast on every axis, ``v`` a constant 0/±inf.

    Becomes ``switch(c, Sum(x), Σv)`` (either branch order), with the same
    ``Sum`` op, where it pays (see the module docstring):

    * ``x`` reads a gather: ``indexed_elemwise`` will run ``x`` and its sum
      (and a check on ``x``'s elements) as one loop, which the switch no longer
      splits; ``c`` may need a DimShuffle to 0-d, ``Σv`` a ``Shape_i`` of a graph
      input (:func:`_lengths_of`), or the rewrite declines;
    * otherwise only if it adds no node: ``c`` is a 0-d value (or a DimShuffle
      of one), ``Σv`` needs no length (``v = 0`` or a static shape), every client
      of the sum is a 0-d Elemwise (the new scalar switch fuses into it), and
      no check in ``c`` reduces an intermediate that ``x`` computes too (then
      fusion would merge check and terms into one Composite, which numba ran
      slower than stock's two: golf putting 1.09×, stochastic volatility 1.18×).

    Declined for partial sums, other constants, other dtypes. Returns the
    replacement of ``node``'s output, or ``None``.
    """
    if not isinstance(node.op, Sum):
        return None
    (inp,) = node.inputs
    if node.op.axis is not None and sorted(node.op.axis) != list(range(inp.type.ndim)):
        return None
    sw = inp.owner
    if sw is None or not isinstance(sw.op, Elemwise) or not isinstance(sw.op.scalar_op, Switch):
        return None
    if inp.type.ndim == 0 or len(fgraph.clients[inp]) != 1:
        return None
    c, a, b = sw.inputs
    if not all(c.type.broadcastable) or c.type.dtype != "bool":
        return None
    out = node.outputs[0]
    fuses_above = out not in fgraph.outputs and all(
        isinstance(getattr(client, "op", None), Elemwise) and client.outputs[0].type.ndim == 0
        for client, _ in fgraph.clients[out]
    )
    for x, v, x_first in ((a, b, True), (b, a, False)):
        val = _exact_constant_sum_value(v)
        if val is None or x.type.dtype != inp.type.dtype or x.type.ndim != inp.type.ndim:
            continue
        if x.type.broadcastable != inp.type.broadcastable:
            continue  # x itself is broadcast: its Sum would count fewer elements
        loop = _gathers(x)
        cond = _free_condition(c)
        if cond is None and loop:
            cond = c.dimshuffle()
        if cond is None:
            return None
        if not loop and (not fuses_above or _shares_elementwise_work(cond, x)):
            return None
        const = np.asarray(val, dtype=out.type.dtype)
        if val == 0.0 or all(d is not None and d > 0 for d in x.type.shape):
            other = const
        elif any(d == 0 for d in x.type.shape):
            other = np.asarray(0, dtype=out.type.dtype)
        else:
            lengths = _lengths_of(fgraph, x) if loop else None
            if not lengths:
                return None  # no length the graph already has, or no loop to pay for it
            empty = eq(lengths[0], 0)
            for n in lengths[1:]:
                empty = or_(empty, eq(n, 0))
            other = switch(empty, np.asarray(0, dtype=out.type.dtype), const)
        total = node.op(x)
        new = switch(cond, total, other) if x_first else switch(cond, other, total)
        if new.type.dtype != out.type.dtype or new.type.ndim != 0:
            return None
        return [new]
    return None


def _sigmoid_input(v):
    node = v.owner
    if node is not None and isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, Sigmoid):
        return node.inputs[0]
    return None


def sigmoid_bounds_check(fgraph, node):
    """``sigmoid(x) >= 0`` and ``sigmoid(x) <= 1`` (pymc's ``0 <= p <= 1`` check of a
    ``logit_p``) become ``~isnan(x)``.

    ``sigmoid(x) = 1 / (1 + exp(-x))`` lies in ``[0, 1]`` for every ``x`` but
    NaN, so both comparisons are exactly "``x`` is not NaN"; the check then no
    longer computes an ``exp`` per element (the sigmoid may still be needed
    elsewhere, e.g. by the gradient, where it is computed as before).
    """
    sop = getattr(node.op, "scalar_op", None)
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


# Position 48.5: after ``specialize`` (2) and ``add_mul_fusion`` (48), when pymc's
# checks have become switches (``local_check_parameter_to_ninf_switch``,
# canonicalize) and nothing re-runs canonicalize; before ``elemwise_fusion`` (49),
# so fusion sees the checks and the terms as one elementwise graph.
indexed_elemwise_pass.register(
    NodeRewritePass(sum_of_invariant_switch, Sum, PASS_NAME), 48.5, name="sum_of_invariant_switch"
)
indexed_elemwise_pass.register(NodeRewritePass(sigmoid_bounds_check, Elemwise, PASS_NAME), 48.5, name="sigmoid_bounds_check")
