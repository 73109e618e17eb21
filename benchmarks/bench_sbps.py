"""BPS, SBPS and pSBPS against full-data HMC and SGLD (Pakman et al., 2017, §7.1-7.2).

Three parts, one JSON line per method (or per setting):

* ``sec7.1``: logistic regression with d = 20, N = 1000, true weights
  U[-5, 5], Gaussian features with one variance 6, no intercept, k = 3,
  n = 100.  SBPS, pSBPS, SGLD (plain minibatch gradient, identity metric, two
  step sizes 0.2 / lambda_max and 0.02 / lambda_max) and full-data HMC, same
  chains and draws.  Per method: negative log-likelihood per data point of
  the draws (mean, against the MAP's plus the Laplace expectation
  d / (2N)), the NLL per point after 1, 3, 10 and 30 data passes from a
  common random start (SBPS and SGLD), the largest |mean difference| / sd and
  the sd ratios against HMC, and the lag-1 autocorrelation and ESS per 1000
  data passes of the projections on the largest- and smallest-variance
  eigenvectors of the HMC covariance.  SGLD makes 100 updates (10 data
  passes) per stored draw, about the data cost of an SBPS draw.
* ``sec7.2``: E[sin((w_1 - w_hat_1) / r)] from SBPS runs on the same
  posterior, continuous (eq. 19, integrated exactly along each segment) and
  discrete (the path read at equally spaced times, as many as events), as
  r / b varies (b the mean segment length between velocity changes); mean
  absolute value and the spread over runs (the spread is the error: the
  Laplace expectation 0 holds only approximately on this skewed posterior).
* ``higgs``: make_higgs_like with n = 10^5 (29 features + intercept): SBPS,
  pSBPS and BPS against full-data HMC: largest |mean difference| / HMC sd
  (grid draws and continuous mean), sd-ratio range, violation rate, ESS,
  evaluations per draw and wall time.

    python benchmarks/bench_sbps.py                  # ~10 min on 2 cores
    python benchmarks/bench_sbps.py --parts sec7.1 sec7.2 --n-draws 500
"""

import argparse
import json
import math
import time
import warnings

import numpy as np

from bayesian_subsample import BPS, HMC, SBPS, SGLD, BayesianLogisticRegression, pSBPS
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.diagnostics import ess_bulk
from bayesian_subsample.likelihood import TallPosterior
from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily
from bayesian_subsample.samplers import sgld
from bayesian_subsample.samplers.bps import sample_velocity
from bayesian_subsample.samplers.metric import Metric


def _fit(sampler, X, y, args, fit_intercept=True, n_draws=None, n_warmup=None):
    est = BayesianLogisticRegression(sampler=sampler, n_chains=args.n_chains,
                                     n_warmup=n_warmup or args.n_warmup,
                                     n_draws=n_draws or args.n_draws, n_jobs=1,
                                     fit_intercept=fit_intercept, random_state=args.seed)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return est, time.perf_counter() - start


def _draws(est):
    return est._all_draws()


def _r(x, k=3):
    return None if x is None else round(float(x), k)


def _compare(draws, ref_mean, ref_sd):
    mean = draws.mean(axis=(0, 1))
    sd = draws.std(axis=(0, 1))
    return (float(np.max(np.abs(mean - ref_mean) / ref_sd)),
            [_r(np.min(sd / ref_sd)), _r(np.max(sd / ref_sd))])


def _nll_per_point(W, X, y):
    eta = W @ X.T
    return (np.logaddexp(0, eta) - y * eta).mean(axis=-1)


def _acf1(z):
    z = z - z.mean(axis=1, keepdims=True)
    return float(np.mean([(c[1:] @ c[:-1]) / (c @ c) for c in z]))


# --------------------------------------------------------------------- §7.1
def _sec71_data(seed, n=1000, d=20):
    rng = np.random.default_rng(seed)
    w = rng.uniform(-5, 5, d)
    scale = np.ones(d)
    scale[0] = math.sqrt(6.0)
    X = rng.standard_normal((n, d)) * scale
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ w))).astype(int)
    return X, y


class _FromStart(SBPS):
    """SBPS started at a given position (for the convergence traces only)."""

    start = None

    def _start(self, rng, expansion):
        return self.start.copy(), sample_velocity(rng, len(self.start))


def _sbps_trace(post, X, y, start, passes, seed):
    cfg = _FromStart(subsample_size=100)
    cfg.start = start
    prep = cfg.prepare(np.random.default_rng(seed), post)
    # Fine grid (1/50 of the default spacing) to resolve the transient.
    cfg.draw_interval = 0.02 * cfg._scales(prep.expansion)[1]
    res = cfg.run_chain(np.random.default_rng(seed + 1), post, prep, 0, 20000)
    cum = np.cumsum(res.stats["n_obs_evaluated"]) / post.n_obs
    nll = _nll_per_point(res.draws, X, y)
    return [_r(nll[min(np.searchsorted(cum, p), len(nll) - 1)], 4) for p in passes]


def _sgld_trace(post, X, y, start, passes, eps, seed):
    est = post.gradient_estimator(100)
    rng = np.random.default_rng(seed)
    metric = Metric(np.ones(post.dim), np.ones(post.dim))
    state = sgld.init(start)
    out, done = [], 0
    steps = {int(math.ceil(p * post.n_obs / 100)): p for p in passes}
    for it in range(1, max(steps) + 1):
        state, _ = sgld.step(rng, state, est, sgld.SGLDParams(eps, metric))
        if it in steps:
            out.append(_r(_nll_per_point(state.position[None], X, y)[0], 4))
            done += 1
    return out


def sec71(args):
    X, y = _sec71_data(args.seed)
    n, d = X.shape
    post = TallPosterior(GLM(X, y.astype(float), LogisticFamily(), fit_intercept=False),
                         GaussianPrior(np.full(d, 10.0)))
    w_hat, _ = post.mode()
    H = post.expand(w_hat).neg_hessian
    lam_max = float(np.linalg.eigvalsh(H)[-1])
    nll_map = float(_nll_per_point(w_hat[None], X, y)[0])
    ref, wall = _fit(HMC(), X, y, args, fit_intercept=False)
    ref_draws = _draws(ref)
    ref_mean, ref_sd = ref_draws.mean(axis=(0, 1)), ref_draws.std(axis=(0, 1))
    vals, vecs = np.linalg.eigh(np.cov(ref_draws.reshape(-1, d).T))
    directions = {"largest_var": vecs[:, -1], "smallest_var": vecs[:, 0]}
    start = np.random.default_rng(args.seed + 7).uniform(-5, 5, d)
    passes = [1, 3, 10, 30]
    methods = [
        ("hmc", ref, wall, None),
        ("sbps", *_fit(SBPS(subsample_size=100), X, y, args, False), "sbps"),
        ("psbps", *_fit(pSBPS(subsample_size=100), X, y, args, False), None),
        ("sgld_0.2", *_fit(SGLD(subsample_size=100, control_variates=False,
                                mass_matrix="identity", step_size=0.2 / lam_max,
                                n_steps_per_draw=100), X, y, args, False), 0.2 / lam_max),
        ("sgld_0.02", *_fit(SGLD(subsample_size=100, control_variates=False,
                                 mass_matrix="identity", step_size=0.02 / lam_max,
                                 n_steps_per_draw=100), X, y, args, False), 0.02 / lam_max),
    ]
    for name, est, wall, trace in methods:
        draws = _draws(est)
        dmean, sd_ratio = _compare(draws, ref_mean, ref_sd)
        n_draws_total = draws.shape[0] * draws.shape[1]
        passes_per_draw = est.evaluations_["sampling"] / n_draws_total / n
        nll = _nll_per_point(draws.reshape(-1, d), X, y)
        row = {"part": "sec7.1", "method": name, "wall_s": _r(wall, 1),
               "data_passes_per_draw": _r(passes_per_draw, 3),
               "nll_per_point_mean": _r(nll.mean(), 4),
               "nll_map_plus_laplace": _r(nll_map + d / (2 * n), 4),
               "max_abs_dmean_over_sd": _r(dmean), "sd_ratio_range": sd_ratio}
        for key, vec in directions.items():
            proj = draws @ vec
            row[f"acf1_{key}"] = _r(_acf1(proj))
            row[f"ess_per_1000_passes_{key}"] = _r(
                float(ess_bulk(proj)) / (passes_per_draw * n_draws_total) * 1000, 1)
        if name in ("sbps", "psbps"):
            info = est.sampler_info_
            row["violation_rate_per_time"] = _r(np.mean([i["violation_rate"] for i in info]), 4)
            row["violation_fraction"] = _r(np.mean([i["violation_fraction"] for i in info]), 5)
            cm = np.mean([i["continuous_mean"] for i in info], 0)
            row["continuous_max_abs_dmean_over_sd"] = _r(np.max(np.abs(cm - ref_mean) / ref_sd))
        if trace == "sbps":
            row["nll_after_passes"] = dict(zip(map(str, passes),
                                               _sbps_trace(post, X, y, start, passes, args.seed)))
        elif isinstance(trace, float):
            row["nll_after_passes"] = dict(zip(map(str, passes), _sgld_trace(
                post, X, y, start, passes, trace, args.seed)))
        print(json.dumps(row), flush=True)


# --------------------------------------------------------------------- §7.2
def _sin_integrals(ev, T, centre, r):
    """Continuous and grid estimates of E[sin((w_1 - centre) / r)] from the event list."""
    t, x, u = ev["time"], ev["position"][:, 0], ev["velocity"][:, 0]
    ends = np.append(t[1:], T)
    tau = ends - t
    a = (x - centre) / r
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.where(np.abs(u) * tau > 1e-12 * r,
                         -r / u * (np.cos(a + u * tau / r) - np.cos(a)),
                         tau * np.sin(a))
    cont = float(exact.sum() / T)
    grid = np.linspace(0, T, len(t) + 1)[1:]
    i = np.searchsorted(t, grid, side="right") - 1
    pos = x[i] + (grid - t[i]) * u[i]
    return cont, float(np.mean(np.sin((pos - centre) / r)))


def sec72(args):
    X, y = _sec71_data(args.seed)
    d = X.shape[1]
    post = TallPosterior(GLM(X, y.astype(float), LogisticFamily(), fit_intercept=False),
                         GaussianPrior(np.full(d, 10.0)))
    w_hat, _ = post.mode()
    runs = []
    for rep in range(args.n_runs_72):
        cfg = SBPS(subsample_size=100, max_stored_events=10 ** 7)
        prep = cfg.prepare(np.random.default_rng(100 + rep), post)
        res = cfg.run_chain(np.random.default_rng(200 + rep), post, prep, args.n_warmup,
                            args.n_draws)
        ev = res.extra["events"]
        assert not ev["truncated"]
        runs.append((ev, res.extra["trajectory_time"]))
    b = float(np.mean([T / (len(ev["time"])) for ev, T in runs]))
    for ratio in (0.01, 0.1, 1.0, 10.0):
        r = ratio * b
        est = np.array([_sin_integrals(ev, T, w_hat[0], r) for ev, T in runs])
        print(json.dumps({"part": "sec7.2", "r_over_b": ratio, "b": _r(b, 5),
                          "mean_abs_continuous": _r(np.mean(np.abs(est[:, 0])), 4),
                          "mean_abs_discrete": _r(np.mean(np.abs(est[:, 1])), 4),
                          "sd_over_runs_continuous": _r(np.std(est[:, 0], ddof=1), 4),
                          "sd_over_runs_discrete": _r(np.std(est[:, 1], ddof=1), 4),
                          "n_runs": len(runs)}), flush=True)


# -------------------------------------------------------------------- HIGGS
def higgs(args):
    X, y, _ = make_higgs_like(n_samples=args.n, random_state=args.seed)
    ref, wall = _fit(HMC(), X, y, args)
    ref_draws = _draws(ref)
    ref_mean, ref_sd = ref_draws.mean(axis=(0, 1)), ref_draws.std(axis=(0, 1))
    print(json.dumps({"part": "higgs", "method": "hmc", "n": args.n, "wall_s": _r(wall, 1),
                      "evals_per_draw": _r(ref.evaluations_["sampling"] / ref_draws.shape[0]
                                           / ref_draws.shape[1], 0),
                      "ess_bulk_min": _r(np.min(ess_bulk(ref_draws)), 0)}), flush=True)
    for name, sampler in [("sbps", SBPS()), ("psbps", pSBPS()), ("bps", BPS())]:
        if name not in args.higgs_methods:
            continue
        est, wall = _fit(sampler, X, y, args, n_draws=args.n_draws_pdmp,
                         n_warmup=args.n_warmup_pdmp)
        draws = _draws(est)
        dmean, sd_ratio = _compare(draws, ref_mean, ref_sd)
        info = est.sampler_info_
        cm = np.mean([i["continuous_mean"] for i in info], 0)
        csd = np.sqrt(np.mean([np.diag(i["continuous_cov"]) for i in info], 0))
        print(json.dumps({
            "part": "higgs", "method": name, "n": args.n, "wall_s": _r(wall, 1),
            "subsample_size": int(est.subsample_size_[0]),
            "evals_per_draw": _r(est.evaluations_["sampling"] / draws.shape[0]
                                 / draws.shape[1], 0),
            "ess_bulk_min": _r(np.min(ess_bulk(draws)), 0),
            "ess_bulk_median": _r(np.median(ess_bulk(draws)), 0),
            "max_abs_dmean_over_sd_grid": _r(dmean), "sd_ratio_range_grid": sd_ratio,
            "max_abs_dmean_over_sd_continuous": _r(np.max(np.abs(cm - ref_mean) / ref_sd)),
            "sd_ratio_range_continuous": [_r(np.min(csd / ref_sd)), _r(np.max(csd / ref_sd))],
            "violation_rate_per_time": _r(np.mean([i["violation_rate"] for i in info]), 4),
            "violation_fraction": _r(np.mean([i["violation_fraction"] for i in info]), 5),
            "bounces_per_draw": _r(est.sample_stats_["bounces"].mean(), 1),
        }), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["sec7.1", "sec7.2", "higgs"])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=200)
    parser.add_argument("--n-draws", type=int, default=1000)
    parser.add_argument("--n-warmup-pdmp", type=int, default=50,
                        help="warm-up draws of the PDMP samplers on HIGGS-like data")
    parser.add_argument("--n-draws-pdmp", type=int, default=300,
                        help="draws of the PDMP samplers on HIGGS-like data")
    parser.add_argument("--n-runs-72", type=int, default=5)
    parser.add_argument("--higgs-methods", nargs="+", default=["sbps", "psbps", "bps"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for part in args.parts:
        {"sec7.1": sec71, "sec7.2": sec72, "higgs": higgs}[part](args)


if __name__ == "__main__":
    main()
