"""Bankruptcy-like study: additive spline classifier with HMC-ECS and full-data HMC.

A synthetic version of the bankruptcy application of Dang et al. (2019,
§6.6, Figures 4-6): firm failure (about 1% events) as a non-linear, additive
function of six financial ratios and two macroeconomic variables, with 10
B-spline basis functions per covariate and an intercept (81 parameters).

The script

1. generates ``--n`` training rows and ``--n-test`` held-out rows with
   :func:`~bayesian_subsample.datasets.make_bankruptcy_like`;
2. fits :class:`~bayesian_subsample.BayesianSplineClassifier` with HMC-ECS
   (the default sampler) and, unless ``--no-hmc``, with full-data HMC on the
   same rows;
3. draws a Figure-6 style plot for two covariates (posterior mean
   partial-dependence probability, 90% credible band, empirical event
   frequency in 100 quantile bins, and the true curve), one column per
   sampler, to ``--output`` (needs matplotlib);
4. prints the held-out ROC AUC of the spline classifier and of the linear
   :class:`~bayesian_subsample.BayesianLogisticRegression`, and how far the
   HMC-ECS curves are outside the full-data HMC bands;
5. tunes ``n_knots`` by ``GridSearchCV`` (3-fold, ROC AUC) on the first
   ``--n-grid`` rows.

Run it with::

    python examples/bankruptcy_splines.py --n 50000              # a few minutes
    python examples/bankruptcy_splines.py                        # 10^6 rows
    python examples/bankruptcy_splines.py --no-hmc --n 1000000   # HMC-ECS only

Full-data HMC reads every row at every leapfrog step and dominates the run
time: on 10^6 rows it takes hours on a laptop, HMC-ECS a few minutes.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GridSearchCV

from bayesian_subsample import BayesianLogisticRegression, BayesianSplineClassifier
from bayesian_subsample.datasets import make_bankruptcy_like

PLOTTED = ("earnings_ratio", "debt_ratio")
LABELS = {"hmc_ecs": "HMC-ECS (subsampling)", "hmc": "HMC (full data)"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="training rows (default 10^6)")
    parser.add_argument("--n-test", type=int, default=200_000, help="held-out rows")
    parser.add_argument("--n-grid", type=int, default=30_000,
                        help="rows used by GridSearchCV over n_knots (default 30000)")
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-hmc", action="store_true", help="skip full-data HMC")
    parser.add_argument("--no-grid-search", action="store_true")
    parser.add_argument("--output", default="bankruptcy_splines.png")
    args = parser.parse_args(argv)
    if args.n < 5000:
        parser.error("--n must be at least 5000")
    return args


def fit(est, X, y):
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est.fit(X, y)
    for w in caught:
        print(f"  warning: {w.message}")
    return time.perf_counter() - start


def true_partial_dependence(info, X, j, grid, max_rows=2000):
    rows = X[np.unique(np.linspace(0, len(X) - 1, max_rows).round().astype(int))]
    out = np.empty(grid.size)
    for i, g in enumerate(grid):
        Xg = rows.copy()
        Xg[:, j] = g
        out[i] = info["proba"](Xg).mean()
    return out


def main(argv=None):
    args = parse_args(argv)
    X, y, info = make_bankruptcy_like(n_samples=args.n, random_state=args.seed)
    Xt, yt, _ = make_bankruptcy_like(n_samples=args.n_test, random_state=args.seed + 1)
    print(f"{args.n} training rows, {y.mean():.2%} events; {args.n_test} held out")
    common = dict(n_chains=args.n_chains, n_warmup=args.n_warmup, n_draws=args.n_draws,
                  n_jobs=args.n_jobs, random_state=args.seed)

    fits = {}
    for sampler in ("hmc_ecs",) + (() if args.no_hmc else ("hmc",)):
        est = BayesianSplineClassifier(sampler=sampler, **common)
        seconds = fit(est, X, y)
        fits[sampler] = est
        auc = roc_auc_score(yt, est.predict_proba(Xt)[:, 1])
        print(f"spline, {LABELS[sampler]:22s}: {seconds:7.1f} s, acceptance "
              f"{est.sample_stats_['acceptance_rate'].mean():.3f}, subsample "
              f"{est.subsample_size_.max()} rows ({100 * est.subsample_size_.max() / args.n:.2f}%"
              f" of n), min bulk ESS {est.convergence_['ess_bulk'].min():.0f}, "
              f"held-out AUC {auc:.4f}")
    linear = BayesianLogisticRegression(sampler="hmc_ecs", **common)
    seconds = fit(linear, X, y)
    print(f"linear logistic, HMC-ECS        : {seconds:7.1f} s, held-out AUC "
          f"{roc_auc_score(yt, linear.predict_proba(Xt)[:, 1]):.4f}")
    print(f"true model                      : held-out AUC "
          f"{roc_auc_score(yt, info['proba'](Xt)):.4f}")

    features = [info["feature_names"].index(name) for name in PLOTTED]
    if "hmc" in fits:
        for j in features:
            ref = fits["hmc"].partial_dependence(X, j)
            ecs = fits["hmc_ecs"].partial_dependence(X, j, grid=ref.grid)
            outside = np.maximum(0, np.maximum(ref.lower - ecs.mean, ecs.mean - ref.upper))
            print(f"{info['feature_names'][j]:16s}: HMC-ECS curve outside the HMC 90% band by "
                  f"at most {outside.max():.2e} (band width {np.median(ref.upper - ref.lower):.2e})")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figure (pip install -e '.[plot]')")
    else:
        fig, axes = plt.subplots(len(features), len(fits), figsize=(5.5 * len(fits), 8),
                                 squeeze=False)
        for col, (sampler, est) in enumerate(fits.items()):
            for row, j in enumerate(features):
                ax = axes[row, col]
                est.plot_partial_dependence(X, y, j, n_bins=100, ax=ax, label="posterior mean")
                grid = np.linspace(*ax.get_xlim(), 100)
                ax.plot(grid, true_partial_dependence(info, X, j, grid), "k--", lw=1,
                        label="true")
                ax.set_title(LABELS[sampler])
                ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(args.output, dpi=120)
        print(f"figure written to {args.output}")

    if not args.no_grid_search:
        m = min(args.n_grid, args.n)
        search = GridSearchCV(
            BayesianSplineClassifier(n_chains=2, n_warmup=300, n_draws=300,
                                     random_state=args.seed),
            {"n_knots": [4, 6, 9, 12]}, cv=3, scoring="roc_auc", n_jobs=args.n_jobs)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            search.fit(X[:m], y[:m])
        print(f"GridSearchCV over n_knots on {m} rows ({time.perf_counter() - start:.0f} s):")
        for k, score in zip(search.cv_results_["param_n_knots"],
                            search.cv_results_["mean_test_score"]):
            print(f"  n_knots={k:3d}: mean CV ROC AUC {score:.4f}")
        print(f"  best n_knots = {search.best_params_['n_knots']}")


if __name__ == "__main__":
    main()
