"""The sequential t-test shared by austerity MH and approximate Gibbs (Algorithm 1)."""

import numpy as np
import pytest

from bayesian_subsample import AusterityMH
from bayesian_subsample.estimators._engine import run_chains
from bayesian_subsample.samplers._sequential import (
    IndexStream,
    PermutationStream,
    sequential_mean_test,
)

from .conftest import make_logistic


#: AusterityMH draws (first coordinate pairs) and per-draw costs recorded on the
#: commit before the t-test moved into ``samplers._sequential`` (make_logistic(n=600,
#: d=1, seed=3), epsilon=0.1, batch_size=50, 40 warm-up + 6 draws, random_state=7).
_AUSTERITY_RECORD = {
    (True, "random_walk"): (
        [[0.35528430376885656, -0.22130485301661657], [0.28690837957020476, -0.1508856902749007]],
        [150, 150, 150, 150, 150, 150]),
    (True, "sgld"): (
        [[0.2840476198379769, -0.24554851483688075], [0.46973341912528443, -0.20618084876211284]],
        [250, 250, 250, 250, 250, 250]),
    (False, "random_walk"): (
        [[0.37720915874778205, 0.0773659017415024], [0.37720915874778205, 0.0773659017415024]],
        [100, 100, 300, 600, 1000, 1200]),
    (False, "sgld"): (
        [[0.28883462510042957, -0.2382974402826401], [0.19487110715784076, -0.17393506453138327]],
        [1300, 300, 200, 200, 600, 200]),
}


@pytest.mark.parametrize("control_variates,proposal", sorted(_AUSTERITY_RECORD))
def test_austerity_mh_draws_survive_the_shared_sequential_test(control_variates, proposal):
    """The refactor that made the t-test one function for MH and Gibbs keeps
    AusterityMH's draws: the same mini-batches, decisions and costs.  Costs
    are compared exactly; positions to 1e-12 relative (numpy's SIMD exp/log
    may differ in the last bit between CPUs)."""
    post = make_logistic(n=600, d=1, seed=3)
    cfg = AusterityMH(epsilon=0.1, batch_size=50, control_variates=control_variates,
                      proposal=proposal, proposal_batch_size=50)
    cfg.validate(post.n_obs)
    _, (res,) = run_chains(cfg, post, 7, 1, 40, 6)
    draws, costs = _AUSTERITY_RECORD[(control_variates, proposal)]
    np.testing.assert_array_equal(res.stats["n_obs_evaluated"].astype(int), costs)
    np.testing.assert_allclose(res.draws[:2], draws, rtol=1e-12, atol=0)



@pytest.mark.parametrize("fpc", [True, False])
def test_look_level_is_calibrated_only_with_the_finite_population_correction(fpc):
    """At the null (mu_0 = the population mean) one look at n = 150 of N = 200
    stops with probability P(|t_149| > t_{1-eps}) = 2 eps when s carries the
    finite-population correction of eq. 3; without it s is twice too large
    here (sqrt(1 - 149/199) = 0.5) and the test almost never stops, so the
    same assertion fails.  Allowance: 4 binomial se plus 10% of 2 eps for the
    normal approximation of a without-replacement mean."""
    population = np.random.default_rng(0).standard_normal(200)
    eps, R = 0.1, 3000
    rng = np.random.default_rng(1)
    stops = sum(sequential_mean_test(rng, 200, lambda idx: population[idx], population.mean(),
                                     150, eps, finite_population_correction=fpc).stopped_early
                for _ in range(R))
    rate = stops / R
    ok = abs(rate - 2 * eps) <= 4 * np.sqrt(2 * eps * (1 - 2 * eps) / R) + 0.1 * 2 * eps
    assert ok == fpc, rate


@pytest.mark.parametrize("stream", [IndexStream, PermutationStream])
def test_reading_orders_are_uniform_without_replacement(stream):
    rng = np.random.default_rng(0)
    s = stream(rng, 300)
    everything = np.concatenate([s.next(70) for _ in range(6)])
    assert len(everything) == 300 and len(np.unique(everything)) == 300
    counts = np.zeros(50)
    for _ in range(4000):
        counts[stream(rng, 50).next(10)] += 1
    expected = 4000 * 10 / 50
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 49 + 4 * np.sqrt(2 * 49)  # chi-square with 49 df, mean + 4 sd


def test_epsilon_zero_reads_everything_and_decides_exactly():
    values = np.random.default_rng(3).normal(0.1, 1.0, 321)
    rng = np.random.default_rng(4)
    for mu0 in (-0.2, 0.05, 0.0999, 0.1001, 0.3, -np.inf, np.inf):
        for order in ("lazy", "permutation"):
            res = sequential_mean_test(rng, 321, lambda idx: values[idx], mu0, 40, 0.0,
                                       reading_order=order)
            assert res.n_used == 321 and res.n_batches == 9 and not res.stopped_early
            assert res.decision == (values.mean() > mu0)
