"""The simulated experiments of Chen, Fox and Guestrin (2014), Figures 1 and 3.

Runs this library's SG-HMC and SGLD kernels (``samplers.sghmc`` and
``samplers.sgld``, unit mass) on the paper's toy targets, with many
independent chains advanced at once (one flat position vector; every target
below is separable across chains), all started from exact draws.

* ``fig1``: the double well ``U(theta) = -2 theta^2 + theta^4`` with noisy
  gradient ``grad U + N(0, 4)`` (V = 4) and eps = 0.1.  SG-HMC (friction
  C = 3, ``B_hat = eps V / 2 = 0.2``, momentum resampled every L = 50 steps,
  as in ``tests/test_sg_samplers.py``), naive SG-HMC (no friction, no injected
  noise, momentum resampled every 50 steps: the paper's "naive stochastic
  gradient HMC (no MH)"), HMC with exact gradients and no MH (the paper's
  control), and SGLD with the same noisy gradient and step ``2 eps^2``
  (learning rate ``eta = eps^2`` of eq. 15, in this library's convention
  ``theta += (h/2) g + N(0, h)``).  Samples are recorded every 50 steps.
  One JSON line per method: total-variation distance and Kolmogorov-Smirnov
  statistic between the histogram of the samples and ``exp(-U)``, and the
  sample sd against the true one; ``exact_iid`` gives the distance of as
  many i.i.d. exact draws (the noise floor).
* ``fig3``: the bivariate Gaussian with unit variances and correlation 0.9,
  noisy gradient ``Sigma^{-1} theta + N(0, I)``.  For 5 step sizes per
  method (SG-HMC: eps with friction C = 1 and ``B_hat = eps / 2``, one update
  per sample; SGLD: step h), one JSON line: the autocorrelation time of the
  samples (the paper's ``1 + sum_s rho_s``, the larger over the two
  coordinates; ``IF = 1 + 2 sum_s rho_s`` is printed too) and the mean
  absolute error of the sample covariance over its 4 entries, from
  ``--chains x --fig3-steps`` samples (the paper uses 10^7).

    python benchmarks/bench_sghmc_paper.py              # ~3 min
    python benchmarks/bench_sghmc_paper.py --parts fig3 --chains 2000
"""

import argparse
import json
import time

import numpy as np
from scipy import integrate

from bayesian_subsample.diagnostics import inefficiency_factor
from bayesian_subsample.samplers import sghmc, sgld
from bayesian_subsample.samplers.metric import Metric


def _unit_metric(d):
    return Metric(np.ones(d), np.ones(d))


class _DoubleWell:
    """``-grad U`` of the double well plus N(0, noise_var) per coordinate."""

    n_obs_per_eval = 1
    subsample_size = 1

    def __init__(self, noise_var):
        self.noise_sd = float(np.sqrt(noise_var))

    def grad(self, position, rng):
        g = 4 * position - 4 * position**3
        if self.noise_sd:
            g = g + self.noise_sd * rng.standard_normal(position.shape)
        return g


class _CorrelatedGaussian:
    """``-Sigma^{-1} theta + N(0, I)`` for K chains stored as one flat vector (K x 2)."""

    n_obs_per_eval = 1
    subsample_size = 1

    def __init__(self, precision):
        self.precision = precision

    def grad(self, position, rng):
        g = -(position.reshape(-1, 2) @ self.precision).ravel()
        return g + rng.standard_normal(position.shape)


def _double_well_law():
    grid = np.linspace(-3.0, 3.0, 12001)
    dens = np.exp(2 * grid**2 - grid**4)
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0.0)
    cdf /= cdf[-1]
    sd = float(np.sqrt(integrate.trapezoid(grid**2 * dens, grid)
                       / integrate.trapezoid(dens, grid)))
    return (lambda x: np.interp(x, grid, cdf)), \
        (lambda rng, k: np.interp(rng.random(k), cdf, grid)), sd


def _distances(samples, cdf, edges):
    counts, _ = np.histogram(samples, bins=edges)
    p_hat = counts / len(samples)
    p = np.diff(cdf(edges))
    tv = 0.5 * float(np.abs(p_hat - p).sum() + max(0.0, 1.0 - p_hat.sum()))
    x = np.sort(samples)
    ecdf = np.arange(1, len(x) + 1) / len(x)
    ks = float(np.max(np.maximum(np.abs(ecdf - cdf(x)), np.abs(ecdf - 1 / len(x) - cdf(x)))))
    return round(tv, 4), round(ks, 4)


def fig1(args):
    cdf, exact, true_sd = _double_well_law()
    rng = np.random.default_rng(args.seed)
    K, T, L, eps, V = args.chains, args.fig1_transitions, 50, 0.1, 4.0
    edges = np.linspace(-2.5, 2.5, 51)
    metric = _unit_metric(K)
    noisy, clean = _DoubleWell(V), _DoubleWell(0.0)
    configs = {
        "sghmc": ("sghmc", noisy, 3.0, 0.5 * eps * V),
        "naive_sghmc": ("sghmc", noisy, 0.0, None),
        "hmc_exact_gradient_no_mh": ("sghmc", clean, 0.0, None),
        "sgld": ("sgld", noisy, None, None),
    }
    iid = exact(rng, K * T)
    tv, ks = _distances(iid, cdf, edges)
    print(json.dumps({"figure": 1, "method": "exact_iid", "n_samples": K * T,
                      "tv_distance": tv, "ks_statistic": ks,
                      "sd_ratio": round(float(iid.std() / true_sd), 4)}), flush=True)
    for name, (kind, target, friction, b_hat) in configs.items():
        t0 = time.perf_counter()
        pos = exact(rng, K)
        out = np.empty((T, K))
        if kind == "sghmc":
            params, clipped = sghmc.make_params(
                eps, L, metric, np.full(K, friction),
                None if b_hat is None else np.full(K, b_hat), resample_momentum=True)
            state = sghmc.init(pos)
            n_div = 0
            for t in range(T):
                state, info = sghmc.step(rng, state, target, params)
                n_div += int(info.is_divergent)
                out[t] = state.position
        else:
            params = sgld.SGLDParams(2 * eps * eps, metric)
            state = sgld.init(pos)
            n_div = 0
            for t in range(T):
                for _ in range(L):
                    state, info = sgld.step(rng, state, target, params)
                    n_div += int(info.is_divergent)
                out[t] = state.position
        samples = out.ravel()
        tv, ks = _distances(samples, cdf, edges)
        print(json.dumps({
            "figure": 1, "method": name,
            "step_size": round(eps if kind == "sghmc" else 2 * eps**2, 4),
            "friction": friction, "noise_estimate": b_hat, "n_samples": samples.size,
            "steps_per_sample": L, "tv_distance": tv, "ks_statistic": ks,
            "sd_ratio": round(float(samples.std() / true_sd), 4),
            "n_divergent": n_div, "seconds": round(time.perf_counter() - t0, 1),
        }), flush=True)


def fig3(args):
    rho = 0.9
    Sigma = np.array([[1.0, rho], [rho, 1.0]])
    P = np.linalg.inv(Sigma)
    rng = np.random.default_rng(args.seed + 1)
    K, T = args.chains, args.fig3_steps
    chol = np.linalg.cholesky(Sigma)
    target = _CorrelatedGaussian(P)
    metric = _unit_metric(2 * K)
    settings = [("sghmc", e) for e in args.sghmc_steps] + [("sgld", h) for h in args.sgld_steps]
    for kind, step in settings:
        t0 = time.perf_counter()
        pos = (rng.standard_normal((K, 2)) @ chol.T).ravel()
        out = np.empty((T, 2 * K))
        if kind == "sghmc":
            params, _ = sghmc.make_params(step, 1, metric, 1.0, 0.5 * step)
            state = sghmc.init(pos, rng.standard_normal(2 * K))
        else:
            params = sgld.SGLDParams(step, metric)
            state = sgld.init(pos)
        kernel = sghmc if kind == "sghmc" else sgld
        n_div = 0
        for t in range(T):
            state, info = kernel.step(rng, state, target, params)
            n_div += int(info.is_divergent)
            out[t] = state.position
        draws = out.reshape(T, K, 2).transpose(1, 0, 2)           # (chain, draw, 2)
        flat = draws.reshape(-1, 2)
        cov = np.cov(flat, rowvar=False)
        ineff = np.atleast_1d(inefficiency_factor(draws))
        print(json.dumps({
            "figure": 3, "method": kind, "step_size": step, "n_samples": K * T,
            "autocorrelation_time": round(float((ineff.max() + 1) / 2), 2),
            "inefficiency_factor": round(float(ineff.max()), 2),
            "cov_mean_abs_error": round(float(np.mean(np.abs(cov - Sigma))), 4),
            "sample_cov": np.round(cov, 4).tolist(),
            "n_divergent": n_div, "seconds": round(time.perf_counter() - t0, 1),
        }), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["fig1", "fig3"],
                        choices=["fig1", "fig3"])
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--fig1-transitions", type=int, default=200,
                        help="samples per chain in fig1 (50 steps each)")
    parser.add_argument("--fig3-steps", type=int, default=10_000,
                        help="samples per chain in fig3")
    parser.add_argument("--sghmc-steps", type=float, nargs="+",
                        default=[0.05, 0.1, 0.15, 0.2, 0.25])
    parser.add_argument("--sgld-steps", type=float, nargs="+",
                        default=[0.02, 0.04, 0.06, 0.08, 0.1])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if "fig1" in args.parts:
        fig1(args)
    if "fig3" in args.parts:
        fig3(args)


if __name__ == "__main__":
    main()
