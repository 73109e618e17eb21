"""Bayesian MLPs: gradients, Gibbs conditionals, samplers on an exactly known posterior."""

import numpy as np
import pytest
from scipy import linalg, stats

from bayesian_subsample.diagnostics import ess_bulk
from bayesian_subsample.likelihood import HierarchicalPosterior, Hyperparameters
from bayesian_subsample.likelihood._gradients import sample_without_replacement
from bayesian_subsample.models import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import ModelSG, run_model_chain


def _data(output, n, rng, k=3):
    if output == "softmax":
        return rng.integers(0, k, n)
    if output == "sigmoid":
        return rng.integers(0, 2, n)
    return rng.normal(size=(n, 2))


@pytest.mark.parametrize("output,k", [("softmax", 3), ("sigmoid", 1), ("gaussian", 2)])
@pytest.mark.parametrize("activation", ["logistic", "tanh", "relu", "identity"])
@pytest.mark.parametrize("hidden", [(), (5,), (4, 3)])
def test_gradient_matches_finite_differences(output, k, activation, hidden):
    rng = np.random.default_rng(0)
    net = MLP(4, hidden, k, activation, output)
    X = rng.normal(size=(9, 4))
    y = _data(output, 9, rng)
    theta = rng.normal(size=net.dim)
    ll, grad = net.loglik_and_grad(theta, X, y, 1.7)
    h = 1e-6
    fd = np.empty(net.dim)
    for j in range(net.dim):
        e = np.zeros(net.dim)
        e[j] = h
        fd[j] = (net.loglik_and_grad(theta + e, X, y, 1.7)[0]
                 - net.loglik_and_grad(theta - e, X, y, 1.7)[0]) / (2 * h)
    assert np.allclose(grad, fd, rtol=1e-5, atol=1e-6)
    assert ll == pytest.approx(net.loglik_rows(theta, X, y, 1.7).sum())
    assert grad.dtype == np.float64


@pytest.mark.parametrize("output,k", [("softmax", 3), ("sigmoid", 1), ("gaussian", 2)])
@pytest.mark.parametrize("hidden", [(), (5,), (4, 3)])
def test_gradient_moments_are_sums_over_per_row_gradients(output, k, hidden):
    rng = np.random.default_rng(1)
    net = MLP(4, hidden, k, "tanh", output)
    X = rng.normal(size=(11, 4))
    y = _data(output, 11, rng)
    theta = rng.normal(size=net.dim)
    rows = np.array([net.loglik_and_grad(theta, X[i:i + 1], y[i:i + 1], 1.7)[1]
                     for i in range(11)])
    s1, s2 = net.gradient_moments(theta, X, y, 1.7)
    assert np.allclose(s1, rows.sum(axis=0), rtol=1e-10, atol=1e-12)
    assert np.allclose(s2, (rows ** 2).sum(axis=0), rtol=1e-10, atol=1e-12)
    # Negative control: the square of the sum is not the sum of squares.
    assert not np.allclose(s2, rows.sum(axis=0) ** 2, rtol=1e-3)


def _reductions(net, theta, X, y, tau, rng):
    """Every reduction of the one backward recursion (``MLP._layer_errors``),
    as explicit per-row quantities: ``J`` from :meth:`MLP.gradient_rows`
    and the other five against it."""
    layers = net.unpack(theta, net._dtype(X))
    acts, z = net.forward(theta, X, layers)
    _, delta = net.output_loglik(z, y, tau)
    c, C = rng.normal(size=len(X)), rng.normal(size=(len(X), 3))
    J = np.asarray(net.gradient_rows(acts, delta, layers), dtype=np.float64)
    cd = c.astype(delta.dtype)[:, None]
    got = {"backward": net.backward(acts, delta, layers),
           "backward_weighted": net.backward(acts, delta * cd, layers),
           "backward_many": net.backward_many(acts, delta, layers, C),
           "gradient_gram": net.gradient_gram(acts, delta, layers),
           "gradient_square_norms": net.gradient_square_norms(acts, delta, layers),
           "gradient_moments": np.stack(net.gradient_moments(theta, X, y, tau))}
    want = {"backward": J.sum(axis=0), "backward_weighted": J.T @ c,
            "backward_many": J.T @ C, "gradient_gram": J @ J.T,
            "gradient_square_norms": np.einsum("ij,ij->i", J, J),
            "gradient_moments": np.stack([J.sum(axis=0), (J * J).sum(axis=0)])}
    return J, got, want


def _per_row_finite_differences(net, theta, X, y, tau, h=1e-6):
    fd = np.empty((len(X), net.dim))
    for j in range(net.dim):
        e = np.zeros(net.dim)
        e[j] = h
        fd[:, j] = (net.loglik_rows(theta + e, X, y, tau)
                    - net.loglik_rows(theta - e, X, y, tau)) / (2 * h)
    return fd


@pytest.mark.parametrize("output,k", [("softmax", 3), ("sigmoid", 1), ("gaussian", 2)])
@pytest.mark.parametrize("activation", ["logistic", "tanh", "relu", "identity"])
@pytest.mark.parametrize("hidden", [(), (5,), (4, 3)])
def test_backward_reductions_agree_with_each_other_and_finite_differences(output, k,
                                                                         activation, hidden):
    # The six passes share one backward recursion: the per-row gradients
    # (gradient_rows) match central differences of the per-row log
    # likelihoods, and backward, backward_many, gradient_gram,
    # gradient_square_norms and gradient_moments are the same reductions of them.
    rng = np.random.default_rng(2)
    net = MLP(4, hidden, k, activation, output)
    X = rng.normal(size=(7, 4))
    y = _data(output, 7, rng)
    theta = rng.normal(size=net.dim)
    J, got, want = _reductions(net, theta, X, y, 1.7, rng)
    fd = _per_row_finite_differences(net, theta, X, y, 1.7)
    np.testing.assert_allclose(J, fd, rtol=1e-5, atol=1e-6)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10,
                                   atol=1e-12 * max(1.0, np.abs(want[name]).max()),
                                   err_msg=name)
    # float32 data: the same recursion in float32, to float32 precision.
    J32, got32, _ = _reductions(net, theta, X.astype(np.float32), y, 1.7,
                                np.random.default_rng(3))
    _, got64, _ = _reductions(net, theta, X, y, 1.7, np.random.default_rng(3))
    assert got32["backward"].dtype == np.float64 and np.allclose(J32, J, rtol=1e-3, atol=1e-4)
    for name in got:
        scale = np.abs(got64[name]).max()
        np.testing.assert_allclose(got32[name], got64[name], rtol=1e-3, atol=1e-4 * scale,
                                   err_msg=name)


def test_backward_reductions_negative_control_without_the_activation_slope(monkeypatch):
    # A recursion that drops the activation slope (delta = delta W^T only)
    # fails the finite-difference check, and every pass built on it changes.
    rng = np.random.default_rng(2)
    net = MLP(4, (4, 3), 3, "tanh", "softmax")
    X = rng.normal(size=(7, 4))
    y = _data("softmax", 7, rng)
    theta = rng.normal(size=net.dim)
    _, right, _ = _reductions(net, theta, X, y, 1.0, np.random.default_rng(0))
    fd = _per_row_finite_differences(net, theta, X, y, 1.0)

    def no_slope(self, acts, delta, layers):
        for layer in range(self.n_layers - 1, -1, -1):
            yield layer, acts[layer], delta
            if layer:
                delta = delta @ layers[layer][0].T

    monkeypatch.setattr(MLP, "_layer_errors", no_slope)
    J, wrong, _ = _reductions(net, theta, X, y, 1.0, np.random.default_rng(0))
    assert not np.allclose(J, fd, rtol=1e-5, atol=1e-6)
    for name in right:
        assert not np.allclose(wrong[name], right[name], rtol=1e-5), name


def test_float32_inputs_stay_float32_and_agree():
    rng = np.random.default_rng(1)
    net = MLP(6, (8,), 3, "tanh", "softmax")
    X = rng.normal(size=(50, 6))
    y = rng.integers(0, 3, 50)
    theta = net.glorot_init(rng)
    acts, z = net.forward(theta, X.astype(np.float32))
    assert z.dtype == np.float32 and acts[1].dtype == np.float32
    ll32, g32 = net.loglik_and_grad(theta, X.astype(np.float32), y)
    ll64, g64 = net.loglik_and_grad(theta, X, y)
    assert g32.dtype == np.float64 and isinstance(ll32, float)
    assert ll32 == pytest.approx(ll64, rel=1e-5)
    assert np.allclose(g32, g64, rtol=1e-3, atol=1e-4)


def test_softmax_loglik_is_multinomial_of_linear_model():
    rng = np.random.default_rng(2)
    net = MLP(3, (), 4, "relu", "softmax")
    X = rng.normal(size=(20, 3))
    y = rng.integers(0, 4, 20)
    theta = rng.normal(size=net.dim)
    (W, b), = net.unpack(theta)
    z = X @ W + b
    expected = z[np.arange(20), y] - np.log(np.exp(z).sum(axis=1))
    assert np.allclose(net.loglik_rows(theta, X, y), expected)


def _posterior(shape=1.0, rate=1.0, output="gaussian"):
    rng = np.random.default_rng(3)
    net = MLP(5, (7,), 2 if output == "gaussian" else 3, "tanh", output)
    X = rng.normal(size=(200, 5))
    y = _data(output, 200, rng)
    model = MLPModel(net, X, y)
    return HierarchicalPosterior(model, net.layer_of_each_weight(), net.glorot_init,
                                 prior_shape=shape, prior_rate=rate), net


def _ks_pvalues(post, net, shape_offset=0.0, n=4000):
    """KS p-values of Gibbs draws of each lambda_l and of tau against their exact
    Gamma conditionals (shape shifted by ``shape_offset`` for the negative control)."""
    rng = np.random.default_rng(4)
    theta = 0.3 * rng.normal(size=net.dim)
    hyper = Hyperparameters(np.ones(post.n_groups), 1.0)
    draws = [post.sample_hyper(rng, theta, hyper)[0] for _ in range(n)]
    lam = np.array([d.precisions for d in draws])
    tau = np.array([d.noise_precision for d in draws])
    groups = net.layer_of_each_weight()
    p = []
    for g in range(post.n_groups):
        shape = post.prior_shape + 0.5 * np.sum(groups == g) + shape_offset
        rate = post.prior_rate + 0.5 * np.sum(theta[groups == g] ** 2)
        p.append(stats.kstest(lam[:, g], stats.gamma(shape, scale=1 / rate).cdf).pvalue)
    ssr = post.model.sum_squared_residuals(theta)
    shape = post.prior_shape + 0.5 * post.n_obs * 2 + shape_offset
    rate = post.prior_rate + 0.5 * ssr
    p.append(stats.kstest(tau, stats.gamma(shape, scale=1 / rate).cdf).pvalue)
    return np.array(p)


def test_gibbs_step_draws_the_exact_gamma_conditionals():
    post, net = _posterior(shape=2.0, rate=0.5)
    p = _ks_pvalues(post, net)
    # Three independent KS tests: Bonferroni at 1e-3 overall.
    assert p.min() > 1e-3 / 3, p


def test_gibbs_negative_control_wrong_shape_fails():
    post, net = _posterior(shape=2.0, rate=0.5)
    # The conditional of a wrong shape (one more) must be rejected by the same test.
    p = _ks_pvalues(post, net, shape_offset=1.0)
    assert not p.min() > 1e-3 / 3, p


def test_point_hyper_holds_prior_mean_and_tau_mode():
    post, net = _posterior(shape=2.0, rate=0.5)
    theta = np.zeros(net.dim)
    hyper, cost = post.point_hyper(theta)
    assert np.allclose(hyper.precisions, 4.0)
    ssr = post.model.sum_squared_residuals(theta)
    assert hyper.noise_precision == pytest.approx((2.0 + 200 - 1) / (0.5 + ssr / 2))
    assert cost == 200


# ---------------------------------------------------------------------------
# Samplers on a linear "network" with a Gaussian output: exact conjugate posterior.

N, M, LAM, TAU = 1000, 500, 50.0, 1.0


def _linear_problem(lam=LAM, tau=TAU):
    """The linear "network" and its exact Gaussian posterior ``(post, Z, y, H, mean)``.

    Also used by tests/test_configurational_temperature.py (with its own
    prior precision).
    """
    rng = np.random.default_rng(11)
    X = rng.normal(size=(N, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 + rng.normal(size=N)
    net = MLP(2, (), 1, "identity", "gaussian")
    model = MLPModel(net, X, y)
    post = HierarchicalPosterior(model, net.layer_of_each_weight(), net.glorot_init,
                                 prior_precision=lam, noise_precision=tau)
    Z = np.column_stack([X, np.ones(N)])            # weights then bias, as the flat layout
    H = tau * Z.T @ Z + lam * np.eye(3)
    mean = linalg.solve(H, tau * Z.T @ y)
    return post, Z, y, H, mean


def _minibatch_noise_cov(Z, y, theta):
    """Covariance of the (n/m)-scaled minibatch gradient sum (without replacement)."""
    g = TAU * Z * (y - Z @ theta)[:, None]
    C = np.cov(g.T)
    return (N * N / M) * (1 - (M - 1) / (N - 1)) * C


def _predicted_cov(method, eta, alpha, H, V):
    """Stationary covariance of the discretised chain on this Gaussian target.

    SGLD: ``x' = (I - eta H) x + eta xi + sqrt(2 eta) z``.  SG-HMC in the SGD
    form: ``theta' = theta + v``, ``v' = (1 - alpha) v - eta H theta' + eta xi
    + N(0, 2 alpha eta)``.  Both linear, so a discrete Lyapunov equation.
    """
    d = len(H)
    if method == "sgld":
        A = np.eye(d) - eta * H
        return linalg.solve_discrete_lyapunov(A, eta * eta * V + 2 * eta * np.eye(d))
    A = np.block([[np.eye(d), np.eye(d)],
                  [-eta * H, (1 - alpha) * np.eye(d) - eta * H]])
    Q = np.zeros((2 * d, 2 * d))
    Q[d:, d:] = eta * eta * V + 2 * alpha * eta * np.eye(d)
    return linalg.solve_discrete_lyapunov(A, Q)[:d, :d]


class _WrongScaling(HierarchicalPosterior):
    """Negative control: minibatch sum not scaled by n/m."""

    def gradient_estimator(self, subsample_size, hyper):
        est = super().gradient_estimator(subsample_size, hyper)
        orig = est.grad
        n_over_m = self.n_obs / subsample_size

        def grad(position, rng):
            g = orig(position, rng)
            prior = -est._prior_precision * position
            return (g - prior) / n_over_m + prior

        est.grad = grad
        return est


def _check_against_exact(method, post, Z, y, H, mean, n_draws, eta, alpha=0.5):
    config = ModelSG(method=method, subsample_size=M, learning_rate=eta, momentum_decay=alpha,
                     n_networks_kept=n_draws)
    res = run_model_chain(config, np.random.default_rng(5), post, 50, n_draws)
    draws = res.draws
    assert np.all(np.isfinite(draws))
    ess = np.atleast_1d(ess_bulk(draws[None]))
    V = _minibatch_noise_cov(Z, y, mean)
    cov = _predicted_cov(method, eta, alpha, H, V)
    sd_pred = np.sqrt(np.diag(cov))
    sd_true = np.sqrt(np.diag(linalg.inv(H)))
    sd_hat = draws.std(axis=0, ddof=1)
    mcse = sd_hat / np.sqrt(ess)
    # Means: no bias on a Gaussian target (linear drift, zero-mean noise).
    z_mean = np.abs(draws.mean(axis=0) - mean) / mcse
    # Sds: against the exact stationary sd of the discretised chain; the
    # theory's inflation over the true posterior sd is small here.
    z_sd = np.abs(sd_hat - sd_pred) / (sd_hat / np.sqrt(2 * ess))
    return z_mean, z_sd, sd_pred / sd_true, ess


@pytest.mark.parametrize("method,eta", [("sgld", 2e-5), ("sghmc", 2e-5)])
def test_linear_network_reproduces_conjugate_posterior(method, eta):
    post, Z, y, H, mean = _linear_problem()
    z_mean, z_sd, inflation, ess = _check_against_exact(method, post, Z, y, H, mean, 500, eta)
    assert ess.min() > 200, ess
    assert np.all(inflation < 1.1), inflation
    assert np.all(z_mean < 4), z_mean
    assert np.all(z_sd < 4), z_sd


@pytest.mark.parametrize("method,eta", [("sgld", 2e-5), ("sghmc", 2e-5)])
def test_linear_network_negative_control_wrong_minibatch_scaling(method, eta):
    _, Z, y, H, mean = _linear_problem()
    net = MLP(2, (), 1, "identity", "gaussian")
    bad = _WrongScaling(MLPModel(net, Z[:, :2], y), net.layer_of_each_weight(),
                        net.glorot_init, prior_precision=LAM, noise_precision=TAU)
    z_mean, z_sd, _, ess = _check_against_exact(method, bad, Z, y, H, mean, 300, eta)
    assert ess.min() > 50, ess
    assert not (np.all(z_mean < 4) and np.all(z_sd < 4))


# ------------------------------------------------ forward mode (SBPS, eq. 10)
@pytest.mark.parametrize("output,k", [("softmax", 3), ("sigmoid", 1), ("gaussian", 2)])
@pytest.mark.parametrize("activation", ["logistic", "tanh", "relu", "identity"])
@pytest.mark.parametrize("hidden", [(), (5,), (4, 3)])
def test_per_row_directional_derivatives_match_finite_differences(output, k, activation,
                                                                  hidden):
    """The forward-mode pass gives d_i = u^T grad log p(y_i | x_i, theta) for every row."""
    rng = np.random.default_rng(2)
    net = MLP(4, hidden, k, activation, output)
    X = rng.normal(size=(13, 4))
    y = _data(output, 13, rng)
    theta = rng.normal(size=net.dim)
    u = rng.normal(size=net.dim)
    ll, grad, along = net.loglik_grad_and_tangent(theta, X, y, 1.7)
    ll0, grad0 = net.loglik_and_grad(theta, X, y, 1.7)
    assert ll == ll0 and np.array_equal(grad, grad0)
    d, curvature = along(u)
    h = 1e-6
    fd = (net.loglik_rows(theta + h * u, X, y, 1.7)
          - net.loglik_rows(theta - h * u, X, y, 1.7)) / (2 * h)
    assert d.shape == (13,) and d.dtype == np.float64
    assert np.allclose(d, fd, rtol=1e-5, atol=1e-6)
    assert d.sum() == pytest.approx(u @ grad, rel=1e-10, abs=1e-10)
    assert curvature >= -1e-12
    # Negative control: derivatives along another direction do not match.
    assert not np.allclose(along(rng.normal(size=net.dim))[0], fd, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("output,k", [("softmax", 3), ("sigmoid", 1), ("gaussian", 2)])
def test_gauss_newton_curvature_is_the_hessian_of_a_linear_network(output, k):
    """Without hidden layers the network is a GLM and the Gauss-Newton curvature
    along u is the exact second derivative of -sum_i log p along u; with a
    nonlinear hidden layer it is the PSD part only (it still bounds nothing)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(17, 4))
    y = _data(output, 17, rng)
    for hidden, exact in [((), True), ((6,), False)]:
        net = MLP(4, hidden, k, "tanh", output)
        theta = rng.normal(size=net.dim)
        u = rng.normal(size=net.dim)
        _, _, along = net.loglik_grad_and_tangent(theta, X, y, 1.7)
        h = 1e-4
        f = [-net.loglik_rows(theta + s * h * u, X, y, 1.7).sum() for s in (-1, 0, 1)]
        second = (f[0] - 2 * f[1] + f[2]) / h ** 2
        assert np.isclose(along(u)[1], second, rtol=1e-4) == exact


def test_minibatch_observation_noise_variance_is_eq_10():
    """variance_along(u) = (n^2/m)(1 - m/n) Var_S[u^T grad l_i] over the minibatch,
    against a per-row loop; curvature_along adds the prior's u^T Lambda u."""
    rng = np.random.default_rng(4)
    net = MLP(3, (4,), 3, "logistic", "softmax")
    n, m = 60, 12
    X = rng.normal(size=(n, 3))
    y = rng.integers(0, 3, n)
    post = HierarchicalPosterior(MLPModel(net, X, y), net.layer_of_each_weight(),
                                 net.glorot_init, prior_precision=0.5)
    hyper, _ = post.init_hyper(rng, np.zeros(net.dim))
    est = post.gradient_estimator(m, hyper)
    theta = rng.normal(size=net.dim)
    u = rng.normal(size=net.dim)
    obs = est.observe(theta, np.random.default_rng(7))
    idx = np.sort(sample_without_replacement(np.random.default_rng(7), n, m))
    rows = np.array([net.loglik_and_grad(theta, X[i:i + 1], y[i:i + 1])[1] for i in idx])
    assert np.allclose(obs.grad, (n / m) * rows.sum(0) - 0.5 * theta)
    proj = rows @ u
    expected = (n * n / m) * (1 - m / n) * proj.var(ddof=1)
    assert obs.variance_along(u) == pytest.approx(expected, rel=1e-10)
    # Negative control: without the finite-population correction it differs.
    assert obs.variance_along(u) != pytest.approx((n * n / m) * proj.var(ddof=1), rel=1e-3)
    _, _, along = net.loglik_grad_and_tangent(theta, X[idx], y[idx])
    assert obs.curvature_along(u) == pytest.approx(0.5 * u @ u + (n / m) * along(u)[1])


@pytest.mark.parametrize("output,k", [("softmax", 3), ("sigmoid", 1), ("gaussian", 2)])
@pytest.mark.parametrize("hidden", [(), (5,)])
def test_gauss_newton_products_are_symmetric_and_give_the_curvature(output, k, hidden):
    """u^T (G u) is the Gauss-Newton curvature along u and v^T G u = u^T G v;
    negative control: the product with another vector does not give it."""
    rng = np.random.default_rng(6)
    net = MLP(4, hidden, k, "tanh", output)
    X = rng.normal(size=(9, 4))
    y = _data(output, 9, rng)
    theta, u, v = rng.normal(size=(3, net.dim))
    _, _, along = net.loglik_grad_and_tangent(theta, X, y, 1.7)
    G = along.gauss_newton_product
    assert u @ G(u) == pytest.approx(along(u)[1], rel=1e-8)
    assert v @ G(u) == pytest.approx(u @ G(v), rel=1e-8)
    assert v @ G(v) != pytest.approx(along(u)[1], rel=1e-3)
