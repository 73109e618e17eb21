"""Full passes over the data on the active joblib backend (DESIGN §3).

The set-up work of a fit -- the reference point theta* (a Newton search on
all rows for the samplers that start at the full-data mode), the Taylor
control-variate sums and mass matrix at theta*, the curvature bound of the
bouncy particle samplers -- is a sum over bounded-size chunks of rows.  The
models layer computes it through a *chunk map* (see
:func:`bayesian_subsample.models.serial_map`); during :func:`set_up_passes`
the estimator layer installs :class:`JoblibChunkMap`, which hands the chunks
to whatever joblib backend is active, so that

    with joblib.parallel_config(backend="dask"):
        estimator.fit(X, y)

spreads the passes over a Dask cluster as it spreads the chains, with no
backend named in this package.  Without a configured backend the chunks run
on threads (numpy releases the GIL in the per-chunk products) or, with
``n_jobs=1``, in this thread.  The partial sums come back in chunk order and
are added up in that order, so the results -- and the draws -- are
bit-identical for every backend and ``n_jobs``.

The passes inside a chain (full-data HMC gradients, warm-up refinements)
keep the models' serial map: the chains are already spread over the workers.

One BLAS threading policy for the whole fit: BLAS runs on one thread in the
set-up passes as in the chains (:class:`SingleThreadedBLAS`), and parallelism
comes from the chunk map and the chain dispatch, never from BLAS threads.  A
multi-threaded BLAS call waits for its slowest thread, so when a neighbour
process holds a core one pass gets many times slower (measured: an order-2
pass over 10^6 x 30 rows took 3-5 s with OpenBLAS's 2 threads on a loaded
2-core machine, 0.3-0.7 s single-threaded); a single-threaded chunk only
shares its core.  It also makes the set-up sums independent of the
machine's BLAS thread count.
"""

from __future__ import annotations

import contextlib
import threading
import time

from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

__all__ = ["JoblibChunkMap", "SingleThreadedBLAS", "set_up_passes"]


class SingleThreadedBLAS:
    """Process-wide "BLAS runs on one thread", reference-counted across threads.

    ``threadpool_limits`` changes a process-wide setting and restores, on
    exit, the value it saw on entry.  Entered and left by several chains at
    once (joblib's threading backend, a dask worker with several threads) the
    saved values interleave: a chain could run part of its math with the
    caller's thread count (draws then differ in the last digits between runs)
    and the last chain to leave could restore 1 instead of the caller's value.
    Here the first chain of a process to enter sets the limit and the last to
    leave restores the value from before the first, under a lock, so every
    chain runs all of its math single-threaded and the process gets back its
    own setting.  Process backends (loky, multiprocessing, dask worker
    processes) each hold their own count.
    """

    _lock = threading.Lock()
    _depth = 0
    _limiter = None

    def __enter__(self):
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                cls._limiter = threadpool_limits(limits=1, user_api="blas")
            cls._depth += 1
        return self

    def __exit__(self, *exc):
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                limiter, cls._limiter = cls._limiter, None
                limiter.restore_original_limits()
        return False


def _single_threaded(fn, item):
    """``fn(item)`` with BLAS on one thread (a process worker's own policy)."""
    with SingleThreadedBLAS():
        return fn(item)


class JoblibChunkMap:
    """A chunk map ``(fn, items) -> [fn(item) ...]`` on the active joblib backend.

    Parameters
    ----------
    n_jobs : int or None
        As for the estimator's chains; None defers to ``joblib.parallel_config``.

    Attributes
    ----------
    n_passes : int
        Calls so far: each call is one full pass over the data (the models
        send every full pass, and only full passes, through their chunk map).
    seconds : float
        Wall seconds spent in those calls.
    times : list of float
        Wall seconds of each call, in order.
    """

    def __init__(self, n_jobs=None):
        self.n_jobs = n_jobs
        self.n_passes = 0
        self.seconds = 0.0
        self.times = []

    def __call__(self, fn, items):
        items = list(items)
        start = time.perf_counter()
        try:
            if len(items) <= 1:
                return [fn(item) for item in items]
            # ``prefer`` is only a hint: a backend chosen with parallel_config
            # wins.  Tasks set the BLAS policy themselves: in this process it is
            # already set (a no-op), a process backend's worker sets its own.
            return Parallel(n_jobs=self.n_jobs, prefer="threads")(
                delayed(_single_threaded)(fn, item) for item in items)
        finally:
            took = time.perf_counter() - start
            self.n_passes += 1
            self.seconds += took
            self.times.append(took)


@contextlib.contextmanager
def set_up_passes(posterior, n_jobs=None):
    """Run the full passes of ``posterior``'s model on joblib inside this block.

    BLAS runs single-threaded inside the block, the policy of the chains
    (module docstring).  A posterior whose model has no ``chunk_map`` (a
    model that makes no chunked passes) keeps its map.  The model's own map
    is restored on exit, so the chains, which receive the posterior
    afterwards, keep theirs.  Yields the installed :class:`JoblibChunkMap`,
    whose ``n_passes`` and ``seconds`` count the passes made in the block
    (None when the model has no chunk map).
    """
    with SingleThreadedBLAS():
        model = getattr(posterior, "model", None)
        if model is None or not hasattr(model, "chunk_map"):
            yield None
            return
        previous = model.chunk_map
        model.chunk_map = JoblibChunkMap(n_jobs)
        try:
            yield model.chunk_map
        finally:
            model.chunk_map = previous
