"""Shared fixtures: small GLM problems with known structure."""

import numpy as np
import pytest

from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import GLM, GaussianFamily, GaussianPrior, LogisticFamily


def make_logistic(n=2000, d=3, seed=0, weights=False, fit_intercept=True, prior_scale=10.0,
                  chunk_size=4096):
    """A logistic-regression posterior on simulated data."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    beta = rng.normal(0, 0.7, d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.3 + X @ beta)))).astype(float)
    w = rng.integers(1, 4, n).astype(float) if weights else None
    model = GLM(X, y, LogisticFamily(), sample_weight=w, fit_intercept=fit_intercept,
                chunk_size=chunk_size)
    return TallPosterior(model, GaussianPrior(np.full(model.dim, prior_scale)))


def make_gaussian(n=2000, d=3, seed=0, noise=1.0, prior_scale=5.0, chunk_size=4096):
    """A linear-Gaussian posterior (known noise): conjugate, exactly Gaussian."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    beta = rng.normal(0, 1, d)
    y = 0.5 + X @ beta + noise * rng.standard_normal(n)
    model = GLM(X, y, GaussianFamily(noise), fit_intercept=True,
                chunk_size=chunk_size)
    return TallPosterior(model, GaussianPrior(np.full(model.dim, prior_scale)))


def gaussian_posterior_moments(posterior):
    """Exact mean and covariance of a linear-Gaussian posterior."""
    model = posterior.model
    Z = model.design(np.asarray(model.X))
    prec_noise = model.family.curvature_bound
    P = prec_noise * Z.T @ Z + np.diag(posterior.prior.precision)
    cov = np.linalg.inv(P)
    mean = cov @ (prec_noise * Z.T @ model.y)
    return mean, cov


@pytest.fixture
def logistic_posterior():
    return make_logistic()


@pytest.fixture
def gaussian_posterior():
    return make_gaussian()
