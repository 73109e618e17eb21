"""Per-chain progress display: the per-iteration callback handed to the chain drivers.

Every driver calls ``callback(done, diverging, step_size)`` after each
iteration (see :meth:`bayesian_subsample.samplers.SamplerConfig.run_chain`).
:class:`ChainProgress` is such a callback.  It is created inside the chain
task, so it runs in the joblib worker that runs the chain and writes to that
process's standard error (joblib's process workers share the parent's),
one bar per chain:

* with tqdm installed, a live bar at ``position=chain`` showing the phase
  (warm-up or sampling), iterations per second, divergences so far and the
  current step size (the draw interval for the piecewise-deterministic
  samplers);
* otherwise (or with ``progress_bar="text"``) one plain line per chain every
  few seconds, at the switch from warm-up to sampling and at the end.

It reads only the three numbers it is given and never touches a random
generator or the chain's state, so draws are bit-identical with and
without it.  It redraws at most every ``min_interval`` seconds, so its cost
does not depend on the number of iterations per second.
"""

from __future__ import annotations

import sys
import time

__all__ = ["ChainProgress"]


class ChainProgress:
    """Callable progress display of one chain (a context manager).

    Parameters
    ----------
    chain : int
        Chain index (the tqdm line position).
    n_warmup, n_draws : int
    mode : {"auto", "text"}
        "auto" uses tqdm when it is installed, plain text otherwise.
    min_interval : float or None
        Seconds between redraws; None means 0.1 for tqdm and 2.0 for text.
    """

    def __init__(self, chain, n_warmup, n_draws, mode="auto", min_interval=None):
        self.chain = int(chain)
        self.n_warmup = int(n_warmup)
        self.total = int(n_warmup) + int(n_draws)
        self.mode = mode
        self.min_interval = min_interval
        self.n_divergent = 0
        self._bar = None

    def __enter__(self):
        if self.mode != "text":
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=self.total, position=self.chain, file=sys.stderr,
                                 desc=self._desc(0), leave=True, mininterval=0.0,
                                 dynamic_ncols=True, unit="it")
        if self.min_interval is None:
            self.min_interval = 0.1 if self._bar is not None else 2.0
        self._t0 = self._last = time.monotonic()
        self._done = 0
        self._phase = self._desc(0)
        return self

    def __exit__(self, *exc):
        self._show(self._done, force=True)
        if self._bar is not None:
            self._bar.close()
        return False

    def _desc(self, done):
        phase = "warmup" if done < self.n_warmup else "sampling"
        return f"chain {self.chain} {phase}"

    def __call__(self, done, diverging, step_size):
        self.n_divergent += bool(diverging)
        self._done = done
        self._step_size = step_size
        now = time.monotonic()
        phase = self._desc(done)
        if now - self._last >= self.min_interval or phase != self._phase or done >= self.total:
            self._phase = phase
            self._last = now
            self._show(done)

    def _show(self, done, force=False):
        step = getattr(self, "_step_size", float("nan"))
        if self._bar is not None:
            self._bar.set_description(self._phase, refresh=False)
            self._bar.set_postfix(divergences=self.n_divergent, step_size=f"{step:.3g}",
                                  refresh=False)
            if done > self._bar.n:
                self._bar.update(done - self._bar.n)
            else:
                self._bar.refresh()
            return
        if force and getattr(self, "_printed", None) == done:
            return
        self._printed = done
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        sys.stderr.write(
            f"chain {self.chain}: {self._phase.split()[-1]} {done}/{self.total} "
            f"({done / elapsed:.1f} it/s), divergences {self.n_divergent}, "
            f"step size {step:.3g}\n")
        sys.stderr.flush()
