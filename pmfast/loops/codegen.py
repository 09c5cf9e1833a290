"""Numba code generation for :class:`pmfast.loops.spec.IndexedLoop`.

The loop is emitted as Python source (one nested ``for i<d> in range(n<d>)`` per loop dim;
index loads and reads at the outermost level where their loop dims are bound; the scalar
body — :mod:`pmfast.loops.body`'s statements, or a call of the jitted scalar op — and all
writes inline) and jitted by numba.

Index code is lean: each index array is loaded once per position (however many arrays it
addresses), and checked once per call, before the loop — its minimum and maximum (a
vectorizable scan; for a constant index array, the bounds the pass read when compiling)
against every length it addresses. An out-of-range index raises ``IndexError`` before
anything is read; inside the loop, positions are used unchecked, as unsigned integers (so that
numba adds no wraparound of its own). Negative indices wrap like numpy: a select per addressed
length (one per group of proven-equal lengths), only for signed index arrays that may hold
negatives (a branch-free add that vectorizes; wrapping through a copy of the index array instead
saved ~0.1 ns a row and cost 0.45 s of cold compile).
Operand lengths are checked against the loop shape (``ValueError``, like the stock Elemwise's
refusal of runtime broadcasting). The source depends only on the loop description, the dtypes
and the body, which is what the cache key must cover (see :func:`source_key`).
"""

from __future__ import annotations

import numpy as np

from pmfast.loops.body import (  # noqa: F401  (re-exported: the scalar-body API)
    BODY_VERSION,
    CHEAP_SCALAR_OPS,
    MAX_LIFTS,
    MAY_RAISE,
    Body,
    lazy_composite_plan,
    lazy_composite_source,
    lift_switches,
    op_body,
    scalar_body,
)
from pmfast.loops.spec import ALL, ANY, INC, SET, STORE, SUM, Gather, IndexedLoop

#: Bump whenever the generated source changes shape.
CODEGEN_VERSION = 16

#: Read operands of static length 1 on every axis once, before the loop.
HOIST_INVARIANT_READS = True

_LEN_ERR = '    raise ValueError("indexed_elemwise: loop operands have incompatible shapes")'
_IDX_ERR = '    raise IndexError("indexed_elemwise: index out of bounds")'


def _index_kind(dtype) -> str:
    dt = np.dtype(dtype)
    if dt.kind == "i":
        return "signed"
    if dt.kind == "u":
        return "u64" if dt.itemsize == 8 else "unsigned"
    raise TypeError(f"index dtype {dt} is not an integer dtype")


def _level(dims) -> int:
    """Loop nesting level at which a value depending on loop ``dims`` is available (0: before the loops)."""
    return max(dims, default=-1) + 1


def _subscript(array: str, parts) -> str:
    return f"{array}[{', '.join(parts)}]" if parts else f"{array}[()]"


def _index_position(g: Gather) -> list[str]:
    """Subscripts of index array ``g`` at the current loop position."""
    out = []
    for j, e in enumerate(g.dims):
        if e is None:
            out.append("0")
        else:
            out.append(f"i{e} * st{g.index}_{j}" if g.loose else f"i{e}")
    return out


def _precheck(lines: list[str], k: int, ndim: int, kind: str, known, sizes, dtype="int64") -> bool:
    """Check index array ``in{k}`` against every length in ``sizes`` once, before the loop.

    ``known``: ``(lo, hi)`` read when compiling, else the array is scanned for its minimum and
    maximum (``lo{k}``, ``hi{k}``), in the index's own dtype when it is signed (an int32 index
    scans twice as many values per vector instruction as widened to int64). Returns whether the
    array may hold negative values.
    """
    if known is not None:
        lo, hi = known
        for s in sizes:
            cond = f"{hi} >= {s}" + (f" or {lo} < -{s}" if lo < 0 else "")
            lines += [f"if {cond}:", _IDX_ERR]
        return lo < 0
    flat = f"in{k}"
    if ndim != 1:
        flat = f"flat{k}"
        lines.append(f"{flat} = in{k}.ravel()")
    if kind == "u64":
        lines += [f"hi{k} = np.uint64(0)", f"for t in range({flat}.shape[0]):", f"    hi{k} = max(hi{k}, {flat}[t])"]
        for s in sizes:
            lines += [f"if {flat}.shape[0] and hi{k} >= np.uint64({s}):", _IDX_ERR]
        return False
    scan = np.dtype(dtype).name if kind == "signed" else "int64"
    lines += [f"hi{k} = np.{scan}(-1)"]
    if kind == "signed":
        lines += [f"lo{k} = np.{scan}(0)"]
    lines += [f"for t in range({flat}.shape[0]):", f"    v = np.{scan}({flat}[t])", f"    hi{k} = max(hi{k}, v)"]
    if kind == "signed":
        lines += [f"    lo{k} = min(lo{k}, v)"]
    for s in sizes:
        lines += [f"if hi{k} >= {s}" + (f" or lo{k} < -{s}:" if kind == "signed" else ":"), _IDX_ERR]
    return kind == "signed"


class _Prologue:
    """What both loop forms share: loop lengths and operand checks, index prechecks and wraps,
    output allocation, and how each access addresses its array (:meth:`position`)."""

    def __init__(self, loop: IndexedLoop, input_dtypes, output_dtypes):
        self.loop, self.output_dtypes = loop, output_dtypes
        self.head: list[str] = []
        emit = self.head.append
        for d in range(loop.ndim):
            _emit_dim(self.head, loop, d)
        gathered = loop.gathered()
        self.rep = {}  # (array, axis) -> the representative of its group of proven-equal lengths
        for group in loop.same_lengths:
            for pair in group:
                self.rep[pair] = group[0]
        for array, ax in dict.fromkeys((a, ax) for a, ax, _ in gathered):
            r = self.rep.get((array, ax), (array, ax))
            if r == (array, ax):
                emit(f"size{array}_{ax} = in{array}.shape[{ax}]")
            else:
                emit(f"if in{array}.shape[{ax}] != size{r[0]}_{r[1]}:")
                emit(_LEN_ERR)
        targets: dict = {}  # index position -> the lengths it addresses (one per group)
        for array, ax, g in gathered:
            r = self.rep.get((array, ax), (array, ax))
            targets.setdefault(g.index, {})[r] = f"size{r[0]}_{r[1]}"
        known = {p: (lo, hi) for p, lo, hi in loop.bounds}
        self.wrap = {}  # index position -> whether it may hold negative values (positions wrap)
        self.sizes = sorted({v for sizes in targets.values() for v in sizes.values()})
        for k, sizes in targets.items():
            ndim = len(next(g for _, _, g in gathered if g.index == k).dims)
            kind = _index_kind(input_dtypes[k])
            self.wrap[k] = _precheck(self.head, k, ndim, kind, known.get(k), list(sizes.values()), input_dtypes[k])
        shape = "(" + "".join(f"n{d}, " for d in range(loop.ndim)) + ")"
        self.outs: list[str] = []
        for k, (w, dt) in enumerate(zip(loop.writes, output_dtypes, strict=True)):
            if w.mode == STORE:
                emit(f"out{k} = np.empty({shape}, dtype=np.{np.dtype(dt).name})")
            elif w.mode in (SUM, ALL, ANY):
                pass  # accumulators live where the loop runs
            elif w.buffer in loop.inplace:
                emit(f"out{k} = in{w.buffer}")
            else:
                emit(f"out{k} = in{w.buffer}.copy()")
            self.outs.append(f"out{k}")
        self.load_var: dict = {}  # (source, index dims, loose) -> its position, loaded once per row

    def acc_init(self, k: int) -> str:
        w = self.loop.writes[k]
        if w.mode == SUM:
            return f"acc{k} = np.{np.dtype(self.output_dtypes[k]).name}(0)"
        return f"acc{k} = {w.mode == ALL}"

    def position(self, loads, array: int, ax: int, a, pos=_index_position) -> str:
        """The position along ``ax`` of ``in{array}`` (statements computing it go to
        ``loads[level]``): an unsigned integer, so that numba adds no wraparound of its own, and in
        range (the index arrays were checked before the loop). ``pos(gather)``: the subscripts of
        the index array at the current loop position."""
        if a is None:
            return "0"
        if not isinstance(a, Gather):
            return f"i{a}"
        level = _level(a.loop_dims())

        def load(src: str, cast: str) -> str:
            key = (src, a.dims, a.loose)
            if key not in self.load_var:
                var = self.load_var[key] = f"j{len(self.load_var)}"
                loads[level].append(f"{var} = np.{cast}({_subscript(src, pos(a))})")
            return self.load_var[key]

        if not self.wrap[a.index]:
            return load(f"in{a.index}", "uint64")
        r = self.rep.get((array, ax), (array, ax))
        j = load(f"in{a.index}", "int64")
        key = (f"select{r}", a.dims, a.loose, j)
        if key not in self.load_var:
            var = self.load_var[key] = f"p{len(self.load_var)}"
            loads[level].append(f"{var} = np.uint64({j} + size{r[0]}_{r[1]} if {j} < 0 else {j})")
        return self.load_var[key]

    def finish(self) -> list[str]:
        lines = [f"out{k} = np.array(acc{k})" for k, w in enumerate(self.loop.writes) if w.mode in (SUM, ALL, ANY)]
        outs = self.outs
        lines.append(f"return {outs[0]}" if len(outs) == 1 else f"return ({', '.join(outs)},)")
        return lines


def _call(loop: IndexedLoop, body: Body | None) -> list[str]:
    """The scalar body: ``body``'s statements, or a call of ``scalar_fn``, computing ``o<k>``."""
    if body is not None:
        return list(body.lines)
    nout = getattr(loop.scalar_op, "nout", 1)
    call_args = ", ".join(f"a{k}" for k in range(len(loop.reads)))
    if nout == 1:
        return [f"o0 = scalar_fn({call_args})"]
    return [f"({', '.join(f'o{k}' for k in range(nout))},) = scalar_fn({call_args})"]


def _def(name: str, args, lines) -> str:
    return f"def {name}({', '.join(args)}):\n" + "\n".join("    " + line for line in lines) + "\n"


def generate_source(
    loop: IndexedLoop,
    input_dtypes,
    output_dtypes,
    func_name: str = "indexed_loop",
    body: Body | None = None,
) -> str:
    """Python source of the loop function ``func_name(in0, in1, ...)``: the plain form.

    One ``for i<d> in range(n<d>)`` per loop dim; every value (index load, read) is computed at
    the outermost level where all loop dims it depends on are bound. ``body``: statements
    computing ``o<k>`` from ``a<k>`` (their globals must be in the function's globals); without
    it the source calls ``scalar_fn`` (the jitted scalar op). The source expects ``np`` in its
    globals.
    """
    nd = loop.ndim
    pro = _Prologue(loop, input_dtypes, output_dtypes)
    # per nesting level (0: before the loops): index loads, then reads; the body goes innermost
    loads: list[list[str]] = [[] for _ in range(nd + 1)]
    reads: list[list[str]] = [[] for _ in range(nd + 1)]
    for k, r in enumerate(loop.reads):
        at = _subscript(f"in{r.array}", [pro.position(loads, r.array, ax, a) for ax, a in enumerate(r.axes)])
        level = _level(r.loop_dims()) if HOIST_INVARIANT_READS else nd
        # a read is placed where its position is known: before the loop when it is
        # invariant, so that LLVM can hoist what the scalar body computes from it
        # (it cannot prove a load inside the loop unaffected by the loop's stores)
        reads[level].append(f"a{k} = {at}")
    inner = _call(loop, body)
    here = [f"i{d}" for d in range(nd)]
    for k, w in enumerate(loop.writes):
        if w.mode == STORE:
            inner.append(f"{_subscript(f'out{k}', here)} = o{w.output}")
        elif w.mode == SUM:
            inner.append(f"acc{k} += np.{np.dtype(output_dtypes[k]).name}(o{w.output})")
        elif w.mode == ALL:
            inner.append(f"acc{k} = acc{k} & bool(o{w.output})")
        elif w.mode == ANY:
            inner.append(f"acc{k} = acc{k} | bool(o{w.output})")
        else:
            op = "+=" if w.mode == INC else "="
            for o, axes in w.terms():
                at = _subscript(f"out{k}", [pro.position(loads, w.buffer, ax, a) for ax, a in enumerate(axes)])
                inner.append(f"{at} {op} o{o}")
    lines = pro.head + [pro.acc_init(k) for k, w in enumerate(loop.writes) if w.mode in (SUM, ALL, ANY)]
    lines += loads[0] + reads[0]
    ind = ""
    for d in range(nd):
        lines.append(f"{ind}for i{d} in range(n{d}):")
        ind += "    "
        lines.extend(ind + line for line in loads[d + 1] + reads[d + 1])
    lines.extend(ind + line for line in inner)
    return _def(func_name, [f"in{p}" for p in range(len(input_dtypes))], lines + pro.finish())


def _emit_dim(body: list[str], loop: IndexedLoop, d: int) -> None:
    """``n<d>`` and the checks of every operand along loop dim ``d``; strides of loose indices."""
    ops = loop.dim_operands(d)
    groups = loop.loose_groups(d)
    loose = list(dict.fromkeys(pair for g in groups for pair in g))
    if ops:
        body.append(f"n{d} = in{ops[0][0]}.shape[{ops[0][1]}]")
    else:  # numpy's broadcast of the loose index lengths
        body.append(f"n{d} = 1")
        for p, ax in loose:
            body.append(f"if in{p}.shape[{ax}] != 1:")
            body.append(f"    n{d} = in{p}.shape[{ax}]")
    for p, ax in ops[1:]:
        body.append(f"if in{p}.shape[{ax}] != n{d}:")
        body.append(_LEN_ERR)
    for p, ax in loose:
        body.append(f"if in{p}.shape[{ax}] != 1 and in{p}.shape[{ax}] != n{d}:")
        body.append(_LEN_ERR)
        body.append(f"st{p}_{ax} = 0 if in{p}.shape[{ax}] == 1 else 1")
    for g in groups:
        body.append(f"if n{d} != 1 and {' and '.join(f'in{p}.shape[{ax}] != n{d}' for p, ax in g)}:")
        body.append(_LEN_ERR)


def source_key(loop: IndexedLoop, input_dtypes, output_dtypes) -> str:
    """Everything :func:`generate_source` depends on besides the scalar body."""
    return repr(
        (
            CODEGEN_VERSION,
            HOIST_INVARIANT_READS,
            loop.ndim,
            loop.reads,
            loop.writes,
            loop.inplace,
            loop.bounds,
            tuple(np.dtype(d).name for d in input_dtypes),
            tuple(np.dtype(d).name for d in output_dtypes),
        )
    )
