"""HMC-ECS on a zarr store larger than a worker's memory, on a dask cluster.

Writes a HIGGS-like logistic-regression data set (float32, written chunk by
chunk, never whole in memory) to a zarr store, starts a
:class:`distributed.LocalCluster` of two worker processes whose
``memory_limit`` is *smaller than the store*, opens the store lazily with
:func:`dask.array.from_zarr` and fits
:class:`~bayesian_subsample.BayesianLogisticRegression` with HMC-ECS.

What happens where (``doc/dask.rst``):

* validation (NaN, infinity, magnitude, the classes) is one dask computation
  of reductions on the workers;
* every full pass -- the Taylor control-variate sums and the mass matrix at
  the reference point, the theta* refinements -- is one task per block on the
  workers, each task reading its block of the store;
* HMC-ECS's subsample proposals are drawn ahead in batches, and their rows
  gathered with one dask computation per batch, so the iterations run on
  local arrays in the client process;
* ``predict_proba`` of a dask array is a dask array (one task per block).

The script prints the store size against the worker memory limit, the time of
each stage, how many pass tasks each worker ran (from the task stream), the
posterior means against the generating coefficients in posterior sd units,
and the held-out AUC computed from the lazy predictions.

Run ``python examples/dask_zarr_cluster.py --help`` for the options.  The
default is 6 million rows x 20 features, 480 MB of float32, against two
workers of 400 MB each (a worker process with the package imported already
holds about 200 MB).  Measured on a 2-core machine shared with other jobs
(load average about 18): fit 241 s, of which the chains 169 s (summed over
the two chains), 445 pass tasks spread 220 / 225 over the two workers,
largest |posterior mean - truth| 2.06 posterior sd over 21 parameters,
held-out AUC 0.887, and the client process peaked at 332 MB resident.
"""

import argparse
import os
import tempfile
import time
import warnings

import numpy as np


def write_store(path, n, d, seed, chunk_rows):
    """A HIGGS-like data set written to ``path`` chunk by chunk; returns the truth."""
    import zarr

    rng = np.random.default_rng(seed)
    coef = rng.normal(0.0, 0.5, d)
    intercept = 0.2
    root = zarr.open_group(path, mode="w")
    X = root.create_array("X", shape=(n, d), chunks=(chunk_rows, d), dtype="f4")
    y = root.create_array("y", shape=(n,), chunks=(chunk_rows,), dtype="i1")
    # AR(1)-correlated covariates, generated one chunk at a time.
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        z = rng.standard_normal((stop - start, d))
        for j in range(1, d):
            z[:, j] = 0.5 * z[:, j - 1] + np.sqrt(1 - 0.25) * z[:, j]
        eta = intercept + z @ coef
        X[start:stop] = z.astype(np.float32)
        y[start:stop] = (rng.random(stop - start) < 1 / (1 + np.exp(-eta))).astype(np.int8)
    return intercept, coef


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=6_000_000, help="rows (default 6e6)")
    parser.add_argument("--d", type=int, default=20, help="features (default 20)")
    parser.add_argument("--memory-limit", default="400MB",
                        help="memory limit of each of the 2 workers (default 400MB)")
    parser.add_argument("--store", default=None,
                        help="zarr store path (default: a temporary directory)")
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import dask.array as da
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster, get_task_stream
    from sklearn.metrics import roc_auc_score

    from bayesian_subsample import HMCECS, BayesianLogisticRegression

    tmp = None
    store = args.store
    if store is None:
        tmp = tempfile.TemporaryDirectory(prefix="bayesian_subsample-zarr-")
        store = os.path.join(tmp.name, "higgs.zarr")
    t = time.perf_counter()
    intercept, coef = write_store(store, args.n, args.d, args.seed, chunk_rows=65_536)
    print(f"wrote {store} in {time.perf_counter() - t:.1f} s")

    X = da.from_zarr(store, component="X")
    y = da.from_zarr(store, component="y")
    limit = parse_bytes(args.memory_limit)
    print(f"X: {X.shape} {X.dtype}, {X.nbytes / 1e6:.0f} MB in {X.numblocks[0]} chunks; "
          f"worker memory_limit {limit / 1e6:.0f} MB "
          f"({'larger' if X.nbytes > limit else 'NOT larger'} than one worker's memory)")

    n_test = min(200_000, args.n // 10)
    n_fit = args.n - n_test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dask's notes on the small memory limit
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               memory_limit=args.memory_limit, dashboard_address=None)
    with cluster, Client(cluster) as client:
        clf = BayesianLogisticRegression(
            sampler=HMCECS(), n_chains=args.n_chains, n_warmup=args.n_warmup,
            n_draws=args.n_draws, random_state=args.seed)
        t = time.perf_counter()
        with get_task_stream(client) as ts:
            clf.fit(X[:n_fit], y[:n_fit])
        fit_s = time.perf_counter() - t
        passes = [task for task in ts.data if "pass_on_block" in str(task["key"])]
        per_worker = {}
        for task in passes:
            per_worker[task["worker"]] = per_worker.get(task["worker"], 0) + 1
        print(f"fit: {fit_s:.1f} s; sampling (summed over chains) "
              f"{sum(clf.wall_time_.values()):.1f} s; subsample size "
              f"{clf.subsample_size_.tolist()}; pass tasks per worker: "
              f"{sorted(per_worker.values())}")

        sd = np.concatenate([[clf.intercept_draws_.std()],
                             clf.coef_draws_.reshape(-1, args.d).std(axis=0)])
        err = (np.concatenate([clf.intercept_, clf.coef_.ravel()])
               - np.concatenate([[intercept], coef])) / sd
        print(f"posterior mean - truth, in posterior sd: max |z| = {np.abs(err).max():.2f} "
              f"over {len(err)} parameters (|z| < 4 expected)")

        t = time.perf_counter()
        proba = clf.predict_proba(X[n_fit:])
        print(f"predict_proba of a dask array returns {type(proba).__module__}."
              f"{type(proba).__name__} {proba.shape}")
        p1, y_test = da.compute(proba[:, 1], y[n_fit:])
        print(f"held-out AUC {roc_auc_score(y_test, p1):.4f} ({n_test} rows, "
              f"{time.perf_counter() - t:.1f} s)")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
