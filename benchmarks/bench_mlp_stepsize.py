"""Is the under-confidence of SGLD / SG-HMC on MNIST a discretisation bias?

With a fixed step the stationary law of SGLD and SG-HMC is wider than the
posterior in stiff directions.  For a Gaussian direction of curvature
``lambda`` (Hessian eigenvalue of the negative log posterior), ``h = eta
lambda``:

* SGLD, ``theta <- theta - h theta + N(0, 2 eta)``: stationary variance
  ``1 / (lambda (1 - h / 2))`` (inflation ``1 / (1 - h / 2)``, unstable at
  ``h >= 2``);
* SG-HMC as the library runs it (Chen, Fox and Guestrin, 2014, eq. 15 with
  ``B_hat = 0``), ``theta <- theta + v``, ``v <- (1 - alpha) v - h theta +
  N(0, 2 alpha eta)``: the stationary covariance solves a 2x2 discrete
  Lyapunov equation (:func:`sghmc_inflation`); about ``1 / (1 - h / 4)``
  for small ``alpha``, unstable near ``h = 4``.

The test: start every chain from one converged network (``--start-passes``
passes of SG-HMC at the Figure 4 step size, saved to ``--start``), measure
the largest Hessian eigenvalue there (power iteration on central
finite-difference Hessian-vector products of the full-data log-posterior
gradient, float64), then run SGLD and SG-HMC for ``--passes`` passes at
``factor x`` their Figure 4 step sizes and report the held-out error, log
loss, ECE and signed confidence gap of the averaged predictive (all draws
after ``--burn-in`` passes, and ``--networks-kept`` evenly spaced ones), the
mean log loss of the single networks, ``eta lambda_max`` and the predicted
variance inflation in the stiffest direction.  One JSON line per run.

``--temperature-states K`` adds the per-layer configurational temperature
(:func:`bayesian_subsample.diagnostics.configurational_temperature`) of K
networks spread over the second half of each run, each with the precisions
the Gibbs step drew with it: 1 for a chain that samples its target, above 1
for a hot one.  ``--prior-precision`` fixes every layer's prior precision
instead of the Gamma(1, 1) hyper-prior.  ``--noise-correction fisher`` runs
SG-HMC with Chen et al.'s ``B_hat = eta V_hat / 2`` (``ModelSG``'s
``noise_correction``) and reports the largest eigenvalue of ``B_hat`` seen
per pass.  ``--windows 1 3 10 30 90`` adds the mean log loss, ECE and
confidence gap of averages of ``k`` consecutive draws after the burn-in
(each ``k`` at most ``--passes - --burn-in``).  ``--minibatch importance
[--minibatch-refresh k]`` draws the minibatches by
:class:`bayesian_subsample.likelihood.ImportanceDesign`.

    python benchmarks/bench_mlp_stepsize.py --jobs 2 \
        --out benchmarks/results/mlp_mnist_stepsize.jsonl
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.diagnostics import configurational_temperature
from bayesian_subsample.likelihood._model_target import HierarchicalPosterior
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import ModelSG, _kept_iterations, run_model_chain

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mlp_mnist import (MNIST, add_noise_arguments, calibration, load_split,  # noqa: E402
                             lowrank_options, softmax_probs)


def sgld_inflation(h):
    """Stationary variance of SGLD in a Gaussian direction, in units of ``1 / lambda``."""
    return np.inf if h >= 2 else 1.0 / (1.0 - h / 2.0)


def sghmc_inflation(h, alpha):
    """The same for SG-HMC (eq. 15, ``B_hat = 0``), by the discrete Lyapunov equation."""
    from scipy.linalg import solve_discrete_lyapunov

    # (theta, v) -> theta' = theta + v, v' = (1 - alpha) v - h theta' + xi,
    # var xi = 2 alpha eta; in units of 1/lambda: var xi = 2 alpha h.
    A = np.array([[1.0, 1.0], [-h, 1.0 - alpha - h]])
    if np.max(np.abs(np.linalg.eigvals(A))) >= 1:
        return np.inf
    Q = np.array([[0.0, 0.0], [0.0, 2.0 * alpha * h]])
    return float(solve_discrete_lyapunov(A, Q)[0, 0])


def largest_eigenvalue(net, X, y, theta, precisions, groups, n_iter=30, h=1e-3, seed=0):
    """Largest Hessian eigenvalue of the negative full-data log posterior at ``theta``."""
    model = MLPModel(net, X, y)
    prec = precisions[groups]

    def grad(t):
        return model.full_loglik_and_grad(t)[1] - prec * t

    rng = np.random.default_rng(seed)
    v = rng.standard_normal(len(theta))
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(n_iter):
        hv = -(grad(theta + h * v) - grad(theta - h * v)) / (2 * h)
        lam_new = float(v @ hv)
        v = hv / np.linalg.norm(hv)
        if abs(lam_new - lam) < 1e-3 * abs(lam_new):
            lam = lam_new
            break
        lam = lam_new
    return lam, v


def layer_temperature(net, X, y, states, groups, n_probes=8, seed=0):
    """Per-layer configurational temperature of ``states`` (weights, precisions).

    :func:`bayesian_subsample.diagnostics.configurational_temperature` with
    each state's target the weights' conditional given the precisions the
    Gibbs step drew with them (full-data gradient, float64 ``X``).
    """
    model = MLPModel(net, X, y)

    def grad_for(prec):
        pr = prec[groups]
        return lambda t: model.full_loglik_and_grad(t)[1] - pr * t

    res = configurational_temperature([grad_for(p) for _, p in states],
                                      np.array([t for t, _ in states]), groups,
                                      n_probes=n_probes, random_state=seed)
    return res.temperature, res.standard_error, res.per_state


def make_start(args):
    xtr, ytr, xva, yva, xte, yte = load_split(args.data, args.seed)
    net = MLP(784, (100,), 10, "logistic", "softmax")
    groups = net.layer_of_each_weight()
    posterior = HierarchicalPosterior(MLPModel(net, xtr, ytr), groups, net.glorot_init)
    rng = np.random.default_rng(args.seed)
    t0 = time.process_time()
    with threadpool_limits(limits=1, user_api="blas"):
        res = run_model_chain(ModelSG("sghmc", 500, args.start_eta, args.momentum_decay,
                                      n_networks_kept=1), rng, posterior, 0, args.start_passes)
        theta = res.draws[-1]
        prec = np.asarray(res.extra["final_hyper"].precisions)
        t1 = time.process_time()
        lam, _ = largest_eigenvalue(net, xtr.astype(np.float64), ytr, theta, prec, groups)
    pt = softmax_probs(net, theta, xte)
    np.savez(args.start, theta=theta, precisions=prec, lambda_max=lam)
    rec = {"start": True, "method": "sghmc", "learning_rate": args.start_eta,
           "passes": args.start_passes, "test_error": float(np.mean(pt.argmax(1) != yte)),
           **calibration(pt, yte, "test_"), "prior_precision": prec.tolist(),
           "lambda_max": lam, "cpu_seconds_chain": round(t1 - t0, 1),
           "cpu_seconds_hessian": round(time.process_time() - t1, 1)}
    return rec


def run_one(args, method, eta, factor):
    xtr, ytr, xva, yva, xte, yte = load_split(args.data, args.seed)
    start = np.load(args.start)
    theta0, lam = start["theta"], float(start["lambda_max"])
    net = MLP(784, (100,), 10, "logistic", "softmax")
    posterior = HierarchicalPosterior(MLPModel(net, xtr, ytr), net.layer_of_each_weight(),
                                      lambda rng: theta0.copy(),
                                      prior_precision=args.prior_precision)
    n_post = args.passes - args.burn_in
    thinned_at = set((args.burn_in + _kept_iterations(n_post, args.networks_kept)).tolist())
    acc = {"all": np.zeros((len(yte), 10)), "thinned": np.zeros((len(yte), 10))}
    count = {"all": 0, "thinned": 0}
    single = []
    kept_probs = []
    precs = []
    states = []
    # The temperature states are spread over the second half of the run.
    half = args.passes - n_post // 2
    temp_at = set((half + _kept_iterations(args.passes - half, args.temperature_states)).tolist()
                  if args.temperature_states else [])

    def trace(it, theta, hyper):
        if it < args.burn_in:
            return
        p = softmax_probs(net, theta, xte)
        acc["all"] += p
        count["all"] += 1
        if it in thinned_at:
            acc["thinned"] += p
            count["thinned"] += 1
        c = calibration(p, yte)
        single.append((c["log_loss"], c["confidence_gap"], float(np.mean(p.argmax(1) != yte))))
        if args.windows:
            kept_probs.append(p.astype(np.float32))
        precs.append(np.asarray(hyper.precisions, float))
        if it in temp_at:
            states.append((theta.copy(), np.asarray(hyper.precisions, float)))

    rng = np.random.default_rng(np.random.SeedSequence([args.seed, int(factor * 1000)]))
    c0 = time.process_time()
    with threadpool_limits(limits=1, user_api="blas"):
        res = run_model_chain(ModelSG(method, 500, eta, args.momentum_decay,
                                      noise_correction=args.noise_correction,
                                      **lowrank_options(args, args.noise_correction),
                                      minibatch=args.minibatch,
                                      minibatch_refresh=args.minibatch_refresh),
                              rng, posterior, 0, args.passes, trace=trace)
        if states:
            groups = net.layer_of_each_weight()
            t, se, per_state = layer_temperature(net, xtr.astype(np.float64), ytr, states, groups)
    h = eta * lam
    infl = sgld_inflation(h) if method == "sgld" else sghmc_inflation(h, args.momentum_decay)
    s = np.asarray(single)
    rec = {"method": method, "factor": factor, "prior_precision": args.prior_precision, "learning_rate": eta, "passes": args.passes,
           "burn_in": args.burn_in, "lambda_max": lam, "eta_lambda_max": h,
           "predicted_variance_inflation": infl,
           "diverged_at": res.extra["diverged_at"],
           "noise_correction": args.noise_correction,
           "minibatch": args.minibatch, "minibatch_refresh": args.minibatch_refresh,
           "n_obs_evaluated": int(np.nansum(res.stats["n_obs_evaluated"])),
           **lowrank_options(args, args.noise_correction)}
    for k in args.windows or ():
        # Averages of k consecutive draws (non-overlapping windows): how the
        # calibration moves from one network to the whole run's average.
        w = [calibration(np.mean(kept_probs[s:s + k], axis=0, dtype=np.float64), yte)
             for s in range(0, len(kept_probs) - k + 1, k)]
        if not w:
            rec[f"window_{k}"] = {"windows": 0, "note": f"only {len(kept_probs)} draws after "
                                                        "the burn-in, fewer than k"}
            continue
        rec[f"window_{k}"] = {"windows": len(w),
                              **{key: float(np.mean([x[key] for x in w])) for key in w[0]}}
    if args.noise_correction:
        b = np.asarray(res.extra["beta_hat_max"], float)
        rec.update({"beta_hat_max_median": float(np.nanmedian(b)),
                    "beta_hat_max_max": float(np.nanmax(b))})
    for key in ("all", "thinned"):
        p = acc[key] / count[key]
        rec.update({f"{key}_draws": count[key],
                    f"{key}_test_error": float(np.mean(p.argmax(1) != yte)),
                    **calibration(p, yte, f"{key}_test_")})
    rec.update({"single_test_log_loss": float(s[:, 0].mean()),
                "single_test_confidence_gap": float(s[:, 1].mean()),
                "single_test_error": float(s[:, 2].mean()),
                "prior_precision_mean": np.mean(precs, axis=0).round(4).tolist(),
                "cpu_seconds": round(time.process_time() - c0, 1)})
    if states:
        rec.update({"configurational_temperature": t.round(4).tolist(),
                    "configurational_temperature_se": se.round(4).tolist(),
                    "temperature_states": len(states),
                    "configurational_temperature_per_state": per_state.round(3).tolist()})
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=MNIST)
    ap.add_argument("--start", default="/tmp/mlp_start.npz")
    ap.add_argument("--start-passes", type=int, default=150)
    ap.add_argument("--start-eta", type=float, default=4e-6)
    ap.add_argument("--rates", nargs="+", default=["sgld=1e-4", "sghmc=4e-6"],
                    help="method=eta at factor 1 (the Figure 4 choices)")
    ap.add_argument("--factors", nargs="+", type=float, default=[1, 0.5, 0.25, 0.125])
    ap.add_argument("--passes", type=int, default=100)
    ap.add_argument("--burn-in", type=int, default=10)
    ap.add_argument("--momentum-decay", type=float, default=0.01)
    ap.add_argument("--networks-kept", type=int, default=20)
    ap.add_argument("--windows", type=int, nargs="*", default=None,
                    help="also report the mean calibration of averages of k consecutive "
                         "draws after the burn-in, for each k given")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature-states", type=int, default=0,
                    help="states per run for the configurational temperature (0: none)")
    ap.add_argument("--prior-precision", type=float, default=None,
                    help="a fixed prior precision for every layer (default: Gamma(1, 1) "
                         "hyper-prior and Gibbs steps)")
    add_noise_arguments(ap)
    ap.add_argument("--minibatch", choices=("uniform", "importance"), default="uniform",
                    help="ModelSG's minibatch design")
    ap.add_argument("--minibatch-refresh", type=int, default=None,
                    help="updates between refreshes of minibatch='importance' (default: "
                         "one per pass)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    after = args.passes - args.burn_in
    for k in args.windows or ():
        if not 1 <= k <= after:
            ap.error(f"--windows {k}: each k must be between 1 and the {after} draws after the "
                     f"burn-in (--passes {args.passes} - --burn-in {args.burn_in}); use a "
                     "smaller k or more --passes.")
    out = open(args.out, "a") if args.out else sys.stdout
    if not os.path.exists(args.start):
        print(json.dumps(make_start(args)), file=out, flush=True)
    runs = [(m, float(e) * f, f) for spec in args.rates for m, e in [spec.split("=")]
            for f in args.factors]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, args, *r) for r in runs]
        for fut in futures:
            print(json.dumps(fut.result()), file=out, flush=True)


if __name__ == "__main__":
    main()
