"""``wide_split`` on wide Join, MakeVector and CheckAndRaise nodes.

A wide Join becomes writes into one preallocated buffer; a wide MakeVector
becomes one Elemwise on vectors when its scalars are the same 0-d op, else a
Join of chunk MakeVectors; a wide CheckAndRaise becomes a chain of the same
check over chunks of its conditions, in order, with the same message.
"""

from __future__ import annotations

from pmfast.compiler.arity import MAX_ARITY

from pmfast.passes.wide_chunks import CHUNK, Decline, balanced_chunks


def _join_buffer(tensors, axis: int, out_type):
    """``concatenate(tensors, axis)`` as set_subtensor writes into one empty buffer."""
    import pytensor.tensor as pt

    ndim = out_type.ndim
    lengths = []
    for t in tensors:
        s = t.type.shape[axis]
        lengths.append(int(s) if s is not None else t.shape[axis])
    other = []
    for d in range(ndim):
        if d == axis:
            other.append(None)
            continue
        dims = {t.type.shape[d] for t in tensors}
        if len(dims) != 1 or None in dims:
            raise Decline("non-axis dims not statically equal")
        other.append(int(dims.pop()))
    total = 0
    offsets = [0]
    for n in lengths:
        total = total + n
        offsets.append(total)
    shape = [total if d == axis else other[d] for d in range(ndim)]
    buf = pt.empty(shape, dtype=out_type.dtype)
    for t, start, stop in zip(tensors, offsets[:-1], offsets[1:], strict=True):
        if t.type.dtype != out_type.dtype:
            t = pt.cast(t, out_type.dtype)
        index = (slice(None),) * axis + (slice(start, stop),)
        buf = pt.set_subtensor(buf[index], t)
    return buf


def split_join(fgraph, node):
    """Join of > MAX_ARITY tensors → set_subtensor chain into one AllocEmpty buffer."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.basic import Join

    if not isinstance(node.op, Join) or len(node.inputs) <= MAX_ARITY:  # the axis counts: it is a call argument
        return None
    axis_var, *tensors = node.inputs
    if not isinstance(axis_var, Constant):
        return None
    out = node.outputs[0]
    ndim = out.type.ndim
    if ndim < 1 or any(t.type.ndim != ndim for t in tensors):
        return None
    axis = int(axis_var.data)
    if axis < 0:
        axis += ndim
    if not 0 <= axis < ndim:
        return None
    from pytensor.scalar import upcast

    if upcast(*[t.type.dtype for t in tensors]) != out.type.dtype:
        return None
    return [_join_buffer(tensors, axis, out.type)]


def split_make_vector(fgraph, node):
    """MakeVector of > MAX_ARITY scalars → Join of chunk MakeVectors (a buffer when still wide)."""
    import pytensor.tensor as pt
    from pytensor.tensor.basic import MakeVector

    if not isinstance(node.op, MakeVector) or len(node.inputs) <= MAX_ARITY:
        return None
    vectorized = vectorize_make_vector(fgraph, node)
    if vectorized is not None:
        return [vectorized]
    return [_chunked_make_vector(node.op, list(node.inputs))]


def _chunked_make_vector(op, scalars: list):
    """``op(*scalars)`` (a MakeVector) as a Join of ≤ CHUNK-wide MakeVectors when it is wider than MAX_ARITY."""
    import pytensor.tensor as pt

    if len(scalars) <= MAX_ARITY:
        return op(*scalars)
    chunks = balanced_chunks([1] * len(scalars))
    parts = [op(*[scalars[i] for i in c]) for c in chunks]
    out_type = op(*scalars[:1]).type.clone(shape=(len(scalars),))
    if len(parts) + 1 > MAX_ARITY:  # the Join's axis is a call argument too
        return _join_buffer(parts, 0, out_type)
    return pt.join(0, *parts)


def vectorize_make_vector(fgraph, node):
    """``MakeVector(f(a_1, b_1), …, f(a_n, b_n))`` → ``f(MakeVector(a_i…), MakeVector(b_i…))``.

    Every input is the only output of a 0-d Elemwise with the same op whose
    only client is this MakeVector (e.g. the n−1 ``Eq`` broadcast checks of n
    gathered terms). The Elemwise then runs once on vectors: n scalar nodes
    (n numba call lines) become one, plus the MakeVectors of its operands
    (chunked). An operand that is the same variable in every row is
    broadcast instead of repeated. Same scalar op on the same values: exact.
    """
    import pytensor.tensor as pt
    from pytensor.tensor.basic import MakeVector
    from pytensor.tensor.elemwise import Elemwise

    owners = [v.owner for v in node.inputs]
    if any(o is None for o in owners):
        return None
    op = owners[0].op
    if not isinstance(op, Elemwise) or op.destroy_map:
        return None
    arity = len(owners[0].inputs)
    for o, v in zip(owners, node.inputs, strict=True):
        if o.op != op or len(o.outputs) != 1 or len(o.inputs) != arity or v.type.ndim != 0:
            return None
        if any(client is not node for client, _ in fgraph.clients[v]):
            return None
    columns = []
    for j in range(arity):
        col = [o.inputs[j] for o in owners]
        t = col[0].type
        if t.ndim != 0 or any(c.type != t for c in col):
            return None
        if all(c is col[0] for c in col):
            columns.append(pt.shape_padleft(col[0]))
        else:
            columns.append(_chunked_make_vector(MakeVector(t.dtype), col))
    new = op(*columns)
    out = node.outputs[0]
    if new.type.dtype != out.type.dtype or new.type.ndim != 1:
        return None
    return new


def split_check_and_raise(fgraph, node):
    """CheckAndRaise with > MAX_ARITY conditions → a chain of the same check, chunk by chunk."""
    from pytensor.raise_op import CheckAndRaise

    if not isinstance(node.op, CheckAndRaise) or len(node.inputs) <= MAX_ARITY:
        return None
    value, *conds = node.inputs
    cur = value
    for c in balanced_chunks([1] * len(conds), CHUNK - 1):
        cur = node.op.make_node(cur, *[conds[i] for i in c]).outputs[0]
    return [cur]
