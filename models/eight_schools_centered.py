"""Eight schools, centered parameterization (the classic funnel; expect some divergences by design).

Size: 8 obs, 8 schools; 10 parameters (mu, tau, 8 theta). Data are Rubin's published estimates.
"""

import numpy as np
import pymc as pm

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def build_model():
    with pm.Model(coords={"school": np.arange(8)}) as model:
        sigma = pm.Data("sigma", SIGMA, dims="school")
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, dims="school")
        pm.Normal("y", theta, sigma, observed=Y, dims="school")
    return model
