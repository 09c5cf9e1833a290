"""Multivariate normal with an LKJ-Cholesky covariance prior (`pm.LKJCholeskyCov`), dimension 5.

Size: 500 obs x 5 dims; 20 parameters (5 means, 15 unconstrained Cholesky entries: 5 scales + 10 correlations).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=500, dim=5, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(dim, dim))
    cov = A @ A.T / dim + 0.5 * np.eye(dim)
    y = rng.multivariate_normal(rng.normal(0.0, 2.0, dim), cov, n_obs)
    with pm.Model(coords={"dim": np.arange(dim), "obs_id": np.arange(n_obs)}) as model:
        y_obs = pm.Data("y", y, dims=("obs_id", "dim"))
        chol, _, _ = pm.LKJCholeskyCov("chol", n=dim, eta=2.0, sd_dist=pm.Exponential.dist(1.0, shape=dim),
                                             compute_corr=True)
        mu = pm.Normal("mu", 0.0, 5.0, dims="dim")
        pm.MvNormal("obs", mu, chol=chol, observed=y_obs, dims=("obs_id", "dim"))
    return model
