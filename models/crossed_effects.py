"""Crossed random effects: response ~ mu + u[subject] + w[item] (e.g. reaction times in a subjects x items design).

Size: 2,000 obs, 50 subjects x 40 items; 94 parameters (mu, 2 scales, 50 + 40 effects, sigma).
Centered: 40-50 obs per subject/item make the effects data-dominated.
"""

import numpy as np
import pymc as pm


def build_model(n_obs=2000, n_subjects=50, n_items=40, seed=0):
    rng = np.random.default_rng(seed)
    subj = rng.integers(0, n_subjects, n_obs)
    item = rng.integers(0, n_items, n_obs)
    y = 0.5 + 0.8 * rng.normal(size=n_subjects)[subj] + 0.4 * rng.normal(size=n_items)[item] + rng.normal(size=n_obs)
    coords = {"subject": np.arange(n_subjects), "item": np.arange(n_items), "obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        subj_idx = pm.Data("subject_idx", subj, dims="obs_id")
        item_idx = pm.Data("item_idx", item, dims="obs_id")
        mu = pm.Normal("mu", 0.0, 5.0)
        sigma_u = pm.HalfNormal("sigma_u", 1.0)
        sigma_w = pm.HalfNormal("sigma_w", 1.0)
        u = pm.Normal("u", 0.0, sigma_u, dims="subject")
        w = pm.Normal("w", 0.0, sigma_w, dims="item")
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", mu + u[subj_idx] + w[item_idx], sigma, observed=y, dims="obs_id")
    return model
