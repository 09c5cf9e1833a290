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


def aliased(node, i: int, members) -> bool:
    """DestroyHandler's input aliasing rule: ``node`` destroying input ``i`` reads the same tree
    (``members``) at another input, not excused by the op's ``destroyhandler_tolerate_same`` (the
    same variable) or ``destroyhandler_tolerate_aliased`` (any alias) pairs."""
    op = node.op
    tolerated = {b for a, b in getattr(op, "destroyhandler_tolerate_same", []) if a == i} | {i}
    ignored = {b for a, b in getattr(op, "destroyhandler_tolerate_aliased", []) if a == i}
    v = node.inputs[i]
    return any(
        j not in ignored and inp in members and (j not in tolerated or inp is not v) for j, inp in enumerate(node.inputs)
    )


class TopologicalOrder:
    """Positions of ``fgraph``'s apply nodes in an order respecting data edges and destroy orderings."""

    def __init__(self, fgraph):
        self.fgraph = fgraph
        self.pos = {node: k for k, node in enumerate(fgraph.toposort())}
        #: view root -> the node destroying its tree (or None), filled on demand
        self.destroyer: dict = {}

    def rename(self, old, new) -> None:
        """``new`` takes ``old``'s place (a change that kept every edge, ``old`` renamed ``new``)."""
        self.pos[new] = self.pos.pop(old)

    def destroyed_roots(self, node) -> list:
        """The view roots of the inputs ``node`` destroys."""
        handler = self.fgraph.destroy_handler
        return [view_tree(handler, node.inputs[i])[0] for inputs in node.op.destroy_map.values() for i in inputs]

    def accepted(self, new) -> None:
        """``new`` now destroys its trees (a change :func:`~pmfast.inplace_fast.judge` took, or is
        about to take: a search must not meet the node ``new`` replaced as a destroyer)."""
        for root in self.destroyed_roots(new):
            self.destroyer[root] = new

    def refused(self, new) -> None:
        """A change making ``new`` destroy its trees is about to be reverted: forget what was learnt of them."""
        for root in self.destroyed_roots(new):
            self.destroyer.pop(root, None)

    def _tree_destroyer(self, var):
        """The node destroying a variable of ``var``'s tree, or ``None``."""
        handler, clients = self.fgraph.destroy_handler, self.fgraph.clients
        root = var
        while root in handler.view_i:
            root = handler.view_i[root]
        cache = self.destroyer
        if root not in cache:
            cache[root] = next((n for t in view_tree(handler, root) for n, j in clients.get(t, ()) if destroys(n, j)), None)
        return cache[root]

    def successors(self, node):
        from pytensor.graph.fg import Output

        clients = self.fgraph.clients
        for out in node.outputs:
            for client, _ in clients.get(out, ()):
                if not isinstance(client.op, Output):
                    yield client
        for var in node.inputs:
            destroyer = self._tree_destroyer(var)
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
        nothing, when ``node`` reaches one of them (the orderings would close a cycle).

        First the nodes reaching a reader from after ``node`` (a cycle if ``node`` is one), then the
        nodes ``node`` reaches up to the last reader; the first set moves before the second."""
        pos = self.pos
        lower = pos[node]
        upper = max(pos[r] for r in readers)
        backward = set(readers)
        stack = list(readers)
        while stack:
            x = stack.pop()
            for y in self.predecessors(x):
                if y is node:
                    return False
                if y not in backward and pos[y] > lower:
                    backward.add(y)
                    stack.append(y)
        forward = {node}
        stack = [node]
        while stack:
            x = stack.pop()
            for y in self.successors(x):
                if y not in forward and pos[y] <= upper:
                    forward.add(y)
                    stack.append(y)
        slots = sorted(pos[n] for n in (*backward, *forward))
        ordered = sorted(backward, key=pos.__getitem__) + sorted(forward, key=pos.__getitem__)
        for n, slot in zip(ordered, slots, strict=True):
            pos[n] = slot
        return True
