"""
HMC-ECS against full-data HMC: held-out ROC and posterior densities
===================================================================

A small version of Figure 3 of Dang et al. (2019): the held-out ROC curve of
the posterior predictive probabilities is the same whether the posterior was
sampled by HMC with energy conserving subsampling (which reads a small
subsample of the rows per iteration) or by exact full-data HMC, and so are
the marginal posterior densities of the coefficients.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import gaussian_kde
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import RocCurveDisplay
from sklearn.model_selection import train_test_split

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like

X, y, _ = make_higgs_like(n_samples=30_000, n_features=6, random_state=0)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)

fits = {}
for sampler in ("hmc_ecs", "hmc"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fits[sampler] = BayesianLogisticRegression(
            sampler=sampler, n_chains=2, n_warmup=300, n_draws=500, random_state=0
        ).fit(X_train, y_train)

# %%
# Held-out ROC curves: they coincide.
fig, ax = plt.subplots(figsize=(4.5, 4.5))
for sampler, clf in fits.items():
    RocCurveDisplay.from_predictions(y_test, clf.predict_proba(X_test)[:, 1], name=sampler,
                                     ax=ax)
ax.set_title("Held-out ROC")

# %%
# Posterior densities of the first three coefficients, side by side.
fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for j, ax in enumerate(axes):
    for sampler, clf in fits.items():
        draws = clf.coef_draws_[:, :, j].ravel()
        grid = np.linspace(draws.min(), draws.max(), 200)
        ax.plot(grid, gaussian_kde(draws)(grid), label=sampler)
    ax.set_title(f"coef x{j}")
axes[0].legend()
fig.tight_layout()

# %%
# Rows read per iteration: HMC-ECS reads a small fraction of what HMC reads.
for sampler, clf in fits.items():
    per_draw = clf.evaluations_["sampling"] / (clf.n_chains * clf.n_draws)
    print(f"{sampler:8s} evaluations per draw: {per_draw:,.0f}")
