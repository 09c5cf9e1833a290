"""pytensor scalar ops whose numba implementation is a pmfast.vmath kernel.

Each op is a subclass of the stock scalar op it replaces (``VmathExp(Exp)``, ...):
same ``impl``, gradient, C code and output types, so every backend but numba
and every rewrite that tests ``isinstance`` sees the stock op; only the numba
dispatch differs (registered here for each subclass). The ops compare unequal
to the stock ones (``ScalarOp.__eq__`` compares types), so a libm node and a
vmath node never merge, and their numba cache key includes the kernel name and
:data:`pmfast.vmath.VERSION` (a change to any vmath source changes every key).

:func:`vmath_scalar_op` rewrites a scalar op (a Composite recursively) to use
them; the ``vector_math`` pass applies it to the graph.
"""

from __future__ import annotations

from hashlib import sha256

import pytensor.scalar.basic as ps
import pytensor.scalar.math as psm
from pytensor.graph.fg import Output
from pytensor.scalar.basic import Composite

from pmfast.vmath import KERNELS, VERSION


class VmathOp:
    """Mixin of the scalar ops computed by the pmfast.vmath kernel ``kernel``."""

    kernel: str


def _subclass(stock: type, kernel: str) -> type:
    name = f"Vmath{stock.__name__}"
    return type(name, (VmathOp, stock), {"kernel": kernel, "__module__": __name__, "__qualname__": name})


VmathExp = _subclass(ps.Exp, "exp")
VmathExpm1 = _subclass(ps.Expm1, "expm1")
VmathLog = _subclass(ps.Log, "log")
VmathLog1p = _subclass(ps.Log1p, "log1p")
VmathSoftplus = _subclass(psm.Softplus, "softplus")
VmathSigmoid = _subclass(psm.Sigmoid, "sigmoid")
VmathErf = _subclass(psm.Erf, "erf")
VmathErfc = _subclass(psm.Erfc, "erfc")
VmathErfcx = _subclass(psm.Erfcx, "erfcx")
VmathGammaLn = _subclass(psm.GammaLn, "gammaln")
VmathPsi = _subclass(psm.Psi, "digamma")
VmathLog1mexp = _subclass(psm.Log1mexp, "log1mexp")
VmathSin = _subclass(ps.Sin, "sin")
VmathCos = _subclass(ps.Cos, "cos")

#: stock scalar op type -> its vmath subclass
SUBSTITUTES: dict[type, type] = {
    ps.Exp: VmathExp,
    ps.Expm1: VmathExpm1,
    ps.Log: VmathLog,
    ps.Log1p: VmathLog1p,
    psm.Softplus: VmathSoftplus,
    psm.Sigmoid: VmathSigmoid,
    psm.Erf: VmathErf,
    psm.Erfc: VmathErfc,
    psm.Erfcx: VmathErfcx,
    psm.GammaLn: VmathGammaLn,
    psm.Psi: VmathPsi,
    psm.Log1mexp: VmathLog1mexp,
    ps.Sin: VmathSin,
    ps.Cos: VmathCos,
}
#: vmath subclasses whose kernel also takes integer inputs (converted to float64 first: ``gammaln(y + 1)`` of counts)
INTEGER_INPUTS = (VmathGammaLn, VmathPsi)


#: kernels that give NaN where libm does not (sin, cos beyond 2^30): converted only with ``nan_marked``
#: (the loop recomputes a result holding a NaN with libm: :class:`~pmfast.vmath.elemwise.VmathElemwise`),
#: and only where a NaN from them shows in every output whose value they decide (:func:`nan_shows`)
NAN_MARKED = frozenset({"sin", "cos"})


def _nan_safe_ops() -> tuple[type, ...]:
    """Scalar ops whose output is NaN when an input it depends on is NaN (IEEE arithmetic, the kernels)."""
    names = ("Add", "Sub", "Mul", "TrueDiv", "Neg", "Abs", "Sqr", "Sqrt", "Reciprocal", "Identity", "Floor",
             "Ceil", "Trunc", "Exp", "Expm1", "Log", "Log1p", "Sin", "Cos")
    return tuple(getattr(ps, n) for n in names if hasattr(ps, n)) + (psm.Softplus, psm.Sigmoid, psm.Erf, psm.Erfc,
                                                                      psm.Erfcx, psm.Log1mexp)


def nan_shows(fgraph, var) -> bool:
    """Whether a NaN in ``var`` makes NaN every output of ``fgraph`` whose value depends on ``var``.

    Every path from ``var`` to an output must go through :func:`_nan_safe_ops`, a float ``Cast``,
    either input of ``Second`` (its output is its second input) or the branches of ``Switch`` (the
    branch not taken does not decide the value). A comparison, ``IsNan``, ``Maximum``, ``Pow``, a
    nested Composite... decline: a NaN could change the value without showing.
    """
    safe = _nan_safe_ops()
    stack, seen = [var], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        for client, i in fgraph.clients[v]:
            op = client.op
            if isinstance(op, ps.Switch) and i == 0:
                return False
            if isinstance(op, ps.Cast) and not str(op.o_type.dtype).startswith("float"):
                return False
            if isinstance(op, Output):
                continue
            if not isinstance(op, (*safe, ps.Second, ps.Switch, ps.Cast)):
                return False
            stack.extend(client.outputs)
    return True


def _float64(dtypes) -> bool:
    return all(str(d) == "float64" for d in dtypes)


def _numeric(dtypes) -> bool:
    return all(str(d) == "float64" or str(d).startswith(("int", "uint")) for d in dtypes)


def vmath_scalar_op(op, in_dtypes, out_dtypes, nan_marked: bool = False, _fgraph=None, _node=None):
    """``op`` computed with pmfast.vmath where it can be, or ``None`` if nothing changes.

    A stock op of :data:`SUBSTITUTES` with float64 inputs and outputs becomes its
    subclass; a Composite is rebuilt with its inner nodes converted (nested
    Composites too). Other dtypes keep libm (the kernels are float64). The kernels of
    :data:`NAN_MARKED` only with ``nan_marked`` (the caller's loop recomputes NaN results with
    libm) and, inside a Composite, where :func:`nan_shows`.
    """
    if type(op) in SUBSTITUTES:
        if SUBSTITUTES[type(op)].kernel in NAN_MARKED and not (
            nan_marked and (_fgraph is None or nan_shows(_fgraph, _node.outputs[0]))
        ):
            return None
        inputs_ok = _numeric(in_dtypes) if issubclass(SUBSTITUTES[type(op)], INTEGER_INPUTS) else _float64(in_dtypes)
        if not (inputs_ok and _float64(out_dtypes)):
            return None
        return SUBSTITUTES[type(op)](op.output_types_preference, name=f"vmath_{op.name or SUBSTITUTES[type(op)].kernel}")
    if not isinstance(op, Composite):
        return None
    inner = op.fgraph
    mapping = {v: v.type() for v in inner.inputs}
    changed = False
    for node in inner.toposort():
        new = vmath_scalar_op(node.op, [i.type.dtype for i in node.inputs], [o.type.dtype for o in node.outputs],
                              nan_marked and not isinstance(node.op, Composite), inner, node)
        changed |= new is not None
        new_node = (new or node.op).make_node(*[mapping.get(i, i) for i in node.inputs])
        mapping.update(zip(node.outputs, new_node.outputs, strict=True))
    if not changed:
        return None
    return Composite([mapping[v] for v in inner.inputs], [mapping[v] for v in inner.outputs])


#: vmath subclass -> the stock scalar op type it replaces
STOCK: dict[type, type] = {v: k for k, v in SUBSTITUTES.items()}


def libm_scalar_op(op):
    """``op`` with every vmath op back to its stock (libm) op: the inverse of :func:`vmath_scalar_op`."""
    if isinstance(op, VmathOp):
        stock = STOCK[type(op)]
        return stock(op.output_types_preference, name=stock.__name__.lower())
    if not (isinstance(op, Composite) and contains_vmath(op)):
        return op
    inner = op.fgraph
    mapping = {v: v.type() for v in inner.inputs}
    for node in inner.toposort():
        new_node = libm_scalar_op(node.op).make_node(*[mapping.get(i, i) for i in node.inputs])
        mapping.update(zip(node.outputs, new_node.outputs, strict=True))
    return Composite([mapping[v] for v in inner.inputs], [mapping[v] for v in inner.outputs])


def kernels(op) -> set[str]:
    """Names of the vmath kernels the scalar op (a Composite's inner graph, recursively) calls."""
    if isinstance(op, VmathOp):
        return {op.kernel}
    if isinstance(op, Composite):
        return set().union(*(kernels(n.op) for n in op.fgraph.apply_nodes))
    return set()


def contains_vmath(op) -> bool:
    """Whether the scalar op is (or a Composite contains) a vmath op."""
    if isinstance(op, VmathOp):
        return True
    return isinstance(op, Composite) and any(contains_vmath(n.op) for n in op.fgraph.apply_nodes)


def cache_key(op) -> str:
    return sha256(str(("pmfast.vmath", op.kernel, VERSION)).encode()).hexdigest()


def _register_numba() -> None:
    from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

    def numba_funcify_vmath(op, node=None, **kwargs):
        return KERNELS[op.kernel], cache_key(op)

    for cls in SUBSTITUTES.values():
        register_funcify_and_cache_key(cls)(numba_funcify_vmath)


_register_numba()
