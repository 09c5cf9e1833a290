"""Radon varying intercept with every data array in pm.Data (county index, floor, log-radon): one compile, many datasets.

The shape `pmfast fit-many` and `pmfast.fit_many` expect: swap `county_idx`, `floor` and `y`
(any number of rows; county indices below `n_counties`). Size: ~919 obs, 85 counties; 89 parameters.
"""

import numpy as np
import pymc as pm

from pmfast.models.radon_intercept import simulate


def dataset(n_obs=919, n_counties=85, seed=0) -> dict:
    """One simulated dataset, named as the model's pm.Data."""
    county, floor, y = simulate(n_obs, n_counties, seed)
    return {"county_idx": county, "floor": floor, "y": y}


def build_model(n_obs=919, n_counties=85, seed=0):
    data = dataset(n_obs, n_counties, seed)
    with pm.Model(coords={"county": np.arange(n_counties)}) as model:
        county_idx = pm.Data("county_idx", data["county_idx"])
        floor_x = pm.Data("floor", data["floor"])
        y = pm.Data("y", data["y"])
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        z_a = pm.Normal("z_a", 0.0, 1.0, dims="county")
        a = pm.Deterministic("a", mu_a + sigma_a * z_a, dims="county")
        beta = pm.Normal("beta", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("log_radon", a[county_idx] + beta * floor_x, sigma, observed=y)
    return model
