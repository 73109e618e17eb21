"""Multinomial (softmax) regression: HMC-ECS against full-data HMC, side by side.

Fits ``BayesianLogisticRegression`` (K >= 3 classes: the softmax likelihood,
whose Taylor control variates HMC-ECS expands in the K linear predictors) on
tall synthetic data from :func:`~bayesian_subsample.datasets.make_multiclass_like`
(default n = 10^6, K = 5, d = 20, i.e. 105 parameters) with full-data HMC and
with HMC-ECS (same chains, warm-up and draws) and prints one JSON line per
method: wall seconds, min/median bulk ESS, ESS per second (min ESS over
wall seconds), per-observation evaluations, acceptance, held-out log loss
(10% of the rows held out) and the largest |posterior mean difference| /
posterior sd against the full-data HMC run.  A last line gives the ratios.

    python benchmarks/bench_multiclass.py --n 100000
    python benchmarks/bench_multiclass.py            # n = 1e6 (long)
"""

import argparse
import json
import time
import warnings

import numpy as np
from sklearn.metrics import log_loss

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_multiclass_like
from bayesian_subsample.diagnostics import ess_bulk


def _fit(sampler, X, y, args):
    est = BayesianLogisticRegression(sampler=sampler, n_chains=args.n_chains,
                                     n_warmup=args.n_warmup, n_draws=args.n_draws,
                                     n_jobs=args.n_jobs, random_state=args.seed)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return est, time.perf_counter() - start, sorted({str(w.message)[:200] for w in caught})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--n-classes", type=int, default=5)
    parser.add_argument("--n-features", type=int, default=20)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=1000)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samplers", nargs="+", default=["hmc", "hmc_ecs"])
    args = parser.parse_args(argv)
    if "hmc" not in args.samplers:
        parser.error("--samplers must include the full-data reference 'hmc'")
    X, y, _ = make_multiclass_like(n_samples=args.n + args.n // 9, n_features=args.n_features,
                                   n_classes=args.n_classes, random_state=args.seed)
    n_test = args.n // 9
    X, X_test, y, y_test = X[n_test:], X[:n_test], y[n_test:], y[:n_test]
    fits = {}
    for sampler in ["hmc"] + [s for s in args.samplers if s != "hmc"]:
        fits[sampler] = _fit(sampler, X, y, args)
    ref = fits["hmc"][0]._all_draws()
    ref_mean, ref_sd = ref.mean(axis=(0, 1)), ref.std(axis=(0, 1))
    rows = {}
    for sampler, (est, seconds, caught) in fits.items():
        draws = est._all_draws()
        ess = np.atleast_1d(ess_bulk(draws))
        stats = est.sample_stats_
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
        row = {
            "n": X.shape[0], "n_classes": args.n_classes, "n_features": args.n_features,
            "dim": draws.shape[-1], "sampler": sampler,
            "wall_seconds": round(seconds, 2),
            "min_ess_bulk": round(float(ess.min()), 1),
            "median_ess_bulk": round(float(np.median(ess)), 1),
            "ess_per_second": round(float(ess.min()) / seconds, 4),
            "evaluations": est.evaluations_,
            "evaluations_total": int(est.n_evaluations_),
            "acceptance": round(float(stats["acceptance_rate"].mean()), 4),
            "subsample_size": est.subsample_size_.tolist(),
            "held_out_log_loss": round(float(log_loss(y_test, est.predict_proba(X_test),
                                                      labels=est.classes_)), 6),
            "max_abs_dmean_over_sd": round(float(np.max(np.abs(mean - ref_mean) / ref_sd)), 4),
            "sd_ratio_range": [round(float(v), 4) for v in ((sd / ref_sd).min(),
                                                            (sd / ref_sd).max())],
            "n_divergent": est.n_divergent_,
            "warnings": caught,
        }
        if "subsample_acceptance_rate" in stats:
            row["subsample_acceptance"] = round(float(stats["subsample_acceptance_rate"].mean()),
                                                4)
        rows[sampler] = row
        print(json.dumps(row), flush=True)
    base = rows["hmc"]
    for sampler, row in rows.items():
        if sampler == "hmc":
            continue
        print(json.dumps({
            "ratio": f"{sampler}/hmc",
            "ess_per_second": round(row["ess_per_second"] / base["ess_per_second"], 2),
            "evaluations_total": round(row["evaluations_total"] / base["evaluations_total"], 5),
            "held_out_log_loss_diff": round(row["held_out_log_loss"]
                                            - base["held_out_log_loss"], 6),
        }), flush=True)


if __name__ == "__main__":
    main()
