"""The NumPyro-comparison fit of two checkouts, interleaved fit by fit in one process.

On a shared machine the load changes from one second to the next, so two
checkouts timed in separate processes (``bench_setup_ab.py``) are compared
at different loads.  This script copies the package of each checkout
(``--old`` and ``--new``: repository roots) into a temporary directory
under the names ``bs_old`` and ``bs_new`` (the package imports itself only
relatively, so both load side by side), and times ``bench_numpyro.py``'s fit
of ours -- ``BayesianLogisticRegression(sampler=HMCECS(), n_chains=1,
n_warmup=1000, n_draws=1000, n_jobs=1)`` with prior scale 10 on
``make_higgs_like(--n)`` (float64, 29 features) -- alternately, the order
swapped every round, after two untimed fits of each (numba's kernels).
Prints one JSON line: per checkout the best and median fit seconds and the
median set-up and set-up-pass seconds, the median of the per-round ratios
new / old, the largest difference of the posterior means in posterior sd,
and the load average range.

    python benchmarks/bench_fit_interleaved.py --old /path/to/old --new . --rounds 15
"""

import argparse
import contextlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np


@contextlib.contextmanager
def importable_checkouts(old, new):
    """Copies of the packages of two checkouts (roots ``old`` and ``new``),
    importable in this process as ``bs_old`` and ``bs_new``."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, root in (("bs_old", old), ("bs_new", new)):
            shutil.copytree(os.path.join(root, "bayesian_subsample"), os.path.join(tmp, name),
                            ignore=shutil.ignore_patterns("__pycache__"))
        sys.path.insert(0, tmp)
        try:
            yield "bs_old", "bs_new"
        finally:
            sys.path.remove(tmp)


def _fit(pkg, X, y):
    hmcecs = importlib.import_module(pkg.__name__ + ".samplers").HMCECS
    est = pkg.BayesianLogisticRegression(sampler=hmcecs(), prior_scale=10.0,
                                         intercept_prior_scale=10.0, n_chains=1,
                                         n_warmup=1000, n_draws=1000, n_jobs=1, random_state=0)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    seconds = time.perf_counter() - start
    info = est.sampler_info_[0]
    return seconds, info["setup_seconds"], sum(info["setup_pass_times"]), est


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="root of the first checkout")
    parser.add_argument("--new", required=True, help="root of the second checkout")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    with importable_checkouts(args.old, args.new):
        pkgs = {"old": importlib.import_module("bs_old"), "new": importlib.import_module("bs_new")}
        datasets = importlib.import_module("bs_new.datasets")
        X, y, _ = datasets.make_higgs_like(n_samples=args.n, random_state=0)
        for pkg in pkgs.values():
            _fit(pkg, X, y)
            _fit(pkg, X, y)
        times = {"old": [], "new": []}
        means, loads = {}, []
        for r in range(args.rounds):
            for key in (("old", "new") if r % 2 == 0 else ("new", "old")):
                seconds, setup, passes, est = _fit(pkgs[key], X, y)
                times[key].append((seconds, setup, passes))
                draws = np.asarray(est._all_draws()).reshape(-1, est._all_draws().shape[-1])
                means[key] = (draws.mean(axis=0), draws.std(axis=0))
            loads.append(os.getloadavg()[0])
    row = {"n": args.n, "rounds": args.rounds, "old_root": os.path.abspath(args.old),
           "new_root": os.path.abspath(args.new),
           "load_avg_1min": [round(min(loads), 2), round(max(loads), 2)]}
    for key, rows in times.items():
        a = np.asarray(rows)
        row[key] = {"fit_best_s": round(float(a[:, 0].min()), 3),
                    "fit_median_s": round(float(np.median(a[:, 0])), 3),
                    "setup_median_s": round(float(np.median(a[:, 1])), 3),
                    "passes_median_s": round(float(np.median(a[:, 2])), 3)}
    ratio = np.asarray(times["new"])[:, 0] / np.asarray(times["old"])[:, 0]
    row["median_ratio_new_over_old"] = round(float(np.median(ratio)), 3)
    row["max_mean_diff_over_sd"] = float(
        f"{np.max(np.abs(means['new'][0] - means['old'][0]) / means['old'][1]):.2e}")
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
