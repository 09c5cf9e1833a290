"""Eight schools, non-centered parameterization (theta = mu + tau * z).

Size: 8 obs, 8 schools; 10 parameters (mu, tau, 8 z). Data are Rubin's published estimates.
"""

import numpy as np
import pymc as pm

from .eight_schools_centered import SIGMA, Y


def build_model():
    with pm.Model(coords={"school": np.arange(8)}) as model:
        sigma = pm.Data("sigma", SIGMA, dims="school")
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        z = pm.Normal("z", 0.0, 1.0, dims="school")
        theta = pm.Deterministic("theta", mu + tau * z, dims="school")
        pm.Normal("y", theta, sigma, observed=Y, dims="school")
    return model
