"""Hoisted data evaluated by numpy and scipy, without a numba compile.

:mod:`~pmfast.passes.data_hoist` computes its data-only subgraphs once per compile and again per new
dataset (``with_data``, ``fit_many``): code that runs once, where a numba compile of it cost a new
model 0.4–1.9 s. :class:`NumpyGraph` evaluates such a graph node by node on whole arrays, with
pytensor's reference semantics (those of its ``py`` linker):

- an ``Elemwise`` (pmfast's ``VmathElemwise`` too: its scalar ops subclass the stock ones) applies
  its scalar op as the numpy or scipy ufunc pytensor names in the op's ``nfunc_spec``; a
  ``Composite`` applies its inner graph's ops one by one, each result cast to its scalar type as
  pytensor's scalar code does; ``Cast``, ``Identity``, ``Second`` and variadic ``Add``/``Mul`` are
  written here; any other scalar op is its own ``impl`` per element (``np.frompyfunc``);
- pmfast's ``IndexedElemwise`` runs its loop's numpy reference (:func:`pmfast.loops.spec.evaluate`)
  with the scalar op applied as above to the whole gathered operands;
- any other pytensor op runs its ``perform``.

A node it cannot run so (an op of pmfast's own, a ``Scan`` or ``OpFromGraph``, whose ``perform``
compiles its inner graph) raises :class:`Unsupported` when the graph is built, and
:func:`evaluator` then compiles the graph with numba as before; so does an exception on the first
evaluation, and any later one (:class:`WithFallback`). Inputs are never written: an input a node
destroys is handed to it as a copy.
"""

from __future__ import annotations

import functools

import numpy as np


class Unsupported(TypeError):
    """A node :class:`NumpyGraph` does not evaluate."""


def _exact_ops():
    """Scalar ops whose bool or integer result is the same in any integer width."""
    from pytensor.scalar import basic as ps

    return (ps.LogicalComparison, ps.BinaryBitOp, ps.UnaryBitOp, ps.Cast, ps.Switch, ps.Identity, ps.Second,
            ps.ScalarMaximum, ps.ScalarMinimum)


def _scalar_ok(op) -> bool:
    from pytensor.scalar.basic import Composite, ScalarOp

    if isinstance(op, Composite):
        return all(_scalar_ok(n.op) for n in op.fgraph.apply_nodes)
    return isinstance(op, ScalarOp)


def _supported(node) -> bool:
    from pytensor.compile.builders import OpFromGraph
    from pytensor.compile.ops import TypeCastingOp
    from pytensor.scan.op import Scan
    from pytensor.tensor.elemwise import Elemwise

    from pmfast.loops.op import IndexedElemwise

    op = node.op
    if isinstance(op, Elemwise):
        return _scalar_ok(op.scalar_op)
    if isinstance(op, IndexedElemwise):
        return _scalar_ok(op.loop.scalar_op)
    if isinstance(op, TypeCastingOp):  # the identity (data_hoist's HoistMark): pytensor's perform
        return True
    if isinstance(op, (Scan, OpFromGraph)) or not type(op).__module__.startswith("pytensor."):
        return False
    return not getattr(type(op).perform, "__isabstractmethod__", False)


class NumpyGraph:
    """``fn(*values)``: the outputs of the graph from ``inputs`` to ``outputs``, computed by numpy."""

    def __init__(self, inputs, outputs):
        from pytensor.graph.traversal import io_toposort

        self.inputs, self.outputs = list(inputs), list(outputs)
        self.nodes = io_toposort(self.inputs, self.outputs)
        for node in self.nodes:
            if not _supported(node):
                raise Unsupported(f"{node.op} is not evaluated by numpy")

    def __call__(self, *values):
        from pytensor.tensor.elemwise import Elemwise

        from pmfast.loops.op import IndexedElemwise

        env = dict(zip(self.inputs, values, strict=True))

        def value(var):
            return env[var] if var in env else var.data

        for node in self.nodes:
            args = [value(i) for i in node.inputs]
            if isinstance(node.op, Elemwise):
                outs = _elemwise(node, args)
            elif isinstance(node.op, IndexedElemwise):
                outs = _indexed(node, args)
            else:
                for positions in getattr(node.op, "destroy_map", {}).values():
                    for p in positions:
                        args[p] = np.array(args[p], copy=True)
                outs = _perform(node, args)
            env.update(zip(node.outputs, outs, strict=True))
        return [value(o) for o in self.outputs]


def _perform(node, args):
    storage = [[None] for _ in node.outputs]
    node.op.prepare_node(node, None, None, "py")
    node.op.perform(node, args, storage)
    return [s[0] for s in storage]


def _elemwise(node, args):
    """The outputs of ``Elemwise`` ``node``: new arrays of the broadcast shape of all its inputs."""
    args = [np.asarray(a) for a in args]
    shape = np.broadcast_shapes(*(a.shape for a in args))
    results = _scalar(node.op.scalar_op, args, [o.type.dtype for o in node.outputs])
    outs = []
    for r in results:
        out = np.empty(shape, dtype=r.dtype)
        out[...] = r
        outs.append(out)
    return outs


def _indexed(node, args):
    """The outputs of ``IndexedElemwise`` ``node``: its loop's numpy reference, the scalar op applied
    to the whole gathered operands."""
    from pmfast.loops.spec import evaluate

    op = node.op.loop.scalar_op

    def body(*operands):
        return _scalar(op, list(operands), _scalar_dtypes(op, [o.dtype for o in operands]))

    return evaluate(node.op.loop, args, [t.dtype for t in node.op.out_types], array_impl=body)


def _scalar_dtypes(op, dtypes) -> list[str]:
    """The output dtypes of scalar op ``op`` on inputs of ``dtypes``."""
    from pytensor.scalar.basic import Composite, get_scalar_type

    if isinstance(op, Composite):
        return [o.type.dtype for o in op.fgraph.outputs]
    return [t.dtype for t in op.output_types([get_scalar_type(d) for d in dtypes])]


def _scalar(op, args, dtypes):
    """Scalar op ``op`` applied elementwise (numpy broadcasting) to ``args``, cast to ``dtypes``."""
    from pytensor.scalar.basic import Composite

    if isinstance(op, Composite):
        env = dict(zip(op.fgraph.inputs, args, strict=True))

        def value(var):
            return env[var] if var in env else np.asarray(var.data, dtype=var.type.dtype)

        for n in op.fgraph.toposort():
            outs = _scalar(n.op, [value(i) for i in n.inputs], [o.type.dtype for o in n.outputs])
            env.update(zip(n.outputs, outs, strict=True))
        return [value(o) for o in op.fgraph.outputs]
    if any(_narrow(d) for d in dtypes) and not isinstance(op, _exact_ops()):
        return _in_64_bits(op, args, dtypes)
    return [np.asarray(r, dtype=d) for r, d in zip(_apply(op, args, dtypes), dtypes, strict=True)]


def _apply(op, args, dtypes) -> tuple:
    """The results of ``op`` on ``args`` (one per dtype of ``dtypes``), as :func:`_ufunc` computes them."""
    with np.errstate(all="ignore"):
        results = _ufunc(op, len(args), dtypes)(*args)
    return (results,) if len(dtypes) == 1 else tuple(results)


class Inexact(ArithmeticError):
    """A narrow integer result that numba's loop would not have wrapped as numpy does."""


def _narrow(dtype) -> bool:
    """Whether ``dtype`` is bool or an integer of fewer than 64 bits."""
    dtype = np.dtype(dtype)
    return dtype.kind == "b" or (dtype.kind in "iu" and dtype.itemsize < 8)


def _in_64_bits(op, args, dtypes):
    """``op``'s bool or narrow-integer results as numba's loop computes them: in 64-bit integers
    (``True + True`` is 2, an int8 sum does not wrap), cast to the declared dtypes only when that
    is exact; otherwise :class:`Inexact` (the evaluator then compiles)."""
    if any(a.dtype == np.uint64 for a in args):
        raise Inexact(f"{op} of uint64")
    wide = [a.astype(np.int64) if a.dtype.kind in "biu" else a for a in args]
    wide_dtypes = ["int64" if _narrow(d) else d for d in dtypes]
    out = []
    for r, d in zip(_apply(op, wide, wide_dtypes), dtypes, strict=True):
        r = np.asarray(r)
        narrow = r.astype(d)
        if not np.array_equal(narrow, r):
            raise Inexact(f"{op} does not fit {d}")
        out.append(narrow)
    return out


def _ufunc(op, nin: int, dtypes):
    """A numpy callable computing ``op`` on ``nin`` arrays in pytensor's semantics."""
    from pytensor.scalar import basic as ps
    from pytensor.tensor.utils import import_func_from_string

    (dtype, *_) = dtypes
    if isinstance(op, ps.Cast):
        return lambda x: x.astype(dtype)
    if isinstance(op, ps.Identity):
        return lambda x: x
    if isinstance(op, ps.Second):
        return lambda x, y: np.broadcast_to(y, np.broadcast_shapes(np.shape(x), np.shape(y)))
    if isinstance(op, (ps.Add, ps.Mul)) and nin > 2 and dtype != "bool":
        ufunc = np.add if isinstance(op, ps.Add) else np.multiply
        return lambda *xs: functools.reduce(lambda a, b: ufunc(a, b, dtype=dtype), xs)
    spec = getattr(op, "nfunc_spec", None)
    if spec and spec[1] == nin:
        fn = import_func_from_string(spec[0])
        if fn is not None:
            return functools.partial(_call, fn, dtypes)
    return functools.partial(_per_element, np.frompyfunc(op.impl, nin, op.nout), dtypes)


def _call(fn, dtypes, *args):
    """``fn(*args)``; a float result of integer inputs is computed in its own dtype (as pytensor's
    ``Elemwise.perform`` asks numpy with ``sig``: not in float16)."""
    if isinstance(fn, np.ufunc) and _float_of_integers(dtypes, args):
        char = np.dtype(dtypes[0]).char
        return fn(*args, sig=char * len(args) + "->" + char * len(dtypes))
    return fn(*args)


def _per_element(fn, dtypes, *args):
    """``fn`` (an ``impl`` made a ufunc of Python objects) on ``args``; integer inputs of a float
    result as floats of that dtype (a Python ``bool`` in numpy's math gives float16)."""
    if _float_of_integers(dtypes, args):
        args = [a.astype(dtypes[0]) if a.dtype.kind in "biu" else a for a in args]
    return fn(*args)


def _float_of_integers(dtypes, args) -> bool:
    return dtypes[0].startswith("float") and any(a.dtype.kind in "biu" for a in args)


class WithFallback:
    """``primary(*args)`` until it raises; then, and from then on, ``fallback()``'s function."""

    def __init__(self, primary, fallback):
        self.primary, self.fallback, self.fn = primary, fallback, None

    def __call__(self, *args):
        if self.fn is None:
            try:
                return self.primary(*args)
            except Exception:
                self.fn = self.fallback()
        return self.fn(*args)

    @property
    def evaluated_by(self) -> str:
        return "numpy" if self.fn is None else "numba"


def evaluator(inputs, outputs, compile_numba):
    """A function of ``inputs`` computing ``outputs``: a :class:`NumpyGraph` where every node is
    evaluated by numpy, else ``compile_numba()`` (a compiled pytensor function of the same)."""
    try:
        return WithFallback(NumpyGraph(inputs, outputs), compile_numba)
    except Unsupported:
        return compile_numba()
