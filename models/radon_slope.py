"""Radon varying-intercept, varying-slope model: log-radon ~ a[county] + b[county] * floor.

Size: ~919 obs, 85 counties; 175 parameters (2 hyper-means, 2 hyper-scales, 2x85 z's, sigma). Non-centered.
"""

import numpy as np
import pymc as pm

from .radon_intercept import simulate


def build_model(n_obs=919, n_counties=85, seed=0):
    county, floor, _ = simulate(n_obs, n_counties, seed)
    rng = np.random.default_rng(seed + 1)
    a = 1.5 + 0.35 * rng.normal(size=n_counties)
    b = -0.6 + 0.2 * rng.normal(size=n_counties)
    y = a[county] + b[county] * floor + 0.75 * rng.normal(size=n_obs)
    coords = {"county": np.arange(n_counties), "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        county_idx = pm.Data("county_idx", county, dims="obs_id")
        floor_x = pm.Data("floor", floor, dims="obs_id")
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        mu_b = pm.Normal("mu_b", 0.0, 1.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        sigma_b = pm.HalfNormal("sigma_b", 0.5)
        z_a = pm.Normal("z_a", 0.0, 1.0, dims="county")
        z_b = pm.Normal("z_b", 0.0, 1.0, dims="county")
        a = pm.Deterministic("a", mu_a + sigma_a * z_a, dims="county")
        b = pm.Deterministic("b", mu_b + sigma_b * z_b, dims="county")
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("log_radon", a[county_idx] + b[county_idx] * floor_x, sigma, observed=y, dims="obs_id")
    return model
