"""A topological order of a graph with in-place nodes, kept as in-place changes add orderings.

pytensor's DestroyHandler orders every reader of a destroyed variable's tree (its view root and
all views of it) before the node destroying it, and rejects a change when those orderings close a
cycle. :class:`TopologicalOrder` keeps positions of the apply nodes that respect data edges and
these orderings, so that :mod:`pmfast.inplace_fast` can answer the cycle question locally: readers
placed before the destroyer add only forward edges; for the others, a search from the destroyer
bounded by the readers' positions finds a path (a cycle: pytensor rejects) or not (no cycle), and
the positions between are repaired (Pearce and Kelly's dynamic topological order: the nodes that
reach a reader move before the nodes the destroyer reaches, inside the slots they held).

Edges, as the DestroyHandler's orderings define them: ``X → client`` for each client of an output
of ``X``, and ``X → D`` when ``X`` reads a variable of a tree ``D`` destroys (``D`` not ``X``).
"""

from __future__ import annotations


def view_tree(handler, var) -> list:
    """``var``'s view root (end of its ``view_i`` chain) followed by every variable viewing it, transitively."""
    view_i, view_o = handler.view_i, handler.view_o
    root = var
    while root in view_i:
        root = view_i[root]
    tree = [root]
    k = 0
    while k < len(tree):
        tree.extend(view_o.get(tree[k], ()))
        k += 1
    return tree


def destroys(node, index: int) -> bool:
    """Whether ``node`` destroys its input at ``index``."""
    destroy_map = node.op.destroy_map
    return bool(destroy_map) and any(index in inputs for inputs in destroy_map.values())


class TopologicalOrder:
    """Positions of ``fgraph``'s apply nodes in an order respecting data edges and destroy orderings."""

    def __init__(self, fgraph):
        self.fgraph = fgraph
        self.pos = {node: k for k, node in enumerate(fgraph.toposort())}

    def rename(self, old, new) -> None:
        """``new`` takes ``old``'s place (a change that kept every edge, ``old`` renamed ``new``)."""
        self.pos[new] = self.pos.pop(old)

    def _tree_destroyer(self, var, cache: dict):
        """The node destroying a variable of ``var``'s tree, or ``None``."""
        handler, clients = self.fgraph.destroy_handler, self.fgraph.clients
        root = var
        while root in handler.view_i:
            root = handler.view_i[root]
        if root not in cache:
            cache[root] = next((n for t in view_tree(handler, root) for n, j in clients.get(t, ()) if destroys(n, j)), None)
        return cache[root]

    def successors(self, node, cache: dict):
        from pytensor.graph.fg import Output

        clients = self.fgraph.clients
        for out in node.outputs:
            for client, _ in clients.get(out, ()):
                if not isinstance(client.op, Output):
                    yield client
        for var in node.inputs:
            destroyer = self._tree_destroyer(var, cache)
            if destroyer is not None and destroyer is not node:
                yield destroyer

    def predecessors(self, node):
        handler, clients = self.fgraph.destroy_handler, self.fgraph.clients
        for var in node.inputs:
            if var.owner is not None:
                yield var.owner
        for outputs in node.op.destroy_map.values():
            for i in outputs:
                for t in view_tree(handler, node.inputs[i]):
                    for client, _ in clients.get(t, ()):
                        if client is not node:
                            yield client

    def add_before(self, readers, node) -> bool:
        """Order each of ``readers`` (all placed after ``node``) before ``node``; ``False``, changing
        nothing, when one is reachable from ``node`` (the orderings would close a cycle)."""
        pos = self.pos
        lower = pos[node]
        upper = max(pos[r] for r in readers)
        targets = set(readers)
        cache: dict = {}
        forward = {node}
        stack = [node]
        while stack:
            x = stack.pop()
            for y in self.successors(x, cache):
                if y in targets:
                    return False
                if y not in forward and pos[y] <= upper:
                    forward.add(y)
                    stack.append(y)
        backward = set(targets)
        stack = list(targets)
        while stack:
            x = stack.pop()
            for y in self.predecessors(x):
                if y not in backward and pos[y] > lower:
                    backward.add(y)
                    stack.append(y)
        slots = sorted(pos[n] for n in (*backward, *forward))
        ordered = sorted(backward, key=pos.__getitem__) + sorted(forward, key=pos.__getitem__)
        for n, slot in zip(ordered, slots, strict=True):
            pos[n] = slot
        return True
