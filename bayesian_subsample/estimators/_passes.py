"""Full passes over the data on the active joblib backend (DESIGN §3).

The set-up work of a fit -- the reference point theta* (a Newton search on
all rows for the samplers that start at the full-data mode), the Taylor
control-variate sums and mass matrix at theta*, the curvature bound of the
bouncy particle samplers -- is a sum over bounded-size chunks of rows.  The
models layer computes it through a *chunk map* (see
:func:`bayesian_subsample.models.serial_map`); during :func:`set_up_passes`
the estimator layer installs :class:`JoblibChunkMap`.  Where it runs the
chunks:

* **On the backend chosen with ``joblib.parallel_config``**, whenever one
  is (:func:`configured_backend`), whatever the data: no backend is named
  in this package (DESIGN §3), so ::

      with joblib.parallel_config(backend="dask"):
          estimator.fit(X, y)

  spreads the passes over a Dask cluster as it spreads the chains.  (Not
  the backend joblib installs inside a worker of an outer ``Parallel``,
  e.g. ``GridSearchCV(n_jobs=2)``: that one has ``nesting_level`` > 0, is
  no user's choice, and the passes then stay in the worker's thread.)
* **Rows in a file mapped into memory** (an :class:`numpy.memmap` ``X``,
  :func:`rows_file_backed`) of at least :data:`PROCESS_PASS_MIN_BYTES`
  (4 GiB; :func:`process_passes`), no backend chosen, more than one worker
  for ``n_jobs``: on joblib's default process backend (loky; ``prefer="processes"``, a hint that a
  chosen backend overrides).  A worker receives the memmap by reference
  (file name and offset) and reads its rows from the page cache itself.
  Not a copy-on-write memmap (``mmap_mode="c"``, :func:`copy_on_write`):
  a worker would map the file afresh and miss this process's edits, so
  its passes stay here, and the engine refuses it outright when the chains
  would run in worker processes (:func:`check_copy_on_write`).
* **In-memory rows, or a smaller memmap**, no backend chosen: in this
  thread, one chunk after the other (the models' serial map).

Why (``benchmarks/bench_pass_backends.py``; doc/benchmarks.rst; the
numbers below are from ``benchmarks/results/pass_backends_*_session24.jsonl``,
order-2 passes of 29 float32 columns on the loaded shared 2-core machine,
wall seconds with CPU seconds in brackets).  A chunk of 16384 rows is a few
dozen small numpy calls, and the GIL is held between them, so two threads
gave no speed-up and cost CPU: 0.91 s (0.90) against 0.77 s (0.72)
serially for 10^7 rows in memory, 1.27 s (0.91) against 1.25 s (0.83) for
a memmapped 10^7 (1.0-1.25 times the serial CPU seconds over all the
runs).  The extra CPU is what a neighbour process holding a core pays for.
Processes do not share a GIL.  On the loaded machine they were not faster
over a memmap: 1.40 s (1.01) against 1.25 s (0.83) at 10^7 and 15.5 s
(11.8) against 12.1 s (8.8) at 10^8 (the CPU seconds there are this
process's and its workers', counted from outside with ``psutil``).  On two
free cores at 10^8 they are: 6.4 s (12.3) against 10.8 s (10.8) for the
order-2 pass (``results/pass_backends_memmap_n1e8_quiet_session24.jsonl``).
Small memmaps do not pay for the workers' start-up and the dispatch, hence
the size gate :data:`PROCESS_PASS_MIN_BYTES`.  The first process pass also
pays for the workers' imports (4.4 s against 0.45-0.84 s for the next
order-1 passes in the 10^7 memmap run), which the fit's chains, on the
same workers, would otherwise pay.  In-memory rows are not sent by
reference: loky dumps any array over 1 MB to a file once per ``Parallel``
call, i.e. per pass, and that costs more than the pass (10^7 rows in
memory: 1.08 s of dispatch alone for a 0.77 s serial order-2 pass;
processes 2.6-3.9 times the serial wall time of an order-2 pass at 10^6
and 10^7), so in-memory rows stay in this thread.

A parallel pass is ``GROUPS_PER_WORKER`` tasks per worker, each a
contiguous group of chunks returning the list of its per-chunk results
(:func:`_run_group`).  The task carries the model, so the model is pickled
once per group, not once per chunk: its ``X`` (by reference), its labels
and weights (arrays over 1 MB, such as the int8 labels of 10^8 rows
(100 MB), dumped by loky once per pass and memory-mapped by every worker,
then removed by joblib's resource tracker at the end of the call; all of
the dispatch together, a pass whose chunks do nothing, measured 0.07 s at
10^7 memmapped rows and 0.32 s at 10^8), family and settings; a
:class:`~bayesian_subsample.models.BasisGLM` drops its cache of expanded
chunks when pickled.  The partial results come back in chunk order and are
added up in that order from zero, so the results -- and the draws -- are
bit-identical for every backend, ``n_jobs`` and grouping.  The validation
scan folded into the first pass (``GLM.deferred_scan``) runs in the
workers too: each chunk returns its ``max |x|`` and the parent checks them.

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
import mmap
import threading
import time

import numpy as np

from joblib import Parallel, delayed, effective_n_jobs
from threadpoolctl import threadpool_limits

__all__ = ["GROUPS_PER_WORKER", "JoblibChunkMap", "PROCESS_PASS_MIN_BYTES", "SingleThreadedBLAS",
           "check_copy_on_write", "configured_backend", "copy_on_write", "nested_in_worker",
           "process_passes", "rows_file_backed", "runs_on_processes", "set_up_passes"]


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
    """``fn(item)`` with BLAS on one thread (a process worker's own policy): one
    chunk as its own task, the dispatch before :func:`_run_group` (kept for
    ``benchmarks/bench_pass_policy.py`` and as a test's negative control)."""
    with SingleThreadedBLAS():
        return fn(item)


def _run_group(fn, items):
    """``[fn(item) for item in items]`` with BLAS on one thread: one task of a
    pass, a contiguous group of chunks (``fn`` -- and the model it carries --
    is sent to the worker once for the whole group)."""
    with SingleThreadedBLAS():
        return [fn(item) for item in items]


def _groups(n_items, n_groups):
    """``(start, stop)`` of ``n_groups`` contiguous groups covering ``range(n_items)``
    in order, sizes differing by at most one."""
    n_groups = max(1, min(int(n_groups), n_items))
    size, extra = divmod(n_items, n_groups)
    bounds, start = [], 0
    for g in range(n_groups):
        stop = start + size + (g < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


def configured_backend():
    """The joblib backend chosen with ``joblib.parallel_config`` (or
    ``parallel_backend``) around this call, or None when none is.

    A chosen backend ignores the ``prefer`` hint, the default one does not
    (joblib's documented rule), so the backend is a chosen one exactly when
    the two hints give the same kind of backend.  A backend with
    ``nesting_level`` > 0 is not a user's choice: joblib installs it inside
    a worker of an outer ``Parallel`` (``GridSearchCV(n_jobs=...)``,
    ``cross_val_score``), where the outer call already uses the cores, so
    this returns None there too (:func:`nested_in_worker`).
    """
    # joblib.parallel.get_active_backend is private: joblib has no public
    # way to read the active configuration.
    from joblib.parallel import get_active_backend

    as_threads, _ = get_active_backend(prefer="threads")
    as_processes, _ = get_active_backend(prefer="processes")
    if type(as_threads) is not type(as_processes) or nested_in_worker():
        return None
    return as_threads


def nested_in_worker():
    """Whether this call runs inside a worker of an outer joblib ``Parallel``
    (the active backend's ``nesting_level`` > 0): its passes then stay in
    this thread, the outer call already spreading the work over the cores."""
    from joblib.parallel import get_active_backend  # private, see configured_backend

    backend, _ = get_active_backend(prefer="processes")
    return (getattr(backend, "nesting_level", None) or 0) > 0


def _base_chain(a):
    """``a``, its ``.base``, that one's ``.base``, ... (views down to the buffer)."""
    while a is not None:
        yield a
        a = getattr(a, "base", None)


def _backing_memmap(a):
    """The :class:`numpy.memmap` at the bottom of ``a``'s chain of ``.base``
    arrays (``a`` itself, a view, or an ndarray over one), or None."""
    found = None
    for b in _base_chain(a):
        if isinstance(b, np.memmap):
            found = b
    return found


def copy_on_write(a):
    """Whether ``a`` is a copy-on-write :class:`numpy.memmap` (``mode="c"``,
    ``np.load(path, mmap_mode="c")``) or a view of one.

    Its edits live in this process's private pages; joblib's process backends
    send a memmap to a worker by file name and mode, so a worker maps the
    file afresh and reads the rows *as on disk*, without the edits.
    """
    m = _backing_memmap(a)
    return m is not None and getattr(m, "mode", None) == "c"


def rows_file_backed(model):
    """Whether ``model``'s design rows are a file mapped into memory (an
    :class:`numpy.memmap` or a view of one), which joblib's process backends
    send to a worker by reference (the file name and offset), not by value.

    False for a copy-on-write memmap (:func:`copy_on_write`): a worker would
    read the file, not this process's edited pages, so its passes stay here.
    """
    a = getattr(model, "X", None)
    if copy_on_write(a):
        return False
    return any(isinstance(b, (np.memmap, mmap.mmap)) for b in _base_chain(a))


def runs_on_processes(n_jobs):
    """Whether ``Parallel(n_jobs=n_jobs)`` here (no ``prefer`` hint: the chain
    dispatch) would run its tasks in other processes: more than one worker on
    a backend that does not use threads (the default loky, multiprocessing,
    dask, ...)."""
    from joblib._parallel_backends import SequentialBackend
    from joblib.parallel import get_active_backend  # private: joblib has no public getter

    if effective_n_jobs(n_jobs) <= 1:
        return False
    backend, _ = get_active_backend()
    return not (getattr(backend, "uses_threads", False)
                or isinstance(backend, SequentialBackend))


def check_copy_on_write(model, n_jobs):
    """Refuse, before any pass or chain, a copy-on-write memmap among
    ``model``'s arrays when the chains (or passes) would run in other
    processes (:func:`runs_on_processes`): they would read the file as on
    disk, not this process's edits, and the posterior would be silently
    that of other data."""
    if model is None or not runs_on_processes(n_jobs):
        return
    for name, value in getattr(model, "__dict__", {}).items():
        if isinstance(value, np.ndarray) and copy_on_write(value):
            raise ValueError(
                f"The data ({name}) is a copy-on-write numpy.memmap (mmap_mode=\"c\"), and "
                f"n_jobs={n_jobs!r} runs the chains in worker processes, which would read "
                "the file as it is on disk, not the changes made to the array in this "
                "process. Open the file with mmap_mode=\"r\" if it was not changed; or "
                "write the changes to the file (mmap_mode=\"r+\", then flush()); or load "
                "it into memory (np.array(X)); or pass n_jobs=1, or choose a threading "
                "backend (joblib.parallel_config(backend=\"threading\")).")


#: Bytes of a memmapped ``X`` from which its set-up passes run on process
#: workers (with more than one worker and no backend chosen); a smaller
#: memmap's passes run serially in this thread, like in-memory rows.  4 GiB,
#: from side-by-side runs of ``benchmarks/bench_pass_backends.py``: on two
#: free cores the order-2 pass over 10^8 x 29 float32 rows (11.6 GB) took
#: 6.4 s on two workers against 10.8 s serially, but over 10^7 rows
#: (1.16 GB) 0.75 s against 0.81 s, a gain smaller than the loss with a busy
#: neighbour core (the workers spend 1.14-1.6 times the serial CPU seconds,
#: re-faulting the file's pages), and a first fit in a process pays the
#: workers' start-up inside its set-up
#: (``results/pass_backends_memmap_n1e{7,8}_quiet_session24.jsonl``).
#: Setting it to 0 makes every memmap with ``n_jobs`` > 1 use them,
#: ``float("inf")`` turns them off.
PROCESS_PASS_MIN_BYTES = 4 << 30


def process_passes(model):
    """Whether ``model``'s set-up passes go to process workers when no backend
    is chosen: its rows are a memmap (:func:`rows_file_backed`) of at least
    :data:`PROCESS_PASS_MIN_BYTES` bytes.  (The map also needs more than one
    worker, checked when it runs.)"""
    if not rows_file_backed(model):
        return False
    return int(getattr(model.X, "nbytes", 0)) >= PROCESS_PASS_MIN_BYTES


#: Tasks per worker in a parallel pass: each task is a contiguous group of
#: chunks, so the model travels to a worker this many times per pass, and a
#: worker slowed by a busy neighbour core leaves its last groups to the other.
GROUPS_PER_WORKER = 4


class JoblibChunkMap:
    """A chunk map ``(fn, items) -> [fn(item) ...]`` for the set-up passes.

    Where the chunks run (module docstring):

    * on the backend chosen with ``joblib.parallel_config``, if any;
    * else, when ``processes`` (the rows are a memmap of at least
      :data:`PROCESS_PASS_MIN_BYTES`, see :func:`process_passes`), on
      joblib's default process backend
      (``prefer="processes"``, a hint only);
    * else, and whenever the map has one worker or one item, in this process
      and this thread.

    A parallel map sends ``GROUPS_PER_WORKER`` tasks per worker, each a
    contiguous group of items returning the list of its results, so ``fn``
    (with the model it carries) is pickled once per group, not once per
    item; the results come back in item order and the caller reduces them
    in that order, as it would the serial map's.

    Parameters
    ----------
    n_jobs : int or None
        As for the estimator's chains; None defers to ``joblib.parallel_config``.
    processes : bool, default=False
        Whether to run on process workers when no backend is configured.

    Attributes
    ----------
    n_passes : int
        Calls so far: each call is one full pass over the data (the models
        send every full pass, and only full passes, through their chunk map).
    seconds : float
        Wall seconds spent in those calls.
    times : list of float
        Wall seconds of each call, in order.
    n_tasks : int
        Tasks handed to joblib so far (0 for passes made in this process).
    """

    def __init__(self, n_jobs=None, processes=False):
        self.n_jobs = n_jobs
        self.processes = bool(processes)
        self.n_passes = 0
        self.seconds = 0.0
        self.times = []
        self.n_tasks = 0

    def __call__(self, fn, items):
        items = list(items)
        start = time.perf_counter()
        try:
            return self._map(fn, items)
        finally:
            took = time.perf_counter() - start
            self.n_passes += 1
            self.seconds += took
            self.times.append(took)

    def _map(self, fn, items):
        if len(items) <= 1:
            return [fn(item) for item in items]
        chosen = configured_backend()
        if chosen is None and (not self.processes or nested_in_worker()):
            # In-memory rows or a smaller memmap: in this thread (measured,
            # module docstring); likewise inside an outer Parallel's worker.
            return [fn(item) for item in items]
        # ``prefer`` is only a hint: a backend chosen with parallel_config wins.
        # One group per batch: each task is already a group of chunks, and
        # joblib's automatic batching would otherwise merge the last groups
        # and leave a worker idle.
        n_workers = effective_n_jobs(self.n_jobs)
        if n_workers <= 1:
            return [fn(item) for item in items]
        parallel = Parallel(n_jobs=self.n_jobs, prefer="processes", batch_size=1)
        groups = _groups(len(items), GROUPS_PER_WORKER * n_workers)
        self.n_tasks += len(groups)
        # Tasks set the BLAS policy themselves: in this process it is already
        # set (a no-op), a process backend's worker sets its own.
        parts = parallel(delayed(_run_group)(fn, items[a:b]) for a, b in groups)
        return [result for part in parts for result in part]


@contextlib.contextmanager
def set_up_passes(posterior, n_jobs=None):
    """Run the full passes of ``posterior``'s model through a :class:`JoblibChunkMap`
    inside this block: on a backend chosen with ``joblib.parallel_config``,
    else on process workers when the model's rows are a memmap of at least
    :data:`PROCESS_PASS_MIN_BYTES` (:func:`process_passes`), else in this
    thread (module docstring).

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
        model.chunk_map = JoblibChunkMap(n_jobs, processes=process_passes(model))
        try:
            yield model.chunk_map
        finally:
            model.chunk_map = previous
