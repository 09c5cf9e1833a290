"""Cheaper numba implementations of generic code paths every new process would otherwise compile.

numba caches user functions on disk, not the generic overloads a new function
needs: each process types and lowers those again. One of them dominated the
profile of a cold compile (``bench/compile_profile.py``): every array slice
assignment (``a[...] = b``, used by pytensor's Alloc, Join, IncSubtensor,
output stores…) carries an error path, ``raise_with_shape_context``, that
formats both shapes into the message with numba's unicode machinery
(``str(int)``, ``str.join``, concatenation, code-point helpers…). Compiling
that machinery, and re-optimising it inside every function that links it,
cost ~5 of radon_intercept's 12 cold CPU seconds.

:func:`install` replaces the CPU target's implementation of that error path
with one that raises :class:`SliceShapeError` carrying the two shapes as
exception arguments (numba's dynamic exceptions: no string code is compiled);
Python formats the message when the exception reaches it. It is a
``ValueError`` with numba's message, word for word. Its implementation is
compiled with ``cache=True``: once per machine, not once per process. So is
numba's array allocator (``Array._allocate``, which every new array calls),
whose implementation numba wrote as a closure: here the same code as a
module-level function. Process-wide and
idempotent: a lowering registered with numba's CPU target is found by every
later compile, the user's included, and numba has no way to unregister one
(and a function already typed against it keeps it); scoping it would also make
a user's function compiled inside and outside a pmfast compile differ. The
replacement raises the same exception class with the same message, which
numba's own ``test_array_manipulation``/``test_exceptions``/``test_array_constants``
check (``tools/owner_tests.py``); :data:`VERSION` goes into every cache key pmfast writes.

:func:`plain_errors` is a context for pmfast's compiles: numba formats an
error message for every typing attempt that fails on the way to the one
that succeeds, and with colorama installed each message opens and closes a
terminal color wrapper (~0.35 s of a small model's cold compile). Inside it
those messages are not colored.
"""

from __future__ import annotations

import contextlib

#: Bump when an installed implementation changes (part of pmfast's cache keys); also
#: bumped for :mod:`pmfast.compiler.subroutines` (entries cached before it may hold a
#: subroutine lowered with another caller's fast-math flags).
VERSION = 3

_installed = False


class SliceShapeError(ValueError):
    """numba's slice-assignment shape mismatch; numba raises it with the two shapes."""

    def __init__(self, *args):
        if len(args) == 2 and all(isinstance(a, tuple) for a in args):
            args = (f"cannot assign slice of shape {args[0]} from input of shape {args[1]}",)
        super().__init__(*args)


def _raise_with_shape_context(src_shapes, index_shape):
    """Typing of numba's ``raise_with_shape_context`` (CPU target) without string formatting."""
    from numba.core import types

    if (
        isinstance(src_shapes, types.UniTuple)
        and isinstance(index_shape, types.UniTuple)
        and src_shapes.dtype == index_shape.dtype
        and isinstance(src_shapes.dtype, types.Integer)
    ):

        return _raise_slice_shape
    return None


def _raise_slice_shape(src_shapes, index_shape):
    """The implementation :func:`_raise_with_shape_context` returns: a module-level function, so
    numba caches its compiled code on disk (see :func:`install`)."""
    raise SliceShapeError(src_shapes, index_shape)


def _array_allocate_overload(cls, allocsize, align):
    """numba's ``Array._allocate`` (what every new array calls), implemented by the module-level
    :func:`_array_allocate`: numba's own implementation is a closure, compiled in every process
    (~0.03 CPU s of each compile); this one is cached on disk (see :func:`install`)."""
    return _array_allocate


def _array_allocate(cls, allocsize, align):
    return _intrin_alloc(allocsize, align)


#: numba's allocation intrinsic, set by :func:`install` (a global of :func:`_array_allocate`).
_intrin_alloc = None


def install() -> None:
    """Replace the overloads listed in this module's docstring (once per process)."""
    global _installed, _intrin_alloc
    if _installed:
        return
    from numba.core.registry import cpu_target
    from numba.np import arrayobj

    typing = cpu_target.typing_context
    typing.refresh()
    templates = typing.resolve_value_type(arrayobj.raise_with_shape_context).templates
    cpu = [t for t in templates if getattr(t, "metadata", {}).get("target") == "CPU"]
    if len(cpu) != 1:
        raise RuntimeError(f"numba's raise_with_shape_context has {len(cpu)} CPU overloads, expected 1")
    cpu[0]._overload_func = staticmethod(_raise_with_shape_context)
    # numba compiles an overload's implementation per signature in every process (0.03 CPU s of
    # each model's compile on a used machine); cached, it is compiled once per machine
    cpu[0]._jit_options = {**cpu[0]._jit_options, "cache": True}
    _intrin_alloc = arrayobj.intrin_alloc
    (alloc,) = typing.resolve_value_type(arrayobj._ol_array_allocate).templates
    alloc._overload_func = staticmethod(_array_allocate_overload)
    alloc._jit_options = {**alloc._jit_options, "cache": True}
    _installed = True


@contextlib.contextmanager
def plain_errors():
    """numba's error messages without terminal colors, for the duration (see the module docstring)."""
    from numba.core import errors

    class Plain(errors._DummyColorScheme):
        def code(self, msg):
            return msg

        errmsg = filename = indicate = highlight = reset = code

    previous = errors._termcolor_inst
    errors._termcolor_inst = Plain()
    try:
        yield
    finally:
        errors._termcolor_inst = previous
