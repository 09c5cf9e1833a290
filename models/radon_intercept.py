"""Radon varying-intercept model: log-radon with a county intercept gathered by index plus a floor effect.

Size: ~919 obs, 85 counties; 89 parameters (mu_a, sigma_a, 85 z_a, beta, sigma). Non-centered intercepts.
"""

import numpy as np
import pymc as pm


def simulate(n_obs=919, n_counties=85, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.gamma(1.0, 1.0, n_counties)
    county = np.concatenate([np.arange(n_counties), rng.choice(n_counties, n_obs - n_counties, p=weights / weights.sum())])
    rng.shuffle(county)
    floor = rng.binomial(1, 0.3, n_obs).astype("float64")
    a = 1.5 + 0.35 * rng.normal(size=n_counties)
    y = a[county] - 0.6 * floor + 0.75 * rng.normal(size=n_obs)
    return county, floor, y


def build_model(n_obs=919, n_counties=85, seed=0, numpy_indices=False):
    county, floor, y = simulate(n_obs, n_counties, seed)
    coords = {"county": np.arange(n_counties), "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        county_idx = county if numpy_indices else pm.Data("county_idx", county, dims="obs_id")
        floor_x = pm.Data("floor", floor, dims="obs_id")
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        z_a = pm.Normal("z_a", 0.0, 1.0, dims="county")
        a = pm.Deterministic("a", mu_a + sigma_a * z_a, dims="county")
        beta = pm.Normal("beta", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("log_radon", a[county_idx] + beta * floor_x, sigma, observed=y, dims="obs_id")
    return model
