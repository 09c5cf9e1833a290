"""How ``wide_split`` cuts a wide node: operand weights, balanced chunks and trees, the decline signal."""

from __future__ import annotations

import math

#: Most (weighted) inputs of a node built by this pass: 30 minus 6 of headroom
#: for the index/buffer inputs that indexed fusion may add to a chunk later.
CHUNK = 24


def input_weight(var) -> int:
    """Outer inputs ``var`` may cost a fused loop: 1, or 1 + index arrays for a gather."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.subtensor import AdvancedSubtensor, AdvancedSubtensor1

    owner = var.owner
    if owner is not None and isinstance(owner.op, AdvancedSubtensor1 | AdvancedSubtensor):
        idx = [i for i in owner.inputs[1:] if not isinstance(i, Constant) and getattr(i.type, "ndim", 0) > 0]
        return 1 + len(idx)
    return 1


def balanced_chunks(weights: list[int], limit: int = CHUNK) -> list[list[int]]:
    """Split positions ``0..len(weights)-1`` into contiguous chunks of total weight ≤ ``limit``.

    The number of chunks is the smallest that the total weight allows, and the
    per-chunk target is the average, so chunks come out as equal as possible
    (sibling nodes then share a numba signature). A single item heavier than
    ``limit`` gets a chunk of its own.
    """
    total = sum(weights)
    if not weights:
        return []
    n_chunks = max(1, math.ceil(total / limit))
    target = math.ceil(total / n_chunks)
    chunks: list[list[int]] = [[]]
    acc = 0
    for i, w in enumerate(weights):
        if chunks[-1] and (acc + w > target or acc + w > limit):
            chunks.append([])
            acc = 0
        chunks[-1].append(i)
        acc += w
    return chunks


def balanced_tree(operands: list, weights: list[int], combine, limit: int = CHUNK):
    """Reduce ``operands`` with ``combine(list) -> var`` as a balanced tree of ≤ ``limit`` weight per node.

    Returns the root variable; the root itself is one ``combine`` call over
    at most ``limit`` (weighted) operands. Terminates: every level with total
    weight above ``limit`` has fewer items than the previous one, or turns all
    weights into 1 (after which each level shrinks by a factor ``limit``).
    """
    level, w = list(operands), list(weights)
    for _ in range(64):
        if sum(w) <= limit:
            return combine(level)
        chunks = balanced_chunks(w, limit)
        nxt = []
        for chunk in chunks:
            items = [level[i] for i in chunk]
            nxt.append(items[0] if len(items) == 1 else combine(items))
        if len(nxt) >= len(level) and all(x == 1 for x in w):
            raise Decline("no progress")
        level, w = nxt, [1] * len(nxt)
    raise Decline("too deep")


class Decline(Exception):
    """Raised by a splitter that finds it cannot rewrite a node safely: the node stays as it is."""


def is_assoc(scalar_op) -> bool:
    """Whether ``scalar_op`` is a scalar Add or Mul (the associative ops this pass splits)."""
    import pytensor.scalar as ps

    return type(scalar_op) in (ps.Add, ps.Mul)
