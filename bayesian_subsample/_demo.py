"""The command-line demo: HMC-ECS against full-data HMC on HIGGS-like data."""

from __future__ import annotations

import time
import warnings

import numpy as np

from .datasets import make_higgs_like
from .diagnostics import ess_bulk
from .estimators import BayesianLogisticRegression


def _fit(sampler, X, y, args):
    clf = BayesianLogisticRegression(
        sampler=sampler, n_chains=args.n_chains, n_warmup=args.n_warmup, n_draws=args.n_draws,
        n_jobs=args.n_jobs, random_state=args.seed,
    )
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y)
    return clf, time.perf_counter() - start, caught


def run_demo(args):
    """Fit both samplers, print the comparison and return it as a dict."""
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    print(f"HIGGS-like synthetic data: {args.n:,} rows, 29 features "
          f"(10% held out); {args.n_chains} chains x ({args.n_warmup} warm-up + "
          f"{args.n_draws} draws) per sampler.")
    X, y, _ = make_higgs_like(n_samples=args.n, random_state=args.seed)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.1, random_state=args.seed)
    n_train = X_train.shape[0]
    rows = {}
    fits = {}
    for name in ("hmc_ecs", "hmc"):
        print(f"  fitting sampler={name!r} ...", flush=True)
        clf, seconds, caught = _fit(name, X_train, y_train, args)
        fits[name] = clf
        draws = clf._all_draws()
        ess = np.atleast_1d(ess_bulk(draws))
        stats = clf.sample_stats_
        n_iter = args.n_chains * args.n_draws
        rows[name] = {
            "auc": roc_auc_score(y_test, clf.predict_proba(X_test)[:, 1]),
            "seconds": seconds,
            "min_ess": float(ess.min()),
            "ess_per_second": float(ess.min()) / seconds,
            "acceptance": float(stats["acceptance_rate"].mean()),
            "if_median": float(np.median(clf.convergence_["inefficiency_factor"])),
            "if_max": float(np.max(clf.convergence_["inefficiency_factor"])),
            "evals_per_iter": clf.evaluations_["sampling"] / n_iter,
            "subsample_fraction": float(np.mean(clf.subsample_size_)) / n_train,
            "u_acceptance": float(stats["subsample_acceptance_rate"].mean())
            if "subsample_acceptance_rate" in stats else float("nan"),
            "loglik_var": float(stats["loglik_var"].mean())
            if "loglik_var" in stats else float("nan"),
            "warnings": [str(w.message) for w in caught],
        }
    ecs, full = fits["hmc_ecs"]._all_draws(), fits["hmc"]._all_draws()
    sd_full = full.std(axis=(0, 1))
    dmean = np.abs(ecs.mean(axis=(0, 1)) - full.mean(axis=(0, 1))) / sd_full
    sd_ratio = ecs.std(axis=(0, 1)) / sd_full
    r_e, r_h = rows["hmc_ecs"], rows["hmc"]
    print()
    print(f"{'':34s}{'HMC-ECS':>14s}{'full-data HMC':>16s}")
    print(f"{'held-out ROC AUC':34s}{r_e['auc']:14.4f}{r_h['auc']:16.4f}")
    print(f"{'acceptance rate (theta)':34s}{r_e['acceptance']:14.3f}{r_h['acceptance']:16.3f}")
    print(f"{'acceptance rate (subsample u)':34s}{r_e['u_acceptance']:14.3f}{'-':>16s}")
    print(f"{'log-lik estimator variance':34s}{r_e['loglik_var']:14.2e}{'-':>16s}")
    print(f"{'inefficiency factor (median/max)':34s}"
          f"{r_e['if_median']:7.2f}/{r_e['if_max']:<6.2f}{r_h['if_median']:9.2f}/{r_h['if_max']:<6.2f}")
    print(f"{'data fraction per iteration':34s}{r_e['subsample_fraction']:14.2%}{1:16.0%}")
    print(f"{'evaluations per draw':34s}{r_e['evals_per_iter']:14.3g}{r_h['evals_per_iter']:16.3g}")
    print(f"{'wall seconds (fit)':34s}{r_e['seconds']:14.1f}{r_h['seconds']:16.1f}")
    print(f"{'min bulk ESS':34s}{r_e['min_ess']:14.0f}{r_h['min_ess']:16.0f}")
    print(f"{'min ESS per second':34s}{r_e['ess_per_second']:14.1f}{r_h['ess_per_second']:16.2f}")
    print()
    print(f"HMC-ECS against full-data HMC: largest |mean difference| / posterior sd = "
          f"{dmean.max():.3f}; sd ratio in [{sd_ratio.min():.3f}, {sd_ratio.max():.3f}]; "
          f"ESS per second ratio = {r_e['ess_per_second'] / r_h['ess_per_second']:.0f}x.")
    for name, row in rows.items():
        for message in row["warnings"]:
            print(f"warning ({name}): {message}")
    return {"rows": rows, "max_abs_dmean_over_sd": float(dmean.max()),
            "sd_ratio_min": float(sd_ratio.min()), "sd_ratio_max": float(sd_ratio.max())}
