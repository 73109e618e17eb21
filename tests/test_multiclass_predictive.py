"""Prediction for K >= 3 classes (issue 10): the softmax family's predictive maths,
``sample_y``, the posterior sd and intervals of class probabilities, the ArviZ export
with the categorical pointwise log-likelihood, and the multinomial spline classifier.

Statistical assertions are in standard-error units with a negative control (a
deliberately broken variant that must fail the same assertion).
"""

import copy
import warnings

import numpy as np
import pytest
from scipy import special, stats
from sklearn.datasets import load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from bayesian_subsample import HMCECS, BayesianLogisticRegression, BayesianSplineClassifier
from bayesian_subsample.estimators import _predictive
from bayesian_subsample.models import (
    BSplineBasis,
    MultinomialBasisGLM,
    MultinomialGLM,
    PredictiveFamily,
    SoftmaxFamily,
)

K = 3
PRIOR = dict(prior_scale=1.0, intercept_prior_scale=1.0)


def _quiet_fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **kw)


def _simulate(seed, n, d=2, n_test=20):
    """Parameters from the N(0, 1) prior the fits use, then data from the softmax model."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(K, d + 1))
    X = rng.normal(size=(n, d))
    X_test = rng.normal(size=(n_test, d))
    P = special.softmax(theta[:, 0] + X @ theta[:, 1:].T, axis=1)
    y = (rng.random(n)[:, None] > np.cumsum(P, axis=1)[:, :-1]).sum(axis=1)
    P_test = special.softmax(theta[:, 0] + X_test @ theta[:, 1:].T, axis=1)
    return X, y, X_test, P_test


def _softmax_draws(est, X):
    """softmax(b_s + W_s x) of every stored draw, recomputed here: (draws, rows, K)."""
    W = est.coef_draws_.reshape(-1, *est.coef_draws_.shape[2:])
    b = est.intercept_draws_.reshape(-1, est.intercept_draws_.shape[-1])
    return special.softmax(np.einsum("nf,skf->snk", X, W) + b[:, None, :], axis=2)


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X[:, [0, 6, 9, 12]])
    labels = np.array(["barolo", "grignolino", "barbera"])[y]
    est = BayesianLogisticRegression(sampler="hmc", n_chains=2, n_warmup=300, n_draws=300,
                                     random_state=0, **PRIOR)
    return X, labels, _quiet_fit(est, X, labels)


@pytest.fixture(scope="module")
def small():
    """Few rows, so the posterior is wide and the plug-in differs from the predictive."""
    X, y, X_test, P_test = _simulate(1, 40)
    est = BayesianLogisticRegression(sampler="hmc", n_chains=2, n_warmup=200, n_draws=250,
                                     random_state=1, **PRIOR)
    return X_test, _quiet_fit(est, X, y)


# ------------------------------------------------------------ the family itself
def test_softmax_family_implements_the_predictive_protocol():
    family = SoftmaxFamily(K)
    assert isinstance(family, PredictiveFamily)
    assert family.n_linear_predictors == K


def test_family_probabilities_and_log_prob_match_scipy():
    rng = np.random.default_rng(0)
    eta = 3.0 * rng.normal(size=(7, 5, K))
    y = rng.integers(0, K, 7)
    family = SoftmaxFamily(K)
    np.testing.assert_allclose(family.inverse_link(eta), special.softmax(eta, axis=-1),
                               rtol=1e-13, atol=1e-15)
    onehot = np.eye(K)[y][:, None, :]
    ref = stats.multinomial.logpmf(onehot, 1, special.softmax(eta, axis=-1))
    np.testing.assert_allclose(family.log_prob(y, eta), ref, rtol=0, atol=1e-10)
    assert family.log_prob(y, eta[:, 0]).shape == (7,)
    # Stable where a naive exp overflows.
    big = np.array([[[1e4, 0.0, -1e4]]])
    assert np.all(np.isfinite(family.inverse_link(big)))
    assert family.log_prob([0], big)[0, 0] == 0.0


def test_family_mixture_moments_and_quantiles():
    rng = np.random.default_rng(1)
    eta = rng.normal(size=(6, 4, K))
    w = rng.dirichlet(np.ones(4))
    family = SoftmaxFamily(K)
    p = special.softmax(eta, axis=-1)
    mix = np.einsum("rdk,d->rk", p, w)
    np.testing.assert_allclose(family.predictive_mean(eta, w), mix, rtol=1e-13)
    np.testing.assert_allclose(family.predictive_variance(eta, w), mix * (1 - mix), rtol=1e-12)
    q = family.predictive_quantile([0.1, 0.9], eta, w)
    assert q.shape == (2, 6, K)
    # The indicator of class c is 1 with probability mix_c: its p-quantile is 1
    # exactly when P(indicator = 0) = 1 - mix_c < p.
    np.testing.assert_array_equal(q[1], (1 - mix < 0.9).astype(float))
    np.testing.assert_array_equal(q[0], (1 - mix < 0.1).astype(float))
    # Signed weights: clipped to [0, 1] and renormalised.
    signed = np.array([1.5, -0.2, -0.2, -0.1])
    m = family.predictive_mean(eta, signed)
    assert np.all((m >= 0) & (m <= 1))
    np.testing.assert_allclose(m.sum(axis=1), 1.0, rtol=1e-13)


def _max_z(labels, proba):
    """Largest |z| of the label frequencies against ``proba`` (rows, K), binomial se."""
    n = labels.shape[-1]
    freq = np.stack([(labels == c).mean(axis=-1) for c in range(proba.shape[-1])], axis=-1)
    se = np.sqrt(np.maximum(proba * (1 - proba), 1e-12) / n)
    return np.max(np.abs(freq - proba) / se)


def test_family_sample_frequencies_match_the_probabilities():
    rng = np.random.default_rng(2)
    eta = rng.normal(size=(5, K))
    family = SoftmaxFamily(K)
    n = 20000
    labels = family.sample(np.random.default_rng(3), np.repeat(eta[:, None, :], n, axis=1))
    assert labels.shape == (5, n) and labels.dtype == np.int64
    p = family.inverse_link(eta)
    assert _max_z(labels, p) <= 4
    # Negative control: the classes in the wrong order fail.
    assert _max_z(labels, p[:, ::-1]) > 4


# -------------------------------------------------------------- sample_y
def test_sample_y_frequencies_match_predict_proba(small):
    X_test, est = small
    n = 20000
    labels = est.sample_y(X_test, n_samples=n, random_state=0)
    assert labels.shape == (len(X_test), n)
    assert set(np.unique(labels)) <= set(est.classes_)
    codes = np.searchsorted(est.classes_, labels)
    proba = est.predict_proba(X_test)
    assert _max_z(codes, proba) <= 4
    # Negative controls, the same assertion: (a) the wrong class order,
    assert _max_z(codes, proba[:, ::-1]) > 4
    # (b) labels from the posterior-mean plug-in softmax(b_bar + W_bar x).
    plug_in = est.intercept_ + X_test @ est.coef_.T
    wrong = SoftmaxFamily(K).sample(np.random.default_rng(0),
                                    np.repeat(plug_in[:, None, :], n, axis=1))
    assert _max_z(wrong, proba) > 4


def test_sample_y_is_joint_across_rows_and_independent_of_the_block_size(small, monkeypatch):
    X_test, est = small
    # Two posterior draws, one putting all mass on the first class, one on the
    # last: each column of sample_y uses one draw for every row, so a column is
    # constant and both labels occur.
    fake = copy.deepcopy(est)
    n_feat = X_test.shape[1]
    fake.coef_draws_ = np.zeros((1, 2, K, n_feat))
    fake.intercept_draws_ = np.array([[[60.0, 0.0, 0.0], [0.0, 0.0, 60.0]]])
    fake.sample_stats_ = {k: v[:1, :2] for k, v in est.sample_stats_.items()}
    cols = fake.sample_y(X_test, n_samples=200, random_state=0)
    assert np.all(cols == cols[:1])
    assert set(cols[0]) == {est.classes_[0], est.classes_[-1]}
    # Rows are drawn in blocks; the uniforms are consumed row-major, so the
    # draws do not depend on the block size.
    full = est.sample_y(X_test, n_samples=50, random_state=7)
    monkeypatch.setattr(_predictive, "_BLOCK", 3 * 50 * K)
    np.testing.assert_array_equal(est.sample_y(X_test, n_samples=50, random_state=7), full)


def test_sample_y_refuses_signed_draws_and_intervals_take_the_signs(small):
    X_test, est = small
    signed = copy.deepcopy(est)
    signs = np.ones(est.intercept_draws_.shape[:2])
    signed.sample_stats_ = dict(est.sample_stats_, sign=signs)
    # All signs positive: equal weights, the same intervals as unsigned.
    lo, hi = est.predict_proba_interval(X_test, alpha=0.2)
    lo_s, hi_s = signed.predict_proba_interval(X_test, alpha=0.2)
    np.testing.assert_allclose(lo_s, lo, atol=1e-12)
    np.testing.assert_allclose(hi_s, hi, atol=1e-12)
    signs[0, :5] = -1
    with pytest.raises(ValueError, match="signed"):
        signed.sample_y(X_test)
    lo_s, hi_s = signed.predict_proba_interval(X_test, alpha=0.2)
    assert np.all((lo_s >= 0) & (lo_s <= hi_s) & (hi_s <= 1))
    p, sd = signed.predict_proba(X_test, return_std=True)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)


# ------------------------------------------- sd and intervals of the probabilities
def test_std_and_interval_are_those_of_the_softmax_draws(small):
    X_test, est = small
    P = _softmax_draws(est, X_test)
    proba, sd = est.predict_proba(X_test, return_std=True)
    np.testing.assert_allclose(proba, est.predict_proba(X_test), rtol=1e-12)
    np.testing.assert_allclose(sd, P.std(axis=0), rtol=1e-10, atol=1e-14)
    lo, hi = est.predict_proba_interval(X_test, alpha=0.1)
    np.testing.assert_allclose(lo, np.quantile(P, 0.05, axis=0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(hi, np.quantile(P, 0.95, axis=0), rtol=1e-12, atol=1e-15)


def _coverage(seed, alpha=0.2):
    """Fractions of held-out rows x classes whose true probability is in the interval:
    of the fit, and of the broken variant (draws pulled halfway towards their mean,
    an overconfident posterior)."""
    # Calibration holds given any event of the data, here "all K classes
    # occur" (else the fit is binary), if the whole draw (theta, X, y) is
    # rejected, not y alone.
    for attempt in range(100):
        X, y, X_test, P_test = _simulate(1000 * seed + attempt, 40)
        if len(np.unique(y)) == K:
            break
    est = BayesianLogisticRegression(sampler="hmc", n_chains=2, n_warmup=150, n_draws=200,
                                     random_state=seed, **PRIOR)
    est = _quiet_fit(est, X, y)
    out = []
    for shrink in (1.0, 0.5):
        broken = copy.copy(est)
        for name in ("coef_draws_", "intercept_draws_"):
            d = getattr(est, name)
            setattr(broken, name, d.mean(axis=(0, 1)) + shrink * (d - d.mean(axis=(0, 1))))
        lo, hi = broken.predict_proba_interval(X_test, alpha=alpha)
        out.append(np.mean((P_test >= lo) & (P_test <= hi)))
    return out


def test_intervals_cover_at_the_nominal_rate_on_held_out_rows():
    """Simulation-based calibration: parameters drawn from the prior the fit uses,
    so the 80% intervals of p_c(x) cover the truth 80% of the time on average over
    replicates.  Replicates are independent: the se is that of their mean.
    (Measured over 80 other replicates: 0.820 +- 0.015.)"""
    cov, bad = np.array([_coverage(s) for s in range(20)]).T
    se = cov.std(ddof=1) / np.sqrt(len(cov))
    assert abs(cov.mean() - 0.8) <= 4 * se + 0.02  # 0.02: MCMC quantile error, 400 draws
    # Negative control: an overconfident posterior (sd halved) fails.
    se_bad = bad.std(ddof=1) / np.sqrt(len(bad))
    assert abs(bad.mean() - 0.8) > 4 * se_bad + 0.02


# ----------------------------------------------------------------- ArviZ export
def test_pointwise_log_likelihood_is_the_categorical_logpmf(wine):
    X, labels, est = wine
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 2.0, len(X))
    rows = rng.choice(len(X), 60, replace=False)
    dt = est.to_datatree(X, labels, sample_weight=w, rows=rows, thin=2)
    ll = dt["log_likelihood"]["y"].values
    assert ll.shape == (2, 150, 60)
    keep = est.coef_draws_[:, ::2]
    thinned = copy.copy(est)
    thinned.coef_draws_, thinned.intercept_draws_ = keep, est.intercept_draws_[:, ::2]
    P = _softmax_draws(thinned, X[rows])                                 # (draws, rows, K)
    codes = np.searchsorted(est.classes_, labels[rows])
    ref = stats.multinomial.logpmf(np.eye(K)[codes][None], 1, P) * w[rows]
    np.testing.assert_allclose(ll.reshape(-1, 60), ref, rtol=0, atol=1e-10)
    post = dt["posterior"]
    assert post["coef"].dims == ("chain", "draw", "class", "feature")
    assert list(post["class"].values) == list(est.classes_)
    np.testing.assert_array_equal(dt["observed_data"]["y"].values, codes)
    # Negative control: the wrong class order is not the log-likelihood.
    wrong = stats.multinomial.logpmf(np.eye(K)[K - 1 - codes][None], 1, P) * w[rows]
    assert np.max(np.abs(ll.reshape(-1, 60) - wrong)) > 1.0


def test_az_loo_runs_on_the_export(wine):
    az = pytest.importorskip("arviz")
    X, labels, est = wine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(est.to_inference_data(X, labels))
    elpd = float(getattr(loo, "elpd_loo", getattr(loo, "elpd", np.nan)))
    assert np.isfinite(elpd)
    # LOO cannot beat the in-sample log predictive density.
    lpd = np.sum(np.log(est.predict_proba(X)[np.arange(len(X)),
                                             np.searchsorted(est.classes_, labels)]))
    assert elpd < lpd


# ------------------------------------------------------ the multinomial spline model
def test_basis_model_is_the_multinomial_glm_on_the_expanded_design():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 3))
    y = rng.integers(0, K, 50)
    w = rng.uniform(0.5, 2.0, 50)
    from sklearn.preprocessing import SplineTransformer

    st = SplineTransformer(n_knots=4, degree=2, include_bias=False).fit(X)
    basis = BSplineBasis.from_spline_transformer(st)
    model = MultinomialBasisGLM(X, y, K, basis, sample_weight=w, chunk_size=16)
    ref = MultinomialGLM(basis.transform(X), y, K, sample_weight=w, chunk_size=16)
    assert model.dim == ref.dim == K * (1 + basis.n_features_out_)
    theta = 0.3 * rng.normal(size=model.dim)
    idx = rng.integers(0, 50, 20)
    np.testing.assert_allclose(model.loglik(theta, idx), ref.loglik(theta, idx), rtol=1e-12)
    np.testing.assert_allclose(model.loglik_grad(theta, idx), ref.loglik_grad(theta, idx),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(model.grad_sum(theta), ref.grad_sum(theta), rtol=1e-12)
    for a, b in zip(model.sums(theta, order=2), ref.sums(theta, order=2)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


@pytest.fixture(scope="module")
def wine_spline():
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X[:, [0, 6, 9, 12]])
    return X, y


def _spline(**kw):
    params = dict(n_knots=3, degree=1, sampler="hmc", n_chains=4, n_warmup=400,
                  n_draws=1000, random_state=0, **PRIOR)
    params.update(kw)
    return BayesianSplineClassifier(**params)


def test_spline_multinomial_posterior_matches_an_independent_reference(wine_spline,
                                                                         monkeypatch):
    """With no difference penalty the prior is the independent Gaussian one, so the
    posterior is that of softmax regression on the expanded design, which the
    importance-sampling reference of tests/reference.py computes independently."""
    from .reference import softmax_importance_reference

    X, y = wine_spline
    est = _quiet_fit(_spline(), X, y)
    assert est.coef_.shape == (K, 8) and est.coef_draws_.shape == (4, 1000, K, 8)
    assert est.convergence_["r_hat"].max() < 1.01
    mean, sd, ess = softmax_importance_reference(est.basis_.transform(X), y, K, **PRIOR)
    assert ess > 2000

    def errors(e):
        draws = e._all_draws()
        return (np.max(np.abs(draws.mean(axis=(0, 1)) - mean) / sd),
                draws.std(axis=(0, 1)) / sd)

    dmean, ratio = errors(est)
    assert dmean < 0.1 and np.all(np.abs(ratio - 1) < 0.10)

    # Negative control: a likelihood scaled by 0.6 fails the same assertion.
    from bayesian_subsample.estimators import _spline as spline_module

    class Tempered(MultinomialBasisGLM):
        def eta_terms(self, yr, wr, eta, order=0):
            return tuple(0.6 * t for t in super().eta_terms(yr, wr, eta, order))

        def grad_sum(self, theta):
            return 0.6 * super().grad_sum(theta)

    monkeypatch.setattr(spline_module, "MultinomialBasisGLM", Tempered)
    dmean, ratio = errors(_quiet_fit(_spline(n_draws=500), X, y))
    assert not (dmean < 0.1 and np.all(np.abs(ratio - 1) < 0.10))


def test_spline_multinomial_hmc_ecs_and_predictions(wine_spline):
    X, y = wine_spline
    est = _quiet_fit(_spline(sampler=HMCECS(subsample_size=60), n_chains=2, n_warmup=200,
                                 n_draws=200), X, y)
    assert np.all(est.subsample_size_ < len(y))
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    assert np.mean(est.predict(X) == y) > 0.9
    assert est.sample_y(X[:4], 3, random_state=0).shape == (4, 3)
    dt = est.to_datatree(X, y)
    assert dt["posterior"]["coef"].dims == ("chain", "draw", "class", "basis_function")
    assert list(dt["posterior"]["basis_function"].values) == list(est.basis_feature_names_)


def test_spline_partial_dependence_per_class(wine_spline):
    X, y = wine_spline
    est = _quiet_fit(_spline(n_knots=4, degree=2, n_chains=2, n_warmup=100, n_draws=60), X, y)
    grid = np.linspace(-1.5, 1.5, 7)
    pd = est.partial_dependence(X, feature=1, grid=grid, quantiles=(0.1, 0.9))
    assert pd.mean.shape == (K, 7) and pd.draws.shape == (120, K, 7)
    np.testing.assert_allclose(pd.draws.sum(axis=1), 1.0, rtol=1e-12)
    # Brute force: set the column to g, softmax of every draw, average over rows.
    W = est.coef_draws_.reshape(-1, K, est.coef_draws_.shape[-1])
    b = est.intercept_draws_.reshape(-1, K)
    brute = np.empty((W.shape[0], K, grid.size))
    for g, value in enumerate(grid):
        Xg = X.copy()
        Xg[:, 1] = value
        eta = np.einsum("nf,skf->snk", est.basis_.transform(Xg), W) + b[:, None, :]
        brute[:, :, g] = special.softmax(eta, axis=2).mean(axis=1)
    np.testing.assert_allclose(pd.draws, brute, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(pd.mean, brute.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(pd.lower, np.quantile(brute, 0.1, axis=0), rtol=1e-10)
    # Signed weights (all positive): the weighted path gives the same answer.
    signed = copy.deepcopy(est)
    signed.sample_stats_ = dict(est.sample_stats_,
                                sign=np.ones(est.intercept_draws_.shape[:2]))
    pd_s = signed.partial_dependence(X, feature=1, grid=grid, quantiles=(0.1, 0.9))
    np.testing.assert_allclose(pd_s.mean, pd.mean, rtol=1e-10)
    np.testing.assert_allclose(pd_s.upper, pd.upper, rtol=1e-10)


def test_spline_plot_partial_dependence_needs_a_target_class(wine_spline):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = wine_spline
    est = _quiet_fit(_spline(n_chains=1, n_warmup=50, n_draws=30), X, y)
    with pytest.raises(ValueError, match="target="):
        est.plot_partial_dependence(X, y, feature=0)
    with pytest.raises(ValueError, match="not one of classes_"):
        est.plot_partial_dependence(X, y, feature=0, target=7)
    fig, ax = plt.subplots()
    est.plot_partial_dependence(X, y, feature=0, target=2, ax=ax, n_bins=10)
    assert ax.get_ylabel() == "P(y = 2)"
    plt.close(fig)


@pytest.mark.parametrize("check_name", ["check_classifiers_train", "check_classifiers_classes",
                                        "check_decision_proba_consistency",
                                        "check_classifiers_regression_target",
                                        "check_supervised_y_2d", "check_fit_idempotent"])
def test_sklearn_multiclass_checks_spline(check_name):
    """The 3-class checks of sklearn.utils.estimator_checks on the spline classifier
    (tests/test_spline.py runs the whole list, now with multi_class=True)."""
    from sklearn.utils import estimator_checks

    est = BayesianSplineClassifier(n_knots=4, n_chains=2, n_warmup=20, n_draws=20,
                                   random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        getattr(estimator_checks, check_name)(type(est).__name__, est)
