"""Binary labels kept as compact integer codes (issue 15: no 8-byte copy of y).

A GLM given 0/1 labels in an integer dtype of fewer than 8 bytes keeps them
as they are and widens them exactly to float64 in every gather and chunk, so
its sums, its rows and an estimator's draws are bit-identical to those with
a float64 ``y``.  Also: validation on tall data with the variance-stopped
theta* search still refuses bad input before any chain starts.
"""

import numpy as np
import pytest

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.models import GLM, LogisticFamily

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _data(n=5000, d=3, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(dtype)
    y = (rng.random(n) < 1 / (1 + np.exp(-X[:, 0]))).astype(np.int8)
    return X, y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compact_labels_give_the_same_sums_and_rows(dtype):
    X, y8 = _data(dtype=dtype)
    compact = GLM(X, y8, LogisticFamily(), chunk_size=1000)
    wide = GLM(X, y8.astype(np.float64), LogisticFamily(), chunk_size=1000)
    assert compact.widen_labels and np.shares_memory(compact.y, y8)  # no copy
    assert not wide.widen_labels and wide.y.dtype == np.float64
    theta = np.array([0.1, 0.5, -0.2, 0.3])
    for order in (0, 1, 2):
        for a, b in zip(compact.sums(theta, order), wide.sums(theta, order)):
            assert np.array_equal(a, b)
    idx = np.array([4, 0, 17, 4999])
    for a, b in zip(compact.rows(idx), wide.rows(idx)):
        assert (a is None and b is None) or (np.array_equal(a, b) and a.dtype == b.dtype)
    assert compact.labels(idx).dtype == np.float64
    # Negative control: without the widening the gathered labels are int8.
    compact.widen_labels = False
    assert compact.rows(idx)[1].dtype == np.int8


def test_compact_labels_give_the_same_draws():
    X, y8 = _data(n=3000)
    kwargs = dict(n_chains=1, n_warmup=50, n_draws=50, random_state=3)
    a = BayesianLogisticRegression(**kwargs).fit(X, y8)
    # Float labels are encoded as int64 codes, which the GLM widens to a
    # float64 copy up front (the old path): the reference.
    b = BayesianLogisticRegression(**kwargs).fit(X, y8.astype(np.float64))
    assert np.array_equal(a._all_draws(), b._all_draws())


def test_bad_rows_are_refused_before_sampling_with_the_variance_rule(tmp_path, monkeypatch):
    """Tall memmap (scan folded into the set-up), chord path with the centre
    check (subset, growth and pilot gathers): a NaN row is refused with
    validation's message and no chain starts."""
    from bayesian_subsample.estimators import _engine
    from bayesian_subsample.estimators._validation import DEFER_SCAN_ROWS
    from bayesian_subsample.samplers import _hmc_family

    monkeypatch.setattr(_hmc_family, "CHORD_MIN_SUBSET", 2000)
    monkeypatch.setattr(_engine, "_dispatch",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("chain started")))
    n = DEFER_SCAN_ROWS + 100_000
    rng = np.random.default_rng(0)
    path = tmp_path / "X.npy"
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, 3))
    X[:] = rng.standard_normal((n, 3))
    y = (rng.random(n) < 1 / (1 + np.exp(-X[:, 0]))).astype(np.int8)
    X[n // 3 + 77, 2] = np.nan
    X.flush()
    del X
    X = np.load(path, mmap_mode="r")
    est = BayesianLogisticRegression(n_chains=1, n_warmup=10, n_draws=10)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.fit(X, y)
    assert not hasattr(est, "coef_")
