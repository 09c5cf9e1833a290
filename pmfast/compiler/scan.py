"""``Scan``: the loop and its step as one numba function, the step's 0-d values as numba scalars.

pytensor's numba ``Scan`` calls a jitted inner function once per step: every 0-d
tap or sequence element is copied into a 0-d array before the call, every 0-d
value the step computes is a new heap-allocated 0-d array (numba's meminfo,
``malloc``, ``free``, reference counts), and each tap's buffer position is a
``%`` of the step index by the buffer length. The Lotka–Volterra ODE of the
public catalogue (two scalar states, 2,100 Euler steps, a reverse scan for the
gradient) spent 74% of its gradient there: ~110 ns per forward step, ~285 ns per
reverse step, for a few multiplications.

Here the step's statements (pytensor's own graph function of the inner graph,
with pmfast's node functions) are written into the loop body of one generated
function, and :func:`pmfast.compiler.scalars.rewrite` holds its float64 / int64 /
bool 0-d values as numba scalars: a 0-d tap of a vector buffer or element of a
vector sequence is read as ``buf[p]``, a 0-d non-sequence once before the
loop, each all-0-d ``Elemwise`` is its core's scalar code returning values,
copies and checks of a scalar stay scalars, and a 0-d output is stored as
``buf[p] = value``. A node that needs a 0-d array gets a view of a slot in the
function's stack frame (allocated once, before the loop). Tap positions are
counters advanced by one per step and wrapped by a comparison, not a division.

The semantics are stock's (``pytensor/link/numba/dispatch/scan.py``, 2.38.3),
written anew: the inner graph prepared the same way (inputs that only the step
reads destroyable, pytensor's rewrites with the ``numba`` tag, deep copies of
aliased outputs, in the op's own graph as stock does),
buffers copied unless the node destroys them, circular buffers (``scan_save_mem``)
rotated after the loop as stock does, unused rows of a regular loop's buffer
zeroed and a ``while`` loop's truncated, nit-sot buffers of unknown row shape
allocated after the first step. A buffer of length 0 raises ``ZeroDivisionError``
where stock's ``%`` would. Declined (stock's implementation is used): untraced
sit-sots (random generators, shared updates) and outputs that are not tensors.
"""

from __future__ import annotations

import ast
import hashlib

#: Bump when the generated source or its compilation changes (part of the cache key).
VERSION = 1


def _prepared_inner(op, node):
    """``op``'s inner graph, prepared in place as stock prepares it before compiling the step.

    In place, as stock does: the op's graph is the rewritten one afterwards (pytensor's tests
    inspect it), and a second preparation (stock's, or this one for another node) finds nothing
    left to do.
    """
    from pytensor.compile.function.types import add_supervisor_to_fgraph, insert_deepcopy
    from pytensor.compile.io import In, Out
    from pytensor.compile.mode import NUMBA, get_mode

    fgraph = op.fgraph
    inputs = fgraph.inputs
    # a tap whose outer buffer holds only the taps the step reads is overwritten by the step's
    # output: the step may destroy it
    destroyable = {
        inner
        for outer, inner in zip(op.outer_sitsot(node.inputs), op.inner_sitsot(inputs), strict=True)
        if outer.type.shape[0] == 1
    }
    destroyable |= {
        inner
        for outer, inner, taps in zip(
            op.outer_mitsot(node.inputs), op.oldest_inner_mitsot(inputs), op.info.mit_sot_in_slices, strict=True
        )
        if outer.type.shape[0] == abs(min(taps))
    }
    specs = [In(x, borrow=True, mutable=x in destroyable) for x in inputs]
    add_supervisor_to_fgraph(fgraph=fgraph, input_specs=specs, accept_inplace=True)
    get_mode(op.mode).including("numba").excluding(*NUMBA._optimizer.exclude).optimizer(fgraph)
    insert_deepcopy(fgraph, wrapped_inputs=specs, wrapped_outputs=[Out(x, borrow=False) for x in fgraph.outputs])
    return fgraph


def _step_statements(fgraph):
    """``(parameters, statements, nodes, returned names, globals, key)`` of the inner graph's function, or None."""
    from pytensor.link.numba.dispatch import basic as nb_basic

    fn, key = nb_basic.numba_funcify_and_cache_key(fgraph, fgraph_name="pm_scan_step")
    py_func = getattr(fn, "py_func", fn)
    src = getattr(py_func, "__source__", None)
    if src is None:
        return None
    fdef = next((n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)), None)
    if fdef is None or fdef.args.vararg or not fdef.body or not isinstance(fdef.body[-1], ast.Return):
        return None
    *stmts, ret = fdef.body
    nodes = fgraph.toposort()
    if len(stmts) != len(nodes) or not all(isinstance(s, ast.Assign) for s in stmts):
        return None
    value = ret.value
    outs = value.elts if isinstance(value, ast.Tuple) else [value]
    if len(outs) != len(fgraph.outputs) or not all(isinstance(o, ast.Name) for o in outs):
        return None
    params = [a.arg for a in fdef.args.args]
    if len(params) != len(fgraph.inputs):
        return None
    return params, stmts, nodes, [o.id for o in outs], py_func.__globals__, key


def _is_tensor(var) -> bool:
    from pytensor.tensor.type import TensorType

    return isinstance(var.type, TensorType)


def _generate(op, node, fgraph, step):
    """``(source, globals)`` of the scan function, or None (declined)."""
    import numpy as np

    from pmfast.compiler import native, scalars
    from pmfast.compiler.entry_native import store_cell, store_slot

    params, stmts, nodes, returned, step_env, _ = step
    info = op.info
    n_in = len(node.inputs)
    names = [f"_pm_in{k}" for k in range(n_in)]
    inner_in = dict(zip(fgraph.inputs, params, strict=True))
    env: dict = {"np": np, "_pm_stack": native.stack_buffer, "_pm_store_cell": store_cell, "_pm_store_slot": store_slot}
    env.update(step_env)
    pre: list[str] = []  # before the loop
    reads: list[str] = []  # at the top of each step
    initial: dict[str, str] = {}  # parameters held as scalars
    temps = 0

    def held(var) -> bool:
        return var.type.ndim == 0 and var.type.dtype in scalars.BUFFERS

    def read(var, expr: str, per_step: bool):
        """Bind the step parameter of inner input ``var`` to ``expr`` (an element / row of an outer array)."""
        nonlocal temps
        lines = reads if per_step else pre
        name = inner_in[var]
        if not _is_tensor(var):
            lines.append(f"{name} = {expr}")
        elif held(var):
            lines.append(f"{name} = {expr}")
            initial[name] = var.type.dtype
        elif var.type.ndim == 0:  # a 0-d array of another dtype: one buffer, refilled each step
            temps += 1
            pre.append(f"_pm_tmp{temps} = np.empty((), dtype=np.{var.type.dtype})")
            lines.append(f"_pm_tmp{temps}[()] = {expr}")
            lines.append(f"{name} = _pm_tmp{temps}")
        else:
            lines.append(f"{name} = {expr}")

    pre.append(f"_pm_n = {names[0]}[()]")
    # sequences: row i
    for outer, inner in zip(op.outer_seqs(names), op.inner_seqs(fgraph.inputs), strict=True):
        read(inner, f"{outer}[_pm_i]", True)

    # buffers with taps: (outer name, inner inputs, input taps, output taps, kind)
    buffers = []
    mm_out = list(info.mit_mot_out_slices)
    for k, (outer, taps) in enumerate(zip(op.outer_mitmot(names), info.mit_mot_in_slices, strict=True)):
        start = sum(len(t) for t in info.mit_mot_in_slices[:k])
        buffers.append((outer, op.inner_mitmot(fgraph.inputs)[start : start + len(taps)], taps, mm_out[k], "mitmot"))
    for k, (outer, taps) in enumerate(zip(op.outer_mitsot(names), info.mit_sot_in_slices, strict=True)):
        start = sum(len(t) for t in info.mit_sot_in_slices[:k])
        buffers.append((outer, op.inner_mitsot(fgraph.inputs)[start : start + len(taps)], taps, (0,), "mitsot"))
    for outer, inner, taps in zip(op.outer_sitsot(names), op.inner_sitsot(fgraph.inputs), info.sit_sot_in_slices, strict=True):
        buffers.append((outer, [inner], taps, (0,), "sitsot"))
    for outer in op.outer_nitsot(names):
        buffers.append((outer, [], (), (0,), "nitsot"))
    if len(buffers) != len(node.outputs):
        return None

    inner_outs = list(returned)
    out_vars = list(fgraph.outputs)
    writes: list[str] = []
    advance: list[str] = []
    post: list[str] = []
    results: list[str] = []
    positions: dict[tuple[str, int], str] = {}
    at = 0  # next inner output
    for k, (outer, inner_vars, in_taps, out_taps, kind) in enumerate(buffers):
        store, size = f"_pm_st{k}", f"_pm_len{k}"
        if kind == "nitsot":
            var = out_vars[at]
            if not _is_tensor(var):
                return None
            pre.append(f"{size} = {outer}[()]")
            dtype = var.type.dtype
            if all(d is not None for d in var.type.shape):
                shape = ", ".join([size, *map(str, var.type.shape)])
                pre.append(f"{store} = np.empty(({shape},), dtype=np.{dtype})")
            else:
                zeros = ", ".join([size] + ["0"] * var.type.ndim)
                pre.append(f"{store} = np.empty(({zeros},), dtype=np.{dtype})")
                writes.append(f"if _pm_i == 0:\n    {store} = np.empty(({size},) + {inner_outs[at]}.shape, dtype=np.{dtype})")
        else:
            if not _is_tensor(node.inputs[1 + info.n_seqs + k]):
                return None
            copy = outer if k in op.destroy_map else f"np.copy({outer})"
            pre.append(f"{store} = {copy}")
            pre.append(f"{size} = {store}.shape[0]")
        lookback = -min(0, *in_taps) if in_taps else 0

        def position(offset: int, size=size) -> str:
            """The counter holding ``(i + offset) % size``: set before the loop, advanced by one per step."""
            if (size, offset) not in positions:
                q = positions[size, offset] = f"_pm_q{len(positions)}"
                pre.append(f"{q} = {offset} % {size} if {size} > 0 else 0")
                advance.append(f"{q} += 1\nif {q} == {size}:\n    {q} = 0")
            return positions[size, offset]

        pre.append(f"if _pm_n > 0 and {size} == 0:\n    raise ZeroDivisionError('integer modulo by zero')")
        for var, tap in zip(inner_vars, in_taps, strict=True):
            read(var, f"{store}[{position(lookback + tap)}]", True)
        for tap in out_taps:
            writes.append(f"{store}[{position(lookback + tap)}] = {inner_outs[at]}")
            at += 1
        if kind != "mitmot":
            last = max(out_taps) + lookback if kind != "nitsot" else 0
            post.append(
                f"if 1 < {size} < _pm_i + {last}:\n"
                f"    _pm_shift = (_pm_i + {last}) % {size}\n"
                f"    if _pm_shift > 0:\n"
                f"        {store} = np.concatenate(({store}[_pm_shift:], {store}[:_pm_shift]))\n"
                + (
                    f"elif {size} > _pm_i + {last}:\n    {store} = {store}[:_pm_i + {last}]"
                    if info.as_while
                    else f"elif {size} > _pm_i + {last}:\n    {store}[_pm_i + {last}:] = 0"
                )
            )
        results.append(store)
    if at != len(inner_outs) - int(info.as_while):
        return None

    for outer, inner in zip(op.outer_non_seqs(names), op.inner_non_seqs(fgraph.inputs), strict=True):
        if _is_tensor(inner) and held(inner):
            read(inner, f"{outer}[()]", False)
        else:
            pre.append(f"{inner_in[inner]} = {outer}")

    done = scalars.rewrite(stmts, nodes, [type(n.op).__name__ for n in nodes], env, initial=initial)
    if done is None:
        body, held_names, stack = [ast.unparse(s) for s in stmts], frozenset(initial), ()
    else:
        body, held_names, stack = done.body, done.scalars, done.buffers
        env.update(done.env)
    for buffer, dtype, n in stack:
        pre.append(f"{buffer} = _pm_stack({n}, {dtype})")
    env.update({scalars.BUFFERS[d][1]: np.dtype(d).type for d in scalars.BUFFERS})

    loop = list(reads) + body + writes + ["_pm_i += 1"] + advance
    if info.as_while:
        cond = inner_outs[-1]
        loop.append(f"if {cond if cond in held_names else cond + '[()]'}:\n    break")

    def block(lines, depth):
        return "".join(f"{'    ' * depth}{line}\n" for stmt in lines for line in stmt.splitlines())

    src = (
        f"def scan({', '.join(names)}):\n"
        + block(pre, 1)
        + "    _pm_i = 0\n"
        + "    while _pm_i < _pm_n:\n"
        + block(loop, 2)
        + block(post, 1)
        + f"    return {', '.join(results)}\n"  # one output: the array itself, as pytensor's Scan returns
    )
    return src, env


def funcify(op, node):
    """``(numba function, cache key)`` of ``node``'s Scan as one loop function, or None to use stock's."""
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler.salt import compile_salt

    info = op.info
    if info.n_untraced_sit_sot or not all(_is_tensor(o) for o in node.outputs):
        return None
    fgraph = _prepared_inner(op, node)
    step = _step_statements(fgraph)
    if step is None:
        return None
    made = _generate(op, node, fgraph, step)
    if made is None:
        return None
    src, env = made
    fn = compile_numba_function_src(src, "scan", env, env)
    step_key = step[-1]
    key = None
    if step_key is not None:
        types_ = [str(v.type) for v in (*node.inputs, *node.outputs)]
        key = "pmfast_scan_" + hashlib.sha256(repr((VERSION, step_key, src, types_, sorted(op.destroy_map.items()))).encode()).hexdigest()
        key = f"{key}_{compile_salt()}"
    return numba_njit(fn, boundscheck=False), key
