"""
Posterior-predictive checks of a Poisson regression with exposure
=================================================================

``sample_y`` draws whole replicated data sets from the posterior predictive
(one posterior draw per replicate, as ``GaussianProcessRegressor.sample_y``).
Comparing a statistic of the observed data with its replicated distribution
checks the model; here a Poisson model is checked on Poisson data and on
overdispersed (negative binomial) data, which it fails.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import BayesianPoissonRegressor

rng = np.random.default_rng(0)
n = 20_000
X = rng.standard_normal((n, 2))
exposure = rng.uniform(5.0, 20.0, n)  # mean counts of about 10 to 40
mu = exposure * np.exp(0.5 + X @ [0.3, -0.2])
data = {
    "Poisson data": rng.poisson(mu),
    "overdispersed data": rng.negative_binomial(2.0, 2.0 / (2.0 + mu)),
}

fig, axes = plt.subplots(2, 2, figsize=(10, 6))
for row, (label, y) in zip(axes, data.items()):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = BayesianPoissonRegressor(n_chains=2, n_warmup=300, n_draws=500,
                                       random_state=0).fit(X, y, exposure=exposure)
    y_rep = reg.sample_y(X, n_samples=200, random_state=1, exposure=exposure)
    # Statistic 1: the share of zero counts.
    zeros_rep = (y_rep == 0).mean(axis=0)
    row[0].hist(zeros_rep, bins=30, color="0.7")
    row[0].axvline((y == 0).mean(), color="C3", label="observed")
    row[0].set_title(f"{label}: share of zeros")
    row[0].legend()
    # Statistic 2: the predictive distribution of the counts.
    bins = np.arange(0, 122, 4) - 0.5
    hist_rep = np.stack([np.histogram(y_rep[:, j], bins)[0] for j in range(200)])
    lo, hi = np.percentile(hist_rep, [5, 95], axis=0)
    centres = bins[:-1] + 0.5
    row[1].fill_between(centres, lo, hi, step="mid", alpha=0.4, label="replicated 90%")
    row[1].step(centres, np.histogram(y, bins)[0], where="mid", color="C3", label="observed")
    row[1].set_xlabel("count")
    row[1].set_title(f"{label}: count histogram")
    row[1].legend()
    lower, upper = np.percentile(y_rep, [5, 95], axis=1)
    covered = np.mean((y >= lower) & (y <= upper))
    print(f"{label}: 90% posterior-predictive intervals cover {covered:.1%} of the rows")
fig.tight_layout()
