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


def make_tall_logistic(n=200_000, d=8, seed=3):
    """A tall float32 logistic posterior (chunks of 20,000 rows) for the theta*
    search tests (tests/test_newton_chord.py, tests/test_centre_check.py);
    returns it with the generator that made it, for drawing subsets."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    beta = rng.normal(0.0, 0.5, d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ beta) - 0.3))).astype(float)
    return TallPosterior(GLM(X, y, LogisticFamily(), chunk_size=20_000),
                         GaussianPrior(np.full(d + 1, 10.0))), rng


def exact_gradient_and_hessian(post, theta):
    """Gradient and negative Hessian of the log posterior at ``theta`` (one
    order-2 pass over all the data)."""
    _, g, h = post.model.sums(theta, 2)
    g = g + post.prior.logdensity_and_grad(theta)[1]
    return g, -(h + post.prior.hessian(theta))


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
