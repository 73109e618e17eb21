"""The one chain driver: warm-up, then draws, for any kernel.

A configured sampler runs a chain by handing :func:`run` a *chain* object
that plugs one kernel and its warm-up adaptation into the loop.  The driver
owns everything the samplers used to repeat: the warm-up loop and the draw
loop, the stop-flag check at every iteration boundary, the progress
callback, the wall-clock split between warm-up and draws, the
per-observation cost accounting, the divergence count, and the stacking of
the kernel's ``Info`` NamedTuples into the ``sample_stats_`` arrays.

The chain object (see :class:`Chain`) provides

``step(rng, state, params) -> (state, info)``
    One kernel transition.  ``info`` is the kernel's ``<Name>Info``
    NamedTuple; it must have ``n_obs_evaluated`` and may have
    ``is_divergent``.
``warmup_params(adapt) -> params`` and ``draw_params(adapt, i) -> params``
    The kernel parameters of the next warm-up iteration, and of draw ``i``
    (counted from the first draw of the chain, across continued runs, so
    that schedules such as Chebyshev integration times continue).
``update(rng, adapt, iteration, state, info) -> (adapt, state, n_obs_evaluated)``
    The warm-up adaptation after warm-up iteration ``iteration`` (from 0).
    It returns a new adaptation state rather than mutating one (the step-size
    recursions in :mod:`.adaptation` are pure functions); where an
    adaptation moves the chain (signed HMC-ECS switching estimator) it
    returns the new chain state, and the evaluations it spent.  theta* and
    the mass matrix are not adapted in a chain: they are the fit's shared
    ones (``SamplerConfig.prepare``).
``final(rng, adapt, state, complete) -> (adapt, state, n_obs_evaluated)``
    Called once at the end of warm-up (``complete`` is False when a stop
    request cut it short): freeze the adapted parameters.
``display_step_size(adapt) -> float``
    What the progress callback shows as the step size.
``draw_stats(state, params) -> dict``
    Per-draw statistics that are not ``Info`` fields (``lp``, ``step_size``).
``position(state) -> ndarray``
    The draw a state stands for.

and the class attributes ``stats`` (the ordered ``sample_stats_`` names of
the sampler) and ``renames`` (Info field -> stats name where they differ,
on top of :data:`RENAMES`), and optionally ``stat_shapes`` (stats name ->
per-draw shape, for a statistic that is a vector per draw).  The adaptation
state ``adapt`` is whatever the sampler chooses (a NamedTuple in this
package); the driver only passes it around.  Initialisation (the kernel's
``init``, the first step size) is the sampler's business, done before
:func:`run`; its cost is added to the warm-up count by the caller.

Purity: the step-size recursions are pure functions, and every adaptation
returns a new ``adapt``.  Three things are not: a warm-up window of
positions (SG-HMC's noise estimate, signed HMC-ECS's switch) is an
append-only list (copying it every iteration would be quadratic); signed
HMC-ECS swaps its subsample estimator in place (the estimator holds the
data); and a piecewise-deterministic chain's state is a mutable trajectory
object, as its kernel holder (pSBPS adapts its preconditioner inside a step)
always was.

Stats are stacked automatically: every Info field whose (renamed) name is in
``stats`` is stored, plus ``draw_stats``; every stats array is float64 except
``diverging`` (bool); a statistic nobody reports is NaN.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from ._base import ChainResult, stop_requested

__all__ = ["Chain", "ChainDefaults", "Run", "RENAMES", "BASE_STATS", "run", "allocate_stats", "field_map",
           "record_stats"]

#: The ``sample_stats_`` every sampler reports, in this order (NaN where
#: meaningless, e.g. ``energy`` without a Hamiltonian); samplers append theirs.
BASE_STATS = ("acceptance_rate", "diverging", "energy", "energy_error", "lp", "step_size",
              "n_steps", "n_obs_evaluated")

#: Info field -> ArviZ ``sample_stats`` name, for every sampler.
RENAMES = {"is_divergent": "diverging", "n_integration_steps": "n_steps"}


class Chain(Protocol):
    """What :func:`run` asks of a sampler (see the module notes)."""

    stats: tuple
    renames: dict

    def step(self, rng: np.random.Generator, state: Any, params: Any) -> tuple[Any, Any]: ...

    def warmup_params(self, adapt: Any) -> Any: ...

    def draw_params(self, adapt: Any, i: int) -> Any: ...

    def update(self, rng: np.random.Generator, adapt: Any, iteration: int, state: Any,
               info: Any) -> tuple[Any, Any, int]: ...

    def final(self, rng: np.random.Generator, adapt: Any, state: Any,
              complete: bool) -> tuple[Any, Any, int]: ...

    def display_step_size(self, adapt: Any) -> float: ...

    def draw_stats(self, state: Any, params: Any) -> dict: ...

    def position(self, state: Any) -> np.ndarray: ...


class ChainDefaults:
    """The usual answers of the optional parts of a :class:`Chain` (inherit, override)."""

    renames: dict = {}

    def position(self, state):
        return state.position

    def warmup_params(self, adapt):
        return None

    def draw_params(self, adapt, i):
        return self.warmup_params(adapt)

    def update(self, rng, adapt, iteration, state, info):
        return adapt, state, 0

    def final(self, rng, adapt, state, complete):
        return adapt, state, 0

    def draw_stats(self, state, params):
        return {}


class Run(NamedTuple):
    """What :func:`run` returns: the draws, the final state and the accounting."""

    draws: np.ndarray
    stats: dict
    state: Any
    adapt: Any
    #: Draws completed (``len(draws)``).
    n_done: int
    #: False when a stop request came during warm-up (then there are no draws).
    warmup_complete: bool
    n_obs_evaluated_warmup: int
    n_obs_evaluated_sampling: int
    n_divergent_warmup: int
    wall_time_warmup: float
    wall_time_sampling: float

    def result(self, n_draws, **fields):
        """A :class:`ChainResult` with the driver's fields and the sampler's ``fields``."""
        return ChainResult(
            draws=self.draws, stats=self.stats,
            n_obs_evaluated_warmup=int(self.n_obs_evaluated_warmup),
            n_obs_evaluated_sampling=int(self.n_obs_evaluated_sampling),
            n_divergent_warmup=int(self.n_divergent_warmup),
            wall_time_warmup=self.wall_time_warmup, wall_time_sampling=self.wall_time_sampling,
            interrupted=not self.warmup_complete or self.n_done < n_draws, **fields)


def allocate_stats(names, n_draws, shapes=None):
    """One array per name: NaN-filled float64, ``diverging`` all-False bool.

    ``shapes`` maps a name to its per-draw shape (default: a scalar per draw).
    """
    shapes = shapes or {}
    return {name: (np.zeros(n_draws, dtype=bool) if name == "diverging"
                   else np.full((n_draws, *shapes.get(name, ())), np.nan)) for name in names}


def field_map(info_type, renames, names):
    """``(field, name)`` pairs: the fields of ``info_type`` stored as stats ``names``."""
    pairs = ((field, renames.get(field, RENAMES.get(field, field)))
             for field in info_type._fields)
    return tuple((field, name) for field, name in pairs if name in names)


def record_stats(stats, i, info, fields, extra):
    """Store ``info``'s fields (``fields``: (field, name) pairs) and ``extra`` at draw ``i``."""
    for field, name in fields:
        stats[name][i] = getattr(info, field)
    for name, value in extra.items():
        stats[name][i] = value


def run(chain: Chain, rng: np.random.Generator, state: Any, adapt: Any, n_warmup: int,
        n_draws: int, dim: int, *, callback: Callable[[int, bool, float], Any] | None = None,
        stop: Any = None, warm_up: bool = True, first_draw: int = 0, n_done_before: int = 0,
        t_start: float | None = None, keep: np.ndarray | None = None,
        dtype: Any = np.float64) -> Run:
    """Run ``n_warmup`` warm-up iterations (if ``warm_up``), then ``n_draws`` draws.

    ``warm_up=False`` continues a chain whose warm-up is done (``adapt`` is
    its frozen adaptation): no warm-up loop and no :meth:`Chain.final`.
    ``first_draw`` is the index of the first draw across continued runs;
    ``n_done_before`` is added to the iteration count passed to
    ``callback(done, diverging, step_size)`` (display only).  The stop flag
    ``stop`` is checked before every iteration.  ``t_start`` (a
    ``time.perf_counter()`` value) is when the chain's own set-up began, so
    that set-up counts as warm-up time.  ``keep`` (increasing draw indices)
    stores only those draws (the others are still run and their stats kept),
    in ``len(keep)`` NaN-initialised rows.  ``dtype`` is the draws' dtype
    (``int8`` for the binary states of Gibbs sampling; ``keep`` needs a
    floating dtype).
    """
    t0 = time.perf_counter() if t_start is None else t_start
    n_eval_warm = n_div_warm = 0
    complete = True
    if warm_up:
        for it in range(n_warmup):
            if stop_requested(stop):
                complete = False
                break
            state, info = chain.step(rng, state, chain.warmup_params(adapt))
            n_eval_warm += info.n_obs_evaluated
            diverging = bool(getattr(info, "is_divergent", False))
            n_div_warm += diverging
            adapt, state, cost = chain.update(rng, adapt, it, state, info)
            n_eval_warm += cost
            if callback is not None:
                callback(it + 1, diverging, chain.display_step_size(adapt))
        adapt, state, cost = chain.final(rng, adapt, state, complete)
        n_eval_warm += cost
    t1 = time.perf_counter()
    n = n_draws if complete else 0
    draws = np.empty((n, dim), dtype) if keep is None else np.full((len(keep), dim), np.nan, dtype)
    slot = 0
    stats = allocate_stats(chain.stats, n, getattr(chain, "stat_shapes", None))
    n_eval = n_done = 0
    fields = None
    for i in range(n):
        if stop_requested(stop):
            break
        params = chain.draw_params(adapt, first_draw + i)
        state, info = chain.step(rng, state, params)
        if keep is None:
            draws[i] = chain.position(state)
        elif slot < len(keep) and keep[slot] == i:
            draws[slot] = chain.position(state)
            slot += 1
        n_eval += info.n_obs_evaluated
        if fields is None:
            fields = field_map(type(info), chain.renames, stats)
        record_stats(stats, i, info, fields, chain.draw_stats(state, params))
        if callback is not None:
            callback(n_done_before + i + 1, bool(getattr(info, "is_divergent", False)),
                     chain.display_step_size(adapt))
        n_done = i + 1
    t2 = time.perf_counter()
    if n_done < n:
        draws = draws[:n_done if keep is None else slot].copy()
        stats = {name: value[:n_done].copy() for name, value in stats.items()}
    return Run(draws, stats, state, adapt, n_done, complete, n_eval_warm, n_eval, n_div_warm,
               t1 - t0, t2 - t1)
