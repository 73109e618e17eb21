"""One set-up pass over the data on the parent thread, on threads and on processes.

The set-up passes of a fit (``GLM.sums`` at theta*, the validation scan
folded into the first) are maps over 16384-row chunks
(``bayesian_subsample/estimators/_passes.py``).  This script times one
order-1 and one order-2 pass of HIGGS-like float32 data
(``bench_scale.make_data``, logistic model, BLAS single-threaded everywhere)
under

* ``serial``: every chunk in the calling thread (``serial_map``);
* ``threads``: ``JoblibChunkMap(n_jobs)`` inside
  ``joblib.parallel_config(backend="threading")``: ``GROUPS_PER_WORKER``
  contiguous groups of chunks per thread;
* ``processes``: ``JoblibChunkMap(n_jobs, processes=True)``: the same groups
  on joblib's default process backend (loky), the model pickled once per
  group (a memmapped ``X`` by reference; in-memory arrays -- ``X`` itself
  when it is not a memmap, the labels -- dumped by loky to a file once per
  ``Parallel`` call and memory-mapped by the workers);
* ``default``: the map a fit installs (``set_up_passes``), i.e. processes
  for a memmapped ``X`` of at least ``PROCESS_PASS_MIN_BYTES``, the calling
  thread for a smaller or an in-memory one,

interleaved over ``--repeats`` rounds, plus one plain sequential read of
``X`` (``bench_scale.sequential_read``) and the cost of the process map's
dispatch alone (``overhead``: a pass whose chunks do no work).  Wall
seconds are medians; ``cpu_s`` is the CPU seconds of this process and its
worker processes together (``psutil``: ``pip install -e ".[benchmark]"``),
the cost a busy neighbour pays.
Prints one JSON line per map and pass order.  ``--busy-neighbour`` runs
``yes > /dev/null`` (one core held by another process, as in
``bench_scale.py``) for the whole run, so that the maps are compared side by
side under issue 15's busy-neighbour condition (``busy_neighbour`` in each
line).

    python benchmarks/bench_pass_backends.py --n 10000000 --memmap   # bench_scale's file
    python benchmarks/bench_pass_backends.py --n 1000000 10000000    # in memory
    python benchmarks/bench_pass_backends.py --n 100000000 --memmap --maps serial processes \\
        --busy-neighbour
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _cpu_seconds(exclude=()):
    """CPU seconds of this process and every live descendant (joblib's workers),
    leaving out the processes whose pids are in ``exclude`` (the busy neighbour)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me] + me.children(recursive=True):
        if proc.pid in exclude:
            continue
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def main(argv=None):
    import contextlib

    from bench_scale import make_data, sequential_read
    from joblib import Parallel, delayed, parallel_config

    from bayesian_subsample.estimators._passes import (JoblibChunkMap, SingleThreadedBLAS,
                                                       set_up_passes)
    from bayesian_subsample.likelihood import TallPosterior
    from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily, serial_map

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000_000])
    parser.add_argument("--memmap", action="store_true",
                        help="read /tmp/bench_scale_X_<n>.npy (written by bench_scale.py "
                             "--keep-data, or here if missing; kept)")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--maps", nargs="+",
                        default=["serial", "threads", "processes", "default"])
    parser.add_argument("--busy-neighbour", action="store_true",
                        help="run `yes > /dev/null` (one core busy) during the timings")
    args = parser.parse_args(argv)

    # Start loky's workers outside the timings, as a fit's chains would have.
    Parallel(n_jobs=args.n_jobs)(delayed(abs)(i) for i in range(4))
    neighbour = None
    if args.busy_neighbour:
        import subprocess

        neighbour = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
        time.sleep(1.0)  # let it take its core before anything is timed
    # The neighbour is a child of this process: its CPU is not the passes'.
    skip = () if neighbour is None else (neighbour.pid,)
    try:
        for n in args.n:
            path = f"/tmp/bench_scale_X_{n}.npy" if args.memmap else None
            X, y, coef = make_data(n, 0, path, reuse=True)
            model = GLM(X, y, LogisticFamily())
            post = TallPosterior(model, GaussianPrior(np.full(model.dim, 3.0)))
            theta = np.r_[0.0, coef]
            read = [sequential_read(X) for _ in range(2)]

            def install(name):
                if name == "serial":
                    model.chunk_map = serial_map
                    return contextlib.nullcontext()
                if name == "threads":
                    model.chunk_map = JoblibChunkMap(args.n_jobs)
                    return parallel_config(backend="threading")
                if name == "processes":
                    model.chunk_map = JoblibChunkMap(args.n_jobs, processes=True)
                    return contextlib.nullcontext()
                return contextlib.nullcontext()

            times = {(name, order): [] for name in args.maps for order in (1, 2)}
            cpus = {key: [] for key in times}
            results = {}
            overhead = []
            for _ in range(args.repeats):
                for name in args.maps:
                    for order in (1, 2):
                        with SingleThreadedBLAS():
                            outer = (set_up_passes(post, args.n_jobs) if name == "default"
                                     else install(name))
                            with outer:
                                c0, t0 = _cpu_seconds(skip), time.perf_counter()
                                out = model.sums(theta, order)
                                times[name, order].append(time.perf_counter() - t0)
                                cpus[name, order].append(_cpu_seconds(skip) - c0)
                        model.chunk_map = serial_map
                        results.setdefault(order, []).append(out)
                if "processes" in args.maps:
                    model.chunk_map = JoblibChunkMap(args.n_jobs, processes=True)
                    t0 = time.perf_counter()
                    model.map_chunks("_block_nothing")
                    overhead.append(time.perf_counter() - t0)
                    model.chunk_map = serial_map
            identical = all(all(np.array_equal(np.asarray(a), np.asarray(b))
                                for a, b in zip(outs[0], other))
                            for outs in results.values() for other in outs[1:])
            base = {"n": n, "memmap": path is not None, "n_jobs": args.n_jobs,
                    "repeats": args.repeats, "read_s": round(min(read), 3),
                    "read_first_s": round(read[0], 3), "identical_sums": identical,
                    "load_avg_1min": round(os.getloadavg()[0], 2),
                    "busy_neighbour": bool(args.busy_neighbour)}
            if overhead:
                base["process_overhead_s"] = round(float(np.median(overhead)), 3)
            for (name, order), ts in times.items():
                row = dict(base, map=name, order=order, wall_s=round(float(np.median(ts)), 3),
                           cpu_s=round(float(np.median(cpus[name, order])), 3),
                           wall_all=[round(t, 3) for t in ts])
                print(json.dumps(row), flush=True)

    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()

if __name__ == "__main__":
    main()
