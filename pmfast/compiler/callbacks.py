"""The sampler callbacks nutpie calls: model-independent, compiled once per machine.

nutpie 0.16.8 calls ``logp(dim, x, grad_out, logp_out, user_data) -> int``
and ``expand(dim, n_expanded, x, out, user_data) -> int``. The two functions
here implement that protocol for every model: they read the model's entry
addresses and sizes from a header pmfast puts in front of nutpie's
``user_data`` record (:func:`make_user_data`), check the dimensions, call the
entry (:mod:`pmfast.compiler.entry`) through its address, turn an exception
raised inside into nutpie's error code and check that the results are
finite. Their code never changes with the model, so numba compiles them once
and every later compile, in any process, loads them from the cache.

Return codes are nutpie's: -1 wrong dimensions; logp: 1 an exception, 3 a
non-finite gradient, 4 a non-finite logp; expand: -2 an exception.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
from pathlib import Path

import numba
import numpy as np
from numba.core import types as t

from pmfast.compiler.native import array_view, call_native3, call_native4

#: The header pmfast adds in front of nutpie's ``shared`` field (one uint64 word each): the entries'
#: addresses, the sizes, and the addresses of the entries' tables of parts (:mod:`pmfast.compiler.parts`;
#: 0 for an entry compiled whole). The callbacks read the first four.
HEADER = ("pmfast_logp_entry", "pmfast_expand_entry", "pmfast_n_dim", "pmfast_n_expanded", "pmfast_logp_parts", "pmfast_expand_parts")
LOGP_WORD, EXPAND_WORD, N_DIM_WORD, N_EXPANDED_WORD, LOGP_PARTS_WORD, EXPAND_PARTS_WORD = range(len(HEADER))
#: The header word of each entry kind's table of parts.
PARTS_WORD = {"logp": LOGP_PARTS_WORD, "expand": EXPAND_PARTS_WORD}

LOGP_SIG = t.int64(t.uint64, t.CPointer(t.double), t.CPointer(t.double), t.CPointer(t.double), t.voidptr)
EXPAND_SIG = t.int64(t.uint64, t.uint64, t.CPointer(t.double), t.CPointer(t.double), t.voidptr)


def logp_callback(dim, x_, out_, logp_, user_data_):
    head = array_view(user_data_, 4, np.uint64)
    if dim != head[2]:
        return -1
    code = call_native4(head[0], 1, x_, out_, logp_, user_data_)
    if code != 0:
        return code
    for i in range(dim):
        if not math.isfinite(out_[i]):
            return 3
    if not math.isfinite(logp_[0]):
        return 4
    return 0


def expand_callback(dim, expanded, x_, out_, user_data_):
    head = array_view(user_data_, 4, np.uint64)
    if dim != head[2]:
        return -1
    if expanded != head[3]:
        return -1
    return call_native3(head[1], -2, x_, out_, user_data_)


def with_header(theirs: np.ndarray) -> np.ndarray:
    """nutpie's ``user_data`` record with pmfast's header in front (nutpie's ``with_data`` keeps it)."""
    dtype = np.dtype([*((name, np.uint64) for name in HEADER), ("shared", theirs.dtype["shared"])])
    ours = np.zeros((), dtype=dtype)
    ours["shared"] = theirs["shared"]
    return ours


def set_header(
    user_data: np.ndarray, logp_entry: int, expand_entry: int, n_dim: int, n_expanded: int, logp_parts: int = 0, expand_parts: int = 0
) -> None:
    """Write the header; ``*_parts``: the address of each entry's table of parts (kept alive by the caller)."""
    values = (logp_entry, expand_entry, n_dim, n_expanded, logp_parts, expand_parts)
    for name, value in zip(HEADER, values, strict=True):
        user_data[name] = value


def cache_key() -> str:
    """Cache key of the two callbacks: this module's source and the versions it is compiled with."""
    from pmfast import __version__

    from pmfast.compiler import native

    src = Path(__file__).read_bytes() + Path(native.__file__).read_bytes()
    return "pmfast_callbacks_" + hashlib.sha256(repr((__version__, numba.__version__, src)).encode()).hexdigest()


_compiled: dict = {}


def compiled() -> dict:
    """The two callbacks as ``numba.cfunc`` objects (compiled, or loaded from the cache, once per process)."""
    if not _compiled:
        from pmfast.compiler import cache

        key = cache_key()
        for name, fn, sig in (("logp", logp_callback, LOGP_SIG), ("expand", expand_callback, EXPAND_SIG)):
            _compiled[name] = cache.load_or_compile_cfunc(fn, sig, f"{key}_{name}")
    return _compiled


def logp_at(model, x, dim: int | None = None) -> tuple[int, float, np.ndarray]:
    """``(code, logp, grad)`` from calling ``model``'s logp callback at ``x``, exactly as nutpie does.

    ``dim`` overrides the dimension passed (to test the callback's check).
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    grad, logp = np.zeros(model.n_dim), np.zeros(1)
    dp = ctypes.POINTER(ctypes.c_double)
    code = model.compiled_logp_func.ctypes(
        x.size if dim is None else dim,
        x.ctypes.data_as(dp),
        grad.ctypes.data_as(dp),
        logp.ctypes.data_as(dp),
        model.user_data.ctypes.data,
    )
    return int(code), float(logp[0]), grad


def expand_at(model, x, expanded: int | None = None) -> tuple[int, np.ndarray]:
    """``(code, values)`` from calling ``model``'s expand callback at ``x``, exactly as nutpie does."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.zeros(model.n_expanded)
    dp = ctypes.POINTER(ctypes.c_double)
    code = model.compiled_expand_func.ctypes(
        x.size,
        model.n_expanded if expanded is None else expanded,
        x.ctypes.data_as(dp),
        out.ctypes.data_as(dp),
        model.user_data.ctypes.data,
    )
    return int(code), out
