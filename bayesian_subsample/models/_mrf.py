"""Dense binary Markov random fields given as a sum of potential terms.

Korattikara, Chen and Welling (2014), "Austerity in MCMC land", §5 and §6.3.
A distribution on ``D`` binary variables ``x in {0, 1}^D`` is written as

    log P(x) = sum_t log psi_t(x_{v_t}) + sum_i b_i x_i - log Z,

``psi_t`` a potential table over the ``r`` variables ``v_t = (v_t1, ..., v_tr)``
of term ``t`` (all terms of one model share the arity ``r``) and ``b`` an
optional exactly-known bias.  The Gibbs conditional of variable ``i`` is a
logistic function of the log-odds (the paper's eq. 11)

    L_i(x) = log P(x_i = 1 | x_-i) / P(x_i = 0 | x_-i)
           = b_i + sum_{t contains i} l_t,
    l_t = log psi_t(x_i = 1, x_rest) - log psi_t(x_i = 0, x_rest),

a sum over the ``N_i`` terms containing ``i``, which is what the sequential
test of the approximate Gibbs sampler subsamples.  For each variable the
model keeps its terms in a compressed per-variable list: for term position
``n`` in ``range(N_i)``, the other ``r - 1`` variables of the term (int16 when
``D`` allows) and the ``2^(r-1)`` values of ``l_t`` as a function of them, so
that :meth:`BinaryMRF.term_log_odds` evaluates any index array of positions
with one gather (no loop over terms).

The §6.3 model (:meth:`BinaryMRF.random_triplet`) has one term for every
triple ``i < j < k`` with i.i.d. normal log-potentials over the 8 entries, so
``N_i = (D - 1)(D - 2) / 2`` (4,851 for D = 100).  The paper writes
``log psi ~ N(0, 0.02)``.  Its notation elsewhere is ``N(mean, variance)``
(the random-walk proposal ``N(theta_t, sigma^2_RW)``), which would make 0.02
a variance (sd 0.141); but at that scale the D = 100 model is a frozen spin
glass: an exact systematic-scan Gibbs chain flips 0.8 of the 100 variables
per scan and two chains from different starts disagree on single-variable
marginals by up to 1 after 450 scans (seed 0), so neither the paper's
"truth from long Gibbs chains" nor Figure 7's spread of conditional
probabilities over (0, 1) could arise.  With 0.02 as the standard deviation
the chains mix (24 flips per scan, split R-hat 1.04 after 300 scans of two
chains) and the sequential test reads about the same fraction of the terms
as under the other reading (the test's behaviour depends on the log-odds in
units of the per-term spread).  So the default is ``log_potential_sd=0.02``;
pass ``log_potential_sd=math.sqrt(0.02)`` for the variance reading.
A pairwise model (dense Ising model / Boltzmann machine) is
:meth:`BinaryMRF.pairwise`.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

__all__ = ["BinaryMRF", "TermBlocks"]

#: Seed of the fixed random order in which :meth:`BinaryMRF.term_blocks` lays
#: out each variable's terms (the sampler's correctness does not depend on it).
BLOCK_LAYOUT_SEED = 20140621


class TermBlocks(NamedTuple):
    """Each variable's terms cut into blocks of ``block_size`` (see :meth:`BinaryMRF.term_blocks`).

    Variable ``i`` owns the global blocks ``block_ptr[i] <= g < block_ptr[i + 1]``
    (``B_i = n_blocks[i] = ceil(N_i / block_size)`` of them).  Block ``g`` holds
    ``sizes[g]`` real terms (``ceil(N_i / B_i)`` or one fewer, at most
    ``block_size``) in slots ``0 .. sizes[g] - 1``; an unused slot is a padding
    term whose log-odds is 0 in every state.
    """

    block_size: int
    #: ``B_i``, blocks per variable, shape (n_variables,).
    n_blocks: np.ndarray
    #: Offsets of each variable's blocks, shape (n_variables + 1,).
    block_ptr: np.ndarray
    #: Real terms in each block, shape (total blocks,).
    sizes: np.ndarray
    #: Term position (in ``range(N_i)``) held by each slot, -1 for padding,
    #: shape (total blocks, block_size).
    positions: np.ndarray
    #: One (total blocks, block_size) array per neighbour slot of a term.
    nbr: tuple
    #: Log-odds tables, flat: slot ``s`` of block ``g`` at state code ``c`` is
    #: ``diff[(g * block_size + s) * n_codes + c]``.
    diff: np.ndarray

#: Largest number of variables for which :meth:`BinaryMRF.exact_distribution`
#: enumerates the 2^D states.
MAX_ENUMERATION_VARIABLES = 22


def _check_random_state(random_state):
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or (isinstance(random_state, numbers.Integral)
                                and not isinstance(random_state, bool) and random_state >= 0):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.SeedSequence):
        return np.random.default_rng(random_state)
    raise ValueError("random_state must be None, a non-negative int, a SeedSequence or a "
                     f"numpy Generator, got {random_state!r}.")


class BinaryMRF:
    """A binary Markov random field ``log P(x) = sum_t log psi_t(x_{v_t}) + b @ x``.

    Parameters
    ----------
    variables : array-like of int, shape (n_terms, arity)
        The variables of each potential term (distinct within a row).
    log_potentials : array-like of float, shape (n_terms, 2**arity)
        ``log psi_t``; entry ``c`` is the value at the configuration whose bits,
        most significant first, are the values of ``variables[t]`` in row order
        (for a triplet term ``(i, j, k)``: ``c = 4 x_i + 2 x_j + x_k``).
    bias : array-like of float, shape (n_variables,), optional
        Exactly-known linear term ``b @ x`` (a sampler adds ``b_i`` to the
        log-odds without subsampling it).
    n_variables : int, optional
        ``D``; defaults to ``variables.max() + 1`` (or ``len(bias)``).

    Attributes
    ----------
    n_variables : int
    arity : int
    n_terms : int
        Number of potential terms ``T``.
    terms_per_variable : ndarray of int, shape (n_variables,)
        ``N_i``, the number of terms containing each variable (the population
        size of the sequential test for that variable's conditional).
    """

    def __init__(self, variables, log_potentials, bias=None, n_variables=None):
        variables = np.asarray(variables)
        if variables.ndim != 2 or variables.shape[0] == 0 or variables.shape[1] == 0:
            raise ValueError("variables must be a 2-D integer array of shape (n_terms, arity) "
                             f"with at least one term, got shape {variables.shape}.")
        if not np.issubdtype(variables.dtype, np.integer):
            raise ValueError(f"variables must hold integer variable indices, got dtype "
                             f"{variables.dtype}.")
        n_terms, arity = variables.shape
        if arity > 10:
            raise ValueError(f"arity {arity} is too large (at most 10 variables per term: a "
                             f"table has 2**arity entries).")
        log_potentials = np.asarray(log_potentials, dtype=np.float64)
        if log_potentials.shape != (n_terms, 2 ** arity):
            raise ValueError(f"log_potentials must have shape (n_terms, 2**arity) = "
                             f"({n_terms}, {2 ** arity}) to match variables, got "
                             f"{log_potentials.shape}.")
        if not np.all(np.isfinite(log_potentials)):
            raise ValueError("log_potentials contain NaN or infinity; every potential must be "
                             "positive and finite (zero potentials are not supported).")
        if variables.min() < 0:
            raise ValueError("variables contain negative indices; use 0, ..., n_variables - 1.")
        if n_variables is None:
            n_variables = int(variables.max()) + 1 if bias is None else len(np.ravel(bias))
        if (isinstance(n_variables, bool) or not isinstance(n_variables, numbers.Integral)
                or n_variables < 1):
            raise ValueError(f"n_variables must be a positive integer, got {n_variables!r}.")
        n_variables = int(n_variables)
        if variables.max() >= n_variables:
            raise ValueError(f"variables contain index {int(variables.max())}, but "
                             f"n_variables={n_variables}.")
        if arity > 1:
            s = np.sort(variables, axis=1)
            if np.any(s[:, 1:] == s[:, :-1]):
                bad = int(np.flatnonzero(np.any(s[:, 1:] == s[:, :-1], axis=1))[0])
                raise ValueError(f"term {bad} repeats a variable ({variables[bad].tolist()}); "
                                 "the variables of a term must be distinct.")
        if bias is None:
            bias = np.zeros(n_variables)
        bias = np.asarray(bias, dtype=np.float64)
        if bias.shape != (n_variables,):
            raise ValueError(f"bias must have shape ({n_variables},), got {bias.shape}.")
        if not np.all(np.isfinite(bias)):
            raise ValueError("bias contains NaN or infinity.")
        self.n_variables = n_variables
        self.arity = int(arity)
        self.n_terms = int(n_terms)
        index_dtype = np.int16 if n_variables <= np.iinfo(np.int16).max else np.int32
        self.variables = variables.astype(index_dtype)
        self.log_potentials = log_potentials
        self.bias = bias
        self._build_conditionals()
        self._term_blocks = {}

    # Construction --------------------------------------------------------
    def _build_conditionals(self):
        """Per-variable term lists: neighbours and log-odds tables (CSR layout)."""
        T, r, D = self.n_terms, self.arity, self.n_variables
        K = 2 ** (r - 1)
        codes = np.arange(K)
        owners, nbrs, diffs, term_ids = [], [], [], []
        for p in range(r):
            others = [q for q in range(r) if q != p]
            # Full table index with x_p = b and the others set by ``codes``.
            base = np.zeros(K, dtype=np.int64)
            for rank, q in enumerate(others):
                bit = (codes >> (r - 2 - rank)) & 1
                base += bit << (r - 1 - q)
            one = self.log_potentials[:, base + (1 << (r - 1 - p))]
            zero = self.log_potentials[:, base]
            owners.append(self.variables[:, p].astype(np.int64))
            nbrs.append(self.variables[:, others])
            diffs.append(one - zero)
            term_ids.append(np.arange(T))
        owner = np.concatenate(owners)
        order = np.lexsort((np.concatenate(term_ids), owner))
        counts = np.bincount(owner, minlength=D)
        self.terms_per_variable = counts
        self._indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        nbr = np.concatenate(nbrs)[order]
        # One contiguous column per neighbour slot: gathers read 1-D arrays.
        self._nbr_cols = [np.ascontiguousarray(nbr[:, q]) for q in range(r - 1)]
        self._diff = np.ascontiguousarray(np.concatenate(diffs)[order]).reshape(-1)
        self._n_codes = K

    @classmethod
    def random_triplet(cls, n_variables=100, log_potential_sd=0.02, random_state=None):
        """The §6.3 model: a potential on every triple, ``log psi ~ N(0, sd^2)``.

        One term per triple ``i < j < k`` (``D (D-1) (D-2) / 6`` terms, 161,700 for
        D = 100), each a 2x2x2 table of i.i.d. log-normal entries.  The paper's
        ``N(0, 0.02)`` is read with 0.02 the standard deviation (the module
        docstring says why).  The same ``random_state`` gives the same model.

        Parameters
        ----------
        n_variables : int, default=100
            ``D >= 3``.
        log_potential_sd : float, default=0.02
            Standard deviation of each ``log psi`` entry.
        random_state : None, int, SeedSequence or Generator
        """
        if (isinstance(n_variables, bool) or not isinstance(n_variables, numbers.Integral)
                or n_variables < 3):
            raise ValueError(f"n_variables must be an integer >= 3 for a triplet model, got "
                             f"{n_variables!r}.")
        if (isinstance(log_potential_sd, bool) or not isinstance(log_potential_sd, numbers.Real)
                or not math.isfinite(log_potential_sd) or log_potential_sd < 0):
            raise ValueError("log_potential_sd must be a finite number >= 0, got "
                             f"{log_potential_sd!r}.")
        rng = _check_random_state(random_state)
        D = int(n_variables)
        i, j, k = np.meshgrid(np.arange(D), np.arange(D), np.arange(D), indexing="ij")
        keep = (i < j) & (j < k)
        triples = np.stack([i[keep], j[keep], k[keep]], axis=1)
        log_psi = rng.normal(0.0, float(log_potential_sd), (len(triples), 8))
        return cls(triples, log_psi, n_variables=D)

    @classmethod
    def pairwise(cls, coupling, bias=None):
        """A dense pairwise model (Ising model / Boltzmann machine) on ``{0, 1}^D``.

        ``log P(x) = sum_{i<j} W_ij x_i x_j + b @ x``, one term per pair
        ``i < j`` with ``W_ij != 0`` (the pair terms are what the sequential test
        subsamples; ``b`` enters the log-odds exactly).

        Parameters
        ----------
        coupling : array-like, shape (D, D)
            Symmetric ``W``; the diagonal must be zero (put fields in ``bias``).
        bias : array-like, shape (D,), optional
        """
        W = np.asarray(coupling, dtype=np.float64)
        if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 2:
            raise ValueError(f"coupling must be a square (D, D) matrix with D >= 2, got shape "
                             f"{W.shape}.")
        if not np.all(np.isfinite(W)):
            raise ValueError("coupling contains NaN or infinity.")
        if not np.allclose(W, W.T, rtol=1e-12, atol=1e-12):
            raise ValueError("coupling must be symmetric (W_ij = W_ji); pass (W + W.T) / 2.")
        if np.any(np.diag(W) != 0):
            raise ValueError("coupling must have a zero diagonal; x_i^2 = x_i, so put the "
                             "diagonal into bias.")
        D = W.shape[0]
        i, j = np.triu_indices(D, k=1)
        nz = W[i, j] != 0
        if not np.any(nz):
            raise ValueError("coupling is all zeros: the model has no pair terms.")
        i, j = i[nz], j[nz]
        tables = np.zeros((len(i), 4))
        tables[:, 3] = W[i, j]
        return cls(np.stack([i, j], axis=1), tables,
                   bias=np.zeros(D) if bias is None else bias, n_variables=D)

    # Evaluation ------------------------------------------------------------
    def check_state(self, x):
        """``x`` as an int8 array of shape (n_variables,) with 0/1 entries."""
        arr = np.asarray(x)
        if arr.shape != (self.n_variables,):
            raise ValueError(f"state must have shape ({self.n_variables},), got {arr.shape}.")
        if not np.all((arr == 0) | (arr == 1)):
            raise ValueError("state entries must be 0 or 1.")
        return arr.astype(np.int8)

    def term_log_odds(self, i, x, idx=None):
        """Per-term log-odds contributions ``l_t`` of variable ``i`` at state ``x``.

        Parameters
        ----------
        i : int
            The variable.
        x : ndarray of int8, shape (n_variables,)
            The current state (``x_i`` itself is not read).
        idx : ndarray of int, optional
            Positions in ``range(terms_per_variable[i])`` of the terms to
            evaluate; all terms when None.

        Returns
        -------
        ndarray of float64, shape (len(idx),)
        """
        start = self._indptr[i]
        if idx is None:
            rows = np.arange(start, self._indptr[i + 1])
        else:
            rows = start + np.asarray(idx)
        cols = self._nbr_cols
        if not cols:  # unary terms
            return self._diff[rows]
        code = x[cols[0][rows]].astype(np.intp)
        for q in range(1, len(cols)):
            code = code * 2 + x[cols[q][rows]]
        return self._diff[rows * self._n_codes + code]

    def term_log_odds_chains(self, i, XT, idx=None):
        """Per-term log-odds contributions of variable ``i`` for many states at once.

        The vectorised form of :meth:`term_log_odds` used by Gibbs chains run
        in lockstep.  The states are the *columns* of ``XT`` (one chain per
        column), so gathering a neighbour's value for a term copies one
        contiguous row of all chains; the same terms (``idx``) are evaluated
        for every state.

        Parameters
        ----------
        i : int
            The variable.
        XT : ndarray of int8, shape (n_variables, n_states)
            One state per column (row ``i`` is not read).
        idx : ndarray of int, optional
            Positions in ``range(terms_per_variable[i])`` of the terms to
            evaluate, shared by all states; all terms when None.

        Returns
        -------
        ndarray of float64, shape (len(idx), n_states)
            Column ``c`` equals ``term_log_odds(i, XT[:, c], idx)``.
        """
        start, stop = self._indptr[i], self._indptr[i + 1]
        rows = np.arange(start, stop) if idx is None else start + np.asarray(idx)
        cols = self._nbr_cols
        if not cols:  # unary terms
            return np.repeat(self._diff[rows][:, None], XT.shape[1], axis=1)
        code = XT.take(cols[0][rows], axis=0)
        if len(cols) > 7:  # codes up to 2**(arity - 1) - 1 overflow int8
            code = code.astype(np.int16)
        for q in range(1, len(cols)):
            code += code  # code <<= 1, but numpy's add is vectorised and its shift is not
            code |= XT.take(cols[q][rows], axis=0)
        return self._diff.take((rows * self._n_codes)[:, None] + code)

    def term_arrays(self):
        """The flat per-variable term lists, for a compiled kernel.

        Returns
        -------
        (indptr, nbr, diff, n_codes)
            Variable ``i``'s terms are rows ``indptr[i] <= row < indptr[i + 1]``;
            ``nbr[q, row]`` is the ``q``-th other variable of the term (shape
            ``(arity - 1, rows)``) and ``diff[row * n_codes + c]`` its log-odds
            ``l_t`` at state code ``c`` (the others' values as bits, first
            neighbour most significant), as read by :meth:`term_log_odds`.
        """
        rows = len(self._diff) // self._n_codes
        nbr = (np.stack(self._nbr_cols) if self._nbr_cols
               else np.zeros((0, rows), dtype=self.variables.dtype))
        return self._indptr, nbr, self._diff, self._n_codes

    def term_blocks(self, block_size):
        """Each variable's terms in a fixed random order, cut into blocks of ``block_size``.

        The layout for cluster sampling of the terms by the approximate Gibbs
        sampler (:mod:`bayesian_subsample.samplers.gibbs`): a look of the
        sequential test draws whole blocks without replacement and reads each
        one contiguously.  Variable ``i``'s ``N_i`` terms are put in one fixed
        uniformly random order (seed :data:`BLOCK_LAYOUT_SEED`, the same for
        every block size) and dealt into ``B_i = ceil(N_i / block_size)``
        blocks of as equal sizes as possible (``N_i mod B_i`` blocks of
        ``ceil(N_i / B_i)`` terms first, the rest one term fewer), so a block's
        total is close to a simple random sample total of its size.  The sampler's correctness does not depend on
        the layout (its test is exact for any fixed partition into blocks);
        a random layout makes the block totals as informative per term as
        single terms.  Built once per block size and cached.

        Parameters
        ----------
        block_size : int
            ``b >= 1``.

        Returns
        -------
        TermBlocks
        """
        b = int(block_size)
        if b < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}.")
        if b in self._term_blocks:
            return self._term_blocks[b]
        counts = self.terms_per_variable
        n_blocks = -(-counts // b)
        block_ptr = np.concatenate([[0], np.cumsum(n_blocks)]).astype(np.int64)
        G = int(block_ptr[-1])
        sizes = np.empty(G, dtype=np.int64)
        positions = np.full((G, b), -1, dtype=np.int64)
        rng = np.random.default_rng(BLOCK_LAYOUT_SEED)
        for i in range(self.n_variables):
            N, B = int(counts[i]), int(n_blocks[i])
            if N == 0:
                continue
            sz = np.full(B, N // B)
            sz[:N % B] += 1
            lo, hi = block_ptr[i], block_ptr[i + 1]
            sizes[lo:hi] = sz
            filled = np.arange(b)[None, :] < sz[:, None]
            block = positions[lo:hi]
            block[filled] = rng.permutation(N)
        real = positions >= 0
        owner = np.repeat(np.arange(self.n_variables), n_blocks)
        rows = np.where(real, self._indptr[owner][:, None] + positions, 0)
        nbr = tuple(np.where(real, col[rows], 0).astype(col.dtype) for col in self._nbr_cols)
        n_codes = self._n_codes
        diff = self._diff.reshape(-1, n_codes)[rows.ravel()] * real.reshape(-1, 1)
        out = TermBlocks(b, n_blocks, block_ptr, sizes, positions, nbr,
                         np.ascontiguousarray(diff).reshape(-1))
        self._term_blocks[b] = out
        return out

    def block_sums(self, i, x, blocks, layout):
        """Totals ``T_g`` of the per-term log-odds of variable ``i`` over blocks.

        Parameters
        ----------
        i : int
        x : ndarray of int8, shape (n_variables,)
        blocks : ndarray of int
            Block numbers in ``range(layout.n_blocks[i])``.
        layout : TermBlocks
            From :meth:`term_blocks`.

        Returns
        -------
        ndarray of float64, shape (len(blocks),)
        """
        return self.block_sums_chains(i, np.asarray(x)[:, None], blocks, layout)[:, 0]

    def block_sums_chains(self, i, XT, blocks, layout):
        """:meth:`block_sums` for each column of ``XT`` (n_variables, n_states).

        The blocks' slots are contiguous, so the neighbour indices and
        tables of a block are read as one row (no scattered gather).

        Returns
        -------
        ndarray of float64, shape (len(blocks), n_states)
        """
        b = layout.block_size
        g = layout.block_ptr[i] + np.asarray(blocks, dtype=np.int64)
        K = XT.shape[1]
        n_codes = self._n_codes
        slots = (g[:, None] * b + np.arange(b)).reshape(-1)
        if not layout.nbr:  # unary terms
            vals = np.repeat(layout.diff[slots][:, None], K, axis=1)
            return vals.reshape(len(g), b, K).sum(axis=1)
        code = XT.take(layout.nbr[0].take(g, axis=0).reshape(-1), axis=0)
        if len(layout.nbr) > 7:
            code = code.astype(np.int16)
        for q in range(1, len(layout.nbr)):
            code += code  # code <<= 1, but numpy's add is vectorised and its shift is not
            code |= XT.take(layout.nbr[q].take(g, axis=0).reshape(-1), axis=0)
        vals = layout.diff.take((slots * n_codes)[:, None] + code)
        return vals.reshape(len(g), b, K).sum(axis=1)

    def log_odds_offset_chains(self, i, XT):
        """:meth:`log_odds_offset` for each column of ``XT`` (n_variables, n_states)."""
        return np.full(XT.shape[1], self.bias[i])

    def log_odds_offset(self, i, x):
        """The exactly-known part of the log-odds of variable ``i`` (its bias)."""
        return float(self.bias[i])

    def conditional_log_odds(self, i, x):
        """``L_i(x) = log P(x_i = 1 | x_-i) / P(x_i = 0 | x_-i)`` (eq. 11), all terms."""
        return self.log_odds_offset(i, x) + float(self.term_log_odds(i, x).sum())

    def log_unnormalized(self, states, chunk_size=4096):
        """``log P(x) + log Z`` for each row of ``states`` (n, n_variables)."""
        states = np.asarray(states)
        if states.ndim != 2 or states.shape[1] != self.n_variables:
            raise ValueError(f"states must have shape (n, {self.n_variables}), got "
                             f"{states.shape}.")
        out = np.empty(len(states))
        weights = 1 << np.arange(self.arity - 1, -1, -1)
        rows = np.arange(self.n_terms)
        for start in range(0, len(states), chunk_size):
            s = states[start:start + chunk_size].astype(np.int64)
            code = s[:, self.variables] @ weights          # (chunk, T)
            out[start:start + chunk_size] = (self.log_potentials[rows, code].sum(axis=1)
                                             + s @ self.bias)
        return out

    def exact_distribution(self):
        """All ``2^D`` states (rows, variable 0 first) and their probabilities.

        By enumeration; only for ``n_variables <= 22``.
        """
        D = self.n_variables
        if D > MAX_ENUMERATION_VARIABLES:
            raise ValueError(f"exact_distribution enumerates 2^D states; D={D} is more than "
                             f"{MAX_ENUMERATION_VARIABLES}. Estimate marginals by sampling.")
        codes = np.arange(2 ** D)
        states = ((codes[:, None] >> np.arange(D)[None, :]) & 1).astype(np.int8)
        logp = self.log_unnormalized(states)
        p = np.exp(logp - logp.max())
        return states, p / p.sum()

    def dobrushin_bound(self):
        """An upper bound on Dobrushin's interdependence coefficient.

        ``alpha = max_i sum_j sup |P(x_i = 1 | x_-i) - P(x_i = 1 | x'_-i)|``
        over states differing only in ``x_j``; ``alpha < 1`` makes the Gibbs
        sampler contract in total variation, the condition of Theorem 2.
        Flipping ``x_j`` moves the log-odds of ``x_i`` by at most
        ``c_ij = sum_{t contains i, j} max |change of l_t|`` and a logistic
        probability by at most ``tanh(c_ij / 4)``, so
        ``alpha <= max_i sum_j tanh(c_ij / 4)`` (exact for pairwise models).
        """
        T, r, D = self.n_terms, self.arity, self.n_variables
        if r < 2:
            return 0.0
        c = np.zeros((D, D))
        idx = np.arange(2 ** r)
        for p in range(r):
            bit_p = 1 << (r - 1 - p)
            lt = (self.log_potentials[:, idx | bit_p] - self.log_potentials[:, idx & ~bit_p])
            for q in range(r):
                if q == p:
                    continue
                bit_q = 1 << (r - 1 - q)
                # Change of l_t (log-odds of x_p) when x_q flips, over all configurations.
                change = np.abs(lt[:, idx | bit_q] - lt[:, idx & ~bit_q]).max(axis=1)
                np.add.at(c, (self.variables[:, p], self.variables[:, q]), change)
        return float(np.tanh(c / 4).sum(axis=1).max())

    def __repr__(self):
        return (f"BinaryMRF(n_variables={self.n_variables}, arity={self.arity}, "
                f"n_terms={self.n_terms})")
