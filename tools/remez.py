"""A small weighted minimax (Remez exchange) polynomial fit in mpmath.

``remez(f, w, a, b, degree)`` returns the coefficients ``c`` (low order first)
of the polynomial ``p`` of the given degree minimising ``max |w(v) (p(v) - f(v))|``
over ``[a, b]``, and that maximum. ``f`` and ``w`` are mpmath callables of the
fitting variable ``v``. Used offline by ``tools/fit_vmath.py``; numpy-free so the
fit runs in any precision (``mpmath.mp.dps``).
"""

from __future__ import annotations

import mpmath as mp


def _horner(c, v):
    acc = mp.mpf(0)
    for coef in reversed(c):
        acc = acc * v + coef
    return acc


def _solve(f, w, pts, powers):
    """Coefficients and levelled error ``E`` with ``w(x_i)(p(x_i) - f(x_i)) = (-1)^i E``."""
    m = len(powers) + 1
    A = mp.matrix(m, m)
    rhs = mp.matrix(m, 1)
    for i, x in enumerate(pts):
        for j, k in enumerate(powers):
            A[i, j] = x**k
        A[i, m - 1] = (-1) ** i / w(x)
        rhs[i] = f(x)
    sol = mp.lu_solve(A, rhs)
    return [sol[j] for j in range(m - 1)], sol[m - 1]


def _refine(err, lo, hi, x0, iters=16):
    """Local maximiser of ``|err|`` in ``[lo, hi]`` near ``x0`` (golden section)."""
    g = (mp.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = abs(err(c)), abs(err(d))
    for _ in range(iters):
        if fc > fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = abs(err(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = abs(err(d))
    best = max((x0, c, d), key=lambda t: abs(err(t)))
    return best


def remez(f, w, a, b, degree, grid=3000, iters=40, tol=1e-4, verbose=False, fixed=None):
    """Weighted minimax polynomial of ``degree`` for ``f`` on ``[a, b]``.

    Returns ``(coefficients, max_weighted_error)``. Grid values of ``f`` and
    ``w`` are computed once; each exchange re-solves the levelled system on
    ``degree + 2 - len(fixed)`` alternation points, then moves them to the local
    extrema of the error (one per sign run, keeping the global maximum).
    ``fixed`` maps powers to already chosen coefficients (kept as given).
    """
    a, b = mp.mpf(a), mp.mpf(b)
    fixed = {k: mp.mpf(c) for k, c in (fixed or {}).items()}
    powers = [k for k in range(degree + 1) if k not in fixed]
    fixed_poly = [fixed.get(k, mp.mpf(0)) for k in range(degree + 1)]
    f0 = f
    f = lambda v: f0(v) - _horner(fixed_poly, v)  # noqa: E731
    m = len(powers) + 1
    xs = [a + (b - a) * (1 - mp.cos(mp.pi * (i + mp.mpf(1) / 2) / grid)) / 2 for i in range(grid)]
    xs = [a] + xs + [b]
    fw = [(f0(x), w(x)) for x in xs]
    pts = [a + (b - a) * (1 - mp.cos(mp.pi * i / (m - 1))) / 2 for i in range(m)]
    # keep alternation points off zeros of w (e.g. the weight r^k at r = 0)
    pts = [x if w(x) != 0 else x + (b - a) * mp.mpf(10) ** -6 for x in pts]
    best = None
    for it in range(iters):
        free, E = _solve(f, w, pts, powers)
        c = list(fixed_poly)
        for k, v in zip(powers, free):
            c[k] = v
        errs = [wi * (_horner(c, x) - fi) for x, (fi, wi) in zip(xs, fw)]  # fi: f0
        # extrema of each sign run
        runs = []
        start = 0
        for i in range(1, len(xs) + 1):
            if i == len(xs) or mp.sign(errs[i]) != mp.sign(errs[start]) and errs[i] != 0:
                k = max(range(start, i), key=lambda t: abs(errs[t]))
                runs.append(k)
                start = i
        errfn = lambda x: w(x) * (_horner(c, x) - f0(x))  # noqa: E731
        cand = []
        for k in runs:
            lo, hi = xs[max(k - 1, 0)], xs[min(k + 1, len(xs) - 1)]
            x = _refine(errfn, lo, hi, xs[k]) if 0 < k < len(xs) - 1 else xs[k]
            cand.append((x, errfn(x)))
        # runs alternate in sign; trim the smaller end until m points remain
        while len(cand) > m:
            cand.pop(0 if abs(cand[0][1]) < abs(cand[-1][1]) else -1)
        maxerr = max(abs(e) for e in errs)
        if best is None or maxerr < best[1]:
            best = (c, maxerr)
        if verbose:
            print(f"  iter {it}: levelled {mp.nstr(abs(E), 5)}  max {mp.nstr(maxerr, 5)}  runs {len(runs)}")
        if len(cand) < m:
            break  # fewer sign runs than needed: already (near) optimal
        pts = [x for x, _ in cand]
        if maxerr - abs(E) <= tol * maxerr:
            break
    return best


def max_error(f, w, a, b, c, n=20000):
    """Max weighted error of coefficients ``c`` (e.g. rounded to doubles) on a dense grid."""
    a, b = mp.mpf(a), mp.mpf(b)
    worst = (mp.mpf(0), a)
    for i in range(n + 1):
        x = a + (b - a) * i / n
        e = abs(w(x) * (_horner(c, x) - f(x)))
        if e > worst[0]:
            worst = (e, x)
    return worst


def remez_rounded(f, w, a, b, degree, **kw):
    """Minimax coefficients rounded to doubles one at a time, highest order first.

    After each coefficient is rounded the lower ones are refitted with it
    fixed, so they absorb its rounding error; the constant term, rounded
    last, carries the one error no refit can absorb (the value at 0 is a
    double). Returns ``(coefficients as floats, max weighted error with them)``.
    """
    fixed = {}
    for k in range(degree, -1, -1):
        c, _e = remez(f, w, a, b, degree, fixed=fixed, **kw)
        fixed[k] = mp.mpf(float(c[k]))
    c = [fixed[k] for k in range(degree + 1)]
    return [float(x) for x in c], max_error(f, w, a, b, c, n=4000)[0]
