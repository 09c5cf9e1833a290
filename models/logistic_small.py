"""Small logistic regression: 40 rows, an intercept and 3 covariates, pm.Data design matrix and outcome.

The textbook first model (e.g. admission or churn against a few standardised predictors) with the data
in pm.Data so it can be swapped for predictions. Size: 40 obs, 3 covariates; 4 parameters.
"""

import numpy as np
import pymc as pm


def build_model(n_obs=40, n_covariates=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_obs, n_covariates))
    beta_true = rng.normal(0.0, 1.0, n_covariates)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(0.3 + X @ beta_true))))
    coords = {"coef": [f"x{i}" for i in range(n_covariates)], "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        x = pm.Data("X", X, dims=("obs_id", "coef"))
        y_obs = pm.Data("y_obs", y, dims="obs_id")
        intercept = pm.Normal("intercept", 0.0, 2.5)
        beta = pm.Normal("beta", 0.0, 2.5, dims="coef")
        pm.Bernoulli("y", logit_p=intercept + x @ beta, observed=y_obs, dims="obs_id")
    return model
