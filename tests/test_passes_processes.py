"""Set-up passes over a memory-mapped X run on process workers (issue 15).

Threads give a pass no speed-up (each chunk is many small numpy calls that
hold the GIL between them), so a pass over rows that joblib sends to a
process by reference -- a :class:`numpy.memmap` -- runs on joblib's default
process backend, and a pass over in-memory rows runs in the calling thread
(``estimators/_passes.py``).  Checked here:

* the process map gives sums bit-identical to the serial map, and really
  runs in other processes;
* the model is pickled once per task -- a contiguous group of chunks -- not
  once per chunk (counted by a probe whose ``__reduce__`` counts; the
  per-chunk dispatch is the negative control);
* a backend chosen with ``joblib.parallel_config`` still wins, and
  in-memory rows stay in this thread;
* a fit on a memmap with two workers gives the draws of a serial set-up,
  and its folded validation scan still refuses NaN before sampling;
* process passes are gated on size (``PROCESS_PASS_MIN_BYTES``): a smaller
  memmap's passes run in this thread; the tests of the process map lower
  the gate to their small files (``small_gate``);
* a copy-on-write memmap is refused when the chains would run in worker
  processes.
"""

import os
import warnings

import numpy as np
import pytest
from joblib import Parallel, delayed, parallel_config

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.estimators import _engine, _passes
from bayesian_subsample.estimators._passes import (GROUPS_PER_WORKER, JoblibChunkMap,
                                                   rows_file_backed, set_up_passes)
from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily, serial_map

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture
def small_gate(monkeypatch):
    """Process passes for any memmap, however small (the gate at 0 bytes)."""
    monkeypatch.setattr(_passes, "PROCESS_PASS_MIN_BYTES", 0)


def _memmap_data(tmp_path, n=6000, d=4, dtype=np.float32, seed=3):
    rng = np.random.default_rng(seed)
    path = tmp_path / "X.npy"
    X = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n, d))
    X[:] = rng.standard_normal((n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-X[:, 0] + 0.5 * X[:, 1]))).astype(np.int8)
    X.flush()
    del X
    return np.load(path, mmap_mode="r"), y


def _posterior(X, y, chunk_size=500):
    model = GLM(X, y, LogisticFamily(), chunk_size=chunk_size)
    return TallPosterior(model, GaussianPrior(np.full(model.dim, 3.0)))


def _passes_of(post):
    theta = np.linspace(-0.2, 0.3, post.dim)
    ex = post.expand(theta)
    return [ex.loglik, ex.grad, ex.hess, post.model.grad_sum(theta),
            post.curvature_bound_matrix()[0], post.mode()[0]]


def _pid(_item):
    return os.getpid()


class _PickleProbe:
    """Counts how often it is pickled (joblib pickles the tasks in this process)."""

    def __init__(self, log):
        self.log = log

    def __reduce__(self):
        self.log.append(1)
        return (_PickleProbe, ([],))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_process_pass_over_a_memmap_is_bit_identical_to_the_serial_map(tmp_path, dtype,
                                                                       compiled, small_gate):
    # ``compiled``: the GLM's compiled chunk sums (pass_kernel "numba", as in
    # a compiled HMC-ECS set-up) travel with the pickled model to the workers.
    if compiled:
        pytest.importorskip("numba")
    X, y = _memmap_data(tmp_path, dtype=dtype)
    post = _posterior(X, y)
    if compiled:
        post.model.pass_kernel = "numba"
    n_chunks = len(list(post.model.chunks()))
    assert rows_file_backed(post.model) and n_chunks == 12
    ref = _passes_of(post)
    with set_up_passes(post, 2) as chunk_map:
        assert chunk_map.processes
        pids = chunk_map(_pid, range(n_chunks))
        got = _passes_of(post)
    assert post.model.chunk_map is serial_map
    assert os.getpid() not in pids                       # ran on worker processes
    # every pass: GROUPS_PER_WORKER tasks per worker, each a group of chunks
    assert chunk_map.n_tasks == GROUPS_PER_WORKER * 2 * chunk_map.n_passes
    for a, b in zip(got, ref):
        assert np.array_equal(np.asarray(a), np.asarray(b)), np.max(np.abs(np.subtract(a, b)))


def test_model_is_pickled_once_per_task_not_per_chunk(tmp_path):
    X, y = _memmap_data(tmp_path)
    post = _posterior(X, y, chunk_size=250)
    model = post.model
    n_chunks = len(list(model.chunks()))
    assert n_chunks == 24
    log = []
    model.probe = _PickleProbe(log)                      # travels with every pickled model
    theta = np.linspace(-0.2, 0.3, post.dim)
    chunk_map = JoblibChunkMap(2, processes=True)
    model.chunk_map = chunk_map
    got = model.sums(theta, 2)
    model.chunk_map = serial_map
    assert chunk_map.n_tasks == 2 * GROUPS_PER_WORKER < n_chunks
    assert len(log) == chunk_map.n_tasks
    ref = model.sums(theta, 2)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))

    # Negative control: one task per chunk (the dispatch before) pickles the
    # model once per chunk, so the count above would fail.
    log.clear()
    fn_items = []
    model.chunk_map = lambda fn, items: fn_items.append((fn, list(items))) or serial_map(fn, items)
    model.sums(theta, 2)
    model.chunk_map = serial_map
    fn, items = fn_items[0]
    Parallel(n_jobs=2, prefer="processes", batch_size=1)(
        delayed(_passes._single_threaded)(fn, item) for item in items)
    assert len(log) == n_chunks


def test_configured_backend_wins_and_in_memory_rows_stay_in_this_thread(tmp_path, small_gate):
    X, y = _memmap_data(tmp_path)
    post = _posterior(X, y)
    items = range(len(list(post.model.chunks())))
    with parallel_config(backend="threading", n_jobs=2), set_up_passes(post, None) as chunk_map:
        assert chunk_map.processes
        pids = chunk_map(_pid, items)
    assert set(pids) == {os.getpid()} and chunk_map.n_tasks == 2 * GROUPS_PER_WORKER

    in_memory = _posterior(np.array(X), y)
    assert not rows_file_backed(in_memory.model)
    ref = _passes_of(in_memory)
    with set_up_passes(in_memory, 2) as chunk_map:
        got = _passes_of(in_memory)
    assert chunk_map.n_tasks == 0 and chunk_map.n_passes > 0
    for a, b in zip(got, ref):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # and n_jobs=1 on a memmap: no workers either
    with set_up_passes(post, 1) as chunk_map:
        post.model.sums(np.zeros(post.dim), 2)
    assert chunk_map.n_tasks == 0


def test_process_passes_are_gated_on_the_size_of_the_memmap(tmp_path, monkeypatch):
    X, y = _memmap_data(tmp_path)
    post = _posterior(X, y)
    assert rows_file_backed(post.model)
    # Below the gate (the default 1 GiB): serial in this thread, with two workers.
    assert X.nbytes < _passes.PROCESS_PASS_MIN_BYTES
    with set_up_passes(post, 2) as chunk_map:
        pids = chunk_map(_pid, range(12))
    assert not chunk_map.processes and chunk_map.n_tasks == 0 and set(pids) == {os.getpid()}
    # At the gate: on process workers.
    monkeypatch.setattr(_passes, "PROCESS_PASS_MIN_BYTES", X.nbytes)
    with set_up_passes(post, 2) as chunk_map:
        pids = chunk_map(_pid, range(12))
    assert chunk_map.processes and chunk_map.n_tasks > 0 and os.getpid() not in pids
    # ... but never with one worker.
    with set_up_passes(post, 1) as chunk_map:
        pids = chunk_map(_pid, range(12))
    assert chunk_map.n_tasks == 0 and set(pids) == {os.getpid()}


def _fit(X, y, n_jobs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BayesianLogisticRegression(sampler="hmc_ecs", n_chains=2, n_warmup=20,
                                          n_draws=5, n_jobs=n_jobs, random_state=0).fit(X, y)


def test_memmap_fit_with_process_passes_gives_the_serial_draws(tmp_path, monkeypatch,
                                                                small_gate):
    X, y = _memmap_data(tmp_path, n=40_000, d=3)
    maps = []
    real = JoblibChunkMap.__call__

    def spy(self, fn, items):
        maps.append(self)
        return real(self, fn, items)

    ref = _fit(np.array(X), y, 1)
    monkeypatch.setattr(_passes.JoblibChunkMap, "__call__", spy)
    est = _fit(X, y, 2)
    assert maps and all(m.processes for m in maps)
    assert maps[0].n_tasks > 0                           # passes ran on the workers
    assert est.sampler_info_[0]["setup_passes"] == ref.sampler_info_[0]["setup_passes"]
    np.testing.assert_array_equal(est.coef_draws_, ref.coef_draws_)
    np.testing.assert_array_equal(est.intercept_draws_, ref.intercept_draws_)


def test_nan_in_a_memmap_is_refused_by_the_process_pass(tmp_path, monkeypatch, small_gate):
    def refuse(*args, **kwargs):
        raise AssertionError("a chain started before the error")

    monkeypatch.setattr(_engine, "_dispatch", refuse)
    maps = []
    real = JoblibChunkMap.__call__

    def spy(self, fn, items):
        maps.append(self)
        return real(self, fn, items)

    monkeypatch.setattr(_passes.JoblibChunkMap, "__call__", spy)
    X, y = _memmap_data(tmp_path, n=120_000, d=3)
    X = np.load(tmp_path / "X.npy", mmap_mode="r+")
    X[70_123, 1] = np.nan
    X.flush()
    X = np.load(tmp_path / "X.npy", mmap_mode="r")
    with pytest.raises(ValueError, match="Input X contains NaN"):
        BayesianLogisticRegression(sampler="sgld", n_chains=2, n_jobs=2, n_warmup=10,
                                   n_draws=10).fit(X, y)
    # the scan that found it ran on the workers, in the first set-up pass
    assert len(maps) == 1 and maps[0].processes and maps[0].n_tasks > 0


class _DiesInWorkers(GLM):
    """A GLM whose chunks end the process they run in, when that is a worker."""

    def _block_sums(self, *args):
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            os._exit(1)
        return super()._block_sums(*args)


@pytest.mark.parametrize("dies", [True, False])
def test_a_worker_dying_in_a_set_up_pass_raises_worker_lost(tmp_path, dies, small_gate):
    from bayesian_subsample.estimators import WorkerLostError
    from bayesian_subsample.samplers import HMCECS

    X, y = _memmap_data(tmp_path, n=30_000)
    cls = _DiesInWorkers if dies else GLM
    post = TallPosterior(cls(X, y, LogisticFamily(), chunk_size=2000),
                         GaussianPrior(np.full(X.shape[1] + 1, 3.0)))
    config = HMCECS(backend="numpy")
    config.validate(len(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dies:
            with pytest.raises(WorkerLostError, match="set-up pass over the data died"):
                _engine.run_chains(config, post, 0, 2, 10, 5, n_jobs=2)
        else:  # control: the same run with a model whose workers live
            _, results = _engine.run_chains(config, post, 0, 2, 10, 5, n_jobs=2)
            assert all(r.draws.shape[0] == 5 for r in results)


def _copy_on_write_data(tmp_path):
    """A mode-"c" memmap edited in place: the file keeps the old rows."""
    X, y = _memmap_data(tmp_path, n=6000, d=3)
    del X
    Xc = np.load(tmp_path / "X.npy", mmap_mode="c")
    Xc[:, 0] *= 10.0                                     # e.g. a rescaling in place
    Xc[:, 1] += 5.0
    return Xc, y


def test_copy_on_write_memmap_is_refused_on_process_workers(tmp_path, monkeypatch):
    Xc, y = _copy_on_write_data(tmp_path)
    assert _passes.copy_on_write(Xc) and _passes.copy_on_write(np.asarray(Xc)[10:])
    assert not rows_file_backed(_posterior(Xc, y).model)  # its passes stay in this process
    assert not _passes.copy_on_write(np.load(tmp_path / "X.npy", mmap_mode="r"))
    with pytest.raises(ValueError, match=r'mmap_mode="c".*mmap_mode="r".*flush.*n_jobs=1'):
        _fit(Xc, y, 2)
    with parallel_config(backend="loky", n_jobs=2), pytest.raises(ValueError, match="mmap_mode"):
        _fit(Xc, y, None)

    # Control: in this process (n_jobs=1, or threads) the edits are seen, and
    # the draws are those of the in-memory copy.
    ref = _fit(np.array(Xc), y, 1)
    np.testing.assert_array_equal(_fit(Xc, y, 1).coef_draws_, ref.coef_draws_)
    with parallel_config(backend="threading"):
        np.testing.assert_array_equal(_fit(Xc, y, 2).coef_draws_, ref.coef_draws_)

    # Negative control: without the refusal the workers read the file as on
    # disk, and the draws are those of other data.
    monkeypatch.setattr(_engine, "check_copy_on_write", lambda *args: None)
    wrong = _fit(Xc, y, 2)
    assert np.abs(wrong.coef_draws_ - ref.coef_draws_).max() > 0.1


def test_nested_backend_is_not_a_chosen_one(tmp_path, small_gate):
    X, y = _memmap_data(tmp_path)
    post = _posterior(X, y)
    items = range(len(list(post.model.chunks())))

    def inside_a_worker(_):
        chosen = _passes.configured_backend()
        with set_up_passes(post, 2) as chunk_map:
            pids = chunk_map(_pid, items)
        return chosen, _passes.nested_in_worker(), chunk_map.n_tasks, set(pids)

    # Inside an outer Parallel's worker (what GridSearchCV(n_jobs=2) does):
    # joblib's nested backend is no choice, and the passes stay in the worker.
    for chosen, nested, n_tasks, pids in Parallel(n_jobs=2, backend="threading")(
            delayed(inside_a_worker)(i) for i in range(2)):
        assert chosen is None and nested and n_tasks == 0 and pids == {os.getpid()}

    # Control: the same backend chosen at top level is a choice, and is used.
    with parallel_config(backend="threading", n_jobs=2):
        assert type(_passes.configured_backend()).__name__ == "ThreadingBackend"
        assert not _passes.nested_in_worker()
        with set_up_passes(post, None) as chunk_map:
            chunk_map(_pid, items)
    assert chunk_map.n_tasks == 2 * GROUPS_PER_WORKER
