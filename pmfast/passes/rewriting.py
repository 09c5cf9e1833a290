"""What every pmfast graph rewriter shares: validated replacements, declined on any failure."""

from __future__ import annotations

import logging

from pytensor.graph.features import ReplaceValidate
from pytensor.graph.rewriting.basic import GraphRewriter


class PassRewriter(GraphRewriter):
    """A ``GraphRewriter`` whose replacements are validated and never break compilation.

    Subclasses implement ``apply`` and hand each candidate to :meth:`attempt`.
    """

    #: recorded as the replacements' reason and used in the debug log
    reason = "pmfast"

    def add_requirements(self, fgraph):
        fgraph.attach_feature(ReplaceValidate())

    def attempt(self, fgraph, build, subject) -> bool:
        """Replace the ``(old, new)`` pairs ``build()`` returns; ``True`` if it did.

        Declined (``False``) if ``build`` returns nothing, a new type differs
        from the old, or anything raises (logged at debug level by the
        subclass's module logger).
        """
        try:
            pairs = build()
            if not pairs or any(old.type != new.type for old, new in pairs):
                return False
            fgraph.replace_all_validate(list(pairs), reason=self.reason)
            return True
        except Exception:
            logging.getLogger(type(self).__module__).debug("%s: declined %s", self.reason, subject, exc_info=True)
            return False


class NodeRewritePass(PassRewriter):
    """Apply ``rewrite(fgraph, node) -> [new outputs] | None`` to the nodes of a graph until none changes.

    Each round walks a snapshot of the toposort, offering every node whose op
    is an instance of ``op_types``; successful rewrites are counted as firings
    of ``pass_name`` (:func:`pmfast.passes.registry.record`). Rounds repeat
    while some rewrite applied (a rewrite's output may hold the pattern
    again, e.g. nested switches), at most ``max_rounds`` times. A pass that
    adds nodes by design (``adds_nodes``) reports the net count to
    :func:`record_nodes_added`.
    """

    def __init__(self, rewrite, op_types, pass_name: str, max_rounds: int = 8, adds_nodes: bool = False):
        super().__init__()
        self.rewrite = rewrite
        self.op_types = op_types
        self.pass_name = pass_name
        self.max_rounds = max_rounds
        self.adds_nodes = adds_nodes
        self.reason = f"pmfast.{pass_name}.{rewrite.__name__}"
        self.__name__ = rewrite.__name__

    def _pairs(self, fgraph, node):
        new = self.rewrite(fgraph, node)
        return None if new is None else list(zip(node.outputs, new, strict=True))

    def apply(self, fgraph):
        from pmfast.passes.registry import record

        total, before = 0, len(fgraph.apply_nodes)
        for _ in range(self.max_rounds):
            n = 0
            for node in list(fgraph.toposort()):
                if node in fgraph.apply_nodes and isinstance(node.op, self.op_types):
                    n += self.attempt(fgraph, lambda: self._pairs(fgraph, node), node)
            total += n
            if not n:
                break
        if total:
            record(fgraph, self.pass_name, total)
            if self.adds_nodes:
                record_nodes_added(fgraph, self.pass_name, len(fgraph.apply_nodes) - before)
        return total


def record_nodes_added(fgraph, pass_name: str, n: int) -> None:
    """Note that ``pass_name``'s replacements changed the graph's node count by ``n`` (read by :func:`nodes_added`)."""
    counts = fgraph.__dict__.setdefault("_pmfast_nodes_added", {})
    counts[pass_name] = counts.get(pass_name, 0) + n


def nodes_added(obj) -> dict[str, int]:
    """Net nodes each pass reported adding to a compiled function's (or FunctionGraph's) graph.

    Only passes that add nodes by design report (``wide_split``: narrow pieces
    instead of one wide node; ``indexed_elemwise``: the column views of an ``(n, 1)``
    Elemwise run as 1-d; ``affine_sums``: the 0-d Composite after a loop); a rewrite that
    merely adds nodes has no allowance.
    """
    fgraph = obj.maker.fgraph if hasattr(obj, "maker") else obj
    return dict(getattr(fgraph, "_pmfast_nodes_added", {}))
