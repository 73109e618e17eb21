"""Chebyshev integration times (Wang and Wibisono, Algorithm 2) and their time scale."""

import numpy as np
import pytest

from bayesian_subsample.samplers import HMC, HMCECS, hmc
from bayesian_subsample.samplers.chebyshev import (
    chebyshev_roots,
    chebyshev_times,
    constant_times,
    eigenvalue_range,
)
from bayesian_subsample.samplers.metric import metric_from_mass_matrix

from .test_samplers import GaussianTarget


def test_roots_are_the_shifted_chebyshev_roots():
    m, L, K = 0.01, 1.0, 7
    r = chebyshev_roots(m, L, K)
    assert np.all((r > m) & (r < L)) and np.all(np.diff(r) > 0)
    # Roots of T_K(h(lambda)) with h mapping [m, L] onto [-1, 1].
    h = (L + m - 2 * r) / (L - m)
    np.testing.assert_allclose(np.cos(K * np.arccos(h)), 0.0, atol=1e-12)
    times = chebyshev_times(m, L, K, rng=np.random.default_rng(0))
    np.testing.assert_allclose(np.sort(times), np.sort(0.5 * np.pi / np.sqrt(r)))
    np.testing.assert_allclose(chebyshev_times(4.0, 4.0, 3), 0.25 * np.pi)
    np.testing.assert_allclose(constant_times(4.0, 2), [0.25 * np.pi] * 2)
    with pytest.raises(ValueError):
        chebyshev_roots(0.0, 1.0, 3)


def test_eigenvalue_range_in_the_metric():
    H = np.array([[4.0, 1.0], [1.0, 2.0]])
    assert eigenvalue_range(H, np.linalg.inv(H)) == pytest.approx((1.0, 1.0))
    m, L = eigenvalue_range(H, np.array([0.25, 0.5]))
    ev = np.linalg.eigvals(np.diag([0.25, 0.5]) @ H)
    assert (m, L) == pytest.approx((ev.min(), ev.max()))


def _lag1_autocorrelation(time, h=4.0, n_iter=1500, seed=0):
    """Near-exact HMC (tiny leapfrog steps) on N(0, 1/h) integrating for ``time``."""
    target = GaussianTarget([0.0], [[1.0 / h]])
    metric = metric_from_mass_matrix(np.eye(1))
    n_steps = 40  # leapfrog phase error ~ (step sqrt(h))^2 / 24 < 1e-4
    params = hmc.HMCParams(time / n_steps, n_steps, metric)
    rng = np.random.default_rng(seed)
    state = hmc.init(np.array([0.3]), target)
    xs = np.empty(n_iter)
    for i in range(n_iter):
        state, _ = hmc.step(rng, state, target, params)
        xs[i] = state.position[0]
    x = xs - xs.mean()
    return float(x[1:] @ x[:-1] / (x @ x))


def test_quarter_period_decorrelates_exact_dynamics():
    """For Hessian h the schedule's time is (pi/2)/sqrt(h): lag-1 autocorrelation 0.

    Negative control: the paper's formula read in its own time scale,
    (pi/2)/sqrt(2h), leaves autocorrelation cos(pi / (2 sqrt 2)) ~ 0.44.
    """
    h = 4.0
    time = chebyshev_times(h, h, 1)[0]
    assert time == pytest.approx(0.5 * np.pi / np.sqrt(h))
    n_iter = 1500
    assert abs(_lag1_autocorrelation(time, h, n_iter)) < 4 / np.sqrt(n_iter)
    wrong = _lag1_autocorrelation(0.5 * np.pi / np.sqrt(2 * h), h, n_iter)
    assert wrong == pytest.approx(np.cos(np.pi / (2 * np.sqrt(2))), abs=4 / np.sqrt(n_iter))


@pytest.mark.parametrize("config", [
    HMC(integration_time="chebyshev", mass_matrix="diagonal"),
    HMCECS(integration_time="chebyshev", mass_matrix="diagonal", subsample_size=500,
           n_blocks=50),
    HMC(integration_time="quarter_period", mass_matrix="diagonal"),
])
def test_schedules_run_from_the_samplers(config):
    from bayesian_subsample.datasets import make_higgs_like
    from bayesian_subsample.likelihood import TallPosterior
    from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily

    # Strongly correlated features: a diagonal metric leaves a wide [m, L].
    X, y, _ = make_higgs_like(3000, n_features=3, correlation=0.95, random_state=1)
    model = GLM(X, y.astype(float), LogisticFamily())
    post = TallPosterior(model, GaussianPrior(np.full(4, 10.0)))
    rng = np.random.default_rng(0)
    prep = config.prepare(rng, post)
    res = config.run_chain(rng, post, prep, 100, 200)
    steps = res.stats["n_steps"]
    if config.integration_time == "chebyshev":
        assert len(np.unique(steps)) > 1  # the times vary along the cycle
    else:
        assert len(np.unique(steps)) == 1
    assert res.stats["acceptance_rate"].mean() > 0.5
