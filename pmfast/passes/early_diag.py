"""``pt.diag(v)`` (pytensor's ``AllocDiag``, an ``OpFromGraph``) inlined before the first merge, not in specialize.

pytensor keeps ``AllocDiag`` as an ``OpFromGraph`` node through canonicalize and stabilize (so that
its linear-algebra rewrites can see a diagonal matrix: ``det(diag(v))``, ``inv(diag(v))``,
``cholesky(diag(v))``) and inlines it in specialize (``late_inline_OpFromGraph``). By then
ShapeFeature holds shape graphs of the node's output built from the graph as it was before
canonicalize; inlining it (a new output variable) pulls such a stale graph back in. On a marginal
GP (``pm.gp.Marginal``: ``K + diag(σ²) + jitter``, its logp through ``MvNormal``) the gradient of
``log(diag(chol(K)))`` (``diag(1/diag(L))``, an ``AllocDiag``) then refers to a second copy of
``K``, built from the point before canonicalize merged its scalars, and to a second ``Cholesky``
of it: stock pytensor computes the 100×100 covariance and its Cholesky factorization twice per
gradient (2 ``Cholesky``, 6 ``Dot`` nodes; inlined first: 1 and 5).

The rewrite inlines ``AllocDiag`` nodes at the start of the pipeline, as pytensor's
``inline_ofg_expansion`` does for inline ``OpFromGraph`` nodes: the same inner graph on the node's
inputs (``inline_ofg_node``), so the values are the same by construction. It declines a node whose
output feeds a linear-algebra op, ``Dot`` or ``Blockwise``, or that is a graph output, where
pytensor's rewrites of a diagonal matrix could still apply; that node is inlined late, as before.

The gradient of ``diag(v)`` is a plain ``OpFromGraph`` (``OpFromGraph.L_op``: ``diagonal(ḡ)`` as an
``AdvancedSubtensor``) that no rewrite ever inlines: numba compiles it as a function of its own
(``numba_ofg`` and its inner graph, ~0.6 CPU s of a GP's cold compile). :func:`inline_diag_gradient`
inlines that node, the same way, before :func:`inline_diag` (which would hide its provenance): a
plain ``OpFromGraph`` whose inputs are an ``AllocDiag`` node's inputs, then its outputs, then one
gradient per output (how ``L_op`` calls it), with a small inner graph free of linear algebra. A
user's own ``OpFromGraph`` is left to pytensor (whose tests look for it in the compiled graph:
``tests/link/numba/test_compile_ops.py``).

Both inline with :func:`inline_inner_graph`: pytensor's ``inline_ofg_node`` goes through
``clone_replace``, which clones the replacement values too, i.e. the node's inputs and every node
above them; those copies enter the graph and the first merge folds them back. On hier_var (8 groups)
its 8 ``AllocDiag`` nodes brought 10,100 copied nodes into a 4,448-node graph, each imported
(ShapeFeature's ``infer_shape``, the merge feature) and merged away. ``inline_inner_graph`` clones the
inner graph only, on the node's own inputs: the same outputs as the merge leaves.
``PMFAST_INLINE_INNER_ONLY=0`` inlines with pytensor's ``inline_ofg_node`` again.
"""

from __future__ import annotations

import os

from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import clone_get_equiv
from pytensor.graph.fg import Output
from pytensor.graph.rewriting.basic import copy_stack_trace, dfs_rewriter, node_rewriter
from pytensor.tensor.basic import AllocDiag
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.math import Dot
from pytensor.tensor.rewriting.ofg import inline_ofg_node

from pmfast.passes.registry import record, register_pass

PASS_NAME = "early_diag"

#: modules of the ops whose rewrites look for an ``AllocDiag`` input
_LINALG_MODULES = ("pytensor.tensor.slinalg", "pytensor.tensor.nlinalg", "pytensor.tensor.linalg")


def inline_inner_graph(node):
    """The outputs of ``OpFromGraph`` node ``node``'s inner graph computed on ``node.inputs``.

    What pytensor's ``inline_ofg_node`` returns, without copies of the inputs' ancestors: only the
    inner graph's nodes are cloned (``clone_get_equiv`` with the inner inputs mapped to the node's
    inputs; constants and other orphans of the inner graph are shared, as ``clone_replace`` keeps
    them), so the same variables the first merge would leave (see the module docstring).
    """
    op = node.op
    if os.environ.get("PMFAST_INLINE_INNER_ONLY", "1") == "0":
        return inline_ofg_node(node)
    memo = dict(zip(op.inner_inputs, node.inputs, strict=True))
    equiv = clone_get_equiv(op.inner_inputs, op.inner_outputs, copy_inputs=False, copy_orphans=False, memo=memo)
    outs = [equiv[out] for out in op.inner_outputs]
    copy_stack_trace(op.inner_outputs, outs)
    return outs


def _diagonal_rewrites_may_apply(client) -> bool:
    """Whether a rewrite of pytensor's could want ``client``'s input as an ``AllocDiag`` node."""
    op = client.op
    if isinstance(op, (Output, Dot, Blockwise)):
        return True
    return type(op).__module__.startswith(_LINALG_MODULES)


@node_rewriter([AllocDiag])
def inline_diag(fgraph, node):
    """``AllocDiag(v)`` → its inner graph on ``v``, unless a client is linear algebra (see the module docstring)."""
    if any(_diagonal_rewrites_may_apply(client) for client, _ in fgraph.clients[node.outputs[0]]):
        return None
    record(fgraph, PASS_NAME)
    return inline_inner_graph(node)


#: Most inner-graph nodes of a gradient ``OpFromGraph`` that :func:`inline_diag_gradient` inlines.
SMALL_OFG = 16


def _is_diag_gradient(node) -> bool:
    """Whether ``node`` is called as ``OpFromGraph.L_op`` calls an ``AllocDiag``'s gradient: the forward
    node's inputs, its outputs, then one output gradient each."""
    for var in node.inputs:
        fwd = var.owner
        if fwd is None or not isinstance(fwd.op, AllocDiag):
            continue
        k, m = len(fwd.inputs), len(fwd.outputs)
        if len(node.inputs) == k + 2 * m and all(
            a is b for a, b in zip(node.inputs[: k + m], [*fwd.inputs, *fwd.outputs], strict=True)
        ):
            return True
    return False


@node_rewriter([OpFromGraph])
def inline_diag_gradient(fgraph, node):
    """The gradient ``OpFromGraph`` of an ``AllocDiag`` (small, no linear algebra) → its inner graph."""
    op = node.op
    if type(op) is not OpFromGraph or len(op.fgraph.apply_nodes) > SMALL_OFG:
        return None
    if not _is_diag_gradient(node):
        return None
    if any(_diagonal_rewrites_may_apply(inner) for inner in op.fgraph.apply_nodes):
        return None
    record(fgraph, PASS_NAME)
    return inline_inner_graph(node)


early_diag_pass = register_pass(PASS_NAME, "diag(v) inlined before canonicalize (a late inline duplicated a GP's Cholesky)")
# after pytensor's inline_ofg_expansion (-0.01), before the first merge (0); the gradients first,
# while the AllocDiag nodes they were built from are still in the graph
early_diag_pass.register(dfs_rewriter(inline_diag_gradient), -0.006, name="inline_gradient")
early_diag_pass.register(dfs_rewriter(inline_diag), -0.005, name="inline")
