"""Beta-binomial tumour rates: 71 experiments' tumour counts with an overdispersed common rate, pm.Data inputs.

The rat-tumour shape (Gelman et al., BDA ch. 5) marginalised: y_i ~ BetaBinomial(n_i, mu·kappa,
(1 − mu)·kappa), with the mean rate mu ~ Beta(1, 1) and the concentration kappa ~ Exponential(0.05).
Size: 71 experiments; 2 parameters.
"""

import numpy as np
import pymc as pm


def build_model(n_groups=71, seed=0):
    rng = np.random.default_rng(seed)
    n = rng.integers(14, 52, n_groups)
    theta = rng.beta(2.0, 14.0, n_groups)
    y = rng.binomial(n, theta)
    with pm.Model() as model:
        n_data = pm.Data("n_rats", n)
        y_data = pm.Data("tumours", y)
        mu = pm.Beta("mu", 1.0, 1.0)
        kappa = pm.Exponential("kappa", 0.05)
        pm.BetaBinomial("y", n=n_data, alpha=mu * kappa, beta=(1.0 - mu) * kappa, observed=y_data)
    return model
