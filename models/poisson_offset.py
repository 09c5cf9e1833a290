"""Poisson GLM with a log-exposure offset (e.g. claim counts per policy with varying exposure time).

Size: 2,000 obs, 4 covariates; 5 parameters (intercept, 4 coefficients).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=2000, n_covariates=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_obs, n_covariates))
    exposure = rng.uniform(0.1, 5.0, n_obs)
    beta_true = rng.normal(0.0, 0.3, n_covariates)
    y = rng.poisson(exposure * np.exp(-0.5 + X @ beta_true))
    coords = {"coef": [f"x{i}" for i in range(n_covariates)], "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        x = pm.Data("X", X, dims=("obs_id", "coef"))
        log_exposure = pm.Data("log_exposure", np.log(exposure), dims="obs_id")
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, dims="coef")
        pm.Poisson("y", pm.math.exp(log_exposure + intercept + x @ beta), observed=y, dims="obs_id")
    return model
