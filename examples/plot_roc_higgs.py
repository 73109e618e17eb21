"""Held-out ROC curves of HMC-ECS and full-data HMC on HIGGS-like data.

A small-scale version of Figure 3 of Dang et al. (2019): the posterior
predictive ROC curve obtained with HMC with energy conserving subsampling
(``sampler="hmc_ecs"``) should be indistinguishable from the one obtained
with exact full-data HMC (``sampler="hmc"``), although HMC-ECS reads only a
small fraction of the rows per iteration.

Run it with::

    python examples/plot_roc_higgs.py                      # ~1-2 minutes on 2 cores
    python examples/plot_roc_higgs.py --n 20000 --n-warmup 200 --n-draws 300
    python examples/plot_roc_higgs.py --output /tmp/roc.png

It needs matplotlib (``pip install -e ".[plot]"``), writes the figure to
``--output`` (default ``roc_higgs.png`` in the current directory) and prints
the held-out ROC AUC of both samplers.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
import warnings

from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like

LABELS = {"hmc": "HMC (full data)", "hmc_ecs": "HMC-ECS (subsampling)"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="ROC curves of HMC-ECS and full-data HMC on held-out HIGGS-like data "
                    "(Dang et al. 2019, Figure 3).")
    parser.add_argument("--n", type=int, default=110_000,
                        help="rows of synthetic data, 10%% of them held out "
                             "(default 110000: 99000 to fit, 11000 to test)")
    parser.add_argument("--n-chains", type=int, default=2, help="chains per sampler (default 2)")
    parser.add_argument("--n-warmup", type=int, default=500,
                        help="warm-up iterations per chain (default 500)")
    parser.add_argument("--n-draws", type=int, default=1000,
                        help="stored draws per chain (default 1000)")
    parser.add_argument("--n-jobs", type=int, default=-1,
                        help="chains run in parallel (default -1: all cores)")
    parser.add_argument("--seed", type=int, default=0, help="random_state (default 0)")
    parser.add_argument("--output", default="roc_higgs.png",
                        help="PNG file to write (default roc_higgs.png)")
    args = parser.parse_args(argv)
    if args.n < 2000:
        parser.error("--n must be at least 2000")
    return args


def main(argv=None):
    args = parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import RocCurveDisplay

    X, y, _ = make_higgs_like(n_samples=args.n, random_state=args.seed)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.1, random_state=args.seed)
    print(f"HIGGS-like data: {X_train.shape[0]:,} rows to fit, {X_test.shape[0]:,} held out, "
          f"{X.shape[1]} features; {args.n_chains} chains x ({args.n_warmup} warm-up + "
          f"{args.n_draws} draws).")

    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    aucs = {}
    for name in ("hmc", "hmc_ecs"):
        clf = BayesianLogisticRegression(
            sampler=name, n_chains=args.n_chains, n_warmup=args.n_warmup,
            n_draws=args.n_draws, n_jobs=args.n_jobs, random_state=args.seed)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            clf.fit(X_train, y_train)
        seconds = time.perf_counter() - start
        for w in caught:
            print(f"  warning ({name}): {w.message}")
        proba = clf.predict_proba(X_test)[:, 1]
        aucs[name] = roc_auc_score(y_test, proba)
        fraction = float(clf.subsample_size_.mean()) / X_train.shape[0]
        print(f"  {LABELS[name]:24s} AUC = {aucs[name]:.4f}   fit {seconds:5.1f} s, "
              f"data per iteration {min(fraction, 1.0):.1%}, "
              f"acceptance {clf.sample_stats_['acceptance_rate'].mean():.2f}")
        style = {"linestyle": "-" if name == "hmc" else "--", "linewidth": 1.5}
        if "curve_kwargs" in inspect.signature(RocCurveDisplay.from_predictions).parameters:
            style = {"curve_kwargs": style}  # scikit-learn >= 1.7
        RocCurveDisplay.from_predictions(y_test, proba, name=LABELS[name], ax=ax, **style)
    ax.plot([0, 1], [0, 1], color="0.7", linewidth=0.8, linestyle=":")
    ax.set_title(f"HIGGS-like data: {X_train.shape[0]:,} rows to fit, "
                 f"{X_test.shape[0]:,} held out", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    plt.close(fig)

    print(f"AUC hmc     = {aucs['hmc']:.4f}")
    print(f"AUC hmc_ecs = {aucs['hmc_ecs']:.4f}")
    print(f"|difference| = {abs(aucs['hmc'] - aucs['hmc_ecs']):.2e}; figure written to "
          f"{args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
