"""The subset mode search of the set-up, from the prior's start and warm-started.

``samplers._hmc_family.subset_mode`` finds the mode of a random
``reference_fraction`` of the rows (1%: 10^6 rows of the 10^8-row
benchmark) by damped Newton steps on the gathered rows.  From
``WARM_START_MIN_SUBSET`` rows it starts at the mode of every ``k``-th of
them (about ``WARM_START_ROWS``) instead of at the prior's starting point
(``_hmc_family._warm_start``).  This script gathers one such subset of
``bench_scale.make_data``'s rows (the memmap of ``bench_scale.py
--keep-data`` for ``--memmap``) and times both searches, interleaved over
``--repeats`` rounds in one process: wall and CPU seconds (medians), the
order-2 and order-0 evaluations on the whole subset, and the gap between the
two modes in the norm of the subset posterior's Hessian.  One JSON line.

    python benchmarks/bench_subset_mode.py --n 100000000 --memmap
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    from bench_scale import make_data

    from bayesian_subsample.estimators._passes import SingleThreadedBLAS
    from bayesian_subsample.likelihood import TallPosterior
    from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily
    from bayesian_subsample.samplers import _hmc_family

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000_000)
    parser.add_argument("--memmap", action="store_true")
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    path = f"/tmp/bench_scale_X_{args.n}.npy" if args.memmap else None
    X, y, _ = make_data(args.n, 0, path, reuse=True)
    model = GLM(X, y, LogisticFamily())
    post = TallPosterior(model, GaussianPrior(np.full(model.dim, 10.0)))
    size = int(np.ceil(args.fraction * args.n))
    idx = np.sort(np.random.default_rng(0).choice(args.n, size, replace=False))
    t0 = time.perf_counter()
    rows = post.subset_rows(idx)
    gather_s = time.perf_counter() - t0

    calls = []
    real = model.sums

    def counted(theta, order=1, idx=None, rows=None):
        if rows is not None and len(rows[0]) == size:
            calls.append(order)
        return real(theta, order, idx, rows)

    model.sums = counted
    times = {"cold": [], "warm": []}
    cpu = {"cold": [], "warm": []}
    evals, modes = {}, {}
    with SingleThreadedBLAS():
        for _ in range(args.repeats):
            for name in ("cold", "warm"):
                calls.clear()
                c0, w0 = time.process_time(), time.perf_counter()
                start, _ = ((None, 0) if name == "cold"
                            else _hmc_family._warm_start(post, idx, rows))
                theta, _, hess = post.mode(theta0=start, idx=idx, rows=rows,
                                           return_hessian=True)
                times[name].append(time.perf_counter() - w0)
                cpu[name].append(time.process_time() - c0)
                evals[name] = {"order2": calls.count(2), "order0": calls.count(0)}
                modes[name] = (theta, hess)
    gap = modes["warm"][0] - modes["cold"][0]
    row = {"n": args.n, "memmap": path is not None, "subset_rows": size,
           "warm_start_min_subset": _hmc_family.WARM_START_MIN_SUBSET,
           "warm_start_rows": _hmc_family.WARM_START_ROWS,
           "gather_s": round(gather_s, 3), "repeats": args.repeats,
           "load_avg_1min": round(os.getloadavg()[0], 2),
           "gap_in_hessian_norm": float(np.sqrt(gap @ modes["cold"][1] @ gap))}
    for name in ("cold", "warm"):
        row[name] = {"wall_s": round(float(np.median(times[name])), 3),
                     "cpu_s": round(float(np.median(cpu[name])), 3),
                     "wall_all": [round(t, 3) for t in times[name]],
                     "evaluations_on_subset": evals[name]}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
