"""Sampler kernels: integrator properties, path equivalence, invariance, known posteriors.

Statistical assertions are in MCSE units and each has a negative control: a
deliberately broken kernel must fail the same assertion.
"""

import numpy as np
import pytest
from scipy import stats

from bayesian_subsample.diagnostics import ess_bulk, mcse_mean, mcse_sd, split_rhat
from bayesian_subsample.samplers import HMC, HMCECS, hmc, hmc_ecs
from bayesian_subsample.samplers.adaptation import (
    dual_averaging_init,
    dual_averaging_update,
)
from bayesian_subsample.samplers.integrators import leapfrog
from bayesian_subsample.samplers.metric import (
    kinetic_energy,
    metric_from_mass_matrix,
    sample_momentum,
)

from .conftest import gaussian_posterior_moments, make_gaussian, make_logistic


class GaussianTarget:
    """N(mean, cov) as a DifferentiableTarget."""

    n_obs_per_eval = 1

    def __init__(self, mean, cov):
        self.mean = np.asarray(mean, float)
        self.prec = np.linalg.inv(cov)

    def logdensity_and_grad(self, x):
        r = x - self.mean
        g = -self.prec @ r
        return 0.5 * r @ g, g


def _energy(target, x, p, metric):
    return -target.logdensity_and_grad(x)[0] + kinetic_energy(p, metric)


@pytest.mark.parametrize("dense", [True, False])
def test_leapfrog_is_reversible(dense):
    target = GaussianTarget([1.0, -2.0], [[2.0, 0.6], [0.6, 1.0]])
    metric = metric_from_mass_matrix(np.array([[1.5, 0.2], [0.2, 0.8]]), dense=dense)
    rng = np.random.default_rng(0)
    x0, p0 = rng.standard_normal(2), sample_momentum(rng, metric)
    g0 = target.logdensity_and_grad(x0)[1]
    fwd = leapfrog(target, x0, p0, g0, 0.3, 17, metric)
    back = leapfrog(target, fwd.position, -fwd.momentum, fwd.logdensity_grad, 0.3, 17, metric)
    np.testing.assert_allclose(back.position, x0, atol=1e-12)
    np.testing.assert_allclose(-back.momentum, p0, atol=1e-12)


def test_leapfrog_energy_error_is_second_order():
    target = GaussianTarget(np.zeros(3), np.diag([1.0, 4.0, 0.25]))
    metric = metric_from_mass_matrix(np.eye(3))
    x0, p0 = np.array([1.0, -1.0, 0.5]), np.array([0.3, 0.8, -1.0])
    errors = []
    for eps in (0.08, 0.04, 0.02):
        n = int(round(1.6 / eps))
        end = leapfrog(target, x0, p0, target.logdensity_and_grad(x0)[1], eps, n, metric)
        errors.append(abs(_energy(target, end.position, end.momentum, metric)
                          - _energy(target, x0, p0, metric)))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    np.testing.assert_allclose(ratios, 4.0, rtol=0.15)


def test_divergence_is_caught_not_propagated():
    class Blowup(GaussianTarget):
        def logdensity_and_grad(self, x):
            if np.abs(x).max() > 3:
                return np.nan, np.full_like(x, np.nan)
            return super().logdensity_and_grad(x)

    target = Blowup(np.zeros(2), np.eye(2))
    metric = metric_from_mass_matrix(np.eye(2))
    state = hmc.init(np.zeros(2), target)
    params = hmc.HMCParams(step_size=5.0, n_integration_steps=10, metric=metric)
    rng = np.random.default_rng(0)
    n_div = 0
    for _ in range(20):
        new, info = hmc.step(rng, state, target, params)
        n_div += info.is_divergent
        if info.is_divergent:
            assert info.acceptance_rate == 0.0 and not info.is_accepted
            assert new is state
        assert np.all(np.isfinite(new.position))
    assert n_div > 0


def test_zero_variance_hmc_ecs_reproduces_full_data_hmc_path_for_path():
    """Order-2 control variates make the Gaussian-model estimator exact, so the
    HMC-ECS theta updates coincide with full-data HMC given the same momenta."""
    post = make_gaussian(n=500, d=3)
    ex = post.expand(np.zeros(4), 2)
    est = post.difference_estimator(ex, 50, n_blocks=10)
    full = post.full_target()
    metric = metric_from_mass_matrix(ex.neg_hessian)
    params = hmc.HMCParams(step_size=0.4, n_integration_steps=4, metric=metric)
    rng_u = np.random.default_rng(1)
    ecs_state = hmc_ecs.init(np.full(4, 0.3), est, rng_u)
    full_state = hmc.init(np.full(4, 0.3), full)
    for it in range(60):
        ecs_state, u_rate, _, _ = hmc_ecs.update_subsample(rng_u, ecs_state, est)
        assert u_rate == pytest.approx(1.0)
        inner = hmc.HMCState(ecs_state.position, ecs_state.logdensity, ecs_state.logdensity_grad)
        inner, info_e = hmc.step(np.random.default_rng(it), inner, est.conditional(
            ecs_state.subsample), params)
        ecs_state = ecs_state._replace(position=inner.position, logdensity=inner.logdensity,
                                       logdensity_grad=inner.logdensity_grad)
        full_state, info_f = hmc.step(np.random.default_rng(it), full_state, full, params)
        np.testing.assert_allclose(ecs_state.position, full_state.position, rtol=1e-9,
                                   atol=1e-12)
        assert info_e.is_accepted == info_f.is_accepted
    assert info_e.n_obs_evaluated * 10 == info_f.n_obs_evaluated


def _run_kernel(kernel, n_chains, n_iter, x0s, seed):
    rng = np.random.default_rng(seed)
    return np.stack([kernel(rng, x0, n_iter) for x0 in x0s])


def _hmc_chain(target, metric, eps, L, correct=True):
    """An HMC chain; correct=False drops the Metropolis correction (negative control)."""

    def run(rng, x0, n_iter):
        state = hmc.init(x0, target)
        params = hmc.HMCParams(eps, L, metric)
        out = np.empty((n_iter, x0.size))
        for i in range(n_iter):
            if correct:
                state, _ = hmc.step(rng, state, target, params)
            else:
                p = sample_momentum(rng, metric)
                end = leapfrog(target, state.position, p, state.logdensity_grad, eps, L, metric)
                state = hmc.HMCState(end.position, end.logdensity, end.logdensity_grad)
            out[i] = state.position
        return out

    return run


def test_hmc_kernel_leaves_exact_posterior_draws_invariant():
    """Start 3000 independent chains at exact draws, take 5 steps, test the law."""
    post = make_gaussian(n=300, d=2)
    mean, cov = gaussian_posterior_moments(post)
    target = post.full_target()
    metric = metric_from_mass_matrix(np.linalg.inv(cov))
    rng = np.random.default_rng(0)
    starts = rng.multivariate_normal(mean, cov, size=3000)
    whiten = np.linalg.cholesky(np.linalg.inv(cov)).T

    def pvalues(correct):
        kernel = _hmc_chain(target, metric, 1.4, 1, correct)
        ends = np.array([kernel(rng, x0, 5)[-1] for x0 in starts])
        z = (ends - mean) @ whiten.T  # standard normal coordinates if invariant
        return [stats.kstest(z[:, j], "norm").pvalue for j in range(z.shape[1])]

    assert min(pvalues(True)) > 1e-3
    # Negative control: the same dynamics without the MH correction drift away.
    assert min(pvalues(False)) < 1e-6


def test_dual_averaging_reaches_the_target_acceptance():
    target = GaussianTarget(np.zeros(5), np.diag(np.linspace(0.5, 2.0, 5)))
    metric = metric_from_mass_matrix(np.eye(5))
    rng = np.random.default_rng(3)
    state = hmc.init(np.ones(5), target)
    da = dual_averaging_init(1.0)
    eps = 1.0
    adapt_rates = []
    for _ in range(1000):
        state, info = hmc.step(rng, state, target, hmc.HMCParams(eps, 3, metric))
        da = dual_averaging_update(da, info.acceptance_rate, 0.8)
        eps = np.exp(da.log_step_size)
        adapt_rates.append(info.acceptance_rate)
    # Dual averaging drives the running mean of the acceptance to the target ...
    assert abs(np.mean(adapt_rates[500:]) - 0.8) < 0.03
    # ... and the averaged step size lands close to it (typically a little
    # above, as the average of log step sizes is smaller than their end point).
    eps = np.exp(da.log_step_size_avg)
    rates = []
    for _ in range(1500):
        state, info = hmc.step(rng, state, target, hmc.HMCParams(eps, 3, metric))
        rates.append(info.acceptance_rate)
    assert 0.72 < np.mean(rates) < 0.9


# ------------------------------------------------------------------------------------
# Long runs against an exactly known posterior: 2-D logistic regression by quadrature.


def _logistic_quadrature(post, n_grid=121, width=8.0):
    """Posterior mean and sd of a 2-parameter logistic model by a fine grid."""
    mode, _ = post.mode()
    cov = np.linalg.inv(post.expand(mode).neg_hessian)
    vals, vecs = np.linalg.eigh(cov)
    t = np.linspace(-width, width, n_grid)
    A, B = np.meshgrid(t, t, indexing="ij")
    pts = mode + (np.stack([A.ravel(), B.ravel()], 1) * np.sqrt(vals)) @ vecs.T
    model = post.model
    X, y = np.asarray(model.X), model.y
    eta = pts[:, :1] + pts[:, 1:] @ X.T
    ll = (y * eta - np.logaddexp(0, eta)).sum(1)
    lp = ll - 0.5 * (pts**2 * post.prior.precision).sum(1)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    mean = w @ pts
    sd = np.sqrt(w @ (pts - mean) ** 2)
    return mean, sd


@pytest.fixture(scope="module")
def logistic_2d():
    post = make_logistic(n=5000, d=1, seed=11)
    return post, _logistic_quadrature(post)


def _assert_matches(draws, mean, sd):
    assert np.max(split_rhat(draws)) < 1.01
    assert np.min(ess_bulk(draws)) > 400
    err_mean = np.abs(draws.mean(axis=(0, 1)) - mean) / mcse_mean(draws)
    err_sd = np.abs(draws.std(axis=(0, 1)) - sd) / mcse_sd(draws)
    assert np.all(err_mean < 4), err_mean
    assert np.all(err_sd < 4), err_sd


def _chains(config, post, n_chains=4, n_warmup=500, n_draws=1500, seed=0):
    ss = np.random.SeedSequence(seed).spawn(n_chains + 1)
    prep = config.prepare(np.random.default_rng(ss[0]), post)
    return [config.run_chain(np.random.default_rng(s), post, prep, n_warmup, n_draws)
            for s in ss[1:]]


def test_hmc_matches_quadrature_posterior(logistic_2d):
    post, (mean, sd) = logistic_2d
    results = _chains(HMC(), post)
    _assert_matches(np.stack([r.draws for r in results]), mean, sd)
    acc = np.mean([r.stats["acceptance_rate"].mean() for r in results])
    assert 0.7 < acc < 0.95


def test_hmc_without_metropolis_correction_fails_the_same_check(logistic_2d):
    """Negative control: fixed large step, with and without the MH correction."""
    post, (mean, sd) = logistic_2d
    ex = post.expand(post.mode()[0])
    metric = metric_from_mass_matrix(ex.neg_hessian)
    target = post.full_target()
    rng = np.random.default_rng(5)
    x0s = [ex.theta_star + rng.normal(0, 0.01, 2) for _ in range(4)]
    good = _run_kernel(_hmc_chain(target, metric, 1.4, 1, True), 4, 3000, x0s, 1)
    _assert_matches(good[:, 500:], mean, sd)
    bad = _run_kernel(_hmc_chain(target, metric, 1.4, 1, False), 4, 3000, x0s, 1)
    with pytest.raises(AssertionError):
        _assert_matches(bad[:, 500:], mean, sd)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_hmc_ecs_matches_quadrature_posterior(logistic_2d, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    post, (mean, sd) = logistic_2d
    results = _chains(HMCECS(subsample_size=500, n_blocks=50, backend=backend), post)
    assert {r.extra["backend"] for r in results} == {backend}
    draws = np.stack([r.draws for r in results])
    # The perturbation of eq. (4.6) is driven by sigma2_hat; it is tiny here, so
    # no bias allowance beyond Monte Carlo error is needed.
    assert np.mean([r.stats["loglik_var"].mean() for r in results]) < 0.01
    _assert_matches(draws, mean, sd)
    assert np.mean([r.stats["subsample_acceptance_rate"].mean() for r in results]) > 0.9


def test_naive_subsampling_fails_the_same_check(logistic_2d):
    """Negative control: HMC on a fresh subsample each iteration with the plain
    scaled subsample likelihood (no control variates, no pseudo-marginal MH)."""
    post, (mean, sd) = logistic_2d
    ex = post.expand(post.mode()[0], order=0)
    ex = ex._replace(loglik=0.0)  # q_k = 0: ell_hat = (n/m) sum_u ell
    est = post.difference_estimator(ex, 500, n_blocks=1)
    metric = metric_from_mass_matrix(ex.neg_hessian)
    params = hmc.HMCParams(0.5, 3, metric)
    rng = np.random.default_rng(2)
    chains = []
    for c in range(4):
        state = hmc_ecs.init(ex.theta_star, est, rng)
        out = np.empty((2000, 2))
        for i in range(2000):
            sub = est.init_subsample(rng)
            e = est.evaluate(state.position, sub)
            inner = hmc.HMCState(state.position, e.logdensity, e.grad)
            inner, _ = hmc.step(rng, inner, est.conditional(sub), params)
            state = state._replace(position=inner.position)
            out[i] = inner.position
        chains.append(out[500:])
    with pytest.raises(AssertionError):
        _assert_matches(np.stack(chains), mean, sd)
