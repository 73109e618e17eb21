"""The families own their prediction (issue 10): predictive maths against scipy.stats,
mixture quantiles against brute-force CDF inversion, and the estimators' predictions
unchanged by the move (against outputs recorded by the code before it)."""

import numpy as np
import pytest
import scipy
from scipy import optimize, special, stats

from bayesian_subsample import (
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianPoissonRegressor,
)
from bayesian_subsample.estimators import _engine
from bayesian_subsample.estimators._base import resolve_sampler
from bayesian_subsample.models import (
    GaussianFamily,
    LinearRegressionFamily,
    LogisticFamily,
    PoissonFamily,
    PredictiveFamily,
)
from bayesian_subsample.samplers import HMCECS, SBPS, SGHMC, SGLD
from tests import predictive_reference

RECORDED, VERSIONS = predictive_reference.load()
SAME_LIBRARIES = VERSIONS == {"numpy": np.__version__, "scipy": scipy.__version__}


@pytest.fixture(scope="module")
def current():
    return predictive_reference.compute()


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_predictions_match_the_outputs_recorded_before_the_move(current, key):
    if SAME_LIBRARIES:
        assert np.array_equal(current[key], RECORDED[key]), key
    else:
        np.testing.assert_allclose(current[key], RECORDED[key], rtol=1e-9, atol=1e-12,
                                   err_msg=key)


# --------------------------------------------------------------- one front door
FRONT_DOOR_SUBSAMPLING = ("hmc_ecs", "hmc_ecs_signed", "sgld", "sghmc", "sbps", "psbps")


@pytest.mark.parametrize("name", FRONT_DOOR_SUBSAMPLING)
def test_estimator_subsample_size_sets_a_named_samplers_own(name):
    config = resolve_sampler(name, 300)
    assert config.get_params()["subsample_size"] == 300


@pytest.mark.parametrize("sampler", [HMCECS(subsample_size=2000), SGLD(subsample_size=50),
                                     SGHMC(subsample_size=64), SBPS(subsample_size=10)])
def test_subsample_size_set_on_estimator_and_sampler_is_an_error_naming_both(sampler):
    own = sampler.get_params()["subsample_size"]
    cls = type(sampler).__name__
    with pytest.raises(ValueError, match="set in two places") as err:
        resolve_sampler(sampler, 300)
    assert "subsample_size=300 on the estimator" in str(err.value)
    assert f"{cls}(subsample_size={own!r}) in sampler=" in str(err.value)


def test_a_sampler_object_at_its_default_subsample_size_takes_the_estimators():
    config = resolve_sampler(HMCECS(estimator="signed", n_blocks=50), 300)
    assert config.subsample_size == 300 and config.n_blocks == 50
    assert resolve_sampler(HMCECS(subsample_size=2000)).subsample_size == 2000


@pytest.mark.parametrize("name, knob", [("austerity_mh", "AusterityMH(batch_size=300)")])
def test_a_sampler_with_another_rows_knob_names_it(name, knob):
    with pytest.raises(ValueError, match="has no subsample_size") as err:
        resolve_sampler(name, 300)
    assert knob in str(err.value)
    assert "uses all the data" not in str(err.value)


@pytest.mark.parametrize("name", ["hmc", "rwmh", "bps"])
def test_a_full_data_sampler_says_it_uses_all_the_data(name):
    with pytest.raises(ValueError, match="uses all the data") as err:
        resolve_sampler(name, 300)
    for other in FRONT_DOOR_SUBSAMPLING + ("austerity_mh",):
        assert repr(other) in str(err.value)


def test_grid_search_over_the_samplers_subsample_size_is_not_silently_ignored(monkeypatch):
    """The bug of issue 10: the estimator's subsample_size used to win silently."""
    def _must_not_run(*args, **kwargs):
        raise AssertionError("sampling started before validation")

    monkeypatch.setattr(_engine, "run_chains", _must_not_run)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 2))
    y = (X[:, 0] + rng.standard_normal(500) > 0).astype(int)
    clf = BayesianLogisticRegression(sampler=HMCECS(subsample_size=200), subsample_size=100)
    with pytest.raises(ValueError, match="set in two places"):
        clf.fit(X, y)
    reg = BayesianPoissonRegressor(subsample_size=100).set_params(sampler__subsample_size=200)
    with pytest.raises(ValueError, match="set in two places"):
        reg.fit(X, rng.poisson(1.0, 500))
    reg = BayesianLinearRegression(sampler="austerity_mh", subsample_size=100)
    with pytest.raises(ValueError, match=r"AusterityMH\(batch_size=100\)"):
        reg.fit(X, rng.standard_normal(500))


# ------------------------------------------------- each family against scipy.stats
N_ROWS, N_DRAWS = 6, 9


@pytest.fixture
def eta():
    return np.random.default_rng(1).normal(0.3, 0.8, size=(N_ROWS, N_DRAWS))


def _weights(kind, n=N_DRAWS, seed=2):
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return np.full(n, 1.0 / n)
    if kind == "dirichlet":
        return rng.dirichlet(np.ones(n))
    s = np.ones(n)  # signed HMC-ECS: s_j / sum s with a few negative signs
    s[[1, 4]] = -1.0
    return s / s.sum()


def _mixture_moments_by_scipy(dists, weights):
    mean = dists.mean() @ weights
    return mean, (dists.var() + dists.mean() ** 2) @ weights - mean**2


def _families():
    """(family, extra kwargs, frozen scipy distribution of y given eta)."""
    exposure = np.linspace(0.5, 2.0, N_ROWS)
    sigma = np.linspace(0.4, 1.6, N_DRAWS)
    return {
        "poisson": (PoissonFamily(), {"exposure": exposure},
                    lambda eta: stats.poisson(exposure[:, None] * np.exp(eta))),
        "poisson_unit": (PoissonFamily(), {}, lambda eta: stats.poisson(np.exp(eta))),
        "gaussian": (GaussianFamily(0.7), {}, lambda eta: stats.norm(eta, 0.7)),
        "gaussian_per_draw": (GaussianFamily(0.7), {"noise_scale": sigma},
                              lambda eta: stats.norm(eta, sigma)),
        "linear": (LinearRegressionFamily(), {"noise_scale": sigma},
                   lambda eta: stats.norm(eta, sigma)),
        "logistic": (LogisticFamily(), {}, lambda eta: stats.bernoulli(special.expit(eta))),
    }


FAMILIES = sorted(_families())


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_implements_the_predictive_protocol(name):
    family = _families()[name][0]
    assert isinstance(family, PredictiveFamily)


def test_the_protocol_check_rejects_a_family_without_prediction():
    """Negative control: the log-likelihood alone is not a PredictiveFamily."""
    class LoglikOnly:
        name = "loglik_only"

        def loglik(self, y, eta, order=0):
            return (np.zeros_like(eta),)

    assert not isinstance(LoglikOnly(), PredictiveFamily)


@pytest.mark.parametrize("name", FAMILIES)
def test_conditional_mean_and_variance_match_scipy(name, eta):
    family, kw, dist = _families()[name]
    d = dist(eta)
    np.testing.assert_allclose(family.predictive_mean(eta, **kw), d.mean(), rtol=1e-13)
    np.testing.assert_allclose(family.predictive_variance(eta, **kw),
                               np.broadcast_to(d.var(), eta.shape), rtol=1e-13)
    unit = {"poisson": np.exp, "poisson_unit": np.exp, "logistic": special.expit}.get(
        name, lambda e: e)
    np.testing.assert_allclose(family.inverse_link(eta), unit(eta), rtol=1e-14)


@pytest.mark.parametrize("weighting", ["uniform", "dirichlet", "signed"])
@pytest.mark.parametrize("name", FAMILIES)
def test_mixture_mean_and_variance_match_the_law_of_total_variance(name, weighting, eta):
    family, kw, dist = _families()[name]
    w = _weights(weighting)
    mean, var = _mixture_moments_by_scipy(dist(eta), w)
    np.testing.assert_allclose(family.predictive_mean(eta, w, **kw), mean, rtol=1e-12)
    if name == "logistic":  # the mixture of Bernoullis is Bernoulli(mean)
        np.testing.assert_allclose(family.predictive_variance(eta, w, **kw),
                                   mean * (1 - mean), rtol=1e-12)
    else:  # signed weights can make the formula negative: a variance is clipped at 0
        np.testing.assert_allclose(family.predictive_variance(eta, w, **kw),
                                   np.maximum(var, 0.0), rtol=1e-11)


@pytest.mark.parametrize("name", FAMILIES)
def test_log_prob_matches_scipy(name, eta):
    family, kw, dist = _families()[name]
    d = dist(eta)
    rng = np.random.default_rng(3)
    y = d.rvs(random_state=rng)[:, 0]  # one response per row
    expected = (d.logpmf if hasattr(d, "logpmf") else d.logpdf)(y[:, None])
    np.testing.assert_allclose(family.log_prob(y, eta, **kw), expected, rtol=1e-12)


@pytest.mark.parametrize("name", FAMILIES)
def test_samples_follow_the_conditional_distribution(name):
    """Mean and variance of 40,000 draws per cell within 4.5 standard errors."""
    family, kw, dist = _families()[name]
    eta = np.repeat(np.linspace(-1.0, 1.5, N_ROWS)[:, None], N_DRAWS, axis=1)
    d = dist(eta)
    n = 40_000 // N_DRAWS + 1
    draws = np.stack([family.sample(np.random.default_rng(seed), eta, **kw)
                      for seed in range(n)])
    mu, var = np.broadcast_to(d.mean(), eta.shape), np.broadcast_to(d.var(), eta.shape)
    # Pool the identical columns of each row (same eta, and for the per-draw
    # scale the scale of each column), then compare each cell mean.
    se_mean = np.sqrt(var / n)
    assert np.all(np.abs(draws.mean(axis=0) - mu) < 4.5 * se_mean)
    m4 = (d.moment(4) - 4 * d.mean() * d.moment(3) + 6 * d.mean() ** 2 * d.moment(2)
          - 3 * d.mean() ** 4)
    # Delta-method sd of the sample variance, plus its second-order term
    # (Bernoulli(1/2): m4 = var^2 and the deviation is -(mean - 1/2)^2 ~ var / n).
    se_var = np.sqrt(np.maximum(np.broadcast_to(m4, eta.shape) - var**2, 0.0) / n)
    assert np.all(np.abs(draws.var(axis=0) - var) < 4.5 * se_var + 20 * var / n)


def test_sampling_a_shifted_family_fails_the_same_check():
    """Negative control: samples from exp(eta + 0.05) fail the 4.5-SE mean check."""
    family = PoissonFamily()
    eta = np.full((1, 5000), 1.0)
    draws = family.sample(np.random.default_rng(0), eta + 0.05)
    assert abs(draws.mean() - np.exp(1.0)) > 4.5 * np.sqrt(np.exp(1.0) / draws.size)


# ----------------------------------------------- mixture quantiles by brute force
def _discrete_quantile_brute_force(p, cdf_at_k):
    """Smallest k in 0, 1, 2, ... with cdf_at_k(k) >= p (per row)."""
    out = np.full(cdf_at_k(0).shape, np.nan)
    k = 0
    while np.isnan(out).any():
        F = cdf_at_k(k)
        out[np.isnan(out) & (F >= p)] = k
        k += 1
    return out


@pytest.mark.parametrize("weighting", ["uniform", "dirichlet", "signed"])
@pytest.mark.parametrize("name", ["poisson", "poisson_unit", "logistic"])
def test_discrete_mixture_quantiles_match_brute_force_cdf_inversion(name, weighting, eta):
    family, kw, dist = _families()[name]
    w = _weights(weighting)
    d = dist(1.2 * eta)
    probs = (0.005, 0.05, 0.3, 0.5, 0.77, 0.95, 0.999)
    got = family.predictive_quantile(probs, 1.2 * eta, w, **kw)
    assert got.shape == (len(probs), N_ROWS)
    for p, q in zip(probs, got):
        expected = _discrete_quantile_brute_force(p, lambda k: d.cdf(k) @ w)
        np.testing.assert_array_equal(q, expected)


@pytest.mark.parametrize("name", ["poisson_unit", "logistic"])
def test_a_one_draw_mixture_quantile_is_scipys_ppf(name, eta):
    family, kw, dist = _families()[name]
    for p in (0.01, 0.2, 0.5, 0.9, 0.99):
        got = family.predictive_quantile(p, eta[:, :1], np.ones(1), **kw)
        assert got.shape == (N_ROWS,)
        np.testing.assert_array_equal(got, dist(eta[:, 0]).ppf(p))


@pytest.mark.parametrize("weighting", ["uniform", "dirichlet", "signed"])
@pytest.mark.parametrize("name", ["gaussian", "gaussian_per_draw", "linear"])
def test_gaussian_mixture_quantiles_match_brute_force_cdf_inversion(name, weighting, eta):
    family, kw, dist = _families()[name]
    w = _weights(weighting)
    d = dist(eta)
    probs = (0.001, 0.05, 0.5, 0.8, 0.975)
    got = family.predictive_quantile(probs, eta, w, **kw)
    for p, q in zip(probs, got):
        for r in range(N_ROWS):
            def cdf(x, r=r):
                return np.broadcast_to(d.cdf(np.full(eta.shape, x)), eta.shape)[r] @ w
            expected = optimize.brentq(lambda x: cdf(x) - p, -50, 50, xtol=1e-13, rtol=1e-14)
            # The solver stops at |F(q) - p| < 1e-10: an error of 1e-10 / density in q.
            density = np.broadcast_to(d.pdf(np.full(eta.shape, expected)), eta.shape)[r] @ w
            assert abs(cdf(q[r]) - p) < 2e-10
            assert q[r] == pytest.approx(expected, abs=2e-10 / density + 1e-12)


def test_a_one_draw_gaussian_quantile_is_norm_ppf(eta):
    got = LinearRegressionFamily().predictive_quantile(
        [0.1, 0.9], eta[:, :1], np.ones(1), noise_scale=np.array([1.3]))
    np.testing.assert_allclose(got, stats.norm(eta[:, 0], 1.3).ppf([[0.1], [0.9]]),
                               rtol=1e-9, atol=1e-9)


def test_an_overflowing_poisson_rate_gives_an_infinite_quantile_and_refuses_to_sample():
    family = PoissonFamily()
    eta = np.array([[0.0, 0.1], [800.0, 0.0], [800.0, 800.0]])
    q = family.predictive_quantile(0.7, eta, np.array([0.5, 0.5]))
    assert np.isfinite(q[0]) and q[1] == np.inf and q[2] == np.inf
    with pytest.raises(ValueError, match="above 1e15"):
        family.sample(np.random.default_rng(0), eta)


def test_the_linear_family_needs_the_noise_scale_of_each_draw(eta):
    with pytest.raises(ValueError, match="noise_scale"):
        LinearRegressionFamily().predictive_variance(eta)
    # The known-scale Gaussian family uses its own.
    np.testing.assert_array_equal(GaussianFamily(2.0).predictive_variance(eta),
                                  np.full(eta.shape, 4.0))


def test_logistic_log_prob_is_stable_at_extreme_linear_predictors():
    eta = np.array([[-800.0, 800.0, 0.0]])
    lp1 = LogisticFamily().log_prob(np.array([1.0]), eta)
    lp0 = LogisticFamily().log_prob(np.array([0.0]), eta)
    np.testing.assert_allclose(lp1, [[-800.0, 0.0, np.log(0.5)]])
    np.testing.assert_allclose(lp0, [[0.0, -800.0, np.log(0.5)]])


# ------------------------------------------ the regressors against the formulas
def test_regressor_predictions_are_the_family_formulas_on_the_stored_draws():
    rng, X, X_new, _ = predictive_reference._data()
    y = rng.poisson(1.5, X.shape[0]).astype(float)
    reg = predictive_reference._with_draws(
        predictive_reference._fit(BayesianPoissonRegressor(**predictive_reference._FIT), X, y),
        rng, signed=False)
    e = np.linspace(0.5, 3.0, X_new.shape[0])
    mu = e[:, None] * np.exp(X_new @ reg.coef_draws_.reshape(-1, 3).T
                             + reg.intercept_draws_.reshape(-1))
    mean, sd = reg.predict(X_new, return_std=True, exposure=e)
    np.testing.assert_allclose(mean, mu.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(sd**2, mu.mean(axis=1) + mu.var(axis=1), rtol=1e-10)
    lower, upper = reg.predict_interval(X_new, alpha=0.2, exposure=e)
    w = np.full(mu.shape[1], 1.0 / mu.shape[1])
    for p, q in ((0.1, lower), (0.9, upper)):
        np.testing.assert_array_equal(
            q, _discrete_quantile_brute_force(p, lambda k: stats.poisson(mu).cdf(k) @ w))


def test_the_exact_comparison_detects_a_change_in_the_last_bits(current):
    """Negative control of the recorded-outputs check: the same mixture mean summed
    in another order is not bit-identical."""
    if not SAME_LIBRARIES:
        pytest.skip("exact comparison only with the libraries that wrote the file")
    rng, X, X_new, _ = predictive_reference._data()
    orig = PoissonFamily.predictive_mean

    def reordered(self, eta, weights=None, exposure=None):
        rate = self._rate(eta, exposure)
        return rate if weights is None else (rate * weights)[:, ::-1].sum(axis=1)

    PoissonFamily.predictive_mean = reordered
    try:
        changed = predictive_reference.compute()
    finally:
        PoissonFamily.predictive_mean = orig
    assert not np.array_equal(changed["plain/pois/mean"], RECORDED["plain/pois/mean"])
    np.testing.assert_allclose(changed["plain/pois/mean"], RECORDED["plain/pois/mean"],
                               rtol=1e-12)
