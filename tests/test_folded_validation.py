"""X's validation scan folded into the first full pass of the set-up (issue 15).

On tall data (more than ``DEFER_SCAN_ROWS`` rows) ``fit`` does not read ``X``
for validation: the first chunked pass checks every chunk for NaN, infinity
and magnitude while computing on it, gathers before that pass check their
rows, and a fit whose set-up makes no full pass gets a scan-only pass.  The
error is the validation's, before any sampling.
"""

import numpy as np
import pytest

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.estimators import _engine, _validation
from bayesian_subsample.estimators._validation import DEFER_SCAN_ROWS, check_X_max_abs
from bayesian_subsample.models import GLM, LogisticFamily

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

N = DEFER_SCAN_ROWS + 50_000


def _memmap(tmp_path, n=N, d=3, dtype=np.float32, bad=None, row=None, seed=0):
    rng = np.random.default_rng(seed)
    path = tmp_path / "X.npy"
    X = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n, d))
    X[:] = rng.standard_normal((n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-X[:, 0]))).astype(int)
    if bad is not None:
        X[row, 1] = bad
    X.flush()
    del X
    return np.load(path, mmap_mode="r"), y


@pytest.fixture
def no_chains(monkeypatch):
    """Fail the test if any chain is dispatched."""
    def refuse(*args, **kwargs):
        raise AssertionError("a chain started before the error")
    monkeypatch.setattr(_engine, "_dispatch", refuse)


@pytest.mark.parametrize("bad, message", [(np.nan, "Input X contains NaN"),
                                          (np.inf, "Input X contains infinity"),
                                          (-np.inf, "Input X contains infinity")])
@pytest.mark.parametrize("sampler", ["hmc_ecs", "sgld"])
def test_non_finite_in_the_middle_of_a_memmap_chunk_is_refused(tmp_path, no_chains, bad,
                                                               message, sampler):
    # Row N // 2 + 123 lies inside a chunk (chunks of 16384 rows), not at its edge.
    X, y = _memmap(tmp_path, bad=bad, row=N // 2 + 123)
    est = BayesianLogisticRegression(sampler=sampler, n_chains=2, n_warmup=10, n_draws=10)
    with pytest.raises(ValueError, match=message) as info:
        est.fit(X, y)
    assert "SimpleImputer" in str(info.value)        # the same message and fix
    assert not hasattr(est, "coef_")


def test_huge_values_in_a_memmap_are_refused(tmp_path, no_chains):
    X, y = _memmap(tmp_path, dtype=np.float64, bad=1e120, row=7_000)
    with pytest.raises(ValueError, match="as large as 1e\\+120.*StandardScaler"):
        BayesianLogisticRegression(n_chains=1, n_warmup=10, n_draws=10).fit(X, y)


def test_validation_does_not_read_tall_X_and_the_first_pass_checks_it(tmp_path, monkeypatch):
    """A clean tall fit makes no scan of its own (the chunk scan of validation is
    never called on X) and no more full passes than with the scan beforehand."""
    X, y = _memmap(tmp_path)
    scans = []
    original = _validation._max_abs
    monkeypatch.setattr(_validation, "_max_abs",
                        lambda a: scans.append(np.shape(a)) or original(a))
    kwargs = dict(n_chains=1, n_warmup=30, n_draws=10, random_state=1)
    folded = BayesianLogisticRegression(**kwargs).fit(X, y)
    assert all(len(s) == 1 for s in scans)           # y only, never X
    # Reference: the scan in validation (DEFER_SCAN_ROWS above n).
    monkeypatch.setattr(_validation, "DEFER_SCAN_ROWS", 10 * N)
    from bayesian_subsample.estimators import _glm_base
    monkeypatch.setattr(_glm_base, "DEFER_SCAN_ROWS", 10 * N)
    scans.clear()
    upfront = BayesianLogisticRegression(**kwargs).fit(X, y)
    assert (N, 3) in scans                           # negative control: X scanned
    assert (folded.sampler_info_[0]["setup_passes"]
            == upfront.sampler_info_[0]["setup_passes"])
    np.testing.assert_array_equal(folded.coef_draws_, upfront.coef_draws_)


def test_model_level_folded_scan():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((5000, 3))
    y = (rng.random(5000) < 0.5).astype(float)
    calls = []
    model = GLM(X, y, LogisticFamily(), chunk_size=700)
    model.deferred_scan = lambda big: calls.append(big) or check_X_max_abs(big, X.dtype)
    theta = np.array([0.1, 0.2, -0.3, 0.0])
    ref = GLM(X, y, LogisticFamily(), chunk_size=700).sums(theta, 2)
    got = model.sums(theta, 2)
    for a, b in zip(got, ref):                       # the pass's sums are unchanged
        assert np.array_equal(a, b)
    assert calls == [float(np.abs(X).max())] and model.deferred_scan is None
    model.sums(theta, 2)                             # later passes: no scan
    assert len(calls) == 1
    # A NaN row: a gather before the first pass refuses it; so does the pass.
    X[3210, 2] = np.nan
    bad = GLM(X, y, LogisticFamily(), chunk_size=700)
    bad.deferred_scan = lambda big: check_X_max_abs(big, X.dtype)
    bad.rows(np.array([1, 2, 3]))                    # clean rows pass
    with pytest.raises(ValueError, match="Input X contains NaN"):
        bad.rows(np.array([5, 3210]))
    with pytest.raises(ValueError, match="Input X contains NaN"):
        bad.grad_sum(theta)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        bad.finish_deferred_scan()
    # Negative control: without the deferred scan the same pass gives NaN silently.
    assert np.isnan(GLM(X, y, LogisticFamily(), chunk_size=700).sums(theta, 1)[0])
