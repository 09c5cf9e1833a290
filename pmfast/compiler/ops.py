"""numba implementations of pytensor ops that pmfast's linker uses instead of pytensor's own.

Each replaces an implementation whose compile pulls numba generic code into
every new process (see :mod:`pmfast.compiler.overloads`) with one that
behaves the same: same results, same exception type and message.

* ``SpecifyShape``: pytensor's asserts with an f-string message formatted in
  numba (``str(int)``, concatenation… ~1.3 s of hier_logistic's cold
  compile). Here a failed check raises :class:`SpecifyShapeError`, an
  ``AssertionError`` carrying the numbers, formatted in Python with
  pytensor's message.
* ``Elemwise``: pytensor compiles four numba functions per node (a ``*args``
  cache wrapper, an ``@overload`` implementation that calls the
  ``_vectorized`` loop intrinsic, ``store_core_outputs`` and the scalar
  function), each finalised with everything below it linked in again. Here
  two: the node function calls the same intrinsic with the same arguments,
  and its core function is the scalar graph's own body followed by the
  stores. Same loops, same scalar code.

:func:`funcify_and_cache_key` returns ``(numba function, cache key)`` for an
op pmfast implements, or None; the functions are generated from source with
only globals (numba caches them directly, without pytensor's ``*args``
wrapper) and the keys are pmfast's own (never shared with pytensor's
entries).
"""

from __future__ import annotations

import hashlib

#: Bump when an implementation here changes (part of its cache key).
VERSION = 1


class SpecifyShapeError(AssertionError):
    """pytensor's ``SpecifyShape`` check failure; numba raises it with ``(dim, actual, expected)``."""

    def __init__(self, *args):
        if len(args) == 3 and not isinstance(args[0], str):
            dim, actual, expected = args
            args = (f"SpecifyShape: dim {dim} of input has shape {actual}, expected {expected}.",)
        super().__init__(*args)


def _specify_shape(op, node):
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit
    from pytensor.tensor.type_other import NoneConst

    names = [f"shape_{i}" for i in range(len(node.inputs) - 1)]
    checks = [
        f"    if x.shape[{i}] != {name}[()]:\n        raise SpecifyShapeError({i}, x.shape[{i}], {name}[()])"
        for i, (name, inp) in enumerate(zip(names, node.inputs[1:], strict=True))
        if inp is not NoneConst
    ]
    src = f"def specify_shape(x, {', '.join(names)}):\n" + "\n".join(checks) + "\n    return x\n"
    key = "pmfast_specify_shape_" + hashlib.sha256(repr((VERSION, src)).encode()).hexdigest()
    env = {"SpecifyShapeError": SpecifyShapeError, "__name__": __name__}
    fn = compile_numba_function_src(src, "specify_shape", env, env)
    return numba_njit(fn), key


def _core_source(scalar_op, scalar_fn, nin: int, nout: int) -> tuple[str, dict]:
    """Source and globals of ``core(i0…, o0…)``: the scalar code, then ``o<k>[()] = t<k>``.

    A Composite's scalar graph function (a straight line of scalar op calls)
    is inlined; any other scalar op is called.
    """
    import ast

    from pytensor.scalar.basic import Composite

    ins = [f"_pm_i{k}" for k in range(nin)]
    outs = [f"_pm_o{k}" for k in range(nout)]
    temps = [f"_pm_t{k}" for k in range(nout)]
    body: list[str] = []
    env = {"__name__": __name__}
    fdef = None
    if isinstance(scalar_op, Composite):
        fdef = ast.parse(scalar_fn.py_func.__source__).body[0]
        ok = isinstance(fdef, ast.FunctionDef) and not fdef.args.vararg and len(fdef.args.args) == nin
        fdef = fdef if ok and isinstance(fdef.body[-1], ast.Return) else None
    if fdef is not None:
        env.update(scalar_fn.py_func.__globals__)
        env["__name__"] = __name__
        body += [f"{a.arg} = {i}" for a, i in zip(fdef.args.args, ins)]
        body += [ast.unparse(stmt) for stmt in fdef.body[:-1]]
        body.append(f"{', '.join(temps)} = {ast.unparse(fdef.body[-1].value)}")
    else:
        env["scalar_fn"] = scalar_fn
        body.append(f"{', '.join(temps)} = scalar_fn({', '.join(ins)})")
    body += [f"{o}[()] = {t}" for o, t in zip(outs, temps)]
    src = f"def core({', '.join(ins + outs)}):\n" + "".join(f"    {line}\n" for line in body)
    return src, env


def _elemwise(op, node):
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, numba_njit
    from pytensor.link.numba.dispatch.vectorize_codegen import _vectorized, encode_literals
    from pytensor.scalar.basic import get_scalar_type

    scalar_node = op.scalar_op.make_node(*[get_scalar_type(dtype=i.type.dtype)() for i in node.inputs])
    scalar_fn, scalar_key = numba_funcify_and_cache_key(op.scalar_op, node=scalar_node)
    nin, nout = len(node.inputs), len(node.outputs)
    core_src, core_env = _core_source(op.scalar_op, scalar_fn, nin, nout)
    core = numba_njit(compile_numba_function_src(core_src, "core", core_env, core_env))

    literals = (
        tuple(i.type.broadcastable for i in node.inputs),
        tuple(o.type.broadcastable for o in node.outputs),
        tuple(o.type.dtype for o in node.outputs),
        tuple(op.inplace_pattern.items()),
    )
    ins = ", ".join(f"i{k}" for k in range(nin))
    src = (
        f"def elemwise({ins}):\n"
        f"    return _vectorized(core, IBC, OBC, ODT, INPLACE, True, (), ({ins},), CORE_SHAPES, None)\n"
    )
    env = dict(zip(("IBC", "OBC", "ODT", "INPLACE"), map(encode_literals, literals), strict=True))
    env.update(__name__=__name__, _vectorized=_vectorized, core=core, CORE_SHAPES=tuple(() for _ in range(nout)))
    fn = numba_njit(compile_numba_function_src(src, "elemwise", env, env))
    key = None
    if scalar_key is not None:
        key = "pmfast_elemwise_" + hashlib.sha256(repr((VERSION, literals, scalar_key, core_src, src)).encode()).hexdigest()
    return fn, key


def funcify_and_cache_key(op, node):
    """pmfast's ``(numba function, cache key)`` for ``op``, or None to use pytensor's."""
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.shape import SpecifyShape

    if node is None:
        return None
    if isinstance(op, SpecifyShape):
        return _specify_shape(op, node)
    if type(op) is Elemwise:
        return _elemwise(op, node)
    return None
