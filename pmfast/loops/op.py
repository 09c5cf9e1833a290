"""The :class:`IndexedElemwise` op: an Elemwise loop with gathered reads and scattered writes,
described by an :class:`~pmfast.loops.spec.IndexedLoop`.

The ``indexed_elemwise`` pass builds it (:mod:`pmfast.passes.indexed_matching`); its numba
implementation (:mod:`pmfast.loops.dispatch`) is imported at the bottom, so the funcify is
registered wherever the op exists.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.tensor.basic import as_tensor_variable

from pmfast.loops.spec import REDUCTIONS, STORE, IndexedLoop, evaluate


class IndexedElemwise(Op):
    """An Elemwise loop with gathered reads and scattered (inc/set) writes.

    ``loop`` is the :class:`~pmfast.loops.IndexedLoop` (node input/output
    positions); ``out_types`` the types of the node outputs, one per write.
    """

    __props__ = ("loop", "out_types")
    #: vector_math converts this loop's body to pmfast.vmath ops: codegen needs them to choose the
    #: chunked (vectorized) form, and maps them back to libm where the loop stays scalar
    vectorizes_scalar_body = True

    def __init__(self, loop: IndexedLoop, out_types):
        self.loop = loop
        self.out_types = tuple(out_types)
        if len(self.out_types) != len(loop.writes):
            raise ValueError("one output type per write")
        self.destroy_map = {
            k: [w.buffer] for k, w in enumerate(loop.writes) if w.buffer is not None and w.buffer in loop.inplace
        }

    def make_node(self, *inputs):
        inputs = [as_tensor_variable(i) for i in inputs]
        loop = self.loop
        if len(inputs) != loop.n_inputs:
            raise TypeError(f"IndexedElemwise expects {loop.n_inputs} inputs, got {len(inputs)}")
        for array, axes in loop.accesses():
            if inputs[array].type.ndim != len(axes):
                raise TypeError(f"IndexedElemwise addresses ${array} with {len(axes)} axes")
        for _, _, g in loop.gathered():
            t = inputs[g.index].type
            if t.ndim != len(g.dims) or np.dtype(t.dtype).kind not in "iu":
                raise TypeError(f"IndexedElemwise index ${g.index} must be an integer array of ndim {len(g.dims)}")
        return Apply(self, inputs, [t() for t in self.out_types])

    def perform(self, node, inputs, output_storage):
        outs = evaluate(self.loop, inputs, [t.dtype for t in self.out_types])
        for k, (w, out) in enumerate(zip(self.loop.writes, outs)):
            if w.buffer is not None and w.buffer in self.loop.inplace:
                buf = inputs[w.buffer]
                buf[...] = out
                out = buf
            output_storage[k][0] = out

    def infer_shape(self, fgraph, node, shapes):
        from pytensor.tensor.basic import constant

        from pytensor.tensor.extra_ops import broadcast_shape_iter

        loop = self.loop
        shape = []
        for d in range(loop.ndim):
            src = loop.dim_source(d)
            loose = [(shapes[p][ax],) for g in loop.loose_groups(d) for p, ax in g]
            if src is not None:
                shape.append(shapes[src[0]][src[1]])
            elif loose:
                shape.append(broadcast_shape_iter(loose, arrays_are_shapes=True)[0])
            else:
                shape.append(constant(1, dtype="int64"))
        out = []
        for w in loop.writes:
            if w.mode == STORE:
                out.append(tuple(shape))
            elif w.mode in REDUCTIONS:
                out.append(())
            else:
                out.append(tuple(shapes[w.buffer]))
        return out

    def clone_inplace(self, buffers) -> IndexedElemwise:
        loop = replace(self.loop, inplace=tuple(sorted(set(self.loop.inplace) | set(buffers))))
        return IndexedElemwise(loop, self.out_types)

    def __str__(self) -> str:
        return f"IndexedElemwise{{{self.loop.short()}}}"

