"""pmfast's numba implementation of pytensor's ``CumOp`` (``cumsum``/``cumprod`` along an axis).

pytensor's is ``np.cumsum(x)`` for a vector and, for more axes, ``x.transpose(axis first)``, a
running sum over the first axis and the result transposed back. numba compiles its generic code for
these next to every entry that uses one, in every process: ``np.cumsum``'s implementation (per
signature), and for the transposes ``permute_arrays`` with the ``set`` and hashing code its
repeated-axis check needs (bayesian_var_ireland: ~0.5 CPU s of functions of their own, and 2,600 of
the entry module's 22,000 LLVM instructions). Here the node function is a plain loop the entry can
inline: the input made C-contiguous (:func:`pmfast.compiler.arrays.ascontiguous1`), viewed as
``(outer, n, inner)`` around the axis (:func:`pmfast.compiler.native.c_reshape`), and each running
total computed in the order pytensor's code computes it: a vector from a zero accumulator as
numba's ``np.cumsum`` (``c = 0; c += v``), more axes from the first slice
(``res[0] = x[0]; res[m] = res[m - 1] + x[m]``; a copy of ``x`` when the axis has fewer than two
elements). So every value is the same; the result is C-contiguous where pytensor's for an axis
other than 0 is a transposed view (a layout, not a value, which no consumer can observe through
pytensor's types). Float64, float32 and int64 inputs of the output's dtype; others (where numba
widens the accumulator) stay pytensor's.
"""

from __future__ import annotations

from pmfast.compiler import generated

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

_DTYPES = ("float64", "float32", "int64")


def cumop_source(ndim: int, axis: int, mode: str) -> str:
    """Source of ``cumop(x)`` for an ``ndim``-axis input, ``axis`` in ``range(ndim)``, mode ``add`` or ``mul``."""
    op = "+" if mode == "add" else "*"
    dims = [f"c.shape[{k}]" for k in range(ndim)]
    outer = " * ".join(dims[:axis]) or "1"
    inner = " * ".join(dims[axis + 1 :]) or "1"
    lines = [
        "c = _pm_ascontiguous1(x)",
        f"outer = {outer}",
        f"n = c.shape[{axis}]",
        f"inner = {inner}",
        "v = _pm_c_reshape(c, (outer, n, inner))",
        "res = _pm_empty((outer, n, inner), _pm_dtype)",
    ]
    if ndim == 1:
        # numba's np.cumsum / np.cumprod: a running accumulator from 0 (or 1)
        lines += [
            f"acc = _pm_zero({0 if mode == 'add' else 1})",
            "for m in range(n):",
            f"    acc = acc {op} v[0, m, 0]",
            "    res[0, m, 0] = acc",
        ]
    else:
        lines += [
            "if n > 0:",
            "    for o in range(outer):",
            "        for j in range(inner):",
            "            res[o, 0, j] = v[o, 0, j]",
            "        for m in range(1, n):",
            "            for j in range(inner):",
            f"                res[o, m, j] = res[o, m - 1, j] {op} v[o, m, j]",
        ]
    lines.append("return _pm_c_reshape(res, c.shape)")
    return "def cumop(x):\n" + "".join(f"    {line}\n" for line in lines)


def implements(op, node) -> bool:
    """Whether pmfast implements the ``CumOp`` ``node``: an axis, one dtype in and out, float64/float32/int64."""
    x, out = node.inputs[0], node.outputs[0]
    if op.axis is None or op.mode not in ("add", "mul") or x.ndim != out.ndim or x.ndim < 1:
        return False
    if not -x.ndim <= op.axis < x.ndim:
        return False
    return x.type.dtype == out.type.dtype and x.type.dtype in _DTYPES


def funcify(op, node):
    """``(numba function, cache key)`` for a ``CumOp`` node, or None (see :func:`implements`)."""
    import numpy as np

    from pmfast.compiler import arrays, native

    if not implements(op, node):
        return None
    ndim = node.inputs[0].ndim
    dtype = node.inputs[0].type.dtype
    src = cumop_source(ndim, op.axis % ndim, op.mode)
    env = {
        "_pm_ascontiguous1": arrays.ascontiguous1,
        "_pm_c_reshape": native.c_reshape,
        "_pm_empty": arrays.empty2,
        "_pm_dtype": np.dtype(dtype).type,
        "_pm_zero": np.dtype(dtype).type,
    }
    return generated.build(__name__, "cumop", src, env, "pmfast_cumop_", (VERSION, src, dtype, arrays.VERSION))
