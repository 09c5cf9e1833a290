"""FunctionGraph's import of new nodes without copying the graph's variable set per import.

``FunctionGraph.import_node`` walks the nodes to import with
``toposort(apply_node.outputs, blockers=self.variables)``, and pytensor's ``toposort`` starts
with ``computed = set(blockers)``: a copy of every variable of the graph at every import (every
replacement a rewrite makes, every node a rewrite adds). The walk itself visits only the new
nodes, but the copy makes each import cost the size of the graph, so rewriting grows with the
graph's size times the number of changes: hier_var (8 groups) imports ~7,900 times into graphs
of several thousand variables during its graph stage.

:func:`toposort` is the same walk reading the blockers set in place, with a separate set for the
outputs of the nodes it has yielded. It yields the same nodes in the same order: the test
``v in computed`` of pytensor's walk becomes ``v in computed or v in blockers``, which differs
only if ``blockers`` changes during the walk. ``import_node`` itself adds to ``self.variables``,
between yields, the outputs of the node just yielded (in ``computed`` already) and its inputs
(in ``computed``, in the snapshot, or without an owner, which the walk never yields or enters
either way). Anything else added meanwhile would have to be imported by a feature's
``on_import`` callback while an import runs; pytensor's own walk would then import those nodes a
second time (duplicate clients), so no working graph depends on it.

Only ``fg.toposort`` (the name ``import_node`` calls) is replaced, compile-scoped
(:func:`pmfast.compiler.patching.scoped`); ``PMFAST_FG_IMPORT=0`` restores pytensor's inside
the compile too.
"""

from __future__ import annotations

import os

from pmfast.compiler.patching import scoped


def enabled() -> bool:
    """Whether imports read the blockers in place (``PMFAST_FG_IMPORT=0``: pytensor's copy)."""
    return os.environ.get("PMFAST_FG_IMPORT", "1") != "0"


def toposort(graphs, blockers=None):
    """``pytensor.graph.traversal.toposort`` with a ``set`` of blockers read in place, not copied."""
    computed = set()
    todo = list(graphs)
    while todo:
        cur = todo.pop()
        if cur in computed or cur in blockers:
            continue
        apply = cur.owner
        if apply is None:
            continue
        uncomputed = tuple(i for i in apply.inputs if i not in computed and i not in blockers and i.owner is not None)
        if uncomputed:
            todo.append(cur)
            todo.extend(uncomputed)
        else:
            yield apply
            computed.update(apply.outputs)


def install() -> None:
    """Replace the ``toposort`` that ``FunctionGraph.import_node`` calls inside pmfast's compile (idempotent)."""
    from pytensor.graph import fg

    original = fg.toposort
    if getattr(original, "_pmfast", False):
        return

    def walk(graphs, blockers=None):
        if enabled() and type(blockers) is set:
            return toposort(graphs, blockers)
        return original(graphs, blockers)

    fg.toposort = scoped(original, walk)
