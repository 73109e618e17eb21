"""Approximate Gibbs sampling on a dense triplet MRF (Korattikara et al., 2014, §6.3).

The model is ``BinaryMRF.random_triplet(100)``: 100 binary variables, a 2x2x2
potential table on every one of the 161,700 triples with i.i.d. normal
log-entries of sd 0.02 (see ``bayesian_subsample.models._mrf`` for why sd and
not variance), so each Gibbs conditional is a sum over 4,851 pair terms
(eq. 11).  Three parts, one JSON line per result:

* ``truth``: long exact systematic-scan Gibbs chains (``--truth-chains`` x
  ``--truth-draws`` scans); their pooled draws give the reference joint
  distribution on ``M = 1600`` random 5-variable subsets.  The line reports
  the chains' max split R-hat and min bulk ESS over variables, and the eq.
  (12) distance between the first and the second half of the chains (the
  Monte Carlo noise floor of the reference).
* ``conditionals`` (Figure 7): (x, i) pairs taken from the truth draws and
  stratified over the exact conditional probability ``p = P(x_i = 1 | x_-i)``;
  each pair's update is replayed ``--replays`` times with fresh ``u`` and
  reading orders through ``samplers.gibbs.decide`` for every epsilon.  Per
  epsilon: the largest and mean ``|p_hat - p|`` over pairs, with the
  binomial standard error of ``p_hat``, and the mean terms per decision.
* ``error`` (Figure 8): for exact Gibbs and each epsilon in
  {0.01, 0.05, 0.1, 0.15, 0.2, 0.25} (mini-batches of 500 terms) one
  systematic-scan chain from the same random start runs for
  ``--seconds`` of CPU time (``time.process_time``: the machine may be
  shared, and CPU time is what the paper's wall clock measured); at
  log-spaced checkpoints the eq. (12) error
  ``(1/M) sum_m || P_hat(X_{s_m}) - P(X_{s_m}) ||_1`` of the draws so far,
  with the CPU seconds and the potential terms evaluated up to then.  Each
  line also reports the scans done, terms per update, CPU seconds per scan
  and the wall seconds.

    nice -n 10 python benchmarks/bench_mrf.py --n-jobs 4 --output mrf.jsonl --plot mrf  # ~9 CPU-min
    python benchmarks/bench_mrf.py --quick                                   # ~1 min smoke

``--plot PREFIX`` writes ``PREFIX_conditionals.png`` (Figure 7) and
``PREFIX_error.png`` (Figure 8, error against wall time and against terms
evaluated); needs matplotlib.
"""

import argparse
import json
import time

import numpy as np
from joblib import Parallel, delayed

from bayesian_subsample import BinaryMRF, GibbsSampler
from bayesian_subsample.samplers import gibbs

EPSILONS = (0.01, 0.05, 0.1, 0.15, 0.2, 0.25)


def _emit(record, out):
    line = json.dumps(record)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()


def _subset_codes(draws, subsets):
    """Configuration codes (n_draws, M) of each subset in each draw."""
    k = subsets.shape[1]
    weights = 1 << np.arange(k - 1, -1, -1)
    return np.tensordot(draws[:, subsets].astype(np.int16), weights, axes=([2], [0]))


def _subset_tables(codes, k):
    """Empirical joint tables (M, 2**k) from codes (n, M)."""
    n, M = codes.shape
    flat = codes + (np.arange(M) * 2 ** k)[None, :]
    return np.bincount(flat.ravel(), minlength=M * 2 ** k).reshape(M, 2 ** k) / n


def eq12_error(tables, truth):
    """Average L1 distance over subsets (eq. 12)."""
    return float(np.abs(tables - truth).sum(axis=1).mean())


def run_truth(mrf, args, subsets, out):
    t0 = time.perf_counter()
    res = GibbsSampler(n_chains=args.truth_chains, n_warmup=args.truth_warmup,
                       n_draws=args.truth_draws, random_state=args.seed + 1,
                       n_jobs=args.n_jobs).sample(mrf)
    wall = time.perf_counter() - t0
    draws = res.draws.reshape(-1, mrf.n_variables)
    k = subsets.shape[1]
    truth = _subset_tables(_subset_codes(draws, subsets), k)
    half = res.draws.shape[1] // 2
    first = _subset_tables(_subset_codes(res.draws[:, :half].reshape(-1, mrf.n_variables),
                                         subsets), k)
    second = _subset_tables(_subset_codes(res.draws[:, half:].reshape(-1, mrf.n_variables),
                                          subsets), k)
    diag = res.diagnostics()
    _emit({"part": "truth", "chains": args.truth_chains, "draws": args.truth_draws,
           "wall_seconds": round(wall, 1),
           "max_split_rhat": float(np.nanmax(diag["r_hat"])),
           "min_ess_bulk": float(np.nanmin(diag["ess_bulk"])),
           "median_ess_bulk": float(np.nanmedian(diag["ess_bulk"])),
           "half_vs_half_eq12": eq12_error(first, second),
           "flips_per_scan": float(res.sample_stats["n_changed"].mean())}, out)
    return truth, res.draws


def run_conditionals(mrf, truth_draws, args, rng, out):
    """Figure 7: replayed single updates against the exact conditional."""
    D = mrf.n_variables
    pool = truth_draws.reshape(-1, D)
    n_bins, per_bin = 10, args.pairs_per_bin
    chosen = [[] for _ in range(n_bins)]
    for _ in range(200 * n_bins * per_bin):
        x = pool[rng.integers(len(pool))]
        i = int(rng.integers(D))
        p = 1.0 / (1.0 + np.exp(-mrf.conditional_log_odds(i, x)))
        b = min(int(p * n_bins), n_bins - 1)
        if len(chosen[b]) < per_bin:
            chosen[b].append((x.copy(), i, p))
        if all(len(c) == per_bin for c in chosen):
            break
    pairs = [item for c in chosen for item in c]
    seeds = np.random.SeedSequence(args.seed + 4).spawn(len(EPSILONS))
    runs = Parallel(n_jobs=args.n_jobs)(
        delayed(_replay_updates)(mrf, pairs, eps, args.batch_size, args.replays, seed)
        for eps, seed in zip(EPSILONS, seeds))
    results = {}
    for eps, (p_true, p_hat, terms, cpu) in zip(EPSILONS, runs):
        err = np.abs(p_hat - p_true)
        se = np.sqrt(np.maximum(p_true * (1 - p_true), 1e-12) / args.replays)
        results[eps] = (p_true, p_hat)
        _emit({"part": "conditionals", "epsilon": eps, "pairs": len(pairs),
               "replays": args.replays, "max_abs_error": float(err.max()),
               "mean_abs_error": float(err.mean()),
               "mean_signed_error_p_above_0.5": float((p_hat - p_true)[p_true > 0.5].mean()),
               "mean_signed_error_p_below_0.5": float((p_hat - p_true)[p_true < 0.5].mean()),
               "max_binomial_se": float(se.max()),
               "terms_per_decision": terms / (len(pairs) * args.replays),
               "cpu_seconds": round(cpu, 1)}, out)
    return results


def _replay_updates(mrf, pairs, eps, batch_size, replays, seed):
    """Approximate decisions of each (x, i) replayed with fresh u and orders."""
    rng = np.random.default_rng(seed)
    params = gibbs.GibbsParams("approximate", "systematic", eps, batch_size)
    p_true, p_hat, terms = [], [], 0
    t0 = time.process_time()
    for x, i, p in pairs:
        x = x.copy()
        u = rng.random(replays)
        with np.errstate(divide="ignore"):
            thresholds = np.log(u) - np.log1p(-u)
        ones = 0
        for th in thresholds:
            value, n_used, _, _ = gibbs.decide(rng, mrf, i, x, th, params)
            ones += value
            terms += n_used
        p_true.append(p)
        p_hat.append(ones / replays)
    return np.array(p_true), np.array(p_hat), terms, time.process_time() - t0


def _error_chain(mrf, x0, method, eps, batch_size, seconds, seed):
    """One Figure 8 chain for ``seconds`` of CPU time: draws, CPU times, terms."""
    params = gibbs.GibbsParams(method, "systematic", eps, batch_size)
    rng = np.random.default_rng(seed)
    state = gibbs.init(x0)
    draws, times, terms = [], [], []
    total_terms = 0
    t0, w0 = time.process_time(), time.perf_counter()
    while True:
        state, info = gibbs.step(rng, state, mrf, params)
        total_terms += info.n_terms_evaluated
        draws.append(state.x)
        now = time.process_time() - t0
        times.append(now)
        terms.append(total_terms)
        if now >= seconds:
            break
    return np.array(draws), np.array(times), np.array(terms), time.perf_counter() - w0


def run_error_curves(mrf, truth, subsets, args, out):
    """Figure 8: eq. (12) error against time for exact Gibbs and each epsilon.

    The chains run in parallel processes (``--n-jobs``); each is timed by its
    own CPU clock, so the parallelism does not enter the timings.
    """
    D, k = mrf.n_variables, subsets.shape[1]
    x0 = np.random.default_rng(args.seed + 2).integers(0, 2, D)
    methods = [("exact", 0.0)] + [("approximate", eps) for eps in EPSILONS]
    runs = Parallel(n_jobs=args.n_jobs)(
        delayed(_error_chain)(mrf, x0, method, eps, args.batch_size, args.seconds,
                              args.seed + 3)
        for method, eps in methods)
    curves = {}
    for (method, eps), (draws, times, terms, wall) in zip(methods, runs):
        codes = _subset_codes(draws, subsets)
        n = len(draws)
        checkpoints = np.unique(np.geomspace(10, n, 25).astype(int))
        errors = [eq12_error(_subset_tables(codes[:c], k), truth) for c in checkpoints]
        name = "exact" if method == "exact" else f"eps={eps}"
        curves[name] = (times[checkpoints - 1], terms[checkpoints - 1], np.array(errors))
        # Error at common CPU times and term budgets, for side-by-side reading.
        at, at_terms = {}, {}
        for t_probe in args.probe_seconds:
            j = int(np.searchsorted(times[checkpoints - 1], t_probe))
            if j < len(checkpoints):
                at[str(t_probe)] = round(errors[j], 4)
        for t_probe in args.probe_terms:
            j = int(np.searchsorted(terms[checkpoints - 1], t_probe))
            if j < len(checkpoints):
                at_terms[f"{t_probe:.0e}"] = round(errors[j], 4)
        _emit({"part": "error", "method": name, "epsilon": eps,
               "batch_size": args.batch_size,
               "scans": n, "cpu_seconds": round(float(times[-1]), 1),
               "wall_seconds": round(wall, 1),
               "cpu_seconds_per_scan": float(times[-1] / n),
               "terms_per_update": float(terms[-1] / (n * D)),
               "checkpoint_scans": checkpoints.tolist(),
               "checkpoint_cpu_seconds": np.round(times[checkpoints - 1], 3).tolist(),
               "checkpoint_terms": terms[checkpoints - 1].tolist(),
               "eq12_error": np.round(errors, 4).tolist(),
               "eq12_error_at_cpu_seconds": at,
               "eq12_error_at_terms": at_terms,
               "final_eq12_error": round(errors[-1], 4)}, out)
    return curves


def plot(prefix, conditionals, curves):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "k:", label="true probability")
    bins = np.linspace(0, 1, 11)
    for eps, (p_true, p_hat) in conditionals.items():
        idx = np.clip(np.digitize(p_true, bins) - 1, 0, 9)
        xs = [p_true[idx == b].mean() for b in range(10) if np.any(idx == b)]
        ys = [p_hat[idx == b].mean() for b in range(10) if np.any(idx == b)]
        ax.plot(xs, ys, "o-", ms=3, label=f"eps = {eps}")
    ax.set_xlabel("true conditional probability")
    ax.set_ylabel("empirical conditional probability")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}_conditionals.png", dpi=120)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, (t, terms, err) in curves.items():
        style = "k--" if name == "exact" else "-"
        axes[0].loglog(t, err, style, label=name)
        axes[1].loglog(terms, err, style, label=name)
    axes[0].set_xlabel("CPU time (s)")
    axes[1].set_xlabel("potential terms evaluated")
    for ax in axes:
        ax.set_ylabel("eq. (12) average L1 error")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}_error.png", dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-variables", type=int, default=100)
    ap.add_argument("--log-potential-sd", type=float, default=0.02)
    ap.add_argument("--subsets", type=int, default=1600, help="M in eq. (12)")
    ap.add_argument("--truth-chains", type=int, default=4)
    ap.add_argument("--truth-warmup", type=int, default=200)
    ap.add_argument("--truth-draws", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=45.0,
                    help="CPU-time budget of each Figure 8 chain")
    ap.add_argument("--probe-seconds", type=float, nargs="*", default=[2.0, 5.0, 10.0, 30.0])
    ap.add_argument("--probe-terms", type=float, nargs="*", default=[3e7, 1e8, 3e8, 1e9])
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--pairs-per-bin", type=int, default=10)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--n-jobs", type=int, default=1,
                    help="processes for the truth chains, the replays and the Figure 8 chains")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", nargs="*", default=["conditionals", "error"],
                    choices=["conditionals", "error"])
    ap.add_argument("--quick", action="store_true", help="small smoke run (~1 min)")
    ap.add_argument("--output", help="append the JSON lines to this file")
    ap.add_argument("--plot", help="PNG file prefix (needs matplotlib)")
    args = ap.parse_args()
    if args.quick:
        args.n_variables, args.truth_draws, args.truth_warmup = 30, 1500, 50
        args.seconds, args.pairs_per_bin, args.replays = 4.0, 3, 40
        args.subsets, args.batch_size = 200, 50
        args.probe_seconds, args.probe_terms = [0.5, 2.0], [1e6, 1e7]
    out = open(args.output, "a") if args.output else None
    t0 = time.perf_counter()
    mrf = BinaryMRF.random_triplet(args.n_variables, args.log_potential_sd,
                                   random_state=args.seed)
    rng = np.random.default_rng(args.seed + 10)
    subsets = np.array([rng.choice(args.n_variables, 5, replace=False)
                        for _ in range(args.subsets)])
    _emit({"part": "model", "n_variables": mrf.n_variables, "n_terms": mrf.n_terms,
           "terms_per_conditional": int(mrf.terms_per_variable[0]),
           "log_potential_sd": args.log_potential_sd, "subsets": args.subsets,
           "build_seconds": round(time.perf_counter() - t0, 2)}, out)
    truth, truth_draws = run_truth(mrf, args, subsets, out)
    conditionals = curves = None
    if "conditionals" in args.parts:
        conditionals = run_conditionals(mrf, truth_draws, args, rng, out)
    if "error" in args.parts:
        curves = run_error_curves(mrf, truth, subsets, args, out)
    if args.plot and conditionals is not None and curves is not None:
        plot(args.plot, conditionals, curves)
    _emit({"part": "done", "total_seconds": round(time.perf_counter() - t0, 1)}, out)


if __name__ == "__main__":
    main()
