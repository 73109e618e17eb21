"""Draws of every sampler on small fixed problems stay bit-identical (see tests/fingerprint.py)."""

import numpy as np
import pytest
import scipy

from tests import fingerprint

RECORDED, VERSIONS = fingerprint.load()
SAME_LIBRARIES = VERSIONS == {"numpy": np.__version__, "scipy": scipy.__version__}


@pytest.mark.parametrize("kind", sorted(fingerprint.CASES))
def test_draws_match_the_recorded_fingerprints(kind):
    keys = [f"{kind}/{s}" for s in fingerprint.CASES[kind]]
    for key in keys:
        assert key in RECORDED, f"no fingerprint for {key}: run python -m tests.fingerprint --write"
    current = fingerprint.compute(keys)
    # Every recorded part of these cases (networks, precisions, predictions) is recomputed.
    assert sorted(current) == sorted(k for k in RECORDED if fingerprint.case_of(k) in keys)
    for key in current:
        if SAME_LIBRARIES:
            assert np.array_equal(current[key], RECORDED[key]), (
                f"draws of {key} changed; if on purpose, regenerate with "
                "`python -m tests.fingerprint --write` and say why in the commit message")
        else:
            np.testing.assert_allclose(current[key], RECORDED[key], rtol=1e-9, atol=1e-12,
                                       err_msg=key)


def test_fingerprint_detects_other_draws(monkeypatch):
    """Negative control: the same problem run from another seed fails the exact check."""
    monkeypatch.setitem(fingerprint.SETTINGS, "random_state", 4)
    other = fingerprint.compute(["logistic/hmc"])["logistic/hmc"]
    assert other.shape == RECORDED["logistic/hmc"].shape
    assert not np.array_equal(other, RECORDED["logistic/hmc"])


@pytest.mark.parametrize("case,settings", [
    ("mlp_classifier/sghmc_importance_fisher", "MLP_SETTINGS"),
    ("mlp_regressor/sghmc", "MLP_SETTINGS"),
    ("factorization/sghmc_partial_fit", "FACTORIZATION_SETTINGS"),
])
def test_fingerprint_parts_detect_other_draws(monkeypatch, case, settings):
    """Negative control for the network and factorisation cases: from another seed
    every recorded part (networks, precisions, predictions) differs."""
    monkeypatch.setitem(getattr(fingerprint, settings), "random_state", 4)
    other = fingerprint.compute([case])
    assert sorted(other) == sorted(k for k in RECORDED if fingerprint.case_of(k) == case)
    for key, value in other.items():
        assert value.shape == RECORDED[key].shape, key
        assert not np.array_equal(value, RECORDED[key]), key
