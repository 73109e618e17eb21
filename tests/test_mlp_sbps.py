"""SBPS and pSBPS on neural networks (Pakman et al., 2017, §3-5 and §7.3).

Statistical checks against posteriors known by other means (quadrature for a
two-weight network, long full-data HMC for a nonlinear one), in MCSE units
plus SBPS's bias allowance, each with a negative control; then the failure
modes (escape, non-finite estimates) and the estimator wiring.

Bias allowance.  SBPS is biased where its thinning band is violated (§4.1);
there is no closed form for the size.  Measured on the two-weight problem
below (2 chains x 3,000 draws, seed 0): mean errors 0.008 and 0.002
posterior sd, sd ratios 0.998 and 1.002, with 0.4% of proposals violating
the band.  The allowance is 0.05 posterior sd on means and 5% on sds, about
five times the measured bias; the half-rate control moves the sds by
sqrt(2) - 1 = 41%.
"""

import math
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import BayesianMLPClassifier, BayesianMLPRegressor
from bayesian_subsample.diagnostics import mcse_mean, mcse_sd, split_rhat
from bayesian_subsample.likelihood import HierarchicalPosterior
from bayesian_subsample.models import MLP, MLPModel
from bayesian_subsample.samplers import sbps as sbps_kernel
from bayesian_subsample.samplers._sg_model import ModelSG, run_model_chain

MEAN_ALLOWANCE = 0.05
SD_ALLOWANCE = 0.05


@pytest.fixture(scope="module")
def two_weights():
    """A network without hidden layer (one weight, one bias, sigmoid output) and
    its posterior moments by quadrature on a 201 x 201 grid."""
    rng = np.random.default_rng(0)
    n = 1000
    X = rng.normal(size=(n, 1))
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.5 + X[:, 0])))).astype(int)
    net = MLP(1, (), 1, "logistic", "sigmoid")
    post = HierarchicalPosterior(MLPModel(net, X, y), net.layer_of_each_weight(),
                                 lambda r: np.zeros(net.dim), prior_precision=1.0)
    # The posterior (mean about (0.84, 0.50), sd about (0.08, 0.07)) lies well
    # inside this grid; one weight value at a time keeps memory small.
    gw, gb = np.linspace(0.2, 1.5, 201), np.linspace(-0.1, 1.1, 201)
    lp = np.empty((len(gw), len(gb)))
    for i, w in enumerate(gw):
        z = w * X[:, 0][None, :] + gb[:, None]
        lp[i] = (y * z - np.logaddexp(0, z)).sum(-1) - 0.5 * (w * w + gb ** 2)
    W, B = np.meshgrid(gw, gb, indexing="ij")
    p = np.exp(lp - lp.max())
    p /= p.sum()
    mean = np.array([(p * W).sum(), (p * B).sum()])
    sd = np.sqrt(np.array([(p * W * W).sum(), (p * B * B).sum()]) - mean ** 2)
    return post, mean, sd


def _run(method, post, n_warmup, n_draws, seed, n_chains=2, **kw):
    cfg = ModelSG(method=method, subsample_size=kw.pop("subsample_size", 100),
                  n_networks_kept=n_draws, **kw)
    cfg.validate(post.n_obs)
    seeds = np.random.SeedSequence(seed).spawn(n_chains)
    return [run_model_chain(cfg, np.random.default_rng(s), post, n_warmup, n_draws)
            for s in seeds]


def _check(draws, mean, sd):
    """|mean error| <= 4 MCSE + 0.05 sd and |sd error| <= 4 MCSE + 5% (module notes)."""
    err_mean = np.abs(draws.mean(axis=(0, 1)) - mean)
    err_sd = np.abs(draws.std(axis=(0, 1)) - sd)
    ok_mean = err_mean <= 4 * mcse_mean(draws) + MEAN_ALLOWANCE * sd
    ok_sd = err_sd <= 4 * mcse_sd(draws) + SD_ALLOWANCE * sd
    assert np.all(ok_mean) and np.all(ok_sd), (err_mean / sd, err_sd / sd)


@pytest.mark.parametrize("method", ["sbps", "psbps"])
def test_sbps_matches_the_quadrature_posterior(two_weights, method):
    post, mean, sd = two_weights
    results = _run(method, post, 20, 120, seed=0)
    draws = np.stack([r.draws for r in results])
    assert np.max(split_rhat(draws)) < 1.05
    _check(draws, mean, sd)
    for r in results:
        assert r.extra["diverged_at"] is None and r.extra["failure"] is None
        assert 0 < r.extra["violation_fraction"] < 0.05
        assert r.extra["n_bounces"] > 0 and r.extra["draw_interval"] > 0
        # The exact continuous-trajectory moments (eq. 19) agree too.
        assert np.all(np.abs(r.extra["continuous_mean"] - mean) < 0.5 * sd)
        assert r.stats["n_obs_evaluated"].sum() == r.n_obs_evaluated_sampling
        assert r.subsample_size == 100
    if method == "psbps":
        a = results[0].extra["preconditioner"]
        assert a.mean() == pytest.approx(1.0) and np.all(a > 0)


def test_sbps_at_half_the_bounce_rate_fails_the_same_check(two_weights, monkeypatch):
    """Negative control: a band twice as high accepts each bounce with half the
    right probability, so the bounce rate is that of exp(-U / 2), whose sds are
    sqrt(2) times the posterior's."""
    post, mean, sd = two_weights
    value = sbps_kernel.piecewise_linear_value
    monkeypatch.setattr(sbps_kernel, "piecewise_linear_value", lambda *a: 2.0 * value(*a))
    results = _run("sbps", post, 20, 120, seed=0)
    draws = np.stack([r.draws for r in results])
    with pytest.raises(AssertionError):
        _check(draws, mean, sd)


def test_a_particle_that_never_bounces_is_caught_as_an_escape(two_weights, monkeypatch):
    """A band that never accepts (an event rate the band cannot bound) lets the
    particle fly off; the chain ends with the escape named, instead of a hang."""
    model = two_weights[0].model
    net = model.network
    # A tight prior puts the escape radius (sqrt(2) + 30 prior sd) 1.0 away
    # (posterior sd 0.03); velocity refreshments make the path a random walk.
    post = HierarchicalPosterior(model, net.layer_of_each_weight(),
                                 lambda r: np.zeros(net.dim), prior_precision=1000.0)
    monkeypatch.setattr(sbps_kernel, "piecewise_linear_value", lambda *a: math.inf)
    (r,) = _run("sbps", post, 5, 200, seed=1, n_chains=1)
    assert r.extra["diverged_at"] is not None
    assert "prior sd" in r.extra["failure"]
    assert np.all(np.isnan(r.draws[-1]))


def test_non_finite_estimates_are_counted_and_end_the_chain(two_weights, monkeypatch):
    from bayesian_subsample.likelihood._model_target import ModelMinibatchGradient

    post, _, _ = two_weights
    observe = ModelMinibatchGradient.observe
    calls = {"n": 0}

    def broken(self, position, rng):
        obs = observe(self, position, rng)
        calls["n"] += 1
        if calls["n"] > 3000:
            obs.grad = np.full_like(obs.grad, np.nan)
        return obs

    monkeypatch.setattr(ModelMinibatchGradient, "observe", broken)
    (r,) = _run("sbps", post, 5, 200, seed=2, n_chains=1)
    assert "non-finite" in r.extra["failure"]
    assert r.extra["diverged_at"] is not None
    assert r.extra["n_numerical_errors"] > 100


# ---------------------------------------------------------------- estimators
def _blobs(n=600, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, 4)) + np.eye(3, 4)[y] * 2.0
    return X, y


@pytest.mark.parametrize("sampler", ["sbps", "psbps"])
def test_classifier_with_sbps_fits_and_predicts(sampler):
    X, y = _blobs()
    clf = BayesianMLPClassifier(hidden_layer_sizes=(5,), sampler=sampler, batch_size=100,
                                prior_precision=1.0, n_warmup=10, n_draws=20,
                                n_networks_kept=5, random_state=0).fit(X, y)
    assert clf.score(X, y) > 0.8
    assert clf.network_draws_.shape == (2, 5, clf.network_.dim)
    assert np.allclose(clf.predict_proba(X).sum(1), 1)
    for info in clf.sampler_info_:
        assert info["violation_fraction"] < 0.05 and info["failure"] is None
    assert clf.sample_stats_["violations"].shape == (2, 20)


def test_sbps_gibbs_steps_for_hierarchical_and_noise_precisions():
    """The precisions are Gibbs-sampled at every draw (module notes of _sbps_model)."""
    X, y = _blobs()
    reg = BayesianMLPRegressor(hidden_layer_sizes=(4,), sampler="psbps", batch_size=100,
                               n_warmup=10, n_draws=20, n_chains=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(X, X[:, 0] + 0.1 * y)
    lam = reg.sample_stats_["prior_precision"][0]
    assert len(np.unique(lam[:, 0])) == 20
    assert len(np.unique(reg.sample_stats_["noise_precision"][0])) == 20
    assert reg.sampler_info_[0]["n_gibbs_steps"] == 30


def test_sbps_refuses_a_noise_free_minibatch():
    X, y = _blobs(n=100)
    with pytest.raises(ValueError, match="minibatch of at least 2 rows and fewer than"):
        BayesianMLPClassifier(sampler="sbps", batch_size=500).fit(X, y)
    with pytest.raises(ValueError, match="gibbs_every"):
        ModelSG(method="sbps", gibbs_every=10).validate(100)


# ------------------------------------------------ a nonlinear network (slow)
@pytest.fixture(scope="module")
def one_hidden_unit():
    """y ~ Bernoulli(sigmoid(3 sigmoid(2 x) + 0.5)): four weights (w1, b1, w2, b2)
    with prior precision 1, N = 1,000.  The hidden unit's mirror mode
    (-w1, -b1, -w2, b2 + w2) has about 6 nats less prior density, so the
    posterior is one mode; both samplers start near it.  The reference is the
    library's full-data HMC, 4 long chains."""
    rng = np.random.default_rng(5)
    n = 1000
    X = rng.normal(size=(n, 1))
    eta = 3.0 / (1 + np.exp(-2.0 * X[:, 0])) + 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    net = MLP(1, (1,), 1, "logistic", "sigmoid")
    start = np.array([2.0, 0.0, 3.0, 0.5])
    post = HierarchicalPosterior(MLPModel(net, X, y), net.layer_of_each_weight(),
                                 lambda r: start + 0.05 * r.standard_normal(4),
                                 prior_precision=1.0)
    ref = _run("hmc", post, 300, 3000, seed=11, n_chains=4)
    draws = np.stack([r.draws for r in ref])
    assert np.max(split_rhat(draws)) < 1.01
    return post, draws


def _check_against(draws, ref):
    """|mean error| <= 4 combined MCSE + 0.05 sd, |sd error| likewise + 5%."""
    sd = ref.std(axis=(0, 1))
    err_mean = np.abs(draws.mean(axis=(0, 1)) - ref.mean(axis=(0, 1)))
    err_sd = np.abs(draws.std(axis=(0, 1)) - sd)
    se_mean = np.hypot(mcse_mean(draws), mcse_mean(ref))
    se_sd = np.hypot(mcse_sd(draws), mcse_sd(ref))
    ok = (err_mean <= 4 * se_mean + MEAN_ALLOWANCE * sd) & (err_sd <= 4 * se_sd
                                                            + SD_ALLOWANCE * sd)
    assert np.all(ok), (err_mean / sd, err_sd / sd)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sbps", "psbps"])
def test_sbps_matches_long_hmc_on_a_nonlinear_network(one_hidden_unit, method):
    post, ref = one_hidden_unit
    results = _run(method, post, 100, 1500, seed=3)
    draws = np.stack([r.draws for r in results])
    assert np.max(split_rhat(draws)) < 1.02
    _check_against(draws, ref)


@pytest.mark.slow
def test_half_rate_sbps_fails_against_hmc_on_a_nonlinear_network(one_hidden_unit, monkeypatch):
    post, ref = one_hidden_unit
    value = sbps_kernel.piecewise_linear_value
    monkeypatch.setattr(sbps_kernel, "piecewise_linear_value", lambda *a: 2.0 * value(*a))
    results = _run("sbps", post, 100, 1500, seed=3)
    with pytest.raises(AssertionError):
        _check_against(np.stack([r.draws for r in results]), ref)
