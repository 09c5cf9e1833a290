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
module-level function.

Both act only inside pmfast's compiles (:func:`pmfast.compiler.patching.compiling`):
a function compiled with them calls (and its cache entry refers to) code of
this module, and a user's function or a stock pytensor node function compiled
with them would write cache entries that a process without pmfast cannot load
(``ModuleNotFoundError: pmfast``). numba offers no way to remove a registered
lowering, so :func:`install` makes the two templates answer per scope: their
overload function and jit options are pmfast's inside a pmfast compile and
numba's own outside it and in every other thread (:class:`_PerScope`). numba
resolves both overloads while it lowers the call (the allocator's method
lowering types it again; the slice raiser is typed by the setitem lowering
itself), so a function is typed and lowered with the implementation of the
scope it is compiled in. What numba memoises must not carry one scope's code
into the other: an overload's compiled implementation per signature (the
template's ``_impl_cache``: ``np.zeros``'s implementation allocates) is kept
apart inside pmfast's compiles (:func:`_get_impl`), and so are the internal
subroutines (:mod:`pmfast.compiler.subroutines`). Not kept apart: numba
functions that are module-level dispatchers of a library (compiled once per
signature and then shared), when one is first compiled inside a pmfast compile
and allocates. The replacement raises the same exception
class with the same message, which numba's own
``test_array_manipulation``/``test_exceptions``/``test_array_constants`` check
with it active (``tools/owner_tests.py``); :data:`VERSION` goes into every cache
key pmfast writes.

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


class _PerScope:
    """A class attribute of an overload template that is ``inside`` in a pmfast compile, ``outside`` otherwise."""

    def __init__(self, outside, inside):
        self.outside, self.inside = outside, inside

    def __get__(self, obj, cls=None):
        from pmfast.compiler.patching import active

        return self.inside if active() else self.outside


def _scope_template(template, overload_func) -> None:
    """``template`` (an overload's template class) resolving to ``overload_func`` with ``cache=True`` inside
    pmfast's compiles, and exactly as before outside."""
    for name in ("_overload_func", "_jit_options"):
        if isinstance(template.__dict__.get(name), _PerScope):
            raise RuntimeError(f"{template.__name__}.{name} is already scoped")
    template._overload_func = _PerScope(template.__dict__["_overload_func"].__func__, overload_func)
    template._jit_options = _PerScope(template.__dict__["_jit_options"], {**template.__dict__["_jit_options"], "cache": True})


#: Template class -> its implementation cache inside pmfast's compiles (numba's dict is the class's own).
_impl_caches: dict = {}


def _get_impl(numba_get_impl):
    """numba's ``_OverloadFunctionTemplate._get_impl`` reading and filling, inside pmfast's compiles,
    an implementation cache per template class kept here: a template is instantiated per resolution,
    and the instance's ``_impl_cache`` shadows the class's for that resolution only."""

    def get_impl(self, args, kws):
        self._impl_cache = _impl_caches.setdefault(type(self), {})
        return numba_get_impl(self, args, kws)

    return get_impl


def install() -> None:
    """Give the overloads listed in this module's docstring pmfast's implementations inside its compiles (once)."""
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
    _intrin_alloc = arrayobj.intrin_alloc
    (alloc,) = typing.resolve_value_type(arrayobj._ol_array_allocate).templates
    _scope_template(cpu[0], _raise_with_shape_context)
    _scope_template(alloc, _array_allocate_overload)
    from numba.core.typing.templates import _OverloadFunctionTemplate

    from pmfast.compiler.patching import scoped

    numba_get_impl = _OverloadFunctionTemplate._get_impl
    _OverloadFunctionTemplate._get_impl = scoped(numba_get_impl, _get_impl(numba_get_impl))
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
