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
  closure's values and the CPU;
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
change the code an entry is built from. Nothing is cached when pytensor's
numba cache is off (``config.numba__cache``) or ``PMFAST_GENERIC_CACHE=0``
(read at each overload build). Implementations numba will not cache
(dynamic globals, lifted loops, a closure it cannot pickle) are compiled as
before.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections import Counter

#: Bump when the key or the way implementations are built changes.
VERSION = 1

_installed = False
_prefix: str | None = None
_dispatchers: weakref.WeakSet = weakref.WeakSet()


def enabled() -> bool:
    """Whether overload implementations are cached now (``PMFAST_GENERIC_CACHE``, pytensor's numba cache)."""
    if os.environ.get("PMFAST_GENERIC_CACHE", "1") == "0":
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


def _closure_picklable(impl) -> bool:
    """Whether numba can hash ``impl``'s closure for its index key (else every load and save would fail)."""
    if impl.__closure__ is None:
        return True
    from numba.core.serialize import dumps

    try:
        dumps(tuple(c.cell_contents for c in impl.__closure__))
    except Exception:
        return False
    return True


def cache_key(overload_func, impl, jit_options: dict, flags) -> str | None:
    """The cache key of ``impl`` (returned by the overload ``overload_func``), or None if it isn't cacheable."""
    if not callable(impl) or getattr(impl, "__code__", None) is None or not _closure_picklable(impl):
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
