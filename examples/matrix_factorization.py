"""Online Bayesian matrix factorisation of ratings, with new users arriving.

Generates MovieLens-like ratings from a known low-rank model
(:func:`bayesian_subsample.datasets.make_ratings_like`, noise sd 0.5, so an
RMSE of 0.5 is the best possible), with string ids in a ``DataFrame`` as
real data come, then:

1. fits :class:`~bayesian_subsample.BayesianMatrixFactorization` (SG-HMC,
   Chen, Fox and Guestrin, 2014, §4.3) on the ratings of the first 80% of the
   users, scoring a held-out set after every pass;
2. predicts held-out ratings of *new* users (the prior mean: global mean plus
   the item's bias) and of known users, with 90% predictive intervals;
3. lets the new users' first ratings arrive by ``partial_fit`` and predicts
   their remaining ratings again.

Run ``python examples/matrix_factorization.py --help`` for the options.
"""

import argparse
import time

import numpy as np
import pandas as pd

from bayesian_subsample import BayesianMatrixFactorization
from bayesian_subsample.datasets import make_ratings_like


def rmse(pred, y):
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-ratings", type=int, default=60_000)
    p.add_argument("--n-components", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    X, y = make_ratings_like(n_users=600, n_items=400, n_ratings=args.n_ratings,
                             n_components=args.n_components, noise_sd=0.5,
                             random_state=args.seed)
    df = pd.DataFrame({"user": [f"user{u}" for u in X[:, 0]],
                       "movie": [f"movie{i}" for i in X[:, 1]]})
    rng = np.random.default_rng(args.seed)
    held = rng.random(len(y)) < 0.2
    new_user = X[:, 0] >= 480
    train = ~held & ~new_user

    est = BayesianMatrixFactorization(n_components=args.n_components, n_warmup=10,
                                      n_draws=30, batch_size=4000, random_state=args.seed)
    t0 = time.perf_counter()
    est.fit(df[train], y[train], eval_set=(df[held & ~new_user], y[held & ~new_user]))
    print(f"fit: {time.perf_counter() - t0:.1f} s, {est.draws_.shape[1]} kept draws "
          f"({est.draws_nbytes_ / 1e6:.1f} MB)")
    print("held-out RMSE of the running predictive mean every 5 passes:",
          np.round(est.eval_rmse_["mean"][0][::5], 3))

    known = held & ~new_user
    pred = est.predict(df[known])
    iv = est.predict_interval(df[known], alpha=0.1)
    cover = np.mean((y[known] >= iv[:, 0]) & (y[known] <= iv[:, 1]))
    print(f"known users: RMSE {rmse(pred, y[known]):.3f} (floor 0.5, global mean "
          f"{rmse(y[train].mean(), y[known]):.3f}); 90% intervals cover {cover:.1%}")

    first = new_user & ~held
    later = new_user & held
    before = rmse(est.predict(df[later]), y[later])
    t0 = time.perf_counter()
    est.partial_fit(df[first], y[first])
    after = rmse(est.predict(df[later]), y[later])
    print(f"new users: RMSE {before:.3f} before their ratings arrive (prior mean), "
          f"{after:.3f} after partial_fit ({time.perf_counter() - t0:.1f} s, "
          f"{est.n_ratings_seen_} ratings seen)")


if __name__ == "__main__":
    main()
