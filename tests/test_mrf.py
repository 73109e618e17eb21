"""Binary MRFs and exact / approximate Gibbs sampling (austerity §5, §6.3)."""

import functools
import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from bayesian_subsample import BinaryMRF, GibbsSampler
from bayesian_subsample.diagnostics import ess_bulk, mcse_mean, split_rhat
from bayesian_subsample.estimators._gibbs import subset_distribution
from bayesian_subsample.samplers import _sequential, gibbs
from bayesian_subsample.samplers._sequential import sequential_mean_test


# --- the model ---------------------------------------------------------------------

def _brute_log_odds(mrf, x, i):
    x1, x0 = x.copy(), x.copy()
    x1[i], x0[i] = 1, 0
    lp = mrf.log_unnormalized(np.stack([x1, x0]))
    return lp[0] - lp[1]


def _models():
    rng = np.random.default_rng(5)
    W = rng.normal(0, 0.8, (7, 7))
    W = np.triu(W, 1) + np.triu(W, 1).T
    quads = np.array([[0, 3, 1, 5], [2, 4, 5, 1], [5, 0, 2, 3], [1, 2, 3, 4]])
    return {
        "triplet": BinaryMRF.random_triplet(8, 0.5, random_state=1),
        "pairwise": BinaryMRF.pairwise(W, bias=rng.normal(0, 1, 7)),
        "arity4": BinaryMRF(quads, rng.normal(0, 1, (4, 16)), bias=rng.normal(0, 1, 6)),
    }


@pytest.mark.parametrize("name", ["triplet", "pairwise", "arity4"])
def test_log_odds_match_brute_force(name):
    """L_i(x) from the per-variable term lists equals log P(x_i=1, .) - log P(x_i=0, .)
    from the full potential tables, and any split of the terms adds up."""
    mrf = _models()[name]
    rng = np.random.default_rng(2)
    for _ in range(20):
        x = rng.integers(0, 2, mrf.n_variables).astype(np.int8)
        for i in range(mrf.n_variables):
            np.testing.assert_allclose(mrf.conditional_log_odds(i, x),
                                       _brute_log_odds(mrf, x, i), rtol=1e-12, atol=1e-12)
            N = mrf.terms_per_variable[i]
            perm = rng.permutation(N)
            parts = mrf.term_log_odds(i, x, perm[:N // 2]).sum() + \
                mrf.term_log_odds(i, x, perm[N // 2:]).sum()
            np.testing.assert_allclose(parts + mrf.bias[i], mrf.conditional_log_odds(i, x),
                                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["triplet", "pairwise", "arity4"])
def test_term_log_odds_for_many_chains_match_one_at_a_time(name):
    mrf = _models()[name]
    rng = np.random.default_rng(3)
    X = rng.integers(0, 2, (6, mrf.n_variables)).astype(np.int8)
    XT = np.ascontiguousarray(X.T)
    for i in range(mrf.n_variables):
        N = mrf.terms_per_variable[i]
        idx = rng.permutation(N)[: max(1, N // 2)]
        np.testing.assert_array_equal(mrf.term_log_odds_chains(i, XT, idx),
                                      np.stack([mrf.term_log_odds(i, x, idx) for x in X], 1))
        np.testing.assert_array_equal(mrf.term_log_odds_chains(i, XT),
                                      np.stack([mrf.term_log_odds(i, x) for x in X], 1))
        np.testing.assert_array_equal(mrf.log_odds_offset_chains(i, XT),
                                      [mrf.log_odds_offset(i, x) for x in X])


def test_pairwise_model_is_the_ising_energy():
    rng = np.random.default_rng(0)
    W = rng.normal(0, 1, (5, 5))
    W = np.triu(W, 1) + np.triu(W, 1).T
    b = rng.normal(0, 1, 5)
    mrf = BinaryMRF.pairwise(W, b)
    X = rng.integers(0, 2, (30, 5))
    expected = 0.5 * np.einsum("ni,ij,nj->n", X, W, X) + X @ b
    np.testing.assert_allclose(mrf.log_unnormalized(X), expected, rtol=1e-12, atol=1e-12)


def test_dobrushin_bound():
    """Pairwise: max_i sum_j tanh(|W_ij| / 4) exactly; a triplet term's bound
    is at least the largest single influence, found by enumeration."""
    rng = np.random.default_rng(0)
    W = rng.normal(0, 0.3, (6, 6))
    W = np.triu(W, 1) + np.triu(W, 1).T
    assert BinaryMRF.pairwise(W).dobrushin_bound() == pytest.approx(
        np.tanh(np.abs(W) / 4).sum(axis=1).max(), rel=1e-12)
    mrf = BinaryMRF.random_triplet(5, 0.5, random_state=0)
    states, _ = mrf.exact_distribution()
    worst = np.zeros((5, 5))
    for x in states:
        for i in range(5):
            for j in range(5):
                if i != j:
                    y = x.copy()
                    y[j] = 1 - y[j]
                    d = abs(1 / (1 + np.exp(-mrf.conditional_log_odds(i, x)))
                            - 1 / (1 + np.exp(-mrf.conditional_log_odds(i, y))))
                    worst[i, j] = max(worst[i, j], d)
    assert worst.sum(axis=1).max() <= mrf.dobrushin_bound() + 1e-12


def test_triplet_model_sizes_and_reproducibility():
    mrf = BinaryMRF.random_triplet(100, random_state=0)
    assert mrf.n_terms == 161700 and mrf.arity == 3
    assert np.all(mrf.terms_per_variable == 4851)
    assert mrf._nbr_cols[0].dtype == np.int16
    again = BinaryMRF.random_triplet(100, random_state=0)
    np.testing.assert_array_equal(mrf.log_potentials, again.log_potentials)
    assert not np.array_equal(mrf.log_potentials,
                              BinaryMRF.random_triplet(100, random_state=1).log_potentials)
    assert abs(mrf.log_potentials.std() - 0.02) < 0.001  # sd 0.02 (see _mrf's docstring)


@pytest.mark.parametrize("kwargs,match", [
    (dict(variables=[[0, 1.5]], log_potentials=np.zeros((1, 4))), "integer"),
    (dict(variables=[[0, 0, 1]], log_potentials=np.zeros((1, 8))), "repeats a variable"),
    (dict(variables=[[0, 1]], log_potentials=np.zeros((1, 3))), r"shape \(n_terms, 2\*\*arity\)"),
    (dict(variables=[[0, 1]], log_potentials=[[0, 0, np.nan, 0]]), "NaN or infinity"),
    (dict(variables=[[0, -1]], log_potentials=np.zeros((1, 4))), "negative"),
    (dict(variables=[[0, 4]], log_potentials=np.zeros((1, 4)), n_variables=3), "n_variables=3"),
    (dict(variables=[[0, 1]], log_potentials=np.zeros((1, 4)), bias=[0.0, 1.0, 2.0],
          n_variables=2), "bias must have shape"),
    (dict(variables=np.zeros((0, 2), dtype=int), log_potentials=np.zeros((0, 4))),
     "at least one term"),
])
def test_bad_model_inputs_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BinaryMRF(**kwargs)


def test_bad_constructor_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="symmetric"):
        BinaryMRF.pairwise([[0, 1], [2, 0]])
    with pytest.raises(ValueError, match="zero diagonal"):
        BinaryMRF.pairwise([[1, 1], [1, 0]])
    with pytest.raises(ValueError, match=">= 3"):
        BinaryMRF.random_triplet(2)
    with pytest.raises(ValueError, match="log_potential_sd"):
        BinaryMRF.random_triplet(5, log_potential_sd=-1)
    with pytest.raises(ValueError, match="more than"):
        BinaryMRF.random_triplet(23, random_state=0).exact_distribution()
    with pytest.raises(ValueError, match="0 or 1"):
        BinaryMRF.random_triplet(5, random_state=0).check_state([0, 1, 2, 0, 0])


@pytest.mark.parametrize("kwargs,match", [
    (dict(method="fast"), "method must be one of"),
    (dict(scan="sweep"), "scan must be one of"),
    (dict(epsilon=0.5), r"epsilon must be a number in \[0, 0.5\)"),
    (dict(epsilon=-0.1), "epsilon"),
    (dict(batch_size=1), "batch_size must be an integer >= 2"),
    (dict(block_size=0), 'block_size must be "auto" or an integer >= 1'),
    (dict(block_size="big"), 'block_size must be "auto"'),
    (dict(n_chains=0), "n_chains"),
    (dict(n_draws=2.5), "n_draws"),
    (dict(initial_state=np.zeros(4)), "initial_state must have shape"),
    (dict(initial_state=np.full(6, 2)), "0 or 1"),
])
def test_bad_sampler_inputs_raise_before_sampling(kwargs, match):
    mrf = BinaryMRF.random_triplet(6, random_state=0)
    with pytest.raises(ValueError, match=match):
        GibbsSampler(**kwargs).sample(mrf)


def test_sampler_rejects_a_non_mrf():
    with pytest.raises(ValueError, match="needs a BinaryMRF"):
        GibbsSampler().sample(np.zeros((3, 3)))


# --- exact Gibbs against enumeration -------------------------------------------------

def _small_model():
    """D = 10 triplets plus fields (120 terms, 36 per variable; marginals 0.17-0.96)."""
    full = BinaryMRF.random_triplet(10, 0.3, random_state=11)
    bias = np.random.default_rng(12).normal(0, 0.5, 10)
    return BinaryMRF(full.variables, full.log_potentials, bias=bias)


def _exact_moments(mrf):
    states, p = mrf.exact_distribution()
    s = states.astype(float)
    return p @ s, np.einsum("n,ni,nj->ij", p, s, s)


def _moment_z_scores(draws, marg, joint):
    """|estimate - exact| / MCSE for every marginal and pairwise joint P(x_i = x_j = 1)."""
    x = draws.astype(float)
    D = x.shape[-1]
    iu = np.triu_indices(D, 1)
    pairs = x[..., iu[0]] * x[..., iu[1]]
    stats_ = np.concatenate([x, pairs], axis=-1)
    exact = np.concatenate([marg, joint[iu]])
    with np.errstate(divide="ignore", invalid="ignore"):  # a frozen variable has MCSE 0
        z = np.abs(stats_.mean(axis=(0, 1)) - exact) / mcse_mean(stats_)
    return z, np.max(split_rhat(stats_)), np.min(ess_bulk(stats_))


@pytest.mark.parametrize("scan,chains_per_task", [("systematic", 1), ("random", 1),
                                                   ("systematic", 4), ("random", 2)])
def test_exact_gibbs_matches_enumeration(scan, chains_per_task):
    """One chain per task (one-chain kernel) and chains in lockstep."""
    mrf = _small_model()
    marg, joint = _exact_moments(mrf)
    res = GibbsSampler(scan=scan, n_chains=4, n_warmup=50, n_draws=4000,
                       chains_per_task=chains_per_task, random_state=3).sample(mrf)
    assert res.draws.dtype == np.int8 and res.draws.shape == (4, 4000, 10)
    assert res.terms_per_update == pytest.approx(36.0)
    z, rhat, ess = _moment_z_scores(res.draws, marg, joint)
    assert rhat < 1.01 and ess > 400  # the MCSEs are trustworthy
    assert z.max() < 4, z.max()


@pytest.mark.parametrize("chains_per_task", [1, 4])
def test_gibbs_with_a_wrong_threshold_fails_the_same_check(monkeypatch, chains_per_task):
    """Negative control: comparing log(u) (an MH-style threshold) instead of
    log(u / (1 - u)) with the log-odds samples the wrong distribution."""
    monkeypatch.setattr(gibbs, "_logit", lambda u: np.log(u))
    mrf = _small_model()
    marg, joint = _exact_moments(mrf)
    res = GibbsSampler(n_chains=4, n_warmup=50, n_draws=1000, chains_per_task=chains_per_task,
                       random_state=3).sample(mrf)
    z, _, _ = _moment_z_scores(res.draws, marg, joint)
    assert np.nanmax(z) > 4


def test_subset_distribution_matches_enumeration():
    mrf = _small_model()
    states, p = mrf.exact_distribution()
    subset = [7, 2, 5]
    codes = states[:, subset].astype(int) @ [4, 2, 1]
    exact = np.bincount(codes, weights=p, minlength=8)
    res = GibbsSampler(n_chains=2, n_warmup=50, n_draws=1500, random_state=4).sample(mrf)
    emp = res.subset_distribution(subset)
    assert emp.sum() == pytest.approx(1.0)
    assert np.abs(emp - exact).sum() < 0.1
    np.testing.assert_array_equal(emp, subset_distribution(res.draws, subset))


# --- approximate Gibbs: epsilon = 0 is exact ----------------------------------------

@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_epsilon_zero_makes_the_exact_decisions(scan):
    """With the same generator state, one scan of the approximate kernel at
    epsilon = 0 (reading all terms in random mini-batches) makes exactly the
    exact kernel's decisions, scan after scan; epsilon = 0.3 (negative
    control) does not."""
    mrf = _small_model()
    exact = gibbs.GibbsParams("exact", scan)
    approx = {e: gibbs.GibbsParams("approximate", scan, e, 5) for e in (0.0, 0.3)}
    differs = {0.0: 0, 0.3: 0}
    for eps, params in approx.items():
        state = gibbs.init(np.zeros(10))
        for t in range(300):
            s_exact, _ = gibbs.step(np.random.default_rng([9, t]), state, mrf, exact)
            s_approx, info = gibbs.step(np.random.default_rng([9, t]), state, mrf, params)
            differs[eps] += not np.array_equal(s_exact.x, s_approx.x)
            if eps == 0.0:
                assert info.n_terms_evaluated == 10 * 36 and info.n_stopped_early == 0
            state = s_exact
    assert differs[0.0] == 0
    assert differs[0.3] > 0


@pytest.mark.parametrize("scan", ["systematic", "random"])
def test_epsilon_zero_makes_the_exact_decisions_in_lockstep(scan):
    """The same for six chains in lockstep (:func:`gibbs.step_chains`)."""
    mrf = _small_model()
    exact = gibbs.GibbsParams("exact", scan)
    differs = {0.0: 0, 0.3: 0}
    for eps in differs:
        params = gibbs.GibbsParams("approximate", scan, eps, 5)
        X = np.zeros((6, 10), dtype=np.int8)
        for t in range(100):
            X_exact, _ = gibbs.step_chains(np.random.default_rng([9, t]), X, mrf, exact)
            X_approx, info = gibbs.step_chains(np.random.default_rng([9, t]), X, mrf, params)
            differs[eps] += int((X_exact != X_approx).any(axis=1).sum())
            if eps == 0.0:
                assert np.all(info.n_terms_evaluated == 10 * 36)
                assert np.all(info.n_stopped_early == 0)
            X = X_exact
    assert differs[0.0] == 0
    assert differs[0.3] > 0


@pytest.mark.parametrize("eps", [0.05, 0.2])
def test_lockstep_update_has_the_one_chain_kernel(eps):
    """P_hat(x_i <- 1 | x_-i) and the terms read per update of the lockstep
    test (chains sharing a reading order) equal those of the one-chain test
    (:func:`gibbs.decide`) within 4 standard errors; the lockstep test at
    level 2 epsilon differs from the one-chain test at epsilon by more than
    that (negative control: the check can see a wrong critical value)."""
    mrf = _bounded_model()
    params = gibbs.GibbsParams("approximate", "systematic", eps, 40)
    wrong = gibbs.GibbsParams("approximate", "systematic", min(2 * eps, 0.45), 40)
    rng = np.random.default_rng(4)
    R, K = 3000, 20
    far = 0
    for x, i, p in _updates(mrf, 3, 0.3, 0.8, seed=5):
        one = [gibbs.decide(rng, mrf, i, x.copy(), t, params)
               for t in gibbs._logit(rng.random(R))]
        p_one = np.mean([v for v, *_ in one])
        terms_one = np.array([n for _, n, *_ in one], dtype=float)
        XT = np.repeat(x[:, None], K, axis=1)
        lock = [gibbs.decide_chains(rng, mrf, i, XT, gibbs._logit(rng.random(K)), params)
                for _ in range(R // K)]
        p_lock = np.mean([v.mean() for v, *_ in lock])
        terms_lock = np.concatenate([n for _, n, *_ in lock]).astype(float)
        bad = [gibbs.decide_chains(rng, mrf, i, XT, gibbs._logit(rng.random(K)), wrong)
               for _ in range(R // K)]
        p_bad = np.mean([v.mean() for v, *_ in bad])
        se = np.sqrt(2 * p * (1 - p) / R)
        assert abs(p_lock - p_one) < 4 * se, (p_lock, p_one, se)
        se_terms = np.sqrt(terms_one.var() / R + terms_lock.var() / R)
        assert abs(terms_lock.mean() - terms_one.mean()) < 4 * se_terms + 1e-9
        far += abs(p_bad - p_one) > 4 * se or abs(
            np.concatenate([n for _, n, *_ in bad]).mean() - terms_one.mean()) > 4 * se_terms
    assert far > 0


# --- approximate Gibbs: per-update error ---------------------------------------------

def _replay(mrf, i, x, params, u, wrong_threshold=False, fpc=True):
    """Approximate decisions of update (x, i) for each uniform in ``u``."""
    rng = np.random.default_rng(int(u[0] * 2**32))
    with np.errstate(divide="ignore"):
        th = np.log(u) if wrong_threshold else np.log(u) - np.log1p(-u)
    if fpc:
        return np.array([gibbs.decide(rng, mrf, i, x, t, params)[0] for t in th])
    N = int(mrf.terms_per_variable[i])
    off = mrf.log_odds_offset(i, x)
    return np.array([sequential_mean_test(
        rng, N, lambda idx: mrf.term_log_odds(i, x, idx), (t - off) / N, params.batch_size,
        params.epsilon, reading_order="permutation", finite_population_correction=False
    ).decision for t in th])


def _union_bound(values, offset, eps, m):
    """Bound on |P_hat(x_i <- 1) - P(x_i = 1)| guaranteed by the t-test (CLT model).

    A wrong decision needs some non-final look ``k`` (``n_k`` terms) to stop on
    the wrong side.  With ``lbar_k ~ N(mu, sigma_k^2)``, ``N sigma_k = N sigma
    sqrt((N - n_k) / ((N - 1) n_k))`` (eq. 3 at the population sd), that has
    probability at most ``min(eps, F_{n_k - 1}(-|L - z| / (N sigma_k) - t_k))``
    for the uniform with ``z = log(u / (1 - u))``, ``t_k`` the test's critical
    value; summing over looks and integrating over ``z`` (logistic density)
    bounds the conditional's error.
    """
    N = len(values)
    L = offset + values.sum()
    sd = values.std()
    total = 0.0
    for n in range(m, N, m):
        S = N * sd * np.sqrt((N - n) / ((N - 1) * n))
        tc = stats.t.ppf(1 - eps, n - 1)

        def f(z):
            return min(eps, stats.t.cdf(-abs(L - z) / S - tc, n - 1)) * stats.logistic.pdf(z)
        total += integrate.quad(f, L - 60, L + 60, points=[L], limit=200)[0]
    return total


def _bounded_model():
    """D = 30 triplets with a small per-term spread plus fields: the regime in
    which the t-test's guarantee is informative (406 terms per conditional)."""
    full = BinaryMRF.random_triplet(30, 0.005, random_state=3)
    return BinaryMRF(full.variables, full.log_potentials,
                     bias=np.random.default_rng(0).normal(0, 1.5, 30))


def _updates(mrf, n, lo, hi, seed):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        x = rng.integers(0, 2, mrf.n_variables).astype(np.int8)
        i = int(rng.integers(mrf.n_variables))
        p = 1 / (1 + np.exp(-mrf.conditional_log_odds(i, x)))
        if lo < p < hi:
            out.append((x, i, p))
    return out


@pytest.mark.parametrize("eps", [0.05, 0.2])
def test_per_update_error_within_the_t_test_bound(eps):
    """|P_hat(x_i <- 1) - P(x_i = 1)| <= bound + 4 binomial se on every update
    tried; the same check with a wrong threshold (log u instead of
    log(u / (1 - u))) fails."""
    mrf = _bounded_model()
    params = gibbs.GibbsParams("approximate", "systematic", eps, 40)
    R = 1500
    rng = np.random.default_rng(1)
    violations = {"kernel": 0, "wrong_threshold": 0}
    for x, i, p in _updates(mrf, 3, 0.2, 0.85, seed=2):
        bound = _union_bound(mrf.term_log_odds(i, x), mrf.bias[i], eps, 40)
        assert bound < 0.1  # informative: the check below has teeth
        se = np.sqrt(p * (1 - p) / R)
        for key, wrong in (("kernel", False), ("wrong_threshold", True)):
            p_hat = _replay(mrf, i, x, params, rng.random(R), wrong_threshold=wrong).mean()
            violations[key] += abs(p_hat - p) > bound + 4 * se
    assert violations["kernel"] == 0
    assert violations["wrong_threshold"] >= 2


def _reference_p_hat(values, offset, eps, m, R, rng, fpc=True):
    """Algorithm 1 written out independently (vectorised over R replays):
    random orders by argsort, look means and sds from cumulative sums (eq. 3-4),
    first look with delta < eps decides; returns the frequency of x_i <- 1."""
    N = len(values)
    u = rng.random(R)
    mu0 = (np.log(u) - np.log1p(-u) - offset) / N
    order = np.argsort(rng.random((R, N)), axis=1)
    v = values[order]
    looks = np.minimum(np.arange(m, N + m, m), N)
    s1 = np.cumsum(v, axis=1)[:, looks - 1]
    s2 = np.cumsum(v * v, axis=1)[:, looks - 1]
    lbar = s1 / looks
    var = np.maximum(s2 - looks * lbar ** 2, 0) / (looks - 1)
    se = np.sqrt(var / looks)
    if fpc:
        se = se * np.sqrt(1 - (looks - 1) / (N - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = stats.t.sf(np.abs(lbar - mu0[:, None]) / se, looks - 1)
    stop = delta < eps
    stop[:, -1] = True
    first = np.argmax(stop, axis=1)
    return np.mean(lbar[np.arange(R), first] > mu0)


@pytest.mark.parametrize("eps", [0.1, 0.25])
def test_per_update_error_matches_algorithm_1_where_it_is_large(eps):
    """Where the per-term spread is large (D = 12, log psi sd 0.3, mini-batches
    of 5 of 55 terms) the conditional's error reaches 0.1-0.25; the kernel's
    P_hat equals that of an independent implementation of Algorithm 1 within
    4 combined standard errors.  Negative control: a wrong threshold fails the
    same check (dropping the finite-population correction moves P_hat by only
    0.01-0.03 here, too little for 1,500 replays; its control is the
    calibration test below)."""
    mrf = BinaryMRF.random_triplet(12, 0.3, random_state=3)
    params = gibbs.GibbsParams("approximate", "systematic", eps, 5)
    R, R_ref = 1500, 20000
    rng = np.random.default_rng(4)
    fails = {"kernel": 0, "wrong_threshold": 0}
    errors = []
    for x, i, p in _updates(mrf, 4, 0.6, 0.97, seed=5):
        values = mrf.term_log_odds(i, x)
        ref = _reference_p_hat(values, 0.0, eps, 5, R_ref, rng)
        errors.append(ref - p)
        se = np.sqrt(ref * (1 - ref) * (1 / R + 1 / R_ref))
        for key, kw in (("kernel", {}), ("wrong_threshold", {"wrong_threshold": True})):
            p_hat = _replay(mrf, i, x, params, rng.random(R), **kw).mean()
            fails[key] += abs(p_hat - ref) > 4 * se
    assert max(np.abs(errors)) > 0.05  # the approximation is visibly biased here
    assert fails["kernel"] == 0
    assert fails["wrong_threshold"] >= 2


# --- approximate Gibbs: the stationary law and Theorem 2 ---------------------------

@functools.lru_cache(maxsize=None)
def _batch_sequences(N, m):
    """Distinct mini-batch sequences of a random reading order (ordered set
    partitions of range(N) into batches of m) and their probabilities."""
    counts = {}
    for perm in itertools.permutations(range(N)):
        key = tuple(tuple(sorted(perm[a:a + m])) for a in range(0, N, m))
        counts[key] = counts.get(key, 0) + 1
    orders = np.array([np.concatenate(key) for key in counts])
    return orders, np.array(list(counts.values())) / math.factorial(N)


def _algorithm_1_probability(values, offset, eps, m, n_grid=4000):
    """P(x_i <- 1) under Algorithm 1, exactly over reading orders, by a midpoint
    rule over u: for every batch sequence, the first look with delta < eps
    decides (the last look, all N terms, decides exactly).  Written with the
    critical value rather than the p-value, independently of the kernel."""
    N = len(values)
    orders, weights = _batch_sequences(N, m)
    u = (np.arange(n_grid) + 0.5) / n_grid
    mu0 = (np.log(u) - np.log1p(-u) - offset) / N
    v = values[orders]                                    # (sequences, N)
    decided = np.zeros((len(orders), n_grid), bool)
    ones = np.zeros_like(decided)
    for n in list(range(m, N, m)) + [N]:
        lbar = v[:, :n].mean(axis=1)[:, None]
        if n == N:
            stop = ~decided
        else:
            s = np.sqrt(v[:, :n].var(axis=1, ddof=1) / n * (1 - (n - 1) / (N - 1)))[:, None]
            # delta < eps  <=>  |lbar - mu0| / s > t_{n-1} quantile at 1 - eps
            stop = (np.abs(lbar - mu0) > s * stats.t.isf(eps, n - 1)) & ~decided
        ones |= stop & (lbar > mu0)
        decided |= stop
    return float(weights @ ones.mean(axis=1))


def _sweep_matrix(mrf, states, p_one):
    """Transition matrix of one systematic scan from per-(state, variable) P(x_i <- 1)."""
    D = mrf.n_variables
    code = states.astype(int) @ (1 << np.arange(D))
    index = np.empty(2 ** D, int)
    index[code] = np.arange(len(states))
    K = np.eye(len(states))
    for i in range(D):
        Ki = np.zeros_like(K)
        rows = np.arange(len(states))
        up = index[code | (1 << i)]
        down = index[code & ~(1 << i)]
        np.add.at(Ki, (rows, up), p_one[:, i])
        np.add.at(Ki, (rows, down), 1 - p_one[:, i])
        K = K @ Ki
    return K


def test_approximate_gibbs_samples_its_stationary_law_within_theorem_2(monkeypatch):
    """D = 5, 6 terms per conditional, mini-batches of 2, epsilon = 0.2.

    Every approximate conditional P_hat(x_i <- 1 | x_-i) is computed exactly
    from Algorithm 1, hence the approximate scan's transition matrix and its
    stationary law S_eps.  Theorem 2 holds with the scan's one-step error
    Delta = max_x d_TV(K_hat(x, .), K(x, .)) and eta the Dobrushin
    coefficient of the exact scan: d_TV(P, S_eps) <= Delta / (1 - eta) < 1.
    The kernel's chains reproduce S_eps (marginals and pairwise joints within
    4 MCSE plus 0.005 for the midpoint rule over u); exact Gibbs, which
    targets P, fails the same check (d_TV(P, S_eps) = 0.09)."""
    full = BinaryMRF.random_triplet(5, 0.3, random_state=2)
    mrf = BinaryMRF(full.variables, full.log_potentials,
                    bias=np.random.default_rng(1).normal(0, 0.5, 5))
    eps, m = 0.2, 2
    states, P = mrf.exact_distribution()
    exact = np.empty((32, 5))
    approx = np.empty((32, 5))
    for k, x in enumerate(states):
        for i in range(5):
            exact[k, i] = 1 / (1 + np.exp(-mrf.conditional_log_odds(i, x)))
            approx[k, i] = _algorithm_1_probability(mrf.term_log_odds(i, x), mrf.bias[i], eps, m)
    K, K_hat = _sweep_matrix(mrf, states, exact), _sweep_matrix(mrf, states, approx)
    w, v = np.linalg.eig(K_hat.T)
    S_eps = np.real(v[:, np.argmin(np.abs(w - 1))])
    S_eps /= S_eps.sum()
    np.testing.assert_allclose(P @ K, P, atol=1e-12)  # the exact scan keeps P
    eta = max(0.5 * np.abs(K[a] - K[b]).sum() for a in range(32) for b in range(32))
    delta = max(0.5 * np.abs(K[a] - K_hat[a]).sum() for a in range(32))
    d_tv = 0.5 * np.abs(P - S_eps).sum()
    assert d_tv <= delta / (1 - eta) < 1
    assert d_tv > 0.05  # the bias is large enough for the chain check to see it

    s = states.astype(float)
    marg, joint = S_eps @ s, np.einsum("n,ni,nj->ij", S_eps, s, s)

    def worst_z(method, chains_per_task=1):
        res = GibbsSampler(method=method, epsilon=eps, batch_size=m, n_chains=4, n_warmup=50,
                           n_draws=2000, chains_per_task=chains_per_task,
                           random_state=6).sample(mrf)
        x = res.draws.astype(float)
        iu = np.triu_indices(5, 1)
        est = np.concatenate([x, x[..., iu[0]] * x[..., iu[1]]], axis=-1)
        target = np.concatenate([marg, joint[iu]])
        return np.max(np.maximum(np.abs(est.mean(axis=(0, 1)) - target) - 0.005, 0)
                      / mcse_mean(est))

    assert worst_z("approximate") < 4
    assert worst_z("exact") > 4
    # Four chains in lockstep, sharing reading orders: same law, and MCSEs
    # computed as for independent chains still hold.
    assert worst_z("approximate", 4) < 4
    assert worst_z("exact", 4) > 4


# --- the sampler front end -----------------------------------------------------------

def test_sampler_reports_costs_and_is_reproducible_for_any_n_jobs():
    mrf = BinaryMRF.random_triplet(14, 0.3, random_state=0)
    kw = dict(method="approximate", epsilon=0.1, batch_size=10, n_chains=2, n_warmup=5,
              n_draws=30, random_state=8)
    a = GibbsSampler(n_jobs=1, **kw).sample(mrf)
    b = GibbsSampler(n_jobs=2, **kw).sample(mrf)
    np.testing.assert_array_equal(a.draws, b.draws)
    assert a.draws.dtype == np.int8 and a.draws.shape == (2, 30, 14)
    N = 78
    assert 0 < a.terms_per_update < N
    assert a.sample_stats["n_terms_evaluated"].sum() == a.n_terms_evaluated["sampling"]
    assert a.batch_histogram.sum() == 2 * 30 * 14
    assert a.batch_histogram[1:].argmax() >= 0 and a.batch_histogram[0] == 0
    assert a.sample_stats["n_stopped_early"].sum() > 0
    assert set(a.wall_time) == {"warmup", "sampling"}
    exact = GibbsSampler(n_chains=1, n_draws=5, random_state=0).sample(mrf)
    assert exact.terms_per_update == N and exact.sample_stats["n_batches"].max() == 14
    c = GibbsSampler(initial_state=np.ones(14, dtype=int), n_chains=1, n_warmup=0, n_draws=1,
                     random_state=0).sample(mrf)
    assert c.draws.shape == (1, 1, 14)
    assert "GibbsResult" in repr(c)
    from sklearn.base import clone
    assert clone(GibbsSampler(epsilon=0.2, scan="random")).get_params()["epsilon"] == 0.2


# --- approximate Gibbs with blocks of terms (cluster sampling) ------------------------

@pytest.mark.parametrize("name,b", [("triplet", 4), ("triplet", 9), ("pairwise", 2),
                                    ("pairwise", 4), ("arity4", 2), ("triplet", 1)])
def test_term_blocks_hold_every_term_once(name, b):
    """Each variable's terms are dealt once into ceil(N_i / b) blocks of at
    most b terms, sizes differing by at most one (the short ones last); a block's total is the sum of its terms' log-odds,
    padding slots count 0; the layout is the same for every block size."""
    mrf = _models()[name]
    L = mrf.term_blocks(b)
    assert mrf.term_blocks(b) is L  # cached
    rng = np.random.default_rng(0)
    XT = rng.integers(0, 2, (mrf.n_variables, 3)).astype(np.int8)
    for i in range(mrf.n_variables):
        N, B = int(mrf.terms_per_variable[i]), int(L.n_blocks[i])
        assert B == -(-N // b)
        lo, hi = L.block_ptr[i], L.block_ptr[i + 1]
        pos = L.positions[lo:hi]
        np.testing.assert_array_equal(np.sort(pos[pos >= 0]), np.arange(N))
        sizes = L.sizes[lo:hi]
        assert sizes.sum() == N and sizes.max() <= b and sizes.max() - sizes.min() <= 1
        assert np.all(np.diff(sizes) <= 0)
        np.testing.assert_array_equal((pos >= 0).sum(axis=1), sizes)
        for c in range(3):
            full = mrf.term_log_odds(i, XT[:, c])
            ref = np.where(pos >= 0, full[np.maximum(pos, 0)], 0.0).sum(axis=1)
            np.testing.assert_allclose(mrf.block_sums(i, XT[:, c], np.arange(B), L), ref,
                                       atol=1e-12)
        sel = rng.permutation(B)[:max(1, B // 2)]
        many = mrf.block_sums_chains(i, XT, sel, L)
        for c in range(3):
            np.testing.assert_allclose(many[:, c], mrf.block_sums(i, XT[:, c], sel, L),
                                       atol=1e-12)
    if b > 1:  # one fixed random order, dealt into blocks of any size
        one = mrf.term_blocks(1)
        for i in range(mrf.n_variables):
            order1 = one.positions[one.block_ptr[i]:one.block_ptr[i + 1]].ravel()
            pos = L.positions[L.block_ptr[i]:L.block_ptr[i + 1]].ravel()
            np.testing.assert_array_equal(pos[pos >= 0], order1)


def test_auto_block_size():
    """b = 1 for the small test models (draws as before), 15 on the §6.3
    model's conditionals (4,851 terms, looks of 500); exact Gibbs ignores it."""
    from types import SimpleNamespace

    def b_for(N, m, bs="auto", method="approximate", blocks=True):
        target = SimpleNamespace(terms_per_variable=np.array([N]))
        if blocks:
            target.term_blocks = None
        return gibbs.block_size_for(target, 0, gibbs.GibbsParams(method, "systematic", 0.1,
                                                                 m, bs))
    assert b_for(4851, 500) == 15
    assert gibbs._blocks_per_look(gibbs.GibbsParams(batch_size=500), 15) == 33
    assert b_for(4851, 500, blocks=False) == 1      # a model without a block layout
    assert b_for(4851, 500, method="exact") == 1
    assert b_for(4851, 500, bs=7) == 7
    assert b_for(4851, 2000) == 16                  # at most 16 terms per block
    assert b_for(200, 500) == 3                     # at least 64 blocks
    for N, m in [(36, 5), (55, 5), (406, 40), (78, 10), (6, 2), (10000, 63)]:
        assert b_for(N, m) == 1                     # the test models keep single terms
    mrf = BinaryMRF.random_triplet(40, 0.05, random_state=0)  # 741 terms: b = 3
    assert gibbs.block_size_for(mrf, 0, gibbs.GibbsParams("approximate", batch_size=100)) == 3


class _Spy:
    """Records the blocks each evaluation reads (one-chain and lockstep)."""

    def __init__(self, mrf):
        self.mrf = mrf
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.mrf, name)

    def block_sums(self, i, x, blocks, layout):
        self.calls.append(np.array(blocks))
        return self.mrf.block_sums(i, x, blocks, layout)

    def block_sums_chains(self, i, XT, blocks, layout):
        self.calls.append(np.array(blocks))
        return self.mrf.block_sums_chains(i, XT, blocks, layout)


class _FixedOrder:
    """A generator whose permutations are the identity (negative control)."""

    def __init__(self, rng):
        self.rng = rng

    def permutation(self, n):
        return np.arange(n)


class _WithReplacement(_FixedOrder):
    """Blocks drawn uniformly with replacement (negative control)."""

    def permutation(self, n):
        return self.rng.integers(0, n, n)


@pytest.mark.parametrize("lockstep", [False, True])
def test_blocks_are_drawn_uniformly_without_replacement(lockstep):
    """epsilon = 0 with 8 blocks of 4-5 terms (36 terms, b = 5), 2 blocks per
    look: every update reads each block exactly once; over 2,000 updates the
    first look holds each block, and each pair of blocks, at the frequency of
    a uniform draw without replacement (chi-square p > 0.001).  A fixed
    order and draws with replacement fail."""
    mrf = _small_model()
    spy = _Spy(mrf)
    params = gibbs.GibbsParams("approximate", "systematic", 0.0, 10, 5)
    B = int(mrf.term_blocks(5).n_blocks[3])
    assert B == 8 and gibbs._blocks_per_look(params, 5) == 2
    x = np.random.default_rng(0).integers(0, 2, 10).astype(np.int8)
    XT = np.repeat(x[:, None], 3, axis=1)

    def first_looks(rng, R):
        """First looks of R updates, and the updates that did not read every block once."""
        firsts, not_once = [], 0
        for _ in range(R):
            spy.calls.clear()
            if lockstep:
                gibbs.decide_chains(rng, spy, 3, XT, np.zeros(3), params)
            else:
                gibbs.decide(rng, spy, 3, x, 0.0, params)
            seq = np.concatenate(spy.calls)
            not_once += not np.array_equal(np.sort(seq), np.arange(B))
            firsts.append(seq[:2])
        return np.array(firsts), not_once

    def p_values(firsts):
        R = len(firsts)
        single = np.bincount(firsts.ravel(), minlength=B)
        p1 = stats.chisquare(single, np.full(B, 2 * R / B)).pvalue
        pair = np.sort(firsts, axis=1) @ [B, 1]
        pairs = np.bincount(pair, minlength=B * B)[[a * B + c for a in range(B)
                                                     for c in range(a + 1, B)]]
        p2 = stats.chisquare(pairs, np.full(len(pairs), R / len(pairs))).pvalue
        return min(p1, p2)

    rng = np.random.default_rng(1)
    firsts, not_once = first_looks(rng, 2000)
    assert not_once == 0
    assert p_values(firsts) > 1e-3
    assert p_values(first_looks(_FixedOrder(rng), 200)[0]) < 1e-3
    assert first_looks(_WithReplacement(rng), 50)[1] > 0  # repeats a block, misses one


@pytest.mark.parametrize("lockstep", [False, True])
def test_epsilon_zero_with_blocks_makes_the_exact_decisions(lockstep):
    """b = 4 (9 blocks of the 36 terms, 2 per look) at epsilon = 0: the
    exact kernel's decisions, scan after scan, reading every term once;
    epsilon = 0.3 (negative control) differs."""
    mrf = _small_model()
    exact = gibbs.GibbsParams("exact", "systematic")
    differs = {0.0: 0, 0.3: 0}
    for eps in differs:
        params = gibbs.GibbsParams("approximate", "systematic", eps, 8, 4)
        X = np.zeros((6 if lockstep else 1, 10), dtype=np.int8)
        for t in range(100):
            if lockstep:
                X_exact, _ = gibbs.step_chains(np.random.default_rng([9, t]), X, mrf, exact)
                X_approx, info = gibbs.step_chains(np.random.default_rng([9, t]), X, mrf,
                                                   params)
            else:
                s, _ = gibbs.step(np.random.default_rng([9, t]), gibbs.init(X[0]), mrf, exact)
                a, info = gibbs.step(np.random.default_rng([9, t]), gibbs.init(X[0]), mrf,
                                     params)
                X_exact, X_approx = s.x[None], a.x[None]
            differs[eps] += int((X_exact != X_approx).any(axis=1).sum())
            if eps == 0.0:
                assert np.all(np.asarray(info.n_terms_evaluated) == 10 * 36)
                assert np.all(np.asarray(info.n_stopped_early) == 0)
            else:  # terms counted = the blocks' real terms
                assert np.all(np.asarray(info.n_terms_evaluated) <= 10 * 36)
            X = X_exact
    assert differs[0.0] == 0
    assert differs[0.3] > 0


def _block_totals(mrf, i, x, b):
    L = mrf.term_blocks(b)
    return mrf.block_sums(i, x, np.arange(L.n_blocks[i]), L)


@pytest.mark.parametrize("eps", [0.05, 0.2])
def test_per_update_error_with_blocks_within_the_t_test_bound(eps):
    """b = 4 on the D = 30 model (102 blocks of 3-4 terms, 10 per look): the
    test runs on the block values, so the t-test's bound computed on the
    population of block totals holds for |P_hat - P| on every update tried,
    for the one-chain and the lockstep kernel; a wrong threshold fails."""
    mrf = _bounded_model()
    b = 4
    params = gibbs.GibbsParams("approximate", "systematic", eps, 40, b)
    R, K = 1500, 10
    rng = np.random.default_rng(1)
    violations = {"kernel": 0, "lockstep": 0, "wrong_threshold": 0}
    for x, i, p in _updates(mrf, 3, 0.2, 0.85, seed=2):
        T = _block_totals(mrf, i, x, b)
        assert len(T) == 102
        bound = _union_bound(T, mrf.bias[i], eps, 10)
        assert bound < 0.1
        se = np.sqrt(p * (1 - p) / R)
        for key, wrong in (("kernel", False), ("wrong_threshold", True)):
            p_hat = _replay(mrf, i, x, params, rng.random(R), wrong_threshold=wrong).mean()
            violations[key] += abs(p_hat - p) > bound + 4 * se
        # Lockstep chains share a reading order: the se from the means of the calls.
        XT = np.repeat(x[:, None], K, axis=1)
        calls = [gibbs.decide_chains(rng, mrf, i, XT, gibbs._logit(rng.random(K)),
                                     params)[0].mean() for _ in range(R // K)]
        se_lock = np.std(calls, ddof=1) / np.sqrt(len(calls))
        violations["lockstep"] += abs(np.mean(calls) - p) > bound + 4 * se_lock
    assert violations["kernel"] == 0 and violations["lockstep"] == 0
    assert violations["wrong_threshold"] >= 2


@pytest.mark.parametrize("eps", [0.1, 0.25])
def test_block_test_is_algorithm_1_on_the_block_values(eps):
    """Where the error is large (D = 12, log psi sd 0.3: 55 terms in 19
    blocks of b = 3, 2 blocks per look) the lockstep kernel's P_hat equals
    that of the independent Algorithm 1 run on the population of block
    totals, within 4 combined standard errors.  Negative control: a fixed
    (non-random) block order fails the same check.  (The block test with
    term-level degrees of freedom moves P_hat by only 0.02-0.04 here, about
    2-3 standard errors of 1,500 replays; its control is
    :func:`test_block_test_with_term_level_degrees_of_freedom_fails`.)"""
    mrf = BinaryMRF.random_triplet(12, 0.3, random_state=3)
    b = 3
    params = gibbs.GibbsParams("approximate", "systematic", eps, 6, b)
    R, R_ref = 1500, 20000
    rng = np.random.default_rng(4)

    def p_hat(x, i, variant):
        """P_hat and its se (one chain per call: chains of a call would share
        a reading order, and their decisions would not be independent)."""
        XT = x[:, None]
        src = _FixedOrder(rng) if variant == "fixed_order" else rng
        calls = [gibbs.decide_chains(src, mrf, i, XT, gibbs._logit(rng.random(1)),
                                     params)[0][0] for _ in range(R)]
        return np.mean(calls), np.std(calls, ddof=1) / np.sqrt(len(calls))

    fails = {"kernel": 0, "fixed_order": 0}
    errors = []
    for x, i, p in _updates(mrf, 4, 0.6, 0.97, seed=5):
        T = _block_totals(mrf, i, x, b)
        assert len(T) == 19
        ref = _reference_p_hat(T, 0.0, eps, 2, R_ref, rng)
        errors.append(ref - p)
        for key in fails:
            est, se = p_hat(x, i, key)
            fails[key] += abs(est - ref) > 4 * np.sqrt(se ** 2 + ref * (1 - ref) / R_ref)
    assert max(np.abs(errors)) > 0.05
    assert fails["kernel"] == 0
    assert fails["fixed_order"] >= 2


def test_approximate_gibbs_with_blocks_samples_its_stationary_law():
    """D = 6 (10 terms per conditional), b = 2 (5 blocks, 2 per look),
    epsilon = 0.2.  The approximate conditionals are computed exactly from
    Algorithm 1 on the block totals (over all block orders), hence the
    scan's stationary law S_eps, which Theorem 2 bounds; chains of the
    one-chain and the lockstep kernels match S_eps (marginals and pairwise
    joints within 4 MCSE plus 0.005 for the midpoint rule over u), exact
    Gibbs does not (d_TV(P, S_eps) = 0.05-0.1 here; the wrong-df block test
    moves S_eps's moments by only about 0.012, below what these chains
    resolve: its control is the next test)."""
    full = BinaryMRF.random_triplet(6, 0.35, random_state=2)
    mrf = BinaryMRF(full.variables, full.log_potentials,
                    bias=np.random.default_rng(1).normal(0, 0.5, 6))
    eps, m, b = 0.2, 4, 2
    D = 6
    states, P = mrf.exact_distribution()
    exact = np.empty((2 ** D, D))
    approx = np.empty((2 ** D, D))
    for k, x in enumerate(states):
        for i in range(D):
            exact[k, i] = 1 / (1 + np.exp(-mrf.conditional_log_odds(i, x)))
            T = _block_totals(mrf, i, x, b)
            assert len(T) == 5
            approx[k, i] = _algorithm_1_probability(T, mrf.bias[i], eps, 2)
    K, K_hat = _sweep_matrix(mrf, states, exact), _sweep_matrix(mrf, states, approx)
    w, v = np.linalg.eig(K_hat.T)
    S_eps = np.real(v[:, np.argmin(np.abs(w - 1))])
    S_eps /= S_eps.sum()
    eta = max(0.5 * np.abs(K[a] - K[c]).sum() for a in range(2 ** D) for c in range(2 ** D))
    delta = max(0.5 * np.abs(K[a] - K_hat[a]).sum() for a in range(2 ** D))
    d_tv = 0.5 * np.abs(P - S_eps).sum()
    assert d_tv <= delta / (1 - eta) < 1
    assert d_tv > 0.05

    s = states.astype(float)
    marg, joint = S_eps @ s, np.einsum("n,ni,nj->ij", S_eps, s, s)
    iu = np.triu_indices(D, 1)
    target = np.concatenate([marg, joint[iu]])

    def worst_z(method, chains_per_task=1):
        res = GibbsSampler(method=method, epsilon=eps, batch_size=m, block_size=b, n_chains=4,
                           n_warmup=50, n_draws=2000, chains_per_task=chains_per_task,
                           random_state=6).sample(mrf)
        x = res.draws.astype(float)
        est = np.concatenate([x, x[..., iu[0]] * x[..., iu[1]]], axis=-1)
        return np.max(np.maximum(np.abs(est.mean(axis=(0, 1)) - target) - 0.005, 0)
                      / mcse_mean(est))

    assert worst_z("approximate") < 4
    assert worst_z("approximate", 4) < 4
    assert worst_z("exact") > 4


def test_block_test_with_term_level_degrees_of_freedom_fails(monkeypatch):
    """Seven blocks of 7-8 terms (b = 9, 55 terms), 2 blocks per look,
    epsilon = 0.1: the lockstep kernel's P_hat equals Algorithm 1 on the
    block totals computed exactly over all block orders (within 4 se); the
    same block test with term-level degrees of freedom (9 n - 1 instead of
    n - 1: too small a critical value) fails it on at least two updates."""
    mrf = BinaryMRF.random_triplet(12, 0.3, random_state=3)
    b, eps, R = 9, 0.1, 1500
    params = gibbs.GibbsParams("approximate", "systematic", eps, 18, b)
    rng = np.random.default_rng(7)
    critical_t = _sequential.critical_t
    fails = {"kernel": 0, "term_df": 0}
    for x, i, p in _updates(mrf, 4, 0.6, 0.97, seed=5):
        T = _block_totals(mrf, i, x, b)
        assert len(T) == 7
        exact = _algorithm_1_probability(T, 0.0, eps, 2)
        se = np.sqrt(exact * (1 - exact) / R)
        for key in fails:
            with monkeypatch.context() as mp:
                if key == "term_df":  # the block test's critical value (look_stops)
                    mp.setattr(_sequential, "critical_t",
                               lambda df, e: critical_t((df + 1) * b - 1, e))
                p_hat = np.mean([gibbs.decide_chains(rng, mrf, i, x[:, None],
                                                     gibbs._logit(rng.random(1)), params)[0][0]
                                 for _ in range(R)])
            fails[key] += abs(p_hat - exact) > 4 * se + 0.005  # midpoint rule over u
    assert fails["kernel"] == 0
    assert fails["term_df"] >= 2


def test_look_stops_is_the_delta_rule():
    """The squared stop rule of the block test (look_stops) decides as
    look_delta(...) < epsilon on 90,000 random looks; epsilon = 0 never stops."""
    from bayesian_subsample.samplers._sequential import look_delta, look_stops
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(2, 60))
        N = int(rng.integers(n + 1, 200))
        v = rng.normal(rng.normal(), rng.exponential(), (n, 100))
        S1, S2 = v.sum(axis=0), (v * v).sum(axis=0)
        mu0 = rng.normal(S1 / n, rng.exponential() * v.std(axis=0) / np.sqrt(n))
        for eps in (0.01, 0.05, 0.2):
            stop, gap = look_stops(S1, S2, n, N, mu0, eps)
            np.testing.assert_array_equal(stop, look_delta(S1, S2, n, N, mu0) < eps)
            np.testing.assert_allclose(gap, S1 / n - mu0)
        assert not look_stops(S1, S2, n, N, mu0, 0.0)[0].any()


# --- the compiled kernel (backend="numba") ---------------------------------------------

def _numba():
    return pytest.importorskip("numba")


def _same_scans(mrf, params, K, scans, seed):
    """Run the numpy and the compiled lockstep kernels from the same generator state."""
    X0 = np.random.default_rng(seed).integers(0, 2, (K, mrf.n_variables)).astype(np.int8)
    rngs = [np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)]
    X = [X0.copy(), X0.copy()]
    for _ in range(scans):
        out = [gibbs.step_chains(rngs[0], X[0], mrf, params),
               gibbs.step_chains(rngs[1], X[1], mrf, params._replace(backend="numba"))]
        X = [out[0][0], out[1][0]]
        (a, ia), (b, ib) = out
        np.testing.assert_array_equal(a, b)
        for field in ("n_terms_evaluated", "n_batches", "n_stopped_early", "n_changed",
                      "batches_per_update", "terms_per_update", "data_fraction"):
            np.testing.assert_array_equal(getattr(ia, field), getattr(ib, field), err_msg=field)
    # Both generators consumed the same numbers.
    assert rngs[0].random() == rngs[1].random()
    return ia


@pytest.mark.parametrize("K", [1, 3, 8])
@pytest.mark.parametrize("params", [
    gibbs.GibbsParams("exact"),
    gibbs.GibbsParams("approximate", epsilon=0.0, batch_size=4),
    gibbs.GibbsParams("approximate", epsilon=0.2, batch_size=4, block_size=1),
    gibbs.GibbsParams("approximate", epsilon=0.05, batch_size=6, block_size=1),
    gibbs.GibbsParams("approximate", epsilon=0.2, batch_size=8, block_size=3),
], ids=["exact", "eps0", "eps0.2", "eps0.05", "eps0.2-b3"])
def test_compiled_scan_makes_the_numpy_decisions(params, K):
    """Same states, terms, looks and early stops as the numpy lockstep kernel, scan by
    scan, on the D = 10 model with fields (b = 1 and b = 3) and the arity-4 model."""
    _numba()
    info = _same_scans(_small_model(), params, K, scans=6, seed=21)
    if params.method == "approximate" and params.epsilon > 0:
        assert info.n_stopped_early.sum() > 0  # the test's early stops were exercised
    _same_scans(_models()["arity4"], params, K, scans=4, seed=22)


@pytest.mark.parametrize("params", [
    gibbs.GibbsParams("exact"),
    gibbs.GibbsParams("approximate", epsilon=0.01),
    gibbs.GibbsParams("approximate", epsilon=0.05, block_size=1),
    gibbs.GibbsParams("approximate", epsilon=0.25),
], ids=["exact", "eps0.01-b15", "eps0.05-b1", "eps0.25-b15"])
def test_compiled_scan_makes_the_numpy_decisions_on_the_6_3_model(params):
    """§6.3 (D = 100, 4,851 terms per conditional), 24 chains in lockstep, so that the
    numpy kernel's multi-look evaluations (few chains left testing) are exercised."""
    _numba()
    mrf = BinaryMRF.random_triplet(100, random_state=0)
    info = _same_scans(mrf, params, 24, scans=2, seed=23)
    if params.method == "approximate":
        assert 0 < info.terms_per_update.mean() < 4851


def test_compiled_scan_with_many_chains_sums_in_the_numpy_chunks():
    """300 chains: numpy sums a look of 500 single terms in two chunks (gibbs._term_sums);
    the compiled kernel follows, so the decisions agree."""
    _numba()
    mrf = BinaryMRF.random_triplet(40, random_state=2)
    _same_scans(mrf, gibbs.GibbsParams("approximate", epsilon=0.05, batch_size=300,
                                       block_size=1), 300, scans=1, seed=24)


@pytest.mark.parametrize("method,epsilon", [("exact", 0.01), ("approximate", 0.2)])
@pytest.mark.parametrize("chains_per_task", [1, 3])
def test_sampler_backends_give_the_same_draws(method, epsilon, chains_per_task):
    _numba()
    mrf = _small_model()
    kw = dict(method=method, epsilon=epsilon, batch_size=6, n_chains=3, n_warmup=5,
              n_draws=30, chains_per_task=chains_per_task, random_state=4)
    a = GibbsSampler(**kw).sample(mrf)
    b = GibbsSampler(backend="numba", **kw).sample(mrf)
    np.testing.assert_array_equal(a.draws, b.draws)
    for k in a.sample_stats:
        np.testing.assert_array_equal(a.sample_stats[k], b.sample_stats[k])
    np.testing.assert_array_equal(a.batch_histogram, b.batch_histogram)


def test_compiled_exact_gibbs_matches_enumeration_and_control_fails(monkeypatch):
    """Statistically as well: exact marginals and pairwise joints within 4 MCSE; the
    wrong-threshold control (log u for log(u / (1 - u))) fails the same check."""
    _numba()
    mrf = _small_model()
    marg, joint = _exact_moments(mrf)
    res = GibbsSampler(backend="numba", n_chains=4, n_warmup=50, n_draws=4000,
                       chains_per_task=4, random_state=3).sample(mrf)
    z, rhat, ess = _moment_z_scores(res.draws, marg, joint)
    assert rhat < 1.01 and ess > 400
    assert z.max() < 4, z.max()
    from bayesian_subsample.samplers import _gibbs_compiled

    monkeypatch.setattr(_gibbs_compiled, "_logit", lambda u: np.log(u))
    res = GibbsSampler(backend="numba", n_chains=4, n_warmup=50, n_draws=1000,
                       chains_per_task=4, random_state=3).sample(mrf)
    z, _, _ = _moment_z_scores(res.draws, marg, joint)
    assert np.nanmax(z) > 4


def test_backend_errors(monkeypatch):
    mrf = BinaryMRF.random_triplet(6, random_state=0)
    with pytest.raises(ValueError, match="backend must be one of"):
        GibbsSampler(backend="cuda").sample(mrf)
    from bayesian_subsample.samplers import _gibbs_compiled

    if _gibbs_compiled.numba_available():
        with pytest.raises(ValueError, match="systematic scan only"):
            GibbsSampler(backend="numba", scan="random").sample(mrf)
    monkeypatch.setattr(_gibbs_compiled, "numba_available", lambda: False)
    with pytest.raises(ImportError, match="needs numba"):
        GibbsSampler(backend="numba").sample(mrf)
    assert gibbs.resolve_backend("auto") == "numpy"
    res = GibbsSampler(backend="auto", n_chains=1, n_draws=3, n_warmup=0).sample(mrf)
    assert res.draws.shape == (1, 3, 6)


def test_auto_backend_falls_back_where_the_compiled_kernel_cannot_serve(monkeypatch):
    """With numba present, "auto" still runs every setting that runs without it.

    The compiled kernel serves the systematic scan of a model with
    ``term_arrays()``; for a random scan or another model "auto" must pick
    numpy (while an explicit "numba" refuses, see test_backend_errors).
    """
    from bayesian_subsample.samplers import _gibbs_compiled

    mrf = BinaryMRF.random_triplet(6, random_state=0)
    monkeypatch.setattr(_gibbs_compiled, "numba_available", lambda: True)
    assert gibbs.resolve_backend("auto", "systematic", mrf) == "numba"
    assert gibbs.resolve_backend("auto", "random", mrf) == "numpy"
    assert gibbs.resolve_backend("auto", "systematic", object()) == "numpy"
    res = GibbsSampler(backend="auto", scan="random", n_chains=1, n_draws=3,
                       n_warmup=0, random_state=0).sample(mrf)
    ref = GibbsSampler(backend="numpy", scan="random", n_chains=1, n_draws=3,
                       n_warmup=0, random_state=0).sample(mrf)
    np.testing.assert_array_equal(res.draws, ref.draws)
    with pytest.raises(ValueError, match="systematic scan only"):
        GibbsSampler(backend="numba", scan="random").sample(mrf)
