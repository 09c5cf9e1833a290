"""Bradley-Terry pairwise comparisons: P(player1 wins) = logit^-1(skill[p1] - skill[p2]).

Size: 100,000 matches, 200 players; 201 parameters (200 skills, sigma_skill).
Centered: each player has ~1,000 matches, so the data dominate and a non-centered version mixes badly.
"""

import numpy as np
import pymc as pm


def build_model(n_matches=100_000, n_players=200, seed=0, numpy_indices=False):
    rng = np.random.default_rng(seed)
    p1 = rng.integers(0, n_players, n_matches)
    p2 = (p1 + rng.integers(1, n_players, n_matches)) % n_players
    skill_true = rng.normal(size=n_players)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(skill_true[p1] - skill_true[p2]))))
    coords = {"player": np.arange(n_players), "match": np.arange(n_matches)}
    with pm.Model(coords=coords) as model:
        p1_idx = p1 if numpy_indices else pm.Data("player1", p1, dims="match")
        p2_idx = p2 if numpy_indices else pm.Data("player2", p2, dims="match")
        sigma_skill = pm.HalfNormal("sigma_skill", 1.0)
        skill = pm.Normal("skill", 0.0, sigma_skill, dims="player")
        pm.Bernoulli("p1_wins", logit_p=skill[p1_idx] - skill[p2_idx], observed=y, dims="match")
    return model
