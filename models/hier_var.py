"""Hierarchical vector autoregression: a VAR(2) of 3 macro series per country, 10 countries sharing priors.

Shaped like the hierarchical Bayesian VAR of the pymc-examples gallery: per country a block of lag
coefficients (equations x lags x cross-variables), intercepts, their own scales, and an LKJ-Cholesky
noise factor blended with a global one; each country's series ~ MvNormal(alpha + AR terms, chol).
Many blocks of coefficients enter one logp, whose fused scalar Composites are > 100 inputs wide.
Size: 10 countries x 60 quarters, 3 equations, 2 lags; 301 parameters.
"""

import numpy as np
import pymc as pm


def simulate(n_groups, n_time, n_eqs, n_lags, rng):
    """Stable VAR(n_lags) series per country (warm-up discarded)."""
    data = []
    base = rng.normal(0.15, 0.1, (n_eqs, n_lags, n_eqs))
    for _ in range(n_groups):
        coefs = base + 0.05 * rng.normal(size=base.shape)
        coefs /= max(1.0, 1.2 * np.abs(coefs).sum(axis=(1, 2)).max())
        alpha = rng.normal(0.01, 0.01, n_eqs)
        y = np.zeros((n_time + 50, n_eqs))
        for t in range(n_lags, len(y)):
            lagged = np.stack([y[t - i - 1] for i in range(n_lags)])  # (lags, eqs)
            y[t] = alpha + np.einsum("jlk,lk->j", coefs, lagged) + 0.02 * rng.normal(size=n_eqs)
        data.append(y[50:])
    return data


def ar_step(lag_coefs, n_eqs, n_lags, values):
    """alpha-free VAR mean, written as in the gallery: one sum per equation and lag over the lagged columns."""
    import pytensor.tensor as pt

    ars = []
    for j in range(n_eqs):
        ar = pt.sum(
            [pt.sum(lag_coefs[j, i] * values[n_lags - (i + 1) : -(i + 1)], axis=-1) for i in range(n_lags)],
            axis=0,
        )
        ars.append(ar)
    return pt.stack(ars, axis=-1)


def build_model(n_groups=10, n_time=60, n_eqs=3, n_lags=2, seed=0):
    rng = np.random.default_rng(seed)
    data = simulate(n_groups, n_time, n_eqs, n_lags, rng)
    cols = [f"y{k}" for k in range(n_eqs)]
    coords = {"lags": np.arange(n_lags) + 1, "equations": cols, "cross_vars": cols}
    with pm.Model(coords=coords) as model:
        rho = pm.Beta("rho", alpha=2, beta=2)
        alpha_hat_location = pm.Normal("alpha_hat_location", 0, 0.1)
        alpha_hat_scale = pm.InverseGamma("alpha_hat_scale", 3, 0.5)
        beta_hat_location = pm.Normal("beta_hat_location", 0, 0.1)
        beta_hat_scale = pm.InverseGamma("beta_hat_scale", 3, 0.5)
        omega_global, _, _ = pm.LKJCholeskyCov("omega_global", n=n_eqs, eta=1.0, sd_dist=pm.Exponential.dist(1))
        for g, values in enumerate(data):
            z_scale_beta = pm.InverseGamma(f"z_scale_beta_{g}", 3, 0.5)
            z_scale_alpha = pm.InverseGamma(f"z_scale_alpha_{g}", 3, 0.5)
            lag_coefs = pm.Normal(
                f"lag_coefs_{g}",
                mu=beta_hat_location,
                sigma=beta_hat_scale * z_scale_beta,
                dims=("equations", "lags", "cross_vars"),
            )
            alpha = pm.Normal(f"alpha_{g}", mu=alpha_hat_location, sigma=alpha_hat_scale * z_scale_alpha, dims="equations")
            mean = alpha + ar_step(lag_coefs, n_eqs, n_lags, values)
            noise_chol, _, _ = pm.LKJCholeskyCov(f"noise_chol_{g}", eta=10, n=n_eqs, sd_dist=pm.Exponential.dist(1))
            omega = rho * omega_global + (1 - rho) * noise_chol
            pm.MvNormal(f"obs_{g}", mu=mean, chol=omega, observed=values[n_lags:])
    return model
