"""Seconds of one full pass against one plain sequential read of ``X``, side by side.

For float32 HIGGS-like data of ``--n`` rows x 29 features (in memory, or a
float32 memmap under ``--tmpdir`` with ``--memmap``), times in one process,
interleaved over ``--repeats`` rounds (median reported):

* ``read_s``: one chunked sum over the rows (``bench_scale.sequential_read``);
* ``order2_s``, ``order1_s``, ``order0_s``: ``GLM.sums(theta, order)``, the
  set-up's Newton passes (order 2: value, gradient and Hessian);
* ``grad_s``: ``GLM.grad_sum`` (full-data HMC's gradient pass);
* ``scan_s``: the separate max-|X| validation scan
  (``estimators._validation._max_abs``) that the first set-up pass now
  replaces;

each with the chunk map the set-up uses (``JoblibChunkMap(n_jobs)`` inside
``set_up_passes``, BLAS single-threaded: ``--n-jobs`` process workers for
a memmap, the calling thread for in-memory rows -- two threads until
session 24), and the
ratios to ``read_s``.  One JSON line.  ``--float64`` runs the same on a
float64 copy (in memory only), whose passes keep the float64 route.

    python benchmarks/bench_passes.py --n 10000000
    python benchmarks/bench_passes.py --n 100000000 --memmap     # 11.6 GB under /tmp

``--keep-data`` keeps the memmap and reuses one left by an earlier run of
this script or of ``bench_scale.py --keep-data`` (same file name), and
``PYTHONPATH=/other/checkout`` times another version of the package on the
same file (``package`` in the JSON line says which one ran).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    from bench_scale import make_data, remove_data, sequential_read

    from bayesian_subsample.estimators._passes import set_up_passes
    from bayesian_subsample.estimators._validation import _max_abs
    from bayesian_subsample.likelihood import TallPosterior
    from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--memmap", action="store_true")
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmpdir", default="/tmp")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args(argv)
    path = os.path.join(args.tmpdir, f"bench_scale_X_{args.n}.npy") if args.memmap else None
    X, y, coef = make_data(args.n, args.seed, path, reuse=args.keep_data)
    try:
        if args.float64:
            X = X.astype(np.float64)
        model = GLM(X, np.asarray(y, dtype=np.float64), LogisticFamily())
        post = TallPosterior(model, GaussianPrior(np.full(model.dim, 10.0)))
        theta = np.concatenate([[0.0], coef])
        tasks = {
            "read": lambda: sequential_read(X),
            "order2": lambda: model.sums(theta, 2),
            "order1": lambda: model.sums(theta, 1),
            "order0": lambda: model.sums(theta, 0),
            "grad": lambda: model.grad_sum(theta),
            "scan": lambda: _max_abs(X),
        }
        times = {k: [] for k in tasks}
        with set_up_passes(post, args.n_jobs):
            for _ in range(args.repeats):
                for key, fn in tasks.items():
                    start = time.perf_counter()
                    fn()
                    times[key].append(time.perf_counter() - start)
        med = {k: float(np.median(v)) for k, v in times.items()}
        import bayesian_subsample

        row = {"n": args.n, "memmap": bool(args.memmap), "dtype": str(X.dtype),
               "package": os.path.dirname(os.path.dirname(bayesian_subsample.__file__)),
               "n_jobs": args.n_jobs, "repeats": args.repeats,
               "load_avg_1min": round(os.getloadavg()[0], 2)}
        row.update({f"{k}_s": round(v, 3) for k, v in med.items()})
        row.update({f"{k}_over_read": round(v / med["read"], 2) for k, v in med.items()
                    if k != "read"})
        print(json.dumps(row), flush=True)
    finally:
        del X
        if not args.keep_data:
            remove_data(path)


if __name__ == "__main__":
    main()
