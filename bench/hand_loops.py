"""Hand-written ``@njit`` logp+gradient kernels, as a numba expert writes them, for ``bench/limits.py``.

One pass over the rows, libm math (``math.exp``/``log1p``/``erfc``), no redundant
transcendentals (``softplus``, ``sigmoid`` and the log-likelihood of a Bernoulli-logit
row from one ``exp(-|d|)``), transforms of short parameter vectors computed once per
parameter (``a = exp(log_a)`` over the items, not per response), constants such as
``sum(gammaln(y + 1))`` precomputed. Every kernel takes the raveled unconstrained point
``x`` (nutpie's layout: value variables in ``model.free_RVs`` order) and the data, and
returns ``(np.asarray(logp), grad)`` like the compiled graph function.

Each model gives ``(kernel, data_fn)``: ``data_fn(model)`` reads the arrays the kernel
needs from the PyMC model itself (pm.Data values, observed values), so the hand loop and
the compiled graphs see the same data.
"""

from __future__ import annotations

import math

import numba
import numpy as np

LOG_2PI_HALF = 0.5 * math.log(2.0 * math.pi)
#: log of HalfNormal's normaliser: 0.5 * log(2 / pi)
LOG_HN = 0.5 * math.log(2.0 / math.pi)


@numba.njit(inline="always")
def normal(x, mu, inv_s, log_s):
    """logp of N(mu, s) at x and d/dx (given 1/s and log s)."""
    z = (x - mu) * inv_s
    return -0.5 * z * z - log_s - LOG_2PI_HALF, -z * inv_s


@numba.njit(inline="always")
def halfnormal_log(v, sigma0):
    """logp of HalfNormal(sigma0) at exp(v) plus the log-transform's Jacobian v, and d/dv."""
    s = math.exp(v)
    r = s / sigma0
    return LOG_HN - math.log(sigma0) - 0.5 * r * r + v, 1.0 - r * r


@numba.njit(inline="always")
def bernoulli_logit(d, y):
    """Bernoulli(logit_p=d) logp at y in {0, 1} and d/dd, from one exp and one log1p, branch-free."""
    e = math.exp(-abs(d))
    l1 = math.log1p(e)
    inv = 1.0 / (1.0 + e)
    sig = inv if d >= 0.0 else e * inv  # sigmoid(d)
    return y * d - (max(d, 0.0) + l1), y - sig


def _data(model, *names):
    out = []
    for name in names:
        if name in {rv.name for rv in model.observed_RVs}:
            out.append(np.asarray(model.rvs_to_values[model[name]].data))
        else:
            out.append(np.asarray(model[name].get_value()))
    return out


# --- radon_intercept: mu_a, sigma_a_log__, z_a[J], beta, sigma_log__ -----------------------
@numba.njit(cache=True)
def radon_intercept(x, county, floor, y):
    J = (x.shape[0] - 4)
    mu_a, la, beta, ls = x[0], x[1], x[2 + J], x[3 + J]
    z = x[2 : 2 + J]
    g = np.zeros_like(x)
    lp, g[0] = normal(mu_a, 0.0, 0.2, math.log(5.0))
    t, g[1] = halfnormal_log(la, 1.0)
    lp += t
    t, g[2 + J] = normal(beta, 0.0, 1.0, 0.0)
    lp += t
    t, g[3 + J] = halfnormal_log(ls, 1.0)
    lp += t
    sa, s = math.exp(la), math.exp(ls)
    a = np.empty(J)
    for j in range(J):
        a[j] = mu_a + sa * z[j]
        lp += -0.5 * z[j] * z[j] - LOG_2PI_HALF
        g[2 + j] = -z[j]
    inv2 = 1.0 / (s * s)
    ss = 0.0
    sr = 0.0
    srf = 0.0
    srz = 0.0
    gz = np.zeros(J)
    for i in range(county.shape[0]):
        c = county[i]
        r = y[i] - a[c] - beta * floor[i]
        ss += r * r
        sr += r
        srf += r * floor[i]
        srz += r * z[c]
        gz[c] += r
    n = county.shape[0]
    lp += -0.5 * ss * inv2 - n * (ls + LOG_2PI_HALF)
    g[0] += sr * inv2
    g[1] += sa * srz * inv2
    for j in range(J):
        g[2 + j] += sa * gz[j] * inv2
    g[2 + J] += srf * inv2
    g[3 + J] += ss * inv2 - n
    return np.asarray(lp), g


# --- radon_slope: mu_a, mu_b, sigma_a_log__, sigma_b_log__, z_a[J], z_b[J], sigma_log__ ----
@numba.njit(cache=True)
def radon_slope(x, county, floor, y):
    J = (x.shape[0] - 5) // 2
    mu_a, mu_b, la, lb, ls = x[0], x[1], x[2], x[3], x[4 + 2 * J]
    za, zb = x[4 : 4 + J], x[4 + J : 4 + 2 * J]
    g = np.zeros_like(x)
    lp, g[0] = normal(mu_a, 0.0, 0.2, math.log(5.0))
    t, g[1] = normal(mu_b, 0.0, 1.0, 0.0)
    lp += t
    t, g[2] = halfnormal_log(la, 1.0)
    lp += t
    t, g[3] = halfnormal_log(lb, 0.5)
    lp += t
    t, g[4 + 2 * J] = halfnormal_log(ls, 1.0)
    lp += t
    sa, sb, s = math.exp(la), math.exp(lb), math.exp(ls)
    a = np.empty(J)
    b = np.empty(J)
    for j in range(J):
        a[j] = mu_a + sa * za[j]
        b[j] = mu_b + sb * zb[j]
        lp += -0.5 * (za[j] * za[j] + zb[j] * zb[j]) - 2.0 * LOG_2PI_HALF
        g[4 + j] = -za[j]
        g[4 + J + j] = -zb[j]
    ss = 0.0
    ga = np.zeros(J)
    gb = np.zeros(J)
    for i in range(county.shape[0]):
        c = county[i]
        f = floor[i]
        r = y[i] - a[c] - b[c] * f
        ss += r * r
        ga[c] += r
        gb[c] += r * f
    inv2 = 1.0 / (s * s)
    n = county.shape[0]
    lp += -0.5 * ss * inv2 - n * (ls + LOG_2PI_HALF)
    for j in range(J):
        ga[j] *= inv2
        gb[j] *= inv2
        g[0] += ga[j]
        g[1] += gb[j]
        g[2] += sa * za[j] * ga[j]
        g[3] += sb * zb[j] * gb[j]
        g[4 + j] += sa * ga[j]
        g[4 + J + j] += sb * gb[j]
    g[4 + 2 * J] += ss * inv2 - n
    return np.asarray(lp), g


# --- crossed_effects: mu, sigma_u_log__, sigma_w_log__, u[U], w[W], sigma_log__ ------------
@numba.njit(cache=True)
def crossed_effects(x, subj, item, y, n_u):
    U = n_u
    W = x.shape[0] - 4 - U
    mu, lsu, lsw, ls = x[0], x[1], x[2], x[3 + U + W]
    u, w = x[3 : 3 + U], x[3 + U : 3 + U + W]
    g = np.zeros_like(x)
    lp, g[0] = normal(mu, 0.0, 0.2, math.log(5.0))
    t, g[1] = halfnormal_log(lsu, 1.0)
    lp += t
    t, g[2] = halfnormal_log(lsw, 1.0)
    lp += t
    t, g[3 + U + W] = halfnormal_log(ls, 2.0)
    lp += t
    su, sw, s = math.exp(lsu), math.exp(lsw), math.exp(ls)
    ssu = 0.0
    for j in range(U):
        ssu += u[j] * u[j]
    ssw = 0.0
    for j in range(W):
        ssw += w[j] * w[j]
    lp += -0.5 * ssu / (su * su) - U * (lsu + LOG_2PI_HALF) - 0.5 * ssw / (sw * sw) - W * (lsw + LOG_2PI_HALF)
    g[1] += ssu / (su * su) - U
    g[2] += ssw / (sw * sw) - W
    ss = 0.0
    sr = 0.0
    gu = np.zeros(U)
    gw = np.zeros(W)
    for i in range(subj.shape[0]):
        a = subj[i]
        b = item[i]
        r = y[i] - mu - u[a] - w[b]
        ss += r * r
        sr += r
        gu[a] += r
        gw[b] += r
    inv2 = 1.0 / (s * s)
    n = subj.shape[0]
    lp += -0.5 * ss * inv2 - n * (ls + LOG_2PI_HALF)
    g[0] += sr * inv2
    for j in range(U):
        g[3 + j] = gu[j] * inv2 - u[j] / (su * su)
    for j in range(W):
        g[3 + U + j] = gw[j] * inv2 - w[j] / (sw * sw)
    g[3 + U + W] += ss * inv2 - n
    return np.asarray(lp), g


# --- irt_2pl: theta[P], sigma_a_log__, log_a[K], mu_b, sigma_b_log__, b[K] -----------------
@numba.njit(cache=True)
def irt_2pl(x, item, person, y, n_persons):
    P = n_persons
    K = (x.shape[0] - P - 3) // 2
    theta = x[:P]
    lsa = x[P]
    log_a = x[P + 1 : P + 1 + K]
    mu_b, lsb = x[P + 1 + K], x[P + 2 + K]
    b = x[P + 3 + K :]
    g = np.zeros_like(x)
    lp = 0.0
    for p in range(P):
        lp += -0.5 * theta[p] * theta[p] - LOG_2PI_HALF
        g[p] = -theta[p]
    t, g[P] = halfnormal_log(lsa, 0.5)
    lp += t
    t, g[P + 1 + K] = normal(mu_b, 0.0, 1.0, 0.0)
    lp += t
    t, g[P + 2 + K] = halfnormal_log(lsb, 1.0)
    lp += t
    sa, sb = math.exp(lsa), math.exp(lsb)
    a = np.empty(K)
    for k in range(K):
        a[k] = math.exp(log_a[k])
        t, gk = normal(log_a[k], 0.0, 1.0 / sa, lsa)
        lp += t
        g[P + 1 + k] = gk
        g[P] += (log_a[k] / sa) ** 2 - 1.0
        t, gk = normal(b[k], mu_b, 1.0 / sb, lsb)
        lp += t
        g[P + 3 + K + k] = gk
        g[P + 1 + K] -= gk
        g[P + 2 + K] += ((b[k] - mu_b) / sb) ** 2 - 1.0
    for i in range(item.shape[0]):
        k = item[i]
        p = person[i]
        diff = theta[p] - b[k]
        eta = a[k] * diff
        t, ge = bernoulli_logit(eta, y[i])
        lp += t
        g[p] += a[k] * ge
        g[P + 3 + K + k] -= a[k] * ge
        g[P + 1 + k] += ge * eta
    return np.asarray(lp), g


# --- bradley_terry: sigma_skill_log__, skill[N] ---------------------------------------------
@numba.njit(cache=True)
def bradley_terry(x, p1, p2, y):
    N = x.shape[0] - 1
    ls = x[0]
    g = np.zeros_like(x)
    lp, g[0] = halfnormal_log(ls, 1.0)
    s = math.exp(ls)
    inv = 1.0 / s
    ss = 0.0
    for j in range(N):
        v = x[1 + j]
        ss += v * v
        g[1 + j] = -v * inv * inv
    lp += -0.5 * ss * inv * inv - N * (ls + LOG_2PI_HALF)
    g[0] += ss * inv * inv - N
    for i in range(p1.shape[0]):
        a = p1[i]
        b = p2[i]
        t, gd = bernoulli_logit(x[1 + a] - x[1 + b], y[i])
        lp += t
        g[1 + a] += gd
        g[1 + b] -= gd
    return np.asarray(lp), g


# --- hier_logistic: mu_beta[C], sigma_beta_log__[C], z_beta[G, C] ---------------------------
@numba.njit(cache=True)
def hier_logistic(x, X, group, y):
    C = X.shape[1]
    G = (x.shape[0] - 2 * C) // C
    mu = x[:C]
    lsig = x[C : 2 * C]
    z = x[2 * C :].reshape((G, C))
    g = np.zeros_like(x)
    lp = 0.0
    sig = np.empty(C)
    for c in range(C):
        t, g[c] = normal(mu[c], 0.0, 1.0, 0.0)
        lp += t
        t, g[C + c] = halfnormal_log(lsig[c], 0.5)
        lp += t
        sig[c] = math.exp(lsig[c])
    beta = np.empty((G, C))
    for j in range(G):
        for c in range(C):
            beta[j, c] = mu[c] + sig[c] * z[j, c]
            lp += -0.5 * z[j, c] * z[j, c] - LOG_2PI_HALF
    gb = np.zeros((G, C))
    for i in range(group.shape[0]):
        j = group[i]
        eta = 0.0
        for c in range(C):
            eta += X[i, c] * beta[j, c]
        t, ge = bernoulli_logit(eta, y[i])
        lp += t
        for c in range(C):
            gb[j, c] += ge * X[i, c]
    for j in range(G):
        for c in range(C):
            g[c] += gb[j, c]
            g[C + c] += sig[c] * z[j, c] * gb[j, c]
            g[2 * C + j * C + c] = sig[c] * gb[j, c] - z[j, c]
    return np.asarray(lp), g


# --- poisson_attack_defence (bench/limits.py): intercept, home, sigma_att_log__, sigma_def_log__,
#     att[T], def[T] -------------------------------------------------------------------------
@numba.njit(cache=True)
def poisson_attack_defence(x, home, away, yh, ya, const):
    T = (x.shape[0] - 4) // 2
    c0, hadv, lsa, lsd = x[0], x[1], x[2], x[3]
    att, dfn = x[4 : 4 + T], x[4 + T :]
    g = np.zeros_like(x)
    lp, g[0] = normal(c0, 0.0, 1.0, 0.0)
    t, g[1] = normal(hadv, 0.0, 1.0, 0.0)
    lp += t
    t, g[2] = halfnormal_log(lsa, 1.0)
    lp += t
    t, g[3] = halfnormal_log(lsd, 1.0)
    lp += t
    sa, sd = math.exp(lsa), math.exp(lsd)
    for j in range(T):
        t, gj = normal(att[j], 0.0, 1.0 / sa, lsa)
        lp += t
        g[4 + j] = gj
        g[2] += (att[j] / sa) ** 2 - 1.0
        t, gj = normal(dfn[j], 0.0, 1.0 / sd, lsd)
        lp += t
        g[4 + T + j] = gj
        g[3] += (dfn[j] / sd) ** 2 - 1.0
    lp -= const
    for i in range(home.shape[0]):
        h = home[i]
        a = away[i]
        eh = c0 + hadv + att[h] - dfn[a]
        ea = c0 + att[a] - dfn[h]
        mh = math.exp(eh)
        ma = math.exp(ea)
        lp += yh[i] * eh - mh + ya[i] * ea - ma
        rh = yh[i] - mh
        ra = ya[i] - ma
        g[0] += rh + ra
        g[1] += rh
        g[4 + h] += rh
        g[4 + T + a] -= rh
        g[4 + a] += ra
        g[4 + T + h] -= ra
    return np.asarray(lp), g


# --- pairwise_probit (bench/limits.py): s[S], sigma_j_log__, lj[J] ---------------------------
#: pymc's invprobit constants (``0.5 * erfc(-x / sqrt(2))`` with a float32 sqrt(2)), as stock uses them
PROBIT_C = -0.7071067932881648
PROBIT_K = -(PROBIT_C * PROBIT_C)
PROBIT_D = -2.0 * PROBIT_C / math.sqrt(math.pi)


@numba.njit(cache=True)
def pairwise_probit(x, ia, ib, judge, y, n_items):
    S = n_items
    J = x.shape[0] - S - 1
    s = x[:S]
    lsj = x[S]
    lj = x[S + 1 :]
    g = np.zeros_like(x)
    lp = 0.0
    for k in range(S):
        lp += -0.5 * s[k] * s[k] - LOG_2PI_HALF
        g[k] = -s[k]
    t, g[S] = halfnormal_log(lsj, 0.5)
    lp += t
    sj = math.exp(lsj)
    w = np.empty(J)
    for j in range(J):
        w[j] = math.exp(lj[j])
        t, gj = normal(lj[j], 0.0, 1.0 / sj, lsj)
        lp += t
        g[S + 1 + j] = gj
        g[S] += (lj[j] / sj) ** 2 - 1.0
    for i in range(ia.shape[0]):
        a = ia[i]
        b = ib[i]
        j = judge[i]
        d = s[a] - s[b]
        t = w[j] * d
        e = math.erfc(PROBIT_C * t)  # 2 * P(y = 1)
        dens = PROBIT_D * math.exp(PROBIT_K * t * t)
        if y[i]:
            lp += math.log(0.5 * e)
            gt = dens / e
        else:
            lp += math.log1p(-0.5 * e)
            gt = -0.5 * dens / (1.0 - 0.5 * e)
        g[a] += gt * w[j]
        g[b] -= gt * w[j]
        g[S + 1 + j] += gt * t
    return np.asarray(lp), g


def _indexed(model, *names):
    return tuple(a.astype(np.int64) if a.dtype.kind in "iu" else a for a in _data(model, *names))


#: model name -> (kernel, data_fn(model) -> extra kernel arguments after x)
HAND = {
    "radon_intercept": (radon_intercept, lambda m: _indexed(m, "county_idx", "floor", "log_radon")),
    "radon_slope": (radon_slope, lambda m: _indexed(m, "county_idx", "floor", "log_radon")),
    "crossed_effects": (
        crossed_effects,
        lambda m: (*_indexed(m, "subject_idx", "item_idx", "y"), len(m.coords["subject"])),
    ),
    "irt_2pl": (irt_2pl, lambda m: (*_indexed(m, "item_idx", "person_idx", "y"), len(m.coords["person"]))),
    "bradley_terry": (bradley_terry, lambda m: _indexed(m, "player1", "player2", "p1_wins")),
    "hier_logistic": (hier_logistic, lambda m: _indexed(m, "X", "group_idx", "y")),
}
