"""1-D mixture of 3 Normals (`pm.NormalMixture`) with ordered component means to break label switching.

Size: 1,000 obs, 3 components; 8 unconstrained parameters (3 simplex weights = 2, 3 ordered means, 3 scales).
"""

import numpy as np
import pymc as pm


def build_model(n_obs=1000, seed=0):
    rng = np.random.default_rng(seed)
    comp = rng.choice(3, n_obs, p=[0.3, 0.5, 0.2])
    y = np.array([-3.0, 0.0, 4.0])[comp] + np.array([0.8, 1.0, 0.6])[comp] * rng.normal(size=n_obs)
    with pm.Model(coords={"component": np.arange(3), "obs_id": np.arange(n_obs)}) as model:
        y_obs = pm.Data("y", y, dims="obs_id")
        w = pm.Dirichlet("w", np.ones(3), dims="component")
        mu = pm.Normal("mu", 0.0, 5.0, dims="component", transform=pm.distributions.transforms.ordered,
                       initval=np.array([-2.0, 0.0, 2.0]))
        sigma = pm.HalfNormal("sigma", 2.0, dims="component")
        pm.NormalMixture("obs", w=w, mu=mu, sigma=sigma, observed=y_obs, dims="obs_id")
    return model
