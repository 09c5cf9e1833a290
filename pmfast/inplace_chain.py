"""A node replaced by a chain: views of its inputs, a node like it, views of that node's outputs.

``local_useless_unbatched_blockwise`` turns a Blockwise with length-1 batch dims into its core op
between squeezes of the inputs and an expand of the outputs; in place, the core op destroys the
squeezed view of the input the Blockwise destroyed. :func:`chain_core` recognises the shape of
such a replacement and :func:`judge_chain` decides, once it is made, whether pytensor's
validation passes for certain (the argument in its docstring), for
:class:`pmfast.inplace_fast.FastValidation`'s ``late`` wrappers.
"""

from __future__ import annotations

from pmfast.inplace_order import aliased, view_tree


def _viewed(var):
    """The input a one-input, one-output pure view node (output 0 viewing input 0) reads, else ``None``."""
    node = var.owner
    if node is None or node.op.destroy_map or len(node.inputs) != 1 or len(node.outputs) != 1:
        return None
    return node.inputs[0] if node.op.view_map == {0: [0]} else None


def chain_core(old, replacements):
    """The node ``C`` of a replacement of ``old`` by views of its inputs -> ``C`` -> views of ``C``'s
    outputs (a Blockwise without batch dims for its core op: squeezes, the op, an expand), where
    ``C`` reads ``old``'s inputs in order, each directly or through one view, destroys the same
    inputs and neither makes a view; with the view nodes. Otherwise ``None``."""
    core, views = None, []
    for r, n in replacements:
        if r.owner is not old:
            return None
        base = n
        if n.owner is not None and n.owner.outputs[0] is n and _viewed(n) is not None:
            base = _viewed(n)
            views.append(n.owner)
        if base.owner is None or (core is not None and base.owner is not core):
            return None
        core = base.owner
        if core.outputs.index(base) != old.outputs.index(r):
            return None
    if core is None or core is old or not views or len(core.inputs) != len(old.inputs) or len(core.outputs) != len(old.outputs):
        return None
    if core.op.view_map or old.op.view_map or core.op.destroy_map != old.op.destroy_map:
        return None
    for var, want in zip(core.inputs, old.inputs, strict=True):
        if var is not want:
            if _viewed(var) is not want:
                return None
            views.append(var.owner)
    return core, views


def judge_chain(fgraph, old, core, views, nodes_before: int) -> bool:
    """After :func:`chain_core`'s replacement (done): whether pytensor's validation certainly passes,
    known when only those nodes entered and ``old`` left, and ``core`` reads no destroyed input's
    tree at another input (``False``: not known).

    The destroyed trees keep their roots (a view's root is its input's); their readers are the old
    ones and the input views, which feed ``core``; a tree holding an output of ``old`` now holds
    ``core``'s output and its view, whose readers are the old ones and the view node, which feeds
    them. Every ordering is a data edge or an old one renamed: valid as the graph was."""
    nodes = fgraph.apply_nodes
    if old in nodes or core not in nodes or any(v not in nodes for v in views):
        return False
    if len(nodes) != nodes_before + len(set(views)):
        return False
    handler = fgraph.destroy_handler
    for inputs in core.op.destroy_map.values():
        for i in inputs:
            if aliased(core, i, set(view_tree(handler, core.inputs[i]))):
                return False
    return True
