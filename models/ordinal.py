"""Ordinal (ordered-logistic) regression: a 5-level rating driven by 3 covariates, with ordered cutpoints.

Size: 1,000 obs, 3 covariates, 5 categories; 7 parameters (3 coefficients, 4 ordered cutpoints).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=1000, n_covariates=3, n_categories=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_obs, n_covariates))
    eta = X @ rng.normal(0.0, 1.0, n_covariates)
    cut_true = np.linspace(-2.0, 2.0, n_categories - 1)
    y = (eta[:, None] + rng.logistic(size=n_obs)[:, None] > cut_true).sum(-1)
    coords = {"coef": [f"x{i}" for i in range(n_covariates)], "cut": np.arange(n_categories - 1),
              "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        x = pm.Data("X", X, dims=("obs_id", "coef"))
        beta = pm.Normal("beta", 0.0, 1.0, dims="coef")
        cutpoints = pm.Normal("cutpoints", 0.0, 3.0, dims="cut", transform=pm.distributions.transforms.ordered,
                              initval=np.linspace(-1.5, 1.5, n_categories - 1))
        pm.OrderedLogistic("y", eta=x @ beta, cutpoints=cutpoints, observed=y, dims="obs_id")
    return model
