"""numba's on-disk cache as pmfast uses it: keys, unreadable entries, concurrent writers.

* **Keys.** Everything pmfast generates is cached through pytensor's cache
  locator (``CACHED_SRC_FUNCTIONS``, files under pytensor's
  ``base_compiledir``/numba) under a key that hashes the generated source and
  the versions it depends on (pmfast, :mod:`pmfast.compiler.overloads`,
  numba; the sampler callbacks also hash their module source). numba's own
  index adds the signature, the numba version (another version's index
  reads as empty) and the target machine (CPU name and features).
* **Unreadable entries.** A truncated or corrupt index or data file made
  numba raise from deep inside ``Dispatcher.compile``. :func:`install` makes
  loading an entry that can't be read a cache miss: the entry's files are
  deleted and the function is compiled and saved afresh. A failure to save
  is a warning, not an error.
* **Reload functions.** A library loaded from the cache keeps pmfast's reload functions (the
  definitions of process-wide symbols its code calls), so a caller compiled later inherits them
  as it does from a freshly compiled one (:func:`inherit_reload`), on every numba cache.
* **Concurrent writers.** numba writes every file to a temporary name and
  renames it into place, and treats a data file missing behind an index as a
  miss. But a save reads the function's index, picks a free data file name
  and writes both: two processes saving two signatures of one function at
  once could both pick ``.1.nbc``, and the index could end up pointing one
  signature at the other's code. :func:`install` holds an exclusive file lock
  (``<index>.lock``) around each save. Two processes compiling the same model
  into one cache both succeed with equal results
  (``tests/test_compile_cache.py``), as do pmfast's forked compiles
  (:mod:`pmfast.compiler.parallel`).

The hardening is self-limiting: it acts only on entries that pytensor's cache
locator places (:func:`ours`: pmfast's functions and pytensor's own numba
functions, under pytensor's compile directory); every other numba cache, a
user's ``@njit(cache=True)`` among them, is loaded and saved by numba's code
unchanged (no lock files beside it: numba's ``test_caching`` counts them).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
from collections import Counter

log = logging.getLogger("pmfast.compiler")

stats: Counter = Counter()
"""Outcomes in this process: ``hits``, ``misses``, ``uncacheable``, ``rebuilt`` (an unreadable entry), ``unsaved``."""

_installed = False


def _entry_files(cache) -> list[str]:
    cache_file = cache._cache_file
    pattern = cache_file._data_name_pattern.replace("{number:d}", "*")
    return [cache_file._index_path, *glob.glob(os.path.join(cache_file._cache_path, glob.escape(pattern).replace(r"[*]", "*")))]


@contextlib.contextmanager
def _locked(path: str):
    """An exclusive advisory lock on ``path`` (created if needed); no lock where ``fcntl`` is missing."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ours(cache) -> bool:
    """Whether numba's ``cache`` is located by pytensor's cache locator (pmfast's and pytensor's own
    numba functions, under pytensor's compiledir): the only entries :func:`install`'s hardening touches."""
    locator = getattr(getattr(cache, "_impl", None), "locator", None)
    return type(locator).__name__ == "NumbaPyTensorCacheLocator"


def inherit_reload(cres):
    """``cres`` (a compile result numba just loaded from its cache) with pmfast's reload functions
    (:data:`RELOAD_MARK`) also in its library's ``_reload_init``.

    numba runs a cached function's ``reload_init`` when it loads it, but gives the library it loads
    an empty ``_reload_init``; a caller compiled afterwards links that library and inherits nothing.
    For pmfast's reload functions that lost the definition of a process-wide symbol the linked code
    calls (a deferred callee, :class:`pmfast.loops.deferred.External`; BLAS/LAPACK,
    :func:`pmfast.compiler.lapack.define_symbols`): the caller's cache entry, loaded by a process
    that had not defined it, called address 0 (a segfault: one model compiled after another that
    shared its Cholesky, run a third time). numba's own reload functions are left as they are.
    """
    library = getattr(cres, "library", None)
    ours = [fn for fn in getattr(cres, "reload_init", None) or () if getattr(fn, RELOAD_MARK, False)]
    if library is not None and ours:
        library._reload_init.update(ours)
    return cres


#: Attribute marking a ``reload_init`` function as pmfast's (see :func:`inherit_reload`).
RELOAD_MARK = "pmfast_reload"


def install() -> None:
    """Make unreadable cache entries misses and failed saves warnings, and cached libraries keep
    pmfast's reload functions (:func:`inherit_reload`); once per process."""
    global _installed
    if _installed:
        return
    from numba.core.caching import Cache

    load, save = Cache.load_overload, Cache.save_overload

    def load_overload(self, sig, target_context):
        if not ours(self):
            return inherit_reload(load(self, sig, target_context))
        try:
            return inherit_reload(load(self, sig, target_context))
        except Exception as err:
            log.warning("pmfast: discarding unreadable numba cache entry %s (%s: %s)", self._name, type(err).__name__, err)
            for path in _entry_files(self):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            stats["rebuilt"] += 1
            return None

    def save_overload(self, sig, data):
        if not ours(self):
            return save(self, sig, data)
        try:
            with _locked(self._cache_file._index_path + ".lock"):
                save(self, sig, data)
        except Exception as err:
            log.warning("pmfast: could not save numba cache entry %s (%s: %s)", self._name, type(err).__name__, err)
            stats["unsaved"] += 1

    load_overload.__wrapped__, save_overload.__wrapped__ = load, save
    Cache.load_overload, Cache.save_overload = load_overload, save_overload
    _installed = True


def register(py_func, key: str | None) -> None:
    """Send numba's cache for ``py_func`` to pytensor's cache directory under ``key``."""
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    if key is not None:
        CACHED_SRC_FUNCTIONS[py_func] = key


def has_index(dispatcher) -> bool:
    """Whether numba's cache has an index file for ``dispatcher`` (its compile will most likely be a load)."""
    cache = getattr(dispatcher, "_cache", None)
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    return index is not None and os.path.exists(index)


def count(dispatcher_or_cfunc, key) -> bool:
    """Record whether a compile was a cache hit; returns it."""
    if key is None:
        stats["uncacheable"] += 1
        return False
    hits = getattr(dispatcher_or_cfunc, "cache_hits", None)
    if hits is None:
        hits = dispatcher_or_cfunc.stats.cache_hits
    hit = bool(sum(hits.values()) if hasattr(hits, "values") else hits)
    stats["hits" if hit else "misses"] += 1
    return hit


def load_or_compile_cfunc(py_func, sig, key: str):
    """``numba.cfunc(sig, cache=True)(py_func)`` cached under ``key``."""
    import numba

    register(py_func, key)
    cfunc = numba.cfunc(sig, cache=True)(py_func)
    count(cfunc, key)
    return cfunc
