"""The families own their prediction (issue 10): predictive maths against scipy.stats,
mixture quantiles against brute-force CDF inversion, and the estimators' predictions
unchanged by the move (against outputs recorded by the code before it)."""

import numpy as np
import pytest
import scipy

from bayesian_subsample import (
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianPoissonRegressor,
)
from bayesian_subsample.estimators import _base
from bayesian_subsample.estimators._base import resolve_sampler
from bayesian_subsample.samplers import HMCECS, SBPS, SGHMC, SGLD
from tests import predictive_reference

RECORDED, VERSIONS = predictive_reference.load()
SAME_LIBRARIES = VERSIONS == {"numpy": np.__version__, "scipy": scipy.__version__}


@pytest.fixture(scope="module")
def current():
    return predictive_reference.compute()


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_predictions_match_the_outputs_recorded_before_the_move(current, key):
    if SAME_LIBRARIES:
        assert np.array_equal(current[key], RECORDED[key]), key
    else:
        np.testing.assert_allclose(current[key], RECORDED[key], rtol=1e-9, atol=1e-12,
                                   err_msg=key)


# --------------------------------------------------------------- one front door
FRONT_DOOR_SUBSAMPLING = ("hmc_ecs", "hmc_ecs_signed", "sgld", "sghmc", "sbps", "psbps")


@pytest.mark.parametrize("name", FRONT_DOOR_SUBSAMPLING)
def test_estimator_subsample_size_sets_a_named_samplers_own(name):
    config = resolve_sampler(name, 300)
    assert config.get_params()["subsample_size"] == 300


@pytest.mark.parametrize("sampler", [HMCECS(subsample_size=2000), SGLD(subsample_size=50),
                                     SGHMC(subsample_size=64), SBPS(subsample_size=10)])
def test_subsample_size_set_on_estimator_and_sampler_is_an_error_naming_both(sampler):
    own = sampler.get_params()["subsample_size"]
    cls = type(sampler).__name__
    with pytest.raises(ValueError, match="set in two places") as err:
        resolve_sampler(sampler, 300)
    assert "subsample_size=300 on the estimator" in str(err.value)
    assert f"{cls}(subsample_size={own!r}) in sampler=" in str(err.value)


def test_a_sampler_object_at_its_default_subsample_size_takes_the_estimators():
    config = resolve_sampler(HMCECS(estimator="signed", n_blocks=50), 300)
    assert config.subsample_size == 300 and config.n_blocks == 50
    assert resolve_sampler(HMCECS(subsample_size=2000)).subsample_size == 2000


@pytest.mark.parametrize("name, knob", [("austerity_mh", "AusterityMH(batch_size=300)")])
def test_a_sampler_with_another_rows_knob_names_it(name, knob):
    with pytest.raises(ValueError, match="has no subsample_size") as err:
        resolve_sampler(name, 300)
    assert knob in str(err.value)
    assert "uses all the data" not in str(err.value)


@pytest.mark.parametrize("name", ["hmc", "rwmh", "bps"])
def test_a_full_data_sampler_says_it_uses_all_the_data(name):
    with pytest.raises(ValueError, match="uses all the data") as err:
        resolve_sampler(name, 300)
    for other in FRONT_DOOR_SUBSAMPLING + ("austerity_mh",):
        assert repr(other) in str(err.value)


def test_grid_search_over_the_samplers_subsample_size_is_not_silently_ignored(monkeypatch):
    """The bug of issue 10: the estimator's subsample_size used to win silently."""
    def _must_not_run(*args, **kwargs):
        raise AssertionError("sampling started before validation")

    monkeypatch.setattr(_base, "run_chains", _must_not_run)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 2))
    y = (X[:, 0] + rng.standard_normal(500) > 0).astype(int)
    clf = BayesianLogisticRegression(sampler=HMCECS(subsample_size=200), subsample_size=100)
    with pytest.raises(ValueError, match="set in two places"):
        clf.fit(X, y)
    reg = BayesianPoissonRegressor(subsample_size=100).set_params(sampler__subsample_size=200)
    with pytest.raises(ValueError, match="set in two places"):
        reg.fit(X, rng.poisson(1.0, 500))
    reg = BayesianLinearRegression(sampler="austerity_mh", subsample_size=100)
    with pytest.raises(ValueError, match=r"AusterityMH\(batch_size=100\)"):
        reg.fit(X, rng.standard_normal(500))
