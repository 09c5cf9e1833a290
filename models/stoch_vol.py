"""Stochastic volatility: daily returns ~ StudentT(nu, 0, exp(s/2)) with log-variance s a Gaussian random walk.

Size: 2,000 returns (in percent, time steps); 2,002 parameters (2,000 latent log-variances, step_size, nu).
The default (`centered=True`, `pm.GaussianRandomWalk`) is the textbook PyMC model: no divergences, but step_size
mixes slowly (funnel with the 2,000 increments). `centered=False` writes s = s_0 + step_size * cumsum(z) instead:
~10x better step_size ESS, but a few percent of transitions diverge.
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt


def build_model(n_steps=2000, centered=True, seed=0):
    rng = np.random.default_rng(seed)
    s_true = 0.3 + np.cumsum(0.1 * rng.normal(size=n_steps))
    returns = np.exp(s_true / 2) * rng.standard_t(10.0, n_steps)
    with pm.Model(coords={"time": np.arange(n_steps), "step": np.arange(1, n_steps)}) as model:
        r = pm.Data("returns", returns, dims="time")
        step_size = pm.Exponential("step_size", 10.0)
        if centered:
            s = pm.GaussianRandomWalk("s", mu=0.0, sigma=step_size, init_dist=pm.Normal.dist(0.0, 1.0), dims="time")
        else:
            s0 = pm.Normal("s0", 0.0, 1.0)
            z = pm.Normal("z", 0.0, 1.0, dims="step")
            s = pm.Deterministic("s", pt.concatenate([s0[None], s0 + step_size * pt.cumsum(z)]), dims="time")
        nu = pm.Exponential("nu", 0.1)
        pm.StudentT("obs", nu=nu, mu=0.0, sigma=pm.math.exp(s / 2), observed=r, dims="time")
    return model
