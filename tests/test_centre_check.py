"""The variance rule that ends the theta* search (CentreCheck, issue 15).

The control variates are unbiased for any theta*; theta* only sets the
variance of the difference estimator.  The search refines theta* while the
variance predicted at the point it would pass over next is above a fraction
of the sampler's target, and no longer.  Checked here: a far centre is
refined and a near one is not (and the decision matches the variance
actually measured there); the predicted decrements match the observed ones;
the estimator reports the passes, their times and the predictions; the
draws with theta* left where the rule stops (decrement of order 10^2) match
quadrature; a subset Hessian without a Cholesky factor builds no check; and
the rule changes neither the small fixed problems (fingerprints) nor where
validation fails.
"""

import numpy as np
import pytest

from bayesian_subsample.likelihood import CentreCheck

from .conftest import exact_gradient_and_hessian as _exact
from .conftest import make_tall_logistic

N, D, M_MIN, TARGET = 200_000, 8, 1000, 1.0


def _posterior(n=N, d=D, seed=3):
    return make_tall_logistic(n, d, seed)


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
    # The mode, with an uncertainty of 1 about it, is accepted; the same mode
    # with a decrement of 1000 (~30 sd of uncertainty) is not.
    assert check(mode, 1.0)
    assert not check(mode, 1000.0)
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


def test_trace_of_the_score_covariance_matches_its_definition():
    """CentreCheck._trace_cov (one (dim, dim) product) against the definition
    mean_k (v_k - vbar)^T Sigma (v_k - vbar), row by row."""
    post, rng = _posterior(n=20_000, d=5)
    idx, theta0, H = _subset(post, rng, m=3_000)
    check = CentreCheck(post, H, idx, rng, M_MIN, TARGET)
    Z = np.column_stack([np.ones(400), rng.standard_normal((400, post.dim - 1))])
    w = rng.standard_normal(400)
    v = Z * w[:, None]
    dev = v - v.mean(axis=0)
    expected = float(np.mean(np.einsum("ij,ij->i", dev, np.linalg.solve(H, dev.T).T)))
    assert check._trace_cov(Z, w) == pytest.approx(expected, rel=1e-10)
    # Negative control: Sigma replaced by the Hessian itself is another number.
    wrong = float(np.mean(np.einsum("ij,ij->i", dev, dev @ H)))
    assert check._trace_cov(Z, w) != pytest.approx(wrong, rel=1e-3)


def test_sigma2_statistic_matches_the_estimator_draw_by_draw():
    """CentreCheck.sigma2 (all draws at once) against DifferenceEstimator.differences
    evaluated draw by draw: n^2 Q_75(var_k d_k) / m; and a refusal's bound is a
    lower bound of it, with the same verdict."""
    post, rng = _posterior(n=50_000, d=5)
    idx, theta0, H = _subset(post, rng, m=5_000)
    check = CentreCheck(post, H, idx, rng, M_MIN, TARGET)
    centre, mean, scale = theta0 + 0.01, theta0, 4.0
    est, sub = check._estimator(centre)
    L = np.linalg.cholesky(H)
    var = [est.differences(mean + np.sqrt(scale) * np.linalg.solve(L.T, z), sub)[0].var()
           for z in check._z]
    expected = post.n_obs ** 2 * float(np.quantile(var, 0.75)) / check.m
    got = check.sigma2(centre, mean, scale)
    assert got == pytest.approx(expected, rel=1e-9)
    # Negative control: another scale gives another statistic.
    assert check.sigma2(centre, mean, 2 * scale) != pytest.approx(expected, rel=1e-3)
    fresh = CentreCheck(post, H, idx, np.random.default_rng(0), M_MIN, TARGET)
    fresh._z = check._z
    bound = fresh.sigma2(centre, mean, scale, refused=lambda v: v > 0.5 * expected)
    assert bound <= got * (1 + 1e-12) and bound > 0.5 * expected


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
    # A tenth of the decrement would need more than REFERENCE_FRACTION_MAX:
    # refused after one question beyond the subset's own, about the largest
    # admissible growth (5x here).
    refuse = Check(lam, lam / 10)
    assert _hmc_family._grown_subset(refuse, None, n, s) is None
    assert len(refuse.asked) == 2
    assert refuse.asked[1] == pytest.approx(lam * (n / (5 * s) - 1) / (n / s - 1))
    # Negative control of that shortcut: when the largest passes, the
    # smallest sufficient growth is still the one returned.
    assert _hmc_family._grown_subset(Check(lam, lam / 4), None, n, s) == 4 * s


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


# Draws with theta* left far from the mode by the rule (review finding 2).
# A 2-parameter logistic posterior on 20,000 rows, known by quadrature; the
# subset mode the search starts from is moved to a Newton decrement of a
# few hundred (what the rule accepts at 10^8 rows is ~2000: the remainder
# variance grows like decrement^3 / (n m), so a smaller n accepts less).
# The chord path is forced on (CHORD_MIN_SUBSET patched) and the real rule
# decides.  Allowance: the rule lets the centre add at most
# CENTRE_VARIANCE_FRACTION * target = 0.1 to sigma^2; the perturbed target
# then differs from the posterior by a log-density term of sd at most about
# sigma^2 / 2 = 0.05, which moves a mean or sd by at most ~0.05 posterior sd
# (Cauchy-Schwarz, to first order).  So |err| <= 4 MCSE + 0.05 sd.
FAR_N, FAR_ALLOWANCE = 20_000, 0.05


@pytest.fixture(scope="module")
def far_problem():
    from .conftest import make_logistic
    from .test_samplers import _logistic_quadrature

    post = make_logistic(n=FAR_N, d=1, seed=11)
    # Grid spacing 0.3 sd over +-6 sd: the trapezoid rule's error on a
    # near-Gaussian density is ~exp(-2 pi^2 / 0.3^2), negligible.
    return post, _logistic_quadrature(post, n_grid=41, width=6.0)


def _far_chains(monkeypatch, post, decrement0, subsample_size="auto", accept_all=False,
                n_warmup=500, n_draws=1500, seed=0):
    from bayesian_subsample.samplers import HMCECS, _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 100)
    original = _hmc_family.subset_mode

    mode, H_full = _full_mode(post)
    u = np.ones(post.dim) / np.sqrt(post.dim)
    # decrement0 whitened units from the full-data mode: the exact decrement
    # there is about decrement0 whatever the random subset.
    start = mode + np.sqrt(decrement0) * np.linalg.solve(np.linalg.cholesky(H_full).T, u)

    def far(config, rng, posterior, return_idx=False):
        _, cost, H, idx, rows = original(config, rng, posterior, return_idx=True)
        return start.copy(), cost, H, idx, rows

    monkeypatch.setattr(_hmc_family, "subset_mode", far)
    if accept_all:
        # The broken variant: the rule's prediction is made and logged, but
        # every centre is accepted.
        judge = CentreCheck.__call__

        def accept(self, centre, decrement, mean=None, exact=True):
            _far_chains.verdicts.append(judge(self, centre, decrement, mean, exact=exact))
            return True

        _far_chains.verdicts = []

        monkeypatch.setattr(CentreCheck, "__call__", accept)
    config = HMCECS(subsample_size=subsample_size, backend="numpy")
    ss = np.random.SeedSequence(seed).spawn(5)
    prep = config.prepare(np.random.default_rng(ss[0]), post)
    draws = np.stack([config.run_chain(np.random.default_rng(s), post, prep, n_warmup,
                                       n_draws).draws for s in ss[1:]])
    return prep, draws


def _far_errors(draws, mean, sd):
    """|err| / (4 MCSE + allowance * sd) for the means and the sds."""
    from bayesian_subsample.diagnostics import mcse_mean, mcse_sd

    em = np.abs(draws.mean(axis=(0, 1)) - mean) / (4 * mcse_mean(draws) + FAR_ALLOWANCE * sd)
    es = np.abs(draws.std(axis=(0, 1)) - sd) / (4 * mcse_sd(draws) + FAR_ALLOWANCE * sd)
    return np.concatenate([em, es])


def _assert_far_draws(prep, draws, mean, sd):
    log = prep.newton_log
    # The regime under test: the search stopped after one order-2 pass at a
    # centre the rule accepted with a decrement of order 10^2 to 10^3.
    assert len(log) == 1 and 100 <= log[-1]["decrement"] <= 1000
    assert log[-1]["sigma2"] <= 0.1
    ratio = _far_errors(draws, mean, sd)
    assert np.all(ratio <= 1.0), ratio


def test_draws_match_quadrature_with_a_far_centre_the_rule_accepts(monkeypatch, far_problem):
    post, (mean, sd) = far_problem
    prep, draws = _far_chains(monkeypatch, post, 130.0)
    _assert_far_draws(prep, draws, mean, sd)


def test_far_centre_with_too_small_m_fails_the_same_check(monkeypatch, far_problem):
    """Negative control: a farther centre (decrement ~1200) and a fixed
    m = 100, so sigma^2 is ~200 times the target; the rule refuses it (its
    verdict is recorded) but the broken variant keeps it as theta*."""
    post, (mean, sd) = far_problem
    prep, draws = _far_chains(monkeypatch, post, 1200.0, subsample_size=100,
                              accept_all=True)
    assert prep.newton_log[-1]["sigma2"] > 10
    assert _far_chains.verdicts[-1] is False  # the real rule refuses this centre
    assert np.max(_far_errors(draws, mean, sd)) > 1.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_far_centre_draws_match_quadrature_long_chains(monkeypatch, far_problem, seed):
    """Longer chains (MCSE about half the fast test's) and other seeds."""
    post, (mean, sd) = far_problem
    prep, draws = _far_chains(monkeypatch, post, 130.0, n_draws=6000, seed=seed)
    _assert_far_draws(prep, draws, mean, sd)


def test_subset_growth_is_capped_by_a_row_memory_budget():
    """Growth is capped by REFERENCE_ROWS_MAX_BYTES as well as by the share of
    n (review finding 6): the held rows stay O(budget), not O(n d)."""
    from bayesian_subsample.samplers import _hmc_family

    class Check:
        def subset_decrement(self, theta):
            return 31 * (10**9 / 10**7 - 1)

        def __call__(self, theta, lam, **kw):
            return lam <= self.limit

    check = Check()
    check.limit = Check().subset_decrement(None) / 2
    n, s = 10**9, 10**7
    # Without the cap, 5% of 10^9 rows allows doubling the subset (negative
    # control); a budget of 1.5 s rows does not.
    assert _hmc_family._grown_subset(check, None, n, s) == 2 * s
    assert _hmc_family._grown_subset(check, None, n, s, max_rows=int(1.5 * s)) is None
    assert _hmc_family._grown_subset(check, None, n, s, max_rows=2 * s) == 2 * s
    # The budget in rows follows from the gathered rows' bytes.
    X32 = np.zeros((100, 29), np.float32)
    assert _hmc_family._row_bytes((X32, np.zeros(100), None), 100) == 29 * 4 + 8
    assert _hmc_family._row_bytes(None, 100) is None


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_fit_passes_the_row_budget_to_the_growth_rule(monkeypatch):
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 2000)
    budget = 2500 * (D * 4 + 8)  # 2,500 rows of float32 X and float64 y
    monkeypatch.setattr(_hmc_family, "REFERENCE_ROWS_MAX_BYTES", budget)
    seen = []
    original = _hmc_family._grown_subset

    def spy(check, theta0, n, size, max_rows=None):
        seen.append(max_rows)
        return original(check, theta0, n, size, max_rows=max_rows)

    monkeypatch.setattr(_hmc_family, "_grown_subset", spy)
    post, _ = _posterior()
    est = BayesianLogisticRegression(n_chains=1, n_warmup=20, n_draws=5, random_state=0)
    est.fit(post.model.X, post.model.y)
    assert seen == [2500]
    # 2,000 starting rows: growth (x1.5 = 3,000 rows) would exceed the budget.
    assert est.sampler_info_[0]["setup_subset_size"] == 2000
