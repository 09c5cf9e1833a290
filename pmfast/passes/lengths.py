"""Axis lengths that are equal whenever a graph runs without error.

pytensor's ShapeFeature compares shape *expressions*; it cannot see that two
data vectors of unknown length must be equally long because an Elemwise
combines them (Elemwise refuses runtime broadcasting of non-broadcastable
axes, so it raises otherwise). Scatter fusion needs exactly that fact: the
gradient's ``inc_subtensor(zeros[group], g)`` may run inside ``g``'s loop only
if ``len(g) == len(group)``, and in a pymc model both come from ``pm.Data``
of unknown static length.

:class:`EqualLengths` is a union-find over ``(variable, axis)`` pairs built
from one walk of the graph, with one rule per op family:

* ``Elemwise``: every input not broadcastable on axis ``d`` and every output
  have the same length on ``d``;
* ``DimShuffle``: output axis ``k`` is input axis ``new_order[k]``;
* ops whose outputs have their first input's shape (``SpecifyShape``,
  ``Softmax``, ``LogSoftmax``, ``RowSoftmax``, ``SoftmaxGrad``'s second input,
  inc/set subtensors: the result has the buffer's shape);
* ``AdvancedSubtensor1`` (``x[idx]``): axis 0 is ``idx``'s, the others ``x``'s;
* ``Alloc``: output axis ``k`` is ``v.shape[d]`` when its shape argument is
  ``Shape_i{d}(v)`` (how the gradient allocates its zero buffers);
* ``IndexedElemwise``: the operands of each loop dim (its runtime checks) and
  its stored outputs; a scattered output has its buffer's shape.

Two axes with the same static length are equal too. Everything else is
unknown (``same`` answers ``False``: the caller declines).
"""

from __future__ import annotations

import functools

from pytensor.tensor.basic import Alloc, get_underlying_scalar_constant_value
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.shape import Shape, Shape_i, SpecifyShape
from pytensor.tensor.special import LogSoftmax, Softmax
from pytensor.tensor.subtensor import (
    AdvancedIncSubtensor,
    AdvancedIncSubtensor1,
    AdvancedSubtensor1,
    IncSubtensor,
    Subtensor,
)


@functools.cache
def _same_shape_ops():
    ops = [SpecifyShape, Softmax, LogSoftmax, AdvancedIncSubtensor1, AdvancedIncSubtensor, IncSubtensor]
    try:
        from pmfast.passes.softmax_rows import RowSoftmax

        ops.append(RowSoftmax)
    except ImportError:  # pragma: no cover
        pass
    return tuple(ops)


def _shape_source(s):
    """``(v, d)`` if the scalar ``s`` is ``v.shape[d]`` (``Shape_i`` or ``Shape`` indexed by a constant)."""
    node = s.owner
    if node is None:
        return None
    if isinstance(node.op, Shape_i):
        return node.inputs[0], node.op.i
    if isinstance(node.op, Subtensor) and node.inputs[0].owner is not None and isinstance(node.inputs[0].owner.op, Shape):
        try:
            (d,) = node.op.idx_list
            if isinstance(d, int):
                return node.inputs[0].owner.inputs[0], d
            i = get_underlying_scalar_constant_value(node.inputs[1])
            return node.inputs[0].owner.inputs[0], int(i)
        except Exception:
            return None
    return None


class EqualLengths:
    """Union-find of ``(variable, axis)`` pairs known equal in length at run time."""

    def __init__(self, fgraph=None):
        self._parent: dict = {}
        if fgraph is not None:
            for node in fgraph.toposort():
                self.add_node(node)

    def _find(self, key):
        parent = self._parent
        root = key
        while parent.get(root, root) != root:
            root = parent[root]
        while key != root:  # path compression
            parent[key], key = root, parent.get(key, key)
        return root

    def union(self, a, b) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self._parent[ra] = rb

    def add_node(self, node) -> None:
        op = node.op
        if isinstance(op, Elemwise):
            nd = node.outputs[0].type.ndim
            for d in range(nd):
                members = [(o, d) for o in node.outputs]
                members += [(i, d) for i in node.inputs if i.type.ndim == nd and not i.type.broadcastable[d]]
                for m in members[1:]:
                    self.union(members[0], m)
        elif isinstance(op, DimShuffle):
            (inp,), (out,) = node.inputs, node.outputs
            for k, src in enumerate(op.new_order):
                if src != "x":
                    self.union((out, k), (inp, src))
        elif isinstance(op, _same_shape_ops()):
            inp, out = node.inputs[0], node.outputs[0]
            if inp.type.ndim == out.type.ndim:
                for d in range(out.type.ndim):
                    self.union((out, d), (inp, d))
        elif isinstance(op, AdvancedSubtensor1):
            (out,), (x, idx) = node.outputs, node.inputs
            self.union((out, 0), (idx, 0))
            for d in range(1, out.type.ndim):
                self.union((out, d), (x, d))
        elif isinstance(op, Alloc):
            out = node.outputs[0]
            for k, s in enumerate(node.inputs[1:]):
                src = _shape_source(s)
                if src is not None and k < out.type.ndim:
                    self.union((out, k), src)
        elif hasattr(op, "loop") and hasattr(op.loop, "dim_operands"):  # IndexedElemwise
            self._add_loop(node)

    def _add_loop(self, node) -> None:
        """An ``IndexedElemwise``: its runtime checks tie the operands of each loop dim
        (and its stored outputs) together; a scattered output has its buffer's shape."""
        loop = node.op.loop
        for d in range(loop.ndim):
            members = [(node.inputs[p], ax) for p, ax in loop.dim_operands(d)]
            members += [(o, d) for o, w in zip(node.outputs, loop.writes) if w.mode == "store" and o.type.ndim > d]
            for m in members[1:]:
                self.union(members[0], m)
        for o, w in zip(node.outputs, loop.writes):
            if w.buffer is not None:
                for d in range(o.type.ndim):
                    self.union((o, d), (node.inputs[w.buffer], d))

    def same(self, a, a_axis: int, b, b_axis: int) -> bool:
        """Is ``a.shape[a_axis] == b.shape[b_axis]`` whenever the graph runs without error?"""
        sa, sb = a.type.shape[a_axis], b.type.shape[b_axis]
        if sa is not None and sa == sb:
            return True
        return self._find((a, a_axis)) == self._find((b, b_axis))
