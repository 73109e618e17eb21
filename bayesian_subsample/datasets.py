"""Reproducible synthetic tall data sets for the demo, examples and benchmarks."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["make_higgs_like"]


def make_higgs_like(n_samples=100_000, n_features=29, correlation=0.5, coef_scale=0.5,
                    intercept=0.0, random_state=0, dtype=np.float64, chunk_size=262_144):
    """A HIGGS-like binary classification problem with a known logistic model.

    Mimics the shape of the HIGGS data of Baldi et al. (2014) used by Dang et
    al. (2019, §6.5): 29 continuous, correlated covariates and a balanced
    binary response.  Covariates are Gaussian with ``corr(x_j, x_k) =
    correlation ** |j - k|``; the true coefficients are drawn from
    ``N(0, coef_scale^2)`` and ``y ~ Bernoulli(sigmoid(intercept + x^T coef))``.

    Parameters
    ----------
    n_samples : int, default=100_000
        Number of rows (``n_obs``).
    n_features : int, default=29
    correlation : float, default=0.5
        Lag-one correlation of the AR(1)-like covariance of the covariates.
    coef_scale : float, default=0.5
        Standard deviation of the true coefficients.
    intercept : float, default=0.0
    random_state : int or None, default=0
    dtype : numpy dtype, default=float64
    chunk_size : int, default=262_144
        Rows generated at a time (bounds temporary memory).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,), values 0 and 1
    coef : ndarray of shape (n_features,)
        The true coefficients (the true intercept is ``intercept``).
    """
    if n_samples < 1 or n_features < 1:
        raise ValueError("n_samples and n_features must be positive.")
    if not -1.0 < correlation < 1.0:
        raise ValueError("correlation must lie strictly between -1 and 1.")
    rng = np.random.default_rng(random_state)
    coef = rng.normal(0.0, coef_scale, n_features)
    lags = np.abs(np.subtract.outer(np.arange(n_features), np.arange(n_features)))
    chol = np.linalg.cholesky(correlation**lags)
    X = np.empty((n_samples, n_features), dtype=dtype)
    y = np.empty(n_samples, dtype=np.int64)
    for start in range(0, n_samples, chunk_size):
        stop = min(start + chunk_size, n_samples)
        z = rng.standard_normal((stop - start, n_features)) @ chol.T
        X[start:stop] = z
        y[start:stop] = rng.random(stop - start) < expit(intercept + z @ coef)
    return X, y, coef
