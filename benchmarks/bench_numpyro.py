"""HMC-ECS of this package against NumPyro's HMCECS, side by side on the same data.

Same data, model and prior for both: HIGGS-like logistic regression
(:func:`bayesian_subsample.datasets.make_higgs_like`, 29 correlated features
plus an intercept), prior ``N(0, 10^2)`` on every coefficient and the
intercept, one chain, 1000 warm-up iterations and 1000 draws.

* ``ours``: ``BayesianLogisticRegression(sampler=HMCECS(backend=...))``
  with its defaults (automatic theta*, subsample size and step size; fixed
  trajectory length; ``--backend auto``, which runs the compiled kernel at
  these sizes when numba is installed).  The time is the whole ``fit``:
  input validation, the set-up passes over the data (theta*,
  control-variate sums, mass matrix, the pilot for m), warm-up and
  sampling.  Before it a small fit with the same backend warms the imports,
  the worker pool and, for the compiled kernel, numba's import and the load
  of the kernel from its disk cache.  The fit is timed ``--repeats`` times
  (default 5; the same ``random_state``, so the same draws, which is
  checked) and ``seconds`` is the median: one fit of 0.3-0.5 s is at the
  mercy of a page fault storm or a neighbour's burst, NumPyro's 20-50 s run
  is not.  ``seconds_first`` (the first full-size fit in the process, which
  also touches its big buffers for the first time) and ``seconds_all`` are
  reported too (``setup_seconds`` and ``wall_time`` are the first fit's;
  ``setup_seconds_all`` gives every fit's set-up), and the last line gives
  the ratios with the first fit beside those with the median.  With the compiled kernel the line
  also gives the first fit in a new Python process with an empty numba
  cache (``first_fit_in_new_process_cold_cache_seconds``: compilation, once
  per installation) and with the cache filled (``..._warm_cache_seconds``:
  numba's import and the cache load, once per process), and the last line
  the ratios those give.
* ``numpyro``: ``HMCECS(NUTS(model), num_blocks=100,
  proxy=HMCECS.taylor_proxy(theta*))`` with ``m = 1300`` (the settings of
  NumPyro's HIGGS example), NUTS with a diagonal mass matrix and target
  acceptance 0.8, started at theta*.  theta* is the exact full-data posterior
  mode, computed outside its timing (its best case: NumPyro leaves theta* to
  the user).  Its time is ``MCMC.run`` (warm-up and sampling), reported with
  and without JAX's tracing and compilation (summed from ``jax.monitoring``
  events), float32 as NumPyro runs by default.

ESS is this package's bulk ESS (:func:`bayesian_subsample.diagnostics.ess_bulk`)
of every coefficient, computed the same way for both; ``min_ess_per_s`` is the
smallest of the 30 over the wall time.  The last line gives the ratios, the
largest ``|mean_ours - mean_numpyro| / sd_numpyro`` over the coefficients,
and the largest of the same differences in units of their Monte Carlo
standard error ``sqrt(mcse_ours^2 + mcse_numpyro^2)``
(:func:`bayesian_subsample.diagnostics.mcse_mean`).  The means are compared
on ``--means-draws`` (5000) draws per method, not on the timed 1000: with
about 800 ESS each one difference has a standard error near 0.05 sd and the
largest of 30 is typically 0.1-0.15 sd from Monte Carlo error alone, so
"within 0.1 sd" could not be judged.  The extra draws continue both timed
chains (NumPyro's from its last state with its adapted kernel, ours by
``continue_sampling``); they are not timed and do not enter the ESS per
second.

Reproduce (NumPyro and JAX live in their own environment, never as a
dependency of this package; this package is taken from the repository on
``PYTHONPATH``).  From the repository root::

    PYTHONPATH=. $NUMPYRO_ENV/bin/python benchmarks/bench_numpyro.py      # n = 1e6
    PYTHONPATH=. $NUMPYRO_ENV/bin/python benchmarks/bench_numpyro.py --n 100000
    PYTHONPATH=. $NUMPYRO_ENV/bin/python benchmarks/bench_numpyro.py --skip-numpyro

(``$NUMPYRO_ENV`` is a placeholder for wherever NumPyro is installed: any
virtual environment with numpyro and jax.)
``PYTHONPATH=.`` matters: the package installed in that environment may be
another checkout.  A fresh environment: ``python3 -m venv $NUMPYRO_ENV``,
``$NUMPYRO_ENV/bin/pip install numpyro jax`` and ``pip install -e .``
(this package's dependencies).  One run at 10^6 rows takes about two minutes on
a quiet 2-core machine, most of it NumPyro.

Measured with numpyro 0.22.0 and jax 0.10.2 on a shared 2-core machine; see
doc/benchmarks.rst for the numbers.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.datasets import make_higgs_like
from bayesian_subsample.diagnostics import ess_bulk, mcse_mean
from bayesian_subsample.likelihood._full import TallPosterior
from bayesian_subsample.models._glm import GLM, LogisticFamily
from bayesian_subsample.models._prior import GaussianPrior
from bayesian_subsample.samplers import HMCECS

PRIOR_SCALE = 10.0


def fit_ours(X, y, args, backend="auto"):
    est = BayesianLogisticRegression(sampler=HMCECS(backend=backend), prior_scale=PRIOR_SCALE,
                                     intercept_prior_scale=PRIOR_SCALE, n_chains=1,
                                     n_warmup=args.n_warmup, n_draws=args.n_draws, n_jobs=1,
                                     random_state=args.seed)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    seconds = time.perf_counter() - start
    draws = est._all_draws()[0]  # (draw, dim): intercept first, as theta
    info = est.sampler_info_[0]
    return draws, seconds, {"backend": info.get("backend"),
                            "subsample_size": int(est.subsample_size_[0]),
                            "n_integration_steps": int(est.n_integration_steps_[0]),
                            "step_size": float(est.step_size_[0]),
                            "setup_seconds": round(float(info.get("setup_seconds", np.nan)), 3),
                            "wall_time": est.wall_time_,
                            "evaluations": est.evaluations_}, est


def first_fit_in_new_process(args, cache_dir):
    """Seconds of the first ``fit`` in a fresh Python process whose numba cache is
    ``cache_dir`` (empty: the kernel is compiled; filled: it is loaded)."""
    code = ("import sys, time, warnings, argparse; sys.path.insert(0, {root!r});"
            "from benchmarks.bench_numpyro import fit_ours;"
            "from bayesian_subsample.datasets import make_higgs_like;"
            "X, y, _ = make_higgs_like(n_samples={n}, random_state={seed});"
            "a = argparse.Namespace(n_warmup={nw}, n_draws={nd}, seed={seed});"
            "d, s, info, _ = fit_ours(X, y, a, {backend!r}); print(s, info['backend'])").format(
        root=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), n=args.n,
        seed=args.seed, nw=args.n_warmup, nd=args.n_draws, backend=args.backend)
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return float(out[0]), out[1]


def posterior_mode(X, y):
    """theta* for NumPyro: the exact full-data posterior mode (not timed)."""
    model = GLM(X, y, LogisticFamily())
    post = TallPosterior(model, GaussianPrior(np.full(model.dim, PRIOR_SCALE)))
    return post.mode()[0]


def fit_numpyro(X, y, theta_star, args, more_runs=0):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import HMCECS, MCMC, NUTS, init_to_value

    compile_s = []

    def listener(event, duration, **kwargs):
        if event.startswith("/jax/core/compile") or event.startswith("/jax/compilation"):
            compile_s.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    n, p = X.shape
    Xd = jnp.asarray(np.hstack([np.ones((n, 1), np.float32), X.astype(np.float32)]))
    yd = jnp.asarray(y.astype(np.float32))

    def model(Xd, yd):
        theta = numpyro.sample("theta", dist.Normal(0.0, PRIOR_SCALE).expand([p + 1])
                               .to_event(1))
        with numpyro.plate("N", n, subsample_size=args.numpyro_m):
            xb = numpyro.subsample(Xd, event_dim=1)
            yb = numpyro.subsample(yd, event_dim=0)
            numpyro.sample("obs", dist.Bernoulli(logits=xb @ theta), obs=yb)

    ref = {"theta": jnp.asarray(theta_star, dtype=jnp.float32)}
    inner = NUTS(model, init_strategy=init_to_value(values=ref), target_accept_prob=0.8)
    kernel = HMCECS(inner, num_blocks=args.numpyro_blocks, proxy=HMCECS.taylor_proxy(ref))
    mcmc = MCMC(kernel, num_warmup=args.n_warmup, num_samples=args.n_draws, num_chains=1,
                progress_bar=False)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(args.seed), Xd, yd)
    draws = np.asarray(mcmc.get_samples()["theta"])
    draws.sum()  # block until ready
    seconds = time.perf_counter() - start
    compile_total = float(sum(compile_s))
    # More draws for the comparison of means only (not timed): the chain goes on
    # from its last state with its adapted step size and mass matrix.
    more = [draws]
    for _ in range(more_runs):
        mcmc.post_warmup_state = mcmc.last_state
        mcmc.run(mcmc.post_warmup_state.rng_key, Xd, yd)
        more.append(np.asarray(mcmc.get_samples()["theta"]))
    return (draws.astype(np.float64), seconds, compile_total,
            np.concatenate(more).astype(np.float64))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--n-warmup", type=int, default=1000)
    parser.add_argument("--n-draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--numpyro-m", type=int, default=1300)
    parser.add_argument("--numpyro-blocks", type=int, default=100)
    parser.add_argument("--skip-numpyro", action="store_true")
    parser.add_argument("--backend", default="auto", choices=["auto", "numba", "numpy"],
                        help="HMCECS(backend=...) of our fit")
    parser.add_argument("--means-draws", type=int, default=5000,
                        help="draws per method for the comparison of means (the timed "
                             "draws plus continued ones; not timed)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed fits of ours (identical draws); the median is used")
    parser.add_argument("--skip-first-fit", action="store_true",
                        help="skip the cold- and warm-cache first fits in new processes")
    args = parser.parse_args(argv)
    X, y, _ = make_higgs_like(n_samples=args.n, random_state=args.seed)
    # Warm the imports, the worker pool and (when the timed fit runs compiled)
    # the loading of the compiled kernel from numba's disk cache, outside the
    # timing: a small fit with the backend the timed fit will use.
    Xw, yw, _ = make_higgs_like(n_samples=3000, n_features=3, random_state=1)
    fit_ours(Xw, yw, argparse.Namespace(n_warmup=20, n_draws=20, seed=0),
             "numba" if args.backend != "numpy" and _will_compile(args) else "numpy")
    ours, t_first, info, est = fit_ours(X, y, args, args.backend)
    times, setups = [t_first], [info["setup_seconds"]]
    for _ in range(args.repeats - 1):
        again, t_again, info_again, _ = fit_ours(X, y, args, args.backend)
        if not np.array_equal(again, ours):
            raise RuntimeError("a repeated fit with the same random_state gave other draws")
        times.append(t_again)
        setups.append(info_again["setup_seconds"])
    t_ours = float(np.median(times))
    ess = np.atleast_1d(ess_bulk(ours[None]))
    row = {"method": "ours", "n": args.n, "seconds": round(t_ours, 3),
           "seconds_first": round(t_first, 3), "seconds_all": [round(t, 3) for t in times],
           "min_ess": round(float(ess.min()), 1), "median_ess": round(float(np.median(ess)), 1),
           "min_ess_per_s": round(float(ess.min()) / t_ours, 2), **info,
           "setup_seconds_all": setups}
    if info["backend"] == "numba" and not args.skip_first_fit:
        with tempfile.TemporaryDirectory() as cache:
            cold, _ = first_fit_in_new_process(args, cache)
            warm, _ = first_fit_in_new_process(args, cache)
        row["first_fit_in_new_process_cold_cache_seconds"] = round(cold, 3)
        row["first_fit_in_new_process_warm_cache_seconds"] = round(warm, 3)
    print(json.dumps(row), flush=True)
    if args.skip_numpyro:
        return
    theta_star = posterior_mode(X, y)
    more_runs = max(0, -(-args.means_draws // args.n_draws) - 1)
    theirs, t_np, t_compile, theirs_all = fit_numpyro(X, y, theta_star, args, more_runs)
    ess_np = np.atleast_1d(ess_bulk(theirs[None]))
    excl = t_np - t_compile
    print(json.dumps({"method": "numpyro_hmcecs_nuts", "n": args.n, "seconds": round(t_np, 3),
                      "compile_seconds": round(t_compile, 3),
                      "seconds_excluding_compile": round(excl, 3),
                      "min_ess": round(float(ess_np.min()), 1),
                      "median_ess": round(float(np.median(ess_np)), 1),
                      "min_ess_per_s": round(float(ess_np.min()) / t_np, 3),
                      "min_ess_per_s_excluding_compile": round(float(ess_np.min()) / excl, 3),
                      "subsample_size": args.numpyro_m}), flush=True)
    ours_all = ours
    if len(theirs_all) > len(ours):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.continue_sampling(X, y, len(theirs_all) - len(ours))
        ours_all = est._all_draws()[0]
    dmean = np.abs(ours_all.mean(0) - theirs_all.mean(0)) / theirs_all.std(0)
    mcse = np.sqrt(np.atleast_1d(mcse_mean(ours_all[None])) ** 2
                   + np.atleast_1d(mcse_mean(theirs_all[None])) ** 2)
    zmean = np.abs(ours_all.mean(0) - theirs_all.mean(0)) / mcse
    ours_rate = float(ess.min()) / t_ours
    ratio = {
        "ratio": "ours / numpyro", "n": args.n,
        "min_ess_per_s_including_compile": round(ours_rate / (float(ess_np.min()) / t_np), 1),
        "min_ess_per_s_excluding_compile": round(ours_rate / (float(ess_np.min()) / excl), 1),
    }
    first_rate = float(ess.min()) / t_first
    ratio["first_timed_fit_including_compile"] = round(first_rate / (float(ess_np.min()) / t_np), 1)
    ratio["first_timed_fit_excluding_compile"] = round(first_rate / (float(ess_np.min()) / excl), 1)
    for key in ("first_fit_in_new_process_cold_cache_seconds",
                "first_fit_in_new_process_warm_cache_seconds"):
        if key in row:  # the same ratios with our first fit in a new process
            rate = float(ess.min()) / row[key]
            ratio[key.replace("_seconds", "_including_compile")] = round(
                rate / (float(ess_np.min()) / t_np), 1)
            ratio[key.replace("_seconds", "_excluding_compile")] = round(
                rate / (float(ess_np.min()) / excl), 1)
    ratio.update({
        "means_draws_each": [len(ours_all), len(theirs_all)],
        "means_min_ess_each": [round(float(np.min(ess_bulk(ours_all[None]))), 1),
                               round(float(np.min(ess_bulk(theirs_all[None]))), 1)],
        "max_abs_mean_diff_over_sd": round(float(dmean.max()), 4),
        "median_abs_mean_diff_over_sd": round(float(np.median(dmean)), 4),
        "max_abs_mean_diff_over_mcse": round(float(zmean.max()), 2),
        "sd_ratio_range": [round(float(v), 3) for v in (
            (ours_all.std(0) / theirs_all.std(0)).min(),
            (ours_all.std(0) / theirs_all.std(0)).max())],
    })
    print(json.dumps(ratio), flush=True)


def _will_compile(args):
    """Whether the timed fit runs the compiled kernel (HMCECS(backend=...) rules)."""
    from bayesian_subsample.samplers._ecs_compiled import AUTO_MIN_ROWS, numba_available

    return numba_available() and (args.backend == "numba" or args.n >= AUTO_MIN_ROWS)


if __name__ == "__main__":
    main()
