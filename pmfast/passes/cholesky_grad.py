"""The gradient of a Cholesky factorization as one op (``CholeskyGrad``): one ``trmm`` and two ``trsm`` in place.

pytensor's ``Cholesky.L_op`` (Murray 2016) builds, for the factor ``L`` and its output gradient ``L̄``::

    P = tril(Lᵀ @ L̄) - diag(diagonal(Lᵀ @ L̄) / 2)
    S = solve_triangular(Lᵀ, solve_triangular(Lᵀ, Pᵀ).T)      # L⁻ᵀ P L⁻¹
    Ā = tril(S + Sᵀ) - diag(diagonal(S))

about twenty nodes: a full matrix product, two triangular solves on transposed copies, the
``tril`` masks as ``arange`` comparisons, ``diag``/``diagonal`` pairs. In a marginal GP (100×100)
that is ~40% of the gradient. :class:`CholeskyGrad` computes the same values in one buffer
(:func:`pmfast.compiler.linalg_kernels._cholesky_grad`): ``Lᵀ L̄`` by ``trmm`` (a triangular factor:
half a ``gemm``'s work), the two solves by ``trsm`` in place, the masks as loops; no transposes,
copies or temporaries.

:func:`fuse_cholesky_grad` matches that subgraph exactly as ``Cholesky.L_op`` (pytensor 2.38.3)
builds it, before any rewrite has reshaped it (the pass runs at the start of the pipeline), for
``lower`` either way: every node of the pattern is checked (ops, props, which input is which, the
``tril``/``triu`` masks' ``arange`` starts, the factor being the same ``Cholesky`` output
throughout); anything else declines. Matrices, or stacks whose batch axes all have static length
1 (pymc's ``MvNormal`` factorizes its covariance as a ``(1, n, n)`` stack: LKJ, SEM): ``Blockwise``
wrappers over such axes are looked through, and the op runs on the matrix. Values agree with pytensor's to rounding: the
same products and solves, summed by BLAS in another order. A failed factorization (all NaN) gives
all NaN, as pytensor's; a NaN or infinite ``L̄`` spreads to fewer entries (``trmm`` skips the
factor's zero triangle, where pytensor's ``gemm`` adds ``0 * inf``).

``CholeskyGrad`` has a numpy ``perform`` (scipy, the reference) and a numba implementation
registered for pytensor's linker too, so graphs rewritten under ``pmfast.enable()`` compile in stock
NUMBA mode. It has no gradient of its own (second derivatives of a Cholesky through it are not
supported: the pass runs after the gradient graph is built).
"""

from __future__ import annotations

import numpy as np
import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.tensor.basic import AllocDiag, ARange, ExtractDiag, get_underlying_scalar_constant_value
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.math import Dot
from pytensor.tensor.slinalg import Cholesky, SolveTriangular

from pmfast.passes.registry import record, register_pass

PASS_NAME = "cholesky_grad"


class CholeskyGrad(Op):
    """``CholeskyGrad(lower)(L, L̄)``: the gradient with respect to ``A`` of a function of ``L = cholesky(A, lower)``."""

    __props__ = ("lower",)

    def __init__(self, lower: bool = True):
        self.lower = bool(lower)

    def make_node(self, chol, dz):
        chol, dz = pt.as_tensor_variable(chol), pt.as_tensor_variable(dz)
        if chol.ndim != 2 or dz.ndim != 2 or chol.type.dtype != dz.type.dtype:
            raise TypeError("CholeskyGrad takes two matrices of one dtype")
        return Apply(self, [chol, dz], [chol.type()])

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]

    def perform(self, node, inputs, outputs):
        from scipy.linalg import solve_triangular

        chol, dz = inputs
        low, bar = (chol, dz) if self.lower else (chol.T, dz.T)
        n = chol.shape[0]
        tril = np.tri(n, n, dtype=chol.dtype)  # masks multiply, as pytensor's tril/triu do (NaN * 0 is NaN)
        m = low.T @ bar
        p = m * tril - np.diag(np.diagonal(m) / 2.0)
        s = solve_triangular(low.T, solve_triangular(low.T, p.T, lower=False, check_finite=False).T, lower=False, check_finite=False) if n else p
        mask = tril if self.lower else 1.0 - np.tri(n, n, -1, dtype=chol.dtype)
        outputs[0][0] = np.asarray((s + s.T) * mask - np.diag(np.diagonal(s)), dtype=chol.dtype)


def _unit_batch(var, core_ndim: int) -> bool:
    """Whether ``var``'s axes before its last ``core_ndim`` all have static length 1."""
    return var.ndim >= core_ndim and all(var.type.broadcastable[: var.ndim - core_ndim])


def _core_op(node):
    """``node``'s op, looking through a ``Blockwise`` whose batch axes all have static length 1."""
    op = node.op
    if isinstance(op, Blockwise):
        if not all(_unit_batch(i, len(sig)) for i, sig in zip(node.inputs, op.inputs_sig)):
            return None
        return op.core_op
    return op


def _owner(var, op_type, scalar_op=None):
    """``var``'s node if its (core) op is an ``op_type`` (an Elemwise of ``scalar_op``), else None."""
    node = var.owner
    if node is None:
        return None
    op = _core_op(node)
    if not isinstance(op, op_type):
        return None
    if scalar_op is not None and not isinstance(op.scalar_op, scalar_op):
        return None
    return node


def _transposed(var):
    """``x`` if ``var`` is ``x.mT`` (the last two axes swapped), else None."""
    node = _owner(var, DimShuffle)
    nb = var.ndim - 2
    if node is None or nb < 0 or node.inputs[0].ndim != var.ndim or node.op.new_order != (*range(nb), nb + 1, nb):
        return None
    return node.inputs[0]


def _constant(var):
    try:
        return float(get_underlying_scalar_constant_value(var))
    except NotScalarConstantError:
        return None


def _arange_start(var, axis: int):
    """The start of ``arange(start, stop, 1)`` (after any batch axes) expanded at the row (``axis`` 1)
    or column (0) position of a matrix, else None."""
    node = _owner(var, DimShuffle)
    nb = var.ndim - 2
    if node is None or nb < 0 or node.op.new_order != ((*range(nb + 1), "x") if axis == 1 else (*range(nb), "x", nb)):
        return None
    arange = _owner(node.inputs[0], ARange)
    if arange is None or _constant(arange.inputs[2]) != 1.0:
        return None
    return _constant(arange.inputs[0])


def _is_tri(var, k_start: float) -> bool:
    """Whether ``var`` is ``tri(N, M, k)`` as ``pt.tri`` builds it: ``arange(N)[:, None] >= arange(-k, M - k)[None, :]`` cast."""
    cast = _owner(var, Elemwise, ps.Cast)
    ge = cast and _owner(cast.inputs[0], Elemwise, ps.GE)
    return bool(ge) and _arange_start(ge.inputs[0], 1) == 0.0 and _arange_start(ge.inputs[1], 0) == k_start


def _is_mask(var, lower: bool) -> bool:
    """``tril``'s mask (``tri(k=0)``) or ``triu``'s (``1 - tri(k=-1)``)."""
    if lower:
        return _is_tri(var, 0.0)
    sub = _owner(var, Elemwise, ps.Sub)
    return bool(sub) and _constant(sub.inputs[0]) == 1.0 and _is_tri(sub.inputs[1], 1.0)


def _masked(var, lower: bool):
    """``x`` if ``var`` is ``x * mask`` (``tril(x)`` / ``triu(x)``), else None."""
    mul = _owner(var, Elemwise, ps.Mul)
    if mul is None or len(mul.inputs) != 2:
        return None
    x, mask = mul.inputs
    return x if _is_mask(mask, lower) else None


def _diag_of(var):
    """``x`` if ``var`` is ``diag(diagonal(x))``-shaped: ``AllocDiag(ExtractDiag(x))`` (offset 0), else the ExtractDiag's input chain."""
    alloc = _owner(var, AllocDiag)
    if alloc is None or _core_op(alloc).offset != 0:
        return None
    return alloc.inputs[0]


def _diagonal(var):
    node = _owner(var, ExtractDiag)
    op = node is not None and _core_op(node)
    nb = node.inputs[0].ndim - 2 if node is not None else 0
    if not op or (op.offset, op.axis1, op.axis2) != (0, nb, nb + 1):
        return None
    return node.inputs[0]


def _upper_solve(var):
    """``(a, b)`` if ``var`` is ``solve_triangular(a, b, lower=False)`` (no unit diagonal, matrix ``b``)."""
    node = _owner(var, SolveTriangular)
    if node is None:
        return None
    op = _core_op(node)
    if op.lower or op.unit_diagonal or op.b_ndim != 2:
        return None
    return node.inputs


def _is_factor(var, lower: bool) -> bool:
    node = _owner(var, Cholesky)
    return node is not None and _core_op(node).lower == lower and _unit_batch(var, 2)


def match(node):
    """``(L, L̄, lower)`` if ``node`` computes ``Cholesky.L_op``'s result ``Ā``, else None."""
    sub = node if isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, ps.Sub) and len(node.inputs) == 2 else None
    if sub is None or not _unit_batch(node.outputs[0], 2):
        return None
    for lower in (True, False):
        found = _match_lower(sub, lower)
        if found is not None:
            return (*found, lower)
    return None


def _match_lower(sub, lower: bool):
    masked, diag = sub.inputs
    s = _diagonal(_diag_of(diag)) if _diag_of(diag) is not None else None
    total = _masked(masked, lower)
    add = total is not None and _owner(total, Elemwise, ps.Add)
    if s is None or not add or len(add.inputs) != 2:
        return None
    if not (_transposed(add.inputs[1]) is s and add.inputs[0] is s or _transposed(add.inputs[0]) is s and add.inputs[1] is s):
        return None
    outer = _upper_solve(s)
    if outer is None:
        return None
    chol_t, inner_t = outer
    chol = _transposed(chol_t)  # pytensor's chol_x: L, or Uᵀ for an upper factor (each ``.T`` a node of its own)
    inner = _upper_solve(_transposed(inner_t)) if _transposed(inner_t) is not None else None
    if chol is None or inner is None or _transposed(inner[0]) is not chol:
        return None
    factor = chol if lower else _transposed(chol)
    if factor is None or not _is_factor(factor, lower):
        return None
    # P = tril(chol_xᵀ @ dz) - diag(diagonal(chol_xᵀ @ dz) / 2), transposed into the inner solve
    p = _transposed(inner[1])
    p_sub = p is not None and _owner(p, Elemwise, ps.Sub)
    if not p_sub or len(p_sub.inputs) != 2:
        return None
    product = _masked(p_sub.inputs[0], True)
    half = _diag_of(p_sub.inputs[1])
    div = half is not None and _owner(half, Elemwise, ps.TrueDiv)
    if product is None or not div or _constant(div.inputs[1]) != 2.0 or _diagonal(div.inputs[0]) is not product:
        return None
    dot = _owner(product, Dot)
    if dot is None or _transposed(dot.inputs[0]) is not chol:
        return None
    dz = dot.inputs[1] if lower else _transposed(dot.inputs[1])
    if dz is None or dz.ndim != factor.ndim or not _unit_batch(dz, 2) or dz.type.dtype != factor.type.dtype:
        return None
    return factor, dz


@node_rewriter([Elemwise])
def fuse_cholesky_grad(fgraph, node):
    """``Cholesky.L_op``'s subgraph ending at ``node`` → ``CholeskyGrad(lower)(L, L̄)`` (see the module docstring)."""
    found = match(node)
    if found is None:
        return None
    factor, dz, lower = found
    nb = factor.ndim - 2  # unit batch axes (a Blockwise Cholesky of a (1, n, n) stack): dropped, then restored
    if nb:
        factor, dz = (pt.squeeze(v, axis=tuple(range(nb))) for v in (factor, dz))
    new = CholeskyGrad(lower)(factor, dz)
    if nb:
        new = pt.shape_padleft(new, nb)
    out = node.outputs[0]
    if new.type.dtype != out.type.dtype:
        return None
    record(fgraph, PASS_NAME)
    return [out.type.filter_variable(new, allow_convert=True)]


def _numba_funcify(op, node, **kwargs):
    """pmfast's implementation; where it declines (another dtype, ``NUMBA_DISABLE_JIT``), pytensor's
    object-mode call of :meth:`CholeskyGrad.perform` (not cached)."""
    from pytensor.link.numba.dispatch.basic import generate_fallback_impl

    from pmfast.compiler import linalg

    found = linalg.funcify(op, node)
    if found is None:
        return generate_fallback_impl(op, node=node, **kwargs), None
    return found


def _register_numba() -> None:
    from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

    register_funcify_and_cache_key(CholeskyGrad)(_numba_funcify)


_register_numba()

cholesky_grad_pass = register_pass(PASS_NAME, "Cholesky.L_op's ~20 nodes as one CholeskyGrad (trmm + 2 trsm in place)")
# at the start of the pipeline (after early_diag), before canonicalize reshapes the L_op's subgraph
cholesky_grad_pass.register(dfs_rewriter(fuse_cholesky_grad), -0.004, name="fuse")

