"""The variance rule that ends the theta* search (CentreCheck, issue 15).

The control variates are unbiased for any theta*; theta* only sets the
variance of the difference estimator.  The search refines theta* while the
variance predicted at the point it would pass over next is above a fraction
of the sampler's target, and no longer.  Checked here: a far centre is
refined and a near one is not (and the decision matches the variance
actually measured there); the predicted decrements match the observed ones;
the estimator reports the passes, their times and the predictions; and the
rule changes neither the small fixed problems (fingerprints) nor where
validation fails.
"""

import numpy as np
import pytest

from bayesian_subsample.likelihood import CentreCheck, TallPosterior
from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily

N, D, M_MIN, TARGET = 200_000, 8, 1000, 1.0


def _posterior(n=N, d=D, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    beta = rng.normal(0.0, 0.5, d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ beta) - 0.3))).astype(float)
    return TallPosterior(GLM(X, y, LogisticFamily(), chunk_size=20_000),
                         GaussianPrior(np.full(d + 1, 10.0))), rng


def _exact(post, theta):
    """Gradient and negative Hessian of the log posterior (one order-2 pass)."""
    _, g, h = post.model.sums(theta, 2)
    g = g + post.prior.logdensity_and_grad(theta)[1]
    return g, -(h + post.prior.hessian(theta))


def _full_mode(post):
    ex, _, _ = post.reference_expansion(np.zeros(post.dim), tol=1e-12)
    return ex.theta_star, ex.neg_hessian


def _subset(post, rng, m=10_000):
    idx = np.sort(rng.choice(post.n_obs, m, replace=False))
    theta0, _, H = post.mode(idx=idx, return_hessian=True)
    return idx, theta0, H


def _sigma2_measured(post, centre, mode, H, rng, n_draws=20):
    """sigma^2 at m = M_MIN over posterior draws around the true mode, on
    20,000 random rows (the quantity the check predicts), theta* = centre."""
    ex = post.expand(centre, 2)
    L = np.linalg.cholesky(H)
    thetas = [mode + np.linalg.solve(L.T, rng.standard_normal(post.dim))
              for _ in range(n_draws)]
    V, _ = post.difference_variance(ex, thetas, rng)
    return post.n_obs ** 2 * float(np.quantile(V, 0.75)) / M_MIN


def test_far_centre_is_refined_and_near_centre_is_not():
    post, rng = _posterior()
    mode, H = _full_mode(post)
    idx, _, H_sub = _subset(post, rng)
    check = CentreCheck(post, H_sub, idx, np.random.default_rng(1), M_MIN, TARGET)
    L = np.linalg.cholesky(H)
    # Near: the mode itself, and a point 1 sd away (decrement 1).
    u = np.random.default_rng(2).standard_normal(post.dim)
    u /= np.linalg.norm(u)
    near = mode + np.linalg.solve(L.T, u)
    assert check(mode, 0.0)
    assert check(near, 0.0, mean=mode)
    # Far: 200 sd away in the same direction (decrement 4e4).
    far = mode + 200 * np.linalg.solve(L.T, u)
    assert not check(far, 0.0, mean=mode)
    # The verdicts agree with the variance measured over the posterior draws.
    mrng = np.random.default_rng(4)
    assert _sigma2_measured(post, near, mode, H, mrng) <= 0.1 * TARGET
    assert _sigma2_measured(post, far, mode, H, mrng) > 0.1 * TARGET
    # Predicted sigma^2 within a factor of 3 of the measured one at the far
    # centre (both are upper quartiles over 20 draws of the same posterior).
    predicted = check.checks[-1]["sigma2"]
    measured = _sigma2_measured(post, far, mode, H, mrng)
    assert measured / 3 <= predicted <= 3 * measured

    # The search: from the far centre it makes passes until the check accepts;
    # from the mode it makes the one order-2 pass and stops.
    log = []
    ex, _, passes = post.reference_expansion(far, hessian=H_sub, log=log, check=check)
    assert passes >= 2 and passes == len(log)
    assert log[-1]["kind"] == "newton" and log[-1]["sigma2"] <= 0.1 * TARGET
    g, Hx = _exact(post, ex.theta_star)
    assert float(g @ np.linalg.solve(Hx, g)) < 200 ** 2 / 100
    log = []
    _, _, passes = post.reference_expansion(mode, hessian=H_sub, log=log, check=check)
    assert passes == 1 and [e["kind"] for e in log] == ["newton"]


def test_stopping_rule_drops_passes_that_tol_would_make():
    """From a 1% subset mode the variance rule makes fewer passes than the
    decrement tolerance 0.01 (negative control: the same search without the
    check), and where it stops the measured variance is within the rule."""
    post, rng = _posterior(n=1_000_000, d=8)
    idx, theta0, H_sub = _subset(post, rng)
    log_tol, log_chk = [], []
    _, _, passes_tol = post.reference_expansion(theta0, hessian=H_sub, log=log_tol)
    check = CentreCheck(post, H_sub, idx, np.random.default_rng(1), M_MIN, TARGET)
    ex, _, passes_chk = post.reference_expansion(theta0, hessian=H_sub, log=log_chk,
                                                 check=check)
    assert passes_chk < passes_tol
    assert log_chk[-1]["decrement"] > 0.01  # the tolerance would have refined further
    mode, H = _full_mode(post)
    assert _sigma2_measured(post, ex.theta_star, mode, H, np.random.default_rng(5)) \
        <= 0.1 * TARGET


def test_predicted_decrements_match_the_observed_ones():
    """The subset mode's expected decrement (its sampling error) and the
    decrement after the first chord step, against the exact ones.  Each
    decrement is about a scaled chi-square with dim = 9 degrees of freedom,
    so the check is on the mean over 4 independent subsets (36 degrees of
    freedom: a ratio outside [0.4, 2.5] has probability about 1e-3)."""
    post, rng = _posterior(n=1_000_000, d=8)
    ratios0, ratios1 = [], []
    for k in range(4):
        idx, theta0, H_sub = _subset(post, rng)
        check = CentreCheck(post, H_sub, idx, np.random.default_rng(k), M_MIN, TARGET)
        g, _ = _exact(post, theta0)
        step = np.linalg.solve(H_sub, g)
        ratios0.append(float(g @ step) / check.subset_decrement(theta0))
        g1, _ = _exact(post, theta0 + step)
        ratios1.append(float(g1 @ np.linalg.solve(H_sub, g1))
                       / check.chord_decrement(theta0, step))
    assert 0.4 <= np.mean(ratios0) <= 2.5
    assert 0.4 <= np.mean(ratios1) <= 2.5
    # Negative control: a step in the wrong direction is not what the
    # prediction is for; the decrement there is far above it.
    g_bad, _ = _exact(post, theta0 - step)
    assert float(g_bad @ np.linalg.solve(H_sub, g_bad)) > 10 * check.chord_decrement(theta0, step)


def test_subset_grows_only_when_that_saves_the_chord_pass():
    from bayesian_subsample.samplers import _hmc_family

    class Check:
        def __init__(self, lam, limit):
            self.lam, self.limit, self.asked = lam, limit, []

        def subset_decrement(self, theta):
            return self.lam

        def __call__(self, theta, lam, exact=True):
            self.asked.append(lam)
            return lam <= self.limit

    n, s = 10**8, 10**6
    lam = 31 * (n / s - 1)
    # Accepted as it is: no growth.
    assert _hmc_family._grown_subset(Check(lam, 2 * lam), None, n, s) is None
    # Half the decrement needs about twice the rows.
    grown = _hmc_family._grown_subset(Check(lam, lam / 2), None, n, s)
    assert grown == 2 * s
    # A quarter of the decrement would need more than REFERENCE_FRACTION_MAX.
    assert _hmc_family._grown_subset(Check(lam, lam / 10), None, n, s) is None


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimator_reports_the_rule_and_starts_at_the_mode_estimate(monkeypatch):
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 2000)
    post, _ = _posterior()
    X, y = post.model.X, post.model.y
    est = BayesianLogisticRegression(n_chains=1, n_warmup=20, n_draws=5, random_state=0)
    est.fit(X, y)
    info = est.sampler_info_[0]
    log = info["setup_newton"]
    assert info["setup_passes"] == len(log) == len(info["setup_pass_times"])
    assert sum(info["setup_pass_times"]) == pytest.approx(info["setup_pass_seconds"])
    assert info["setup_subset_size"] >= 2000
    # Every pass the rule planned carries the prediction it was planned on.
    assert all("predicted_decrement" in e and "predicted_sigma2" in e for e in log)
    assert log[-1]["kind"] == "newton" and log[-1]["sigma2"] <= 0.1
    # Without the rule (estimator="signed" keeps the 0.01 tolerance) the
    # search ends at a decrement below 0.01.
    from bayesian_subsample.samplers import HMCECS

    est2 = BayesianLogisticRegression(sampler=HMCECS(estimator="signed"), n_chains=1,
                                      n_warmup=20, n_draws=5, random_state=0)
    est2.fit(X, y)
    last = est2.sampler_info_[0]["setup_newton"][-1]
    assert last["decrement"] <= 0.01 and "sigma2" not in last


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_multinomial_search_with_the_rule(monkeypatch):
    """Several linear predictors: no a-priori prediction (the chord steps
    keep the observed contraction), the order-2 check still applies."""
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 2000)
    rng = np.random.default_rng(0)
    n, d = 200_000, 4
    X = rng.standard_normal((n, d))
    W = rng.normal(0, 0.5, (3, d))
    logits = X @ W.T
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1)
    est = BayesianLogisticRegression(n_chains=1, n_warmup=20, n_draws=5, random_state=0)
    est.fit(X, y)
    log = est.sampler_info_[0]["setup_newton"]
    assert log[-1]["kind"] == "newton"
    assert log[-1]["decrement"] <= 0.01 or log[-1]["sigma2"] <= 0.1


def _flat_direction(H, k=1):
    """``H`` with row and column ``k`` zeroed: a direction of zero curvature
    (a column that carries no information under a flat prior), exactly
    singular, so its Cholesky factorisation fails on any platform."""
    H = H.copy()
    H[k, :] = 0.0
    H[:, k] = 0.0
    return H


def test_rank_deficient_subset_hessian_builds_no_check():
    from bayesian_subsample.samplers import _hmc_family

    post, rng = _posterior(n=30_000, d=3)
    idx, _, H_sub = _subset(post, rng, m=3000)
    H_bad = _flat_direction(H_sub)

    def build(p, h, i):
        return CentreCheck(p, h, i, np.random.default_rng(1), M_MIN, TARGET)

    # Negative control: built unguarded, the check raises.
    with pytest.raises(np.linalg.LinAlgError):
        build(post, H_bad, idx)
    # Guarded: no check, and a well-posed Hessian still gives one.
    assert _hmc_family._built_check(build, post, H_bad, idx) is None
    assert isinstance(_hmc_family._built_check(build, post, H_sub, idx), CentreCheck)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_fit_with_a_rank_deficient_subset_hessian_uses_the_tolerance(monkeypatch):
    """A subset Hessian without a Cholesky factor: the fit builds no check
    and the search stops at the 0.01 tolerance through Newton steps (the
    chord steps fall back on the same failure), as before the rule.
    Negative control: the unguarded check makes the same fit raise."""
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 2000)
    original = _hmc_family.subset_mode

    def degenerate(config, rng, posterior, return_idx=False):
        theta, cost, hessian, idx, rows = original(config, rng, posterior, return_idx=True)
        return theta, cost, _flat_direction(hessian), idx, rows

    monkeypatch.setattr(_hmc_family, "subset_mode", degenerate)
    post, _ = _posterior(n=200_000, d=3)
    X, y = post.model.X, post.model.y

    def fit():
        return BayesianLogisticRegression(n_chains=1, n_warmup=20, n_draws=5,
                                          random_state=0).fit(X, y)

    info = fit().sampler_info_[0]
    log = info["setup_newton"]
    assert log[-1]["kind"] == "newton" and log[-1]["decrement"] <= 0.01
    assert not any("predicted_decrement" in e or "sigma2" in e for e in log)
    monkeypatch.setattr(_hmc_family, "_built_check",
                        lambda build, posterior, hessian, idx: build(posterior, hessian, idx))
    with pytest.raises(np.linalg.LinAlgError):
        fit()


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_constant_column_under_a_vague_prior_fits():
    """The reviewer's case (a constant column beside the intercept, prior
    scale 1e8, chord path from a 15,000-row subset): the subset Hessian is
    numerically singular; the fit must complete with finite draws."""
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import HMCECS

    rng = np.random.default_rng(0)
    X = rng.standard_normal((30_000, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(len(X)) > 0).astype(int)
    X[:, 1] = 1.0
    est = BayesianLogisticRegression(sampler=HMCECS(reference_fraction=0.5), n_chains=1,
                                     n_warmup=50, n_draws=20, random_state=1,
                                     prior_scale=1e8, intercept_prior_scale=1e8)
    est.fit(X, y)
    assert np.all(np.isfinite(est.coef_))


def test_verdict_only_check_gives_the_exact_verdict():
    """``exact=False`` (the subset-growth candidates) may stop a clear refusal
    after a few draws; the verdicts are those of the full statistic, a
    stopped refusal logs a lower bound of it, and an acceptance is exact."""
    post, rng = _posterior()
    mode, H = _full_mode(post)
    idx, _, H_sub = _subset(post, rng)
    u = np.random.default_rng(2).standard_normal(post.dim)
    u /= np.linalg.norm(u)
    L = np.linalg.cholesky(H)
    stopped = 0
    for k in (0.0, 1.0, 3.0, 10.0, 30.0, 200.0):
        centre = mode + k * np.linalg.solve(L.T, u)
        for lam in (0.0, 50.0, 5000.0):
            full = CentreCheck(post, H_sub, idx, np.random.default_rng(1), M_MIN, TARGET)
            quick = CentreCheck(post, H_sub, idx, np.random.default_rng(1), M_MIN, TARGET)
            verdict = full(centre, lam, mean=mode)
            assert quick(centre, lam, mean=mode, exact=False) == verdict, (k, lam)
            a, b = full.checks[-1], quick.checks[-1]
            assert b["baseline"] == a["baseline"]
            if b["exact"]:
                assert b["sigma2"] == a["sigma2"]
            else:
                assert not verdict and b["sigma2"] <= a["sigma2"]
                stopped += 1
    # The quick path did stop early on the clear refusals (else it saves nothing).
    assert stopped >= 3
