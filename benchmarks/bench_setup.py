"""Set-up cost of one tall binary logistic fit: validation, full passes, their seconds.

Fits ``BayesianLogisticRegression(sampler="hmc_ecs")`` on ``n`` rows of
synthetic float32 data (default 10^7 x 10) with a short run (2 chains, 100 +
100 by default), and prints one JSON line: seconds of validation (from the
call of ``fit`` to the sampler's ``prepare``), of the shared set-up
(``prepare``), of the chains, the number of full passes over the data in
the whole fit (counted at ``GLM.map_chunks``, through which every full pass
goes) and how many of them happened inside the chains, the time of one
plain sequential read of ``X`` and of ``np.unique(y, return_inverse=True)``
for scale.  Works on any version of the package with the same estimator
API, so the numbers before and after a change are measured by one script:

    python benchmarks/bench_setup.py --n 10000000
    PYTHONPATH=/path/to/other/checkout python benchmarks/bench_setup.py ...
"""

import argparse
import json
import subprocess
import time
import warnings

import numpy as np

import bayesian_subsample
from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.models import GLM
from bayesian_subsample.samplers import HMCECS


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--n-features", type=int, default=10)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=100)
    parser.add_argument("--n-draws", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    X = rng.standard_normal((args.n, args.n_features), dtype=np.float32)
    beta = np.linspace(-1.0, 1.0, args.n_features)
    y = (rng.random(args.n) < 1.0 / (1.0 + np.exp(-(X @ beta)))).astype(np.int64)

    marks = {}
    passes = {"all": 0, "in_chains": 0}
    original_map, original_prepare = GLM.map_chunks, HMCECS.prepare

    def counted(self, method, *a):
        passes["all"] += 1
        passes["in_chains"] += "prepare_end" in marks
        return original_map(self, method, *a)

    def timed_prepare(self, rng, posterior):
        marks["prepare_start"] = time.perf_counter()
        out = original_prepare(self, rng, posterior)
        marks["prepare_end"] = time.perf_counter()
        return out

    GLM.map_chunks, HMCECS.prepare = counted, timed_prepare
    est = BayesianLogisticRegression(sampler="hmc_ecs", n_chains=args.n_chains,
                                     n_warmup=args.n_warmup, n_draws=args.n_draws, n_jobs=1,
                                     random_state=args.seed)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    end = time.perf_counter()
    GLM.map_chunks, HMCECS.prepare = original_map, original_prepare

    t = time.perf_counter()
    total = 0.0
    for s in range(0, args.n, 1 << 16):
        total += float(X[s:s + (1 << 16)].sum())
    read = time.perf_counter() - t
    t = time.perf_counter()
    np.unique(y, return_inverse=True)
    unique = time.perf_counter() - t
    try:
        commit = subprocess.run(["git", "-C", bayesian_subsample.__path__[0], "rev-parse",
                                 "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    info = est.sampler_info_[0]
    print(json.dumps({
        "n": args.n, "n_features": args.n_features, "dtype": "float32",
        "n_chains": args.n_chains, "commit": commit,
        "fit_seconds": round(end - start, 2),
        "validation_seconds": round(marks["prepare_start"] - start, 2),
        "setup_seconds": round(marks["prepare_end"] - marks["prepare_start"], 2),
        "chains_seconds": round(end - marks["prepare_end"], 2),
        "full_passes": passes["all"], "full_passes_in_chains": passes["in_chains"],
        "setup_passes_reported": info.get("setup_passes"),
        "setup_pass_seconds_reported": (round(info["setup_pass_seconds"], 2)
                                        if "setup_pass_seconds" in info else None),
        "subsample_size": est.subsample_size_.tolist(),
        "sequential_read_seconds": round(read, 2),
        "np_unique_seconds": round(unique, 2),
    }))


if __name__ == "__main__":
    main()
