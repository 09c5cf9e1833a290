"""The source version of pmfast.vmath and the numba cache locator keyed on it.

numba keys a cached function on its own file's modification stamp only, so a
change to the coefficients or to the intrinsics in a sibling module would not
invalidate it. :data:`VERSION` hashes every module of the package (and pmfast's
version); the locator makes it the cache stamp of every vmath kernel, and the
pytensor cache keys of the ops that call the kernels include it too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba.core import config
from numba.core.caching import CacheImpl, _CacheLocator

import pmfast

PACKAGE_DIR = Path(__file__).resolve().parent
#: The package's module file names: a function from any other file name is not a vmath kernel.
_MODULE_NAMES = frozenset(p.name for p in PACKAGE_DIR.glob("*.py"))


def _source_version() -> str:
    h = hashlib.sha256(pmfast.__version__.encode())
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


#: Hash of pmfast's version and every source file of pmfast.vmath.
VERSION = _source_version()


class VmathCacheLocator(_CacheLocator):
    """Caches vmath kernels under ``NUMBA_CACHE_DIR`` (or ``__pycache__``), stamped with :data:`VERSION`."""

    def __init__(self, py_func, py_file):
        self._lineno = py_func.__code__.co_firstlineno
        if config.CACHE_DIR:
            self._path = os.path.join(config.CACHE_DIR, self.get_suitable_cache_subpath(py_file))
        else:
            self._path = os.path.join(os.path.dirname(py_file), "__pycache__")

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return VERSION

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        # numba asks every new cached dispatcher (hundreds per compile, mostly generated
        # source); the name test spares them resolving a path on the file system
        if os.path.basename(py_file) not in _MODULE_NAMES or Path(py_file).resolve().parent != PACKAGE_DIR:
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


if VmathCacheLocator not in CacheImpl._locator_classes:
    CacheImpl._locator_classes.insert(0, VmathCacheLocator)
