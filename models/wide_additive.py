"""Wide additive categorical model: logits = sum_i b_i[idx_i] over n separate (8, 20) effect blocks.

Each block i is its own free variable `b_i` (8 levels x 20 classes) gathered by an integer index `idx_i`;
observed classes ~ Categorical(logit_p=logits). Stresses graphs with many parallel gather-and-add branches.
Size: n_obs=2,000 obs, 20 classes, n=40 blocks (8 levels each); 6,400 parameters (n * 160).
"""

import numpy as np
import pymc as pm


def build_model(n=40, n_obs=2000, n_levels=8, n_classes=20, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_levels, (n, n_obs))
    b_true = 0.3 * rng.normal(size=(n, n_levels, n_classes))
    logits = sum(b_true[i][idx[i]] for i in range(n))
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p.cumsum(-1) > rng.uniform(size=(n_obs, 1))).argmax(-1)
    coords = {"obs_id": np.arange(n_obs)}
    with pm.Model(coords=coords) as model:
        terms = []
        for i in range(n):
            idx_i = pm.Data(f"idx_{i}", idx[i], dims="obs_id")
            b_i = pm.Normal(f"b_{i}", 0.0, 1.0, shape=(n_levels, n_classes))
            terms.append(b_i[idx_i])
        pm.Categorical("y", logit_p=sum(terms[1:], terms[0]), observed=y, dims="obs_id")
    return model
