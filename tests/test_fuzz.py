"""Fuzzing: every estimator x every sampler x small well-formed and degenerate inputs.

Each example fits one estimator with one sampler (tiny warm-up and draws) on
a small random data set of one kind -- well formed, or with NaN or infinity,
one class, one row, fewer rows than features, constant or duplicated
columns, an exact fit, values near 1e300, string labels, weights, a
read-only memory map -- and asserts one of two outcomes:

* a ``ValueError`` or ``TypeError`` whose message names the problem (kinds
  that are invalid input list the words the message must contain; for valid
  input no exception is allowed at all), or
* a fitted model whose coefficients are finite and whose predictions are
  finite (regressors) or probabilities in [0, 1] (classifiers).

Every fit runs under a wall-clock budget (SIGALRM): a fit that does not
return within ``_FIT_BUDGET`` seconds fails the test as a hang.  The number
of examples is bounded and the search derandomised, so the test is
reproducible and adds well under a minute and a half to the default suite.
"""

import os
import signal
import tempfile
import warnings

import numpy as np

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bayesian_subsample import (
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianPoissonRegressor,
    BayesianSplineClassifier,
)
from bayesian_subsample.samplers import SAMPLERS

ESTIMATORS = {
    "logistic": BayesianLogisticRegression,
    "spline": BayesianSplineClassifier,
    "poisson": BayesianPoissonRegressor,
    "linear": BayesianLinearRegression,
}
SAMPLER_NAMES = sorted(SAMPLERS)
KINDS = ("well_formed", "nan", "inf", "huge", "one_class", "one_row", "n_less_than_d",
         "constant_column", "duplicated_column", "exact_fit", "string_labels", "weights",
         "readonly_memmap")

#: Kinds that are invalid input: the words one of which the error must contain.
#: Kinds not listed here are valid and must fit.
_INVALID = {
    "nan": ("nan",),
    "inf": ("infinity", "inf"),
    "huge": ("standardise", "rescale"),
}
#: Classifiers additionally refuse a single class (and one row is one class).
_INVALID_FOR_CLASSIFIERS = {"one_class": ("class",), "one_row": ("class",)}

#: Seconds a single fit may take before it counts as a hang.
_FIT_BUDGET = 30



class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang(f"fit did not return within {_FIT_BUDGET} s")


def _make_data(kind, estimator, n, d, seed):
    """``(X, y, fit_kwargs)`` of the requested kind."""
    rng = np.random.default_rng(seed)
    if kind == "one_row":
        n = 1
    if kind == "n_less_than_d":
        d = max(d, 3)
        n = min(n, d - 1)
    X = rng.standard_normal((n, d))
    beta = rng.normal(0.0, 1.0, d)
    eta = X @ beta
    if estimator in ("logistic", "spline"):
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(int)
        if n >= 2:
            y[:2] = [0, 1]  # both classes present
        if kind == "one_class":
            y[:] = 1
        if kind == "exact_fit":  # separable classes
            y = (eta > np.median(eta)).astype(int)
            y[np.argmax(eta)], y[np.argmin(eta)] = 1, 0
        if kind == "string_labels":
            y = np.where(y == 1, "yes", "no")
    elif estimator == "poisson":
        y = rng.poisson(np.exp(np.clip(0.3 * eta, -5, 3))).astype(float)
        if kind == "exact_fit":
            y = np.zeros(n)  # all-zero counts: the rate's MLE is 0
    else:
        y = 1.0 + eta + 0.5 * rng.standard_normal(n)
        if kind == "exact_fit":
            y = 1.0 + eta
    if kind == "constant_column":
        X[:, 0] = 3.0
    if kind == "duplicated_column" and d >= 2:
        X[:, 1] = X[:, 0]
    if kind == "nan":
        X[rng.integers(n), rng.integers(d)] = np.nan
    if kind == "inf":
        X[rng.integers(n), rng.integers(d)] = np.inf
    if kind == "huge":
        X[:, 0] *= 1e300
    kwargs = {}
    if kind == "weights":
        w = rng.integers(0, 4, n).astype(float)
        w[:2] = 1.0
        kwargs["sample_weight"] = w
    if kind == "readonly_memmap":
        fd, path = tempfile.mkstemp(suffix=".dat")
        os.close(fd)
        mm = np.memmap(path, dtype=np.float64, mode="w+", shape=X.shape)
        mm[:] = X
        mm.flush()
        del mm
        X = np.memmap(path, dtype=np.float64, mode="r", shape=X.shape)
        os.unlink(path)  # the mapping stays valid on POSIX
    return X, y, kwargs


def _check_fitted(est, X, classifier):
    assert np.all(np.isfinite(est.coef_)), est.coef_
    assert np.all(np.isfinite(est.intercept_)), est.intercept_
    if classifier:
        p = est.predict_proba(X)
        assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1)), p
        assert set(est.predict(X)) <= set(est.classes_)
    else:
        pred = est.predict(X)
        assert np.all(np.isfinite(pred)), pred


_PDMP = ("bps", "sbps", "psbps")
#: Words of the PDMP samplers' documented stopping errors.
_PDMP_STOPS = ("event rate stays at zero", "max_steps_per_draw")


@settings(max_examples=70, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(estimator=st.sampled_from(sorted(ESTIMATORS)), sampler=st.sampled_from(SAMPLER_NAMES),
       kind=st.sampled_from(KINDS), n=st.integers(2, 40), d=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_fuzz_estimators_and_samplers(estimator, sampler, kind, n, d, seed):
    if kind == "string_labels":
        assume(estimator in ("logistic", "spline"))
    classifier = estimator in ("logistic", "spline")
    X, y, kwargs = _make_data(kind, estimator, n, d, seed)
    invalid = dict(_INVALID, **(_INVALID_FOR_CLASSIFIERS if classifier else {}))
    params = dict(sampler=sampler, n_chains=1, n_warmup=30, n_draws=20, random_state=seed)
    if estimator == "spline":
        params.update(n_knots=3)
    est = ESTIMATORS[estimator](**params)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(_FIT_BUDGET)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                est.fit(X, y, **kwargs)
            except Exception as exc:
                if not isinstance(exc, (ValueError, TypeError)):
                    raise
                message = str(exc).lower()
                if sampler in _PDMP and any(w in message for w in _PDMP_STOPS):
                    # The documented end of a piecewise-deterministic chain on a
                    # (nearly) improper posterior, e.g. two separable rows under
                    # a wide prior: a clear error naming the cause (issue 18).
                    return
                words = invalid.get(kind)
                assert words is not None, f"valid input ({kind}) raised {exc!r}"
                assert any(w in message for w in words), (
                    f"{kind}: the message does not name the problem: {exc}")
                return
            assert kind not in invalid, f"invalid input ({kind}) was accepted"
            _check_fitted(est, X, classifier)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
