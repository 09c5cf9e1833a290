"""Data-only outputs of a partly data-only scalar ``Composite`` split off into a node of their own.

Fusion merges 0-d ``Elemwise`` nodes into one multi-output ``Composite``, shape arithmetic on
``pm.Data`` (an ``Alloc``'s row count ``max(X.shape[0], 0)``) together with arithmetic on the
sampler's point. What that row count shapes (``pm.gp.HSGPPeriodic``'s cos/sin basis, 7,305 × 20
of each on gp_births_hsgp: 1.2 ms of a 1.4 ms gradient) then reads the point, so
:func:`pmfast.passes.data_hoist.hoist` could not compute it once per dataset.
:func:`split_scalar_composites` gives those outputs their own node on the compiled graph's copy
before hoisting looks for data-only subgraphs; ``hoist`` undoes it where nothing hoisted needs it.
"""

from __future__ import annotations

import logging


def _inner_inputs_of(composite) -> list[set]:
    """Per output of scalar ``composite``, the positions of the inner inputs it depends on."""
    from pytensor.graph.traversal import ancestors

    position = {v: k for k, v in enumerate(composite.fgraph.inputs)}
    return [{position[a] for a in ancestors([o]) if a in position} for o in composite.fgraph.outputs]


def _splittable(node, data) -> list[int]:
    """The outputs of a 0-d ``Elemwise(Composite)`` ``node`` that depend on its data inputs only, when
    others do not (fusion merged scalar shape arithmetic on data with arithmetic on the point)."""
    from pytensor.scalar.basic import Composite
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    if not (isinstance(op, Elemwise) and isinstance(op.scalar_op, Composite)):
        return []
    if any(v.type.ndim != 0 for v in (*node.inputs, *node.outputs)) or all(o in data for o in node.outputs):
        return []
    from pytensor.graph.basic import Constant

    is_data = {k for k, i in enumerate(node.inputs) if isinstance(i, Constant) or i in data}
    inner = op.scalar_op.fgraph
    return [
        k for k, needs in enumerate(_inner_inputs_of(op.scalar_op))
        if needs <= is_data and inner.outputs[k] not in inner.inputs
    ]


def split_scalar_composites(fgraph, data_region, reason: str = "data_hoist") -> list:
    """Give the data-only outputs of partly data-only 0-d composites (:func:`_splittable`) a node of
    their own in ``fgraph``, so that what they shape (an ``Alloc`` of an HSGP's periodic basis) is
    data too. ``data_region()`` returns the set of ``fgraph``'s variables computed from data only
    (the caller's notion of data; asked again after each split); replacements carry ``reason``.
    Returns the ``(old, new)`` output pairs replaced.

    Safe: the new node computes those outputs by the same inner graph from the same (data) inputs,
    out of place; the old node keeps computing the others, made not to overwrite those inputs in
    place. Only 0-d nodes are split, so no fused loop over arrays is broken up.
    """
    from pytensor.scalar.basic import Composite
    from pytensor.tensor.elemwise import Elemwise

    pairs = []
    while True:
        data = data_region()
        for node in fgraph.toposort():
            outs = [k for k in _splittable(node, data) if fgraph.clients[node.outputs[k]]]
            if outs:
                break
        else:
            return pairs
        inner = node.op.scalar_op.fgraph
        needed = sorted(set().union(*(_inner_inputs_of(node.op.scalar_op)[k] for k in outs)))
        pattern = {o: i for o, i in node.op.inplace_pattern.items() if i not in needed}
        if pattern != dict(node.op.inplace_pattern):  # it would overwrite an input the new node reads
            if type(node.op) is not Elemwise:
                return pairs
            rebuilt = Elemwise(node.op.scalar_op, pattern).make_node(*node.inputs)
            fgraph.replace_all(list(zip(node.outputs, rebuilt.outputs, strict=True)), reason=reason, import_missing=True)
            node = rebuilt
        try:
            composite = Composite([inner.inputs[i] for i in needed], [inner.outputs[k] for k in outs])
            new = Elemwise(composite).make_node(*[node.inputs[i] for i in needed])
        except Exception:  # an inner graph Composite cannot take: leave the rest as it is
            logging.getLogger(__name__).debug("data_hoist: cannot split %s", node, exc_info=True)
            return pairs
        for k, var in zip(outs, new.outputs, strict=True):
            pairs.append((node.outputs[k], var))
            fgraph.replace(node.outputs[k], var, reason=reason, import_missing=True)
