"""Full passes over float32 data: float32 products, float64 sums (issue 15).

A float32 ``X`` is never widened chunk-wide: ``eta``, the terms and the
gradient come from blocks widened exactly to float64, the curvature sums
``sum_i c_i x_i x_i^T`` from float32 matrix products of blocks of
``FLOAT32_GEMM_ROWS`` rows, added into float64.  The tolerance is the
textbook bound for such a product (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., eq. 3.5): each entry of a block's product
has error at most ``gamma_{k+2} sum_i |c_i x_ij x_il|`` with ``k`` the rows
of the block, ``gamma_k = k u / (1 - k u)`` and ``u = 2^-24`` (the ``+2``:
rounding ``c_i`` to float32 and the scaled copy ``c_i x_ij``).  Value and
gradient are float64 sums of the same float64 numbers in another order,
so they get the float64 bound with ``k = n``.
"""

import warnings

import numpy as np
import pytest

from bayesian_subsample.models import GLM, LogisticFamily, MultinomialGLM, PoissonFamily
from bayesian_subsample.models._glm import FLOAT32_GEMM_ROWS, _blocked_outer


def _gamma(k, u):
    return k * u / (1 - k * u)


def _data(n=40_000, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X32 = (rng.standard_normal((n, d)) * rng.uniform(0.5, 3.0, d)).astype(np.float32)
    w = rng.uniform(0.5, 2.0, n)
    return rng, X32, w


def _design_abs(X, fit_intercept):
    Z = np.abs(X.astype(np.float64))
    return np.hstack([np.ones((len(Z), 1)), Z]) if fit_intercept else Z


def _check(m32, m64, theta, Zabs, c_abs, order=2):
    """Float32-pass sums against the float64 sums of the same values, within the bounds."""
    a, b = m32.sums(theta, order), m64.sums(theta, order)
    n = m32.n_obs
    ell_abs, d1_abs = (np.abs(t) for t in m64.eta_terms(m64.y, m64.sample_weight,
                                                        m64.eta(theta, m64.X), 1))
    # Value and gradient: the same float64 terms, summed in another order.
    u64 = 2.0**-53
    assert abs(a[0] - b[0]) <= 2 * _gamma(n, u64) * ell_abs.sum()
    assert np.all(np.abs(a[1] - b[1]) <= 2 * _gamma(n + 2, u64) * (Zabs.T @ d1_abs))
    if order < 2:
        return
    # Curvature: float32 products of FLOAT32_GEMM_ROWS rows, sums in float64
    # (the float64 reference's own error is negligible next to it).
    bound = _gamma(FLOAT32_GEMM_ROWS + 2, 2.0**-24) * (Zabs.T * c_abs) @ Zabs
    err = np.abs(a[2] - b[2])
    assert np.all(err <= bound), np.max(err / bound)
    # ... and the bound is not vacuous: the products are not exact.
    assert err.max() > 0


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("family", [LogisticFamily, PoissonFamily])
def test_float32_pass_sums_match_float64_within_the_rounding_bound(fit_intercept, weighted,
                                                                  family):
    rng, X32, w = _data()
    theta = rng.normal(0.0, 0.2, X32.shape[1] + fit_intercept)
    eta = X32.astype(np.float64) @ theta[fit_intercept:] + (theta[0] if fit_intercept else 0)
    y = (rng.random(len(X32)) < 1 / (1 + np.exp(-eta))).astype(float) if family is LogisticFamily \
        else rng.poisson(np.exp(np.clip(eta, -5, 3))).astype(float)
    W = w if weighted else None
    m32 = GLM(X32, y, family(), sample_weight=W, fit_intercept=fit_intercept, chunk_size=9000)
    m64 = GLM(X32.astype(np.float64), y, family(), sample_weight=W,
              fit_intercept=fit_intercept, chunk_size=9000)
    assert m32.chunk_rows(0, 10)[0].dtype == np.float32       # no chunk-wide float64 copy
    c_abs = np.abs(m64.eta_terms(y, W, m64.eta(theta, m64.X), 2)[2])
    _check(m32, m64, theta, _design_abs(X32, fit_intercept), c_abs)
    _check(m32, m64, theta, _design_abs(X32, fit_intercept), c_abs, order=1)
    np.testing.assert_allclose(m32.grad_sum(theta), m64.grad_sum(theta), rtol=1e-12, atol=1e-9)


def test_float32_curvature_bound_negative_control():
    """The same bound fails for products of rows truncated to bfloat16 (8-bit
    mantissa, as a lower-precision store would keep them): the check tells a
    coarser product from the float32 one.  Being a worst-case bound it cannot
    tell float32 accumulation over 1024-row blocks from accumulation over all
    rows (both stay far inside it); it guards the precision of the products,
    not the blocking."""
    rng, X32, w = _data(n=20_000)
    c = -rng.uniform(0.01, 0.25, len(X32))
    Zabs = np.abs(X32.astype(np.float64))
    bound = _gamma(FLOAT32_GEMM_ROWS + 2, 2.0**-24) * (Zabs.T * np.abs(c)) @ Zabs
    exact = (X32.astype(np.float64).T * c) @ X32.astype(np.float64)
    assert np.all(np.abs(_blocked_outer(X32, c) - exact) <= bound)
    truncated = (X32.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    coarse = _blocked_outer(truncated, c)
    assert not np.all(np.abs(coarse - exact) <= bound)


def test_float32_multinomial_sums_match_float64():
    rng, X32, w = _data(n=30_000, d=5)
    labels = rng.integers(0, 3, len(X32))
    m32 = MultinomialGLM(X32, labels, 3, sample_weight=w, chunk_size=7000)
    m64 = MultinomialGLM(X32.astype(np.float64), labels, 3, sample_weight=w, chunk_size=7000)
    theta = rng.normal(0.0, 0.2, m32.dim)
    a, b = m32.sums(theta, 2), m64.sums(theta, 2)
    assert a[0] == pytest.approx(b[0], rel=1e-13)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-8)
    # Curvature entries: |c_ikl| <= w_i / 4 for the softmax, so the float32
    # bound of each class pair's block is gamma * (w/4) |z|^T |z|.
    Zabs = _design_abs(X32, True)
    block_bound = _gamma(FLOAT32_GEMM_ROWS + 2, 2.0**-24) * (Zabs.T * (w / 4)) @ Zabs
    err = np.abs(a[2] - b[2]).reshape(3, 6, 3, 6)
    assert np.all(err <= block_bound[None, :, None, :])
    outer32 = sum(m32.map_chunks("_block_design_outer"))
    outer64 = sum(m64.map_chunks("_block_design_outer"))
    assert np.all(np.abs(outer32 - outer64)
                  <= _gamma(FLOAT32_GEMM_ROWS + 2, 2.0**-24) * (Zabs.T * w) @ Zabs)
    np.testing.assert_allclose(m32.grad_sum(theta), m64.grad_sum(theta), rtol=1e-12, atol=1e-8)


@pytest.mark.parametrize("sampler", ["hmc_ecs", "hmc"])
def test_float32_curvature_overflow_is_refused_before_sampling(sampler):
    """A float32 feature of 6e19 overflows the float32 curvature products
    (the float64 route would not): the set-up refuses with the fix named,
    instead of a NaN Newton decrement ending the theta* search quietly."""
    from bayesian_subsample import BayesianLogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 3)).astype(np.float32)
    y = (rng.random(3000) < 0.5).astype(int)
    est = BayesianLogisticRegression(sampler=sampler, n_chains=1, n_warmup=10, n_draws=10,
                                     random_state=0)
    est.fit(X, y)                                    # control: the same data without it fit
    X[5, 1] = 6e19
    with warnings.catch_warnings(), pytest.raises(FloatingPointError, match="Standardise"):
        warnings.simplefilter("ignore", RuntimeWarning)      # numpy's overflow warning
        est.fit(X, y)
