"""pmfast's numba implementations of pytensor's dense linear-algebra ops: LAPACK/BLAS called directly.

pytensor 2.38.3 implements ``Cholesky``, ``SolveTriangular``, ``CholeskySolve``, ``LUFactor``
and the matrix ``Dot`` through numba ``@overload``s of scipy's functions (``_cholesky``,
``_solve_triangular``…), numba's ``np.dot`` and object-mode pointer lookups: about fifteen
numba functions per model compiled in every process (overloads are never cached), ~4-5 CPU s
of a marginal GP's cold compile, and at run time copies to Fortran order of every right-hand
side. Here each op (and pmfast's ``CholeskyGrad``, :mod:`pmfast.passes.cholesky_grad`) is one
generated function of module-level globals only, cached by numba per machine under a key of
its source (:func:`funcify`), calling BLAS/LAPACK through :func:`pmfast.compiler.lapack.call`.

**Layout.** Every result is a new C-contiguous array (or the destroyed input, when an op may
overwrite it and it is C-contiguous); ``LUFactor``'s is Fortran-ordered, as LAPACK writes it. A
C-contiguous matrix read as Fortran is its transpose, so no input is copied to another order: a
triangular factor ``T`` that is C-contiguous is passed as ``T.T`` with the triangle flag flipped
(an F-contiguous one as is), and a solve ``X = A⁻¹ B`` with ``X`` C-contiguous is ``Xᵀ Aᵀ = Bᵀ``,
one ``trsm`` from the right on the copy of ``B`` (``trsv`` for a vector or a single column; for a
factor of order ≤ :data:`SMALL_ORDER`, substitution over the rows, which are contiguous). A
Cholesky factor is computed on a C copy of the input's one triangle that ``potrf`` reads (the
other zeroed in the same pass). Inputs neither C- nor F-contiguous are copied to C first.

**Same results and errors as pytensor's.** Empty right-hand sides / inputs give zeros of their
shape first, then the same shape checks in the same order raise ``LinAlgError`` / ``ValueError``
with pytensor's (numba's) messages; a failed factorization (``potrf``'s ``info != 0``: not
positive definite) gives all NaN (a NaN input gives what OpenBLAS's ``potrf`` makes of it, which
reports success, as in stock); a triangular solve with an exact zero on a non-unit diagonal
(``trtrs``'s test) gives all NaN; ``CholeskySolve`` checks nothing (``potrs`` doesn't); a zero
pivot of ``getrf`` gives an all-NaN LU. Values agree with stock's to rounding (the same LAPACK;
``trsm`` from the other side can sum in another order). float32 and float64 inputs of one dtype;
anything else (integer inputs cast by the op, complex, mixed dtypes) is left to pytensor, as is
everything under ``NUMBA_DISABLE_JIT``.

Not inlined into entries (:data:`pmfast.compiler.inline.NEVER`): the source depends on the op's
props and dtype only, so one cached function serves every model.
"""

from __future__ import annotations

import hashlib

import numpy as np

#: Bump when an implementation here changes (part of its cache key).
VERSION = 1

_DTYPES = ("float64", "float32")

_HEADER_CHECKS = """
    n = a.shape[1]
    if a.shape[0] != b.shape[0]:
        raise _LinAlgError("Dimensions of A and B do not conform")
    if a.shape[0] != n:
        raise _LinAlgError("Last 2 dimensions of A must be square")
"""

# m: a C array whose Fortran reading is A (flip) or Aᵀ (not flip)
_MATRIX_VIEW = """
    la = _pm_layout(a)
    flip = la == 2
    if la == 1:
        m = _pm_c_view(a)
    elif la == 2:
        m = _pm_c_view(a.T)
    else:
        m = _pm_empty((n, n), _pm_dt)
        for i in range(n):
            for j in range(n):
                m[i, j] = a[i, j]
"""

_COPY_B2 = """
    k = b.shape[1]
    if OVERWRITE_B and _pm_layout(b) == 1:
        x = _pm_c_view(b)
    else:
        x = _pm_empty((n, k), _pm_dt)
        for i in range(n):
            for j in range(k):
                x[i, j] = b[i, j]
"""

_COPY_B1 = """
    if OVERWRITE_B and _pm_layout(b) == 1:
        x = _pm_c_view(b)
    else:
        x = _pm_empty(n, _pm_dt)
        for i in range(n):
            x[i] = b[i]
"""

_NAN_FILL = {
    1: "for r in range(n):\n    x[r] = _pm_nan",
    2: "for r in range(n):\n    for c in range(k):\n        x[r, c] = _pm_nan",
}


def _indent(code: str, level: int) -> str:
    return "".join("    " * level + line + "\n" for line in code.splitlines())


def _ops(flip: str, tri_lower: bool, op_t: bool) -> str:
    """``(uplo, trans)`` expressions for op(M) = T (``op_t`` False) or Tᵀ, M being T (flip) or Tᵀ read as Fortran."""
    # M = T when flip: uplo is T's, trans as asked; M = Tᵀ otherwise: uplo flipped, trans inverted
    lo, up = ord("L"), ord("U")
    n_, t_ = ord("N"), ord("T")
    uplo = f"({lo if tri_lower else up} if {flip} else {up if tri_lower else lo})"
    trans = f"({t_ if op_t else n_} if {flip} else {n_ if op_t else t_})"
    return uplo, trans


#: Up to this order a triangular solve with a matrix right-hand side is a loop over its rows
#: (contiguous, vectorized): ``trsm`` from the right costs ~18 µs for a 2×2 factor and 10,000
#: columns (the LKJ model), the rows' axpys a few.
SMALL_ORDER = 8


def _row_loop(tri_lower: bool, op_t: bool, unit: bool) -> str:
    """Substitution over the rows of C ``x`` for ``op(T) X = X₀`` (``T`` is ``a``, ``op`` a transpose if ``op_t``)."""
    lower = tri_lower != op_t  # op(T) is lower triangular
    elem = "a[j, i]" if op_t else "a[i, j]"
    rows = "range(n)" if lower else "range(n - 1, -1, -1)"
    cols = "range(i)" if lower else "range(i + 1, n)"
    code = f"for i in {rows}:\n    for j in {cols}:\n        e = {elem}\n        for c in range(k):\n            x[i, c] -= e * x[j, c]\n"
    if not unit:
        code += "    d = a[i, i]\n    for c in range(k):\n        x[i, c] /= d\n"
    return code


def _solve_steps(steps, b_ndim: int, diag: str) -> str:
    """Source of the triangular solves ``steps`` (``(tri_lower, op_t)`` each) applied to ``x`` in order.

    For a matrix right-hand side the steps act from the right on ``Xᵀ`` (C ``x`` read as Fortran):
    solving ``op(T) X = B`` is ``Xᵀ op(T)ᵀ = Bᵀ``, so each step's operator is transposed. A single
    column is contiguous either way: ``trsv`` (``trsm`` from the right on one row was 3x slower).
    A factor of order up to :data:`SMALL_ORDER`: substitution row by row (:func:`_row_loop`).
    """
    vector, matrix, rows = [], [], []
    unit = diag == str(ord("U"))
    for tri_lower, op_t in steps:
        uplo, trans = _ops("flip", tri_lower, op_t)
        vector.append(f"_pm_call('trsv', ({uplo}, {trans}, {diag}, n, m, n, x, 1))")
        uplo, trans = _ops("flip", tri_lower, not op_t)
        matrix.append(f"_pm_call('trsm', ({ord('R')}, {uplo}, {trans}, {diag}, k, n, 1.0, m, n, x, _pm_max(k, 1)))")
        rows.append(_row_loop(tri_lower, op_t, unit))
    if b_ndim == 1:
        return _indent("\n".join(vector), 1)
    return (
        "    if k == 1:\n" + _indent("\n".join(vector), 2)
        + f"    elif n <= {SMALL_ORDER}:\n" + _indent("".join(rows), 2)
        + "    else:\n" + _indent("\n".join(matrix), 2)
    )


def _empty_rhs(b_ndim: int) -> str:
    shape = "b.shape[0]" if b_ndim == 1 else "(b.shape[0], b.shape[1])"
    return f"    if b.size == 0:\n        return _pm_full({shape}, 0.0, _pm_dt)\n"


def solve_triangular_source(lower: bool, unit_diagonal: bool, b_ndim: int, overwrite_b: bool) -> str:
    """``solve_triangular(a, b)``: ``A⁻¹ b`` for triangular ``A`` (pytensor's ``SolveTriangular``, trans 0)."""
    diag = ord("U") if unit_diagonal else ord("N")
    src = "def solve_triangular(a, b):\n" + _empty_rhs(b_ndim) + _HEADER_CHECKS + _MATRIX_VIEW
    src += (_COPY_B1 if b_ndim == 1 else _COPY_B2).replace("OVERWRITE_B", str(overwrite_b))
    if not unit_diagonal:  # trtrs's singularity test: an exact zero on the diagonal
        src += "    for i in range(n):\n        if a[i, i] == 0.0:\n" + _indent(_NAN_FILL[b_ndim], 3) + "            return x\n"
    src += _solve_steps([(lower, False)], b_ndim, str(diag))
    return src + "    return x\n"


def cho_solve_source(lower: bool, b_ndim: int, overwrite_b: bool) -> str:
    """``cho_solve(c, b)``: ``(C Cᵀ)⁻¹ b`` (lower) or ``(Cᵀ C)⁻¹ b`` (upper), pytensor's ``CholeskySolve``."""
    # lower: L Lᵀ x = b → L y = b, Lᵀ x = y; upper: Uᵀ U x = b → Uᵀ y = b, U x = y
    steps = [(lower, False), (lower, True)] if lower else [(lower, True), (lower, False)]
    src = "def cho_solve(a, b):\n" + _empty_rhs(b_ndim) + _HEADER_CHECKS + _MATRIX_VIEW
    src += (_COPY_B1 if b_ndim == 1 else _COPY_B2).replace("OVERWRITE_B", str(overwrite_b))
    src += _solve_steps(steps, b_ndim, str(ord("N")))
    return src + "    return x\n"


def cholesky_source(lower: bool, overwrite_a: bool) -> str:
    """``cholesky(a)``: the lower (or upper) Cholesky factor, NaN if ``potrf`` fails (pytensor's ``Cholesky``).

    ``w`` is C-contiguous and holds the triangle of ``a`` that is read (the rest zero); read as
    Fortran it is that triangle transposed, so ``potrf`` is asked for the other one.
    """
    keep = "j <= i" if lower else "j >= i"
    uplo = ord("U") if lower else ord("L")
    return f"""def cholesky(a):
    if a.size == 0:
        return _pm_full((a.shape[0], a.shape[1]), 0.0, _pm_dt)
    n = a.shape[1]
    if a.shape[0] != n:
        raise _LinAlgError("Last 2 dimensions of A must be square")
    if {overwrite_a} and _pm_layout(a) == 1:
        w = _pm_c_view(a)
        for i in range(n):
            for j in range(n):
                if not ({keep}):
                    w[i, j] = 0.0
    else:
        w = _pm_empty((n, n), _pm_dt)
        for i in range(n):
            for j in range(n):
                w[i, j] = a[i, j] if {keep} else 0.0
    if _pm_call('potrf', ({uplo}, n, w, n)) != 0:
        for i in range(n):
            for j in range(n):
                w[i, j] = _pm_nan
    return w
"""


def lu_factor_source(overwrite_a: bool) -> str:
    """``lu_factor(a)``: ``getrf``'s packed LU (Fortran order, as LAPACK writes it) and 0-based pivots
    (pytensor's ``LUFactor``); all NaN when a pivot is exactly zero."""
    return f"""def lu_factor(a):
    mm = a.shape[0]
    nn = a.shape[1]
    if a.size == 0:
        return _pm_full((mm, nn), 0.0, _pm_dt).T.T, _pm_full(mm, 0, _pm_i32)
    if {overwrite_a} and _pm_layout(a) == 2:
        w = _pm_c_view(a.T).T
    else:
        w = _pm_empty((nn, mm), _pm_dt).T
        for j in range(nn):
            for i in range(mm):
                w[i, j] = a[i, j]
    piv = _pm_empty(nn, _pm_i32)
    info = _pm_call('getrf', (mm, nn, w, mm, piv))
    for i in range(nn):
        piv[i] -= 1
    if info != 0:
        for j in range(nn):
            for i in range(mm):
                w[i, j] = _pm_nan
    return w, piv
"""


def cholesky_grad_source(lower: bool) -> str:
    """``cholesky_grad(l, dz)``: the gradient pytensor's ``Cholesky.L_op`` builds, in one buffer.

    With ``L`` the lower factor (``l``, or ``lᵀ`` when ``lower`` is False) and ``L̄`` its gradient
    (``dz`` or ``dzᵀ``): ``P = Φ(Lᵀ L̄)`` (lower triangle, diagonal halved), ``S = L⁻ᵀ P L⁻¹``, and the
    result ``tril(S + Sᵀ) - diag(S)`` (``triu`` for an upper factor). ``w`` is C-contiguous and read
    as Fortran by BLAS: ``Lᵀ L̄`` is one ``trmm`` from the right on ``L̄ᵀ``, ``S`` two ``trsm`` in place.
    ``m`` read as Fortran is ``L`` (``is_l``) or ``Lᵀ``.
    """
    copy = "w[i, j] = dz[i, j]" if lower else "w[i, j] = dz[j, i]"
    is_l = "la == 2" if lower else "la != 2"
    # pytensor's masks multiply (x * 0 is NaN for a NaN or inf x) and its diagonal terms subtract:
    # the same operations here, so failures propagate to the same entries
    finish = (
        "    for i in range(n):\n        for j in range(i + 1, n):\n            w[i, j] = w[j, i] * 0.0\n"
        if lower
        else "    for i in range(n):\n        for j in range(i + 1, n):\n            w[i, j] = w[j, i]\n            w[j, i] = w[j, i] * 0.0\n"
    )
    lo, up, nn_, tt = ord("L"), ord("U"), ord("N"), ord("T")
    return f"""def cholesky_grad(l, dz):
    n = l.shape[0]
    if l.shape[1] != n or dz.shape[0] != n or dz.shape[1] != n:
        raise ValueError("CholeskyGrad: the factor and its gradient must be square matrices of one size")
    w = _pm_empty((n, n), _pm_dt)
    if n == 0:
        return w
    for i in range(n):
        for j in range(n):
            {copy}
    la = _pm_layout(l)
    if la == 1:
        m = _pm_c_view(l)
    elif la == 2:
        m = _pm_c_view(l.T)
    else:
        m = _pm_empty((n, n), _pm_dt)
        for i in range(n):
            for j in range(n):
                m[i, j] = l[i, j]
    is_l = {is_l}
    uplo = {lo} if is_l else {up}
    _pm_call('trmm', ({ord("R")}, uplo, {nn_} if is_l else {tt}, {nn_}, n, n, 1.0, m, n, w, n))
    for i in range(n):
        w[i, i] = w[i, i] - w[i, i] / 2.0
        for j in range(i + 1, n):
            w[i, j] = w[i, j] * 0.0
    _pm_call('trsm', ({ord("L")}, uplo, {tt} if is_l else {nn_}, {nn_}, n, n, 1.0, m, n, w, n))
    _pm_call('trsm', ({ord("R")}, uplo, {nn_} if is_l else {tt}, {nn_}, n, n, 1.0, m, n, w, n))
    for i in range(n):
        w[i, i] = (w[i, i] + w[i, i]) - w[i, i]
        for j in range(i):
            w[i, j] += w[j, i]
{finish}    return w
"""


def dot_source() -> str:
    """``dot(x, y)`` of two matrices by one ``gemm``: ``Cᵀ = yᵀ xᵀ`` into the C result read as Fortran."""
    return """def dot(x, y):
    mm, kk = x.shape
    if y.shape[0] != kk:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * matrix)")
    nn = y.shape[1]
    out = _pm_empty((mm, nn), _pm_dt)
    if mm == 0 or nn == 0:
        return out
    if kk == 0:
        for i in range(mm):
            for j in range(nn):
                out[i, j] = 0.0
        return out
    lx = _pm_layout(x)
    if lx == 1:
        xm = _pm_c_view(x)
    elif lx == 2:
        xm = _pm_c_view(x.T)
    else:
        xm = _pm_empty((mm, kk), _pm_dt)
        for i in range(mm):
            for j in range(kk):
                xm[i, j] = x[i, j]
    ly = _pm_layout(y)
    if ly == 1:
        ym = _pm_c_view(y)
    elif ly == 2:
        ym = _pm_c_view(y.T)
    else:
        ym = _pm_empty((kk, nn), _pm_dt)
        for i in range(kk):
            for j in range(nn):
                ym[i, j] = y[i, j]
    ta = 84 if ly == 2 else 78
    tb = 84 if lx == 2 else 78
    lda = kk if ly == 2 else nn
    ldb = mm if lx == 2 else kk
    _pm_call('gemm', (ta, tb, nn, mm, kk, 1.0, ym, lda, xm, ldb, 0.0, out, nn))
    return out
"""


def _env(dtype: str) -> dict:
    from scipy.linalg import LinAlgError

    from pmfast.compiler import arrays, lapack, native

    lapack.define_symbols()
    return {
        "__name__": __name__,
        "_pm_call": lapack.call,
        "_pm_layout": lapack.layout,
        "_pm_c_view": lapack.c_view,
        "_pm_empty": native.empty,
        "_pm_full": arrays.full3,
        "_pm_dt": np.dtype(dtype).type,
        "_pm_i32": np.int32,
        "_pm_nan": np.dtype(dtype).type(np.nan),
        "_pm_max": max,
        "_LinAlgError": LinAlgError,
    }


def _build(name: str, src: str, dtype: str):
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    from pmfast.compiler import arrays, lapack

    env = _env(dtype)
    key = f"pmfast_{name}_" + hashlib.sha256(repr((VERSION, src, dtype, arrays.VERSION, lapack.ROUTINES)).encode()).hexdigest()
    return numba_njit(compile_numba_function_src(src, name, env, env)), key


def _same_float(node) -> str | None:
    dtypes = {v.type.dtype for v in (*node.inputs, *node.outputs)}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    return dtype if dtype in _DTYPES else None


def funcify(op, node):
    """``(numba function, cache key)`` of pmfast's implementation of ``node``, or None (pytensor's)."""
    from numba.core import config as numba_config
    from pytensor.tensor.slinalg import Cholesky, CholeskySolve, LUFactor, SolveTriangular

    if numba_config.DISABLE_JIT:
        return None
    if type(op) is LUFactor:
        a, (lu, _) = node.inputs[0], node.outputs
        if a.type.dtype not in _DTYPES or lu.type.dtype != a.type.dtype:
            return None
        return _build("lu_factor", lu_factor_source(op.overwrite_a), a.type.dtype)
    dtype = _same_float(node)
    if dtype is None:
        return None
    if type(op) is Cholesky:
        return _build("cholesky", cholesky_source(op.lower, op.overwrite_a), dtype)
    if type(op) is SolveTriangular:
        return _build("solve_triangular", solve_triangular_source(op.lower, op.unit_diagonal, op.b_ndim, op.overwrite_b), dtype)
    if type(op).__name__ == "CholeskyGrad" and type(op).__module__ == "pmfast.passes.cholesky_grad":
        return _build("cholesky_grad", cholesky_grad_source(op.lower), dtype)
    if type(op) is CholeskySolve:
        return _build("cho_solve", cho_solve_source(op.lower, op.b_ndim, op.overwrite_b), dtype)
    return None


def funcify_dot(op, node):
    """pmfast's matrix × matrix ``Dot`` (one ``gemm``), or None."""
    from numba.core import config as numba_config

    if numba_config.DISABLE_JIT:
        return None
    x, y = node.inputs
    if (x.ndim, y.ndim) != (2, 2):
        return None
    dtype = _same_float(node)
    if dtype is None:
        return None
    return _build("dot", dot_source(), dtype)
