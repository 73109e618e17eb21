"""Additive spline classifier on bankruptcy-like data: cost, accuracy against HMC, AUC.

The bankruptcy application of Dang et al. (2019, §6.6) at a reduced scale,
printing one JSON line per measurement:

* ``"cost"`` -- one line per ``--n-cost`` size: HMC-ECS with the spline
  classifier (81 parameters), wall seconds and per-observation evaluations
  per post-warm-up iteration, the subsample size, acceptance rates, L, and
  min bulk ESS.  Per-iteration cost should not grow with n.
* ``"fit"`` -- one line per sampler at ``--n-compare`` rows (full-data HMC
  reads every row at every leapfrog step, so this is the largest size that
  fits a short run): wall time, evaluations, acceptance, L, min bulk ESS.
* ``"pd_band"`` -- for the non-linear covariates: the largest amount by which
  the HMC-ECS posterior-mean partial-dependence curve leaves the full-data HMC
  90% credible band over a 50-point grid (0 means inside everywhere), also
  relative to the band width, and the largest |HMC-ECS mean - HMC mean| /
  HMC posterior sd of the curve.
* ``"auc"`` -- held-out ROC AUC of the spline classifier (HMC-ECS and HMC)
  and of BayesianLogisticRegression (HMC-ECS), and of the true model.

    python benchmarks/bench_splines.py                  # ~10-15 min on 2 cores
    python benchmarks/bench_splines.py --n-cost 100000 1000000 --n-compare 100000
    python benchmarks/bench_splines.py --n-cost --n-compare 1000000 --dense-reference

``--dense-reference`` runs the full-data HMC reference on the expanded
design held in memory (n x 80 floats: 640 MB at n = 10^6), which is the same
posterior as the lazily expanded model but skips re-evaluating the B-spline
basis at every leapfrog step, the cost that dominates a full pass.  It is a
benchmark device only: the library never materialises the expanded design.
"""

import argparse
import json
import time
import warnings

import numpy as np
from sklearn.metrics import roc_auc_score

from bayesian_subsample import BayesianLogisticRegression, BayesianSplineClassifier
from bayesian_subsample.datasets import make_bankruptcy_like
from bayesian_subsample.diagnostics import ess_bulk
from bayesian_subsample.models import GLM, LogisticFamily

NONLINEAR = (0, 1, 2, 4)


class _DenseDesignSpline(BayesianSplineClassifier):
    """The spline classifier with its expanded design computed once, in memory."""

    def _build_posterior(self, X, y, sample_weight):
        lazy, prior, names = super()._build_posterior(X, y, sample_weight)
        Z = np.vstack([lazy.chunk_rows(a, b)[0] for a, b in lazy.chunks()])
        model = GLM(Z, y.astype(np.float64), LogisticFamily(), sample_weight=sample_weight,
                    fit_intercept=self.fit_intercept)
        return model, prior, names


def _fit(est, X, y):
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return time.perf_counter() - start, [str(w.message)[:160] for w in caught]


def _iteration_stats(est):
    n_iter = est.n_chains * est.n_draws
    return {
        "seconds_per_iteration": est.wall_time_["sampling"] / n_iter,
        "evaluations_per_iteration": est.evaluations_["sampling"] / n_iter,
        "subsample_size": [int(m) for m in est.subsample_size_],
        "acceptance": float(est.sample_stats_["acceptance_rate"].mean()),
        "subsample_acceptance": (float(est.sample_stats_["subsample_acceptance_rate"].mean())
                                 if "subsample_acceptance_rate" in est.sample_stats_ else None),
        "n_integration_steps": [int(v) for v in est.n_integration_steps_],
        "min_ess_bulk": float(np.min(ess_bulk(est._all_draws()))),
        "max_r_hat": float(est.convergence_["r_hat"].max()),
        "n_divergent": int(est.n_divergent_),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-cost", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--dense-reference", action="store_true",
                        help="full-data HMC on the expanded design held in memory")
    parser.add_argument("--n-compare", type=int, default=50_000)
    parser.add_argument("--n-test", type=int, default=200_000)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    common = dict(n_chains=args.n_chains, n_warmup=args.n_warmup, n_draws=args.n_draws,
                  n_jobs=args.n_jobs, random_state=args.seed)

    for n in args.n_cost:
        X, y, _ = make_bankruptcy_like(n_samples=n, random_state=args.seed)
        est = BayesianSplineClassifier(sampler="hmc_ecs", **common)
        wall, warns = _fit(est, X, y)
        print(json.dumps({"kind": "cost", "sampler": "hmc_ecs", "n": n, "dim": est.coef_.shape[1]
                          + 1, "wall_seconds": wall, **_iteration_stats(est),
                          "warnings": warns}), flush=True)

    n = args.n_compare
    X, y, info = make_bankruptcy_like(n_samples=n, random_state=args.seed)
    Xt, yt, _ = make_bankruptcy_like(n_samples=args.n_test, random_state=args.seed + 1000)
    fits = {}
    for sampler in ("hmc_ecs", "hmc"):
        cls = (_DenseDesignSpline if sampler == "hmc" and args.dense_reference
               else BayesianSplineClassifier)
        est = cls(sampler=sampler, **common)
        wall, warns = _fit(est, X, y)
        fits[sampler] = est
        print(json.dumps({"kind": "fit", "sampler": sampler, "n": n, "wall_seconds": wall,
                          "evaluations": est.evaluations_, **_iteration_stats(est),
                          "warnings": warns}), flush=True)
    linear = BayesianLogisticRegression(sampler="hmc_ecs", **common)
    _fit(linear, X, y)

    for j in NONLINEAR:
        ref = fits["hmc"].partial_dependence(X, j, quantiles=(0.05, 0.95))
        ecs = fits["hmc_ecs"].partial_dependence(X, j, grid=ref.grid, quantiles=(0.05, 0.95))
        outside = np.maximum(0.0, np.maximum(ref.lower - ecs.mean, ecs.mean - ref.upper))
        width = ref.upper - ref.lower
        print(json.dumps({
            "kind": "pd_band", "n": n, "feature": info["feature_names"][j],
            "max_outside_hmc_90_band": float(outside.max()),
            "max_outside_relative_to_band_width": float((outside / width).max()),
            "max_abs_mean_diff_over_hmc_sd": float(
                (np.abs(ecs.mean - ref.mean) / ref.draws.std(axis=0)).max()),
            "band_width_ratio_ecs_over_hmc": [
                float(v) for v in np.quantile((ecs.upper - ecs.lower) / width, [0, 0.5, 1])],
        }), flush=True)

    print(json.dumps({
        "kind": "auc", "n_train": n, "n_test": args.n_test,
        "spline_hmc_ecs": roc_auc_score(yt, fits["hmc_ecs"].predict_proba(Xt)[:, 1]),
        "spline_hmc": roc_auc_score(yt, fits["hmc"].predict_proba(Xt)[:, 1]),
        "linear_hmc_ecs": roc_auc_score(yt, linear.predict_proba(Xt)[:, 1]),
        "true_model": roc_auc_score(yt, info["proba"](Xt)),
    }), flush=True)


if __name__ == "__main__":
    main()
