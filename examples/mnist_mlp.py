"""A Bayesian neural network on MNIST: SG-HMC against SGD, with calibration.

Fits :class:`~bayesian_subsample.BayesianMLPClassifier` (one hidden layer of
100 sigmoid units, softmax output, per-layer Gamma(1, 1) precision
hyper-priors as in Chen, Fox and Guestrin, 2014, §4.2) to the 50,000-image
training split of MNIST with SG-HMC, and the same network with plain SGD
(``sampler="sgd"``, a point estimate), then prints test error, log loss and
expected calibration error of both.  Pixels are scaled to [0, 1] and kept as
float32 (the matrix products run in float32).

    python examples/mnist_mlp.py --passes 60          # ~10-20 min on 2 cores
    python examples/mnist_mlp.py --passes 8 --n-train 10000   # a quick look

For the full Figure 4 comparison see ``benchmarks/bench_mlp_mnist.py``.
"""

import argparse
import os
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import log_loss

from bayesian_subsample import BayesianMLPClassifier


def ece(p, y, n_bins=15):
    """Expected calibration error of the top-class probability (equal-width bins)."""
    conf, correct = p.max(axis=1), p.argmax(axis=1) == y
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    return float(sum(np.mean(bins == b) * abs(correct[bins == b].mean() - conf[bins == b].mean())
                     for b in range(n_bins) if np.any(bins == b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "shared", "data",
        "mnist.npz")))
    ap.add_argument("--passes", type=int, default=60)
    ap.add_argument("--n-train", type=int, default=50000)
    args = ap.parse_args()
    d = np.load(args.data)
    X = d["x_train"].reshape(60000, -1).astype(np.float32) / 255
    y = d["y_train"]
    perm = np.random.default_rng(0).permutation(60000)[:args.n_train]
    Xte = d["x_test"].reshape(10000, -1).astype(np.float32) / 255
    yte = d["y_test"]
    warm = max(1, args.passes // 6)
    for sampler in ("sghmc", "sgd"):
        clf = BayesianMLPClassifier((100,), activation="logistic", sampler=sampler,
                                    momentum_decay=0.01, n_chains=1, n_warmup=warm,
                                    n_draws=args.passes - warm, n_networks_kept=20,
                                    random_state=0)
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(X[perm], y[perm])
        p = clf.predict_proba(Xte)
        print(f"{sampler:6s} test error {np.mean(clf.classes_[p.argmax(1)] != yte):.4f}  "
              f"log loss {log_loss(yte, p):.4f}  ECE {ece(p, yte):.4f}  "
              f"networks {clf.n_networks_} ({clf.networks_nbytes_ / 1e6:.0f} MB)  "
              f"fit {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
