"""pmfast's numba implementation of pytensor's partial ``CAReduce`` (``Sum``/``Prod``/``Max``/``Min`` over some axes).

pytensor's loops visit the input in its logical index order and update the result in memory,
``res[i1] += x[i0, i1]``: every update loads and stores ``res`` (LLVM cannot keep it in a
register, ``res`` and ``x`` may alias for all it knows), so each output is a chain of
store-to-load round trips, and when the input is a transposed view the loop strides across memory.
lkj_cholesky_cov_mvnormal's gradient: ``Sum{axis=0}`` of a transposed (10,000, 2) matrix 33 µs and
``Sum{axis=1}`` of a (2, 10,000) one 15 µs, where the same data read in memory order is ~2 µs.

Here each output is accumulated in a local variable over the reduced axes, innermost, and stored
once (the "scalar" nest), unless the input's innermost axis in memory is a kept one and there are
at least :data:`MANY_OUTPUTS` outputs: then the "memory" nest, reduced axes outside and kept ones
inside, the result updated in place (pytensor's order for a matrix's column sums; for the row sums
of a transposed view, the order that reads it along memory). The choice is made at run time from the strides. Both nests visit each
output's terms in the same order (the reduced axes' lexicographic order) as pytensor's; with
pytensor's fastmath flags (``reassoc``) LLVM may split the scalar nest's innermost sum into partial
sums (as it does already for pytensor's whole-array ``Sum``): sums then differ from pytensor's by
rounding only (tests/test_compiler_careduce.py bounds it). Products, maxima and minima use the same
update as pytensor's (``res < v`` for the maximum: NaN is skipped as there), and an empty reduced
axis gives the identity, as pytensor's.

Handled: ``Add``/``Mul``/``Maximum``/``Minimum`` reductions of float64/float32 matrices over one axis,
accumulating in the input's dtype. The rest stays pytensor's: on 3-D inputs (50 × 40 × 60) the
nests measured slower than pytensor's loops (a sum over axes (0, 2) 37–39 against 16–22 µs, over
axis 1 24–25 against 17–19), on matrices the same or faster (a transposed matrix's column sums 95–100
against 111–121 µs, row maxima of (2,000, 8) 5.4–6.6 against 10–11). The generated code is
general (``max_ndim``), so its tests cover 3-D inputs too.
"""

from __future__ import annotations

import os

import numpy as np

from pmfast.compiler import generated

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

#: Inputs of more axes stay pytensor's (see the module docstring).
MAX_NDIM = 2

#: Below this many outputs the scalar nest is used even when a kept axis is innermost in memory.
MANY_OUTPUTS = 16

_DTYPES = ("float64", "float32")
_UPDATES = {
    "Add": "{a} = {a} + {v}",
    "Mul": "{a} = {a} * {v}",
    "Maximum": "if {a} < {v}:\n    {a} = {v}",
    "Minimum": "if {a} > {v}:\n    {a} = {v}",
}


def implements(op, node, max_ndim: int = MAX_NDIM) -> bool:
    """Whether pmfast implements the ``CAReduce`` ``node`` (see the module docstring)."""
    from pytensor.tensor.elemwise import CAReduce
    from pytensor.tensor.math import Max, Min, Prod, Sum

    if type(op) not in (CAReduce, Sum, Prod, Max, Min) or type(op.scalar_op).__name__ not in _UPDATES:
        return False
    x, out = node.inputs[0], node.outputs[0]
    dtype = x.type.dtype
    acc = getattr(op, "acc_dtype", None) or out.type.dtype
    if dtype not in _DTYPES or out.type.dtype != dtype or np.dtype(acc) != np.dtype(dtype):
        return False
    axes = _axes(op, x.ndim)
    return x.ndim <= max_ndim and 0 < len(axes) < x.ndim and out.ndim == x.ndim - len(axes)


def _axes(op, ndim) -> tuple[int, ...]:
    axis = op.axis if op.axis is not None else range(ndim)
    return tuple(sorted({a % ndim for a in axis}))


def _indent(lines, depth):
    return [" " * (4 * depth) + line for text in lines for line in text.split("\n")]


def careduce_source(ndim: int, axes: tuple[int, ...], scalar: str, scalar_only: bool = False) -> str:
    """Source of ``careduce(x)`` reducing ``axes`` (sorted) of an ``ndim``-axis input with the scalar op named
    ``scalar``. ``scalar_only``: the output is known to have fewer than :data:`MANY_OUTPUTS` elements (static
    lengths), so the run-time choice would always take the scalar nest: only that nest is emitted (half the
    code an entry inlining it types, lowers and optimises)."""
    kept = [k for k in range(ndim) if k not in axes]
    idx = ", ".join(f"i{k}" for k in range(ndim))
    out_idx = ", ".join(f"i{k}" for k in kept) + ("," if len(kept) == 1 else "")
    update = _UPDATES[scalar]
    if scalar_only:
        lines = ["s = x.shape", f"res = _pm_empty(({', '.join(f's[{k}]' for k in kept)},), _pm_dtype)"]
        lines += _scalar_nest(kept, axes, ndim, update, idx, out_idx, 0)
        lines.append("return res")
        return "def careduce(x):\n" + "".join(f"    {line}\n" for line in lines)
    lines = [
        "s = x.shape",
        "st = x.strides",
        f"res = _pm_empty(({', '.join(f's[{k}]' for k in kept)},), _pm_dtype)",
        f"n_out = {' * '.join(f's[{k}]' for k in kept)}",
        # the axis innermost in memory: the smallest stride among axes longer than one
        "inner = -1",
        "best = 0",
        f"for k in range({ndim}):",
        "    a = abs(st[k])",
        "    if s[k] > 1 and (inner < 0 or a < best):",
        "        inner = k",
        "        best = a",
        f"kept_inner = {' or '.join(f'inner == {k}' for k in kept)}",
        f"if kept_inner and n_out >= {MANY_OUTPUTS}:",
    ]
    # the memory nest: reduced axes outside, the result updated in place along the kept ones inside
    fill = [" " * (4 * d) + f"for i{k} in range(s[{k}]):" for d, k in enumerate(kept)]
    fill.append(" " * (4 * len(kept)) + f"res[{out_idx}] = _pm_identity")
    nest = [" " * (4 * d) + f"for i{k} in range(s[{k}]):" for d, k in enumerate((*axes, *kept))]
    nest += _indent([update.format(a=f"res[{out_idx}]", v=f"x[{idx}]")], ndim)
    lines += _indent(fill + nest, 1)
    lines.append("else:")
    lines += _scalar_nest(kept, axes, ndim, update, idx, out_idx, 1)
    lines.append("return res")
    return "def careduce(x):\n" + "".join(f"    {line}\n" for line in lines)


def _scalar_nest(kept, axes, ndim, update, idx, out_idx, depth) -> list[str]:
    """The scalar nest's lines at ``depth``: kept axes outside, each output accumulated over the reduced axes inside."""
    scal = [" " * (4 * d) + f"for i{k} in range(s[{k}]):" for d, k in enumerate(kept)]
    d0 = len(kept)
    scal.append(" " * (4 * d0) + "acc = _pm_identity")
    scal += [" " * (4 * (d0 + d)) + f"for i{k} in range(s[{k}]):" for d, k in enumerate(axes)]
    scal += _indent([update.format(a="acc", v=f"x[{idx}]")], d0 + len(axes))
    scal.append(" " * (4 * d0) + f"res[{out_idx}] = acc")
    return _indent(scal, depth)


def funcify(op, node, max_ndim: int = MAX_NDIM):
    """``(numba function, cache key)`` for a partial ``CAReduce`` node, or None (see :func:`implements`)."""
    from pmfast.compiler import arrays

    if not implements(op, node, max_ndim):
        return None
    x = node.inputs[0]
    dtype = np.dtype(x.type.dtype)
    scalar = type(op.scalar_op).__name__
    identity = dtype.type(op.scalar_op.identity)
    axes = _axes(op, x.ndim)
    kept = [x.type.shape[k] for k in range(x.ndim) if k not in axes]
    scalar_only = (None not in kept and int(np.prod(kept)) < MANY_OUTPUTS
                   and os.environ.get("PMFAST_CAREDUCE_STATIC", "1") != "0")
    src = careduce_source(x.ndim, axes, scalar, scalar_only)
    env = {"_pm_empty": arrays.empty2, "_pm_dtype": dtype.type, "_pm_identity": identity}
    key_parts = (VERSION, src, dtype.name, repr(identity), arrays.VERSION)
    return generated.build(__name__, "careduce", src, env, "pmfast_careduce_", key_parts, boundscheck=False)
