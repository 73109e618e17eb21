"""Child process of tests/test_interrupt.py: a long fit that the parent interrupts.

Run as ``python -m tests.interrupt_child BACKEND SAMPLER MODE`` from the
repository root, with MODE one of ``fresh`` (interrupt a first fit), ``refit``
(interrupt a refit, on data with another number of features, of a fitted
estimator), ``partial`` (``keep_partial_draws=True``) or ``kill`` (the parent
kills a worker).  Prints ``READY <time>`` when the long fit starts, then one
line ``RESULT <json>``.  Times are ``time.time()`` so that the parent can
compare them with its own.
"""

import json
import os
import sys
import threading
import time
import warnings

import numpy as np


def _cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _descendants(pid):
    """Pids of all processes below ``pid`` (from /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _busy_descendants(window=0.5, threshold=0.2):
    """Descendant processes that used more than ``threshold`` of a CPU over ``window`` s."""
    pids = _descendants(os.getpid())
    before = {p: _cpu_seconds(p) for p in pids}
    time.sleep(window)
    busy = []
    for p in pids:
        a, b = before[p], _cpu_seconds(p)
        if a is not None and b is not None and b - a > threshold * window:
            busy.append(p)
    return busy


def _state(est, X):
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(est)
    except Exception:
        return {"fitted": False}
    return {"fitted": True, "n_features_in": int(est.n_features_in_),
            "proba": est.predict_proba(X[:50, :est.n_features_in_]).tolist()}


#: Far more draws than the fit can make before the parent's signal, but small
#: enough that the chains' storage is allocated in a moment.
N_DRAWS = {"hmc_ecs": 100_000, "hmc": 100_000, "sgld": 300_000, "sbps": 100_000}


def main():
    backend, sampler, mode = sys.argv[1:4]
    warnings.simplefilter("ignore")
    import joblib

    from bayesian_subsample import BayesianLogisticRegression

    rng = np.random.default_rng(0)
    n, d = 20_000, 4
    X = rng.normal(size=(n, d))
    y = (X @ np.linspace(1.0, -1.0, d) + rng.logistic(size=n) > 0).astype(int)
    common = dict(sampler=sampler, n_chains=2, n_warmup=30, random_state=3,
                  keep_partial_draws=mode == "partial")
    context = {}
    if backend == "dask":
        from distributed import Client

        client = Client(processes=True, n_workers=2, threads_per_worker=1,
                        dashboard_address=None)
        context["client"] = client
    n_jobs = 1 if backend == "sequential" else 2
    with joblib.parallel_config(backend=backend, n_jobs=n_jobs):
        # Start the workers (a cold process pool takes seconds to import).
        BayesianLogisticRegression(n_draws=5, **dict(common, n_warmup=5)).fit(X[:3000], y[:3000])
        est = BayesianLogisticRegression(n_draws=20, **common)
        if mode == "refit":
            # A previous fit on other columns (3 features), kept bit for bit.
            est.fit(X[:, :3], y)
        before = _state(est, X)
        threads_before = {t.ident for t in threading.enumerate()}
        est.set_params(n_draws=N_DRAWS[sampler])
        print("READY", time.time(), flush=True)
        outcome, message = "returned", ""
        try:
            est.fit(X, y)
        except KeyboardInterrupt as exc:
            outcome, message = "KeyboardInterrupt", str(exc)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            outcome, message = type(exc).__name__, str(exc)
        t_return = time.time()
        result = {"outcome": outcome, "message": message, "t_return": t_return,
                  "before": before, "after": _state(est, X)}
        time.sleep(1.0)
        result["new_threads"] = [t.name for t in threading.enumerate()
                                 if t.ident not in threads_before and t.is_alive()]
        result["busy_processes"] = _busy_descendants()
        if mode == "partial" and result["after"]["fitted"]:
            result["n_draws_completed"] = est.n_draws_completed_.tolist()
            result["interrupted"] = bool(est.interrupted_)
            k = est.coef_draws_.shape[1]
            chains = [c for c, m in enumerate(est.n_draws_completed_) if m > 0]
            ref = BayesianLogisticRegression(n_draws=k, **common).fit(X, y)
            result["prefix_equal"] = bool(
                np.array_equal(ref.coef_draws_[chains], est.coef_draws_)
                and np.array_equal(ref.intercept_draws_[chains], est.intercept_draws_))
    if "client" in context:
        context["client"].close()
    print("RESULT", json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
