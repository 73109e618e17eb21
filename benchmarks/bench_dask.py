"""The same HMC-ECS fit in memory, as a dask array and from a zarr store on a LocalCluster.

Prints one JSON line per input: wall seconds of ``fit`` (validation, set-up
passes and chains), the summed chain time, whether the draws equal the
in-memory fit's bit for bit, and, for the cluster inputs, how many full-pass
tasks ran on each worker (from the task stream).  The ratio against the
in-memory fit is the cost of keeping the data on the cluster.

    python benchmarks/bench_dask.py --n 1000000 --d 20
"""

import argparse
import json
import os
import tempfile
import time
import warnings

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=20)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=300)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--chunk-rows", type=int, default=65_536)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import dask.array as da
    import zarr
    from distributed import Client, LocalCluster, get_task_stream

    from bayesian_subsample import HMCECS, BayesianLogisticRegression
    from bayesian_subsample.datasets import make_higgs_like

    X, y, _ = make_higgs_like(n_samples=args.n, n_features=args.d, dtype=np.float32,
                              random_state=args.seed)
    tmp = tempfile.TemporaryDirectory(prefix="bench_dask-")
    store = os.path.join(tmp.name, "X.zarr")
    z = zarr.open(store, mode="w", shape=X.shape, chunks=(args.chunk_rows, args.d), dtype="f4")
    z[:] = X

    def fit(data):
        clf = BayesianLogisticRegression(sampler=HMCECS(), n_chains=args.n_chains,
                                         n_warmup=args.n_warmup, n_draws=args.n_draws,
                                         random_state=args.seed)
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf.fit(data, y)
        return clf, time.perf_counter() - t

    ref, ref_s = fit(X)
    base = dict(n=args.n, d=args.d, n_chains=args.n_chains, n_warmup=args.n_warmup,
                n_draws=args.n_draws)
    print(json.dumps(dict(base, input="numpy", fit_s=round(ref_s, 3),
                          chains_s=round(sum(ref.wall_time_.values()), 3),
                          identical_draws=True, ratio=1.0)), flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    with cluster, Client(cluster) as client:
        for name, data in (("dask", da.from_array(X, chunks=(args.chunk_rows, args.d))),
                           ("zarr", da.from_zarr(store))):
            with get_task_stream(client) as ts:
                clf, s = fit(data)
            per_worker = {}
            for task in ts.data:
                if "pass_on_block" in str(task["key"]):
                    per_worker[task["worker"]] = per_worker.get(task["worker"], 0) + 1
            print(json.dumps(dict(
                base, input=name, fit_s=round(s, 3),
                chains_s=round(sum(clf.wall_time_.values()), 3),
                identical_draws=bool(np.array_equal(clf.coef_draws_, ref.coef_draws_)),
                ratio=round(s / ref_s, 2), pass_tasks_per_worker=sorted(per_worker.values()))),
                flush=True)
    tmp.cleanup()


if __name__ == "__main__":
    main()
