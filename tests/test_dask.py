"""Dask arrays (and zarr through dask) as X, on a two-process LocalCluster (issue 15).

A fit on a dask array must give the same draws as the fit on the same data
in memory, bit for bit: the full passes run on the workers over the same
chunk grid and are added up in the same order, the rows of HMC-ECS's
proposals are gathered ahead in the same batches, and nothing is cast or
summed differently.  The negative control reorders the pass's partial
results, which must change the draws.  Validation, prediction and the
refusals are checked on the same cluster.  Runs are short (small n, few
iterations): the assertions are exact, not statistical.
"""

import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from bayesian_subsample import (  # noqa: E402
    HMC,
    HMCECS,
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianPoissonRegressor,
    BayesianSplineClassifier,
)
from bayesian_subsample.datasets import make_higgs_like  # noqa: E402
from bayesian_subsample.estimators import _dask  # noqa: E402
from bayesian_subsample.likelihood import TallPosterior  # noqa: E402
from bayesian_subsample.likelihood._difference import DifferenceEstimator  # noqa: E402
from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                           dashboard_address=None, memory_limit="1GiB")
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _data(kind, n=12_000, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    eta = X @ np.linspace(-0.8, 0.8, d)
    if kind == "logistic":
        y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")
    elif kind == "poisson":
        y = rng.poisson(np.exp(0.3 * eta)).astype(float)
    else:
        y = eta + 1.0 + rng.standard_normal(n)
    return X, y


_ESTIMATORS = {"logistic": BayesianLogisticRegression, "poisson": BayesianPoissonRegressor,
               "linear": BayesianLinearRegression}


def _fit(kind, X, y, sampler=None, **fit_params):
    est = _ESTIMATORS[kind](sampler=sampler or HMCECS(subsample_size=400),
                            n_chains=2, n_warmup=60, n_draws=40, random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains: convergence warnings expected
        return est.fit(X, y, **fit_params)


@pytest.mark.parametrize("kind", ["logistic", "poisson", "linear"])
def test_dask_fit_gives_the_in_memory_draws_bit_for_bit(client, kind):
    X, y = _data(kind)
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    ref = _fit(kind, X, y, sample_weight=w)
    # Row chunks that are not multiples of the model's chunk size (re-aligned),
    # y and the weights as dask arrays with other chunks.
    Xd = da.from_array(X, chunks=(2_500, 2))
    yd = da.from_array(y, chunks=3_000)
    got = _fit(kind, Xd, yd, sample_weight=da.from_array(w, chunks=5_000))
    assert np.array_equal(got.coef_draws_, ref.coef_draws_)
    assert np.array_equal(got.intercept_draws_, ref.intercept_draws_)
    assert got.n_features_in_ == X.shape[1]
    if kind == "logistic":
        assert list(got.classes_) == ["no", "yes"]


def test_softmax_on_dask(client):
    """Three classes: the codes are made on the workers from the classes the
    validation found; the same draws and probabilities as in memory."""
    X, _ = _data("logistic", n=9_000, d=3)
    y = np.array(["a", "b", "c"])[np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.5, 0.5])]
    kw = dict(sampler=HMCECS(subsample_size=300), n_chains=1, n_warmup=40, n_draws=20,
              random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = BayesianLogisticRegression(**kw).fit(X, y)
        got = BayesianLogisticRegression(**kw).fit(da.from_array(X, chunks=(4_000, 3)),
                                                   da.from_array(y, chunks=4_000))
    assert list(got.classes_) == ["a", "b", "c"]
    assert np.array_equal(got.coef_draws_, ref.coef_draws_)
    # the passes on the workers are counted like the in-memory ones
    assert got.sampler_info_[0]["setup_passes"] == ref.sampler_info_[0]["setup_passes"] > 0
    proba = got.predict_proba(da.from_array(X, chunks=(4_000, 3)))
    np.testing.assert_array_equal(proba.compute(), ref.predict_proba(X))


def test_float32_zarr_store_through_from_zarr(client, tmp_path):
    zarr = pytest.importorskip("zarr")
    X, y = _data("logistic", n=9_000)
    X = X.astype(np.float32)
    store = str(tmp_path / "X.zarr")
    z = zarr.open(store, mode="w", shape=X.shape, chunks=(2_000, X.shape[1]), dtype="f4")
    z[:] = X
    Xd = da.from_zarr(store)
    ref = _fit("logistic", X, y)
    got = _fit("logistic", Xd, y)
    assert np.array_equal(got.coef_draws_, ref.coef_draws_)


def test_spline_classifier_on_dask(client):
    """The basis is expanded on the workers, chunk by chunk (each task with its
    own empty design cache, though two blocks share a worker): the same draws
    and predictions as in memory."""
    X, y = _data("logistic", n=36_000, d=2)  # three blocks: two share a worker's shell
    kw = dict(n_knots=4, sampler=HMCECS(subsample_size=300), n_chains=1, n_warmup=40,
              n_draws=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = BayesianSplineClassifier(**kw).fit(X, y)
        got = BayesianSplineClassifier(**kw).fit(da.from_array(X, chunks=(16_384, 2)), y)
    assert np.array_equal(got.coef_draws_, ref.coef_draws_)
    proba = got.predict_proba(da.from_array(X, chunks=(2_000, 2)))
    assert isinstance(proba, da.Array)
    np.testing.assert_array_equal(proba.compute(), ref.predict_proba(X))


def test_full_passes_run_on_the_workers(client):
    X, y = _data("logistic", n=40_000)
    Xd = da.from_array(X, chunks=(16_384, 4))
    with distributed.get_task_stream(client) as ts:
        _fit("logistic", Xd, y)
    tasks = [t for t in ts.data if t["key"][0].startswith("_pass_on_block")
             or "pass_on_block" in str(t["key"])]
    assert tasks, "no full pass ran on the cluster"
    assert len({t["worker"] for t in tasks}) == 2


def test_negative_control_reordered_pass_changes_the_draws(client, monkeypatch):
    X, y = _data("logistic", n=40_000)
    ref = _fit("logistic", X, y)
    original = _dask.DaskRows.map_model_chunks

    def reordered(self, model, method, args):
        return original(self, model, method, args)[::-1]

    monkeypatch.setattr(_dask.DaskRows, "map_model_chunks", reordered)
    got = _fit("logistic", da.from_array(X, chunks=(16_384, 4)), y)
    assert not np.array_equal(got.coef_draws_, ref.coef_draws_)


def test_full_data_hmc_on_dask(client):
    X, y = _data("logistic", n=3_000)
    sampler = HMC(trajectory_length=0.5)
    kw = dict(n_chains=1, n_warmup=15, n_draws=10, random_state=0, sampler=sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = BayesianLogisticRegression(**kw).fit(X, y)
        got = BayesianLogisticRegression(**kw).fit(da.from_array(X, chunks=(1_000, 4)), y)
    assert np.array_equal(got.coef_draws_, ref.coef_draws_)


def test_prediction_returns_dask_arrays_equal_to_in_memory(client):
    X, y = _data("logistic", n=6_000)
    clf = _fit("logistic", X, y)
    Xd = da.from_array(X, chunks=(1_500, 4))
    for method in ("predict_proba", "predict_log_proba", "decision_function", "predict"):
        out = getattr(clf, method)(Xd)
        assert isinstance(out, da.Array), method
        np.testing.assert_array_equal(out.compute(), getattr(clf, method)(X))
    mean, std = clf.predict_proba(Xd, return_std=True)
    ref_mean, ref_std = clf.predict_proba(X, return_std=True)
    np.testing.assert_array_equal(mean.compute(), ref_mean)
    np.testing.assert_array_equal(std.compute(), ref_std)
    Xr, yr = _data("linear", n=6_000)
    reg = _fit("linear", Xr, yr)
    Xrd = da.from_array(Xr, chunks=(2_000, 4))
    mean, std = reg.predict(Xrd, return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)
    np.testing.assert_array_equal(mean.compute(), reg.predict(Xr))
    lo, hi = reg.predict_interval(Xrd, alpha=0.2)
    ref_lo, ref_hi = reg.predict_interval(Xr, alpha=0.2)
    np.testing.assert_array_equal(lo.compute(), ref_lo)
    np.testing.assert_array_equal(hi.compute(), ref_hi)
    with pytest.raises(ValueError, match="features"):
        clf.predict(da.from_array(X[:, :3], chunks=(1_500, 3)))


@pytest.mark.parametrize("sampler", ["sgld", "sghmc", "hmc_ecs_signed", "sbps"])
def test_samplers_that_read_fresh_rows_every_iteration_are_refused(client, sampler):
    X, y = _data("logistic", n=3_000)
    with pytest.raises(ValueError, match="not supported for a dask array"):
        BayesianLogisticRegression(sampler=sampler).fit(da.from_array(X, chunks=1_000), y)


def test_bad_dask_input_is_refused_before_sampling(client):
    X, y = _data("logistic", n=3_000)
    bad = X.copy()
    bad[1234, 2] = np.nan
    clf = BayesianLogisticRegression()
    with pytest.raises(ValueError, match="NaN"):
        clf.fit(da.from_array(bad, chunks=1_000), y)
    bad[1234, 2] = 1e200
    with pytest.raises(ValueError, match="Standardise"):
        clf.fit(da.from_array(bad, chunks=1_000), y)
    with pytest.raises(ValueError, match="only one class"):
        clf.fit(da.from_array(X, chunks=1_000), np.zeros(len(X)))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        clf.fit(da.from_array(X, chunks=1_000), y[:-1])
    with pytest.raises(ValueError, match="non-negative counts"):
        BayesianPoissonRegressor().fit(da.from_array(X, chunks=1_000), -np.ones(len(X)))
    with pytest.raises(ValueError, match="positive weight"):
        clf.fit(da.from_array(X, chunks=1_000), np.arange(len(X)) % 3,
                sample_weight=(np.arange(len(X)) % 3 == 0).astype(float))
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        Xd = da.from_array(X, chunks=1_000)
        clf.fit(Xd[Xd[:, 0] > 0], y[X[:, 0] > 0])


def test_rows_never_load_the_whole_array():
    X, y = _data("linear", n=500)
    Xw, yw, _ = _dask.wrap_fit_data(da.from_array(X, chunks=100), da.from_array(y, chunks=100),
                                    None, None)
    with pytest.raises(TypeError, match="Refusing to load"):
        np.asarray(Xw)
    idx = np.array([7, 3, 7, 499])
    np.testing.assert_array_equal(Xw[idx], X[idx])
    np.testing.assert_array_equal(yw[idx], y[idx])


# ------------------------------------------------------------- proposal pool
def _estimator(prefetch, n=5_000):
    X, y = _data("logistic", n=n)
    model = GLM(X, (y == "yes").astype(float), LogisticFamily())
    post = TallPosterior(model, GaussianPrior(np.full(model.dim, 3.0)))
    ex = post.expand(np.zeros(model.dim))
    return DifferenceEstimator(model, post.prior, ex, 200, n_blocks=20, prefetch=prefetch)


@pytest.mark.parametrize("prefetch", [1, 7])
def test_proposals_drawn_ahead_follow_the_random_stream(prefetch):
    """``prefetch`` proposals at a time: blocks then indices, in one draw each; the
    pool advances whether a proposal is accepted or not."""
    est = _estimator(prefetch)
    rng = np.random.default_rng(5)
    sub = est.init_subsample(rng)
    ref = np.random.default_rng(5)
    ref.integers(0, est.model.n_obs, est.subsample_size)
    for _ in range(3):
        blocks = ref.integers(est.n_blocks, size=prefetch)
        indices = ref.integers(0, est.model.n_obs, size=(prefetch, est.block_size))
        for g, idx in zip(blocks, indices):
            prop = est.propose_subsample(rng, sub)  # sub kept: as after a rejection
            lo, hi = g * est.block_size, (g + 1) * est.block_size
            np.testing.assert_array_equal(prop.indices[lo:hi], idx)
            keep = np.ones(est.subsample_size, bool)
            keep[lo:hi] = False
            np.testing.assert_array_equal(prop.indices[keep], sub.indices[keep])
            fresh = est._subsample_from(idx)
            np.testing.assert_array_equal(prop.Z[lo:hi], fresh.Z)
            np.testing.assert_array_equal(prop.a[lo:hi], fresh.a)


def test_refresh_keeps_the_pool():
    est = _estimator(5)
    rng = np.random.default_rng(0)
    sub = est.init_subsample(rng)
    prop = est.propose_subsample(rng, sub)
    assert est.refresh(prop).pool is sub.pool
    assert sub.pool.next == 1


def test_continue_sampling_on_dask_equals_one_longer_fit():
    """The proposal pool travels in the chain state: a dask fit continued equals
    the in-memory fit continued and one longer fit, bit for bit."""
    X, y = _data("logistic", n=8_000)
    kw = dict(sampler=HMCECS(subsample_size=300), n_chains=1, n_warmup=40, n_draws=20,
              random_state=2)
    Xd = da.from_array(X, chunks=(3_000, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = BayesianLogisticRegression(**kw).fit(Xd, y).continue_sampling(Xd, y, n_draws=15)
        ref = BayesianLogisticRegression(**dict(kw, n_draws=35)).fit(X, y)
    assert np.array_equal(got.coef_draws_, ref.coef_draws_)
