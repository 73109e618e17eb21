"""Set-up time of the NumPyro-comparison fit, for side-by-side runs of two checkouts.

The fit of ``bench_numpyro.py`` without NumPyro: ``BayesianLogisticRegression
(sampler="hmc_ecs", n_chains=1, n_warmup=1000, n_draws=1000, n_jobs=1)`` on
10^6 x 29 float64 rows (standard normal features, coefficients N(0, 0.3^2),
no intercept term in the data), after an untimed 3,000-row fit with the
compiled kernel (numba's import and kernel load).  Prints one JSON line:
``which`` (the label given), ``load`` (1-minute load average at the end)
and, per repeat, ``fit_s``, ``setup_s`` (the fit's ``setup_seconds``),
``pass_s`` (the set-up's full passes), ``warmup`` and ``sampling``.
Alternate two checkouts on ``PYTHONPATH`` in one shell loop, e.g.::

    for r in 1 2 3 4; do
      PYTHONPATH=/old python benchmarks/bench_setup_ab.py old --repeats 3
      PYTHONPATH=.    python benchmarks/bench_setup_ab.py new --repeats 3
    done > benchmarks/results/setup_centre_check_memo_ab.jsonl
"""

import argparse
import json
import os
import time
import warnings


def main(argv=None):
    import numpy as np

    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.samplers import HMCECS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", help="label of this checkout in the JSON line")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, 29))
    beta = rng.standard_normal(29) * 0.3
    y = (rng.random(args.n) < 1 / (1 + np.exp(-(X @ beta)))).astype(float)
    BayesianLogisticRegression(sampler=HMCECS(backend="numba"), n_chains=1, n_warmup=20,
                               n_draws=20, n_jobs=1, random_state=1).fit(X[:3000], y[:3000])
    runs = []
    for _ in range(args.repeats):
        est = BayesianLogisticRegression(sampler="hmc_ecs", n_chains=1, n_warmup=1000,
                                         n_draws=1000, n_jobs=1, random_state=1)
        start = time.perf_counter()
        est.fit(X, y)
        info = est.sampler_info_[0]
        runs.append({"fit_s": time.perf_counter() - start, "setup_s": info["setup_seconds"],
                     "pass_s": sum(info["setup_pass_times"]), **est.wall_time_})
    print(json.dumps({"which": args.which, "load": os.getloadavg()[0], "runs": runs}),
          flush=True)


if __name__ == "__main__":
    main()
