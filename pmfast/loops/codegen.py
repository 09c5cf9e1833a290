"""Numba code generation for :class:`pmfast.loops.spec.IndexedLoop`.

The loop is emitted as Python source (``for i in range(n)``, then one nested
loop per further axis; all reads, the scalar function call and all writes
inline) and jitted by numba. Index arrays are bounds-checked element by
element (``IndexError``, never an out-of-bounds access); negative indices
wrap like numpy. Operand lengths are checked against the loop shape
(``ValueError``, like the stock Elemwise's refusal of runtime broadcasting).
The source depends only on the loop description and the dtypes, which is
what the cache key must cover (see :func:`source_key`).
"""

from __future__ import annotations

import numpy as np

from pmfast.loops.spec import INC, SET, STORE, SUM, IndexedLoop

#: Bump whenever the generated source changes shape.
CODEGEN_VERSION = 5

_LEN_ERR = '    raise ValueError("indexed_elemwise: loop operands have incompatible shapes")'
_IDX_ERR = '    raise IndexError("indexed_elemwise: index out of bounds")'


def _index_kind(dtype) -> str:
    dt = np.dtype(dtype)
    if dt.kind == "i":
        return "signed"
    if dt.kind == "u":
        return "u64" if dt.itemsize == 8 else "unsigned"
    raise TypeError(f"index dtype {dt} is not an integer dtype")


def generate_source(
    loop: IndexedLoop,
    input_dtypes,
    output_dtypes,
    func_name: str = "indexed_loop",
) -> str:
    """Python source of the loop function ``func_name(in0, in1, ...)``.

    The source expects ``np`` and ``scalar_fn`` (the jitted scalar op) in its globals.
    """
    nin = len(input_dtypes)
    nd = loop.ndim
    args = [f"in{p}" for p in range(nin)]
    body: list[str] = []
    emit = body.append

    # --- the iteration space and its checks
    drv = loop.driver()
    emit(f"n = in{drv}.shape[0]")
    for p in loop.length_checked():
        if p != drv:
            emit(f"if in{p}.shape[0] != n:")
            emit(_LEN_ERR)
    for d in range(1, nd):
        src = loop.dim_source(d)
        emit(f"m{d} = {1 if src is None else f'in{src}.shape[{d}]'}")
        for p in loop.dim_checked(d):
            if p != src:
                emit(f"if in{p}.shape[{d}] != m{d}:")
                emit(_LEN_ERR)

    # the axis-0 sizes that gathered / scattered arrays are checked against
    sized = sorted({a for a, _ in loop.gathered()} | {w.buffer for w in loop.writes if w.buffer is not None})
    for a in sized:
        emit(f"size{a} = in{a}.shape[0]")
        if _index_kind_any_u64(loop, input_dtypes):
            emit(f"usize{a} = np.uint64(size{a})")

    # --- outputs
    shape = "(" + ", ".join(["n"] + [f"m{d}" for d in range(1, nd)]) + ",)"
    outs = []
    for k, (w, dt) in enumerate(zip(loop.writes, output_dtypes, strict=True)):
        if w.mode == STORE:
            emit(f"out{k} = np.empty({shape}, dtype=np.{np.dtype(dt).name})")
        elif w.mode == SUM:
            emit(f"acc{k} = np.{np.dtype(dt).name}(0)")
        elif w.buffer in loop.inplace:
            emit(f"out{k} = in{w.buffer}")
        else:
            emit(f"out{k} = in{w.buffer}.copy()")
        outs.append(f"out{k}")

    def checked_index(lines: list[str], var: str, index_pos: int, size_of: int, at: str) -> None:
        kind = _index_kind(input_dtypes[index_pos])
        if kind == "signed":
            lines.append(f"{var} = np.int64(in{index_pos}[{at}])")
            lines.append(f"if {var} < 0:")
            lines.append(f"    {var} += size{size_of}")
            lines.append(f"if {var} < 0 or {var} >= size{size_of}:")
            lines.append(_IDX_ERR)
        elif kind == "unsigned":
            lines.append(f"{var} = np.int64(in{index_pos}[{at}])")
            lines.append(f"if {var} >= size{size_of}:")
            lines.append(_IDX_ERR)
        else:  # uint64: compare in uint64; below the size it fits int64
            lines.append(f"{var}_u = in{index_pos}[{at}]")
            lines.append(f"if {var}_u >= usize{size_of}:")
            lines.append(_IDX_ERR)
            lines.append(f"{var} = np.int64({var}_u)")

    hoisted: list[str] = []  # broadcast (index-length-1) gathers: checked once, before the loop
    outer: list[str] = []  # per i: gathered row indices, write row indices
    inner: list[str] = []  # per (i, k1, ...): reads, scalar call, writes

    def pos(d: int, bcast: bool) -> str:
        return "0" if bcast else ("i" if d == 0 else f"k{d}")

    gather_var: dict[tuple[int, int, bool], str] = {}
    for k, r in enumerate(loop.reads):
        trail = [pos(d, b) for d, b in enumerate(r.broadcast)][1:]
        if r.index is None:
            at = [pos(0, r.broadcast[0]), *trail]
        else:
            key = (r.array, r.index, r.broadcast[0])
            if key not in gather_var:
                var = f"j{len(gather_var)}"
                gather_var[key] = var
                if r.broadcast[0]:
                    checked_index(hoisted, var, r.index, r.array, "0")
                else:
                    checked_index(outer, var, r.index, r.array, "i")
            at = [gather_var[key], *trail]
        inner.append(f"a{k} = in{r.array}[{', '.join(at)}]")

    nout = getattr(loop.scalar_op, "nout", 1)
    call_args = ", ".join(f"a{k}" for k in range(len(loop.reads)))
    if nout == 1:
        inner.append(f"o0 = scalar_fn({call_args})")
    else:
        inner.append(f"({', '.join(f'o{k}' for k in range(nout))},) = scalar_fn({call_args})")

    trail_pos = "".join(f", k{d}" for d in range(1, nd))
    for k, w in enumerate(loop.writes):
        if w.mode == STORE:
            inner.append(f"out{k}[i{trail_pos}] = o{w.output}")
        elif w.mode == SUM:
            inner.append(f"acc{k} += np.{np.dtype(output_dtypes[k]).name}(o{w.output})")
        else:
            assert w.mode in (INC, SET)
            op = "+=" if w.mode == INC else "="
            for t, (o, p) in enumerate(w.terms()):
                var = f"w{k}" if t == 0 else f"w{k}_{t}"
                checked_index(outer, var, p, w.buffer, "i")
                inner.append(f"out{k}[{var}{trail_pos}] {op} o{o}")

    # broadcast gathers are checked even when n == 0: the stock gather would have raised
    body.extend(hoisted)
    emit("for i in range(n):")
    ind = "    "
    body.extend(ind + line for line in outer)
    for d in range(1, nd):
        emit(f"{ind}for k{d} in range(m{d}):")
        ind += "    "
    body.extend(ind + line for line in inner)
    for k, w in enumerate(loop.writes):
        if w.mode == SUM:
            emit(f"out{k} = np.array(acc{k})")
    if len(outs) == 1:
        emit(f"return {outs[0]}")
    else:
        emit(f"return ({', '.join(outs)},)")

    return f"def {func_name}({', '.join(args)}):\n" + "\n".join("    " + line for line in body) + "\n"


def _index_kind_any_u64(loop: IndexedLoop, input_dtypes) -> bool:
    idx = {r.index for r in loop.reads if r.index is not None} | {p for w in loop.writes for _, p in w.terms()}
    return any(_index_kind(input_dtypes[p]) == "u64" for p in idx)


def source_key(loop: IndexedLoop, input_dtypes, output_dtypes) -> str:
    """Everything :func:`generate_source` depends on besides the scalar function."""
    return repr(
        (
            CODEGEN_VERSION,
            loop.reads,
            loop.writes,
            loop.inplace,
            tuple(np.dtype(d).name for d in input_dtypes),
            tuple(np.dtype(d).name for d in output_dtypes),
        )
    )
