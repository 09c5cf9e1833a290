"""Marginal Gaussian-process regression (`pm.gp.Marginal`, ExpQuad kernel) on a noisy 1-D function.

Size: 100 obs (inputs on [0, 10]); 3 parameters (lengthscale ell, amplitude eta, noise sigma).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=100, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0.0, 10.0, n_obs))[:, None]
    y = np.sin(X[:, 0]) + 0.5 * np.cos(0.4 * X[:, 0]) + 0.2 * rng.normal(size=n_obs)
    with pm.Model(coords={"obs_id": np.arange(n_obs)}) as model:
        ell = pm.InverseGamma("ell", 5.0, 5.0)
        eta = pm.HalfNormal("eta", 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        gp = pm.gp.Marginal(cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ls=ell))
        gp.marginal_likelihood("y", X=X, y=y, sigma=sigma, dims="obs_id")
    return model
