"""Bayesian neural network on MNIST: Figure 4 of Chen, Fox and Guestrin (2014, §4.2).

The paper's set-up: 60,000 training images split at random into 50,000 for
training and 10,000 for validation, the 10,000 test images; pixels scaled to
[0, 1]; one hidden layer of 100 sigmoid units and a softmax output; minibatches
of 500; a Gaussian prior on each layer's weights with a Gamma(1, 1) prior on
its precision, resampled by a Gibbs step after every pass over the training
set; 800 passes, the first 50 discarded as burn-in.  Four methods, all through
:func:`bayesian_subsample.samplers._sg_model.run_model_chain` with the library's
SGLD and SG-HMC kernels:

* ``sgd``: ``theta <- theta + eta g`` (``eta = 2e-6`` per unit of the
  full-data gradient, i.e. 0.1 on the mean loss), layer precisions at their
  conditional mode after each pass (the paper's footnote 4: MAP for lambda);
* ``sgd_momentum``: the same with momentum ``1 - alpha = 0.99``;
* ``sgld``: ``theta <- theta + eta g + N(0, 2 eta)``, Gibbs for lambda;
* ``sghmc``: ``eta = 2e-6``, ``alpha = 0.01``, ``B_hat = 0``, Gibbs for lambda.

Test error after each pass: for the samplers, of the Bayes predictive
averaged over every draw after burn-in (the current draw during burn-in);
for the optimisers, of the current point.  One JSON line per (method, pass):
``test_error``, ``val_error``, ``wall_seconds``; one final line per method
with the held-out log loss and the expected calibration error (15 equal-width
bins of the top-class probability) of the final predictive.

Step sizes.  The paper selects "training parameters" on the validation set
(§4.2) without giving its SGLD and SGD values; one ``eta`` for all four
methods handicaps the two without momentum (SG-HMC's and SGD-with-momentum's
effective step is ``eta / alpha``, 100 times theirs).  ``--learning-rate``
takes one value for every method or ``method=value`` pairs;
``--tune-grid ETA ...`` instead runs each method for ``--tune-passes``
passes at every grid value and keeps, per method, the value with the lowest
*validation* error (one ``"tune"`` JSON line per trial), then runs the full
budget at it.  The test set is never used for the choice.

Each method runs in its own process (``--methods`` selects; run them side by
side), single-threaded BLAS; ``--max-minutes`` stops a method early and the
curves so far are kept (the JSON says how many passes were done).

    nice -n 10 python benchmarks/bench_mlp_mnist.py --methods sghmc --out sghmc.jsonl &
    nice -n 10 python benchmarks/bench_mlp_mnist.py --methods sgld \
        --tune-grid 2e-6 1e-5 4e-5 1e-4 2e-4 --tune-passes 40 --out sgld.jsonl
    python benchmarks/plot_mlp_mnist.py sgd.jsonl sgd_momentum.jsonl sgld.jsonl \
        sghmc.jsonl --out fig4.png
"""

import argparse
import json
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.likelihood._model_target import HierarchicalPosterior
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import METHODS, ModelSG, run_model_chain


def load_split(path, seed):
    data = np.load(path)
    x = data["x_train"].reshape(len(data["x_train"]), -1).astype(np.float32) / 255.0
    y = data["y_train"].astype(np.intp)
    perm = np.random.default_rng(seed).permutation(len(x))
    tr, va = perm[:50000], perm[50000:60000]
    xt = data["x_test"].reshape(len(data["x_test"]), -1).astype(np.float32) / 255.0
    return x[tr], y[tr], x[va], y[va], xt, data["y_test"].astype(np.intp)


def softmax_probs(net, theta, X):
    z = net.predict_output(theta, X).astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def log_loss(p, y):
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-15, None))))


def ece(p, y, n_bins=15):
    conf = p.max(axis=1)
    correct = p.argmax(axis=1) == y
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = bins == b
        if sel.any():
            total += sel.mean() * abs(correct[sel].mean() - conf[sel].mean())
    return float(total)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/work/shared/data/mnist.npz")
    ap.add_argument("--methods", nargs="+", default=["sgd", "sgd_momentum", "sgld", "sghmc"])
    ap.add_argument("--passes", type=int, default=800)
    ap.add_argument("--burn-in", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--learning-rate", nargs="+", default=["2e-6"],
                    help="one eta for all methods, or method=eta pairs (others: 2e-6)")
    ap.add_argument("--tune-grid", nargs="+", type=float, default=None,
                    help="choose eta per method from these by validation error")
    ap.add_argument("--tune-passes", type=int, default=40)
    ap.add_argument("--momentum-decay", type=float, default=0.01)
    ap.add_argument("--hidden", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=np.inf)
    ap.add_argument("--out", default=None, help="JSON lines file (default: stdout)")
    args = ap.parse_args(argv)
    out = open(args.out, "a") if args.out else sys.stdout
    xtr, ytr, xva, yva, xte, yte = load_split(args.data, args.seed)
    net = MLP(784, (args.hidden,), 10, "logistic", "softmax")
    posterior = HierarchicalPosterior(MLPModel(net, xtr, ytr), net.layer_of_each_weight(),
                                      net.glorot_init)

    class Stop(Exception):
        pass

    rates = parse_rates(args.learning_rate, args.methods)

    def run(method, eta, n_passes, burn_in, report):
        """Run one method for ``n_passes``; return its final record."""
        config = ModelSG(method=method, subsample_size=args.batch_size,
                         learning_rate=eta, momentum_decay=args.momentum_decay)
        sampling = method in ("sgld", "sghmc", "hmc")
        acc = {"test": np.zeros((len(yte), 10)), "val": np.zeros((len(yva), 10)), "n": 0}
        final = {}
        t0 = time.perf_counter()

        def callback(it, theta, hyper):
            pt, pv = softmax_probs(net, theta, xte), softmax_probs(net, theta, xva)
            if sampling and it >= burn_in:
                acc["test"] += pt
                acc["val"] += pv
                acc["n"] += 1
                pt, pv = acc["test"] / acc["n"], acc["val"] / acc["n"]
            final.update(pt=pt, pv=pv, passes=it + 1)
            wall = time.perf_counter() - t0
            if report:
                print(json.dumps({
                    "method": method, "pass": it + 1,
                    "test_error": float(np.mean(pt.argmax(1) != yte)),
                    "val_error": float(np.mean(pv.argmax(1) != yva)),
                    "draws_averaged": acc["n"], "wall_seconds": round(wall, 2),
                    "prior_precision": [round(float(v), 4) for v in hyper.precisions]}),
                    file=out, flush=True)
            if wall > 60 * args.max_minutes:
                raise Stop

        rng = np.random.default_rng(np.random.SeedSequence(args.seed).spawn(1)[0])
        with threadpool_limits(limits=1, user_api="blas"):
            try:
                run_model_chain(config, rng, posterior, 0, n_passes, trace=callback)
            except Stop:
                pass
        pt, pv = final["pt"], final["pv"]
        return {
            "method": method, "passes_done": final["passes"], "passes_requested": n_passes,
            "burn_in": burn_in, "val_error": float(np.mean(pv.argmax(1) != yva)),
            "test_error": float(np.mean(pt.argmax(1) != yte)),
            "test_log_loss": log_loss(pt, yte), "test_ece": ece(pt, yte),
            "draws_averaged": acc["n"], "wall_seconds": round(time.perf_counter() - t0, 1),
            "learning_rate": eta, "momentum_decay": args.momentum_decay,
            "batch_size": args.batch_size}

    for method in args.methods:
        eta = rates[method]
        if args.tune_grid:
            trials = []
            for value in args.tune_grid:
                rec = run(method, value, args.tune_passes, args.tune_passes // 4, False)
                print(json.dumps({"tune": True, **rec}), file=out, flush=True)
                trials.append((rec["val_error"], value))
            eta = min(trials)[1]
        rec = run(method, eta, args.passes, args.burn_in, True)
        print(json.dumps({"final": True, **rec}), file=out, flush=True)


def parse_rates(values, methods):
    """``["2e-6"]`` (every method) or ``["sgld=1e-4", ...]`` to a dict (default 2e-6)."""
    rates = dict.fromkeys(methods, 2e-6)
    for value in values:
        if "=" in value:
            name, eta = value.split("=", 1)
            if name not in METHODS:
                raise SystemExit(f"--learning-rate names {name!r}, not one of {METHODS}")
            if name in rates:
                rates[name] = float(eta)
        else:
            rates = dict.fromkeys(methods, float(value))
    return rates

if __name__ == "__main__":
    main()
