"""The compiled HMC-ECS chain (``HMCECS(backend="numba")``) against the numpy kernel.

For the same seed the compiled loop must consume the generator exactly as
the numpy kernel does and, on the fixed problems below (where no decision
sits within rounding of its threshold), make the same accept/reject
decisions (subsample and HMC), count the same divergences and evaluations,
and give draws equal to rounding.  That is not a general guarantee: warm-up
adaptation can amplify rounding differences until a decision flips
(``_ecs_compiled`` module notes).  A deliberately different random
stream is the negative control: the same comparison must fail.  The
statistical check against the quadrature posterior runs both backends in
``tests/test_samplers.py``.
"""

import numpy as np
import pytest

from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import GLM, GaussianPrior, PoissonFamily
from bayesian_subsample.samplers import HMCECS, _ecs_compiled

from .conftest import make_gaussian, make_logistic

pytest.importorskip("numba")

#: Relative agreement of the draws (to the posterior scale) after hundreds of
#: iterations: rounding differences (BLAS and libm in another order) grow a
#: little along the trajectories but stay many orders below Monte Carlo error.
RTOL = 1e-10


def _poisson(n=3000, d=3, seed=2, weights=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = rng.poisson(np.exp(0.2 + X @ rng.normal(0, 0.3, d))).astype(float)
    w = rng.uniform(0.5, 2.0, n) if weights else None
    model = GLM(X, y, PoissonFamily(), sample_weight=w)
    return TallPosterior(model, GaussianPrior(np.full(model.dim, 5.0)))


PROBLEMS = {
    "logistic": lambda: (make_logistic(n=3000, d=4, seed=1), {}),
    "logistic_weighted_diag": lambda: (make_logistic(n=3000, d=3, seed=4, weights=True),
                                       {"mass_matrix": "diagonal", "n_blocks": 20}),
    "logistic_order1_fixed_step": lambda: (make_logistic(n=2500, d=2, seed=6),
                                           {"taylor_order": 1, "step_size": 0.3,
                                            "subsample_size": 800}),
    "gaussian_chebyshev": lambda: (make_gaussian(n=3000, d=3, seed=3),
                                   {"integration_time": "chebyshev",
                                    "mass_matrix": "diagonal"}),
    "poisson_weighted": lambda: (_poisson(), {}),
}


def _run(post, backend, seed, n_warmup=150, n_draws=300, **kw):
    config = HMCECS(backend=backend, **kw)
    config.validate(post.n_obs)
    prep = config.prepare(np.random.default_rng(0), post)
    rng = np.random.default_rng(seed)
    res = config.run_chain(rng, post, prep, n_warmup, n_draws)
    # The next numbers of the generator: equal only if both consumed the same.
    return res, rng.random(4)


def _accepted(draws):
    return np.any(np.diff(draws, axis=0) != 0, axis=1)


def _assert_same_chain(a, b):
    ra, tail_a = a
    rb, tail_b = b
    scale = np.std(ra.draws, axis=0) + np.abs(np.mean(ra.draws, axis=0))
    assert ra.draws.shape == rb.draws.shape
    assert np.all(np.abs(ra.draws - rb.draws) <= RTOL * scale), \
        np.max(np.abs(ra.draws - rb.draws) / scale)
    assert np.array_equal(_accepted(ra.draws), _accepted(rb.draws))
    assert np.array_equal(ra.stats["diverging"], rb.stats["diverging"])
    assert np.array_equal(ra.stats["n_steps"], rb.stats["n_steps"])
    assert np.array_equal(ra.stats["n_obs_evaluated"], rb.stats["n_obs_evaluated"])
    for name in ("acceptance_rate", "subsample_acceptance_rate", "step_size", "lp",
                 "loglik_var", "energy"):
        np.testing.assert_allclose(rb.stats[name], ra.stats[name], rtol=1e-8, atol=1e-10,
                                   err_msg=name)
    assert ra.n_obs_evaluated_warmup == rb.n_obs_evaluated_warmup
    assert ra.n_obs_evaluated_sampling == rb.n_obs_evaluated_sampling
    assert ra.n_divergent_warmup == rb.n_divergent_warmup
    assert ra.step_size == pytest.approx(rb.step_size, rel=1e-9)
    assert np.array_equal(tail_a, tail_b)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_compiled_chain_makes_the_numpy_kernels_decisions(name):
    post, kw = PROBLEMS[name]()
    a = _run(post, "numpy", 7, **kw)
    b = _run(post, "numba", 7, **kw)
    assert a[0].extra["backend"] == "numpy" and b[0].extra["backend"] == "numba"
    # Both kinds of decision happen in these runs (else the check says little).
    assert 0 < np.mean(_accepted(a[0].draws)) < 1
    if not name.startswith("gaussian"):  # order 2 on a Gaussian model: sigma2 = 0
        assert np.mean(a[0].stats["subsample_acceptance_rate"]) < 1
    _assert_same_chain(a, b)


def test_a_different_random_stream_fails_the_same_check():
    """Negative control: the compiled chain with another seed."""
    post, kw = PROBLEMS["logistic"]()
    a = _run(post, "numpy", 7, **kw)
    with pytest.raises(AssertionError):
        _assert_same_chain(a, _run(post, "numba", 8, **kw))


def test_divergences_are_counted_as_in_the_numpy_kernel():
    """A step size far too large: non-finite or huge energy errors are
    divergences, rejected and counted alike."""
    post = make_logistic(n=3000, d=3, seed=9, prior_scale=100.0)
    kw = {"step_size": 4.0, "mass_matrix": "diagonal"}
    a = _run(post, "numpy", 3, n_warmup=20, n_draws=100, **kw)
    b = _run(post, "numba", 3, n_warmup=20, n_draws=100, **kw)
    assert a[0].stats["diverging"].sum() > 5
    _assert_same_chain(a, b)


def test_continued_chain_and_stop_and_callback():
    post, kw = PROBLEMS["logistic"]()
    config = HMCECS(backend="numba")
    prep = config.prepare(np.random.default_rng(0), post)
    seen = []
    first = config.run_chain(np.random.default_rng(1), post, prep, 40, 30,
                             callback=lambda i, div, eps: seen.append((i, div, eps)))
    assert [s[0] for s in seen] == list(range(1, 71))
    assert all(np.isfinite(s[2]) and s[2] > 0 for s in seen)
    rng = np.random.default_rng(1)
    part = config.run_chain(rng, post, prep, 40, 30)
    more = config.run_chain(rng, post, prep, 0, 20, resume=part.resume)
    whole = config.run_chain(np.random.default_rng(1), post, prep, 40, 50)
    # A continued chain is the longer chain, bit for bit.
    assert np.array_equal(np.vstack([part.draws, more.draws]), whole.draws)
    assert np.array_equal(first.draws, part.draws)

    class Flag:
        calls = 0

        def is_set(self):
            Flag.calls += 1
            return Flag.calls > 3

    stopped = config.run_chain(np.random.default_rng(1), post, prep, 400, 30, stop=Flag())
    assert stopped.interrupted and len(stopped.draws) == 0
    assert Flag.calls == 4  # checked before each segment of SEGMENT iterations


def test_backend_choice_and_errors(monkeypatch):
    post = make_logistic(n=3000, d=2, seed=1)
    with pytest.raises(ValueError, match="backend must be one of"):
        HMCECS(backend="jax").validate(post.n_obs)
    with pytest.raises(ValueError, match="perturbed estimator only"):
        HMCECS(backend="numba", estimator="signed").validate(post.n_obs)
    # auto keeps the numpy kernel below AUTO_MIN_ROWS rows.
    res, _ = _run(post, "auto", 1, n_warmup=10, n_draws=10)
    assert res.extra["backend"] == "numpy"
    est = post.difference_estimator(post.expand(post.mode()[0]), 500)
    assert _ecs_compiled.plan("auto", est, _ecs_compiled.AUTO_MIN_ROWS) == "numba"
    assert _ecs_compiled.plan("auto", est, _ecs_compiled.AUTO_MIN_ROWS - 1) == "numpy"
    monkeypatch.setattr(_ecs_compiled, "numba_available", lambda: False)
    assert _ecs_compiled.plan("auto", est, 10**7) == "numpy"
    with pytest.raises(ImportError, match="pip install numba"):
        HMCECS(backend="numba").validate(post.n_obs)


def test_unserved_models_fall_back_or_raise():
    from bayesian_subsample.models import GaussianPrecisionPrior

    post = make_logistic(n=3000, d=2, seed=1)
    other = TallPosterior(post.model, GaussianPrecisionPrior(np.eye(post.dim) / 9.0))
    est = other.difference_estimator(other.expand(other.mode()[0]), 500)
    assert _ecs_compiled.plan("auto", est, 10**7) == "numpy"
    with pytest.raises(ValueError, match="diagonal Gaussian prior"):
        _ecs_compiled.plan("numba", est, 10**7)


def test_numba_refuses_unserved_models_before_the_set_up_passes(monkeypatch):
    """``backend="numba"`` on a model or prior the kernel cannot serve raises
    in ``prepare`` before the theta* search and its passes run (at 10^8 rows
    those take tens of seconds), with the message of ``plan``; the negative
    control ``"auto"`` on the same posterior does run the set-up."""
    from bayesian_subsample.models import GaussianPrecisionPrior, MultinomialGLM
    from bayesian_subsample.samplers import _hmc_family

    rng = np.random.default_rng(3)
    X = rng.standard_normal((3000, 2))
    multi = MultinomialGLM(X, rng.integers(0, 3, 3000), 3)
    logistic = make_logistic(n=3000, d=2, seed=1)
    cases = [(TallPosterior(multi, GaussianPrior(np.full(multi.dim, 5.0))),
              "one linear predictor per row"),
             (TallPosterior(logistic.model, GaussianPrecisionPrior(np.eye(logistic.dim) / 9.0)),
              "diagonal Gaussian prior")]
    calls = []
    real = _hmc_family.prepare_at_full_data_mode

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(_hmc_family, "prepare_at_full_data_mode", counted)
    for post, why in cases:
        config = HMCECS(backend="numba")
        config.validate(post.n_obs)
        with pytest.raises(ValueError, match=f'backend="numba" cannot run this chain: .*{why}'):
            config.prepare(np.random.default_rng(0), post)
        assert calls == []
    # Negative control: "auto" runs the set-up on the same posterior (and the numpy kernel).
    HMCECS(backend="auto").prepare(np.random.default_rng(0), cases[1][0])
    assert calls == [1]


def test_numba_refusal_through_the_estimator_on_three_classes():
    from bayesian_subsample import BayesianLogisticRegression

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((3000, 2)), rng.integers(0, 3, 3000)
    est = BayesianLogisticRegression(sampler=HMCECS(backend="numba"), n_chains=1,
                                     n_warmup=20, n_draws=20)
    with pytest.raises(ValueError, match="one linear predictor per row"):
        est.fit(X, y)


def test_backend_reported_for_full_data_and_signed_chains():
    """A full-data chain (n <= min_subsample_size) runs the exact full-data
    HMC kernel for every backend, ``"numba"`` included (documented in
    :class:`HMCECS`), and says so; the signed estimator reports ``"numpy"``,
    also after its switch from the perturbed estimator in warm-up."""
    small = make_logistic(n=600, d=2, seed=1)
    res, _ = _run(small, "numba", 1, n_warmup=10, n_draws=10)
    assert res.extra["full_data"] and res.extra["backend"] == "numpy"
    post = make_logistic(n=3000, d=2, seed=1)
    res, _ = _run(post, "auto", 1, n_warmup=20, n_draws=10, estimator="signed")
    assert res.extra["backend"] == "numpy" and "n_products" in res.extra
    # Control: a subsampling chain on the same data with "numba" runs compiled.
    res, _ = _run(post, "numba", 1, n_warmup=10, n_draws=10)
    assert not res.extra["full_data"] and res.extra["backend"] == "numba"


def _ulp_distance(a, b):
    """Units in the last place between float64 arrays of one sign (0 if both NaN)."""
    ia, ib = a.view(np.int64), b.view(np.int64)
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.abs(ia - ib))


def _exp_pair(x):
    """``exp_vec`` in a compiled loop (the way the kernel uses it) and ``math.exp``
    (libm's, which numba calls)."""
    import math

    import numba

    from bayesian_subsample.samplers import _ecs_numba

    @numba.njit(error_model="numpy")
    def loop(x, out, ref):
        for i in range(x.shape[0]):
            out[i] = _ecs_numba.exp_vec(x[i])
            ref[i] = math.exp(x[i])

    # The loop the kernel runs has no library call in it, so LLVM vectorises
    # it; the loop above (with math.exp) may not.  Both must give the same
    # bits.
    @numba.njit(error_model="numpy")
    def alone(x, out):
        for i in range(x.shape[0]):
            out[i] = _ecs_numba.exp_vec(x[i])

    out, ref, vec = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    loop(x, out, ref)
    alone(x, vec)
    assert np.array_equal(out, vec, equal_nan=True)
    return out, ref


@pytest.mark.parametrize("lo,hi", [(-746.0, 0.0), (-1.0, 0.0), (-1e-6, 0.0), (0.0, 710.0),
                                   (-0.5 * np.log(2), 0.5 * np.log(2))])
def test_exp_vec_within_an_ulp_of_exp_on_dense_grids(lo, hi):
    """The library-call-free exp of the compiled logistic and Poisson terms
    against ``math.exp`` (libm, < 1 ulp) on 2*10^6 points per range,
    subnormal results included, within 1 ulp as its docstring says; the same
    bound fails for an exp off by 2 ulp (negative control)."""
    x = np.linspace(lo, hi, 2_000_001)
    got, ref = _exp_pair(x)
    dist = _ulp_distance(got, ref)
    assert dist.max() <= 1, (x[np.argmax(dist)], dist.max())
    off = got * (1.0 + 2 * 2.0 ** -52)
    assert _ulp_distance(off, ref).max() > 1


def test_exp_vec_edges():
    """Exact at 0 and -0, the subnormal range rounded once, exactly 0 below
    the smallest subnormal and at -inf, inf above the largest double, NaN
    in gives NaN out (a NaN linear predictor must stay a divergence)."""
    import math

    tiny = 5e-324
    x = np.array([0.0, -0.0, -tiny, -1e-300, -708.39, -708.4, -709.0, -720.0, -744.4,
                  -745.13, -745.1332191019411, -745.1332191019412, -745.2, -746.0, -999.0,
                  -1001.0, -1e308, -np.inf, np.nan, 709.78, 709.79, 710.0, 1e308, np.inf])
    got, _ = _exp_pair(x)
    ref = np.array([math.exp(v) if v < 709.79 else math.inf for v in x[:-6]]
                   + [np.nan, math.exp(709.78), math.inf, math.inf, math.inf, math.inf])
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 1.0
    assert np.all(_ulp_distance(got, ref) <= 1), list(zip(x, got, ref))
    assert got[x == -745.1332191019411][0] == tiny       # the smallest subnormal
    assert np.all(got[(x < -745.14) & ~np.isnan(x)] == 0.0)  # exact zeros, -inf too
    assert np.isnan(got[np.isnan(x)]).all()
    assert np.all(got[-4:] == np.inf)


def test_a_nan_linear_predictor_gives_a_nan_estimate():
    """A NaN in theta (hence in eta) makes the compiled estimate NaN, which the
    loop counts as a divergence; exp_vec must not turn it into 0 or 1."""
    from bayesian_subsample.samplers import _ecs_numba as K

    post, _ = PROBLEMS["logistic"]()
    est = post.difference_estimator(post.expand(post.mode()[0]), 500)
    terms, _ = est.compiled_terms()
    sub = est.init_subsample(np.random.default_rng(0))
    from bayesian_subsample.samplers._ecs_compiled import _packed, _repack

    if _packed(sub) is None:
        sub = _repack(est, sub)
    m, dim = len(sub.y), post.dim
    for bad in (np.nan, np.inf):
        theta = np.zeros(dim)
        theta[0] = bad
        grad = np.empty(dim)
        lp, _, _ = K.estimate(theta, np.ascontiguousarray(sub.Z.T), sub.y, np.empty(0), False,
                              _packed(sub), terms["fam"], terms["fam_a"], terms["fam_b"],
                              terms["n_over_m"], terms["n2m2"], terms["ts"], terms["ll"],
                              terms["qa"], terms["qh"], terms["negprec"],
                              terms["prior_log_norm"], np.empty(m), np.empty(m),
                              np.empty((2, m)), grad, False, np.empty((2, dim)))
        assert not (np.isfinite(lp) and np.all(np.isfinite(grad)))


def test_subsample_update_gradient_equals_the_full_product():
    """The compiled subsample update's gradient (the current one updated for
    the replaced block, ``_swap_gradient``) against the full backward product
    on the new subsample, to rounding; the same update without the shift of
    the unchanged rows' coefficients by the new mean fails (negative
    control)."""
    from bayesian_subsample.samplers import _ecs_numba as K

    rng = np.random.default_rng(5)
    m, dim, b, lo = 600, 5, 20, 240
    Z = np.hstack([np.ones((m, 1)), rng.standard_normal((m, dim - 1))])
    d, g = rng.normal(0.0, 1e-3, m) + 2e-3, rng.normal(0.0, 1.0, m)
    n_over_m, n2m2 = 500.0, 500.0 ** 2

    def full(Z, d, g):
        coef = g * (n_over_m - (d - d.mean()) * n2m2)
        return np.stack([Z.T @ coef, Z.T @ g]), d.mean()

    dz, mean = full(Z, d, g)
    Z2, d2, g2 = Z.copy(), d.copy(), g.copy()
    Z2[lo:lo + b, 1:] = rng.standard_normal((b, dim - 1))
    d2[lo:lo + b] = rng.normal(0.0, 1e-3, b) + 5e-3
    g2[lo:lo + b] = rng.normal(0.0, 1.0, b)
    want, mean2 = full(Z2, d2, g2)
    sZ, sd, sg = Z[lo:lo + b].copy(), d[lo:lo + b].copy(), g[lo:lo + b].copy()
    got = np.empty((2, dim))
    K._swap_gradient(Z2, sZ, lo, d2, g2, sd, sg, mean, mean2, n_over_m, n2m2, dz, got)
    scale = np.abs(want).max(axis=1, keepdims=True)
    assert np.all(np.abs(got - want) <= 1e-12 * scale), np.abs(got - want) / scale
    K._swap_gradient(Z2, sZ, lo, d2, g2, sd, sg, mean, mean, n_over_m, n2m2, dz, got)
    assert not np.all(np.abs(got - want) <= 1e-12 * scale)


def test_a_continued_chain_takes_over_the_loops_gradient_parts(monkeypatch):
    """The compiled loop updates (does not recompute) the gradient's data part
    after a subsample change, so a continued chain must start from the parts
    the loop kept, not from a recomputation that may differ in the last bit:
    the state carries them, and they are used only for the very state they
    were left at (a changed position or subsample recomputes)."""
    post, kw = PROBLEMS["logistic_weighted_diag"]()
    config = HMCECS(backend="numba", **kw)
    prep = config.prepare(np.random.default_rng(0), post)
    rng = np.random.default_rng(3)
    part = config.run_chain(rng, post, prep, 30, 25)
    state = part.resume["state"]
    assert state.kernel_cache is not None
    assert _ecs_compiled._cache_matches(state, state.subsample)
    moved = state._replace(position=state.position + 1e-9)
    assert not _ecs_compiled._cache_matches(moved, moved.subsample)
    other = state.subsample._replace(indices=state.subsample.indices[::-1].copy())
    assert not _ecs_compiled._cache_matches(state._replace(subsample=other), other)
    assert not _ecs_compiled._cache_matches(state._replace(kernel_cache=None), state.subsample)
    other_grad = state._replace(logdensity_grad=state.logdensity_grad + 1e-12)
    assert not _ecs_compiled._cache_matches(other_grad, state.subsample)
    # The continued chain's loop starts from them (cache_ok 2) and is the
    # longer chain, bit for bit.
    seen = []
    init = _ecs_compiled._Loop.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.append((int(self.buf.cache_ok[0]), self.buf.dz_cur.copy()))

    monkeypatch.setattr(_ecs_compiled._Loop, "__init__", spy)
    more = config.run_chain(rng, post, prep, 0, 40, resume=part.resume)
    monkeypatch.undo()
    assert seen[0][0] == 2 and np.array_equal(seen[0][1], state.kernel_cache[3])
    whole = config.run_chain(np.random.default_rng(3), post, prep, 30, 65)
    assert np.array_equal(np.vstack([part.draws, more.draws]), whole.draws)


def test_a_loop_that_runs_no_iteration_keeps_the_gradient_parts():
    """A compiled loop started from a state with ``kernel_cache`` and stopped
    before any iteration hands the same parts on (review finding 5), so a
    later continuation still takes them over."""
    from bayesian_subsample.samplers import hmc, hmc_ecs
    from bayesian_subsample.samplers.metric import metric_from_mass_matrix

    post, kw = PROBLEMS["logistic_weighted_diag"]()
    config = HMCECS(backend="numba", **kw)
    prep = config.prepare(np.random.default_rng(0), post)
    est = post.difference_estimator(prep.expansion, 200, 20)
    rng = np.random.default_rng(2)
    state = hmc_ecs.init(prep.expansion.theta_star, est, rng)
    params = hmc.HMCParams(0.3, 3, metric_from_mass_matrix(prep.expansion.neg_hessian,
                                                          dense=True), 1000.0)
    state, _, _ = _ecs_compiled.run_iterations(rng, est, state, params, 20)
    assert state.kernel_cache is not None
    same, draws, _ = _ecs_compiled.run_iterations(rng, est, state, params, 0)
    assert len(draws) == 0 and same.kernel_cache is not None
    assert np.array_equal(same.kernel_cache[3], state.kernel_cache[3])
    assert _ecs_compiled._cache_matches(same, same.subsample)
