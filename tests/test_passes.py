"""Full passes run as a map over chunks on the active joblib backend (DESIGN §3, issue 10).

The set-up passes (Taylor sums and mass matrix at theta*, the full-data
mode search, the BPS curvature bound) must give bit-identical results on
every backend and ``n_jobs``, because the partial sums are added in chunk
order; the estimator must actually send them through joblib during set-up
and leave the model's serial map in place for the chains.
"""

import warnings

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.preprocessing import SplineTransformer

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.estimators import _passes
from bayesian_subsample.estimators._passes import JoblibChunkMap, set_up_passes
from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import (GLM, BasisGLM, BSplineBasis, GaussianPrior,
                                       LinearRegressionGLM, LogisticFamily, MultinomialGLM,
                                       SoftmaxFamily, serial_map)


def _posterior(kind, chunk_size=700):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((6000, 4))
    y = (rng.random(6000) < 1 / (1 + np.exp(-X @ [0.5, -1.0, 0.3, 0.0]))).astype(float)
    w = rng.uniform(0.5, 2.0, 6000)
    if kind == "logistic":
        model = GLM(X, y, LogisticFamily(), sample_weight=w, chunk_size=chunk_size)
    elif kind == "spline":
        st = SplineTransformer(n_knots=5).fit(X[:, :2])
        basis = BSplineBasis([b.t for b in st.bsplines_], degree=3, include_bias=False)
        model = BasisGLM(X[:, :2], y, LogisticFamily(), basis, chunk_size=chunk_size)
    elif kind == "softmax":
        labels = np.digitize(X[:, 0] + 0.5 * rng.standard_normal(6000), [-0.5, 0.5])
        model = MultinomialGLM(X, labels, 3, sample_weight=w, chunk_size=chunk_size)
    else:
        model = LinearRegressionGLM(X, X @ [1.0, 2.0, 0.0, -1.0] + rng.standard_normal(6000),
                                    chunk_size=chunk_size)
    return TallPosterior(model, GaussianPrior(np.full(model.dim, 3.0)))


def _passes_of(post):
    theta = np.linspace(-0.2, 0.3, post.dim)
    ex = post.expand(theta)
    out = [ex.loglik, ex.grad, ex.hess, post.model.grad_sum(theta)]
    if isinstance(post.model.family, (LogisticFamily, SoftmaxFamily)):
        out.append(post.curvature_bound_matrix()[0])
        out.append(post.mode()[0])
    return out


def _assert_identical(a, b):
    for x, y in zip(a, b):
        assert np.array_equal(np.asarray(x), np.asarray(y)), np.max(np.abs(np.subtract(x, y)))


@pytest.mark.parametrize("kind", ["logistic", "spline", "linear", "softmax"])
@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_passes_bit_identical_on_joblib_backends(kind, backend):
    post = _posterior(kind)
    assert len(list(post.model.chunks())) > 5
    ref = _passes_of(post)
    with parallel_config(backend=backend, n_jobs=2), set_up_passes(post, None):
        assert isinstance(post.model.chunk_map, JoblibChunkMap)
        got = _passes_of(post)
    assert post.model.chunk_map is serial_map
    _assert_identical(got, ref)


def test_passes_bit_identical_on_dask():
    distributed = pytest.importorskip("distributed")
    post = _posterior("logistic")
    ref = _passes_of(post)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None):
        with parallel_config(backend="dask"), set_up_passes(post, None):
            got = _passes_of(post)
    _assert_identical(got, ref)


def test_reduction_order_matters_negative_control():
    """The exact comparison above can fail: adding the chunk sums in another order
    changes the last bits of the Hessian sums (so the ordered reduction is what
    makes the backends agree, not luck)."""
    post = _posterior("logistic", chunk_size=300)
    ref = post.expand(np.full(post.dim, 0.1))
    post.model.chunk_map = lambda fn, items: [fn(i) for i in items][::-1]
    shuffled = post.expand(np.full(post.dim, 0.1))
    assert np.allclose(shuffled.hess, ref.hess, rtol=1e-12)
    assert not np.array_equal(shuffled.hess, ref.hess)


def test_estimator_set_up_goes_through_joblib(monkeypatch):
    """A fit's set-up passes are dispatched by the joblib chunk map; the chains
    then see the serial map, and the draws are those of a serial set-up."""
    X, y, _ = make_higgs_like(n_samples=40_000, n_features=3, random_state=1)
    calls = []
    real = JoblibChunkMap.__call__

    def spy(self, fn, items):
        items = list(items)
        calls.append(len(items))
        return real(self, fn, items)

    settings = dict(sampler="rwmh", n_chains=2, n_warmup=20, n_draws=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = BayesianLogisticRegression(**settings).fit(X, y).coef_draws_
        monkeypatch.setattr(_passes.JoblibChunkMap, "__call__", spy)
        with parallel_config(backend="threading", n_jobs=2):
            est = BayesianLogisticRegression(**settings).fit(X, y)
    assert calls and all(n == 3 for n in calls)  # 40,000 rows in chunks of 16,384
    np.testing.assert_array_equal(est.coef_draws_, ref)


def _blas_threads(_item=None):
    from threadpoolctl import threadpool_info

    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_set_up_passes_run_single_threaded_blas_and_restore_it(backend):
    """One BLAS policy for the whole fit (issue 15): the set-up chunks run with
    one BLAS thread, in this process and in process workers alike, and the
    caller's thread count is back afterwards."""
    from threadpoolctl import threadpool_limits

    post = _posterior("logistic")
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        with parallel_config(backend=backend, n_jobs=2), set_up_passes(post, None):
            assert _blas_threads() == 1
            seen = post.model.chunk_map(_blas_threads, range(4))
        assert _blas_threads() == before
    assert seen == [1, 1, 1, 1]


def _wide_posterior():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((10_000, 60))
    y = (rng.random(10_000) < 0.3).astype(float)
    return TallPosterior(GLM(X, y, LogisticFamily()), GaussianPrior(np.full(61, 3.0)))


def test_set_up_sums_do_not_depend_on_the_callers_blas_threads():
    """With one BLAS policy (issue 15) the set-up sums -- hence theta*, the mass
    matrix and the draws -- are the same whatever thread count the caller's
    process has (before, the parent's passes ran with its default threads, and
    a multi-threaded gemm sums in another order)."""
    from threadpoolctl import threadpool_limits

    post = _wide_posterior()
    theta = np.linspace(-0.1, 0.1, post.dim)
    out = []
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"), set_up_passes(post, None):
            out.append(post.expand(theta))
    assert np.array_equal(out[0].hess, out[1].hess)
    assert np.array_equal(out[0].grad, out[1].grad)


def test_blas_threads_change_the_sums_negative_control():
    """Without the policy two BLAS threads give other last bits (where BLAS
    threads at all: skipped on a single-core machine)."""
    from threadpoolctl import threadpool_limits

    post = _wide_posterior()
    theta = np.linspace(-0.1, 0.1, post.dim)
    out = []
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"):
            out.append(post.expand(theta).hess)
    if np.array_equal(out[0], out[1]):
        pytest.skip("BLAS gives the same sums with 1 and 2 threads on this machine")
    assert np.allclose(out[0], out[1], rtol=1e-12)
