"""
Partial-dependence bands of an additive spline classifier
=========================================================

:class:`~bayesian_subsample.BayesianSplineClassifier` on bankruptcy-like data
(the model of Dang et al., 2019, §6.6): the posterior mean and 90% band of the
event probability along each covariate, with the empirical event frequencies.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import BayesianSplineClassifier
from bayesian_subsample.datasets import make_bankruptcy_like

X, y, info = make_bankruptcy_like(n_samples=30_000, event_rate=0.05, random_state=0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    clf = BayesianSplineClassifier(n_chains=2, n_warmup=300, n_draws=300,
                                   random_state=0).fit(X, y)

fig, axes = plt.subplots(1, 4, figsize=(13, 3.2), sharey=True)
for feature, ax in enumerate(axes):
    clf.plot_partial_dependence(X, y, feature=feature, ax=ax)
fig.tight_layout()

# %%
# The uncertainty of individual predictions: the posterior sd and 90%
# interval of the event probability of five firms.
proba, std = clf.predict_proba(X[:5], return_std=True)
lower, upper = clf.predict_proba_interval(X[:5], alpha=0.1)
for p, s, lo, hi in zip(proba[:, 1], std[:, 1], lower[:, 1], upper[:, 1]):
    print(f"p = {p:.4f} (sd {s:.4f}), 90% interval [{lo:.4f}, {hi:.4f}]")
