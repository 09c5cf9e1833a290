"""Matching the reads of ``indexed_elemwise``: how integer-array indexing lays out its result
(:class:`_Layout`), gathers read through ``DimShuffle`` views and ND-index reshapes
(:func:`_gather_read`), and the proofs that lengths are equal (:class:`_Lengths`,
:func:`_indices_agree`) which the reads and the scatters (:mod:`pmfast.passes.indexed_matching`)
rely on.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
from pytensor.graph.basic import AtomicVariable, Constant, clone_get_equiv
from pytensor.graph.features import Feature
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.tensor.basic import MakeVector
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.rewriting.basic import topo_constant_folding
from pytensor.tensor.shape import Reshape, Shape_i, SpecifyShape
from pytensor.tensor.subtensor import (
    AdvancedIncSubtensor,
    AdvancedIncSubtensor1,
    AdvancedSubtensor,
    AdvancedSubtensor1,
    MakeSlice,
)
from pytensor.tensor.type import TensorType
from pytensor.tensor.type_other import SliceType

from pmfast.loops.op import IndexedElemwise
from pmfast.loops.spec import INC, SET, STORE, Gather

_NUMERIC = "biuf"

_INC_OPS = (AdvancedIncSubtensor1, AdvancedIncSubtensor)


def _is_int_array(v) -> bool:
    return isinstance(v.type, TensorType) and v.type.ndim >= 1 and np.dtype(v.type.dtype).kind in "iu"


def _is_full_slice(v) -> bool:
    if isinstance(v, Constant) and isinstance(v.type, SliceType):
        return v.data == slice(None, None, None)
    node = v.owner
    if node is not None and isinstance(node.op, MakeSlice):
        return all(isinstance(a, Constant) and a.data is None for a in node.inputs)
    return False


@dataclass(frozen=True)
class _Layout:
    """Numpy advanced indexing of an array by full slices and integer arrays.

    ``arrays``: ``(array axis, index variable)`` pairs; ``out``: per result
    axis, ``("s", array axis)`` (a sliced axis) or ``("b", k)`` (axis ``k``
    of the index arrays' broadcast shape, of ndim ``bdim``).
    """

    arrays: tuple
    out: tuple
    bdim: int

    def aligned(self, k: int):
        """``(index variable, its axis)`` pairs running along broadcast axis ``k``, not of static length 1."""
        pairs = []
        for _, idx in self.arrays:
            j = k - (self.bdim - idx.type.ndim)
            if j >= 0 and not idx.type.broadcastable[j]:
                pairs.append((idx, j))
        return pairs


def _layout(ndim: int, indices) -> _Layout | None:
    """How ``array[indices]`` (full slices and integer arrays only) lays out its result, or ``None``."""
    if len(indices) > ndim:
        return None
    kinds = []
    for v in indices:
        if _is_int_array(v):
            kinds.append(v)
        elif _is_full_slice(v):
            kinds.append(None)
        else:
            return None  # a partial slice, a boolean mask, newaxis, a scalar index
    kinds += [None] * (ndim - len(indices))
    adv = [k for k, v in enumerate(kinds) if v is not None]
    if not adv:
        return None
    bdim = max(kinds[k].type.ndim for k in adv)
    slices = [("s", k) for k, v in enumerate(kinds) if v is None]
    bcast = [("b", k) for k in range(bdim)]
    if adv == list(range(adv[0], adv[-1] + 1)):  # adjacent index arrays stay in place
        out = [t for t in slices if t[1] < adv[0]] + bcast + [t for t in slices if t[1] > adv[-1]]
    else:  # separated by a slice: numpy puts the broadcast axes first
        out = bcast + slices
    return _Layout(tuple((k, kinds[k]) for k in adv), tuple(out), bdim)


def _indexed_axes(layout: _Layout, ndim: int, entries, loose: bool = False):
    """Axis entries of ``array[...]``'s result -> entries of ``array``'s axes (Gathers hold index variables)."""
    bentry = {}
    axes = [None] * ndim
    for e, (kind, k) in zip(entries, layout.out, strict=True):
        if kind == "s":
            axes[k] = e
        elif isinstance(e, Gather):
            return None  # an index array read through another index: not supported
        else:
            bentry[k] = e
    for ax, idx in layout.arrays:
        off = layout.bdim - idx.type.ndim
        dims = []
        for j, static_one in enumerate(idx.type.broadcastable):
            e = bentry[off + j]
            if static_one:
                dims.append(None)
            elif e is None:
                return None
            else:
                dims.append(e)
        axes[ax] = Gather(idx, tuple(dims), loose)
    return axes


def _walk_views(var, entries):
    """Follow ``DimShuffle`` s down from ``var``: ``(base, entries per base axis)``, or ``None``.

    ``entries`` has one entry per axis of ``var``; a new (``'x'``) axis must have
    entry ``None``; a dropped (length-1) axis of the base gets ``None``.
    """
    entries = list(entries)
    while var.owner is not None and isinstance(var.owner.op, DimShuffle):
        base = var.owner.inputs[0]
        new = [None] * base.type.ndim
        for e, o in zip(entries, var.owner.op.new_order, strict=True):
            if o == "x":
                if e is not None:
                    return None
            else:
                new[o] = e
        var, entries = base, new
    return var, entries


def _flattened_index(v):
    """``I`` if ``v`` is ``I.reshape(-1)`` (``Reshape{1}(I, [-1])``) of an integer array ``I``."""
    node = v.owner
    if node is None or not isinstance(node.op, Reshape) or node.op.ndim != 1:
        return None
    idx, shp = node.inputs
    if not (isinstance(shp, Constant) and np.array_equal(np.asarray(shp.data), [-1]) and _is_int_array(idx)):
        return None
    return idx


def _is_shape_of(v, var, axis: int) -> bool:
    return v.owner is not None and isinstance(v.owner.op, Shape_i) and v.owner.op.i == axis and v.owner.inputs[0] is var


def _nd_gather(var):
    """``(source, I)`` if ``var`` is pytensor's form of ``source[I]`` for an ND index ``I``:
    ``AdvancedSubtensor1(source, I.reshape(-1)).reshape((*I.shape, *source.shape[1:]))``."""
    node = var.owner
    gathered, shp = node.inputs
    if gathered.owner is None or not isinstance(gathered.owner.op, AdvancedSubtensor1):
        return None
    src, flat = gathered.owner.inputs
    idx = _flattened_index(flat)
    if idx is None or var.type.ndim != idx.type.ndim + src.type.ndim - 1:
        return None
    want = [(idx, j) for j in range(idx.type.ndim)] + [(src, b) for b in range(1, src.type.ndim)]
    if shp.owner is None or not isinstance(shp.owner.op, MakeVector) or len(shp.owner.inputs) != len(want):
        return None
    if not all(_is_shape_of(e, v, ax) for e, (v, ax) in zip(shp.owner.inputs, want)):
        return None
    return src, idx


def _through_index(var, entries, fgraph):
    """``(array, its axis entries)`` if ``var`` is an integer-array indexing of ``array``, else ``None``."""
    node = var.owner
    if node is None:
        return None
    if isinstance(node.op, Reshape):
        nd = _nd_gather(var)
        if nd is None:
            return None
        src, idx = nd
        layout = _layout(src.type.ndim, [idx])  # the same layout as numpy's src[idx]
    elif isinstance(node.op, AdvancedSubtensor1 | AdvancedSubtensor):
        src, *indices = node.inputs
        layout = _layout(src.type.ndim, indices)
    else:
        return None
    if layout is None or len(layout.out) != var.type.ndim:
        return None
    axes = _indexed_axes(layout, src.type.ndim, entries, not _indices_agree(fgraph, layout))
    return None if axes is None else (src, axes)


def _gather_read(fgraph, var):
    """``(source, axes)`` if the Elemwise input ``var`` reads ``source`` through integer arrays.

    Forms: ``AdvancedSubtensor1``, ``AdvancedSubtensor`` with integer arrays and
    full slices, the reshaped gather of an ND index, each possibly between
    ``DimShuffle`` s (``x.T[idx].T``, ``x[idx][:, None]``). ``axes`` holds
    :class:`Gather` s of index *variables*, loose if their lengths are not
    provably equal (:func:`_indices_agree`).
    """
    walked = _walk_views(var, [None if b else d for d, b in enumerate(var.type.broadcastable)])
    if walked is None:
        return None
    res = _through_index(*walked, fgraph)
    if res is None:
        return None
    src, axes = _walk_views(*res) or (None, None)
    if src is None or np.dtype(src.type.dtype).kind not in _NUMERIC:
        return None
    return src, axes


def _producer_equal_axes(v, a: int):
    """``(variable, axis)`` pairs whose length ``v``'s producer guarantees equal to ``v.shape[a]``."""
    node = v.owner
    if node is None:
        return []
    op = node.op
    if isinstance(op, DimShuffle):
        o = op.new_order[a]
        return [] if o == "x" else [(node.inputs[0], o)]
    if isinstance(op, Elemwise):
        return [] if v.type.broadcastable[a] else [(i, a) for i in node.inputs if not i.type.broadcastable[a]]
    if isinstance(op, SpecifyShape):
        s = node.inputs[1 + a]
        pairs = [(node.inputs[0], a)]
        if s.owner is not None and isinstance(s.owner.op, Shape_i):
            pairs.append((s.owner.inputs[0], s.owner.op.i))
        return pairs
    if isinstance(op, AdvancedSubtensor1 | AdvancedSubtensor):
        layout = _layout(node.inputs[0].type.ndim, node.inputs[1:])
        if layout is None or len(layout.out) != v.type.ndim:
            return []
        kind, k = layout.out[a]
        if kind == "s":
            return [(node.inputs[0], k)]
        aligned = layout.aligned(k)  # several: any of them may have broadcast at runtime
        return aligned if len(aligned) == 1 else []
    if isinstance(op, _INC_OPS):
        return [(node.inputs[0], a)]
    if isinstance(op, IndexedElemwise):
        w = op.loop.writes[node.outputs.index(v)]
        if w.mode == STORE:
            return [(node.inputs[p], ax) for p, ax in op.loop.dim_operands(a)]
        if w.mode in (INC, SET):
            return [(node.inputs[w.buffer], a)]
    return []


#: Most (variable, axis) pairs visited by one length proof.
_PROOF_LIMIT = 256


def _equal_axes(seeds) -> set:
    """Every ``(variable, axis)`` whose length provably equals the seeds' (walking producers only:
    they ran, and checked their operands, before the node that consumes them)."""
    seen: set = set()
    todo = list(seeds)
    while todo and len(seen) < _PROOF_LIMIT:
        pair = todo.pop()
        if pair in seen:
            continue
        seen.add(pair)
        todo.extend(_producer_equal_axes(*pair))
    return seen


class _Lengths:
    """What is known about the lengths of the Elemwise ``node``'s dims, given that it runs.

    Elemwise refuses runtime broadcasting, so dim ``d``'s length is that of
    every input not of static length 1 there, and (through their producers)
    of whatever those inputs were checked against.
    """

    def __init__(self, fgraph, node):
        self.node = node
        self.keys = shape_keys(fgraph)
        #: graph-wide facts (:class:`~pmfast.passes.lengths.EqualLengths`), when the rewriter built them
        self.graph = getattr(fgraph, "_pmfast_equal_lengths", None)
        self._known: dict = {}
        self._known_keys: dict = {}

    def known(self, d: int) -> set:
        if d not in self._known:
            vs = (*self.node.inputs, *self.node.outputs)
            self._known[d] = _equal_axes([(v, d) for v in vs if not v.type.broadcastable[d]])
        return self._known[d]

    def known_keys(self, d: int) -> set:
        """The canonical shape keys (:class:`ShapeKeys`) of :meth:`known` ``(d)``: one lookup per candidate."""
        if d not in self._known_keys:
            keys = {self.keys.key(v, a) for v, a in self.known(d)} if self.keys is not None else set()
            keys.discard(None)
            self._known_keys[d] = keys
        return self._known_keys[d]

    def equal(self, d: int, var, axis: int) -> bool:
        """Is ``var.shape[axis]`` equal to dim ``d``'s length whenever the graph runs without error?"""
        out = self.node.outputs[0]
        if out.type.broadcastable[d] or var.type.broadcastable[axis]:
            return False
        if out.type.shape[d] is not None and out.type.shape[d] == var.type.shape[axis]:
            return True
        if (var, axis) in self.known(d):
            return True
        key = self.keys.key(var, axis) if self.keys is not None else None
        if key is not None and key in self.known_keys(d):
            return True
        return self.graph is not None and self.graph.same(out, d, var, axis)


class ShapeKeys(Feature):
    """``ShapeFeature.same_shape`` of single axes as a lookup: each ``(variable, axis)``'s shape entry
    is canonicalized once (as ``same_shape`` does, on a clone: ``canonicalize`` plus constant folding)
    into a hashable structural key, whose equality is ``same_shape``'s ``equal_computations`` (ops,
    output positions, constants by signature, roots by identity, the outputs' type classes).

    Memoised per shape entry (a new entry, after ShapeFeature updated a shape, is a new key); an
    entry whose graph holds a node of ``fgraph`` changed in place is forgotten (``on_change_input``).
    Attached for one rewrite pass (:func:`keyed_shapes`); without it each user keeps its own.
    """

    def __init__(self, fgraph):
        self.sf = getattr(fgraph, "shape_feature", None)
        self._memo: dict = {}
        self._deps: dict = {}

    def key(self, var, axis: int):
        """A hashable key, equal for two pairs exactly when ``same_shape`` holds; ``None``: never equal."""
        sf = self.sf
        if sf is None:
            return None
        try:
            shape = sf.shape_of.get(var)
            if shape is None:
                return None
            entry = shape[axis]
        except Exception:
            return None
        try:
            return self._memo[entry]
        except KeyError:
            pass
        try:
            k = _canonical_key(entry)
        except Exception:
            k = None
        self._memo[entry] = k
        for node in applys_between([], [entry]):
            self._deps.setdefault(node, []).append(entry)
        return k

    def same(self, v, a, w, b) -> bool:
        k = self.key(v, a)
        return k is not None and k == self.key(w, b)

    def on_change_input(self, fgraph, node, i, r, new_r, reason=None):
        for entry in self._deps.pop(node, ()):
            self._memo.pop(entry, None)


def _canonical_key(entry):
    """``entry`` canonicalized as ``ShapeFeature.same_shape`` does, as a structural key."""
    roots = [i for i in graph_inputs([entry]) if not isinstance(i, AtomicVariable)]
    equiv = clone_get_equiv(roots, [entry])
    fg = FunctionGraph([equiv[i] for i in roots], [equiv[entry]], clone=False)
    fg = rewrite_graph(fg, custom_rewrite=topo_constant_folding)
    back = {equiv[i]: i for i in roots}
    out = fg.outputs[0]
    t = out.type
    tclass = ("T", t.dtype, t.broadcastable) if isinstance(t, TensorType) else t
    return tclass, _structure(out, back, {})


def _structure(var, back, seen):
    node = var.owner
    if node is None:
        if isinstance(var, Constant):
            return ("c", type(var), var.signature())
        return ("v", back.get(var, var))
    if node not in seen:
        seen[node] = (node.op, len(node.outputs), tuple(_structure(i, back, seen) for i in node.inputs))
    return ("n", node.outputs.index(var), seen[node])


def shape_keys(fgraph) -> ShapeKeys | None:
    """The pass's :class:`ShapeKeys` of ``fgraph`` (:func:`keyed_shapes`), else a new one; ``None``
    without a ShapeFeature."""
    keys = getattr(fgraph, "_pmfast_shape_keys", None)
    if keys is None and getattr(fgraph, "shape_feature", None) is not None:
        keys = ShapeKeys(fgraph)
    return keys


@contextlib.contextmanager
def keyed_shapes(fgraph):
    """One :class:`ShapeKeys` shared by every match of a rewrite pass over ``fgraph``."""
    if getattr(fgraph, "shape_feature", None) is None or hasattr(fgraph, "_pmfast_shape_keys"):
        yield
        return
    keys = ShapeKeys(fgraph)
    fgraph.attach_feature(keys)
    fgraph._pmfast_shape_keys = keys
    try:
        yield
    finally:
        fgraph.__dict__.pop("_pmfast_shape_keys", None)
        fgraph.remove_feature(keys)


def _same_shape(sf, v, a, w, b) -> bool:
    """``sf.same_shape(v, w, a, b)``, False where it fails (the reference :class:`ShapeKeys` agrees with)."""
    if sf is None:
        return False
    try:
        return v in sf.shape_of and w in sf.shape_of and bool(sf.same_shape(v, w, a, b))
    except Exception:
        return False


def _indices_agree(fgraph, layout: _Layout) -> bool:
    """Are the index arrays' lengths along each broadcast axis provably equal?

    Numpy broadcasts an index array of runtime length 1 against the others.
    Proven equal, the loop reads them strictly (checked equal to the loop
    dim); otherwise loosely (:class:`~pmfast.loops.spec.Gather` ``loose``).
    """
    keys = shape_keys(fgraph)
    for k in range(layout.bdim):
        pairs = layout.aligned(k)
        for v, a in pairs[1:]:
            w, b = pairs[0]
            static = w.type.shape[b]
            if v is w or (static is not None and static == v.type.shape[a]):
                continue
            if (v, a) in _equal_axes([(w, b)]) or (w, b) in _equal_axes([(v, a)]) or (keys is not None and keys.same(w, b, v, a)):
                continue
            return False
    return True
