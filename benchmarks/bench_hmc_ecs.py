"""HMC-ECS against full-data HMC on HIGGS-like data, side by side in one run.

For each data size, fits ``BayesianLogisticRegression`` with full-data HMC and
with HMC-ECS (same chains, warm-up and draws) and prints one JSON line per
sampler: wall seconds of the fit, minimum and median bulk ESS, ESS per second,
per-observation evaluations (setup, warm-up, sampling), the cost measure
CT = IF x evaluations per draw of Dang et al. (2019, eq. 3.2), acceptance
rates, the subsample size and the largest |posterior mean difference| /
posterior sd against full-data HMC.  A final line per size gives the ratios.

    python benchmarks/bench_hmc_ecs.py                 # n = 1e5 and 1e6 (~15 min)
    python benchmarks/bench_hmc_ecs.py --n 100000 --n-draws 500
"""

import argparse
import json
import time
import warnings

import numpy as np

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.diagnostics import ess_bulk


def _fit(sampler, X, y, args):
    est = BayesianLogisticRegression(sampler=sampler, n_chains=args.n_chains,
                                     n_warmup=args.n_warmup, n_draws=args.n_draws,
                                     n_jobs=args.n_jobs, random_state=args.seed)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return est, time.perf_counter() - start, [str(w.message) for w in caught]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=2000)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Start joblib's worker pool once, outside the timings, so that neither
    # sampler pays the pool start-up.
    Xw, yw, _ = make_higgs_like(n_samples=2000, n_features=3, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        BayesianLogisticRegression(n_chains=args.n_chains, n_jobs=args.n_jobs, n_warmup=10,
                                   n_draws=10, random_state=0).fit(Xw, yw)
    for n in args.n:
        X, y, _ = make_higgs_like(n_samples=n, random_state=args.seed)
        fits = {}
        for sampler in ("hmc", "hmc_ecs"):
            est, seconds, caught = _fit(sampler, X, y, args)
            fits[sampler] = (est, seconds, caught)
        ref = fits["hmc"][0]._all_draws()
        ref_mean, ref_sd = ref.mean(axis=(0, 1)), ref.std(axis=(0, 1))
        rows = {}
        for sampler, (est, seconds, caught) in fits.items():
            draws = est._all_draws()
            ess = np.atleast_1d(ess_bulk(draws))
            n_total = draws.shape[0] * draws.shape[1]
            evals_per_draw = est.evaluations_["sampling"] / n_total
            if_ = n_total / ess
            stats = est.sample_stats_
            row = {
                "n": n, "sampler": sampler, "wall_seconds": round(seconds, 2),
                "chain_seconds": {k: round(v, 2) for k, v in est.wall_time_.items()},
                "min_ess_bulk": round(float(ess.min()), 1),
                "median_ess_bulk": round(float(np.median(ess)), 1),
                "ess_per_second": round(float(ess.min()) / seconds, 3),
                "evaluations": est.evaluations_,
                "evaluations_per_draw": round(evals_per_draw, 1),
                "ct_median": float(np.median(if_) * evals_per_draw),
                "ct_max": float(np.max(if_) * evals_per_draw),
                "acceptance": round(float(stats["acceptance_rate"].mean()), 4),
                "step_size": np.round(est.step_size_, 4).tolist(),
                "n_integration_steps": est.n_integration_steps_.tolist(),
                "subsample_size": est.subsample_size_.tolist(),
                "max_abs_dmean_over_sd": round(float(np.max(
                    np.abs(draws.mean(axis=(0, 1)) - ref_mean) / ref_sd)), 4),
                "sd_ratio_range": [round(float(v), 4) for v in (
                    (draws.std(axis=(0, 1)) / ref_sd).min(),
                    (draws.std(axis=(0, 1)) / ref_sd).max())],
                "n_divergent": est.n_divergent_,
                "warnings": caught,
            }
            if "subsample_acceptance_rate" in stats:
                row["subsample_acceptance"] = round(
                    float(stats["subsample_acceptance_rate"].mean()), 4)
                row["loglik_var_mean"] = float(stats["loglik_var"].mean())
            rows[sampler] = row
            print(json.dumps(row), flush=True)
        e, h = rows["hmc_ecs"], rows["hmc"]
        print(json.dumps({
            "n": n, "ratio": "hmc_ecs / hmc",
            "ess_per_second": round(e["ess_per_second"] / h["ess_per_second"], 1),
            "ct_median": round(h["ct_median"] / e["ct_median"], 1),
            "evaluations_total": round(sum(h["evaluations"].values())
                                       / sum(e["evaluations"].values()), 1),
            "sampling_seconds_per_draw": round(
                h["chain_seconds"]["sampling"] / e["chain_seconds"]["sampling"], 1),
        }), flush=True)


if __name__ == "__main__":
    main()
