"""Node functions generated from source, jitted and keyed the one way pmfast's op implementations do it.

An implementation writes the source of its node function, names the globals it reads (``env``) and
what its code depends on (``key_parts``: its version, the source, the dtypes and versions its globals
stand for); :func:`build` returns ``(numba function, cache key)``, the pair pytensor's
``numba_funcify_and_cache_key`` returns.
"""

from __future__ import annotations

import hashlib


def key(prefix: str, key_parts: tuple) -> str:
    """``prefix`` followed by the sha256 of ``repr(key_parts)``."""
    return prefix + hashlib.sha256(repr(key_parts).encode()).hexdigest()


def build(module: str, name: str, src: str, env: dict, prefix: str, key_parts: tuple, **flags):
    """``(numba function, key)``: pytensor's ``numba_njit`` (with ``flags``) of the function ``name``
    that ``src`` defines, its globals ``env`` and ``__name__`` = ``module`` (the implementation's
    module, a real one: numba pickles a function's globals by module name), and :func:`key`."""
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    env = {"__name__": module, **env}
    return numba_njit(compile_numba_function_src(src, name, env, env), **flags), key(prefix, key_parts)
