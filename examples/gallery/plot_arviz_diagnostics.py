"""
Trace and rank plots, LOO and model comparison through ArviZ
============================================================

``to_datatree`` exports a fit in the ArviZ schema with the pointwise
log-likelihood of the rows you pass; ``to_inference_data`` wraps it for
ArviZ 0.x (Python < 3.12; ArviZ 1.x reads the DataTree directly).
"""

import warnings

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
from scipy.special import expit

from bayesian_subsample import BayesianLogisticRegression

rng = np.random.default_rng(0)
X = rng.standard_normal((1000, 3))
y = (rng.random(1000) < expit(0.3 + X @ [0.5, 2.0, -0.3])).astype(int)

params = dict(n_chains=4, n_warmup=200, n_draws=300, random_state=0)
full = BayesianLogisticRegression(**params).fit(X, y)
reduced = BayesianLogisticRegression(**params).fit(X[:, [0, 2]], y)

ARVIZ_1 = int(az.__version__.split(".")[0]) >= 1
id_full = full.to_inference_data(X, y)      # the DataTree itself on ArviZ 1.x
id_reduced = reduced.to_inference_data(X[:, [0, 2]], y)

# %%
# Trace plot of every parameter.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    if ARVIZ_1:
        az.plot_trace_dist(id_full, var_names=["intercept", "coef"])
    else:
        az.plot_trace(id_full, var_names=["intercept", "coef"])
    plt.gcf().tight_layout()

# %%
# Rank plots: uniform histograms mean the chains mix.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    az.plot_rank(id_full, var_names=["coef"])

# %%
# PSIS-LOO and the comparison with the model that leaves out the strong
# covariate ``x1``.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    print(az.loo(id_full))
    print(az.compare({"full": id_full, "without x1": id_reduced}))
