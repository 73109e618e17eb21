"""Configurational temperature: 1 on exact draws, the theory's value on hot SGLD chains."""

import numpy as np
import pytest
from scipy import linalg

from bayesian_subsample.diagnostics import configurational_temperature
from bayesian_subsample.samplers._sg_model import ModelSG, run_model_chain

from .test_mlp import N, _linear_problem


def _gaussian(d=6, seed=3):
    """A correlated Gaussian with condition number 1000, two blocks of coordinates."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    eig = np.geomspace(1.0, 1000.0, d)
    H = (Q * eig) @ Q.T
    return H, Q, eig, np.arange(d) % 2


def test_exact_draws_have_temperature_one_in_every_block():
    H, _, _, blocks = _gaussian()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, len(H))) @ np.linalg.cholesky(linalg.inv(H)).T
    t = configurational_temperature(lambda z: -H @ z, x, blocks, n_probes=4, random_state=1)
    assert np.all(np.abs(t.temperature - 1) < 4 * t.standard_error), t
    assert np.all(t.standard_error < 0.1)


def test_negative_control_draws_too_wide_in_the_stiffest_direction():
    # Variance x4 along the stiffest eigen-direction only: both blocks hot
    # (the direction is not aligned with coordinates), T = 1 + 3 * w with w
    # the direction's share of each block's curvature.
    H, Q, eig, blocks = _gaussian()
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, len(H))) / np.sqrt(eig)
    z[:, -1] *= 2.0
    x = z @ Q.T
    t = configurational_temperature(lambda v: -H @ v, x, blocks, n_probes=4, random_state=1)
    u = Q[:, -1]
    share = np.array([np.sum(eig[-1] * u[blocks == b] ** 2) / np.trace(H[blocks == b][:, blocks == b])
                      for b in (0, 1)])
    expected = 1 + 3 * share
    assert np.all(t.temperature - 1 > 4 * t.standard_error), t
    assert np.all(np.abs(t.temperature - expected) < 4 * t.standard_error), (t, expected)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="n_states, d"):
        configurational_temperature(lambda z: z, np.zeros(3))
    with pytest.raises(ValueError, match="one per position"):
        configurational_temperature([lambda z: z], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="blocks"):
        configurational_temperature(lambda z: z, np.zeros((3, 2)), blocks=[0, 0, 1])


# SGLD on a linear "network" (Bayesian linear regression, exact posterior) with a
# small minibatch: the uncorrected gradient noise heats the chain, by the amount
# a discrete Lyapunov equation predicts (Chen, Fox and Guestrin, 2014, eqs. 6-7).
M, LAM = 50, 5.0  # minibatch and prior precision; N rows come with the problem (test_mlp)


def _linear():
    post, Z, y, H, mean = _linear_problem(lam=LAM, tau=1.0)
    return post, post.model, Z, y, H, mean


def _sgld_temperature(eta, Z, y, H, mean):
    """``tr(H^2 S) / tr(H)``, ``S`` the stationary covariance of SGLD with minibatch noise."""
    g = Z * (y - Z @ mean)[:, None]
    V = (N * N / M) * (1 - (M - 1) / (N - 1)) * np.cov(g.T)
    A = np.eye(3) - eta * H
    S = linalg.solve_discrete_lyapunov(A, eta * eta * V + 2 * eta * np.eye(3))
    return np.trace(H @ H @ S) / np.trace(H)


@pytest.mark.parametrize("eta", [2e-5, 1e-4])
def test_sgld_chain_runs_at_the_predicted_temperature(eta):
    post, model, Z, y, H, mean = _linear()
    res = run_model_chain(ModelSG("sgld", M, eta, n_networks_kept=400),
                          np.random.default_rng(5), post, 20, 400)
    t = configurational_temperature(
        lambda x: model.full_loglik_and_grad(x)[1] - LAM * x, res.draws, n_probes=2,
        random_state=0)
    predicted = _sgld_temperature(eta, Z, y, H, mean)
    assert abs(t.temperature[0] - predicted) < 4 * t.standard_error[0], (t, predicted)
    if eta == 1e-4:
        # The hot chain: gradient noise about doubles the temperature, and the
        # diagnostic tells it from 1 (the negative control of "T = 1").
        assert predicted > 1.8
        assert t.temperature[0] - 1 > 4 * t.standard_error[0]


def _fit_regressor(batch_size, learning_rate):
    import warnings

    from bayesian_subsample import BayesianMLPRegressor

    rng = np.random.default_rng(11)
    X = rng.normal(size=(N, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 + rng.normal(size=N)
    est = BayesianMLPRegressor(hidden_layer_sizes=(), activation="identity", sampler="sgld",
                               batch_size=batch_size, learning_rate=learning_rate,
                               n_warmup=20, n_draws=200, n_networks_kept=200, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return est, X, y


def test_estimator_temperature_tells_a_hot_chain_from_a_faithful_one():
    # Full batches and a small step: no gradient noise, T = 1.  Minibatches of
    # 50 and a 5x larger step: the minibatch noise heats every layer.
    cool, X, y = _fit_regressor(N, 2e-5)
    t = cool.configurational_temperature(X, y, n_probes=2, random_state=0)
    assert np.all(np.abs(t.temperature - 1) < 4 * t.standard_error), t
    hot, X, y = _fit_regressor(M, 1e-4)
    t = hot.configurational_temperature(X, y, n_probes=2, random_state=0)
    assert np.all(t.temperature - 1 > 4 * t.standard_error), t
    assert np.all(t.temperature > 1.5), t


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimator_temperature_bad_input():
    from bayesian_subsample import BayesianMLPClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.where(X[:, 0] > 0, "a", "b")
    sgd = BayesianMLPClassifier(hidden_layer_sizes=(3,), sampler="sgd", n_warmup=2, n_draws=2,
                                random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="point estimate"):
        sgd.configurational_temperature(X, y)
    clf = BayesianMLPClassifier(hidden_layer_sizes=(3,), sampler="sgld", n_warmup=2, n_draws=4,
                                n_networks_kept=4, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="not seen in fit"):
        clf.configurational_temperature(X, np.where(y == "a", "c", y))
    t = clf.configurational_temperature(X, y, n_probes=1, random_state=0)
    assert t.temperature.shape == (2,) and t.per_state.shape == (8, 2)
