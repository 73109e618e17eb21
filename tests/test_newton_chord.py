"""The theta* search: chord steps with the subset's Hessian, then one order-2 pass.

``TallPosterior.reference_expansion(..., hessian=H)`` replaces order-2
Newton passes by order-1 passes (value and gradient only) while far from
the mode; the returned expansion must still be at a point whose exact
Newton decrement is within the tolerance, as without chord steps.
"""

import numpy as np
import pytest

from .conftest import exact_gradient_and_hessian, make_tall_logistic

TOL = 0.01


_posterior = make_tall_logistic


def _exact_decrement(post, theta):
    g, H = exact_gradient_and_hessian(post, theta)
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
    takes chord steps and ends with one order-2 pass, reporting every pass's
    decrement.  With the 0.01 tolerance (``estimator="signed"``) the passes
    start with chord passes and end below the tolerance; HMC-ECS's default
    variance rule (tests/test_centre_check.py) stops at the first point its
    check accepts: chord passes, if any, then one order-2 pass whose measured
    sigma^2 is within the rule, and no more passes than the tolerance."""
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import HMCECS, _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 2000)
    post, _ = _posterior()
    X, y = post.model.X, post.model.y
    infos = {}
    for estimator in ("signed", "perturbed"):
        est = BayesianLogisticRegression(sampler=HMCECS(estimator=estimator), n_chains=1,
                                         n_warmup=20, n_draws=5, random_state=0)
        infos[estimator] = info = est.fit(X, y).sampler_info_[0]
        kinds = [step["kind"] for step in info["setup_newton"]]
        assert kinds[:-1] == ["chord"] * (len(kinds) - 1) and kinds[-1] == "newton"
        assert info["setup_passes"] == len(kinds) == len(info["setup_pass_times"])
    tol_log = infos["signed"]["setup_newton"]
    assert tol_log[0]["kind"] == "chord" and tol_log[-1]["decrement"] <= TOL
    rule_log = infos["perturbed"]["setup_newton"]
    assert rule_log[-1]["sigma2"] <= 0.1
    assert len(rule_log) <= len(tol_log)


def _subset_mode_counting(monkeypatch, post, min_subset):
    """``subset_mode`` on ``post`` with ``WARM_START_MIN_SUBSET = min_subset``;
    returns its theta and Hessian and the sizes of the row sets of every
    order-2 evaluation."""
    from types import SimpleNamespace

    from bayesian_subsample.samplers import _hmc_family

    monkeypatch.setattr(_hmc_family, "WARM_START_MIN_SUBSET", min_subset)
    monkeypatch.setattr(_hmc_family, "WARM_START_ROWS", 2000)
    sizes = []
    real = post.model.sums

    def counted(theta, order=1, idx=None, rows=None):
        if order == 2:
            sizes.append(len(rows[0]))
        return real(theta, order, idx, rows)

    monkeypatch.setattr(post.model, "sums", counted)
    config = SimpleNamespace(reference_fraction=0.1)
    theta, _, H = _hmc_family.subset_mode(config, np.random.default_rng(5), post)
    return theta, H, sizes


def test_large_subsets_start_newton_at_a_sub_subset_mode(monkeypatch):
    """Warm start (``WARM_START_MIN_SUBSET``): the search on a large subset
    starts at the mode of every k-th of its rows and so makes fewer order-2
    evaluations on all of them, and ends at the same mode within the
    search's tolerance; below the threshold it starts where it always did
    (the negative control: more evaluations on the whole subset)."""
    cold, H_cold, sizes_cold = _subset_mode_counting(monkeypatch, _posterior()[0], 10**9)
    warm, H_warm, sizes_warm = _subset_mode_counting(monkeypatch, _posterior()[0], 10_000)
    full = [s for s in sizes_warm if s == 20_000]
    assert set(sizes_cold) == {20_000}
    assert 0 < len(full) < len(sizes_cold)
    assert set(sizes_warm) - {20_000} == {2000}          # the sub-subset: 20,000 // 10th
    # Both stop at a Newton decrement below 2 tol (tol = 1e-8), i.e. within
    # sqrt(2 tol) of the mode in the norm of the subset posterior's Hessian.
    gap = warm - cold
    assert np.sqrt(gap @ H_cold @ gap) <= 2 * np.sqrt(2e-8)
    np.testing.assert_allclose(H_warm, H_cold, rtol=1e-4)
