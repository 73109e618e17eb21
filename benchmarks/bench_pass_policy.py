"""One set-up pass under several ways of spreading its chunks, quiet and with a busy neighbour.

Issue 15 asks that a neighbour process holding one core should not multiply
a full pass's time.  A pass is a map over chunks of rows; this script times
one order-1 and one order-2 pass (``GLM.sums``) of HIGGS-like float32 data
(``bench_scale.make_data``) with BLAS single-threaded in every worker and
the chunks spread

* ``joblib2``: by ``JoblibChunkMap(2)`` on joblib's threading backend
  (``parallel_config(backend="threading")``: ``GROUPS_PER_WORKER``
  contiguous groups of chunks per thread, handed out as threads free up;
  the set-up's own map until session 24, when it became ``setup``);
* ``joblib4``: the same with four threads on two cores (a larger share of
  the cores against the neighbour);
* ``setup``: the map a fit's set-up installs now (``set_up_passes``: two
  process workers for a memmap, the calling thread for in-memory rows;
  ``benchmarks/bench_pass_backends.py``);
* ``static2``: two threads, each given half of the chunks up front (static
  partitioning: the pass waits for the slower half);
* ``dyn2``, ``dyn3``: a ``ThreadPoolExecutor`` of 2 or 3 threads, one chunk
  per task;

interleaved over ``--repeats`` rounds, first with the machine as it is and
then with ``yes > /dev/null`` running (started and stopped by this script),
twice each.  Prints one line per policy and pass order (median seconds quiet
and busy, and their ratio) and one JSON line.

    python benchmarks/bench_pass_policy.py --n 10000000 --repeats 3
    python benchmarks/bench_pass_policy.py --n 100000000 --memmap --keep-data  # bench_scale's file
"""

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class Static:
    """``k`` threads, each given a contiguous ``1/k`` of the chunks up front."""

    def __init__(self, k):
        self.k = k

    def __call__(self, fn, items):
        from bayesian_subsample.estimators._passes import _single_threaded

        items = list(items)
        parts = np.array_split(np.arange(len(items)), self.k)
        with ThreadPoolExecutor(self.k) as ex:
            res = list(ex.map(lambda p: [_single_threaded(fn, items[i]) for i in p], parts))
        return [r for part in res for r in part]


class Threads:
    """``JoblibChunkMap(k)`` run on joblib's threading backend."""

    def __init__(self, k):
        from bayesian_subsample.estimators._passes import JoblibChunkMap

        self.map = JoblibChunkMap(k)

    def __call__(self, fn, items):
        from joblib import parallel_config

        with parallel_config(backend="threading"):
            return self.map(fn, items)


class Dynamic:
    """``k`` threads taking one chunk at a time from a shared queue."""

    def __init__(self, k):
        self.k = k

    def __call__(self, fn, items):
        from bayesian_subsample.estimators._passes import _single_threaded

        with ThreadPoolExecutor(self.k) as ex:
            return list(ex.map(lambda it: _single_threaded(fn, it), list(items)))


def main(argv=None):
    from bench_scale import make_data, remove_data

    from bayesian_subsample.estimators._passes import set_up_passes
    from bayesian_subsample.likelihood import TallPosterior
    from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--memmap", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmpdir", default="/tmp")
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args(argv)
    path = os.path.join(args.tmpdir, f"bench_scale_X_{args.n}.npy") if args.memmap else None
    X, y, coef = make_data(args.n, 0, path, reuse=args.keep_data)
    try:
        model = GLM(X, y, LogisticFamily())
        post = TallPosterior(model, GaussianPrior(np.full(model.dim, 10.0)))
        theta = 0.9 * np.concatenate([[0.0], coef])
        policies = {"joblib2": lambda: Threads(2), "joblib4": lambda: Threads(4),
                    "setup": lambda: model.chunk_map,
                    "static2": lambda: Static(2), "dyn2": lambda: Dynamic(2),
                    "dyn3": lambda: Dynamic(3)}
        times = {}
        load = os.getloadavg()[0]
        for busy in (False, True, False, True):
            neighbour = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if busy else None
            time.sleep(0.5)
            try:
                for _ in range(args.repeats):
                    for name, make in policies.items():
                        for order in (1, 2):
                            with set_up_passes(post, 2):
                                model.chunk_map = make()
                                t = time.perf_counter()
                                model.sums(theta, order=order)
                                took = time.perf_counter() - t
                            times.setdefault((name, order, busy), []).append(took)
            finally:
                if neighbour is not None:
                    neighbour.kill()
                    neighbour.wait()
        out = {"n": args.n, "memmap": args.memmap, "load_avg_1min": round(load, 2)}
        for name in policies:
            for order in (1, 2):
                quiet = float(np.median(times[(name, order, False)]))
                busy = float(np.median(times[(name, order, True)]))
                print(f"{name:8s} order {order}: quiet {quiet:.3f} s, busy {busy:.3f} s, "
                      f"busy/quiet {busy / quiet:.2f}")
                out[f"{name}_order{order}"] = {"quiet_s": round(quiet, 3), "busy_s": round(busy, 3),
                                               "ratio": round(busy / quiet, 2)}
        print(json.dumps(out), flush=True)
    finally:
        del X
        if not args.keep_data:
            remove_data(path)


if __name__ == "__main__":
    main()
