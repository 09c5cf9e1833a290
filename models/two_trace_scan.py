"""Logistic growth of 50 units simulated by one `pytensor.scan` carrying two traces from the SAME initial state.

Both traces use the same Euler logistic-growth recurrence and start from `outputs_info=[x0, x0]`; each trace is
observed by its own noisy measurement channel. With `shared_rate=True` (default) the two updates are identical, so
a scan-dedup pass can merge them; with `shared_rate=False` channel B gets its own growth-rate vector.
Size: 2 x 100 steps x 50 units = 10,000 obs; 103 parameters (50 log initial states, 50 log growth rates,
capacity K, 2 noise scales) (+50 rates when shared_rate=False).
"""

import numpy as np
import pymc as pm
import pytensor


def build_model(n_units=50, n_steps=100, dt=0.1, shared_rate=True, seed=0):
    rng = np.random.default_rng(seed)
    x0_true = np.exp(np.log(0.05) + 0.3 * rng.normal(size=n_units))
    r_true = np.exp(0.2 * rng.normal(size=n_units))
    xs, x = [], x0_true
    for _ in range(n_steps):
        x = x + dt * r_true * x * (1.0 - x / 2.0)
        xs.append(x)
    xs = np.array(xs)
    y_a = xs + 0.05 * rng.normal(size=xs.shape)
    y_b = xs + 0.1 * rng.normal(size=xs.shape)
    coords = {"time": np.arange(n_steps), "unit": np.arange(n_units)}
    with pm.Model(coords=coords) as model:
        obs_a = pm.Data("y_a", y_a, dims=("time", "unit"))
        obs_b = pm.Data("y_b", y_b, dims=("time", "unit"))
        x0 = pm.Deterministic("x0", pm.math.exp(pm.Normal("log_x0", np.log(0.05), 1.0, dims="unit")), dims="unit")
        r_a = pm.Deterministic("r_a", pm.math.exp(pm.Normal("log_r_a", 0.0, 0.5, dims="unit")), dims="unit")
        r_b = r_a if shared_rate else pm.Deterministic(
            "r_b", pm.math.exp(pm.Normal("log_r_b", 0.0, 0.5, dims="unit")), dims="unit")
        K = pm.LogNormal("K", np.log(2.0), 0.5)
        sigma_a = pm.HalfNormal("sigma_a", 0.5)
        sigma_b = pm.HalfNormal("sigma_b", 0.5)

        def step(xa, xb, k, ra, rb=None):
            rb = ra if rb is None else rb
            return xa + dt * ra * xa * (1.0 - xa / k), xb + dt * rb * xb * (1.0 - xb / k)

        rates = [r_a] if shared_rate else [r_a, r_b]
        trace_a, trace_b = pytensor.scan(
            step, outputs_info=[x0, x0], non_sequences=[K, *rates], n_steps=n_steps, strict=True, return_updates=False
        )
        pm.Normal("obs_a", trace_a, sigma_a, observed=obs_a, dims=("time", "unit"))
        pm.Normal("obs_b", trace_b, sigma_b, observed=obs_b, dims=("time", "unit"))
    return model
