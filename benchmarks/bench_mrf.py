"""Approximate Gibbs sampling on a dense triplet MRF (Korattikara et al., 2014, §6.3).

The model is ``BinaryMRF.random_triplet(100)``: 100 binary variables, a 2x2x2
potential table on every one of the 161,700 triples with i.i.d. normal
log-entries of sd 0.02 (see ``bayesian_subsample.models._mrf`` for why sd and
not variance), so each Gibbs conditional is a sum over 4,851 pair terms
(eq. 11).  Four parts, one JSON line per result:

* ``truth``: exact systematic-scan Gibbs chains (``--truth-chains`` of
  ``--truth-draws`` scans, run in lockstep as two independent tasks); their
  pooled draws give the reference joint distribution on ``M = 1600`` random
  5-variable subsets.  The line reports the chains' max split R-hat and min
  bulk ESS over variables, and the eq. (12) distance between the two tasks'
  tables (the Monte Carlo noise floor of the reference).
* ``conditionals`` (Figure 7): (x, i) pairs taken from the truth draws and
  stratified over the exact conditional probability ``p = P(x_i = 1 | x_-i)``;
  each pair's update is replayed ``--replays`` times with fresh ``u`` and
  reading orders through ``samplers.gibbs.decide`` for every epsilon.  Per
  epsilon: the largest and mean ``|p_hat - p|`` over pairs, with the
  binomial standard error of ``p_hat``, and the mean terms per decision.
* ``cost``: the per-scan CPU cost of each method measured side by side in
  one process (one lockstep scan of each method in turn, ``--cost-scans``
  rounds), with terms per update and ns per term: the ratios to exact
  Gibbs are robust to a changing machine load.
* ``error`` (Figure 8): for exact Gibbs and each epsilon in
  {0.01, 0.05, 0.1, 0.15, 0.2, 0.25} (mini-batches of 500 terms),
  ``--chains`` systematic-scan chains from the same random starts run in
  lockstep in one process (``gibbs.step_chains``) for ``--seconds`` of CPU
  time (``time.process_time``: the machine may be shared); after every scan
  the eq. (12) error ``(1/M) sum_m || P_hat(X_{s_m}) - P(X_{s_m}) ||_1`` of
  all chains' draws so far (its bookkeeping excluded from the clock), with
  the CPU seconds and the potential terms evaluated up to then.  Each line
  also reports CPU ms per chain and scan (and relative to exact), terms per
  update, ns per term, and the CPU ms per scan of the one-chain kernel
  (``gibbs.step``) for comparison.

``--backend numba`` runs the truth and Figure 8 chains with the compiled
scan (``GibbsParams.backend``: the same decisions as numpy, exact and
approximate updates paying about the same per term); ``--cost-backends
numpy numba`` times both kernels side by side in the cost part (with
``speedup_over_numpy``).  The kernel is compiled before any clock starts.

    python benchmarks/bench_mrf.py --n-jobs 2 --output mrf.jsonl --plot mrf  # ~6 CPU-min
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


def _block_size_arg(value):
    return value if value == "auto" else int(value)


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


def _tables_of(draws, subsets):
    """Joint tables (M, 2**k) of the subsets pooled over draws (n_chains, n_draws, D)."""
    k = subsets.shape[1]
    M = len(subsets)
    counts = np.zeros(M * 2 ** k)
    for c in range(0, draws.shape[0], 64):  # bounded memory
        codes = _subset_codes(draws[c:c + 64].reshape(-1, draws.shape[-1]), subsets)
        counts += np.bincount((codes + (np.arange(M) * 2 ** k)[None, :]).ravel(),
                              minlength=M * 2 ** k)
    return counts.reshape(M, 2 ** k) / (draws.shape[0] * draws.shape[1])


def run_truth(mrf, args, subsets, out):
    """Reference joint tables from exact Gibbs chains in lockstep (two independent halves)."""
    t0 = time.perf_counter()
    n_tasks = 2
    res = GibbsSampler(n_chains=args.truth_chains, n_warmup=args.truth_warmup,
                       n_draws=args.truth_draws, random_state=args.seed + 1,
                       chains_per_task=-(-args.truth_chains // n_tasks),
                       backend=args.backend, n_jobs=args.n_jobs).sample(mrf)
    wall = time.perf_counter() - t0
    truth = _tables_of(res.draws, subsets)
    half = args.truth_chains // 2  # the two tasks: independent of each other
    first = _tables_of(res.draws[:half], subsets)
    second = _tables_of(res.draws[half:], subsets)
    diag = res.diagnostics()
    _emit({"part": "truth", "backend": args.backend, "chains": args.truth_chains, "draws": args.truth_draws,
           "warmup": args.truth_warmup, "wall_seconds": round(wall, 1),
           "task_wall_seconds_summed": round(res.wall_time["warmup"]
                                             + res.wall_time["sampling"], 1),
           "max_split_rhat": float(np.nanmax(diag["r_hat"])),
           "min_ess_bulk": float(np.nanmin(diag["ess_bulk"])),
           "median_ess_bulk": float(np.nanmedian(diag["ess_bulk"])),
           "half_vs_half_eq12": eq12_error(first, second),
           "note": "half_vs_half_eq12: chains of one task vs the other's (independent)",
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


def _one_chain_timing(mrf, method, eps, batch_size, seconds, seed, block_size="auto",
                      backend="numpy"):
    """CPU seconds per scan of the one-chain kernel (gibbs.step), for reference."""
    params = gibbs.GibbsParams(method, "systematic", eps, batch_size, block_size, backend)
    _warm_up(mrf, params)
    rng = np.random.default_rng(seed)
    state = gibbs.init(rng.integers(0, 2, mrf.n_variables))
    n = terms = 0
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        state, info = gibbs.step(rng, state, mrf, params)
        n += 1
        terms += info.n_terms_evaluated
    return (time.process_time() - t0) / n, terms / (n * mrf.n_variables)


def _warm_up(mrf, params):
    """Compile the numba kernel (if used) before any clock starts."""
    if params.backend != "numpy":
        X = np.zeros((2, mrf.n_variables), dtype=np.int8)
        gibbs.step_chains(np.random.default_rng(0), X, mrf, params)


def _error_run(mrf, X0, subsets, truth, method, eps, batch_size, seconds, seed,
               block_size="auto", backend="numpy"):
    """One Figure 8 run: K chains in lockstep for ``seconds`` of CPU time.

    After every lockstep scan: the CPU seconds, the terms evaluated (all
    chains) and the eq. (12) error of the pooled draws so far.
    """
    params = gibbs.GibbsParams(method, "systematic", eps, batch_size, block_size, backend)
    _warm_up(mrf, params)
    rng = np.random.default_rng(seed)
    K = len(X0)
    k = subsets.shape[1]
    M = len(subsets)
    offsets = (np.arange(M) * 2 ** k)[None, :]
    counts = np.zeros(M * 2 ** k)
    per_chain = np.zeros((K, M * 2 ** k), dtype=np.int32)  # each chain's own tables
    chain_rows = np.arange(K)[:, None]
    truth_flat = truth.ravel()
    X = X0.copy()
    times, terms, errors, changed, chain_errors = [], [], [], [], []
    total_terms = n = 0
    bench = 0.0  # CPU seconds spent on the error bookkeeping (excluded)
    t0, w0 = time.process_time(), time.perf_counter()
    while True:
        X, info = gibbs.step_chains(rng, X, mrf, params)
        now = time.process_time() - t0 - bench
        b0 = time.process_time()
        n += 1
        total_terms += int(info.n_terms_evaluated.sum())
        changed.append(float(info.n_changed.mean()))
        cells = _subset_codes(X, subsets) + offsets
        counts += np.bincount(cells.ravel(), minlength=M * 2 ** k)
        per_chain[chain_rows, cells] += 1  # one cell per subset: no repeated index in a row
        times.append(now)
        terms.append(total_terms)
        errors.append(eq12_error(counts.reshape(M, 2 ** k) / (n * K), truth))
        # eq. (12) of each chain's own draws, averaged over chains (the paper's one-chain view)
        chain_errors.append(float(np.abs(per_chain / n - truth_flat).sum() / (K * M)))
        bench += time.process_time() - b0
        if now >= seconds:
            break
    return (np.array(times), np.array(terms), np.array(errors), float(np.mean(changed)),
            time.perf_counter() - w0, np.array(chain_errors))


def run_error_curves(mrf, truth, subsets, args, out):
    """Figure 8: eq. (12) error against CPU time for exact Gibbs and each epsilon.

    Each method runs ``--chains`` chains in lockstep in one process from the
    same random starts, for ``--seconds`` of its own CPU time (the methods
    run in parallel processes, ``--n-jobs``; each is timed by its own CPU
    clock).  The error is that of the draws of all chains pooled.
    """
    D = mrf.n_variables
    run_seed = args.seed if args.run_seed is None else args.run_seed
    X0 = np.random.default_rng(run_seed + 2).integers(0, 2, (args.chains, D)).astype(np.int8)
    bs = _block_size_arg(args.block_size)
    methods = ([("exact", 0.0, "auto")] + [("approximate", eps, bs) for eps in EPSILONS]
               + [("approximate", eps, int(b)) for b in args.extra_block_sizes
                  for eps in args.extra_epsilons])
    runs = Parallel(n_jobs=args.n_jobs)(
        delayed(_error_run)(mrf, X0, subsets, truth, method, eps, args.batch_size,
                            args.seconds, run_seed + 3, b, args.backend)
        for method, eps, b in methods)
    one_chain = Parallel(n_jobs=args.n_jobs)(
        delayed(_one_chain_timing)(mrf, method, eps, args.batch_size, args.one_chain_seconds,
                                   args.seed + 5, b, args.backend)
        for method, eps, b in methods) if args.one_chain_seconds > 0 else \
        [(None, None)] * len(methods)
    curves = {}
    exact_per_scan = None
    for (method, eps, b), (times, terms, errors, flips, wall, chain_errors), (oc_scan, _) in zip(
            methods, runs, one_chain):
        b_used = 1 if method == "exact" else gibbs.block_size_for(
            mrf, 0, gibbs.GibbsParams(method, "systematic", eps, args.batch_size, b))
        name = "exact" if method == "exact" else (
            f"eps={eps}" if b == bs else f"eps={eps},b={b_used}")
        curves[name] = (times, terms, errors)
        n = len(times)
        per_chain_scan = float(times[-1] / (n * args.chains))
        if method == "exact":
            exact_per_scan = per_chain_scan
        at, at_terms, at_chain = {}, {}, {}
        for t_probe in args.probe_seconds:
            j = int(np.searchsorted(times, t_probe))
            if j < n:
                at[str(t_probe)] = round(float(errors[j]), 4)
        for t_probe in args.probe_chain_ms:
            # CPU time per chain: the run's time divided by the chains.
            j = int(np.searchsorted(times / args.chains, t_probe / 1e3))
            if j < n:
                at_chain[str(t_probe)] = round(float(chain_errors[j]), 4)
        for t_probe in args.probe_terms:
            j = int(np.searchsorted(terms, t_probe))
            if j < n:
                at_terms[f"{t_probe:.0e}"] = round(float(errors[j]), 4)
        tpu = float(terms[-1] / (n * args.chains * D))
        checkpoints = np.unique(np.geomspace(1, n, 30).astype(int)) - 1
        _emit({"part": "error", "method": name, "epsilon": eps, "backend": args.backend,
               "run_seed": run_seed,
               "batch_size": args.batch_size, "block_size": b_used, "chains": args.chains,
               "scans_per_chain": n, "cpu_seconds": round(float(times[-1]), 1),
               "wall_seconds": round(wall, 1),
               "cpu_ms_per_chain_scan": round(1e3 * per_chain_scan, 3),
               "relative_to_exact": round(per_chain_scan / exact_per_scan, 3),
               "terms_per_update": round(tpu, 1),
               "terms_fraction": round(tpu / float(mrf.terms_per_variable.mean()), 3),
               "ns_per_term": round(1e9 * float(times[-1]) / float(terms[-1]), 2),
               "flips_per_scan": round(flips, 2),
               "one_chain_kernel_cpu_ms_per_scan": None if oc_scan is None
               else round(1e3 * oc_scan, 2),
               "checkpoint_cpu_seconds": np.round(times[checkpoints], 3).tolist(),
               "checkpoint_terms": terms[checkpoints].tolist(),
               "eq12_error": np.round(errors[checkpoints], 4).tolist(),
               "eq12_error_at_cpu_seconds": at,
               "eq12_error_at_terms": at_terms,
               "per_chain_eq12_error": np.round(chain_errors[checkpoints], 4).tolist(),
               "per_chain_eq12_error_at_cpu_ms_per_chain": at_chain,
               "final_eq12_error": round(float(errors[-1]), 4)}, out)
    return curves


def run_costs(mrf, args, out):
    """Per-scan cost side by side: one lockstep scan of each method in turn, in one process.

    ``--chains`` chains from the same starts (after ``--cost-warmup`` exact
    scans, so the tests see typical states), ``--cost-scans`` rounds of one
    scan per method; each method's CPU time (``time.process_time``) is
    summed over its scans.  Interleaving makes the ratios robust to a
    machine whose load changes during the run.
    """
    D = mrf.n_variables
    rng = np.random.default_rng(args.seed + 20)
    X0 = rng.integers(0, 2, (args.chains, D)).astype(np.int8)
    for _ in range(args.cost_warmup):
        X0, _ = gibbs.step_chains(rng, X0, mrf, gibbs.GibbsParams(backend=args.backend))
    bs = _block_size_arg(args.block_size)
    methods = ([("exact", 0.0, "auto")] + [("approximate", eps, bs) for eps in EPSILONS]
               + [("approximate", eps, int(b)) for b in args.extra_block_sizes
                  for eps in args.extra_epsilons])
    backends = args.cost_backends or [args.backend]
    methods = [(m, eps, b, be) for be in backends for m, eps, b in methods]
    params = [gibbs.GibbsParams(m, "systematic", eps, args.batch_size, b, be)
              for m, eps, b, be in methods]
    for p in params:
        _warm_up(mrf, p)
    states = [X0.copy() for _ in methods]
    rngs = [np.random.default_rng(args.seed + 21) for _ in methods]
    cpu = np.zeros(len(methods))
    terms = np.zeros(len(methods))
    for _ in range(args.cost_scans):
        for k, p in enumerate(params):
            t0 = time.process_time()
            states[k], info = gibbs.step_chains(rngs[k], states[k], mrf, p)
            cpu[k] += time.process_time() - t0
            terms[k] += info.n_terms_evaluated.sum()
    n = args.cost_scans * args.chains
    exact_cpu = {be: c for (m, _, _, be), c in zip(methods, cpu) if m == "exact"}
    numpy_cpu = {(m, eps, b): c for (m, eps, b, be), c in zip(methods, cpu) if be == "numpy"}
    for (method, eps, b, be), p, c, t in zip(methods, params, cpu, terms):
        b_used = 1 if method == "exact" else gibbs.block_size_for(mrf, 0, p)
        _emit({"part": "cost", "method": "exact" if method == "exact" else
               f"eps={eps},b={b_used}", "backend": be, "epsilon": eps, "block_size": b_used,
               "chains": args.chains, "scans": args.cost_scans,
               "cpu_ms_per_chain_scan": round(1e3 * c / n, 3),
               "relative_to_exact": round(c / exact_cpu[be], 3),
               "speedup_over_numpy": (round(numpy_cpu[(method, eps, b)] / c, 2)
                                      if (method, eps, b) in numpy_cpu else None),
               "terms_per_update": round(t / (n * D), 1),
               "ns_per_term": round(1e9 * c / t, 2)}, out)


def plot(prefix, conditionals, curves):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if conditionals is not None:
        _plot_conditionals(plt, prefix, conditionals)
    if curves is not None:
        _plot_curves(plt, prefix, curves)


def _plot_conditionals(plt, prefix, conditionals):
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


def _plot_curves(plt, prefix, curves):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, (t, terms, err) in curves.items():
        style = "k--" if name == "exact" else "-"
        axes[0].loglog(t, err, style, label=name)
        axes[1].loglog(terms, err, style, label=name)
    axes[0].set_xlabel("CPU time of the lockstep run (s)")
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
    ap.add_argument("--truth-chains", type=int, default=512,
                    help="exact chains of the reference, run as two lockstep tasks")
    ap.add_argument("--truth-warmup", type=int, default=100)
    ap.add_argument("--truth-draws", type=int, default=200)
    ap.add_argument("--chains", type=int, default=256,
                    help="chains run in lockstep in each Figure 8 run")
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="CPU-time budget of each Figure 8 run")
    ap.add_argument("--one-chain-seconds", type=float, default=3.0,
                    help="CPU seconds timing the one-chain kernel per method (0: skip)")
    ap.add_argument("--probe-seconds", type=float, nargs="*",
                    default=[2.0, 5.0, 10.0, 20.0, 40.0])
    ap.add_argument("--probe-terms", type=float, nargs="*", default=[1e9, 3e9, 1e10, 3e10])
    ap.add_argument("--probe-chain-ms", type=float, nargs="*", default=[5, 10, 20, 50, 100],
                    help="CPU ms per chain at which to report each chain's own eq. (12) error")
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--block-size", default="auto",
                    help='terms per sampled block of the approximate runs ("auto" or an int)')
    ap.add_argument("--extra-block-sizes", type=int, nargs="*", default=[],
                    help="also run --extra-epsilons with these block sizes (1: single terms)")
    ap.add_argument("--extra-epsilons", type=float, nargs="*", default=[0.01, 0.05])
    ap.add_argument("--pairs-per-bin", type=int, default=10)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--n-jobs", type=int, default=1,
                    help="processes for the truth chains, the replays and the Figure 8 chains")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-seed", type=int, default=None,
                    help="seed of the Figure 8 runs' starts and generators (default: --seed); "
                         "another value repeats them on the same model and reference")
    ap.add_argument("--parts", nargs="*", default=["conditionals", "error"],
                    choices=["conditionals", "error", "cost"])
    ap.add_argument("--cost-scans", type=int, default=10,
                    help="rounds of one scan per method in the side-by-side cost part")
    ap.add_argument("--cost-warmup", type=int, default=10)
    ap.add_argument("--backend", default="numpy", choices=["numpy", "numba"],
                    help="Gibbs kernel of the truth and Figure 8 runs (numba: the compiled "
                         "scan, same decisions, needs numba)")
    ap.add_argument("--cost-backends", nargs="*", choices=["numpy", "numba"], default=None,
                    help="kernels timed side by side in the cost part (default: --backend)")
    ap.add_argument("--quick", action="store_true", help="small smoke run (~1 min)")
    ap.add_argument("--output", help="append the JSON lines to this file")
    ap.add_argument("--plot", help="PNG file prefix (needs matplotlib)")
    args = ap.parse_args()
    if args.quick:
        args.n_variables, args.truth_draws, args.truth_warmup = 30, 300, 50
        args.truth_chains, args.chains, args.one_chain_seconds = 64, 32, 0.5
        args.seconds, args.pairs_per_bin, args.replays = 4.0, 3, 40
        args.subsets, args.batch_size = 200, 50
        args.probe_seconds, args.probe_terms = [0.5, 2.0], [1e6, 1e7]
        args.probe_chain_ms = [5, 20]
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
    if "cost" in args.parts:
        run_costs(mrf, args, out)
        if args.parts == ["cost"]:
            return
    truth, truth_draws = run_truth(mrf, args, subsets, out)
    conditionals = curves = None
    if "conditionals" in args.parts:
        conditionals = run_conditionals(mrf, truth_draws, args, rng, out)
    if "error" in args.parts:
        curves = run_error_curves(mrf, truth, subsets, args, out)
    if args.plot:
        plot(args.plot, conditionals, curves)
    _emit({"part": "done", "total_seconds": round(time.perf_counter() - t0, 1)}, out)


if __name__ == "__main__":
    main()
