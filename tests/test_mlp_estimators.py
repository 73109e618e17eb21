"""BayesianMLPClassifier / BayesianMLPRegressor: scikit-learn contract, errors, divergences."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression
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
