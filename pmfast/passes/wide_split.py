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
from pmfast.passes.wide_chunks import CHUNK, Decline, balanced_chunks, balanced_tree, input_weight, is_assoc
from pmfast.passes.wide_composite import split_composite
from pmfast.passes.wide_joins import split_check_and_raise, split_join, split_make_vector
from pmfast.passes.registry import record, register_pass
from pmfast.passes.rewriting import PassRewriter, record_nodes_added

_log = logging.getLogger(__name__)

PASS_NAME = "wide_split"

__all__ = ["CHUNK", "MAX_ARITY", "WideSplit", "balanced_chunks", "balanced_tree", "input_weight", "is_assoc", "split_node"]

# Node splitters: each returns the replacement of node.outputs, or None.


def split_assoc_elemwise(fgraph, node):
    """Elemwise Add/Mul with > MAX_ARITY weighted inputs → balanced tree (block sums batched first)."""
    import pytensor.scalar as ps
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    if not isinstance(op, Elemwise) or not is_assoc(op.scalar_op) or op.destroy_map or len(node.outputs) != 1:
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
        except Decline:
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

# Positions 49.1 and 49.185: a fused Elemwise made of repeated independent pieces as one node per
# piece (``wide_components``). At 49.1 after fusion (49) and ``scalarize``'s 0-d siblings (49.05)
# built them, before the wide ones become WideLoops (49.15); at 49.185 again after sibling fusion
# (49.18) merged loops that share only an index, before the loops are built (49.2).
from pmfast.passes.wide_components import ComponentSplit  # noqa: E402

wide_split_pass.register(ComponentSplit(), 49.1, name="components")
wide_split_pass.register(ComponentSplit(), 49.185, name="components_after_siblings")
