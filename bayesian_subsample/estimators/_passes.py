"""Full passes over the data on the active joblib backend (DESIGN §3).

The set-up work of a fit -- the reference point theta* (a Newton search on
all rows for the samplers that start at the full-data mode), the Taylor
control-variate sums and mass matrix at theta*, the curvature bound of the
bouncy particle samplers -- is a sum over bounded-size chunks of rows.  The
models layer computes it through a *chunk map* (see
:func:`bayesian_subsample.models.serial_map`); during :func:`set_up_passes`
the estimator layer installs :class:`JoblibChunkMap`, which hands the chunks
to whatever joblib backend is active, so that

    with joblib.parallel_config(backend="dask"):
        estimator.fit(X, y)

spreads the passes over a Dask cluster as it spreads the chains, with no
backend named in this package.  Without a configured backend the chunks run
on threads (numpy releases the GIL in the per-chunk products) or, with
``n_jobs=1``, in this thread.  The partial sums come back in chunk order and
are added up in that order, so the results -- and the draws -- are
bit-identical for every backend and ``n_jobs``.

The passes inside a chain (full-data HMC gradients, warm-up refinements)
keep the models' serial map: the chains are already spread over the workers.
"""

from __future__ import annotations

import contextlib

from joblib import Parallel, delayed

__all__ = ["JoblibChunkMap", "set_up_passes"]


class JoblibChunkMap:
    """A chunk map ``(fn, items) -> [fn(item) ...]`` on the active joblib backend.

    Parameters
    ----------
    n_jobs : int or None
        As for the estimator's chains; None defers to ``joblib.parallel_config``.
    """

    def __init__(self, n_jobs=None):
        self.n_jobs = n_jobs

    def __call__(self, fn, items):
        items = list(items)
        if len(items) <= 1:
            return [fn(item) for item in items]
        # ``prefer`` is only a hint: a backend chosen with parallel_config wins.
        return Parallel(n_jobs=self.n_jobs, prefer="threads")(
            delayed(fn)(item) for item in items)


@contextlib.contextmanager
def set_up_passes(posterior, n_jobs=None):
    """Run the full passes of ``posterior``'s model on joblib inside this block.

    A posterior whose model has no ``chunk_map`` (a model that makes no
    chunked passes) is left as it is.  The model's own map is restored on
    exit, so the chains, which receive the posterior afterwards, keep theirs.
    """
    model = getattr(posterior, "model", None)
    if model is None or not hasattr(model, "chunk_map"):
        yield
        return
    previous = model.chunk_map
    model.chunk_map = JoblibChunkMap(n_jobs)
    try:
        yield
    finally:
        model.chunk_map = previous
