"""
Approximate Gibbs: empirical against exact conditional probabilities
====================================================================

A small version of Figure 7 of Korattikara, Chen and Welling (2014): a
triplet Markov random field (:meth:`~bayesian_subsample.BinaryMRF.random_triplet`,
40 variables, 741 potential terms per conditional), states taken from an
exact Gibbs chain, and each update replayed with fresh uniforms through the
approximate sampler's sequential t-test (mini-batches of 100 terms).  The
larger ``epsilon``, the more the approximate conditional is pulled towards
1/2, and the fewer terms an update reads.  ``benchmarks/bench_mrf.py`` runs
the full §6.3 experiment (100 variables, Figures 7 and 8).
"""

import matplotlib.pyplot as plt
import numpy as np

from bayesian_subsample import BinaryMRF, GibbsSampler
from bayesian_subsample.samplers import gibbs

mrf = BinaryMRF.random_triplet(40, log_potential_sd=0.03, random_state=0)
exact = GibbsSampler(n_chains=1, n_warmup=50, n_draws=300, random_state=0).sample(mrf)
rng = np.random.default_rng(1)

# Updates (state, variable) spread over the exact conditional probability scale.
pool = exact.draws[0]
chosen = {b: [] for b in range(8)}
while min(len(v) for v in chosen.values()) < 3:
    x, i = pool[rng.integers(len(pool))], int(rng.integers(40))
    p = 1 / (1 + np.exp(-mrf.conditional_log_odds(i, x)))
    if len(chosen[min(int(p * 8), 7)]) < 3:
        chosen[min(int(p * 8), 7)].append((x, i, p))
updates = [u for v in chosen.values() for u in v]

fig, ax = plt.subplots(figsize=(5, 5))
ax.plot([0, 1], [0, 1], "k:", label="exact")
for eps in (0.01, 0.1, 0.25):
    params = gibbs.GibbsParams("approximate", "systematic", eps, 100)
    p_true, p_hat, terms = [], [], 0
    for x, i, p in updates:
        u = rng.random(300)
        thresholds = np.log(u) - np.log1p(-u)
        decisions = [gibbs.decide(rng, mrf, i, x, t, params) for t in thresholds]
        p_true.append(p)
        p_hat.append(np.mean([d[0] for d in decisions]))
        terms += sum(d[1] for d in decisions)
    # Averages over the three updates of each probability bin.
    bins = np.array(p_true).reshape(8, 3).mean(axis=1), np.array(p_hat).reshape(8, 3).mean(axis=1)
    ax.plot(*bins, "o-", ms=3,
            label=f"eps = {eps} ({terms / (300 * len(updates)):.0f} of 741 terms)")
ax.set_xlabel("exact conditional probability")
ax.set_ylabel("approximate (replayed) conditional probability")
ax.legend(fontsize=8)
fig.tight_layout()
