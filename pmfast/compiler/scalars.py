"""0-d values as numba scalars inside an entry, not as 0-d arrays.

A graph function passes every value between node functions as an array; a
0-d result is a heap-allocated 0-d array (numba's meminfo, ``malloc``,
``free``, reference counts). The scalar parameters of a hierarchical model
make most of a small model's nodes 0-d: radon_intercept's entry made 17
allocations per call, 13 of them 0-d values (the scalar Composites of
``scalarize``, the sums, the fused loop's totals, the point's scalar entries);
with this module, 4.

Inside the entry (:mod:`pmfast.compiler.entry`) these statements hold their
float64 (and bool, int64) 0-d results as numba scalars instead:

* an ``Elemwise`` whose inputs and outputs are all 0-d and whose node
  function is pmfast's (:mod:`pmfast.compiler.elemwise`): its core function's
  scalar code, returning the values instead of storing them. int64 outputs
  too (a data length's arithmetic: stoch_vol's random walk computes its
  innovations' count), else the node's core is one more function compiled
  per model (~0.05 CPU s on a used machine), but only where no output is a
  float: the scalar code is inlined with the entry's fast-math flags, not
  its core's (which has ``reassoc``), and a Composite computing floats next
  to its integers that was a core function before would round differently
  (ar2_scan's index arithmetic Composite: 2 of 48 gradient values 1 ulp
  off). Integer arithmetic rounds nothing, so all-integer (and bool) ones
  give the same values;
* a ``Subtensor`` taking one element (integer indices only): ``x[i]``, the
  expression pytensor's implementation evaluates;
* a fused loop (:mod:`pmfast.loops`): the same loop returning its totals
  instead of copying each into a new 0-d array;
* a ``Sum`` over all axes whose accumulator is its output dtype: of a vector,
  :func:`lane_sum_function` (32 partial sums in a fixed order, four 8-lane
  vectors: the entry is compiled without ``reassoc``, so ``x.sum()`` is one
  chain of dependent additions, 4 cycles per element; stock's ``reassoc`` sum
  vectorizes, and the lane sum matches it: 4,997 elements 0.34 µs, 0.69 µs
  with 8 scalar partial sums, which LLVM's SLP pass left scalar); of more axes, ``x.sum()`` as pytensor's ``impl_sum``.

The scalar code is the node functions' own, so the values are theirs (the
vector sums round differently from a serial sum, deterministically: their
association is fixed). A consumer that needs an array gets a view of a slot
in the entry's stack frame (:func:`pmfast.compiler.native.stack_buffer`)
holding the value: a ``(1,)`` view for an ``ExpandDims`` of it, a 0-d view
otherwise. The graph function itself is unchanged. Done only where the
entry inlines its node functions (:mod:`pmfast.compiler.inline`; the scalar
forms are inlined with them): called, each would be one more function to
compile.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

#: dtypes held as numba scalars, and the entry's names of their stack slots and numpy types.
BUFFERS = {
    "float64": ("_pm_sbuf", "_pm_t_float64"),
    "bool": ("_pm_bbuf", "_pm_t_bool"),
    "int64": ("_pm_ibuf", "_pm_t_int64"),
}


@dataclass
class ScalarBody:
    """The entry body with 0-d values as scalars: statements, their ops, new globals, names held as scalars,
    and the stack buffers it uses (``(name, numpy type's global name, slots)``)."""

    body: list[str]
    ops: list[str | None]
    env: dict = field(default_factory=dict)
    scalars: frozenset = frozenset()
    buffers: tuple = ()


def _call(stmt):
    value = stmt.value if isinstance(stmt, ast.Assign) else None
    return value if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) else None


def _targets(stmt) -> list[str] | None:
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    t = stmt.targets[0]
    elts = t.elts if isinstance(t, ast.Tuple) else [t]
    return [e.id for e in elts] if all(isinstance(e, ast.Name) for e in elts) else None


def _names(args) -> list[str] | None:
    return [a.id for a in args] if all(isinstance(a, ast.Name) for a in args) else None


def _scalar_core(dispatcher, n_out: int):
    """A numba function returning what pmfast's Elemwise node function ``dispatcher`` stores, or None.

    Built from the node function's core (:func:`pmfast.compiler.elemwise._vectorized_source`):
    the same statements, the stores ``_pm_oK[()] = _pm_tK`` replaced by a return.
    """
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import inline

    inner = inline.inner_function(dispatcher)
    core = getattr(inner, "py_func", None) and inner.py_func.__globals__.get("core")
    src = getattr(getattr(core, "py_func", None), "__source__", None)
    if src is None:
        return None
    fdef = ast.parse(src).body[0]
    if not isinstance(fdef, ast.FunctionDef):
        return None
    params = [a.arg for a in fdef.args.args]
    n_in = len(params) - n_out
    outs, ins = params[n_in:], params[:n_in]
    stores = fdef.body[-n_out:]
    temps = []
    for stmt, o in zip(stores, outs, strict=True):
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == o):
            return None
        if not isinstance(stmt.value, ast.Name):
            return None
        temps.append(stmt.value.id)
    uses = {n.id for s in fdef.body[:-n_out] for n in ast.walk(s) if isinstance(n, ast.Name)}
    if uses & set(outs):
        return None
    lines = [ast.unparse(s) for s in fdef.body[:-n_out]]
    lines.append(f"return {', '.join(temps)}" + ("," if n_out == 1 else ""))
    new_src = f"def scalar_core({', '.join(ins)}):\n" + "".join(f"    {line}\n" for line in lines)
    env = dict(core.py_func.__globals__)
    return numba_njit(compile_numba_function_src(new_src, "scalar_core", env, env))


def lane_sum_function():
    """What the entry sums vectors with: :func:`pmfast.compiler.entry_native.lane_sum`, an intrinsic.

    32 partial sums (``entry_native.LANES``; 8 for what is left in blocks of 8), combined in a
    fixed tree, then the remaining elements: a fixed order, as four 8-lane vectors on a
    contiguous array. It was an ``inline="always"`` numba function: ~70 IR statements
    (10 loop-carried variables) typed, lowered and SSA-fixed again at each call site.
    """
    from pmfast.compiler import entry_native

    return entry_native.lane_sum


def _scalar_loop(dispatcher, outputs):
    """``(function, positions)``: pmfast's fused loop ``dispatcher`` returning its 0-d totals as scalars, or None.

    The loop's source (:mod:`pmfast.loops.codegen`) ends with ``outK = np.array(accK)``
    (``_pm_array1(accK)`` once :mod:`pmfast.compiler.arrays` rewrote it) for each total and returns the ``outK``: the copy returns ``accK`` itself for the
    totals whose dtype the entry holds as scalars (``positions``: their output indices).
    """
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import inline

    inner = inline.inner_function(dispatcher)
    src = getattr(getattr(inner, "py_func", None), "__source__", None)
    if src is None:
        return None
    tree = ast.parse(src)
    fdef = tree.body[-1]
    if not isinstance(fdef, ast.FunctionDef) or not isinstance(fdef.body[-1], ast.Return):
        return None
    ret = fdef.body[-1].value
    names = ret.elts if isinstance(ret, ast.Tuple) else [ret]
    if len(names) != len(outputs) or not all(isinstance(n, ast.Name) for n in names):
        return None
    where = {n.id: i for i, n in enumerate(names)}
    positions = []
    for stmt in fdef.body:
        target = _targets(stmt)
        value = stmt.value if isinstance(stmt, ast.Assign) else None
        if target is None or len(target) != 1 or target[0] not in where or not isinstance(value, ast.Call):
            continue
        func = value.func
        is_copy = _is_array_copy(func)
        i = where[target[0]]
        if is_copy and len(value.args) == 1 and not value.keywords and _is_scalar(outputs[i]):
            stmt.value = value.args[0]
            positions.append(i)
    if not positions:
        return None
    fdef.name = "scalar_loop"
    env = inner.py_func.__globals__
    return numba_njit(compile_numba_function_src(ast.unparse(fdef), "scalar_loop", env, env), fastmath=False), positions


def _is_array_copy(func) -> bool:
    """Whether ``func`` is ``np.array`` or its intrinsic (:func:`pmfast.compiler.arrays.rewrite_source`)."""
    from pmfast.compiler.arrays import NAMES, array1

    if isinstance(func, ast.Name):
        return NAMES.get(func.id) is array1
    return isinstance(func, ast.Attribute) and func.attr == "array" and isinstance(func.value, ast.Name) and func.value.id == "np"


def _is_scalar(var, dtypes=tuple(BUFFERS)) -> bool:
    return getattr(var.type, "ndim", None) == 0 and getattr(var.type, "dtype", None) in dtypes


def _kind(node, dispatcher) -> str | None:
    """How the entry computes ``node`` with float results: ``elemwise``, ``element``, ``sum``, or None."""
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.math import Sum
    from pytensor.tensor.subtensor import Subtensor

    from pmfast.compiler import inline

    op = node.op
    if not all(_is_scalar(o) for o in node.outputs):
        return None
    if isinstance(op, Elemwise):
        if not all(i.type.ndim == 0 for i in node.inputs):
            return None
        return "elemwise" if not _mixes_ints_and_floats(node) else None
    if not _is_scalar(node.outputs[0], ("float64",)):
        return None
    if type(op) is Subtensor:
        x = node.inputs[0]
        if len(op.idx_list) == x.type.ndim and not any(isinstance(e, slice) for e in op.idx_list):
            if all(getattr(i.type, "dtype", "").startswith(("int", "uint")) for i in node.inputs[1:]):
                return "element"
        return None
    if isinstance(op, Sum) and node.inputs[0].type.ndim >= 1 and node.inputs[0].type.dtype == "float64":
        axes = op.axis if op.axis is not None else tuple(range(node.inputs[0].type.ndim))
        acc = getattr(op, "acc_dtype", None) or "float64"
        inner = inline.inner_function(dispatcher)
        is_impl_sum = inner is not None and inner.py_func.__name__ == "impl_sum"
        if len(axes) == node.inputs[0].type.ndim and acc == "float64" and is_impl_sum:
            return "sum"
    return None


def _mixes_ints_and_floats(node) -> bool:
    """Whether ``node`` has both int64 and float64 outputs (left to its core: see the module docstring)."""
    dtypes = {o.type.dtype for o in node.outputs}
    return "int64" in dtypes and "float64" in dtypes


def _expand_dims_of_scalar(node) -> bool:
    from pytensor.tensor.elemwise import DimShuffle

    return isinstance(node.op, DimShuffle) and node.inputs[0].type.ndim == 0 and tuple(node.op.new_order) == ("x",)


def _passes_through(node) -> str | None:
    """How ``node`` returns its 0-d first input's value: ``"copy"`` for a ``DeepCopyOp`` / ``ViewOp`` of
    it, ``"check"`` for a ``CheckAndRaise`` (``Assert``, ``Check{…}``) whose node function returns
    ``x`` after its tests; None if it does not."""
    from pytensor.compile.ops import DeepCopyOp, ViewOp
    from pytensor.raise_op import CheckAndRaise

    if not (len(node.outputs) == 1 and _is_scalar(node.outputs[0]) and node.inputs[0].type == node.outputs[0].type):
        return None
    if type(node.op) in (DeepCopyOp, ViewOp):
        return "copy"
    return "check" if isinstance(node.op, CheckAndRaise) else None


def rewrite(stmts, nodes, ops, env: dict, initial: dict | None = None) -> ScalarBody | None:
    """The entry body of graph statements ``stmts`` (one per node of ``nodes``, in order) with 0-d floats.

    ``ops`` are the statements' op names, ``env`` the graph function's globals. ``initial``: names
    that are scalars before the first statement (``{name: dtype}``, a Scan step's 0-d inputs,
    :mod:`pmfast.compiler.scan`); with it, copies and checks of a scalar keep it a scalar too
    (:func:`_passes_through`). None if no statement changes.
    """
    scalars: dict[str, str] = dict(initial or {})  # name held as a scalar -> its dtype
    views: dict[str, str] = {}  # scalar name -> name of its 0-d view, once made
    out_body: list[str] = []
    out_ops: list[str | None] = []
    new_env: dict = {}
    slots = dict.fromkeys(BUFFERS, 0)
    changed = False
    cores: dict = {}
    loop_scalars: dict[str, str] = {}

    def slot_for(name: str) -> tuple[str, int]:
        dtype = scalars[name]
        buffer, k = BUFFERS[dtype][0], slots[dtype]
        slots[dtype] += 1
        return buffer, k

    def as_array(name: str) -> str:
        if name not in views:
            buffer, k = slot_for(name)
            views[name] = f"{name}_pm_view"
            out_body.append(f"{views[name]} = _pm_store_cell({buffer}, {k}, {name})")
            out_ops.append(None)
        return views[name]

    for stmt, node, op in zip(stmts, nodes, ops, strict=True):
        call, targets = _call(stmt), _targets(stmt)
        args = _names(call.args) if call is not None else None
        ok = args is not None and targets is not None and len(targets) == len(node.outputs) and len(args) == len(node.inputs)
        kind = _kind(node, env.get(call.func.id)) if ok else None
        if kind == "elemwise":
            fname = call.func.id
            if fname not in cores:
                cores[fname] = _scalar_core(env.get(fname), len(node.outputs))
            if cores[fname] is None:
                kind = None
        if kind is not None:
            changed = True
            ins = [a if a in scalars else f"{a}[()]" for a in args]
            if kind == "elemwise":
                name = f"_pm_scalar_{call.func.id}"
                new_env[name] = cores[call.func.id]
                out_body.append(f"{', '.join(targets)}{',' if len(targets) == 1 else ''} = {name}({', '.join(ins)})")
                out_ops.append("Elemwise")
            elif kind == "element":
                x = args[0] if args[0] not in scalars else as_array(args[0])
                out_body.append(f"{targets[0]} = {x}[{', '.join(args[1:])}]")
                out_ops.append(None)
            elif node.inputs[0].type.ndim == 1:
                new_env["_pm_lane_sum"] = lane_sum_function()
                out_body.append(f"{targets[0]} = _pm_lane_sum({args[0]})")
                out_ops.append(None)
            else:
                out_body.append(f"{targets[0]} = {args[0]}.sum()")
                out_ops.append(None)
            scalars.update((t, o.type.dtype) for t, o in zip(targets, node.outputs, strict=True))
            continue
        passes = _passes_through(node) if ok and initial is not None and args[0] in scalars else None
        if passes is not None:
            changed = True
            if passes == "copy":
                out_body.append(f"{targets[0]} = {args[0]}")
            else:  # the check's node function returns x itself, a scalar here
                out_body.append(f"{targets[0]} = {call.func.id}({', '.join(args)})")
            out_ops.append(None)
            scalars[targets[0]] = node.outputs[0].type.dtype
            continue
        if ok and _expand_dims_of_scalar(node) and args[0] in scalars:
            changed = True
            buffer, k = slot_for(args[0])
            out_body.append(f"{targets[0]} = _pm_store_slot({buffer}, {k}, {args[0]})")
            out_ops.append(None)
            continue
        if ok and op == "IndexedElemwise" and any(_is_scalar(o) for o in node.outputs):
            fname = call.func.id
            if fname not in cores:
                cores[fname] = _scalar_loop(env.get(fname), node.outputs)
            if cores[fname] is not None:
                fn, positions = cores[fname]
                new_env[f"_pm_scalar_{fname}"] = fn
                stmt = ast.Assign(stmt.targets, ast.Call(ast.Name(f"_pm_scalar_{fname}", ast.Load()), call.args, call.keywords), lineno=0)
                loop_scalars = {targets[i]: node.outputs[i].type.dtype for i in positions}
        used = sorted({n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name) and n.id in scalars}) if isinstance(stmt, ast.Assign) else []
        if used:
            changed = True
            mapping = {n: as_array(n) for n in used}

            class _Swap(ast.NodeTransformer):
                def visit_Name(self, n):
                    return ast.copy_location(ast.Name(mapping.get(n.id, n.id), n.ctx), n)

            stmt = ast.Assign(stmt.targets, _Swap().visit(stmt.value), lineno=0)
        out_body.append(ast.unparse(stmt))
        out_ops.append(op)
        if loop_scalars:
            changed = True
            scalars.update(loop_scalars)
            loop_scalars = {}
    if not changed:
        return None
    import numpy as np

    buffers = tuple((BUFFERS[d][0], BUFFERS[d][1], n) for d, n in slots.items() if n)
    new_env.update({BUFFERS[d][1]: np.dtype(d).type for d, n in slots.items() if n})
    return ScalarBody(out_body, out_ops, new_env, frozenset(scalars), buffers)
