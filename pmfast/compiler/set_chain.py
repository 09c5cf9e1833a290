"""An entry output assembled by a chain of ``set_subtensor`` into an empty vector, written piece by piece.

pmfast's ``wide_joins`` pass turns nutpie's wide gradient ``Join`` into ``x = AllocEmpty(n)`` followed by
``x = set_subtensor(x[a:b], piece)`` per free variable (hier_var, 16 groups: 86 such statements). The
entry drops a ``Join`` output and writes its pieces into the caller's buffer
(:func:`pmfast.compiler.entry_spec._join_pieces`); :func:`chain_pieces` finds the chain's pieces so the
entry does the same: no buffer, no chain statements to compile, each piece copied once.

Only in a big graph's entry (:mod:`pmfast.linker`'s ``optnone`` graphs), which is never cut into parts
(:mod:`pmfast.compiler.parts`): every piece would cross every cut. Safe when the chain writes exactly the vector the caller receives: a 1-d ``AllocEmpty`` of constant
length ``n`` whose value is read only by the first link, each link's result read only by the next (the
last only as the graph output), each link a ``set_subtensor`` of a constant slice ``[a:b]`` (step 1)
with a 1-d value of static length ``b - a`` (stock raises or broadcasts otherwise: declined), the slices
covering ``[0, n)`` without overlap (so every element is set once, and the empty buffer's contents are
never read), and no value read by a link overwritten later by an in-place node (the pieces are read
after the whole body instead of at their link: pytensor's destroy orderings name every such overwrite).
``PMFAST_SET_CHAIN=0`` keeps the chain.
"""

from __future__ import annotations

import ast
import os


def enabled() -> bool:
    """``PMFAST_SET_CHAIN=0``: a chain of ``set_subtensor`` output stays in the entry's body."""
    return os.environ.get("PMFAST_SET_CHAIN", "1") != "0"


def _const_slice(node):
    """``(a, b)`` of a ``set_subtensor(x[a:b], y)`` node with constant non-negative bounds, or None."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.subtensor import IncSubtensor, indices_from_subtensor

    op = node.op
    if type(op) is not IncSubtensor or not op.set_instead_of_inc or len(op.idx_list) != 1:
        return None
    (idx,) = indices_from_subtensor(node.inputs[2:], op.idx_list)
    if not isinstance(idx, slice) or idx.step is not None:
        return None
    bounds = []
    for v, default in ((idx.start, 0), (idx.stop, None)):
        if v is None:
            bounds.append(default)
        elif isinstance(v, Constant) and v.data.ndim == 0 and v.data.dtype.kind in "iu":
            bounds.append(int(v.data))
        else:
            return None
    a, b = bounds
    if b is None or a < 0 or b <= a:
        return None
    return a, b


def chain_pieces(fgraph, output, stmts, nodes) -> tuple[list[str], list[int]] | None:
    """``(pieces, dropped)`` for graph output ``output`` built by a ``set_subtensor`` chain (module
    docstring): the pieces' names in slice order and the statement indices (into ``stmts``, aligned with
    ``nodes``) of the chain and its ``AllocEmpty``; None if it isn't one."""
    from pytensor.graph.basic import Constant
    from pytensor.graph.fg import Output
    from pytensor.tensor.basic import AllocEmpty

    from pmfast.linker import call_args

    if not enabled() or output.ndim != 1 or not nodes or len(nodes) != len(stmts):
        return None
    index = {n: i for i, n in enumerate(nodes)}
    clients = fgraph.clients
    if any(not isinstance(c.op, Output) for c, _ in clients[output]):
        return None
    links, var = [], output
    while var.owner is not None and _const_slice(var.owner) is not None:
        links.append(var.owner)
        var = var.owner.inputs[0]
        if [c for c, _ in clients[var]] != [links[-1]]:
            return None
    alloc = var.owner
    if not links or alloc is None or not isinstance(alloc.op, AllocEmpty) or var.ndim != 1:
        return None
    (length,) = alloc.inputs
    if not isinstance(length, Constant) or length.data.ndim != 0:
        return None
    n = int(length.data)
    spans = []
    for node in links:
        a, b = _const_slice(node)
        value = node.inputs[1]
        if value.ndim != 1 or value.type.shape[0] != b - a or value.dtype != output.dtype:
            return None
        spans.append((a, b, node))
    spans.sort(key=lambda s: s[0])
    at = 0
    for a, b, _ in spans:
        if a != at:
            return None
        at = b
    if at != n or any(node not in index for node in (*links, alloc)):
        return None
    chain = set(links)
    try:
        orderings = fgraph.orderings()
    except Exception:
        return None
    for after, before in orderings.items():
        if after not in chain and chain.intersection(before):
            return None  # a value a link reads is overwritten later
    pieces = []
    for _, _, node in spans:
        stmt = stmts[index[node]]
        if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
            return None
        args = call_args(stmt.value)
        if args is None or len(args) != len(node.inputs) or not isinstance(args[1], ast.Name):
            return None
        pieces.append(args[1].id)
    return pieces, sorted(index[node] for node in (*links, alloc))
