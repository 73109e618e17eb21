"""Fingerprints: the draws of every sampler on one small fixed problem per estimator.

The safety net for refactoring the layer above the kernels (DESIGN §2): the
recorded draws in ``tests/data/fingerprints.npz`` must stay bit-identical for
integer seeds.  A case is ``kind/name``: the GLM and spline kinds record the
draws of one sampler; the neural-network kinds (``mlp_classifier``,
``mlp_regressor``) record, for each sampler they accept and each option with
its own code path (noise corrections, importance-sampled minibatches, float32
input, binary or multi-output targets), the kept networks under
``kind/name`` and, under ``kind/name/<part>``, the Gibbs-sampled precisions,
the predictions (which average over the kept networks) and posterior
predictive draws; ``factorization`` does the same for
:class:`~bayesian_subsample.BayesianMatrixFactorization`, with a
``partial_fit`` and an ``eval_set`` case.  A commit that changes them on
purpose regenerates the file with

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
from sklearn.datasets import load_diabetes, load_iris
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import (
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianMatrixFactorization,
    BayesianMLPClassifier,
    BayesianMLPRegressor,
    BayesianPoissonRegressor,
    BayesianSplineClassifier,
)
from bayesian_subsample.datasets import make_bankruptcy_like, make_higgs_like, make_ratings_like

PATH = os.path.join(os.path.dirname(__file__), "data", "fingerprints.npz")

#: Neural-network cases: name -> estimator options (beyond MLP_SETTINGS), with
#: ``data`` naming a variant of the kind's problem.  Every sampler the MLP
#: estimators accept (SBPS in the fixed-prior setting it is checked in, PSBPS
#: under the hierarchical prior), then the options with their own code paths.
_MLP_SAMPLERS = {
    "sghmc": {}, "sgld": {"sampler": "sgld"}, "sgd": {"sampler": "sgd"},
    "sgd_momentum": {"sampler": "sgd_momentum"}, "hmc": {"sampler": "hmc"},
    "sbps": {"sampler": "sbps", "prior_precision": 1.0}, "psbps": {"sampler": "psbps"},
}
MLP_CASES = {
    "mlp_classifier": {
        **_MLP_SAMPLERS,
        "sghmc_fisher": {"noise_correction": "fisher"},
        "sghmc_covariance": {"noise_correction": "covariance"},
        "sghmc_fisher_lowrank": {"noise_correction": "fisher_lowrank", "noise_rank": 6,
                                 "noise_pool": 2, "noise_refresh": 20},
        "sghmc_fisher_lowrank_default": {"noise_correction": "fisher_lowrank"},
        "sgld_importance": {"sampler": "sgld", "minibatch": "importance",
                            "minibatch_refresh": 10},
        "sghmc_importance_fisher": {"minibatch": "importance", "minibatch_refresh": 10,
                                    "noise_correction": "fisher"},
        "sgd_momentum_importance": {"sampler": "sgd_momentum", "minibatch": "importance"},
        "sghmc_float32": {"data": "float32"},
        "sghmc_binary_tanh": {"data": "binary", "activation": "tanh",
                              "hidden_layer_sizes": (4, 3)},
        "sgld_logistic_fixed_prior": {"sampler": "sgld", "activation": "logistic",
                                      "prior_precision": 2.0},
    },
    "mlp_regressor": {
        **_MLP_SAMPLERS,
        "sghmc_fisher": {"noise_correction": "fisher"},
        "sghmc_covariance": {"noise_correction": "covariance"},
        "sghmc_fisher_lowrank": {"noise_correction": "fisher_lowrank", "noise_rank": 6,
                                 "noise_pool": 2, "noise_refresh": 20},
        "sgld_importance": {"sampler": "sgld", "minibatch": "importance",
                            "minibatch_refresh": 10},
        "sghmc_importance_fisher": {"minibatch": "importance", "noise_correction": "fisher"},
        "sghmc_float32": {"data": "float32"},
        "sghmc_multioutput": {"data": "multioutput"},
        "hmc_identity_float32": {"sampler": "hmc", "activation": "identity", "data": "float32"},
    },
}
MLP_SETTINGS = dict(hidden_layer_sizes=(5,), n_chains=2, n_warmup=4, n_draws=4,
                    n_networks_kept=4, batch_size=30, n_integration_steps=5, n_jobs=1,
                    random_state=3)
#: Matrix-factorisation cases: name -> estimator options (beyond FACTORIZATION_SETTINGS);
#: ``fit`` = "partial" fits on 4/5 of the ratings, then ``partial_fit`` the rest.
FACTORIZATION_CASES = {
    "sghmc": {}, "sgld": {"sampler": "sgld"}, "sgd": {"sampler": "sgd"},
    "sgd_momentum": {"sampler": "sgd_momentum"},
    "sgld_gibbs_every_pass": {"sampler": "sgld", "gibbs_every": "pass", "n_init_passes": 0},
    "sghmc_gibbs_every_7": {"gibbs_every": 7, "prior_precision": 2.0},
    "sghmc_partial_fit": {"fit": "partial"},
    "sghmc_eval_set": {"fit": "eval_set"},
}
FACTORIZATION_SETTINGS = dict(n_components=3, n_chains=2, n_warmup=3, n_draws=4,
                              n_draws_kept=2, batch_size=40, n_init_passes=2,
                              n_partial_passes=4, n_jobs=1, random_state=3)

#: Sampler names run on each estimator's problem (BPS needs a curvature bound,
#: which the Poisson and linear-regression models do not have), and the
#: network and factorisation cases above.
CASES = {
    "logistic": ("hmc", "hmc_ecs", "hmc_ecs_signed", "sgld", "sghmc", "rwmh",
                 "austerity_mh", "bps", "sbps", "psbps"),
    "spline": ("hmc", "hmc_ecs", "sghmc"),
    "poisson": ("hmc", "hmc_ecs", "sgld", "sghmc", "rwmh", "austerity_mh", "sbps"),
    "linear": ("hmc", "hmc_ecs", "sgld", "rwmh", "sbps"),
    **{kind: tuple(cases) for kind, cases in MLP_CASES.items()},
    "factorization": tuple(FACTORIZATION_CASES),
}
SETTINGS = dict(n_chains=2, n_warmup=60, n_draws=8, n_jobs=1, random_state=3)


def _problem(kind):
    if kind == "mlp_classifier":
        X, y = load_iris(return_X_y=True)
        return (X - X.mean(axis=0)) / X.std(axis=0), y
    if kind == "mlp_regressor":
        X, y = load_diabetes(return_X_y=True)
        X = X[:150, :4]
        return (X - X.mean(axis=0)) / X.std(axis=0), y[:150]
    if kind == "factorization":
        return make_ratings_like(n_users=15, n_items=10, n_ratings=120, n_components=3,
                                 random_state=5)
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


def _mlp_data(kind, variant, X, y):
    """The variant of the kind's problem a case names (None: as it is)."""
    if variant == "float32":
        return X.astype(np.float32), y
    if variant == "binary":  # iris versicolor against virginica: one sigmoid output
        keep = y > 0
        return X[keep], np.where(y[keep] == 2, "virginica", "versicolor")
    if variant == "multioutput":
        return X, np.column_stack([y, np.sin(2.0 * X[:, 2]) + X[:, 0]])
    assert variant is None, variant
    return X, y


def _mlp_parts(kind, name, X, y):
    """Kept networks, Gibbs-sampled precisions, predictions and predictive draws."""
    options = dict(MLP_CASES[kind][name])
    X, y = _mlp_data(kind, options.pop("data", None), X, y)
    cls = BayesianMLPClassifier if kind == "mlp_classifier" else BayesianMLPRegressor
    est = cls(**{**MLP_SETTINGS, **options}).fit(X, y)
    rows = X[::5]
    parts = {"": est.network_draws_,
             "prior_precision": est.sample_stats_["prior_precision"],
             "sample_y": est.sample_y(rows, n_samples=3, random_state=0)}
    if kind == "mlp_classifier":
        parts["predict_proba"] = est.predict_proba(rows)
        parts["sample_y"] = np.searchsorted(est.classes_, parts["sample_y"])
    else:
        parts["noise_precision"] = est.sample_stats_["noise_precision"]
        parts["predict"] = np.stack(est.predict(rows, return_std=True))
    return parts


def _factorization_parts(name, X, y):
    """Kept draws, Gibbs-sampled precisions and predictions of one factorisation case."""
    options = dict(FACTORIZATION_CASES[name])
    how = options.pop("fit", None)
    est = BayesianMatrixFactorization(**{**FACTORIZATION_SETTINGS, **options})
    cut = 4 * len(y) // 5
    if how == "partial":
        est.fit(X[:cut], y[:cut]).partial_fit(X[cut:], y[cut:])
    elif how == "eval_set":
        est.fit(X[:cut], y[:cut], eval_set=(X[cut:], y[cut:]))
    else:
        assert how is None, how
        est.fit(X, y)
    parts = {"": est.draws_,
             "prior_precision": est.sample_stats_["prior_precision"],
             "noise_precision": est.sample_stats_["noise_precision"],
             # Seen pairs and an unseen user and item (the prior mean).
             "predict": est.predict(np.vstack([X[::7], [[10_000, 10_000]]]))}
    if how == "eval_set":
        parts["eval_rmse_draw"] = est.eval_rmse_["draw"]
        parts["eval_rmse_mean"] = est.eval_rmse_["mean"]
        parts["eval_prediction"] = est.eval_prediction_
    return parts


def compute(keys=None):
    """``{"kind/case": draws (chain, draw, dim)}`` for the requested case keys, and
    for the network and factorisation cases their other parts as
    ``{"kind/case/part": array}``."""
    out = {}
    for kind, samplers in CASES.items():
        wanted = [s for s in samplers if keys is None or f"{kind}/{s}" in keys]
        if not wanted:
            continue
        X, y = _problem(kind)
        for sampler in wanted:
            key = f"{kind}/{sampler}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                if kind in MLP_CASES:
                    parts = _mlp_parts(kind, sampler, X, y)
                elif kind == "factorization":
                    parts = _factorization_parts(sampler, X, y)
                else:
                    parts = {"": _estimator(kind, sampler).fit(X, y)._all_draws()}
            for part, value in parts.items():
                out[f"{key}/{part}" if part else key] = np.asarray(value)
    return out


def case_of(key):
    """The case (``kind/name``) a recorded key belongs to."""
    return "/".join(key.split("/")[:2])


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
