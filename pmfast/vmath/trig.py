"""sin and cos as branch-free numba kernels, for arguments up to :data:`TRIG_MAX` in magnitude.

Reduction: ``x = k pi/2 + r``, ``k = round(x 2/pi)`` by the 1.5 * 2^52 shifter (whose low bits then
hold ``k``, so ``k mod 4`` picks the quadrant), Cody-Waite with ``pi/2`` in three doubles
``PIO2_1 + PIO2_2 + PIO2_3`` (to 5.6e-50):

- ``x - k PIO2_1`` by one fma is exact: ``k PIO2_1`` is a multiple of 2^-52 (``PIO2_1`` in [1, 2)),
  ``x`` one of 2^-53 when ``|x| >= 1/2`` (else ``k = 0``), and the difference is below 1 in magnitude
  (``|r| <= pi/4`` plus ``k |pi/2 - PIO2_1|`` <= 2^30 * 6.2e-17): 53 bits of 2^-53 hold it.
- ``k PIO2_2`` is split exactly by fma, subtracted by a TwoSum, ``k PIO2_3`` added to the tail:
  ``r = rh + rl`` as a double-double with an absolute error of a few ``k`` 2^-160.

Why :data:`TRIG_MAX` = 2^30: the double closest to a multiple of pi/2 in the whole double range
(6381956970095103 * 2^797) is 2^-60.9 away from it (below 2^30: 45.553093477052, 2^-60.5 from
29 pi/2; tests/test_vmath_trig.py), so ``|r| >= 2^-61`` for every double with ``k != 0``, and the reduction's relative error is at most ~``k 2^-158 / 2^-61 <= 2^-67`` (k < 2^30):
below 1/10000 ulp. ``k`` must also fit the shifter (< 2^51); the bound leaves room for both.
Beyond it, and for inf and NaN, the kernels return NaN: libm's value for inf and NaN, and the mark
by which :class:`~pmfast.vmath.elemwise.VmathElemwise` recomputes a node whose result has a NaN with
stock's libm loop (so huge arguments get libm's values; see docs/vmath.md).

Polynomials (tools/fit_vmath.py, minimax in ``z = rh^2`` on ``|r| <= pi/4 (1 + 1e-4)``):
``sin(r) = rh + (rh z S(z) + rl (1 - z/2))`` and ``cos(r) = 1 - z/2 + (z^2 C(z) - rh rl)``, where
``1 - rh^2/2`` is computed as ``w = 1 - hz`` plus its exact rounding error and the exact rounding
error of ``hz = rh^2/2`` (fma). Both are computed for every lane and picked by the quadrant with
selects, so ``sin(x)`` and ``cos(x)`` of the same ``x`` in one loop share all of it after inlining.
"""

from __future__ import annotations

from pmfast.vmath import _cache  # noqa: F401  (registers the cache locator first)
from pmfast.vmath import _coeffs as C
from pmfast.vmath._bits import as_int, fma, horner, select
from pmfast.vmath.explog import NAN, SHIFT, SHIFT_BITS, helper, kernel

#: arguments beyond this (in magnitude) give NaN; see the module docstring
TRIG_MAX = 2.0**30
#: sin(x) rounds to x below this (x^2/6 < 2^-55: under half an ulp); keeps the sign of -0.0
SIN_TINY = 2.0**-27

_sin_s = horner(C.SIN)
_cos_c = horner(C.COS)


@helper
def _sin_cos_parts(x):
    """``(k, s, c)``: ``x = k pi/2 + r``, ``s = sin(r)``, ``c = cos(r)``, for ``|x| <= TRIG_MAX`` (else for 0)."""
    xc = select(abs(x) <= TRIG_MAX, x, 0.0)
    t = xc * C.TWO_OVER_PI + SHIFT
    kd = t - SHIFT
    k = as_int(t) - SHIFT_BITS
    a = fma(-kd, C.PIO2_1, xc)  # exact
    ph = kd * C.PIO2_2
    pl = fma(kd, C.PIO2_2, -ph)  # k PIO2_2 = ph + pl exactly
    s = a - ph
    bb = s - a
    err = (a - (s - bb)) + (-ph - bb)  # TwoSum: a - ph = s + err exactly
    tail = err - (pl + kd * C.PIO2_3)
    rh = s + tail
    rl = (s - rh) + tail  # Fast2Sum: |s| >= |tail|
    z = rh * rh
    sin_r = rh + fma(rh * z, _sin_s(z), rl - 0.5 * z * rl)
    hz = 0.5 * z
    hzl = fma(0.5 * rh, rh, -hz)  # rh^2 / 2 = hz + hzl exactly
    w = 1.0 - hz
    cos_r = w + (((1.0 - w) - hz) + (fma(z * z, _cos_c(z), -rl * rh) - hzl))
    return k, sin_r, cos_r


@helper
def _quadrant(k, s, c):
    """``sin(k pi/2 + r)`` from ``s = sin r`` and ``c = cos r``: s, c, -s, -c by ``k mod 4``."""
    v = select((k & 1) == 0, s, c)
    return select((k & 2) == 0, v, -v)


@kernel
def sin(x):
    """sin(x) for ``|x| <= TRIG_MAX``; NaN beyond and for inf and NaN."""
    k, s, c = _sin_cos_parts(x)
    y = select(abs(x) < SIN_TINY, x, _quadrant(k, s, c))
    return select(abs(x) <= TRIG_MAX, y, NAN)


@kernel
def cos(x):
    """cos(x) for ``|x| <= TRIG_MAX``; NaN beyond and for inf and NaN."""
    k, s, c = _sin_cos_parts(x)
    return select(abs(x) <= TRIG_MAX, _quadrant(k + 1, s, c), NAN)
