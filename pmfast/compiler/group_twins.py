"""The in-place copy of a repeated statement, called through its copies' node function.

A hierarchical model's groups often read one shared buffer (a zero ``Alloc`` every group's gradient is
scattered into): pytensor lets the last reader destroy it, so one copy of the group calls an in-place
node function and the others a plain one, and :mod:`pmfast.compiler.entry_groups` could not make that
copy one call like the others (hier_var, 16 groups: 4 of 16 copies left out of the main group, their
statements inline or in groups of their own). :func:`twins` finds, for an in-place statement, a
statement whose op is the same op without its in-place flags (same input and output types); the
grouping calls that twin's node function instead, when it makes the statement part of a group.

Safe: the twin computes the same values into a new array instead of the destroyed input, and
destroys nothing, so the destroy orderings pytensor added for the in-place statement (readers of its
buffer first) are no longer needed; they are dropped for the statements that call their twin and
kept for every other (:func:`pmfast.compiler.entry_groups.plan` schedules with them). Only where the
in-place statements of an op are fewer than its plain ones (one extra buffer copy per call each).
``PMFAST_GROUP_TWINS=0``: each statement keeps its own node function.
"""

from __future__ import annotations

import os
from dataclasses import replace


def enabled() -> bool:
    """``PMFAST_GROUP_TWINS=0``: no statement calls its twin."""
    return os.environ.get("PMFAST_GROUP_TWINS", "1") != "0"


def _plain(op):
    """``op`` without its in-place flags, or None (not an op known here)."""
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedIncSubtensor1, IncSubtensor

    from pmfast.loops.op import IndexedElemwise

    if isinstance(op, IndexedElemwise):
        return IndexedElemwise(replace(op.loop, inplace=()), op.out_types)
    if type(op) is Elemwise:
        return Elemwise(op.scalar_op)
    if type(op) in (IncSubtensor, AdvancedIncSubtensor1, AdvancedIncSubtensor):
        return type(op)(**{**op._props_dict(), "inplace": False})
    return None


def _signature(node):
    return tuple(i.type for i in node.inputs), tuple(o.type for o in node.outputs)


def twins(stmts, nodes) -> dict[int, str]:
    """``{statement index: callee name of its plain twin}`` (``stmts``: the parsed statements, aligned
    with their graph ``nodes``)."""
    if not enabled() or len(stmts) != len(nodes):
        return {}
    plain: dict = {}
    inplace: dict = {}
    for i, (st, node) in enumerate(zip(stmts, nodes)):
        if st.fn is None:
            continue
        try:
            plain_op = _plain(node.op)
            key = (plain_op, _signature(node)) if plain_op is not None else None
            hash(key)
        except Exception:
            continue
        if key is None:
            continue
        (inplace if node.op.destroy_map else plain).setdefault(key, []).append(i)
    out = {}
    for key, members in inplace.items():
        twin = plain.get(key)
        if twin and len(members) < len(twin):
            for i in members:
                out[i] = stmts[twin[0]].fn
    return out
