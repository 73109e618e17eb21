"""Multinomial (softmax) regression: the K-linear-predictor model layer.

Deterministic checks of the softmax GLM (gradients, per-row Hessians,
Böhning's bound, the control variates), unbiasedness of the difference
estimator, K = 2 softmax against the logistic model, and posteriors of full-
data HMC and HMC-ECS on scikit-learn's wine data (which the package never
saw) against an independent importance-sampling reference
(:func:`reference.softmax_importance_reference`), with negative controls that
must fail the same assertion.
"""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from bayesian_subsample import HMCECS, BayesianLogisticRegression, BayesianSplineClassifier
from bayesian_subsample.likelihood import DifferenceEstimator, TallPosterior
from bayesian_subsample.models import (
    GLM,
    GaussianPrior,
    LogisticFamily,
    MultinomialGLM,
    SoftmaxFamily,
)
from .reference import softmax_importance_reference

K = 4


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 3))
    y = rng.integers(0, K, 60)
    w = rng.uniform(0.5, 2.0, 60)
    model = MultinomialGLM(X, y, K, sample_weight=w)
    theta = 0.4 * rng.normal(size=model.dim)
    return model, theta


def _fd(f, theta, eps=1e-6):
    return np.array([(f(theta + eps * e) - f(theta - eps * e)) / (2 * eps)
                     for e in np.eye(len(theta))])


def test_gradient_and_hessian_match_finite_differences(small):
    model, theta = small
    value, grad, hess = model.sums(theta, order=2)
    np.testing.assert_allclose(_fd(lambda t: model.sums(t, 0)[0], theta), grad, atol=1e-6)
    np.testing.assert_allclose(_fd(lambda t: model.sums(t, 1)[1], theta), hess, atol=1e-6)
    idx = np.array([0, 5, 7])
    per_row = model.loglik_hessian(theta, idx)
    for j, i in enumerate(idx):
        fd = _fd(lambda t: model.loglik_grad(t, np.array([i]))[0], theta)
        np.testing.assert_allclose(fd, per_row[j], atol=1e-6)
    np.testing.assert_allclose(model.grad_sum(theta), grad, atol=1e-12)
    np.testing.assert_allclose(model.loglik_grad(theta, np.arange(60)).sum(0), grad,
                               atol=1e-12)
    assert model.n_linear_predictors == K and GLM.n_linear_predictors == 1


def test_loglik_is_categorical_and_stable():
    fam = SoftmaxFamily(3)
    eta = np.array([[1000.0, 0.0, -1000.0], [0.1, 0.2, 0.3]])
    ell, d1, d2 = fam.loglik(np.array([0, 2]), eta, 2)
    assert np.all(np.isfinite(ell)) and abs(ell[0]) < 1e-12
    p = np.exp(eta[1] - np.log(np.exp(eta[1]).sum()))
    assert np.isclose(ell[1], np.log(p[2]))
    np.testing.assert_allclose(d2[1], np.outer(p, p) - np.diag(p))
    np.testing.assert_allclose(d1.sum(axis=1), 0.0, atol=1e-12)


def test_boehning_bound_dominates_every_hessian(small):
    model, theta = small
    post = TallPosterior(model, GaussianPrior(np.full(model.dim, 2.0)))
    B, n_eval = post.curvature_bound_matrix()
    rng = np.random.default_rng(0)
    for t in [theta, 3 * rng.normal(size=model.dim), np.zeros(model.dim)]:
        neg_h = -(model.sums(t, 2)[2] + post.prior.hessian())
        assert np.linalg.eigvalsh(B - neg_h).min() > -1e-9
    assert n_eval == model.n_obs


def test_k2_softmax_matches_logistic_along_the_difference():
    """With K = 2, ell(Theta) = logistic ell(theta_1 - theta_0)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    y = rng.integers(0, 2, 40)
    soft = MultinomialGLM(X, y, 2)
    logit = GLM(X, y.astype(float), LogisticFamily())
    Theta = rng.normal(size=(2, 4))
    beta = Theta[1] - Theta[0]
    v_s, g_s, h_s = soft.sums(Theta.ravel(), 2)
    v_l, g_l, h_l = logit.sums(beta, 2)
    assert np.isclose(v_s, v_l)
    np.testing.assert_allclose(g_s.reshape(2, 4), np.vstack([-g_l, g_l]), atol=1e-12)
    H = h_s.reshape(2, 4, 2, 4)
    np.testing.assert_allclose(H[1, :, 1, :], h_l, atol=1e-12)
    np.testing.assert_allclose(H[0, :, 1, :], -h_l, atol=1e-12)


def _posterior(model, scale=2.0):
    return TallPosterior(model, GaussianPrior(np.full(model.dim, scale)))


def test_control_variates_are_exact_at_theta_star_and_second_order(small):
    model, _ = small
    post = _posterior(model)
    mode, _ = post.mode()
    ex = post.expand(mode, 2)
    est = DifferenceEstimator(model, post.prior, ex, 60, n_blocks=1)
    sub = est._subsample_from(np.arange(model.n_obs))
    d, g = est.differences(mode, sub)
    assert np.abs(d).max() < 1e-12 and np.abs(g).max() < 1e-12
    # The remainder is third order in Delta.
    rng = np.random.default_rng(0)
    u = rng.normal(size=model.dim)
    r = [np.abs(est.differences(mode + h * u, sub)[0]).max() for h in (1e-2, 5e-3)]
    assert 6.0 < r[0] / r[1] < 10.0
    # Population sum of the control variates = sum of q_k over all rows.
    theta = mode + 0.05 * u
    eta = model.eta(theta, model.X) - model.eta(mode, model.X)
    a, b, c = model.eta_terms(model.y, model.sample_weight, model.eta(mode, model.X), 2)
    q = a + np.einsum("ik,ik->i", b, eta) + 0.5 * np.einsum("ik,ikl,il->i", eta, c, eta)
    assert np.isclose(ex.population_sum(theta)[0], q.sum())
    # Gradient of the estimate (eq. 4.7) against finite differences.
    est_m = DifferenceEstimator(model, post.prior, ex, 20, n_blocks=4)
    sub_m = est_m.init_subsample(rng)
    f = lambda t: est_m.evaluate(t, sub_m).logdensity  # noqa: E731
    np.testing.assert_allclose(_fd(f, theta), est_m.evaluate(theta, sub_m).grad, atol=1e-6)


def test_difference_estimator_is_unbiased(small):
    model, _ = small
    post = _posterior(model)
    mode, _ = post.mode()
    ex = post.expand(mode, 2)
    theta = mode + 0.3 * np.random.default_rng(5).normal(size=model.dim)
    est = DifferenceEstimator(model, post.prior, ex, 10, n_blocks=1)
    rng = np.random.default_rng(2)
    reps = np.array([est.loglik_estimate(theta, est.init_subsample(rng))[0]
                     for _ in range(4000)])
    truth = post.full_loglik(theta)
    se = reps.std(ddof=1) / np.sqrt(len(reps))
    assert reps.std() > 0
    assert abs(reps.mean() - truth) < 4 * se
    # austerity's residuals: their sum plus the population term is the exact difference
    idx = np.arange(model.n_obs)
    theta2 = theta + 0.01
    resid = post.loglik_difference(theta2, theta, idx, ex)
    exact = post.full_loglik(theta2) - post.full_loglik(theta)
    pop = ex.population_sum(theta2)[0] - ex.population_sum(theta)[0]
    assert np.isclose(resid.sum() + pop, exact)


def test_minibatch_gradients_are_unbiased(small):
    model, theta = small
    post = _posterior(model)
    mode, _ = post.mode()
    ex = post.expand(mode, 2)
    exact = model.sums(theta, 1)[1] + post.prior.grad(theta)
    rng = np.random.default_rng(4)
    for est in (post.gradient_estimator(10), post.gradient_estimator(10, ex),
                post.gradient_estimator(10, ex._replace(order=1))):
        g = np.array([est.grad(theta, rng) for _ in range(3000)])
        se = g.std(axis=0, ddof=1) / np.sqrt(len(g))
        assert np.all(np.abs(g.mean(axis=0) - exact) < 4 * se + 1e-10)
        V, _ = est.covariance(theta, rng, n_pilot=60)
        assert V.shape == (model.dim, model.dim)
        obs = est.observe(theta, rng)
        u = rng.normal(size=model.dim)
        assert obs.variance_along(u) > 0


# ------------------------------------------------------- posterior accuracy
WINE_COLUMNS = [0, 6, 9, 12]  # alcohol, flavanoids, colour intensity, proline
PRIOR = dict(prior_scale=1.0, intercept_prior_scale=1.0)


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X[:, WINE_COLUMNS])
    mean, sd, ess = softmax_importance_reference(X, y, 3, **PRIOR)
    assert ess > 3000
    return X, y, mean, sd


def _errors(est, mean, sd):
    draws = est._all_draws()
    m, s = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
    return np.max(np.abs(m - mean) / sd), s / sd


def _fit(sampler, X, y, n_draws=1000, n_warmup=500, n_chains=4, **kw):
    est = BayesianLogisticRegression(sampler=sampler, n_chains=n_chains, n_warmup=n_warmup,
                                     n_draws=n_draws, random_state=0, **PRIOR, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y)


def test_full_data_hmc_matches_the_reference(wine):
    X, y, mean, sd = wine
    est = _fit("hmc", X, y)
    assert est.convergence_["r_hat"].max() < 1.01
    dmean, ratio = _errors(est, mean, sd)
    assert dmean < 0.1
    assert np.all(np.abs(ratio - 1) < 0.10)


def test_hmc_ecs_matches_the_reference(wine):
    X, y, mean, sd = wine
    est = _fit(HMCECS(subsample_size=50), X, y)
    assert np.all(est.subsample_size_ < len(y))
    dmean, ratio = _errors(est, mean, sd)
    assert dmean < 0.15
    assert np.all(np.abs(ratio - 1) < 0.15)


@pytest.mark.slow
def test_signed_hmc_ecs_matches_the_reference(wine):
    """Signed HMC-ECS (block-Poisson, eq. 5.1) with K linear predictors (~25 s)."""
    X, y, mean, sd = wine
    est = _fit("hmc_ecs_signed", X, y)
    dmean, ratio = _errors(est, mean, sd)
    assert dmean < 0.15
    assert np.all(np.abs(ratio - 1) < 0.15)


class _TemperedGLM(MultinomialGLM):
    """Broken on purpose: log-likelihood and gradient scaled by 0.6."""

    def eta_terms(self, yr, wr, eta, order=0):
        return tuple(0.6 * t for t in super().eta_terms(yr, wr, eta, order))

    def grad_sum(self, theta):
        return 0.6 * super().grad_sum(theta)


def test_negative_control_wrongly_scaled_likelihood_fails(wine, monkeypatch):
    """A likelihood (value and gradient) scaled by 0.6 fails both assertions."""
    X, y, mean, sd = wine
    from bayesian_subsample.estimators import _logistic

    monkeypatch.setattr(_logistic, "MultinomialGLM", _TemperedGLM)
    est = _fit("hmc", X, y, n_draws=500)
    dmean, ratio = _errors(est, mean, sd)
    assert not (dmean < 0.1 and np.all(np.abs(ratio - 1) < 0.10))
    est = _fit(HMCECS(subsample_size=50), X, y, n_draws=500)
    dmean, ratio = _errors(est, mean, sd)
    assert not (dmean < 0.15 and np.all(np.abs(ratio - 1) < 0.15))


@pytest.mark.slow
def test_negative_control_hmc_ecs_without_variance_correction_fails(wine, monkeypatch):
    """Dropping -sigma2/2 (eq. 4.5) at a tiny m must break the same assertion.

    (Slow: without the correction the chains run off to where sigma2 explodes,
    with long trajectories; measured dmean ~ 64 sd at m = 10.)
    """
    X, y, mean, sd = wine
    original = DifferenceEstimator.evaluate

    def no_correction(self, theta, sub):
        est = original(self, theta, sub)
        # Add back sigma2/2 and its gradient: the uncorrected exp(ell_hat).
        d, g = self.differences(theta, sub)
        dev = d - d.mean()
        coef = g * (self._n2_over_m2 * dev)[:, None]
        return est._replace(logdensity=est.logdensity + 0.5 * est.loglik_var,
                            grad=est.grad + self.design_backprop(sub.Z, coef))

    monkeypatch.setattr(DifferenceEstimator, "evaluate", no_correction)
    est = _fit(HMCECS(subsample_size=10), X, y, n_draws=200, n_warmup=200, n_chains=2)
    dmean, ratio = _errors(est, mean, sd)
    assert not (dmean < 0.15 and np.all(np.abs(ratio - 1) < 0.15))


# ------------------------------------------------------------- estimator API
FAST = dict(n_chains=2, n_warmup=100, n_draws=100, random_state=0)


def _quiet(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **kw)


def test_estimator_shapes_labels_weights_and_pickle(wine):
    X, y, _, _ = wine
    labels = np.array(["barolo", "grignolino", "barbera"])[y]
    est = _quiet(BayesianLogisticRegression(**FAST), X, labels)
    assert list(est.classes_) == sorted(set(labels))
    assert est.coef_.shape == (3, 4) and est.intercept_.shape == (3,)
    assert est.coef_draws_.shape == (2, 100, 3, 4)
    assert est.intercept_draws_.shape == (2, 100, 3)
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.log(proba), est.predict_log_proba(X), atol=1e-10)
    assert est.decision_function(X).shape == (len(y), 3)
    assert set(est.predict(X)) <= set(labels)
    assert np.mean(est.predict(X) == labels) > 0.9
    assert len(est.summary().to_pandas()) == 15
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_proba(X), proba)
    assert est.sample_y(X[:3], 2, random_state=0).shape == (3, 2)
    assert est.predict_proba_interval(X[:3])[0].shape == (3, 3)
    assert est.predict_proba(X[:3], return_std=True)[1].shape == (3, 3)
    assert est.to_datatree()["posterior"]["coef"].dims == ("chain", "draw", "class", "feature")
    # Integer weights act as repeated rows in the likelihood.
    w = np.ones(len(y))
    w[:10] = 3
    est_w = _quiet(BayesianLogisticRegression(sampler="hmc", **FAST), X, y, sample_weight=w)
    assert est_w.coef_.shape == (3, 4)
    # Prediction is chunked and stable for extreme inputs.
    p = est.predict_proba(1e3 * X[:5])
    assert np.all(np.isfinite(p)) and np.allclose(p.sum(axis=1), 1.0)


def test_binary_output_is_unchanged(wine):
    X, y, _, _ = wine
    yb = (y > 0).astype(int)
    est = _quiet(BayesianLogisticRegression(**FAST), X, yb)
    assert est.coef_.shape == (1, 4) and est.coef_draws_.shape == (2, 100, 4)
    assert est.decision_function(X).shape == (len(y),)


@pytest.mark.parametrize("sampler", ["hmc_ecs_signed", "sgld", "sghmc", "rwmh",
                                     "austerity_mh", "bps", "sbps"])
def test_every_other_sampler_fits_softmax(wine, sampler):
    X, y, mean, sd = wine
    est = _quiet(BayesianLogisticRegression(sampler=sampler, **FAST, **PRIOR), X, y)
    assert est.coef_draws_.shape == (2, 100, 3, 4)
    assert np.all(np.isfinite(est._all_draws()))
    # Loose sanity (short runs): the posterior mean is in the right region.
    assert np.max(np.abs(est._all_draws().mean(axis=(0, 1)) - mean) / sd) < 3.0


def test_unsupported_combinations_raise_before_sampling(wine):
    X, y, _, _ = wine
    with pytest.raises(ValueError, match="sbps"):
        BayesianLogisticRegression(sampler="psbps", **FAST).fit(X, y)
    with pytest.raises(ValueError, match="sbps"):
        BayesianSplineClassifier(n_knots=4, sampler="psbps", **FAST).fit(X, y)


# ------------------------------------------------- scikit-learn's own checks
@pytest.mark.parametrize("sampler", ["hmc", "hmc_ecs"])
@pytest.mark.parametrize("check_name", ["check_classifiers_train", "check_classifiers_classes",
                                        "check_decision_proba_consistency",
                                        "check_classifiers_regression_target",
                                        "check_supervised_y_2d", "check_fit_idempotent"])
def test_sklearn_multiclass_checks(sampler, check_name):
    """The checks of sklearn.utils.estimator_checks that exercise 3-class targets
    (the project runs the whole list in tests/test_sklearn_compat.py)."""
    from sklearn.utils import estimator_checks

    est = BayesianLogisticRegression(sampler=sampler, n_chains=2, n_warmup=20, n_draws=20,
                                     random_state=0)
    check = getattr(estimator_checks, check_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(type(est).__name__, est)
