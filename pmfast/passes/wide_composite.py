"""``wide_split`` on a wide Composite whose wide part is one inner Add/Mul that WideLoop declines.

The operands of that Add/Mul are moved, with the sub-expressions only they use,
into chunk Composites of at most ``CHUNK`` weighted outer inputs; the main
Composite keeps one input per chunk. Operands whose sub-expressions are shared
stay in the main Composite (moving them would compute them twice).
"""

from __future__ import annotations

import math

from pmfast.compiler.arity import MAX_ARITY

from pmfast.passes.wide_chunks import CHUNK, input_weight, is_assoc


def _inner_ancestors(var, stop_inputs: set):
    """Inner Apply nodes of the Composite sub-expression computing ``var``."""
    nodes, stack, seen = [], [var], set()
    while stack:
        v = stack.pop()
        if v.owner is None or v in stop_inputs or v.owner in seen:
            continue
        seen.add(v.owner)
        nodes.append(v.owner)
        stack.extend(v.owner.inputs)
    return nodes


def split_composite(fgraph, node):
    """Composite Elemwise with > MAX_ARITY weighted inputs whose wide part is one inner Add/Mul."""
    import pytensor.scalar as ps
    from pytensor.graph.basic import Constant
    from pytensor.graph.replace import clone_replace
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    if not isinstance(op, Elemwise) or not isinstance(op.scalar_op, ps.Composite) or op.destroy_map:
        return None
    weights = {o: input_weight(o) for o in node.inputs}
    if sum(weights[i] for i in dict.fromkeys(node.inputs)) <= MAX_ARITY:
        return None
    comp = op.scalar_op
    fg = comp.fgraph
    inner_in = list(fg.inputs)
    inner_out = list(fg.outputs)
    outer_of = dict(zip(inner_in, node.inputs, strict=True))
    # the widest associative inner node
    wides = [n for n in fg.apply_nodes if is_assoc(n.op) and len(n.inputs) > 2]
    if not wides:
        return None
    wide = max(wides, key=lambda n: len(n.inputs))
    wout = wide.outputs[0]
    if any(i.type.dtype != wout.type.dtype for i in wide.inputs):
        return None
    stop = set(inner_in)
    # each operand's private sub-expression and the outer inputs it reads;
    # operands whose sub-expression is also used elsewhere stay in the main
    # Composite (moving them out would compute them twice)
    operand_info, kept = [], []
    seen_operands = set()
    for o in wide.inputs:
        if o.owner is not None and o in seen_operands:
            kept.append(o)  # a repeated sub-expression: keep every copy where it is
            continue
        seen_operands.add(o)
        sub = _inner_ancestors(o, stop)
        subset = set(sub)
        private = True
        for n in sub:
            for out in n.outputs:
                for client, _ in fg.clients[out]:
                    if client == "output" or (client not in subset and client is not wide):
                        private = False
                    elif client is wide and out is not o:
                        private = False
        if o.owner is not None and wide.inputs.count(o) > 1:
            private = False
        if not private:
            kept.append(o)
            continue
        if o in stop:
            reads = [o]
        else:
            reads = list(dict.fromkeys(v for n in sub for v in n.inputs if v in stop))
        operand_info.append((o, sub, reads))
    # chunk the movable operands greedily by the outer weight of the inputs they read
    chunks, cur, cur_reads = [], [], {}
    total_w = sum(weights[outer_of[r]] for info in operand_info for r in info[2]) or 1
    n_target = max(1, math.ceil(total_w / CHUNK))
    target = min(CHUNK, math.ceil(total_w / n_target))
    for info in operand_info:
        reads = {r: weights[outer_of[r]] for r in info[2]}
        merged = {**cur_reads, **reads}
        if cur and sum(merged.values()) > target:
            chunks.append(cur)
            cur, cur_reads = [], {}
            merged = reads
        if sum(reads.values()) > CHUNK:
            return None
        cur.append(info)
        cur_reads = merged
    if cur:
        chunks.append(cur)
    if len(chunks) < 2:
        return None

    scalar_op = wide.op
    chunk_outer, replace_operands = [], list(kept)
    for chunk in chunks:
        ops_ = [info[0] for info in chunk]
        if len(chunk) == 1 and chunk[0][0] in stop:
            # a bare input operand: keep it as is
            replace_operands.append(ops_[0])
            continue
        reads = list(dict.fromkeys(r for info in chunk for r in info[2]))
        if not reads:  # constants only: leave them in the main composite
            replace_operands.extend(ops_)
            continue
        new_in = [r.type() for r in reads]
        expr = scalar_op(*ops_) if len(ops_) > 1 else ops_[0]
        expr = clone_replace([expr], dict(zip(reads, new_in)))[0]
        if expr.type.dtype != wout.type.dtype:
            return None
        sub_comp = ps.Composite(new_in, [expr])
        chunk_var = Elemwise(sub_comp)(*[outer_of[r] for r in reads])
        chunk_outer.append(chunk_var)
        placeholder = ps.get_scalar_type(wout.type.dtype)()
        replace_operands.append(placeholder)
        outer_of[placeholder] = chunk_var
    if len(chunk_outer) > CHUNK:
        return None
    # the main composite: the wide node now combines chunk results
    new_wout = scalar_op(*replace_operands)
    # rebuild only what depends on the wide node; everything else is reused as is
    memo = {wout: new_wout}
    for inner_node in fg.toposort():
        if inner_node is wide or not any(i in memo for i in inner_node.inputs):
            continue
        rebuilt = inner_node.clone_with_new_inputs([memo.get(i, i) for i in inner_node.inputs])
        memo.update(zip(inner_node.outputs, rebuilt.outputs, strict=True))
    new_outs = [memo.get(o, o) for o in inner_out]
    # its inputs: the original inputs still read, plus the chunk placeholders
    used = set()
    for v in new_outs:
        stack = [v]
        while stack:
            x = stack.pop()
            if x in used:
                continue
            used.add(x)
            if x.owner is not None:
                stack.extend(x.owner.inputs)
    main_in = [v for v in inner_in if v in used] + [v for v in replace_operands if v in outer_of and v not in stop]
    main_in = list(dict.fromkeys(main_in))
    if any(v.owner is None and not isinstance(v, Constant) and v not in set(main_in) for v in used):
        return None
    main_outer = [outer_of[v] for v in main_in]
    main_weight = sum(input_weight(o) for o in dict.fromkeys(main_outer))
    orig_weight = sum(weights[i] for i in dict.fromkeys(node.inputs))
    if main_weight > CHUNK and main_weight >= orig_weight:
        return None
    if main_weight > MAX_ARITY:
        return None
    main_comp = ps.Composite(main_in, new_outs)
    new = Elemwise(main_comp)(*main_outer, return_list=True)
    return new
