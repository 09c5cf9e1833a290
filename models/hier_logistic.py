"""Hierarchical logistic regression: group-varying intercept and coefficients on 3 covariates.

Size: 5,000 obs, 30 groups, 3 covariates; 128 parameters (4 hyper-means, 4 hyper-scales, 30x4 z's).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=5000, n_groups=30, n_covariates=3, seed=0):
    rng = np.random.default_rng(seed)
    k = n_covariates + 1
    group = rng.integers(0, n_groups, n_obs)
    X = np.column_stack([np.ones(n_obs), rng.normal(size=(n_obs, n_covariates))])
    beta_true = rng.normal(0.0, 0.5, k) + 0.3 * rng.normal(size=(n_groups, k))
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X * beta_true[group]).sum(-1))))
    coords = {"group": np.arange(n_groups), "coef": ["intercept"] + [f"x{i}" for i in range(n_covariates)],
              "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        group_idx = pm.Data("group_idx", group, dims="obs_id")
        x = pm.Data("X", X, dims=("obs_id", "coef"))
        mu_beta = pm.Normal("mu_beta", 0.0, 1.0, dims="coef")
        sigma_beta = pm.HalfNormal("sigma_beta", 0.5, dims="coef")
        z = pm.Normal("z_beta", 0.0, 1.0, dims=("group", "coef"))
        beta = pm.Deterministic("beta", mu_beta + sigma_beta * z, dims=("group", "coef"))
        pm.Bernoulli("y", logit_p=(x * beta[group_idx]).sum(-1), observed=y, dims="obs_id")
    return model
