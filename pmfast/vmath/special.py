"""digamma (psi) for numba, cacheable: pytensor's numba psi calls scipy's Cython function
through a function pointer, which numba cannot cache (a graph containing psi is recompiled
in every process).

Method (coefficients: tools/fit_psi.py, pure mathematics, mpmath at 60 digits):

* ``x >= 10``: the asymptotic series ``log x - 1/(2x) - sum_{k=1..9} B_2k / (2k x^2k)``
  (remainder below 2^-63 relative at x = 10).
* ``0.99 <= x < 10``: Taylor polynomials of psi in ``d = x - c`` on seven pieces (centre
  ``c`` within a factor 1.3 of every point, so ``x - c`` is exact; 20 to 28 terms). The piece
  around the positive root ``x0 = 1.46163...`` is centred on the double ``X0`` nearest the root:
  ``psi(x) = psi(X0) + d P(d)`` with ``d`` exact keeps relative accuracy where psi crosses 0.
* ``-2^-20 < x < 0.99``: ``psi(x) = psi(1 + x) - 1/x``, with ``1 + x`` as an unevaluated sum
  (its rounding error joins ``d``) and ``1/x`` as a double-double.
* ``x <= -2^-20``: reflection ``psi(x) = psi(1 - x) - pi cot(pi x)``, with ``x = n + f``,
  ``|f| <= 1/2`` (exact), ``cot(pi f)`` from ``tan(pi f)`` (``|f| <= 1/4``) or
  ``tan(pi (1/2 - |f|))`` (exact argument; ``|f| > 1/4``), ``pi f`` as a double-double.

Special values as scipy.special.psi: ``psi(+0) = -inf``, ``psi(-0) = +inf``, nan at the
negative integers (and every x <= -2^52) and at -inf, ``psi(inf) = inf``, nan propagates.

Accuracy: within a few ulp of the exact value everywhere except near the roots of psi on the
negative axis (one in each (-n-1, -n)), where the reflection's two terms cancel: there the
absolute error is a few ulp of ``|psi(1 - x)| + |pi cot(pi x)|`` (as scipy's). See tests/test_psi.py.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pmfast.vmath import _cache  # noqa: F401  (registers the cache locator first)
from pmfast.vmath import _psi_coeffs as C
from pmfast.vmath._bits import fma, horner

SMALL = 2.0**-20  # below this (in magnitude) negative x use 1/x, not the reflection
ASYM_FROM = 10.0

_ASYM = horner(C.ASYM)
_UPPER = tuple(p[0] for p in C.PIECES)
_CENTRE = tuple(p[1] for p in C.PIECES)
_A0 = tuple(p[2][0] for p in C.PIECES)
_P = tuple(horner(p[2][1:]) for p in C.PIECES)
_P0, _P1, _P2, _P3, _P4, _P5, _P6 = _P
assert len(_P) == 7


@njit(fastmath=False, error_model="numpy", cache=True)
def digamma(x):
    """psi(x) = d/dx log Gamma(x), as scipy.special.psi (float64; integers are converted).

    One function (no helpers of its own): every case is reduced to ``psi(y + lo) - a - b``
    with ``y >= 0.99``, so the series below appear once in the code. numba compiles each
    function separately (typing, lowering, an LLVM module of its own), so a cold compile of
    this body costs a fraction of the same code split into helpers.
    """
    x = float(x)
    if x >= 0.99:
        y, lo, a, b = x, 0.0, 0.0, 0.0
    elif x > -SMALL:
        # -2^-20 < x < 0.99 (+-0 included): psi(1 + x) - 1/x
        y = 1.0 + x
        lo = (1.0 - y) + x  # Fast2Sum: |x| < 1
        a = 1.0 / x
        if math.isinf(a):
            return -a
        b = fma(-a, x, 1.0) / x  # 1/x = a + b
    else:
        if not (x > -math.inf):
            return math.nan  # nan or -inf
        n = np.floor(x)
        if x > n + 0.5:
            n += 1.0  # the integer nearest x (n + 0.5 is exact: |n| < 2^52 unless x is an integer)
        f = x - n  # exact (Sterbenz; f = x when n = 0), |f| <= 1/2
        if f == 0.0:
            return math.nan  # a pole (every x <= -2^52 is an integer)
        # psi(x) = psi(1 - x) - pi cot(pi x); cot has period pi
        y = 1.0 - x
        t = y - 1.0
        lo = (1.0 - (y - t)) + (-x - t)  # TwoSum: 1 - x = y + lo
        # a = pi cot(pi f) from t = pi tan(pi g): g = f for |f| <= 1/4, else 1/2 - |f| (exact),
        # pi g and pi as double-doubles
        h = abs(f)
        g = f if h <= 0.25 else 0.5 - h
        th = C.PI * g
        tl = fma(C.PI, g, -th) + C.PI_LO * g
        t = math.tan(th)
        t = fma(tl, fma(t, t, 1.0), t)  # tan(th + tl) = tan th + tl (1 + tan^2 th)
        if h <= 0.25:
            q = C.PI / t
            a = q + (fma(-q, t, C.PI) + C.PI_LO) / t  # (PI + PI_LO) / t, the quotient's error added back
        else:
            v = fma(C.PI, t, C.PI_LO * t)  # cot(pi h) = tan(pi (1/2 - h))
            a = v if f > 0.0 else -v
        b = 0.0
    # psi(y + lo) for y >= 0.99 (inf included) and |lo| <= ulp(y)
    if y >= ASYM_FROM:
        r = 1.0 / y
        z = r * r
        p = math.log(y) - ((0.5 * r + z * _ASYM(z)) - lo * r)
    elif y < _UPPER[1]:
        if y < _UPPER[0]:
            d = (y - _CENTRE[0]) + lo
            p = fma(d, _P0(d), _A0[0])
        else:
            d = (y - _CENTRE[1]) + lo
            p = fma(d, _P1(d), _A0[1])
    elif y < _UPPER[3]:
        if y < _UPPER[2]:
            d = (y - _CENTRE[2]) + lo
            p = fma(d, _P2(d), _A0[2])
        else:
            d = (y - _CENTRE[3]) + lo
            p = fma(d, _P3(d), _A0[3])
    elif y < _UPPER[4]:
        d = (y - _CENTRE[4]) + lo
        p = fma(d, _P4(d), _A0[4])
    elif y < _UPPER[5]:
        d = (y - _CENTRE[5]) + lo
        p = fma(d, _P5(d), _A0[5])
    else:
        d = (y - _CENTRE[6]) + lo
        p = fma(d, _P6(d), _A0[6])
    return (p - a) - b


@njit(fastmath=False, error_model="numpy", cache=True)
def psi(x):
    """The numba function of pytensor's scalar ``Psi`` under pmfast's linker.

    A call to :func:`digamma`, not its body: pmfast inlines scalar op functions into
    Elemwise loops at numba's IR level, where the inlined code takes the caller's
    (fast-math) flags; what it inlines here is only the call, and ``digamma`` keeps
    IEEE arithmetic (LLVM may still inline it: instruction flags survive that).
    """
    return digamma(x)


def cache_key() -> str:
    """The numba cache key of :func:`psi` (changes with any pmfast.vmath source)."""
    from hashlib import sha256

    from pmfast.vmath._cache import VERSION

    return sha256(str(("pmfast.vmath", "psi", VERSION)).encode()).hexdigest()
