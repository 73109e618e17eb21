"""How hot are SGLD and SG-HMC on MNIST?  Gradient-noise temperature per weight.

Without a noise estimate (``B_hat = 0``) the minibatch gradient adds its own
noise to what the samplers inject, so they sample a posterior hotter than
the target (Chen, Fox and Guestrin, 2014, §3.2-3.3).  Per coordinate ``j``,
with ``sigma_j^2 = (n^2 / m) (1 - m / n) V_j`` the variance of the minibatch
estimate of the full-data gradient (``V_j`` the variance of the per-row
gradients over the training set, finite-population factor for rows drawn
without replacement), the ratio of gradient-noise variance to injected
variance per update is

* SG-HMC in the SGD-with-momentum form (eq. 15),
  ``v <- v + eta g - alpha v + N(0, 2 alpha eta)``:
  ``r_j = eta sigma_j^2 / (2 alpha)`` (their ``B / C``);
* SGLD, ``theta <- theta + eta g + N(0, 2 eta)``: ``r_j = eta sigma_j^2 / 2``;

and in a locally quadratic direction the chain's stationary variance is
about ``1 + r_j`` times the posterior's: an effective temperature
``1 + r_j``.  ``V`` is measured exactly (:meth:`MLP.gradient_moments`, by
chunks over the 50,000 training rows) at a network fitted by
``--fit-passes`` passes of SGD with momentum; the JSON lines give the
quantiles of ``r_j`` over the weights of each layer for each
``method=eta`` (the step sizes bench_mlp_mnist.py chose on the validation
set).

    python benchmarks/bench_mlp_temperature.py --rates sghmc=4e-6 sgld=1e-4 sghmc=2e-6
"""

import argparse
import json
import sys

import numpy as np
from threadpoolctl import threadpool_limits

from bayesian_subsample.likelihood._model_target import HierarchicalPosterior
from bayesian_subsample.models._mlp import MLP, MLPModel
from bayesian_subsample.samplers._sg_model import ModelSG, run_model_chain

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_mlp_mnist import MNIST, load_split  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=MNIST)
    ap.add_argument("--rates", nargs="+", default=["sghmc=4e-6", "sgld=1e-4", "sghmc=2e-6"])
    ap.add_argument("--momentum-decay", type=float, default=0.01)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--fit-passes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    xtr, ytr, xva, yva, _, _ = load_split(args.data, args.seed)
    net = MLP(784, (100,), 10, "logistic", "softmax")
    model = MLPModel(net, xtr, ytr)
    posterior = HierarchicalPosterior(model, net.layer_of_each_weight(), net.glorot_init)
    rng = np.random.default_rng(args.seed)
    with threadpool_limits(limits=1, user_api="blas"):
        fit = run_model_chain(ModelSG("sgd_momentum", args.batch_size, 2e-6, args.momentum_decay),
                              rng, posterior, 0, args.fit_passes)
        theta = fit.draws[-1]
        n, m = len(ytr), args.batch_size
        s1, s2 = np.zeros(net.dim), np.zeros(net.dim)
        for start in range(0, n, 5000):
            a, b = net.gradient_moments(theta, xtr[start:start + 5000], ytr[start:start + 5000])
            s1 += a
            s2 += b
    V = np.maximum(s2 / n - (s1 / n) ** 2, 0.0) * n / (n - 1)
    sigma2 = (n * n / m) * (1 - m / n) * V
    z = net.predict_output(theta, xva)
    print(json.dumps({"fit": "sgd_momentum", "passes": args.fit_passes,
                      "val_error": float(np.mean(z.argmax(1) != yva))}))
    layer = net.layer_of_each_weight()
    for spec in args.rates:
        method, eta = spec.split("=")
        eta = float(eta)
        r = eta * sigma2 / (2 * args.momentum_decay if method == "sghmc" else 2.0)
        for l in range(net.n_layers):
            rl = r[layer == l]
            print(json.dumps({
                "method": method, "learning_rate": eta, "layer": l,
                "momentum_decay": args.momentum_decay if method == "sghmc" else None,
                "r_median": float(np.median(rl)), "r_q90": float(np.quantile(rl, 0.9)),
                "r_max": float(rl.max()), "fraction_r_above_1": float(np.mean(rl > 1))}))


if __name__ == "__main__":
    main()
