"""numba implementations of pytensor ops that pmfast's linker uses instead of pytensor's own.

Each replaces an implementation whose compile pulls numba generic code into
every new process (see :mod:`pmfast.compiler.overloads`) with one that
behaves the same: same results, same exception type and message.

* ``SpecifyShape``: pytensor's asserts with an f-string message formatted in
  numba (``str(int)``, concatenation… ~1.3 s of hier_logistic's cold
  compile). Here a failed check raises :class:`SpecifyShapeError`, an
  ``AssertionError`` carrying the numbers, formatted in Python with
  pytensor's message, through one cached function shared with ``Split``
  (:func:`pmfast.compiler.raisers.shape_fail`).
* ``Elemwise``: pytensor compiles four numba functions per node (a ``*args``
  cache wrapper, an ``@overload`` implementation that calls the
  ``_vectorized`` loop intrinsic, ``store_core_outputs`` and the scalar
  function), each finalised with everything below it linked in again. Here
  two: the node function calls the same intrinsic with the same arguments,
  and its core function is the scalar graph's own body followed by the
  stores. Same loops, same scalar code.
* ``Reshape`` (to at least one axis): pytensor's ``np.reshape(np.ascontiguousarray(np.asarray(x)),
  ...)`` compiles three numba overloads in every process; here straight-line code with the same
  errors (:func:`_reshape`).
* ``DimShuffle``: pytensor's calls numba's ``as_strided`` (its overloads:
  ~0.7 s of a cold process). Here an intrinsic builds the same view
  (:func:`pmfast.compiler.native.dimshuffle`).
* scalar ``Psi`` (digamma) of float64: pytensor calls scipy's Cython function
  through a function pointer and gives up caching (key None), so every graph
  containing psi (NegativeBinomial, StudentT's nu…) was compiled again in each
  process. Here :func:`pmfast.vmath.special.psi` (pure numba, within a few ulp
  of scipy), keyed on pmfast.vmath's version. A scalar op: it is looked up by
  pmfast's ``numba_funcify_and_cache_key`` (:func:`scalar_funcify_and_cache_key`),
  which pytensor calls for each node of a Composite's scalar graph as well as
  for a lone scalar op, and only while pmfast's linker converts a graph: stock
  NUMBA mode keeps scipy's psi.
* ``Dot`` of float64 vectors and matrices where one side is a vector
  (pytensor's rewrites turn ``X @ beta`` into matrix × column: then one
  side has static length 1): pytensor calls ``np.dot``, whose numba
  implementation (BLAS calls behind layout checks and copies) costs ~0.7 s
  to compile in a new process. Here the same BLAS matrix-vector product
  (numba's own wrapper, :func:`pmfast.compiler.native.blas_dgemv`) when the
  matrix is C- or F-contiguous (the design matrix, the gradient's transpose
  of it), a loop otherwise, with numba's error for sizes that don't match.
  Vector · vector is a loop. Other matrix products stay pytensor's.

``Split`` and ``Join`` of vectors: :mod:`pmfast.compiler.split`, :mod:`pmfast.compiler.join`;
``CumOp``: :mod:`pmfast.compiler.cumop`; ``CAReduce`` over some axes: :mod:`pmfast.compiler.careduce`; ``AdvancedIncSubtensor`` with a constant index vector per
axis: :mod:`pmfast.compiler.adv_inc`, ``AdvancedSubtensor`` with them: :mod:`pmfast.compiler.adv_sub`; ``ArgSortOp`` of a vector: :mod:`pmfast.compiler.sort`; ``Shape_i``, a matrix's ``ExtractDiag``: :mod:`pmfast.compiler.small_ops`.
Dense linear algebra (``Cholesky``, ``SolveTriangular``, ``CholeskySolve``, ``LUFactor``, matrix ×
matrix ``Dot``): :mod:`pmfast.compiler.linalg`.

:func:`funcify_and_cache_key` returns ``(numba function, cache key)`` for an
op pmfast implements, or None; the functions are generated from source with
only globals (numba caches them directly, without pytensor's ``*args``
wrapper) and the keys are pmfast's own (never shared with pytensor's
entries).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from pmfast.compiler import raisers
from pmfast.compiler.arity import MAX_ARITY
from pmfast.compiler.raisers import SpecifyShapeError  # noqa: F401  (raised by the jitted check)

#: Bump when an implementation here changes (part of its cache key).
VERSION = 9

#: A Composite's core inlines its scalar op functions up to this many statements, and calls them
#: beyond (see :func:`_scalar_code`).
CORE_INLINE_MAX = 64


def _specify_shape_fail():
    """The jitted raise of a failed ``SpecifyShape`` check (:func:`pmfast.compiler.raisers.shape_fail`).

    One function for every model (its signature never changes), cached on disk by numba: the
    node functions call it instead of raising themselves, so they hold no ``raise`` with runtime
    arguments and an entry inlines them (:mod:`pmfast.compiler.inline`), instead of compiling a
    ``specify_shape`` per model and signature (~0.05 CPU s on a used machine).
    """
    return raisers.shape_fail()


def _specify_shape(op, node):
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit
    from pytensor.tensor.type_other import NoneConst

    names = [f"shape_{i}" for i in range(len(node.inputs) - 1)]
    checks = [
        f"    if x.shape[{i}] != {name}[()]:\n        _pm_shape_fail(0, {i}, x.shape[{i}], _pm_i64({name}[()]))"
        for i, (name, inp) in enumerate(zip(names, node.inputs[1:], strict=True))
        if inp is not NoneConst
    ]
    src = f"def specify_shape(x, {', '.join(names)}):\n" + "\n".join(checks) + "\n    return x\n"
    key = "pmfast_specify_shape_" + hashlib.sha256(repr((VERSION, src)).encode()).hexdigest()
    env = {"_pm_shape_fail": _specify_shape_fail(), "_pm_i64": np.int64, "__name__": __name__}
    fn = compile_numba_function_src(src, "specify_shape", env, env)
    return numba_njit(fn), key


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


def _elemwise(op, node):
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


def _dimshuffle(op, node):
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import native

    spec = native.dimshuffle_spec(op._new_order, op.drop)
    src = "def dimshuffle(x):\n    return _pm_dimshuffle(x, SPEC)\n"
    env = {"__name__": __name__, "_pm_dimshuffle": native.dimshuffle, "SPEC": spec}
    key = "pmfast_dimshuffle_" + hashlib.sha256(repr((VERSION, spec, op.input_ndim)).encode()).hexdigest()
    return numba_njit(compile_numba_function_src(src, "dimshuffle", env, env)), key


_DOT_SOURCES = {
    # (x.ndim, y.ndim): source of dot(x, y); the loop runs along the contiguous axis
    (1, 1): """
def dot(x, y):
    if x.shape[0] != y.shape[0]:
        raise ValueError("incompatible array sizes for np.dot(a, b) (vector * vector)")
    acc = 0.0
    for i in range(x.shape[0]):
        acc += x[i] * y[i]
    out = _pm_empty((), _pm_f64)
    out[()] = acc
    return out
""",
    (2, 1): """
def dot(x, y):
    m, k = x.shape
    if y.shape[0] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * vector)")
    out = _pm_empty(m, _pm_f64)
    if x.strides[0] >= x.strides[1]:
        for i in range(m):
            acc = 0.0
            for j in range(k):
                acc += x[i, j] * y[j]
            out[i] = acc
    else:
        for i in range(m):
            out[i] = 0.0
        for j in range(k):
            yj = y[j]
            for i in range(m):
                out[i] += x[i, j] * yj
    return out
""",
    # matrix x column (static length-1 second axis): matrix x vector; BLAS when the matrix is contiguous
    (2, "col"): """
def dot(x, y):
    m, k = x.shape
    if y.shape[0] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * matrix)")
    out = _pm_empty((m, 1), _pm_f64)
    c_layout = x.strides[1] == 8 and (x.strides[0] == 8 * k or m == 1)
    f_layout = x.strides[0] == 8 and (x.strides[1] == 8 * m or k == 1)
    if m > 0 and k > 0 and (c_layout or f_layout):
        v = y[:, 0]
        if v.strides[0] != 8:
            v = _pm_empty(k, _pm_f64)
            for j in range(k):
                v[j] = y[j, 0]
        if c_layout:
            _pm_gemv("t", k, m, _pm_ptr(x), k, _pm_ptr(v), _pm_ptr(out))
        else:
            _pm_gemv("n", m, k, _pm_ptr(x), m, _pm_ptr(v), _pm_ptr(out))
        return out
    for i in range(m):
        acc = 0.0
        for j in range(k):
            acc += x[i, j] * y[j, 0]
        out[i, 0] = acc
    return out
""",
    # row (static length-1 first axis) x matrix: vector x matrix, i.e. (y.T @ x.T).T
    ("row", 2): """
def dot(x, y):
    k, n = y.shape
    if x.shape[1] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * matrix)")
    out = _pm_empty((1, n), _pm_f64)
    c_layout = y.strides[1] == 8 and (y.strides[0] == 8 * n or k == 1)
    f_layout = y.strides[0] == 8 and (y.strides[1] == 8 * k or n == 1)
    if n > 0 and k > 0 and (c_layout or f_layout):
        v = x[0]
        if v.strides[0] != 8:
            v = _pm_empty(k, _pm_f64)
            for i in range(k):
                v[i] = x[0, i]
        if c_layout:
            _pm_gemv("n", n, k, _pm_ptr(y), n, _pm_ptr(v), _pm_ptr(out))
        else:
            _pm_gemv("t", k, n, _pm_ptr(y), k, _pm_ptr(v), _pm_ptr(out))
        return out
    for j in range(n):
        acc = 0.0
        for i in range(k):
            acc += x[0, i] * y[i, j]
        out[0, j] = acc
    return out
""",
    (1, 2): """
def dot(x, y):
    k, n = y.shape
    if x.shape[0] != k:
        raise ValueError("incompatible array sizes for np.dot(a, b) (vector * matrix)")
    out = _pm_empty(n, _pm_f64)
    if y.strides[1] >= y.strides[0]:
        for j in range(n):
            acc = 0.0
            for i in range(k):
                acc += x[i] * y[i, j]
            out[j] = acc
    else:
        for j in range(n):
            out[j] = 0.0
        for i in range(k):
            xi = x[i]
            for j in range(n):
                out[j] += xi * y[i, j]
    return out
""",
}


def _dot(op, node):
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import native

    src = _DOT_SOURCES[_dot_kind(node)].lstrip()
    env = {
        "__name__": __name__,
        "_pm_empty": native.empty,
        "_pm_f64": np.float64,
        "_pm_gemv": native.blas_dgemv,
        "_pm_ptr": native.data_pointer,
    }
    key = "pmfast_dot_" + hashlib.sha256(repr((VERSION, src)).encode()).hexdigest()
    return numba_njit(compile_numba_function_src(src, "dot", env, env)), key


def _dot_kind(node):
    """Which of :data:`_DOT_SOURCES` computes ``node`` (None: pytensor's)."""
    x, y = node.inputs
    if not all(v.type.dtype == "float64" for v in (x, y, *node.outputs)):
        return None
    if (x.ndim, y.ndim) == (2, 2):
        if y.type.shape[1] == 1:
            return (2, "col")
        if x.type.shape[0] == 1:
            return ("row", 2)
        return None
    return (x.ndim, y.ndim) if (x.ndim, y.ndim) in _DOT_SOURCES else None


def _sum_all(op, node):
    """``(numba function, key)`` of a ``Sum`` over every axis accumulating in its output dtype, or None.

    pytensor's is ``np.array(array.sum())``, whose ``np.array`` of a scalar is numba generic code
    compiled in every process; here the same sum goes into a 0-d array through
    :func:`pmfast.compiler.arrays.array1` (same flags: pytensor's ``numba_njit``).
    """
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import arrays

    axes = op.axis if op.axis is not None else tuple(range(node.inputs[0].ndim))
    acc_dtype = getattr(op, "acc_dtype", None) or node.outputs[0].type.dtype
    if node.inputs[0].ndim != len(axes) or np.dtype(node.outputs[0].type.dtype) != acc_dtype:
        return None
    src = "def impl_sum(array):\n    return _pm_array1(array.sum())\n"
    env = {"__name__": __name__, "_pm_array1": arrays.array1}
    key = "pmfast_sum_all_" + hashlib.sha256(repr((VERSION, src, arrays.VERSION, node.outputs[0].type.dtype)).encode()).hexdigest()
    return numba_njit(compile_numba_function_src(src, "impl_sum", env, env)), key


def _reshape_source(ndim: int) -> str:
    """Source of ``reshape(x, shape)`` for ``ndim`` output axes (see :func:`_reshape`)."""
    s = [f"s{k}" for k in range(ndim)]
    lines = ["c = _pm_ascontiguous1(x)"]
    lines += [f"{v} = shape[{k}]" for k, v in enumerate(s)]
    lines += ["neg = 0", "known = 1"]
    for v in s:
        lines += [f"if {v} < 0:", "    neg += 1", "else:", f"    known *= {v}"]
    lines += [
        "n = c.size",
        "if neg == 0:",
        "    if n != known:",
        "        raise ValueError('total size of new array must be unchanged')",
        "elif neg == 1:",
        "    if known == 0:",
        "        inferred = 0",
        "        ok = n == 0",
        "    else:",
        "        inferred = n // known",
        "        ok = n % known == 0",
        "    if not ok:",
        "        raise ValueError('total size of new array must be unchanged')",
    ]
    for v in s:
        lines += [f"    if {v} < 0:", f"        {v} = inferred"]
    lines += ["else:", "    raise ValueError('multiple negative shape values')"]
    lines.append(f"return _pm_c_reshape(c, ({''.join(v + ', ' for v in s)}))")
    return "def reshape(x, shape):\n" + "".join(f"    {line}\n" for line in lines)


def _reshape(op, node):
    """``Reshape`` to ``ndim >= 1`` axes: pytensor's ``np.reshape(np.ascontiguousarray(np.asarray(x)),
    to_fixed_tuple(shape, ndim))`` without numba's generic code.

    Its three calls are ``@overload`` implementations numba compiles as functions of their own, in
    every process (hier_logistic on a used machine: ~0.4 CPU s for ``np.ascontiguousarray``,
    ``np.reshape`` and their allocator). Here the contiguous copy (or the array itself) is
    :func:`pmfast.compiler.arrays.ascontiguous1` (numba's own code, lowered in place), the
    ``-1`` inference and the size check are numba's ``normalize_reshape_value`` written out for
    ``ndim`` axes (same errors, same messages), and the view is
    :func:`pmfast.compiler.native.c_reshape` (numba's reshape of a C-contiguous array: the same
    shape and strides, sharing the memory). Called, not inlined
    (:data:`pmfast.compiler.inline.NEVER`): its source depends on ``ndim`` only, so its cached
    code serves every model.
    """
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import arrays, native

    src = _reshape_source(op.ndim)
    env = {"__name__": __name__, "_pm_ascontiguous1": arrays.ascontiguous1, "_pm_c_reshape": native.c_reshape}
    key = "pmfast_reshape_" + hashlib.sha256(repr((VERSION, src, arrays.VERSION)).encode()).hexdigest()
    return numba_njit(compile_numba_function_src(src, "reshape", env, env)), key


def funcify_and_cache_key(op, node):
    """pmfast's ``(numba function, cache key)`` for ``op``, or None to use pytensor's."""
    from pytensor.scan.op import Scan
    from pytensor.tensor.basic import Alloc, Join, Split
    from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
    from pytensor.tensor.extra_ops import CumOp
    from pytensor.tensor.math import Dot, Sum
    from pytensor.tensor.shape import Reshape, SpecifyShape
    from pytensor.tensor.sort import ArgSortOp
    from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor, IncSubtensor, Subtensor

    if node is None:
        return None
    if isinstance(op, CAReduce) and os.environ.get("PMFAST_CAREDUCE", "1") != "0":
        from pmfast.compiler import careduce

        found = _sum_all(op, node) if type(op) is Sum else None
        return found if found is not None else careduce.funcify(op, node)
    if type(op) is Sum:
        return _sum_all(op, node)
    if isinstance(op, SpecifyShape):
        return _specify_shape(op, node)
    if type(op) is Elemwise:
        return _elemwise(op, node)
    if type(op) is DimShuffle:
        return _dimshuffle(op, node)
    if type(op) is Dot and _dot_kind(node) is not None:
        return _dot(op, node)
    if type(op) is Dot:
        from pmfast.compiler import linalg

        return linalg.funcify_dot(op, node)
    if type(op) is Reshape and op.ndim > 0:
        return _reshape(op, node)
    if type(op) is Split:
        from pmfast.compiler import split

        return split.funcify(op, node)
    if type(op) is Join:
        from pmfast.compiler import join

        return join.funcify(op, node)
    if type(op) is CumOp:
        from pmfast.compiler import cumop

        return cumop.funcify(op, node)
    if type(op) in (Subtensor, IncSubtensor, Alloc) and os.environ.get("PMFAST_BASIC_INDEX", "1") != "0":
        from pmfast.compiler import basic_index, node_dedup

        found = node_dedup.funcify(op, node) if type(op) is not Alloc and node_dedup.active() else None
        if found is None:
            found = (basic_index.alloc_funcify if type(op) is Alloc else basic_index.funcify)(op, node)
        if found is not None:
            return found
    if type(op) is AdvancedIncSubtensor:
        from pmfast.compiler import adv_inc

        return adv_inc.funcify(op, node)
    if type(op) is AdvancedSubtensor:
        from pmfast.compiler import adv_sub

        return adv_sub.funcify(op, node)
    if type(op).__name__ in ("Shape_i", "ExtractDiag"):
        from pmfast.compiler import small_ops

        return small_ops.funcify(op, node)
    if type(op) is ArgSortOp:
        from pmfast.compiler import sort

        return sort.funcify(op, node)
    if type(op) is Scan:
        from pmfast.compiler import scan

        return scan.funcify(op, node)
    if type(op).__module__ in ("pytensor.tensor.slinalg", "pmfast.passes.cholesky_grad"):
        from pmfast.compiler import linalg

        return linalg.funcify(op, node)
    if type(op).__name__ == "VmathElemwise" and os.environ.get("PMFAST_VMATH_PLAIN", "1") != "0":
        from pmfast.vmath import elemwise

        return elemwise.funcify(op, node)
    return None


def scalar_funcify_and_cache_key(op, node):
    """pmfast's ``(numba function, cache key)`` for the scalar op ``op`` (scalar ``node``), or None.

    Only from the patched ``numba_funcify_and_cache_key`` (pmfast/linker.py), not from
    ``numba_funcify_ensure_cache``: pytensor wraps the function in its cached ``*args``
    forwarder, as for every scalar op (the function keeps its own numba flags).
    """
    from pytensor.scalar.math import Psi

    if node is None or type(op) is not Psi:
        return None
    if not all(v.type.dtype == "float64" for v in (*node.inputs, *node.outputs)):
        return None
    from pmfast.compiler.pure import jit_off

    if jit_off():  # pmfast.vmath's psi is jitted on import: not a function that runs as plain Python
        return None
    from pmfast.vmath import special

    return special.psi, "pmfast_psi_" + special.cache_key()
