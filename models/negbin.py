"""Negative binomial regression for overdispersed counts (log link, 3 covariates).

Size: 1,000 obs, 3 covariates; 5 parameters (intercept, 3 coefficients, dispersion alpha).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=1000, n_covariates=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_obs, n_covariates))
    mu_true = np.exp(1.0 + X @ rng.normal(0.0, 0.4, n_covariates))
    alpha_true = 2.0
    y = rng.negative_binomial(alpha_true, alpha_true / (alpha_true + mu_true))
    coords = {"coef": [f"x{i}" for i in range(n_covariates)], "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        x = pm.Data("X", X, dims=("obs_id", "coef"))
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, dims="coef")
        alpha = pm.Gamma("alpha", 2.0, 0.5)
        pm.NegativeBinomial("y", mu=pm.math.exp(intercept + x @ beta), alpha=alpha, observed=y, dims="obs_id")
    return model
