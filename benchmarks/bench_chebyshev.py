"""Chebyshev against constant integration times (Wang and Wibisono, §4).

Reproduces the experiments of "Accelerating Hamiltonian Monte Carlo via
Chebyshev integration time" with this library's kernels (identity mass
matrix, fixed leapfrog step, Metropolis correction kept):

* ``gaussian``: N((0, 1), [[1, .5], [.5, 100]]) (§4.2, Table 2);
* ``mixture``: two Gaussians N(+-a, Sigma) in d = 10, a_i = sqrt(i / 2d),
  Sigma = diag(i / d) (§4.3, Table 3);
* ``logistic``: Bayesian logistic regression on scikit-learn's bundled
  breast-cancer data (standardised, prior N(0, I)) (§4.4, Table 4);

each with ``--repeats`` independent chains of ``--n-iter`` iterations per
method.  ``[m, L]`` are the extreme eigenvalues of the Hessian of the
potential (for the mixture, of its quadratic part as in the paper; for the
logistic model, at the posterior mode).  The constant baseline is the quarter
period of the stiffest direction, ``(pi/2)/sqrt(L)``; Chebyshev uses
``(pi/2)/sqrt(r_k)`` over a permuted cycle of ``K = n_iter`` roots (the time
scale of our Hamiltonian; see ``bayesian_subsample.samplers.chebyshev``).

Finally ``hmc_ecs`` measures what no published implementation has:
Chebyshev times inside HMC-ECS on HIGGS-like data, with the diagonal mass
matrix (with the default dense Hessian metric, ``m = L = 1`` and the two
schedules coincide).

Prints one JSON line per problem and method (mean and sd over repeats of
mean ESS, min ESS, ESS/s, min ESS per 1000 gradient evaluations and the
acceptance rate) and a ratio line per problem.

    python benchmarks/bench_chebyshev.py              # ~10 minutes
    python benchmarks/bench_chebyshev.py --problems gaussian --repeats 3
"""

import argparse
import json
import time
import warnings

import numpy as np

from bayesian_subsample.diagnostics import ess_bulk
from bayesian_subsample.samplers import hmc
from bayesian_subsample.samplers.chebyshev import chebyshev_times, constant_times
from bayesian_subsample.samplers.metric import metric_from_mass_matrix


class Quadratic:
    """N(mean, cov) as a differentiable target."""

    n_obs_per_eval = 1

    def __init__(self, mean, cov):
        self.mean = np.asarray(mean, float)
        self.prec = np.linalg.inv(cov)

    def logdensity_and_grad(self, x):
        r = x - self.mean
        g = -self.prec @ r
        return 0.5 * float(r @ g), g

    def hessian(self):
        return self.prec


class Mixture:
    """Equal mixture of N(a, Sigma) and N(-a, Sigma) (Wang and Wibisono, §4.3)."""

    n_obs_per_eval = 1

    def __init__(self, d=10):
        i = np.arange(1, d + 1)
        self.a = np.sqrt(i / (2 * d))
        self.prec = np.diag(d / i)
        self.b = self.prec @ self.a

    def logdensity_and_grad(self, x):
        r = x - self.a
        t = -2.0 * float(x @ self.b)
        f = 0.5 * float(r @ self.prec @ r) - np.logaddexp(0.0, t)
        grad_f = self.prec @ r + 2.0 * self.b / (1.0 + np.exp(-t))
        return -f, -grad_f

    def hessian(self):
        return self.prec


def _logistic_target():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    from bayesian_subsample.likelihood import TallPosterior
    from bayesian_subsample.models import GLM, GaussianPrior, LogisticFamily

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    model = GLM(X, y.astype(float), LogisticFamily(), fit_intercept=False)
    post = TallPosterior(model, GaussianPrior(np.ones(model.dim)))
    mode, _ = post.mode()
    target = post.full_target()
    target.n_obs_per_eval = 1  # count gradient evaluations, not rows
    hess = post.expand(mode).neg_hessian
    return target, mode, hess


def _run(target, x0, times, step_size, rng):
    metric = metric_from_mass_matrix(np.eye(len(x0)))
    state = hmc.init(x0, target)
    draws = np.empty((len(times), len(x0)))
    n_grad, acc = 0, 0.0
    for k, t in enumerate(times):
        n_steps = max(1, int(np.ceil(t / step_size - 1e-9)))
        state, info = hmc.step(rng, state, target, hmc.HMCParams(step_size, n_steps, metric))
        draws[k] = state.position
        n_grad += n_steps
        acc += info.acceptance_rate
    return draws, n_grad, acc / len(times)


def _summarise(problem, method, rows):
    out = {"problem": problem, "method": method, "repeats": len(rows)}
    for key in rows[0]:
        vals = np.array([r[key] for r in rows], dtype=float)
        out[key] = [round(float(vals.mean()), 4), round(float(vals.std()), 4)]
    return out


def kernel_problem(name, target, x0, hess, n_iter, repeats, step_scale, seed):
    ev = np.linalg.eigvalsh(hess)
    m, L = float(ev[0]), float(ev[-1])
    step_size = step_scale / np.sqrt(L)
    results = {}
    for method in ("constant", "chebyshev"):
        rows = []
        for r in range(repeats):
            rng = np.random.default_rng([seed, r])
            times = (constant_times(L, n_iter) if method == "constant"
                     else chebyshev_times(m, L, n_iter, rng))
            start = time.perf_counter()
            draws, n_grad, acc = _run(target, x0, times, step_size, rng)
            seconds = time.perf_counter() - start
            ess = np.atleast_1d(ess_bulk(draws[None, n_iter // 10:]))
            rows.append({"mean_ess": ess.mean(), "min_ess": ess.min(),
                         "mean_ess_per_s": ess.mean() / seconds,
                         "min_ess_per_s": ess.min() / seconds,
                         "min_ess_per_1000_grads": 1000 * ess.min() / n_grad,
                         "acceptance": acc, "grads_per_iter": n_grad / n_iter})
        results[method] = _summarise(name, method, rows)
        results[method].update({"m": m, "L": L, "step_size": step_size})
        print(json.dumps(results[method]), flush=True)
    c, k = results["constant"], results["chebyshev"]
    print(json.dumps({
        "problem": name, "ratio": "chebyshev / constant",
        "min_ess": round(k["min_ess"][0] / c["min_ess"][0], 2),
        "min_ess_per_s": round(k["min_ess_per_s"][0] / c["min_ess_per_s"][0], 2),
        "min_ess_per_1000_grads": round(
            k["min_ess_per_1000_grads"][0] / c["min_ess_per_1000_grads"][0], 2),
    }), flush=True)


def ecs_problem(n, repeats, seed):
    from bayesian_subsample import HMCECS, BayesianLogisticRegression
    from bayesian_subsample.datasets import make_higgs_like

    X, y, _ = make_higgs_like(n_samples=n, correlation=0.9, random_state=seed)
    results = {}
    for method in ("fixed", "quarter_period", "chebyshev"):
        rows = []
        for r in range(repeats):
            est = BayesianLogisticRegression(
                sampler=HMCECS(mass_matrix="diagonal", integration_time=method),
                n_chains=1, n_warmup=500, n_draws=1000, random_state=seed + r)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X, y)
            seconds = time.perf_counter() - start
            ess = est.convergence_["ess_bulk"]
            evals = est.evaluations_["sampling"]
            rows.append({"mean_ess": ess.mean(), "min_ess": ess.min(),
                         "min_ess_per_s": ess.min() / seconds,
                         "min_ess_per_1e6_evals": 1e6 * ess.min() / evals,
                         "acceptance": est.sample_stats_["acceptance_rate"].mean(),
                         "steps_per_iter": est.sample_stats_["n_steps"].mean()})
        results[method] = _summarise(f"hmc_ecs_n{n}", method, rows)
        print(json.dumps(results[method]), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+",
                        default=["gaussian", "mixture", "logistic", "hmc_ecs"])
    parser.add_argument("--n-iter", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if "gaussian" in args.problems:
        t = Quadratic([0.0, 1.0], [[1.0, 0.5], [0.5, 100.0]])
        kernel_problem("gaussian", t, np.array([0.0, 1.0]), t.hessian(), args.n_iter,
                       args.repeats, 0.05, args.seed)
    if "mixture" in args.problems:
        t = Mixture(10)
        kernel_problem("mixture", t, t.a.copy(), t.hessian(), args.n_iter, args.repeats,
                       0.05, args.seed)
    if "logistic" in args.problems:
        t, mode, hess = _logistic_target()
        kernel_problem("logistic_breast_cancer", t, mode, hess, args.n_iter, args.repeats,
                       0.1, args.seed)
    if "hmc_ecs" in args.problems:
        ecs_problem(100_000, max(1, args.repeats // 3), args.seed)


if __name__ == "__main__":
    main()
