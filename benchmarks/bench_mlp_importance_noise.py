"""Gradient-noise trace of importance-sampled against uniform minibatches on MNIST.

At the saved start network of ``bench_mlp_stepsize.py`` (``--start``, made
there: 150 passes of SG-HMC at the Figure 4 step), this script runs an SG-HMC
chain (``eta = 4e-6``, ``alpha = 0.01``, minibatches of ``m = 500`` rows,
uniform or by :class:`~bayesian_subsample.likelihood.ImportanceDesign`
refreshed every 10 updates) and, every 10 updates from update 100 on,
computes all 50,000 per-row gradient norms and the full gradient at the
current weights.  From them it evaluates the *exact* trace of the covariance
of one minibatch gradient (no sampling):

* uniform, ``m`` distinct rows: ``(n^2 / m)(1 - m / n) s^2`` with ``s^2`` the
  rows' variance;
* the importance design built from norms taken ``R`` updates earlier (``R =
  0, 10, 20, 50, 100``): :meth:`ImportanceDesign.variance_trace` with the
  current norms (the design is unbiased whatever its norms; stale norms only
  cost variance);
* a "watch list": norms of all rows ``100`` updates old, with the ``W`` rows
  largest then re-normed ``r`` updates ago.

Each line gives the ratio of the uniform trace to the design's at ``m`` rows
per update, and at equal rows evaluated per update (the uniform minibatch
enlarged by the refresh's rows: ``m + n / R``, or ``m + n / 100 + W / r``).

    python benchmarks/bench_mlp_importance_noise.py --chain importance \
        --out benchmarks/results/mlp_mnist_importance_noise.jsonl
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.likelihood import ImportanceDesign
from bayesian_subsample.models._mlp import MLP, MLPModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mlp_mnist import MNIST, load_split  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=MNIST)
    ap.add_argument("--start", default="/tmp/mlp_start.npz")
    ap.add_argument("--chain", choices=("uniform", "importance"), default="importance")
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = open(args.out, "a") if args.out else sys.stdout
    xtr, ytr, *_ = load_split(args.data, 0)
    start = np.load(args.start)
    theta, prec = start["theta"].copy(), start["precisions"]
    net = MLP(784, (100,), 10, "logistic", "softmax")
    model = MLPModel(net, xtr, ytr)
    n, m, eta, alpha = len(ytr), 500, 4e-6, 0.01
    prior = prec[net.layer_of_each_weight()]
    rng = np.random.default_rng(args.seed)

    def norms_and_gradient(t):
        sq, G = np.empty(n), np.zeros(net.dim)
        for s in range(0, n, 10000):
            idx = np.arange(s, min(n, s + 10000))
            _, g, rows = model.loglik_grad_and_rows(t, idx)
            sq[idx] = rows.square_norms()
            G += g
        return sq, G

    def design_trace(sizes, sq, G, t):
        d = ImportanceDesign(sizes, m)
        Gc = model.loglik_and_grad(t, d.certain)[1] if len(d.certain) else 0.0
        return d.variance_trace(sq, G - Gc), len(d.certain)

    lags = (0, 10, 20, 50, 100)
    watch = ((5000, 10), (10000, 10), (10000, 20))
    cost = {"uniform": m, **{f"R{r}": m + (n / r if r else 0) for r in lags},
            **{f"W{w}r{r}": m + n / 100 + w / r for w, r in watch}}
    traces = {k: [] for k in cost}
    certain = []
    snaps = {}
    c0 = time.process_time()
    with threadpool_limits(limits=1, user_api="blas"):
        v = rng.standard_normal(net.dim) * np.sqrt(eta)
        design = None
        for k in range(args.updates + 1):
            if k % 10 == 0:
                sq, G = norms_and_gradient(theta)
                snaps[k] = sq
                snaps.pop(k - 110, None)
                if args.chain == "importance":
                    design = ImportanceDesign(sq, m)
                if k >= 100:
                    gbar = G / n
                    traces["uniform"].append(
                        n * n * (1 - m / n) / m * (sq.sum() - n * gbar @ gbar) / (n - 1))
                    for r in lags:
                        tr, c = design_trace(snaps[k - r], sq, G, theta)
                        traces[f"R{r}"].append(tr)
                        if r == 0:
                            certain.append(c)
                    for w, r in watch:
                        sizes = snaps[k - 100].copy()
                        top = np.argsort(-sizes)[:w]
                        sizes[top] = snaps[k - r][top]
                        traces[f"W{w}r{r}"].append(design_trace(sizes, sq, G, theta)[0])
            if args.chain == "importance":
                idx, w = design.draw(rng)
                g = model.weighted_loglik_and_grad(theta, idx, w)[1]
            else:
                idx = np.sort(rng.choice(n, m, replace=False))
                g = (n / m) * model.loglik_and_grad(theta, idx)[1]
            v = ((1 - alpha) * v + eta * (g - prior * theta)
                 + rng.standard_normal(net.dim) * np.sqrt(2 * alpha * eta))
            theta = theta + v
    u = float(np.mean(traces["uniform"]))
    for key, c in cost.items():
        tr = float(np.mean(traces[key]))
        # A uniform minibatch of c rows: trace (n^2 / c)(1 - c / n) s^2.
        same = u * ((1 - c / n) / c) / ((1 - m / n) / m)
        rec = {"chain": args.chain, "design": key, "rows_per_update": c,
               "trace": tr, "ratio_uniform_over_design": round(u / tr, 2),
               "ratio_at_equal_rows": round(same / tr, 2),
               "checkpoints": len(traces[key]), "updates": args.updates}
        if key == "R0":
            rec["certainty_rows_mean"] = float(np.mean(certain))
        if key == "uniform":
            rec["cpu_seconds"] = round(time.process_time() - c0, 1)
        print(json.dumps(rec), file=out, flush=True)


if __name__ == "__main__":
    main()
