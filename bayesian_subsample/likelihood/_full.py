"""The full-data posterior, its mode and its Taylor expansion around theta*.

References
----------
Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).
Eq. (4.4) (second-order Taylor control variates) and eq. (4.7) (the
full-data sums ``A(theta*)`` and ``B(theta*)``).  Models with several linear
predictors (``n_linear_predictors = K > 1``, multinomial regression) use
the same full passes (``model.sums``); only the per-row control-variate
algebra (``delta_k in R^K``) and the curvature bound branch on ``K``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["CentreCheck", "FullDataTarget", "TaylorExpansion", "TallPosterior"]


class FullDataTarget:
    """Log posterior on all the data: ``sum_k ell_k(theta) + log p(theta)``.

    Each call to :meth:`logdensity_and_grad` is one chunked pass over the
    ``n_obs`` rows and costs ``n_obs_per_eval = n_obs`` per-observation
    log-likelihood-and-gradient evaluations.
    """

    def __init__(self, model, prior):
        self.model = model
        self.prior = prior
        self.n_obs_per_eval = model.n_obs

    def logdensity_and_grad(self, theta):
        value, grad = self.model.sums(theta, order=1)
        lp, gp = self.prior.logdensity_and_grad(theta)
        return value + lp, grad + gp

    def grad(self, theta):
        """Gradient of the log density alone (inside a leapfrog trajectory)."""
        if not hasattr(self.model.family, "grad_eta"):
            return self.logdensity_and_grad(theta)[1]
        return self.model.grad_sum(theta) + self.prior.grad(theta)


class TaylorExpansion(NamedTuple):
    """Population sums of the Taylor control variates around ``theta_star``.

    With ``a_k = ell_k(theta*)``, ``b_k x_k = grad ell_k(theta*)`` and
    ``c_k x_k x_k^T = H_k(theta*)`` (eq. 4.4), the population sum of the
    control variates is, for ``Delta = theta - theta*``,
    ``sum_k q_k(theta) = loglik + grad^T Delta + Delta^T hess Delta / 2``
    (second order; the first order drops the last term and the zeroth order
    keeps ``loglik`` only).  ``grad`` and ``hess`` are ``A(theta*)`` and
    ``B(theta*)`` of eq. (4.7).
    """

    #: Expansion point theta*, shape (dim,).
    theta_star: np.ndarray
    #: Order of the control variates, 0, 1 or 2.
    order: int
    #: ``sum_k ell_k(theta*)``.
    loglik: float
    #: ``A(theta*) = sum_k grad ell_k(theta*)``, shape (dim,).
    grad: np.ndarray
    #: ``B(theta*) = sum_k H_k(theta*)``, shape (dim, dim).
    hess: np.ndarray
    #: Negative Hessian of the log posterior at theta*, the HMC mass matrix
    #: of the paper's §6.3, shape (dim, dim).
    neg_hessian: np.ndarray
    #: Per-observation evaluations spent on the pass that built this.
    n_obs_evaluated: int

    def population_sum(self, theta):
        """``(sum_k q_k(theta), grad_theta sum_k q_k(theta))`` in O(dim^2)."""
        if self.order == 0:
            return self.loglik, np.zeros_like(theta)
        delta = theta - self.theta_star
        if self.order == 1:
            return self.loglik + self.grad @ delta, self.grad.copy()
        hd = self.hess @ delta
        return self.loglik + self.grad @ delta + 0.5 * delta @ hd, self.grad + hd


class CentreCheck:
    """Is a candidate theta* good enough for the difference estimator (4.1)?

    The control variates (4.4) give an unbiased log-likelihood estimator for
    *any* expansion point theta*; theta* only sets its variance
    ``sigma^2(theta) = n^2 V(theta) / m``, with ``V`` the population variance
    of the Taylor remainders ``d_k(theta) = ell_k(theta) - q_k(theta)``
    (eq. 4.1-4.4).  The remainder is of third order in ``theta - theta*``, so
    a theta* that is ``k`` posterior sd from where the chain moves inflates
    ``sigma^2`` by roughly ``((d + k^2) / d)^3``: far centres cost a great
    deal, centres within a few sd almost nothing.  The Newton search for
    theta* (:meth:`TallPosterior.reference_expansion`) asks this object,
    before each full pass, whether the point it would pass over is already
    good enough, and stops refining when it is.

    The prediction uses only rows already in hand: a pilot of at most
    ``n_pilot`` rows of the subset the search started from, and
    ``n_draws`` fixed standard-normal vectors (common random numbers, so
    two candidates are compared on the same draws).  For a centre ``c`` whose
    distance to the full-data mode is uncertain, with expected Newton
    decrement ``lam`` (the squared Mahalanobis distance in the posterior
    metric ``Sigma``), the chain's draws are modelled as
    ``theta ~ N(mean, (1 + lam / d) Sigma)`` (the posterior around a mode
    that is itself off by ``N(0, (lam / d) Sigma)``); ``sigma^2`` is the
    pilot's upper-quartile ``n^2 Q_75(V) / m`` over those draws, the
    statistic the HMC-ECS pilot for ``m`` uses.  The centre is accepted when
    the excess over the same statistic with theta* at the mode
    (``lam = 0``, centred on ``mean``) is at most ``fraction`` times the
    larger of the variance target and that baseline: the centre then costs
    at most a small fraction of the variance budget the sampler allows.

    Parameters
    ----------
    posterior : TallPosterior
    hessian : ndarray of shape (dim, dim)
        Negative Hessian of the log posterior near the mode (the subset's,
        scaled to ``n``): ``Sigma`` is its inverse.
    idx : ndarray of int
        The subset the search started from (its mode is the first centre).
    rng : numpy.random.Generator
    subsample_size : int
        The ``m`` the variance is predicted for (the smallest the sampler
        would use).
    target_var : float
        The sampler's target for ``sigma^2`` (HMC-ECS: ``target_loglik_var``).
    fraction : float, default=0.1
    n_draws : int, default=20
    n_pilot : int, default=20000

    Attributes
    ----------
    checks : list of dict
        One entry per prediction: the decrement assumed, ``sigma^2`` at the
        centre, the baseline and whether the centre was accepted.

    Raises
    ------
    numpy.linalg.LinAlgError
        When ``hessian`` has no Cholesky factor (a rank-deficient subset
        Hessian, e.g. a constant or duplicated column under a vague prior).
        The theta* search then runs without a check
        (:func:`~bayesian_subsample.samplers._hmc_family.prepare_at_full_data_mode`).
    """

    def __init__(self, posterior, hessian, idx, rng, subsample_size, target_var,
                 fraction=0.1, n_draws=20, n_pilot=20000):
        self.posterior = posterior
        n = posterior.n_obs
        idx = np.asarray(idx)
        self.subset_size = len(idx)
        pick = idx if len(idx) <= n_pilot else np.sort(rng.choice(idx, n_pilot, replace=False))
        model = posterior.model
        Xr, yr, wr = model.rows(pick)
        self._rows = (pick, model.design(Xr), yr, wr)
        self._z = rng.standard_normal((int(n_draws), posterior.dim))
        self.hessian = np.asarray(hessian, dtype=np.float64)
        self._chol = np.linalg.cholesky(self.hessian)
        self.m = int(min(n, subsample_size))
        self.target_var = float(target_var)
        self.fraction = float(fraction)
        self.single_predictor = int(getattr(model, "n_linear_predictors", 1)) == 1
        self.checks = []
        # Memos of the search's repeated questions (the same centre judged
        # with several decrements, the same baseline for each of them, the
        # subset decrement asked by the growth rule and the chord steps):
        # each value is computed once, exactly as it would be again.
        self._offsets = None
        self._sigma_matrix = None
        self._memo_estimator = {}
        self._memo_sigma2 = {}
        self._memo_decrement = {}

    @staticmethod
    def _key(v):
        return np.asarray(v, dtype=np.float64).tobytes()

    def _sigma_inv_solve(self, v):
        """``Sigma v = hessian^{-1} v``: two triangular solves with the Cholesky
        factor (what LAPACK's general solve does with a triangular matrix,
        without its unit-triangular half)."""
        from scipy.linalg import solve_triangular

        return solve_triangular(self._chol, solve_triangular(self._chol, v, lower=True),
                                lower=True, trans="T")

    def _estimator(self, centre):
        key = self._key(centre)
        hit = self._memo_estimator.get(key)
        if hit is None:
            hit = self._memo_estimator[key] = self._new_estimator(centre)
        return hit

    def _new_estimator(self, centre):
        from ._difference import DifferenceEstimator

        d = self.posterior.dim
        # Only theta* enters the per-row coefficients; the population sums
        # (unused for the remainders' variance) are left at zero.
        ex = TaylorExpansion(theta_star=np.array(centre, dtype=np.float64), order=2,
                             loglik=0.0, grad=np.zeros(d), hess=np.zeros((d, d)),
                             neg_hessian=self.hessian, n_obs_evaluated=0)
        est = DifferenceEstimator(self.posterior.model, self.posterior.prior, ex,
                                  len(self._rows[0]), n_blocks=1)
        return est, est._with_coefficients(*self._rows)

    def sigma2(self, centre, mean, scale, refused=None):
        """``n^2 Q_75(V) / m`` at draws ``N(mean, scale * Sigma)``, theta* = ``centre``.

        With ``refused`` (a predicate non-decreasing in its argument; one
        linear predictor only), the draws stop as soon as it holds for a
        lower bound of the statistic: the 75% quantile of ``N`` variances is
        at least the ``(N - j)``-th largest of those computed so far (``j``
        its lower index; 6 of 20).  That bound is returned (not memoised);
        ``refused`` then holds for the full statistic too.
        """
        key = (self._key(centre), self._key(mean), float(scale))
        hit = self._memo_sigma2.get(key)
        if hit is not None:
            return hit
        n = self.posterior.n_obs
        if refused is not None and self.single_predictor:
            n_draws = len(self._z)
            top = n_draws - int(math.floor((n_draws - 1) * 0.75))
        else:
            top = None
        est, sub = self._estimator(centre)
        # theta = mean + sqrt(scale) L^{-T} z has covariance scale * Sigma.
        if self._offsets is None:
            self._offsets = np.linalg.solve(self._chol.T, self._z.T).T
        offsets = self._offsets * np.sqrt(scale)
        if self.single_predictor:
            # Only the remainders d_k are needed, not their slopes.  The
            # linear predictors of all draws come from one (draws, rows)
            # matrix product instead of a matrix-vector product per draw
            # (each of which reads every pilot row); then
            # DifferenceEstimator.differences' operations for d_k (the
            # family's order-0 terms are its order-1 value), element-wise on
            # the (draws, rows) array, each draw's variance reduced along its
            # row: the same numbers up to the product's rounding.  When a
            # refusal may stop early, in two batches: the first ``top``
            # draws, which can already refuse, then the rest.
            model = self.posterior.model
            etas = (np.asarray(mean) + offsets) @ sub.Z.T
            var = np.empty(len(etas))
            cuts = [0, len(etas)] if top is None else [0, top, len(etas)]
            compiled = getattr(model, "remainder_variances", None)
            for lo, hi in zip(cuts[:-1], cuts[1:]):
                eta = etas[lo:hi]
                v = None if compiled is None else compiled(
                    sub.y, sub.w, eta, sub.eta_star, sub.a, sub.b, sub.half_c)
                if v is None:
                    delta = eta - sub.eta_star
                    ell = model.eta_terms(sub.y, sub.w, eta, 0)[0]
                    hcd = sub.half_c * delta
                    slope = sub.b + hcd
                    v = (ell - (sub.a + delta * slope)).var(axis=1)
                var[lo:hi] = v
                if top is None:
                    continue
                for i in range(max(lo, top - 1), hi):
                    bound = n * n * float(np.sort(var[:i + 1])[-top]) / self.m
                    if refused(bound):
                        return bound
        else:
            var = [est.differences(np.asarray(mean) + o, sub)[0].var() for o in offsets]
        out = self._memo_sigma2[key] = n * n * float(np.quantile(var, 0.75)) / self.m
        return out

    def __call__(self, centre, decrement, mean=None, exact=True):
        """Accept ``centre`` as theta*?  ``decrement``: the (expected) Newton
        decrement of ``mean`` (default: the centre itself) is 0 when ``mean`` is
        the mode estimate; else the expected decrement of the centre.

        With ``exact=False`` only the verdict is needed: a refusal may stop
        early (:meth:`sigma2`'s ``refuse_above``) and then logs a lower bound
        of ``sigma2`` (``"exact": False`` in :attr:`checks`).  The verdict is
        the same either way."""
        mean = np.asarray(centre if mean is None else mean, dtype=np.float64)
        d = self.posterior.dim
        decrement = max(0.0, float(decrement))
        if exact:
            at = self.sigma2(centre, mean, 1.0 + decrement / d)
            base = self.sigma2(mean, mean, 1.0)
        else:
            base = self.sigma2(mean, mean, 1.0)
            limit = self.fraction * max(self.target_var, base)
            at = self.sigma2(centre, mean, 1.0 + decrement / d,
                             refused=lambda value: value - base > limit)
        ok = bool(np.isfinite(at) and at - base <= self.fraction * max(self.target_var, base))
        self.checks.append({"decrement": decrement, "sigma2": at, "baseline": base,
                            "accepted": ok, "exact": exact or ok})
        return ok

    def last_entry(self):
        """The last prediction, as the theta* search logs it with its pass:
        ``predicted_decrement`` and ``predicted_sigma2``."""
        entry = self.checks[-1]
        return {"predicted_decrement": entry["decrement"],
                "predicted_sigma2": entry["sigma2"]}

    def _pilot_vectors(self, centre, theta):
        """Per-row ``z_k`` (design), the remainder slopes ``dd_k/deta`` at
        ``theta`` and the slopes ``dell_k/deta`` at ``theta`` minus at ``centre``."""
        est, sub = self._estimator(centre)
        d, g = est.differences(np.asarray(theta, dtype=np.float64), sub)
        delta = sub.Z @ np.asarray(theta, dtype=np.float64) - sub.eta_star
        return sub.Z, g, g + 2.0 * sub.half_c * delta, sub.b

    def _trace_cov(self, Z, w):
        """``tr(Sigma Cov_k(w_k z_k))`` over the pilot rows.

        As ``sum(Sigma * (V^T V / p - mean mean^T))`` with ``V`` the rows
        ``w_k z_k``: one (dim, dim) product over the rows, where
        ``mean_k(v_k^T Sigma v_k)`` by a triangular solve per row took five
        times as long (5 ms on 10^4 pilot rows of 30 columns, three times
        per fit at 10^6 rows).  Equal up to rounding.
        """
        v = Z * w[:, None]
        mean = v.mean(axis=0)
        cov = (v.T @ v) / len(v) - np.outer(mean, mean)
        return max(0.0, float(np.sum(self._sigma() * cov)))

    def _sigma(self):
        """``Sigma = hessian^{-1}`` (symmetric), computed once."""
        if self._sigma_matrix is None:
            inv = np.linalg.inv(self._chol)
            self._sigma_matrix = inv.T @ inv
        return self._sigma_matrix

    def subset_decrement(self, centre, subset_size=None):
        """Expected decrement of the mode of a random subset of ``subset_size``
        rows (default: the starting subset's): its sampling error,
        ``(n^2 / s) (1 - s / n) tr(Sigma J)``, ``J`` the per-row covariance of
        the score (the sandwich; ``d (n / s - 1)`` for a well-specified
        model).  None for several linear predictors."""
        if not self.single_predictor:
            return None
        n = self.posterior.n_obs
        s = self.subset_size if subset_size is None else int(subset_size)
        key = self._key(centre)
        trace = self._memo_decrement.get(key)
        if trace is None:
            Z, _, _, b = self._pilot_vectors(centre, centre)
            trace = self._memo_decrement[key] = self._trace_cov(Z, b)
        return (n * n / s) * (1.0 - s / n) * trace

    def chord_decrement(self, centre, step):
        """Expected decrement after the chord step ``centre -> centre + step``
        (``step = hessian^{-1} g(centre)`` with the full-data gradient ``g``).

        The full gradient there is the error of the subset Hessian along the
        step, ``sum_k v_k - (n / s) sum_{k in S} v_k`` with ``v_k`` the change
        of row ``k``'s score over the step (zero mean over subsets, variance
        ``(n^2 / s)(1 - s / n) Cov(v)``), plus the Taylor remainder of the
        full gradient, ``R = sum_k grad d_k`` (the Newton step's quadratic
        term), estimated from the pilot with its own sampling noise removed.
        None for several linear predictors.
        """
        if not self.single_predictor:
            return None
        n, s = self.posterior.n_obs, self.subset_size
        theta = np.asarray(centre, dtype=np.float64) + step
        Z, g, w, _ = self._pilot_vectors(centre, theta)
        p = len(Z)
        r = n * (Z * g[:, None]).mean(axis=0)
        quad = float(r @ self._sigma_inv_solve(r)) - (n * n / p) * (1.0 - p / n) * \
            self._trace_cov(Z, g)
        return max(0.0, quad) + (n * n / s) * (1.0 - s / n) * self._trace_cov(Z, w)


class TallPosterior:
    """A GLM likelihood plus prior: everything the samplers ask of a model.

    This object satisfies the ``TallPosterior`` protocol of
    :mod:`bayesian_subsample.samplers._typing`; samplers never see the model.

    Parameters
    ----------
    model : GLM
        Per-observation log-likelihood terms.
    prior : GaussianPrior
    """

    def __init__(self, model, prior):
        if prior.dim != model.dim:
            raise ValueError(
                f"Prior has dimension {prior.dim} but the model has {model.dim}."
            )
        self.model = model
        self.prior = prior

    @property
    def n_obs(self):
        return self.model.n_obs

    @property
    def dim(self):
        return self.model.dim

    def full_target(self):
        """The exact log posterior on all the data (:class:`FullDataTarget`)."""
        return FullDataTarget(self.model, self.prior)

    def logprior(self, theta):
        """Log prior density at ``theta``."""
        return float(self.prior.logdensity(np.asarray(theta, dtype=float)))

    def full_loglik(self, theta):
        """``sum_k ell_k(theta)`` over all the data (one chunked pass)."""
        return float(self.model.sums(np.asarray(theta, dtype=float), order=0)[0])

    def loglik_difference(self, theta_new, theta_old, idx, expansion=None):
        """``l_k = ell_k(theta_new) - ell_k(theta_old)`` for ``k`` in ``idx`` (one gather).

        With a Taylor ``expansion``, the residuals ``l_k - (q_k(theta_new) -
        q_k(theta_old))`` of the control variates of eq. (4.4) instead; their
        population sum is ``l`` summed minus the known
        ``expansion.population_sum(theta_new) - population_sum(theta_old)``.
        """
        model = self.model
        Xr, yr, wr = model.rows(idx)
        eta_new, eta_old = model.eta(theta_new, Xr), model.eta(theta_old, Xr)
        out = (model.eta_terms(yr, wr, eta_new, 0)[0]
               - model.eta_terms(yr, wr, eta_old, 0)[0])
        if expansion is None or expansion.order == 0:
            return out
        eta_star = model.eta(expansion.theta_star, Xr)
        _, b, c = model.eta_terms(yr, wr, eta_star, 2)
        d_new, d_old = eta_new - eta_star, eta_old - eta_star
        if getattr(model, "n_linear_predictors", 1) != 1:
            # K linear predictors: q_k = a_k + b_k^T delta + delta^T C_k delta / 2.
            out -= np.einsum("ik,ik->i", b, d_new - d_old)
            if expansion.order >= 2:
                out -= 0.5 * (np.einsum("ik,ikl,il->i", d_new, c, d_new)
                              - np.einsum("ik,ikl,il->i", d_old, c, d_old))
            return out
        # q_k = a_k + b_k delta + c_k delta^2 / 2 (the a_k cancel).
        out -= b * (d_new - d_old)
        if expansion.order >= 2:
            out -= 0.5 * c * (d_new * d_new - d_old * d_old)
        return out

    def expand(self, theta_star, order=2):
        """Taylor control variates around ``theta_star`` from one chunked pass."""
        if order not in (0, 1, 2):
            raise ValueError(f"Taylor order must be 0, 1 or 2, got {order!r}.")
        theta_star = np.array(theta_star, dtype=np.float64)
        value, grad, hess = self.model.sums(theta_star, order=2)
        neg_h = -(hess + self.prior.hessian(theta_star))
        return TaylorExpansion(
            theta_star=theta_star, order=int(order), loglik=float(value), grad=grad,
            hess=hess, neg_hessian=0.5 * (neg_h + neg_h.T),
            n_obs_evaluated=self.model.n_obs,
        )

    def curvature_bound_matrix(self):
        """A matrix ``B`` bounding the curvature of the potential everywhere.

        For the potential ``U = -log pi`` of a GLM whose family bounds
        ``|d^2 ell / d eta^2| <= c`` (``family.curvature_bound``: 1/4 for the
        logistic model, ``1/s^2`` for the Gaussian one) and a Gaussian prior of
        precision ``P``, the Hessian of ``U`` satisfies
        ``v^T grad^2 U(x) v <= v^T B v`` for every ``x`` and ``v``, with

            ``B = c sum_k w_k z_k z_k^T + P``

        (``z_k`` the design row in theta coordinates, ``w_k`` the weights).  So
        along any ray the rate of the bouncy particle sampler is bounded by a
        linear function of time,
        ``v^T grad U(x + t v) <= v^T grad U(x) + t v^T B v``, which costs
        O(dim^2) per bound once ``B`` is known.  ``B`` is built in one chunked
        pass over the data (peak memory O(chunk x dim + dim^2)).

        Returns
        -------
        B : ndarray of shape (dim, dim)
        n_obs_evaluated : int
            Rows read (one per observation).

        Raises
        ------
        ValueError
            If the family has no ``curvature_bound`` or the prior no constant
            ``precision`` (no global bound is then available).
        """
        if getattr(self.model, "n_linear_predictors", 1) != 1:
            return self._curvature_bound_matrix_multi()
        c = self._bound_prerequisites("curvature_bound")
        precision = self.prior.precision
        model = self.model
        B = np.zeros((model.dim, model.dim))
        for part in model.map_chunks("_block_outer"):
            B += part
        B *= float(c)
        precision = np.asarray(precision, dtype=np.float64)
        B += np.diag(precision) if precision.ndim == 1 else precision
        return 0.5 * (B + B.T), model.n_obs

    def _bound_prerequisites(self, attribute):
        """The family's curvature bound ``attribute``; ValueError when there is no
        global bound (no finite family bound, or a prior without a constant precision)."""
        bound = getattr(self.model.family, attribute, None)
        if bound is None or not np.all(np.isfinite(bound)):
            raise ValueError(
                f"The {getattr(self.model.family, 'name', 'model')!r} family has no bound on "
                "the curvature of its log-likelihood, so the full-data bouncy particle "
                "sampler cannot bound its event rate. Use sampler='sbps' or 'hmc'.")
        if getattr(self.prior, "precision", None) is None:
            raise ValueError(
                "The prior has no constant precision (as for BayesianLinearRegression, whose "
                "noise-scale term is not Gaussian), so the bouncy particle sampler cannot "
                "bound its event rate. Use sampler='sbps' or 'hmc'.")
        return bound

    def _curvature_bound_matrix_multi(self):
        """``B = kron(A, sum_k w_k z_k z_k^T) + P`` for K linear predictors.

        ``A`` (K, K) bounds ``-d^2 ell / d eta^2`` in the Loewner order
        (``family.curvature_bound_eta``; Böhning's ``(I - 1 1^T / K) / 2`` for
        the softmax), so ``-H_k(theta) <= w_k kron(A, z_k z_k^T)`` for every
        theta, and ``B`` bounds the Hessian of the potential as in the K = 1
        case.  One chunked pass; theta layout ``Theta.ravel()``.
        """
        model = self.model
        A = self._bound_prerequisites("curvature_bound_eta")
        precision = self.prior.precision
        S = None
        for part in model.map_chunks("_block_design_outer"):
            S = part if S is None else S + part
        B = np.kron(np.asarray(A, dtype=np.float64), S)
        precision = np.asarray(precision, dtype=np.float64)
        B += np.diag(precision) if precision.ndim == 1 else precision
        return 0.5 * (B + B.T), model.n_obs

    def difference_estimator(self, expansion, subsample_size, n_blocks=100):
        """The perturbed difference estimator around ``expansion`` (eqs. 4.1-4.7)."""
        from ._difference import DifferenceEstimator

        return DifferenceEstimator(self.model, self.prior, expansion, subsample_size, n_blocks)

    def compiled_passes(self):
        """A context in which the model's full passes run compiled, where the
        model has such passes (:func:`bayesian_subsample.models._glm.compiled_passes`)."""
        from ..models._glm import compiled_passes

        return compiled_passes(self.model)

    def compiled_support(self):
        """Why the compiled HMC-ECS loop cannot serve this model and prior
        (a sentence), or None; needs no pass over the data
        (:func:`._difference.compiled_support`)."""
        from ._difference import compiled_support

        return compiled_support(self.model, self.prior)

    def gradient_estimator(self, subsample_size, expansion=None):
        """Minibatch gradient of the log posterior for SGLD and SG-HMC.

        Plain (:class:`MinibatchGradient`) when ``expansion`` is None or of
        order 0; otherwise Taylor control variates of ``expansion.order``
        around its theta* (:class:`ControlVariateGradient`).
        """
        from ._gradients import ControlVariateGradient, MinibatchGradient

        if expansion is None or expansion.order == 0:
            return MinibatchGradient(self.model, self.prior, subsample_size)
        return ControlVariateGradient(self.model, self.prior, expansion, subsample_size)

    def block_poisson_estimator(self, expansion, batch_size, n_products, lower_bound,
                                n_refresh=1):
        """The signed block-Poisson estimator around ``expansion`` (eq. 5.1)."""
        from ._block_poisson import BlockPoissonEstimator

        return BlockPoissonEstimator(self.model, self.prior, expansion, batch_size,
                                     n_products, lower_bound, n_refresh)

    def tune_block_poisson(self, expansion, thetas, rng, batch_size, target_var=1.0,
                           n_products=None, lower_bound=None, n_blocks=100, n_pilot=20000,
                           n_sim=1000):
        """Tune ``(lambda, a)`` of the block-Poisson estimator at draws ``thetas``.

        At each theta the differences ``d_k(theta)`` are computed on a random
        pilot set (all rows when there are at most ``n_pilot``) and ``n_sim``
        mini-batch estimates ``(n / m) sum d`` are simulated by drawing
        ``batch_size`` of them with replacement, exactly as the estimator
        does; see :func:`~bayesian_subsample.likelihood.tune_block_poisson`.

        Returns
        -------
        tuned : dict
        n_obs_evaluated : int
        """
        from ._block_poisson import tune_block_poisson
        from ._difference import DifferenceEstimator

        n = self.n_obs
        idx = np.arange(n) if n <= n_pilot else rng.choice(n, n_pilot, replace=False)
        est = DifferenceEstimator(self.model, self.prior, expansion, len(idx), n_blocks=1)
        sub = est._subsample_from(idx)
        dhat = np.empty((len(thetas), n_sim))
        for i, theta in enumerate(thetas):
            d, _ = est.differences(np.asarray(theta, dtype=float), sub)
            pick = rng.integers(0, len(d), (n_sim, batch_size))
            dhat[i] = (n / batch_size) * d[pick].sum(axis=1)
        tuned = tune_block_poisson(dhat, batch_size, target_var,
                                   lambdas=None if n_products is None else [n_products],
                                   lower_bound=lower_bound, n_blocks=n_blocks)
        return tuned, len(idx) * (len(thetas) + 1)

    def difference_variance(self, expansion, thetas, rng, n_pilot=20000, pilot=None):
        """Per-observation variance of ``d_k(theta) = ell_k - q_k`` at each theta.

        The variance of the difference estimator (4.1) with ``m`` draws is
        ``sigma^2(theta) = n^2 V(theta) / m`` where ``V`` is the population
        variance of the ``d_k(theta)``; this returns ``V`` estimated on a pilot
        random subset of ``n_pilot`` observations (all of them if fewer), or,
        with ``pilot`` (a :class:`CentreCheck`), on that check's pilot rows
        (random rows gathered already; no new gather).

        Returns
        -------
        V : ndarray of shape (len(thetas),)
        n_obs_evaluated : int
        """
        from ._difference import DifferenceEstimator

        n = self.n_obs
        if pilot is not None:
            idx = pilot._rows[0]
            est = DifferenceEstimator(self.model, self.prior, expansion, len(idx), n_blocks=1)
            sub = est._with_coefficients(*pilot._rows)
        else:
            idx = np.arange(n) if n <= n_pilot else rng.choice(n, n_pilot, replace=False)
            est = DifferenceEstimator(self.model, self.prior, expansion, len(idx), n_blocks=1)
            sub = est._subsample_from(idx)
        out = np.empty(len(thetas))
        for i, theta in enumerate(thetas):
            d, _ = est.differences(np.asarray(theta, dtype=float), sub)
            out[i] = d.var()
        return out, len(idx) * (len(thetas) + 1)

    def centre_check(self, hessian, idx, rng, subsample_size, target_var, fraction=0.1,
                     n_draws=20):
        """A :class:`CentreCheck` for :meth:`reference_expansion`'s ``check``."""
        return CentreCheck(self, hessian, idx, rng, subsample_size, target_var,
                           fraction=fraction, n_draws=n_draws)

    def reference_expansion(self, theta0, order=2, tol=0.01, max_iter=20, hessian=None,
                            log=None, check=None):
        """Newton steps on all the data from ``theta0``; the Taylor expansion where they stop.

        The shared reference point theta* of the subsampling samplers: each
        iteration is one order-2 pass (:meth:`expand`) at the current point,
        whose Hessian gives the next Newton step; the iterations stop at the
        first point whose Newton decrement ``g^T (-H)^{-1} g`` (about the
        squared Mahalanobis distance to the full-data mode in posterior sd,
        for a near-Gaussian posterior) is at most ``tol``, and the expansion
        computed there is returned, so the last pass is not repeated.  A full
        step is tried first (its order-2 pass gives the value for the Armijo
        test); only when it fails is the step halved with order-0 passes.
        From the 1% subset mode (about ``sqrt(100) = 10`` sd from the mode
        in each of the ``dim`` directions) one or two steps reach ``tol =
        0.01`` (0.1 sd) on tall data, since the relative change of the
        Hessian over that distance is ``O(10 sqrt(dim) / sqrt(n))``.

        With ``hessian`` (an approximation of the negative Hessian of the
        log posterior, e.g. the subset's, scaled to ``n``: see :meth:`mode`)
        the first steps are *chord* steps: ``theta <- theta + hessian^{-1}
        g(theta)`` with ``g`` from order-1 passes (value and gradient, no
        curvature sums: measured at about 0.4 times an order-2 pass on float32
        data, ``doc/benchmarks.rst``).  They contract the distance to the
        mode by about the relative error of ``hessian`` per step (for a
        subset of ``m`` rows, ``O(sqrt(dim / m))``), so the decrement drops
        by about its square.  Once the observed drop says the next step will
        land within ``tol / 10``, that step is taken and the one order-2 pass
        is made there; the Newton iterations above then check the exact
        decrement (and carry on if it is above ``tol``).  From the 1% subset
        mode of 10^8 rows this is two order-1 passes and one order-2 pass,
        against three order-2 passes.  A chord step that does not increase
        the log posterior by a quarter of its decrement (Armijo) ends the
        chord steps at the best point so far.

        With ``check`` (a :class:`CentreCheck`, with ``hessian``) the search
        stops by the variance of the difference estimator rather than by
        ``tol``: it refines theta* only while the variance predicted at the
        point it would pass over next is above a small fraction of the
        sampler's target (:class:`CentreCheck`).  Before the first pass the
        start (a subset mode) is judged with the subset's sampling error as
        its expected decrement (:meth:`CentreCheck.subset_decrement`); after a
        chord pass, the point the step reaches is judged with the predicted
        decrement there (:meth:`CentreCheck.chord_decrement` after the first
        step, the observed contraction after later ones); the first point
        judged good enough gets the one order-2 pass.  After an order-2 pass
        the exact decrement and step are known, so the point is judged with
        the chain's draws around the Newton step's mode estimate; if it fails,
        Newton steps carry on as without ``check``.  ``tol`` still ends the
        search where the check has not.  On tall data this drops the passes
        whose only effect is a smaller variance nobody needs (measured in
        ``doc/benchmarks.rst``: at 10^6 rows two passes instead of five; at
        10^8 two instead of three from the 1% subset, one from the 1.5%
        subset that HMC-ECS grows to when the check predicts it suffices).

        ``log``, when given, is a list that receives one dict per pass made
        (``kind``: ``"chord"``, ``"newton"`` or ``"backtrack"``, and the
        ``decrement`` where one was computed; with ``check`` also
        ``predicted_decrement``, the decrement the check assumed for the
        point the pass was made at, where it judged one).

        Returns
        -------
        expansion : TaylorExpansion
            Of order ``order`` (its sums are always of order 2).
        n_obs_evaluated : int
            Per-observation evaluations spent (``n_obs`` per pass).
        n_passes : int
            Full passes made.
        """
        n = self.n_obs
        log = [] if log is None else log
        theta0 = np.array(theta0, dtype=np.float64)
        cost, passes = 0, 0
        planned = None
        if hessian is not None:
            theta0, used, planned = self._chord_steps(theta0, hessian, tol, max_iter, log,
                                                      check)
            cost, passes = cost + used * n, passes + used
        ex = self.expand(theta0, order)
        cost, passes = cost + ex.n_obs_evaluated, passes + 1
        if hessian is None:
            check = None

        def log_post(e):
            return e.loglik + self.logprior(e.theta_star)

        for _ in range(max_iter):
            grad = ex.grad + self.prior.logdensity_and_grad(ex.theta_star)[1]
            try:
                step = np.linalg.solve(ex.neg_hessian, grad)
            except np.linalg.LinAlgError:
                log.append({"kind": "newton", "decrement": None})
                break
            decrement = float(grad @ step)
            log.append({"kind": "newton", "decrement": decrement})
            if planned is not None:
                log[-1].update(planned)
                planned = None
            if not decrement > tol:
                break
            if check is not None:
                ok = check(ex.theta_star, 0.0, mean=ex.theta_star + step)
                log[-1]["sigma2"] = check.checks[-1]["sigma2"]
                if ok:
                    break
            value = log_post(ex)
            candidate = self.expand(ex.theta_star + step, order)
            cost, passes = cost + candidate.n_obs_evaluated, passes + 1
            new_value = log_post(candidate)
            if np.isfinite(new_value) and new_value >= value + 0.25 * decrement:
                ex = candidate
                continue
            t = 0.5
            while t > 1e-10:
                theta = ex.theta_star + t * step
                new_value = self.full_loglik(theta) + self.logprior(theta)
                cost, passes = cost + n, passes + 1
                log.append({"kind": "backtrack", "decrement": None})
                if np.isfinite(new_value) and new_value >= value + 0.25 * t * decrement:
                    break
                t *= 0.5
            else:
                break
            ex = self.expand(theta, order)
            cost, passes = cost + ex.n_obs_evaluated, passes + 1
        if not (np.isfinite(ex.loglik) and np.all(np.isfinite(ex.grad))
                and np.all(np.isfinite(ex.neg_hessian))):
            # A NaN decrement ends the loop above quietly; theta* must not.
            raise FloatingPointError(
                "The full-data log-likelihood, its gradient or its curvature is not finite at "
                "the reference point (overflow in the sums over rows). Standardise the features "
                "(e.g. sklearn.preprocessing.StandardScaler in a Pipeline); float32 X overflows "
                "sooner than float64 (largest float32 is 3.4e38), so cast very large float32 "
                "features to float64.")
        return ex, cost, passes

    def _chord_steps(self, theta, hessian, tol, max_iter, log, check=None):
        """Chord steps of :meth:`reference_expansion`: ``(theta, passes made,
        predicted decrement at theta or None)``.

        Returns the point where the order-2 pass should be made: the one the
        last step reached when the predicted decrement there is below
        ``tol / 10`` (or, with ``check``, when the check accepts that point
        at its predicted decrement), else the best point whose decrement is
        known.
        """
        try:
            chol = np.linalg.cholesky(np.asarray(hessian, dtype=np.float64))
        except np.linalg.LinAlgError:
            return theta, 0, None

        def solve(g):
            return np.linalg.solve(chol.T, np.linalg.solve(chol, g))

        planned = None
        if check is not None:
            predicted = check.subset_decrement(theta)
            if predicted is not None:
                ok = check(theta, predicted)
                planned = check.last_entry()
                if ok:
                    return theta, 0, planned
        passes, prev_value, prev_decrement, prev_theta = 0, None, None, None
        for _ in range(max_iter):
            value, grad = self.model.sums(theta, order=1)
            lp, gp = self.prior.logdensity_and_grad(theta)
            value, grad = value + lp, grad + gp
            passes += 1
            step = solve(grad)
            decrement = float(grad @ step)
            log.append({"kind": "chord", "decrement": decrement})
            if planned is not None:
                log[-1].update(planned)
            planned = None
            if prev_value is not None and not (
                    np.isfinite(value) and value >= prev_value + 0.25 * prev_decrement):
                # No sufficient increase: Newton (with its own backtracking)
                # carries on from the last point that had one.
                return prev_theta, passes, None
            if not np.isfinite(decrement) or decrement <= tol:
                return theta, passes, None
            prev_theta = theta
            theta = theta + step
            if prev_decrement is not None:
                predicted = decrement * (decrement / prev_decrement)
            elif check is not None:
                predicted = check.chord_decrement(prev_theta, step)
            else:
                predicted = None
            if predicted is not None:
                ok = predicted <= tol / 10 or (check is not None and check(theta, predicted))
                if check is not None:
                    planned = (check.last_entry() if check.checks and
                               check.checks[-1]["decrement"] == predicted
                               else {"predicted_decrement": predicted})
                if ok:
                    return theta, passes, planned

            prev_value, prev_decrement = value, decrement
        return theta, passes, None

    def subset_rows(self, idx):
        """The rows of observations ``idx`` as :meth:`mode` evaluates them
        many times (``model.subset_rows``, else ``model.rows``): pass them
        back as ``mode(..., rows=)`` to search again without a new gather."""
        gather = getattr(self.model, "subset_rows", self.model.rows)
        return gather(idx)

    @staticmethod
    def join_rows(first, second):
        """The rows of ``idx_a`` then ``idx_b`` from :meth:`subset_rows` of each
        (a tuple of per-row arrays, ``None`` entries kept), or None if the
        model's rows are not such a tuple."""
        if not (isinstance(first, tuple) and isinstance(second, tuple)
                and len(first) == len(second)):
            return None
        out = []
        for a, b in zip(first, second):
            if a is None and b is None:
                out.append(None)
            elif isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
                out.append(np.concatenate([a, b]))
            else:
                return None
        return tuple(out)

    def mode(self, theta0=None, idx=None, max_iter=50, tol=1e-8, return_hessian=False,
             rows=None):
        """Posterior mode by damped Newton iterations.

        With ``idx`` given, the mode of the posterior whose log-likelihood is
        ``n_obs / len(idx)`` times the log-likelihood of those observations:
        the subset estimate of the full-data mode that the paper uses as the
        first reference point (§6.5, a random 1% of the data).  The subset's
        rows are gathered once (from a memory-mapped ``X``, a gather of rows
        spread over the file costs about as much as every Newton iteration
        on them).

        Returns
        -------
        theta : ndarray of shape (dim,)
        n_obs_evaluated : int
            Per-observation evaluations spent.
        neg_hessian : ndarray of shape (dim, dim)
            Only with ``return_hessian``: the negative Hessian of the (scaled)
            log posterior at the last point where the Newton loop computed
            one (the returned ``theta`` on convergence; the point before the
            last step if ``max_iter`` ended the loop), the ``hessian`` that
            :meth:`reference_expansion` takes for its chord steps (which need
            only a Hessian near the mode).

        ``rows``: the rows of ``idx`` gathered before (:meth:`subset_rows`),
        used instead of a new gather.

        Without ``theta0`` the iterations start at ``prior.initial_position()``
        when the prior has that method, else at zero.
        """
        if theta0 is None:
            # A prior may say where the search should start (e.g. the linear
            # model's tau = 1/sigma, whose log density is -inf at 0).
            start = getattr(self.prior, "initial_position", None)
            theta0 = np.zeros(self.dim) if start is None else start()
        theta = np.array(theta0, dtype=float)
        scale = 1.0 if idx is None else self.n_obs / len(idx)
        n_eval = 0
        per_pass = self.n_obs if idx is None else len(idx)
        if rows is None and idx is not None:
            rows = self.subset_rows(idx)
        neg_hessian = None

        def objective(th, order):
            out = (self.model.sums(th, order=order) if rows is None
                   else self.model.sums(th, order=order, rows=rows))
            lp, gp = self.prior.logdensity_and_grad(th)
            if order == 0:
                return scale * out[0] + lp
            return scale * out[0] + lp, scale * out[1] + gp, scale * out[2] + self.prior.hessian(th)

        for _ in range(max_iter):
            value, grad, hess = objective(theta, 2)
            n_eval += per_pass
            neg_hessian = -hess
            try:
                step = np.linalg.solve(-hess, grad)
            except np.linalg.LinAlgError:
                # A singular Hessian: no (unique) mode in reach, e.g. a linear
                # model that fits the data exactly (sigma -> 0).  Stop here.
                break
            decrement = float(grad @ step)
            if not decrement >= 2 * tol:
                break
            t = 1.0
            while t > 1e-10:
                candidate = theta + t * step
                new_value = objective(candidate, 0)
                n_eval += per_pass
                if np.isfinite(new_value) and new_value >= value + 0.25 * t * decrement:
                    break
                t *= 0.5
            theta = candidate
        if return_hessian:
            return theta, n_eval, neg_hessian
        return theta, n_eval
