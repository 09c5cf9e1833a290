"""pytensor's ``local_subtensor_merge`` with narrow constant indices as int64, so ``x[a:b][i]`` merges.

pytensor builds a tensor index such as ``pt.as_tensor(0)`` (or pymc's ``x[..., 0]``
on a graph) as an int8 constant. Under NumPy 2's promotion rules, pytensor
2.38.3's ``local_subtensor_merge`` computes ``stop - 1 - i * step`` with ``i`` an
``np.int8`` and ``stop`` a Python int; for a slice stopping past 128 that raises
``OverflowError``: the merge is skipped and pytensor logs the traceback, on
every compile. A ``pm.GaussianRandomWalk`` of 2,000 steps (zoo ``stoch_vol``)
logs eight, in stock nutpie too, and keeps a Subtensor of a Subtensor.

The pass stands in for the stock rewrite (``Pass.replaces``: a mode that selects
it excludes ``local_subtensor_merge``). It matches what the stock rewrite
matches, a ``Subtensor`` of a ``Subtensor``; when an index input is an integer
constant narrower than int64 (directly or behind ``ScalarFromTensor``), the
node is first rebuilt with the int64 constant of the same value, then merged
by pytensor's own code. It runs inside ``canonicalize`` and ``specialize``, where
the stock rewrite runs, because the chains form there (a Reshape between the
two Subtensors is removed by canonicalize).

Registered there, it comes after every stock rewrite of those databases, and so
after ``local_subtensor_remove_broadcastable_index``, which stock tries after the
merge: on ``x[1::-1][0]`` with ``x`` of static length 1 that rewrite made a
Squeeze of the slice, which pytensor 2.38.3's ``local_dimshuffle_subtensor``
turns into ``x[1]`` (an IndexError where numpy gives ``x[0]``; stock never gets
there, the merge comes first). The pass therefore stands in for that rewrite too
and calls it right after its own merge, the stock order.

Why it is safe: a basic index's meaning is its value; the value is unchanged
and fits int64, and the output type does not depend on index dtypes. The merge
itself is pytensor's.
"""

from __future__ import annotations

import numpy as np
import pytensor.scalar as ps
from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.tensor.basic import ScalarFromTensor
from pytensor.tensor.rewriting.subtensor import local_subtensor_merge, local_subtensor_remove_broadcastable_index
from pytensor.tensor.subtensor import Subtensor

from pmfast.passes.registry import record, register_pass

PASS_NAME = "index_dtypes"


def _narrow_constant(var) -> int | None:
    """``var``'s value if it is an integer constant (maybe behind ``ScalarFromTensor``) narrower than int64."""
    if var.owner is not None and isinstance(var.owner.op, ScalarFromTensor):
        var = var.owner.inputs[0]
    if not isinstance(var, Constant):
        return None
    dtype = np.dtype(var.type.dtype)
    if dtype.kind not in "iu" or dtype.itemsize == 8:
        return None
    return int(np.asarray(var.data))


def _with_int64(entry, narrow):
    """``idx_list`` entry with the types of the positions flagged by ``narrow`` (an iterator) as int64."""
    if isinstance(entry, slice):
        return slice(*(None if e is None else _with_int64(e, narrow) for e in (entry.start, entry.stop, entry.step)))
    return ps.int64 if next(narrow) else entry


def widened(node):
    """``node`` (a Subtensor) rebuilt with its narrow constant indices as int64, or ``None`` if it has none."""
    values = [_narrow_constant(v) for v in node.inputs[1:]]
    if all(v is None for v in values):
        return None
    flags = iter([v is not None for v in values])
    idx_list = tuple(_with_int64(e, flags) for e in node.op.idx_list)
    inputs = [v if value is None else ps.constant(value, dtype="int64") for v, value in zip(node.inputs[1:], values)]
    return Subtensor(idx_list)(node.inputs[0], *inputs).owner


@node_rewriter([Subtensor])
def merge_subtensors(fgraph, node):
    """``x[s1][s2]`` → ``x[s1 ∘ s2]``: pytensor's ``local_subtensor_merge``, on the node with its
    narrow constant indices widened to int64 first."""
    inner = node.inputs[0].owner
    if inner is None or not isinstance(inner.op, Subtensor):
        return None
    wide = widened(node)
    merged = local_subtensor_merge.transform(fgraph, node if wide is None else wide)
    if merged and wide is not None:
        record(fgraph, PASS_NAME)
    return merged


@node_rewriter([Subtensor])
def remove_broadcastable_index(fgraph, node):
    """pytensor's ``local_subtensor_remove_broadcastable_index``, tried after :func:`merge_subtensors` as stock
    tries it after its merge (see the module docstring)."""
    return local_subtensor_remove_broadcastable_index.transform(fgraph, node)


index_dtypes_pass = register_pass(PASS_NAME, "x[a:b][i] merged with int64 indices (pytensor's merge overflows on int8 ones)")
index_dtypes_pass.replaces = ("local_subtensor_merge", "local_subtensor_remove_broadcastable_index")
for _database in ("canonicalize", "specialize"):
    index_dtypes_pass.register_in(_database, merge_subtensors, name=f"merge_subtensors_{_database}")
    index_dtypes_pass.register_in(_database, remove_broadcastable_index, name=f"remove_broadcastable_index_{_database}")
