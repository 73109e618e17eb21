"""Austerity MH against exact random-walk MH (Korattikara et al., 2014, §6.1).

Logistic regression with 50 parameters (``make_higgs_like`` with 49 features
plus an intercept), as in the paper's first experiment (Figures 2-3):

* ``decisions`` (the left panel of Figure 2): a short exact ``RandomWalkMH``
  run on ``--n`` rows gives its adapted proposal; at ``--n-decisions`` of its
  draws theta a proposal theta' and a uniform u are drawn, the exact MH
  decision is made on all the data, and the same (theta, theta', u) is
  replayed through ``austerity.sequential_test`` for every epsilon.  One JSON
  line per epsilon: mean (and median) fraction of the data per decision, the
  wrong-decision rate (with its binomial standard error), and the fraction of
  tests that stopped early.
* ``chains`` (Figure 2 right, Figure 3): exact ``RandomWalkMH`` and
  ``AusterityMH`` for a few epsilons with the same chains, warm-up and
  draws on ``--n-moments`` rows (10% more held out), and full-data HMC as the
  long exact reference.  One JSON line per sampler: wall and sampling seconds,
  mean data fraction per decision, acceptance, min bulk ESS, the largest
  |posterior-mean difference| / sd against exact MH and against HMC, the
  Monte Carlo noise level of those differences (largest
  sqrt(MCSE_a^2 + MCSE_b^2) / sd over parameters), the sd-ratio range against
  HMC, and the risk (mean squared error over held-out rows of the posterior
  predictive mean P(y=1 | x) from the draws so far, against HMC's) at a
  few points of the sampling wall-clock time (time per draw taken as
  constant after warm-up).  ``--plot PATH`` draws risk against time
  (needs matplotlib).

Random-walk MH in 50 dimensions has an inefficiency factor in the hundreds,
so the mean comparison needs long chains: the ``mc_noise`` columns say how
large a difference Monte Carlo error alone would produce.

    python benchmarks/bench_austerity.py             # n = 1e5 for both parts (~10 min)
    python benchmarks/bench_austerity.py --n-moments 20000 --n-draws 2000   # ~5 min
    python benchmarks/bench_austerity.py --parts chains --chain-epsilons 0.05 \
        --n-draws 15000                             # longer chains for the means (~6 min)
"""

import argparse
import json
import time
import warnings

import numpy as np
from scipy import linalg

from bayesian_subsample import HMC, AusterityMH, BayesianLogisticRegression, RandomWalkMH
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.diagnostics import mcse_mean
from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily
from bayesian_subsample.samplers.austerity import sequential_test

PRIOR_SCALE = 10.0  # BayesianLogisticRegression's default prior_scale and intercept scale


def _posterior(X, y):
    model = GLM(X, y.astype(np.float64), LogisticFamily(), sample_weight=None,
                fit_intercept=True)
    return TallPosterior(model, GaussianPrior(np.full(model.dim, PRIOR_SCALE)))


def _fit(sampler, X, y, n_chains, n_warmup, n_draws, n_jobs, seed):
    est = BayesianLogisticRegression(sampler=sampler, n_chains=n_chains, n_warmup=n_warmup,
                                     n_draws=n_draws, n_jobs=n_jobs, random_state=seed,
                                     prior_scale=PRIOR_SCALE,
                                     intercept_prior_scale=PRIOR_SCALE)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return est, time.perf_counter() - start, sorted({str(w.message)[:120] for w in caught})


def decisions(args):
    X, y, _ = make_higgs_like(n_samples=args.n, n_features=49, random_state=args.seed)
    post = _posterior(X, y)
    N = post.n_obs
    est, seconds, _ = _fit(RandomWalkMH(), X, y, 1, args.decision_warmup,
                           args.n_decisions, 1, args.seed)
    scale = float(est.step_size_[0])
    chol = scale * linalg.cholesky(est.inverse_mass_matrix_[0], lower=True)
    thetas = est._all_draws()[0]
    expansion = post.expand(est.reference_point_[0], 2)
    rng = np.random.default_rng(args.seed + 1)
    eps_list = [(e, cv) for cv in (False, True) for e in args.epsilons]
    used = {e: [] for e in eps_list}
    wrong = {e: 0 for e in eps_list}
    early = {e: 0 for e in eps_list}
    n_accept_exact = 0
    t0 = time.perf_counter()
    for theta in thetas:
        prop = theta + chol @ rng.standard_normal(len(theta))
        u = rng.random()
        mu0 = (np.log(u) + post.logprior(theta) - post.logprior(prop)) / N
        mu = (post.full_loglik(prop) - post.full_loglik(theta)) / N
        exact = bool(mu > mu0)
        n_accept_exact += exact
        for e, cv in eps_list:
            acc, n_used, stopped, _ = sequential_test(rng, post, theta, prop, mu0,
                                                      args.batch_size, e,
                                                      expansion if cv else None)
            used[e, cv].append(n_used / N)
            wrong[e, cv] += int(acc != exact)
            early[e, cv] += int(stopped)
    k = len(thetas)
    for e in eps_list:
        rate = wrong[e] / k
        print(json.dumps({
            "part": "decisions", "n": N, "dim": post.dim, "batch_size": args.batch_size,
            "epsilon": e[0], "control_variates": e[1], "n_decisions": k,
            "mean_data_fraction": round(float(np.mean(used[e])), 4),
            "median_data_fraction": round(float(np.median(used[e])), 4),
            "wrong_decision_rate": round(rate, 4),
            "wrong_decision_se": round(float(np.sqrt(max(rate * (1 - rate), 1.0 / k) / k)), 4),
            "stopped_early": round(early[e] / k, 4),
            "exact_accept_rate": round(n_accept_exact / k, 4),
            "proposal_scale": round(scale, 4),
            "exact_run_seconds": round(seconds, 1),
            "replay_seconds": round(time.perf_counter() - t0, 1),
        }), flush=True)
    return {e: float(np.mean(used[e])) for e in eps_list}


def chains(args):
    n = args.n_moments
    n_test = max(n // 10, 1000)
    X, y, _ = make_higgs_like(n_samples=n + n_test, n_features=49, random_state=args.seed)
    X_test, X, y = X[:n_test], X[n_test:], y[n_test:]
    common = (args.n_chains, args.n_warmup, args.n_draws, args.n_jobs, args.seed)
    hmc_est, hmc_sec, _ = _fit(HMC(), X, y, args.n_chains, 300, args.n_reference_draws,
                               args.n_jobs, args.seed)
    ref = hmc_est._all_draws()
    ref_mean, ref_sd = ref.mean(axis=(0, 1)), ref.std(axis=(0, 1))
    ref_mcse = np.atleast_1d(mcse_mean(ref))
    ref_pred = hmc_est.predict_proba(X_test)[:, 1]
    samplers = {"rwmh": RandomWalkMH()}
    for e in args.chain_epsilons:
        samplers[f"austerity_{e}"] = AusterityMH(epsilon=e, batch_size=args.batch_size)
        if args.plain:
            samplers[f"austerity_plain_{e}"] = AusterityMH(
                epsilon=e, batch_size=args.batch_size, control_variates=False)
    fits = {name: _fit(s, X, y, *common) for name, s in samplers.items()}
    ex = fits["rwmh"][0]._all_draws()
    ex_mean, ex_mcse = ex.mean(axis=(0, 1)), np.atleast_1d(mcse_mean(ex))
    Xt = np.column_stack([np.ones(n_test), X_test])
    curves = {}
    print(json.dumps({"part": "chains", "sampler": "hmc_reference", "n": X.shape[0],
                      "n_draws": args.n_reference_draws, "wall_seconds": round(hmc_sec, 1),
                      "min_ess_bulk": round(float(np.min(hmc_est.convergence_["ess_bulk"])),
                                            1)}), flush=True)
    rows = {}
    for name, (est, seconds, caught) in fits.items():
        draws = est._all_draws()
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
        mcse = np.atleast_1d(mcse_mean(draws))
        # Running posterior predictive mean over the pooled chains, draw by
        # draw (every ``thin``-th draw, to bound memory on long chains).
        thin = max(1, draws.shape[1] // 2000)
        kept = draws[:, thin - 1::thin]
        prob = 1.0 / (1.0 + np.exp(-np.einsum("cdk,tk->cdt", kept, Xt)))
        running = np.cumsum(prob.mean(axis=0), axis=0) / np.arange(1, kept.shape[1] + 1)[:, None]
        risk = np.mean((running - ref_pred) ** 2, axis=1)
        t_per_draw = est.wall_time_["sampling"] / args.n_chains / draws.shape[1]
        marks = np.unique(np.geomspace(10, kept.shape[1], 6).astype(int)) - 1
        curves[name] = (t_per_draw * thin * np.arange(1, kept.shape[1] + 1), risk)
        row = {
            "part": "chains", "sampler": name, "n": X.shape[0], "dim": draws.shape[2],
            "n_chains": args.n_chains, "n_draws": args.n_draws,
            "wall_seconds": round(seconds, 1),
            "sampling_seconds_per_chain": round(est.wall_time_["sampling"] / args.n_chains, 1),
            "mean_data_fraction": round(float(est.sample_stats_["data_fraction"].mean()), 4),
            "acceptance": round(float(est.sample_stats_["acceptance_rate"].mean()), 3),
            "min_ess_bulk": round(float(np.min(est.convergence_["ess_bulk"])), 1),
            "max_abs_dmean_over_sd_vs_rwmh": round(float(np.max(np.abs(mean - ex_mean)
                                                                / ref_sd)), 3),
            "mc_noise_vs_rwmh": round(float(np.max(np.sqrt(mcse**2 + ex_mcse**2) / ref_sd)), 3),
            "max_abs_dmean_over_sd_vs_hmc": round(float(np.max(np.abs(mean - ref_mean)
                                                               / ref_sd)), 3),
            "mc_noise_vs_hmc": round(float(np.max(np.sqrt(mcse**2 + ref_mcse**2) / ref_sd)),
                                     3),
            "sd_ratio_range_vs_hmc": [round(float((sd / ref_sd).min()), 3),
                                      round(float((sd / ref_sd).max()), 3)],
            "risk_vs_seconds": [[round(float(curves[name][0][i]), 2),
                                 float(f"{risk[i]:.3g}")] for i in marks],
            "warnings": caught,
        }
        rows[name] = row
        print(json.dumps(row), flush=True)
    if args.plot:
        _plot(curves, args.plot)
    return rows


def _plot(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for name, (t, risk) in curves.items():
        ax.loglog(t, risk, label=name)
    ax.set_xlabel("sampling wall-clock seconds per chain")
    ax.set_ylabel("risk of held-out predictive mean")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="rows for the decision replay")
    parser.add_argument("--n-moments", type=int, default=100_000,
                        help="rows for the chains (posterior means and risk)")
    parser.add_argument("--epsilons", type=float, nargs="+",
                        default=[0.0, 0.01, 0.05, 0.1, 0.2])
    parser.add_argument("--chain-epsilons", type=float, nargs="+", default=[0.01, 0.05, 0.1])
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--n-decisions", type=int, default=200)
    parser.add_argument("--decision-warmup", type=int, default=300)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=4000)
    parser.add_argument("--n-reference-draws", type=int, default=2000,
                        help="draws per chain of the full-data HMC reference")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--parts", nargs="+", default=["decisions", "chains"],
                        choices=["decisions", "chains"])
    parser.add_argument("--plain", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the paper's test without control variates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=None, help="save risk against time to this PNG")
    args = parser.parse_args(argv)
    fractions = decisions(args) if "decisions" in args.parts else {}
    rows = chains(args) if "chains" in args.parts else {}
    a = rows.get("austerity_0.05")
    print(json.dumps({
        "check": "epsilon=0.05: mean data fraction < 0.3 (decisions at n=--n) and posterior "
                 "means within 0.2 sd of exact MH (chains at n=--n-moments)",
        "data_fraction_0.05": fractions.get((0.05, True)),
        "data_fraction_0.05_plain": fractions.get((0.05, False)),
        "fraction_passed": (None if (0.05, True) not in fractions
                            else fractions[0.05, True] < 0.3),
        "means_passed": None if a is None else a["max_abs_dmean_over_sd_vs_rwmh"] < 0.2,
    }), flush=True)


if __name__ == "__main__":
    main()
