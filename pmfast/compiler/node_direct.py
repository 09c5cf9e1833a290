"""Node functions cached as they are, without pytensor's ``*args`` forwarder.

pytensor's ``numba_funcify_ensure_cache`` makes every cacheable node function (and every scalar
op of a Composite's inner graph) cacheable by compiling a second function,
``def f(*args): return jitable_func(*args)``, from a string under the node's key. In a process
that compiles the node, that is a second numba function: a pipeline run typing a star-args
call, an LLVM module with the node function linked in and optimised again, machine code. Its
caller (an entry calling a node function it doesn't inline, a Composite, a fused loop calling
its scalar functions) then links the forwarder's module. sr11_ordered_logistic_education's cold
compile built 9 of them (0.45 CPU s; 0.1 s for one 12-argument loop).

A node function generated from source with globals only (pytensor's and pmfast's generated code:
no closure cells) is what numba can cache directly: pytensor's cache locator finds it by key, as
it finds the forwarder. :func:`unwrap` compiles such a function on its own under the key
pytensor gave the forwarder plus :data:`SUFFIX` (another function, so another cache entry), with
the flags it was jitted with; the key the graph records gets the suffix too, so entries that call
it are keyed apart from those that call a forwarder. Anything else (a closure, a function with
typed locals or its own pipeline, an ``optnone`` one, pure-python evaluation) keeps the forwarder.
The code the forwarder ran is the node function's, so values don't change.

``PMFAST_NODE_DIRECT=0``: pytensor's forwarders.
"""

from __future__ import annotations

import os
import types

#: The body of pytensor's forwarder (``numba_funcify_ensure_cache``).
FORWARDER = "return jitable_func(*args)"
#: Added to the cache key of a node function cached without its forwarder (bump when this changes).
SUFFIX = "_pmfast_direct_node1"


def enabled() -> bool:
    return os.environ.get("PMFAST_NODE_DIRECT", "1") != "0"


def _copy(py_func):
    """A copy of ``py_func`` of its own (the cache locator is keyed by the function object)."""
    new = types.FunctionType(py_func.__code__, py_func.__globals__, py_func.__name__, py_func.__defaults__, None)
    new.__qualname__ = py_func.__qualname__
    new.__kwdefaults__ = py_func.__kwdefaults__
    new.__source__ = py_func.__source__
    return new


def cacheable_as_is(fn) -> bool:
    """Whether numba can cache ``fn``'s function under a key of its own: a plain dispatcher of a
    function generated from source, without closure cells, typed locals, its own pipeline or
    ``optnone``."""
    from numba.core.compiler import Compiler
    from numba.core.registry import CPUDispatcher

    if type(fn) is not CPUDispatcher:
        return False
    py_func = fn.py_func
    if getattr(py_func, "__source__", None) is None or py_func.__closure__ is not None:
        return False
    if fn.locals or fn._compiler.pipeline_class is not Compiler:
        return False
    return not fn.targetoptions.get("_dbg_optnone")


def forwarded(fn):
    """The dispatcher ``fn`` forwards to if it is pytensor's ``*args`` forwarder, else None."""
    py_func = getattr(fn, "py_func", None)
    if py_func is None or FORWARDER not in (getattr(py_func, "__source__", None) or ""):
        return None
    return py_func.__globals__.get("jitable_func")


def unwrap(fn, key: str, fastmath: bool):
    """``(dispatcher, key)`` for pytensor's forwarder ``fn`` (cached under ``key``): the function it
    forwards to, compiled and cached as it is; or None (keep the forwarder)."""
    import numba
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    from pmfast.compiler.pure import jit_off

    inner = forwarded(fn)
    if inner is None or jit_off() or not cacheable_as_is(inner):
        return None
    py_func = _copy(inner.py_func)
    new_key = f"{key}{SUFFIX}"
    CACHED_SRC_FUNCTIONS[py_func] = f"{new_key}_fastmath{int(fastmath)}"
    options = {k: v for k, v in inner.targetoptions.items() if k != "nopython"}
    return numba.njit(cache=True, **options)(py_func), new_key
