"""Default samplers on scikit-learn's breast-cancer data (569 rows, 30 features).

A data set smaller than every subsample/batch default: the defaults must adapt
(HMC-ECS runs exactly on the full data, SGLD/SG-HMC use all rows per gradient,
austerity MH decides exactly).  Each default sampler is compared with a long
full-data HMC reference run (8 chains x 5,000 draws) on the same posterior,
in posterior-sd units.  One JSON line per sampler:

    python benchmarks/bench_breast_cancer.py [--prior-scale 10] [--samplers hmc_ecs,sgld]
"""

import argparse
import json
import time
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from bayesian_subsample import BayesianLogisticRegression


def _draws(est):
    return np.concatenate([est.intercept_draws_[..., None], est.coef_draws_], axis=2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prior-scale", type=float, default=10.0)
    parser.add_argument("--samplers", default="hmc_ecs,sgld,sghmc,hmc")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    prior = dict(prior_scale=args.prior_scale, intercept_prior_scale=args.prior_scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = BayesianLogisticRegression(sampler="hmc", n_chains=8, n_warmup=2000,
                                         n_draws=5000, random_state=12345, **prior).fit(X, y)
    rd = _draws(ref).reshape(-1, X.shape[1] + 1)
    mean, sd = rd.mean(0), rd.std(0)
    print(json.dumps({"method": "reference_hmc_long", "max_rhat":
                      float(ref.convergence_["r_hat"].max()),
                      "min_ess": float(ref.convergence_["ess_bulk"].min())}), flush=True)
    for name in args.samplers.split(","):
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = BayesianLogisticRegression(sampler=name, random_state=args.seed,
                                             **prior).fit(X, y)
        wall = time.perf_counter() - t0
        d = _draws(est).reshape(-1, X.shape[1] + 1)
        dmean = np.abs(d.mean(0) - mean) / sd
        ratio = d.std(0) / sd
        print(json.dumps({
            "method": name, "wall_seconds": round(wall, 2),
            "subsample_size": est.subsample_size_.tolist(),
            "full_data": [info.get("full_data") for info in est.sampler_info_],
            "max_abs_mean_error_sd": round(float(dmean.max()), 4),
            "max_abs_sd_ratio_minus_1": round(float(np.abs(ratio - 1).max()), 4),
            "max_rhat": round(float(est.convergence_["r_hat"].max()), 4),
            "min_ess_bulk": round(float(est.convergence_["ess_bulk"].min()), 1),
            "warnings": sorted({type(w.message).__name__ for w in caught}),
        }), flush=True)


if __name__ == "__main__":
    main()
