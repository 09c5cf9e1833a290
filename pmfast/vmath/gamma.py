"""gammaln, digamma and log1mexp as branch-free numba kernels, so that likelihood loops calling them vectorize.

NegativeBinomial, Poisson (``gammaln(y + 1)``), Beta-binomial, Dirichlet-multinomial and StudentT
logps call ``gammaln`` per element and their gradients ``digamma``; with libm's ``lgamma`` and a
branchy ``digamma`` (:mod:`pmfast.vmath.special`) such a loop runs one element at a time. Method,
for every lane alike (selects, no branch):

* ``x < 0`` is reflected: ``u = 1 - x``; otherwise ``u = x``.
* ``u`` is shifted up to ``t >= 8``: ``t = u + m`` with ``m <= 8`` and ``p = u (u + 1) ... (u + m - 1)``
  (for ``digamma`` also ``q/p = sum 1/(u + k)`` accumulated as one fraction), eight select steps;
  ``gammaln(u) = gammaln(t) - log p``, ``digamma(u) = digamma(t) - q/p``.
* ``t >= 8``: Stirling's series, ``(t - 1/2) log t - t + log(2 pi)/2 + sum B_2k / (2k (2k-1) t^(2k-1))``
  and ``log t - 1/(2t) - sum B_2k / (2k t^2k)`` (ten and eleven terms: the remainder is below 1e-17 at t = 8).
* reflection: ``gammaln(x) = log(pi / |sin(pi x)|) - gammaln(1 - x)``, ``digamma(x) = digamma(1 - x) -
  pi cos(pi f) / sin(pi f)`` with ``f = x - round(x)`` exact and the Taylor series of ``sin(pi f)``, ``cos(pi f)``.

Special values as scipy.special: ``gammaln`` is ``+inf`` at 0, the negative integers and ``+-inf``;
``digamma(+0) = -inf``, ``digamma(-0) = +inf``, nan at the negative integers and at ``-inf``,
``digamma(inf) = inf``; nan propagates.

Accuracy (tests/test_vmath_gamma.py, against mpmath): relative 1e-14 where the result's magnitude is
above 1; where it is below, the same as an absolute error: the series' terms and ``log p`` (~15 for small
``x``) cancel, so near the roots (gammaln at 1 and 2, digamma at 1.4616) the relative error is unbounded,
which libm's ``lgamma`` avoids. Likelihood sums and their gradients need the absolute accuracy. Near
digamma's negative poles the kernel is the more accurate one (scipy: 2e-12 relative at -16.99994).
"""

from __future__ import annotations

import math
from fractions import Fraction

from pmfast.vmath import _cache  # noqa: F401  (registers the cache locator first)
from pmfast.vmath._bits import horner, select
from pmfast.vmath.explog import expm1, exp, helper, kernel, log, log1p

SHIFT_TO = 8.0
SHIFT = 6755399441055744.0  # 1.5 * 2^52: (x + SHIFT) - SHIFT rounds |x| < 2^51 to an integer
TWO52 = 2.0**52
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
LOG_PI = math.log(math.pi)
LN_HALF = -math.log(2.0)
INF = math.inf
NAN = math.nan

_BERNOULLI = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66), Fraction(-691, 2730),
              Fraction(7, 6), Fraction(-3617, 510), Fraction(43867, 798), Fraction(-174611, 330), Fraction(854513, 138)]
#: gammaln(t) - Stirling's leading terms = (1/t) * LGAMMA_SERIES(1/t^2)
_lgamma_series = horner([float(b / (2 * k * (2 * k - 1))) for k, b in enumerate(_BERNOULLI[:10], 1)])
#: log t - 1/(2t) - digamma(t) = z * PSI_SERIES(z), z = 1/t^2
_psi_series = horner([float(b / (2 * k)) for k, b in enumerate(_BERNOULLI, 1)])
#: sin(pi f) = f * SIN(f^2), cos(pi f) = COS(f^2) for |f| <= 1/2 (Taylor; the tails are below 1e-18)
_sinpi = horner([(-1) ** k * math.pi ** (2 * k + 1) / math.factorial(2 * k + 1) for k in range(12)])
_cospi = horner([(-1) ** k * math.pi ** (2 * k) / math.factorial(2 * k) for k in range(13)])


@helper
def _reflect(x):
    """``(neg, u, f)``: whether ``x < 0``, ``u = 1 - x`` if so else ``x``, and ``f = x - round(x)`` (exact)."""
    neg = x < 0.0
    n = select(abs(x) < TWO52, (x + SHIFT) - SHIFT, x)
    return neg, select(neg, 1.0 - x, x), x - n


@helper
def _step(t, p, q):
    """One shift: if ``t < 8``, ``(t + 1, p t, q t + p)``."""
    c = t < SHIFT_TO
    return select(c, t + 1.0, t), select(c, p * t, p), select(c, q * t + p, q)


@helper
def _shift(u):
    """``(t, p, q)``: ``t = u + m >= 8`` (``m <= 8``; ``t = u`` if ``u >= 8`` or nan), ``p = u (u+1) ... (u+m-1)``,
    ``q / p = sum_k 1 / (u + k)``. Eight steps written out: a loop here would be an inner loop, which
    keeps LLVM from vectorizing the caller's."""
    t, p, q = _step(u, 1.0, 0.0)
    t, p, q = _step(t, p, q)
    t, p, q = _step(t, p, q)
    t, p, q = _step(t, p, q)
    t, p, q = _step(t, p, q)
    t, p, q = _step(t, p, q)
    t, p, q = _step(t, p, q)
    return _step(t, p, q)


@kernel
def gammaln(x):
    """log |Gamma(x)| (scipy.special.gammaln). One logarithm serves ``log p`` and the reflection's ``log |s|``."""
    x = float(x)
    neg, u, f = _reflect(x)
    t, p, _ = _shift(u)
    r = 1.0 / t
    a = (t - 0.5) * (log(t) - 1.0) + (HALF_LOG_2PI - 0.5) + r * _lgamma_series(r * r)  # gammaln(t)
    s = abs(f * _sinpi(f * f))
    lg = log(select(neg, p / s, p))
    g = select(neg, (LOG_PI - a) + lg, a - lg)  # gammaln(x) = log(pi / s) - (a - log p) for x < 0
    return select(abs(x) == INF, INF, g)


@kernel
def digamma(x):
    """psi(x) = d/dx log Gamma(x) (scipy.special.psi). One division serves ``q/p`` and the reflection's cotangent."""
    x = float(x)
    neg, u, f = _reflect(x)
    t, p, q = _shift(u)
    r = 1.0 / t
    z = r * r
    f2 = f * f
    s = f * _sinpi(f2)
    c = select(neg, math.pi * _cospi(f2), 0.0)
    s = select(neg, s, 1.0)
    d = (log(t) - 0.5 * r - z * _psi_series(z)) - (q * s + c * p) / (p * s)  # q/p + pi cot(pi f) for x < 0
    d = select(neg & (f == 0.0), NAN, d)
    return select(x == INF, INF, d)


@kernel
def log1mexp(x):
    """log(1 - e^x) for x <= 0 (nan above), as pytensor's ``log1mexp``: ``log1p(-e^x)`` below log(1/2), else ``log(-expm1(x))``."""
    return select(x < LN_HALF, log1p(-exp(x)), log(-expm1(x)))
