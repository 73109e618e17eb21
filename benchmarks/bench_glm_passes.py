"""The GLM's full passes, numpy chunk sums against the compiled ones, side by side.

Times :meth:`GLM.sums` over all rows of ``make_higgs_like(--n)`` (logistic,
29 features plus the intercept) with the numpy chunk sums and inside
``compiled_passes(model)`` (``models/_glm_numba.py``), alternately in one
process, single-threaded BLAS: the order-1 pass with the validation scan
folded in (the set-up's first pass) and the order-2 pass (the curvature
pass), for float64 and float32 ``X``.  One JSON line per (dtype, pass): the
median seconds of each kernel, their ratio, and the largest difference of
the sums relative to their scale.

    python benchmarks/bench_glm_passes.py --n 1000000 --rounds 9
"""

import argparse
import json
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.estimators._validation import check_X_max_abs
from bayesian_subsample.models._glm import GLM, LogisticFamily, compiled_passes


def _timed(model, theta, order, scan):
    if scan:
        model.deferred_scan = lambda big: check_X_max_abs(big, model.X.dtype)
    start = time.perf_counter()
    out = model.sums(theta, order=order)
    seconds = time.perf_counter() - start
    model.deferred_scan = None
    return seconds, out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    X64, y, _ = make_higgs_like(n_samples=args.n, random_state=args.seed)
    theta = np.random.default_rng(1).standard_normal(X64.shape[1] + 1) * 0.05
    with threadpool_limits(1):
        for dtype in (np.float64, np.float32):
            model = GLM(X64.astype(dtype), y.astype(np.float64), LogisticFamily())
            for order, scan, name in ((1, True, "order-1 with scan"), (2, False, "order-2")):
                times = {"numpy": [], "numba": []}
                sums = {}
                for r in range(args.rounds + 1):
                    kernels = ("numpy", "numba") if r % 2 == 0 else ("numba", "numpy")
                    for kernel in kernels:
                        if kernel == "numba":
                            with compiled_passes(model):
                                seconds, out = _timed(model, theta, order, scan)
                        else:
                            seconds, out = _timed(model, theta, order, scan)
                        if r:                     # round 0 warms up (numba's cache)
                            times[kernel].append(seconds)
                        sums[kernel] = out
                diff = max(float(np.max(np.abs(np.subtract(a, b))) / np.max(np.abs(b)))
                           for a, b in zip(sums["numba"], sums["numpy"]))
                med = {k: float(np.median(v)) for k, v in times.items()}
                print(json.dumps({
                    "n": args.n, "dtype": np.dtype(dtype).name, "pass": name,
                    "numpy_s": round(med["numpy"], 4), "numba_s": round(med["numba"], 4),
                    "ratio_numba_over_numpy": round(med["numba"] / med["numpy"], 3),
                    "max_rel_diff": diff, "rounds": args.rounds,
                    "load_avg_1min": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
