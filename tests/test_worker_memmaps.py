"""A chain run in a process worker leaves nothing that holds the data.

joblib hands arrays above 1 MB to process workers as memmaps of files in a
temporary folder and, at the end of the ``Parallel`` call, retries deleting
that folder ten times, 0.1 s apart, while any worker still holds one.  A
chain leaves reference cycles that held ``X`` until the worker's next
garbage collection, so every multi-process fit slept about a second there
(measured in ``doc/benchmarks.rst``).  The chain task now collects its
cycles before it returns when it runs in a worker process
(``estimators/_engine._release_worker_memmaps``).  Checked with automatic
garbage collection switched off, so that only that collection can free the
data: run as in a worker, ``X`` is freed as soon as the caller drops its
references; run in the caller's own process (where nothing is memmapped and
nothing is collected) -- the negative control -- it is still alive.
"""

import gc
import warnings
import weakref

import numpy as np
import pytest

from bayesian_subsample.estimators import _engine
from bayesian_subsample.likelihood._full import TallPosterior
from bayesian_subsample.models._glm import GLM, LogisticFamily
from bayesian_subsample.models._prior import GaussianPrior
from bayesian_subsample.samplers import HMCECS


def _data_alive_after_chain(monkeypatch, in_worker):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5000, 5))
    y = (rng.random(5000) < 0.5).astype(float)
    model = GLM(X, y, LogisticFamily())
    posterior = TallPosterior(model, GaussianPrior(np.full(model.dim, 10.0)))
    config = HMCECS(backend="numpy")
    config.validate(len(X))
    prepared = config.prepare(np.random.default_rng(1), posterior)
    data = weakref.ref(X)
    del X, y, model
    if in_worker:
        monkeypatch.setattr(_engine.multiprocessing, "parent_process", lambda: object())
    gc.collect()
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = _engine._run_one_chain(config, np.random.SeedSequence(0), posterior,
                                            prepared, 20, 20)
        monkeypatch.undo()
        assert result.draws.shape[0] == 20
        del posterior, prepared, result
        return data() is not None
    finally:
        gc.enable()


def test_chain_in_worker_releases_the_data(monkeypatch):
    assert not _data_alive_after_chain(monkeypatch, in_worker=True)


def test_chain_without_the_collection_keeps_the_data_control(monkeypatch):
    """Negative control: without the collection the chain's cycles hold ``X``,
    so the check above can fail."""
    assert _data_alive_after_chain(monkeypatch, in_worker=False)
