"""The likelihood layer: Taylor control variates and the perturbed difference estimator.

Deterministic checks first (algebra against direct per-observation sums and
finite differences), then estimator properties from i.i.d. replications,
each statistical assertion paired with a negative control.
"""

import copy

import numpy as np
import pytest

from bayesian_subsample.likelihood import block_layout

from .conftest import make_gaussian, make_logistic


def _direct_taylor_sum(post, theta_star, theta, order):
    """sum_k q_k(theta) from per-observation gradients and Hessians (eq. 4.4)."""
    model = post.model
    idx = np.arange(model.n_obs)
    delta = theta - theta_star
    total = model.loglik(theta_star, idx).sum()
    if order >= 1:
        total += model.loglik_grad(theta_star, idx).sum(0) @ delta
    if order >= 2:
        total += 0.5 * delta @ model.loglik_hessian(theta_star, idx).sum(0) @ delta
    return total


@pytest.mark.parametrize("order", [0, 1, 2])
def test_population_sum_of_control_variates(order):
    post = make_logistic(n=500, weights=True)
    theta_star = np.array([0.2, -0.1, 0.3, 0.05])
    ex = post.expand(theta_star, order)
    theta = theta_star + np.array([0.05, -0.02, 0.01, 0.03])
    value, grad = ex.population_sum(theta)
    np.testing.assert_allclose(value, _direct_taylor_sum(post, theta_star, theta, order),
                               rtol=1e-12)
    h = 1e-6
    fd = [(ex.population_sum(theta + h * e)[0] - ex.population_sum(theta - h * e)[0]) / (2 * h)
          for e in np.eye(4)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)
    # The mass matrix is the negative Hessian of the log posterior at theta*.
    hess = post.model.loglik_hessian(theta_star, np.arange(500)).sum(0)
    np.testing.assert_allclose(ex.neg_hessian, -hess + np.diag(post.prior.precision),
                               rtol=1e-10)


def test_per_observation_control_variates_match_eq_4_4():
    post = make_logistic(n=300)
    theta_star = np.array([0.1, 0.2, -0.3, 0.4])
    est = post.difference_estimator(post.expand(theta_star, 2), 10, n_blocks=2)
    sub = est.init_subsample(np.random.default_rng(0))
    theta = theta_star + 0.05
    d, _ = est.differences(theta, sub)
    model = post.model
    for i, k in enumerate(sub.indices):
        kk = np.array([k])
        q = (model.loglik(theta_star, kk)[0] + model.loglik_grad(theta_star, kk)[0] @ (
            theta - theta_star) + 0.5 * (theta - theta_star) @ model.loglik_hessian(
                theta_star, kk)[0] @ (theta - theta_star))
        np.testing.assert_allclose(d[i], model.loglik(theta, kk)[0] - q, rtol=1e-9, atol=1e-14)


def test_second_order_control_variates_are_exact_for_the_gaussian_model():
    post = make_gaussian(n=400)
    est = post.difference_estimator(post.expand(np.zeros(4), 2), 40, n_blocks=4)
    sub = est.init_subsample(np.random.default_rng(0))
    theta = np.array([0.3, -1.0, 2.0, 0.7])
    e = est.evaluate(theta, sub)
    exact, grad = post.full_target().logdensity_and_grad(theta)
    assert e.loglik_var == pytest.approx(0.0, abs=1e-18)
    np.testing.assert_allclose(e.logdensity, exact, rtol=1e-12)
    np.testing.assert_allclose(e.grad, grad, rtol=1e-10)
    # Negative control: first-order control variates leave variance.
    est1 = post.difference_estimator(post.expand(np.zeros(4), 1), 40, n_blocks=4)
    assert est1.evaluate(theta, est1.refresh(sub)).loglik_var > 1.0


@pytest.mark.parametrize("order", [1, 2])
def test_estimator_gradient_includes_the_variance_correction(order):
    """Eq. (4.7) plus the gradient of sigma2_hat, against finite differences."""
    post = make_logistic(n=5000, seed=3)
    theta_star = post.mode()[0]
    est = post.difference_estimator(post.expand(theta_star, order), 50, n_blocks=5)
    sub = est.init_subsample(np.random.default_rng(1))
    theta = theta_star + np.array([0.2, -0.15, 0.1, 0.25])
    e = est.evaluate(theta, sub)
    h = 1e-6
    fd = np.array([(est.evaluate(theta + h * u, sub).logdensity
                    - est.evaluate(theta - h * u, sub).logdensity) / (2 * h)
                   for u in np.eye(4)])
    np.testing.assert_allclose(e.grad, fd, rtol=1e-6, atol=1e-6)
    # Negative control: dropping grad(sigma2_hat)/2 breaks the agreement.
    fd_var = np.array([(est.evaluate(theta + h * u, sub).loglik_var
                        - est.evaluate(theta - h * u, sub).loglik_var) / (2 * h)
                       for u in np.eye(4)])
    assert np.max(np.abs(fd_var)) > 1e-3
    assert not np.allclose(e.grad + 0.5 * fd_var, fd, rtol=1e-6, atol=1e-6)


def _replicate(est, theta, n_rep, seed):
    rng = np.random.default_rng(seed)
    out = np.empty((n_rep, 2))
    for r in range(n_rep):
        out[r] = est.loglik_estimate(theta, est.init_subsample(rng))
    return out


def test_difference_estimator_is_unbiased():
    """E[ell_hat] = ell within 4 standard errors (eq. 4.1), with a negative control."""
    post = make_logistic(n=20000, seed=5)
    theta_star = post.mode()[0]
    theta = theta_star + 0.1
    est = post.difference_estimator(post.expand(theta_star, 1), 200, n_blocks=10)
    reps = _replicate(est, theta, 3000, seed=11)
    ell = post.model.sums(theta, order=0)[0]
    se = reps[:, 0].std(ddof=1) / np.sqrt(len(reps))
    assert abs(reps[:, 0].mean() - ell) < 4 * se
    # sigma2_hat (eq. 4.3) estimates the variance of ell_hat.
    assert reps[:, 1].mean() == pytest.approx(reps[:, 0].var(), rel=0.15)
    # Negative control: the population sum of the control variates alone is biased.
    qsum = est.expansion.population_sum(theta)[0]
    assert abs(qsum - ell) > 20 * se


def test_bias_corrected_likelihood_estimator_is_nearly_unbiased():
    """E[exp(ell_hat - sigma2_hat/2)] = L (eq. 4.5) when ell_hat is near normal.

    With m = 2000 the estimator is close to normal and sigma2_hat has small
    relative error, so the remaining bias is far below the 4-SE tolerance;
    without the -sigma2/2 correction the mean is exp(sigma2/2), which fails.
    """
    post = make_logistic(n=50000, seed=7, d=2)
    theta_star = post.mode()[0]
    theta = theta_star + 0.04
    est = post.difference_estimator(post.expand(theta_star, 1), 2000, n_blocks=20)
    ell = post.model.sums(theta, order=0)[0]
    reps = _replicate(est, theta, 2000, seed=3)
    sigma2 = reps[:, 1].mean()
    assert 0.3 < sigma2 < 3.0, sigma2  # the regime where the correction matters
    ratio = np.exp(reps[:, 0] - 0.5 * reps[:, 1] - ell)
    se = ratio.std(ddof=1) / np.sqrt(len(ratio))
    assert abs(ratio.mean() - 1.0) < 4 * se
    naive = np.exp(reps[:, 0] - ell)
    se_naive = naive.std(ddof=1) / np.sqrt(len(naive))
    assert abs(naive.mean() - 1.0) > 4 * se_naive


def test_block_update_redraws_one_block_and_correlates_estimates():
    post = make_logistic(n=20000, seed=2)
    theta_star = post.mode()[0]
    theta = theta_star + 0.1
    rng = np.random.default_rng(0)
    corr = {}
    for n_blocks in (100, 1):
        est = post.difference_estimator(post.expand(theta_star, 1), 500, n_blocks=n_blocks)
        sub = est.init_subsample(rng)
        pairs = []
        for _ in range(400):
            new = est.propose_subsample(rng, sub)
            changed = np.flatnonzero(new.indices != sub.indices)
            assert changed.size <= est.block_size
            if changed.size:
                block = changed // est.block_size
                assert np.all(block == block[0])
            pairs.append((est.loglik_estimate(theta, sub)[0], est.loglik_estimate(theta, new)[0]))
            sub = new
        corr[n_blocks] = np.corrcoef(np.array(pairs).T)[0, 1]
    # rho ~ 1 - 1/G: 0.99 for G = 100; independent redraws (G = 1) give rho ~ 0.
    assert corr[100] > 0.95
    assert abs(corr[1]) < 0.2


def test_block_layout_rounds_up():
    assert block_layout(1000, 100) == (1000, 100, 10)
    assert block_layout(1001, 100) == (1100, 100, 11)
    assert block_layout(30, 100) == (30, 30, 1)
    with pytest.raises(ValueError):
        block_layout(0, 10)


def test_subset_mode_approximates_full_mode():
    post = make_logistic(n=20000, seed=4)
    full, cost_full = post.mode()
    sub, cost_sub = post.mode(idx=np.arange(0, 20000, 10))
    assert cost_sub < cost_full
    # The scaled-subset mode is within a few subset-posterior sds of the full mode.
    sd_sub = np.sqrt(np.diag(np.linalg.inv(post.expand(full).neg_hessian)) * 10)
    assert np.all(np.abs(sub - full) < 4 * sd_sub)
    # Newton converged: the Newton decrement (gradient in the metric of the
    # Hessian) vanishes at the mode.
    _, g = post.full_target().logdensity_and_grad(full)
    assert g @ np.linalg.solve(post.expand(full).neg_hessian, g) < 1e-8


@pytest.mark.parametrize("order,weights", [(2, False), (1, True), (0, False)])
def test_in_place_proposal_is_the_copying_proposal_and_undoes_exactly(order, weights):
    # The kernel proposes u' in place (no per-proposal copy of the m-row
    # subsample) and undoes a rejected proposal: same draws of u', same
    # cached fields, and the current u restored bit for bit.
    post = make_logistic(n=3000, seed=3, weights=weights)
    theta_star = post.mode()[0]
    est = post.difference_estimator(post.expand(theta_star, order), 120, n_blocks=12)
    sub = est.init_subsample(np.random.default_rng(0))
    before = [None if f is None else f.copy() for f in sub[:-1]] + [None]
    for seed in range(6):
        # The copying proposal draws from a copy of the proposal pool, which
        # both kinds of proposal advance (the pool is the chain's, not u's).
        expected = est.propose_subsample(np.random.default_rng(seed),
                                         sub._replace(pool=copy.deepcopy(sub.pool)))
        prop, undo = est.propose_in_place(np.random.default_rng(seed), sub)
        assert prop is sub
        changed = np.flatnonzero(prop.indices != before[0])
        assert 0 < changed.size <= est.block_size
        for want, got in zip(expected[:-1], prop[:-1]):
            if want is None:
                assert got is None
            else:
                np.testing.assert_array_equal(got, want)
        est.undo_proposal(prop, undo)
        for want, got in zip(before[:-1], sub[:-1]):
            if want is not None:
                np.testing.assert_array_equal(got, want)
    # Negative control: an accepted (not undone) proposal leaves u changed.
    est.propose_in_place(np.random.default_rng(99), sub)
    assert np.any(sub.indices != before[0])


@pytest.mark.parametrize("weights", [False, True])
def test_estimate_in_work_arrays_is_bit_identical_to_the_generic_algebra(weights):
    # evaluate() reuses work arrays for one linear predictor; the result must
    # equal eqs. (4.1)-(4.7) written with fresh temporaries, to the last bit.
    post = make_logistic(n=2000, seed=4, weights=weights)
    theta_star = post.mode()[0]
    est = post.difference_estimator(post.expand(theta_star, 2), 200, n_blocks=10)
    sub = est.init_subsample(np.random.default_rng(1))
    n, m = post.n_obs, est.subsample_size
    for k in range(3):
        theta = theta_star + 0.05 * (k + 1) * np.array([1.0, -1.0, 0.5, 0.2])
        d, g = est.differences(theta, sub)
        total = float(d.sum())
        dev = d - total / m
        sigma2 = (n / m) ** 2 * float(dev @ dev)
        qsum, qgrad = est.expansion.population_sum(theta)
        lp, gp = post.prior.logdensity_and_grad(theta)
        grad = sub.Z.T @ (g * (n / m - (n / m) ** 2 * dev)) + qgrad + gp
        got = est.evaluate(theta, sub)
        assert got.logdensity == qsum + n / m * total - 0.5 * sigma2 + lp
        assert got.loglik_var == sigma2
        np.testing.assert_array_equal(got.grad, grad)


def test_float32_rows_are_widened_exactly_in_the_subsample():
    # A float32 X is gathered as float32 and widened into the float64
    # subsample cache: every cached field, every estimate and every block
    # proposal equal those of the same values held as float64.
    from bayesian_subsample.likelihood import TallPosterior
    from bayesian_subsample.models import GLM, LogisticFamily

    base = make_logistic(n=3000, d=4, seed=5)
    X32 = base.model.X.astype(np.float32)
    posts = [TallPosterior(GLM(X, base.model.y, LogisticFamily()), base.prior)
             for X in (X32, X32.astype(np.float64))]
    theta_star = posts[1].mode()[0]
    # One expansion for both: the float32 pass sums its curvature in float32
    # products (tests/test_float32_passes.py); the subsample must not differ.
    expansion = posts[1].expand(theta_star, 2)
    ests = [p.difference_estimator(expansion, 100, n_blocks=10) for p in posts]
    subs = [e.init_subsample(np.random.default_rng(2)) for e in ests]
    theta = theta_star + 0.03
    for k in range(4):
        for a, b in zip(*(s[:-1] for s in subs)):  # not the proposal pool
            if a is not None:
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)
        e32, e64 = (e.evaluate(theta, s) for e, s in zip(ests, subs))
        assert e32.logdensity == e64.logdensity
        np.testing.assert_array_equal(e32.grad, e64.grad)
        subs = [e.propose_in_place(np.random.default_rng(10 + k), s)[0]
                for e, s in zip(ests, subs)]
    # Negative control: rounding theta* to float32 does change the estimate.
    ex = posts[1].expand(theta_star.astype(np.float32).astype(np.float64), 2)
    other = posts[1].difference_estimator(ex, 100, n_blocks=10)
    assert other.evaluate(theta, other.refresh(subs[1])).logdensity != e64.logdensity
