"""SBPS against SGLD on a small Bayesian neural network: §7.3 / Figure 6 of Pakman et al. (2017).

The paper's set-up: MNIST training images downsampled to 7x7, pixels that
are 0 in every training image removed, 4 digit classes, ``N = 8,340``
training images; one hidden layer and a softmax output, ``d = 192``
weights; the negative log posterior ``-sum_i log p_i + c sum_j w_j^2`` with
``c = 0.001`` (a Gaussian prior of precision ``2c``); minibatches of 500; all
weights initialised at 0; SBPS with ``k = 3`` against SGLD at several step
sizes; a long reference run; trajectories along the directions of largest,
median and smallest variance of the reference samples' covariance.

Choices made here (the paper does not give them):

* data: the first 8,340 training images of digits 0-3, pixels in [0, 1],
  each 4x4 block averaged (28x28 -> 7x7); the pixels that are 0 in all of
  them removed;
* network: logistic (sigmoid) hidden units, as many as make ``d`` closest to
  192 (with biases);
* initialisation at 0: a symmetric saddle (every hidden unit identical, the
  first layer's gradient zero).  Both samplers leave it at once: SBPS through
  its random initial velocity (uniform on the sphere), SGLD through its
  injected Gaussian noise; so the paper's zero start is kept;
* reference: full-data HMC (the library's kernel, :mod:`bayesian_subsample.samplers.hmc`)
  with a dense mass matrix, the Laplace precision at a mode found by L-BFGS
  from a small random start (its Hessian by central differences of full-data
  gradients, eigenvalues floored at the prior precision), step size by dual
  averaging to 0.8 acceptance, 20 leapfrog steps.  The network's posterior
  is invariant under permutations of the hidden units, so each method's
  draws are relabelled by the permutation of hidden units that brings their
  post-burn-in mean closest to the reference mean (all ``H!`` tried) before
  they are compared;
* cost is counted in epochs (rows read / N).  SBPS's iterations are draw
  intervals (about one warm-up "pass" of 50 minibatch observations each,
  the library's minimum), SGLD's are 50 updates; both are traced at the end
  of every iteration.

Output: one JSON line per method (``--out``), with ``epochs``,
``wall_seconds``, per-direction ``mean_error_sd`` (|mean - reference mean| /
reference sd) and ``var_ratio`` (variance / reference variance) along the
largest, median and smallest reference directions, and their medians over
all ``d`` eigen-directions; a ``.npz`` with the traced projections; and
with ``--plot`` the Figure 6 panels (trajectories and marginals).

``d = 192``.  With 48 non-zero pixels, ``d = 192 = 48 x 4`` is exactly one
weight layer from the pixels to the 4 classes without biases, i.e. a softmax
regression; a hidden layer with biases gives ``d = 49 H + 4 (H + 1)``
(``H = 4``: 216).  Both are run: ``--hidden 0`` is the softmax model (196
weights with its 4 biases, a log-concave posterior), the default the 4-unit
hidden layer the brief asks for.

Measured (results in ``doc/neural_networks.rst``; a shared, loaded 2-core
machine, so wall times are indicative)::

    python benchmarks/bench_sbps_mlp.py --hidden 0 --epochs 2000 --sgld 1e-5 1e-4 1e-3 \\
        --ref-cache /tmp/sbps_ref_h0.npz --out benchmarks/results/sbps_mlp_softmax.jsonl \\
        --plot doc/_static/sbps_mlp_softmax.png
    python benchmarks/bench_sbps_mlp.py --epochs 2000 --sgld 1e-6 1e-5 5e-5 \\
        --ref-cache /tmp/sbps_ref.npz --out benchmarks/results/sbps_mlp_hidden4.jsonl \\
        --plot doc/_static/sbps_mlp_hidden4.png

(the reference defaults: 4 chains x (150 + 600) transitions of 10 leapfrog
steps, 30,000 epochs; ``--ref-cache`` keeps them between runs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bayesian_subsample.likelihood import HierarchicalPosterior, Hyperparameters  # noqa: E402
from bayesian_subsample.models import MLP, MLPModel  # noqa: E402
from bayesian_subsample.samplers import hmc  # noqa: E402
from bayesian_subsample.samplers._sg_model import ModelSG, run_model_chain  # noqa: E402
from bayesian_subsample.samplers.adaptation import (  # noqa: E402
    dual_averaging_init, dual_averaging_update, find_reasonable_step_size)
from bayesian_subsample.samplers.metric import metric_from_mass_matrix  # noqa: E402
from bayesian_subsample.diagnostics import ess_bulk, split_rhat  # noqa: E402

DATA = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                     os.pardir, "shared", "data", "mnist.npz"))
C_L2 = 0.001


def load(path, n_train=8340, digits=(0, 1, 2, 3)):
    d = np.load(path)
    x, y = d["x_train"], d["y_train"]
    keep = np.flatnonzero(np.isin(y, digits))[:n_train]
    x = x[keep].astype(np.float64) / 255.0
    x = x.reshape(len(x), 7, 4, 7, 4).mean(axis=(2, 4)).reshape(len(x), 49)
    nonzero = np.any(x > 0, axis=0)
    return x[:, nonzero], np.searchsorted(np.array(digits), y[keep])


def hidden_units(p, k, target=192):
    return min(range(1, 50), key=lambda h: abs((p + 1) * h + (h + 1) * k - target))


def permutations(net, H):
    """Index arrays mapping theta to its hidden-unit-permuted copies (all H!)."""
    if H == 0:
        return [np.arange(net.dim)]
    (w1, b1), (w2, b2) = net.slices
    p = net.layer_shapes[0][0]
    k = net.layer_shapes[1][1]
    base = np.arange(net.dim)
    out = []
    for perm in itertools.permutations(range(H)):
        perm = np.array(perm)
        idx = base.copy()
        idx[w1] = base[w1].reshape(p, H)[:, perm].ravel()
        idx[b1] = base[b1][perm]
        idx[w2] = base[w2].reshape(H, k)[perm, :].ravel()
        out.append(idx)
    return out


def align(draws, ref_mean, perms):
    mean = draws.mean(axis=0)
    best = min(perms, key=lambda idx: float(np.sum((mean[idx] - ref_mean) ** 2)))
    return best


def reference_hmc(post, rng, n_chains, n_warmup, n_draws, n_steps, log):
    """Dense-metric full-data HMC from an L-BFGS mode (module notes)."""
    from scipy.optimize import minimize

    hyper = Hyperparameters(np.full(post.n_groups, 2 * C_L2), 1.0)
    target = post.full_target(hyper)

    def f(w):
        lp, g = target.logdensity_and_grad(w)
        return -lp, -g

    w0 = 0.1 * rng.standard_normal(post.dim)
    res = minimize(f, w0, jac=True, method="L-BFGS-B", options={"maxiter": 5000,
                                                               "gtol": 1e-6})
    mode = res.x
    h = 1e-5
    H = np.empty((post.dim, post.dim))
    for j in range(post.dim):
        e = np.zeros(post.dim)
        e[j] = h
        H[j] = (f(mode + e)[1] - f(mode - e)[1]) / (2 * h)
    H = 0.5 * (H + H.T)
    vals, vecs = np.linalg.eigh(H)
    floor = 2 * C_L2
    log(f"mode: -log post {res.fun:.2f}, grad norm {np.linalg.norm(res.jac):.2e}, "
        f"Hessian eigenvalues {vals.min():.3g}..{vals.max():.3g} (floored at {floor})")
    M = (vecs * np.maximum(vals, floor)) @ vecs.T
    metric = metric_from_mass_matrix(M, True)
    chains, cost = [], 0
    for c in range(n_chains):
        crng = np.random.default_rng([int(rng.integers(2 ** 31)), c])
        start = mode + np.linalg.solve(np.linalg.cholesky(M).T, crng.standard_normal(post.dim))
        state = hmc.init(start, target)
        eps0, _ = find_reasonable_step_size(crng, target, start, state.logdensity,
                                            state.logdensity_grad, metric)
        da = dual_averaging_init(eps0)
        params = hmc.HMCParams(eps0, n_steps, metric)
        draws = np.empty((n_draws, post.dim))
        acc = []
        for it in range(n_warmup + n_draws):
            state, info = hmc.step(crng, state, target, params)
            cost += info.n_obs_evaluated
            if it < n_warmup:
                da = dual_averaging_update(da, info.acceptance_rate)
                eps = math.exp(da.log_step_size if it < n_warmup - 1 else da.log_step_size_avg)
                params = params._replace(step_size=eps)
            else:
                draws[it - n_warmup] = state.position
                acc.append(info.acceptance_rate)
        log(f"reference chain {c}: step {params.step_size:.3g}, acceptance {np.mean(acc):.2f}")
        chains.append(draws)
    return np.stack(chains), cost, mode


def run_method(name, config, post, seed, n_warmup, n_iter, dirs, ref_mean, perms, N):
    positions = []

    def trace(it, position, hyper):
        positions.append(np.array(position))

    t0 = time.perf_counter()
    r = run_model_chain(config, np.random.default_rng(seed), post, n_warmup, n_iter - n_warmup,
                        trace=trace)
    wall = time.perf_counter() - t0
    P = np.array(positions)
    per_iter = np.concatenate([np.full(n_warmup, r.n_obs_evaluated_warmup / max(n_warmup, 1)),
                               r.stats["n_obs_evaluated"]])
    epochs = np.cumsum(per_iter)[:len(P)] / N
    finite = np.all(np.isfinite(P), axis=1)
    post_burn = P[n_warmup:][finite[n_warmup:]]
    idx = align(post_burn, ref_mean, perms) if len(post_burn) else np.arange(P.shape[1])
    P = P[:, idx]
    post_burn = post_burn[:, idx]
    return P, epochs, post_burn, wall, r


def summarise(draws, ref_mean, ref_vecs, ref_sd):
    proj = (draws - ref_mean) @ ref_vecs
    err = np.abs(proj.mean(axis=0)) / ref_sd
    ratio = proj.var(axis=0) / ref_sd ** 2
    return err, ratio


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--epochs", type=float, default=10000)
    ap.add_argument("--burn-fraction", type=float, default=0.2)
    ap.add_argument("--sgld", type=float, nargs="*", default=[1e-5, 1e-4, 1e-3],
                    help="SGLD step sizes eta (theta += eta g + N(0, 2 eta)).")
    ap.add_argument("--ref-chains", type=int, default=4)
    ap.add_argument("--ref-warmup", type=int, default=150)
    ap.add_argument("--ref-draws", type=int, default=600)
    ap.add_argument("--ref-steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=None,
                    help="hidden units (default: d closest to 192); 0: no hidden layer, "
                         "the softmax regression 48 x 4 (+ 4 biases), which d = 192 = 48 x 4 "
                         "in the paper suggests")
    ap.add_argument("--ref-cache", default=None,
                    help="npz of the reference draws: read if it exists, else written")
    ap.add_argument("--out", default=None)
    ap.add_argument("--traces", default=None, help="npz of projected traces (default: --out "
                    "with .npz)")
    ap.add_argument("--plot", default=None)
    ap.add_argument("--methods", nargs="*", default=["sbps", "psbps", "sgld"])
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    X, y = load(args.data)
    N, p = X.shape
    K = 4
    H = hidden_units(p, K) if args.hidden is None else args.hidden
    net = MLP(p, (H,) if H else (), K, "logistic", "softmax")
    post = HierarchicalPosterior(MLPModel(net, X, y), net.layer_of_each_weight(),
                                 lambda rng: np.zeros(net.dim), prior_precision=2 * C_L2)
    log(f"N = {N}, {p} pixels, {H} hidden units, d = {net.dim}")
    perms = permutations(net, H)
    rng = np.random.default_rng(args.seed)

    t0 = time.perf_counter()
    if args.ref_cache and os.path.exists(args.ref_cache):
        saved = np.load(args.ref_cache)
        ref, ref_cost, ref_wall = saved["draws"], float(saved["cost"]), float(saved["wall"])
        log(f"reference draws from {args.ref_cache}: {ref.shape}")
    else:
        ref, ref_cost, _ = reference_hmc(post, rng, args.ref_chains, args.ref_warmup,
                                         args.ref_draws, args.ref_steps, log)
        ref_wall = time.perf_counter() - t0
        if args.ref_cache:
            np.savez_compressed(args.ref_cache, draws=ref, cost=ref_cost, wall=ref_wall)
    # Chains may sit in different relabellings of the same mode: align them to chain 0.
    for c in range(1, len(ref)):
        ref[c] = ref[c][:, align(ref[c], ref[0].mean(0), perms)]
    flat = ref.reshape(-1, net.dim)
    ref_mean = flat.mean(0)
    vals, vecs = np.linalg.eigh(np.cov(flat, rowvar=False))
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order]
    ref_sd = np.sqrt(vals)
    picks = {"largest": 0, "median": net.dim // 2, "smallest": net.dim - 1}
    proj_ref = (ref - ref_mean) @ vecs[:, list(picks.values())]
    rhat = split_rhat(proj_ref)
    ess = ess_bulk(proj_ref)
    lines = [{"method": "reference_hmc", "epochs": ref_cost / N, "wall_seconds": ref_wall,
              "n_chains": int(ref.shape[0]), "n_draws": int(ref.shape[1]),
              "ref_sd": {k: float(ref_sd[j]) for k, j in picks.items()},
              "split_rhat": dict(zip(picks, np.round(rhat, 4).tolist())),
              "ess_bulk": dict(zip(picks, np.round(ess, 1).tolist())),
              "N": N, "pixels": p, "hidden": H, "dim": net.dim}]
    log(json.dumps(lines[-1]))
    traces = {"ref": proj_ref, "ref_sd": ref_sd[list(picks.values())]}

    iters_per_epoch = N / (50 * 500)
    n_iter = int(round(args.epochs * iters_per_epoch))
    n_warm = int(round(args.burn_fraction * n_iter))
    configs = []
    for m in args.methods:
        if m in ("sbps", "psbps"):
            configs.append((m, ModelSG(method=m, subsample_size=500, n_networks_kept=1)))
        elif m == "sgld":
            for eta in args.sgld:
                configs.append((f"sgld_{eta:g}", ModelSG(method="sgld", subsample_size=500,
                                                         learning_rate=eta,
                                                         n_networks_kept=1)))
    for name, cfg in configs:
        P, epochs, kept, wall, r = run_method(name, cfg, post, args.seed + 1, n_warm, n_iter,
                                              vecs, ref_mean, perms, N)
        line = {"method": name, "epochs": float(epochs[-1]) if len(epochs) else 0.0,
                "wall_seconds": wall, "iterations": len(P), "burn_in_iterations": n_warm,
                "diverged_at": r.extra.get("diverged_at")}
        if len(kept) > 10:
            err, ratio = summarise(kept, ref_mean, vecs, ref_sd)
            line.update({
                "mean_error_sd": {k: float(err[j]) for k, j in picks.items()},
                "var_ratio": {k: float(ratio[j]) for k, j in picks.items()},
                "median_mean_error_sd": float(np.median(err)),
                "median_var_ratio": float(np.median(ratio)),
                "quartiles_var_ratio": np.percentile(ratio, [25, 75]).tolist()})
        if name in ("sbps", "psbps"):
            line.update({k: r.extra[k] for k in ("violation_fraction",
                                                 "horizon_violation_fraction", "n_bounces",
                                                 "n_proposals", "draw_interval", "horizon",
                                                 "slope_prior_mean", "slope_prior_sd",
                                                 "n_numerical_errors")})
        else:
            line["learning_rate"] = r.extra["learning_rate"]
        log(json.dumps(line))
        lines.append(line)
        finite = np.all(np.isfinite(P), axis=1)
        traces[name] = np.where(finite[:, None], (P - ref_mean) @ vecs[:, list(picks.values())],
                                np.nan)
        traces[name + "_epochs"] = epochs
    if args.out:
        with open(args.out, "a") as fh:
            for line in lines:
                fh.write(json.dumps(line) + "\n")
        np.savez_compressed(args.traces or os.path.splitext(args.out)[0] + ".npz", **traces)
    for line in lines:
        print(json.dumps(line))
    if args.plot:
        plot(traces, lines, picks, args.plot)


def replot(jsonl, npz, path):
    """Redraw the figure from a run's JSON lines and traces."""
    with open(jsonl) as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    traces = dict(np.load(npz))
    picks = {"largest": 0, "median": 1, "smallest": 2}
    plot(traces, [lines[0]] + [ln for ln in lines[1:] if ln["method"] + "_epochs" in traces],
         picks, path)


def plot(traces, lines, picks, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [line["method"] for line in lines[1:]]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    sd = traces["ref_sd"]
    ref = traces["ref"].reshape(-1, 3)
    for j, label in enumerate(picks):
        ax = axes[0, j]
        for name in names:
            ax.plot(traces[name + "_epochs"], traces[name][:, j] / sd[j], lw=0.6, label=name)
        ax.axhspan(-1, 1, color="grey", alpha=0.2, label="reference +-1 sd")
        ax.set_xscale("log")
        ax.set_title(f"direction of {label} variance (sd {sd[j]:.3g})")
        ax.set_xlabel("epochs")
        ax.set_ylabel("projection / reference sd")
        ax = axes[1, j]
        lo, hi = -5, 5
        bins = np.linspace(lo, hi, 61)
        ax.hist(ref[:, j] / sd[j], bins=bins, density=True, color="grey", alpha=0.5,
                label="reference HMC")
        for line, name in zip(lines[1:], names):
            tr = traces[name][:, j] / sd[j]
            burn = line["burn_in_iterations"]
            tr = tr[burn:]
            tr = tr[np.isfinite(tr)]
            ax.hist(np.clip(tr, lo, hi), bins=bins, density=True, histtype="step", label=name)
        ax.set_xlabel("projection / reference sd (after burn-in)")
    axes[0, 0].legend(fontsize=7)
    axes[1, 0].legend(fontsize=7)
    ref_line = lines[0]
    fig.suptitle(f"Pakman et al. (2017) §7.3: MNIST 7x7, 4 digits, {ref_line['hidden']} hidden "
                 f"units, d = {ref_line['dim']}; SBPS (k = 3) vs SGLD, reference full-data HMC")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
