"""The chunked form of a 1-d fused loop: a vectorizable phase, then a scalar scatter phase.

LLVM vectorizes a loop over gathered values only if nothing in it can raise, branch or call
libm, its affine accesses are provably consecutive, and its stores provably never feed its
gathered loads. The chunked form arranges exactly that. Per chunk of :data:`CHUNK` rows::

    for t < m:                       # vectorizable: gathers, the scalar body (selects, pmfast.vmath),
        i0 = c0 + t  (unsigned)      #   results into stack buffers (allocas: provably distinct),
        ...body...                   #   all/any reductions in registers
        cb<o>[t] = o<o>
    out<k>[c0 + t] = cb<o>[t]        # stored outputs: a consecutive copy
    acc<k> += lanes(cb<o>)           # sums: LANES partial sums in a fixed order, then combined
    out<k>[idx[c0 + t]] += cb<o>[t]  # scatters: scalar, in row order

The loop runs in a separate *kernel* function over rows ``r0 <= i0 < r1``; the *entry* function
checks lengths and indices (:class:`pmfast.loops.codegen._Prologue`, the same checks as the
plain form), allocates outputs, calls the kernel (or the threaded driver) and wraps the
reductions. Arrays the vectorizable phase reads are passed C-contiguous: numba addresses an
'A'-layout array through integer arithmetic, which hides from LLVM that gathered loads cannot
alias the stack buffers (measured: the phase then ran scalar).

Sums are deterministic: lane ``l`` of a chunk adds its rows ``l, l + LANES, ...`` (zero-padded
to a multiple of LANES),
the lanes combine pairwise, the chunk totals add in chunk order — the same bits whether or not
LLVM vectorizes, and whatever splits the chunks among threads. They differ from a sequential
sum (and from stock's) by rounding only.
"""

from __future__ import annotations

import numpy as np

from pmfast.loops.codegen import _call, _def, _level, _Prologue, _subscript
from pmfast.loops.spec import ALL, ANY, INC, SET, STORE, SUM, Gather, IndexedLoop

#: Rows per chunk: the stack buffers (one per buffered body output, 8 bytes a row) stay in L1.
CHUNK = 256
#: Partial sums per reduction (one AVX-512 vector of float64).
LANES = 8

#: Bump whenever the generated chunked source changes shape.
CHUNKED_VERSION = 3


def kernel_returns(loop: IndexedLoop, output_dtypes) -> list[str]:
    """The dtypes of the totals the chunked kernel returns, in order (its ``sum``, ``all`` and ``any``
    writes; the kernel returns ``np.int64(0)`` when there are none). Callers type their kernel
    calls from this (:mod:`pmfast.loops.deferred`) before the kernel is compiled."""
    return [
        np.dtype(output_dtypes[k]).name if w.mode == SUM else "bool"
        for k, w in enumerate(loop.writes)
        if w.mode in (SUM, ALL, ANY)
    ]


def chunkable(loop: IndexedLoop) -> bool:
    """Can ``loop`` run in the chunked form? (1-d, no loose gathers; the body is checked apart.)"""
    if loop.ndim != 1:
        return False
    return not any(g.loose for _, _, g in loop.gathered())


def threadable(loop: IndexedLoop) -> bool:
    """Can the chunked ``loop`` split its rows among threads? (``set`` writes must keep row order.)"""
    return not any(w.mode == SET for w in loop.writes)


def generate_chunked(
    loop: IndexedLoop,
    input_dtypes,
    output_dtypes,
    body,
    body_out_dtypes,
    func_name: str = "indexed_loop",
    threads: int = 1,
) -> list[tuple[str, str]]:
    """``[(name, source), ...]`` of the chunked form of the 1-d ``loop``, in compile order: the
    kernel ``{func_name}_kernel(r0, r1, ...)`` (rows ``r0 <= i0 < r1``), with ``threads > 1`` the
    threaded driver ``{func_name}_blocks`` (see :func:`_driver`), and the entry ``func_name``,
    which calls them by those global names. All expect ``np``, ``stack_array`` and the body's
    globals; the driver also ``prange``.
    """
    if not chunkable(loop):
        raise ValueError("only 1-d loops without loose gathers run chunked")
    pro = _Prologue(loop, input_dtypes, output_dtypes)
    nin = len(input_dtypes)
    buffered = sorted(
        {w.output for w in loop.writes if w.mode in (STORE, SUM)}
        | {o for w in loop.writes for o, _ in w.terms()}
    )
    loads: list[list[str]] = [[], []]
    reads: list[list[str]] = [[], []]
    for k, r in enumerate(loop.reads):
        at = _subscript(f"in{r.array}", [pro.position(loads, r.array, ax, a) for ax, a in enumerate(r.axes)])
        reads[_level(r.loop_dims())].append(f"a{k} = {at}")
    compute = _call(loop, body)
    compute += [f"cb{o}[t] = o{o}" for o in buffered]
    for k, w in enumerate(loop.writes):
        if w.mode in (ALL, ANY):
            compute.append(f"acc{k} = acc{k} {'&' if w.mode == ALL else '|'} bool(o{w.output})")
    # the scatter phase reloads its positions (their own load variables: a second loop)
    scatter_loads: list[list[str]] = [[], []]
    pro.load_var = {}
    scatters = []
    for k, w in enumerate(loop.writes):
        if w.mode in (INC, SET):
            op = "+=" if w.mode == INC else "="
            for o, axes in w.terms():
                at = _subscript(f"out{k}", [pro.position(scatter_loads, w.buffer, ax, a) for ax, a in enumerate(axes)])
                scatters.append(f"{at} {op} cb{o}[t]")
    after = []  # per chunk, after the vectorizable phase
    for k, w in enumerate(loop.writes):
        if w.mode == STORE:
            after += ["for t in range(m):", f"    out{k}[c0 + t] = cb{w.output}[t]"]
        elif w.mode == SUM:
            dt = np.dtype(output_dtypes[k]).name
            if np.dtype(body_out_dtypes[w.output]).kind == "f":
                lanes = [f"l{k}_{j}" for j in range(LANES)]
                after += ["for t in range(m, mr):", f"    cb{w.output}[t] = 0.0"]
                after.append(" = ".join(lanes) + f" = np.{dt}(0)")
                after.append(f"for t in range(0, mr, {LANES}):")
                after += [f"    {lane} += np.{dt}(cb{w.output}[t + {j}])" for j, lane in enumerate(lanes)]
                after.append(f"acc{k} += {_pairwise(lanes)}")
            else:
                after += ["for t in range(m):", f"    acc{k} += np.{dt}(cb{w.output}[t])"]
    if scatters:
        after += ["for t in range(m):", "    i0 = np.uint64(c0 + t)"]
        after += ["    " + line for line in scatter_loads[1] + scatters]

    accs = [k for k, w in enumerate(loop.writes) if w.mode in (SUM, ALL, ANY)]
    outs = [f"out{k}" for k, w in enumerate(loop.writes) if w.mode in (STORE, INC, SET)]
    extra = list(pro.sizes)
    kargs = ["r0", "r1", *[f"in{p}" for p in range(nin)], *extra, *outs]
    k_lines = [f"cb{o} = stack_array({CHUNK}, np.{np.dtype(body_out_dtypes[o]).name})" for o in buffered]
    k_lines += [pro.acc_init(k) for k in accs]
    k_lines += loads[0] + scatter_loads[0] + reads[0]
    k_lines += [f"for c0 in range(r0, r1, {CHUNK}):", f"    m = min({CHUNK}, r1 - c0)"]
    k_lines += [f"    mr = (m + {LANES - 1}) // {LANES} * {LANES}", "    for t in range(m):"]
    k_lines += ["        i0 = np.uint64(c0 + t)"]
    k_lines += ["        " + line for line in loads[1] + reads[1] + compute]
    k_lines += ["    " + line for line in after]
    ret = ", ".join(f"acc{k}" for k in accs)
    # the return types exactly as :func:`kernel_returns` predicts them
    typed = ", ".join(f"np.{'bool_' if dt == 'bool' else dt}(acc{k})" for k, dt in zip(accs, kernel_returns(loop, output_dtypes)))
    k_lines.append(f"return ({typed},)" if accs else "return np.int64(0)")
    kernel_name = f"{func_name}_kernel"
    kernel = _def(kernel_name, kargs, k_lines)

    # arrays the vectorizable phase reads are passed C-contiguous (a view when they are): numba
    # addresses an 'A'-layout array through integer arithmetic, which hides from LLVM that its
    # gathered loads cannot alias the stack buffers
    read = {r.array for r in loop.reads} | {g.index for r in loop.reads for _, g in r.gathers()}

    def arg(name: str) -> str:
        return f"np.ascontiguousarray({name})" if name.startswith("in") and int(name[2:]) in read else name

    sources = [(kernel_name, kernel)]
    target, first = kernel_name, ["0", "n0"]
    if threads > 1:
        target, first = f"{func_name}_blocks", ["n0"]
        sources.append((target, _driver(loop, output_dtypes, kargs[2:], accs, kernel_name, target, threads)))
    e_lines = list(pro.head)
    assign = f"({ret},) = " if accs else ""
    e_lines.append(f"{assign}{target}({', '.join(first + [arg(a) for a in kargs[2:]])})")
    sources.append((func_name, _def(func_name, [f"in{p}" for p in range(nin)], e_lines + pro.finish())))
    return sources


def _driver(loop, output_dtypes, args, accs, kernel_name: str, name: str, threads: int) -> str:
    """The threaded driver: rows split into :data:`~pmfast.loops.threads.BLOCKS` fixed blocks
    (whole chunks) run by ``threads`` threads, each block scattering into its own zeroed buffer
    and returning its own totals; buffers and totals are combined in block order. Short loops
    (``n0 < MIN_ROWS``) run on the calling thread, straight into the outputs."""
    from pmfast.loops.threads import BLOCKS, MIN_ROWS

    scat = [k for k, w in enumerate(loop.writes) if w.mode == INC]
    ret = ", ".join(f"acc{k}" for k in accs)
    assign = f"({ret},) = " if accs else ""
    lines = ["if n0 < " + str(MIN_ROWS) + ":", f"    return {kernel_name}(0, n0, {', '.join(args)})"]
    lines.append(f"per = ((n0 + {CHUNK - 1}) // {CHUNK} + {BLOCKS - 1}) // {BLOCKS} * {CHUNK}")
    for k in accs:
        dt = "bool_" if loop.writes[k].mode in (ALL, ANY) else np.dtype(output_dtypes[k]).name
        lines.append(f"tot{k} = np.empty({BLOCKS}, dtype=np.{dt})")
    for k in scat:
        lines.append(f"bb{k} = np.zeros(({BLOCKS},) + out{k}.shape, dtype=out{k}.dtype)")
    # ``threads`` workers (at most that many threads, however large numba's pool: numba's
    # set_num_threads would make the function uncacheable), worker w running blocks w, w + threads, ...
    lines.append(f"for w in prange({threads}):")
    lines.append(f"    for b in range(w, {BLOCKS}, {threads}):")
    lines.append("        b0 = min(n0, b * per)")
    lines.append("        b1 = min(n0, b0 + per)")
    block_args = [f"bb{a[3:]}[b]" if a.startswith("out") and int(a[3:]) in scat else a for a in args]
    lines.append(f"        {assign}{kernel_name}(b0, b1, {', '.join(block_args)})")
    lines += [f"        tot{k}[b] = acc{k}" for k in accs]
    for k in accs:
        w = loop.writes[k]
        lines.append(f"acc{k} = tot{k}[0]")
        op = "+" if w.mode == SUM else "&" if w.mode == ALL else "|"
        lines += [f"for b in range(1, {BLOCKS}):", f"    acc{k} = acc{k} {op} tot{k}[b]"]
    for k in scat:
        lines += [f"for b in range({BLOCKS}):", f"    out{k} += bb{k}[b]"]
    lines.append(f"return ({ret},)" if accs else "return 0")
    return _def(name, ["n0", *args], lines)


def _pairwise(terms: list[str]) -> str:
    """``((t0 + t1) + (t2 + t3)) + ...``: a fixed association."""
    while len(terms) > 1:
        terms = [f"({terms[i]} + {terms[i + 1]})" if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]
