"""BayesianMLPClassifier / BayesianMLPRegressor: scikit-learn contract, errors, divergences."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris, make_classification, make_regression
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayesian_subsample import BayesianMLPClassifier, BayesianMLPRegressor

SMALL = dict(hidden_layer_sizes=(5,), n_chains=2, n_warmup=3, n_draws=6, n_networks_kept=3,
             batch_size=20, random_state=0)


@parametrize_with_checks([
    BayesianMLPClassifier(**SMALL),
    BayesianMLPClassifier(sampler="sgd", **SMALL),
    BayesianMLPRegressor(**SMALL),
])
def test_sklearn_compatible_estimator(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def _classification(n_classes=3, n=300):
    X, y = make_classification(n, 5, n_informative=3, n_redundant=0, n_classes=n_classes,
                               random_state=0)
    return StandardScaler().fit_transform(X), y


@pytest.mark.parametrize("sampler", ["sghmc", "sgld", "hmc", "sgd", "sgd_momentum"])
def test_every_sampler_fits_and_predicts(sampler):
    X, y = _classification()
    clf = BayesianMLPClassifier((8,), sampler=sampler, n_chains=2, n_warmup=5, n_draws=10,
                                n_networks_kept=4, batch_size=50, n_integration_steps=5,
                                random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X[:200], y[:200])
    p = clf.predict_proba(X[200:])
    assert p.shape == (100, 3) and np.allclose(p.sum(axis=1), 1)
    assert clf.score(X[200:], y[200:]) > 0.6
    kept = 1 if sampler.startswith("sgd") else 4
    assert clf.network_draws_.shape == (2, kept, clf.network_.dim)
    assert clf.networks_nbytes_ == 2 * kept * clf.network_.dim * 8
    assert clf.n_networks_ == 2 * kept


def test_binary_uses_one_sigmoid_output_and_string_labels():
    X, y = _classification(2)
    labels = np.array(["no", "yes"])[y]
    clf = BayesianMLPClassifier((4,), n_warmup=3, n_draws=6, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, labels)
    assert clf.network_.n_outputs == 1 and clf.network_.output == "sigmoid"
    assert set(clf.predict(X)) <= {"no", "yes"}
    assert clf.predict_proba(X).shape == (300, 2)


def test_same_seed_same_networks_for_any_n_jobs():
    X, y = _classification()
    kw = dict(hidden_layer_sizes=(4,), n_chains=2, n_warmup=2, n_draws=4, random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = BayesianMLPClassifier(n_jobs=1, **kw).fit(X, y)
        b = BayesianMLPClassifier(n_jobs=2, **kw).fit(X, y)
    assert np.array_equal(a.network_draws_, b.network_draws_)
    c = pickle.loads(pickle.dumps(a))
    assert np.array_equal(c.predict_proba(X), a.predict_proba(X))


def test_regressor_recovers_signal_and_reports_noise():
    X, y = make_regression(400, 4, noise=1.0, random_state=0)
    X = StandardScaler().fit_transform(X)
    reg = BayesianMLPRegressor((8,), n_warmup=20, n_draws=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(X[:300], y[:300])
    mean, sd = reg.predict(X[300:], return_std=True)
    assert reg.score(X[300:], y[300:]) > 0.95
    assert mean.shape == sd.shape == (100,) and np.all(sd > 0)
    assert reg.noise_precision_draws_.shape == (2, 20)


@pytest.mark.parametrize("params,match", [
    ({"sampler": "nuts"}, "sampler must be one of"),
    ({"activation": "softplus"}, "activation must be one of"),
    ({"hidden_layer_sizes": (3, 0)}, "hidden_layer_sizes"),
    ({"batch_size": 0}, "batch_size"),
    ({"learning_rate": -1.0}, "learning_rate"),
    ({"momentum_decay": 1.5}, "momentum_decay"),
    ({"n_networks_kept": 0}, "n_networks_kept"),
    ({"prior_precision": 0.0}, "prior_precision"),
])
def test_bad_parameters_raise_before_sampling(params, match):
    X, y = _classification()
    with pytest.raises(ValueError, match=match):
        BayesianMLPClassifier(**params).fit(X, y)


def test_divergent_chain_is_stopped_counted_and_warned():
    X, y = _classification()
    clf = BayesianMLPClassifier((4,), sampler="sgd_momentum", learning_rate=5.0,
                                n_warmup=0, n_draws=3, random_state=0)
    with pytest.raises(RuntimeError, match="diverged"):
        clf.fit(X * 1e3, y)
    # A chain that diverges after storing networks: those are used, one warning.
    clf = BayesianMLPClassifier((4,), sampler="sgld", learning_rate=2e-3, n_warmup=0,
                                n_draws=40, n_networks_kept=40, batch_size=300,
                                random_state=0)
    with pytest.warns(ConvergenceWarning, match="diverged"):
        clf.fit(X * 30, y)
    assert clf.n_diverged_chains_ >= 1
    assert 0 < clf.n_networks_ < 80
    assert np.all(np.isfinite(clf.predict_proba(X)))


def _class_frequency_z(freq, p, n_samples):
    """Largest |frequency - probability| in binomial standard errors."""
    se = np.sqrt(np.clip(p * (1 - p), 1e-12, None) / n_samples)
    return float(np.max(np.abs(freq - p) / se))


def test_classifier_sample_y_frequencies_match_predict_proba():
    # Every column picks a kept network at random and draws each row's label
    # from it, so the class frequencies over N columns estimate
    # predict_proba (the mean over networks) with binomial standard errors.
    # 40 rows x 3 classes at 4.5 SE: a false failure has probability < 1e-3.
    X, y = _classification()
    clf = BayesianMLPClassifier((6,), n_warmup=5, n_draws=10, n_networks_kept=5,
                                batch_size=50, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X[:200], y[:200])
    Xt = X[200:240]
    N = 4000
    draws = clf.sample_y(Xt, n_samples=N, random_state=1)
    assert draws.shape == (40, N) and set(np.unique(draws)) <= set(clf.classes_)
    assert np.array_equal(draws, clf.sample_y(Xt, n_samples=N, random_state=1))
    p = clf.predict_proba(Xt)
    freq = np.stack([(draws == c).mean(axis=1) for c in clf.classes_], axis=1)
    assert _class_frequency_z(freq, p, N) <= 4.5
    # Negative control: labels drawn from one network only (no averaging
    # over the posterior) do not reproduce the predictive.
    one = clf.network_.predict_output(clf._networks()[0], Xt)
    e = np.exp(one - one.max(axis=1, keepdims=True))
    p_one = e / e.sum(axis=1, keepdims=True)
    assert _class_frequency_z(p_one, p, N) > 4.5


def test_binary_sample_y_and_regressor_sample_y_match_the_predictive():
    X, y = _classification(2)
    clf = BayesianMLPClassifier((4,), n_warmup=3, n_draws=6, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, np.array(["no", "yes"])[y])
    N = 4000
    draws = clf.sample_y(X[:30], n_samples=N, random_state=2)
    p = clf.predict_proba(X[:30])[:, 1]
    assert _class_frequency_z((draws == "yes").mean(axis=1), p, N) <= 4.5

    Xr, yr = make_regression(300, 4, noise=5.0, random_state=0)
    Xr = StandardScaler().fit_transform(Xr)
    reg = BayesianMLPRegressor((6,), n_warmup=10, n_draws=10, n_networks_kept=5,
                               random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(Xr, yr)
    samples = reg.sample_y(Xr[:20], n_samples=N, random_state=3)
    mean, sd = reg.predict(Xr[:20], return_std=True)
    assert samples.shape == (20, N)
    # Mean within 4 standard errors; the sd within 4 of its own standard
    # errors (sd / sqrt(2N) for a near-normal mixture).
    assert np.all(np.abs(samples.mean(axis=1) - mean) <= 4 * sd / np.sqrt(N))
    assert np.all(np.abs(samples.std(axis=1) - sd) <= 4 * sd / np.sqrt(2 * N))
    # Negative control: draws without the observation noise (the spread of
    # the networks' means only) fail the same sd check.
    f = reg._outputs_mean(Xr[:20], lambda z: z)[:, 0]
    f2 = reg._outputs_mean(Xr[:20], lambda z: z * z)[:, 0]
    sd_networks_only = np.sqrt(np.maximum(f2 - f * f, 0)) * reg.y_scale_[0]
    assert np.all(np.abs(sd_networks_only - sd) > 4 * sd / np.sqrt(2 * N))
    two = np.column_stack([yr[:50], 2 * yr[:50]])
    reg2 = BayesianMLPRegressor((4,), n_warmup=3, n_draws=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg2.fit(Xr[:50], two)
    assert reg2.sample_y(Xr[:7], n_samples=3, random_state=0).shape == (7, 2, 3)


def test_continue_sampling_says_why_it_cannot_continue():
    """The MLP chains cannot resume: continue_sampling says so (not "interrupted"),
    before any sampling; an interrupted fit is named as such."""
    X, y = load_iris(return_X_y=True)
    est = BayesianMLPClassifier(hidden_layer_sizes=(3,), n_warmup=2, n_draws=2, n_chains=1,
                                random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    assert not est.interrupted_
    with pytest.raises(ValueError, match=r"its sampler \('sghmc'\) cannot resume") as info:
        est.continue_sampling(X, y, 2)
    assert "interrupted" not in str(info.value)
    est.interrupted_ = True                          # as a fit stopped by Ctrl-C leaves it
    with pytest.raises(ValueError, match="it was interrupted and kept partial draws"):
        est.continue_sampling(X, y, 2)
