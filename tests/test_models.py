"""Deterministic checks of the models layer: derivatives, chunked sums, memmaps."""

import numpy as np
import pytest

from bayesian_subsample.models import GLM, GaussianFamily, GaussianPrior, LogisticFamily

from .conftest import make_gaussian, make_logistic


def _fd_grad(f, x, h=1e-6):
    g = np.empty_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        g[j] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_logistic_terms_match_finite_differences(weights, fit_intercept):
    post = make_logistic(n=50, weights=weights, fit_intercept=fit_intercept)
    model = post.model
    rng = np.random.default_rng(1)
    theta = rng.normal(0, 0.5, model.dim)
    idx = np.array([0, 3, 3, 17, 49])
    grads = model.loglik_grad(theta, idx)
    hess = model.loglik_hessian(theta, idx)
    for i, k in enumerate(idx):
        fd = _fd_grad(lambda t: model.loglik(t, np.array([k]))[0], theta)
        np.testing.assert_allclose(grads[i], fd, rtol=1e-6, atol=1e-8)
        fdh = np.array([_fd_grad(lambda t: model.loglik_grad(t, np.array([k]))[0, j], theta)
                        for j in range(model.dim)])
        np.testing.assert_allclose(hess[i], fdh, rtol=1e-5, atol=1e-8)


def test_logistic_is_stable_at_extreme_linear_predictors():
    eta = np.array([-800.0, -40.0, 0.0, 40.0, 800.0])
    for y in (0.0, 1.0):
        ell, d1, d2 = LogisticFamily.loglik(np.full(5, y), eta, 2)
        assert np.all(np.isfinite(ell)) and np.all(np.isfinite(d1)) and np.all(np.isfinite(d2))
        assert np.all(ell <= 0)
    # log sigmoid(800) = 0 and log sigmoid(-800) = -800 to machine precision.
    ell1 = LogisticFamily.loglik(np.ones(5), eta, 0)[0]
    np.testing.assert_allclose(ell1[[0, 4]], [-800.0, 0.0], atol=1e-12)


def test_gaussian_family_matches_scipy():
    from scipy.stats import norm

    fam = GaussianFamily(2.0)
    y, eta = np.array([0.3, -1.0]), np.array([1.0, 2.0])
    np.testing.assert_allclose(fam.loglik(y, eta)[0], norm.logpdf(y, eta, 2.0))


@pytest.mark.parametrize("maker", [make_logistic, make_gaussian])
def test_chunked_sums_equal_direct_sums(maker):
    post = maker(n=1001, chunk_size=97)
    model = post.model
    theta = np.linspace(-0.3, 0.4, model.dim)
    value, grad, hess = model.sums(theta, order=2)
    idx = np.arange(model.n_obs)
    np.testing.assert_allclose(value, model.loglik(theta, idx).sum(), rtol=1e-12)
    np.testing.assert_allclose(grad, model.loglik_grad(theta, idx).sum(0), rtol=1e-10)
    np.testing.assert_allclose(hess, model.loglik_hessian(theta, idx).sum(0), rtol=1e-10)
    sub = model.sums(theta, order=1, idx=idx[:10])
    np.testing.assert_allclose(sub[0], model.loglik(theta, idx[:10]).sum())


def test_memmap_design_is_read_without_copy(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 4))
    y = (rng.random(3000) < 0.5).astype(float)
    path = tmp_path / "X.dat"
    mm = np.memmap(path, dtype=np.float64, mode="w+", shape=X.shape)
    mm[:] = X
    mm.flush()
    ro = np.memmap(path, dtype=np.float64, mode="r", shape=X.shape)
    a = GLM(ro, y, LogisticFamily(), chunk_size=256).sums(np.ones(5) * 0.1, order=2)
    b = GLM(X, y, LogisticFamily()).sums(np.ones(5) * 0.1, order=2)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-12)


def test_prior_gradient_and_validation():
    prior = GaussianPrior(np.array([1.0, 2.0]))
    theta = np.array([0.5, -1.0])
    lp, g = prior.logdensity_and_grad(theta)
    np.testing.assert_allclose(g, _fd_grad(prior.logdensity, theta), rtol=1e-6)
    from scipy.stats import norm

    np.testing.assert_allclose(lp, norm.logpdf(theta, 0, [1.0, 2.0]).sum())
    with pytest.raises(ValueError, match="positive"):
        GaussianPrior(np.array([1.0, -1.0]))


def test_glm_shape_errors():
    with pytest.raises(ValueError, match="2-D"):
        GLM(np.ones(3), np.ones(3), LogisticFamily())
    with pytest.raises(ValueError, match="shape"):
        GLM(np.ones((3, 2)), np.ones(4), LogisticFamily())


@pytest.mark.parametrize("maker", [make_logistic, make_gaussian])
def test_gradient_only_pass_equals_full_pass(maker):
    post = maker(n=777, chunk_size=100)
    theta = np.linspace(-0.2, 0.3, post.dim)
    target = post.full_target()
    np.testing.assert_allclose(target.grad(theta), target.logdensity_and_grad(theta)[1],
                               rtol=1e-12, atol=1e-12)
