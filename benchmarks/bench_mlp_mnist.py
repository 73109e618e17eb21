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

``--tune-grid`` takes one grid for every method or ``method=v1,v2,...``
entries (a grid per method: the optimisers' and samplers' useful ranges
differ by a factor of about 100, see above).

Every method runs single-threaded BLAS; ``--jobs J`` runs J methods at a time
in worker processes (one run of the script for all four on 2 cores), each
worker appending its JSON lines to ``--out``; tuning trials already in
``--out`` (same grid value and ``--tune-passes``) are reused, not repeated.  ``--max-minutes`` stops a
method early and the curves so far are kept (the JSON says how many passes
were done).  ``--noise-correction fisher`` runs SG-HMC with Chen et al.'s
``B_hat = eta V_hat / 2`` (``ModelSG``'s ``noise_correction``; the final
line gives the largest eigenvalue of ``B_hat`` per pass, median and max);
``--temperature-states K`` adds the per-layer configurational temperature of
K states of the second half of a sampler's run (``bench_mlp_stepsize``).

    nice -n 10 python benchmarks/bench_mlp_mnist.py --methods sghmc \
        --learning-rate 4e-6 --noise-correction fisher --temperature-states 4 \
        --out benchmarks/results/mlp_mnist_fig4_noise_correction.jsonl

Calibration.  The final line of a sampler also gives the log loss, ECE and
signed gap ``mean confidence - accuracy`` (negative: under-confident) of
two other predictives, so that a poorly calibrated average can be traced to
its cause: ``late_*`` averages only the draws of the second half of the
post-burn-in passes (are early, poorly fitted networks diluting it?), and
``thinned_*`` averages ``--networks-kept`` networks evenly spaced over the
post-burn-in passes, what :class:`BayesianMLPClassifier` stores and
predicts with (its default keeps 20).  Predictive averages are accumulated
incrementally (one (n_test, 10) sum per predictive); evaluation costs one
forward pass over the 20,000 validation and test rows per pass (about an
eighth of a training pass).

    nice -n 10 python benchmarks/bench_mlp_mnist.py --jobs 2 --passes 800 \
        --tune-grid sgd=1e-5,4e-5,1e-4 sgd_momentum=1e-6,2e-6,4e-6 \
        sgld=4e-5,1e-4,2e-4 sghmc=1e-6,2e-6,4e-6 --tune-passes 20 --out fig4.jsonl
    python benchmarks/plot_mlp_mnist.py fig4.jsonl --out fig4.png
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.likelihood._model_target import HierarchicalPosterior
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import (
    METHODS, ModelSG, _kept_iterations, run_model_chain)

#: The MNIST file of the project's shared data (``../shared/data`` beside the
#: checkout); pass ``--data`` to read another copy.
MNIST = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                      os.pardir, "shared", "data", "mnist.npz"))


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


def calibration(p, y, prefix=""):
    """Log loss, ECE and signed gap (mean top-class confidence minus accuracy)."""
    gap = float(p.max(axis=1).mean() - np.mean(p.argmax(axis=1) == y))
    return {prefix + "log_loss": log_loss(p, y), prefix + "ece": ece(p, y),
            prefix + "confidence_gap": gap}


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


def lowrank_options(args, correction):
    """ModelSG's noise_rank / noise_pool / noise_refresh for "fisher_lowrank"."""
    if correction != "fisher_lowrank":
        return {}
    return {"noise_rank": args.noise_rank, "noise_pool": args.noise_pool,
            "noise_refresh": args.noise_refresh}


def add_noise_arguments(ap):
    """``--noise-correction`` and the "fisher_lowrank" options (read by
    :func:`lowrank_options`), shared with bench_mlp_stepsize.py."""
    ap.add_argument("--noise-rank", type=int, default=None,
                    help="fisher_lowrank: eigenpairs kept (ModelSG noise_rank)")
    ap.add_argument("--noise-pool", type=int, default=None,
                    help="fisher_lowrank: minibatches pooled per estimate (noise_pool)")
    ap.add_argument("--noise-refresh", type=int, default=None,
                    help="fisher_lowrank: updates between estimates (default: one per pass; "
                         "may exceed a pass)")
    ap.add_argument("--noise-correction", default=None,
                    choices=["fisher", "covariance", "fisher_lowrank"],
                    help="SG-HMC's gradient-noise correction (ModelSG noise_correction); "
                         "other methods are unaffected")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=MNIST)
    ap.add_argument("--methods", nargs="+", default=["sgd", "sgd_momentum", "sgld", "sghmc"])
    ap.add_argument("--passes", type=int, default=800)
    ap.add_argument("--burn-in", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--learning-rate", nargs="+", default=["2e-6"],
                    help="one eta for all methods, or method=eta pairs (others: 2e-6)")
    ap.add_argument("--tune-grid", nargs="+", default=None,
                    help="choose eta per method by validation error from these values, "
                         "or from method=v1,v2,... grids")
    ap.add_argument("--tune-passes", type=int, default=40)
    ap.add_argument("--momentum-decay", type=float, default=0.01)
    ap.add_argument("--hidden", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=np.inf)
    ap.add_argument("--networks-kept", type=int, default=20,
                    help="networks of the thinned predictive (the estimator's default)")
    add_noise_arguments(ap)
    ap.add_argument("--temperature-states", type=int, default=0,
                    help="per-layer configurational temperature of this many states of the "
                         "second half (samplers; 0: none)")
    ap.add_argument("--jobs", type=int, default=1, help="methods run at a time (processes)")
    ap.add_argument("--out", default=None, help="JSON lines file (default: stdout)")
    args = ap.parse_args(argv)
    rates = parse_rates(args.learning_rate, args.methods)
    grids = parse_grids(args.tune_grid, args.methods)
    if args.out is None or args.jobs <= 1:
        for method in args.methods:
            run_method(args, method, rates[method], grids.get(method))
        return
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_method, args, m, rates[m], grids.get(m))
                   for m in args.methods]
        for f in futures:
            f.result()


def run_method(args, method, eta, grid):
    """Tune ``eta`` on the validation set (if ``grid``), then run the full budget."""
    out = open(args.out, "a") if args.out else sys.stdout
    xtr, ytr, xva, yva, xte, yte = load_split(args.data, args.seed)
    net = MLP(784, (args.hidden,), 10, "logistic", "softmax")
    posterior = HierarchicalPosterior(MLPModel(net, xtr, ytr), net.layer_of_each_weight(),
                                      net.glorot_init)

    class Stop(Exception):
        pass

    def run(eta, n_passes, burn_in, report):
        """Run ``method`` for ``n_passes``; return its final record."""
        sampling = method in ("sgld", "sghmc", "hmc")
        n_post = n_passes - burn_in
        late_from = burn_in + n_post // 2
        correction = args.noise_correction if method == "sghmc" else None
        config = ModelSG(method=method, subsample_size=args.batch_size,
                         learning_rate=eta, momentum_decay=args.momentum_decay,
                         noise_correction=correction,
                         **lowrank_options(args, correction))
        # States for the configurational temperature, spread over the second
        # half of the post-burn-in passes.
        temp_at = set((late_from + _kept_iterations(n_passes - late_from,
                                                    args.temperature_states)).tolist()
                      if args.temperature_states and sampling and report else [])
        states = []
        thinned_at = set((burn_in + _kept_iterations(n_post, args.networks_kept)).tolist())
        # Running sums of the predictive probabilities: every post-burn-in
        # draw, the second half only, and the thinned networks.
        acc = {k: {"test": np.zeros((len(yte), 10)), "val": np.zeros((len(yva), 10)), "n": 0}
               for k in ("all", "late", "thinned")}
        final = {}
        t0 = time.perf_counter()

        def callback(it, theta, hyper):
            pt, pv = softmax_probs(net, theta, xte), softmax_probs(net, theta, xva)
            if sampling and it >= burn_in:
                for key, use in (("all", True), ("late", it >= late_from),
                                 ("thinned", it in thinned_at)):
                    if use:
                        acc[key]["test"] += pt
                        acc[key]["val"] += pv
                        acc[key]["n"] += 1
                pt, pv = acc["all"]["test"] / acc["all"]["n"], acc["all"]["val"] / acc["all"]["n"]
            if it in temp_at:
                states.append((theta.copy(), np.asarray(hyper.precisions, float)))
            final.update(pt=pt, pv=pv, passes=it + 1)
            wall = time.perf_counter() - t0
            if report:
                print(json.dumps({
                    "method": method, "pass": it + 1,
                    "test_error": float(np.mean(pt.argmax(1) != yte)),
                    "val_error": float(np.mean(pv.argmax(1) != yva)),
                    "draws_averaged": acc["all"]["n"], "wall_seconds": round(wall, 2),
                    "noise_correction": correction,
                    "prior_precision": [round(float(v), 4) for v in hyper.precisions]}),
                    file=out, flush=True)
            if wall > 60 * args.max_minutes:
                raise Stop

        rng = np.random.default_rng(np.random.SeedSequence(args.seed).spawn(1)[0])
        c0 = time.process_time()
        with threadpool_limits(limits=1, user_api="blas"):
            result = None
            try:
                # The correction starts after warm-up (ModelSG): the burn-in
                # passes are the chain's warm-up then (the trace sees them all).
                warm = burn_in if correction else 0
                result = run_model_chain(config, rng, posterior, warm, n_passes - warm,
                                         trace=callback)
            except Stop:
                pass
        cpu_chain = time.process_time() - c0
        wall_chain = time.perf_counter() - t0
        pt, pv = final["pt"], final["pv"]
        rec = {
            "method": method, "passes_done": final["passes"], "passes_requested": n_passes,
            "burn_in": burn_in, "val_error": float(np.mean(pv.argmax(1) != yva)),
            "test_error": float(np.mean(pt.argmax(1) != yte)),
            **calibration(pt, yte, "test_"),
            "draws_averaged": acc["all"]["n"], "wall_seconds": round(wall_chain, 1),
            "cpu_seconds": round(cpu_chain, 1),
            "learning_rate": eta, "momentum_decay": args.momentum_decay,
            "batch_size": args.batch_size, "noise_correction": correction,
            **lowrank_options(args, correction)}
        if correction and result is not None:
            b = np.asarray(result.extra["beta_hat_max"], float)
            rec.update({"beta_hat_max_median": float(np.nanmedian(b)),
                        "beta_hat_max_max": float(np.nanmax(b))})
        if states:
            from bench_mlp_stepsize import layer_temperature

            with threadpool_limits(limits=1, user_api="blas"):
                t, se, per_state = layer_temperature(
                    net, xtr.astype(np.float64), ytr, states, net.layer_of_each_weight())
            rec.update({"configurational_temperature": t.round(4).tolist(),
                        "configurational_temperature_se": se.round(4).tolist(),
                        "temperature_states": len(states),
                        "configurational_temperature_per_state": per_state.round(3).tolist()})
        for key in ("late", "thinned"):
            if acc[key]["n"]:
                p = acc[key]["test"] / acc[key]["n"]
                rec.update({f"{key}_draws": acc[key]["n"],
                            f"{key}_test_error": float(np.mean(p.argmax(1) != yte)),
                            **calibration(p, yte, f"{key}_test_")})
        return rec

    if grid:
        # Trials of an earlier, interrupted run of the same grid (same tuning
        # budget and seed) are not repeated.
        trials, done = [], set()
        if args.out:
            with open(args.out) as fh:
                for line in fh:
                    rec = json.loads(line)
                    if (rec.get("tune") and rec["method"] == method
                            and rec["passes_requested"] == args.tune_passes
                            and rec["learning_rate"] in grid):
                        trials.append((rec["val_error"], rec["learning_rate"]))
                        done.add(rec["learning_rate"])
        for value in grid:
            if value in done:
                continue
            rec = run(value, args.tune_passes, args.tune_passes // 4, False)
            print(json.dumps({"tune": True, **rec}), file=out, flush=True)
            trials.append((rec["val_error"], value))
        eta = min(trials)[1]
    rec = run(eta, args.passes, args.burn_in, True)
    print(json.dumps({"final": True, **rec}), file=out, flush=True)


def parse_grids(values, methods):
    """``["1e-5", "4e-5"]`` (every method) or ``["sgd=1e-5,4e-5", ...]`` to a dict."""
    if not values:
        return {}
    grids = {}
    for value in values:
        if "=" in value:
            name, vals = value.split("=", 1)
            if name not in METHODS:
                raise SystemExit(f"--tune-grid names {name!r}, not one of {METHODS}")
            grids[name] = [float(v) for v in vals.split(",")]
        else:
            for m in methods:
                grids.setdefault(m, []).append(float(value))
    return {m: g for m, g in grids.items() if m in methods}


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
