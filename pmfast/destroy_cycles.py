"""DestroyHandler's cycle check over apply nodes only, not over every variable and apply node.

Once a graph holds an in-place node, pytensor's ``DestroyHandler.validate`` runs
``_contains_cycle(fgraph, orderings)`` after every candidate change (each in-place rewrite it
tries): Kahn's algorithm over ``fgraph.variables`` plus ``fgraph.apply_nodes``, with edges owner
→ variable, input → client node and ordering parent → node; a cycle is any vertex left
unvisited. On hier_var (8 groups) that was ~519 calls and ~7% of the graph stage.

:func:`contains_cycle` answers the same question on the apply nodes alone. A variable has at
most one parent (its owner), so every cycle through a variable runs owner → variable → client
node, and contracting variables into edges owner → client keeps exactly the cycles; a vertex
pytensor could never visit because a parent is missing from the graph (a variable whose owner is
not an apply node of the graph, an input or ordering parent that is not in the graph) makes its
answer ``True`` whatever else holds, and is answered ``True`` here before the traversal. So the
answer is pytensor's for every graph and every orderings dict; only the bookkeeping is smaller
(no per-variable entries, one pass over the inputs).

Compile-scoped (:func:`pmfast.compiler.patching.scoped`); ``PMFAST_CYCLE_CHECK=0`` restores
pytensor's function inside the compile too.
"""

from __future__ import annotations

import os

from pmfast.compiler.patching import scoped


def enabled() -> bool:
    """Whether the apply-node check is used (``PMFAST_CYCLE_CHECK=0``: pytensor's)."""
    return os.environ.get("PMFAST_CYCLE_CHECK", "1") != "0"


def contains_cycle(fgraph, orderings) -> bool:
    """``pytensor.graph.destroyhandler._contains_cycle`` on apply nodes only (see the module docstring)."""
    from pytensor.graph.basic import Apply, Variable

    nodes = fgraph.apply_nodes
    variables = fgraph.variables
    for var in variables:
        owner = var.owner
        if owner is not None and owner not in nodes:
            return True
    counts = {}
    children: dict = {}
    ready = []
    for node in nodes:
        n = 0
        for var in node.inputs:
            if var not in variables:
                return True
            owner = var.owner
            if owner is not None:
                children.setdefault(owner, []).append(node)
                n += 1
        for parent in orderings.get(node, ()):
            if isinstance(parent, Apply):
                if parent not in nodes:
                    return True
                children.setdefault(parent, []).append(node)
                n += 1
            elif isinstance(parent, Variable) and parent in variables:
                if parent.owner is not None:
                    children.setdefault(parent.owner, []).append(node)
                    n += 1
            else:
                return True
        counts[node] = n
        if not n:
            ready.append(node)
    visited = 0
    while ready:
        node = ready.pop()
        visited += 1
        for child in children.get(node, ()):
            counts[child] -= 1
            if not counts[child]:
                ready.append(child)
    return visited != len(counts)


def install() -> None:
    """Replace ``destroyhandler._contains_cycle`` inside pmfast's compile (idempotent)."""
    from pytensor.graph import destroyhandler

    original = destroyhandler._contains_cycle
    if getattr(original, "_pmfast", False):
        return

    def check(fgraph, orderings):
        if not enabled():
            return original(fgraph, orderings)
        return contains_cycle(fgraph, orderings)

    destroyhandler._contains_cycle = scoped(original, check)
