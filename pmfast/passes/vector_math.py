"""``vector_math``: scalar bodies call pmfast.vmath's vectorizable kernels instead of libm.

llvmlite here has no SVML: ``exp``/``log``/``log1p``/``erfc``... in a numba loop
are scalar libm calls, and a loop that makes one never vectorizes. The rewrite
replaces, in every scalar body the numba backend compiles into a loop, the
stock scalar ops ``exp, expm1, log, log1p, softplus, sigmoid, erf, erfc, erfcx, gammaln, psi, log1mexp,
sin, cos`` by subclasses (:mod:`pmfast.vmath.ops`) whose numba function is the
branch-free pmfast.vmath kernel, which LLVM inlines and widens. Matched:

- ``Elemwise`` nodes (a single op or a ``Composite``; stock's ``_vectorized``
  loop calls the body per element);
- ops with a ``scalar_op`` prop, or with a dataclass prop (pmfast's fused
  loops: ``IndexedElemwise.loop``) holding a ``scalar_op`` field, if their class
  says its loop vectorizes the body (``vectorizes_scalar_body = True``): rebuilt
  as ``type(op)(**props)`` with the scalar op replaced. A loop that stays scalar
  keeps libm, which is faster than the kernels one element at a time (exp 2.8
  vs 4.0 ns, erf 12 vs 22 ns: the kernels trade latency for width).

Elemwise nodes become :class:`~pmfast.vmath.elemwise.VmathElemwise`, lowered like
stock but with the body inlined into the loop and the inputs made contiguous,
without which the loop does not vectorize (a call per element, or strided loads).
Short loops keep libm, where it is faster than a widened loop that runs mostly in its scalar
remainder: nodes of static size below :data:`MIN_STATIC_SIZE` or the body's crossover
(:func:`~pmfast.vmath.elemwise.libm_below`) are declined here; a node whose size is not static (``pm.Data``, which users
resize) is converted and its loop branches to stock's libm loop below that size at run time.

sin and cos are converted in Elemwise bodies only (not in fused loops), where a NaN they return
shows in the outputs (:func:`~pmfast.vmath.ops.nan_shows`): their kernels return NaN beyond
``|x| = 2^30`` and the loop then recomputes the node with libm, so huge arguments get libm's values.

Safe because each kernel computes the same function within 2 ulp (the table
in docs/vmath.md; gammaln and psi: a few ulp, or a few 1e-16 absolute near their roots), with the
same special values; only float64 ops are replaced (gammaln and psi: also of integer inputs). Declined entirely while :func:`pmfast.vmath.is_enabled` is false
(the one switch: ``pmfast.vmath.disable()`` / ``PMFAST_VECTOR_MATH=0`` give
libm's exact values). The switch state is in the graph itself (vmath ops or
stock ops), so every numba cache key follows it.
"""

from __future__ import annotations

import dataclasses
import logging
import math

from pytensor.tensor.elemwise import Elemwise

from pmfast.passes.registry import record, register_pass
from pmfast.passes.rewriting import PassRewriter

_log = logging.getLogger(__name__)

PASS_NAME = "vector_math"
#: Elemwise nodes whose static size is below this keep libm (or below the body's
#: :func:`~pmfast.vmath.elemwise.libm_below`, if larger): eight_schools' 8-element loops were
#: 1.14x stock converted, 1.0x not
MIN_STATIC_SIZE = 16


def converted_op(node):
    """``node.op`` with its scalar body using pmfast.vmath, or ``None`` if nothing changes."""
    from pmfast.vmath.ops import vmath_scalar_op

    op = node.op
    if isinstance(op, Elemwise):
        from pmfast.vmath import elemwise

        if isinstance(op, elemwise.VmathElemwise):
            return None
        new = vmath_scalar_op(op.scalar_op, [i.type.dtype for i in node.inputs], [o.type.dtype for o in node.outputs],
                              nan_marked=True)
        if new is None:
            return None
        shape, below = node.outputs[0].type.shape, elemwise.libm_below(new)  # inf: libm at any length
        if below == math.inf or (None not in shape and math.prod(shape) < max(MIN_STATIC_SIZE, below)):
            return None
        return elemwise.VmathElemwise(new, inplace_pattern=op.inplace_pattern)
    if not getattr(op, "vectorizes_scalar_body", False):
        return None
    props = op._props_dict()
    for name, value in props.items():
        if name == "scalar_op":
            new = _loop_body(value, node)
            if new is not None:
                return type(op)(**{**props, name: new})
        elif dataclasses.is_dataclass(value) and hasattr(value, "scalar_op"):
            new = _loop_body(value.scalar_op, node)
            if new is not None:
                return type(op)(**{**props, name: dataclasses.replace(value, scalar_op=new)})
    return None


def _loop_body(scalar_op, node):
    """A loop op's scalar body, converted. Its inputs are what the loop reads (not
    the node's inputs: index arrays, buffers), so the dtypes come from the scalar
    graph (a Composite), else every float input and output of the node must be float64."""
    from pytensor.scalar.basic import Composite

    from pmfast.vmath.ops import vmath_scalar_op

    if isinstance(scalar_op, Composite):
        inner = scalar_op.fgraph
        return vmath_scalar_op(scalar_op, [i.type.dtype for i in inner.inputs], [o.type.dtype for o in inner.outputs])
    floats = {v.type.dtype for v in (*node.inputs, *node.outputs) if v.type.dtype.startswith("float")}
    return vmath_scalar_op(scalar_op, ["float64"], ["float64"]) if floats == {"float64"} else None


class VectorMath(PassRewriter):
    """Replace libm scalar ops by pmfast.vmath ops in every Elemwise body and fused loop (if the switch is on)."""

    reason = PASS_NAME

    def apply(self, fgraph):
        import pmfast.vmath

        if not pmfast.vmath.is_enabled():
            return
        n = 0
        for node in fgraph.toposort():
            try:
                op = converted_op(node)
            except Exception:
                _log.debug("vector_math: declined %s", node, exc_info=True)
                continue
            if op is not None:
                n += self.attempt(fgraph, lambda: list(zip(node.outputs, op.make_node(*node.inputs).outputs)), node)
        if n:
            record(fgraph, PASS_NAME, n)


vector_math_pass = register_pass(
    PASS_NAME, "exp/log/log1p/expm1/softplus/sigmoid/erf/erfc/erfcx/gammaln/psi/log1mexp/sin/cos in loop bodies as vectorizable pmfast.vmath kernels"
)

# Position 49.3: after every pass that builds or rewrites scalar bodies (fusion 49,
# wide_split 49.15, indexed_elemwise 49.18-49.22, softmax_rows 49.25), so they all
# match stock scalar ops and the bodies they leave are converted once; before the
# destroy handler (49.5) and the inplace rewrites (50.5), which rebuild Elemwise
# ops from their props and keep the vmath scalar ops.
vector_math_pass.register(VectorMath(), 49.3, name="substitute")
