"""The theta* search: chord steps with the subset's Hessian, then one order-2 pass.

``TallPosterior.reference_expansion(..., hessian=H)`` replaces order-2
Newton passes by order-1 passes (value and gradient only) while far from
the mode; the returned expansion must still be at a point whose exact
Newton decrement is within the tolerance, as without chord steps.
"""

import numpy as np
import pytest

from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily

TOL = 0.01


def _posterior(n=200_000, d=8, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    beta = rng.normal(0.0, 0.5, d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ beta) - 0.3))).astype(float)
    return TallPosterior(GLM(X, y, LogisticFamily(), chunk_size=20_000),
                         GaussianPrior(np.full(d + 1, 10.0))), rng


def _exact_decrement(post, theta):
    _, g, h = post.model.sums(theta, 2)
    g = g + post.prior.logdensity_and_grad(theta)[1]
    H = -(h + post.prior.hessian(theta))
    return float(g @ np.linalg.solve(H, g))


def _subset_start(post, rng, m=10_000):
    idx = np.sort(rng.choice(post.n_obs, m, replace=False))
    return post.mode(idx=idx, return_hessian=True)


def test_subset_rows_are_gathered_once_and_give_the_same_sums():
    post, rng = _posterior(n=30_000)
    idx = np.sort(rng.choice(post.n_obs, 3000, replace=False))
    theta = np.linspace(-0.2, 0.2, post.dim)
    rows = post.model.rows(idx)
    for order in (0, 1, 2):
        for a, b in zip(post.model.sums(theta, order, rows=rows),
                        post.model.sums(theta, order, idx=idx)):
            assert np.array_equal(a, b)
    # The mode search gathers float32 rows as float32 (float32 pass code).
    sub = post.model.subset_rows(idx)
    assert sub[0].dtype == np.float32
    np.testing.assert_array_equal(sub[0], post.model.X[idx])
    theta1, _, H = post.mode(idx=idx, return_hessian=True)
    theta2, _ = post.mode(idx=idx)
    assert np.array_equal(theta1, theta2)
    # The returned Hessian is the scaled subset's at the last iterate.
    _, _, h = post.model.sums(theta1, 2, rows=sub)
    expected = -(post.n_obs / len(idx) * h + post.prior.hessian(theta1))
    np.testing.assert_allclose(H, expected, rtol=1e-6)


def test_chord_steps_reach_the_tolerance_with_one_order2_pass():
    post, rng = _posterior()
    theta0, _, H = _subset_start(post, rng)
    log = []
    ex, cost, passes = post.reference_expansion(theta0, hessian=H, log=log)
    kinds = [step["kind"] for step in log]
    assert kinds.count("newton") == 1 and kinds.count("backtrack") == 0
    assert passes == len(kinds) and cost == passes * post.n_obs
    assert _exact_decrement(post, ex.theta_star) <= TOL
    assert log[-1]["decrement"] == pytest.approx(_exact_decrement(post, ex.theta_star),
                                                 rel=1e-6)
    # Plain Newton from the same start: the same mode within the tolerance
    # (Mahalanobis distance^2 in the posterior's metric well below 4 tol).
    ref, _, ref_passes = post.reference_expansion(theta0)
    diff = ex.theta_star - ref.theta_star
    assert float(diff @ ref.neg_hessian @ diff) <= 4 * TOL
    assert ref_passes >= 2


def test_bad_chord_hessian_falls_back_to_newton_and_still_converges():
    """Negative control: a Hessian a third of the truth makes chord steps
    three times too long; the Armijo test stops them, Newton finishes, and
    it costs order-2 passes that the good Hessian did not need."""
    post, rng = _posterior()
    theta0, _, H = _subset_start(post, rng)
    log = []
    ex, _, _ = post.reference_expansion(theta0, hessian=H / 3.0, log=log)
    assert _exact_decrement(post, ex.theta_star) <= TOL
    assert [step["kind"] for step in log].count("newton") >= 2


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_fit_reports_chord_passes_on_tall_data(monkeypatch):
    """With a subset of at least CHORD_MIN_SUBSET rows the estimator's set-up
    makes one order-2 pass and reports every pass's decrement.  HMC-ECS
    stops the search by its estimator's variance (tests/test_centre_check.py),
    so the last decrement need not be below 0.01; the check's own verdict is
    reported with it."""
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 2000)
    post, _ = _posterior()
    X, y = post.model.X, post.model.y
    est = BayesianLogisticRegression(n_chains=1, n_warmup=20, n_draws=5, random_state=0)
    est.fit(X, y)
    info = est.sampler_info_[0]
    kinds = [step["kind"] for step in info["setup_newton"]]
    assert kinds.count("newton") == 1 and kinds[-1] == "newton"
    last = info["setup_newton"][-1]
    assert last["decrement"] <= TOL or last["sigma2"] <= 0.1
    assert info["setup_passes"] == len(kinds) == len(info["setup_pass_times"])
