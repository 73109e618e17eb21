"""The first HMC-ECS fit in a new process with each kernel, in-process and with worker processes.

``HMCECS(backend="auto")`` runs the compiled kernel (:mod:`bayesian_subsample.samplers._ecs_compiled`)
from ``AUTO_MIN_ROWS`` rows when numba is installed.  The compiled kernel
is faster per iteration (``bench_iteration.py``), but each process that runs
a compiled chain first imports numba and loads the kernel from numba's disk
cache.  With ``n_jobs=1`` that is the fitting process; with ``n_jobs > 1``
the chains run in joblib's loky worker processes, and each worker pays it on
its first compiled chain (the workers are reused by later fits).  This
script measures what that costs a user: for each backend (``numpy`` and
``auto``), in a fresh Python process with a filled numba cache, the wall
time of the first ``fit`` and of a second, identical ``fit`` on the same
data (same worker pool), and the warm-up time summed over the chains
(``wall_time_["warmup"]``), which includes the import and load in a worker.  Backends alternate over ``--rounds`` so machine
load falls on both alike.  One JSON line per run.

Reproduce (fill the cache once, e.g. with ``pytest tests/test_ecs_compiled.py``)::

    python benchmarks/bench_first_fit.py                       # n = 1e5, 2 chains, n_jobs 1 and 2
    python benchmarks/bench_first_fit.py --n 1000000 --rounds 1
"""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time, warnings
sys.path.insert(0, {root!r})
from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.samplers import HMCECS
X, y, _ = make_higgs_like(n_samples={n}, random_state=0)
times, warm = [], []
for _ in range(2):
    est = BayesianLogisticRegression(sampler=HMCECS(backend={backend!r}), n_chains={chains},
                                     n_jobs={jobs}, n_warmup={nw}, n_draws={nd},
                                     random_state=0)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    times.append(time.perf_counter() - t)
    warm.append(est.wall_time_["warmup"])
print(json.dumps({{"ran": est.sampler_info_[0].get("backend"), "first": times[0],
                  "second": times[1], "warm": warm}}))
"""


def run(args, backend, jobs):
    code = CHILD.format(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        n=args.n, backend=backend, chains=args.chains, jobs=jobs,
                        nw=args.n_warmup, nd=args.n_draws)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--n-jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--n-warmup", type=int, default=1000)
    ap.add_argument("--n-draws", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for r in range(args.rounds):
        for jobs in args.n_jobs:
            for backend in ("numpy", "auto"):
                res = run(args, backend, jobs)
                print(json.dumps({"method": f"hmc_ecs_{backend}", "backend_ran": res["ran"],
                                  "n": args.n, "n_chains": args.chains, "n_jobs": jobs,
                                  "n_warmup": args.n_warmup, "n_draws": args.n_draws,
                                  "round": r, "first_fit_seconds": round(res["first"], 3),
                                  "second_fit_seconds": round(res["second"], 3),
                                  # Warm-up time summed over the chains (in
                                  # the workers: includes numba's import and
                                  # the kernel load on a worker's first chain).
                                  "first_fit_chain_warmup_seconds": round(res["warm"][0], 3),
                                  "second_fit_chain_warmup_seconds": round(res["warm"][1], 3),
                                  "load_average": round(os.getloadavg()[0], 2)}),
                      flush=True)


if __name__ == "__main__":
    main()
