"""numba's own ``@overload`` implementations (``np.empty``, ``np.array``, array methods…) cached on disk.

numba caches a user's jitted function, not the generic implementations it
calls: an ``@overload`` template builds a fresh dispatcher for each argument
type in each process (``_OverloadFunctionTemplate._build_impl``), and every
process types, lowers and optimises them again. Entries inline their node
functions whatever the cache holds (:mod:`pmfast.compiler.inline`), so on a
machine that already compiled other models a new model still compiles
every overload its node functions call.

:func:`install` makes those dispatchers cached (pytensor's cache directory,
:mod:`pmfast.compiler.cache`), under a key of

* the overload (its module and name) and the implementation's module and
  qualified name; numba's index adds the argument types, the bytecode, the
  closure's values (by a process-independent fingerprint, :func:`closure_fingerprint`:
  numba's own pickle hash of a numba type changes from process to process) and the CPU;
* the flags the implementation inherits from its caller (``fastmath``,
  ``error_model``, ``nrt``, ``forceinline``) and the overload's own jit
  options: an implementation compiled for a caller with other flags is
  another entry, as it is another dispatcher within a process
  (numba keys ``_impl_cache`` by the caller's flags);
* :data:`VERSION`, pmfast's :data:`~pmfast.compiler.overloads.VERSION` (its
  replacement overloads change what the implementations compile to),
  :func:`pmfast.linker.compile_salt` (pmfast and pytensor versions) and
  numba's version.

An implementation is called, never inlined at numba's IR level, whether it
was compiled or loaded; the IR a caller links is the same (numba saves a
library with the module it links into callers), so cache state does not
change the code an entry is built from. **Opt-in** (``PMFAST_GENERIC_CACHE=1``,
read at each overload build): with an entry that calls its node functions (the
inline budget of :mod:`pmfast.compiler.inline`, wide graphs) one seed gave other
draws on a cache filled by an earlier process than on an empty one
(``tests/test_compile_cache.py``'s budget-150 variant with the cache on), a
cause not yet found; pmfast's default keeps draws independent of the cache.
Nothing is cached when pytensor's numba cache is off (``config.numba__cache``). Implementations numba will not cache
(dynamic globals, lifted loops) and those closing over a value without a
fingerprint are compiled as before.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections import Counter

#: Bump when the key or the way implementations are built changes.
VERSION = 2

_installed = False
_prefix: str | None = None
_dispatchers: weakref.WeakSet = weakref.WeakSet()


def enabled() -> bool:
    """Whether overload implementations are cached now (``PMFAST_GENERIC_CACHE=1``, pytensor's numba cache)."""
    if os.environ.get("PMFAST_GENERIC_CACHE", "0") != "1":
        return False
    from pytensor import config

    return bool(config.numba__cache)


def _versions() -> str:
    global _prefix
    if _prefix is None:
        import numba

        from pmfast.compiler import overloads
        from pmfast.linker import compile_salt

        _prefix = repr((VERSION, overloads.VERSION, compile_salt(), numba.__version__))
    return _prefix


def _inherited(flags) -> tuple:
    """The caller's flags an overload implementation inherits (numba's ``CPUTargetOptions.finalize``)."""
    if flags is None:
        return ()
    out = []
    for name in ("fastmath", "error_model", "nrt", "forceinline"):
        value = getattr(flags, name, None)
        if hasattr(value, "flags"):  # FastMathOptions
            value = tuple(sorted(value.flags))
        out.append((name, repr(value)))
    return tuple(out)


class _Unstable(Exception):
    """A closure value without a process-independent fingerprint."""


def _fingerprint(value, depth: int = 0) -> str:
    """A description of ``value`` that is the same in every process (raises :class:`_Unstable` if there is none).

    numba's index key hashes an implementation's closure with pickle, and a
    pickled numba type carries its process-specific ``_code`` (the order
    types were created in): an implementation closing over a type (``np.empty``'s
    return type…) would then miss in every other process and add an entry to
    the index each time. A type is described by its class and ``key`` (what
    numba interns types by), a function by its name, bytecode and closure.
    """
    import types as pytypes

    import numpy as np
    from numba.core import types
    from numba.core.dispatcher import Dispatcher

    if depth > 10:
        raise _Unstable
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, types.Type):
        return f"type:{type(value).__module__}.{type(value).__qualname__}:{_fingerprint(value.key, depth + 1)}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}(" + ",".join(_fingerprint(v, depth + 1) for v in value) + ")"
    if isinstance(value, (np.dtype, np.generic)):
        return f"np:{value!r}:{getattr(value, 'dtype', value)!r}"
    if isinstance(value, type):
        return f"class:{value.__module__}.{value.__qualname__}"
    if isinstance(value, Dispatcher):
        options = sorted((k, repr(v)) for k, v in value.targetoptions.items())
        return f"dispatcher:{options}:{_fingerprint(value.py_func, depth + 1)}"
    if isinstance(value, pytypes.FunctionType):
        code = hashlib.sha256(value.__code__.co_code).hexdigest()
        cells = tuple(c.cell_contents for c in value.__closure__ or ())
        return f"function:{value.__module__}.{value.__qualname__}:{code}:{_fingerprint(cells, depth + 1)}"
    raise _Unstable


def closure_fingerprint(impl) -> str | None:
    """:func:`_fingerprint` of ``impl``'s closure values, or None if one has none."""
    try:
        return _fingerprint(tuple(c.cell_contents for c in impl.__closure__ or ()))
    except (_Unstable, ValueError):  # ValueError: an empty cell
        return None


def _stable_index_key(cache, fingerprint: str):
    """numba's ``Cache._index_key`` for ``cache`` with the closure hashed by its fingerprint, not by pickle."""

    def _index_key(sig, codegen):
        code = hashlib.sha256(cache._py_func.__code__.co_code).hexdigest()
        return (sig, codegen.magic_tuple(), (code, hashlib.sha256(fingerprint.encode()).hexdigest()))

    return _index_key


def cache_key(overload_func, impl, jit_options: dict, flags) -> str | None:
    """The cache key of ``impl`` (returned by the overload ``overload_func``), or None if it isn't cacheable."""
    if not callable(impl) or getattr(impl, "__code__", None) is None or closure_fingerprint(impl) is None:
        return None
    ident = (
        _versions(),
        getattr(overload_func, "__module__", None),
        getattr(overload_func, "__qualname__", None),
        impl.__module__,
        impl.__qualname__,
        sorted((k, repr(v)) for k, v in jit_options.items()),
        _inherited(flags),
    )
    return "pmfast_generic_" + hashlib.sha256(repr(ident).encode()).hexdigest()[:32]


def _cached_jitter(template, jitter):
    """``jitter`` whose decorator caches the implementation under :func:`cache_key`."""
    from numba.core import targetconfig

    from pmfast.compiler import cache

    def make(**options):
        decorate = jitter(**options)
        if "cache" in options or not enabled():
            return decorate

        def wrap(impl):
            key = cache_key(template._overload_func, impl, options, targetconfig.ConfigStack.top_or_none())
            if key is None:
                return decorate(impl)
            cache.register(impl, key)
            dispatcher = jitter(cache=True, **options)(impl)
            index_cache = getattr(dispatcher, "_cache", None)
            if not hasattr(index_cache, "_py_func"):  # not numba's FunctionCache: leave it uncached
                return decorate(impl)
            index_cache._index_key = _stable_index_key(index_cache, closure_fingerprint(impl))
            _dispatchers.add(dispatcher)
            return dispatcher

        return wrap

    return make


def stats() -> Counter:
    """Signatures of cached implementations loaded (``hits``) and compiled (``misses``) in this process."""
    out: Counter = Counter()
    for dispatcher in list(_dispatchers):
        out["hits"] += sum(dispatcher.stats.cache_hits.values())
        out["misses"] += sum(dispatcher.stats.cache_misses.values())
    return out


def install() -> None:
    """Cache the dispatchers numba's ``@overload`` templates build for the CPU target (once per process)."""
    global _installed
    if _installed:
        return
    from numba.core import decorators
    from numba.core.typing.templates import _OverloadFunctionTemplate

    original = _OverloadFunctionTemplate._get_jit_decorator

    def _get_jit_decorator(self):
        jitter = original(self)
        return _cached_jitter(self, jitter) if jitter is decorators.jit else jitter

    _get_jit_decorator.__wrapped__ = original
    _OverloadFunctionTemplate._get_jit_decorator = _get_jit_decorator
    _installed = True
