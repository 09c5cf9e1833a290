"""Same-structure blocks of a chunked loop: one kernel compiled per distinct block, called per copy.

Fusion puts the per-group copies of a hierarchical model's likelihood into one chunked loop
(hier_var, 8 groups: two kernels with 4 copies each of one block, 3.4 and 4.1 CPU s to compile,
against 0.8 s for one copy). The copies share no scalar values, only loop inputs (the index, data
read by every group). :func:`split` cuts the loop's scalar graph into its connected components
(inputs and constants do not connect), and describes each as a loop of its own over the inputs it
uses, its positions numbered in order of first use: copies then have the same description, the
same kernel source and the same scalar key. The loop function (:func:`generate_entry`) runs the
whole loop's checks and allocations once and calls one kernel per block (rows ``0 <= i0 < n0``),
the copies calling the same compiled kernel with their own arrays.

Each block evaluates the same scalar functions on the same values as the fused kernel, stores and
scatters in row order into the outputs it owns, and sums its totals by the same lanes, so the
results are the same bits. Declined (the fused kernel as before) unless some block repeats.
``PMFAST_LOOP_DEDUP=0`` turns it off (in the loop's cache key).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pmfast.loops.chunked import kernel_returns
from pmfast.loops.codegen import _def, _Prologue
from pmfast.loops.spec import ALL, ANY, SUM, Gather, IndexedLoop, Read, Write

ENABLED = os.environ.get("PMFAST_LOOP_DEDUP", "1") != "0"

#: Bump whenever the blocked entry's source or the block split changes.
BLOCKS_VERSION = 1


@dataclass(frozen=True)
class Block:
    """One component of a loop: ``loop`` over node inputs ``positions`` (local ``p`` is the
    node's ``positions[p]``); its write ``w`` is the node's write ``writes[w]``."""

    loop: IndexedLoop
    positions: tuple[int, ...]
    writes: tuple[int, ...]


def components(fgraph):
    """``[(input indices, output indices), ...]`` of ``fgraph``'s connected components (values
    computed by nodes connect; inputs and constants don't), in order of their first output; None
    if an output is not computed by a node."""
    parent: dict = {}

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in fgraph.toposort():
        parent[node] = node
        for i in node.inputs:
            if i.owner is not None:
                a, b = find(i.owner), find(node)
                if a is not b:
                    parent[a] = b
    if any(o.owner is None for o in fgraph.outputs):
        return None
    index = {v: k for k, v in enumerate(fgraph.inputs)}
    comps: dict = {}
    for k, o in enumerate(fgraph.outputs):
        comps.setdefault(find(o.owner), []).append(k)
    if any(find(n) not in comps for n in parent):
        return None  # a dead node (fusion never leaves one): decline
    return [with_inputs(fgraph, outs, index) for outs in comps.values()]


def with_inputs(fgraph, outs, index=None):
    """``(inputs, outs)``: the indices of the inputs of scalar ``fgraph`` that outputs ``outs`` read, in
    order of first use walking back from them (copies of one computation number their inputs alike)."""
    index = {v: k for k, v in enumerate(fgraph.inputs)} if index is None else index
    ins: dict[int, None] = {}
    seen = set()
    stack = [fgraph.outputs[o] for o in reversed(outs)]
    while stack:
        v = stack.pop()
        if v in index:
            ins.setdefault(index[v], None)
        elif v.owner is not None and v.owner not in seen:
            seen.add(v.owner)
            stack.extend(reversed(v.owner.inputs))
    return list(ins), outs


def split(loop: IndexedLoop) -> list[tuple[Block, object]] | None:
    """``[(block, its scalar Composite), ...]`` of a 1-d ``loop`` whose scalar op is a Composite, one
    per component (one block: the loop itself, renumbered), or None (declined: a component without a read giving the loop's
    length, or a scatter whose terms come from two components)."""
    from pytensor.scalar.basic import Composite

    from pmfast.loops.body import flatten_composites

    op = loop.scalar_op
    if loop.ndim != 1 or not isinstance(op, Composite):
        return None
    fgraph = flatten_composites(op.fgraph)
    comps = components(fgraph)
    if not comps:
        return None
    owner = {o: c for c, (_, outs) in enumerate(comps) for o in outs}
    by_comp: list[list[int]] = [[] for _ in comps]
    for k, w in enumerate(loop.writes):
        cs = {owner[w.output]} | {owner[o] for o, _ in w.also}
        if len(cs) != 1:
            return None
        by_comp[cs.pop()].append(k)
    blocks = []
    for (ins, outs), wks in zip(comps, by_comp):
        if not wks:
            return None
        pos: dict[int, int] = {}

        def local(p):
            return pos.setdefault(p, len(pos))

        def axes(ax):
            return tuple(Gather(local(a.index), a.dims, a.loose) if isinstance(a, Gather) else a for a in ax)

        reads = []
        for k in ins:
            r = loop.reads[k]
            arr = local(r.array)
            reads.append(Read(arr, axes(r.axes)))
        out_local = {o: j for j, o in enumerate(outs)}
        writes = []
        for k in wks:
            w = loop.writes[k]
            buf = None if w.buffer is None else local(w.buffer)
            also = tuple((out_local[o], axes(ax)) for o, ax in w.also)
            writes.append(Write(out_local[w.output], w.mode, buf, axes(w.axes), also))
        back = {v: p for p, v in pos.items()}
        positions = tuple(back[j] for j in range(len(pos)))
        groups = []
        for g in loop.same_lengths:
            mine = tuple((pos[p], a) for p, a in g if p in pos)
            if len(mine) > 1:
                groups.append(mine)
        sub = Composite([fgraph.inputs[k] for k in ins], [fgraph.outputs[o] for o in outs])
        try:
            block_loop = IndexedLoop(
                sub,
                tuple(reads),
                tuple(writes),
                inplace=tuple(pos[p] for p in loop.inplace if p in pos),
                ndim=1,
                bounds=tuple((pos[p], lo, hi) for p, lo, hi in loop.bounds if p in pos),
                same_lengths=tuple(groups),
            )
        except ValueError:  # e.g. no read of this block gives the loop's length
            return None
        blocks.append((Block(block_loop, positions, tuple(wks)), sub))
    return blocks


def kernel_args(block: Block, input_dtypes, output_dtypes) -> list[str]:
    """The block kernel's parameters after ``r0, r1`` (as :func:`pmfast.loops.chunked.generate_chunked`
    names them, in the block's numbering)."""
    pro = _Prologue(block.loop, input_dtypes, output_dtypes)
    outs = [f"out{k}" for k, w in enumerate(block.loop.writes) if w.mode not in (SUM, ALL, ANY)]
    return [*(f"in{p}" for p in range(len(block.positions))), *pro.sizes, *outs]


def generate_entry(loop: IndexedLoop, input_dtypes, output_dtypes, blocks: list[Block], kernels: list[str],
                   func_name: str = "indexed_loop") -> str:
    """The loop function: the whole loop's checks and outputs, then ``kernels[b](0, n0, ...)`` per
    block with its arrays (read arrays C-contiguous, as the fused form passes them)."""
    pro = _Prologue(loop, input_dtypes, output_dtypes)
    read = {r.array for r in loop.reads} | {g.index for r in loop.reads for _, g in r.gathers()}
    lines = list(pro.head)
    lines += [f"c{p} = np.ascontiguousarray(in{p})" for p in sorted(read)]
    for block, kernel in zip(blocks, kernels):
        sub_in = [input_dtypes[p] for p in block.positions]
        sub_out = [output_dtypes[k] for k in block.writes]
        args = []
        for a in kernel_args(block, sub_in, sub_out):
            if a.startswith("in"):
                p = block.positions[int(a[2:])]
                args.append(f"c{p}" if p in read else f"in{p}")
            elif a.startswith("size"):
                p, ax = (int(x) for x in a[4:].split("_"))
                r = pro.rep.get((block.positions[p], ax), (block.positions[p], ax))
                args.append(f"size{r[0]}_{r[1]}")
            else:
                args.append(f"out{block.writes[int(a[3:])]}")
        accs = [f"acc{block.writes[k]}" for k, w in enumerate(block.loop.writes) if w.mode in (SUM, ALL, ANY)]
        assign = f"({', '.join(accs)},) = " if accs else ""
        lines.append(f"{assign}{kernel}(0, n0, {', '.join(args)})")
    return _def(func_name, [f"in{p}" for p in range(len(input_dtypes))], lines + pro.finish())


def returns(block: Block, output_dtypes) -> list[str]:
    """:func:`pmfast.loops.chunked.kernel_returns` of the block (``output_dtypes``: the node's)."""
    return kernel_returns(block.loop, [output_dtypes[k] for k in block.writes])


