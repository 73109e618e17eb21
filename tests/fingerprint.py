"""Fingerprints: the draws of every sampler on one small fixed problem per estimator.

The safety net for refactoring the layer above the kernels (DESIGN §2): the
recorded draws in ``tests/data/fingerprints.npz`` must stay bit-identical for
integer seeds.  A commit that changes them on purpose regenerates the file with

    python -m tests.fingerprint --write

and says in its message which draws change and why.

Exact equality is only meaningful with the same numerical libraries: the file
records the numpy and scipy versions, and with other versions the test
compares to a relative tolerance of 1e-9 instead (a change of BLAS or SIMD
kernels changes the last bits, a change of algorithm changes far more).
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
import scipy
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import (
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianPoissonRegressor,
    BayesianSplineClassifier,
)
from bayesian_subsample.datasets import make_bankruptcy_like, make_higgs_like

PATH = os.path.join(os.path.dirname(__file__), "data", "fingerprints.npz")

#: Sampler names run on each estimator's problem (BPS needs a curvature bound,
#: which the Poisson and linear-regression models do not have).
CASES = {
    "logistic": ("hmc", "hmc_ecs", "hmc_ecs_signed", "sgld", "sghmc", "rwmh",
                 "austerity_mh", "bps", "sbps", "psbps"),
    "spline": ("hmc", "hmc_ecs", "sghmc"),
    "poisson": ("hmc", "hmc_ecs", "sgld", "sghmc", "rwmh", "austerity_mh", "sbps"),
    "linear": ("hmc", "hmc_ecs", "sgld", "rwmh", "sbps"),
}
SETTINGS = dict(n_chains=2, n_warmup=60, n_draws=8, n_jobs=1, random_state=3)


def _problem(kind):
    rng = np.random.default_rng(11)
    if kind == "logistic":
        X, y, _ = make_higgs_like(n_samples=3000, n_features=3, random_state=5)
        return X, y
    if kind == "spline":
        X, y, _ = make_bankruptcy_like(n_samples=3000, event_rate=0.1, random_state=5)
        return X[:, :2], y
    X = rng.standard_normal((3000, 3))
    eta = 0.3 + X @ np.array([0.4, -0.2, 0.1])
    if kind == "poisson":
        return X, rng.poisson(np.exp(eta)).astype(float)
    return X, eta + 0.5 * rng.standard_normal(3000)


def _estimator(kind, sampler):
    if kind == "logistic":
        return BayesianLogisticRegression(sampler=sampler, **SETTINGS)
    if kind == "spline":
        return BayesianSplineClassifier(sampler=sampler, n_knots=4, **SETTINGS)
    if kind == "poisson":
        return BayesianPoissonRegressor(sampler=sampler, **SETTINGS)
    return BayesianLinearRegression(sampler=sampler, **SETTINGS)


def compute(keys=None):
    """``{"kind/sampler": draws (chain, draw, dim)}`` for the requested keys."""
    out = {}
    for kind, samplers in CASES.items():
        X, y = _problem(kind)
        for sampler in samplers:
            key = f"{kind}/{sampler}"
            if keys is not None and key not in keys:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est = _estimator(kind, sampler).fit(X, y)
            out[key] = np.asarray(est._all_draws())
    return out


def load():
    with np.load(PATH) as data:
        versions = {"numpy": str(data["__numpy__"]), "scipy": str(data["__scipy__"])}
        draws = {k: data[k] for k in data.files if not k.startswith("__")}
    return draws, versions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the current draws")
    args = parser.parse_args(argv)
    current = compute()
    if args.write:
        os.makedirs(os.path.dirname(PATH), exist_ok=True)
        np.savez_compressed(PATH, __numpy__=np.__version__, __scipy__=scipy.__version__,
                            **current)
        print(f"wrote {len(current)} fingerprints to {PATH}")
        return
    recorded, _ = load()
    for key, draws in current.items():
        same = key in recorded and np.array_equal(recorded[key], draws)
        print(f"{key:28s} {'identical' if same else 'CHANGED'}")


if __name__ == "__main__":
    main()
