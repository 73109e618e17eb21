"""Every PDMP fit ends (issue 16 point 2, issue 18 point 3).

Degenerate data that used to hang SBPS/pSBPS for minutes (one or two rows,
n < d, an exact linear fit, constant or all-zero counts), values near 1e300
(LinAlgError) and n < d Poisson data (ZeroDivisionError) now either fit or
stop with a ValueError naming the cause; an event rate that stays zero along
an unbounded direction (all-zero counts with a wide prior: the intercept used
to move in a straight line, 13.0, 16.3, 19.6, ...) is detected.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import (
    BPS,
    SBPS,
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianPoissonRegressor,
    pSBPS,
)
from bayesian_subsample.samplers._pdmp import laplace_time_scale

KW = dict(n_chains=1, n_warmup=50, n_draws=50, random_state=0)


def _data(case):
    rng = np.random.default_rng(0)
    if case == "one_row_linear":
        return BayesianLinearRegression, rng.normal(size=(1, 2)), np.array([1.0])
    if case == "two_row_linear":
        return BayesianLinearRegression, rng.normal(size=(2, 2)), np.array([1.0, 2.0])
    if case == "n_below_d_linear":
        X = rng.normal(size=(10, 30))
        return BayesianLinearRegression, X, X[:, 0] + rng.normal(size=10)
    if case == "exact_linear":
        X = rng.normal(size=(100, 3))
        return BayesianLinearRegression, X, X @ np.array([1.0, 2.0, 3.0])
    if case == "constant_poisson":
        return BayesianPoissonRegressor, rng.normal(size=(100, 3)), np.full(100, 3.0)
    if case == "n_below_d_poisson":
        return (BayesianPoissonRegressor, rng.normal(size=(10, 30)),
                rng.poisson(2, size=10).astype(float))
    if case == "two_row_logistic":
        return BayesianLogisticRegression, rng.normal(size=(2, 2)), np.array([0, 1])
    if case == "huge_features":
        X = rng.normal(size=(100, 3)) * 1e300
        return BayesianLogisticRegression, X, (rng.random(100) < 0.5).astype(int)
    raise KeyError(case)


CASES = ["one_row_linear", "two_row_linear", "n_below_d_linear", "exact_linear",
         "constant_poisson", "n_below_d_poisson", "two_row_logistic", "huge_features"]


@pytest.mark.parametrize("sampler", [SBPS(), pSBPS()], ids=["sbps", "psbps"])
@pytest.mark.parametrize("case", CASES)
def test_degenerate_data_fit_or_stop_with_a_clear_error(case, sampler):
    cls, X, y = _data(case)
    est = cls(sampler=sampler, **KW)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow in numpy on 1e300
        try:
            est.fit(X, y)
        except ValueError as exc:
            msg = str(exc)
            assert any(k in msg for k in ("Standardise", "prior_scale", "sampler='hmc'")), msg
            return
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.predict(X)))


def test_all_zero_counts_stop_with_an_error_naming_the_cause():
    """The straight-line trajectory of the issue: no bounce, intercept drifting away."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    est = BayesianPoissonRegressor(sampler="sbps", **KW)
    with pytest.raises(ValueError, match="event rate stays at zero.*improper"):
        est.fit(X, np.zeros(100))


def test_ordinary_counts_pass_the_escape_check():
    """Negative control of the escape check: the same X with Poisson counts fits."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    y = rng.poisson(np.exp(0.3 + X @ np.array([0.4, -0.2, 0.1]))).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = BayesianPoissonRegressor(sampler="sbps", **KW).fit(X, y)
    assert np.all(np.isfinite(est.coef_))


@pytest.mark.parametrize("config", [SBPS(max_steps_per_draw=3), BPS(max_steps_per_draw=3)],
                         ids=["sbps", "bps"])
def test_step_budget_per_draw_ends_the_chain(config):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 2))
    y = (rng.random(300) < 0.5).astype(int)
    est = BayesianLogisticRegression(sampler=config, **KW)
    with pytest.raises(ValueError, match="more than 3 events in one draw interval"):
        est.fit(X, y)


def test_laplace_time_scale_ignores_non_positive_curvature():
    H = np.diag([-3.0, 0.0, 4.0, 1.0])
    assert laplace_time_scale(H) == pytest.approx(np.sqrt((1 / 4 + 1) / 2))
    with pytest.raises(ValueError, match="no curvature"):
        laplace_time_scale(-np.eye(2))
    with pytest.raises(ValueError, match="Standardise"):
        laplace_time_scale(np.array([[np.inf]]))


def test_explicit_laplace_metric_on_an_indefinite_hessian_is_a_clear_error():
    _, X, y = _data("one_row_linear")
    est = BayesianLinearRegression(sampler=SBPS(metric="laplace"), **KW)
    with pytest.raises(ValueError, match="positive definite"):
        est.fit(X, y)


def test_subsample_rule_works_on_small_data_and_explicit_excess_is_an_error():
    assert SBPS()._subsample_size(1) == 1 and SBPS()._subsample_size(50) == 50
    assert SBPS()._subsample_size(2_000) == 100
    assert SBPS()._subsample_size(100_000) == 1_000
    _, X, y = _data("two_row_logistic")
    with pytest.raises(ValueError, match="larger than the data"):
        BayesianLogisticRegression(sampler=SBPS(subsample_size=5), **KW).fit(X, y)
