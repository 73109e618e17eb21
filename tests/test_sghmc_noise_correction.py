"""SG-HMC's gradient-noise correction B_hat = eta V_hat / 2 (Chen, Fox and Guestrin, 2014, §3.2-3.3).

* ``V_hat u`` and ``(s I + k V_hat)^{-1} w`` against explicit per-row gradients
  on a tiny network (centring and the finite-population factor included; the
  variants without either are told apart);
* the corrected chain on the linear-network posterior (minibatches of 50 of
  1,000) reads configurational temperature 1 where the uncorrected one is hot,
  and reproduces the exact posterior moments where the uncorrected one fails;
* the Crank-Nicolson friction stays stable where ``B_hat``'s largest
  eigenvalue exceeds 2 (an explicit friction step diverges there);
* bad options are named, divergence is reported;
* ``"fisher_lowrank"``: the pooled top-k operator against a dense
  eigendecomposition of explicit per-row gradients, and its chain at
  temperature 1 on the linear-network posterior.
"""

import numpy as np
import pytest
from scipy import linalg

from bayesian_subsample.diagnostics import configurational_temperature
from bayesian_subsample.likelihood._model_target import (
    HierarchicalPosterior, LowRankGradientNoise, MinibatchGradientNoise)
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import ModelSG, run_model_chain

from .test_mlp import N, _linear_problem


# ---------------------------------------------------------------- the operator
def _tiny(output="softmax", seed=0, n=40, m=12):
    rng = np.random.default_rng(seed)
    net = MLP(3, (4, 2), 3 if output == "softmax" else 1, "tanh", output)
    X = rng.normal(size=(n, 3))
    y = rng.integers(0, 3, n) if output == "softmax" else rng.normal(size=n)
    model = MLPModel(net, X, y)
    theta = rng.normal(size=net.dim)
    idx = np.sort(rng.choice(n, m, replace=False))
    return net, model, theta, idx, rng


def _per_row_gradients(model, theta, idx, tau=1.0):
    return np.array([model.loglik_and_grad(theta, np.array([i]), tau)[1] for i in idx])


@pytest.mark.parametrize("output", ["softmax", "gaussian"])
@pytest.mark.parametrize("centred", [False, True])
def test_noise_operator_matches_explicit_per_row_gradients(output, centred):
    net, model, theta, idx, rng = _tiny(output)
    n, m = model.n_obs, len(idx)
    tau = 1.7
    ll, g, rows = model.loglik_grad_and_rows(theta, idx, tau)
    ll0, g0 = model.loglik_and_grad(theta, idx, tau)
    assert ll == ll0 and np.array_equal(g, g0)     # the same gradient as the sampler's
    J = _per_row_gradients(model, theta, idx, tau)
    np.testing.assert_allclose(rows.gram(), J @ J.T, rtol=1e-10, atol=1e-12)
    noise = MinibatchGradientNoise(rows, n, centred=centred)
    fpc = (n * n / m) * (1 - m / n)
    covariance = fpc * np.cov(J.T)                        # centred, divisor m - 1
    fisher = fpc * (J.T @ J) / m                          # about zero, divisor m
    V = covariance if centred else fisher
    u = rng.normal(size=net.dim)
    Vu = noise.matvec(u)
    np.testing.assert_allclose(Vu, V @ u, rtol=1e-9, atol=1e-12 * np.abs(V @ u).max())
    # Negative controls: the other centring, or no finite-population factor,
    # gives a measurably different product.
    for wrong in (fisher if centred else covariance, V / (1 - m / n)):
        assert np.linalg.norm(wrong @ u - Vu) > 1e-3 * np.linalg.norm(Vu)
    # The shifted solve (Woodbury) and the largest eigenvalue.
    s, k = 1.005, 0.3 / np.linalg.eigvalsh(V)[-1]
    w = rng.normal(size=net.dim)
    np.testing.assert_allclose(noise.shifted_solve(s, k, w),
                               np.linalg.solve(s * np.eye(net.dim) + k * V, w), rtol=1e-8)
    np.testing.assert_allclose(noise.max_eigenvalue(n_iter=500, tol=1e-12),
                               np.linalg.eigvalsh(V)[-1], rtol=1e-6)


@pytest.mark.parametrize("output", ["softmax", "gaussian"])
def test_rows_without_the_plain_gradient_are_the_same_maps(output, monkeypatch):
    # with_grad=False: no backward pass, grad None, and every map of the
    # rows bit for bit as with the gradient (it is a pure skip).
    net, model, theta, idx, rng = _tiny(output)
    ll, g, rows = model.loglik_grad_and_rows(theta, idx, 1.7)
    calls = []
    backward = MLP.backward
    monkeypatch.setattr(MLP, "backward", lambda *a: calls.append(1) or backward(*a))
    ll0, g0, rows0 = model.loglik_grad_and_rows(theta, idx, 1.7, with_grad=False)
    assert calls == [] and g0 is None and ll0 == ll
    c, C, u = rng.normal(size=len(idx)), rng.normal(size=(len(idx), 3)), rng.normal(size=net.dim)
    for name, args in [("apply", (u,)), ("transpose_apply", (c,)),
                       ("transpose_apply_many", (C,)), ("gram", ()), ("jacobian", ()),
                       ("square_norms", ())]:
        assert np.array_equal(getattr(rows0, name)(*args), getattr(rows, name)(*args)), name
    # The plain gradient is the rows' unweighted sum (what with_grad=True adds).
    np.testing.assert_allclose(rows0.transpose_apply(np.ones(len(idx))), g, rtol=1e-12)


def test_noise_operator_of_a_single_row_and_of_the_whole_data_is_zero():
    # m = n: no sampling noise (finite-population factor 0); m = 1: no estimate.
    net, model, theta, _, rng = _tiny()
    _, _, rows = model.loglik_grad_and_rows(theta, np.arange(model.n_obs))
    u = rng.normal(size=net.dim)
    assert np.all(MinibatchGradientNoise(rows, model.n_obs).matvec(u) == 0)


# ------------------------------------------------- chains on a known posterior
M, LAM, ALPHA = 50, 5.0, 0.1


def _chain(eta, correction, seed, n_draws, **options):
    post, Z, y, H, mean = _linear_problem(lam=LAM, tau=1.0)
    res = run_model_chain(ModelSG("sghmc", M, eta, ALPHA, n_networks_kept=n_draws,
                                  noise_correction=correction, **options),
                          np.random.default_rng(seed), post, 20, n_draws)
    return res, post, Z, y, H, mean


def _temperature(post, draws):
    return configurational_temperature(
        lambda x: post.model.full_loglik_and_grad(x)[1] - LAM * x, draws, n_probes=2,
        random_state=0)


def _corrected_inflation(eta, H):
    """Stationary covariance of the corrected chain with the *population* V,
    in units of the posterior: theta' = theta + v, (I + A/2) v' = (I - A/2) v
    - eta H theta' + xi, A = alpha I + eta V / 2, cov(xi) = 2 eta A
    (the discretisation bias the chain keeps; about 1 / (1 - eta lambda / 4))."""
    d = len(H)
    # The population V at the posterior mean is what the chain's V_hat
    # estimates; for this linear-Gaussian model it barely varies with theta.
    post, Z, y, _, mean = _linear_problem(lam=LAM, tau=1.0)
    g = Z * (y - Z @ mean)[:, None]
    V = (N * N / M) * (1 - (M - 1) / (N - 1)) * np.cov(g.T)
    A = ALPHA * np.eye(d) + 0.5 * eta * V
    P = np.linalg.inv(np.eye(d) + A / 2)
    T = np.block([[np.eye(d), np.eye(d)],
                  [-P @ (eta * H), P @ (np.eye(d) - A / 2) - P @ (eta * H)]])
    Q = np.zeros((2 * d, 2 * d))
    Q[d:, d:] = P @ (2 * eta * A) @ P.T
    return linalg.solve_discrete_lyapunov(T, Q)[:d, :d]


@pytest.mark.parametrize("correction", ["fisher", "covariance"])
def test_corrected_chain_has_temperature_one_where_the_uncorrected_one_is_hot(correction):
    # eta = 2e-5, alpha = 0.1: the gradient noise eta^2 V is about twice the
    # injected 2 alpha eta, so B_hat = 0 runs at T ~ 3 (negative control).
    eta = 2e-5
    hot, post, *_ = _chain(eta, None, 5, 300)
    t_hot = _temperature(post, hot.draws)
    assert t_hot.temperature[0] - 1 > 4 * t_hot.standard_error[0], t_hot
    assert t_hot.temperature[0] > 2.0, t_hot
    res, post, *_ = _chain(eta, correction, 5, 300)
    t = _temperature(post, res.draws)
    assert abs(t.temperature[0] - 1) < 4 * t.standard_error[0], t
    beta = res.extra["beta_hat_max"]
    # B_hat's largest eigenvalue per pass: NaN in warm-up (no correction there).
    assert len(beta) == 320 and np.all(np.isnan(beta[:20])) and np.all(np.isfinite(beta[20:]))
    assert res.extra["diverged_at"] is None


def _batch_means_se(x, n_batches=20):
    b = x[: len(x) // n_batches * n_batches].reshape(n_batches, -1).mean(axis=1)
    return b.std(ddof=1) / np.sqrt(n_batches)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [5, 6])
def test_corrected_chain_reproduces_the_linear_posterior(seed):
    # Posterior mean and variances within 4 MCSE (batch means) plus the
    # discretisation bias the corrected chain keeps (Lyapunov, population V);
    # the uncorrected chain's variances are ~3x too wide and fail.
    eta = 2e-5
    for correction, should_pass in (("fisher", True), (None, False)):
        res, post, Z, y, H, mean = _chain(eta, correction, seed, 1000)
        d = res.draws
        exact = np.linalg.inv(H)
        bias = np.abs(np.diag(_corrected_inflation(eta, H)) - np.diag(exact))
        ok = True
        for j in range(3):
            ok &= abs(d[:, j].mean() - mean[j]) <= 4 * _batch_means_se(d[:, j])
            sq = (d[:, j] - mean[j]) ** 2
            ok &= abs(sq.mean() - exact[j, j]) <= 4 * _batch_means_se(sq) + bias[j]
        assert ok == should_pass, (correction, d.var(axis=0) / np.diag(exact))


def test_crank_nicolson_friction_is_stable_where_explicit_friction_diverges():
    # eta = 2.5e-4: the population B_hat = eta V / 2 has largest eigenvalue
    # about 3, where the explicit friction step r' = (1 - a) r of Algorithm 2
    # has |1 - a| > 1 (it diverges); the corrected chain stays finite and keeps
    # T within 4 SE of its discretisation value (Lyapunov with the population
    # V; about 1 / (1 - eta lambda_max / 4) = 1.07).
    eta = 2.5e-4
    res, post, Z, y, H, mean = _chain(eta, "fisher", 7, 300)
    g = Z * (y - Z @ mean)[:, None]
    V = (N * N / M) * (1 - (M - 1) / (N - 1)) * np.cov(g.T)
    explicit = np.eye(3) - (ALPHA * np.eye(3) + 0.5 * eta * V)
    assert np.max(np.abs(np.linalg.eigvalsh(explicit))) > 1.5
    assert res.extra["diverged_at"] is None
    beta = np.asarray(res.extra["beta_hat_max"])
    assert np.nanmedian(beta) > 2.0, np.nanmedian(beta)
    t = _temperature(post, res.draws)
    expected = np.trace(H @ _corrected_inflation(eta, H) @ H) / np.trace(H)
    assert abs(t.temperature[0] - expected) < 4 * t.standard_error[0], (t, expected)


def test_divergence_is_caught_and_reported():
    # Full batches: V_hat = 0 (finite-population factor), so the friction is
    # alpha alone and eta lambda = 50 > 4 diverges; the chain reports it.
    # (With minibatches of 50 the same step is held by the friction B_hat.)
    post, *_ = _linear_problem(lam=LAM, tau=1.0)
    res = run_model_chain(ModelSG("sghmc", N, 0.05, ALPHA, n_networks_kept=5,
                                  noise_correction="fisher"),
                          np.random.default_rng(0), post, 2, 5)
    assert res.extra["diverged_at"] is not None
    assert np.all(np.isnan(res.draws[-1]))          # slots after the divergence


# ------------------------------------------------- pooled low-rank estimate
@pytest.mark.parametrize("output", ["softmax", "gaussian"])
@pytest.mark.parametrize("pooled, via", [(20, "gram"), (60, "weights")])
def test_lowrank_operator_is_the_top_eigenpairs_of_the_pooled_fisher(output, pooled, via):
    # dim = 35: 20 pooled rows decompose the 20 x 20 Gram matrix, 60 the
    # 35 x 35 J^T J ("auto" picks the smaller); both against the dense reference.
    net, model, theta, idx, rng = _tiny(output, n=80, m=pooled)
    n, m, k, tau = model.n_obs, 8, 5, 1.7
    _, _, rows = model.loglik_grad_and_rows(theta, idx, tau)
    J = _per_row_gradients(model, theta, idx, tau)
    np.testing.assert_allclose(rows.jacobian(), J, rtol=1e-10, atol=1e-12 * np.abs(J).max())
    C = rng.normal(size=(len(idx), 3))
    np.testing.assert_allclose(rows.transpose_apply_many(C), J.T @ C, rtol=1e-10,
                               atol=1e-12 * np.abs(J.T @ C).max())
    op = LowRankGradientNoise(rows, n, m, k)
    assert op.via == via
    other = LowRankGradientNoise(rows, n, m, k, via="gram" if via == "weights" else "weights")
    np.testing.assert_allclose(other.s, op.s, rtol=1e-9)
    # Dense reference: V = (n^2 / m)(1 - m/n) J^T J / R for steps of m rows,
    # estimated from R pooled rows, truncated to its top k eigenpairs.
    V = (n * n / m) * (1 - m / n) * (J.T @ J) / len(idx)
    w, U = np.linalg.eigh(V)
    Vk = (U[:, -k:] * w[-k:]) @ U[:, -k:].T
    np.testing.assert_allclose(op.s, w[::-1][:k], rtol=1e-9)
    np.testing.assert_allclose(op.U.T @ op.U, np.eye(k), atol=1e-12)
    u = rng.normal(size=net.dim)
    np.testing.assert_allclose(op.matvec(u), Vk @ u, rtol=1e-9, atol=1e-12 * np.abs(Vk @ u).max())
    shift, scale = 1.005, 0.3 / w[-1]
    np.testing.assert_allclose(op.shifted_solve(shift, scale, u),
                               np.linalg.solve(shift * np.eye(net.dim) + scale * Vk, u),
                               rtol=1e-9)
    assert op.max_eigenvalue() == pytest.approx(w[-1], rel=1e-9)
    # Negative controls: the factor of the pooled size (R) in place of the
    # minibatch's (m), and one rank fewer, are measurably different.
    wrong_factor = V * m / len(idx)
    wrong_rank = (U[:, -k + 1:] * w[-k + 1:]) @ U[:, -k + 1:].T
    v = U[:, -k] + u / np.linalg.norm(u)      # along the k-th eigenvector and elsewhere
    for wrong in (wrong_factor, wrong_rank):
        assert np.linalg.norm(wrong @ v - op.matvec(v)) > 0.1 * w[-k]


def _lowrank_temperatures(seed, n_draws):
    # The setting of the per-minibatch test above; V from 4 x 50 fresh rows
    # per pass.  Full rank (3): T = 1 within 4 SE.  Negative controls, which
    # must fail the same assertion: the uncorrected chain (T ~ 3), and the
    # estimate truncated to rank 1, whose two other directions keep their
    # gradient noise (z = 10-11 over seeds 0-5 at 300 draws, T = 2.2-2.4;
    # z = 5.6-7.0 at 100 draws).
    out = {}
    for rank in (3, 1):
        res, post, *_ = _chain(2e-5, "fisher_lowrank", seed, n_draws, noise_rank=rank)
        assert res.extra["diverged_at"] is None
        out[rank] = (res, _temperature(post, res.draws))
    hot, post, *_ = _chain(2e-5, None, seed, n_draws)
    out[None] = (hot, _temperature(post, hot.draws))
    return out


def _check_lowrank_temperatures(out, n_draws):
    for control in (None, 1):
        t_hot = out[control][1]
        assert not abs(t_hot.temperature[0] - 1) < 4 * t_hot.standard_error[0], (control, t_hot)
    res, t = out[3]
    assert abs(t.temperature[0] - 1) < 4 * t.standard_error[0], t
    _, t1 = out[1]
    assert t1.temperature[0] - 1 > 4 * t1.standard_error[0], t1
    beta = res.extra["beta_hat_max"]
    assert len(beta) == 20 + n_draws
    assert np.all(np.isnan(beta[:20])) and np.all(np.isfinite(beta[20:]))
    # The estimate costs its pooled rows once per pass: 4 x 50 on top of the
    # pass's 50 updates x 50 rows.
    assert np.all(np.asarray(res.stats["n_obs_evaluated"])[-10:] == 50 * 50 + 200)


def test_lowrank_chain_has_temperature_one_where_uncorrected_and_truncated_ones_are_hot():
    # A few seconds: the 3 x 3 J^T J route makes each estimate cheap.
    _check_lowrank_temperatures(_lowrank_temperatures(5, 300), 300)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_lowrank_corrected_chain_temperature_other_seeds(seed):
    _check_lowrank_temperatures(_lowrank_temperatures(seed, 300), 300)


def test_lowrank_divergence_is_caught_and_reported():
    post, *_ = _linear_problem(lam=LAM, tau=1.0)
    res = run_model_chain(ModelSG("sghmc", N, 0.05, ALPHA, n_networks_kept=5,
                                  noise_correction="fisher_lowrank", noise_rank=3),
                          np.random.default_rng(0), post, 2, 5)
    assert res.extra["diverged_at"] is not None
    assert np.all(np.isnan(res.draws[-1]))


# ---------------------------------------------------------------- bad options
def test_bad_options_are_named():
    post, *_ = _linear_problem(lam=LAM, tau=1.0)
    with pytest.raises(ValueError, match="noise_correction must be"):
        ModelSG("sghmc", M, noise_correction="diagonal").validate(N)
    with pytest.raises(ValueError, match="SGLD has no friction"):
        ModelSG("sgld", M, noise_correction="fisher").validate(N)
    with pytest.raises(ValueError, match="at least 2"):
        ModelSG("sghmc", 1, noise_correction="fisher").validate(N)
    with pytest.raises(ValueError, match="noise_rank=8 sets the pooled low-rank"):
        ModelSG("sghmc", M, noise_correction="fisher", noise_rank=8).validate(N)
    with pytest.raises(ValueError, match="noise_pool=2 sets the pooled low-rank"):
        ModelSG("sghmc", M, noise_pool=2).validate(N)
    with pytest.raises(ValueError, match="noise_rank=300 exceeds the 200 pooled rows"):
        ModelSG("sghmc", M, noise_correction="fisher_lowrank", noise_rank=300).validate(N)
    with pytest.raises(ValueError, match="noise_rank=4 exceeds the 3 weights"):
        ModelSG("sghmc", M, noise_correction="fisher_lowrank", noise_rank=4).prepare(
            np.random.default_rng(0), post)
    with pytest.raises(ValueError, match="noise_refresh"):
        ModelSG("sghmc", M, noise_correction="fisher_lowrank", noise_refresh=0).validate(N)
    with pytest.raises(ValueError, match="SGLD has no friction"):
        ModelSG("sgld", M, noise_correction="fisher_lowrank").validate(N)
    ModelSG("sghmc", M, noise_correction="fisher_lowrank", noise_rank=3).validate(N)


def test_estimators_pass_the_option_through():
    import warnings

    from bayesian_subsample import BayesianMLPClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=200) > 0).astype(int)
    est = BayesianMLPClassifier(hidden_layer_sizes=(3,), batch_size=20, n_chains=1,
                                n_warmup=3, n_draws=5, n_networks_kept=5,
                                noise_correction="fisher", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    info = est.sampler_info_[0]
    assert info["noise_correction"] == "fisher" and len(info["beta_hat_max"]) == 8
    assert est.predict_proba(X).shape == (200, 2)
    with pytest.raises(ValueError, match="SGLD has no friction"):
        BayesianMLPClassifier(sampler="sgld", noise_correction="fisher", n_chains=1,
                              n_warmup=1, n_draws=1).fit(X, y)


def test_lowrank_defaults_work_on_small_data_and_set_options_are_checked():
    # n = 20: the default rank (32) is clipped to the 20 pooled rows and to
    # the network's 13 weights; a rank the user sets above either is refused
    # before sampling, with the way out.
    import warnings

    from bayesian_subsample import BayesianMLPClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(int)
    kw = dict(hidden_layer_sizes=(3,), n_chains=1, n_warmup=2, n_draws=3, random_state=0,
              noise_correction="fisher_lowrank")
    assert ModelSG(noise_correction="fisher_lowrank").noise_settings(20, 13) == (13, 20)
    assert ModelSG(noise_correction="fisher_lowrank").noise_settings(20) == (20, 20)
    assert ModelSG(noise_correction="fisher_lowrank").noise_settings(10 ** 5, 10 ** 4) == (
        32, 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = BayesianMLPClassifier(**kw).fit(X, y)
        assert est.network_.dim == 13
        assert np.all(np.isfinite(est.sampler_info_[0]["beta_hat_max"][2:]))
        assert est.predict_proba(X).shape == (20, 2)
        # The estimator's own options reach the sampler.
        est = BayesianMLPClassifier(noise_rank=2, noise_pool=1, noise_refresh=10, **kw).fit(X, y)
    assert (est.sampler_.noise_rank, est.sampler_.noise_pool, est.sampler_.noise_refresh) == (
        2, 1, 10)
    assert {"noise_rank", "noise_pool", "noise_refresh"} <= set(est.get_params())
    for bad, match in [(dict(noise_rank=21), "noise_rank=21 exceeds the 20 pooled rows"),
                       (dict(noise_rank=14), "noise_rank=14 exceeds the 13 weights"),
                       (dict(noise_pool=0), "noise_pool"),
                       (dict(noise_rank=2, noise_correction="fisher"), "noise_rank=2 sets")]:
        with pytest.raises(ValueError, match=match):
            BayesianMLPClassifier(**{**kw, **bad}).fit(X, y)


class _WithoutPerRowProducts:
    """A row model that hides its per-row products (as a model without them would)."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        if name in ("loglik_grad_and_rows", "loglik_grad_and_tangent"):
            raise AttributeError(name)
        return getattr(self._model, name)


@pytest.mark.parametrize("method, correction, needed", [
    ("sghmc", "fisher", "loglik_grad_and_rows"),
    ("sbps", None, "loglik_grad_and_tangent"),
])
def test_a_model_without_the_needed_products_is_refused_before_sampling(method, correction,
                                                                          needed):
    post, *_ = _linear_problem(lam=LAM, tau=1.0)
    config = ModelSG(method, M, noise_correction=correction)
    config.prepare(np.random.default_rng(0), post)  # control: the MLP model has them
    post.model = _WithoutPerRowProducts(post.model)
    with pytest.raises(ValueError, match=needed):
        config.prepare(np.random.default_rng(0), post)


def test_lowrank_fused_crank_nicolson_update_is_the_two_step_one():
    net, model, theta, idx, rng = _tiny("softmax", n=40, m=20)
    _, _, rows = model.loglik_grad_and_rows(theta, idx)
    op = LowRankGradientNoise(rows, model.n_obs, 8, 5)
    r, w = rng.normal(size=(2, net.dim))
    a, k = 0.02, 0.3 / op.max_eigenvalue()
    two_step = op.shifted_solve(1 + a / 2, k, (1 - a / 2) * r - k * op.matvec(r) + w)
    np.testing.assert_allclose(op.crank_nicolson(r, w, a, k), two_step, rtol=1e-10)
    # Control: without the friction's k V r on the right-hand side it differs.
    wrong = op.shifted_solve(1 + a / 2, k, (1 - a / 2) * r + w)
    assert np.linalg.norm(wrong - two_step) > 1e-3 * np.linalg.norm(two_step)


@pytest.mark.parametrize("refresh, per_pass", [(None, [2700] * 6), (25, [2900] * 6),
                                               (100, [2700, 2500] * 3)])
def test_lowrank_estimate_schedule(refresh, per_pass):
    # 50 updates of 50 rows per pass; an estimate costs its 4 x 50 pooled rows.
    # None: one per pass; 25: two per pass; 100: one every other pass (the
    # estimate is kept across the pass boundary and the Gibbs step).
    res, *_ = _chain(2e-5, "fisher_lowrank", 0, 6, noise_rank=3, noise_refresh=refresh)
    assert res.extra["diverged_at"] is None
    assert np.asarray(res.stats["n_obs_evaluated"]).ravel()[-6:].tolist() == per_pass


@pytest.mark.parametrize("pooled, via", [(20, "gram"), (60, "weights")])
def test_lowrank_operator_keeps_float32_data_in_float32(pooled, via):
    net, model, theta, idx, rng = _tiny("softmax", n=80, m=pooled)
    model32 = MLPModel(net, model.X.astype(np.float32), model.y)
    _, _, rows = model.loglik_grad_and_rows(theta, idx)
    _, _, rows32 = model32.loglik_grad_and_rows(theta, idx)
    op, op32 = LowRankGradientNoise(rows, 80, 8, 5), LowRankGradientNoise(rows32, 80, 8, 5)
    assert op.via == op32.via == via
    assert op.U.dtype == np.float64 and op32.U.dtype == np.float32
    r, w = rng.normal(size=(2, net.dim))
    a, k = 0.02, 0.3 / op.max_eigenvalue()
    ref = op.crank_nicolson(r, w, a, k)
    out = op32.crank_nicolson(r, w, a, k)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


def test_pooled_estimate_leaves_out_rows_without_gradient_and_is_unchanged():
    # Gaussian outputs fitted exactly on half the rows: those rows' gradients
    # are zero, the pooled estimate leaves them out (n_rows_used) and equals
    # the estimate from all pooled rows; the square norms are the Gram diagonal.
    from bayesian_subsample.likelihood._gradients import sample_without_replacement

    net, model, theta, _, rng = _tiny("gaussian", n=40)
    y = rng.normal(size=40)
    fitted = np.arange(40) % 2 == 0
    y[fitted] = net.predict_output(theta, model.X)[fitted, 0]
    post = HierarchicalPosterior(MLPModel(net, model.X, y), net.layer_of_each_weight(),
                                 net.glorot_init, prior_precision=1.0, noise_precision=1.0)
    est = post.gradient_estimator(8, post.point_hyper(theta)[0])
    _, _, rows = post.model.loglik_grad_and_rows(theta, np.arange(40))
    np.testing.assert_allclose(rows.square_norms(), np.diag(rows.gram()), rtol=1e-12)
    pruned = est.pooled_noise(theta, np.random.default_rng(3), 24, 4)
    idx = np.sort(sample_without_replacement(np.random.default_rng(3), 40, 24))
    _, _, all_rows = post.model.loglik_grad_and_rows(theta, idx)
    full = LowRankGradientNoise(all_rows, 40, 8, 4)
    assert pruned.n_pooled == 24 and pruned.n_rows_used == np.sum(~fitted[idx]) < 24
    np.testing.assert_allclose(pruned.s, full.s, rtol=1e-9)
    u = rng.normal(size=net.dim)
    np.testing.assert_allclose(pruned.matvec(u), full.matvec(u), rtol=1e-8,
                               atol=1e-10 * np.abs(full.matvec(u)).max())
    # Control: the subset's factor taken from its own size (not the pool's) differs.
    _, _, kept = post.model.loglik_grad_and_rows(theta, idx[~fitted[idx]])
    wrong = LowRankGradientNoise(kept, 40, 8, 4)
    assert abs(wrong.s[0] - full.s[0]) > 1e-3 * full.s[0]


def test_pooled_estimate_makes_no_backward_pass_of_a_plain_gradient(monkeypatch):
    from .test_sg_importance_minibatch import _AlwaysWithGradient, _count_backward

    net, model, theta, _, rng = _tiny("softmax", n=40)
    post = HierarchicalPosterior(model, net.layer_of_each_weight(), net.glorot_init)
    est = post.gradient_estimator(8, post.point_hyper(theta)[0])
    calls = _count_backward(monkeypatch)
    op = est.pooled_noise(theta, np.random.default_rng(3), 24, 4)
    assert calls == []
    # Negative control: the model that makes the gradient anyway is seen
    # (one backward pass of the 24 pooled rows), and the estimate is the same.
    post.model = _AlwaysWithGradient(model)
    ref = est.pooled_noise(theta, np.random.default_rng(3), 24, 4)
    assert calls == [24]
    u = rng.normal(size=net.dim)
    assert np.array_equal(op.s, ref.s) and np.array_equal(op.matvec(u), ref.matvec(u))


def test_lowrank_pool_too_large_for_memory_is_refused_before_sampling():
    # noise_pool=100 on MNIST-sized data: 50,000 pooled rows, a 20 GB Gram
    # matrix (dim > R); and a small network (dim <= R), whose (R, dim)
    # gradients are the matrix.  The defaults (4 minibatches) pass.
    big = ModelSG("sghmc", 500, noise_correction="fisher_lowrank", noise_pool=100)
    with pytest.raises(ValueError, match=r"noise_pool=100 pools 50000 rows .* noise_pool <= 23 "):
        big._check_estimate_memory(50_000, 79_510)
    wide = ModelSG("sghmc", 500, noise_correction="fisher_lowrank", noise_pool=3000)
    with pytest.raises(ValueError, match=r"noise_pool <= 2684 "):
        wide._check_estimate_memory(10 ** 8, 100)
    ModelSG("sghmc", 500, noise_correction="fisher_lowrank")._check_estimate_memory(50_000, 79_510)
    ModelSG("sghmc", 500, noise_correction="fisher_lowrank",
            noise_pool=2684)._check_estimate_memory(10 ** 8, 100)
