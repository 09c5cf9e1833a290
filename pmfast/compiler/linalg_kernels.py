"""The numba implementations behind pmfast's dense linear algebra (:mod:`pmfast.compiler.linalg`).

One module-level function per op and rank (``_cholesky``, ``_solve_triangular2``…), its props
run-time flags, built from shared pieces (layout views, copies, the triangular solves:
:data:`SHARED`, inlined into each at numba's IR level); :data:`IMPLEMENTATIONS` names them.
BLAS/LAPACK is called through :func:`pmfast.compiler.lapack.call`. Plain Python here;
:func:`pmfast.compiler.linalg.jitted` jits them.

**Layout.** Every result is a new C-contiguous array; ``LUFactor``'s and a general ``Solve``'s
with a matrix right-hand side are Fortran-ordered, as LAPACK writes them (and stock returns them). **Destroyed inputs** follow stock's rules: an op whose ``overwrite_*`` prop is set (pytensor's
inplace rewrites set it where the input is not needed afterwards) works in the input's memory when
stock's does — ``Cholesky`` on a C- or F-contiguous input, the solves on an F-contiguous right-hand
side (a vector, a single column), ``LUFactor`` on an F-contiguous input — and copies otherwise. An
input numba types F-ordered is worked on through its C transpose and the result is F-ordered
(:data:`pmfast.compiler.linalg._DESTROYING`, chosen at typing time); one typed 'A' that happens to
be F-contiguous is copied (the result's type can't depend on run-time flags). A
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
``trsm`` from the other side can sum in another order).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError

from pmfast.compiler import arrays, lapack, native

#: Up to this order a triangular solve with a matrix right-hand side is a loop over its rows
#: (contiguous, vectorized): ``trsm`` from the right costs ~18 µs for a 2×2 factor and 10,000
#: columns (the LKJ model), the rows' axpys a few.
SMALL_ORDER = 8

_L, _U, _N, _T, _R = ord("L"), ord("U"), ord("N"), ord("T"), ord("R")


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


#: Each op's implementation, by the name :mod:`pmfast.compiler.linalg` builds node functions under.
IMPLEMENTATIONS = {
    "cholesky": _cholesky,
    "solve_triangular2": _solve_triangular2,
    "solve_triangular1": _solve_triangular1,
    "cho_solve2": _cho_solve2,
    "cho_solve1": _cho_solve1,
    "solve_general2": _solve_general2,
    "solve_general1": _solve_general1,
    "lu_factor": _lu_factor,
    "cholesky_grad": _cholesky_grad,
    "dot": _matmul,
}

#: The shared pieces: each inlined into the implementations that call it (no function of its own).
SHARED = ("_lu_general", "_c_matrix", "_c_copy2", "_f_copy2", "_c_copy1", "_check_solve", "_flags", "_tri_vec", "_tri_mat", "_tri_left", "_nan_fill2", "_has_zero_diagonal")
