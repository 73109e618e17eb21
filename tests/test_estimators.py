"""BayesianLogisticRegression: the estimator contract of DESIGN.md §4-5."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import get_scorer, roc_auc_score
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bayesian_subsample import HMC, HMCECS, BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.diagnostics import mcse_mean
from bayesian_subsample.estimators import _engine, _predictive

FAST = dict(n_chains=2, n_warmup=100, n_draws=100, random_state=0)


@pytest.fixture(scope="module")
def data():
    X, y, _ = make_higgs_like(n_samples=6000, n_features=4, random_state=1)
    return X, y


def _quiet_fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **kw)


def test_fitted_attributes_and_shapes(data):
    X, y = data
    clf = _quiet_fit(BayesianLogisticRegression(**FAST), X, y)
    assert clf.coef_.shape == (1, 4) and clf.intercept_.shape == (1,)
    assert clf.coef_draws_.shape == (2, 100, 4) and clf.intercept_draws_.shape == (2, 100)
    np.testing.assert_allclose(clf.coef_[0], clf.coef_draws_.mean(axis=(0, 1)))
    for key in ("acceptance_rate", "subsample_acceptance_rate", "loglik_var", "step_size",
                "diverging", "energy", "n_obs_evaluated"):
        assert clf.sample_stats_[key].shape == (2, 100)
    assert clf.n_evaluations_ == sum(clf.evaluations_.values()) > 0
    assert np.all(clf.subsample_size_ <= X.shape[0])
    proba = clf.predict_proba(X[:50])
    np.testing.assert_allclose(proba.sum(1), 1.0)
    np.testing.assert_allclose(np.log(proba), clf.predict_log_proba(X[:50]), rtol=1e-9)
    table = clf.summary()
    assert list(table.index) == ["intercept", "x0", "x1", "x2", "x3"]
    for col in ("mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat"):
        assert len(table[col]) == 5


def test_predict_proba_is_the_posterior_mean_probability(data, monkeypatch):
    X, y = data
    clf = _quiet_fit(BayesianLogisticRegression(**FAST), X, y)
    W = clf.coef_draws_.reshape(-1, 4)
    b = clf.intercept_draws_.reshape(-1)
    direct = (1 / (1 + np.exp(-(X[:300] @ W.T + b)))).mean(1)
    monkeypatch.setattr(_predictive, "_BLOCK", 1000)  # many small row blocks
    np.testing.assert_allclose(clf.predict_proba(X[:300])[:, 1], direct, rtol=1e-12)
    np.testing.assert_allclose(clf.predict_log_proba(X[:300])[:, 1], np.log(direct),
                               rtol=1e-10)


def test_pipeline_grid_search_and_held_out_auc(data):
    X, y = data
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
    pipe = make_pipeline(StandardScaler(), BayesianLogisticRegression(**FAST))
    search = GridSearchCV(pipe, {"bayesianlogisticregression__prior_scale": [0.01, 10.0]},
                          scoring="roc_auc", cv=2)
    _quiet_fit(search, X_tr, y_tr)
    assert search.best_params_["bayesianlogisticregression__prior_scale"] == 10.0
    auc = roc_auc_score(y_te, search.predict_proba(X_te)[:, 1])
    # With 4500 rows and a weak prior the posterior predictive ranks like the MLE.
    from sklearn.linear_model import LogisticRegression

    mle = LogisticRegression(C=1e6).fit(X_tr, y_tr)
    assert auc == pytest.approx(roc_auc_score(y_te, mle.predict_proba(X_te)[:, 1]), abs=0.005)
    # The roc_auc scorer (which prefers decision_function) agrees with predict_proba.
    assert get_scorer("roc_auc")(search.best_estimator_, X_te, y_te) == pytest.approx(auc)


def test_grid_search_reaches_sampler_parameters(data):
    X, y = data
    est = BayesianLogisticRegression(sampler=HMCECS(n_blocks=10), **FAST)
    search = GridSearchCV(est, {"sampler__subsample_size": [200, 400]}, cv=2)
    _quiet_fit(search, X, y)
    assert search.best_estimator_.sampler_.subsample_size in (200, 400)
    assert set(search.best_estimator_.subsample_size_) <= {200, 400}


def test_pickle_round_trip(data):
    X, y = data
    clf = _quiet_fit(BayesianLogisticRegression(**FAST), X, y)
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict_proba(X[:100]), clf.predict_proba(X[:100]))
    np.testing.assert_array_equal(again.coef_draws_, clf.coef_draws_)


@pytest.mark.parametrize("sampler", ["hmc_ecs", "hmc"])
def test_identical_draws_for_any_n_jobs(sampler):
    # 29 features: large enough for multi-threaded BLAS to change summation
    # order if chains did not pin their thread count.
    X, y, _ = make_higgs_like(n_samples=20000, n_features=29, random_state=2)
    kw = dict(FAST, sampler=sampler)
    a = _quiet_fit(BayesianLogisticRegression(n_jobs=1, **kw), X, y)
    b = _quiet_fit(BayesianLogisticRegression(n_jobs=2, **kw), X, y)
    np.testing.assert_array_equal(a.coef_draws_, b.coef_draws_)
    np.testing.assert_array_equal(a.sample_stats_["acceptance_rate"],
                                  b.sample_stats_["acceptance_rate"])
    c = _quiet_fit(BayesianLogisticRegression(**dict(kw, random_state=1)), X, y)
    assert not np.array_equal(a.coef_draws_, c.coef_draws_)


def test_memmap_input_gives_identical_draws(data, tmp_path):
    X, y = data
    path = tmp_path / "X.dat"
    mm = np.memmap(path, dtype=np.float64, mode="w+", shape=X.shape)
    mm[:] = X
    mm.flush()
    ro = np.memmap(path, dtype=np.float64, mode="r", shape=X.shape)
    a = _quiet_fit(BayesianLogisticRegression(**FAST), X, y)
    b = _quiet_fit(BayesianLogisticRegression(**FAST), ro, y)
    np.testing.assert_array_equal(a.coef_draws_, b.coef_draws_)


def test_string_labels_and_no_intercept(data):
    X, y = data
    labels = np.array(["no", "yes"])[y]
    clf = _quiet_fit(BayesianLogisticRegression(fit_intercept=False, **FAST), X, labels)
    assert list(clf.classes_) == ["no", "yes"]
    assert set(clf.predict(X[:200])) <= {"no", "yes"}
    assert np.all(clf.intercept_draws_ == 0) and clf.intercept_[0] == 0


def test_multiclass_fits_softmax_and_ovr_still_works(data):
    # Three classes: the softmax likelihood (tests/test_multiclass.py checks
    # its posterior); one-vs-rest wrapping still works as before.
    X, y = data
    y3 = y + (X[:, 0] > 1)
    clf = _quiet_fit(BayesianLogisticRegression(**FAST), X, y3)
    assert clf.coef_.shape == (3, X.shape[1]) and clf.predict_proba(X[:5]).shape == (5, 3)
    ovr = _quiet_fit(OneVsRestClassifier(BayesianLogisticRegression(**FAST)), X, y3)
    assert ovr.predict_proba(X[:5]).shape == (5, 3)


def test_convergence_warning_after_a_too_short_run(data):
    X, y = data
    with pytest.warns(ConvergenceWarning, match="Increase n_warmup") as record:
        BayesianLogisticRegression(n_chains=2, n_warmup=5, n_draws=10, random_state=0).fit(X, y)
    assert sum(issubclass(w.category, ConvergenceWarning) for w in record) == 1


def test_no_convergence_warning_after_an_adequate_run(data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = BayesianLogisticRegression(n_chains=2, n_warmup=300, n_draws=500,
                                         random_state=0).fit(X, y)
    assert clf.convergence_["r_hat"].max() < 1.01


def test_verbose_zero_prints_nothing(data, capsys):
    X, y = data
    _quiet_fit(BayesianLogisticRegression(**FAST), X, y)
    assert capsys.readouterr().out == ""
    _quiet_fit(BayesianLogisticRegression(verbose=1, **FAST), X, y)
    assert "acceptance" in capsys.readouterr().out


@pytest.mark.parametrize(
    "params, fit_kw, match",
    [
        ({"sampler": "nope"}, {}, "Unknown sampler"),
        ({"sampler": 3}, {}, "sampler must be"),
        ({"n_chains": 0}, {}, "n_chains"),
        ({"n_draws": 0}, {}, "n_draws"),
        ({"n_warmup": -1}, {}, "n_warmup"),
        ({"prior_scale": -1.0}, {}, "prior_scale"),
        ({"intercept_prior_scale": np.inf}, {}, "intercept_prior_scale"),
        ({"subsample_size": 10**6}, {}, "larger than the data"),
        ({"subsample_size": 100, "sampler": "hmc"}, {}, "uses all the data"),
        ({"sampler": HMCECS(n_blocks=0)}, {}, "n_blocks"),
        ({"sampler": HMC(trajectory_length=-1)}, {}, "trajectory_length"),
        ({"sampler": HMC(mass_matrix="full")}, {}, "mass_matrix"),
        ({"random_state": "x"}, {}, "random_state"),
        ({}, {"sample_weight": -np.ones(600)}, "negative"),
        ({}, {"sample_weight": np.zeros(600)}, "all zeros"),
        ({}, {"sample_weight": np.ones(5)}, "sample_weight must have shape"),
        ({}, {"sample_weight": np.full(600, np.nan)}, "NaN"),
    ],
)
def test_bad_parameters_fail_before_sampling(data, monkeypatch, params, fit_kw, match):
    X, y = data[0][:600], data[1][:600]

    def _must_not_run(*args, **kwargs):
        raise AssertionError("sampling started before validation")

    monkeypatch.setattr(_engine, "run_chains", _must_not_run)
    with pytest.raises(ValueError, match=match):
        BayesianLogisticRegression(**params).fit(X, y, **fit_kw)


@pytest.mark.parametrize(
    "X_bad, y_bad, match",
    [
        ("nan", None, "NaN"),
        ("inf", None, "infinity"),
        (None, "one_class", "one class"),
        ("1d", None, "2D array"),
        (None, "short", "inconsistent numbers of samples"),
    ],
)
def test_bad_data_fails_before_sampling(data, monkeypatch, X_bad, y_bad, match):
    X, y = data[0][:600].copy(), data[1][:600].copy()
    if X_bad == "nan":
        X[3, 1] = np.nan
    elif X_bad == "inf":
        X[3, 1] = np.inf
    elif X_bad == "1d":
        X = X[:, 0]
    if y_bad == "one_class":
        y[:] = 1
    elif y_bad == "short":
        y = y[:-1]
    monkeypatch.setattr(_engine, "run_chains", lambda *a, **k: pytest.fail("sampled"))
    with pytest.raises(ValueError, match=match):
        BayesianLogisticRegression().fit(X, y)


def test_integer_weights_match_repeated_rows():
    """Weighted and repeated-row posteriors agree within MCSE; ignoring the
    weights (the negative control) moves the posterior far outside it."""
    X, y, _ = make_higgs_like(n_samples=3000, n_features=2, random_state=3)
    w = np.where(y == 1, 3, 1) * (1 + (X[:, 0] > 0))
    Xr, yr = np.repeat(X, w, axis=0), np.repeat(y, w)
    kw = dict(n_chains=4, n_warmup=300, n_draws=600, sampler="hmc")
    fits = {}
    for name, args in {"weighted": (X, y, w), "repeated": (Xr, yr, None),
                       "ignored": (X, y, None)}.items():
        est = BayesianLogisticRegression(random_state=len(name), **kw)
        fits[name] = _quiet_fit(est, args[0], args[1], sample_weight=args[2])

    def draws(est):
        return np.concatenate([est.intercept_draws_[..., None], est.coef_draws_], axis=2)

    def z(a, b):
        da, db = draws(a), draws(b)
        se = np.sqrt(mcse_mean(da) ** 2 + mcse_mean(db) ** 2)
        return np.abs(da.mean((0, 1)) - db.mean((0, 1))) / se

    assert np.all(z(fits["weighted"], fits["repeated"]) < 4)
    assert np.any(z(fits["weighted"], fits["ignored"]) > 4)


@pytest.mark.parametrize("n", [4000, 40000])
def test_hmc_ecs_work_per_iteration_does_not_depend_on_n(n):
    """Each HMC-ECS iteration reads (L + 1) m rows: one estimate for the
    subsample update and one per leapfrog step, whatever the data size."""
    X, y, _ = make_higgs_like(n_samples=n, n_features=3, random_state=0)
    clf = _quiet_fit(BayesianLogisticRegression(subsample_size=500, **FAST), X, y)
    stats = clf.sample_stats_
    expected = (stats["n_steps"] + 1) * 500
    np.testing.assert_array_equal(stats["n_obs_evaluated"], expected)
    assert clf.evaluations_["sampling"] == expected.sum()


def test_signed_sampler_weights_every_summary_by_sign(data, monkeypatch):
    X, y = data
    clf = _quiet_fit(BayesianLogisticRegression(sampler="hmc_ecs_signed", **FAST), X, y)
    signs = clf.sample_stats_["sign"]
    assert signs.shape == (2, 100) and set(np.unique(signs)) <= {-1.0, 1.0}
    assert clf.convergence_["tau"] == pytest.approx(np.mean(signs > 0))
    assert clf.sampler_info_[0]["n_products"] >= 1
    # Flip some signs by hand: coef_, predictions and summary follow the ratio estimator.
    flipped = signs.copy()
    flipped[0, :10] = -1.0
    clf.sample_stats_["sign"] = flipped
    W = clf.coef_draws_.reshape(-1, 4)
    b = clf.intercept_draws_.reshape(-1)
    s = flipped.reshape(-1)
    p = 1 / (1 + np.exp(-(X[:20] @ W.T + b)))
    np.testing.assert_allclose(clf.predict_proba(X[:20])[:, 1], np.clip(p @ s / s.sum(), 0, 1))
    np.testing.assert_allclose(clf.summary()["mean"][1:], (W * s[:, None]).sum(0) / s.sum())
    # Negative control: the plain mean differs once signs are not all positive.
    assert not np.allclose(clf.summary()["mean"][1:], W.mean(0))


def test_low_tau_triggers_a_convergence_warning(data, monkeypatch):
    X, y = data
    clf = _quiet_fit(BayesianLogisticRegression(sampler="hmc_ecs_signed", **FAST), X, y)
    clf.sample_stats_["sign"][:, ::4] = -1.0  # tau = 0.75
    with pytest.warns(ConvergenceWarning, match="positive"):
        clf._check_convergence(clf._all_draws())
