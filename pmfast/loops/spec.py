"""The indexed-loop description: data that says what one fused loop does.

An :class:`IndexedLoop` describes a single 1-d loop ``for i in range(n)`` over
the *inputs and outputs of an Apply node* (positions ``$k`` below are node input
positions, ``out<k>`` node output positions)::

    loop i < n:                                   # n = length of the loop's driver
      a0 = $0[$2[i]]                              # Read(array=0, index=2): a gather, never materialised
      a1 = $1[i]                                  # Read(array=1): a direct (elementwise) read
      a2 = $4[0]                                  # Read(array=4, broadcast=True): length-1 operand
      o0, o1 = scalar_op(a0, a1, a2)
      out0[i] = o0                                # Write(0, "store")
      out1 = $3 (copied unless inplace); out1[$2[i]] += o1   # Write(1, "inc", buffer=3, index=2)

It carries no numba or pytensor graph state besides the scalar op, can be
printed and unit-tested without compiling, and has a numpy reference
evaluator (:func:`evaluate`). Codegen lives in :mod:`pmfast.loops.codegen`.

Reductions are writes too: ``Write(k, "sum")`` makes the node output a 0-d
accumulator ``out += o_k`` updated in the same loop (``Sum`` of the whole
output, never materialised). Further reductions (max, prod, logsumexp...) are
further write modes; ``Write`` keys node outputs by position, so nothing
else has to change.
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


def _pos(d: int, bcast: bool) -> str:
    return "0" if bcast else ("i" if d == 0 else f"k{d}")


@dataclass(frozen=True)
class Read:
    """How one scalar input of the loop body is obtained.

    ``array``: node input position of the array read (its ndim is the loop's).
    ``index``: node input position of an integer index vector — a gather along
    axis 0, ``array[index[i], k1, ...]``, bounds-checked, negative indices
    wrap — or ``None`` for a direct read ``array[i, k1, ...]``.
    ``broadcast``: per loop dimension, the operand has static length 1 there
    and is read at position 0 (for a gather, dim 0 refers to the *index*
    vector). A plain bool means a 1-d loop.
    """

    array: int
    index: int | None = None
    broadcast: tuple[bool, ...] = (False,)

    def __post_init__(self):
        if isinstance(self.broadcast, bool | np.bool_):
            object.__setattr__(self, "broadcast", (bool(self.broadcast),))
        else:
            object.__setattr__(self, "broadcast", tuple(bool(b) for b in self.broadcast))

    @property
    def ndim(self) -> int:
        return len(self.broadcast)

    def __str__(self) -> str:
        pos = [_pos(d, b) for d, b in enumerate(self.broadcast)]
        if self.index is not None:
            pos[0] = f"${self.index}[{pos[0]}]"
        return f"${self.array}[{', '.join(pos)}]"


@dataclass(frozen=True)
class Write:
    """Where one scalar output of the loop body goes; one ``Write`` per node output.

    ``mode``: ``"store"`` (a fresh output array of the loop's shape),
    ``"sum"`` (a 0-d accumulator: the sum of the scalar output over the loop),
    ``"all"`` / ``"any"`` (a 0-d boolean accumulator of a boolean output),
    ``"inc"`` (``buffer[index[i], k1, ...] += o``, repeated indices accumulate
    like ``np.add.at``) or ``"set"`` (``buffer[index[i], k1, ...] = o``, last
    write wins). ``buffer``/``index``: node input positions for ``inc``/``set``;
    the node output is the updated buffer (a copy, unless the buffer is in
    ``IndexedLoop.inplace``). ``also`` (``inc`` only): further ``(output,
    index)`` terms accumulated into the same buffer — chained
    ``inc_subtensor(inc_subtensor(z[p1], a)[p2], b)``; the loop interleaves the
    terms, stock adds them one scatter after the other (same sum, rounding
    may differ).
    """

    output: int
    mode: str = STORE
    buffer: int | None = None
    index: int | None = None
    also: tuple[tuple[int, int], ...] = ()

    def __post_init__(self):
        if self.mode not in WRITE_MODES:
            raise ValueError(f"unknown write mode {self.mode!r}")
        scatter = self.mode in (INC, SET)
        if scatter != (self.buffer is not None and self.index is not None) or (
            not scatter and (self.buffer is not None or self.index is not None)
        ):
            raise ValueError("store/sum writes take no buffer/index; inc/set writes need both")
        object.__setattr__(self, "also", tuple((int(o), int(p)) for o, p in self.also))
        if self.also and self.mode != INC:
            raise ValueError("only inc writes accumulate further terms")

    def terms(self) -> tuple[tuple[int, int], ...]:
        """``(output, index)`` pairs scattered into the buffer, in stock order."""
        if self.mode not in (INC, SET):
            return ()
        return ((self.output, self.index), *self.also)

    def target(self, ndim: int = 1) -> str:
        rest = "".join(f", k{d}" for d in range(1, ndim))
        if self.mode == STORE:
            return f"[i{rest}]"
        if self.mode in REDUCTIONS:
            return ""
        return f"[${self.index}[i]{rest}]"

    def __str__(self) -> str:
        if self.mode == STORE:
            return f"[i] = o{self.output}"
        if self.mode in REDUCTIONS:
            return f" {_RED_OP[self.mode]} o{self.output}"
        op = "+=" if self.mode == INC else "="
        return "; ".join(f"${self.buffer}[${p}[i]] {op} o{o}" for o, p in self.terms())


@dataclass(frozen=True)
class IndexedLoop:
    """One fused loop: reads (one per scalar input), a scalar op, writes (one per node output).

    The iteration space is ``(n, m1, ..., m_{ndim-1})``: ``n`` is the length of
    the index vectors / direct operands along axis 0 (gathers act on axis 0
    only), ``m_d`` the common length of the operands along axis ``d``.
    """

    scalar_op: object
    reads: tuple[Read, ...]
    writes: tuple[Write, ...]
    inplace: tuple[int, ...] = field(default=())

    def __post_init__(self):
        nin = getattr(self.scalar_op, "nin", len(self.reads))
        nout = getattr(self.scalar_op, "nout", 1)
        if nin >= 0 and len(self.reads) != nin:  # nin == -1: variadic (Add, Mul, ...)
            raise ValueError(f"{nin} scalar inputs but {len(self.reads)} reads")
        if not self.reads:
            raise ValueError("a loop needs at least one read")
        if len({r.ndim for r in self.reads}) != 1:
            raise ValueError("all reads must have the loop's ndim")
        for w in self.writes:
            for o in (w.output, *(o for o, _ in w.also)):
                if not 0 <= o < nout:
                    raise ValueError(f"write of scalar output {o} but the scalar op has {nout}")
        buffers = [w.buffer for w in self.writes if w.buffer is not None]
        if len(set(buffers)) != len(buffers):
            raise ValueError("two writes into the same buffer input")
        if not set(self.inplace) <= set(buffers):
            raise ValueError("inplace positions must be write buffers")
        reads_from = {r.array for r in self.reads} | {r.index for r in self.reads if r.index is not None}
        reads_from |= {p for w in self.writes for _, p in w.terms()}
        if reads_from & set(buffers):
            raise ValueError("a write buffer is also read by the loop")
        if self.driver() is None:
            raise ValueError("no operand gives the loop length (all operands broadcast)")

    # --- derived facts -------------------------------------------------
    @property
    def ndim(self) -> int:
        return self.reads[0].ndim

    @property
    def n_inputs(self) -> int:
        pos = [r.array for r in self.reads] + [r.index for r in self.reads if r.index is not None]
        pos += [p for w in self.writes for p in (w.buffer, w.index) if p is not None]
        pos += [p for w in self.writes for _, p in w.also]
        return max(pos) + 1

    @property
    def n_outputs(self) -> int:
        return len(self.writes)

    def driver(self) -> int | None:
        """Node input position whose length (axis 0) is the loop length ``n``."""
        for r in self.reads:
            if not r.broadcast[0]:
                return r.array if r.index is None else r.index
        for w in self.writes:
            if w.index is not None:
                return w.index
        return None

    def dim_source(self, d: int) -> int | None:
        """Node input position whose axis ``d`` (>= 1) gives ``m_d``; ``None``: all broadcast, ``m_d = 1``."""
        for r in self.reads:
            if not r.broadcast[d]:
                return r.array
        return None

    def length_checked(self) -> tuple[int, ...]:
        """Node input positions whose axis-0 length must equal ``n`` (checked at runtime)."""
        pos = []
        for r in self.reads:
            if not r.broadcast[0]:
                pos.append(r.array if r.index is None else r.index)
        pos += [p for w in self.writes for _, p in w.terms()]
        return tuple(dict.fromkeys(pos))

    def dim_checked(self, d: int) -> tuple[int, ...]:
        """Node input positions whose axis ``d`` (>= 1) must equal ``m_d`` (checked at runtime)."""
        pos = [r.array for r in self.reads if not r.broadcast[d]]
        pos += [w.buffer for w in self.writes if w.buffer is not None]
        return tuple(dict.fromkeys(pos))

    def gathered(self) -> tuple[tuple[int, int], ...]:
        """Distinct ``(array, index)`` pairs read through an index."""
        return tuple(dict.fromkeys((r.array, r.index) for r in self.reads if r.index is not None))

    def short(self) -> str:
        ins = ", ".join(map(str, self.reads))
        outs = "; ".join(self._write_statements(lambda k, w: f"${w.buffer}"))
        ip = f"; inplace={list(self.inplace)}" if self.inplace else ""
        return f"{self.scalar_op}({ins}) -> {outs}{ip}"

    def __str__(self) -> str:
        nd = self.ndim
        lines = []
        for k, w in enumerate(self.writes):
            if w.mode == STORE:
                lines.append(f"out{k} = empty({', '.join(['n'] + [f'm{d}' for d in range(1, nd)])})")
            elif w.mode in REDUCTIONS:
                lines.append(f"out{k} = {({SUM: '0', ALL: 'True', ANY: 'False'})[w.mode]}")
            else:
                src = f"${w.buffer}" if w.buffer in self.inplace else f"copy(${w.buffer})"
                lines.append(f"out{k} = {src}")
        lines.append(f"for i < n = len(${self.driver()}):")
        ind = "  "
        for d in range(1, nd):
            src = self.dim_source(d)
            lines.append(f"{ind}for k{d} < m{d} = {'1' if src is None else f'${src}.shape[{d}]'}:")
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
        nd = self.ndim
        rest = "".join(f", k{d}" for d in range(1, nd))
        out = []
        for k, w in enumerate(self.writes):
            op = "=" if w.mode in (STORE, SET) else _RED_OP.get(w.mode, "+=")
            if w.mode == STORE or w.mode in REDUCTIONS:
                out.append(f"out{k}{w.target(nd)} {op} o{w.output}")
            else:
                out.extend(f"{scatter_name(k, w)}[${p}[i]{rest}] {op} o{o}" for o, p in w.terms())
        return out




def _normalize_index(index: np.ndarray, size: int) -> np.ndarray:
    idx = np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"index array of dtype {idx.dtype}")
    idx = idx.astype(np.int64) if idx.dtype != np.uint64 else idx
    if idx.dtype == np.uint64:
        if np.any(idx >= np.uint64(size)):
            raise IndexError("index out of bounds")
        return idx.astype(np.int64)
    bad = (idx < -size) | (idx >= size)
    if np.any(bad):
        raise IndexError("index out of bounds")
    return np.where(idx < 0, idx + size, idx)


def evaluate(loop: IndexedLoop, inputs, out_dtypes, scalar_impl=None):
    """Numpy reference of ``loop`` on ``inputs`` (a list of arrays, by node input position).

    ``scalar_impl(*scalars)`` defaults to ``loop.scalar_op.impl``. Returns the
    list of node outputs. Buffers are always copied (the reference never
    mutates its inputs, whatever ``loop.inplace`` says).
    """
    impl = scalar_impl or loop.scalar_op.impl
    inputs = [np.asarray(a) for a in inputs]
    nd = loop.ndim
    n = inputs[loop.driver()].shape[0]
    for p in loop.length_checked():
        if inputs[p].shape[0] != n:
            raise ValueError(f"loop operand ${p} has length {inputs[p].shape[0]}, expected {n}")
    shape = [n]
    for d in range(1, nd):
        src = loop.dim_source(d)
        m = 1 if src is None else inputs[src].shape[d]
        for p in loop.dim_checked(d):
            if inputs[p].shape[d] != m:
                raise ValueError(f"loop operand ${p} has length {inputs[p].shape[d]} on axis {d}, expected {m}")
        shape.append(m)
    shape = tuple(shape)
    operands = []
    for r in loop.reads:
        arr = inputs[r.array]
        if r.index is not None:
            pos = _normalize_index(inputs[r.index], arr.shape[0])
            arr = arr[pos[:1]] if r.broadcast[0] else arr[pos]
        operands.append(np.broadcast_to(arr, shape))
    nout = getattr(loop.scalar_op, "nout", 1)
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
            continue
        if w.mode == SUM:
            outs.append(np.asarray(vals.sum(dtype=dtype), dtype=dtype))
            continue
        if w.mode in (ALL, ANY):
            red = np.all if w.mode == ALL else np.any
            outs.append(np.asarray(red(results[w.output].astype(bool)), dtype=dtype))
            continue
        buf = inputs[w.buffer].copy()
        pos = _normalize_index(inputs[w.index], buf.shape[0])
        if w.mode == INC:
            for o, p in w.terms():  # one scatter after the other, like stock
                pos = _normalize_index(inputs[p], buf.shape[0])
                np.add.at(buf, pos, results[o].astype(dtype).astype(buf.dtype))
        else:
            for p, v in zip(pos, vals):  # sequential: last write wins
                buf[p] = v
        outs.append(buf)
    return outs
