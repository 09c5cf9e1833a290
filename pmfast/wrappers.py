"""The sampler-facing C callbacks (logp+grad and expand), built so numba can cache them.

nutpie's own wrappers bake the shared-data arrays into the code as constants
("dynamic globals"), which numba refuses to cache: ~9 s of every compile. Ours
read each shared array's pointer, size and shape from nutpie's ``user_data``
record at call time (the byte offsets are compile-time constants), so the
wrapper source depends only on the graph's cache key and the data's layout:
it is generated, registered with pytensor's numba cache locator under a key
of (graph key, layout, pmfast and numba versions), and compiled with
``cache=True``. A second compile of the same graph in any process loads the
machine code. When the graph has no cache key (an op without one), the
wrappers are compiled uncached: same code, same behaviour.

Same C signatures and return codes as nutpie 0.16.8's wrappers.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass

import numba
import numpy as np
from numba.core import types

WRAPPER_VERSION = 3

log = logging.getLogger(__name__)

stats: Counter = Counter()
"""Wrapper cache outcomes in this process: ``hits``, ``misses``, ``rebuilt``, ``uncacheable``."""
keys: list[str] = []
"""Cache keys of the wrappers built in this process, in order."""


@dataclass(frozen=True)
class SharedSlot:
    """Where one shared array's data pointer and shape live in ``user_data`` (in uint64 words)."""

    name: str
    data_word: int
    shape_word: int
    ndim: int


def shared_slots(user_data: np.ndarray, names: list[str]) -> list[SharedSlot]:
    """The word offsets of ``names``' fields in nutpie's ``user_data`` record."""
    rec = user_data.dtype
    shared_dtype, shared_off = rec.fields["shared"][:2]
    slots = []
    for name in names:
        data_dt, data_off = shared_dtype.fields["data"][:2]
        shape_dt, shape_off = shared_dtype.fields["shape"][:2]
        d = shared_off + data_off + data_dt.fields[name][1]
        s = shared_off + shape_off + shape_dt.fields[name][1]
        field_dt = shape_dt.fields[name][0]
        ndim = field_dt.shape[0] if field_dt.shape else 0
        if d % 8 or s % 8 or rec.itemsize % 8:
            raise ValueError("user_data record is not 8-byte aligned")
        slots.append(SharedSlot(name, d // 8, s // 8, ndim))
    return slots


def graph_cache_key(jit_fn) -> str | None:
    """pytensor's numba cache key of a compiled graph function, or None if it is uncacheable."""
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    return CACHED_SRC_FUNCTIONS.get(getattr(jit_fn, "py_func", None))


# The work is in ``body``, the C entry point only guards it: numba's try/except
# multiplies the control flow of everything inside it (here ~8x the blocks of
# the body), which showed as ~1.4 s of extra cold compile on small models.
_LOGP = """
@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def body(x_, out_, logp_, user_data_):
    ud = numba.carray(user_data_, (UD_WORDS,), np.uint64)
{load}
    x = numba.carray(x_, (N_DIM,))
    out = numba.carray(out_, (N_DIM,))
    logp = numba.carray(logp_, ())
    logp_val, grad = jit_fn(x{args})
    logp[()] = logp_val
    out[...] = grad
    if not np.all(np.isfinite(out)):
        return 3
    if not np.isfinite(logp_val):
        return 4
    return 0


def logp_wrapper(dim, x_, out_, logp_, user_data_):
    if dim != N_DIM:
        return -1
    try:
        return body(x_, out_, logp_, user_data_)
    except Exception:
        return 1
"""

_EXPAND = """
@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def body(x_, out_, user_data_):
    ud = numba.carray(user_data_, (UD_WORDS,), np.uint64)
{load}
    x = numba.carray(x_, (N_DIM,))
    out = numba.carray(out_, (N_EXPANDED,))
    (values,) = jit_fn(x{args})
    out[...] = values
    return 0


def expand_wrapper(dim, expanded, x_, out_, user_data_):
    if dim != N_DIM:
        return -1
    if expanded != N_EXPANDED:
        return -1
    try:
        return body(x_, out_, user_data_)
    except Exception:
        return -2
"""


def _loads(slots, dtypes):
    lines, args = [], []
    for i, (slot, dtype) in enumerate(zip(slots, dtypes)):
        shape = ", ".join(f"int(ud[{slot.shape_word + k}])" for k in range(slot.ndim))
        shape = f"({shape},)" if slot.ndim == 1 else f"({shape})"
        lines.append(f"    s{i} = numba.carray(_void_ptr(ud[{slot.data_word}]), {shape}, _dt{i})")
        args.append(f", s{i}")
    return "\n".join(lines) or "    pass", "".join(args)


@dataclass
class Wrapper:
    """A generated sampler callback, ready to compile: its C signature, Python source function and cache key."""

    sig: object
    py_func: object
    key: str | None
    jit_fn: object
    kernel_args: tuple

    @property
    def cached(self) -> bool:
        """Whether a cache entry exists (the compile will most likely be a load)."""
        return self.key is not None and bool(cache_files(self.key))

    def compile_kernel(self) -> None:
        """Compile the graph kernel for the types the wrapper calls it with (so it can be timed apart).

        Calls it once on writable zero arrays of those types (the kernel is a
        ``*args`` function, which ``Dispatcher.compile`` can't type); an error
        raised by the evaluation itself is irrelevant here.
        """
        try:
            self.jit_fn(*[np.zeros(shape, dtype) for shape, dtype in self.kernel_args])
        except Exception as err:
            if isinstance(err, numba.core.errors.NumbaError):
                raise
            log.debug("kernel evaluation at zeros raised %r (compiled anyway)", err)

    def compile(self, **cfunc_kwargs):
        """The ``numba.cfunc``: loaded from the cache when possible; a corrupt entry is rebuilt."""
        if self.key is None:
            stats["uncacheable"] += 1
            return numba.cfunc(self.sig, **cfunc_kwargs)(self.py_func)
        try:
            cfunc = numba.cfunc(self.sig, cache=True, **cfunc_kwargs)(self.py_func)
        except Exception as err:  # a corrupt or partial cache entry: drop it and compile afresh
            log.warning("pmfast: discarding unreadable wrapper cache entry %s (%s)", self.key[:12], err)
            discard_cache_entry(self.key)
            stats["rebuilt"] += 1
            cfunc = numba.cfunc(self.sig, cache=True, **cfunc_kwargs)(self.py_func)
        stats["hits" if cfunc.cache_hits else "misses"] += 1
        keys.append(self.key)
        return cfunc


def _prepare(template, name, sig, jit_fn, user_data, shared_names, shared_data, consts, cfunc_kwargs) -> Wrapper:
    from pmfast import __version__
    from pytensor.link.numba.cache import compile_numba_function_src

    slots = shared_slots(user_data, shared_names)
    dtypes = [np.dtype(shared_data[n].dtype) for n in shared_names]
    load, args = _loads(slots, dtypes)
    src = template.format(load=load, args=args)
    consts = {**consts, "UD_WORDS": user_data.dtype.itemsize // 8}
    src = "\n".join(f"{k} = {v}" for k, v in sorted(consts.items())) + "\n" + src
    # __name__ makes numba treat the globals as a module's (cacheable environment).
    env = {"__name__": __name__, "numba": numba, "np": np, "jit_fn": jit_fn, "_void_ptr": _void_ptr}
    env.update({f"_dt{i}": dt.type for i, dt in enumerate(dtypes)})
    graph_key = graph_cache_key(jit_fn)
    key = None
    if graph_key is not None:
        ident = (WRAPPER_VERSION, __version__, numba.__version__, graph_key, src, [d.str for d in dtypes])
        key = hashlib.sha256(repr((*ident, sorted(cfunc_kwargs.items()))).encode()).hexdigest()
    py_func = compile_numba_function_src(src, name, env, env, cache_key=key)
    kernel_args = (
        ((consts["N_DIM"],), np.float64),
        *[(np.shape(shared_data[n]), dt) for n, dt in zip(shared_names, dtypes)],
    )
    return Wrapper(sig, py_func, key, jit_fn, kernel_args)


def cache_files(key: str) -> list:
    """The numba cache files (index and data) of the wrapper cached under ``key``."""
    from pytensor.link.numba.cache import NUMBA_CACHE_PATH

    return sorted(NUMBA_CACHE_PATH.glob(f"*{key}*"))


def discard_cache_entry(key: str) -> None:
    for path in cache_files(key):
        path.unlink(missing_ok=True)


def logp_wrapper(n_dim, jit_fn, user_data, shared_names, shared_data, **cfunc_kwargs) -> Wrapper:
    """The ``logp(dim, x, grad_out, logp_out, user_data) -> int`` callback nutpie calls."""
    from numba import types as t

    sig = t.int64(t.uint64, t.CPointer(t.double), t.CPointer(t.double), t.CPointer(t.double), t.voidptr)
    return _prepare(_LOGP, "logp_wrapper", sig, jit_fn, user_data, shared_names, shared_data, {"N_DIM": n_dim}, cfunc_kwargs)


def expand_wrapper(n_dim, n_expanded, jit_fn, user_data, shared_names, shared_data, **cfunc_kwargs) -> Wrapper:
    """The ``expand(dim, n_expanded, x, out, user_data) -> int`` callback nutpie calls."""
    from numba import types as t

    sig = t.int64(t.uint64, t.uint64, t.CPointer(t.double), t.CPointer(t.double), t.voidptr)
    consts = {"N_DIM": n_dim, "N_EXPANDED": n_expanded}
    return _prepare(_EXPAND, "expand_wrapper", sig, jit_fn, user_data, shared_names, shared_data, consts, cfunc_kwargs)


@numba.extending.intrinsic
def _void_ptr(typingctx, addr):
    """Reinterpret an integer address as ``void*``."""

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return types.voidptr(addr), codegen
