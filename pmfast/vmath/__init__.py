"""Vectorizable scalar math for numba: exp, log, log1p, expm1, the logistic and the probit families.

llvmlite here has no SVML, so ``math.exp`` in a numba loop is a scalar libm call
and the loop never vectorizes. These kernels are plain numba functions built
from arithmetic, bit casts, fma and selects (no branch, no libm call), so LLVM
inlines them and widens a loop that calls them (a reduction needs the loop's
``+=`` to be reassociable: ``fastmath={"reassoc"}``). Each of the first twelve is within 2 ulp of a
high-precision reference over its whole domain, with IEEE special values
(see docs/vmath.md for the ulp table and timings).

Kernels (float64 -> float64, call them from ``@njit`` code):
``exp, expm1, log, log1p, softplus, sigmoid, log_sigmoid, erf, erfc, erfcx, ndtr, log_ndtr``, and
``gammaln, digamma, log1mexp`` (:mod:`pmfast.vmath.gamma`: near the roots of gammaln and digamma an
absolute rather than a relative accuracy), ``sin, cos`` (:mod:`pmfast.vmath.trig`: NaN beyond
``|x| = 2^30``, where the vector_math pass's loops fall back to libm).

The switch (:func:`enable`, :func:`disable`, :func:`disabled`, default from the
environment variable ``PMFAST_VECTOR_MATH``, on unless ``0``) decides whether the
``vector_math`` pass makes pytensor graphs use them; :data:`VERSION` (a hash of
this package's source) belongs in the cache key of any generated code that calls them.
"""

from __future__ import annotations

import contextlib
import os

from pmfast.vmath._cache import VERSION
from pmfast.vmath.normal import erf, erfc, erfcx, log_ndtr, ndtr
from pmfast.vmath.explog import exp, expm1, log, log1p, log_sigmoid, sigmoid, softplus
from pmfast.vmath.gamma import digamma, gammaln, log1mexp
from pmfast.vmath.trig import cos, sin

#: name -> kernel, every public kernel
KERNELS = {
    "exp": exp,
    "expm1": expm1,
    "log": log,
    "log1p": log1p,
    "softplus": softplus,
    "sigmoid": sigmoid,
    "log_sigmoid": log_sigmoid,
    "erf": erf,
    "erfc": erfc,
    "erfcx": erfcx,
    "ndtr": ndtr,
    "log_ndtr": log_ndtr,
    "gammaln": gammaln,
    "digamma": digamma,
    "log1mexp": log1mexp,
    "sin": sin,
    "cos": cos,
}

_enabled = os.environ.get("PMFAST_VECTOR_MATH", "1").strip().lower() not in ("0", "false", "no", "off")


def is_enabled() -> bool:
    """Whether graphs compiled from now on use these kernels (through the ``vector_math`` pass)."""
    return _enabled


def enable() -> None:
    """Use pmfast.vmath in graphs compiled from now on."""
    global _enabled
    _enabled = True


def disable() -> None:
    """Use libm (numpy/math) as stock pytensor does, for graphs compiled from now on."""
    global _enabled
    _enabled = False


@contextlib.contextmanager
def disabled():
    """``with pmfast.vmath.disabled():`` compile with libm's exact values; restores the previous state."""
    global _enabled
    previous, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = previous


__all__ = [
    "KERNELS",
    "VERSION",
    "cos",
    "disable",
    "disabled",
    "enable",
    "erf",
    "erfc",
    "erfcx",
    "exp",
    "expm1",
    "digamma",
    "gammaln",
    "is_enabled",
    "log1mexp",
    "log",
    "log1p",
    "log_ndtr",
    "log_sigmoid",
    "ndtr",
    "sigmoid",
    "sin",
    "softplus",
]
