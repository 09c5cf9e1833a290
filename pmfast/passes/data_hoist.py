"""Data-only subgraphs computed once per dataset instead of once per gradient.

A model's logp+gradient graph often holds subgraphs whose inputs are only shared variables
(``pm.Data``, pymc's own shared data) and constants: an HSGP basis (``pm.gp.HSGP``:
``sin(a·(X + b))·sin(c·(X + d))`` of the coordinates), ``log(x)``, ``x**2``, a design matrix.
Stock pytensor folds constants, not shared variables, so the sampler's kernel recomputes them at
every gradient (malaria_hsgp: its basis was 92% of the gradient).

The pass has two steps. :class:`MarkDataOnly` (optdb 47.4, before fusion) puts an identity
view :class:`HoistMark` on each costly data-only subgraph's output, so fusion does not fold
``log(x)`` into the likelihood's loop. :func:`hoist` then works on the *compiled* function
(after every rewrite: the graph the kernel runs), in :mod:`pmfast.nutpie_glue` and
:func:`pmfast.logp_dlogp_function`: a rewrite cannot add an input to the graph it rewrites. The
plugin (:func:`pmfast.enable`) runs neither (``Pass.plugin`` is False).

What it matches. A variable is *data* when it is a shared tensor input of the graph, a
constant, or an output of a node all of whose inputs are data, unless the node is stateful
(a ``RandomVariable``, any non-tensor input such as an RNG) or a view of, or destroyed by, an
in-place node (:func:`_blocked_nodes`). A data variable that is not itself an input and that a
non-data node or a graph output reads is a *boundary*: the output of a maximal data-only
subgraph. A boundary is hoisted when

- its subgraph does work on arrays: some node other than a view/shape op
  (:data:`VIEW_OPS`) reads or makes an array (shape arithmetic on scalars stays), and
- it is not a large array made out of small data: at most :data:`GROWTH` times the elements of
  the subgraph's inputs (shared values and constants), or else it costs more to compute than to
  read (a transcendental, a reduction, a product: :func:`_costly`) and has at most
  :data:`MAX_ELEMENTS` elements. An ``Alloc`` or an outer product of two vectors stays in the
  kernel; an HSGP basis (sines of a 65×2 matrix and 2×1600 constants, 104,000 values) is hoisted.

Before looking, a copy of the compiled graph has the data-only outputs of partly data-only 0-d
composites (a row count fusion merged with the point's arithmetic) split off
(:mod:`~pmfast.passes.scalar_split`), so what they shape is data too.

How it is safe. Each hoisted boundary becomes a new shared input (``__hoisted_<kind>_<k>``)
of a copy of the compiled graph (``FunctionMaker`` with ``no_fgraph_prep``, as
``Function.copy`` does: no rewrite runs again). Its value is computed by
:class:`Derivation`, a function of the shared inputs made of the same rewritten nodes (the same
operations; their results agree with the kernel's to rounding), evaluated by numpy and scipy
(:mod:`~pmfast.passes.data_eval`: code that runs once per dataset is not worth a numba compile),
or by numba without rewrites where numpy cannot; a graph input is never destroyed by it, and a boundary that any in-place node
destroys is never hoisted (the kernel would overwrite the stored value). The values are
recomputed whenever the data change: ``PmfastCompiledModel.with_data`` (which ``fit_many``
calls) derives them again from the new arrays. The kernel reads the hoisted arrays' pointers and
shapes from ``user_data`` like any shared variable's.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import numpy as np
from pytensor.compile.ops import TypeCastingOp
from pytensor.graph.features import ReplaceValidate
from pytensor.graph.rewriting.basic import GraphRewriter

from pmfast.passes import data_eval, scalar_split
from pmfast.passes.registry import record, register_pass

PASS_NAME = "data_hoist"

#: A hoisted array may have at most this many times the elements of its subgraph's inputs...
GROWTH = 4
#: ...or, when computing it costs more than reading it (:func:`_costly`), at most this many.
MAX_ELEMENTS = 1 << 22

HOISTED_PREFIX = "__hoisted_"


def _view_ops():
    from pytensor.compile.ops import DeepCopyOp, ViewOp
    from pytensor.raise_op import CheckAndRaise
    from pytensor.tensor.basic import MakeVector, ScalarFromTensor, TensorFromScalar
    from pytensor.tensor.elemwise import DimShuffle
    from pytensor.tensor.shape import Reshape, Shape, Shape_i, SpecifyShape
    from pytensor.tensor.subtensor import Subtensor

    return (
        DimShuffle, Reshape, Shape, Shape_i, SpecifyShape, Subtensor, CheckAndRaise, ViewOp, DeepCopyOp,
        MakeVector, ScalarFromTensor, TensorFromScalar,
    )


#: ops that only view, reshape or describe their input: no work worth hoisting on their own
VIEW_OPS: tuple = ()


def _cheap_scalar_ops():
    from pytensor.scalar import basic as ps

    return (
        ps.Add, ps.Sub, ps.Mul, ps.Neg, ps.Identity, ps.Cast, ps.Second, ps.Switch, ps.TrueDiv, ps.IntDiv,
        ps.LT, ps.GT, ps.LE, ps.GE, ps.EQ, ps.NEQ, ps.ScalarMaximum, ps.ScalarMinimum, ps.Abs, ps.Sqr,
        ps.AND, ps.OR, ps.XOR, ps.Invert,
    )


def _copy_ops():
    from pytensor.tensor.basic import Alloc, AllocEmpty, Join, Split
    from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedIncSubtensor1, AdvancedSubtensor, AdvancedSubtensor1, IncSubtensor

    return (Alloc, AllocEmpty, Join, Split, AdvancedSubtensor, AdvancedSubtensor1, IncSubtensor, AdvancedIncSubtensor, AdvancedIncSubtensor1)


def _scalar_ops(op):
    """The scalar ops an ``Elemwise``'s scalar op (a ``Composite`` included) applies."""
    inner = getattr(op, "fgraph", None)
    if inner is None:
        return [op]
    return [s for n in inner.apply_nodes for s in _scalar_ops(n.op)]


def _costly(node) -> bool:
    """Whether ``node`` costs more per output element than reading a stored value: anything but
    view/copy ops and elementwise basic arithmetic (a transcendental, a reduction, a product)."""
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    if isinstance(op, Elemwise):
        cheap = _cheap_scalar_ops()
        return any(not isinstance(s, cheap) for s in _scalar_ops(op.scalar_op))
    return not isinstance(op, VIEW_OPS + _copy_ops())


def _is_tensor(var) -> bool:
    from pytensor.tensor.type import TensorType

    return isinstance(var.type, TensorType)


def _stateful(node) -> bool:
    from pytensor.tensor.random.op import RandomVariable

    return isinstance(node.op, RandomVariable) or not all(_is_tensor(o) for o in node.outputs)


def _data_region(fgraph, leaves, blocked) -> set:
    """Variables computed from ``leaves`` and constants only, through nodes not ``blocked``."""
    from pytensor.graph.basic import Constant

    data = set(leaves)
    for node in fgraph.toposort():
        if node in blocked or not node.inputs or _stateful(node):
            continue
        if all(isinstance(i, Constant) or i in data for i in node.inputs):
            data.update(node.outputs)
    return data


def _view_root(var):
    """The variable whose memory ``var`` views (itself if it owns its memory)."""
    while var.owner is not None:
        views = getattr(var.owner.op, "view_map", {}).get(var.owner.outputs.index(var))
        if not views:
            return var
        var = var.owner.inputs[views[0]]
    return var


def _plain_elemwise(node) -> bool:
    from pytensor.tensor.elemwise import Elemwise

    return type(node.op) is Elemwise


def _out_of_place(fgraph, hoisted) -> list:
    """``(old, new)`` output pairs: the plain ``Elemwise`` nodes that would overwrite a hoisted value
    (through a view of it) in place, made to write a new array instead."""
    from pytensor.tensor.elemwise import Elemwise

    hoisted = set(hoisted)
    pairs = []
    for node in fgraph.apply_nodes:
        if not _plain_elemwise(node) or not node.op.destroy_map:
            continue
        drop = set()
        for o, i in node.op.inplace_pattern.items():
            var = node.inputs[i]
            while var not in hoisted and var.owner is not None:
                views = getattr(var.owner.op, "view_map", {}).get(var.owner.outputs.index(var))
                if not views:
                    break
                var = var.owner.inputs[views[0]]
            if var in hoisted:
                drop.add(o)
        if drop:
            pattern = {o: i for o, i in node.op.inplace_pattern.items() if o not in drop}
            new = Elemwise(node.op.scalar_op, pattern).make_node(*node.inputs)
            pairs += [(a, b) for a, b in zip(node.outputs, new.outputs, strict=True)]
    return pairs


def _blocked_nodes(fgraph, leaves) -> set:
    """Data nodes whose outputs an in-place node would overwrite after they are read as hoisted.

    A data variable that some in-place node destroys shares its memory with every variable
    viewing the same root. If the destroyer is a kernel node other than a plain ``Elemwise``
    (those are made out-of-place instead, :func:`_out_of_place`), or a data node overwriting
    memory that is read outside the data region (a hoisted value, read after the derivation
    overwrote it), all their owners are blocked: that memory is made by the kernel, as before. An
    in-place node inside the data region overwriting memory nothing outside reads is left alone
    (the derivation orders it as the kernel did).
    """
    from pytensor.graph.fg import Output

    blocked: set = set()
    while True:
        data = _data_region(fgraph, leaves, blocked)
        by_root: dict = {}
        for var in data:
            if var.owner is not None:
                by_root.setdefault(_view_root(var), []).append(var)
        grown = False
        for node in fgraph.apply_nodes:
            destroyer_is_data = node.outputs[0] in data
            for positions in getattr(node.op, "destroy_map", {}).values():
                for p in positions:
                    var = node.inputs[p]
                    if var not in data or var.owner is None:
                        continue
                    shared = by_root.get(_view_root(var), [var])
                    read_outside = any(
                        isinstance(c.op, Output) or c.outputs[0] not in data for v in shared for c, _ in fgraph.clients[v]
                    )
                    if destroyer_is_data and not read_outside:
                        continue
                    if not destroyer_is_data and _plain_elemwise(node):
                        continue  # made out-of-place where it would overwrite a hoisted value (hoist)
                    for v in shared:
                        if v.owner not in blocked:
                            blocked.add(v.owner)
                            grown = True
        if not grown:
            return blocked


def boundaries(fgraph, leaves) -> list:
    """The outputs of the maximal data-only subgraphs of ``fgraph`` over the shared inputs ``leaves``,
    in topological order (hoisting candidates before the size rule)."""
    from pytensor.graph.basic import Constant
    from pytensor.graph.fg import Output

    leaves = [v for v in leaves if _is_tensor(v)]
    blocked = _blocked_nodes(fgraph, leaves)
    data = _data_region(fgraph, leaves, blocked)
    out = []
    for node in fgraph.toposort():
        for var in node.outputs:
            if var not in data or isinstance(var, Constant) or not _is_tensor(var):
                continue
            readers = fgraph.clients[var]
            if any(isinstance(c.op, Output) for c, _ in readers):
                continue  # an output that is an input would alias the caller's result with stored data
            if any(o not in data for c, _ in readers for o in c.outputs):
                out.append(var)
    return out


def subgraph(var, leaves) -> list:
    """The nodes between ``leaves`` (and constants) and ``var``."""
    from pytensor.graph.traversal import ancestors, io_toposort

    leaves = set(leaves)
    return io_toposort([a for a in ancestors([var], blockers=leaves) if a.owner is None or a in leaves], [var])


def worth(var, leaves) -> bool:
    """Whether ``var``'s subgraph does work on arrays (not only views, shapes, scalar arithmetic)."""
    for node in subgraph(var, leaves):
        if isinstance(node.op, VIEW_OPS):
            continue
        if any(getattr(v.type, "ndim", 0) > 0 for v in (*node.inputs, *node.outputs)):
            return True
    return False


def fits(var, value: np.ndarray, leaves, leaf_sizes: dict) -> bool:
    """The size rule: ``var`` is hoisted if its ``value`` is at most :data:`GROWTH` × its inputs'
    elements, or its subgraph is :func:`_costly` and ``value`` has at most :data:`MAX_ELEMENTS`."""
    from pytensor.graph.basic import Constant

    nodes = subgraph(var, leaves)
    inputs = {a for n in nodes for a in n.inputs if a.owner is None}
    size = sum(leaf_sizes[a] if a in leaf_sizes else np.size(a.data) if isinstance(a, Constant) else 1 for a in inputs)
    if value.size <= GROWTH * max(size, 1):
        return True
    return value.size <= MAX_ELEMENTS and any(_costly(n) for n in nodes)


@dataclass(frozen=True)
class Derivation:
    """The hoisted values of one compiled function as a function of its shared data.

    ``fn(*sources)`` (the hoisted nodes, evaluated by :func:`data_eval.evaluator`) returns one
    array per name in ``names``.
    """

    names: tuple[str, ...]
    sources: tuple[str, ...]
    dtypes: tuple[str, ...]
    fn: object
    lock: object = field(default_factory=threading.Lock, compare=False, repr=False)
    """A pytensor function reuses its storage: one call at a time (fits may swap data in threads)."""

    def __call__(self, data) -> dict[str, np.ndarray]:
        """``{name: value}`` from ``data`` (the shared arrays by name), C-contiguous and read-only."""
        with self.lock:
            values = [np.array(v, copy=True) for v in self.fn(*[data[s] for s in self.sources])]
        out = {}
        for name, dtype, value in zip(self.names, self.dtypes, values, strict=True):
            array = np.asarray(value, dtype=dtype, order="C")
            array.flags.writeable = False
            out[name] = array
        return out


def _derivation_mode(fn):
    """``fn``'s linker without rewrites: the hoisted nodes are already rewritten for it."""
    import copy

    from pytensor.compile.mode import Mode, get_mode

    return Mode(copy.copy(get_mode(fn.maker.mode).linker), optimizer=None)


def _numba_derivation(fn, inputs, outputs):
    """``compile()``: a pytensor function of ``inputs`` computing ``outputs`` with ``fn``'s linker."""
    import pytensor

    def compile():
        return pytensor.function(inputs, outputs, mode=_derivation_mode(fn), accept_inplace=True, on_unused_input="ignore")

    return compile


def hoist(fn, kind: str = "logp"):
    """``(fn', derivation)``: compiled function ``fn`` with its hoistable data-only subgraphs as new
    shared inputs (see the module docstring), or ``(fn, None)`` when there is none or hoisting
    fails (``fn`` itself is never changed: the pass declines, the compile goes on)."""
    try:
        return _hoist(fn, kind)
    except Exception:
        logging.getLogger(__name__).debug("data_hoist: declined for %s", kind, exc_info=True)
        return fn, None


def _hoist(fn, kind):
    import pytensor
    from pytensor.compile.io import In
    from pytensor.graph.basic import clone_get_equiv
    from pytensor.graph.fg import FunctionGraph

    global VIEW_OPS
    if not VIEW_OPS:
        VIEW_OPS = _view_ops()
    maker = fn.maker
    fgraph = maker.fgraph
    memo = clone_get_equiv(fgraph.inputs, fgraph.outputs)
    new_fg = FunctionGraph([memo[i] for i in fgraph.inputs], [memo[o] for o in fgraph.outputs], clone=False)
    new_fg.update_mapping = fgraph.update_mapping
    shared = {memo[var]: spec.variable for var, spec in zip(fgraph.inputs, maker.inputs, strict=True) if spec.implicit}
    leaves = [memo[v] for v in fgraph.inputs if memo[v] in shared and _is_tensor(v) and spec_is_plain(maker, v)]
    splits = scalar_split.split_scalar_composites(new_fg, lambda: _data_region(new_fg, leaves, set()), PASS_NAME)
    candidates = []
    for var in boundaries(new_fg, leaves):  # a view of an earlier one is read as a view of its input
        if worth(var, leaves + candidates):
            candidates.append(var)
    if not candidates:
        return fn, None

    sources = sorted({a for v in candidates for n in subgraph(v, leaves) for a in n.inputs if a in shared}, key=new_fg.inputs.index)
    memo = {s: s.type() for s in sources}
    equiv = clone_get_equiv(sources, candidates, copy_inputs=False, memo=dict(memo))
    inputs, outputs = [memo[s] for s in sources], [equiv[v] for v in candidates]
    derive = data_eval.evaluator(inputs, outputs, _numba_derivation(fn, inputs, outputs))
    data = {s: np.asarray(shared[s].get_value(borrow=True)) for s in sources}
    values = derive(*[data[s] for s in sources])
    leaf_sizes = {s: data[s].size for s in sources}
    keep = [k for k, (v, value) in enumerate(zip(candidates, values, strict=True)) if fits(v, np.asarray(value), leaves, leaf_sizes)]
    if not keep:
        return fn, None
    split_nodes = {new.owner for _, new in splits}
    if splits and not any(n in split_nodes for k in keep for n in subgraph(candidates[k], leaves)):
        for old, new in splits:  # no hoisted value needs them: the kernel stays as it was
            new_fg.replace(new, old, reason=PASS_NAME, import_missing=True)

    names = tuple(f"{HOISTED_PREFIX}{kind}_{k}" for k in range(len(keep)))
    derivation = Derivation(names, tuple(shared[s].name for s in sources), tuple(candidates[k].dtype for k in keep), _Picked(derive, tuple(keep)))
    stored = derivation({shared[s].name: data[s] for s in sources})

    ins = [_copy(i) for i in maker.inputs]
    hoisted = [candidates[k] for k in keep]
    for old, new in _out_of_place(new_fg, hoisted):
        new_fg.replace(old, new, reason=PASS_NAME)
    for name, k in zip(names, keep, strict=True):
        var = candidates[k]
        sv = pytensor.shared(stored[name], name=name, shape=var.type.shape, borrow=True)
        new_fg.add_input(sv)
        new_fg.replace(var, sv, reason=PASS_NAME, import_missing=True)
        ins.append(In(variable=sv, value=sv.container, mutable=False, borrow=True, shared=True))
    from pytensor.compile.function.types import SymbolicOutput

    outs = [SymbolicOutput(o) for o in new_fg.outputs]
    for out_ori, out_new in zip(maker.outputs, outs, strict=False):
        out_new.borrow = out_ori.borrow
    new = type(maker)(
        inputs=ins, outputs=outs, fgraph=new_fg, mode=maker.mode, on_unused_input="ignore",
        function_builder=maker.function_builder, accept_inplace=True, no_fgraph_prep=True,
        output_keys=maker.output_keys, name=maker.name,
    ).create([spec.value for spec in ins])
    record(new_fg, PASS_NAME, len(keep))
    for pass_name, n in getattr(fgraph, "_pmfast_fired", {}).items():
        record(new_fg, pass_name, n)
    return new, derivation


def spec_is_plain(maker, var) -> bool:
    """Whether fgraph input ``var`` is a shared input no update writes (an RNG's state is updated)."""
    spec = maker.inputs[maker.fgraph.inputs.index(var)]
    return spec.update is None


def _copy(spec):
    import copy

    return copy.copy(spec)


@dataclass(frozen=True)
class _Picked:
    fn: object
    keep: tuple[int, ...]

    def __call__(self, *args):
        values = self.fn(*args)
        return [values[k] for k in self.keep]


class HoistMark(TypeCastingOp):
    """The identity (a view) on a data-only value :func:`hoist` will compute once: fusion does not
    see through it, so the value stays a node of its own instead of a term of a fused loop."""

    __props__ = ()

    def make_node(self, x):
        from pytensor.graph.basic import Apply

        return Apply(self, [x], [x.type()])

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]


class MarkDataOnly(GraphRewriter):
    """Marks each costly data-only subgraph's output (:func:`marks`) with a :class:`HoistMark`."""

    def add_requirements(self, fgraph):
        fgraph.attach_feature(ReplaceValidate())

    def apply(self, fgraph):
        from pytensor.compile.sharedvalue import SharedVariable

        updated = set((fgraph.update_mapping or {}).values())
        leaves = [v for k, v in enumerate(fgraph.inputs) if isinstance(v, SharedVariable) and _is_tensor(v) and k not in updated]
        if not leaves:
            return
        global VIEW_OPS
        if not VIEW_OPS:
            VIEW_OPS = _view_ops()
        pairs, marked = [], []
        for var in boundaries(fgraph, leaves):  # a view of a marked value is read as a view of it
            if var.owner is None or isinstance(var.owner.op, HoistMark) or not worth(var, leaves + marked):
                continue
            if any(_costly(n) for n in subgraph(var, leaves + marked)):
                pairs.append((var, HoistMark()(var)))
                marked.append(var)
        for old, new in pairs:
            try:
                fgraph.replace_validate(old, new, reason=PASS_NAME)
            except Exception:
                logging.getLogger(__name__).debug("data_hoist: mark declined for %s", old, exc_info=True)


hoist_pass = register_pass(PASS_NAME, "data-only subgraphs (HSGP bases, log/pow of pm.Data) computed once per dataset, not per gradient")
hoist_pass.plugin = False
# after specialize (2) and the stock rewrites that still look into data-only terms, before
# sum_of_products (47.5) and fusion (48, 49) would fold the terms into the kernel's loops; the
# hoisting itself runs on the compiled function (:func:`hoist`)
hoist_pass.register(MarkDataOnly(), 47.4, name="mark")
