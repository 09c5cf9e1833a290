"""``wide_split``: keep every node at most 30 inputs wide.

CPython 3.11 compiles a call (or tuple display) with more than 30 items as
``BUILD_LIST`` + ``LIST_APPEND``… + ``CALL_FUNCTION_EX``, which numba lowers as
a chain of one-element tuple concatenations: O(n²) IR, compile time and memory.
Every node of a PyTensor graph becomes one such call in the generated graph
function, and wide Elemwise / Join / MakeVector nodes have wide numba
implementations on top. This pass rewrites the wide nodes into narrow ones:

* **Elemwise Add / Mul** (``flatten_nested_add_mul`` and ``FusionOptimizer``
  leave them up to 1024 inputs wide) → a balanced tree of Add/Mul nodes of at
  most :data:`CHUNK` (weighted) operands each. Chunks are as equal as possible
  and contiguous, so sibling nodes have the same input types: the same numba
  signature and cache key, compiled once and then loaded from numba's cache.
* **Composite Elemwise** (built by fusion) without gathered inputs → one
  :class:`~pmfast.passes.wide_loop.WideLoop`: the same single loop, its
  scalar function cut into ≤ 24-wide stages whose values stay in registers,
  loop invariants packed into one array per dtype (``pmfast/passes/wide_loop.py``).
* **Composite Elemwise** that WideLoop declines (gathered inputs, which
  ``indexed_elemwise`` fuses into the pieces; more than 24 arrays) and whose
  inner graph is one wide scalar Add/Mul over operand sub-expressions that
  nothing else uses → the operands are summed (multiplied) in chunk
  Composites of at most ``CHUNK`` outer inputs, and the Composite keeps one
  input per chunk.
* **Join** with more than :data:`MAX_ARITY` inputs (axis included; nutpie's gradient is one
  Join of one raveled gradient per free variable) → one ``AllocEmpty`` buffer
  and a chain of ``set_subtensor`` writes, one per input; stock
  ``local_inplace_setsubtensor`` (50.1) makes them destructive, so every input
  is written exactly once into the output buffer.
* **MakeVector** of more than ``MAX_ARITY`` scalars → a Join of chunk
  MakeVectors (itself a buffer chain when there are more than ``MAX_ARITY``
  chunks).
* **CheckAndRaise / Assert** with more than ``MAX_ARITY`` conditions → a chain
  of the same op checking the conditions chunk by chunk, in the same order and
  with the same message.

Weights: an operand produced by an integer gather (``AdvancedSubtensor1`` /
``AdvancedSubtensor``) counts 1 + its number of index inputs, because the
``indexed_elemwise`` pass (49.2, after us) fuses gathers into the loop and
adds their index arrays as loop inputs. :data:`CHUNK` = 24 weighted inputs
leaves 6 more for the write buffers and indices of scatter fusion, so fused
kernels stay ≤ 30 outer inputs.

Safety: only nodes with more than :data:`MAX_ARITY` (weighted) inputs are
touched; a node is rewritten only if every new node has at most ``CHUNK``
weighted inputs and the result has exactly the type of what it replaces;
anything unexpected (dtype changes inside the sum, shared inner
sub-expressions, non-constant Join axis, unknown non-axis shapes…) declines
and leaves the node as is. The rewriter is one pass over a snapshot of the
toposort: new nodes are never revisited, and they are all narrow, so running
it again is a no-op. Add/Mul trees reassociate floating-point sums and
products (rounding differs at the 1e-16 relative level, as with pytensor's own
``add_mul_fusion``/canonicalisation, which reorder terms freely).
"""

from __future__ import annotations

import logging
import math

from pmfast.compiler.arity import MAX_ARITY
from pmfast.passes.registry import record, register_pass
from pmfast.passes.rewriting import PassRewriter, record_nodes_added

_log = logging.getLogger(__name__)

PASS_NAME = "wide_split"

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
            raise _Decline("no progress")
        level, w = nxt, [1] * len(nxt)
    raise _Decline("too deep")


class _Decline(Exception):
    pass


# Node splitters: each returns the replacement of node.outputs, or None.


def _is_assoc(scalar_op) -> bool:
    import pytensor.scalar as ps

    return type(scalar_op) in (ps.Add, ps.Mul)


def split_assoc_elemwise(fgraph, node):
    """Elemwise Add/Mul with > MAX_ARITY weighted inputs → balanced tree (block sums batched first)."""
    import pytensor.scalar as ps
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    if not isinstance(op, Elemwise) or not _is_assoc(op.scalar_op) or op.destroy_map or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    weights = [input_weight(i) for i in node.inputs]
    if len(node.inputs) <= 2 or sum(weights) <= MAX_ARITY:
        return None
    if any(i.type.dtype != out.type.dtype for i in node.inputs):
        return None
    scalar_op = op.scalar_op
    operands = list(node.inputs)
    if isinstance(scalar_op, ps.Add):
        operands = batch_block_sums(fgraph, node, operands)
        weights = [input_weight(i) for i in operands]

    def combine(items):
        return Elemwise(scalar_op)(*items)

    new = balanced_tree(operands, weights, combine) if len(operands) > 1 else operands[0]
    return [new]


def _block_sum(fgraph, node, var):
    """``(key, start, stop, elemwise)`` if ``var`` is ``sum(f(x[start:stop].reshape(…)))`` used only by ``node``.

    ``f`` is a one-input Elemwise, ``x`` a vector, ``start``/``stop`` constants,
    the sum over all axes; the sum and ``f``'s output have no other client.
    """
    from pytensor.graph.basic import Constant
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.math import Sum
    from pytensor.tensor.shape import Reshape
    from pytensor.tensor.subtensor import Subtensor, get_idx_list

    if var.owner is None or not isinstance(var.owner.op, Sum) or fgraph.clients[var] != [(node, node.inputs.index(var))]:
        return None
    total = var.owner.op
    e = var.owner.inputs[0]
    if total.axis is not None and sorted(total.axis) != list(range(e.type.ndim)):
        return None
    f = e.owner
    if f is None or not isinstance(f.op, Elemwise) or len(f.inputs) != 1 or len(f.outputs) != 1 or f.op.destroy_map:
        return None
    if len(fgraph.clients[e]) != 1:
        return None
    r = f.inputs[0]
    target = None
    if r.owner is not None and isinstance(r.owner.op, Reshape):
        r, shape = r.owner.inputs
        if not isinstance(shape, Constant):
            return None
        target = [int(d) for d in shape.data]
    if r.owner is None or not isinstance(r.owner.op, Subtensor) or r.type.ndim != 1:
        return None
    x = r.owner.inputs[0]
    (idx,) = get_idx_list(r.owner.inputs, r.owner.op.idx_list)
    if not isinstance(idx, slice) or idx.step is not None:
        return None

    def const(v, default):
        if v is None:
            return default
        if isinstance(v, Constant):
            return int(v.data)
        return None

    start, stop = const(idx.start, 0), const(idx.stop, x.type.shape[0])
    if start is None or stop is None or not 0 <= start < stop:
        return None
    if target is not None:
        # the reshape must be valid for the block (it would raise otherwise, the batched form might not)
        known = math.prod(d for d in target if d != -1)
        n_free = sum(d == -1 for d in target)
        if any(d < -1 for d in target) or n_free > 1 or known == 0:
            return None
        if (n_free == 0 and known != stop - start) or (n_free == 1 and (stop - start) % known):
            return None
    key = (x, f.op, total.dtype, total.acc_dtype, e.type.dtype, var.type)
    return key, start, stop


def batch_block_sums(fgraph, node, operands: list) -> list:
    """Operands ``sum(f(x[a_i:b_i].reshape(…)))`` over contiguous equal-size blocks → one operand.

    A model with many free variables of the same prior has one such term per
    variable in its logp sum (slice of the joined point, reshape, prior
    log-density, sum): ~4 graph nodes, i.e. numba call lines, each. A run of k
    blocks of m elements ``x[a:a+m], x[a+m:a+2m], …`` becomes
    ``sum(sum(f(x[a:a+k*m].reshape(k, m)), axis=1))``: each row is summed as
    its block was (same elements, same order), then the k block sums are
    added, i.e. only the association of the outer sum changes, as with any
    split of a wide Add. Runs shorter than 2 stay as they are.
    """
    from pytensor.tensor.math import Sum

    found = {}
    for i, v in enumerate(operands):
        try:
            info = _block_sum(fgraph, node, v)
        except Exception:
            info = None
        if info is not None:
            found.setdefault(info[0], []).append((info[1], info[2], i))
    replace: dict[int, object] = {}
    drop: set[int] = set()
    for key, blocks in found.items():
        x, f_op, dtype, acc_dtype, e_dtype, out_type = key
        blocks.sort()
        runs, cur = [], [blocks[0]]
        for b in blocks[1:]:
            a = cur[-1]
            if b[0] == a[1] and b[1] - b[0] == a[1] - a[0]:
                cur.append(b)
            else:
                runs.append(cur)
                cur = [b]
        runs.append(cur)
        for run in runs:
            if len(run) < 2:
                continue
            k, m = len(run), run[0][1] - run[0][0]
            block = x[run[0][0] : run[-1][1]].reshape((k, m))
            fx = f_op(block)
            rows = Sum(axis=[1], dtype=dtype, acc_dtype=acc_dtype)(fx)
            new = Sum(axis=None, dtype=dtype, acc_dtype=acc_dtype)(rows)
            if fx.type.dtype != e_dtype or new.type != out_type:
                continue
            replace[run[0][2]] = new
            drop.update(b[2] for b in run[1:])
    if not replace:
        return operands
    return [replace.get(i, v) for i, v in enumerate(operands) if i not in drop]


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
    wides = [n for n in fg.apply_nodes if _is_assoc(n.op) and len(n.inputs) > 2]
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


def _join_buffer(tensors, axis: int, out_type):
    """``concatenate(tensors, axis)`` as set_subtensor writes into one empty buffer."""
    import pytensor.tensor as pt

    ndim = out_type.ndim
    lengths = []
    for t in tensors:
        s = t.type.shape[axis]
        lengths.append(int(s) if s is not None else t.shape[axis])
    other = []
    for d in range(ndim):
        if d == axis:
            other.append(None)
            continue
        dims = {t.type.shape[d] for t in tensors}
        if len(dims) != 1 or None in dims:
            raise _Decline("non-axis dims not statically equal")
        other.append(int(dims.pop()))
    total = 0
    offsets = [0]
    for n in lengths:
        total = total + n
        offsets.append(total)
    shape = [total if d == axis else other[d] for d in range(ndim)]
    buf = pt.empty(shape, dtype=out_type.dtype)
    for t, start, stop in zip(tensors, offsets[:-1], offsets[1:], strict=True):
        if t.type.dtype != out_type.dtype:
            t = pt.cast(t, out_type.dtype)
        index = (slice(None),) * axis + (slice(start, stop),)
        buf = pt.set_subtensor(buf[index], t)
    return buf


def split_join(fgraph, node):
    """Join of > MAX_ARITY tensors → set_subtensor chain into one AllocEmpty buffer."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.basic import Join

    if not isinstance(node.op, Join) or len(node.inputs) <= MAX_ARITY:  # the axis counts: it is a call argument
        return None
    axis_var, *tensors = node.inputs
    if not isinstance(axis_var, Constant):
        return None
    out = node.outputs[0]
    ndim = out.type.ndim
    if ndim < 1 or any(t.type.ndim != ndim for t in tensors):
        return None
    axis = int(axis_var.data)
    if axis < 0:
        axis += ndim
    if not 0 <= axis < ndim:
        return None
    from pytensor.scalar import upcast

    if upcast(*[t.type.dtype for t in tensors]) != out.type.dtype:
        return None
    return [_join_buffer(tensors, axis, out.type)]


def split_make_vector(fgraph, node):
    """MakeVector of > MAX_ARITY scalars → Join of chunk MakeVectors (a buffer when still wide)."""
    import pytensor.tensor as pt
    from pytensor.tensor.basic import MakeVector

    if not isinstance(node.op, MakeVector) or len(node.inputs) <= MAX_ARITY:
        return None
    vectorized = vectorize_make_vector(fgraph, node)
    if vectorized is not None:
        return [vectorized]
    return [_chunked_make_vector(node.op, list(node.inputs))]


def _chunked_make_vector(op, scalars: list):
    """``op(*scalars)`` (a MakeVector) as a Join of ≤ CHUNK-wide MakeVectors when it is wider than MAX_ARITY."""
    import pytensor.tensor as pt

    if len(scalars) <= MAX_ARITY:
        return op(*scalars)
    chunks = balanced_chunks([1] * len(scalars))
    parts = [op(*[scalars[i] for i in c]) for c in chunks]
    out_type = op(*scalars[:1]).type.clone(shape=(len(scalars),))
    if len(parts) + 1 > MAX_ARITY:  # the Join's axis is a call argument too
        return _join_buffer(parts, 0, out_type)
    return pt.join(0, *parts)


def vectorize_make_vector(fgraph, node):
    """``MakeVector(f(a_1, b_1), …, f(a_n, b_n))`` → ``f(MakeVector(a_i…), MakeVector(b_i…))``.

    Every input is the only output of a 0-d Elemwise with the same op whose
    only client is this MakeVector (e.g. the n−1 ``Eq`` broadcast checks of n
    gathered terms). The Elemwise then runs once on vectors: n scalar nodes
    (n numba call lines) become one, plus the MakeVectors of its operands
    (chunked). An operand that is the same variable in every row is
    broadcast instead of repeated. Same scalar op on the same values: exact.
    """
    import pytensor.tensor as pt
    from pytensor.tensor.basic import MakeVector
    from pytensor.tensor.elemwise import Elemwise

    owners = [v.owner for v in node.inputs]
    if any(o is None for o in owners):
        return None
    op = owners[0].op
    if not isinstance(op, Elemwise) or op.destroy_map:
        return None
    arity = len(owners[0].inputs)
    for o, v in zip(owners, node.inputs, strict=True):
        if o.op != op or len(o.outputs) != 1 or len(o.inputs) != arity or v.type.ndim != 0:
            return None
        if any(client is not node for client, _ in fgraph.clients[v]):
            return None
    columns = []
    for j in range(arity):
        col = [o.inputs[j] for o in owners]
        t = col[0].type
        if t.ndim != 0 or any(c.type != t for c in col):
            return None
        if all(c is col[0] for c in col):
            columns.append(pt.shape_padleft(col[0]))
        else:
            columns.append(_chunked_make_vector(MakeVector(t.dtype), col))
    new = op(*columns)
    out = node.outputs[0]
    if new.type.dtype != out.type.dtype or new.type.ndim != 1:
        return None
    return new


def split_check_and_raise(fgraph, node):
    """CheckAndRaise with > MAX_ARITY conditions → a chain of the same check, chunk by chunk."""
    from pytensor.raise_op import CheckAndRaise

    if not isinstance(node.op, CheckAndRaise) or len(node.inputs) <= MAX_ARITY:
        return None
    value, *conds = node.inputs
    cur = value
    for c in balanced_chunks([1] * len(conds), CHUNK - 1):
        cur = node.op.make_node(cur, *[conds[i] for i in c]).outputs[0]
    return [cur]


def loop_composite(fgraph, node):
    """A wide Composite without gathered inputs → one :class:`~pmfast.passes.wide_loop.WideLoop` (the fused loop kept)."""
    from pmfast.passes.wide_loop import wide_loop

    return wide_loop(fgraph, node)


SPLITTERS = (
    split_assoc_elemwise,
    loop_composite,
    split_composite,
    split_join,
    split_make_vector,
    split_check_and_raise,
)


def split_node(fgraph, node):
    """The replacement for ``node``'s outputs, or None when no splitter applies (or it declines)."""
    for splitter in SPLITTERS:
        try:
            new = splitter(fgraph, node)
        except _Decline:
            new = None
        except Exception:
            _log.debug("wide_split: %s failed on %s", splitter.__name__, node, exc_info=True)
            new = None
        if new is None:
            continue
        if len(new) != len(node.outputs):
            return None
        for old, nv in zip(node.outputs, new, strict=True):
            if old.type != nv.type:
                if old.type.dtype == nv.type.dtype and old.type.ndim == nv.type.ndim and old.type.is_super(nv.type):
                    continue  # more static shape information: filter_variable specifies it
                _log.debug("wide_split: type mismatch %s vs %s for %s", old.type, nv.type, node)
                return None
        return new
    return None




def _changed(node, new):
    """The ``(old, new)`` output pairs that ``split_node`` actually changed (``None``: declined)."""
    if new is None:
        return None
    return [(old, nv) for old, nv in zip(node.outputs, new, strict=True) if old is not nv]


class WideSplit(PassRewriter):
    """One pass over a snapshot of the toposort; splits every wide node it can."""

    reason = PASS_NAME

    def apply(self, fgraph):
        n = 0
        before = len(fgraph.apply_nodes)
        for node in list(fgraph.toposort()):
            if node not in fgraph.apply_nodes:
                continue
            if len(node.inputs) <= MAX_ARITY and not _maybe_wide_weighted(node):
                continue
            n += self.attempt(fgraph, lambda: _changed(node, split_node(fgraph, node)), node)
        if n:
            record(fgraph, PASS_NAME, n)
            record_nodes_added(fgraph, PASS_NAME, len(fgraph.apply_nodes) - before)
        return n


def _maybe_wide_weighted(node) -> bool:
    """Narrow by count but possibly wide by weight (gathered Elemwise operands)."""
    from pytensor.tensor.elemwise import Elemwise

    return isinstance(node.op, Elemwise) and len(node.inputs) * 2 > MAX_ARITY


wide_split_pass = register_pass(
    PASS_NAME,
    "split wide Add/Mul/Composite/Join/MakeVector/CheckAndRaise nodes so no call has > 30 arguments",
)

# Position 49.15: after ``add_mul_fusion`` (48, ``flatten_nested_add_mul``)
# and ``elemwise_fusion`` (49), which would re-flatten Add/Mul trees split any
# earlier and which build the wide Composites we split; before
# ``indexed_elemwise`` (49.2), so that pass fuses gathers into our ≤ 24-weight
# chunks instead of into one wide node; before ``add_destroy_handler`` (49.5)
# so that ``local_inplace_setsubtensor`` (50.1) turns the Join buffer chain
# into destructive writes. Nothing after 49.15 re-fuses or re-flattens
# Elemwise trees (merge3 at 100 only merges identical nodes).
wide_split_pass.register(WideSplit(), 49.15, name="split")
