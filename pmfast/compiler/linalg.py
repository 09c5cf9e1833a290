"""pmfast's numba implementations of pytensor's dense linear-algebra ops: LAPACK/BLAS called directly.

pytensor 2.38.3 implements ``Cholesky``, ``SolveTriangular``, ``CholeskySolve``, ``LUFactor``,
the general ``Solve`` and the matrix ``Dot`` through numba ``@overload``s of scipy's functions (``_cholesky``,
``_solve_triangular``…), numba's ``np.dot`` and object-mode pointer lookups: about fifteen
numba functions per model compiled in every process (overloads are never cached), ~4-5 CPU s
of a marginal GP's cold compile, and at run time copies to Fortran order of every right-hand
side. Here each op (and pmfast's ``CholeskyGrad``, :mod:`pmfast.passes.cholesky_grad`) is a
one-line node function (:func:`funcify`) calling a module-level implementation with the op's
props as run-time flags (:func:`jitted`): numba compiles and caches it once per argument types
for every props and model, and the implementations share their pieces (layout views, copies,
the triangular solves). BLAS/LAPACK is called through :func:`pmfast.compiler.lapack.call`.

**Layout.** Every result is a new C-contiguous array; ``LUFactor``'s and a general ``Solve``'s
with a matrix right-hand side are Fortran-ordered, as LAPACK writes them (and stock returns them). **Destroyed inputs** follow stock's rules: an op whose ``overwrite_*`` prop is set (pytensor's
inplace rewrites set it where the input is not needed afterwards) works in the input's memory when
stock's does — ``Cholesky`` on a C- or F-contiguous input, the solves on an F-contiguous right-hand
side (a vector, a single column), ``LUFactor`` on an F-contiguous input — and copies otherwise. An
input numba types F-ordered is worked on through its C transpose and the result is F-ordered
(:data:`_DESTROYING`, chosen at typing time); one typed 'A' that happens to be F-contiguous is
copied (the result's type can't depend on run-time flags). A
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
everything run as plain Python (``NUMBA_DISABLE_JIT``, pytensor's pure-python evaluation: :func:`pmfast.compiler.pure.jit_off`).

The node functions are inlined into entries (one call each); the implementations are called.
"""

from __future__ import annotations

import hashlib

import numpy as np
from scipy.linalg import LinAlgError

from pmfast.compiler import arrays, cache, lapack, native

#: Bump when an implementation here changes (part of its cache key, with this module's and lapack's source).
VERSION = 5

_DTYPES = ("float64", "float32")

#: Up to this order a triangular solve with a matrix right-hand side is a loop over its rows
#: (contiguous, vectorized): ``trsm`` from the right costs ~18 µs for a 2×2 factor and 10,000
#: columns (the LKJ model), the rows' axpys a few.
SMALL_ORDER = 8

_L, _U, _N, _T, _R = ord("L"), ord("U"), ord("N"), ord("T"), ord("R")


# --- shared pieces (each compiled once per argument types, for every op and props) --------------


def _c_matrix(a):
    """``(m, flip)``: ``m`` a C array whose Fortran reading is ``a`` (``flip``) or ``aᵀ``; copies only a
    matrix that is neither C- nor F-contiguous."""
    la = lapack.layout(a)
    if la == 1:
        return lapack.c_view(a), False
    if la == 2:
        return lapack.c_view(a.T), True
    m = native.empty((a.shape[0], a.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            m[i, j] = a[i, j]
    return m, False


def _c_copy2(b, overwrite):
    """``b`` itself (``overwrite`` and contiguous both ways: a single row or column, which LAPACK would
    solve in place, as stock does) or a new C copy of it."""
    c = lapack.layout(b) == 1
    if overwrite and c and (b.shape[0] == 1 or b.shape[1] == 1):
        return lapack.c_view(b)
    x = native.empty((b.shape[0], b.shape[1]), b.dtype)
    if c:
        src = lapack.c_view(b)
        for i in range(b.shape[0]):
            for j in range(b.shape[1]):
                x[i, j] = src[i, j]
    else:
        for i in range(b.shape[0]):
            for j in range(b.shape[1]):
                x[i, j] = b[i, j]
    return x


def _f_copy2(a):
    """A new Fortran-ordered copy of the matrix ``a`` (the layout LAPACK writes its results in)."""
    w = native.empty((a.shape[1], a.shape[0]), a.dtype).T
    for j in range(a.shape[1]):
        for i in range(a.shape[0]):
            w[i, j] = a[i, j]
    return w


def _c_copy1(b, overwrite):
    c = lapack.layout(b) == 1
    if overwrite and c:
        return lapack.c_view(b)
    x = native.empty(b.shape[0], b.dtype)
    if c:
        src = lapack.c_view(b)
        for i in range(b.shape[0]):
            x[i] = src[i]
    else:
        for i in range(b.shape[0]):
            x[i] = b[i]
    return x


def _check_solve(a, b):
    """pytensor's ``_solve_check_input_shapes``: the same tests, order and messages."""
    if a.shape[0] != b.shape[0]:
        raise LinAlgError("Dimensions of A and B do not conform")
    if a.shape[0] != a.shape[1]:
        raise LinAlgError("Last 2 dimensions of A must be square")


def _flags(flip, tri_lower, op_t):
    """``(uplo, trans)`` for BLAS applying ``op(T)`` (``T`` or ``Tᵀ``) through ``m`` read as Fortran
    (``T`` when ``flip``, ``Tᵀ`` otherwise: the triangle flips and the transpose inverts)."""
    if flip:
        return (_L if tri_lower else _U), (_T if op_t else _N)
    return (_U if tri_lower else _L), (_N if op_t else _T)


def _tri_vec(m, flip, x, tri_lower, op_t, unit):
    """``x ← op(T)⁻¹ x`` for a contiguous vector (or single column) ``x``: ``trsv``."""
    n = m.shape[0]
    uplo, trans = _flags(flip, tri_lower, op_t)
    lapack.call("trsv", (uplo, trans, _U if unit else _N, n, m, n, x, 1))


def _tri_mat(a, m, flip, x, tri_lower, op_t, unit):
    """``X ← op(T)⁻¹ X`` for C ``x`` (``n × k``): ``trsv`` for one column, row substitution for a small
    factor, else ``trsm`` from the right on ``Xᵀ`` (``Xᵀ op(T)ᵀ = Bᵀ``, the operator transposed)."""
    n, k = x.shape
    if k == 1:
        _tri_vec(m, flip, x, tri_lower, op_t, unit)
    elif n <= SMALL_ORDER:
        forward = tri_lower != op_t  # op(T) lower: forward substitution, else backward
        for step in range(n):
            i = step if forward else n - 1 - step
            lo, hi = (0, i) if forward else (i + 1, n)
            for j in range(lo, hi):
                e = a[j, i] if op_t else a[i, j]
                for c in range(k):
                    x[i, c] -= e * x[j, c]
            if not unit:
                d = a[i, i]
                for c in range(k):
                    x[i, c] /= d
    else:
        uplo, trans = _flags(flip, tri_lower, not op_t)
        lapack.call("trsm", (_R, uplo, trans, _U if unit else _N, k, n, 1.0, m, n, x, max(k, 1)))


def _tri_left(m, flip, xt, tri_lower, op_t, unit):
    """``X ← op(T)⁻¹ X`` for ``X`` Fortran-ordered, given as ``xt = Xᵀ`` (C, ``k × n``): ``trsm`` from the
    left on ``X`` read as Fortran (the destroyed F-ordered right-hand side, solved in its memory)."""
    k, n = xt.shape
    uplo, trans = _flags(flip, tri_lower, op_t)
    lapack.call("trsm", (_L, uplo, trans, _U if unit else _N, n, k, 1.0, m, n, xt, n))


def _nan_fill2(x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = np.nan
    return x


def _has_zero_diagonal(a):
    """``trtrs``'s singularity test: an exact zero on the diagonal."""
    for i in range(a.shape[0]):
        if a[i, i] == 0.0:
            return True
    return False


# --- the ops -------------------------------------------------------------------------------------


def _cholesky(a, lower, overwrite):
    """pytensor's ``Cholesky``: the lower (upper) factor, all NaN if ``potrf`` fails.

    ``w`` is C and holds the triangle of ``a`` that is read (the rest zero); read as Fortran it is that
    triangle transposed, so ``potrf`` is asked for the other one."""
    if a.size == 0:
        return arrays.full3((a.shape[0], a.shape[1]), 0.0, a.dtype)
    n = a.shape[1]
    if a.shape[0] != n:
        raise LinAlgError("Last 2 dimensions of A must be square")
    if overwrite and lapack.layout(a) == 1:
        w = lapack.c_view(a)
        for i in range(n):
            for j in range(n):
                if (j > i) if lower else (j < i):
                    w[i, j] = 0.0
    else:
        w = _c_copy2(a, False)
        for i in range(n):
            for j in range(n):
                if (j > i) if lower else (j < i):
                    w[i, j] = 0.0
    if lapack.call("potrf", (_U if lower else _L, n, w, n)) != 0:
        _nan_fill2(w)
    return w


def _solve_triangular2(a, b, lower, unit, overwrite, bt):
    """pytensor's ``SolveTriangular`` (``b_ndim=2``): ``A⁻¹ B``, all NaN if ``A`` is singular.

    ``bt``: ``b`` is ``Bᵀ`` (C) of a destroyable F-ordered ``B`` (:func:`lapack.fortran_t`); the result
    is then ``Xᵀ``, computed in ``b``'s memory."""
    if b.size == 0:
        return arrays.full3((b.shape[0], b.shape[1]), 0.0, b.dtype)
    _check_solve(a, b.T if bt else b)
    m, flip = _c_matrix(a)
    x = lapack.c_view(b) if bt else _c_copy2(b, overwrite)
    if not unit and _has_zero_diagonal(a):
        return _nan_fill2(x)
    if bt:
        _tri_left(m, flip, x, lower, False, unit)
    else:
        _tri_mat(a, m, flip, x, lower, False, unit)
    return x


def _solve_triangular1(a, b, lower, unit, overwrite):
    """``b_ndim=1``."""
    if b.size == 0:
        return arrays.full3(b.shape[0], 0.0, b.dtype)
    _check_solve(a, b)
    m, flip = _c_matrix(a)
    x = _c_copy1(b, overwrite)
    if not unit and _has_zero_diagonal(a):
        for i in range(x.shape[0]):
            x[i] = np.nan
        return x
    _tri_vec(m, flip, x, lower, False, unit)
    return x


def _cho_solve2(a, b, lower, overwrite, bt):
    """pytensor's ``CholeskySolve`` (``b_ndim=2``): ``(C Cᵀ)⁻¹ B`` (lower) or ``(Cᵀ C)⁻¹ B``; no checks (as
    ``potrs``). ``bt`` as in :func:`_solve_triangular2`."""
    if b.size == 0:
        return arrays.full3((b.shape[0], b.shape[1]), 0.0, b.dtype)
    _check_solve(a, b.T if bt else b)
    m, flip = _c_matrix(a)
    # lower: L Lᵀ x = b → L y = b, Lᵀ x = y; upper: Uᵀ U x = b → Uᵀ y = b, U x = y
    if bt:
        x = lapack.c_view(b)
        _tri_left(m, flip, x, lower, not lower, False)
        _tri_left(m, flip, x, lower, lower, False)
        return x
    x = _c_copy2(b, overwrite)
    _tri_mat(a, m, flip, x, lower, not lower, False)
    _tri_mat(a, m, flip, x, lower, lower, False)
    return x


def _cho_solve1(a, b, lower, overwrite):
    """``b_ndim=1``."""
    if b.size == 0:
        return arrays.full3(b.shape[0], 0.0, b.dtype)
    _check_solve(a, b)
    m, flip = _c_matrix(a)
    x = _c_copy1(b, overwrite)
    _tri_vec(m, flip, x, lower, not lower, False)
    _tri_vec(m, flip, x, lower, lower, False)
    return x


def _lu_factor(a, overwrite):
    """pytensor's ``LUFactor``: ``getrf``'s packed LU (Fortran order, as LAPACK writes it) and 0-based
    int32 pivots; all NaN when a pivot is exactly zero."""
    mm = a.shape[0]
    nn = a.shape[1]
    if a.size == 0:
        return arrays.full3((nn, mm), 0.0, a.dtype).T, arrays.full3(mm, 0, np.int32)
    if overwrite and lapack.layout(a) == 2:
        w = lapack.c_view(a.T).T
    else:
        w = _f_copy2(a)
    piv = native.empty(nn, np.int32)
    info = lapack.call("getrf", (mm, nn, w, mm, piv))
    for i in range(nn):
        piv[i] -= 1
    if info != 0:
        _nan_fill2(w)
    return w, piv


def _lu_general(a, overwrite):
    """``getrf`` of ``a`` as stock's general ``Solve`` does it: ``(w, ipiv, trans, info)``, ``w`` the
    packed LU (Fortran order) and ``trans`` whether it factors ``Aᵀ``. A destroyable C-contiguous ``a``
    is factored in its memory read as Fortran (``Aᵀ``, solved transposed), an F-contiguous one as is;
    anything else on a Fortran copy."""
    n = a.shape[0]
    la = lapack.layout(a)
    trans = False
    if overwrite and la == 1:
        w = lapack.c_view(a).T
        trans = True
    elif overwrite and la == 2:
        w = lapack.c_view(a.T).T
    else:
        w = _f_copy2(a)
    piv = native.empty(n, np.int32)
    info = lapack.call("getrf", (n, n, w, n, piv))
    return w, piv, trans, info


def _solve_general2(a, b, overwrite_a, overwrite_b):
    """pytensor's ``Solve`` (``assume_a="gen"``, ``b_ndim=2``): ``getrf`` + ``getrs`` as stock's, the
    result Fortran-ordered as stock's (a destroyable F-contiguous ``b`` solved in its memory); all NaN
    when a pivot is exactly zero."""
    if b.size == 0:
        return arrays.full3((b.shape[1], b.shape[0]), 0.0, b.dtype).T
    _check_solve(a, b)
    w, piv, trans, info = _lu_general(a, overwrite_a)
    n, k = b.shape
    if overwrite_b and lapack.layout(b.T) == 1:
        x = lapack.c_view(b.T).T
    else:
        x = _f_copy2(b)
    if info != 0:
        return _nan_fill2(x)
    if lapack.call("getrs", (_T if trans else _N, n, k, w, n, piv, x, n)) != 0:
        _nan_fill2(x)
    return x


def _solve_general1(a, b, overwrite_a, overwrite_b):
    """``b_ndim=1``."""
    if b.size == 0:
        return arrays.full3(b.shape[0], 0.0, b.dtype)
    _check_solve(a, b)
    w, piv, trans, info = _lu_general(a, overwrite_a)
    n = b.shape[0]
    x = _c_copy1(b, overwrite_b)
    if info == 0:
        info = lapack.call("getrs", (_T if trans else _N, n, 1, w, n, piv, x, n))
    if info != 0:
        for i in range(n):
            x[i] = np.nan
    return x


def _cholesky_grad(l, dz, lower):
    """pmfast's ``CholeskyGrad``: what pytensor's ``Cholesky.L_op`` builds, in one C buffer ``w``.

    With ``L`` the lower factor (``l``, or ``lᵀ``) and ``L̄`` its gradient (``dz`` or ``dzᵀ``):
    ``P = Φ(Lᵀ L̄)`` (lower triangle, diagonal halved) by one ``trmm`` from the right on ``L̄ᵀ`` (``w``
    read as Fortran), ``S = L⁻ᵀ P L⁻¹`` by two ``trsm`` in place, then ``tril(S + Sᵀ) - diag(S)``
    (``triu`` for an upper factor). pytensor's masks multiply (``x * 0`` is NaN for a NaN or inf
    ``x``) and its diagonal terms subtract: the same operations here, so failures reach the same
    entries."""
    n = l.shape[0]
    if l.shape[1] != n or dz.shape[0] != n or dz.shape[1] != n:
        raise ValueError("CholeskyGrad: the factor and its gradient must be square matrices of one size")
    w = native.empty((n, n), l.dtype)
    if n == 0:
        return w
    for i in range(n):
        for j in range(n):
            w[i, j] = dz[i, j] if lower else dz[j, i]
    m, flip = _c_matrix(l)
    is_l = flip == lower  # m read as Fortran is L (else Lᵀ)
    uplo = _L if is_l else _U
    lapack.call("trmm", (_R, uplo, _N if is_l else _T, _N, n, n, 1.0, m, n, w, n))
    for i in range(n):
        w[i, i] = w[i, i] - w[i, i] / 2.0
        for j in range(i + 1, n):
            w[i, j] = w[i, j] * 0.0
    lapack.call("trsm", (_L, uplo, _T if is_l else _N, _N, n, n, 1.0, m, n, w, n))
    lapack.call("trsm", (_R, uplo, _N if is_l else _T, _N, n, n, 1.0, m, n, w, n))
    for i in range(n):
        w[i, i] = (w[i, i] + w[i, i]) - w[i, i]
        for j in range(i):
            w[i, j] += w[j, i]
    for i in range(n):
        for j in range(i + 1, n):
            if lower:
                w[i, j] = w[j, i] * 0.0
            else:
                w[i, j] = w[j, i]
                w[j, i] = w[j, i] * 0.0
    return w


def _matmul(x, y):
    """Matrix ``x @ y`` by one ``gemm``: ``Cᵀ = yᵀ xᵀ`` into the C result read as Fortran."""
    mm, kk = x.shape
    if y.shape[0] != kk:
        raise ValueError("incompatible array sizes for np.dot(a, b) (matrix * matrix)")
    nn = y.shape[1]
    out = native.empty((mm, nn), x.dtype)
    if mm == 0 or nn == 0:
        return out
    if kk == 0:
        for i in range(mm):
            for j in range(nn):
                out[i, j] = 0.0
        return out
    xm, fx = _c_matrix(x)
    ym, fy = _c_matrix(y)
    ta = _T if fy else _N
    tb = _T if fx else _N
    lda = kk if fy else nn
    ldb = mm if fx else kk
    lapack.call("gemm", (ta, tb, nn, mm, kk, 1.0, ym, lda, xm, ldb, 0.0, out, nn))
    return out


#: name: (implementation, the node function's source: a call with the inputs typed 'A' (one compile
#: per dtype and rank, whatever layouts a model's nodes have) and the props as non-literal bools)
_OPS = {
    "cholesky": (_cholesky, "def cholesky(a):\n    return _pm_impl(_pm_a(a), _pm_b({0}), _pm_b({1}))\n"),
    "solve_triangular2": (_solve_triangular2, "def solve_triangular(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}), _pm_b({2}), _pm_b(False))\n"),
    "solve_triangular1": (_solve_triangular1, "def solve_triangular(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}), _pm_b({2}))\n"),
    "cho_solve2": (_cho_solve2, "def cho_solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}), _pm_b(False))\n"),
    "cho_solve1": (_cho_solve1, "def cho_solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}))\n"),
    "solve_general2": (_solve_general2, "def solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}))\n"),
    "solve_general1": (_solve_general1, "def solve(a, b):\n    return _pm_impl(_pm_a(a), _pm_a(b), _pm_b({0}), _pm_b({1}))\n"),
    "lu_factor": (_lu_factor, "def lu_factor(a):\n    return _pm_impl(_pm_a(a), _pm_b({0}))\n"),
    "cholesky_grad": (_cholesky_grad, "def cholesky_grad(l, dz):\n    return _pm_impl(_pm_a(l), _pm_a(dz), _pm_b({0}))\n"),
    "dot": (_matmul, "def dot(x, y):\n    return _pm_impl(_pm_a(x), _pm_a(y))\n"),
}

#: The node functions of ops that may destroy an input (``overwrite_*``): an input typed F-ordered is
#: worked on in its memory, through its C transpose (:func:`lapack.fortran_t`), and the result is its
#: F-ordered transpose back; inputs typed otherwise are handled as above.
_DESTROYING = {
    "cholesky": "def cholesky(a):\n    return _pm_back(a, _pm_impl(_pm_a(_pm_ft(a)), _pm_b({0}) != _pm_b(_pm_isf(a)), _pm_b(True)))\n",
    "solve_triangular2": "def solve_triangular(a, b):\n    return _pm_back(b, _pm_impl(_pm_a(a), _pm_a(_pm_ft(b)), _pm_b({0}), _pm_b({1}), _pm_b(True), _pm_b(_pm_isf(b))))\n",
    "cho_solve2": "def cho_solve(a, b):\n    return _pm_back(b, _pm_impl(_pm_a(a), _pm_a(_pm_ft(b)), _pm_b({0}), _pm_b(True), _pm_b(_pm_isf(b))))\n",
}

_SHARED = ("_lu_general", "_c_matrix", "_c_copy2", "_f_copy2", "_c_copy1", "_check_solve", "_flags", "_tri_vec", "_tri_mat", "_tri_left", "_nan_fill2", "_has_zero_diagonal")
_jitted: dict = {}


#: The ``(implementation, dtype)`` pairs node functions were built for in this process, in order: the
#: handover worker compiles them before its first job (:func:`pmfast.compiler.handover.early_linalg`).
used: dict[tuple[str, str], None] = {}


def _source_hash() -> str:
    from pathlib import Path

    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(lapack.__file__).read_bytes())
    return h.hexdigest()[:16]


_SOURCE = _source_hash()


def jitted(name: str):
    """The implementation ``name`` (of :data:`_OPS` or the shared pieces) jitted once per process.

    Module-level functions with ``cache=True``: numba caches each per argument types on disk, keyed
    by this file, so one compile serves every props and model on the machine. The shared pieces are
    inlined into them at numba's IR level (as separate functions each caller linked and optimised
    their code again: LKJ's cold compile +0.6 CPU s). Module globals are rebound to the jitted
    versions the first time (numba resolves a function's globals when it types it).
    """
    if not _jitted:
        import numba

        lapack.define_symbols()
        cache.install()  # a caller linking an implementation numba loaded from its cache defines the symbols again
        for piece in _SHARED:  # inlined at numba's IR level into each implementation: no functions of their own
            _jitted[piece] = numba.njit(inline="always")(globals()[piece])
        for fn, _ in _OPS.values():
            _jitted[fn.__name__] = numba.njit(cache=True)(fn)
        globals().update(_jitted)
    return _jitted[_OPS[name][0].__name__] if name in _OPS else _jitted[name]


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
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_njit

    destroying = name in _DESTROYING and props[-1]
    src = (_DESTROYING[name] if destroying else _OPS[name][1]).format(*props)
    impl = _deferred(name, dtype)
    used.setdefault((name, dtype), None)
    helpers = lapack.layout_helpers()
    env = {"__name__": __name__, "_pm_impl": impl or jitted(name), "_pm_b": np.bool_, "_pm_a": lapack.as_any, **helpers}
    native_helpers = helpers["_pm_ft"] is not lapack.fortran_t
    key = f"pmfast_{name}_" + hashlib.sha256(repr((VERSION, _SOURCE, src, dtype, arrays.VERSION, impl is not None, native_helpers)).encode()).hexdigest()
    fname = src.split("(")[0][4:]
    return numba_njit(compile_numba_function_src(src, fname, env, env)), key


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
