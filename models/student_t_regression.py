"""Robust linear regression: 50 rows, Student-t noise with an unknown degrees of freedom, pm.Data x and y.

A straight line through data with a few outliers, the noise's tail weight estimated (nu ~ Gamma(2, 0.1)).
Size: 50 obs; 4 parameters (intercept, slope, sigma, nu).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=50, seed=0):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 10.0, n_obs))
    y = 1.0 + 0.5 * x + 0.8 * rng.standard_t(3.0, n_obs)
    y[rng.choice(n_obs, 3, replace=False)] += 6.0
    with pm.Model() as model:
        x_data = pm.Data("x", x)
        y_data = pm.Data("y_obs", y)
        intercept = pm.Normal("intercept", 0.0, 10.0)
        slope = pm.Normal("slope", 0.0, 5.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        nu = pm.Gamma("nu", 2.0, 0.1)
        pm.StudentT("y", nu=nu, mu=intercept + slope * x_data, sigma=sigma, observed=y_data)
    return model
