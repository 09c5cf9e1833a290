"""``affine_sums``: a fused loop's sums with loop-invariant factors scaled once, after the loop.

A Gaussian likelihood's terms and their gradient, summed over the rows of a fused loop
(:class:`~pmfast.loops.op.IndexedElemwise`), multiply every row by the same parameters::

    logp  += c - 0.5 * (r / sigma)**2 - log(sigma)      # r = y - a[g] - beta * x
    dsig  += (r / sigma) * r
    dbeta += (r / sigma) * x

Per row that is four multiplications by loop-invariant values and two additions of invariants,
on top of the two products of row values the sums need (``r * r``, ``r * x``). Summed, the
invariants factor out: ``n * (c - log(sigma)) - 0.5 / sigma**2 * Σ r*r``, ``Σ r*r / sigma``,
``Σ r*x / sigma``. The loop then accumulates only the row products (``Σ r*r`` serves two sums),
and a 0-d Composite after the loop applies the factors (radon_intercept: the loop's
multiply pipe was its bound, 3.5 cycles a row; a hand-written loop does exactly this).

The rewrite (on ``IndexedElemwise`` nodes, after they are built at 49.2/49.22, before
``vector_math`` at 49.3): each ``sum`` write's scalar output is split at its top-level
``add``/``sub``/``neg`` into terms; each term is a *scale form* ``coef * Π atomᵏ``, read through
``mul``, ``neg``, ``sqr`` and ``true_div`` by an invariant. ``coef`` is built only from
loop-invariant values (constants, and reads of operands of static length 1 on every axis);
an *atom* is any other value (a row input, or an ``add``, ``exp``... of row values: never
expanded). The loop sums each distinct product of atoms (a *monomial*) once; the sum of a
term without atoms is the loop length ``n``. Other writes (stores, scatters, ``all``/``any``)
and their outputs are unchanged.

When it applies: every write dtype float64, the loop length known (a static length or a
``Shape_i`` of the operand giving it), some term has a factor to remove, and the loop needs no
more accumulators than before (monomials of degree ≤ 2, at most as many as the sums replaced).

Why it is safe: ``Σ_i (k * m_i) = k * Σ_i m_i`` and ``Σ_i k = n * k`` in exact arithmetic;
in floating point the results differ by rounding (relative ~n·ε, far below the 1e-10 parity
of the zoo), in the same direction as the fixed-order vector sums of the entry. Non-finite
values: a non-finite factor or monomial gives a non-finite sum either way; an empty loop
(``n == 0``, possible for lengths not known when compiling) gives 0, as the stock sum does,
through a guard on ``n`` (without it ``inf * 0`` would be ``nan``).
"""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import graph_inputs
from pytensor.scalar import basic as ps
from pytensor.tensor.basic import cast, constant
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.shape import Shape_i

from pmfast.loops.op import IndexedElemwise
from pmfast.loops.spec import SUM, IndexedLoop, Write
from pmfast.passes.registry import register_pass
from pmfast.passes.wide_loop import _invariant_source
from pmfast.passes.rewriting import NodeRewritePass

_log = logging.getLogger(__name__)

PASS_NAME = "affine_sums"

#: Largest product of atoms the loop accumulates (``r * r``, ``r * x``): one multiplication a row.
MAX_DEGREE = 2


class _Decline(Exception):
    pass


def _invariant_inputs(loop: IndexedLoop, node, inner_inputs) -> set:
    """The Composite's inner inputs that read one value for the whole loop (static length 1 on every axis)."""
    out = set()
    for r, v in zip(loop.reads, inner_inputs, strict=True):
        arr = node.inputs[r.array]
        if all(a is None for a in r.axes) and all(s == 1 for s in arr.type.shape):
            out.add(v)
    return out


class _Forms:
    """Scale forms ``(coef factors, atoms)`` of a Composite's inner values; ``coef factors`` a list of
    invariant scalar variables (multiplied), ``atoms`` a Counter of row values and their powers."""

    def __init__(self, invariant_inputs):
        self.inv_inputs = invariant_inputs
        self._inv: dict = {}

    def invariant(self, v) -> bool:
        if v in self._inv:
            return self._inv[v]
        if isinstance(v, Constant):
            res = True
        elif v.owner is None:
            res = v in self.inv_inputs
        else:
            res = all(self.invariant(i) for i in v.owner.inputs)
        self._inv[v] = res
        return res

    def scale(self, v):
        if self.invariant(v):
            return [v], Counter()
        node = v.owner
        op = getattr(node, "op", None)
        if isinstance(op, ps.Mul):
            coef, atoms = [], Counter()
            for i in node.inputs:
                c, a = self.scale(i)
                coef += c
                atoms += a
            return coef, atoms
        if isinstance(op, ps.Neg):
            c, a = self.scale(node.inputs[0])
            return [ps.constant(np.float64(-1.0)), *c], a
        if isinstance(op, ps.Sqr):
            c, a = self.scale(node.inputs[0])
            return c + c, a + a
        if isinstance(op, ps.TrueDiv) and self.invariant(node.inputs[1]):
            c, a = self.scale(node.inputs[0])
            return [*c, ps.true_div(ps.constant(np.float64(1.0)), node.inputs[1])], a
        return [], Counter({v: 1})

    def terms(self, v, sign: float = 1.0, whole=frozenset()):
        """``v`` as a list of ``(sign, coef factors, atoms)`` terms (split at add/sub/neg, except
        the values in ``whole``)."""
        node = v.owner
        op = getattr(node, "op", None)
        if not self.invariant(v) and v not in whole:
            if isinstance(op, ps.Add):
                return [t for i in node.inputs for t in self.terms(i, sign, whole)]
            if isinstance(op, ps.Sub):
                return self.terms(node.inputs[0], sign, whole) + self.terms(node.inputs[1], -sign, whole)
            if isinstance(op, ps.Neg):
                return self.terms(node.inputs[0], -sign, whole)
        c, a = self.scale(v)
        return [(sign, c, a)]


def _is_one(c) -> bool:
    return isinstance(c, Constant) and np.all(np.asarray(c.data) == 1)


def _monomial(atoms: Counter):
    """The scalar expression of a product of atoms (``sqr`` for a square)."""
    factors = []
    for v, k in sorted(atoms.items(), key=lambda kv: str(kv[0])):
        factors += [v] * k
    if len(factors) == 2 and factors[0] is factors[1]:
        return ps.sqr(factors[0])
    return factors[0] if len(factors) == 1 else ps.mul(*factors)


def _zero_d(v):
    """A 0-d view of a static length-1 operand: the 0-d value it expands, or a DimShuffle dropping its axes."""
    src = _invariant_source(v)
    return v.dimshuffle(()) if src is None else src


def _loop_length(loop: IndexedLoop, node):
    """The loop's element count as a float64 0-d variable (a constant when static), or raise."""
    n, parts = 1, []
    for d in range(loop.ndim):
        src = loop.dim_source(d)
        if src is None:
            raise _Decline("a loop dim without an operand giving its length")
        arr, ax = src
        s = node.inputs[arr].type.shape[ax]
        if s is not None:
            n *= int(s)
        else:
            parts.append(Shape_i(ax)(node.inputs[arr]))
    if not parts:
        return constant(np.float64(n)), n > 0
    total = parts[0]
    for p in parts[1:]:
        total = total * p
    if n != 1:
        total = total * n
    return cast(total, "float64"), False


def factor_sums(fgraph, node):
    """``IndexedElemwise`` whose ``sum`` writes have loop-invariant factors: the loop sums the row
    monomials and a 0-d Composite after it applies the factors (see the module docstring).

    Returns the replacements of the node's outputs, or ``None`` (declined).
    """
    op = node.op
    loop = op.loop
    comp = loop.scalar_op
    if not isinstance(comp, ps.Composite):
        return None
    sums = [k for k, w in enumerate(loop.writes) if w.mode == SUM]
    if not sums or any(o.type.dtype != "float64" for o in node.outputs):
        return None
    if any(o.type.dtype != "float64" for o in comp.fgraph.outputs):
        return None
    inner_in, inner_out = comp.fgraph.inputs, comp.fgraph.outputs
    forms = _Forms(_invariant_inputs(loop, node, inner_in))
    if not forms.inv_inputs:
        return None
    # a sum whose value is itself a factor of another sum's terms (Σ r next to Σ r²) stays whole:
    # split, its pieces would be monomials of their own
    whole: frozenset = frozenset()
    for _ in range(4):
        split = {k: forms.terms(inner_out[loop.writes[k].output], 1.0, whole) for k in sums}
        atoms = frozenset(a for terms in split.values() for _, _, t in terms for a in t)
        if atoms <= whole:
            break
        whole |= atoms
    monomials: dict = {}  # frozenset of atom powers -> position among the new sums
    gain = False
    for terms in split.values():
        for _, coef, atoms in terms:
            if sum(atoms.values()) > MAX_DEGREE:
                return None
            if not atoms or any(not _is_one(c) for c in coef):
                gain = True
            if atoms:
                monomials.setdefault(frozenset(atoms.items()), len(monomials))
    if not gain or len(monomials) > len(sums):
        return None
    try:
        n_var, nonempty = _loop_length(loop, node)
    except _Decline:
        return None

    # the loop: the outputs other writes use, then one sum per monomial
    keep = [k for k, w in enumerate(loop.writes) if w.mode != SUM]
    kept_outputs = list(dict.fromkeys(o for k in keep for o in (loop.writes[k].output, *(o for o, _ in loop.writes[k].also))))
    remap = {o: i for i, o in enumerate(kept_outputs)}
    mono_list = sorted(monomials, key=monomials.get)
    row_outputs = [inner_out[o] for o in kept_outputs] + [_monomial(Counter(dict(m))) for m in mono_list]
    row_outputs = [ps.identity(v) if v in inner_in else v for v in row_outputs]
    new_comp = ps.Composite(list(inner_in), row_outputs)
    writes = []
    for k in keep:
        w = loop.writes[k]
        also = tuple((remap[o], ax) for o, ax in w.also)
        writes.append(Write(remap[w.output], w.mode, w.buffer, w.axes, also))
    first_sum = len(writes)
    writes += [Write(len(kept_outputs) + j, SUM) for j in range(len(mono_list))]
    new_loop = IndexedLoop(new_comp, loop.reads, tuple(writes), loop.inplace, loop.ndim, loop.bounds, loop.same_lengths)
    out_types = [op.out_types[k] for k in keep] + [node.outputs[sums[0]].type] * len(mono_list)
    new_outs = IndexedElemwise(new_loop, out_types).make_node(*node.inputs).outputs

    # after the loop: Σ sign * Π coef * S_m (S of no atoms: n), as one 0-d Composite
    used = sorted(
        {v for terms in split.values() for _, coef, _ in terms for c in coef for v in _graph_inputs(c)},
        key=inner_in.index,
    )
    s_in = [ps.float64(f"s{j}") for j in range(len(mono_list))]
    n_in = ps.float64("n")
    inv_in = [ps.get_scalar_type(v.type.dtype)(f"i{j}") for j, v in enumerate(used)]
    repl = dict(zip(used, inv_in, strict=True))
    post_outputs = []
    for k in sums:
        acc = None
        for sign, coef, atoms in split[k]:
            factors = [c for c in coef if not _is_one(c)]
            factors = [clone_replace(c, replace=repl) if not isinstance(c, Constant) else c for c in factors]
            s = s_in[monomials[frozenset(atoms.items())]] if atoms else n_in
            term = ps.mul(*factors, s) if factors else s
            if sign < 0:
                term = ps.neg(term)
            acc = term if acc is None else ps.add(acc, term)
        if not nonempty:
            acc = ps.switch(ps.gt(n_in, ps.constant(np.float64(0.0))), acc, ps.constant(np.float64(0.0)))
        post_outputs.append(ps.identity(acc) if acc.owner is None else acc)
    post = Elemwise(ps.Composite([*inv_in, *s_in, n_in], post_outputs))
    loop_in = {v: node.inputs[r.array] for r, v in zip(loop.reads, inner_in, strict=True)}
    args = [_zero_d(loop_in[v]) for v in used] + [new_outs[first_sum + j] for j in range(len(mono_list))] + [n_var]
    results = post(*args, return_list=True)
    replacements = [None] * len(loop.writes)
    for i, k in enumerate(keep):
        replacements[k] = new_outs[i]
    for i, k in enumerate(sums):
        replacements[k] = results[i]
    return replacements


def _graph_inputs(v):
    """The root variables (non-constants) of a scalar expression."""
    return [i for i in graph_inputs([v]) if not isinstance(i, Constant)]


affine_sums_pass = register_pass(
    PASS_NAME, "a fused loop's sums with loop-invariant factors: the loop sums row products, the factors applied once"
)

# Position 49.24: after the loops are built (49.2, 49.22), before ``vector_math`` (49.3) converts
# their bodies and before the destroy handler (49.5).
affine_sums_pass.register(
    NodeRewritePass(factor_sums, (IndexedElemwise,), PASS_NAME, max_rounds=1, adds_nodes=True), 49.24, name="factor"
)
