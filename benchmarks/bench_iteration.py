"""HMC-ECS cost per iteration against the numpy floor of the same work, side by side.

One HMC-ECS iteration (Dang et al., 2019, Algorithm 1) with the perturbed
difference estimator (eqs. 4.1-4.7), ``m`` rows in ``G`` blocks and ``L``
leapfrog steps must at least do this (logistic regression, order-2 Taylor
control variates, one linear predictor per row):

* the block update of ``u`` (§3.3): one block number and ``m / G`` row
  indices, drawn (with their rows of ``X`` and ``y`` and their Taylor
  coefficients at theta*: ``eta*``, and the value, slope and half curvature
  of the log-likelihood in ``eta``) for ``prefetch`` proposals at a time as
  the estimator's proposal pool does, and copied into the cached ``m x d``
  subsample matrix and coefficient vectors;
* ``L + 1`` estimates of the log posterior and its gradient (one for the
  subsample update, one per leapfrog step), each: the forward product
  ``eta = Z theta``, the logistic log-likelihood and its ``eta``-derivative
  (``exp``, ``log1p``, the sigmoid), the control-variate residuals
  ``d_i = ell_i - q_i`` and their ``eta``-derivatives, the sum and the squared
  deviations of ``d`` (eq. 4.3), the backward product ``Z^T coef``
  (eq. 4.7), the population sum of the control variates (``O(d^2)``) and the
  Gaussian prior;
* the leapfrog arithmetic on ``d``-vectors and the momentum draw.

:func:`floor_iteration` does exactly these numpy operations, in the same
order, into preallocated buffers, with no Python layers: it is what a
hand-written loop for this one model would cost.  The benchmark times the
library's :func:`bayesian_subsample.samplers.hmc_ecs.step` on the same data,
subsample size, step size and L, interleaved with the floor in one process
with single-threaded BLAS (as the chains run), and prints one JSON line per
data size with the median ms per iteration of each and their ratio (median
over ``--repeats`` alternating rounds, which damps a shared machine's noise).

With numba installed the compiled kernel (``HMCECS(backend="numba")``,
:func:`bayesian_subsample.samplers._ecs_compiled.run_iterations`: the same
random numbers and decisions as the numpy kernel) is timed in the same
rounds on the same problem: ``numba_ms_per_iteration``, its ratio to the
numpy floor (below 1: the floor is interpreter-bound, the compiled loop is
not) and its speed-up over the numpy kernel.  It is compiled (or loaded
from numba's cache) before the clock starts.

    python benchmarks/bench_iteration.py                         # n = 1e5, 1e6, 1e7
    python benchmarks/bench_iteration.py --n 100000 --dtype float32
    python benchmarks/bench_iteration.py --profile 100000        # cProfile of the kernel

The floor gathers ``m / G`` rows per iteration, not ``m``: the block update
is part of the algorithm, so re-reading all ``m`` rows is not work it must do.
"""

import argparse
import json
import time

import numpy as np

from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.likelihood._full import TallPosterior
from bayesian_subsample.models._glm import GLM, LogisticFamily
from bayesian_subsample.models._prior import GaussianPrior
from bayesian_subsample.samplers import hmc, hmc_ecs
from bayesian_subsample.samplers.metric import metric_from_mass_matrix


class Floor:
    """The minimal numpy work of HMC-ECS iterations (module notes), with its own state."""

    def __init__(self, X, y, expansion, prior_precision, m, n_blocks, rng, prefetch=1):
        self.X, self.y = X, np.asarray(y, dtype=np.float64)
        self.n = X.shape[0]
        d = X.shape[1] + 1
        self.m, self.G, self.b = m, n_blocks, m // n_blocks
        self.ts = np.asarray(expansion.theta_star, dtype=np.float64)
        self.A, self.H, self.ll = expansion.grad, expansion.hess, expansion.loglik
        self.prec = prior_precision
        idx = rng.integers(0, self.n, m)
        self.Z = np.ones((m, d))
        self.Z[:, 1:] = X[idx]
        self.yu = self.y[idx]
        self.es = self.Z @ self.ts
        self.a, self.bb, self.hc = self._coefficients(self.yu, self.es)
        self.buf = [np.empty(m) for _ in range(8)]
        # Proposals drawn ahead in batches, as the estimator's ProposalPool does
        # (block numbers and indices do not depend on the state).
        self.prefetch, self.next = int(prefetch), int(prefetch)

    def _refill(self, rng):
        k = self.prefetch
        self.blocks = rng.integers(self.G, size=k)
        self.idx = rng.integers(0, self.n, size=(k, self.b))
        self.pool_X = self.X[self.idx.ravel()]
        self.pool_y = self.y[self.idx.ravel()]
        # Taylor coefficients of all pooled rows at once, as the estimator's pool does.
        es = self.pool_X @ self.ts[1:]
        es += self.ts[0]
        self.pool_es = es
        self.pool_a, self.pool_b, self.pool_hc = self._coefficients(self.pool_y, es)
        self.next = 0

    @staticmethod
    def _coefficients(y, eta):
        e = np.exp(-np.abs(eta))
        ell = y * eta - np.maximum(eta, 0.0) - np.log1p(e)
        r = 1.0 / (1.0 + e)
        mu = np.where(eta >= 0.0, r, e * r)
        return ell, y - mu, -0.5 * mu * (1.0 - mu)

    def estimate(self, theta):
        """Log posterior estimate and gradient (eqs. 4.5 and 4.7) on the current block set."""
        eta, e, t1, ell, d1, hcd, slope, d = self.buf
        np.matmul(self.Z, theta, out=eta)
        delta = np.subtract(eta, self.es, out=t1)
        np.abs(eta, out=e)
        np.negative(e, out=e)
        np.exp(e, out=e)
        np.multiply(self.yu, eta, out=ell)
        np.subtract(ell, np.maximum(eta, 0.0, out=d1), out=ell)
        np.subtract(ell, np.log1p(e, out=d1), out=ell)
        np.add(e, 1.0, out=d1)
        np.divide(1.0, d1, out=d1)                      # r = sigmoid(|eta|)
        np.multiply(e, d1, out=e)                       # e r = sigmoid(-|eta|)
        np.copyto(e, d1, where=eta >= 0.0)              # mu
        np.subtract(self.yu, e, out=d1)                 # ell'
        np.multiply(self.hc, delta, out=hcd)
        np.add(self.bb, hcd, out=slope)
        np.multiply(delta, slope, out=d)
        np.add(d, self.a, out=d)
        np.subtract(ell, d, out=d)                      # d_i = ell_i - q_i
        np.add(slope, hcd, out=slope)
        np.subtract(d1, slope, out=d1)                  # g_i = d d_i / d eta_i
        total = np.add.reduce(d)                        # d.sum() without its Python wrapper
        np.subtract(d, total / self.m, out=d)
        s2 = (self.n / self.m) ** 2 * (d @ d)
        np.multiply(d, -(self.n / self.m) ** 2, out=d)
        np.add(d, self.n / self.m, out=d)
        np.multiply(d1, d, out=d1)
        grad = self.Z.T @ d1
        dt = theta - self.ts
        hd = self.H @ dt
        grad += self.A
        grad += hd
        gp = self.prec * theta
        grad -= gp
        lp = (self.ll + self.A @ dt + 0.5 * (dt @ hd) + self.n / self.m * total - 0.5 * s2
              - 0.5 * (gp @ theta))
        return lp, grad

    def iteration(self, rng, theta, lp, grad, eps, n_steps, minv):
        """One iteration: block update (always accepted here) and ``n_steps`` leapfrog steps."""
        if self.next >= self.prefetch:
            self._refill(rng)
        k, self.next = self.next, self.next + 1
        g = self.blocks[k]
        lo, hi = g * self.b, (g + 1) * self.b
        rows = slice(k * self.b, (k + 1) * self.b)
        self.Z[lo:hi, 1:] = self.pool_X[rows]
        self.yu[lo:hi] = self.pool_y[rows]
        self.es[lo:hi] = self.pool_es[rows]
        self.a[lo:hi] = self.pool_a[rows]
        self.bb[lo:hi] = self.pool_b[rows]
        self.hc[lo:hi] = self.pool_hc[rows]
        lp, grad = self.estimate(theta)
        rng.random()
        p = rng.standard_normal(len(theta)) / np.sqrt(minv)
        k0 = 0.5 * (p @ (minv * p))
        p = p + 0.5 * eps * grad
        x = theta
        for i in range(n_steps):
            x = x + eps * (minv * p)
            lp1, grad1 = self.estimate(x)
            p = p + (eps if i < n_steps - 1 else 0.5 * eps) * grad1
        k1 = 0.5 * (p @ (minv * p))
        if rng.random() < np.exp(min(0.0, lp1 - k1 - lp + k0)):
            return x, lp1, grad1
        return theta, lp, grad


def _problem(n, dtype, m, n_blocks, seed=0):
    X, y, _ = make_higgs_like(n_samples=n, random_state=seed, dtype=np.dtype(dtype))
    model = GLM(X, y, LogisticFamily())
    prior = GaussianPrior(np.full(model.dim, 10.0))
    post = TallPosterior(model, prior)
    theta = post.mode()[0]
    expansion = post.expand(theta, 2)
    est = post.difference_estimator(expansion, m, n_blocks)
    metric = metric_from_mass_matrix(expansion.neg_hessian, dense=False)
    return X, y, post, expansion, est, metric, theta


def step_size_for(est, theta, metric, n_steps, seed=1):
    """A step size with acceptance near 0.8 (a short dual-averaging-free search)."""
    rng = np.random.default_rng(seed)
    eps = 1.0
    for _ in range(30):
        st = hmc_ecs.init(theta, est, rng)
        acc = []
        for _ in range(40):
            st, info = hmc_ecs.step(rng, st, est, hmc.HMCParams(eps, n_steps, metric, 1000.0))
            acc.append(info.acceptance_rate)
        if np.mean(acc) >= 0.8:
            return eps
        eps *= 0.7
    return eps


def time_pair(est, floor, theta, metric, eps, n_steps, n_iter, repeats, seed=2,
              compiled=True):
    """Median ms per iteration of the numpy kernel, of the floor and of the compiled
    kernel (None without numba), alternating rounds."""
    params = hmc.HMCParams(eps, n_steps, metric, 1000.0)
    minv = metric.inverse_mass_matrix
    rk, rf, rc = (np.random.default_rng(seed) for _ in range(3))
    st = hmc_ecs.init(theta, est, rk)
    fx, (flp, fg) = theta.copy(), floor.estimate(theta)
    run_iterations = None
    if compiled:
        try:
            from bayesian_subsample.samplers._ecs_compiled import run_iterations
        except ImportError:
            pass
    if run_iterations is not None:
        sc = hmc_ecs.init(theta, est, rc)
        sc, _, _ = run_iterations(rc, est, sc, params, 5)  # compile (or load the cache)
    kern, flo, comp = [], [], []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n_iter):
            st, _ = hmc_ecs.step(rk, st, est, params)
        kern.append((time.perf_counter() - t) / n_iter * 1e3)
        t = time.perf_counter()
        for _ in range(n_iter):
            fx, flp, fg = floor.iteration(rf, fx, flp, fg, eps, n_steps, minv)
        flo.append((time.perf_counter() - t) / n_iter * 1e3)
        if run_iterations is not None:
            t = time.perf_counter()
            sc, _, _ = run_iterations(rc, est, sc, params, n_iter)
            comp.append((time.perf_counter() - t) / n_iter * 1e3)
    return (float(np.median(kern)), float(np.median(flo)),
            float(np.median(comp)) if comp else None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--n-blocks", type=int, default=100)
    parser.add_argument("--n-steps", type=int, default=3)
    parser.add_argument("--n-iter", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--no-compiled", action="store_true",
                        help="skip the compiled kernel (HMCECS(backend='numba'))")
    parser.add_argument("--profile", type=int, default=None, metavar="N",
                        help="print a cProfile of 3000 kernel iterations at N rows and exit")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        if args.profile:
            import cProfile
            import pstats

            _, _, _, _, est, metric, theta = _problem(args.profile, args.dtype, args.m,
                                                      args.n_blocks)
            rng = np.random.default_rng(0)
            st = hmc_ecs.init(theta, est, rng)
            params = hmc.HMCParams(0.3, args.n_steps, metric, 1000.0)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(3000):
                st, _ = hmc_ecs.step(rng, st, est, params)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)
            return
        for n in args.n:
            X, y, post, expansion, est, metric, theta = _problem(n, args.dtype, args.m,
                                                                 args.n_blocks)
            eps = step_size_for(est, theta, metric, args.n_steps)
            floor = Floor(X, y, expansion, post.prior.precision, est.subsample_size,
                          est.n_blocks, np.random.default_rng(3),
                          getattr(est, "prefetch", 1))
            kern, flo, comp = time_pair(est, floor, theta, metric, eps, args.n_steps,
                                        args.n_iter, args.repeats,
                                        compiled=not args.no_compiled)
            line = {"n": n, "dtype": args.dtype, "m": est.subsample_size,
                    "n_blocks": est.n_blocks, "n_steps": args.n_steps,
                    "step_size": round(eps, 4), "ms_per_iteration": round(kern, 4),
                    "floor_ms_per_iteration": round(flo, 4), "ratio": round(kern / flo, 3)}
            if comp is not None:
                line.update({"numba_ms_per_iteration": round(comp, 4),
                             "numba_ratio_to_numpy_floor": round(comp / flo, 3),
                             "numba_speedup_over_numpy": round(kern / comp, 2)})
            print(json.dumps(line), flush=True)
            del X, y, post, est, floor


if __name__ == "__main__":
    main()
