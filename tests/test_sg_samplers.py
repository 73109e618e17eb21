"""SGLD, SG-HMC and the minibatch gradient estimators they use.

Every statistical assertion comes with a negative control that must fail it:
an estimator that drops a population term, SG-HMC without friction
(Chen et al., 2014, Fig. 1) and plain SGLD with a large step.
"""

import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.diagnostics import ess_bulk, mcse_mean, split_rhat
from bayesian_subsample.likelihood import ControlVariateGradient, sample_without_replacement
from bayesian_subsample.samplers import SAMPLERS, SGHMC, SGLD, sghmc, sgld
from bayesian_subsample.samplers._sg import sghmc_variance_inflation, sgld_variance_inflation
from bayesian_subsample.samplers.metric import Metric

from .conftest import make_gaussian, make_logistic
from .test_samplers import _logistic_quadrature

# ------------------------------------------------------------------ indices


def test_sample_without_replacement_is_distinct_uniform_and_o_m():
    rng = np.random.default_rng(0)
    # Huge n: an O(n) allocation would fail or take seconds.
    idx = sample_without_replacement(rng, 10**15, 1000)
    assert len(np.unique(idx)) == 1000 and idx.min() >= 0 and idx.max() < 10**15
    # Inclusion frequencies and the first position are uniform (chi-square).
    n, m, reps = 20, 4, 20000
    incl, first = np.zeros(n), np.zeros(n)
    for _ in range(reps):
        s = sample_without_replacement(rng, n, m)
        assert len(np.unique(s)) == m
        incl[s] += 1
        first[s[0]] += 1
    for counts, total in ((incl, reps * m), (first, reps)):
        assert stats.chisquare(counts, np.full(n, total / n)).pvalue > 1e-4
    assert sorted(sample_without_replacement(rng, 7, 7)) == list(range(7))
    with pytest.raises(ValueError):
        sample_without_replacement(rng, 5, 6)


# ------------------------------------------------------- gradient estimators


@pytest.fixture(scope="module")
def logistic_cv():
    post = make_logistic(n=10000, d=3, seed=3)
    theta_star, _ = post.mode()
    ex = post.expand(theta_star)
    cov = np.linalg.inv(ex.neg_hessian)
    return post, ex, cov


class _CVWithoutBDelta(ControlVariateGradient):
    """Negative control: order-2 residuals but the order-1 population term (no B Delta)."""

    def _population_term(self, position):
        return self.expansion.grad


def _replicate(est, theta, n_rep, seed):
    rng = np.random.default_rng(seed)
    return np.array([est.grad(theta, rng) for _ in range(n_rep)])


def _within_4se(draws, truth):
    se = draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    return np.all(np.abs(draws.mean(axis=0) - truth) <= 4 * se)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_gradient_estimators_are_unbiased(logistic_cv, order):
    post, ex, cov = logistic_cv
    # A point about 1.5 posterior sd from theta*, where the terms do not vanish.
    theta = ex.theta_star + 1.5 * np.sqrt(np.diag(cov))
    truth = post.full_target().logdensity_and_grad(theta)[1]
    est = post.gradient_estimator(200, None if order == 0 else ex._replace(order=order))
    assert est.n_obs_per_eval == (200 if order == 0 else 400)
    G = _replicate(est, theta, 3000, seed=order)
    assert _within_4se(G, truth)
    # The estimator's own covariance formula (sampling without replacement)
    # agrees with the replications.
    V, cost = est.covariance(theta, np.random.default_rng(9), n_pilot=10000)
    assert cost == (10000 if order == 0 else 20000)
    ratio = np.diag(V) / G.var(axis=0, ddof=1)
    assert np.all(np.abs(ratio - 1) < 0.15), ratio


def test_dropping_a_population_term_fails_the_unbiasedness_check(logistic_cv):
    post, ex, cov = logistic_cv
    theta = ex.theta_star + 1.5 * np.sqrt(np.diag(cov))
    truth = post.full_target().logdensity_and_grad(theta)[1]
    bad = _CVWithoutBDelta(post.model, post.prior, ex, 200)
    assert not _within_4se(_replicate(bad, theta, 3000, seed=5), truth)


def test_order2_control_variates_have_far_smaller_variance_near_theta_star(logistic_cv):
    post, ex, cov = logistic_cv
    theta = ex.theta_star + 0.5 * np.sqrt(np.diag(cov))
    rng = np.random.default_rng(1)
    v_plain = np.trace(post.gradient_estimator(200).covariance(theta, rng, 10000)[0])
    v_cv1 = np.trace(post.gradient_estimator(200, ex._replace(order=1))
                     .covariance(theta, rng, 10000)[0])
    v_cv2 = np.trace(post.gradient_estimator(200, ex).covariance(theta, rng, 10000)[0])
    assert v_cv2 < 1e-3 * v_plain
    assert v_cv2 < v_cv1 < v_plain


def test_order2_control_variates_are_exact_for_the_gaussian_model():
    post = make_gaussian(n=3000, d=3)
    ex = post.expand(np.zeros(post.dim))
    theta = np.array([0.3, -0.2, 0.5, 1.0])
    truth = post.full_target().logdensity_and_grad(theta)[1]
    est = post.gradient_estimator(50, ex)
    rng = np.random.default_rng(0)
    for _ in range(5):
        np.testing.assert_allclose(est.grad(theta, rng), truth, rtol=1e-9, atol=1e-8)


# ------------------------------------------------------------------ kernels


class _Spy:
    """A quadratic target ``log pi = -|theta|^2/2`` recording where it is asked."""

    n_obs_per_eval = 7
    subsample_size = 7

    def __init__(self, noise=0.0):
        self.noise = noise
        self.calls = []

    def grad(self, position, rng):
        self.calls.append(np.array(position))
        if self.noise == 0.0:
            return -position            # consumes no random numbers
        return -position + self.noise * rng.standard_normal(position.shape)


def _unit_metric(d):
    return Metric(np.ones(d), np.ones(d))


def test_sghmc_kernel_uses_updated_position_fresh_gradients_and_keeps_momentum():
    d, eps, L = 2, 0.1, 5
    metric = _unit_metric(d)
    params, clipped = sghmc.make_params(eps, L, metric, 1.0)
    assert clipped == 0.0
    state = sghmc.init(np.array([1.0, -2.0]), np.array([0.5, 0.25]))
    spy = _Spy()
    new, info = sghmc.step(np.random.default_rng(0), state, spy, params)
    # Symplectic Euler: the first gradient is taken after the position update.
    np.testing.assert_allclose(spy.calls[0], state.position + eps * state.momentum)
    assert len(spy.calls) == L and info.n_obs_evaluated == 7 * L and not info.is_divergent
    # Replay Algorithm 2 by hand with the same random numbers.
    rng = np.random.default_rng(0)
    theta, r = state.position.copy(), state.momentum.copy()
    for _ in range(L):
        theta = theta + eps * r
        r = r + eps * (-theta) - eps * r + np.sqrt(2 * eps) * rng.standard_normal(d)
    np.testing.assert_allclose(new.position, theta)
    np.testing.assert_allclose(new.momentum, r)      # momentum carried in the state


def test_sgld_kernel_follows_the_stated_convention():
    d, eps = 3, 0.04
    mass = np.array([1.0, 4.0, 9.0])
    metric = Metric(1.0 / mass, np.sqrt(mass))
    state = sgld.init(np.array([1.0, 2.0, 3.0]))
    new, info = sgld.step(np.random.default_rng(1), state, _Spy(), sgld.SGLDParams(eps, metric))
    z = np.random.default_rng(1).standard_normal(d)
    expected = state.position + 0.5 * eps * (-state.position) / mass + np.sqrt(eps / mass) * z
    np.testing.assert_allclose(new.position, expected)
    assert info.n_obs_evaluated == 7 and not info.is_divergent


def test_non_finite_values_are_divergences_that_keep_the_state():
    class Inf(_Spy):
        def grad(self, position, rng):
            return np.full_like(position, np.inf)

    metric = _unit_metric(2)
    st = sghmc.init(np.ones(2), np.ones(2))
    params, _ = sghmc.make_params(0.1, 4, metric, 1.0)
    new, info = sghmc.step(np.random.default_rng(0), st, Inf(), params)
    assert info.is_divergent and new is st and info.n_integration_steps == 1
    new, info = sgld.step(np.random.default_rng(0), sgld.init(np.ones(2)), Inf(),
                          sgld.SGLDParams(0.1, metric))
    assert info.is_divergent and np.all(new.position == 1.0)


def test_sgd_momentum_parameterisation_gives_the_same_path():
    """Eq. (15): theta += v; v += eta g - alpha v + N(0, 2 (alpha - beta) eta)."""
    eta, alpha, beta = 0.01, 0.1, 0.02
    conv = sghmc.from_sgd_momentum(eta, alpha, beta)
    back = sghmc.to_sgd_momentum(conv["step_size"], conv["friction"], conv["noise_estimate"])
    np.testing.assert_allclose([back["learning_rate"], back["momentum_decay"],
                                back["noise_estimate"]], [eta, alpha, beta])
    metric = _unit_metric(1)
    params, _ = sghmc.make_params(conv["step_size"], 20, metric, conv["friction"],
                                  np.array([conv["noise_estimate"]]))
    state = sghmc.init(np.array([0.7]), np.array([0.3]))
    new, _ = sghmc.step(np.random.default_rng(4), state, _Spy(), params)
    rng = np.random.default_rng(4)
    theta, v = 0.7, conv["step_size"] * 0.3
    for _ in range(20):
        theta = theta + v
        noise = np.sqrt(2 * (alpha - beta) * eta) * rng.standard_normal()
        v = v + eta * (-theta) - alpha * v + noise
    np.testing.assert_allclose(new.position, [theta])
    np.testing.assert_allclose(new.momentum * conv["step_size"], [v])


# ------------------------------------------- Chen, Fox and Guestrin, Fig. 1


def _double_well():
    """U(theta) = -2 theta^2 + theta^4: CDF of exp(-U) by quadrature, and exact draws."""
    grid = np.linspace(-3.0, 3.0, 12001)
    dens = np.exp(2 * grid**2 - grid**4)
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0.0)
    cdf /= cdf[-1]
    return (lambda x: np.interp(x, grid, cdf)), \
        (lambda rng, k: np.interp(rng.random(k), cdf, grid))


class _NoisyDoubleWell:
    """``-grad U_tilde = -grad U + N(0, 4)`` (the paper's V = 4), elementwise.

    Each coordinate of the position is an independent chain, so one kernel
    call advances ``K`` chains at once.
    """

    n_obs_per_eval = 1
    subsample_size = 1

    def grad(self, position, rng):
        return 4 * position - 4 * position**3 + 2.0 * rng.standard_normal(position.shape)


def _fig1_pvalue(friction, noise_estimate, n_chains=10000, n_transitions=20, seed=0):
    """KS p-value of SG-HMC draws against exp(-U), as in Chen et al. Fig. 1.

    Paper set-up: eps = 0.1, gradient noise N(0, 4) (V = 4), momentum
    resampled every 50 steps (L = 50), unit mass.  The text does not state C;
    we use C = 3 with B_hat = eps V / 2 = 0.2 (any C > B gives the right
    invariant law as eps -> 0, Prop. 3.1).  Instead of one long chain we run
    ``n_chains`` independent chains started from exact draws of exp(-U)
    (DESIGN §7, invariance) for ``n_transitions * 50 = 1000`` steps (time 100,
    many barrier crossings), and test the end points.
    """
    cdf, exact = _double_well()
    rng = np.random.default_rng(seed)
    metric = _unit_metric(n_chains)
    params, clipped = sghmc.make_params(
        0.1, 50, metric, np.full(n_chains, friction),
        None if noise_estimate is None else np.full(n_chains, noise_estimate),
        resample_momentum=True)
    assert clipped == 0.0
    state = sghmc.init(exact(rng, n_chains))
    for _ in range(n_transitions):
        state, info = sghmc.step(rng, state, _NoisyDoubleWell(), params)
        assert not info.is_divergent
    return stats.kstest(state.position, cdf).pvalue


def test_sghmc_reproduces_chen_fig1_target():
    assert _fig1_pvalue(friction=3.0, noise_estimate=0.2) > 1e-3


def test_naive_sghmc_without_friction_fails_chen_fig1():
    """Negative control: C = 0, no injected noise (naive SG-HMC, momentum resampled)."""
    assert _fig1_pvalue(friction=0.0, noise_estimate=None) < 1e-6


# ------------------------------------------- logistic regression accuracy


@pytest.fixture(scope="module")
def logistic_tall():
    post = make_logistic(n=10000, d=1, seed=11)
    # A 61 x 61 grid over +-7 Laplace sd: mean and sd exact to ~1e-6 sd.
    return post, _logistic_quadrature(post, n_grid=61, width=7.0)


def _chains(config, post, n_chains, n_warmup, n_draws, seed=0):
    ss = np.random.SeedSequence(seed).spawn(n_chains + 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prep = config.prepare(np.random.default_rng(ss[0]), post)
        res = [config.run_chain(np.random.default_rng(s), post, prep, n_warmup, n_draws)
               for s in ss[1:]]
    return np.stack([r.draws for r in res]), res, [str(w.message) for w in caught]


def _close_to_posterior(draws, mean, sd):
    """Means within 0.2 posterior sd and sds within 20% of the exact posterior.

    Checked first: R-hat and ESS, and that 4 MCSE of the means fit inside the
    0.2 sd tolerance, so that failing is not Monte Carlo noise.
    """
    assert np.max(split_rhat(draws)) < 1.05
    assert np.min(ess_bulk(draws)) > 300
    assert np.all(4 * mcse_mean(draws) < 0.2 * sd)
    err_mean = np.abs(draws.mean(axis=(0, 1)) - mean) / sd
    sd_ratio = draws.std(axis=(0, 1)) / sd
    return bool(np.all(err_mean < 0.2) and np.all(np.abs(sd_ratio - 1) < 0.2)), err_mean, sd_ratio


def test_sgld_with_control_variates_matches_the_posterior(logistic_tall):
    post, (mean, sd) = logistic_tall
    # n_steps_per_draw="auto": 10 updates per draw (2 / (eps lambda_min), lambda ~ 1).
    draws, res, caught = _chains(SGLD(), post, 4, 100, 600)
    ok, err, ratio = _close_to_posterior(draws, mean, sd)
    assert ok, (err, ratio)
    assert not caught
    assert res[0].step_size == pytest.approx(0.2, rel=0.05)   # 0.2 / lambda_max, lambda ~ 1
    assert all(9 <= r.n_integration_steps <= 11 for r in res)
    assert all(r.stats["n_obs_evaluated"][0] == 2 * 1000 * r.n_integration_steps for r in res)


def test_sghmc_with_control_variates_matches_the_posterior(logistic_tall):
    post, (mean, sd) = logistic_tall
    draws, res, caught = _chains(SGHMC(), post, 2, 300, 1000)
    ok, err, ratio = _close_to_posterior(draws, mean, sd)
    assert ok, (err, ratio)
    assert not caught
    r = res[0]
    assert r.n_integration_steps == round(1.2 / r.step_size) == 6
    assert set(r.stats) >= {"acceptance_rate", "diverging", "energy", "energy_error", "lp",
                            "step_size", "n_steps", "n_obs_evaluated"}
    assert np.all(r.stats["acceptance_rate"] == 1.0) and not r.stats["diverging"].any()
    assert r.n_obs_evaluated_sampling == 1000 * 6 * 2 * 1000


def test_plain_sgld_with_a_large_step_fails_the_same_check(logistic_tall):
    """Negative control: no control variates and eps = 0.5 / lambda_max."""
    post, (mean, sd) = logistic_tall
    lam = np.linalg.eigvalsh(post.expand(post.mode()[0]).neg_hessian)[-1]
    draws, _, caught = _chains(SGLD(control_variates=False, step_size=0.5 / lam,
                                    mass_matrix="identity"), post, 4, 300, 3000)
    ok, err, ratio = _close_to_posterior(draws, mean, sd)
    assert not ok and np.all(ratio > 1.3), ratio
    assert any("too large" in m for m in caught)


def test_predicted_variance_inflation_matches_the_linear_theory():
    # SGLD on N(0, 1): AR(1) with coefficient 1 - eps/2 and innovation eps.
    assert sgld_variance_inflation(0.2, 1.0) == pytest.approx(1 / 0.95)
    assert sgld_variance_inflation(4.0, 1.0) == np.inf
    assert sghmc_variance_inflation(0.2, 1.0) == pytest.approx(1.0112, abs=1e-4)
    assert sghmc_variance_inflation(3.0, 1.0) == np.inf
    # Gradient noise with B_hat = B exactly compensated (Prop. 3.1), up to O(eps^2).
    assert sghmc_variance_inflation(0.01, 1.0, 1.0, noise=10.0, noise_estimate=0.05) \
        == pytest.approx(1.0, abs=0.01)


def test_estimated_noise_beyond_friction_warns(logistic_tall):
    post, _ = logistic_tall
    cfg = SGHMC(control_variates=False, subsample_size=100, estimate_noise=True,
                step_size=0.5, n_integration_steps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg.prepare(np.random.default_rng(0), post)
    messages = [str(w.message) for w in caught]
    assert any("exceeds the friction" in m for m in messages)
    assert any("too large" in m for m in messages)
    # With control variates and the default step, no warning at all.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SGHMC(estimate_noise=True).prepare(np.random.default_rng(0), post)


def test_unstable_step_warns_and_divergences_are_counted_not_propagated():
    post = make_gaussian(n=3000, d=2)
    cfg = SGLD(step_size=20.0, subsample_size=300)      # eps lambda_max = 20 > 4
    draws, res, caught = _chains(cfg, post, 1, 0, 400)
    assert any("stability bound" in m for m in caught)
    assert np.all(np.isfinite(draws))
    stats_ = res[0].stats
    assert stats_["diverging"].sum() > 0
    assert np.all(stats_["acceptance_rate"][stats_["diverging"]] == 0.0)


# ----------------------------------------------------- configuration, API


@pytest.mark.parametrize("cls, params", [
    (SGLD, {"subsample_size": 10**6}),
    (SGLD, {"subsample_size": 0}),
    (SGLD, {"step_size": -0.1}),
    (SGLD, {"step_size": "big"}),
    (SGLD, {"mass_matrix": "full"}),
    (SGLD, {"control_variates": "yes"}),
    (SGLD, {"taylor_order": 0}),
    (SGLD, {"n_steps_per_draw": 0}),
    (SGLD, {"reference_fraction": 0.0}),
    (SGHMC, {"n_integration_steps": 0}),
    (SGHMC, {"friction": 0.0}),
    (SGHMC, {"estimate_noise": 1}),
    (SGHMC, {"resample_momentum": None}),
])
def test_bad_parameters_raise_before_sampling(cls, params, monkeypatch):
    def no_sampling(*args, **kwargs):
        raise AssertionError("sampling started")

    monkeypatch.setattr(cls, "prepare", no_sampling)
    monkeypatch.setattr(cls, "run_chain", no_sampling)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 2))
    y = (rng.random(2000) < 0.5).astype(int)
    with pytest.raises(ValueError):
        BayesianLogisticRegression(sampler=cls(**params), n_warmup=5, n_draws=5).fit(X, y)


def test_registered_and_usable_from_the_estimator(capsys):
    assert SAMPLERS["sgld"] is SGLD and SAMPLERS["sghmc"] is SGHMC
    assert SGHMC().set_params(friction=2.0).get_params()["friction"] == 2.0
    with pytest.raises(ValueError):
        SGLD().set_params(n_integration_steps=3)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 2))
    y = (rng.random(3000) < 1 / (1 + np.exp(-X @ [1.0, -0.5]))).astype(int)
    for name in ("sgld", "sghmc"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = BayesianLogisticRegression(sampler=name, n_chains=2, n_warmup=50,
                                             n_draws=50, subsample_size=500, random_state=0,
                                             verbose=1).fit(X, y)
        assert clf.coef_draws_.shape == (2, 50, 2)
        assert clf.subsample_size_.tolist() == [500, 500]
        assert clf.predict_proba(X[:3]).shape == (3, 2)
        assert "acceptance (theta)    : 1.000" in capsys.readouterr().out
