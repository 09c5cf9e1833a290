"""Small Poisson regression with an exposure offset: 30 regions' event counts, pm.Data inputs.

Counts per region against two covariates with log(population at risk) as an offset (an incidence-rate
model). Size: 30 obs, 2 covariates; 3 parameters.
"""

import numpy as np
import pymc as pm


def build_model(n_obs=30, n_covariates=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_obs, n_covariates))
    population = rng.integers(2_000, 50_000, n_obs).astype("float64")
    rate_true = np.exp(-6.0 + X @ np.array([0.4, -0.25])[:n_covariates])
    y = rng.poisson(population * rate_true)
    coords = {"coef": [f"x{i}" for i in range(n_covariates)], "region": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        x = pm.Data("X", X, dims=("region", "coef"))
        log_pop = pm.Data("log_population", np.log(population), dims="region")
        counts = pm.Data("counts", y, dims="region")
        intercept = pm.Normal("intercept", -5.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, dims="coef")
        pm.Poisson("y", mu=pm.math.exp(log_pop + intercept + pm.math.dot(x, beta)), observed=counts, dims="region")
    return model
