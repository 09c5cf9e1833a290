"""Which node functions an entry inlines instead of calling.

Every numba function compiled on its own costs a pipeline run, an LLVM
module optimised and turned into machine code, and then its code is linked
into each caller and optimised again. A node function that is not in the
cache would be compiled just for this entry: the entry inlines it at numba's
IR level (``inline="always"``) and it is typed, lowered and optimised once,
as part of the entry. The same holds one level down: a fused Elemwise's core
function inlines the scalar op functions of its scalar graph
(:mod:`pmfast.compiler.elemwise`).

The choice depends on the graph only, never on what the cache holds. Inlined
code is optimised together with the entry (numba types an inlined function
with the caller's flags, and LLVM may contract or reassociate across the
former call), so it can round differently from the called function: choosing
by cache state made the same model give different draws for one seed
depending on what was compiled before (a first compile inlined a function, a
later one on the same machine called the cached copy). A node function
compiled for an earlier model is therefore inlined again, not called.

A wide entry inlines only part of them (:func:`plan`). Inlined code is
typed, lowered and optimised once per call site, and numba's passes over one
function grow faster than its size: on a wide graph (many sibling blocks,
each with its own gather loops) one huge entry cost more to compile than
calling the node functions, each compiled once and shared by its call sites
(wide_additive n=20, 170 statements, 7,321 instructions over 33 candidates:
45.5 CPU s with every function inlined, 19.8 s calling them all). Inlining
everything adds each function's bytecode instructions times its call sites
to the entry: up to :data:`BUDGET` it is done (every small model's entry is
under it); beyond it the cheapest candidates (instructions times call sites)
are inlined while they fit in the budget and the rest called
(:data:`ORDER`). Calling all of them beyond the budget, as before, made an
entry just over it (bayesian_var_ireland: 4,052 instructions, 92 candidates)
compile 92 separate functions: 28.9 CPU s cold against 18.8 s cheapest-first
(19.2 s inlining all, 19.8 s fewest call sites first); on wide_additive
n=20 cheapest-first costs what calling them all does (20.1 vs 19.8 s), at
n=80 less (36.0 vs 38.4 s; fewest sites first 54.0 s, inlining all 1,254 s).
A called function's code is linked into
the entry as the same optimised LLVM module whether it was compiled now or
loaded from the cache (numba caches the linkable module next to the object
code), so calling is as deterministic as inlining.

Not inlined (numba's inliner can't, or the entry would grow for nothing):
functions that are not plain jitted functions (pytensor's ``@overload``
Elemwise, object-mode fallbacks), functions taking ``*args`` (pytensor's Join
of anything but vectors, CheckAndRaise), functions raising exceptions with
runtime arguments or f-string messages (the inliner loses their types;
pmfast's SpecifyShape and Split call a cached raiser instead,
:func:`pmfast.compiler.raisers.shape_fail`), and ops with inner functions or
inner graphs (Scan, OpFromGraph, IfElse, Blockwise, random variables). Nor is
pmfast's Reshape (:mod:`pmfast.compiler.shape_ops`): its source depends on the rank
only, so one cached function serves every model (hier_logistic's is found in
the cache). pmfast's linear algebra (:mod:`pmfast.compiler.linalg`) is inlined as a one-line
call of a module-level implementation numba caches per machine and calls (one compile for every
op's props). pmfast's Join of vectors and Split are inlined: at stop 23 their
node functions were ``np.concatenate`` and numba's slicing, and inlined they
cost stoch_vol's entry +0.4 CPU s against 0.23 s compiling them; as
intrinsics (:mod:`pmfast.compiler.join`, :mod:`pmfast.compiler.split`) they
add ~0.05–0.1 s to the entry, and the ~0.4 s of their own compiles (two
signatures of ``split``, three functions per Join) is gone.
If numba still fails to compile an entry with
inlined functions, the entry is compiled again calling them
(:class:`pmfast.compiler.entry.PreparedEntry`).
"""

from __future__ import annotations

import dis
import inspect
import os
import types
import weakref
from collections.abc import Sequence

#: Ops whose node functions are never inlined (see the module docstring).
NEVER = frozenset({"Reshape", "Scan", "OpFromGraph", "IfElse", "Blockwise", "RandomVariable"})

#: A partial reduction's node function (:mod:`pmfast.compiler.careduce`) called from at least this many
#: statements of an entry is called, not inlined (:func:`careduce_called`).
CAREDUCE_CALL_SITES = 2

#: Most bytecode instructions (summed over call sites) an entry inlines; see :func:`plan`.
BUDGET = 4000

#: Beyond :data:`BUDGET`, which functions :func:`plan` still inlines: ``"none"``, or greedily
#: within the budget ``"sites"`` (fewest call sites first) or ``"cost"`` (cheapest in total first).
ORDER = "cost"

_inlined: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _dispatcher_type():
    from numba.core.registry import CPUDispatcher

    return CPUDispatcher


def inner_function(dispatcher):
    """The jitted function behind ``dispatcher`` (unwrapping pytensor's ``*args`` cache wrapper), or None."""
    CPUDispatcher = _dispatcher_type()
    if not isinstance(dispatcher, CPUDispatcher):
        return None
    py_func = dispatcher.py_func
    if "jitable_func(*args)" in getattr(py_func, "__source__", ""):
        dispatcher = py_func.__globals__.get("jitable_func")
        if not isinstance(dispatcher, CPUDispatcher):
            return None
    return dispatcher


_DYNAMIC = frozenset({"LOAD_FAST", "LOAD_DEREF", "LOAD_ATTR", "BINARY_SUBSCR", "LOAD_METHOD", "BINARY_OP"})
_verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _raises_dynamic(code) -> bool:
    """Whether ``code`` (or a nested function) builds a string or raises an exception built from runtime values."""
    instructions = list(dis.get_instructions(code))
    for i, ins in enumerate(instructions):
        if ins.opname in ("FORMAT_VALUE", "BUILD_STRING"):
            return True
        if ins.opname == "RAISE_VARARGS" and ins.arg:
            j = i  # back to the start of the raise statement's line
            while j > 0 and instructions[j].starts_line is None:
                j -= 1
            if any(x.opname in _DYNAMIC for x in instructions[j:i]):
                return True
    return any(_raises_dynamic(c) for c in code.co_consts if isinstance(c, types.CodeType))


def inlinable(py_func) -> bool:
    """Whether numba's inliner handles ``py_func`` (no ``*args``; no raise with runtime arguments)."""
    if py_func not in _verdicts:
        code = py_func.__code__
        varargs = code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
        _verdicts[py_func] = not varargs and not _raises_dynamic(code)
    return _verdicts[py_func]


def inline_version(dispatcher):
    """An ``inline="always"`` copy of the function behind ``dispatcher`` (one per function), or None."""
    import numba

    inner = inner_function(dispatcher)
    if inner is None or inner.targetoptions.get("_dbg_optnone") or not inlinable(inner.py_func):
        return None
    if inner not in _inlined:
        options = {k: v for k, v in inner.targetoptions.items() if k in ("fastmath", "boundscheck", "error_model")}
        copy = numba.njit(inline="always", **options)(inner.py_func)
        if not isinstance(copy, _dispatcher_type()):  # numba's jit replaced (pure-python evaluation): not kept
            return copy
        _inlined[inner] = copy
    return _inlined[inner]


def scalar_inline_version(dispatcher):
    """:func:`inline_version` of a scalar op's function, for a fast-math caller (an Elemwise core), or None.

    Inlined at numba's IR level, a function is lowered with its caller's fast-math flags. One
    compiled with fast math off keeps its own flags by being called: pytensor compiles ``x ** k``
    with an integer or bool ``k`` that way, because ``afn`` lets LLVM turn ``pow(x, (double)k)``
    into ``llvm.powi``, which becomes a call of ``__powidf2``, a symbol numba's JIT does not
    resolve: an LLVM abort of the process (numba issue 9554). LLVM's own inlining of the call
    keeps each instruction's flags. pmfast's own scalar functions (``pmfast.vmath``'s ``psi``)
    are written to be inlined into fast-math cores and still are.
    """
    inner = inner_function(dispatcher)
    if inner is not None and inner.targetoptions.get("fastmath") is False:
        if not getattr(inner.py_func, "__module__", "").startswith("pmfast."):
            return None
    return inline_version(dispatcher)


def careduce_called(kind: str) -> bool:
    """Whether an entry of ``kind`` calls a partial reduction it makes several calls of, instead of
    inlining it (``PMFAST_CAREDUCE_CALL=0``: inlined as any node function; ``=all``: logp entries
    too). Part of the entries' keys: it changes their code.

    pmfast's ``careduce`` (two loop nests chosen at run time) weighs ~1,700-3,000 LLVM-instruction
    units per inlined copy, typed, lowered and optimised again at every call site:
    bayesian_var_ireland's expand entry inlined 4 copies of one (12,320 of its 24,630 units), its logp
    entry 10 of two. Called, each source is compiled once (cached per machine: it depends on rank,
    axes, scalar op and dtype only) and linked. Only the expand entry by default (called once per
    draw): in the logp entry the calls cost bayesian_var_ireland's gradient 2-20% (three measurements,
    median 8%) for ~3.5 CPU s less compile (one process, no worker)."""
    mode = os.environ.get("PMFAST_CAREDUCE_CALL", "1")
    return mode == "all" or (mode != "0" and kind == "expand")


def _is_careduce(dispatcher) -> bool:
    inner = inner_function(dispatcher)
    return inner is not None and getattr(inner.py_func, "__module__", None) == "pmfast.compiler.careduce"


def should_inline(op_name: str | None, dispatcher) -> bool:
    """Inline this node's function into the entry (see the module docstring)?"""
    if op_name is None or op_name in NEVER or os.environ.get("PMFAST_INLINE", "1") == "0":
        return False
    return inline_version(dispatcher) is not None


def _instructions(code) -> int:
    """Bytecode instructions of ``code`` and the functions nested in it."""
    nested = sum(_instructions(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return sum(1 for _ in dis.get_instructions(code)) + nested


def cost(dispatcher) -> int:
    """What inlining one call of ``dispatcher``'s function adds to an entry: its bytecode instructions."""
    return _instructions(inner_function(dispatcher).py_func.__code__)


def plan(
    calls: Sequence[tuple[str, str | None, object]], budget: int | None = None, order: str | None = None, call_careduce: bool = False
) -> tuple[str, ...]:
    """The names to inline among an entry's ``calls`` (``(name, op, dispatcher)`` per statement, in order).

    Candidates are the names :func:`should_inline` accepts. All of them if
    inlining them all adds at most ``budget`` (default :data:`BUDGET`)
    instructions (each function's instructions times its call sites); otherwise
    as ``order`` (default :data:`ORDER`) says: none, or candidates taken in that
    order (ties: first call first) while they fit in the budget. Depends on the
    graph's code only. ``call_careduce``: partial reductions called from several statements are
    not candidates (:func:`careduce_called`).
    """
    budget = BUDGET if budget is None else budget
    order = ORDER if order is None else order
    sites: dict[str, int] = {}
    refused: set[str] = set()
    for name, op, dispatcher in calls:
        if name in sites:
            sites[name] += 1
        elif name not in refused:
            if should_inline(op, dispatcher):
                sites[name] = 1
            else:
                refused.add(name)
    dispatchers = {name: d for name, _, d in calls}
    if call_careduce:
        sites = {k: n for k, n in sites.items() if n < CAREDUCE_CALL_SITES or not _is_careduce(dispatchers[k])}
    costs = {name: n * cost(dispatchers[name]) for name, n in sites.items()}
    if sum(costs.values()) <= budget:
        return tuple(sites)
    if order == "none":
        return ()
    first = {name: i for i, name in enumerate(sites)}
    rank = {"sites": lambda k: (sites[k], costs[k], first[k]), "cost": lambda k: (costs[k], first[k])}[order]
    chosen, total = set(), 0
    for name in sorted(sites, key=rank):
        if total + costs[name] <= budget:
            chosen.add(name)
            total += costs[name]
    return tuple(name for name in sites if name in chosen)
