"""scikit-learn's own estimator checks, with tiny sampling settings."""

import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayesian_subsample import HMC, HMCECS, BayesianLogisticRegression
from bayesian_subsample import BayesianLinearRegression, BayesianPoissonRegressor

_EXPECTED_FAILURES = {
    "check_sample_weight_equivalence_on_dense_data": (
        "MCMC draws with integer weights and with repeated rows use different random "
        "streams (and HMC-ECS subsamples rows, not weight units), so the fits agree only "
        "in distribution; tests/test_estimators.py checks that statistically."
    ),
}


def _expected_failed_checks(estimator):
    return _EXPECTED_FAILURES


@parametrize_with_checks(
    [
        BayesianLogisticRegression(n_chains=2, n_warmup=40, n_draws=40, random_state=0),
        BayesianLogisticRegression(sampler=HMC(), n_chains=2, n_warmup=40, n_draws=40,
                                   random_state=0),
        # Mini-batches of 5 rows: some check data sets have only ~20 rows.
        BayesianLogisticRegression(sampler=HMCECS(estimator="signed", batch_size=5),
                                   n_chains=2, n_warmup=40, n_draws=40, random_state=0),
        BayesianPoissonRegressor(n_chains=2, n_warmup=40, n_draws=40, random_state=0),
        BayesianLinearRegression(n_chains=2, n_warmup=40, n_draws=40, random_state=0),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_compatible_estimator(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)
