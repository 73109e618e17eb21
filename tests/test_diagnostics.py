"""Tests for bayesian_subsample.diagnostics.

Design: every statistical assertion is checked against a known truth with a
tolerance derived from the estimator's sampling variability (quoted in the
comments, measured over many replicates), over several seeds or many
replicate parameters at once, and is paired with a negative control showing
that the same assertion fails on data where it should fail.
"""

import ast
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import lfilter
from scipy.stats import norm

import bayesian_subsample.diagnostics as diag
from bayesian_subsample.diagnostics import (
    SummaryTable,
    computational_time,
    convergence_diagnostics,
    ess_bulk,
    ess_mean,
    ess_tail,
    inefficiency_factor,
    mcse_mean,
    mcse_sd,
    split_rhat,
    summarize,
    weighted_mean,
    weighted_quantile,
    weighted_sd,
)
from bayesian_subsample.diagnostics import _convergence, _validation

DIAG_DIR = Path(diag.__file__).resolve().parent
SEEDS = (0, 1, 2, 3, 4)
ARRAY_FUNCS = [ess_bulk, ess_tail, ess_mean, mcse_mean, mcse_sd, split_rhat, inefficiency_factor]


def ar1(rng, phi, shape):
    """Stationary-scale AR(1) chains along axis 1 with unit marginal variance.

    The first draw of every chain is drawn from the stationary distribution.
    """
    eps = rng.standard_normal(shape) * math.sqrt(1.0 - phi**2)
    eps[:, 0] = rng.standard_normal(eps[:, 0].shape)
    return lfilter([1.0], [1.0, -phi], eps, axis=1)


def signed_draws(rng, n_chain, n_draw, phi=0.5):
    """AR(1) draws with signs s = -1 w.p. 0.2 + 0.2 * (x > 0).

    The signed measure has density proportional to phi(x) (1 - 2 p(x)), i.e.
    0.6 phi(x) for x <= 0 and 0.2 phi(x) for x > 0 (normalising constant 0.4).
    Its mean is -phi(0), its second moment 1, and its CDF is 1.5 Phi(x) for
    x <= 0 and 0.5 + 0.5 Phi(x) for x > 0. The fraction of positive signs is
    tau = 0.7.
    """
    x = ar1(rng, phi, (n_chain, n_draw))
    p_neg = 0.2 + 0.2 * (x > 0)
    s = np.where(rng.random((n_chain, n_draw)) < p_neg, -1.0, 1.0)
    return x, s


SIGNED_MEAN = -norm.pdf(0.0)
SIGNED_SD = math.sqrt(1.0 - norm.pdf(0.0) ** 2)
SIGNED_QUANTILES = {
    0.05: norm.ppf(0.05 / 1.5),
    0.5: norm.ppf(1.0 / 3.0),
    0.95: norm.ppf(0.9),
}


# ---------------------------------------------------------------------------
# Public API and layering
# ---------------------------------------------------------------------------
def test_public_api():
    expected = {
        "split_rhat", "ess_bulk", "ess_tail", "ess_mean", "mcse_mean", "mcse_sd",
        "inefficiency_factor", "computational_time", "weighted_mean", "weighted_sd",
        "weighted_quantile", "summarize", "SummaryTable", "configurational_temperature",
        "ConfigurationalTemperature", "convergence_diagnostics",
    }
    assert set(diag.__all__) == expected
    for name in diag.__all__:
        obj = getattr(diag, name)
        assert callable(obj)
        assert obj.__doc__ and "Parameters" in obj.__doc__, name


@pytest.mark.parametrize(
    "func", [split_rhat, ess_bulk, ess_tail, ess_mean, mcse_mean, mcse_sd]
)
def test_docstrings_cite_references(func):
    doc = func.__doc__
    assert "References" in doc
    assert "Vehtari" in doc and "2021" in doc
    assert "Geyer" in doc and "1992" in doc


def test_ct_docstring_cites_dang_equations():
    doc = computational_time.__doc__
    assert "Dang" in doc and "2019" in doc
    assert "3.2" in doc and "5.4" in doc


def _imports(tree):
    """(node, module root, level, at module level) for every import."""
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name.split(".")[0], 0, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            root = (node.module or "").split(".")[0]
            yield node, root, node.level, id(node) in top


def test_layering_imports_only_numpy_scipy_stdlib():
    files = sorted(DIAG_DIR.glob("*.py"))
    assert files
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, root, level, at_top in _imports(tree):
            where = f"{path.name}:{node.lineno}"
            assert root != "bayesian_subsample", where
            assert level <= 1, f"{where}: relative import leaves the diagnostics package"
            if level == 0:
                allowed = root in {"numpy", "scipy"} or root in sys.stdlib_module_names
                # pandas only lazily, inside SummaryTable.to_pandas
                allowed = allowed or (root == "pandas" and not at_top)
                assert allowed, f"{where}: imports {root!r}"


def test_diagnostics_load_standalone_without_parent_package():
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        import numpy as np
        spec = importlib.util.spec_from_file_location(
            "standalone_diag", {str(DIAG_DIR / "__init__.py")!r},
            submodule_search_locations=[{str(DIAG_DIR)!r}],
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules["standalone_diag"] = mod
        spec.loader.exec_module(mod)
        x = np.random.default_rng(0).standard_normal((2, 50))
        mod.summarize(x)
        bad = [m for m in sys.modules if m.split(".")[0] == "bayesian_subsample"]
        assert not bad, bad
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env,
        cwd=str(DIAG_DIR.parent.parent.parent), timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ---------------------------------------------------------------------------
# iid draws: R-hat ~ 1, ESS ~ N  (with negative controls)
# ---------------------------------------------------------------------------
def test_iid_rhat_near_one_and_shift_is_caught():
    # 4 chains x 2000 draws, 25 replicate parameters per seed. For iid draws
    # split R-hat - 1 is O(1/n): across 500 replicates it stayed in
    # [0.9994, 1.0016]. Chains with means 0/1 (sd 1) give 1.134 +- 0.006.
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        iid = rng.standard_normal((4, 2000, 25))
        r = split_rhat(iid)
        assert np.all((r > 0.99) & (r < 1.01)), (seed, r.min(), r.max())

        shifted = rng.standard_normal((4, 2000, 25)) + np.array([0, 1, 0, 1])[:, None, None]
        r_bad = split_rhat(shifted)
        assert np.all(r_bad > 1.1), (seed, r_bad.min())
        assert not np.any((r_bad > 0.99) & (r_bad < 1.01))  # the iid check would fail


def test_folded_rhat_catches_scale_differences():
    # Same mean, chain sds 1,1,3,3: the bulk (location) R-hat cannot see it
    # (<= 1.002 over 200 replicates) but the folded part gives >= 1.139.
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 1000, 20)) * np.array([1.0, 1.0, 3.0, 3.0])[:, None, None]
    split = _convergence._split_chains(x)
    bulk = _convergence._rhat_core(_convergence._z_scale(split))
    assert np.all(bulk < 1.01)
    assert np.all(split_rhat(x) > 1.05)


def test_split_rhat_catches_within_chain_trend():
    # All chains share a drift: an unsplit R-hat is ~1 (<= 1.002), splitting
    # each chain into halves exposes the non-stationarity (>= 1.10).
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 1000, 20)) + np.linspace(0.0, 2.0, 1000)[None, :, None]
    unsplit = _convergence._rhat_core(_convergence._z_scale(x))
    assert np.all(unsplit < 1.01)
    assert np.all(split_rhat(x) > 1.05)


def test_iid_ess_near_number_of_draws():
    # 4 x 2500 = 10000 iid draws: bulk-ESS / N has mean 0.988 and sd 0.028
    # (measured over 200 replicates); band [0.85, 1.15] is > 4.5 sd wide on
    # each side, the average of 5 x 20 replicates (sd 0.003) must be within
    # [0.97, 1.01]. Tail ESS (indicator of 5%/95% quantiles) has sd 0.028 too.
    n = 4 * 2500
    ratios, tail_ratios = [], []
    for seed in SEEDS:
        x = np.random.default_rng(seed).standard_normal((4, 2500, 20))
        ratio = ess_bulk(x) / n
        assert np.all((ratio > 0.85) & (ratio < 1.15)), (seed, ratio.min(), ratio.max())
        ratios.append(ratio)
        tail_ratios.append(ess_tail(x) / n)
        np.testing.assert_allclose(ess_mean(x) / n, ratio, atol=0.03)
    assert 0.97 < np.mean(ratios) < 1.01
    assert 0.85 < np.min(tail_ratios) and np.max(tail_ratios) < 1.15
    # negative control: strongly autocorrelated chains of the same length
    bad = ess_bulk(ar1(np.random.default_rng(99), 0.9, (4, 2500, 20))) / n
    assert np.all(bad < 0.85)


# ---------------------------------------------------------------------------
# AR(1): ESS and IF against the closed form
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "phi, n_draw, sd_ratio",
    # sd of ess_mean / truth for 4 chains, measured over 200 replicates at
    # 4 x 2500 draws: 0.046 (phi=0.5) and 0.11 (phi=0.9); it scales as
    # 1/sqrt(draws), giving the values quoted for the sizes used here.
    [(0.5, 5000, 0.033), (0.9, 20000, 0.039)],
)
def test_ar1_ess_mean_and_inefficiency_factor(phi, n_draw, sd_ratio):
    rng = np.random.default_rng(int(phi * 100))
    n_chain, reps = 4, 10
    x = ar1(rng, phi, (n_chain, n_draw, reps))
    n = n_chain * n_draw
    true_if = (1.0 + phi) / (1.0 - phi)
    ratio = ess_mean(x) / (n / true_if)
    assert np.all(np.abs(ratio - 1.0) < 0.15), ratio  # >= 3.8 sd per replicate
    assert abs(ratio.mean() - 1.0) < 5 * sd_ratio / math.sqrt(reps)
    if_ = inefficiency_factor(x)
    np.testing.assert_allclose(if_, n / ess_mean(x), rtol=1e-12)
    assert np.all(np.abs(if_ / true_if - 1.0) < 0.2)
    # negative control: iid draws have IF ~ 1, far from (1+phi)/(1-phi)
    iid_if = inefficiency_factor(rng.standard_normal((n_chain, n_draw, reps)))
    assert np.all(np.abs(iid_if / true_if - 1.0) > 0.2)
    assert np.all(np.abs(iid_if - 1.0) < 0.15)


# ---------------------------------------------------------------------------
# MCSE
# ---------------------------------------------------------------------------
def test_mcse_mean_iid_is_sd_over_sqrt_n():
    # For iid draws mcse_mean / (sd/sqrt(N)) = sqrt(N / ESS): sd 0.024 at N=4000.
    for seed in SEEDS:
        x = np.random.default_rng(seed).standard_normal((4, 1000, 20))
        naive = x.std(axis=(0, 1), ddof=1) / math.sqrt(4000)
        ratio = mcse_mean(x) / naive
        assert np.all(np.abs(ratio - 1.0) < 0.12), ratio


def test_mcse_mean_matches_true_error_of_ar1_mean():
    # True sd of the mean of AR(1) with unit variance: sqrt(IF / N).
    # Estimated/true has sd 0.027 (phi=0.5, N=10000); 40 replicates also let
    # us check the *realised* spread of the replicate means (rel. sd 0.11).
    phi, n = 0.5, 4 * 2500
    x = ar1(np.random.default_rng(21), phi, (4, 2500, 40))
    true_se = math.sqrt((1 + phi) / (1 - phi) / n)
    est = mcse_mean(x)
    assert np.all(np.abs(est / true_se - 1.0) < 0.15)
    realised = x.mean(axis=(0, 1)).std(ddof=1)
    assert abs(realised / est.mean() - 1.0) < 0.35  # 3 sd of the realised spread
    # negative control: ignoring autocorrelation under-states the error by sqrt(3)
    naive = x.std(axis=(0, 1), ddof=1) / math.sqrt(n)
    assert np.all(np.abs(naive / true_se - 1.0) > 0.15)


def test_mcse_sd_iid_is_sigma_over_sqrt_2n():
    # For normal iid draws se(sd) = sigma / sqrt(2N); ratio sd 0.034 at N=4000.
    sigma = 2.5
    ratios = []
    for seed in SEEDS:
        x = sigma * np.random.default_rng(seed).standard_normal((4, 1000, 20))
        ratio = mcse_sd(x) / (sigma / math.sqrt(2 * 4000))
        assert np.all(np.abs(ratio - 1.0) < 0.17)
        ratios.append(ratio)
    assert abs(np.mean(ratios) - 1.0) < 0.03
    # negative control: AR(1) phi=0.9 has larger error than the iid formula
    y = sigma * ar1(np.random.default_rng(5), 0.9, (4, 1000, 20))
    assert np.all(mcse_sd(y) / (sigma / math.sqrt(2 * 4000)) > 1.17)


# ---------------------------------------------------------------------------
# Computational time
# ---------------------------------------------------------------------------
def test_computational_time_values():
    assert computational_time(2.0, 100) == pytest.approx(200.0)
    assert computational_time(2.0, 100, tau=1.0) == pytest.approx(200.0)
    # (2 * 0.75 - 1)**2 = 0.25
    assert computational_time(2.0, 100, tau=0.75) == pytest.approx(800.0)
    assert computational_time(3.0, 10, tau=0.9) == pytest.approx(30.0 / 0.64)
    out = computational_time(np.array([1.0, 2.0]), np.array([10.0, 20.0]), tau=0.75)
    np.testing.assert_allclose(out, [40.0, 160.0])
    # from draws, through the inefficiency factor
    x = ar1(np.random.default_rng(0), 0.5, (4, 500))
    assert computational_time(inefficiency_factor(x), 7) == pytest.approx(
        7 * 4 * 500 / ess_mean(x)
    )


@pytest.mark.parametrize("tau", [0.5, 0.3, 0.0, -1.0])
def test_computational_time_rejects_tau_at_most_half(tau):
    with pytest.raises(ValueError, match=r"tau.*> 0.5.*undefined"):
        computational_time(2.0, 100, tau=tau)


@pytest.mark.parametrize(
    "args, match",
    [
        ((2.0, 100, 1.5), "tau"),
        ((2.0, 100, np.nan), "tau"),
        ((0.0, 100), "inefficiency_factor"),
        ((-1.0, 100), "inefficiency_factor"),
        ((np.inf, 100), "inefficiency_factor"),
        ((2.0, 0), "evaluations_per_draw"),
    ],
)
def test_computational_time_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        computational_time(*args)


# ---------------------------------------------------------------------------
# Sign-weighted estimators
# ---------------------------------------------------------------------------
def test_weighted_with_positive_signs_equals_plain_estimates():
    x = np.random.default_rng(0).standard_normal((3, 200, 2, 2)) * 3 + 1
    ones = np.ones((3, 200))
    flat = x.reshape(600, 2, 2)
    np.testing.assert_allclose(weighted_mean(x, ones), flat.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(weighted_sd(x, ones), flat.std(axis=0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(weighted_sd(x, ones, ddof=0), flat.std(axis=0), rtol=1e-12)
    q = [0.0, 0.05, 0.3, 0.5, 0.95, 1.0]
    np.testing.assert_allclose(
        weighted_quantile(x, ones, q), np.quantile(flat, q, axis=0), rtol=1e-12, atol=1e-12
    )
    # any constant positive weight gives the same answers
    np.testing.assert_allclose(weighted_mean(x, 2.5 * ones), weighted_mean(x, ones))
    signed_mcse = mcse_mean(x, ones)
    assert signed_mcse.shape == (2, 2)
    np.testing.assert_allclose(signed_mcse, mcse_mean(x), rtol=1e-8)
    np.testing.assert_allclose(mcse_sd(x, ones), mcse_sd(x), rtol=1e-8)


def test_weighted_exact_ratio_estimator():
    draws = np.array([[1.0, 2.0, 3.0, 4.0]])
    signs = np.array([[1.0, 1.0, -1.0, 1.0]])
    assert weighted_mean(draws, signs) == pytest.approx((1 + 2 - 3 + 4) / 2)
    m = 2.0
    v0 = ((1 - m) ** 2 + (2 - m) ** 2 - (3 - m) ** 2 + (4 - m) ** 2) / 2
    assert weighted_sd(draws, signs, ddof=0) == pytest.approx(math.sqrt(v0))
    # ddof=1 rescales by n_eff / (n_eff - 1), n_eff = sum(s)^2 / sum(s^2) = 1
    with pytest.warns(RuntimeWarning, match="effective number"):
        assert np.isnan(weighted_sd(draws, signs))
    # a negative signed variance is reported as NaN with a warning
    with pytest.warns(RuntimeWarning, match="negative"):
        sd = weighted_sd(np.array([[0.0, 0.0, 5.0, 0.0]]), np.array([[1, 1, -1, 1]]), ddof=0)
        assert np.isnan(sd)


def test_weighted_estimators_recover_signed_target():
    # 4 x 50000 AR(0.5) draws with tau = 0.7: MCSE of the signed mean is
    # ~0.011 and of the quantiles < 0.02, the tolerances are >= 4 of them.
    # The plain (unsigned) estimates are the negative control.
    x, s = signed_draws(np.random.default_rng(3), 4, 50000)
    assert abs(weighted_mean(x, s) - SIGNED_MEAN) < 0.05
    assert abs(x.mean() - SIGNED_MEAN) > 0.3
    assert abs(weighted_sd(x, s) - SIGNED_SD) < 0.05
    assert abs(x.std(ddof=1) - SIGNED_SD) > 0.05
    probs = list(SIGNED_QUANTILES)
    est = weighted_quantile(x, s, probs)
    plain = np.quantile(x, probs)
    for p, e, pl in zip(probs, est, plain):
        assert abs(e - SIGNED_QUANTILES[p]) < 0.08, p
        assert abs(pl - SIGNED_QUANTILES[p]) > 0.15, p
    assert np.all(np.diff(weighted_quantile(x, s, np.linspace(0, 1, 41))) >= 0)
    assert (s > 0).mean() == pytest.approx(0.7, abs=0.01)


def test_weighted_quantile_monotone_rearrangement_by_hand():
    # draws 1..4 with signs (+, -, +, +): sum 2, signed CDF at the sorted
    # draws (0.5, 0, 0.5, 1) is not monotone; rearranged (sorted) it is
    # (0, 0.5, 0.5, 1), i.e. plotting positions (0, 0.5, 0.5, 1).
    draws = np.array([[3.0, 1.0, 4.0, 2.0]])
    signs = np.array([[1.0, 1.0, 1.0, -1.0]])
    np.testing.assert_allclose(
        weighted_quantile(draws, signs, [0.0, 0.25, 0.75, 1.0]), [1.0, 1.5, 3.5, 4.0]
    )
    # strongly signed random input: quantiles are non-decreasing in q
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 60, 5))
    s = np.where(rng.random((1, 60)) < 0.4, -1.0, 1.0)
    assert np.all(np.diff(weighted_quantile(x, s, np.linspace(0, 1, 101)), axis=0) >= 0)


def test_signed_mcse_matches_replicate_spread():
    # 400 independent replicates of 2 x 1000 signed AR(0.5) draws. The sd of
    # the replicate estimates has relative uncertainty 1/sqrt(2*400) = 3.5%,
    # so the 15% band is > 4 sd. The unsigned MCSE (ignores the signs; ~0.6 of
    # the truth) is the negative control.
    rng = np.random.default_rng(8)
    means, sds, se_mean, se_sd, naive = [], [], [], [], []
    for _ in range(400):
        x, s = signed_draws(rng, 2, 1000)
        means.append(weighted_mean(x, s))
        sds.append(weighted_sd(x, s))
        se_mean.append(mcse_mean(x, s))
        se_sd.append(mcse_sd(x, s))
        naive.append(mcse_mean(x))
    spread_mean, spread_sd = np.std(means, ddof=1), np.std(sds, ddof=1)
    assert abs(np.mean(se_mean) / spread_mean - 1.0) < 0.15
    assert abs(np.mean(se_sd) / spread_sd - 1.0) < 0.15
    assert abs(np.mean(naive) / spread_mean - 1.0) > 0.15
    assert abs(np.mean(means) - SIGNED_MEAN) < 4 * spread_mean / math.sqrt(400)


def test_weighted_quantile_shapes_and_validation():
    x = np.random.default_rng(0).standard_normal((2, 30, 3, 4))
    s = np.where(np.random.default_rng(1).random((2, 30)) < 0.1, -1.0, 1.0)
    assert weighted_quantile(x, s, 0.5).shape == (3, 4)
    assert weighted_quantile(x, s, [0.1, 0.9]).shape == (2, 3, 4)
    assert isinstance(weighted_quantile(x[..., 0, 0], s, 0.5), float)
    with pytest.raises(ValueError, match=r"q must contain probabilities in \[0, 1\]"):
        weighted_quantile(x, s, 1.5)
    with pytest.raises(ValueError, match="sum of signs is zero"):
        weighted_quantile(x[:, :2], np.array([[1.0, -1.0], [-1.0, 1.0]]), 0.5)


@pytest.mark.parametrize("func", [weighted_mean, weighted_sd])
def test_weighted_rejects_zero_sum_and_bad_signs(func):
    x = np.arange(8.0).reshape(2, 4)
    with pytest.raises(ValueError, match="sum of signs is zero"):
        func(x, np.array([[1, -1, 1, -1], [1, -1, 1, -1]]))
    with pytest.raises(ValueError, match=r"shape \(chain, draw\) = \(2, 4\)"):
        func(x, np.ones(8))
    with pytest.raises(ValueError, match="NaN or infinite"):
        func(x, np.array([[1, 1, np.nan, 1], [1, 1, 1, 1]]))


# ---------------------------------------------------------------------------
# Shapes, vectorisation and input validation
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("func", ARRAY_FUNCS)
def test_shape_handling_and_vectorisation(func):
    rng = np.random.default_rng(4)
    x = ar1(rng, 0.3, (3, 101, 2, 3)) + np.arange(6).reshape(2, 3)
    out = func(x)
    assert out.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            scalar = func(x[:, :, i, j])
            assert isinstance(scalar, float) and np.ndim(scalar) == 0
            assert out[i, j] == pytest.approx(scalar, rel=1e-12)


@pytest.mark.parametrize("func", ARRAY_FUNCS)
def test_chunked_computation_equals_single_block(func, monkeypatch):
    x = np.random.default_rng(0).standard_normal((2, 50, 7))
    whole = func(x)
    monkeypatch.setattr(_validation, "_MAX_BLOCK_ELEMENTS", 150)  # 1 param per block
    np.testing.assert_allclose(func(x), whole, rtol=1e-13)


def _rejecting_chains(rng, shape):
    """AR(1) draws in which about a third of the moves are rejected (repeated
    draws: ties for the ranks, as MCMC output has), plus a constant column."""
    x = ar1(rng, 0.5, shape)
    rejected = rng.random(shape[:2]) < 0.35
    rejected[:, 0] = False
    idx = np.where(rejected, 0, np.arange(shape[1]))
    idx = np.maximum.accumulate(idx, axis=1)
    x = np.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)
    if x.ndim == 3 and x.shape[2]:
        x[:, :, -1] = 2.5
    return x


@pytest.mark.parametrize("shape", [(1, 1000, 30), (4, 101, 5), (2, 7, 3), (3, 50),
                                   (1, 4, 2), (3, 100, 2, 3), (2, 10, 0)])
def test_convergence_diagnostics_equals_the_single_functions(shape):
    # The estimators' convergence check computes all four at once; it must
    # give what the separate public functions give.
    x = _rejecting_chains(np.random.default_rng(sum(shape)), shape)
    together = convergence_diagnostics(x)
    for name, func in [("r_hat", split_rhat), ("ess_bulk", ess_bulk),
                       ("ess_tail", ess_tail), ("ess_mean", ess_mean)]:
        alone = func(x)
        assert np.shape(together[name]) == np.shape(alone)
        if name in ("ess_tail", "ess_mean"):
            # FFTs batched over other columns round differently (pocketfft
            # vectorises across columns): up to 13 ulp seen on 200 random
            # shapes, so a few ulp, not bit for bit, on any platform.
            np.testing.assert_array_max_ulp(together[name], alone, maxulp=32)
        else:
            np.testing.assert_array_equal(together[name], alone, err_msg=name)  # bit-identical


def test_convergence_diagnostics_chunked_and_validated(monkeypatch):
    x = _rejecting_chains(np.random.default_rng(3), (2, 50, 7))
    whole = convergence_diagnostics(x)
    monkeypatch.setattr(_validation, "_MAX_BLOCK_ELEMENTS", 150)  # 1 param per block
    for name, values in convergence_diagnostics(x).items():
        # blocks of one parameter change the FFT batches: within a few ulp
        np.testing.assert_array_max_ulp(values, whole[name], maxulp=32)
    with pytest.raises(ValueError, match=r"at least 4 draws per chain"):
        convergence_diagnostics(np.zeros((2, 3)))


def test_average_ranks_are_scipy_rankdata_average():
    from scipy.stats import rankdata

    a = np.round(np.random.default_rng(2).standard_normal((6, 500)) * 3)  # many ties
    ranks, ordered = _convergence._average_ranks(a)
    np.testing.assert_array_equal(ranks, rankdata(a, method="average", axis=-1))
    np.testing.assert_array_equal(ordered, np.sort(a, axis=-1))


def test_empty_parameter_axis():
    x = np.zeros((2, 10, 0))
    for func in [ess_bulk, ess_tail, ess_mean, mcse_mean, mcse_sd, split_rhat]:
        assert func(x).shape == (0,)


def test_constant_parameter():
    x = np.full((4, 100), 3.0)
    assert ess_mean(x) == 400 and ess_bulk(x) == 400
    assert np.isnan(split_rhat(x))


@pytest.mark.parametrize("func", ARRAY_FUNCS + [summarize])
@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros(10), r"at least 2 dimensions; got a 1-d array"),
        (np.zeros((2, 3)), r"at least 4 draws per chain \(axis 1\); got 3"),
        (np.zeros((0, 10)), r"at least one chain"),
        (np.array([[0.0, 1.0, np.nan, 2.0, 3.0]]), r"non-finite values \(1 NaN, 0 inf"),
        (np.array([[0.0, 1.0, np.inf, 2.0, 3.0]]), r"non-finite values \(0 NaN, 1 inf"),
        (np.ones((2, 5), dtype=complex), "real-valued"),
        (np.array([["a", "b", "c", "d"]]), "numeric"),
    ],
)
def test_bad_input_raises_helpful_valueerror(func, bad, match):
    with pytest.raises(ValueError, match=match):
        func(bad)


def test_single_chain_and_odd_draws_supported():
    x = np.random.default_rng(0).standard_normal((1, 301))
    r = split_rhat(x)
    assert 0.99 < r < 1.02
    assert 150 < ess_bulk(x) < 450


# ---------------------------------------------------------------------------
# Cross-check against ArviZ
# ---------------------------------------------------------------------------
def _arviz_cases():
    rng = np.random.default_rng(2024)
    return {
        "iid": rng.standard_normal((4, 500)),
        "ar09": ar1(rng, 0.9, (4, 500)),
        "ar099": ar1(rng, 0.99, (3, 400)),
        "antithetic": ar1(rng, -0.7, (4, 400)),
        "odd_draws": rng.standard_normal((3, 101)),
        "min_draws": rng.standard_normal((2, 4)),
        "short": rng.standard_normal((3, 7)),
        "many_chains": rng.standard_normal((20, 50)),
        "heavy_tail": rng.standard_cauchy((4, 300)),
        "ties": rng.poisson(2.0, (4, 300)).astype(float),
        "rare_event": (rng.random((4, 200)) < 0.03).astype(float),
        "shifted": rng.standard_normal((4, 300)) + np.arange(4)[:, None],
        "scales": rng.standard_normal((4, 300)) * np.array([1.0, 1.0, 3.0, 3.0])[:, None],
    }


def splitmix_normal(shape, seed):
    """Deterministic normal variates (splitmix64 hash), independent of numpy's RNG."""
    i = np.arange(math.prod(shape), dtype=np.uint64) + np.uint64(seed) * np.uint64(1 << 32)
    z = i + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    return norm.ppf(u).reshape(shape)


# Values computed with ArviZ 0.23.4 (az.rhat method="rank", az.ess methods
# "bulk"/"tail"/"mean", az.mcse methods "mean"/"sd") on the data below, so
# that agreement with ArviZ is checked even where ArviZ is not installed.
GOLDEN = {
    "ar07_odd": {
        "split_rhat": 1.053569956522651,
        "ess_bulk": 62.78512933968563,
        "ess_tail": 198.37183839016328,
        "ess_mean": 62.64031073437813,
        "mcse_mean": 0.16586046997760168,
        "mcse_sd": 0.06612033254304367,
    },
    "ties_shifted": {
        "split_rhat": 1.0253480155467347,
        "ess_bulk": 219.18089813963016,
        "ess_tail": 146.92319790301454,
        "ess_mean": 205.50170131426125,
        "mcse_mean": 0.15122328359451442,
        "mcse_sd": 0.1449814952010692,
    },
}


def _golden_data(name):
    if name == "ar07_odd":
        return lfilter([1.0], [1.0, -0.7], splitmix_normal((3, 151), 1), axis=1)
    x = np.round(splitmix_normal((4, 60), 2) * 2)
    return x + np.array([0.0, 0.0, 0.0, 1.0])[:, None]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_values_computed_with_arviz(name):
    x = _golden_data(name)
    for func_name, expected in GOLDEN[name].items():
        got = getattr(diag, func_name)(x)
        assert got == pytest.approx(expected, rel=1e-8), func_name


def _tail_kwargs(az):
    """ArviZ 1.x needs the tail probabilities spelled out (same definition as 0.x:
    the smaller ESS of the 5% and 95% quantile indicators)."""
    return {"prob": (0.05, 0.95)} if int(az.__version__.split(".")[0]) >= 1 else {}


@pytest.fixture
def arviz_module():
    """ArviZ with its own numba path switched off for the test.

    ArviZ 0.23's numba branch of ``mcse(method="sd")`` calls ``float`` on a
    1-element array, which numpy >= 2.4 refuses; numba is installed with the
    test extra (for the compiled Gibbs kernel), which turns that branch on.
    The pure-numpy branch computes the same quantity, so the comparison is
    unchanged.  The switch is restored afterwards.
    """
    az = pytest.importorskip("arviz")
    switch = getattr(az, "Numba", None)
    was_on = bool(getattr(switch, "numba_flag", False))
    if was_on:
        switch.disable_numba()
    yield az
    if was_on:
        switch.enable_numba()


def test_matches_arviz(arviz_module):
    az = arviz_module
    tail = _tail_kwargs(az)
    methods = [
        (split_rhat, lambda a: az.rhat(a, method="rank")),
        (ess_bulk, lambda a: az.ess(a, method="bulk")),
        (ess_tail, lambda a: az.ess(a, method="tail", **tail)),
        (ess_mean, lambda a: az.ess(a, method="mean")),
        (mcse_mean, lambda a: az.mcse(a, method="mean")),
        (mcse_sd, lambda a: az.mcse(a, method="sd")),
    ]
    for name, x in _arviz_cases().items():
        for ours, theirs in methods:
            np.testing.assert_allclose(
                ours(x), float(theirs(x)), rtol=1e-8, err_msg=f"{ours.__name__} on {name}"
            )
    # the negative control: a deliberately different variant does NOT match
    x = _arviz_cases()["ar09"]
    assert not np.isclose(ess_mean(x), float(az.ess(x, method="bulk")), rtol=1e-8)


def test_matches_arviz_multidimensional(arviz_module):
    az = arviz_module
    x = ar1(np.random.default_rng(5), 0.6, (4, 300, 2, 3))
    ds = az.convert_to_dataset(x)
    np.testing.assert_allclose(split_rhat(x), az.rhat(ds)["x"].values, rtol=1e-8)
    np.testing.assert_allclose(ess_bulk(x), az.ess(ds)["x"].values, rtol=1e-8)
    np.testing.assert_allclose(ess_tail(x), az.ess(ds, method="tail", **_tail_kwargs(az))["x"].values,
                               rtol=1e-8)
    np.testing.assert_allclose(mcse_sd(x), az.mcse(ds, method="sd")["x"].values, rtol=1e-8)


# ---------------------------------------------------------------------------
# summarize / SummaryTable
# ---------------------------------------------------------------------------
EXPECTED_COLUMNS = [
    "mean", "sd", "5%", "50%", "95%", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat",
]


def test_summarize_columns_rows_and_values():
    x = ar1(np.random.default_rng(0), 0.4, (4, 200, 3)) + np.array([0.0, 5.0, -2.0])
    table = summarize(x)
    assert isinstance(table, SummaryTable)
    assert table.columns == EXPECTED_COLUMNS
    assert list(table) == EXPECTED_COLUMNS and len(table) == len(EXPECTED_COLUMNS)
    assert table.index == ["x[0]", "x[1]", "x[2]"]
    flat = x.reshape(800, 3)
    np.testing.assert_allclose(table["mean"], flat.mean(axis=0))
    np.testing.assert_allclose(table["sd"], flat.std(axis=0, ddof=1))
    np.testing.assert_allclose(table["5%"], np.quantile(flat, 0.05, axis=0))
    np.testing.assert_allclose(table["95%"], np.quantile(flat, 0.95, axis=0))
    np.testing.assert_allclose(table["mcse_mean"], mcse_mean(x))
    np.testing.assert_allclose(table["mcse_sd"], mcse_sd(x))
    np.testing.assert_allclose(table["ess_bulk"], ess_bulk(x))
    np.testing.assert_allclose(table["ess_tail"], ess_tail(x))
    np.testing.assert_allclose(table["r_hat"], split_rhat(x))
    assert table.row("x[1]")["mean"] == pytest.approx(flat[:, 1].mean())
    with pytest.raises(KeyError, match="available columns"):
        table["nope"]


def test_summary_columns_are_read_only():
    table = summarize(np.random.default_rng(0).standard_normal((2, 20)))
    with pytest.raises(ValueError, match="read-only"):
        table["mean"][0] = 1.0


def test_summarize_row_names():
    rng = np.random.default_rng(1)
    assert summarize(rng.standard_normal((2, 20))).index == ["x"]
    assert summarize(rng.standard_normal((2, 20, 2, 3))).index == [
        "x[0,0]", "x[0,1]", "x[0,2]", "x[1,0]", "x[1,1]", "x[1,2]",
    ]
    assert summarize(rng.standard_normal((2, 20, 2)), names="beta").index == ["beta[0]", "beta[1]"]
    assert summarize(rng.standard_normal((2, 20, 2)), names=["a", "b"]).index == ["a", "b"]
    with pytest.raises(ValueError, match="names has 3 entries but the draws have 2"):
        summarize(rng.standard_normal((2, 20, 2)), names=["a", "b", "c"])


def test_summarize_quantile_options():
    x = np.random.default_rng(2).standard_normal((2, 50))
    t = summarize(x, quantiles=(0.025, 0.975))
    assert t.columns[:4] == ["mean", "sd", "2.5%", "97.5%"]
    assert summarize(x, quantiles=()).columns == [
        c for c in EXPECTED_COLUMNS if not c.endswith("%")
    ]
    with pytest.raises(ValueError, match="probabilities"):
        summarize(x, quantiles=(0.5, 2.0))
    with pytest.raises(ValueError, match="distinct"):
        summarize(x, quantiles=(0.5, 0.5))


def test_summarize_with_signs_uses_weighted_estimates():
    x, s = signed_draws(np.random.default_rng(6), 4, 2000)
    table = summarize(x, signs=s)
    plain = summarize(x)
    assert table.columns == EXPECTED_COLUMNS
    assert table["mean"][0] == pytest.approx(weighted_mean(x, s))
    assert table["sd"][0] == pytest.approx(weighted_sd(x, s))
    np.testing.assert_allclose(
        [table[c][0] for c in ("5%", "50%", "95%")], weighted_quantile(x, s, [0.05, 0.5, 0.95])
    )
    assert table["mcse_mean"][0] == pytest.approx(mcse_mean(x, s))
    assert table["mcse_sd"][0] == pytest.approx(mcse_sd(x, s))
    # ESS and R-hat are those of the raw draws
    for c in ("ess_bulk", "ess_tail", "r_hat"):
        assert table[c][0] == plain[c][0]
    assert abs(table["mean"][0] - plain["mean"][0]) > 0.2
    # all-positive signs reproduce the unsigned summary
    same = summarize(x, signs=np.ones_like(s))
    for c in EXPECTED_COLUMNS:
        np.testing.assert_allclose(same[c], plain[c], rtol=1e-8, err_msg=c)


def test_summary_repr_and_exports():
    x = np.random.default_rng(3).standard_normal((2, 50, 2))
    table = summarize(x, names=["alpha", "beta"])
    text = repr(table)
    lines = text.splitlines()
    assert len(lines) == 3
    for col in EXPECTED_COLUMNS:
        assert col in lines[0]
    assert lines[1].startswith("alpha") and lines[2].startswith("beta ")
    assert len({len(line) for line in lines}) == 1  # fixed width
    assert str(table) == text
    d = table.to_dict()
    assert list(d) == EXPECTED_COLUMNS
    d["mean"][0] = 123.0  # a copy
    assert table["mean"][0] != 123.0
    assert table == summarize(x, names=["alpha", "beta"])
    assert table != summarize(x)


def test_summary_repr_elides_many_rows():
    table = summarize(np.random.default_rng(0).standard_normal((2, 20, 100)))
    text = repr(table)
    assert "..." in text and "[100 rows x 10 columns]" in text
    assert "x[0]" in text and "x[99]" in text and "x[50]" not in text
    assert len(str(table).splitlines()) == 101


def test_summary_to_pandas():
    pd = pytest.importorskip("pandas")
    table = summarize(np.random.default_rng(0).standard_normal((2, 30, 2)))
    df = table.to_pandas()
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == EXPECTED_COLUMNS
    assert list(df.index) == ["x[0]", "x[1]"]
    np.testing.assert_allclose(df["ess_bulk"].to_numpy(), table["ess_bulk"])


def test_summary_to_pandas_without_pandas(monkeypatch):
    table = summarize(np.random.default_rng(0).standard_normal((2, 30)))
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="requires pandas"):
        table.to_pandas()
