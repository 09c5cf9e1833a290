"""Fit the polynomial coefficients of pmfast.vmath and write ``pmfast/vmath/_coeffs.py``.

Run ``python tools/fit_vmath.py`` (about five minutes; mpmath only). Each fit is a
weighted minimax (Remez) polynomial whose weight turns the polynomial's error
into the relative error of the function it serves; the table printed at the
end gives that error after rounding the coefficients to doubles, in units of
2^-53 (before the rounding of the evaluation itself).

Fits:
- ``EXPM1``: P(r) = (expm1(r) - r) / r^2 on |r| <= ln2/2, weight r^2/|expm1 r|
  (exp(r) = 1 + r + r^2 P and expm1(r) = r + r^2 P share it; the expm1 weight
  is the stricter one).
- ``LOG``: T(z) = (2 atanh(s) - 2s) / s^3, z = s^2, s = f/(2+f), |s| <= (sqrt2-1)/(sqrt2+1)
  (log1p(f) = 2s + s z T(z)), weight s^3 / 2atanh(s).
- ``ERF_SMALL``: E(z) = erf(sqrt z)/sqrt z on z = x^2 <= 1 (erf(x) = x E(x^2)).
- ``SIN``: S(z) = (sin(r) - r) / r^3, z = r^2, |r| <= pi/4 (sin(r) = r + r z S(z)), weight
  r^3 / |sin r|; ``COS``: C(z) = (cos(r) - 1 + z/2) / z^2 (cos(r) = 1 - z/2 + z^2 C(z)), weight
  z^2 / cos r. The interval is widened by 1e-4 (a quadrant off by one near a boundary: |r| a little
  over pi/4).
- ``ERFCX``: erfcx(x) = exp(x^2) erfc(x) on x in [0, 6) in pieces, each a polynomial
  in x - center (exact for x within a factor 2 of the center), and for x >= 6
  Q(z) = x erfcx(x) in z = 1/x^2.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import mpmath as mp

sys.path.insert(0, str(Path(__file__).parent))
from remez import remez, remez_rounded  # noqa: E402

mp.mp.dps = 40
ULP = mp.mpf(2) ** -53
GRID = 800
OUT = Path(__file__).resolve().parent.parent / "pmfast" / "vmath" / "_coeffs.py"


def _expm1_p(r):
    if abs(r) < mp.mpf(10) ** -15:
        return mp.mpf(1) / 2 + r / 6 + r * r / 24
    return (mp.expm1(r) - r) / r**2


def _expm1_w(r):
    return mp.mpf(0) if r == 0 else r * r / abs(mp.expm1(r))


def _log_t(z):
    if z < mp.mpf(10) ** -30:
        return mp.mpf(2) / 3 + 2 * z / 5
    s = mp.sqrt(z)
    return (2 * mp.atanh(s) - 2 * s) / s**3


def _log_w(z):
    if z == 0:
        return mp.mpf(0)
    s = mp.sqrt(z)
    return s**3 / (2 * mp.atanh(s))


def _sin_s(z):
    if z < mp.mpf(10) ** -30:
        return -mp.mpf(1) / 6 + z / 120
    r = mp.sqrt(z)
    return (mp.sin(r) - r) / r**3


def _sin_w(z):
    if z == 0:
        return mp.mpf(0)
    r = mp.sqrt(z)
    return r**3 / abs(mp.sin(r))


def _cos_c(z):
    if z < mp.mpf(10) ** -30:
        return mp.mpf(1) / 24 - z / 720
    return (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z**2


def _cos_w(z):
    return z * z / mp.cos(mp.sqrt(z))


def _erf_e(z):
    if z == 0:
        return 2 / mp.sqrt(mp.pi)
    s = mp.sqrt(z)
    return mp.erf(s) / s


def erfcx(x):
    return mp.exp(x * x) * mp.erfc(x)


def _erfcx_q(z):
    if z == 0:
        return 1 / mp.sqrt(mp.pi)
    x = 1 / mp.sqrt(z)
    return x * erfcx(x)


def _relative(f):
    return lambda v: 1 / abs(f(v))


#: erfcx pieces: (lo, hi, center, degree); x >= ERFCX_TAIL uses the 1/x^2 fit
ERFCX_PIECES = [(0.0, 0.5, 0.0, 14), (0.5, 1.5, 1.0, 17), (1.5, 3.0, 2.25, 18), (3.0, 6.0, 4.5, 20)]
ERFCX_TAIL = 6.0
ERFCX_TAIL_DEGREE = 10


def fits():
    """``(name, f, weight, a, b, degree)`` of every fit."""
    h = mp.log(2) / 2 * mp.mpf("1.0001")
    rmax2 = (mp.pi / 4 * mp.mpf("1.0001")) ** 2
    smax = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1) * mp.mpf("1.0001")
    out = [
        ("EXPM1", _expm1_p, _expm1_w, -h, h, 10),
        ("LOG", _log_t, _log_w, mp.mpf(0), smax**2, 6),
        ("ERF_SMALL", _erf_e, _relative(_erf_e), mp.mpf(0), mp.mpf(1), 12),
        ("SIN", _sin_s, _sin_w, mp.mpf(0), rmax2, 6),
        ("COS", _cos_c, _cos_w, mp.mpf(0), rmax2, 5),
    ]
    for i, (lo, hi, c, deg) in enumerate(ERFCX_PIECES):
        c = mp.mpf(c)

        def f(v, c=c):
            return erfcx(v + c)

        out.append((f"ERFCX_{i}", f, _relative(f), mp.mpf(lo) - c, mp.mpf(hi) - c, deg))
    out.append(("ERFCX_TAIL", _erfcx_q, _relative(_erfcx_q), mp.mpf(0), 1 / mp.mpf(ERFCX_TAIL) ** 2, ERFCX_TAIL_DEGREE))
    return out


def _trunc(x, bits):
    """``x`` rounded to a double whose significand has only ``bits`` leading bits."""
    m, e = mp.frexp(x)
    return float(mp.ldexp(mp.nint(mp.ldexp(m, bits)), e - bits))


def constants() -> dict:
    """Constants of the kernels, each rounded from a 40-digit value."""
    ln2 = mp.log(2)
    ln2_hi = _trunc(ln2, 32)  # k * LN2_HI is exact for |k| < 2^21
    inv_sqrt2 = 1 / mp.sqrt(2)
    with mp.workdps(80):  # PIO2_3 is pi/2's bits 107-159: 40 digits do not reach them
        pio2 = mp.pi / 2
        pio2_1 = float(pio2)  # k * PIO2_1 subtracted by one fma is exact (see trig.py)
        pio2_2 = float(pio2 - mp.mpf(pio2_1))
        pio2_3 = float(pio2 - mp.mpf(pio2_1) - mp.mpf(pio2_2))  # pi/2 - the three: 5.6e-50
    return {
        "LN2_HI": ln2_hi,
        "LN2_LO": float(ln2 - mp.mpf(ln2_hi)),
        "INV_LN2": float(1 / ln2),
        "INV_SQRT2": float(inv_sqrt2),
        "INV_SQRT2_LO": float(inv_sqrt2 - mp.mpf(float(inv_sqrt2))),
        "TWO_INV_SQRTPI": float(2 / mp.sqrt(mp.pi)),
        "TWO_OVER_PI": float(2 / mp.pi),
        "PIO2_1": pio2_1,
        "PIO2_2": pio2_2,
        "PIO2_3": pio2_3,
    }


def main() -> None:
    lines = [
        '"""Polynomial coefficients and constants of pmfast.vmath (low order first).',
        "",
        'Generated by tools/fit_vmath.py: do not edit."""',
        "",
    ]
    for name, value in constants().items():
        lines.append(f"{name} = {value!r}")
    table = []
    for name, f, w, a, b, deg in fits():
        f, w = functools.lru_cache(maxsize=None)(f), functools.lru_cache(maxsize=None)(w)
        _, e = remez(f, w, a, b, deg, grid=GRID)
        cd, e_rounded = remez_rounded(f, w, a, b, deg, grid=GRID)
        table.append((name, deg, float(e / ULP), float(e_rounded / ULP)))
        body = ",\n".join(f"    {x!r}" for x in cd)
        lines.append(f"{name} = (\n{body},\n)")
    centers = ", ".join(repr(float(c)) for _, _, c, _ in ERFCX_PIECES)
    bounds = ", ".join(repr(float(hi)) for _, hi, _, _ in ERFCX_PIECES)
    lines.append(f"ERFCX_CENTERS = ({centers},)")
    lines.append(f"ERFCX_UPPER = ({bounds},)")
    lines.append(f"ERFCX_TAIL_FROM = {ERFCX_TAIL!r}")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")
    print(f"{'fit':<12} {'degree':>6} {'minimax':>10} {'doubles':>10}  (max weighted error, units of 2^-53)")
    for name, deg, e, er in table:
        print(f"{name:<12} {deg:>6} {e:>10.4f} {er:>10.4f}")


if __name__ == "__main__":
    main()
