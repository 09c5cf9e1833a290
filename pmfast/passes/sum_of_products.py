"""``sum(x * y, axis=k)`` of two 3-d tensors broadcast against each other as a matrix product (one ``gemm``).

The gradient of a solve with a matrix right-hand side (``SolveBase.L_op``: ``Ā = -b̄ · cᵀ``) under a
``Blockwise`` reaches the compiled graph as ``Sum{axis=0}(Mul(b̄ᵀ[:, :, None], cᵀ[:, None, :]))``: an
``(N, m, m)`` temporary and a reduction over it. In an ``MvNormal`` of 10,000 rows of 2 (the LKJ
model) that is ~100 µs of a ~200 µs gradient, for 40,000 multiply-adds a ``gemm`` does in a few.

:func:`sum_of_products_to_dot` matches a ``Sum`` over one axis ``k`` of a two-input ``Mul`` of 3-d
tensors where each factor is broadcastable (static length 1) along exactly one of the other two
axes and the other factor is not: ``out[i, j] = Σₖ x[i, k] y[k, j]`` with the axes in some order.
It rewrites it to ``dot(X, Y)`` of the factors with their unit axis dropped and transposed into
place (``DimShuffle`` views), then transposed to the ``Sum``'s axis order. Same products, summed by
BLAS in another order (a rounding difference). It declines other dtypes than float32/float64 of one
dtype, a ``Sum`` accumulating in another dtype, and a product used elsewhere (it would be computed
anyway). It runs after specialize (where the ``Mul`` and ``Sum`` exist in this form) and before
fusion puts the ``Mul`` into a Composite.
"""

from __future__ import annotations

import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.math import Sum

from pmfast.passes.registry import record, register_pass

PASS_NAME = "sum_of_products"


def _roles(bx, by, r):
    """``(a, b)``: the axis only ``x`` spans and the one only ``y`` spans (``r`` summed), or None."""
    o0, o1 = (ax for ax in range(3) if ax != r)
    if bx[r] or by[r]:
        return None
    if by[o0] and bx[o1] and not bx[o0] and not by[o1]:
        return o0, o1
    if bx[o0] and by[o1] and not by[o0] and not bx[o1]:
        return o1, o0
    return None


@node_rewriter([Sum])
def sum_of_products_to_dot(fgraph, node):
    """``Sum{axis=k}(x * y)`` of broadcast 3-d factors → ``dot`` (see the module docstring)."""
    op = node.op
    (prod,) = node.inputs
    out = node.outputs[0]
    if type(op) is not Sum or op.axis is None or len(op.axis) != 1 or prod.ndim != 3:
        return None
    mul = prod.owner
    if mul is None or not isinstance(mul.op, Elemwise) or not isinstance(mul.op.scalar_op, ps.Mul) or len(mul.inputs) != 2:
        return None
    x, y = mul.inputs
    dtype = out.type.dtype
    if dtype not in ("float64", "float32") or {x.type.dtype, y.type.dtype, prod.type.dtype} != {dtype}:
        return None
    if (op.acc_dtype or dtype) != dtype or len(fgraph.clients[prod]) != 1 or x.ndim != 3 or y.ndim != 3:
        return None
    (r,) = op.axis
    roles = _roles(x.type.broadcastable, y.type.broadcastable, r)
    if roles is None:
        return None
    a, b = roles
    xm = x.squeeze(b)  # axes (a, r) in their original order
    ym = y.squeeze(a)  # axes (b, r)
    xm = xm if a < r else xm.T
    ym = ym if r < b else ym.T
    dot = pt.dot(xm, ym)  # (a, b)
    new = dot if a < b else dot.T
    if new.ndim != out.ndim:
        return None
    record(fgraph, PASS_NAME)
    return [out.type.filter_variable(new, allow_convert=True)]


sum_of_products_pass = register_pass(PASS_NAME, "sum(x * y, axis=k) of broadcast 3-d factors as one matrix product")
# after specialize (2), before add_mul_fusion (48) and elemwise fusion (49) absorb the Mul
sum_of_products_pass.register(dfs_rewriter(sum_of_products_to_dot), 47.5, name="to_dot")
