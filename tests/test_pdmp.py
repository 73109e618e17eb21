"""Piecewise-deterministic samplers: BPS, SBPS and pSBPS (Pakman et al., 2017).

Deterministic checks first (the thinning bound, the reflection, the exact
inversion of the intensities, the noise variance of eq. 10, the event list),
then statistical checks against exactly known posteriors in MCSE units with
a negative control, then the estimator wiring and the parameter validation.
"""

import math
import warnings

import numpy as np
import pytest

from bayesian_subsample import BPS, SBPS, BayesianLogisticRegression, pSBPS
from bayesian_subsample.diagnostics import ess_bulk, mcse_mean, split_rhat
from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily
from bayesian_subsample.samplers import SAMPLERS, bps, sbps
from bayesian_subsample.samplers._pdmp import laplace_time_scale

from .conftest import gaussian_posterior_moments, make_gaussian, make_logistic
from .test_samplers import _assert_matches, _chains, _logistic_quadrature


@pytest.fixture(scope="module")
def logistic_2d():
    post = make_logistic(n=5000, d=1, seed=11)
    return post, _logistic_quadrature(post, n_grid=81)


# ------------------------------------------------------------ deterministic
@pytest.mark.parametrize("weights", [False, True])
def test_curvature_bound_bounds_the_rate_along_random_rays(weights):
    post = make_logistic(n=800, d=4, seed=2, weights=weights, prior_scale=3.0)
    B, cost = post.curvature_bound_matrix()
    assert cost == post.n_obs
    target = post.full_target()
    mode, _ = post.mode()
    sd = np.sqrt(np.diag(np.linalg.inv(post.expand(mode).neg_hessian)))
    rng = np.random.default_rng(0)
    ts = np.linspace(0.0, 20.0 * sd.max(), 60)
    n_checked = 0
    for _ in range(40):
        x = mode + 5.0 * sd * rng.standard_normal(post.dim)
        v = bps.sample_velocity(rng, post.dim)
        a = -v @ target.grad(x)
        b = v @ B @ v
        for t in ts:
            G = -v @ target.grad(x + t * v)
            assert G <= a + b * t + 1e-9 * (1.0 + abs(a) + b * t)
            n_checked += 1
    assert n_checked == 2400


def test_curvature_bound_is_exact_for_the_gaussian_model():
    post = make_gaussian(n=500, d=2, seed=1)
    B, _ = post.curvature_bound_matrix()
    _, cov = gaussian_posterior_moments(post)
    np.testing.assert_allclose(B, np.linalg.inv(cov), rtol=1e-10)


def test_curvature_bound_refuses_unbounded_families():
    class Unbounded(LogisticFamily):
        curvature_bound = None

    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 2))
    y = (rng.random(50) < 0.5).astype(float)
    post = TallPosterior(GLM(X, y, Unbounded()), GaussianPrior(np.ones(3)))
    with pytest.raises(ValueError, match="curvature"):
        post.curvature_bound_matrix()
    with pytest.raises(ValueError, match="curvature"):
        BPS().prepare(rng, post)


def test_reflection_preserves_speed_flips_the_rate_and_is_an_involution():
    rng = np.random.default_rng(1)
    for _ in range(100):
        v = bps.sample_velocity(rng, 7)
        g = rng.standard_normal(7) * rng.exponential(10.0)
        vr = bps.reflect(v, g)
        assert np.linalg.norm(vr) == pytest.approx(1.0, rel=1e-12)
        assert vr @ g == pytest.approx(-(v @ g), rel=1e-9, abs=1e-12)
        np.testing.assert_allclose(bps.reflect(vr, g), v, atol=1e-12)
    v = bps.sample_velocity(rng, 3)
    np.testing.assert_array_equal(bps.reflect(v, np.zeros(3)), v)


def test_sphere_velocities_are_uniform():
    rng = np.random.default_rng(2)
    V = np.array([bps.sample_velocity(rng, 3) for _ in range(4000)])
    np.testing.assert_allclose(np.linalg.norm(V, axis=1), 1.0)
    # Uniform on S^2: mean 0, second moment I/3 (4 standard errors).
    assert np.all(np.abs(V.mean(0)) < 4 * math.sqrt(1 / 3 / 4000))
    assert np.all(np.abs((V ** 2).mean(0) - 1 / 3) < 4 * math.sqrt(4 / 45 / 4000))


def _positive_integral(f, t0, t1, n=200001):
    t = np.linspace(t0, t1, n)
    y = np.maximum(f(t), 0.0)
    return float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(t)))


@pytest.mark.parametrize("a,b", [(2.0, 3.0), (-4.0, 0.5), (0.0, 1.0), (1.5, 0.0)])
def test_linear_rate_arrival_inverts_the_integrated_rate(a, b):
    for e in (0.01, 0.7, 3.0):
        tau = bps.linear_rate_arrival(a, b, e)
        assert _positive_integral(lambda t: a + b * t, 0.0, tau) == pytest.approx(e, rel=1e-6)
    assert bps.linear_rate_arrival(-1.0, 0.0, 1.0) == math.inf


def test_piecewise_linear_arrival_inverts_exactly():
    times = np.array([1.0, 1.5, 2.0, 3.0, 5.0])
    cases = [
        (np.array([-2.0, -1.0, 0.5, 2.0, 1.0]), 0.7),   # starts negative, dips at the end
        (np.array([3.0, 1.0, -1.0, -0.5, 2.0]), 1.5),   # crosses zero twice
        (np.array([0.2, 0.2, 0.2, 0.2, 0.2]), 0.0),     # constant, tail flat
    ]
    for values, tail in cases:
        def gamma(t, values=values, tail=tail):
            t = np.atleast_1d(t)
            out = np.interp(t, times, values)
            late = t > times[-1]
            out[late] = values[-1] + tail * (t[late] - times[-1])
            return out

        for e in (0.05, 0.4, 2.5):
            t = sbps.piecewise_linear_arrival(times, values, tail, e)
            assert math.isfinite(t)
            assert _positive_integral(gamma, times[0], t) == pytest.approx(e, rel=1e-5)
            assert sbps.piecewise_linear_value(times, values, tail, t) == pytest.approx(
                float(gamma(t)[0]))
    # A band that ends negative with a falling tail integrates to a finite total.
    values = np.array([1.0, 0.0, -1.0, -1.0, -1.0])
    total = 0.5 * 1.0 * 0.5
    assert sbps.piecewise_linear_arrival(times, values, -1.0, 0.9 * total) < 1.5
    assert sbps.piecewise_linear_arrival(times, values, -1.0, 1.1 * total) == math.inf


def test_proposal_band_lies_above_the_predictive_curve():
    rng = np.random.default_rng(3)
    for _ in range(50):
        reg = sbps._empty_regression()
        for t in np.sort(rng.uniform(0, 2, rng.integers(1, 6))):
            reg = sbps._add(reg, t, rng.normal(0, 10), rng.uniform(1, 50))
        beta, cov = sbps.fit_local_regression(reg, rng.normal(0, 5), rng.uniform(1, 50))
        c2 = rng.uniform(1, 50)
        t0 = rng.uniform(0, 2)
        k = 3.0
        times, values, tail = sbps.proposal_knots(beta, cov, c2, t0, k)
        ts = np.linspace(t0, times[-1] * 3, 2000)
        var = cov[0, 0] + 2 * cov[0, 1] * ts + cov[1, 1] * ts ** 2 + c2
        f = beta[0] + beta[1] * ts + k * np.sqrt(var)
        gam = np.array([sbps.piecewise_linear_value(times, values, tail, t) for t in ts])
        assert np.all(gam >= f - 1e-9 * (1 + np.abs(f)))


def test_local_regression_recovers_a_line():
    reg = sbps._empty_regression()
    for t in np.linspace(0, 1, 11):
        reg = sbps._add(reg, t, 2.0 + 5.0 * t, 1e-6)
    beta, cov = sbps.fit_local_regression(reg, 0.0, 1e3)
    np.testing.assert_allclose(beta, [2.0, 5.0], rtol=1e-6)
    assert np.all(np.diag(cov) < 1e-5)
    # One observation: the intercept is the data, the slope is the prior.
    beta, cov = sbps.fit_local_regression(sbps._add(sbps._empty_regression(), 0.0, 4.0, 2.0),
                                          7.0, 3.0)
    np.testing.assert_allclose(beta, [4.0, 7.0])
    np.testing.assert_allclose(cov, np.diag([2.0, 9.0]))


def test_minibatch_noise_variance_has_the_finite_population_correction():
    """E[variance_along(u)] is the variance of u^T g over minibatches (eq. 10)."""
    post = make_logistic(n=300, d=2, seed=4)
    est = post.gradient_estimator(60)
    rng = np.random.default_rng(5)
    theta = post.mode()[0] + 0.1
    u = bps.sample_velocity(rng, post.dim)
    z = post.model.loglik_grad(theta, np.arange(300)) @ u
    n, m = 300, 60
    exact = n * n / m * (1 - m / n) * z.var(ddof=1)
    reps = [est.observe(theta, rng) for _ in range(4000)]
    proj = np.array([o.grad @ u for o in reps])
    var_hat = np.array([o.variance_along(u) for o in reps])
    assert abs(var_hat.mean() - exact) < 4 * var_hat.std() / math.sqrt(len(reps))
    assert proj.var(ddof=1) == pytest.approx(exact, rel=0.1)
    # m = n: the estimate is exact and its variance 0.
    full = post.gradient_estimator(300).observe(theta, rng)
    assert full.variance_along(u) == 0.0
    np.testing.assert_allclose(full.grad, post.full_target().grad(theta), rtol=1e-10)


def test_event_list_replays_the_trajectory_and_is_bounded(logistic_2d):
    post, _ = logistic_2d
    cfg = BPS(max_stored_events=50)
    prep = cfg.prepare(np.random.default_rng(0), post)
    res = cfg.run_chain(np.random.default_rng(1), post, prep, 20, 200)
    ev = res.extra["events"]
    assert len(ev["time"]) == 50 and ev["n_events"] > 50 and ev["truncated"]
    assert ev["kind"][0] == 0 and set(ev["kind"][1:]) <= {1, 2}
    # Straight lines between events.
    dt = np.diff(ev["time"])
    np.testing.assert_allclose(ev["position"][1:],
                               ev["position"][:-1] + dt[:, None] * ev["velocity"][:-1],
                               atol=1e-10)
    # Grid draws lie on the replayed path.
    h = res.extra["draw_interval"]
    for j in range(10):
        t = (j + 1) * h
        i = np.searchsorted(ev["time"], t) - 1
        x = ev["position"][i] + (t - ev["time"][i]) * ev["velocity"][i]
        np.testing.assert_allclose(res.draws[j], x, atol=1e-10)
    assert res.stats["n_obs_evaluated"].sum() == res.n_obs_evaluated_sampling
    assert res.stats["bounces"].sum() == res.extra["n_bounces"]
    assert not res.stats["diverging"].any()
    assert res.extra["n_violations"] == 0
    assert res.extra["trajectory_time"] == pytest.approx(200 * h)


# -------------------------------------------------------------- statistical
def _gaussian_features(x, mu):
    c = x - mu
    return np.concatenate([x, c ** 2, (c[..., 0] * c[..., 1])[..., None]], axis=-1)


def _assert_moments(estimate, truth, se):
    err = np.abs(estimate - truth) / se
    assert np.all(err < 4), err


def test_continuous_moments_match_a_gaussian_and_event_averages_do_not():
    """Eq. (19) on a 2-D Gaussian posterior, within 4 MCSE; per-event averages fail.

    The checked vector is (mean, second central moments).  MCSEs come from the
    equal-time grid draws of the same chains.  The negative control averages
    the positions at the events instead: bounces happen where the particle
    climbs the potential, so event positions are over-dispersed.  (Their mean
    is unbiased here only because a Gaussian is symmetric; the second moments
    are off by many MCSE.)
    """
    post = make_gaussian(n=1000, d=1, seed=3)
    mu, S = gaussian_posterior_moments(post)
    tau = laplace_time_scale(np.linalg.inv(S))
    cfg = BPS(metric="identity", refresh_rate=0.2 / tau, max_stored_events=10 ** 6)
    results = _chains(cfg, post, n_chains=4, n_warmup=100, n_draws=3000, seed=0)
    draws = np.stack([r.draws for r in results])
    se = mcse_mean(_gaussian_features(draws, mu))
    truth = np.concatenate([mu, np.diag(S), [S[0, 1]]])
    cont, event = [], []
    for r in results:
        m, C = r.extra["continuous_mean"], r.extra["continuous_cov"]
        E2 = C + np.outer(m - mu, m - mu)
        cont.append(np.concatenate([m, np.diag(E2), [E2[0, 1]]]))
        event.append(_gaussian_features(r.extra["events"]["position"], mu).mean(0))
        assert not r.extra["events"]["truncated"]
    _assert_moments(np.mean(cont, 0), truth, se)
    with pytest.raises(AssertionError):
        _assert_moments(np.mean(event, 0), truth, se)


def test_bps_matches_quadrature_posterior(logistic_2d):
    post, (mean, sd) = logistic_2d
    results = _chains(BPS(), post, n_chains=4, n_warmup=100, n_draws=1000, seed=0)
    _assert_matches(np.stack([r.draws for r in results]), mean, sd)
    cmean = np.mean([r.extra["continuous_mean"] for r in results], 0)
    draws = np.stack([r.draws for r in results])
    assert np.all(np.abs(cmean - mean) < 4 * mcse_mean(draws))
    assert all(r.extra["n_violations"] == 0 for r in results)


@pytest.mark.parametrize("config", [SBPS(subsample_size=500), pSBPS(subsample_size=500),
                                    SBPS(subsample_size=500, control_variates=True)],
                         ids=["sbps", "psbps", "sbps_cv"])
def test_sbps_within_the_issue_tolerances(logistic_2d, config):
    """Means within 0.3 posterior sd and sds within 30% of the exact posterior."""
    post, (mean, sd) = logistic_2d
    results = _chains(config, post, n_chains=2, n_warmup=100, n_draws=600, seed=0)
    draws = np.stack([r.draws for r in results])
    assert np.max(split_rhat(draws)) < 1.05
    assert np.min(ess_bulk(draws)) > 50
    cmean = np.mean([r.extra["continuous_mean"] for r in results], 0)
    csd = np.sqrt(np.mean([np.diag(r.extra["continuous_cov"]) for r in results], 0))
    assert np.all(np.abs(cmean - mean) < 0.3 * sd)
    assert np.all(np.abs(csd / sd - 1) < 0.3)
    for r in results:
        # With control variates the noise variance is tiny and the local
        # linear fit is the main error: violations were about 17% of
        # proposals here before the misfit floor (sbps notes, "Small data"),
        # none after; the bound stays loose enough for either.
        assert 0 <= r.extra["violation_fraction"] < (0.3 if config.control_variates else 0.05)
        assert np.isfinite(r.extra["violation_rate"])
        assert r.stats["n_obs_evaluated"].sum() == r.n_obs_evaluated_sampling
        assert r.subsample_size == 500
    if config.preconditioned:
        a = results[0].extra["preconditioner"]
        assert a.mean() == pytest.approx(1.0) and np.all(a > 0)


@pytest.mark.slow
@pytest.mark.parametrize("config", [SBPS(), pSBPS()], ids=["sbps", "psbps"])
def test_sbps_default_minibatch_long_run(logistic_2d, config):
    post, (mean, sd) = logistic_2d
    results = _chains(config, post, n_chains=4, n_warmup=200, n_draws=2000, seed=1)
    draws = np.stack([r.draws for r in results])
    assert np.max(split_rhat(draws)) < 1.02
    cmean = np.mean([r.extra["continuous_mean"] for r in results], 0)
    csd = np.sqrt(np.mean([np.diag(r.extra["continuous_cov"]) for r in results], 0))
    assert np.all(np.abs(cmean - mean) < 0.3 * sd)
    assert np.all(np.abs(csd / sd - 1) < 0.1)


def test_psbps_preconditioner_scales_down_a_wide_feature():
    """On the §7.1 design (one feature with variance 6) A shrinks that coordinate."""
    rng = np.random.default_rng(0)
    n, d = 1000, 5
    scale = np.ones(d)
    scale[0] = math.sqrt(6.0)
    X = rng.standard_normal((n, d)) * scale
    w = rng.uniform(-1, 1, d)
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ w))).astype(float)
    post = TallPosterior(GLM(X, y, LogisticFamily(), fit_intercept=False),
                         GaussianPrior(np.full(d, 10.0)))
    cfg = pSBPS(subsample_size=100)
    prep = cfg.prepare(np.random.default_rng(1), post)
    res = cfg.run_chain(np.random.default_rng(2), post, prep, 50, 20)
    a = res.extra["preconditioner"]
    assert a[0] < 0.8 * a[1:].min()
    assert res.extra["n_preconditioner_updates"] > 1
    # Frozen after warm-up: the reported inverse metric is A^2.
    np.testing.assert_allclose(res.inverse_mass_matrix, a ** 2)


# ----------------------------------------------------------------- wiring
def test_names_are_registered():
    assert isinstance(SAMPLERS["bps"](), BPS)
    assert isinstance(SAMPLERS["sbps"](), SBPS) and not SAMPLERS["sbps"]().preconditioned
    assert SAMPLERS["psbps"]().preconditioned


@pytest.mark.parametrize("name", ["sbps", "psbps", "bps"])
def test_estimator_fits_and_predicts(name):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1500, 2))
    y = (rng.random(1500) < 1 / (1 + np.exp(-(X @ [1.0, -0.5])))).astype(int)
    clf = BayesianLogisticRegression(sampler=name, n_chains=2, n_warmup=50, n_draws=100,
                                     random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
    proba = clf.predict_proba(X[:5])
    assert proba.shape == (5, 2) and np.allclose(proba.sum(1), 1)
    assert clf.coef_draws_.shape == (2, 100, 2)
    info = clf.sampler_info_[0]
    assert info["continuous_mean"].shape == (3,) and info["continuous_cov"].shape == (3, 3)
    assert {"bounces", "violations", "acceptance_rate"} <= set(clf.sample_stats_)
    assert not clf.sample_stats_["diverging"].any()
    assert clf.n_evaluations_ > 0
    np.testing.assert_allclose(np.mean([i["continuous_mean"] for i in clf.sampler_info_], 0),
                               np.r_[clf.intercept_, clf.coef_.ravel()], atol=0.2)


@pytest.mark.parametrize("params,match", [
    ({"confidence": -1.0}, "confidence"),
    ({"confidence": "3"}, "confidence"),
    ({"subsample_size": 10 ** 6}, "subsample_size"),
    ({"subsample_size": 0}, "subsample_size"),
    ({"refresh_rate": -0.5}, "refresh_rate"),
    ({"draw_interval": 0.0}, "draw_interval"),
    ({"preconditioned": "yes"}, "preconditioned"),
    ({"control_variates": 1}, "control_variates"),
    ({"slope_prior_sd": -2.0}, "slope_prior_sd"),
    ({"max_stored_events": -1}, "max_stored_events"),
    ({"metric": "dense"}, "metric"),
    ({"metric": "laplace", "preconditioned": True}, "preconditioned"),
])
def test_bad_parameters_raise(params, match):
    post = make_logistic(n=500, d=2)
    with pytest.raises(ValueError, match=match):
        SBPS(**params).prepare(np.random.default_rng(0), post)


def test_bps_bad_parameters_raise():
    post = make_logistic(n=500, d=2)
    with pytest.raises(ValueError, match="metric"):
        BPS(metric="diagonal").prepare(np.random.default_rng(0), post)
    with pytest.raises(ValueError, match="refresh_rate"):
        BPS(refresh_rate=float("nan")).prepare(np.random.default_rng(0), post)
    with pytest.raises(ValueError, match="reference_fraction"):
        BPS(reference_fraction=2.0).prepare(np.random.default_rng(0), post)
    X = np.random.default_rng(0).standard_normal((50, 2))
    with pytest.raises(ValueError, match="subsample_size"):
        BayesianLogisticRegression(sampler="sbps", subsample_size=100).fit(
            X, (X[:, 0] > 0).astype(int))


def test_identity_metric_bps_matches_quadrature_means(logistic_2d):
    """Algorithm 1 without the Laplace preconditioner is exact too (shorter run)."""
    post, (mean, sd) = logistic_2d
    results = _chains(BPS(metric="identity"), post, n_chains=2, n_warmup=50, n_draws=500,
                      seed=3)
    draws = np.stack([r.draws for r in results])
    cmean = np.mean([r.extra["continuous_mean"] for r in results], 0)
    assert np.all(np.abs(cmean - mean) < 4 * mcse_mean(draws))


def test_laplace_metric_sbps_runs_in_whitened_coordinates(logistic_2d):
    post, (mean, sd) = logistic_2d
    cfg = SBPS(subsample_size=500, metric="laplace")
    prep = cfg.prepare(np.random.default_rng(0), post)
    res = cfg.run_chain(np.random.default_rng(1), post, prep, 50, 200)
    # The reported inverse metric is the Laplace covariance A A^T = H^{-1}.
    np.testing.assert_allclose(res.inverse_mass_matrix,
                               np.linalg.inv(prep.expansion.neg_hessian), rtol=1e-8)
    assert res.extra["time_scale"] == pytest.approx(1.0)
    assert np.all(np.abs(res.extra["continuous_mean"] - mean) < 1.0 * sd)


def test_sbps_with_control_variates_runs(logistic_2d):
    post, (mean, sd) = logistic_2d
    cfg = SBPS(subsample_size=200, control_variates=True)
    prep = cfg.prepare(np.random.default_rng(0), post)
    res = cfg.run_chain(np.random.default_rng(1), post, prep, 50, 200)
    assert np.all(np.isfinite(res.extra["continuous_mean"]))
    # Two evaluations per minibatch row with control variates.
    assert res.n_obs_evaluated_sampling % 400 == 0


def test_sbps_never_moves_onto_a_point_without_a_finite_gradient():
    """A region where the estimate is NaN (e.g. overflow) is never entered:
    the particle stays put, takes a fresh velocity and the step is counted as
    divergent; it keeps moving afterwards instead of being trapped."""
    from bayesian_subsample.samplers import sbps as sbps_kernel

    class Obs:
        def __init__(self, grad):
            self.grad = grad

        def variance_along(self, direction):
            return 0.01

    class NoisyGaussianWithAHole:
        n_obs_per_eval = 10

        def observe(self, position, rng):
            if position[0] > 1.5:
                return Obs(np.full(2, np.nan))
            return Obs(-position + 0.1 * rng.standard_normal(2))

    rng = np.random.default_rng(0)
    params = sbps_kernel.SBPSParams(3.0, 0.5, 1.0, 1.0, np.ones(2))
    state = sbps_kernel.init(np.zeros(2), np.array([1.0, 0.0]))
    divergent, travelled, positions = 0, 0.0, []
    for _ in range(3000):
        state, info = sbps_kernel.step(rng, state, NoisyGaussianWithAHole(), params)
        divergent += info.is_divergent
        travelled += info.duration
        positions.append(state.position[0])
    assert divergent > 0
    assert max(positions) <= 1.5
    assert travelled > 100.0


def test_sbps_at_half_the_bounce_rate_fails_the_same_check(logistic_2d, monkeypatch):
    """Negative control for the tolerance test: accepting each proposed bounce
    with half the right probability makes the bounce rate
    max(0, <v, grad U>) / 2 = max(0, <v, grad (U / 2)>), the rate of the
    tempered target exp(-U / 2), whose sds are sqrt(2) = 1.41 times the
    posterior's: outside the 30% sd tolerance by a margin set by theory, not
    by a seed (measured 1.35-1.44 on seeds 0-2).

    (An earlier control reflected at every proposed time; once theta* became
    the full-data mode shared by all chains, its bias fell to 0.1-0.6 sd and
    it no longer failed the check reliably, so it was replaced.)
    """
    from bayesian_subsample.samplers import sbps as sbps_kernel

    post, (mean, sd) = logistic_2d
    value = sbps_kernel.piecewise_linear_value
    monkeypatch.setattr(sbps_kernel, "piecewise_linear_value", lambda *args: 2.0 * value(*args))
    results = _chains(SBPS(subsample_size=500), post, n_chains=2, n_warmup=100, n_draws=600,
                      seed=0)
    cmean = np.mean([r.extra["continuous_mean"] for r in results], 0)
    csd = np.sqrt(np.mean([np.diag(r.extra["continuous_cov"]) for r in results], 0))
    assert not (np.all(np.abs(cmean - mean) < 0.3 * sd) and np.all(np.abs(csd / sd - 1) < 0.3))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 11))
def test_sbps_within_the_issue_tolerances_on_more_seeds(logistic_2d, seed):
    """The tolerance test above on seeds 3-10 (it was only ever checked on 0-2);
    its negative control is test_sbps_accepting_every_proposal_fails_the_same_check."""
    post, (mean, sd) = logistic_2d
    results = _chains(SBPS(subsample_size=500), post, n_chains=2, n_warmup=100, n_draws=600,
                      seed=seed)
    draws = np.stack([r.draws for r in results])
    assert np.max(split_rhat(draws)) < 1.05
    cmean = np.mean([r.extra["continuous_mean"] for r in results], 0)
    csd = np.sqrt(np.mean([np.diag(r.extra["continuous_cov"]) for r in results], 0))
    assert np.all(np.abs(cmean - mean) < 0.3 * sd)
    assert np.all(np.abs(csd / sd - 1) < 0.3)


#: scikit-learn's check_classifier_data_not_an_array data: 12 rows, almost
#: separable, a proper posterior (Gaussian prior) far from Gaussian.
_TWELVE_X = np.array([[3, 0], [0, 1], [0, 2], [1, 1], [1, 2], [2, 1], [0, 3], [1, 0], [2, 0],
                      [4, 4], [2, 3], [3, 2]], dtype=float)
_TWELVE_Y = np.array([1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2])


def _twelve_row_moments(sampler, n_draws, seed):
    est = BayesianLogisticRegression(sampler=sampler, n_chains=4, n_warmup=100,
                                     n_draws=n_draws, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(_TWELVE_X, _TWELVE_Y)
    if sampler == "hmc":
        d = np.concatenate([est.intercept_draws_[..., None], est.coef_draws_.reshape(
            4, n_draws, -1)], -1).reshape(-1, 3)
        return d.mean(0), d.std(0)
    info = est.sampler_info_
    return (np.mean([e["continuous_mean"] for e in info], 0),
            np.sqrt(np.mean([np.diag(e["continuous_cov"]) for e in info], 0)))


def _assert_twelve_row_posterior(sampler, ref_mean, ref_sd, seed):
    mean, sd = _twelve_row_moments(sampler, 300, seed)
    assert np.all(np.abs(mean - ref_mean) < 0.3 * ref_sd)
    assert np.all(np.abs(sd / ref_sd - 1) < 0.3)


@pytest.mark.parametrize("sampler", ["sbps", "psbps"])
def test_sbps_defaults_on_tiny_data_match_hmc(sampler, monkeypatch):
    """Issue 16: on 12 rows the default minibatch is all the data, so the
    observed rates carry no noise and the local regression interpolated them:
    its linear extrapolation missed the curvature change along the ray, the
    particle under-bounced and left through the escape check (4 of 4 seeds,
    both samplers).  The misfit floor on the noise sd and the one-sd horizon
    (sbps module notes, "Small data") fix it: measured on seeds 0-3, means
    within 0.07 sd and sds within 13% of a long HMC run; tolerances as for the
    other SBPS tests (0.3 sd, 30%).  Negative control: with both rules
    switched off the same fit stops with the escape error or misses."""
    ref_mean, ref_sd = _twelve_row_moments("hmc", 2000, 0)
    _assert_twelve_row_posterior(sampler, ref_mean, ref_sd, seed=1)
    monkeypatch.setattr(sbps, "MISFIT_FRACTION", 0.0)
    original = sbps._knots
    monkeypatch.setattr(sbps, "_knots", lambda *args: original(*args[:8], math.inf))
    with pytest.raises((AssertionError, ValueError)) as failure:
        _assert_twelve_row_posterior(sampler, ref_mean, ref_sd, seed=1)
    if failure.type is ValueError:
        assert "Laplace posterior sd away" in str(failure.value)
