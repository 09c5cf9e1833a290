"""``gather_lifting``: ``f(x[idx])`` computed on the short ``x`` first, then gathered.

A per-judge scale written the common way, ``exp(lj[judge])``, costs one ``exp`` per vote (60,000)
where ``exp`` over the 80 judges and a gather give the same values; its derivative
``exp(lj[judge])`` in the gradient likewise (the gradient's chain rule then runs on the short
array: the scatter carries ``g * exp(lj)[judge]``). This rewrite turns an ``Elemwise`` whose
inputs are all gathered through the same index vector (``AdvancedSubtensor1(x_k, idx)``), or
broadcast along the gathered axis (scalars, constants), into the ``Elemwise`` of the sources,
gathered: ``f(x1[idx], x2[idx], c) -> f(x1, x2, c)[idx]``. Chains lift one node at a time
(``exp(2 * x[idx])``: the ``mul``, then the ``exp``).

Decided from lengths known when compiling: every source must be shorter than the index (static
shapes; for ``pm.Data`` index arrays, the length of the data the model holds now — a later data
swap only changes what the rewrite saves, never a result). Unknown lengths: declined.

Why it is safe: the same scalar function sees the same values (``f(x)[i] == f(x[i])``
elementwise); the sources' lengths along the gathered axis must be provably equal (so ``f(x1,
x2)`` cannot raise where ``f(x1[idx], x2[idx])`` did not: same variable, equal static lengths,
or the ShapeFeature), their other axes are those of the gathered values; ``f`` evaluates the
elements that are never gathered too, so scalar ops that may raise (integer division) are
declined. An out-of-range index raises as before (the gather is kept, just moved).

Position 48.4: after ``specialize`` (2) and ``add_mul_fusion`` (48), so ``exp``, ``sigmoid``... are
in their final form; before ``elemwise_fusion`` (49), which would otherwise fuse ``f`` into the
per-row loop; before the parameter-check rewrite (48.5).
"""

from __future__ import annotations

import logging

import numpy as np
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.subtensor import AdvancedSubtensor1, advanced_subtensor1

from pmfast.loops.body import MAY_RAISE, _scalar_op_name
from pmfast.passes.registry import record, register_pass

_log = logging.getLogger(__name__)

PASS_NAME = "gather_lifting"


def known_length(v) -> int | None:
    """``len(v)`` as known when compiling: static, a constant's, or a shared variable's current value."""
    n = v.type.shape[0] if v.type.ndim else None
    if n is not None:
        return int(n)
    if isinstance(v, Constant):
        return int(np.shape(v.data)[0])
    if isinstance(v, SharedVariable):
        return int(np.shape(v.get_value(borrow=True))[0])
    return None


def _scalar_ops(op):
    inner = getattr(op.scalar_op, "fgraph", None)
    return [n.op for n in inner.apply_nodes] if inner is not None else [op.scalar_op]


def _equal_lengths(fgraph, a, b) -> bool:
    if a is b:
        return True
    sa, sb = a.type.shape[0], b.type.shape[0]
    if sa is not None and sa == sb:
        return True
    sf = getattr(fgraph, "shape_feature", None)
    try:
        return sf is not None and bool(sf.same_shape(a, b, 0, 0))
    except Exception:
        return False


def lift(fgraph, node):
    """The lifted replacement of ``node``'s outputs, or ``None``."""
    op = node.op
    if not isinstance(op, Elemwise) or op.inplace_pattern or node.outputs[0].type.ndim == 0:
        return None
    if any(_scalar_op_name(s) in MAY_RAISE for s in _scalar_ops(op)):
        return None
    idx, sources, args = None, [], []
    for inp in node.inputs:
        owner = inp.owner
        if owner is not None and isinstance(owner.op, AdvancedSubtensor1):
            x, i = owner.inputs
            if idx is None:
                idx = i
            elif i is not idx:
                return None
            sources.append(x)
            args.append(x)
        elif inp.type.broadcastable[0]:
            args.append(inp)  # broadcast along the gathered axis: the same for x and x[idx]
        else:
            return None
    if idx is None or idx.type.ndim != 1:
        return None
    n_idx = known_length(idx)
    n_src = [known_length(x) for x in sources]
    if n_idx is None or any(n is None or n >= n_idx for n in n_src):
        return None
    if any(not _equal_lengths(fgraph, sources[0], x) for x in sources[1:]):
        return None
    lifted = op.make_node(*args)
    outs = [advanced_subtensor1(o, idx) for o in lifted.outputs]
    if any(o.type.ndim != old.type.ndim or o.type.dtype != old.type.dtype for o, old in zip(outs, node.outputs)):
        return None
    # the gathered result has the index's length: restore the old static shapes, if any
    return [o if o.type == old.type else old.type.filter_variable(o) for o, old in zip(outs, node.outputs)]


@node_rewriter([Elemwise])
def lift_gathers(fgraph, node):
    """``f(x1[idx], x2[idx], c) -> f(x1, x2, c)[idx]`` when every ``x`` is shorter than ``idx``."""
    try:
        res = lift(fgraph, node)
        if res is not None:
            record(fgraph, PASS_NAME)
        return res
    except Exception:
        _log.debug("gather_lifting: declined %s", node, exc_info=True)
        return None


gather_lifting_pass = register_pass(PASS_NAME, "f(x[idx]) -> f(x)[idx] when x is shorter than idx")
gather_lifting_pass.register(in2out(lift_gathers, name="gather_lifting"), 48.4, name="lift")
