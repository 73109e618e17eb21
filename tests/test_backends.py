"""Chains give bit-identical draws on every joblib backend and leave BLAS as found (issue 18).

The per-chain BLAS limit used to be toggled from every chain thread: under
the threading backend the draws differed in the 8th digit from the other
backends and the caller's BLAS thread count was left at 1 after about half
the fits.
"""

import warnings

import numpy as np
import pytest
from joblib import parallel_config
from threadpoolctl import threadpool_info

from bayesian_subsample import BayesianSplineClassifier
from bayesian_subsample.datasets import make_bankruptcy_like


def _blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture(scope="module")
def spline_data():
    X, y, _ = make_bankruptcy_like(n_samples=1500, event_rate=0.1, random_state=5)
    return X[:, :3], y


def _fit(X, y, sampler, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with parallel_config(backend=backend, n_jobs=2):
            est = BayesianSplineClassifier(sampler=sampler, n_chains=2, n_warmup=30,
                                           n_draws=8, random_state=0)
            return est.fit(X, y).coef_draws_


def _check_backends(X, y, sampler, backends, repeats):
    before = _blas_threads()
    ref = _fit(X, y, sampler, "sequential")
    for backend in backends:
        for _ in range(repeats):
            draws = _fit(X, y, sampler, backend)
            assert np.array_equal(draws, ref), (backend, np.abs(draws - ref).max())
            assert _blas_threads() == before, backend


@pytest.mark.parametrize("sampler", ["hmc_ecs", "sghmc"])
def test_backends_give_identical_draws_and_restore_blas(spline_data, sampler):
    X, y = spline_data
    _check_backends(X, y, sampler, ["threading", "loky", "multiprocessing"], repeats=2)


def test_dask_backend_gives_identical_draws(spline_data):
    distributed = pytest.importorskip("distributed")
    X, y = spline_data
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None):
        _check_backends(X, y, "hmc_ecs", ["dask"], repeats=1)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["hmc_ecs", "sghmc"])
def test_backends_identical_over_ten_fits(spline_data, sampler):
    X, y = spline_data
    _check_backends(X, y, sampler, ["threading", "loky", "multiprocessing"], repeats=10)
