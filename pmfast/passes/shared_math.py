"""``shared_math``: the sigmoid/softplus family of ``x`` and ``-x`` from one ``exp(-|x|)``.

A Bernoulli-logit likelihood and its gradient evaluate, per element, ``softplus(±d)`` (the
logp), ``sigmoid(d)`` and ``sigmoid(-d)`` (the gradient): stock numba computes each with its
own ``exp`` (and ``log1p``). All of them are functions of ``e = exp(-|d|)``::

    softplus(a) = max(a, 0) + log1p(e)
    sigmoid(a)  = (1 if a >= 0 else e) / (1 + e)

for every ``a`` with ``|a| = |d|``. This rewrite finds, inside each ``Composite`` (the fused
scalar graphs that ``indexed_elemwise`` turns into loop bodies, and the stock Elemwise loops
alike), the ``Sigmoid`` / ``Softplus`` nodes whose arguments have the same magnitude —
``d``, ``-d``, ``-1 * d``, ``switch(y, -d, d)``, ``a - b`` and ``b - a``, ``mul(-1, u, v)`` and
``mul(u, v)`` — and, where at least two share one, computes ``|d|``, ``e``, ``1 + e`` and
``log1p(e)`` once and every member from them (selects, no branches).

Why it is safe: the magnitudes are equal bit for bit (negation, a select between ``x`` and
``-x``, swapping the operands of a subtraction, and multiplying by ``-1`` are exact, and
products are matched only with the same one or two non-constant factors in the same order).
For ``a >= 0`` the sigmoid is computed exactly as stock computes it (``1 / (1 + exp(-a))``);
for ``a < 0`` as ``e / (1 + e)``, each correctly rounded step away from stock's
``1 / (1 + exp(-a))``: within 2 ulp. ``softplus``: where stock uses ``log1p(exp(a))``
(``-37 <= a < 18``) the value is the same expression; beyond, stock's ``exp(a)``, ``a + exp(-a)``
and ``a`` differ from ``log1p`` of a tiny ``e`` by less than half an ulp of the result.
inf and nan behave as stock (``e = 0`` at ``±inf``; nan propagates). Only float64 members are
rewritten.

Position 49.19: after ``elemwise_fusion`` (49), ``wide_split`` (49.15) and the sibling merge
(49.18), so each Composite holds every member it will ever hold; before ``indexed_elemwise``'s
loop fusion (49.2), whose loop bodies are these Composites.
"""

from __future__ import annotations

import logging

import numpy as np
import pytensor.scalar as ps
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar.basic import Composite
from pytensor.scalar.math import Sigmoid, Softplus
from pytensor.tensor.elemwise import Elemwise

from pmfast.passes.registry import record, register_pass
from pmfast.passes.rewriting import PassRewriter

_log = logging.getLogger(__name__)

PASS_NAME = "shared_math"

#: Scalar ops of the family, rewritten from one ``exp(-|x|)``.
FAMILY = (Sigmoid, Softplus)


def _const_value(v):
    if isinstance(v, Constant):
        try:
            return float(np.asarray(v.data))
        except (TypeError, ValueError):
            return None
    return None


def magnitude_key(v):
    """A hashable key such that two variables with equal keys have bit-identical absolute values.

    ``-u``, ``-1 * u`` and ``switch(c, -u, u)`` share ``u``'s key; ``a - b`` and ``b - a`` share
    one; ``mul(-1, u, v)`` and ``mul(u, v)`` share one (same factors, same order: a product of
    three or more factors may round differently when reordered, so at most two are allowed).
    """
    node = v.owner
    if node is None:
        return v
    op = node.op
    if isinstance(op, ps.Neg):
        return magnitude_key(node.inputs[0])
    if isinstance(op, ps.Mul):
        # |u * v| == |u| * |v| bit for bit (negation is exact); more factors may round differently
        # when reordered, so a product of three or more non-unit factors is its own key
        factors = [i for i in node.inputs if _const_value(i) not in (1.0, -1.0)]
        if len(factors) == 1 and factors[0].type == v.type:
            return magnitude_key(factors[0])
        return ("mul", tuple(magnitude_key(f) for f in factors)) if len(factors) == 2 else v
    if isinstance(op, ps.Switch):
        a, b = magnitude_key(node.inputs[1]), magnitude_key(node.inputs[2])
        return a if a == b else v
    if isinstance(op, ps.Sub):
        a, b = node.inputs
        return ("sub", frozenset((a, b))) if a is not b else v
    return v


def _f64(x):
    return ps.constant(np.float64(x))


def share_transcendentals(fgraph: FunctionGraph):
    """Rewrite the sigmoid/softplus families of the scalar graph ``fgraph`` (on a clone).

    Returns ``(fgraph, n)``: ``n`` the number of members rewritten (0: ``fgraph`` itself).
    """
    families: dict = {}
    for node in fgraph.toposort():
        if isinstance(node.op, FAMILY):
            (a,) = node.inputs
            if a.type.dtype == "float64" and node.outputs[0].type.dtype == "float64":
                families.setdefault(magnitude_key(a), []).append(node)
    groups = [nodes for nodes in families.values() if len(nodes) >= 2]
    if not groups:
        return fgraph, 0
    fg, equiv = fgraph.clone_get_equiv()
    n = 0
    replacements = []
    for nodes in groups:
        nodes = [equiv[nd] for nd in nodes]
        m = ps.abs(nodes[0].inputs[0])
        e = ps.exp(ps.neg(m))
        den = ps.add(_f64(1.0), e)
        l1p = None
        for nd in nodes:
            (a,) = nd.inputs
            if isinstance(nd.op, Sigmoid):
                new = ps.true_div(ps.switch(ps.ge(a, _f64(0.0)), _f64(1.0), e), den)
            else:
                if l1p is None:
                    l1p = ps.log1p(e)
                new = ps.add(ps.maximum(a, _f64(0.0)), l1p)
            replacements.append((nd.outputs[0], new))
            n += 1
    fg.replace_all(replacements, reason=PASS_NAME)
    return fg, n


def shared_composite(scalar_op):
    """A ``Composite`` equal to ``scalar_op`` with its transcendental families shared, or ``None``."""
    if not isinstance(scalar_op, Composite):
        return None
    fg, n = share_transcendentals(scalar_op.fgraph)
    if not n:
        return None
    return Composite(list(fg.inputs), list(fg.outputs)), n


class SharedMath(PassRewriter):
    """Graph rewriter: every ``Elemwise`` of a ``Composite`` gets :func:`share_transcendentals`."""

    reason = PASS_NAME

    def apply(self, fgraph):
        n = 0
        for node in list(fgraph.toposort()):
            if node not in fgraph.apply_nodes or not isinstance(node.op, Elemwise) or node.op.inplace_pattern:
                continue

            def build(node=node):
                res = shared_composite(node.op.scalar_op)
                if res is None:
                    return None
                new = Elemwise(res[0]).make_node(*node.inputs)
                return list(zip(node.outputs, new.outputs))

            n += self.attempt(fgraph, build, node)
        if n:
            record(fgraph, PASS_NAME, n)


shared_math_pass = register_pass(
    PASS_NAME, "sigmoid/softplus of x and -x inside one Composite from one exp(-|x|)"
)
shared_math_pass.register(SharedMath(), 49.19, name="families")
