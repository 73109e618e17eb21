"""BayesianSplineClassifier: basis, chunked design, smoothness prior, recovery, sklearn API."""

import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import multivariate_normal
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import SplineTransformer, StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayesian_subsample import HMC, BayesianLogisticRegression, BayesianSplineClassifier
from bayesian_subsample.datasets import BANKRUPTCY_FEATURES, make_bankruptcy_like
from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import (
    GLM,
    BasisGLM,
    BSplineBasis,
    GaussianPrecisionPrior,
    LogisticFamily,
    spline_prior_precision,
)
from bayesian_subsample.models import _basis as basis_module

FAST = dict(n_chains=2, n_warmup=60, n_draws=60, random_state=0)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fn(*args, **kwargs)


def _spline_model(n=3000, seed=0, chunk_size=700, weights=False, X=None, y=None,
                  **model_kwargs):
    rng = np.random.default_rng(seed)
    if X is None:
        X = rng.standard_normal((n, 3)) * [1.0, 2.0, 0.5]
        y = (rng.random(n) < expit(-1 + np.sin(X[:, 0]) + 0.3 * X[:, 1])).astype(float)
    st = SplineTransformer(n_knots=6, degree=3, knots="quantile", include_bias=False,
                           extrapolation="linear").fit(np.asarray(X[:500]))
    w = rng.integers(1, 4, X.shape[0]).astype(float) if weights else None
    model = BasisGLM(X, y, LogisticFamily(), BSplineBasis.from_spline_transformer(st),
                     sample_weight=w, chunk_size=chunk_size, **model_kwargs)
    return model, st, w


def test_design_cache_gives_identical_sums_and_respects_its_budget(monkeypatch):
    n, chunk = 3000, 700
    cached, _, w = _spline_model(n=n, chunk_size=chunk, weights=True)
    uncached, _, _ = _spline_model(n=n, chunk_size=chunk, weights=True, design_cache_bytes=0)
    # A budget of 2.2 chunks keeps exactly two (the last, 200-row chunk would exceed it).
    chunk_bytes = chunk * cached.n_features * 8
    budget = int(2.2 * chunk_bytes)
    small, _, _ = _spline_model(n=n, chunk_size=chunk, weights=True, design_cache_bytes=budget)
    calls = []
    original = BSplineBasis.transform

    def counting(self, Xb):
        calls.append(np.asarray(Xb).shape[0])
        return original(self, Xb)

    monkeypatch.setattr(BSplineBasis, "transform", counting)
    theta = np.random.default_rng(4).normal(0, 0.3, cached.dim)
    reference = uncached.sums(theta, order=2)
    reference_grad = uncached.grad_sum(theta)
    expanded = {}
    for name, model in (("cached", cached), ("small", small)):
        for _ in range(3):  # the first pass fills the cache, the next ones read it
            calls.clear()
            for a, b in zip(model.sums(theta, order=2), reference):
                assert np.array_equal(a, b)
            assert np.array_equal(model.grad_sum(theta), reference_grad)
        expanded[name] = sum(calls)  # rows re-expanded by the last two passes
    assert cached.cache_nbytes == n * cached.n_features * 8 and expanded["cached"] == 0
    assert small.cache_nbytes == 2 * chunk_bytes <= budget
    assert expanded["small"] == 2 * (n - 2 * chunk)
    assert uncached.cache_nbytes == 0
    # Cached chunks are read-only, and the cache is neither pickled nor shared by copies.
    Z, _, _ = cached.chunk_rows(0, chunk)
    assert not Z.flags.writeable
    clone_ = pickle.loads(pickle.dumps(cached))
    assert clone_.cache_nbytes == 0
    assert np.array_equal(clone_.grad_sum(theta), cached.grad_sum(theta))
    with pytest.raises(ValueError, match="design_cache_bytes"):
        _spline_model(design_cache_bytes=-1)


# ------------------------------------------------------------------ basis
@pytest.mark.parametrize("extrapolation", ["constant", "linear", "continue"])
@pytest.mark.parametrize("include_bias", [True, False])
@pytest.mark.parametrize("degree", [2, 3])
def test_fast_basis_equals_spline_transformer(extrapolation, include_bias, degree):
    # (degree 1 with 'linear' is excluded: scikit-learn 1.9 mutates `degree` inside its
    # feature loop there, so its own output is wrong for all but the first covariate.)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2000, 4)) * [1, 3, 0.1, 10]
    st = SplineTransformer(n_knots=7, degree=degree, knots="quantile",
                           extrapolation=extrapolation, include_bias=include_bias).fit(X[:300])
    basis = BSplineBasis.from_spline_transformer(st)
    X_new = 1.5 * X  # many rows beyond the boundary knots
    np.testing.assert_allclose(basis.transform(X_new), st.transform(X_new), atol=1e-12)
    assert basis.n_features_out_ == st.n_features_out_
    j = 2
    np.testing.assert_allclose(
        basis.feature_transform(X_new[:50, j], j),
        st.transform(X_new[:50])[:, j * basis.n_basis:(j + 1) * basis.n_basis], atol=1e-12)


def test_basis_column_counts_match_the_paper():
    X = np.random.default_rng(0).standard_normal((1000, 8))
    st = SplineTransformer(n_knots=9, degree=3, include_bias=False).fit(X)
    assert st.n_features_out_ == 80  # 10 per covariate; + intercept = 81 as in §6.6
    st_bias = SplineTransformer(n_knots=9, degree=3, include_bias=True).fit(X)
    np.testing.assert_allclose(st_bias.transform(X).reshape(1000, 8, 11).sum(-1), 1.0)


def test_chunkwise_basis_equals_dense_design():
    model, st, w = _spline_model(weights=True)
    Z = st.transform(model.X)
    dense = GLM(Z, model.y, LogisticFamily(), sample_weight=w)
    assert model.n_features == Z.shape[1] and model.dim == Z.shape[1] + 1
    theta = np.random.default_rng(2).normal(0, 0.3, model.dim)
    for a, b in zip(model.sums(theta, order=2), dense.sums(theta, order=2)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-9)
    idx = np.array([5, 0, 2999, 5, 17])
    np.testing.assert_allclose(model.rows(idx)[0], Z[idx], atol=1e-12)
    np.testing.assert_allclose(model.loglik_grad(theta, idx), dense.loglik_grad(theta, idx),
                               atol=1e-12)
    np.testing.assert_allclose(model.grad_sum(theta), dense.grad_sum(theta), rtol=1e-11)


def test_memmap_is_read_in_chunks_and_never_copied(tmp_path, monkeypatch):
    n, chunk = 60_000, 4096
    rng = np.random.default_rng(3)
    path = tmp_path / "X.dat"
    mm = np.memmap(path, dtype=np.float64, mode="w+", shape=(n, 3))
    mm[:] = rng.standard_normal((n, 3))
    mm.flush()
    X = np.memmap(path, dtype=np.float64, mode="r", shape=(n, 3))
    y = (rng.random(n) < 0.3).astype(float)
    # Without the design cache (budget 0) a pass holds one expanded chunk at a time.
    model, _, _ = _spline_model(X=X, y=y, chunk_size=chunk, design_cache_bytes=0)
    assert model.X is X
    seen = []
    original = BSplineBasis.transform

    def recording(self, Xb):
        seen.append(np.asarray(Xb).shape[0])
        return original(self, Xb)

    monkeypatch.setattr(BSplineBasis, "transform", recording)
    theta = np.zeros(model.dim)
    tracemalloc.start()
    model.sums(theta, order=2)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert max(seen) <= chunk and sum(seen) == n
    dense_bytes = n * model.n_features * 8  # the n x basis design: 7.7 MB here
    assert peak < dense_bytes / 2
    assert model.cache_nbytes == 0

    # The estimator reads the memmap by chunks and gathers too (no full copy).
    seen.clear()
    clf = _quiet(BayesianSplineClassifier(n_knots=5, knot_subsample=5000, **FAST).fit, X, y)
    # Largest block: the 20,000-row pilot that sizes the subsample (a fixed bound, not n).
    assert max(seen) <= 20_000 < n
    assert clf.coef_.shape == (1, 3 * clf.n_basis_per_feature_)


# ---------------------------------------------------------- derivatives
def _fd_grad(f, x, h=1e-6):
    g = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def test_spline_glm_gradients_and_hessian_match_finite_differences():
    model, _, _ = _spline_model(n=800, weights=True)
    prior = GaussianPrecisionPrior(spline_prior_precision(3, 7, 3.0, 0.5, 5.0))
    post = TallPosterior(model, prior)
    target = post.full_target()
    theta = np.random.default_rng(4).normal(0, 0.3, model.dim)
    value, grad = target.logdensity_and_grad(theta)
    np.testing.assert_allclose(grad, _fd_grad(lambda t: target.logdensity_and_grad(t)[0], theta),
                               rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(target.grad(theta), grad, rtol=1e-12)
    _, _, hess = model.sums(theta, order=2)
    fd_h = np.stack([_fd_grad(lambda t: model.sums(t, order=1)[1][i], theta)
                     for i in range(model.dim)])
    np.testing.assert_allclose(hess, fd_h, rtol=1e-5, atol=1e-5)
    idx = np.array([3, 10, 799])
    per_obs = model.loglik_grad(theta, idx)
    for r, k in enumerate(idx):
        fd = _fd_grad(lambda t: model.loglik(t, np.array([k]))[0], theta)
        np.testing.assert_allclose(per_obs[r], fd, rtol=1e-6, atol=1e-8)


# ----------------------------------------------------------------- prior
def test_smoothness_prior_density_gradient_hessian():
    Q = spline_prior_precision(2, 5, prior_scale=2.0, difference_prior_scale=0.3,
                               intercept_prior_scale=4.0)
    prior = GaussianPrecisionPrior(Q)
    theta = np.random.default_rng(5).normal(0, 1, prior.dim)
    expected = multivariate_normal(np.zeros(prior.dim), np.linalg.inv(Q)).logpdf(theta)
    assert prior.logdensity(theta) == pytest.approx(expected, rel=1e-12)
    value, grad = prior.logdensity_and_grad(theta)
    assert value == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(grad, _fd_grad(prior.logdensity, theta), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(prior.grad(theta), grad)
    fd_h = np.stack([_fd_grad(lambda t: prior.grad(t)[i], theta) for i in range(prior.dim)])
    np.testing.assert_allclose(prior.hessian(theta), fd_h, atol=1e-6)
    # Structure: intercept alone, covariates independent, second differences of
    # (beta, 0) plus the ridge.
    assert Q[0, 0] == pytest.approx(1 / 16) and not Q[0, 1:].any() and not Q[1:6, 6:].any()
    D = np.diff(np.eye(6), n=2, axis=0)[:, :5]
    np.testing.assert_allclose(Q[1:6, 1:6], np.eye(5) / 4 + D.T @ D / 0.09)
    # The difference part alone penalises a linear trend in (beta, 0) not at all.
    trend = np.arange(6.0)[:5] - 5.0
    assert trend @ (D.T @ D) @ trend == pytest.approx(0.0, abs=1e-12)


def test_precision_prior_draws_have_covariance_q_inverse():
    Q = spline_prior_precision(1, 6, 1.0, 0.5)
    prior = GaussianPrecisionPrior(Q)
    draws = prior.sample(np.random.default_rng(6), 40_000)
    cov = np.linalg.inv(Q)
    se = np.sqrt((cov**2 + np.outer(np.diag(cov), np.diag(cov))) / draws.shape[0])
    assert np.all(np.abs(np.cov(draws.T) - cov) < 5 * se)
    assert prior.sample(np.random.default_rng(0)).shape == (6,)


def test_precision_prior_rejects_bad_matrices():
    with pytest.raises(ValueError, match="positive definite"):
        GaussianPrecisionPrior(np.diag([1.0, 0.0]))
    with pytest.raises(ValueError, match="symmetric"):
        GaussianPrecisionPrior([[1.0, 0.5], [0.0, 1.0]])


# --------------------------------------------------------------- dataset
def test_make_bankruptcy_like():
    X, y, info = make_bankruptcy_like(n_samples=300_000, random_state=0)
    assert X.shape == (300_000, 8) and set(np.unique(y)) == {0, 1}
    assert 0.008 < y.mean() < 0.012
    X2, y2, _ = make_bankruptcy_like(n_samples=300_000, random_state=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert info["feature_names"] == BANKRUPTCY_FEATURES
    np.testing.assert_allclose(info["log_odds"](X[:100]),
                               info["intercept"] + info["effects"](X[:100]).sum(1))
    # Non-monotone effects in several covariates: the sign of the slope changes.
    for j in (0, 1, 2, 4):
        grid = np.quantile(X[:, j], np.linspace(0.02, 0.98, 60))
        rows = np.tile(np.median(X, axis=0), (60, 1))
        rows[:, j] = grid
        slope = np.diff(info["effects"](rows)[:, j])
        assert slope.max() > 0 > slope.min(), BANKRUPTCY_FEATURES[j]
    with pytest.raises(ValueError, match="event_rate"):
        make_bankruptcy_like(100, event_rate=0.0)


# --------------------------------------------------- recovery (statistical)
def _true_pd(info, Xr, j, grid):
    out = np.empty(grid.size)
    for g_i, g in enumerate(grid):
        Xg = Xr.copy()
        Xg[:, j] = g
        out[g_i] = info["proba"](Xg).mean()
    return out


def _max_abs_z_spline_and_linear(sampler, seed=0):
    """Max over 4 non-linear covariates x 25 grid points of |posterior mean - truth| / sd."""
    X, y, info = make_bankruptcy_like(n_samples=40_000, event_rate=0.02, random_state=seed)
    common = dict(n_chains=2, n_warmup=300, n_draws=300, random_state=seed, sampler=sampler)
    spline = _quiet(BayesianSplineClassifier(**common).fit, X, y)
    linear = _quiet(BayesianLogisticRegression(**common).fit, X, y)
    Xr = X[np.unique(np.linspace(0, len(X) - 1, 1000).round().astype(int))]
    W = linear.coef_draws_.reshape(-1, 8)
    b = linear.intercept_draws_.reshape(-1)
    z_spline, z_linear = [], []
    for j in (0, 1, 2, 4):
        pd = spline.partial_dependence(Xr, j, grid_resolution=25)
        truth = _true_pd(info, Xr, j, pd.grid)
        z_spline.append(np.abs(pd.mean - truth) / pd.draws.std(axis=0))
        # Negative control: the same partial dependence under linear logistic draws.
        rest = Xr @ W.T + b - Xr[:, [j]] * W[:, j]
        lin_pd = np.stack([expit(rest + g * W[:, j]).mean(axis=0) for g in pd.grid])
        z_linear.append(np.abs(lin_pd.mean(axis=1) - truth) / lin_pd.std(axis=1))
    return spline, np.max(z_spline), np.max(z_linear)


def test_hmc_ecs_recovers_nonlinear_partial_dependence():
    # A calibrated posterior has |z| ~ |N(0, 1)| pointwise; 4 sd over 100 (correlated)
    # points fails with probability < 1% (observed maxima 1.8-3.1 over seeds 0-3).
    # The linear logistic model, which cannot bend, fails the same check (|z| > 10).
    spline, z_spline, z_linear = _max_abs_z_spline_and_linear("hmc_ecs")
    assert spline.sample_stats_["acceptance_rate"].mean() > 0.6
    assert spline.n_divergent_ == 0
    assert z_spline < 4.0
    assert z_linear > 4.0


@pytest.mark.slow
def test_full_data_hmc_recovers_nonlinear_partial_dependence():
    spline, z_spline, z_linear = _max_abs_z_spline_and_linear(HMC(), seed=1)
    assert spline.n_divergent_ == 0
    assert z_spline < 4.0
    assert z_linear > 4.0


def test_partial_dependence_equals_brute_force_and_predict_proba():
    X, y, _ = make_bankruptcy_like(n_samples=6000, event_rate=0.1, random_state=2)
    clf = _quiet(BayesianSplineClassifier(n_knots=5, **FAST).fit, X, y)
    W = clf.coef_draws_.reshape(-1, clf.coef_.shape[1])
    b = clf.intercept_draws_.reshape(-1)
    st = clf.spline_transformer_
    np.testing.assert_allclose(clf.predict_proba(X[:50])[:, 1],
                               expit(st.transform(X[:50]) @ W.T + b).mean(1), rtol=1e-10)
    grid = np.array([-0.2, 0.0, 0.3, 5.0])  # 5.0 is beyond the boundary knot
    pd = clf.partial_dependence(X[:300], 0, grid=grid, max_rows=None)
    brute = np.stack([expit(st.transform(np.column_stack([np.full(300, g), X[:300, 1:]]))
                            @ W.T + b).mean(0) for g in grid], axis=1)
    np.testing.assert_allclose(pd.draws, brute, rtol=1e-10)
    np.testing.assert_allclose(pd.mean, brute.mean(0), rtol=1e-10)
    np.testing.assert_allclose(pd.lower, np.quantile(brute, 0.05, axis=0), rtol=1e-10)
    assert np.all(pd.lower <= pd.mean) and np.all(pd.mean <= pd.upper)
    default = clf.partial_dependence(X, 1, max_rows=500)
    assert default.grid.shape == (50,) and default.n_rows == 500


def test_plot_partial_dependence(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y, _ = make_bankruptcy_like(n_samples=6000, event_rate=0.1, random_state=2)
    clf = _quiet(BayesianSplineClassifier(n_knots=5, **FAST).fit, X, y)
    fig, ax = plt.subplots()
    out = clf.plot_partial_dependence(X, y, 0, n_bins=20, ax=ax)
    assert out is ax and len(ax.lines) == 2 and len(ax.collections) == 1
    fig.savefig(tmp_path / "pd.png")
    plt.close(fig)


# ------------------------------------------------------------ sklearn API
@parametrize_with_checks(
    [BayesianSplineClassifier(n_knots=5, n_chains=2, n_warmup=40, n_draws=40, random_state=0)],
    expected_failed_checks=lambda est: {
        "check_sample_weight_equivalence_on_dense_data": (
            "MCMC draws with integer weights and repeated rows use different random "
            "streams, as for BayesianLogisticRegression."
        ),
    },
)
def test_sklearn_compatible_estimator(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def test_clone_gridsearch_pipeline_pickle():
    X, y, _ = make_bankruptcy_like(n_samples=4000, event_rate=0.15, random_state=3)
    est = BayesianSplineClassifier(n_knots=5, difference_prior_scale=2.0, **FAST)
    c = clone(est)
    assert c.get_params() == est.get_params()
    search = GridSearchCV(est, {"n_knots": [4, 6]}, cv=2, scoring="roc_auc")
    _quiet(search.fit, X, y)
    assert search.best_params_["n_knots"] in (4, 6)
    assert search.best_estimator_.coef_.shape[1] == 8 * (search.best_params_["n_knots"] + 1)
    pipe = make_pipeline(StandardScaler(), BayesianSplineClassifier(n_knots=5, **FAST))
    _quiet(pipe.fit, X, y)
    proba = pipe.predict_proba(X[:20])
    assert proba.shape == (20, 2) and np.allclose(proba.sum(1), 1)
    clf = pipe[-1]
    again = pickle.loads(pickle.dumps(clf))
    Xs = pipe[0].transform(X[:20])
    np.testing.assert_array_equal(again.predict_proba(Xs), clf.predict_proba(Xs))
    assert clf.basis_feature_names_[0] == "x0_sp_0"
    assert len(clf.summary().to_dict()["mean"]) == 1 + 8 * 6


def test_feature_names_and_knot_fallback():
    pd_ = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    df = pd_.DataFrame({"ratio": rng.standard_normal(3000),
                        "year": rng.integers(0, 3, 3000).astype(float),  # ties -> uniform
                        "const": np.ones(3000)})
    y = (rng.random(3000) < expit(-1 + df["ratio"])).astype(int)
    clf = _quiet(BayesianSplineClassifier(n_knots=6, **FAST).fit, df, y)
    knots = np.stack([s.t for s in clf.spline_transformer_.bsplines_])
    assert np.all(np.diff(knots, axis=1) > 0)
    assert clf.basis_feature_names_[0] == "ratio_sp_0"
    pd = clf.partial_dependence(df, "ratio", grid_resolution=5)
    assert pd.feature == "ratio" and pd.mean.shape == (5,)


def test_knots_come_from_a_bounded_subsample(monkeypatch):
    X, y, _ = make_bankruptcy_like(n_samples=20_000, event_rate=0.1, random_state=4)
    seen = []
    original = np.quantile

    def recording(a, *args, **kwargs):
        seen.append(np.shape(a))
        return original(a, *args, **kwargs)

    monkeypatch.setattr(np, "quantile", recording)
    clf = BayesianSplineClassifier(n_knots=5, knot_subsample=1000, n_chains=2, n_warmup=10,
                                   n_draws=10, random_state=0)
    _quiet(clf.fit, X, y)
    assert seen[0] == (1000, 8)


@pytest.mark.parametrize("params, match", [
    ({"n_knots": 1}, "n_knots"),
    ({"n_knots": 4.0}, "n_knots"),
    ({"degree": 0}, "degree"),
    ({"knots": "random"}, "knots"),
    ({"extrapolation": "error"}, "extrapolation"),
    ({"difference_prior_scale": -1.0}, "difference_prior_scale"),
    ({"knot_subsample": 1}, "knot_subsample"),
    ({"prior_scale": 0.0}, "prior_scale"),
])
def test_bad_parameters_raise_before_sampling(params, match):
    X, y, _ = make_bankruptcy_like(n_samples=500, event_rate=0.2, random_state=0)
    with pytest.raises(ValueError, match=match):
        BayesianSplineClassifier(**params, **FAST).fit(X, y)


def test_bad_partial_dependence_arguments():
    X, y, _ = make_bankruptcy_like(n_samples=3000, event_rate=0.2, random_state=0)
    clf = _quiet(BayesianSplineClassifier(n_knots=4, **FAST).fit, X, y)
    with pytest.raises(ValueError, match="feature"):
        clf.partial_dependence(X, 8)
    with pytest.raises(ValueError, match="column name"):
        clf.partial_dependence(X, "earnings_ratio")
    with pytest.raises(ValueError, match="grid"):
        clf.partial_dependence(X, 0, grid=[np.nan])
    with pytest.raises(ValueError, match="quantiles"):
        clf.partial_dependence(X, 0, quantiles=(0.9, 0.1))
    with pytest.raises(ValueError, match="max_rows"):
        clf.partial_dependence(X, 0, max_rows=0)
    with pytest.raises(ValueError, match="features"):
        clf.partial_dependence(X[:, :3], 0)
    with pytest.raises(ValueError, match="y must have shape"):
        clf.plot_partial_dependence(X, y[:10], 0)


def test_basis_module_rejects_unsupported_extrapolation():
    st = SplineTransformer(extrapolation="periodic").fit(np.arange(20.0)[:, None])
    with pytest.raises(ValueError, match="extrapolation"):
        basis_module.BSplineBasis.from_spline_transformer(st)


def _sampler_names():
    from bayesian_subsample.samplers import SAMPLERS

    # The piecewise-deterministic samplers gather a few rows per event, and every
    # gather pays the basis-expansion overhead: minutes even here, so they run
    # only with the slow tests.
    slow = {"bps", "sbps", "psbps"}
    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name
            for name in sorted(SAMPLERS)]


@pytest.mark.parametrize("sampler", _sampler_names())
def test_every_sampler_runs_on_the_spline_model(sampler):
    X, y, _ = make_bankruptcy_like(n_samples=3000, event_rate=0.2, random_state=5)
    clf = _quiet(BayesianSplineClassifier(sampler=sampler, n_knots=4, n_chains=2, n_warmup=20,
                                          n_draws=20, random_state=0).fit, X, y)
    assert clf.coef_draws_.shape == (2, 20, 8 * 5)
    assert np.all(np.isfinite(clf.coef_draws_))
    proba = clf.predict_proba(X[:10])
    assert np.all((proba >= 0) & (proba <= 1))
