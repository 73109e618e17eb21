"""Every full pass once per fit, shared by all chains (issue 15, item 2).

* The number of full passes over the data in a fit does not grow with
  ``n_chains``: theta*, the control-variate sums, the mass matrix and the
  pilot for ``m`` are computed once, before the chains are dispatched.  The
  passes are counted where every one of them goes: the model's chunk map.
* ``sampler_info_`` reports the set-up passes and their time.
* Labels are encoded without a full sort and equal ``np.unique``'s encoding.
* Non-finite X is still refused, with a clear message, now that the finite
  check is the one scan of X that also bounds its magnitude.
"""

import numpy as np
import pytest

from bayesian_subsample import BayesianLogisticRegression, BayesianPoissonRegressor
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.estimators._validation import encode_labels
from bayesian_subsample.models import GLM

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture
def count_passes(monkeypatch):
    """Count full passes: calls of ``GLM.map_chunks`` (every full pass, in the
    set-up and in the chains, and nothing else, goes through it)."""
    calls = []
    original = GLM.map_chunks

    def counted(self, method, *args):
        calls.append(method)
        return original(self, method, *args)

    monkeypatch.setattr(GLM, "map_chunks", counted)
    return calls


def _data(n=30_000):
    X, y, _ = make_higgs_like(n_samples=n, n_features=4, random_state=2)
    return X, y


@pytest.mark.parametrize("sampler", ["hmc_ecs", "sgld", "sghmc"])
def test_full_passes_do_not_grow_with_n_chains(count_passes, sampler):
    X, y = _data()
    counts, setup = [], []
    for n_chains in (1, 3):
        count_passes.clear()
        est = BayesianLogisticRegression(sampler=sampler, n_chains=n_chains, n_warmup=150,
                                         n_draws=20, n_jobs=1, random_state=0).fit(X, y)
        counts.append(len(count_passes))
        setup.append(est.sampler_info_[0]["setup_passes"])
        # one shared theta* and m: the same in every chain
        assert np.all(est.reference_point_ == est.reference_point_[0])
        assert len(set(est.subsample_size_.tolist())) == 1
    assert counts[0] == counts[1] > 0
    # every pass is a set-up pass, all counted in sampler_info_
    assert setup == counts


def test_negative_control_full_data_hmc_passes_grow_with_n_chains(count_passes):
    """The counter sees chain passes: full-data HMC's gradients are passes in
    every chain, so there the count grows with the chains."""
    X, y = _data(5_000)
    counts = []
    for n_chains in (1, 2):
        count_passes.clear()
        BayesianLogisticRegression(sampler="hmc", n_chains=n_chains, n_warmup=20, n_draws=5,
                                   n_jobs=1, random_state=0).fit(X, y)
        counts.append(len(count_passes))
    assert counts[1] > counts[0]


def test_sampler_info_reports_set_up_passes_and_time():
    X, y = _data()
    est = BayesianPoissonRegressor(sampler="hmc_ecs", n_chains=2, n_warmup=100, n_draws=20,
                                   random_state=1).fit(X, np.round(np.abs(X[:, 0]) * 3))
    for info in est.sampler_info_:
        assert info["setup_passes"] >= 1
        assert 0.0 <= info["setup_pass_seconds"] <= info["setup_seconds"]
        assert info["validation_seconds"] >= 0.0
    assert est.sampler_info_[0]["setup_passes"] == est.sampler_info_[1]["setup_passes"]
    # a continued fit keeps the set-up report of the fit it continues
    setup = est.sampler_info_[0]["setup_passes"]
    est.continue_sampling(X, np.round(np.abs(X[:, 0]) * 3), n_draws=5)
    assert est.sampler_info_[0]["setup_passes"] == setup


_LABELS = {
    "int": np.random.default_rng(0).integers(-3, 4, 500),
    "uint8": np.random.default_rng(1).integers(0, 6, 500).astype(np.uint8),
    "bool": np.random.default_rng(2).integers(0, 2, 500).astype(bool),
    "one_bool": np.ones(7, dtype=bool),
    "str": np.array(["b", "a", "cc", "a", "b"] * 20),
    "object": np.array(["b", "a", "cc", "a", "b"] * 20, dtype=object),
    "float_whole": np.random.default_rng(3).integers(0, 3, 500).astype(float),
    "float32_whole": np.array([2.0, -1.0, 3.0, 2.0], dtype=np.float32),
    "float_fractional": np.array([0.5, 1.5, 0.5, 2.25]),
    "wide_range": np.array([10**12, 3, 3, -7]),
    # Short ranges without a gap are shifted in their own dtype; with a gap
    # (here 1 and -127 missing) they go through the table.
    "int8_01": np.random.default_rng(4).integers(0, 2, 500).astype(np.int8),
    "int8_negative": np.array([-128, -126, -127, -128], dtype=np.int8),
    "int8_gap": np.array([-128, -126, -128, 0, 2, 0], dtype=np.int8),
    "int_gap": np.array([5, 7, 5, 7, 9]),
}


@pytest.mark.parametrize("kind", sorted(_LABELS))
def test_label_encoding_equals_np_unique(kind):
    y = _LABELS[kind]
    classes, codes = encode_labels(y)
    ref_classes, ref_codes = np.unique(y, return_inverse=True)
    assert classes.dtype == ref_classes.dtype
    assert np.array_equal(classes, ref_classes)
    assert np.array_equal(codes, ref_codes)
    assert np.array_equal(classes[codes], y)


def test_label_encoding_negative_control():
    """The comparison above detects a wrong encoding: labels numbered in order
    of first appearance (a hash table without the sort of the classes)."""
    y = _LABELS["int"]
    first_seen, codes = np.unique(y, return_index=True)[1], None
    order = y[np.sort(first_seen)]
    codes = np.searchsorted(np.sort(order), y)  # correct codes, but ...
    wrong_classes = order  # ... classes in appearance order
    ref_classes, ref_codes = np.unique(y, return_inverse=True)
    assert not np.array_equal(wrong_classes, ref_classes)
    assert not np.array_equal(wrong_classes[codes], y)


def test_fit_with_string_and_bool_labels_matches_integer_labels():
    X, y = _data(3_000)
    kwargs = dict(sampler="hmc_ecs", n_chains=1, n_warmup=60, n_draws=10, random_state=4)
    ref = BayesianLogisticRegression(**kwargs).fit(X, y.astype(int))
    for labels in (np.where(y > 0, "yes", "no"), y > 0, y.astype(float)):
        est = BayesianLogisticRegression(**kwargs).fit(X, labels)
        assert np.array_equal(est.coef_draws_, ref.coef_draws_)
        assert list(est.classes_) == sorted(set(labels.tolist()))


@pytest.mark.parametrize("bad, message", [(np.nan, "Input X contains NaN"),
                                          (np.inf, "Input X contains infinity"),
                                          (-np.inf, "Input X contains infinity")])
@pytest.mark.parametrize("n", [300, 200_000])
def test_non_finite_X_is_refused_before_sampling(bad, message, n):
    """Small X and X scanned in chunks (the bad value in a late chunk)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 2))
    y = (X[:, 0] > 0).astype(int)
    X[n - 5, 1] = bad
    with pytest.raises(ValueError, match=message):
        BayesianLogisticRegression(n_chains=1, n_warmup=5, n_draws=5).fit(X, y)


def test_continuous_labels_still_refused():
    X, _ = _data(500)
    with pytest.raises(ValueError, match="Unknown label type"):
        BayesianLogisticRegression(n_chains=1, n_warmup=5, n_draws=5).fit(
            X, np.linspace(0, 1, 500))
