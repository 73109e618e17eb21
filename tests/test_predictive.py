"""Posterior-predictive draws (sample_y) and the uncertainty of predicted probabilities."""

import warnings

import numpy as np
import pytest
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import (HMCECS, BayesianLinearRegression, BayesianLogisticRegression,
                                BayesianPoissonRegressor, BayesianSplineClassifier)


def _fit(est, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(*args, **kwargs)


def _flat(a):
    return np.asarray(a).reshape(-1, *np.shape(a)[2:])


def _coverage(samples, y, alpha=0.1):
    lo, hi = np.quantile(samples, [alpha / 2, 1 - alpha / 2], axis=1)
    return np.mean((y >= lo) & (y <= hi))


# Held-out coverage: 20,000 rows, so the binomial sd of the coverage of a
# correct 90% interval is sqrt(0.9 * 0.1 / 20000) = 0.0021 and [0.88, 0.92]
# is +-9 sd wide; 500 predictive draws per row bias the sample-quantile
# interval's content by about -0.2% only.
N_TEST = 20_000
N_PRED = 500


def test_linear_sample_y_covers_90_percent():
    rng = np.random.default_rng(0)
    beta, sigma = np.array([1.5, -1.0, 0.5]), 0.7

    def draw(n):
        X = rng.standard_normal((n, 3))
        return X, 0.5 + X @ beta + sigma * rng.standard_normal(n)

    X, y = draw(300)
    X_test, y_test = draw(N_TEST)
    reg = _fit(BayesianLinearRegression(n_chains=2, n_warmup=300, n_draws=500,
                                        random_state=0), X, y)
    samples = reg.sample_y(X_test, N_PRED, random_state=1)
    assert samples.shape == (N_TEST, N_PRED)
    cov = _coverage(samples, y_test)
    assert 0.88 <= cov <= 0.92, cov
    # Negative control: the band of the mean b + x'w alone (no noise) must fail.
    idx = np.random.default_rng(2).choice(reg.intercept_draws_.size, N_PRED)
    mean_band = X_test @ _flat(reg.coef_draws_)[idx].T + _flat(reg.intercept_draws_)[idx]
    assert _coverage(mean_band, y_test) < 0.88
    # Reproducible for a fixed random_state.
    np.testing.assert_array_equal(reg.sample_y(X_test[:5], 3, random_state=7),
                                  reg.sample_y(X_test[:5], 3, random_state=7))


def test_poisson_sample_y_covers_90_percent_with_exposure():
    rng = np.random.default_rng(3)
    beta = np.array([0.3, -0.2])

    def draw(n):
        X = rng.standard_normal((n, 2))
        exposure = rng.uniform(200, 400, n)  # large means: discreteness negligible
        return X, rng.poisson(exposure * np.exp(0.5 + X @ beta)), exposure

    X, y, e = draw(300)
    X_test, y_test, e_test = draw(N_TEST)
    reg = _fit(BayesianPoissonRegressor(n_chains=2, n_warmup=300, n_draws=500,
                                        random_state=0), X, y, exposure=e)
    samples = reg.sample_y(X_test, N_PRED, random_state=1, exposure=e_test)
    assert samples.dtype == np.int64 and samples.shape == (N_TEST, N_PRED)
    cov = _coverage(samples, y_test)
    assert 0.88 <= cov <= 0.92, cov
    # Negative control: ignoring the exposure must fail.
    assert _coverage(reg.sample_y(X_test, N_PRED, random_state=1), y_test) < 0.88


def test_classifier_label_draws_reproduce_predict_proba():
    # Few rows, so the posterior is wide and the predictive probability differs
    # from that of any single draw.
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 2))
    y = (rng.random(60) < expit(0.2 + X @ [1.0, -1.0])).astype(int)
    labels = np.array(["a", "b"])[y]
    clf = _fit(BayesianLogisticRegression(n_chains=2, n_warmup=300, n_draws=500,
                                          random_state=0), X, labels)
    X_new = rng.standard_normal((20, 2)) * 2
    n = 20_000
    draws = clf.sample_y(X_new, n, random_state=0)
    assert draws.shape == (20, n) and set(np.unique(draws)) <= {"a", "b"}
    freq = np.mean(draws == "b", axis=1)
    p = clf.predict_proba(X_new)[:, 1]
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p) <= 4 * se)
    # Negative control: labels from one posterior draw do not reproduce it.
    p_one = expit(X_new @ clf.coef_draws_[0, 0] + clf.intercept_draws_[0, 0])
    assert np.any(np.abs(p_one - p) > 4 * se)


@pytest.mark.parametrize("Est", [BayesianLogisticRegression, BayesianSplineClassifier])
def test_predict_proba_std_and_interval(Est):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((400, 2))
    y = (rng.random(400) < expit(X @ [1.0, -0.5])).astype(int)
    kw = dict(n_knots=4) if Est is BayesianSplineClassifier else {}
    clf = _fit(Est(n_chains=2, n_warmup=150, n_draws=100, random_state=0, **kw), X, y)
    proba, std = clf.predict_proba(X[:30], return_std=True)
    np.testing.assert_allclose(proba, clf.predict_proba(X[:30]), atol=1e-12)
    Z = clf._design_chunk(X[:30])
    p1 = expit(Z @ _flat(clf.coef_draws_).T + _flat(clf.intercept_draws_))
    np.testing.assert_allclose(std[:, 1], p1.std(axis=1), rtol=1e-9)
    np.testing.assert_allclose(std[:, 0], std[:, 1])
    lower, upper = clf.predict_proba_interval(X[:30], alpha=0.2)
    np.testing.assert_allclose(lower[:, 1], np.quantile(p1, 0.1, axis=1), rtol=1e-9)
    np.testing.assert_allclose(upper[:, 1], np.quantile(p1, 0.9, axis=1), rtol=1e-9)
    np.testing.assert_allclose(lower[:, 0], 1 - upper[:, 1])
    assert np.all((lower <= proba) & (proba <= upper))
    with pytest.raises(ValueError, match="alpha"):
        clf.predict_proba_interval(X[:3], alpha=1.5)
    with pytest.raises(ValueError, match="n_samples"):
        clf.sample_y(X[:3], 0)


def test_signed_fit_sample_y_raises_but_interval_is_sign_weighted():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((3000, 2))
    y = (rng.random(3000) < expit(X @ [1.0, -0.5])).astype(int)
    clf = _fit(BayesianLogisticRegression(sampler=HMCECS(estimator="signed"), n_chains=2,
                                          n_warmup=150, n_draws=100, random_state=0), X, y)
    signs = clf.sample_stats_["sign"]
    if np.all(signs > 0):
        # All signs positive: equal weights, so sampling is exact and allowed.
        assert clf.sample_y(X[:4], 2, random_state=0).shape == (4, 2)
        signs = signs.copy()
        signs[0, :3] = -1.0
        clf.sample_stats_["sign"] = signs
    with pytest.raises(ValueError, match="negative sign"):
        clf.sample_y(X[:4], 2, random_state=0)
    lower, upper = clf.predict_proba_interval(X[:4])
    assert np.all(lower <= upper)
