"""The importance design's corrected estimate without the plain gradient, side by side.

With ``minibatch="importance"`` and ``noise_correction="fisher"`` every
SG-HMC update calls :meth:`ModelMinibatchGradient.grad_with_noise
<bayesian_subsample.likelihood.ModelMinibatchGradient.grad_with_noise>` on
the design's weighted minibatch: one forward pass, the linear maps of the
per-row gradients, and the weighted gradient ``J^T w`` (one backward pass
with the weights).  It used to ask the row model for the unweighted gradient
too and throw it away (a second backward pass); it now passes
``with_grad=False`` to ``loglik_grad_and_rows``.  The same holds for the
pooled low-rank estimate (``pooled_noise``, ``"fisher_lowrank"``).

On the MNIST network of Chen, Fox and Guestrin (2014, §4.2: 784-100-10,
sigmoid hidden units, softmax; minibatches of 500 of the 50,000 training
rows, float32 as the estimators keep them), at Glorot weights (or
``--start``, a saved ``theta``), one BLAS thread, this times

* ``grad_with_noise`` with the importance design ("old": a row model that
  makes the plain gradient anyway, the previous behaviour; "new": the
  library's), ``--repeats`` calls each, interleaved (the order alternates
  call by call), the same minibatch draw for both, and checks that both
  return the same gradient bit for bit;
* a whole corrected SG-HMC update (``step_noise_corrected`` at the Figure 4
  step, ``eta = 4e-6``, ``alpha = 0.01``) from one state with that estimate,
  the same way (same position after the update, bit for bit);
* ``pooled_noise`` (``--pool`` minibatches of fresh rows, rank ``--rank``),
  ``--pool-repeats`` calls each, interleaved the same way.

One JSON line per method and measurement: median CPU seconds per call, and
for "new" the ratio of the medians and the median of the call-by-call ratios.

    OMP_NUM_THREADS=1 python benchmarks/bench_mlp_design_noise_grad.py
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.likelihood import HierarchicalPosterior, Hyperparameters
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers import sghmc
from bayesian_subsample.samplers.metric import Metric

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mlp_mnist import MNIST, load_split  # noqa: E402


class WithPlainGradient:
    """The row model as before: ``loglik_grad_and_rows`` always makes the gradient."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def loglik_grad_and_rows(self, theta, idx, noise_precision=1.0, with_grad=True):
        return self._model.loglik_grad_and_rows(theta, idx, noise_precision)


def side_by_side(calls, repeats, check):
    """CPU seconds of ``calls["old"]()`` and ``calls["new"]()``, alternating
    which goes first; ``check(old_result, new_result)`` on every pair."""
    times = {"old": [], "new": []}
    for r in range(repeats):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        got = {}
        for name in order:
            c0 = time.process_time()
            got[name] = calls[name](r)
            times[name].append(time.process_time() - c0)
        check(got["old"], got["new"])
    return {k: np.array(v) for k, v in times.items()}


def report(out, what, times, extra):
    old, new = times["old"], times["new"]
    for name in ("old", "new"):
        row = {"benchmark": "mlp_design_noise_grad", "what": what, "method": name,
               "median_cpu_seconds": round(float(np.median(times[name])), 5),
               "calls": len(times[name]), **extra}
        if name == "new":
            row["median_ratio_new_over_old"] = round(float(np.median(new) / np.median(old)), 4)
            row["median_pairwise_ratio"] = round(float(np.median(new / old)), 4)
        print(json.dumps(row), file=out, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=MNIST)
    ap.add_argument("--start", default=None)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--pool-repeats", type=int, default=12)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = open(args.out, "a") if args.out else sys.stdout
    xtr, ytr, *_ = load_split(args.data, 0)
    net = MLP(784, (100,), 10, "logistic", "softmax")
    model = MLPModel(net, xtr, ytr)
    theta = (np.load(args.start)["theta"] if args.start
             else net.glorot_init(np.random.default_rng(0)))
    groups = net.layer_of_each_weight()
    posts = {"new": HierarchicalPosterior(model, groups, net.glorot_init),
             "old": HierarchicalPosterior(WithPlainGradient(model), groups, net.glorot_init)}
    hyper = Hyperparameters(np.ones(2), 1.0)
    m = args.batch
    extra = {"network": "784-100-10", "batch": m, "dtype": str(xtr.dtype),
             "start": "glorot" if args.start is None else os.path.basename(args.start)}
    with threadpool_limits(limits=1, user_api="blas"):
        design = posts["new"].importance_design(theta, hyper, m)
        extra["certainty_stratum"] = int(len(design.certain))
        est = {k: p.gradient_estimator(m, hyper, design) for k, p in posts.items()}

        def identical(a, b):
            assert np.array_equal(a[0], b[0]), "old and new gradients differ"

        times = side_by_side(
            {k: (lambda r, e=e: e.grad_with_noise(theta, np.random.default_rng(r)))
             for k, e in est.items()}, args.repeats, identical)
        report(out, "grad_with_noise, importance design", times, extra)

        # A whole corrected SG-HMC update from one state (the Figure 4 step,
        # eta = 4e-6, alpha = 0.01): the estimate, V_hat's Gram matrix and
        # Cholesky factor, the Crank-Nicolson solve.
        cfg = sghmc.from_sgd_momentum(4e-6, 0.01)
        unit = Metric(np.ones(net.dim), np.ones(net.dim))
        params = sghmc.make_params(cfg["step_size"], 1, unit, cfg["friction"], None)[0]
        state0 = sghmc.init(theta, np.random.default_rng(1).standard_normal(net.dim))

        class Corrected:
            n_obs_per_eval = m

            def __init__(self, e):
                self.e = e

            def grad_with_noise(self, position, rng):
                return self.e.grad_with_noise(position, rng)

        def same_state(a, b):
            assert np.array_equal(a[0].position, b[0].position), "old and new updates differ"

        times = side_by_side(
            {k: (lambda r, e=Corrected(e): sghmc.step_noise_corrected(
                np.random.default_rng(r), state0, e, params)) for k, e in est.items()},
            args.repeats, same_state)
        report(out, "corrected SG-HMC update, importance design", times,
               {**extra, "eta": 4e-6, "alpha": 0.01})

        def same_estimate(a, b):
            assert np.array_equal(a.s, b.s) and np.array_equal(a.U, b.U), "estimates differ"

        times = side_by_side(
            {k: (lambda r, e=e: e.pooled_noise(theta, np.random.default_rng(r),
                                               args.pool * m, args.rank))
             for k, e in est.items()}, args.pool_repeats, same_estimate)
        report(out, "pooled_noise", times,
               {**extra, "pooled_rows": args.pool * m, "rank": args.rank})


if __name__ == "__main__":
    main()
