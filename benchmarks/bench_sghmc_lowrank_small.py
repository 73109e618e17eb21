"""Cost of ``noise_correction="fisher_lowrank"`` on a small network, side by side.

The review's case (``hidden_layer_sizes=(10,)``, 5 features, ``n = 3000``
with noisy labels, one chain, 5 warm-up and 10 sampling passes; ``dim = 71``
against ``R = 2,000`` pooled rows): wall and CPU seconds of

* ``fit_none``: a fit with ``noise_correction=None``;
* ``fit_lowrank``: the same fit with ``"fisher_lowrank"`` (the default
  ``via="auto"``, which decomposes the 71 x 71 ``J^T J`` here);
* ``estimate_weights`` / ``estimate_gram``: one pooled estimate at the
  fitted network by each route of
  :class:`~bayesian_subsample.likelihood.LowRankGradientNoise` (``J^T J``
  against the 2,000 x 2,000 Gram matrix), and the largest difference of
  their eigenvalues.

Fits and estimates alternate over ``--repeats`` rounds so both see the same
load; the median is reported.  One JSON line per measurement.

    python benchmarks/bench_sghmc_lowrank_small.py [--out results.jsonl]
"""

import argparse
import json
import sys
import time
import warnings

import numpy as np


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def main(argv=None):
    from bayesian_subsample import BayesianMLPClassifier
    from bayesian_subsample.likelihood._model_target import LowRankGradientNoise
    from bayesian_subsample.models._mlp import MLPModel

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--hidden", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = open(args.out, "a") if args.out else sys.stdout
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, 5))
    y = (X[:, 0] + rng.standard_normal(args.n) > 0).astype(int)

    def fit(correction):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return BayesianMLPClassifier(hidden_layer_sizes=(args.hidden,),
                                         noise_correction=correction, n_chains=1, n_warmup=5,
                                         n_draws=10, random_state=0).fit(X, y)

    times = {"fit_none": [], "fit_lowrank": [], "estimate_weights": [], "estimate_gram": []}
    for _ in range(args.repeats):
        for name, corr in (("fit_none", None), ("fit_lowrank", "fisher_lowrank")):
            wall, cpu, est = timed(lambda: fit(corr))
            times[name].append((wall, cpu))
        theta = est.network_draws_[0, -1]
        model = MLPModel(est.network_, X, np.searchsorted(est.classes_, y))
        idx = np.sort(rng.choice(args.n, min(2000, args.n), replace=False))
        _, _, rows = model.loglik_grad_and_rows(theta, idx)
        ops = {}
        for via in ("weights", "gram"):
            wall, cpu, ops[via] = timed(lambda: LowRankGradientNoise(rows, args.n, 500, 32,
                                                                       via=via))
            times[f"estimate_{via}"].append((wall, cpu))
    diff = float(np.max(np.abs(ops["weights"].s - ops["gram"].s)) / ops["gram"].s[0])
    for name, t in times.items():
        t = np.asarray(t)
        row = {"method": name, "n": args.n, "dim": int(est.network_.dim), "pooled_rows": 2000,
               "rank": 32, "wall_median": round(float(np.median(t[:, 0])), 4),
               "cpu_median": round(float(np.median(t[:, 1])), 4), "repeats": args.repeats}
        if name.startswith("estimate"):
            row["max_rel_eigenvalue_difference"] = diff
        print(json.dumps(row), file=out, flush=True)


if __name__ == "__main__":
    main()
