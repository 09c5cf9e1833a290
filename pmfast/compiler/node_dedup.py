"""One node function for basic-index nodes that differ only in their constant bounds (issue #29).

A big graph's entry calls its node functions (:mod:`pmfast.compiler.entry`), so each distinct node
function is a numba compile of its own. :mod:`pmfast.compiler.basic_index` writes a ``Subtensor`` /
``IncSubtensor`` node's constant index into a string literal (``SPEC = "s13:31:_"``): the raveled
point's slices, a gradient's pieces written into their place, a VAR's lags each differ in that
literal only, so hier_var (8 groups) compiled 48 ``set_subtensor``, 39 ``subtensor`` and 9
``inc_subtensor`` functions of 3, 4 and 3 sources (~2.8 of ~64 CPU s of its numba compiles).

Here such a node's non-negative integers and slice bounds are read from the node function's own
index arguments (pytensor passes the graph constants to it anyway; the generated code ignored
them): the literal keeps only the index's form (``"sa0:a1:_"``: a slice whose start and stop are the
arguments 0 and 1), the negative values and every step, so each value's code is the one
:func:`pmfast.compiler.basic_index.view` emits for it (a non-negative bound's clamp, a negative one's
wrap-around, the step's length division), with the value an argument instead of an LLVM constant.
Nodes of one form share one function, one cache key, one compile (and, through the linker's
dispatcher sharing, one dispatcher). Same views, same errors as ``basic_index``.

Active only while pmfast's linker converts a big graph (:func:`scope`; small graphs inline their
node functions into the entry, where the constants fold as before), ``PMFAST_NODE_DEDUP=0`` turns it
off. The cache key names the form, not the values (``pmfast_nd_…``), so the graph's key changes with it.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
from numba.core import cgutils, types
from numba.np.arrayobj import make_array

from pmfast.compiler import basic_index, generated
from pmfast.compiler.pure import intrinsic

#: Bump when the generated code changes (part of the cache key).
VERSION = 1

_active = [False]


def enabled() -> bool:
    """``PMFAST_NODE_DEDUP`` is not ``0``."""
    return os.environ.get("PMFAST_NODE_DEDUP", "1") != "0"


def active() -> bool:
    """Whether node functions are being generated for a big graph with the dedup on."""
    return _active[0] and enabled()


@contextlib.contextmanager
def scope(big: bool):
    """Generate node functions for a big graph (``big``) or not, inside the block."""
    old = _active[0]
    _active[0] = bool(big)
    try:
        yield
    finally:
        _active[0] = old


def form(literal: str) -> str:
    """``literal`` (a :func:`pmfast.compiler.basic_index.spec`) with each non-negative integer index and
    slice start/stop replaced by ``a<k>``, ``k`` the index argument that holds it.

    The index arguments are the graph constants ``spec`` read, in its order: one per integer and per
    slice part that is not ``_``. Steps and negative values stay written in.
    """
    k = 0
    items = []
    for it in basic_index.parse(literal):
        if it[0] == "i":
            items.append(f"ia{k}" if it[1] >= 0 else f"i{it[1]}")
            k += 1
            continue
        parts = []
        for pos, v in enumerate(it[1:]):
            if v is None:
                parts.append("_")
                continue
            parts.append(f"a{k}" if pos < 2 and v >= 0 else str(v))
            k += 1
        items.append("s" + ":".join(parts))
    return ";".join(items)


def parse(pattern: str) -> list:
    """Like :func:`pmfast.compiler.basic_index.parse`, an argument ``a<k>`` parsed as ``("a", k)``."""

    def value(p):
        if p == "_":
            return None
        return ("a", int(p[1:])) if p[0] == "a" else int(p)

    out = []
    for item in pattern.split(";") if pattern else ():
        if item[0] == "i":
            out.append(("i", value(item[1:])))
        else:
            out.append(("s", *(value(p) for p in item[1:].split(":"))))
    return out


def _view_codegen(context, builder, xty, value, items, idx_ty, idx_value, outty):
    """:func:`pmfast.compiler.basic_index._view_codegen` with ``("a", k)`` values read from the index tuple."""

    def arg(v):
        """(LLVM intp value, non-negative?) of a literal int or an argument (a non-negative constant)."""
        if isinstance(v, tuple):
            k = v[1]
            item, ty = builder.extract_value(idx_value, k), idx_ty[k]
            if isinstance(ty, types.Array):  # a 0-d array holding the constant
                item, ty = builder.load(make_array(ty)(context, builder, item).data), ty.dtype
            return context.cast(builder, item, ty, types.intp), True
        return cgutils.intp_t(v), v >= 0

    return basic_index._view_codegen(context, builder, xty, value, items, outty, arg=arg)


def _py_index(pattern, idx):
    def v(p):
        return int(idx[p[1]]) if isinstance(p, tuple) else p

    return tuple(v(it[1]) if it[0] == "i" else slice(*(v(p) for p in it[1:])) for it in parse(pattern))


def _int0d(t) -> bool:
    return isinstance(t, types.Array) and t.ndim == 0 and isinstance(t.dtype, types.Integer)


@intrinsic(prefer_literal=True)
def view(typingctx, x, literal, idx):
    """``view(x, pattern, (i0, …))``: ``x[index]``, the index's form from ``pattern`` (:func:`form`),
    its ``a<k>`` values the integers ``idx[k]``; the same view as :func:`pmfast.compiler.basic_index.view`."""
    if not (isinstance(x, types.Array) and isinstance(literal, types.StringLiteral) and isinstance(idx, types.BaseTuple)):
        return None
    if not all(isinstance(t, types.Integer) or _int0d(t) for t in idx):
        return None
    items = parse(literal.literal_value)
    outty = basic_index.result_type(x, items)
    if outty is None:
        return None
    idx_ty = tuple(idx)

    def codegen(context, builder, sig, args):
        from numba.core.imputils import impl_ret_borrowed

        res = _view_codegen(context, builder, x, args[0], items, idx_ty, args[2], outty)
        return impl_ret_borrowed(context, builder, outty, res)

    return outty(x, literal, idx), codegen


@view.python
def _(x, literal, idx):
    return x[(*_py_index(literal, idx), ...)]


def _source(name: str, n_idx: int, first: str | None, inc: bool) -> str:
    args = [f"idx_{k}" for k in range(n_idx)]
    tup = "(" + "".join(f"{a}, " for a in args) + ")"
    sig = ", ".join(["x"] + ([] if first is None else ["y"]) + args)
    if first is None:
        return f"def {name}({sig}):\n    return _pm_view(x, PATTERN, {tup})\n"
    return f"def {name}({sig}):\n    {first}\n    _pm_update(_pm_view(z, PATTERN, {tup}), y, {inc})\n    return z\n"


def funcify(op, node):
    """``(numba function, cache key)`` of a ``Subtensor``/``IncSubtensor`` node with constant indices that
    :func:`pmfast.compiler.basic_index.funcify` takes, its index values read from its arguments; or None."""
    from pytensor.tensor.subtensor import IncSubtensor, Subtensor

    from pmfast.compiler import arrays

    if node.outputs[0].type.ndim == 0:
        return None
    if type(op) is Subtensor:
        n_skip = 1
    elif type(op) is IncSubtensor:
        x, y = node.inputs[:2]
        if y.type.dtype != x.type.dtype or np.dtype(x.type.dtype).kind not in "iuf":
            return None
        n_skip = 2
    else:
        return None
    literal = basic_index.spec(node, n_skip)
    if literal is None:
        return None
    pattern = form(literal)
    n_idx = len(node.inputs) - n_skip
    if "a" not in pattern:
        return None  # nothing read from the arguments: basic_index's function is the same
    if type(op) is Subtensor:
        name, src = "subtensor", _source("subtensor", n_idx, None, False)
    else:
        name = "set_subtensor" if op.set_instead_of_inc else "inc_subtensor"
        src = _source(name, n_idx, "z = x" if op.inplace else "z = _pm_copy1(x)", not op.set_instead_of_inc)
    env = {"_pm_view": view, "_pm_update": basic_index.update, "_pm_copy1": arrays.copy1, "PATTERN": pattern}
    key_parts = (VERSION, basic_index.VERSION, src, pattern, arrays.VERSION)
    return generated.build(__name__, name, src, env, f"pmfast_nd_{name}_", key_parts)
