"""Cost of an HMC-ECS fit against the data size, from 10^5 to 10^8 rows.

For each ``--n`` (default 10^5, 10^6, 10^7; add 10^8 explicitly), HIGGS-like
logistic data (:func:`bayesian_subsample.datasets.make_higgs_like`'s recipe:
29 correlated float32 features, known coefficients) are fitted by
``BayesianLogisticRegression(sampler="hmc_ecs")`` and one JSON line is
printed with:

* ``fit_s``: the whole ``fit``; ``validation_s``: input validation
  (the fit's ``validation_seconds``; above 10^5 rows the NaN/infinity/
  magnitude scan of ``X`` is part of the first set-up pass, not of
  validation); ``setup_s`` and ``setup_passes``: the
  parent's set-up (theta*, control-variate sums, mass matrix, pilot for m)
  and the number of full passes it made; ``warmup_s`` and ``sampling_s``
  summed over the chains; ``rows_read_over_n``: every per-observation
  evaluation of the fit (set-up, warm-up with its theta* refinement passes,
  sampling) divided by ``n``, i.e. the fit's cost in full passes;
* ``read_s``: one plain sequential read of ``X`` (a chunked sum over the rows,
  from the page cache or disk for a memmap, from RAM otherwise), the unit a
  fit over tall data is measured in;
* ``ms_per_iteration``: sampling seconds per post-warm-up iteration per
  chain, and, timed side by side in this process with one BLAS thread,
  ``kernel_ms``: the library's ``hmc_ecs.step`` at the fit's ``m``, ``L`` and
  step size, and ``floor_ms``: the numpy floor of the same work
  (``benchmarks/bench_iteration.py``), with their ``ratio``;
* ``min_ess``, ``min_ess_per_s`` (bulk ESS of the 30 coefficients over
  ``fit_s``), the largest ``|posterior mean - true value| / posterior sd``,
  and the peak anonymous resident memory (``RssAnon``) of the parent and of
  each worker process during the fit;
* ``setup_newton``: the kind (``chord``: order-1 pass, ``newton``: order-2
  pass) and Newton decrement of each pass of the theta* search;
  ``fit_over_read``, ``setup_over_read``: the fit's and the set-up's
  seconds in units of ``read_s``; ``load_avg_1min`` before the size;
* ``setup_pass_times``: seconds of each set-up pass; ``setup_subset_size``:
  rows of the subset whose mode started the theta* search;
  ``posterior_mean``, ``posterior_sd``: per coefficient (intercept first),
  to compare two versions' draws; ``busy_neighbour``: whether
  ``--busy-neighbour`` ran ``yes > /dev/null`` (one core held by another
  process) through the whole invocation, reads and fits alike;
* when 10^6 rows ran earlier in the same invocation (the default and the
  check of issue 15: ``--n 1000000 100000000``), ``budget_s`` = 3
  ``read_s`` + 2 ``fit_s`` of 10^6 rows and ``within_budget``;
* ``workers_warmed``: right before every timed fit, an untimed 3,000-row fit
  on the same worker pool with the kernel the timed fit runs
  (:func:`warm_workers`: ``backend`` and its ``seconds``), so that no timed
  fit -- 10^6 or 10^8 -- includes numba's import and kernel load (or
  compile) in its chain workers or a restart of the pool.  Without it the
  10^6 fit's chains paid 2.3-2.5 s of numba set-up (0.2-0.3 s of chains),
  which inflated the 10^8 budget by about 4 s.

Rows above ``--memmap-above`` (default 5 x 10^7) are written chunk by chunk
to a float32 memmap under ``--tmpdir`` (10^8 x 29 float32 is 11.6 GB) and the
file is deleted afterwards; smaller sizes are float32 arrays in memory.

    python benchmarks/bench_scale.py                          # 1e5, 1e6, 1e7 (~10 min)
    python benchmarks/bench_scale.py --n 100000000 --n-warmup 300 --n-draws 500
    python benchmarks/bench_scale.py --n 1000000 100000000 --busy-neighbour  # issue 15, busy
    python benchmarks/bench_scale.py --n 100000000 --keep-data   # then, reusing the file:
    PYTHONPATH=/other/checkout python benchmarks/bench_scale.py --n 100000000 --keep-data
    python benchmarks/bench_scale.py --plot doc/_static/bench_scale.png \\
        --from-results benchmarks/results/scale.jsonl        # the figure in the docs
"""

import argparse
import functools
import json
import os
import sys
import threading
import time
import warnings

import numpy as np
from scipy.special import expit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def make_data(n, seed, path=None, n_features=29, chunk=262_144, reuse=False):
    """HIGGS-like data as :func:`make_higgs_like` draws them, into RAM or a float32 memmap.

    With ``reuse`` and a memmap at ``path`` written by an earlier call with
    the same ``n`` and ``seed`` (and its labels next to it), those are opened
    instead of drawn again; the labels are then always saved next to a
    memmap, so a later run (e.g. another checkout on ``PYTHONPATH``) can
    reuse the file.
    """
    rng = np.random.default_rng(seed)
    coef = rng.normal(0.0, 0.5, n_features)
    if path is not None and reuse and os.path.exists(path) and os.path.exists(path + ".y.npy"):
        X = np.load(path, mmap_mode="r")
        if X.shape == (n, n_features):
            return X, np.load(path + ".y.npy"), coef
    lags = np.abs(np.subtract.outer(np.arange(n_features), np.arange(n_features)))
    chol = np.linalg.cholesky(0.5**lags)
    if path is None:
        X = np.empty((n, n_features), dtype=np.float32)
    else:
        X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                      shape=(n, n_features))
    y = np.empty(n, dtype=np.int8)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        z = rng.standard_normal((stop - start, n_features)) @ chol.T
        X[start:stop] = z
        y[start:stop] = rng.random(stop - start) < expit(z @ coef)
    if path is not None:
        X.flush()
        del X
        X = np.load(path, mmap_mode="r")
        np.save(path + ".y.npy", y)
    return X, y, coef


def remove_data(path):
    """Delete the memmap :func:`make_data` wrote at ``path`` (and its labels), if any."""
    if path is None:
        return
    for name in (path, path + ".y.npy"):
        if os.path.exists(name):
            os.remove(name)


def sequential_read(X, chunk=262_144):
    """Seconds for one chunked pass that touches every element of ``X`` once."""
    start = time.perf_counter()
    acc = np.zeros(X.shape[1])
    for lo in range(0, X.shape[0], chunk):
        acc += np.add.reduce(X[lo:lo + chunk], axis=0, dtype=np.float64)
    return time.perf_counter() - start


def _rss_anon_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class MemoryWatch:
    """Peak ``RssAnon`` of this process and its descendants, sampled every 0.2 s."""

    def __init__(self):
        self.peak = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            for proc in [me] + me.children(recursive=True):
                kb = _rss_anon_kb(proc.pid)
                if kb is not None:
                    key = "parent" if proc.pid == me.pid else f"child_{proc.pid}"
                    self.peak[key] = max(self.peak.get(key, 0), kb)
            self._stop.wait(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def summary_mb(self):
        return {k: round(v / 1024, 1) for k, v in sorted(self.peak.items())}


class Timers:
    """Wall time and call counts of validation, the parent's set-up and its passes."""

    def __init__(self):
        from bayesian_subsample.estimators import _glm_base
        from bayesian_subsample.models._glm import GLM
        from bayesian_subsample.samplers._hmc_family import HMCECS

        self.seconds = {"validation": 0.0, "setup": 0.0}
        self.passes = 0
        self._patches = [(_glm_base, "validate_data"), (HMCECS, "prepare"),
                         (GLM, "map_chunks")]
        self._orig = [getattr(obj, name) for obj, name in self._patches]
        _glm_base.validate_data = self._timed(_glm_base.validate_data, "validation")
        HMCECS.prepare = self._timed(HMCECS.prepare, "setup")
        orig_map = GLM.map_chunks
        timers = self

        @functools.wraps(orig_map)
        def counted(model, *args, **kwargs):
            if model.n_obs > 1_000_000 or len(list(model.chunks())) > 1:
                timers.passes += 1
            return orig_map(model, *args, **kwargs)

        GLM.map_chunks = counted

    def _timed(self, fn, key):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - start
        return wrapper

    def restore(self):
        for (obj, name), orig in zip(self._patches, self._orig):
            setattr(obj, name, orig)


def warm_workers(n, args):
    """A small untimed fit right before the timed one, on the same worker pool
    (``n_chains``, ``n_jobs``) and with the HMC-ECS kernel the timed fit will
    run (``"numba"`` when it compiles: at least ``AUTO_MIN_ROWS`` rows and
    numba installed, else ``"numpy"``), with ``4 n_jobs`` chains so that
    every worker runs one.  The chain workers then hold numba's import and
    the compiled kernel (loaded from numba's on-disk cache, or compiled on a
    first run ever), as a long-lived process does after its first fit, and
    the pool is alive: a pool left idle while a 10^8 memmap is written
    (longer than loky's 300 s idle timeout) would otherwise be restarted
    inside the 10^8 fit.  So the 10^6 and the 10^8 fits are timed alike,
    neither pays a one-off import, compile or pool start, and the budget
    ``3 read_s + 2 fit_s(10^6)`` is not inflated by them.  Returns what was
    done, for the JSON line (``workers_warmed``).
    """
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import HMCECS
    from bayesian_subsample.samplers._ecs_compiled import AUTO_MIN_ROWS, numba_available

    backend = "numba" if numba_available() and n >= AUTO_MIN_ROWS else "numpy"
    Xw, yw, _ = make_data(3000, 1)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        BayesianLogisticRegression(sampler=HMCECS(backend=backend),
                                   n_chains=4 * max(1, args.n_jobs), n_jobs=args.n_jobs,
                                   n_warmup=20, n_draws=20, random_state=0).fit(Xw, yw)
    return {"backend": backend, "seconds": round(time.perf_counter() - start, 3)}


def run_size(n, args, earlier=()):
    from threadpoolctl import threadpool_limits

    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.diagnostics import ess_bulk
    from bench_iteration import Floor, time_pair

    path = None
    if n > args.memmap_above:
        path = os.path.join(args.tmpdir, f"bench_scale_X_{n}.npy")
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    X, y, coef = make_data(n, args.seed, path, reuse=args.keep_data)
    gen_s = time.perf_counter() - t0
    try:
        read_s = sequential_read(X)
        warm = None if args.cold_workers else warm_workers(n, args)
        est = BayesianLogisticRegression(sampler="hmc_ecs", n_chains=args.n_chains,
                                         n_warmup=args.n_warmup, n_draws=args.n_draws,
                                         n_jobs=args.n_jobs, random_state=args.seed)
        timers = Timers()
        try:
            with MemoryWatch() as mem, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                est.fit(X, y)
                fit_s = time.perf_counter() - start
        finally:
            timers.restore()
        draws = est._all_draws()
        ess = np.atleast_1d(ess_bulk(draws))
        truth = np.concatenate([[0.0], coef])
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
        n_iter = args.n_chains * args.n_draws
        row = {
            "n": n, "memmap": path is not None, "dtype": str(X.dtype),
            "n_chains": args.n_chains, "n_warmup": args.n_warmup, "n_draws": args.n_draws,
            "fit_s": round(fit_s, 3), "validation_s": round(timers.seconds["validation"], 3),
            "setup_s": round(timers.seconds["setup"], 3), "setup_passes": timers.passes,
            "warmup_s": round(est.wall_time_["warmup"], 3),
            "sampling_s": round(est.wall_time_["sampling"], 3),
            "rows_read_over_n": round(sum(est.evaluations_.values()) / n, 2),
            "evaluations": est.evaluations_,
            "setup_passes_reported": est.sampler_info_[0].get("setup_passes"),
            "read_s": round(read_s, 3), "data_generation_s": round(gen_s, 1),
            "subsample_size": est.subsample_size_.tolist(),
            "n_integration_steps": est.n_integration_steps_.tolist(),
            "ms_per_iteration": round(1e3 * est.wall_time_["sampling"] / n_iter, 4),
            "min_ess": round(float(ess.min()), 1),
            "min_ess_per_s": round(float(ess.min()) / fit_s, 2),
            "max_abs_mean_minus_truth_over_sd": round(float(np.max(np.abs(mean - truth) / sd)),
                                                       3),
            "rss_anon_peak_mb": mem.summary_mb(),
            "busy_neighbour": bool(args.busy_neighbour),
            "workers_warmed": warm,
            "posterior_mean": [float(f"{v:.6g}") for v in mean],
            "posterior_sd": [float(f"{v:.6g}") for v in sd],
        }
        reported = (getattr(est, "sampler_info_", None) or [{}])[0]
        if "validation_seconds" in reported:
            # The fit's own report (validation now also scans X for scale and
            # non-finite values outside validate_data).
            row["validation_s"] = round(float(reported["validation_seconds"]), 3)
        if info := getattr(est, "sampler_info_", None):
            row["sampler_info"] = [{k: v for k, v in d.items()
                                    if isinstance(v, (int, float, str, bool, list, dict))}
                                   for d in info]
            row["setup_newton"] = [
                {key: (float(f"{value:.3g}") if isinstance(value, float) else value)
                 for key, value in step.items()}
                for step in info[0].get("setup_newton", [])]
            row["setup_pass_times"] = [round(t, 3) for t in info[0].get("setup_pass_times", [])]
            row["setup_subset_size"] = info[0].get("setup_subset_size")
        row.update(fit_over_read=round(fit_s / read_s, 2),
                   setup_over_read=round(timers.seconds["setup"] / read_s, 2),
                   load_avg_1min=round(load, 2))
        small = [r for r in earlier if r["n"] == 1_000_000]
        if small and n > 1_000_000:
            budget = 3 * read_s + 2 * small[-1]["fit_s"]
            row.update(budget_s=round(budget, 3), within_budget=bool(fit_s <= budget))
        # Kernel and floor side by side at this fit's m, L and step size.
        if args.skip_kernel:
            print(json.dumps(row), flush=True)
            return row
        with threadpool_limits(1):
            from bayesian_subsample.likelihood._full import TallPosterior
            from bayesian_subsample.models._glm import GLM, LogisticFamily
            from bayesian_subsample.models._prior import GaussianPrior
            from bayesian_subsample.samplers.metric import metric_from_mass_matrix

            model = GLM(X, np.asarray(y, dtype=np.float64), LogisticFamily())
            posterior = TallPosterior(model, GaussianPrior(np.full(model.dim, 10.0)))
            theta_star = est.reference_point_[0]
            expansion = posterior.expand(theta_star, 2)
            m, L = int(est.subsample_size_[0]), int(est.n_integration_steps_[0])
            kernel_est = posterior.difference_estimator(expansion, m, 100)
            metric = metric_from_mass_matrix(expansion.neg_hessian, dense=False)
            floor = Floor(X, y, expansion, posterior.prior.precision,
                          kernel_est.subsample_size, kernel_est.n_blocks,
                          np.random.default_rng(3), getattr(kernel_est, "prefetch", 1))
            kern, flo, comp = time_pair(kernel_est, floor, theta_star, metric,
                                  float(est.step_size_[0]), L, args.n_iter, args.repeats)
        row.update(kernel_ms=round(kern, 4), floor_ms=round(flo, 4),
                   ratio=round(kern / flo, 3),
                   compiled_ms=None if comp is None else round(comp, 4))
        print(json.dumps(row), flush=True)
        return row
    finally:
        del X
        if not args.keep_data:
            remove_data(path)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["n"])
    n = np.array([r["n"] for r in rows], dtype=float)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in [("fit_s", "whole fit"), ("read_s", "one sequential read of X"),
                       ("setup_s", "set-up (parent)"), ("validation_s", "input validation"),
                       ("sampling_s", "sampling (all chains)")]:
        ax1.loglog(n, [max(r[key], 1e-3) for r in rows], "o-", label=label)
    ax1.set_xlabel("rows n")
    ax1.set_ylabel("seconds")
    ax1.set_title("HMC-ECS fit, 2 chains, 30 coefficients")
    ax1.legend(fontsize=8)
    ax2.semilogx(n, [r["ms_per_iteration"] for r in rows], "o-", label="fit: sampling / iteration")
    ax2.semilogx(n, [r["kernel_ms"] for r in rows], "s-", label="kernel (side by side)")
    ax2.semilogx(n, [r["floor_ms"] for r in rows], "^--", label="numpy floor")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("rows n")
    ax2.set_ylabel("ms per iteration")
    ax2.set_title("cost per iteration is flat in n")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=300)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memmap-above", type=int, default=50_000_000)
    parser.add_argument("--tmpdir", default="/tmp")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the memmap (and reuse one left by an earlier run with the "
                             "same --n and --seed): side-by-side runs of two checkouts")
    parser.add_argument("--n-iter", type=int, default=300,
                        help="iterations per timing round of the kernel and the floor")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--plot", default=None, help="save the cost-against-n figure here")
    parser.add_argument("--from-results", default=None,
                        help="plot these JSON lines instead of running")
    parser.add_argument("--skip-kernel", action="store_true",
                        help="skip the side-by-side kernel and floor timing after each fit")
    parser.add_argument("--cold-workers", action="store_true",
                        help="skip the untimed warm-up fit before each timed fit (the timed "
                             "fits then include the chain workers' numba import and kernel "
                             "load, as before; workers_warmed is null)")
    parser.add_argument("--busy-neighbour", action="store_true",
                        help="run `yes > /dev/null` (one core busy) from before the first "
                             "size to after the last: issue 15's busy-neighbour check")
    args = parser.parse_args(argv)
    if args.from_results:
        with open(args.from_results) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        plot([r for r in rows if "fit_s" in r], args.plot)
        return
    # Start joblib's worker pool outside the timings (as bench_hmc_ecs.py does).
    from bayesian_subsample import BayesianLogisticRegression

    Xw, yw, _ = make_data(3000, 1, n_features=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        BayesianLogisticRegression(n_chains=args.n_chains, n_jobs=args.n_jobs, n_warmup=10,
                                   n_draws=10, random_state=0).fit(Xw, yw)
    neighbour = None
    if args.busy_neighbour:
        import subprocess

        neighbour = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
        time.sleep(1.0)  # let it take its core before anything is timed
    try:
        rows = []
        for n in args.n:
            rows.append(run_size(n, args, rows))
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()


if __name__ == "__main__":
    main()
