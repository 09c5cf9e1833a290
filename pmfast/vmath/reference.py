"""High-precision references, ulp distances and the test sweeps of the vmath kernels.

References: numpy's long double (x87 extended, 64-bit significand: ~2^-11 ulp of
a double) for the exp/log family; mpmath at 40 digits for the erf family
(``mpmath`` is a test/bench dependency). Used by the tests, ``bench/vmath.py``
and the ulp table in docs/vmath.md.
"""

from __future__ import annotations

import numpy as np

L = np.longdouble
TINY = np.nextafter(0.0, 1.0)
HUGE = np.finfo(np.float64).max


def ulp_error(got, ref) -> np.ndarray:
    """``|got - ref|`` in units of the double spacing at ``ref`` (0 where both are the same inf or both NaN).

    ``ref`` is a long double array; a reference just below a power of two is
    measured in the finer spacing below it. Subnormal spacing is 2^-1074.
    A NaN on one side only, or a wrong infinity, is ``inf``.
    """
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=L)
    with np.errstate(all="ignore"):
        r64 = ref.astype(np.float64)
        sp = np.spacing(np.abs(r64)).astype(L)
        below_pow2 = (np.frexp(np.abs(r64))[0] == 0.5) & (np.abs(ref) < np.abs(r64).astype(L))
        sp = np.where(below_pow2, sp / 2, sp)
        sp = np.maximum(sp, L(TINY))
        err = (np.abs(got.astype(L) - ref) / sp).astype(np.float64)
    same = (got == r64) | (np.isnan(got) & np.isnan(r64))
    err = np.where(same, 0.0, err)
    return np.where(np.isnan(got) != np.isnan(r64), np.inf, err)


def mp_values(f, x, dps: int = 40):
    """``f`` (an mpmath function of one mpf) on a float64 array, as long doubles."""
    import mpmath as mp

    with mp.workdps(dps):

        def one(v):
            if np.isnan(v):
                return L(np.nan)
            y = f(mp.mpf(float(v)))
            if y == 0 and v == 0:  # mpmath has no -0: an odd function keeps the sign of its zero
                return L(v)
            return L(mp.nstr(y, 25)) if mp.isfinite(y) else L(float(y))

        return np.array([one(v) for v in np.asarray(x, dtype=np.float64)], dtype=L)


def _erf(v):
    import mpmath as mp

    return mp.sign(v) if abs(v) > 1e6 else mp.erf(v)


def _erfc(v):
    import mpmath as mp

    if v > 1e6:
        return mp.mpf(0)
    return mp.mpf(2) if v < -1e6 else mp.erfc(v)


def _erfcx(v):
    import mpmath as mp

    if v > 1e6:  # asymptotic series, relative error < 1e-24
        return (1 - 1 / (2 * v * v) + 3 / (4 * v**4)) / (v * mp.sqrt(mp.pi))
    return mp.exp(v * v) * mp.erfc(v)


def _ndtr(v):
    import mpmath as mp

    return mp.mpf(v > 0) if abs(v) > 1e6 else mp.ncdf(v)


def _log_ndtr(v):
    import mpmath as mp

    if v > 1e6:
        return mp.mpf(0)
    if v > 0:
        return mp.log1p(-mp.ncdf(-v))
    if v < -1e6:  # log Phi(v) = -v^2/2 - log(-v sqrt(2 pi)) + log(1 - 1/v^2 + ...)
        return -v * v / 2 - mp.log(-v * mp.sqrt(2 * mp.pi)) + mp.log1p(-1 / (v * v) + 3 / v**4)
    return mp.log(mp.ncdf(v))


def _ld(f):
    def ref(x):
        with np.errstate(all="ignore"):
            return f(np.asarray(x, dtype=np.float64).astype(L))

    return ref


def _trig(f):
    """libm's long double ``f`` where the kernel is defined (``|x| <= 2^30``), NaN beyond (its contract there)."""

    def ref(x):
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            return np.where(np.abs(x) <= 2.0**30, f(x.astype(L)), L(np.nan))

    return ref


#: kernel name -> reference function (float64 array -> long double array)
REFERENCES = {
    "exp": _ld(np.exp),
    "expm1": _ld(np.expm1),
    "log": _ld(np.log),
    "log1p": _ld(np.log1p),
    "softplus": _ld(lambda x: np.logaddexp(L(0), x)),
    "sigmoid": _ld(lambda x: 1 / (1 + np.exp(-x))),
    "log_sigmoid": _ld(lambda x: -np.logaddexp(L(0), -x)),
    "erf": lambda x: mp_values(_erf, x),
    "erfc": lambda x: mp_values(_erfc, x),
    "erfcx": lambda x: mp_values(_erfcx, x),
    "ndtr": lambda x: mp_values(_ndtr, x),
    "log_ndtr": lambda x: mp_values(_log_ndtr, x),
    "sin": _trig(np.sin),
    "cos": _trig(np.cos),
}

#: where each kernel switches method or its result changes regime (tested densely around)
BOUNDARIES = {
    "exp": [-745.1332191019412, -708.3964185322641, -0.34657359027997264, 0.34657359027997264, 709.782712893384],
    "expm1": [-37.42994775023705, -0.34657359027997264, 0.34657359027997264, 36.7368005696771, 709.782712893384],
    "log": [2.2250738585072014e-308, 0.7071067811865476, 1.0, 1.4142135623730951],
    "log1p": [-1.0, -0.2928932188134524, 0.0, 0.41421356237309515],
    "softplus": [-745.0, -37.0, 0.0, 18.0, 33.3, 37.0],
    "sigmoid": [-745.0, -37.0, 0.0, 37.0],
    "log_sigmoid": [-37.0, 0.0, 37.0, 745.0],
    "erf": [-6.0, -1.0, 0.0, 1.0, 1.5, 3.0, 6.0],
    "erfc": [-6.0, -0.5, 0.0, 0.5, 1.5, 3.0, 6.0, 26.5, 27.3],
    "erfcx": [-26.6, -0.5, 0.0, 0.5, 1.5, 3.0, 6.0],
    "ndtr": [-38.5, -8.49, -4.24, -2.12, -0.71, 0.0, 0.71, 8.5],
    "log_ndtr": [-1.8961503816218355e154, -1.3407807929942596e154, -40.0, -8.49, -4.24, -2.12, -0.71, 0.0, 0.71,
                 8.5, 38.5],
    "sin": [-(2.0**30), -3.9269908169872414, -2.356194490192345, -1.5707963267948966, -0.7853981633974483,
            -(2.0**-27), 0.0, 2.0**-27, 0.7853981633974483, 1.5707963267948966, 2.356194490192345, 3.141592653589793,
            3.9269908169872414, 710.0, 1e6, 2.0**30],
    "cos": [-(2.0**30), -3.141592653589793, -1.5707963267948966, -0.7853981633974483, 0.0, 0.7853981633974483,
            1.5707963267948966, 2.356194490192345, 3.141592653589793, 4.71238898038469, 710.0, 1e6, 2.0**30],
}

#: the domain swept uniformly (beyond it the result saturates; log-spaced magnitudes cover the rest)
DOMAINS = {
    "exp": (-750.0, 712.0),
    "expm1": (-50.0, 712.0),
    "log": (1e-300, 1e300),
    "log1p": (-1.0, 1e3),
    "softplus": (-750.0, 750.0),
    "sigmoid": (-750.0, 750.0),
    "log_sigmoid": (-750.0, 750.0),
    "erf": (-7.0, 7.0),
    "erfc": (-7.0, 28.0),
    "erfcx": (-27.0, 30.0),
    "ndtr": (-40.0, 10.0),
    "log_ndtr": (-50.0, 40.0),
    "sin": (-1000.0, 1000.0),
    "cos": (-1000.0, 1000.0),
}

#: inputs every kernel must handle like the reference
SPECIALS = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, TINY, -TINY, 2.2250738585072014e-308, -2.2250738585072014e-308,
     HUGE, -HUGE, 1.0, -1.0, 2.0**-54, -(2.0**-54), 2.0**-30, -(2.0**-30)]
)


def sweep(name: str, n: int, seed: int = 0) -> np.ndarray:
    """Test inputs for kernel ``name``: ``n`` uniform and ``n`` random points over its domain,
    ``n`` log-spaced magnitudes of both signs from the smallest subnormal to the largest
    double, 64 neighbours (in ulps) of every boundary, and :data:`SPECIALS`."""
    rng = np.random.default_rng(seed)
    lo, hi = DOMAINS[name]
    mags = np.exp(np.linspace(np.log(TINY), np.log(HUGE), n))
    around = []
    for b in BOUNDARIES[name]:
        up, down = [b], [b]
        for _ in range(32):
            up.append(np.nextafter(up[-1], np.inf))
            down.append(np.nextafter(down[-1], -np.inf))
        around += up + down
        around += list(b + np.linspace(-1e-3, 1e-3, 64) * max(1.0, abs(b)))
    return np.concatenate([np.linspace(lo, hi, n), rng.uniform(lo, hi, n), mags, -mags, np.array(around), SPECIALS])
