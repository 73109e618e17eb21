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
    current = fingerprint.compute(keys)
    assert sorted(current) == sorted(keys)
    for key in keys:
        assert key in RECORDED, f"no fingerprint for {key}: run python -m tests.fingerprint --write"
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
