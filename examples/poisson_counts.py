"""Poisson counts with exposure: HMC-ECS against full-data HMC, and held-out coverage.

Simulates event counts ``y ~ Poisson(e * exp(b + x^T w))`` observed over
exposures ``e`` (say, site-days), fits
:class:`~bayesian_subsample.BayesianPoissonRegressor` once with full-data HMC
and once with HMC-ECS (Dang et al., 2019; §6.8 names Poisson regression), and
prints for both: the posterior means and sds of the coefficients, fit time,
per-observation evaluations, and the empirical coverage of 90% posterior
predictive intervals on held-out rows, next to the probability the predictive
distribution itself gives those integer intervals (counts are discrete, so an
equal-tailed interval holds at least, not exactly, 90%).

Run ``python examples/poisson_counts.py --help`` for the options.
"""

import argparse
import time
import warnings

import numpy as np
from scipy.special import pdtr

from bayesian_subsample import HMC, BayesianPoissonRegressor


def make_counts(n, seed):
    """Features, exposures and counts from the model (true coefficients returned)."""
    rng = np.random.default_rng(seed)
    d = 5
    X = rng.standard_normal((n, d))
    X[:, 1] = 0.6 * X[:, 0] + 0.8 * X[:, 1]  # correlated features
    beta = np.array([0.4, -0.3, 0.2, 0.0, -0.15])
    intercept = 1.5
    exposure = rng.gamma(2.0, 1.0, n)  # e.g. site-days observed
    y = rng.poisson(exposure * np.exp(intercept + X @ beta)).astype(float)
    return X, y, exposure, intercept, beta


def predictive_content(reg, X, exposure, lower, upper, block=2000):
    """Mean over rows of P(lower <= Y <= upper) under the posterior predictive."""
    rates_b = reg.intercept_draws_.reshape(-1)
    rates_w = reg.coef_draws_.reshape(-1, X.shape[1])
    out = np.empty(len(X))
    for a in range(0, len(X), block):
        s = slice(a, a + block)
        rate = exposure[s, None] * np.exp(X[s] @ rates_w.T + rates_b)
        hi = pdtr(upper[s, None], rate).mean(1)
        lo = np.where(lower[s] > 0, pdtr(np.maximum(lower[s] - 1, 0)[:, None], rate).mean(1),
                      0.0)
        out[s] = hi - lo
    return float(out.mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=220_000,
                        help="rows of synthetic data, --n-test of them held out")
    parser.add_argument("--n-test", type=int, default=20_000)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=1000)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    X, y, e, b_true, w_true = make_counts(args.n, args.seed)
    t = args.n_test
    X_tr, y_tr, e_tr = X[:-t], y[:-t], e[:-t]
    X_te, y_te, e_te = X[-t:], y[-t:], e[-t:]
    print(f"{len(y_tr)} training rows, {t} held out; mean count {y.mean():.2f}, "
          f"mean exposure {e.mean():.2f}")
    print(f"true intercept {b_true}, true coef {w_true}")

    common = dict(n_chains=args.n_chains, n_warmup=args.n_warmup, n_draws=args.n_draws,
                  n_jobs=args.n_jobs, random_state=args.seed)
    fits = {}
    for name, sampler in (("hmc", HMC()), ("hmc_ecs", "hmc_ecs")):
        reg = BayesianPoissonRegressor(sampler=sampler, **common)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reg.fit(X_tr, y_tr, exposure=e_tr)
        seconds = time.perf_counter() - start
        lower, upper = reg.predict_interval(X_te, alpha=args.alpha, exposure=e_te)
        cover = float(np.mean((y_te >= lower) & (y_te <= upper)))
        content = predictive_content(reg, X_te, e_te, lower, upper)
        fits[name] = reg
        draws = reg._all_draws().reshape(-1, reg.coef_.size + 1)
        print(f"\n== {name}: {seconds:.1f} s, {reg.n_evaluations_:,} per-observation "
              f"evaluations, subsample size {reg.subsample_size_}, "
              f"max R-hat {reg.convergence_['r_hat'].max():.3f}, "
              f"min bulk ESS {reg.convergence_['ess_bulk'].min():.0f}"
              + ("" if not caught else f", {len(caught)} warning(s)"))
        print("   posterior mean:", np.round(draws.mean(0), 4))
        print("   posterior sd  :", np.round(draws.std(0), 4))
        print(f"   held-out {1 - args.alpha:.0%} intervals: empirical coverage {cover:.4f}, "
              f"predictive probability of the intervals {content:.4f}, "
              f"mean width {np.mean(upper - lower):.2f}")
    a, b = (fits[k]._all_draws().reshape(-1, 6) for k in ("hmc", "hmc_ecs"))
    print("\nHMC-ECS vs HMC: |mean difference| / HMC sd:",
          np.round(np.abs(b.mean(0) - a.mean(0)) / a.std(0), 3))
    print("                sd ratio:", np.round(b.std(0) / a.std(0), 3))
    evals = {k: fits[k].evaluations_["sampling"] / (args.n_chains * args.n_draws) for k in fits}
    print(f"evaluations per draw: HMC {evals['hmc']:,.0f}, HMC-ECS {evals['hmc_ecs']:,.0f} "
          f"({evals['hmc'] / evals['hmc_ecs']:.0f}x fewer)")


if __name__ == "__main__":
    main()
