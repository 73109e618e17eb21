"""Reference outputs of every prediction method on fixed posterior draws.

The safety net for moving the predictive maths from the estimators into the
families of :mod:`bayesian_subsample.models` (issue 10): each estimator gets
fixed synthetic draws (unsigned, and signed with some negative signs), and
the values of ``predict``, ``predict_interval``, ``sample_y``,
``predict_proba`` and the ArviZ pointwise log-likelihood are recorded in
``tests/data/predictive_reference.npz``.  They were written by the code
before the move and must stay the same:

    python -m tests.predictive_reference --write

regenerates the file (say why in the commit message).  As for the draw
fingerprints, exact equality is asserted only with the numpy and scipy
versions that wrote the file; otherwise a relative tolerance of 1e-9.
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
)

PATH = os.path.join(os.path.dirname(__file__), "data", "predictive_reference.npz")
N_CHAINS, N_DRAWS, N_FEATURES = 3, 40, 3
#: A short full-data fit that only sets up a fitted estimator; its draws are replaced.
_FIT = dict(sampler="hmc", n_chains=1, n_warmup=5, n_draws=4, random_state=0)


def _data():
    rng = np.random.default_rng(2024)
    X = rng.standard_normal((200, N_FEATURES))
    X_new = np.vstack([rng.standard_normal((25, N_FEATURES)),
                       np.zeros((1, N_FEATURES)), np.full((1, N_FEATURES), 2.5)])
    eta = 0.5 + X @ np.array([0.4, -0.3, 0.2])
    return rng, X, X_new, eta


def _with_draws(est, rng, signed, sigma=False):
    """Replace the draws of a fitted estimator by fixed synthetic ones."""
    shape = (N_CHAINS, N_DRAWS)
    est.intercept_draws_ = 0.5 + 0.1 * rng.standard_normal(shape)
    est.coef_draws_ = np.array([0.4, -0.3, 0.2]) + 0.08 * rng.standard_normal(
        shape + (N_FEATURES,))
    stats = {"diverging": np.zeros(shape, dtype=bool)}
    if signed:
        sign = np.where(rng.random(shape) < 0.15, -1.0, 1.0)
        stats["sign"] = sign
    est.sample_stats_ = stats
    if sigma:
        est.sigma_draws_ = np.exp(np.log(0.7) + 0.2 * rng.standard_normal(shape))
        est.log_sigma_draws_ = np.log(est.sigma_draws_)
    return est


def _fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        return est.fit(X, y, **kw)


def compute():
    """All reference outputs as a dict of arrays."""
    out = {}
    rng, X, X_new, eta = _data()
    exposure_new = np.linspace(0.5, 3.0, X_new.shape[0])
    y_pois = rng.poisson(np.exp(eta)).astype(float)
    y_new_pois = rng.poisson(np.exp(0.5 + X_new @ np.array([0.4, -0.3, 0.2]))).astype(float)
    y_lin = eta + 0.7 * rng.standard_normal(eta.shape)
    y_new_lin = 0.5 + X_new @ np.array([0.4, -0.3, 0.2]) + 0.7 * rng.standard_normal(
        X_new.shape[0])
    y_log = (rng.random(eta.shape) < 1 / (1 + np.exp(-eta))).astype(int)
    y_new_log = np.arange(X_new.shape[0]) % 2
    for signed in (False, True):
        tag = "signed" if signed else "plain"
        pois = _with_draws(_fit(BayesianPoissonRegressor(**_FIT), X, y_pois), rng, signed)
        lin = _with_draws(_fit(BayesianLinearRegression(**_FIT), X, y_lin), rng, signed,
                          sigma=True)
        log = _with_draws(_fit(BayesianLogisticRegression(**_FIT), X, y_log), rng, signed)
        for name, kw in (("pois", {}), ("pois_exposure", {"exposure": exposure_new})):
            mean, sd = pois.predict(X_new, return_std=True, **kw)
            out[f"{tag}/{name}/mean"], out[f"{tag}/{name}/sd"] = mean, sd
            for alpha in (0.1, 0.5):
                lo, hi = pois.predict_interval(X_new, alpha=alpha, **kw)
                out[f"{tag}/{name}/interval{alpha}"] = np.stack([lo, hi])
            if not signed:
                out[f"{tag}/{name}/sample_y"] = pois.sample_y(X_new, 7, random_state=0, **kw)
            tree = pois.to_datatree(X_new, y_new_pois, **kw)
            out[f"{tag}/{name}/loglik"] = tree["log_likelihood"]["y"].values
        mean, sd = lin.predict(X_new, return_std=True)
        out[f"{tag}/lin/mean"], out[f"{tag}/lin/sd"] = mean, sd
        for alpha in (0.1, 0.5):
            out[f"{tag}/lin/interval{alpha}"] = np.stack(lin.predict_interval(X_new, alpha))
        if not signed:
            out[f"{tag}/lin/sample_y"] = lin.sample_y(X_new, 7, random_state=0)
        out[f"{tag}/lin/loglik"] = lin.to_datatree(X_new, y_new_lin)["log_likelihood"]["y"].values
        proba, psd = log.predict_proba(X_new, return_std=True)
        out[f"{tag}/log/proba"], out[f"{tag}/log/proba_sd"] = proba, psd
        out[f"{tag}/log/proba_interval"] = np.stack(log.predict_proba_interval(X_new, 0.2))
        if not signed:
            out[f"{tag}/log/sample_y"] = log.sample_y(X_new, 7, random_state=0)
        out[f"{tag}/log/loglik"] = log.to_datatree(X_new, y_new_log)["log_likelihood"]["y"].values
    return out


def load():
    """(recorded outputs, {"numpy": version, "scipy": version} that wrote them)."""
    with np.load(PATH, allow_pickle=False) as f:
        data = {k: f[k] for k in f.files}
    versions = {"numpy": str(data.pop("__numpy__")), "scipy": str(data.pop("__scipy__"))}
    return data, versions


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="(re)write the reference file")
    args = parser.parse_args()
    out = compute()
    if args.write:
        np.savez_compressed(PATH, __numpy__=np.__version__, __scipy__=scipy.__version__, **out)
        print(f"wrote {len(out)} arrays to {PATH}")
    else:
        recorded, _ = load()
        for key, value in out.items():
            print(key, "same" if np.array_equal(value, recorded[key]) else "DIFFERENT")


if __name__ == "__main__":
    main()
