"""pmfast's numba implementation of pytensor's ``Split`` (the gradient of a ``Join``).

pytensor's splits with ``np.cumsum`` and ``np.split`` and formats its size
error as an f-string in numba: numba's unicode machinery, ``np.array_split``
and ``cumsum`` are compiled in every new process (~1.3 s of stoch_vol's
compile, which splits its gradient). Here, for a constant axis and at least
two pieces (the common case), the node function is straight-line slicing
generated for that axis and piece count: the same views, the same checks, the
size error raised with its numbers and formatted in Python
(:class:`SplitSizeError`, a ``ValueError`` with pytensor's message). The
source depends only on the axis, the number of pieces and the rank, so one
cached function serves every model that splits the same way.
"""

from __future__ import annotations

import hashlib

#: Bump when the generated code changes (part of the cache key).
VERSION = 1


class SplitSizeError(ValueError):
    """pytensor's ``Split`` size mismatch; numba raises it with ``(sum of sizes, length of the axis)``."""

    def __init__(self, *args):
        if len(args) == 2 and not isinstance(args[0], str):
            total, expected = args
            args = (f"Split sizes sum to {total}; expected {expected}",)
        super().__init__(*args)


def split_source(ndim: int, axis: int, n: int) -> str:
    """Source of ``split(x, axis, sizes)`` returning ``n`` views of ``x`` along ``axis``."""
    lead = ":, " * axis
    lines = [
        "def split(x, axis, sizes):",
        f"    if sizes.shape[0] != {n}:",
        "        raise ValueError('Length of splits is not equal to n_splits')",
        f"    for i in range({n}):",
        "        if sizes[i] < 0:",
        "            raise ValueError('Split sizes cannot be negative')",
        "    e0 = 0",
    ]
    # straight-line ends (numba 0.65 raises a loop-carried sum's initial value, not its last)
    lines += [f"    e{k + 1} = e{k} + sizes[{k}]" for k in range(n)]
    lines += [f"    if e{n} != x.shape[{axis}]:", f"        raise SplitSizeError(e{n}, x.shape[{axis}])"]
    pieces = ", ".join(f"x[{lead}e{k}:e{k + 1}]" for k in range(n))
    lines.append(f"    return ({pieces},)")
    return "\n".join(lines) + "\n"


def split_axis(node) -> int | None:
    """The (non-negative) constant axis ``node`` splits along, or None when pmfast doesn't implement it."""
    from pytensor.graph.basic import Constant

    x, axis, sizes = node.inputs
    if node.op.len_splits < 2 or not isinstance(axis, Constant) or axis.ndim != 0:
        return None
    if sizes.ndim != 1 or not sizes.type.dtype.startswith(("int", "uint")):
        return None
    a = int(axis.data)
    if not -x.ndim <= a < x.ndim:
        return None
    return a % x.ndim


def funcify(op, node):
    """``(numba function, cache key)`` for a ``Split`` node, or None (see :func:`split_axis`)."""
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    axis = split_axis(node)
    if axis is None:
        return None
    src = split_source(node.inputs[0].ndim, axis, op.len_splits)
    key = "pmfast_split_" + hashlib.sha256(repr((VERSION, src)).encode()).hexdigest()
    env = {"SplitSizeError": SplitSizeError, "__name__": __name__}
    return numba_njit(compile_numba_function_src(src, "split", env, env)), key
