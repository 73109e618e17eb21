"""Configurational temperature: does a chain sample ``exp(-U)`` or ``exp(-U / T)``?

For a smooth density ``pi(x) ~ exp(-U(x))`` vanishing at infinity,
integration by parts gives, coordinate by coordinate,

    E_pi[(d_j U)^2] = E_pi[d_jj U],

so for every block ``l`` of coordinates the ratio

    T_l = E ||grad_l U||^2 / E tr_l(Hess U)

is 1 under ``pi``, and ``T`` under ``exp(-U / T)``: a *configurational
temperature* (Rugh, 1997; Jepps, Ayton and Evans, 2000), estimated from
states of a chain with nothing but gradients.  It checks the sampler, not
the model: whatever the prior or the likelihood, a chain whose ratio is
above 1 samples a distribution wider than its target in the directions that
carry the curvature.  Stochastic-gradient samplers with an uncorrected
gradient-noise term (Chen, Fox and Guestrin, 2014, eqs. 6-7: ``B = eps V /
2`` with ``B_hat = 0``) run hot in exactly those directions.

``tr_l(Hess U)`` is estimated by Hutchinson's method (Rademacher probes
``v``, ``E[v_l . (H v)_l] = tr_l H``) with central finite-difference
Hessian-vector products of the gradient, two gradient calls per probe.  The
standard error is the delta-method one over states (gradient term) and
states x probes (trace term), treating the states as independent: pass
well-separated states (e.g. the thinned networks of a run).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["configurational_temperature", "ConfigurationalTemperature"]


class ConfigurationalTemperature(NamedTuple):
    """Result of :func:`configurational_temperature` (arrays over the blocks).

    Parameters
    ----------
    temperature : ndarray (n_blocks,)
        ``T_l``: 1 for a chain that samples its target, above 1 for a hot one.
    standard_error : ndarray (n_blocks,)
        Its delta-method standard error.
    per_state : ndarray (n_states, n_blocks)
        ``||grad_l U||^2 / (mean over probes of tr_l)`` of each state.
    """

    temperature: np.ndarray
    standard_error: np.ndarray
    per_state: np.ndarray


def configurational_temperature(grad_log_density, positions, blocks=None, n_probes=8,
                                fd_step=1e-3, random_state=None):
    """Configurational temperature of ``positions`` for the target behind ``grad_log_density``.

    Parameters
    ----------
    grad_log_density : callable or sequence of callables
        ``g(x)``, the gradient of the log target density (``-grad U``) at
        ``x``, exact (full data, not a minibatch estimate).  A sequence
        gives one function per position: the target of each state, e.g. the
        weights' conditional given the hyperparameters a Gibbs step drew
        with them.
    positions : array (n_states, d)
        Chain states, ideally well separated (treated as independent).
    blocks : None or int array (d,)
        Block label ``0..L-1`` of each coordinate (e.g. the layer of each
        weight); None for one block.
    n_probes : int
        Rademacher probes per state for the trace.
    fd_step : float
        Length ``h ||v||`` of the finite-difference step along each probe.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    ConfigurationalTemperature
        ``temperature`` (1 for a chain that samples its target), its
        ``standard_error`` and the ``per_state`` ratios.

    Examples
    --------
    Exact draws from a Gaussian give 1, draws twice as wide give 2:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> H = np.diag([1.0, 100.0])
    >>> x = rng.normal(size=(2000, 2)) / np.sqrt(np.diag(H))
    >>> t = configurational_temperature(lambda z: -H @ z, x, n_probes=1, random_state=1)
    >>> bool(abs(t.temperature[0] - 1) < 4 * t.standard_error[0])
    True
    >>> t2 = configurational_temperature(lambda z: -H @ z, np.sqrt(2) * x, n_probes=1)
    >>> bool(abs(t2.temperature[0] - 2) < 4 * t2.standard_error[0])
    True
    """
    x = np.asarray(positions, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"positions must be (n_states, d), got shape {x.shape}.")
    n_states, d = x.shape
    if n_states < 2:
        raise ValueError("configurational_temperature needs at least 2 states for a standard "
                         "error.")
    if callable(grad_log_density):
        grads = [grad_log_density] * n_states
    else:
        grads = list(grad_log_density)
        if len(grads) != n_states:
            raise ValueError(f"grad_log_density has {len(grads)} functions for {n_states} "
                             "positions; give one function or one per position.")
    n_probes = int(n_probes)
    if n_probes < 1:
        raise ValueError(f"n_probes must be a positive integer, got {n_probes}.")
    if blocks is None:
        blocks = np.zeros(d, dtype=np.intp)
    blocks = np.asarray(blocks, dtype=np.intp)
    if blocks.shape != (d,) or blocks.min() < 0:
        raise ValueError(f"blocks must be non-negative integer labels of shape ({d},).")
    n_blocks = int(blocks.max()) + 1
    if np.unique(blocks).size != n_blocks:
        missing = sorted(set(range(n_blocks)) - set(np.unique(blocks).tolist()))
        raise ValueError(f"blocks must use every label 0..{n_blocks - 1}; labels {missing} "
                         "have no coordinate (relabel the blocks consecutively).")
    fd_step = float(fd_step)
    if not (np.isfinite(fd_step) and fd_step > 0):
        raise ValueError(f"fd_step must be a finite number > 0, got {fd_step!r}.")
    rng = np.random.default_rng(random_state)
    h = fd_step / np.sqrt(d)
    g2 = np.empty((n_states, n_blocks))
    tr = np.empty((n_states, n_probes, n_blocks))
    for s in range(n_states):
        grad = grads[s]
        g = np.asarray(grad(x[s]), dtype=np.float64)
        g2[s] = np.bincount(blocks, weights=g * g, minlength=n_blocks)
        for k in range(n_probes):
            v = rng.choice(np.array([-1.0, 1.0]), size=d)
            # Hess U v = -(g(x + h v) - g(x - h v)) / (2 h)
            hv = (np.asarray(grad(x[s] - h * v)) - np.asarray(grad(x[s] + h * v))) / (2 * h)
            tr[s, k] = np.bincount(blocks, weights=v * hv, minlength=n_blocks)
    if not (np.all(np.isfinite(g2)) and np.all(np.isfinite(tr))):
        raise FloatingPointError("non-finite gradient or Hessian-vector product; check the "
                                 "positions and grad_log_density.")
    tr_state = tr.mean(1)                   # probes of one state are not independent
    mean_g2, mean_tr = g2.mean(0), tr_state.mean(0)
    if not np.all(mean_tr > 0):
        raise ValueError(
            f"the mean Hessian trace of U is not positive in block(s) "
            f"{np.flatnonzero(~(mean_tr > 0)).tolist()}, so the temperature is undefined there "
            "(the states sit where the target is not locally log-concave on average); use more "
            "states or merge the block with another.")
    temperature = mean_g2 / mean_tr
    # Delta method for a ratio of means over states, with the covariance of
    # the two per-state statistics (both are read at the same state).
    cov = np.array([np.cov(g2[:, b], tr_state[:, b])[0, 1] for b in range(n_blocks)])
    rel_var = (g2.var(0, ddof=1) / mean_g2 ** 2 + tr_state.var(0, ddof=1) / mean_tr ** 2
               - 2 * cov / (mean_g2 * mean_tr)) / n_states
    return ConfigurationalTemperature(temperature,
                                      np.abs(temperature) * np.sqrt(np.maximum(rel_var, 0.0)),
                                      g2 / tr_state)
