"""The static shape of an ``Alloc``/``broadcast_to`` folded from static types before pytensor builds a graph for it.

pytensor's ``infer_static_shape(shape)`` (``Alloc.make_node``, hence ``broadcast_to``,
``zeros``, ``alloc_diag``…) learns which entries of a symbolic shape are constants by cloning
the whole ancestor graph of the entries into a ``FunctionGraph`` with a ``ShapeFeature``,
running the infer-shape rewrites on it and constant-folding it. In a gradient the entries are
``shape(x)[k]`` of the model's values, whose ancestors are most of the model, and
``pytensor.grad`` of a ``Blockwise`` (a batched Cholesky, solve, MvNormal) calls it for every
such node through ``vectorize_graph``: the graph build grows with the graph's size times the
number of those nodes (hier_var: 4.7 of 8 CPU s of building the logp+grad graph at 4 groups,
~70% at 8).

:func:`infer_static_shape` first folds each entry with exact rules over static types: a
constant; ``Shape(x)`` / ``Shape_i`` of an axis whose static length is known; a ``Subtensor``
with constant indices of a foldable vector; ``MakeVector``; scalar/tensor conversions and
casts; integer ``Elemwise`` arithmetic, comparisons and ``switch`` on folded values. When every
entry folds to an integer it returns them, otherwise it calls pytensor's function. The rules
read nothing but facts pytensor's own path starts from (a variable's static shape, constants)
and compute what its constant folding computes, so the static shape is the same; the symbolic
shape returned is pytensor's (validated, not folded) in both cases. Compile-scoped
(:mod:`pmfast.compiler.patching`).
"""

from __future__ import annotations

import operator

from pmfast.compiler.patching import scoped

_BINARY = {
    "Add": operator.add,
    "Sub": operator.sub,
    "Mul": operator.mul,
    "IntDiv": operator.floordiv,
    "Maximum": max,
    "Minimum": min,
    "EQ": operator.eq,
    "NEQ": operator.ne,
    "LT": operator.lt,
    "GT": operator.gt,
    "LE": operator.le,
    "GE": operator.ge,
    "AND": lambda a, b: bool(a) and bool(b),
    "OR": lambda a, b: bool(a) or bool(b),
}

#: How deep :func:`_scalar` follows a shape entry's graph before giving up.
MAX_DEPTH = 32


class _NotStatic(Exception):
    pass


def _vector(v, depth: int) -> tuple:
    """The entries (ints or None) of 1-d integer vector ``v``, or raise :class:`_NotStatic`."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.basic import MakeVector
    from pytensor.tensor.shape import Shape
    from pytensor.tensor.subtensor import Subtensor, get_idx_list

    if depth > MAX_DEPTH:
        raise _NotStatic
    if isinstance(v, Constant) and v.type.ndim == 1:
        return tuple(int(x) for x in v.data)
    node = v.owner
    if node is None:
        raise _NotStatic
    op = node.op
    if isinstance(op, Shape):
        return tuple(node.inputs[0].type.shape)
    if isinstance(op, MakeVector):
        return tuple(_maybe(i, depth + 1) for i in node.inputs)
    if type(op) is Subtensor:
        (idx,) = get_idx_list(node.inputs, op.idx_list)
        if isinstance(idx, slice):
            parts = [None if p is None else _scalar(p, depth + 1) for p in (idx.start, idx.stop, idx.step)]
            return _vector(node.inputs[0], depth + 1)[slice(*parts)]
    raise _NotStatic


def _maybe(v, depth: int):
    try:
        return _scalar(v, depth)
    except _NotStatic:
        return None


def _scalar(v, depth: int = 0):
    """The value of 0-d integer (or bool) variable ``v``, or raise :class:`_NotStatic`."""
    from pytensor.graph.basic import Constant
    from pytensor.scalar.basic import Cast, Identity, Switch
    from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.shape import Shape_i
    from pytensor.tensor.subtensor import Subtensor, get_idx_list

    if depth > MAX_DEPTH:
        raise _NotStatic
    if isinstance(v, int):
        return v
    if isinstance(v, Constant):
        if getattr(v.type, "ndim", 0) != 0:
            raise _NotStatic
        return v.data.item() if hasattr(v.data, "item") else v.data
    node = v.owner
    if node is None:
        raise _NotStatic
    op = node.op
    if isinstance(op, Shape_i):
        length = node.inputs[0].type.shape[op.i]
        if length is None:
            raise _NotStatic
        return length
    if isinstance(op, (ScalarFromTensor, TensorFromScalar)):
        return _scalar(node.inputs[0], depth + 1)
    if type(op) is Subtensor and node.inputs[0].type.ndim == 1:
        (idx,) = get_idx_list(node.inputs, op.idx_list)
        if not isinstance(idx, slice):
            value = _vector(node.inputs[0], depth + 1)[_scalar(idx, depth + 1)]
            if value is None:
                raise _NotStatic
            return value
        raise _NotStatic
    sop = op.scalar_op if isinstance(op, Elemwise) else op
    name = type(sop).__name__
    if name in _BINARY and len(node.inputs) == 2:
        return _int(_BINARY[name](_scalar(node.inputs[0], depth + 1), _scalar(node.inputs[1], depth + 1)))
    if name == "Neg":
        return -_scalar(node.inputs[0], depth + 1)
    if isinstance(sop, (Identity, Cast)) and str(v.type.dtype).startswith(("int", "uint", "bool")):
        return _int(_scalar(node.inputs[0], depth + 1))
    if isinstance(sop, Switch):
        cond = _scalar(node.inputs[0], depth + 1)
        return _scalar(node.inputs[1] if cond else node.inputs[2], depth + 1)
    raise _NotStatic


def _int(x):
    if isinstance(x, bool):
        return x
    if not isinstance(x, int):
        raise _NotStatic
    return x


def fold(sh) -> tuple | None:
    """The static shape of validated shape entries ``sh`` if every entry folds to an integer, else None."""
    out = []
    for s in sh:
        try:
            value = _scalar(s)
        except (_NotStatic, IndexError, TypeError, ValueError, ZeroDivisionError, AttributeError):
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        out.append(value)
    return tuple(out)


def install() -> None:
    """Make ``pytensor.tensor.basic.infer_static_shape`` (and its importers') fold static entries first."""
    import sys

    from pytensor.tensor import basic
    from pytensor.tensor.type import integer_dtypes

    original = basic.infer_static_shape
    if getattr(original, "_pmfast", False):
        return

    def infer_static_shape(shape):
        try:
            sh = [basic.as_tensor_variable(s, ndim=0) for s in shape]
        except Exception:
            return original(shape)
        if not all(s.type.dtype in integer_dtypes for s in sh):
            return original(shape)  # its error message
        static = fold(sh)
        if static is None:
            return original(shape)
        return sh, static

    replacement = scoped(original, infer_static_shape)
    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "__name__", "").startswith("pytensor.") and getattr(module, "infer_static_shape", None) is original:
            module.infer_static_shape = replacement
