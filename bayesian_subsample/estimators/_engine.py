"""The chain engine of the estimators: seeding, parallel dispatch, stop and watchdog.

``run_chains`` turns ``random_state`` into one root
:class:`numpy.random.SeedSequence` and spawns one child for the shared
preparation plus one per chain *before* dispatch, so the draws are
bit-identical for any ``n_jobs`` and any joblib backend.  Chains run through
:class:`sklearn.utils.parallel.Parallel` with no backend hard-coded, so
``joblib.parallel_config(backend="dask")`` moves them to a cluster unchanged.

While the chains run, Ctrl-C does not raise inside them: it sets a stop flag
(:class:`_FitStop`) that every chain driver checks once per iteration, in the
main process (sequential and threading backends) or through a flag file
(process backends: loky, multiprocessing, dask on this machine), so every
chain ends within an iteration and returns the draws it completed.  The fit
then raises ``KeyboardInterrupt``, or, with ``keep_partial=True``, returns the
completed draws.  A second Ctrl-C raises at once.  A watchdog thread notices a
chain whose worker process died (the out-of-memory killer's SIGKILL) and ends
the fit with :class:`WorkerLostError` instead of waiting for a result that
will never come.  Each chain returns its final sampler state, adapted
parameters and random generator state, so a fit can be continued exactly.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import multiprocessing
import numbers
import os
import shutil
import signal
import socket
import tempfile
import threading
import time

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.parallel import Parallel, delayed

from ._passes import SingleThreadedBLAS as _SingleThreadedBLAS
from ._passes import check_copy_on_write, set_up_passes

__all__ = ["run_chains", "seed_sequences", "WorkerLostError"]

class WorkerLostError(RuntimeError):
    """A worker process running a chain died before returning its draws.

    The usual cause is the operating system's out-of-memory killer (SIGKILL);
    the estimator is left unchanged.
    """


class _WorkerLost(BaseException):
    """Raised in the main thread by the SIGINT handler when the watchdog saw a
    dead worker (a BaseException, so that nothing between it and
    :func:`run_chains` swallows it)."""


#: Seconds between two looks at the stop-flag file in a worker process.
_STOP_POLL = 0.05
#: Seconds between two looks at the chain workers' liveness.
_WATCH_POLL = 0.1
#: Seconds the chains get to return their draws after a stop request before
#: the fit stops waiting (a chain not yet started in a worker has no draws).
_STOP_GRACE = 0.5


class _FitStop:
    """The stop flag of one fit, readable by chains in any worker.

    In the process that created it the flag is a :class:`threading.Event`.  A
    pickled copy (a chain in a worker process) reads a file instead: the
    chains may run while ``go`` exists in the fit's private directory, so
    removing the file, or the whole directory when the fit ends, stops them.
    A worker on another machine ignores the file (its chain then runs to the
    end: stopping it is left to the backend, e.g. dask cancelling it).  The
    same directory holds one ``chain-<i>.pid`` file per chain running in a
    worker process, which the watchdog of :func:`run_chains` reads.
    """

    def __init__(self):
        self.pid = os.getpid()
        self.host = socket.gethostname()
        try:
            self.directory = tempfile.mkdtemp(prefix="bayesian_subsample-fit-")
            self.go = os.path.join(self.directory, "go")
            open(self.go, "w").close()
        except OSError:
            # No writable temporary directory: chains in worker processes then
            # run on after a stop request until the backend aborts them;
            # in-process chains stop as usual.
            self.directory = self.go = os.path.join(os.sep, "nonexistent-bayesian-subsample")
            self.host = None
        self._event = threading.Event()
        self._local = True
        self._uses_file = False
        self._next_look = 0.0

    def __getstate__(self):
        state = dict(vars(self))
        state["_event"] = None
        return state

    def __setstate__(self, state):
        vars(self).update(state)
        self._event = threading.Event()
        self._local = os.getpid() == self.pid
        self._uses_file = not self._local and socket.gethostname() == self.host

    def set(self):
        self._event.set()
        with contextlib.suppress(OSError):
            os.remove(self.go)

    def is_set(self):
        if self._event.is_set():
            return True
        if not self._uses_file:
            return False
        now = time.monotonic()
        if now < self._next_look:
            return False
        self._next_look = now + _STOP_POLL
        if not os.path.exists(self.go):
            self._event.set()
            return True
        return False

    def pid_file(self, chain):
        return os.path.join(self.directory, f"chain-{chain}.pid")

    def cleanup(self):
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def _chain_guard(stop, chain):
    """Inside a worker process: announce the chain's pid to the watchdog, and
    turn a SIGINT reaching the worker (Ctrl-C in a terminal signals the whole
    process group) into the stop flag, so the chain returns what it drew."""
    if stop is None or os.getpid() == stop.pid:
        yield
        return
    pid_file = None
    if stop._uses_file and os.path.isdir(stop.directory):
        pid_file = stop.pid_file(chain)
        with contextlib.suppress(OSError), open(pid_file, "w") as fh:
            fh.write(str(os.getpid()))
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda signum, frame: stop._event.set())
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if pid_file is not None:
            with contextlib.suppress(OSError):
                os.remove(pid_file)


def _process_exit(pid):
    """None while ``pid`` runs, else a description of how it ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ("ended (killed by a signal such as SIGKILL, or exited; its parent collected "
                "the exit status)")
    except PermissionError:
        return None
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] not in ("Z", "X"):
        return None
    try:
        code = int(fields[49])
    except (IndexError, ValueError):
        return "died"
    if code & 0x7F:
        try:
            name = signal.Signals(code & 0x7F).name
        except ValueError:
            name = f"signal {code & 0x7F}"
        return f"was killed by {name}"
    return f"exited with status {code >> 8}"


class _Watchdog(threading.Thread):
    """Polls the pid files of running chains; on a dead worker, stops the fit.

    Also ends the wait for the chains ``_STOP_GRACE`` seconds after a stop
    request (SIGINT to the main thread, whose handler then raises): chains
    that are running return within an iteration, and one that has not
    started yet (a worker process still importing) has nothing to return.
    """

    def __init__(self, stop, interrupt):
        super().__init__(name="bayesian_subsample-watchdog", daemon=True)
        self.stop_flag = stop
        self.interrupt = interrupt
        self.lost = None
        self.stop_time = None
        self._done = threading.Event()

    def run(self):
        import _thread

        gave_up = False
        while not self._done.wait(_WATCH_POLL):
            if (self.interrupt and not gave_up and self.stop_time is not None
                    and time.monotonic() > self.stop_time + _STOP_GRACE):
                gave_up = True
                _thread.interrupt_main(signal.SIGINT)
            try:
                names = [f for f in os.listdir(self.stop_flag.directory) if f.endswith(".pid")]
            except OSError:
                return
            for name in names:
                try:
                    with open(os.path.join(self.stop_flag.directory, name)) as fh:
                        pid = int(fh.read())
                except (OSError, ValueError):
                    continue  # being written or removed
                how = _process_exit(pid)
                if how is None or not os.path.exists(os.path.join(self.stop_flag.directory,
                                                                  name)):
                    continue
                self.lost = (int(name[6:-4]), pid, how)
                self.stop_flag.set()
                if self.interrupt:
                    _thread.interrupt_main(signal.SIGINT)
                return

    def finish(self):
        self._done.set()
        if self.is_alive():
            self.join()


def _lost_worker_error(chain, pid, how):
    return WorkerLostError(
        f"The worker process (pid {pid}) running chain {chain} {how} before the chain "
        "finished. The usual cause is the operating system's out-of-memory killer, which "
        "ends a process with SIGKILL when memory runs out (see `dmesg` or the system log); "
        "another process or a job scheduler may also have signalled it. The other chains "
        "were stopped and the estimator is unchanged. Use fewer parallel chains (n_jobs), "
        "pass X as a numpy.memmap, or give the workers more memory.")


@contextlib.contextmanager
def _deferred_sigint(stop, watchdog):
    """While the chains run: the first SIGINT sets ``stop``, a second raises.

    Only in the main thread (elsewhere Python delivers no signals).  The
    watchdog raises SIGINT too; the handler then raises :class:`_WorkerLost`.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return

    def handler(signum, frame):
        if watchdog.lost is not None:
            raise _WorkerLost()
        if stop._event.is_set():
            raise KeyboardInterrupt
        stop.set()
        watchdog.stop_time = time.monotonic()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None
                      else signal.default_int_handler)


@contextlib.contextmanager
def _signals_held():
    """Defer SIGINT (main thread) across a few statements that must not be cut."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None
                      else signal.default_int_handler)
    if pending:
        raise KeyboardInterrupt


def seed_sequences(random_state, n_children):
    """``n_children`` independent SeedSequences from one ``random_state``.

    An int gives the same children every time; ``None`` fresh ones from OS
    entropy (``SeedSequence()``, leaving numpy's global state alone); a
    ``RandomState`` or ``Generator`` instance is advanced by one draw.
    """
    if random_state is None:
        # Fresh OS entropy, never the legacy global RandomState.
        return np.random.SeedSequence().spawn(n_children)
    if isinstance(random_state, np.random.Generator):
        entropy = int(random_state.integers(2**63 - 1))
    elif isinstance(random_state, np.random.RandomState):
        entropy = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
    elif isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative, got {random_state}.")
        entropy = int(random_state)
    else:
        raise ValueError(
            "random_state must be None, a non-negative int, a numpy RandomState or "
            f"Generator, got {random_state!r}."
        )
    return np.random.SeedSequence(entropy).spawn(n_children)


def _run_one_chain(config, seed, posterior, prepared, n_warmup, n_draws, stop=None,
                   resume=None, chain=0, progress=None):
    """Module-level chain task (picklable for every joblib backend).

    ``seed`` is the chain's SeedSequence, or, to continue a chain, the
    ``bit_generator.state`` its generator ended in.  Returns the ChainResult
    whose ``resume`` is ``{"rng": final generator state, "chain": the driver's
    own resume data}`` (None if the chain cannot be continued).

    BLAS runs single-threaded inside a chain: the products are small (HMC-ECS)
    or already parallel across chains, and a fixed thread count makes the
    floating-point results, hence the draws, identical for any ``n_jobs`` and
    backend (joblib's process workers otherwise get fewer BLAS threads than
    the main process, which changes summation order).  The limit is set and
    restored by :class:`_SingleThreadedBLAS`, safe under concurrent chains in
    one process: the threading backend gives the same draws as the process
    backends, and the caller's BLAS thread count is the same after ``fit`` as
    before.  ``progress=(chain, mode)`` shows a live progress display.
    """
    if isinstance(seed, dict):
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = seed
    else:
        rng = np.random.default_rng(seed)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_chain_guard(stop, chain))
        callback = None
        if progress is not None:
            from ._progress import ChainProgress

            callback = stack.enter_context(
                ChainProgress(progress[0], n_warmup, n_draws, mode=progress[1]))
        stack.enter_context(_SingleThreadedBLAS())
        result = config.run_chain(rng, posterior, prepared, n_warmup, n_draws,
                                  callback=callback, stop=stop, resume=resume)
    token = None
    if result.resume is not None:
        token = {"rng": rng.bit_generator.state, "chain": result.resume}
    _release_worker_memmaps()
    return result._replace(resume=token)


def _release_worker_memmaps():
    """In a worker process, collect the chain's reference cycles before the task returns.

    joblib hands large arrays (``X`` above 1 MB) to process workers as
    memmaps of files in a temporary folder, and at the end of the
    ``Parallel`` call waits for the workers to release them before deleting
    the folder: ten retries, 0.1 s apart.  A chain leaves reference cycles
    (sampler state, estimator caches) that still hold the memmap until the
    worker's next garbage collection, so every multi-process fit slept the
    full second in that wait (measured: a 2-chain ``n_jobs=2`` HMC-ECS fit
    of 10^5 rows took 1.28 s, of which 1.0 s was the wait; with this
    collection 0.46 s).  In the caller's own process (``n_jobs=1``, the
    threading backend) nothing is memmapped and nothing is collected.
    """
    if multiprocessing.parent_process() is not None:
        gc.collect()


def _known_worker_death(exc):
    """Whether ``exc`` is a backend's own report of a dead worker."""
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    return bool(names & {"TerminatedWorkerError", "KilledWorker", "BrokenProcessPool"})


def run_chains(config, posterior, random_state, n_chains, n_warmup, n_draws, n_jobs=None,
               verbose=0, progress_bar=False, keep_partial=False, resume=None, prepared=None,
               report=None):
    """Prepare once, then run ``n_chains`` chains in parallel.

    The preparation (the reference point, control-variate sums, mass matrix
    and pilots) is done once, in this process, before the chains are
    dispatched, and shared by all of them.  When ``report`` (a dict) is given,
    it receives ``setup_passes`` (full passes over the data during the
    preparation, counted through the model's chunk map) and ``setup_seconds``
    (wall seconds of the preparation, of which ``setup_pass_seconds`` in
    those passes, and ``setup_pass_times``, the seconds of each), and
    ``setup_newton`` (the ``newton_log`` of the prepared work: kind and
    decrement of each pass of the theta* search, and the predictions of its
    stopping rule), ``setup_subset_size`` (rows of the subset whose mode
    started that search) and ``setup_kernel`` (``"numba"`` when the set-up's
    passes ran compiled, else ``"numpy"``).

    With ``resume`` (one ``ChainResult.resume`` per chain) and the
    ``prepared`` of that fit, the chains continue for ``n_draws`` more draws
    and ``random_state``, ``n_chains`` and ``n_warmup`` are ignored.

    A first Ctrl-C during the chains stops them all at their next iteration:
    then ``KeyboardInterrupt`` is raised, unless ``keep_partial`` is true, in
    which case the results hold the completed draws (``interrupted=True``).
    A worker process that dies raises :class:`WorkerLostError`.

    Returns
    -------
    prepared : Prepared
    results : list of ChainResult, in chain order; after an interrupt, None
        for a chain that returned nothing in time (it had no draws).
    """
    # BLAS on one thread for the whole of this call, set once: the set-up's
    # passes and the chains that run in this process both run under that
    # policy, and each setting of it makes threadpoolctl look up the loaded
    # BLAS libraries again (1-5 ms); the inner _SingleThreadedBLAS blocks
    # (set_up_passes, the chains') then find it set and change nothing.
    with _SingleThreadedBLAS():
        return _run_chains(config, posterior, random_state, n_chains, n_warmup, n_draws,
                           n_jobs, verbose, progress_bar, keep_partial, resume, prepared,
                           report)


@contextlib.contextmanager
def _set_up_worker_deaths():
    """A worker process that dies during a set-up pass (a memmapped ``X``'s
    passes run on process workers, ``estimators/_passes.py``) raises
    :class:`WorkerLostError`, as one running a chain does."""
    try:
        yield
    except Exception as exc:
        if _known_worker_death(exc):
            raise WorkerLostError(
                f"A worker process running a set-up pass over the data died: {exc} The usual "
                "cause is the operating system's out-of-memory killer (SIGKILL). No chain "
                "had started and the estimator is unchanged. Use fewer workers (n_jobs) or "
                "give them more memory.") from exc
        raise


def _run_chains(config, posterior, random_state, n_chains, n_warmup, n_draws, n_jobs,
                verbose, progress_bar, keep_partial, resume, prepared, report):
    """:func:`run_chains` with BLAS already on one thread."""
    # A copy-on-write memmap X read by worker processes: refused before any pass.
    check_copy_on_write(getattr(posterior, "model", None), n_jobs)
    if resume is None:
        seeds = seed_sequences(random_state, n_chains + 1)
        start = time.perf_counter()
        with _set_up_worker_deaths(), set_up_passes(posterior, n_jobs) as chunk_map:
            prepared = config.prepare(np.random.default_rng(seeds[0]), posterior)
            # X's validation scan, if left to the first full pass and the
            # set-up made none: its own pass now, before any chain starts.
            finish = getattr(getattr(posterior, "model", None), "finish_deferred_scan", None)
            if finish is not None:
                finish()
        if report is not None:
            report.update(setup_passes=0 if chunk_map is None else chunk_map.n_passes,
                          setup_seconds=time.perf_counter() - start,
                          setup_pass_seconds=0.0 if chunk_map is None else chunk_map.seconds,
                          setup_pass_times=[] if chunk_map is None else list(chunk_map.times),
                          setup_newton=[dict(step) for step in
                                        getattr(prepared, "newton_log", ())],
                          setup_subset_size=getattr(prepared, "subset_size", None),
                          setup_kernel=getattr(prepared, "setup_kernel", "numpy"))
        tasks = [(seed, None) for seed in seeds[1:]]
    else:
        finish = getattr(getattr(posterior, "model", None), "finish_deferred_scan", None)
        if finish is not None:
            with _set_up_worker_deaths(), set_up_passes(posterior, n_jobs):
                finish()
        # Copies: the drivers advance the states they are given, and the
        # fitted estimator must keep its own until the new fit is committed.
        tasks = [(copy.deepcopy(r["rng"]), copy.deepcopy(r["chain"])) for r in resume]
    stop = _FitStop()
    watchdog = _Watchdog(stop, interrupt=threading.current_thread() is threading.main_thread())
    mode = "text" if progress_bar == "text" else "auto"
    calls = [delayed(_indexed_chain)(chain, config, seed, posterior, prepared, n_warmup,
                                     n_draws, stop, token, (chain, mode) if progress_bar else None)
             for chain, (seed, token) in enumerate(tasks)]
    results = [None] * len(tasks)
    try:
        try:
            with _deferred_sigint(stop, watchdog):
                watchdog.start()
                # BLAS on one thread (set by run_chains) for the chains that
                # run in this process (sequential and threading backends):
                # the workers' own _SingleThreadedBLAS finds it set and
                # changes nothing; process workers set their own.
                try:
                    with _SingleThreadedBLAS():
                        for chain, result in _dispatch(calls, n_jobs, verbose):
                            results[chain] = result
                finally:
                    watchdog.finish()
        except KeyboardInterrupt as exc:
            stop.set()
            if not (keep_partial and any(r is not None for r in results)):
                raise KeyboardInterrupt(
                    "Sampling was interrupted; the estimator is unchanged"
                    + ("." if keep_partial else " (pass keep_partial_draws=True to keep the "
                       "draws completed before an interrupt).")) from exc
        except _WorkerLost:
            stop.set()
            raise _lost_worker_error(*watchdog.lost) from None
        except Exception as exc:
            stop.set()
            if watchdog.lost is not None:
                raise _lost_worker_error(*watchdog.lost) from exc
            if _known_worker_death(exc):
                raise WorkerLostError(
                    f"A worker process running a chain died: {exc} The usual cause is the "
                    "operating system's out-of-memory killer (SIGKILL). The other chains "
                    "were stopped and the estimator is unchanged. Use fewer parallel chains "
                    "(n_jobs), pass X as a numpy.memmap, or give the workers more "
                    "memory.") from exc
            raise
        except BaseException:
            stop.set()
            raise
    finally:
        stop.cleanup()
    if stop._event.is_set() and not keep_partial:
        raise KeyboardInterrupt(
            "Sampling was interrupted; the estimator is unchanged (pass "
            "keep_partial_draws=True to keep the draws completed before an interrupt).")
    if stop._event.is_set():
        results = [r._replace(interrupted=True) if r is not None else None for r in results]
    return prepared, results


def _indexed_chain(chain, config, seed, posterior, prepared, n_warmup, n_draws, stop, resume,
                   progress):
    return chain, _run_one_chain(config, seed, posterior, prepared, n_warmup, n_draws, stop,
                                 resume, chain, progress)


def _dispatch(calls, n_jobs, verbose):
    """Yield ``(chain, result)`` as the chains finish (in order if the backend
    cannot return results as they come, e.g. multiprocessing)."""
    kwargs = dict(n_jobs=n_jobs, verbose=max(0, int(verbose) - 1))
    try:
        out = Parallel(return_as="generator_unordered", **kwargs)(calls)
    except ValueError as exc:
        if "return_as" not in str(exc):
            raise
        out = Parallel(**kwargs)(calls)
    yield from out
