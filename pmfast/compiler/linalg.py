"""pmfast's numba implementations of pytensor's dense linear-algebra ops: LAPACK/BLAS called directly.

pytensor 2.38.3 implements ``Cholesky``, ``SolveTriangular``, ``CholeskySolve``, ``LUFactor``,
the general ``Solve`` and the matrix ``Dot`` through numba ``@overload``s of scipy's functions (``_cholesky``,
``_solve_triangular``…), numba's ``np.dot`` and object-mode pointer lookups: about fifteen
numba functions per model compiled in every process (overloads are never cached), ~4-5 CPU s
of a marginal GP's cold compile, and at run time copies to Fortran order of every right-hand
side. Here each op (and pmfast's ``CholeskyGrad``, :mod:`pmfast.passes.cholesky_grad`) is a
one-line node function (:func:`funcify`) calling a module-level implementation
(:mod:`pmfast.compiler.linalg_kernels`: layouts, destroyed inputs, results and errors) with the
op's props as run-time flags (:func:`jitted`): numba compiles and caches it once per argument
types for every props and model. The call is direct or deferred to a worker (:func:`_deferred`).

float32 and float64 inputs of one dtype; anything else (integer inputs cast by the op, complex,
mixed dtypes) is left to pytensor, as is everything run as plain Python (``NUMBA_DISABLE_JIT``,
pytensor's pure-python evaluation: :func:`pmfast.compiler.pure.jit_off`).

The node functions are inlined into entries (one call each); the implementations are called.
"""

from __future__ import annotations

import hashlib

import numpy as np

from pmfast.compiler import arrays, cache, generated, lapack, linalg_kernels

#: Bump when a node function or an implementation changes (part of the keys, with the source of
#: this module, :mod:`pmfast.compiler.linalg_kernels` and :mod:`pmfast.compiler.lapack`).
VERSION = 5

_DTYPES = ("float64", "float32")


#: name: the node function's source, a call of the implementation (:data:`pmfast.compiler.linalg_kernels.IMPLEMENTATIONS`)
#: with the inputs typed 'A' (one compile per dtype and rank, whatever layouts a model's nodes have)
#: and the props as non-literal bools
_OPS = {
    "cholesky": "def cholesky(a):\n    return _pm_impl(_pm_a(a), _pm_b({0}), _pm_b({1}))\n",
    "solve_triangular2": "def solve_triangular(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}), _pm_b({2}), _pm_b(False))\n",
    "solve_triangular1": "def solve_triangular(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}), _pm_b({2}))\n",
    "cho_solve2": "def cho_solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}), _pm_b(False))\n",
    "cho_solve1": "def cho_solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}))\n",
    "solve_general2": "def solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}))\n",
    "solve_general1": "def solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}))\n",
    "lu_factor": "def lu_factor(a):\n    return _pm_impl(_pm_a(a), _pm_b({0}))\n",
    "cholesky_grad": "def cholesky_grad(l, dz):\n    return _pm_impl(_pm_a(l), _pm_a(dz), _pm_b({0}))\n",
    "dot": "def dot(x, y):\n    return _pm_impl(_pm_a(x), _pm_a(y))\n",
}

#: The node functions of ops that may destroy an input (``overwrite_*``): an input typed F-ordered is
#: worked on in its memory, through its C transpose (:func:`lapack.fortran_t`), and the result is its
#: F-ordered transpose back; inputs typed otherwise get the node function of :data:`_OPS`.
_DESTROYING = {
    "cholesky": "def cholesky(a):\n    return _pm_back(a, _pm_impl(_pm_a(_pm_ft(a)), _pm_b({0}) != _pm_b(_pm_isf(a)), _pm_b(True)))\n",
    "solve_triangular2": "def solve_triangular(a, b):\n    return _pm_back(b, _pm_impl(_pm_a(a), _pm_a(_pm_ft(b)), _pm_b({0}), _pm_b({1}), _pm_b(True), _pm_b(_pm_isf(b))))\n",
    "cho_solve2": "def cho_solve(a, b):\n    return _pm_back(b, _pm_impl(_pm_a(a), _pm_a(_pm_ft(b)), _pm_b({0}), _pm_b(True), _pm_b(_pm_isf(b))))\n",
}

_jitted: dict = {}


#: The ``(implementation, dtype)`` pairs node functions were built for in this process, in order: the
#: handover worker compiles them before its first job (:func:`pmfast.compiler.handover.early_linalg`).
used: dict[tuple[str, str], None] = {}


def keyed_files() -> tuple[str, ...]:
    """The files whose source is part of every key: the node functions' (here), the implementations'
    and the LAPACK calls'."""
    return (__file__, linalg_kernels.__file__, lapack.__file__)


def _source_hash() -> str:
    from pathlib import Path

    h = hashlib.sha256()
    for path in keyed_files():
        h.update(Path(path).read_bytes())
    return h.hexdigest()[:16]


_SOURCE = _source_hash()


def jitted(name: str):
    """The implementation ``name`` (of :data:`pmfast.compiler.linalg_kernels.IMPLEMENTATIONS`, or a shared
    piece) jitted once per process.

    Module-level functions with ``cache=True``: numba caches each per argument types on disk, keyed
    by their file, so one compile serves every props and model on the machine. The shared pieces are
    inlined into them at numba's IR level (as separate functions each caller linked and optimised
    their code again: LKJ's cold compile +0.6 CPU s). The kernels module's globals are rebound to
    the jitted versions the first time (numba resolves a function's globals when it types it).
    """
    if not _jitted:
        import numba

        lapack.define_symbols()
        cache.install()  # a caller linking an implementation numba loaded from its cache defines the symbols again
        for piece in linalg_kernels.SHARED:  # inlined at numba's IR level into each implementation: no functions of their own
            _jitted[piece] = numba.njit(inline="always")(getattr(linalg_kernels, piece))
        for fn in linalg_kernels.IMPLEMENTATIONS.values():
            _jitted[fn.__name__] = numba.njit(cache=True)(fn)
        vars(linalg_kernels).update(_jitted)
    impl = linalg_kernels.IMPLEMENTATIONS.get(name)
    return _jitted[impl.__name__ if impl is not None else name]


#: The rank of each implementation's result (a C-contiguous array of the inputs' dtype); LUFactor's
#: (a tuple with the pivots) is not predicted.
_RESULT_NDIM = {
    "cholesky": 2, "solve_triangular2": 2, "solve_triangular1": 1, "cho_solve2": 2, "cho_solve1": 1, "cholesky_grad": 2,
    "dot": 2, "solve_general2": 2, "solve_general1": 1,
}
#: Results that are not C-contiguous: the general solve's, Fortran-ordered as stock's.
_RESULT_LAYOUT = {"solve_general2": "F"}


def _deferred(name: str, dtype: str):
    """The implementation ``name`` for ``dtype`` called through a
    :class:`pmfast.loops.deferred.Deferred`, or None to call it directly.

    In a cold process numba compiles each implementation when it types the entry's call, on the core
    that compiles the entry (bayesian_var_ireland: ``_solve_triangular2``, ``_cholesky_grad`` and
    ``_cholesky``, ~1.6 CPU s). Deferred, the entry's typing takes the predicted result type
    (:data:`_RESULT_NDIM`; checked against the compiled one at link time, a mismatch is an error),
    a forked worker compiles the implementation into numba's cache when a core is idle
    (:func:`pmfast.loops.worker.spare_core`), and the caller links the same cached code when its
    library is finalised: the same machine code either way. ``PMFAST_DEFERRED_KERNELS=0`` calls it
    directly.
    """
    import os

    import numba
    from numba.core import types
    from pytensor import config

    from pmfast.compiler.pure import jit_off
    from pmfast.loops import deferred

    if name not in _RESULT_NDIM or os.environ.get("PMFAST_DEFERRED_KERNELS", "1") == "0":
        return None
    if not config.numba__cache or jit_off():
        return None
    deferred.install()
    restype = types.Array(numba.from_dtype(np.dtype(dtype)), _RESULT_NDIM[name], _RESULT_LAYOUT.get(name, "C"))
    return deferred.Deferred(jitted(name), f"pmfast_linalg_{name}_{dtype}_{_SOURCE}", restype)


def _build(name: str, props: tuple, dtype: str):
    """``(node function, key)``: the one-line call of :func:`jitted` ``name`` with ``props``."""
    destroying = name in _DESTROYING and props[-1]
    src = (_DESTROYING[name] if destroying else _OPS[name]).format(*props)
    impl = _deferred(name, dtype)
    used.setdefault((name, dtype), None)
    helpers = lapack.layout_helpers()
    env = {"_pm_impl": impl or jitted(name), "_pm_b": np.bool_, "_pm_a": lapack.as_any, **helpers}
    native_helpers = helpers["_pm_ft"] is not lapack.fortran_t
    key_parts = (VERSION, _SOURCE, src, dtype, arrays.VERSION, impl is not None, native_helpers)
    return generated.build(__name__, src.split("(")[0][4:], src, env, f"pmfast_{name}_", key_parts)


def _same_float(node) -> str | None:
    dtypes = {v.type.dtype for v in (*node.inputs, *node.outputs)}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    return dtype if dtype in _DTYPES else None


def funcify(op, node):
    """``(numba function, cache key)`` of pmfast's implementation of ``node``, or None (pytensor's)."""
    from pmfast.compiler.pure import jit_off
    from pytensor.tensor.slinalg import Cholesky, CholeskySolve, LUFactor, PivotToPermutations, Solve, SolveTriangular

    if jit_off():
        return None
    if type(op) is PivotToPermutations:
        from pmfast.compiler import sort

        return sort.funcify_pivots(op, node)
    if type(op) is LUFactor:
        a, (lu, _) = node.inputs[0], node.outputs
        if a.type.dtype not in _DTYPES or lu.type.dtype != a.type.dtype:
            return None
        return _build("lu_factor", (op.overwrite_a,), a.type.dtype)
    dtype = _same_float(node)
    if dtype is None:
        return None
    if type(op) is Cholesky:
        return _build("cholesky", (op.lower, op.overwrite_a), dtype)
    if type(op).__name__ == "CholeskyGrad" and type(op).__module__ == "pmfast.passes.cholesky_grad":
        return _build("cholesky_grad", (op.lower,), dtype)
    if type(op) is SolveTriangular:
        return _build(f"solve_triangular{op.b_ndim}", (op.lower, op.unit_diagonal, op.overwrite_b), dtype)
    if type(op) is CholeskySolve:
        return _build(f"cho_solve{op.b_ndim}", (op.lower, op.overwrite_b), dtype)
    if type(op) is Solve and op.assume_a == "gen":
        return _build(f"solve_general{op.b_ndim}", (op.overwrite_a, op.overwrite_b), dtype)
    return None


def funcify_dot(op, node):
    """pmfast's matrix × matrix ``Dot`` (one ``gemm``), or None."""
    from pmfast.compiler.pure import jit_off

    if jit_off():
        return None
    x, y = node.inputs
    if (x.ndim, y.ndim) != (2, 2):
        return None
    dtype = _same_float(node)
    if dtype is None:
        return None
    return _build("dot", (), dtype)
