"""pmfast's numba ``Elemwise``: two numba functions per node where pytensor compiles four.

pytensor compiles a ``*args`` cache wrapper, an ``@overload`` implementation that calls the
``_vectorized`` loop intrinsic, ``store_core_outputs`` and the scalar function, each finalised with
everything below it linked in again. Here the node function calls the same intrinsic with the same
arguments (:func:`funcify`), and its core function is the scalar graph's own body followed by the
stores (:func:`_scalar_code`). Same loops, same scalar code.
"""

from __future__ import annotations

import hashlib

from pmfast.compiler.arity import MAX_ARITY

#: Bump when the generated code changes (part of the cache keys; 9 continues the count of
#: ``pmfast.compiler.ops``, where this code was).
VERSION = 9

#: A Composite's core inlines its scalar op functions up to this many statements, and calls them
#: beyond (see :func:`_scalar_code`).
CORE_INLINE_MAX = 64


def _star_call(call) -> bool:
    """Whether CPython passes ``call``'s arguments as one tuple (``CALL_FUNCTION_EX``): ``f(*xs)``, or wide."""
    import ast

    return len(call.args) > MAX_ARITY or any(isinstance(a, ast.Starred) for a in call.args)


def _local_names_in_order(fdef):
    """``fdef`` with its arguments and assigned names renamed ``_pm_v0, _pm_v1, …`` in order of appearance.

    pytensor writes a Composite's function with its scalar variables' names, and
    ``Composite.__str__`` (pytensor prints graphs while converting them) names the
    variables used twice ``t<k>``, ``k`` their place in a set ordered by memory address:
    once a Composite has been printed, each process wrote different source for it, and
    the source is part of the cache key (a data-hoisted copy of a compiled graph missed
    the cache in every process). Renaming the locals changes nothing else: globals (the
    scalar functions, constants) keep their names.
    """
    import ast

    names: dict[str, str] = {}

    def local(name):
        return names.setdefault(name, f"_pm_v{len(names)}")

    for a in fdef.args.args:
        a.arg = local(a.arg)
    for stmt in fdef.body:
        for target in getattr(stmt, "targets", ()):
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    local(n.id)
    for n in ast.walk(fdef):
        if isinstance(n, ast.Name) and n.id in names:
            n.id = names[n.id]
    return fdef


def _scalar_code(scalar_op, scalar_fn, ins, temps) -> tuple[list[str], dict]:
    """Statements computing ``temps`` from ``ins`` with ``scalar_op``, and the globals they need.

    A Composite's scalar graph function (a straight line of scalar op calls)
    is inlined statement by statement; any other scalar op is called. The
    scalar op functions are inlined copies (:mod:`pmfast.compiler.inline`),
    except where a call passes its arguments as one tuple (``CALL_FUNCTION_EX``:
    ``add(*(x0, …))``, which pytensor writes for wide calls, or more than
    :data:`MAX_ARITY` arguments), which numba can't inline ("Calling a closure
    with *args is unsupported": a 41-term Add in a Composite, hier_var without
    ``wide_split``).

    A scalar graph of more than :data:`CORE_INLINE_MAX` statements calls its
    scalar op functions, as pytensor's Composite does. Each inlined call splits
    the core's IR into new blocks, and numba's passes after inlining (the
    inliner's post-processing, SSA, phi stripping, IR legalisation) compute
    liveness over all of them by fixed-point iteration over the whole
    function: their cost grows with blocks × variables. ar2_scan's 405-node
    index-arithmetic Composite (130 Switches: branches) cost 35 CPU s to
    compile with its calls inlined, 3.4 s with them called; a 42-node one
    0.62 vs 0.48 s, a 70-node one 1.14 vs 0.88 s (each alone in a fresh
    process). Smaller graphs keep inlining: in the zoo only ar2_scan's two
    Composites exceed the limit, so every other core stays as it was. A called
    function is linked into the core and optimised with it. The choice
    depends on the scalar graph only (never on the cache).
    """
    import ast

    from pytensor.scalar.basic import Composite

    from pmfast.compiler import inline

    env: dict = {}
    fdef = None
    if isinstance(scalar_op, Composite):
        fdef = ast.parse(scalar_fn.py_func.__source__).body[0]
        ok = isinstance(fdef, ast.FunctionDef) and not fdef.args.vararg and len(fdef.args.args) == len(ins)
        fdef = _local_names_in_order(fdef) if ok and isinstance(fdef.body[-1], ast.Return) else None
    if fdef is None:
        env["scalar_fn"] = (len(ins) <= MAX_ARITY and inline.scalar_inline_version(scalar_fn)) or scalar_fn
        return [f"{', '.join(temps)} = scalar_fn({', '.join(ins)})"], env
    env.update(scalar_fn.py_func.__globals__)
    if len(fdef.body) > CORE_INLINE_MAX:
        called = set(env)
    else:
        called = {c.func.id for c in ast.walk(fdef) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and _star_call(c)}
    for name, value in list(env.items()):
        if name in called or not isinstance(value, inline._dispatcher_type()):
            continue
        if (copy := inline.scalar_inline_version(value)) is not None:
            env[name] = copy
    lines = [f"{a.arg} = {i}" for a, i in zip(fdef.args.args, ins)]
    lines += [ast.unparse(stmt) for stmt in fdef.body[:-1]]
    lines.append(f"{', '.join(temps)} = {ast.unparse(fdef.body[-1].value)}")
    return lines, env


def _vectorized_source(op, node, scalar_fn, scalar_key) -> tuple[str, dict]:
    """``elemwise(i0, …)`` calling pytensor's ``_vectorized`` loop with a core function made of the scalar code."""
    from pytensor import config
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit
    from pytensor.link.numba.dispatch.vectorize_codegen import encode_literals

    from pmfast.compiler import pure
    from pmfast.compiler.salt import compile_salt

    nin, nout = len(node.inputs), len(node.outputs)
    ins, outs, temps = ([f"_pm_{c}{k}" for k in range(n)] for c, n in (("i", nin), ("o", nout), ("t", nout)))
    lines, core_env = _scalar_code(op.scalar_op, scalar_fn, ins, temps)
    lines += [f"{o}[()] = {t}" for o, t in zip(outs, temps)]
    core_src = f"def core({', '.join(ins + outs)}):\n" + "".join(f"    {line}\n" for line in lines)
    core_env["__name__"] = __name__
    core_func = compile_numba_function_src(core_src, "core", core_env, core_env)
    if scalar_key is not None:
        # the source names the scalar ops' functions and constants: the scalar key covers what they are
        core_key = hashlib.sha256(repr((VERSION, scalar_key, core_src)).encode()).hexdigest()
        CACHED_SRC_FUNCTIONS[core_func] = f"pmfast_core_{core_key}_{compile_salt()}_fastmath{int(config.numba__fastmath)}"
    core = numba_njit(core_func, cache=scalar_key is not None)  # shared by every node with this scalar code
    literals = (
        tuple(i.type.broadcastable for i in node.inputs),
        tuple(o.type.broadcastable for o in node.outputs),
        tuple(o.type.dtype for o in node.outputs),
        tuple(op.inplace_pattern.items()),
    )
    args = ", ".join(f"i{k}" for k in range(nin))
    src = (
        f"def elemwise({args}):\n"
        f"    return _vectorized(core, IBC, OBC, ODT, INPLACE, True, (), ({args},), CORE_SHAPES, None)\n"
    )
    env = dict(zip(("IBC", "OBC", "ODT", "INPLACE"), map(encode_literals, literals), strict=True))
    env.update(_vectorized=pure.vectorized(), core=core, CORE_SHAPES=tuple(() for _ in range(nout)))
    return src + "\n# core:\n" + core_src, env


def funcify(op, node):
    """``(numba function, cache key)`` of a plain ``Elemwise`` node: the loop of :func:`_vectorized_source`."""
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, numba_njit
    from pytensor.scalar.basic import get_scalar_type

    from pmfast.compiler import native

    scalar_node = op.scalar_op.make_node(*[get_scalar_type(dtype=i.type.dtype)() for i in node.inputs])
    scalar_fn, scalar_key = numba_funcify_and_cache_key(op.scalar_op, node=scalar_node)
    src, env = _vectorized_source(op, node, scalar_fn, scalar_key)
    # the loop's literals are globals, not source: the key must name them. The
    # inplace pattern is in no other part of it, and an in-place loop run for a
    # node that is not in-place overwrites an input its graph reads again
    literals = tuple(env[name] for name in ("IBC", "OBC", "ODT", "INPLACE"))
    env.update(__name__=__name__, _pm_empty=native.empty)
    py_func = compile_numba_function_src(src.split("\n# core:\n")[0], "elemwise", env, env)
    fn = numba_njit(py_func)
    key = None
    if scalar_key is not None:
        types_ = [(v.type.dtype, v.type.broadcastable) for v in (*node.inputs, *node.outputs)]
        key = "pmfast_elemwise_" + hashlib.sha256(repr((VERSION, types_, literals, scalar_key, src)).encode()).hexdigest()
    return fn, key
