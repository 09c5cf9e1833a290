"""LLVM-level helpers the vmath kernels are built from: bit casts, fused multiply-add, select, polynomials.

Each is a numba intrinsic that emits a few LLVM instructions, so the kernels
stay straight-line code that LLVM's loop vectorizer can widen: ``select`` is an
LLVM ``select`` (both sides evaluated, never a branch), ``fma`` the
``llvm.fma.f64`` intrinsic (one rounding; a libm call on a CPU without FMA),
and :func:`horner` / :func:`piecewise_horner` build polynomial evaluators whose
coefficients are constants in the IR.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils

from pmfast.compiler.pure import intrinsic

_F64 = ir.DoubleType()
_I64 = ir.IntType(64)


def _fma(builder, a, b, c):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_F64, [_F64] * 3), "llvm.fma.f64")
    return builder.call(fn, [a, b, c])


@intrinsic
def as_int(typingctx, x):
    """The bits of a float64 as an int64."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], _I64)

    return types.int64(types.float64), codegen


@as_int.python
def _(x):
    return np.float64(x).view(np.int64)


@intrinsic
def as_float(typingctx, i):
    """An int64's bits as a float64."""
    if not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.int64)
        return builder.bitcast(v, _F64)

    return types.float64(i), codegen


@as_float.python
def _(i):
    return np.int64(i).view(np.float64)


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` rounded once."""
    if not all(t == types.float64 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        return _fma(builder, *args)

    return types.float64(types.float64, types.float64, types.float64), codegen


@fma.python
def fma_py(a, b, c):
    """``a * b + c`` rounded once, in Python: exact rational arithmetic, then one rounding."""
    import math
    from fractions import Fraction

    a, b, c = float(a), float(b), float(c)
    if not all(map(math.isfinite, (a, b, c))):
        return np.float64(a * b + c)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:  # the sign of a zero: IEEE's rules, which the rounded operations follow here
        return np.float64(a * b + c) if a * b == 0 else np.float64(0.0)
    try:
        return np.float64(float(exact))
    except OverflowError:
        return np.float64(math.inf if exact > 0 else -math.inf)


@intrinsic
def select(typingctx, cond, a, b):
    """``a if cond else b`` as an LLVM ``select``: both sides are evaluated, no branch."""
    if not isinstance(cond, types.Boolean):
        return None
    t = typingctx.unify_types(a, b)
    if not isinstance(t, (types.Float, types.Integer, types.Boolean)):
        return None

    def codegen(context, builder, sig, args):
        x = context.cast(builder, args[1], sig.args[1], t)
        y = context.cast(builder, args[2], sig.args[2], t)
        return builder.select(args[0], x, y)

    return t(cond, a, b), codegen


@select.python
def _(cond, a, b):
    return np.result_type(a, b).type(a if cond else b)


def horner(coeffs):
    """An intrinsic ``p(v)`` evaluating the polynomial ``coeffs`` (low order first) by Horner's rule with fma."""
    coeffs = tuple(float(c) for c in coeffs)

    @intrinsic
    def poly(typingctx, v):
        if v != types.float64:
            return None

        def codegen(context, builder, sig, args):
            acc = ir.Constant(_F64, coeffs[-1])
            for c in reversed(coeffs[:-1]):
                acc = _fma(builder, acc, args[0], ir.Constant(_F64, c))
            return acc

        return types.float64(types.float64), codegen

    @poly.python
    def _(v):
        acc = coeffs[-1]
        for c in reversed(coeffs[:-1]):
            acc = fma_py(acc, v, c)
        return np.float64(acc)

    return poly


def piecewise_horner(tables):
    """An intrinsic ``p(v, piece) -> (hi, lo)``: the polynomial ``tables[piece]`` at ``v`` as a double-double.

    Each coefficient is picked by a chain of selects on ``piece`` (an int64 in
    ``range(len(tables))``), so lanes of a vector may use different pieces and
    the evaluation stays branch-free. Horner's rule with fma down to the
    linear term; the last step ``c0 + v * rest`` is error-free (exact product
    error by fma, Fast2Sum: valid as ``|v * rest| <= |c0|`` on every piece), so
    ``hi + lo`` carries only the error of ``rest``. Shorter tables are padded
    with zeros.
    """
    tables = [tuple(float(c) for c in t) for t in tables]
    n = max(map(len, tables))
    tables = [t + (0.0,) * (n - len(t)) for t in tables]
    pair = types.UniTuple(types.float64, 2)

    @intrinsic
    def poly(typingctx, v, piece):
        if v != types.float64 or not isinstance(piece, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            x, idx = args
            idx = context.cast(builder, idx, sig.args[1], types.int64)
            is_piece = [builder.icmp_signed("==", idx, ir.Constant(_I64, i)) for i in range(len(tables) - 1)]

            def coef(j):
                c = ir.Constant(_F64, tables[-1][j])
                for i in range(len(tables) - 2, -1, -1):
                    c = builder.select(is_piece[i], ir.Constant(_F64, tables[i][j]), c)
                return c

            rest = coef(n - 1)
            for j in range(n - 2, 0, -1):
                rest = _fma(builder, rest, x, coef(j))
            c0 = coef(0)
            t = builder.fmul(x, rest)
            tl = _fma(builder, x, rest, builder.fneg(t))
            hi = builder.fadd(c0, t)
            lo = builder.fadd(builder.fadd(builder.fsub(c0, hi), t), tl)
            return context.make_tuple(builder, pair, [hi, lo])

        return pair(types.float64, piece), codegen

    @poly.python
    def _(v, piece):
        table = tables[piece] if 0 <= piece < len(tables) - 1 else tables[-1]  # the selects' default
        rest = table[n - 1]
        for j in range(n - 2, 0, -1):
            rest = fma_py(rest, v, table[j])
        c0, v = np.float64(table[0]), np.float64(v)
        t = v * rest
        tl = fma_py(v, rest, -t)
        hi = c0 + t
        return hi, (c0 - hi + t) + tl

    return poly
