"""SGLD and SG-HMC against perturbed HMC-ECS and full-data HMC, in one run.

Reproduces the comparison of Dang et al. (2019, §6.2-6.5, Tables 1 and 3,
Figure 2) on HIGGS-like data (``make_higgs_like``, default n = 100,000 and
29 features plus intercept).  All samplers run the same chains, warm-up and
draws (default 2 x (300 + 1000)):

* ``hmc``: full-data HMC, the reference for the posterior moments;
* ``hmc_ecs``: perturbed HMC-ECS, the reference for the cost (RCT = 1);
* ``sgld_cv`` / ``sgld_plain``: SGLD at its default step size, with and
  without second-order control variates, run for ``L_ecs`` updates per stored
  draw, so that it makes as many gradient evaluations per draw as HMC-ECS
  makes leapfrog steps (the paper's "R = L x iterations of HMC-ECS");
* ``sghmc_cv_traj``: SG-HMC with control variates, default step size and
  ``L = round(1.2 / eps)`` (the trajectory length of HMC-ECS, SG-HMC_1);
* ``sghmc_cv_evals``: the same with ``L`` chosen so that SG-HMC reads as
  many observations per draw as HMC-ECS (SG-HMC_2);
* ``sghmc_plain``: SG-HMC without control variates, default step and ``L``.

One JSON line per method: wall seconds, per-observation evaluations (setup,
warm-up, sampling), minimum/median bulk ESS, the inefficiency factor IF and
CT = IF x sampling evaluations per draw per parameter, and RCT = CT_method /
CT_hmc_ecs (min/median/max over parameters, as in Tables 1 and 3; a value
above 1 means the method is more expensive than HMC-ECS).  ``rct_paper``
charges HMC-ECS for its whole run (setup and warm-up included) and the
stochastic-gradient methods for post-warm-up sampling only, the paper's
convention.  Bias columns (the analogue of Figure 2): the largest
|posterior-mean difference| / posterior sd and the range of sd ratios against
full-data HMC, plus the warnings the fit raised.

    python benchmarks/bench_sg_comparison.py                  # ~4 min on 2 cores
    python benchmarks/bench_sg_comparison.py --n 20000 --n-draws 500
"""

import argparse
import json
import time
import warnings

import numpy as np

from bayesian_subsample import HMC, HMCECS, SGHMC, SGLD, BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like


def _fit(sampler, X, y, args):
    est = BayesianLogisticRegression(sampler=sampler, n_chains=args.n_chains,
                                     n_warmup=args.n_warmup, n_draws=args.n_draws,
                                     n_jobs=args.n_jobs, random_state=args.seed)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return est, time.perf_counter() - start, sorted({str(w.message)[:160] for w in caught})


def _stats(v):
    v = np.asarray(v, float)
    return [round(float(v.min()), 3), round(float(np.median(v)), 3), round(float(v.max()), 3)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--n-features", type=int, default=29)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=300)
    parser.add_argument("--n-draws", type=int, default=1000)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--subsample-size", type=int, default=1000,
                        help="minibatch size m of SGLD and SG-HMC")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    # Start joblib's worker pool outside the timings.
    Xw, yw, _ = make_higgs_like(n_samples=2000, n_features=3, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        BayesianLogisticRegression(n_chains=args.n_chains, n_jobs=args.n_jobs, n_warmup=10,
                                   n_draws=10, random_state=0).fit(Xw, yw)

    X, y, _ = make_higgs_like(n_samples=args.n, n_features=args.n_features,
                              random_state=args.seed)
    m = args.subsample_size
    fits = {}
    fits["hmc"] = _fit(HMC(), X, y, args)
    fits["hmc_ecs"] = _fit(HMCECS(), X, y, args)
    ecs = fits["hmc_ecs"][0]
    n_total = args.n_chains * args.n_draws
    ecs_evals_per_draw = ecs.evaluations_["sampling"] / n_total
    l_ecs = int(round(float(np.mean(ecs.n_integration_steps_))))
    # With control variates one minibatch gradient reads 2 m terms (the
    # estimator's n_obs_per_eval); without them m.
    l_match = max(1, int(round(ecs_evals_per_draw / (2 * m))))
    methods = {
        "sgld_cv": SGLD(subsample_size=m, n_steps_per_draw=l_ecs),
        "sgld_plain": SGLD(subsample_size=m, control_variates=False, n_steps_per_draw=l_ecs),
        "sghmc_cv_traj": SGHMC(subsample_size=m),
        "sghmc_cv_evals": SGHMC(subsample_size=m, n_integration_steps=l_match),
        "sghmc_plain": SGHMC(subsample_size=m, control_variates=False),
    }
    for name, sampler in methods.items():
        fits[name] = _fit(sampler, X, y, args)

    ref = fits["hmc"][0]._all_draws()
    ref_mean, ref_sd = ref.mean(axis=(0, 1)), ref.std(axis=(0, 1))
    ct = {}
    for name, (est, _, _) in fits.items():
        ineff = np.atleast_1d(est.convergence_["inefficiency_factor"])
        ct[name] = ineff * est.evaluations_["sampling"] / n_total
    ecs_ct_total = (np.atleast_1d(ecs.convergence_["inefficiency_factor"])
                    * sum(ecs.evaluations_.values()) / n_total)
    rows = []
    for name, (est, seconds, caught) in fits.items():
        draws = est._all_draws()
        conv = est.convergence_
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
        row = {
            "method": name, "n": args.n, "dim": draws.shape[2],
            "wall_seconds": round(seconds, 2),
            "sampling_seconds": round(est.wall_time_["sampling"], 2),
            "step_size": round(float(np.mean(est.step_size_)), 4),
            "n_integration_steps": int(np.mean(est.n_integration_steps_)),
            "subsample_size": int(np.mean(est.subsample_size_)),
            "evaluations": est.evaluations_,
            "evaluations_per_draw": round(est.evaluations_["sampling"] / n_total, 1),
            "ess_bulk_min_median": [round(float(np.min(conv["ess_bulk"])), 1),
                                    round(float(np.median(conv["ess_bulk"])), 1)],
            "if_min_median_max": _stats(conv["inefficiency_factor"]),
            "ct_min_median_max": [round(v, 1) for v in _stats(ct[name])],
            "rct_min_median_max": _stats(ct[name] / ct["hmc_ecs"]),
            "max_rhat": round(float(np.max(conv["r_hat"])), 3),
            "max_abs_dmean_over_sd": round(float(np.max(np.abs(mean - ref_mean) / ref_sd)), 3),
            "sd_ratio_range": [round(float((sd / ref_sd).min()), 3),
                               round(float((sd / ref_sd).max()), 3)],
            "n_divergent": est.n_divergent_,
            "warnings": caught,
        }
        if name.startswith("sg"):
            row["rct_paper_min_median_max"] = _stats(ct[name] / ecs_ct_total)
            info = est.sampler_info_[0]
            if "predicted_sd_inflation" in info:
                row["predicted_sd_inflation"] = round(float(info["predicted_sd_inflation"]), 4)
        rows.append(row)
        print(json.dumps(row), flush=True)
    by = {r["method"]: r for r in rows}
    checks = {}
    for name in ("sgld_cv", "sghmc_cv_traj"):
        r = by[name]
        checks[name] = bool(r["max_abs_dmean_over_sd"] < 0.2
                            and abs(r["sd_ratio_range"][0] - 1) <= 0.15
                            and abs(r["sd_ratio_range"][1] - 1) <= 0.15)
    print(json.dumps({"check": "SG with control variates: sds within 15% of HMC, means within "
                      "0.2 sd", "passed": checks,
                      "sgld_plain_bias": {k: by["sgld_plain"][k] for k in
                                          ("max_abs_dmean_over_sd", "sd_ratio_range")},
                      "l_ecs": l_ecs, "l_match": l_match}), flush=True)


if __name__ == "__main__":
    main()
