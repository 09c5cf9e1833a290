"""Golf putting: Binomial successes over 31 distances, p = 2·Φ(arctan(r/d)/σ) − 1 via erf, pm.Data inputs.

The geometry-based model of putting (the angle a putt may be off by and still drop): a putt from distance
d succeeds when its angular error, ~ Normal(0, σ), is below arctan(r/d) with r the cup radius minus the
ball radius. Size: 31 distances (2 to 62 ft), one parameter (σ).
"""

import math

import numpy as np
import pymc as pm
import pytensor.tensor as pt

BALL_RADIUS = (1.68 / 2) / 12  # feet
CUP_RADIUS = (4.25 / 2) / 12


def phi(x):
    """Standard normal CDF written with erf, as golf-putting notebooks do."""
    return 0.5 + 0.5 * pt.erf(x / pt.sqrt(2.0))


def build_model(n_distances=31, sigma_true=0.026, seed=0):
    rng = np.random.default_rng(seed)
    distance = np.linspace(2.0, 62.0, n_distances)
    tries = rng.integers(200, 2000, n_distances) * np.exp(-distance / 40.0)
    tries = np.maximum(tries.astype("int64"), 20)
    angle = np.arctan((CUP_RADIUS - BALL_RADIUS) / distance)
    p_true = np.clip([math.erf(a / sigma_true / math.sqrt(2)) for a in angle], 1e-6, 1.0)
    successes = rng.binomial(tries, p_true)
    with pm.Model() as model:
        d = pm.Data("distance", distance)
        n = pm.Data("tries", tries)
        y = pm.Data("successes", successes)
        sigma = pm.HalfNormal("sigma_angle", 0.1)
        p = pm.Deterministic("p_goes_in", 2 * phi(pt.arctan((CUP_RADIUS - BALL_RADIUS) / d) / sigma) - 1)
        pm.Binomial("success", n=n, p=p, observed=y)
    return model
