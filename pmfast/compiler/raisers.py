"""One numba function raising the shape errors of pmfast's op implementations, cached on disk.

An entry inlines its node functions (:mod:`pmfast.compiler.inline`), and numba's
inliner can't inline a function that raises an exception built from runtime
values. So the node functions of ``SpecifyShape`` and ``Split`` call
:func:`shape_fail` instead, with the numbers the message needs: ``(kind, a, b,
c)``, four int64. One function with one signature for both ops: compiled once
per machine by the first model with either op and loaded from numba's cache
by every later process (stoch_vol, the only zoo model that splits, finds it
compiled by the models that specify shapes; a raiser of its own cost it
~0.04 CPU s on a used machine).

The exceptions are defined here, below the two op implementations that raise
them (:mod:`pmfast.compiler.shape_ops`, :mod:`pmfast.compiler.split` re-export them).
"""

from __future__ import annotations


class SpecifyShapeError(AssertionError):
    """pytensor's ``SpecifyShape`` check failure; numba raises it with ``(dim, actual, expected)``."""

    def __init__(self, *args):
        if len(args) == 3 and not isinstance(args[0], str):
            dim, actual, expected = args
            args = (f"SpecifyShape: dim {dim} of input has shape {actual}, expected {expected}.",)
        super().__init__(*args)


class SplitSizeError(ValueError):
    """pytensor's ``Split`` size mismatch; numba raises it with ``(sum of sizes, length of the axis)``."""

    def __init__(self, *args):
        if len(args) == 2 and not isinstance(args[0], str):
            total, expected = args
            args = (f"Split sizes sum to {total}; expected {expected}",)
        super().__init__(*args)


#: ``kind`` of a failed ``SpecifyShape`` check: ``(dim, actual, expected)``.
SPECIFY_SHAPE = 0
#: ``kind`` of a failed ``Split`` check: ``(sum of sizes, length of the axis, 1 if a size is negative)``.
SPLIT = 1


def _raise_shape_error(kind, a, b, c):
    if kind == SPECIFY_SHAPE:
        raise SpecifyShapeError(a, b, c)
    if c:
        raise ValueError("Split sizes cannot be negative")
    raise SplitSizeError(a, b)


_FAIL: list = []


def shape_fail():
    """The jitted :func:`_raise_shape_error` (``void(int64, int64, int64, int64)``, cached on disk)."""
    if not _FAIL:
        import numba
        from numba.core.dispatcher import Dispatcher

        fn = numba.njit("void(int64, int64, int64, int64)", cache=True, no_cfunc_wrapper=True)(_raise_shape_error)
        if not isinstance(fn, Dispatcher):  # numba's jit off (NUMBA_DISABLE_JIT, or replaced): plain Python, not kept
            return fn
        _FAIL.append(fn)
    return _FAIL[0]
