"""The compiled HMC-ECS iteration of two checkouts, interleaved round by round in one process.

``bench_iteration.py`` times one checkout's compiled kernel against the numpy
floor; on a shared machine two checkouts timed in separate runs meet
different loads.  This script copies the package of each checkout
(``--old`` and ``--new``: repository roots) into a temporary directory as
``bs_old`` and ``bs_new`` (the package imports itself only relatively, so
both load side by side, each compiling its own numba kernel), builds the
problem of ``bench_iteration.py`` in each (``make_higgs_like(n)``, float64,
29 features and an intercept, logistic, prior scale 10, order-2 control
variates at the mode, ``m = 1000`` in ``G = 100`` blocks; ``--dense`` for
the dense mass matrix a fit uses, else the diagonal one of
``bench_iteration.py``), and runs ``--rounds`` rounds of ``--n-iter``
iterations of :func:`bayesian_subsample.samplers._ecs_compiled.run_iterations`
(``L`` leapfrog steps, step size ``--step-size``), alternating which
checkout goes first.  Both chains start from the same state and seed, so
their draws must agree to rounding (``max_draw_diff_over_sd``: the largest
difference of any draw in posterior sd; a larger value means the kernels
made different decisions).

Prints one JSON line per ``n``: median and 10th-percentile ms per iteration
of each, the median of the per-round ratios new / old, the HMC acceptance
rate and the load average.

    python benchmarks/bench_iteration_interleaved.py --old /path/to/main --new . --dense
"""

import argparse
import importlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fit_interleaved import importable_checkouts  # noqa: E402


def _setup(pkg, n, m, n_blocks, dense):
    def imp(name):
        return importlib.import_module(pkg + name)

    X, y, _ = imp(".datasets").make_higgs_like(n_samples=n, random_state=0)
    glm = imp(".models._glm")
    model = glm.GLM(X, y, glm.LogisticFamily())
    prior = imp(".models._prior").GaussianPrior(np.full(model.dim, 10.0))
    post = imp(".likelihood._full").TallPosterior(model, prior)
    theta = post.mode()[0]
    expansion = post.expand(theta, 2)
    est = post.difference_estimator(expansion, m, n_blocks)
    metric = imp(".samplers.metric").metric_from_mass_matrix(expansion.neg_hessian, dense=dense)
    return {"est": est, "theta": theta, "metric": metric, "hmc": imp(".samplers.hmc"),
            "hmc_ecs": imp(".samplers.hmc_ecs"), "compiled": imp(".samplers._ecs_compiled")}


def compare(pkgs, n, args):
    probs = {k: _setup(k, n, args.m, args.n_blocks, args.dense) for k in pkgs}
    state = {}
    for k, p in probs.items():
        params = p["hmc"].HMCParams(args.step_size, args.n_steps, p["metric"], 1000.0)
        rng = np.random.default_rng(2)
        st = p["hmc_ecs"].init(p["theta"], p["est"], rng)
        st, _, _ = p["compiled"].run_iterations(rng, p["est"], st, params, 5)  # compile
        state[k] = [rng, st, params]
    times = {k: [] for k in pkgs}
    draws = {k: [] for k in pkgs}
    for r in range(args.rounds):
        for k in (pkgs if r % 2 == 0 else pkgs[::-1]):
            rng, st, params = state[k]
            t = time.perf_counter()
            st, dr, _ = probs[k]["compiled"].run_iterations(rng, probs[k]["est"], st, params,
                                                            args.n_iter)
            times[k].append((time.perf_counter() - t) / args.n_iter * 1e3)
            state[k][1] = st
            draws[k].append(dr)
    old, new = (np.asarray(times[k]) for k in pkgs)
    d_old, d_new = (np.vstack(draws[k]) for k in pkgs)
    accepted = np.mean(np.any(np.diff(d_new, axis=0) != 0, axis=1))
    return {"n": n, "m": args.m, "n_blocks": args.n_blocks, "n_steps": args.n_steps,
            "step_size": args.step_size, "dense_metric": args.dense,
            "rounds": args.rounds, "n_iter": args.n_iter,
            "hmc_acceptance": round(float(accepted), 3),
            "old_ms_median": round(float(np.median(old)), 4),
            "new_ms_median": round(float(np.median(new)), 4),
            "old_ms_q10": round(float(np.quantile(old, 0.1)), 4),
            "new_ms_q10": round(float(np.quantile(new, 0.1)), 4),
            "median_ratio_new_over_old": round(float(np.median(new / old)), 3),
            "max_draw_diff_over_sd": float(
                f"{np.max(np.abs(d_old - d_new) / d_old.std(axis=0)):.2e}"),
            "load_avg_1min": round(os.getloadavg()[0], 2),
            "old_root": os.path.abspath(args.old), "new_root": os.path.abspath(args.new)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="root of the first checkout")
    parser.add_argument("--new", required=True, help="root of the second checkout")
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--n-blocks", type=int, default=100)
    parser.add_argument("--n-steps", type=int, default=3)
    parser.add_argument("--step-size", type=float, default=0.45)
    parser.add_argument("--dense", action="store_true", help="dense mass matrix (as a fit)")
    parser.add_argument("--n-iter", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with importable_checkouts(args.old, args.new):
        with threadpool_limits(1):
            for n in args.n:
                print(json.dumps(compare(("bs_old", "bs_new"), n, args)), flush=True)


if __name__ == "__main__":
    main()
