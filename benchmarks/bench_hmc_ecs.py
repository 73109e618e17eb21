"""HMC-ECS against full-data HMC on HIGGS-like data, side by side in one run.

For each data size, fits ``BayesianLogisticRegression`` with full-data HMC and
with HMC-ECS (same chains, warm-up and draws; add ``hmc_ecs_signed`` to
``--samplers`` for the signed estimator) and prints one JSON line per sampler:
wall seconds of the fit, minimum and median bulk ESS, ESS per second,
per-observation evaluations (setup, warm-up, sampling), the cost measure
CT = IF x evaluations per draw of Dang et al. (2019, eq. 3.2; divided by
(2 tau - 1)^2 for signed draws, eq. 5.4), acceptance rates of theta and of the
subsample, the number of leapfrog steps L, tau (fraction of positive signs),
the percentage of the data read per likelihood estimate (the 100 m / n row of
the paper's Tables 2 and 4), and the largest |posterior mean difference| /
posterior sd and the sd ratios against full-data HMC (sign-weighted for signed
draws).  A final line per size gives the ratios to full-data HMC.  With
``--roc PATH`` 10% of the rows are held out and the held-out ROC curves of all
samplers are drawn in one figure (the paper's Figure 3; needs matplotlib).

    python benchmarks/bench_hmc_ecs.py                 # n = 1e5 and 1e6 (~15 min)
    python benchmarks/bench_hmc_ecs.py --n 100000 --n-draws 500
    python benchmarks/bench_hmc_ecs.py --n 1000000 --samplers hmc hmc_ecs hmc_ecs_signed \
        --roc roc.png                                  # paper Tables 2/4 and Figure 3
"""

import argparse
import json
import time
import warnings

import numpy as np

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.diagnostics import ess_bulk, weighted_mean, weighted_sd


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
    parser.add_argument("--samplers", nargs="+", default=["hmc", "hmc_ecs"])
    parser.add_argument("--roc", default=None, help="save held-out ROC curves to this PNG")
    args = parser.parse_args(argv)
    if "hmc" not in args.samplers:
        parser.error("--samplers must include the full-data reference 'hmc'")
    # Start joblib's worker pool once, outside the timings, so that neither
    # sampler pays the pool start-up.
    Xw, yw, _ = make_higgs_like(n_samples=2000, n_features=3, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        BayesianLogisticRegression(n_chains=args.n_chains, n_jobs=args.n_jobs, n_warmup=10,
                                   n_draws=10, random_state=0).fit(Xw, yw)
    for n in args.n:
        X, y, _ = make_higgs_like(n_samples=n, random_state=args.seed)
        X_test = y_test = None
        if args.roc:
            n_test = n // 10
            X, X_test, y, y_test = X[n_test:], X[:n_test], y[n_test:], y[:n_test]
        fits = {}
        for sampler in ["hmc"] + [s for s in args.samplers if s != "hmc"]:
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
            stats = est.sample_stats_
            signs = stats.get("sign")
            tau = None if signs is None else float(np.mean(signs > 0))
            if_ = n_total / ess
            sign_eff = 1.0 if tau is None else (2 * tau - 1) ** 2
            if signs is None:
                mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
            else:
                mean, sd = weighted_mean(draws, signs), weighted_sd(draws, signs)
            n_evals = (stats["n_steps"] + ("subsample_acceptance_rate" in stats)).sum()
            row = {
                "n": n, "sampler": sampler, "wall_seconds": round(seconds, 2),
                "chain_seconds": {k: round(v, 2) for k, v in est.wall_time_.items()},
                "min_ess_bulk": round(float(ess.min()), 1),
                "median_ess_bulk": round(float(np.median(ess)), 1),
                "ess_per_second": round(float(ess.min()) / seconds, 3),
                "evaluations": est.evaluations_,
                "evaluations_per_draw": round(evals_per_draw, 1),
                "ct_median": float(np.median(if_) * evals_per_draw / sign_eff),
                "ct_max": float(np.max(if_) * evals_per_draw / sign_eff),
                "acceptance": round(float(stats["acceptance_rate"].mean()), 4),
                "step_size": np.round(est.step_size_, 4).tolist(),
                "n_integration_steps": est.n_integration_steps_.tolist(),
                "subsample_size": est.subsample_size_.tolist(),
                "max_abs_dmean_over_sd": round(float(np.max(np.abs(mean - ref_mean) / ref_sd)),
                                               4),
                "sd_ratio_range": [round(float(v), 4) for v in (
                    (sd / ref_sd).min(), (sd / ref_sd).max())],
                "inefficiency_factor_median": round(float(np.median(if_)), 3),
                "tau": tau,
                "data_percent_per_estimate": round(
                    100 * est.evaluations_["sampling"] / n_evals / X.shape[0], 4),
                "n_divergent": est.n_divergent_,
                "warnings": caught,
            }
            if "subsample_acceptance_rate" in stats:
                row["subsample_acceptance"] = round(
                    float(stats["subsample_acceptance_rate"].mean()), 4)
                row["loglik_var_mean"] = float(stats["loglik_var"].mean())
            if X_test is not None:
                from sklearn.metrics import roc_auc_score

                row["held_out_auc"] = round(float(roc_auc_score(
                    y_test, est.predict_proba(X_test)[:, 1])), 5)
            rows[sampler] = row
            print(json.dumps(row), flush=True)
        h = rows["hmc"]
        for name, e in rows.items():
            if name == "hmc":
                continue
            print(json.dumps({
                "n": n, "ratio": f"{name} / hmc",
                "ess_per_second": round(e["ess_per_second"] / h["ess_per_second"], 1),
                "ct_median": round(h["ct_median"] / e["ct_median"], 1),
                "evaluations_total": round(sum(h["evaluations"].values())
                                           / sum(e["evaluations"].values()), 1),
                "sampling_seconds_per_draw": round(
                    h["chain_seconds"]["sampling"] / e["chain_seconds"]["sampling"], 1),
            }), flush=True)
        if args.roc:
            _plot_roc(fits, X_test, y_test, f"{args.roc}")


def _plot_roc(fits, X_test, y_test, path):
    """Held-out ROC curves of every sampler in one figure (paper Figure 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import RocCurveDisplay

    fig, ax = plt.subplots(figsize=(5, 5))
    for name, (est, _, _) in fits.items():
        RocCurveDisplay.from_predictions(y_test, est.predict_proba(X_test)[:, 1], name=name,
                                         ax=ax)
    ax.set_title("Held-out ROC, HIGGS-like data")
    fig.savefig(path, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main()
