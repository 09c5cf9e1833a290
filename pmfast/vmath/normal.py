"""erf, erfc, erfcx and the standard normal cdf (ndtr, log_ndtr) as branch-free numba kernels.

Everything is built on ``G(a) = erfcx(a) = e^(a^2) erfc(a)`` for ``a >= 0``: a smooth,
slowly varying function approximated by minimax polynomials on ``[0, 6)`` in
pieces (in ``a - center``, exact) and by ``Q(1/a^2) / a`` beyond. The piece is
picked per lane by selects on the coefficients (one polynomial evaluation, no
branch). Then

- ``erfc(x) = e^(-x^2) G(|x|)`` (``2 -`` that for ``x < 0``), with ``x^2`` split exactly
  in two doubles so that the exponential loses nothing to the rounding of ``x^2``;
- ``erf(x) = x E(x^2)`` for ``|x| < 1``, else ``sign(x) (1 - erfc(|x|))``; ``E`` is one more
  piece of the same table;
- ``ndtr(x) = Phi(x)``: ``q = e^(-x^2/2) G(|x|/sqrt2) / 2`` is ``Phi(-|x|)``; ``|x|/sqrt2`` is
  carried in two doubles and ``G`` corrected to first order in the low part,
  so that ``Phi`` keeps full precision where ``erfc(-x/sqrt2)`` would lose it to the
  rounding of ``x/sqrt2`` (``x << 0``);
- ``log_ndtr(x) = log Phi(x)``: ``log(G/2) - x^2/2`` for ``x < 0`` (no underflow down to
  ``-1e154`` and beyond), ``log1p(-q)`` for ``x >= 0``, through one shared logarithm.
"""

from __future__ import annotations

from pmfast.vmath import _coeffs as C
from pmfast.vmath._bits import as_float, fma, piecewise_horner, select
from pmfast.vmath.explog import INF, _exp_parts, _log_core, _log_parts, _scale, exp_dd_mul, helper, kernel

#: erf's small-argument piece (``x E(x^2)``, ``|x| < 1``) is the table's last
E_PIECE = len(C.ERFCX_UPPER) + 1
ERF_SMALL = 1.0
ERF_ONE = 6.0  # |erf(x)| rounds to 1 beyond (erfc(6) = 2e-17)
ERFC_ZERO = 27.5  # erfc(x) underflows to 0 beyond (x^2 = 756)
EXP_OVER = 27.0  # e^(x^2) overflows beyond
G_HUGE = 1e300  # |x|/sqrt2 is clamped here for G (Phi(-x) is long 0, log Phi(x) is -x^2/2 to the last bit)

_poly = piecewise_horner([C.ERFCX_0, C.ERFCX_1, C.ERFCX_2, C.ERFCX_3, C.ERFCX_TAIL, C.ERF_SMALL])
_B0, _B1, _B2, _B3 = C.ERFCX_UPPER
_C0, _C1, _C2, _C3 = C.ERFCX_CENTERS


@helper
def _piecewise(a, small):
    """``(hi, lo)``: ``erfcx(a)`` for ``a >= 0`` (or NaN), or ``E(a^2)`` where ``small``, as a double-double."""
    piece = select(a < _B0, 0, select(a < _B1, 1, select(a < _B2, 2, select(a < _B3, 3, 4))))
    center = select(a < _B0, _C0, select(a < _B1, _C1, select(a < _B2, _C2, _C3)))
    inv = 1.0 / a
    tail = select(small, False, piece == 4)
    v = select(small, a * a, select(tail, inv * inv, a - center))
    ph, pl = _poly(v, select(small, E_PIECE, piece))
    # the tail piece is Q(1/a^2) = a erfcx(a): divide the pair by a (exact residual)
    gh = ph / a
    gl = select(a < INF, (fma(-gh, a, ph) + pl) / a, 0.0)
    return select(tail, gh, ph), select(tail, gl, pl)


@helper
def _square(a):
    """``(hi, lo)`` with ``a * a = hi + lo`` exactly."""
    hi = a * a
    return hi, fma(a, a, -hi)


@kernel
def erfcx(x):
    """e^(x^2) erfc(x)."""
    a = abs(x)
    gh, gl = _piecewise(a, False)
    # x < 0: 2 e^(x^2) - G = 2^k (2s - G 2^-k + 2c) with e^(x^2) = 2^k (s + c), k >= 0
    hi, lo = _square(select(a > EXP_OVER, EXP_OVER, a))
    k, s, c = _exp_parts(hi, lo)
    down = as_float((1023 - select(k > 1000, 1000, k)) << 52)  # 2^-k (G is negligible where clamped)
    bh = -gh * down
    t = 2.0 * s + bh
    neg = _scale(t + (((bh - (t - 2.0 * s)) - gl * down) + 2.0 * c), k)  # Fast2Sum: 2s + bh = t + (bh - (t - 2s))
    return select(x < 0.0, neg, gh + gl)


@kernel
def erfc(x):
    """1 - erf(x), accurate for large x (down to the smallest subnormal)."""
    a = abs(x)
    gh, gl = _piecewise(a, False)
    hi, lo = _square(select(a > ERFC_ZERO, ERFC_ZERO, a))
    q = exp_dd_mul(-hi, -lo, gh, gl)
    return select(x < 0.0, 2.0 - q, q)


@kernel
def erf(x):
    """The error function."""
    a = abs(x)
    small = a < ERF_SMALL
    ac = select(a > ERF_ONE, ERF_ONE, a)
    ph, pl = _piecewise(ac, small)
    hi, lo = _square(ac)
    big = 1.0 - exp_dd_mul(-hi, -lo, ph, pl)
    return select(small, fma(x, ph, x * pl), select(x < 0.0, -big, big))


@helper
def _phi_tail(x):
    """``(q, gh, gl, hi, lo)``: ``q = Phi(-|x|) = e^(-x^2/2) G / 2``, ``G = erfcx(|x|/sqrt2) = gh + gl``, ``x^2/2 = hi + lo``."""
    ax = abs(x)
    axc = select(ax > G_HUGE, G_HUGE, ax)
    a = axc * C.INV_SQRT2
    alo = fma(axc, C.INV_SQRT2, -a) + axc * C.INV_SQRT2_LO  # |x|/sqrt2 = a + alo
    gh, gl = _piecewise(a, False)
    # G' = 2aG - 2/sqrt(pi), which cancels for large a: there G' = -(G/a)(1 - 1/a^2) to O(a^-4)
    dg = select(a < ERF_ONE, 2.0 * (a * gh) - C.TWO_INV_SQRTPI, -(gh / a) * (1.0 - 1.0 / (a * a)))
    gl = fma(alo, dg, gl)
    half = 0.5 * ax
    hi = half * ax  # x^2/2 = hi + lo exactly; finite up to |x| = 1.9e154 (x^2 alone overflows at 1.3e154)
    lo = select(hi == INF, 0.0, fma(half, ax, -hi))
    return exp_dd_mul(-hi, -lo, 0.5 * gh, 0.5 * gl), gh, gl, hi, lo


@kernel
def ndtr(x):
    """The standard normal cdf Phi(x)."""
    q, _, _, _, _ = _phi_tail(x)
    return select(x < 0.0, q, 1.0 - q)


@kernel
def log_ndtr(x):
    """log Phi(x): ``log(G/2) - x^2/2`` for x < 0, ``log1p(-Phi(-x))`` for x >= 0, through one logarithm."""
    q, gh, gl, hi, lo = _phi_tail(x)
    neg = x < 0.0
    u = select(neg, 0.5 * gh, 1.0 - q)  # G >= 1e-300: u is normal
    err = select(neg, 0.5 * gl, (1.0 - u) - q)  # Fast2Sum: 1 - q = u + err exactly
    k, f = _log_parts(u)
    y = _log_core(k, f, err / u)
    return select(neg, (y - hi) - lo, y)
