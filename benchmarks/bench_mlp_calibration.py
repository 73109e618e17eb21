"""Reliability data on MNIST: the SGD point estimate against SG-HMC's posterior average.

The data behind ``doc/_static/mnist_calibration.png``
(:mod:`plot_mlp_calibration`) and the issue's check "``predict_proba`` is
calibrated on held-out data better than the SGD point estimate (lower log
loss and expected calibration error)".  The paper's split and network
(:mod:`bench_mlp_mnist`: 50,000 training rows, 10,000 validation, the 10,000
test images; 784-100-10, sigmoid hidden units, softmax output; minibatches
of 500; Gamma(1, 1) hyper-priors on the layer precisions).  Three runs:

* ``sgd``: the Figure 4 SGD setting (``eta = 4e-5``, layer precisions at
  their conditional mode after each pass), from the Glorot start with the
  random stream of ``bench_mlp_mnist.py``, ``--sgd-passes`` passes (800 in
  the paper; the recorded Figure 4 run stopped at 792).  The test error, log
  loss and ECE are also given at ``--sgd-checkpoints`` passes, so that a
  shorter run can be compared with the recorded one.
* ``sghmc``: SG-HMC at the Figure 4 step ``eta = 4e-6``, ``alpha = 0.01``,
  uniform minibatches, ``B_hat = 0``, from the start network of
  ``bench_mlp_stepsize.py`` (150 passes of the same SG-HMC from the Glorot
  start, saved to ``--start`` and reused; made here if missing), the random
  stream of ``bench_mlp_stepsize.py --factors 1``; ``--passes`` passes, the
  predictive averaging every draw after ``--burn-in`` passes.
* ``sghmc_importance_fisher`` (skip with ``--no-importance``): the same with
  ``minibatch="importance"``, ``minibatch_refresh=10`` and
  ``noise_correction="fisher"``, the chain that runs at configurational
  temperature near 1 (doc/neural_networks.rst, importance-sampled
  minibatches).

For each run one JSON line: the test error, log loss, ECE (15 equal-width
bins of the top-class probability, :func:`bench_mlp_mnist.ece`) and signed
gap (mean confidence minus accuracy); the reliability data in those same
bins (``bins``: lower and upper edge, mean confidence, accuracy, count, for
the non-empty bins); for the samplers also the predictive of the 20 thinned
networks (what :class:`BayesianMLPClassifier` keeps by default) and
``windows``: the mean log loss, ECE and gap of averages of ``k`` consecutive
draws after the burn-in (non-overlapping windows; ``k`` from ``--windows``,
and every draw for the whole run's average).

    nice -n 10 python benchmarks/bench_mlp_calibration.py --jobs 2 \
        --out benchmarks/results/mlp_mnist_calibration.jsonl
    python benchmarks/plot_mlp_calibration.py \
        benchmarks/results/mlp_mnist_calibration.jsonl --out doc/_static/mnist_calibration.png

Cost: about 0.5 CPU-s per pass for SGD and uniform SG-HMC, 3.7 CPU-s for the
importance chain (a refresh of the row norms every 10 updates is a pass
over the data); every method runs single-threaded BLAS, ``--jobs`` runs at a
time in worker processes.
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.likelihood._model_target import HierarchicalPosterior
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import ModelSG, _kept_iterations, run_model_chain

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mlp_mnist import MNIST, calibration, ece, load_split, softmax_probs  # noqa: E402

N_BINS = 15


def reliability(p, y, n_bins=N_BINS):
    """Per-bin mean confidence, accuracy and count of the top-class probability.

    The bins of :func:`bench_mlp_mnist.ece` (``n_bins`` equal-width bins of
    [0, 1], the top one closed); only non-empty bins are listed.  The ECE is
    ``sum count / n * |accuracy - confidence|`` over them.
    """
    conf = p.max(axis=1)
    correct = p.argmax(axis=1) == y
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    count = np.bincount(bins, minlength=n_bins)
    conf_sum = np.bincount(bins, weights=conf, minlength=n_bins)
    acc_sum = np.bincount(bins, weights=correct, minlength=n_bins)
    return [{"lower": b / n_bins, "upper": (b + 1) / n_bins,
             "confidence": float(conf_sum[b] / count[b]),
             "accuracy": float(acc_sum[b] / count[b]), "count": int(count[b])}
            for b in range(n_bins) if count[b]]


def summary(p, y):
    """Test error, log loss, ECE, gap and the reliability bins of predictive ``p``."""
    bins = reliability(p, y)
    rec = {"test_error": float(np.mean(p.argmax(1) != y)), **calibration(p, y, "test_"),
           "bins": bins}
    # The bins reproduce bench_mlp_mnist.ece (a check on this function).
    ece_bins = sum(b["count"] * abs(b["accuracy"] - b["confidence"]) for b in bins) / len(y)
    assert abs(ece_bins - ece(p, y)) < 1e-9, (ece_bins, ece(p, y))
    return rec


def run_sgd(args):
    """The Figure 4 SGD run (bench_mlp_mnist.py's code path and random stream)."""
    xtr, ytr, xva, yva, xte, yte = load_split(args.data, args.seed)
    net = MLP(784, (100,), 10, "logistic", "softmax")
    posterior = HierarchicalPosterior(MLPModel(net, xtr, ytr), net.layer_of_each_weight(),
                                      net.glorot_init)
    checkpoints = set(args.sgd_checkpoints)
    at = {}
    last = {}

    def trace(it, theta, hyper):
        if it + 1 in checkpoints:
            p = softmax_probs(net, theta, xte)
            at[str(it + 1)] = {"test_error": float(np.mean(p.argmax(1) != yte)),
                               **calibration(p, yte, "test_")}
        last.update(theta=theta.copy(), passes=it + 1)

    rng = np.random.default_rng(np.random.SeedSequence(args.seed).spawn(1)[0])
    c0, t0 = time.process_time(), time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        run_model_chain(ModelSG("sgd", 500, args.sgd_eta, args.momentum_decay), rng, posterior,
                        0, args.sgd_passes, trace=trace)
        p = softmax_probs(net, last["theta"], xte)
    return {"method": "sgd", "learning_rate": args.sgd_eta, "passes": last["passes"],
            "start": "glorot", **summary(p, yte), "checkpoints": at,
            "cpu_seconds": round(time.process_time() - c0, 1),
            "wall_seconds": round(time.perf_counter() - t0, 1)}


def run_sghmc(args, label, minibatch="uniform", minibatch_refresh=None, noise_correction=None):
    """SG-HMC from the saved start network (bench_mlp_stepsize.py's run_one stream)."""
    xtr, ytr, xva, yva, xte, yte = load_split(args.data, args.seed)
    theta0 = np.load(args.start)["theta"]
    net = MLP(784, (100,), 10, "logistic", "softmax")
    posterior = HierarchicalPosterior(MLPModel(net, xtr, ytr), net.layer_of_each_weight(),
                                      lambda rng: theta0.copy())
    n_post = args.passes - args.burn_in
    thinned_at = set((args.burn_in + _kept_iterations(n_post, args.networks_kept)).tolist())
    probs, thinned = [], []

    def trace(it, theta, hyper):
        if it < args.burn_in:
            return
        p = softmax_probs(net, theta, xte)
        probs.append(p.astype(np.float32))
        if it in thinned_at:
            thinned.append(p)

    # bench_mlp_stepsize.py seeds the run at factor f with [seed, int(1000 f)].
    rng = np.random.default_rng(np.random.SeedSequence([args.seed, 1000]))
    config = ModelSG("sghmc", 500, args.sghmc_eta, args.momentum_decay,
                     noise_correction=noise_correction, minibatch=minibatch,
                     minibatch_refresh=minibatch_refresh)
    c0, t0 = time.process_time(), time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        res = run_model_chain(config, rng, posterior, 0, args.passes, trace=trace)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    probs = np.asarray(probs)
    p = probs.mean(axis=0, dtype=np.float64)
    windows = {}
    for k in sorted(set(args.windows) | {len(probs)}):
        if k > len(probs):
            continue
        w = [calibration(probs[s:s + k].mean(axis=0, dtype=np.float64), yte)
             for s in range(0, len(probs) - k + 1, k)]
        windows[str(k)] = {"windows": len(w),
                           **{key: float(np.mean([x[key] for x in w])) for key in w[0]}}
    pth = np.mean(thinned, axis=0)
    return {"method": label, "learning_rate": args.sghmc_eta,
            "momentum_decay": args.momentum_decay, "minibatch": minibatch,
            "minibatch_refresh": minibatch_refresh, "noise_correction": noise_correction,
            "start": os.path.basename(args.start), "passes": args.passes,
            "burn_in": args.burn_in, "draws_averaged": len(probs),
            "diverged_at": res.extra["diverged_at"], **summary(p, yte),
            "thinned_draws": len(thinned),
            "thinned_test_error": float(np.mean(pth.argmax(1) != yte)),
            **calibration(pth, yte, "thinned_test_"), "windows": windows,
            "n_obs_evaluated": int(np.nansum(res.stats["n_obs_evaluated"])),
            "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1)}


def make_start_network(args):
    """bench_mlp_stepsize.py's start network (and its JSON line), if ``--start`` is missing."""
    from bench_mlp_stepsize import make_start

    return make_start(SimpleNamespace(data=args.data, seed=args.seed, start=args.start,
                                      start_eta=args.sghmc_eta, start_passes=args.start_passes,
                                      momentum_decay=args.momentum_decay))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=MNIST)
    ap.add_argument("--start", default="/tmp/mlp_start.npz",
                    help="SG-HMC start network (bench_mlp_stepsize.py's; made if missing)")
    ap.add_argument("--start-passes", type=int, default=150)
    ap.add_argument("--sgd-eta", type=float, default=4e-5)
    ap.add_argument("--sgd-passes", type=int, default=800)
    ap.add_argument("--sgd-checkpoints", type=int, nargs="*",
                    default=[50, 100, 200, 400, 600, 792])
    ap.add_argument("--sghmc-eta", type=float, default=4e-6)
    ap.add_argument("--momentum-decay", type=float, default=0.01)
    ap.add_argument("--passes", type=int, default=100, help="SG-HMC passes from the start")
    ap.add_argument("--burn-in", type=int, default=10)
    ap.add_argument("--networks-kept", type=int, default=20)
    ap.add_argument("--windows", type=int, nargs="*", default=[1, 2, 5, 10, 20],
                    help="consecutive draws averaged (the whole run is always added)")
    ap.add_argument("--no-sgd", action="store_true")
    ap.add_argument("--no-importance", action="store_true",
                    help="skip the importance-sampled, noise-corrected SG-HMC chain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None, help="JSON lines file, appended (default: stdout)")
    args = ap.parse_args(argv)
    if args.passes <= args.burn_in:
        ap.error(f"--passes {args.passes} must exceed --burn-in {args.burn_in}")
    out = open(args.out, "a") if args.out else sys.stdout

    def emit(rec):
        print(json.dumps(rec), file=out, flush=True)

    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        sgd = None if args.no_sgd else pool.submit(run_sgd, args)
        if not os.path.exists(args.start):
            # In this process while SGD runs in a worker.
            emit(make_start_network(args))
        runs = [pool.submit(run_sghmc, args, "sghmc")]
        if not args.no_importance:
            runs.append(pool.submit(run_sghmc, args, "sghmc_importance_fisher",
                                    minibatch="importance", minibatch_refresh=10,
                                    noise_correction="fisher"))
        for fut in runs + ([sgd] if sgd else []):
            emit(fut.result())


if __name__ == "__main__":
    main()
