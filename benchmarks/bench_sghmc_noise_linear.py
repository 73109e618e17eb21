"""What limits SG-HMC's minibatch noise correction: the fluctuation of a single minibatch's V_hat.

A Bayesian linear regression as a linear "network" (``MLP(d, (), 1,
"identity", "gaussian")``, fixed prior precision 5 and noise precision 1,
exact Gaussian posterior), n = 1,000 rows, d = 100 features, minibatches of
m = 20 (so ``d >> m``, as for a network, where d = 79,510 and m = 500),
SG-HMC with ``alpha = 0.1``.  Configurational temperature ``T`` of the draws
(1 for a chain that samples its target):

* ``B_hat = 0`` (``noise_correction=None``);
* the library's correction with ``V_hat`` from each minibatch
  (``"fisher"``, ``"covariance"``), and with the pooled low-rank estimate
  (``"fisher_lowrank:pool:rank[:refresh]"``: ``pool`` minibatches of fresh
  rows, top ``rank`` eigenpairs, a new estimate every ``refresh`` updates or
  once per 50-update pass);
* a dense reference that uses the *population* covariance ``V(theta)`` of the
  per-row gradients at the current position (all n rows, ``O(n d^2)`` per
  step, only possible for small problems) in the same Crank-Nicolson friction
  step: what the correction gives when ``V_hat`` does not fluctuate;
* the same dense loop with a minibatch ``V_hat`` and *additive* per-row noise
  independent of theta, where the minibatch estimate is enough;
* the dense loop with ``V_hat`` from the previous minibatch (independent of
  the current noise), averaged over the current and ``r - 1`` previous
  minibatches, and that average truncated to its top ``k`` eigenpairs
  (``dense()``'s ``friction``);
* ``dense exact-ou``: the minibatch ``V_hat`` with the friction as an exact
  Ornstein-Uhlenbeck step instead of Crank-Nicolson.

``--only kind:friction ...`` runs a subset (e.g. ``dense:average:20``,
``library:fisher_lowrank:50:20``, ``library:None``, ``"dense exact-ou:minibatch"``).

One JSON line per variant.  ``python benchmarks/bench_sghmc_noise_linear.py``
(about 3 CPU-minutes).
"""

import argparse
import json
import sys
import time

import numpy as np

from bayesian_subsample.diagnostics import configurational_temperature
from bayesian_subsample.likelihood._model_target import HierarchicalPosterior
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import ModelSG, run_model_chain

N, D, M, LAM, ALPHA = 1000, 100, 20, 5.0, 0.1


def problem(seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = X @ rng.normal(size=D) * 0.3 + rng.normal(size=N)
    H = X.T @ X + LAM * np.eye(D)
    return X, y, H, np.linalg.solve(H, X.T @ y)


def library(eta, correction, n_draws, seed):
    X, y, H, mean = problem()
    net = MLP(D, (), 1, "identity", "gaussian")
    model = MLPModel(net, X, y)
    post = HierarchicalPosterior(model, net.layer_of_each_weight(), net.glorot_init,
                                 prior_precision=LAM, noise_precision=1.0)
    extra = {}
    if correction is not None and correction.startswith("fisher_lowrank:"):
        # "fisher_lowrank:pool:rank[:refresh]"
        parts = [int(p) for p in correction.split(":")[1:]]
        extra = {"noise_pool": parts[0], "noise_rank": parts[1],
                 "noise_refresh": parts[2] if len(parts) > 2 else None}
        correction = "fisher_lowrank"
    res = run_model_chain(ModelSG("sghmc", M, eta, ALPHA, n_networks_kept=n_draws,
                                  noise_correction=correction, **extra),
                          np.random.default_rng(seed), post, 20, n_draws)
    t = configurational_temperature(lambda x: model.full_loglik_and_grad(x)[1] - LAM * x,
                                    res.draws, n_probes=2, random_state=0)
    return float(t.temperature[0]), float(t.standard_error[0])


def parse_friction(friction):
    """``"previous"``, ``"average:r"`` or ``"average:r:k"`` -> (lag, r, k); others -> None."""
    if friction == "previous":
        return 1, 1, None
    if friction.startswith("average:"):
        parts = [int(p) for p in friction.split("+")[0].split(":")[1:]]
        return 0, parts[0], (parts[1] if len(parts) > 1 else None)
    return None


def dense(eta, friction, steps, seed, additive=False, exact_ou=False):
    """CN-friction SG-HMC with an explicit (d, d) V; T = tr(H C) / d from the draws.

    ``friction`` is ``"population"`` (V of all n rows at theta), ``"minibatch"``
    (the current minibatch's empirical Fisher), ``"previous"`` (the previous
    minibatch's, independent of the current noise), ``"average:r"`` (the mean of
    the current and r - 1 previous minibatches' estimates) or ``"average:r:k"``
    (that mean truncated to its top-k eigenpairs; ``"average:r:k+diag"`` adds
    the diagonal of the remainder).
    """
    X, y, H, mean = problem()
    rng = np.random.default_rng(seed)
    th, v = mean.copy(), rng.normal(size=D) * np.sqrt(eta)
    fpc = (N * N / M) * (1 - M / N)
    pooled = parse_friction(friction)
    history = []                               # per-minibatch G^T G / M, newest last
    kept = []
    for t in range(steps):
        th = th + v
        S = rng.choice(N, M, replace=False)
        if additive:
            G = rng.normal(size=(M, D))           # per-row noise independent of theta
            g = -H @ (th - mean) + (N / M) * G.sum(0)
        else:
            G = X[S] * (y[S] - X[S] @ th)[:, None]
            g = (N / M) * G.sum(0) - LAM * th
        if friction == "population":
            Gall = X * (y - X @ th)[:, None]
            V = fpc * np.cov(Gall.T)
        elif pooled is not None:
            lag, r, k = pooled
            history.append(G.T @ G / M)
            del history[:-(r + lag)]
            use = history[:len(history) - lag] if lag else history
            V = fpc * (sum(use) / len(use) if use else np.zeros((D, D)))
            if k is not None:
                w, U = np.linalg.eigh(V)
                top = (U[:, -k:] * w[-k:]) @ U[:, -k:].T
                # "+diag": the remainder's diagonal kept (low rank plus diagonal).
                V = top + (np.diag(np.diag(V - top)) if friction.endswith("+diag") else 0.0)
        else:
            V = fpc * G.T @ G / M
        A = ALPHA * np.eye(D) + 0.5 * eta * V
        if exact_ou:
            # The friction as an exact Ornstein-Uhlenbeck step with the force
            # held over it: v' = e^{-A} v + phi(A) eta g + N(0, S), phi(a) =
            # (1 - e^{-a}) / a, S = eta (I - e^{-2A}) - phi(A) eta^2 V phi(A)
            # (what the gradient noise does not supply; >= 0 in every
            # eigendirection since a = alpha + eta lambda / 2).
            lam, Q = np.linalg.eigh(V)
            lam = np.maximum(lam, 0.0)
            a = ALPHA + 0.5 * eta * lam
            phi = -np.expm1(-a) / a
            var = np.maximum(-eta * np.expm1(-2 * a) - eta * eta * lam * phi ** 2, 0.0)
            v = Q @ (np.exp(-a) * (Q.T @ v) + phi * (Q.T @ (eta * g))
                     + np.sqrt(var) * rng.normal(size=D))
        else:
            rhs = ((np.eye(D) - A / 2) @ v + eta * g
                   + np.sqrt(2 * ALPHA * eta) * rng.normal(size=D))
            v = np.linalg.solve(np.eye(D) + A / 2, rhs)
        if t > steps // 10 and t % 10 == 0:
            kept.append(th - mean)
    E = np.array(kept)
    C = E.T @ E / len(E)
    # Standard error by batch means over 10 blocks of the kept draws.
    blocks = np.array_split(E, 10)
    tb = [np.trace(H @ (b.T @ b / len(b))) / D for b in blocks]
    return float(np.trace(H @ C) / D), float(np.std(tb, ddof=1) / np.sqrt(10))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eta", type=float, default=4e-6)
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", nargs="*", default=None,
                    help="run only these variants, e.g. 'library:fisher' 'dense:average:20:5' "
                         "(kind:friction; frictions as in dense())")
    args = ap.parse_args(argv)
    out = open(args.out, "a") if args.out else sys.stdout
    runs = [("library", c) for c in (None, "fisher", "covariance")]
    runs += [("dense", "population"), ("dense", "minibatch"), ("dense additive", "minibatch"),
             ("dense exact-ou", "minibatch")]
    runs += [("dense", f) for f in ("previous", "average:5", "average:20", "average:20:5",
                                    "average:20:20")]
    runs += [("library", f"fisher_lowrank:{p}:{k}") for p, k in ((20, 100), (50, 100), (50, 20),
                                                                 (50, 5))]
    if args.only is not None:
        runs = [(s.split(":", 1)[0], (s.split(":", 1)[1] if ":" in s else None))
                for s in args.only]
        runs = [(k, None if f == "None" else f) for k, f in runs]
    for kind, variant in runs:
        c0 = time.process_time()
        if kind == "library":
            t, se = library(args.eta, variant, args.draws, args.seed)
        else:
            t, se = dense(args.eta, variant, args.steps, args.seed, kind == "dense additive",
                          kind == "dense exact-ou")
        print(json.dumps({"implementation": kind, "friction": variant, "eta": args.eta,
                          "n": N, "d": D, "m": M, "alpha": ALPHA, "temperature": round(t, 4),
                          "standard_error": round(se, 4),
                          "cpu_seconds": round(time.process_time() - c0, 1)}),
              file=out, flush=True)


if __name__ == "__main__":
    main()
