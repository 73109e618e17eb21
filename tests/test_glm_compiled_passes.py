"""The compiled GLM chunk sums (``models/_glm_numba.py``) of a compiled HMC-ECS set-up.

They replace the numpy chunk sums while a GLM's ``pass_kernel`` is
``"numba"``: the same sums to rounding (the terms come from ``exp_vec`` and
``log1p_unit``, the blocks differ), the validation scan of the first pass
with the same verdicts, and the centre check's remainder variances.
"""

import hashlib
import pathlib
import threading

import numpy as np
import pytest

pytest.importorskip("numba")

from bayesian_subsample import BayesianLogisticRegression  # noqa: E402
from bayesian_subsample.models import _glm_numba  # noqa: E402
from bayesian_subsample.models._glm import (  # noqa: E402
    GLM, GaussianFamily, LogisticFamily, PoissonFamily, _max_abs, compiled_family,
    compiled_passes)
from bayesian_subsample.samplers import HMCECS, _ecs_numba  # noqa: E402

FAMILIES = {
    "logistic": (LogisticFamily, lambda rng, eta: (rng.random(len(eta))
                                                   < 1 / (1 + np.exp(-eta))).astype(float)),
    "gaussian": (lambda: GaussianFamily(noise_scale=0.7),
                 lambda rng, eta: eta + 0.7 * rng.standard_normal(len(eta))),
    "poisson": (PoissonFamily, lambda rng, eta: rng.poisson(np.exp(eta)).astype(float)),
}


def _model(family, dtype, weighted, intercept, n=2500, d=5, seed=0):
    rng = np.random.default_rng(seed)
    make, draw = FAMILIES[family]
    X = (0.5 * rng.standard_normal((n, d))).astype(dtype)
    y = draw(rng, X.astype(np.float64) @ np.linspace(-0.4, 0.4, d))
    w = rng.random(n) + 0.5 if weighted else None
    # Chunks of 1100 rows: blocks of BLOCK_ROWS and a ragged last block.
    return GLM(X, y, make(), sample_weight=w, fit_intercept=intercept, chunk_size=1100)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("intercept", [True, False])
def test_compiled_sums_equal_the_numpy_sums(family, dtype, weighted, intercept):
    model = _model(family, dtype, weighted, intercept)
    theta = np.random.default_rng(1).standard_normal(model.dim) * 0.2
    for order in (0, 1, 2):
        ref = model.sums(theta, order=order)
        with compiled_passes(model):
            assert model._compiled_family() is not None
            got = model.sums(theta, order=order)
        assert model.pass_kernel == "numpy" and model._compiled_family() is None
        assert len(got) == order + 1
        for a, b in zip(got, ref):
            scale = np.max(np.abs(b))
            assert np.max(np.abs(np.subtract(a, b))) <= 1e-13 * scale, (order, a, b)
    # The comparison sees a wrong sum: other coefficients give another
    # gradient; so do the weights or the intercept left out.
    with compiled_passes(model):
        other = model.sums(theta + 0.01, order=2)
    assert not np.allclose(other[1], ref[1], rtol=1e-6, atol=0)
    code, a, b = compiled_family(model.family)
    X, y = np.ascontiguousarray(model.X), model.y.astype(np.float64)
    if weighted:
        dropped = _glm_numba.chunk_sums(X, y, None, theta, intercept, code, a, b, 1)[0]
        assert not np.allclose(dropped[1], ref[1], rtol=1e-6, atol=0)
    if intercept:
        shifted = theta.copy()
        shifted[0] = 0.0
        no_icpt = _glm_numba.chunk_sums(X, y, model.sample_weight, shifted, True, code, a, b,
                                        1)[0]
        assert not np.allclose(no_icpt[1], ref[1], rtol=1e-6, atol=0)


def test_models_the_kernel_cannot_serve_keep_the_numpy_sums():
    class OwnTerms(GLM):
        def eta_terms(self, yr, wr, eta, order=0):
            return super().eta_terms(yr, wr, eta, order)

    class DoubledDerivatives(GLM):
        """Overrides methods the compiled sums replace (not their rows)."""

        def backprop(self, Xr, g):
            return 2.0 * super().backprop(Xr, g)

        def weighted_outer(self, Xr, c, Xd=None):
            return 2.0 * super().weighted_outer(Xr, c, Xd)

    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 3))
    y = (rng.random(300) < 0.5).astype(float)
    theta = np.array([0.1, -0.2, 0.3, 0.05])
    for model in (OwnTerms(X, y, LogisticFamily()), DoubledDerivatives(X, y, LogisticFamily()),
                  GLM(X, y, type("OtherFamily", (LogisticFamily,), {})())):
        ref = model.sums(theta, order=2)
        with compiled_passes(model):
            assert model.pass_kernel == "numba" and model._compiled_family() is None
            assert model.remainder_variances(y, None, np.zeros((2, 300)), *[np.zeros(300)] * 4) \
                is None
            got = model.sums(theta, order=2)
        for a, b in zip(got, ref):
            assert np.array_equal(a, b)
    # Negative control: the plain GLM does take the compiled sums.
    plain = GLM(X, y, LogisticFamily())
    with compiled_passes(plain):
        assert plain._compiled_family() == (0, 0.0, 0.0)


def test_compiled_passes_nest_and_overlap_and_restore_the_kernel():
    model = _model("logistic", np.float64, False, True, n=50)
    opened, closed = threading.Event(), threading.Event()

    def other_thread():
        with compiled_passes(model):
            opened.set()
            closed.wait(10)

    with compiled_passes(model):
        worker = threading.Thread(target=other_thread)
        worker.start()
        opened.wait(10)
    # The first block closed while the other thread's is open: still compiled.
    assert model.pass_kernel == "numba"
    closed.set()
    worker.join(10)
    assert model.pass_kernel == "numpy"
    with pytest.raises(RuntimeError):
        with compiled_passes(model):
            with compiled_passes(model):
                raise RuntimeError("inside")
    assert model.pass_kernel == "numpy"
    # A kernel chosen before the first block is what the last one restores.
    model.pass_kernel = "numba"
    with compiled_passes(model):
        pass
    assert model.pass_kernel == "numba"


def test_edits_of_the_shared_arithmetic_force_the_kernels_to_recompile():
    """numba's disk cache checks a kernel against its own file only: the
    modules that inline ``_numba_math`` must be edited with it (module notes)."""
    source = pathlib.Path(_glm_numba.__file__).parent.parent / "_numba_math.py"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    for module in (_glm_numba, _ecs_numba):
        assert module.NUMBA_MATH_SHA256 == digest, (
            f"_numba_math.py changed: set {module.__name__}.NUMBA_MATH_SHA256 = {digest!r} "
            "(editing that file makes numba recompile its cached kernels)")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [None, np.nan, np.inf, -np.inf, 1e30])
def test_the_scan_gives_numpys_max_abs(dtype, bad):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((3000, 4)).astype(dtype)
    if bad is not None:
        X[2077, 2] = bad                              # inside the third block
    y = (rng.random(3000) < 0.5).astype(float)
    theta = np.full(5, 0.1)
    _, big = _glm_numba.chunk_sums(X, y, None, theta, True, 0, 0.0, 0.0, 2, scan=True)
    expected = _max_abs(X)
    assert (np.isnan(big) and np.isnan(expected)) or big == expected
    assert _glm_numba.chunk_sums(X, y, None, theta, True, 0, 0.0, 0.0, 1)[1] == 0.0


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("weighted", [False, True])
def test_remainder_variances_equal_numpys(family, weighted):
    model = _model(family, np.float64, weighted, True, n=700)
    rng = np.random.default_rng(5)
    Z, yr, wr = model.design(model.X), model.y.astype(float), model.sample_weight
    theta_star = rng.standard_normal(model.dim) * 0.1
    eta_star = Z @ theta_star
    a, b, c = model.eta_terms(yr, wr, eta_star, 2)
    # Draws far enough from theta* that the remainders are not lost to the
    # cancellation of ell and q (each O(1), their difference O(delta^3)).
    etas = (theta_star + 0.5 * rng.standard_normal((20, model.dim))) @ Z.T
    delta = etas - eta_star
    ell = model.eta_terms(yr, wr, etas, 0)[0]
    ref = (ell - (a + delta * (b + 0.5 * c * delta))).var(axis=1)
    assert model.remainder_variances(yr, wr, etas, eta_star, a, b, 0.5 * c) is None
    with compiled_passes(model):
        got = model.remainder_variances(yr, wr, etas, eta_star, a, b, 0.5 * c)
    np.testing.assert_allclose(got, ref, rtol=1e-10)
    # Negative control: without the curvature term the variances are others.
    with compiled_passes(model):
        other = model.remainder_variances(yr, wr, etas, eta_star, a, b, 0.0 * c)
    assert not np.allclose(other, ref, rtol=1e-3)


def _tall_logistic(n=120_000, d=4, seed=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ np.linspace(-1, 1, d) + 0.3)))).astype(int)
    return X, y


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_compiled_chain_gets_compiled_set_up_passes(monkeypatch):
    """``backend="auto"`` from AUTO_MIN_ROWS rows (and ``"numba"``) make the set-up
    passes compiled, ``"numpy"`` does not, and ``sampler_info_`` says which ran;
    the compiled set-up finds the same reference point to rounding."""
    X, y = _tall_logistic()
    kinds = []
    original = GLM._compiled_sums

    def spy(self, *args, **kwargs):
        kinds.append(self.pass_kernel)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GLM, "_compiled_sums", spy)
    fits = {}
    for backend in ("numpy", "auto", "numba"):
        kinds.clear()
        est = BayesianLogisticRegression(sampler=HMCECS(backend=backend), n_chains=1,
                                         n_warmup=30, n_draws=20, random_state=0, n_jobs=1)
        est.fit(X, y)
        compiled = backend != "numpy"
        assert est.sampler_info_[0]["backend"] == ("numba" if compiled else "numpy")
        assert (len(kinds) > 0) == compiled, backend
        assert est.sampler_info_[0]["setup_kernel"] == ("numba" if compiled else "numpy")
        assert est.sampler_.backend == backend
        fits[backend] = est
    # Below AUTO_MIN_ROWS "auto" keeps numpy, set-up included; a full-data
    # chain (subsample_size of all the rows, whose chain is numpy) keeps a
    # numpy set-up even with "numba", which would compile it otherwise.
    n = 5_000
    for backend, m, compiled in (("auto", "auto", False), ("numba", n, False),
                                 ("numba", "auto", True)):
        kinds.clear()
        est = BayesianLogisticRegression(sampler=HMCECS(backend=backend, subsample_size=m),
                                         n_chains=1, n_warmup=10, n_draws=10, random_state=0,
                                         n_jobs=1)
        est.fit(X[:n], y[:n])
        assert bool(kinds) == compiled, (backend, m)
        assert est.sampler_info_[0]["setup_kernel"] == ("numba" if compiled else "numpy")
    # The two compiled fits are the same fit; the numpy set-up makes the same
    # passes and finds the same reference point and mass matrix to rounding.
    np.testing.assert_array_equal(fits["auto"].coef_draws_, fits["numba"].coef_draws_)
    compiled, plain = fits["auto"], fits["numpy"]
    assert compiled.sampler_info_[0]["setup_passes"] == plain.sampler_info_[0]["setup_passes"]
    np.testing.assert_allclose(compiled.reference_point_, plain.reference_point_, rtol=1e-10)
    np.testing.assert_allclose(compiled.inverse_mass_matrix_, plain.inverse_mass_matrix_,
                               rtol=1e-10)
    assert compiled.subsample_size_[0] == plain.subsample_size_[0]
