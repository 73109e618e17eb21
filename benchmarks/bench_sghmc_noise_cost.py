"""Cost of SG-HMC's gradient-noise corrections on the MNIST network, side by side.

At one network (``--start``, the saved start of ``bench_mlp_stepsize.py``;
Glorot weights if absent), minibatches of 500 of MNIST's 50,000 training
rows, one BLAS thread: CPU seconds of

* an uncorrected SG-HMC update (``noise_correction=None``);
* an update with the per-minibatch correction (``"fisher"``: the m x m
  Gram matrix, its Cholesky factor, two forward-mode and two backward
  passes);
* an update with ``"fisher_lowrank"`` between estimates (the minibatch
  gradient plus two (dim, k) products);
* one ``"fisher_lowrank"`` estimate (``--pool`` minibatches of fresh rows:
  forward and backward pass, Gram matrix, top-k ``eigh``, the batched
  backward product ``J^T C``), for each ``--ranks``;

and the implied cost of a pass (100 updates, one estimate) relative to an
uncorrected pass.  ``--row-norms`` adds how the gradient noise is spread over
the training rows at that network: the squared norms ``|g_i|^2`` of all
per-row gradients (the diagonal of per-chunk Gram matrices), their
participation ratio ``(sum |g_i|^2)^2 / sum |g_i|^4`` and the number of rows
that hold 50/90/99% of ``sum |g_i|^2`` (the trace of ``V``).  One JSON line
per measurement.

    OMP_NUM_THREADS=1 python benchmarks/bench_sghmc_noise_cost.py
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from bayesian_subsample.likelihood._model_target import HierarchicalPosterior
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers import sghmc
from bayesian_subsample.samplers.metric import Metric

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mlp_mnist import MNIST, load_split  # noqa: E402


def timed(fn, repeats):
    c0 = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - c0) / repeats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=MNIST)
    ap.add_argument("--start", default="/tmp/mlp_start.npz")
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--ranks", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--row-norms", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = open(args.out, "a") if args.out else sys.stdout
    xtr, ytr, *_ = load_split(args.data, 0)
    net = MLP(784, (100,), 10, "logistic", "softmax")
    rng = np.random.default_rng(0)
    theta = (np.load(args.start)["theta"] if os.path.exists(args.start)
             else net.glorot_init(rng))
    post = HierarchicalPosterior(MLPModel(net, xtr, ytr), net.layer_of_each_weight(),
                                 net.glorot_init)
    hyper, _ = post.init_hyper(rng, theta)
    m, eta, alpha = 500, 4e-6, 0.01
    cfg = sghmc.from_sgd_momentum(eta, alpha)
    unit = Metric(np.ones(net.dim), np.ones(net.dim))
    params = sghmc.make_params(cfg["step_size"], 1, unit, cfg["friction"], None)[0]
    est = post.gradient_estimator(m, hyper)
    state = sghmc.init(theta, rng.standard_normal(net.dim))

    class Fisher:
        n_obs_per_eval = m

        def grad_with_noise(self, position, rng):
            return est.grad_with_noise(position, rng, False)

    def run_kernel(kernel, estimator):
        nonlocal state
        state, _ = kernel(rng, state, estimator, params)

    base = timed(lambda: run_kernel(sghmc.step, est), args.updates)
    rows = [{"what": "update", "noise_correction": None, "cpu_seconds": base}]
    fisher = timed(lambda: run_kernel(sghmc.step_noise_corrected, Fisher()), args.updates)
    rows.append({"what": "update", "noise_correction": "fisher", "cpu_seconds": fisher,
                 "pass_ratio": fisher / base})
    for k in args.ranks:
        R = args.pool * m
        build = timed(lambda: est.pooled_noise(state.position, rng, R, k), 3)
        noise = est.pooled_noise(state.position, rng, R, k)

        class Pooled:
            n_obs_per_eval = m

            def grad_with_noise(self, position, rng):
                return est.grad(position, rng), noise

        upd = timed(lambda: run_kernel(sghmc.step_noise_corrected, Pooled()), args.updates)
        per_pass = 100 * upd + build
        rows.append({"what": "update", "noise_correction": "fisher_lowrank", "rank": k,
                     "pooled_rows": R, "cpu_seconds": upd})
        rows.append({"what": "estimate", "noise_correction": "fisher_lowrank", "rank": k,
                     "pooled_rows": R, "cpu_seconds": build,
                     "pass_ratio": per_pass / (100 * base)})
    if args.row_norms:
        model = post.model
        sq = np.empty(model.n_obs)
        for s in range(0, model.n_obs, m):
            idx = np.arange(s, min(model.n_obs, s + m))
            _, _, per_row = model.loglik_grad_and_rows(theta, idx)
            sq[idx] = np.diag(per_row.gram())
        srt = np.sort(sq)[::-1]
        share = np.cumsum(srt) / srt.sum()
        rows.append({"what": "row_norms", "n_rows": int(model.n_obs),
                     "participation_ratio": float(srt.sum() ** 2 / (srt ** 2).sum()),
                     "rows_for_50_90_99_percent": [int(np.searchsorted(share, q)) + 1
                                                   for q in (0.5, 0.9, 0.99)]})
    for r in rows:
        r = {key: (round(v, 5) if isinstance(v, float) else v) for key, v in r.items()}
        print(json.dumps({"benchmark": "sghmc_noise_cost", **r}), file=out, flush=True)


if __name__ == "__main__":
    main()
