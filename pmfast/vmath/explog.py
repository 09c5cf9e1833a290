"""exp, expm1, log, log1p and the logistic family as branch-free numba kernels.

exp/expm1: ``x = k ln2 + r`` with ``k = round(x / ln2)`` (the 1.5 * 2^52 shifter,
whose low bits then hold ``k``), ``ln2`` split in a 32-bit high part (``k * LN2_HI``
and ``x - k * LN2_HI`` are exact) and a low part; ``expm1(r) = r + r^2 P(r)``
with the minimax ``P`` of tools/fit_vmath.py; ``2^k`` by shifting ``k + 1023`` into
the exponent bits, split in two factors so that gradual underflow and overflow
round once.

log/log1p: ``x = 2^k (1 + f)`` with ``1 + f`` in ``[sqrt(1/2), sqrt(2))`` read off the
bits (subnormals scaled by 2^54 first); ``log(1 + f) = f - f^2/2 + s (f^2/2 + R)``,
``s = f / (2 + f)``, ``R = s^2 T(s^2)``. log1p adds the rounding error of ``1 + x``
(a TwoSum, exact) as ``err / (1 + x)``.

Special values are fixed by selects at the end, never by branches, so a loop
calling these kernels vectorizes; NaN propagates through every path.
"""

from __future__ import annotations

import math
import struct

from numba import njit

from pmfast.vmath import _cache  # noqa: F401  (registers the cache locator first)
from pmfast.vmath import _coeffs as C
from pmfast.vmath._bits import as_float, as_int, fma, horner, select


def _bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


SHIFT = 6755399441055744.0  # 1.5 * 2^52
SHIFT_BITS = _bits(SHIFT)
EXP_LO = -746.0  # exp rounds to 0 below -745.14
EXP_HI = 710.0  # and overflows above 709.79
EXPM1_LO = -40.0  # expm1 rounds to -1 below -37.5
TINY = 2.0**-54  # expm1(x) and log1p(x) round to x for |x| below
MIN_NORMAL = 2.0**-1022
TWO54 = 2.0**54
SQRT_HALF_BITS = _bits(math.sqrt(0.5))
EXP_MASK = -(1 << 52)  # sign and exponent bits of an int64
INF = math.inf
NAN = math.nan

_expm1_p = horner(C.EXPM1)
_log_t = horner(C.LOG)

#: Every kernel: IEEE arithmetic (fastmath=False must be explicit: numba otherwise inherits
#: the caller's flags, and reassociation would fold the shifter's rounding away), no
#: division checks, inlined into the caller whatever its size (LLVM's alwaysinline), cached.
kernel = njit(fastmath=False, error_model="numpy", forceinline=True, cache=True)
#: A private helper of the kernels: inlined into each kernel at numba's IR level, so it is typed,
#: lowered and optimised as part of the kernel instead of compiled on its own (a separate
#: numba function costs a pipeline run and an LLVM module of its own: ~0.05-0.1 CPU s each in a
#: cold process). Inlined IR is typed with the caller's flags: every caller is a ``kernel``
#: (IEEE arithmetic), so the code is the same as a called helper's.
helper = njit(fastmath=False, error_model="numpy", inline="always")


@helper
def _clamp(x, lo, hi):
    """``x`` limited to ``[lo, hi]``; NaN stays NaN."""
    x = select(x < lo, lo, x)
    return select(x > hi, hi, x)


@helper
def _reduce(hi, lo):
    """``(k, rh, tail)`` with ``exp(hi + lo) = 2^k (1 + rh + tail)``, ``rh`` exact and ``|rh + tail| <= ln2/2``."""
    t = hi * C.INV_LN2 + SHIFT
    kd = t - SHIFT
    k = as_int(t) - SHIFT_BITS
    rh = hi - kd * C.LN2_HI
    rl = lo - kd * C.LN2_LO
    r2 = fma(rh, rh, rl * (rh + rh + rl))  # (rh + rl)^2 rounded once
    return k, rh, fma(r2, _expm1_p(rh + rl), rl)


@helper
def _scale(e, k):
    """``e * 2^k`` for ``k`` in [-1100, 1100], rounded once (overflow to inf, gradual underflow)."""
    k1 = k >> 1
    return (e * as_float((k1 + 1023) << 52)) * as_float((k - k1 + 1023) << 52)


@helper
def _exp_parts(hi, lo):
    """``(k, s, c)`` with ``exp(hi + lo) = 2^k (s + c)``, ``s = 1 + rh`` rounded and ``c`` the rest.

    ``1 + rh`` is a Fast2Sum (its rounding error is exact and joins ``c``), so
    that ``s + c`` is rounded once by the caller, after any factor is applied.
    ``hi`` is clamped to where exp is neither 0 nor inf (``lo`` is dropped there).
    """
    inside = abs(hi) < EXP_HI
    k, rh, tail = _reduce(_clamp(hi, EXP_LO, EXP_HI), select(inside, lo, 0.0))
    s = 1.0 + rh
    return k, s, ((1.0 - s) + rh) + tail


@kernel
def exp(x):
    """e^x."""
    k, s, c = _exp_parts(x, 0.0)
    return _scale(s + c, k)


@kernel
def exp_dd(hi, lo):
    """e^(hi + lo) for a double-double ``hi + lo`` (``|lo| <= ulp(hi)``): the exp of an argument known
    more precisely than one double holds (e.g. ``-x*x`` split exactly, as erfc needs)."""
    k, s, c = _exp_parts(hi, lo)
    return _scale(s + c, k)


@kernel
def exp_dd_mul(hi, lo, mh, ml):
    """``(mh + ml) e^(hi + lo)`` for double-doubles, with one rounding at the end (before gradual underflow)."""
    k, s, c = _exp_parts(hi, lo)
    return _scale(fma(mh, s, fma(ml, s, mh * c)), k)


@kernel
def expm1(x):
    """e^x - 1, accurate near 0."""
    k, rh, tail = _reduce(_clamp(x, EXPM1_LO, EXP_HI), 0.0)
    h = as_float((k + 1022) << 52)  # 2^(k-1): expm1(x) = 2 (h - 1/2 + h rh + h tail)
    big = k > 53  # h - 1/2 is inexact: the 1/2 joins the small terms
    a = h - select(big, 0.0, 0.5)
    b = h * rh  # exact, like a (k >= -52), and |b| <= |a| unless a = 0
    s = a + b
    y = 2.0 * (s + ((b - (s - a)) + fma(h, tail, select(big, -0.5, 0.0))))  # Fast2Sum: a + b = s + (b - (s - a))
    return select(abs(x) < TINY, x, y)


@helper
def _log_parts(x):
    """``(k, f)`` with ``x = 2^k (1 + f)``, ``1 + f`` in ``[sqrt(1/2), sqrt(2))``, for a positive normal ``x``."""
    ix = as_int(x)
    tmp = ix - SQRT_HALF_BITS
    k = tmp >> 52
    return k, as_float(ix - (tmp & EXP_MASK)) - 1.0


@helper
def _log_core(k, f, c):
    """``log(2^k (1 + f)) + c`` for ``(k, f)`` from :func:`_log_parts` and a small correction ``c``."""
    kd = float(k)
    s = f / (2.0 + f)
    z = s * s
    hfsq = 0.5 * f * f
    r = z * _log_t(z)
    return kd * C.LN2_HI + (f - (hfsq - (s * (hfsq + r) + (kd * C.LN2_LO + c))))


@kernel
def log(x):
    """Natural logarithm."""
    sub = x < MIN_NORMAL
    k, f = _log_parts(select(sub, x * TWO54, x))
    y = _log_core(k - select(sub, 54, 0), f, 0.0)
    y = select(x > 0.0, y, select(x == 0.0, -INF, NAN))
    return select(x == INF, INF, y)


@kernel
def log1p(x):
    """log(1 + x), accurate near 0."""
    u = 1.0 + x
    b = u - 1.0
    err = (1.0 - (u - b)) + (x - b)  # TwoSum: 1 + x = u + err exactly
    k, f = _log_parts(u)
    y = _log_core(k, f, err / u)
    y = select(x > -1.0, y, select(x == -1.0, -INF, NAN))
    y = select(x == INF, INF, y)
    return select(abs(x) < TINY, x, y)


@kernel
def softplus(x):
    """log(1 + e^x) = max(x, 0) + log1p(e^-|x|)."""
    return select(x > 0.0, x, 0.0) + log1p(exp(-abs(x)))


@kernel
def log_sigmoid(x):
    """log(1 / (1 + e^-x)) = -softplus(-x) = -(max(-x, 0) + log1p(e^-|x|)) (-0.0 for x = inf, as stock)."""
    return -(select(x < 0.0, -x, 0.0) + log1p(exp(-abs(x))))


@kernel
def sigmoid(x):
    """1 / (1 + e^-x) = n / (1 + e) with e = e^-|x| and n = 1 or e by the sign of x (no overflow).

    The rounding errors of ``d = 1 + e`` and of the division are added back
    (``dl`` and the residual ``res`` are exact; ``1/d`` is ``q`` or ``1 - q``).
    """
    e = exp(-abs(x))
    pos = x >= 0.0
    n = select(pos, 1.0, e)
    d = 1.0 + e
    dl = (1.0 - d) + e
    q = n / d
    res = fma(-q, d, n)
    return fma(res - q * dl, select(pos, q, 1.0 - q), q)
