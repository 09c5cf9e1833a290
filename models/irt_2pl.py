"""Two-parameter logistic item response model: P(correct) = logit^-1(a[item] * (theta[person] - b[item])).

Size: 12,000 obs in long format (300 persons x 40 items, person/item index arrays); 383 parameters
(300 theta, 40 log-discriminations, 40 difficulties, mu_b, sigma_b, sigma_a).
Item parameters are centered (300 responses each); abilities have a fixed N(0, 1) scale for identification.
"""

import numpy as np
import pymc as pm


def build_model(n_persons=300, n_items=40, seed=0, numpy_indices=False):
    rng = np.random.default_rng(seed)
    person, item = (g.ravel() for g in np.meshgrid(np.arange(n_persons), np.arange(n_items), indexing="ij"))
    theta_true = rng.normal(size=n_persons)
    a_true = np.exp(0.3 * rng.normal(size=n_items))
    b_true = rng.normal(size=n_items)
    p = 1.0 / (1.0 + np.exp(-a_true[item] * (theta_true[person] - b_true[item])))
    y = rng.binomial(1, p)
    coords = {"person": np.arange(n_persons), "item": np.arange(n_items), "obs_id": np.arange(person.size)}
    with pm.Model(coords=coords) as model:
        person_idx = person if numpy_indices else pm.Data("person_idx", person, dims="obs_id")
        item_idx = item if numpy_indices else pm.Data("item_idx", item, dims="obs_id")
        theta = pm.Normal("theta", 0.0, 1.0, dims="person")
        sigma_a = pm.HalfNormal("sigma_a", 0.5)
        a = pm.Deterministic("a", pm.math.exp(pm.Normal("log_a", 0.0, sigma_a, dims="item")), dims="item")
        mu_b = pm.Normal("mu_b", 0.0, 1.0)
        sigma_b = pm.HalfNormal("sigma_b", 1.0)
        b = pm.Normal("b", mu_b, sigma_b, dims="item")
        pm.Bernoulli("y", logit_p=a[item_idx] * (theta[person_idx] - b[item_idx]), observed=y, dims="obs_id")
    return model
