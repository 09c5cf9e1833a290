"""The indexed-loop description: data that says what one fused loop does.

An :class:`IndexedLoop` is a loop nest over an iteration space of ``ndim``
dims (``i0 < n0, i1 < n1, ...``) over the *inputs and outputs of an Apply
node* (``$k``: node input position, ``out<k>``: node output position)::

    for i0 < n0 = $1.shape[0]:
      for i1 < n1 = $0.shape[0]:
        a0 = $0[i1, $1[i0]]                  # Read(0, (1, Gather(1, (0,)))): x[:, idx], never materialised
        a1 = $2[$4[i0, 0], i1]               # Read(2, (Gather(4, (0, None)), 1)): index axis 1 has length 1
        a2 = $5[0]                           # Read(5, (None,)): a length-1 operand
        o0, o1 = scalar_op(a0, a1, a2)
        out0[i0, i1] = o0                    # Write(0): stored
        out1[i1, $1[i0]] += o1               # Write(1, "inc", 6, (1, Gather(1, (0,)))): buffer $6, copied

Every array access (read or scatter) gives, per axis of the accessed array,
an :data:`Axis`: a loop dim ``d`` (position ``i<d>``), ``None`` (the axis has
static length 1: position 0) or a :class:`Gather` (position
``index[...]``, the index array itself addressed by loop dims;
bounds-checked against the axis, negative positions wrap; ``loose``: numpy's
runtime broadcasting among several index arrays). Loop dims an
access does not mention are broadcast for it. Transposes, expand_dims and
drops of length-1 axes around a gather are just other ``axes``.

Reductions are writes too: ``Write(k, "sum")`` makes the node output a 0-d
accumulator updated in the same loop (``Sum`` of the whole output, never
materialised); ``all`` / ``any`` likewise. Further reductions are further
write modes.

The description carries no numba or graph state besides the scalar op, prints
and validates without compiling, and has a numpy reference evaluator
(:func:`evaluate`). Codegen lives in :mod:`pmfast.loops.codegen`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STORE = "store"
INC = "inc"
SET = "set"
SUM = "sum"
ALL = "all"
ANY = "any"
WRITE_MODES = (STORE, INC, SET, SUM, ALL, ANY)
#: write modes whose node output is a 0-d reduction of the scalar output
#: (``sum``; ``all`` / ``any`` of a boolean output: pymc's parameter checks)
REDUCTIONS = (SUM, ALL, ANY)
#: printed operator of each reduction
_RED_OP = {SUM: "+=", ALL: "&=", ANY: "|="}
#: deepest iteration space
MAX_LOOP_NDIM = 4


@dataclass(frozen=True)
class Gather:
    """A position read from an integer index array: ``$index[i<dims[0]>, i<dims[1]>, ...]``.

    ``dims[j]``: the loop dim along which index axis ``j`` runs, or ``None``
    (the index axis has static length 1: read at 0). ``loose``: numpy's
    broadcasting among several index arrays of one indexing — an index axis
    of *runtime* length 1 is read at 0 (printed ``~i0``); the loop then checks
    that the index arrays of the access broadcast to the loop dim's length.
    """

    index: int
    dims: tuple[int | None, ...] = (0,)
    loose: bool = False

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(None if d is None else int(d) for d in self.dims))
        object.__setattr__(self, "loose", bool(self.loose))

    def loop_dims(self) -> set[int]:
        return {d for d in self.dims if d is not None}

    def __str__(self) -> str:
        tilde = "~" if self.loose else ""
        return f"${self.index}[{', '.join(tilde + _pos(d) if d is not None else '0' for d in self.dims)}]"


#: one axis of an accessed array: a loop dim, ``None`` (static length 1, position 0) or a gather
Axis = int | None | Gather


def _pos(a: Axis) -> str:
    if a is None:
        return "0"
    if isinstance(a, Gather):
        return str(a)
    return f"i{a}"


def _norm_axes(axes) -> tuple[Axis, ...]:
    return tuple(a if a is None or isinstance(a, Gather) else int(a) for a in axes)


def _axes_dims(axes) -> set[int]:
    dims = set()
    for a in axes:
        if isinstance(a, Gather):
            dims |= a.loop_dims()
        elif a is not None:
            dims.add(a)
    return dims


def _access(array: str, axes) -> str:
    return f"{array}[{', '.join(_pos(a) for a in axes)}]" if axes else f"{array}[()]"


@dataclass(frozen=True)
class Read:
    """One scalar input of the loop body: ``$array[axes...]``, one :data:`Axis` per array axis."""

    array: int
    axes: tuple[Axis, ...] = (0,)

    def __post_init__(self):
        object.__setattr__(self, "axes", _norm_axes(self.axes))

    def gathers(self) -> tuple[tuple[int, Gather], ...]:
        """``(array axis, Gather)`` pairs."""
        return tuple((ax, a) for ax, a in enumerate(self.axes) if isinstance(a, Gather))

    def loop_dims(self) -> set[int]:
        return _axes_dims(self.axes)

    def __str__(self) -> str:
        return _access(f"${self.array}", self.axes)


@dataclass(frozen=True)
class Write:
    """Where one scalar output of the loop body goes; one ``Write`` per node output.

    ``mode``: ``"store"`` (a fresh output array of the loop's shape),
    ``"sum"`` (a 0-d accumulator), ``"all"`` / ``"any"`` (0-d boolean
    accumulators), ``"inc"`` (``buffer[axes...] += o``, repeated positions
    accumulate like ``np.add.at``) or ``"set"`` (``buffer[axes...] = o``,
    in loop order: last write wins). ``buffer``: node input position for
    ``inc``/``set``, ``axes`` one :data:`Axis` per buffer axis; the node
    output is the updated buffer (a copy, unless the buffer is in
    ``IndexedLoop.inplace``). ``also`` (``inc`` only): further
    ``(output, axes)`` terms accumulated into the same buffer — chained
    ``inc_subtensor(inc_subtensor(z[p1], a)[p2], b)``; the loop interleaves
    the terms, stock adds them one scatter after the other (same sum,
    rounding may differ).
    """

    output: int
    mode: str = STORE
    buffer: int | None = None
    axes: tuple[Axis, ...] = ()
    also: tuple[tuple[int, tuple[Axis, ...]], ...] = ()

    def __post_init__(self):
        if self.mode not in WRITE_MODES:
            raise ValueError(f"unknown write mode {self.mode!r}")
        scatter = self.mode in (INC, SET)
        if scatter != (self.buffer is not None) or (not scatter and self.axes):
            raise ValueError("store/sum writes take no buffer/axes; inc/set writes need a buffer")
        object.__setattr__(self, "axes", _norm_axes(self.axes))
        object.__setattr__(self, "also", tuple((int(o), _norm_axes(ax)) for o, ax in self.also))
        if self.also and self.mode != INC:
            raise ValueError("only inc writes accumulate further terms")
        for _, axes in self.terms():
            if scatter and len(axes) != len(self.axes):
                raise ValueError("every term addresses every buffer axis")

    def terms(self) -> tuple[tuple[int, tuple[Axis, ...]], ...]:
        """``(output, axes)`` pairs scattered into the buffer, in stock order."""
        if self.mode not in (INC, SET):
            return ()
        return ((self.output, self.axes), *self.also)

    def gathers(self) -> tuple[tuple[int, Gather], ...]:
        """``(buffer axis, Gather)`` pairs of all terms."""
        return tuple((ax, a) for _, axes in self.terms() for ax, a in enumerate(axes) if isinstance(a, Gather))


@dataclass(frozen=True)
class IndexedLoop:
    """One fused loop nest: reads (one per scalar input), a scalar op, writes (one per node output).

    ``ndim``: the iteration space's ndim (``None``: one more than the largest
    loop dim mentioned). The length ``n<d>`` of loop dim ``d`` is that of
    every operand axis addressed by ``d`` (:meth:`dim_operands`, checked at
    runtime: the stock Elemwise refuses runtime broadcasting too), or 1 if
    none is.
    """

    scalar_op: object
    reads: tuple[Read, ...]
    writes: tuple[Write, ...]
    inplace: tuple[int, ...] = field(default=())
    ndim: int | None = None
    #: ``(index position, lo, hi)``: the smallest and largest value of an index array known when
    #: compiling (a constant): its bounds are checked once per call, without reading it
    bounds: tuple[tuple[int, int, int], ...] = field(default=())
    #: groups of gathered ``(array position, axis)`` pairs proven equally long: one position per
    #: index load serves the whole group (checked at runtime, ``ValueError``)
    same_lengths: tuple[tuple[tuple[int, int], ...], ...] = field(default=())

    def __post_init__(self):
        object.__setattr__(self, "bounds", tuple((int(p), int(lo), int(hi)) for p, lo, hi in self.bounds))
        object.__setattr__(
            self, "same_lengths", tuple(tuple((int(p), int(a)) for p, a in g) for g in self.same_lengths)
        )
        nin = getattr(self.scalar_op, "nin", len(self.reads))
        nout = getattr(self.scalar_op, "nout", 1)
        if nin >= 0 and len(self.reads) != nin:  # nin == -1: variadic (Add, Mul, ...)
            raise ValueError(f"{nin} scalar inputs but {len(self.reads)} reads")
        if not self.reads:
            raise ValueError("a loop needs at least one read")
        mentioned = set().union(*(r.loop_dims() for r in self.reads))
        for w in self.writes:
            for _, axes in w.terms():
                mentioned |= _axes_dims(axes)
        if self.ndim is None:
            object.__setattr__(self, "ndim", max(mentioned, default=-1) + 1)
        if not 1 <= self.ndim <= MAX_LOOP_NDIM:
            raise ValueError(f"loop ndim {self.ndim} not in 1..{MAX_LOOP_NDIM}")
        if not mentioned <= set(range(self.ndim)):
            raise ValueError("an access mentions a loop dim beyond the loop's ndim")
        if not mentioned:
            raise ValueError("no operand gives a loop length (all operands broadcast)")
        for w in self.writes:
            for o in (w.output, *(o for o, _ in w.also)):
                if not 0 <= o < nout:
                    raise ValueError(f"write of scalar output {o} but the scalar op has {nout}")
        buffers = [w.buffer for w in self.writes if w.buffer is not None]
        if len(set(buffers)) != len(buffers):
            raise ValueError("two writes into the same buffer input")
        if not set(self.inplace) <= set(buffers):
            raise ValueError("inplace positions must be write buffers")
        if self.read_positions() & set(buffers):
            raise ValueError("a write buffer is also read by the loop")
        indices = {g.index for _, _, g in self.gathered()}
        if any(p not in indices or lo > hi for p, lo, hi in self.bounds):
            raise ValueError("bounds are given for index arrays only, with lo <= hi")
        targets = {(a, ax) for a, ax, _ in self.gathered()}
        grouped = [pair for g in self.same_lengths for pair in g]
        if not set(grouped) <= targets or len(grouped) != len(set(grouped)):
            raise ValueError("same_lengths groups hold distinct gathered (array, axis) pairs")

    # --- derived facts -------------------------------------------------
    def read_positions(self) -> set[int]:
        """Node input positions the loop reads (arrays and every index array)."""
        pos = {r.array for r in self.reads} | {g.index for r in self.reads for _, g in r.gathers()}
        return pos | {g.index for w in self.writes for _, g in w.gathers()}

    @property
    def n_inputs(self) -> int:
        pos = self.read_positions() | {w.buffer for w in self.writes if w.buffer is not None}
        return max(pos) + 1

    @property
    def n_outputs(self) -> int:
        return len(self.writes)

    def accesses(self):
        """Every ``(array position, axes)`` the loop addresses: reads, then scatter terms."""
        out = [(r.array, r.axes) for r in self.reads]
        out += [(w.buffer, axes) for w in self.writes for _, axes in w.terms()]
        return out

    def dim_operands(self, d: int) -> tuple[tuple[int, int], ...]:
        """``(input position, axis)`` pairs whose length must equal ``n<d>`` (reads first; loose indices aside)."""
        pairs = []
        for array, axes in self.accesses():
            for ax, a in enumerate(axes):
                if a == d and not isinstance(a, Gather):
                    pairs.append((array, ax))
                elif isinstance(a, Gather) and not a.loose:
                    pairs.extend((a.index, j) for j, e in enumerate(a.dims) if e == d)
        return tuple(dict.fromkeys(pairs))

    def loose_groups(self, d: int) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per access, the loose ``(index position, axis)`` pairs along ``d``: each group must
        broadcast (numpy's rule: lengths 1 or ``n<d>``) to exactly ``n<d>``."""
        groups = []
        for _, axes in self.accesses():
            loose = [a for a in axes if isinstance(a, Gather) and a.loose]
            group = [(a.index, j) for a in loose for j, e in enumerate(a.dims) if e == d]
            if group:
                groups.append(tuple(dict.fromkeys(group)))
        return tuple(dict.fromkeys(groups))

    def dim_source(self, d: int) -> tuple[int, int] | None:
        """The ``(input position, axis)`` giving ``n<d>``; ``None``: none (``n<d>`` is the loose
        indices' broadcast length, or 1)."""
        ops = self.dim_operands(d)
        return ops[0] if ops else None

    def gathered(self) -> tuple[tuple[int, int, Gather], ...]:
        """Distinct ``(array, axis, Gather)`` triples: every index lookup, reads and scatters."""
        out = [(array, ax, a) for array, axes in self.accesses() for ax, a in enumerate(axes) if isinstance(a, Gather)]
        return tuple(dict.fromkeys(out))

    # --- printing -----------------------------------------------------
    def short(self) -> str:
        ins = ", ".join(map(str, self.reads))
        outs = "; ".join(self._write_statements(lambda k, w: f"${w.buffer}"))
        ip = f"; inplace={list(self.inplace)}" if self.inplace else ""
        bd = "".join(f"; ${p} in [{lo}, {hi}]" for p, lo, hi in self.bounds)
        eq = "".join("; " + " == ".join(f"len(${p}, {a})" for p, a in g) for g in self.same_lengths)
        return f"{self.scalar_op}({ins}) -> {outs}{ip}{bd}{eq}"

    def _dim_text(self, d: int) -> str:
        src = self.dim_source(d)
        if src is not None:
            return f"${src[0]}.shape[{src[1]}]"
        loose = [f"${p}.shape[{ax}]" for g in self.loose_groups(d) for p, ax in g]
        return f"broadcast({', '.join(loose)})" if loose else "1"

    def __str__(self) -> str:
        lines = []
        shape = ", ".join(f"n{d}" for d in range(self.ndim))
        for k, w in enumerate(self.writes):
            if w.mode == STORE:
                lines.append(f"out{k} = empty({shape})")
            elif w.mode in REDUCTIONS:
                lines.append(f"out{k} = {({SUM: '0', ALL: 'True', ANY: 'False'})[w.mode]}")
            else:
                src = f"${w.buffer}" if w.buffer in self.inplace else f"copy(${w.buffer})"
                lines.append(f"out{k} = {src}")
        ind = ""
        for d in range(self.ndim):
            lines.append(f"{ind}for i{d} < n{d} = {self._dim_text(d)}:")
            ind += "  "
        for k, r in enumerate(self.reads):
            lines.append(f"{ind}a{k} = {r}")
        nout = getattr(self.scalar_op, "nout", 1)
        outs = ", ".join(f"o{k}" for k in range(nout))
        args = ", ".join(f"a{k}" for k in range(len(self.reads)))
        lines.append(f"{ind}{outs} = {self.scalar_op}({args})")
        lines.extend(ind + line for line in self._write_statements(lambda k, w: f"out{k}"))
        return "\n".join(lines)

    def _write_statements(self, scatter_name) -> list[str]:
        """One statement per write; ``scatter_name(k, w)`` names the buffer a scatter writes into."""
        here = ", ".join(f"i{d}" for d in range(self.ndim))
        out = []
        for k, w in enumerate(self.writes):
            if w.mode == STORE:
                out.append(f"out{k}[{here}] = o{w.output}")
            elif w.mode in REDUCTIONS:
                out.append(f"out{k} {_RED_OP[w.mode]} o{w.output}")
            else:
                op = "=" if w.mode == SET else "+="
                out.extend(f"{_access(scatter_name(k, w), axes)} {op} o{o}" for o, axes in w.terms())
        return out


def _normalize_index(index: np.ndarray, size: int) -> np.ndarray:
    idx = np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"index array of dtype {idx.dtype}")
    if idx.dtype == np.uint64:
        if np.any(idx >= np.uint64(size)):
            raise IndexError("index out of bounds")
        return idx.astype(np.int64)
    idx = idx.astype(np.int64)
    if np.any((idx < -size) | (idx >= size)):
        raise IndexError("index out of bounds")
    return np.where(idx < 0, idx + size, idx)


def loop_shape(loop: IndexedLoop, inputs) -> tuple[int, ...]:
    """The iteration space's shape for ``inputs``; ``ValueError`` if operands disagree."""
    shape = []
    for d in range(loop.ndim):
        ops = loop.dim_operands(d)
        groups = loop.loose_groups(d)
        loose = [inputs[p].shape[ax] for g in groups for p, ax in g]
        n = inputs[ops[0][0]].shape[ops[0][1]] if ops else max((m for m in loose if m != 1), default=1)
        for p, ax in ops:
            if inputs[p].shape[ax] != n:
                raise ValueError(f"loop operand ${p} has length {inputs[p].shape[ax]} on axis {ax}, expected {n}")
        for g in groups:
            lens = [inputs[p].shape[ax] for p, ax in g]
            if any(m not in (1, n) for m in lens) or (n != 1 and n not in lens):
                raise ValueError(f"index arrays of lengths {lens} do not broadcast to {n}")
        shape.append(n)
    return tuple(shape)


def _positions(axes, array_shape, inputs, grid):
    """Numpy index tuple addressing an array through ``axes`` over the loop ``grid``."""
    pos = []
    for ax, a in enumerate(axes):
        if a is None:
            pos.append(0)
        elif isinstance(a, Gather):
            idx = _normalize_index(inputs[a.index], array_shape[ax])
            at = [0 if e is None or (a.loose and idx.shape[j] == 1) else grid[e] for j, e in enumerate(a.dims)]
            pos.append(idx[tuple(at)])
        else:
            pos.append(grid[a])
    return tuple(pos)


def evaluate(loop: IndexedLoop, inputs, out_dtypes, scalar_impl=None, array_impl=None):
    """Numpy reference of ``loop`` on ``inputs`` (a list of arrays, by node input position).

    ``scalar_impl(*scalars)`` defaults to ``loop.scalar_op.impl``, called per element;
    ``array_impl(*operands)``, if given, computes the scalar op's outputs on the whole gathered
    operands at once instead. Returns the list of node outputs. Buffers are always copied (the
    reference never mutates its inputs, whatever ``loop.inplace`` says).
    """
    impl = scalar_impl or loop.scalar_op.impl
    inputs = [np.asarray(a) for a in inputs]
    shape = loop_shape(loop, inputs)
    nd = loop.ndim
    grid = [np.arange(n).reshape([-1 if e == d else 1 for e in range(nd)]) for d, n in enumerate(shape)]
    operands = []
    for r in loop.reads:
        arr = inputs[r.array]
        operands.append(np.broadcast_to(arr[_positions(r.axes, arr.shape, inputs, grid)], shape))
    nout = getattr(loop.scalar_op, "nout", 1)
    if array_impl is not None:
        results = [np.broadcast_to(r, shape) for r in array_impl(*operands)]
    else:
        results = [np.empty(shape, dtype=object) for _ in range(nout)]
        for ix in np.ndindex(*shape):
            res = impl(*(op[ix] for op in operands))
            if nout == 1:
                res = (res,)
            for k in range(nout):
                results[k][ix] = res[k]
    outs = []
    for w, dtype in zip(loop.writes, out_dtypes, strict=True):
        vals = results[w.output].astype(dtype)
        if w.mode == STORE:
            outs.append(vals)
        elif w.mode == SUM:
            outs.append(np.asarray(vals.sum(dtype=dtype), dtype=dtype))
        elif w.mode in (ALL, ANY):
            red = np.all if w.mode == ALL else np.any
            outs.append(np.asarray(red(results[w.output].astype(bool)), dtype=dtype))
        else:
            outs.append(_scatter(w, inputs, results, dtype, shape, grid))
    return outs


def _scatter(w: Write, inputs, results, dtype, shape, grid):
    buf = inputs[w.buffer].copy()
    for o, axes in w.terms():  # one scatter after the other, like stock
        pos = np.broadcast_arrays(*_positions(axes, buf.shape, inputs, grid), np.empty(shape))[:-1]
        vals = results[o].astype(dtype).astype(buf.dtype)
        if w.mode == INC:
            np.add.at(buf, tuple(pos), vals)
        else:  # sequential, in loop order: last write wins
            for ix in np.ndindex(*shape):
                buf[tuple(p[ix] for p in pos)] = vals[ix]
    return buf
