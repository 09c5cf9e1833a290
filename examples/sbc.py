"""Simulation-based calibration of the radon model with one compile: ``python examples/sbc.py [N] [--plot sbc.png]``.

Parameters are drawn from the prior, data are simulated from the likelihood
given them, and each simulated dataset is fitted with ``pmfast.fit_many``
(the model compiled once, its ``y`` swapped per fit). If sampler and model
are right, the rank of each true value among its fit's posterior draws is
uniform: the histogram is flat within its noise band.
"""

import argparse

import numpy as np
import pymc as pm

import pmfast
from pmfast.models import radon_data

SIZE = {"n_obs": 200, "n_counties": 12}
PARAMS = ("mu_a", "beta", "sigma")
KEEP = 99  # posterior draws kept per fit after thinning (ranks 0..99)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=200, help="simulated datasets")
    parser.add_argument("--plot", help="write the rank histograms to this PNG")
    args = parser.parse_args()

    model = radon_data.build_model(**SIZE)
    with model:
        prior = pm.sample_prior_predictive(draws=args.n, random_seed=1)
    truth = {p: prior.prior[p].values[0] for p in PARAMS}
    base = radon_data.dataset(**SIZE)
    datasets = [dict(base, y=y) for y in prior.prior_predictive["log_radon"].values[0]]

    fits = pmfast.fit_many(model, datasets, draws=1000, tune=500, chains=2, seed=2)

    ranks = {p: [] for p in PARAMS}
    for i, fit in enumerate(fits):
        if isinstance(fit, pmfast.FitError):
            print(fit)
            continue
        for p in PARAMS:
            draws = fit.posterior[p].values.ravel()
            draws = draws[np.linspace(0, draws.size - 1, KEEP).astype(int)]  # thin: near-independent draws
            ranks[p].append(int((draws < truth[p][i]).sum()))
    for p in PARAMS:
        counts = np.bincount(np.asarray(ranks[p]) * 10 // (KEEP + 1), minlength=10)
        print(f"{p:>8}: ranks in 10 bins {counts.tolist()}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from scipy import stats

        fig, axes = plt.subplots(1, len(PARAMS), figsize=(3.2 * len(PARAMS), 2.8), sharey=True)
        n = len(ranks[PARAMS[0]])
        lo, hi = stats.binom.ppf([0.005, 0.995], n, 0.1)
        for ax, p in zip(axes, PARAMS):
            ax.axhspan(lo, hi, color="0.85", label="99% band, uniform")
            ax.hist(ranks[p], bins=10, range=(0, KEEP + 1), color="C0", edgecolor="white")
            ax.set_title(p)
            ax.set_xlabel("rank of the true value")
        axes[0].set_ylabel(f"datasets (of {n})")
        axes[0].legend(loc="lower left", fontsize=7)
        fig.suptitle(f"SBC, radon_data ({n} fits from one compile)", fontsize=10)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
