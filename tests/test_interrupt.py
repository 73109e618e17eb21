"""A fit is atomic: Ctrl-C, a lost worker or a failed refit never leaves a broken
estimator; a fit can be continued (issue 17).

The interrupt and kill tests run a long fit in a child process
(``tests/interrupt_child.py``), send it SIGINT (or SIGKILL one of its workers)
and read a JSON report.  Every child runs under a timeout, so a hang fails the
test instead of hanging the suite; the bounds on the time to return (5 s after
SIGINT, 30 s after SIGKILL) are such timeouts, far above the measured
latencies (about 0.02-0.2 s) and far below the time the fit would take.  The
default suite runs one representative per check; ``-m slow`` runs every
backend with every sampler.
"""

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from bayesian_subsample import (
    HMC,
    HMCECS,
    BayesianLinearRegression,
    BayesianLogisticRegression,
    BayesianPoissonRegressor,
    BayesianSplineClassifier,
)
from bayesian_subsample.estimators import _engine

from .interrupt_child import _cpu_seconds, _descendants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ["sequential", "threading", "loky", "multiprocessing", "dask"]
SAMPLERS = ["hmc_ecs", "hmc", "sgld", "sbps"]


# ----------------------------------------------------------------- children
def _start_child(backend, sampler, mode):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.interrupt_child", backend, sampler, mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"child did not start: {line}{out}\n{err[-3000:]}")
    return proc


def _finish_child(proc, timeout=90):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the fit hung (no result {timeout} s after the signal)\n{err[-3000:]}")
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    pytest.fail(f"no result from the child (exit {proc.returncode})\n{out}\n{err[-3000:]}")


def _interrupt(backend, sampler, mode, delay=2.0):
    proc = _start_child(backend, sampler, mode)
    time.sleep(delay)
    t_signal = time.time()
    proc.send_signal(signal.SIGINT)
    result = _finish_child(proc)
    result["latency"] = result["t_return"] - t_signal
    print(f"{backend} {sampler} {mode}: returned {result['latency']:.3f} s after SIGINT")
    return result


def _interrupt_after_draws(backend, sampler, mode):
    """SIGINT 2 s into the fit; for the partial-draws option, again later when
    on a loaded machine no chain had finished warm-up yet (the fit then
    rightly raises, with nothing to keep)."""
    for delay in (2.0, 5.0, 10.0):
        result = _interrupt(backend, sampler, mode, delay)
        if mode != "partial" or "before any chain" not in result["message"]:
            break
    return result


def _check_interrupted(result, mode):
    # Control returns promptly (a timeout: the fit itself would run for minutes).
    assert result["latency"] < 5.0
    # Nothing of the fit runs on a second later.
    assert result["new_threads"] == []
    assert result["busy_processes"] == []
    if mode == "partial":
        assert result["outcome"] == "returned", result["message"]
        assert result["after"]["fitted"] and result["interrupted"]
        assert sum(result["n_draws_completed"]) > 0
        assert result["prefix_equal"]
    else:
        assert result["outcome"] == "KeyboardInterrupt", result["message"]
        assert "unchanged" in result["message"]
        # Exactly as before: unfitted, or the previous fit on 3 features with
        # bit-identical predictions (JSON keeps floats exactly).
        assert result["after"] == result["before"]
        assert result["before"]["fitted"] == (mode == "refit")


DEFAULT_INTERRUPTS = [("loky", "hmc_ecs", "refit"), ("threading", "sbps", "partial")]


@pytest.mark.parametrize("backend, sampler, mode", DEFAULT_INTERRUPTS)
def test_sigint_stops_fit_and_leaves_estimator_intact(backend, sampler, mode):
    _check_interrupted(_interrupt_after_draws(backend, sampler, mode), mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fresh", "refit", "partial"])
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigint_every_backend_and_sampler(backend, sampler, mode):
    if (backend, sampler, mode) in DEFAULT_INTERRUPTS:
        pytest.skip("in the default suite")
    _check_interrupted(_interrupt_after_draws(backend, sampler, mode), mode)


def _kill_worker(backend):
    proc = _start_child(backend, "hmc_ecs", "kill")
    time.sleep(2.0)
    pids = _descendants(proc.pid)
    cpu = {p: _cpu_seconds(p) or 0.0 for p in pids}
    time.sleep(0.5)
    # The busiest descendant runs a chain.
    victim = max(pids, key=lambda p: (_cpu_seconds(p) or 0.0) - cpu[p])
    t_kill = time.time()
    os.kill(victim, signal.SIGKILL)
    result = _finish_child(proc)
    result["latency"] = result["t_return"] - t_kill
    print(f"{backend}: WorkerLostError {result['latency']:.3f} s after SIGKILL")
    return result


@pytest.mark.parametrize("backend", [pytest.param("loky", marks=pytest.mark.slow),
                                     "multiprocessing",
                                     pytest.param("dask", marks=pytest.mark.slow)])
def test_killed_worker_gives_clear_error(backend):
    result = _kill_worker(backend)
    assert result["outcome"] == "WorkerLostError", result["message"]
    message = result["message"]
    assert "SIGKILL" in message and "out-of-memory" in message and "unchanged" in message
    assert result["latency"] < 30.0
    assert result["after"] == result["before"] == {"fitted": False}
    if backend != "dask":  # the dask nanny restarts its worker (threads, a process)
        assert result["new_threads"] == []
        assert result["busy_processes"] == []


# -------------------------------------------------------- in-process checks
@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 3))
    y = (X @ [1.0, -1.0, 0.5] + rng.logistic(size=3000) > 0).astype(int)
    return X, y


def _small(**kw):
    return dict(dict(n_chains=2, n_warmup=60, random_state=1), **kw)


def _fitted_state(est):
    return {k: v for k, v in vars(est).items() if est._is_fitted_name(k)}


def _same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] is b[k], k  # the very same objects: nothing was rebuilt


def _StopAfter(n):  # noqa: N802 - reads as a type in the tests
    """A replacement for _FitStop.is_set that raises the flag after ``n``
    looks (a deterministic in-process interrupt: with the sequential backend
    each chain looks once per iteration)."""
    looks = [0]

    def is_set(stop):
        looks[0] += 1
        if looks[0] > n:
            stop._event.set()
        return stop._event.is_set()

    return is_set


@pytest.mark.parametrize("make, target", [
    (lambda: BayesianLogisticRegression(**_small(n_draws=30)), "binary"),
    (lambda: BayesianSplineClassifier(n_knots=4, **_small(n_draws=30)), "binary"),
    (lambda: BayesianPoissonRegressor(**_small(n_draws=30)), "count"),
    (lambda: BayesianLinearRegression(**_small(n_draws=30)), "real"),
])
def test_failed_or_interrupted_refit_keeps_previous_fit(make, target, monkeypatch, data):
    X, y_bin = data
    y = {"binary": y_bin, "count": y_bin * 2, "real": X @ [1.0, 2.0, 3.0] + y_bin}[target]
    est = make().fit(X[:, :2], y)
    before = _fitted_state(est)
    pred_before = est.predict(X[:20, :2])

    # An interrupt in the middle of the chains of a refit on 3 features.
    monkeypatch.setattr(_engine._FitStop, "is_set", _StopAfter(70))
    with pytest.raises(KeyboardInterrupt, match="unchanged"):
        est.fit(X, y)
    _same_state(before, _fitted_state(est))
    np.testing.assert_array_equal(est.predict(X[:20, :2]), pred_before)
    monkeypatch.undo()

    # An error after the chains (here: in the convergence check).
    def boom(self, draws):
        raise RuntimeError("boom")

    monkeypatch.setattr(type(est), "_check_convergence", boom)
    with pytest.raises(RuntimeError, match="boom"):
        est.fit(X, y)
    _same_state(before, _fitted_state(est))
    monkeypatch.undo()

    # Invalid input for the refit.
    with pytest.raises(ValueError):
        est.fit(X[:, :1] * np.nan, y)
    _same_state(before, _fitted_state(est))

    # An unfitted estimator stays unfitted.
    fresh = make()
    monkeypatch.setattr(_engine._FitStop, "is_set", _StopAfter(70))
    with pytest.raises(KeyboardInterrupt):
        fresh.fit(X, y)
    assert _fitted_state(fresh) == {}
    with pytest.raises(NotFittedError):
        fresh.predict(X)


def test_keep_partial_draws_gives_prefix_of_full_fit(monkeypatch, data):
    X, y = data
    kw = _small(n_draws=200, keep_partial_draws=True)
    full = BayesianLogisticRegression(**kw).fit(X, y)
    # Sequential backend: chain 0 stops after 60 + 25 iterations, chain 1 at once.
    monkeypatch.setattr(_engine._FitStop, "is_set", _StopAfter(85))
    with pytest.warns(UserWarning, match="interrupted"):
        part = BayesianLogisticRegression(**kw).fit(X, y)
    assert part.interrupted_
    np.testing.assert_array_equal(part.n_draws_completed_, [25, 0])
    assert part.coef_draws_.shape == (1, 25, 3)
    np.testing.assert_array_equal(part.coef_draws_[0], full.coef_draws_[0, :25])
    np.testing.assert_array_equal(part.intercept_draws_[0], full.intercept_draws_[0, :25])
    for name, value in part.sample_stats_.items():
        np.testing.assert_array_equal(value[0], full.sample_stats_[name][0, :25])
    assert part.predict_proba(X[:5]).shape == (5, 2)
    with pytest.raises(ValueError, match="interrupted"):
        part.continue_sampling(X, y, 10)
    assert not full.interrupted_
    np.testing.assert_array_equal(full.n_draws_completed_, [200, 200])


def test_keep_partial_draws_is_validated(monkeypatch, data):
    X, y = data
    monkeypatch.setattr(_engine, "run_chains", lambda *a, **k: pytest.fail("sampled"))
    with pytest.raises(ValueError, match="keep_partial_draws must be True or False"):
        BayesianLogisticRegression(keep_partial_draws="yes").fit(X, y)


def test_partial_draws_need_at_least_one_draw(monkeypatch, data):
    X, y = data
    est = BayesianLogisticRegression(**_small(n_draws=50, keep_partial_draws=True))
    monkeypatch.setattr(_engine._FitStop, "is_set", _StopAfter(10))  # inside warm-up
    with pytest.raises(KeyboardInterrupt, match="before any chain"):
        est.fit(X, y)
    assert _fitted_state(est) == {}


def test_stop_flag_reaches_pickled_copies():
    import pickle

    stop = _engine._FitStop()
    try:
        copy = pickle.loads(pickle.dumps(stop))
        assert not copy._uses_file  # same process: the Event, not the file
        copy._local, copy._uses_file = False, True  # as in a worker process
        assert not copy.is_set()
        stop.set()
        time.sleep(_engine._STOP_POLL * 1.5)
        assert copy.is_set()
    finally:
        stop.cleanup()
    assert not os.path.exists(stop.directory)


# ------------------------------------------------------------------ resume
RESUMABLE = ["hmc_ecs", "hmc", "sgld", "sghmc", "sbps", "bps",
             pytest.param("psbps", marks=pytest.mark.slow), "rwmh", "austerity_mh",
             pytest.param(HMCECS(estimator="signed"), marks=pytest.mark.slow),
             HMC(integration_time="chebyshev", mass_matrix="diagonal", chebyshev_cycle=7)]


def _assert_same_fit(a, b, X):
    np.testing.assert_array_equal(a.coef_draws_, b.coef_draws_)
    np.testing.assert_array_equal(a.intercept_draws_, b.intercept_draws_)
    assert a.sample_stats_.keys() == b.sample_stats_.keys()
    for name in a.sample_stats_:
        np.testing.assert_array_equal(a.sample_stats_[name], b.sample_stats_[name])
    assert a.evaluations_ == b.evaluations_
    np.testing.assert_array_equal(a.n_draws_completed_, b.n_draws_completed_)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    for key in a.convergence_:
        np.testing.assert_array_equal(a.convergence_[key], b.convergence_[key])


@pytest.mark.parametrize("sampler", RESUMABLE, ids=str)
def test_continue_sampling_equals_one_longer_fit(sampler, data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = BayesianLogisticRegression(sampler=sampler, **_small(n_draws=80)).fit(X, y)
        two = BayesianLogisticRegression(sampler=sampler, **_small(n_draws=50)).fit(X, y)
        two.continue_sampling(X, y, 10).continue_sampling(X, y, 20)
    _assert_same_fit(one, two, X)
    np.testing.assert_array_equal(one.predict_proba(X[:50]), two.predict_proba(X[:50]))
    if str(sampler) in ("sbps", "bps"):
        for a, b in zip(one.sampler_info_, two.sampler_info_):
            np.testing.assert_allclose(a["continuous_mean"], b["continuous_mean"], rtol=1e-12)
            np.testing.assert_array_equal(a["events"]["time"], b["events"]["time"])


def test_continue_sampling_needs_the_generator_state(monkeypatch, data):
    """Negative control: continuing with a fresh generator (the state not
    restored) gives other draws, which the comparison above detects."""
    X, y = data
    one = BayesianLogisticRegression(**_small(n_draws=80)).fit(X, y)
    two = BayesianLogisticRegression(**_small(n_draws=50)).fit(X, y)
    run = _engine._run_one_chain

    def fresh_rng(config, seed, *args, **kw):
        return run(config, np.random.SeedSequence(7) if isinstance(seed, dict) else seed,
                   *args, **kw)

    monkeypatch.setattr(_engine, "_run_one_chain", fresh_rng)
    two.continue_sampling(X, y, 30)
    np.testing.assert_array_equal(one.coef_draws_[:, :50], two.coef_draws_[:, :50])
    with pytest.raises(AssertionError):
        _assert_same_fit(one, two, X)


def test_continue_sampling_chebyshev_keeps_first_cycle(data):
    """Documented exception: with chebyshev_cycle=None the cycle length K is
    the first fit's n_draws, so the continued fit equals one longer fit with
    chebyshev_cycle set to that n_draws."""
    X, y = data
    kw = _small(sampler=HMC(integration_time="chebyshev", mass_matrix="diagonal"))
    two = BayesianLogisticRegression(n_draws=50, **kw).fit(X, y).continue_sampling(X, y, 30)
    kw["sampler"] = HMC(integration_time="chebyshev", mass_matrix="diagonal",
                        chebyshev_cycle=50)
    one = BayesianLogisticRegression(n_draws=80, **kw).fit(X, y)
    _assert_same_fit(one, two, X)


@pytest.mark.parametrize("backend", ["threading", pytest.param("loky", marks=pytest.mark.slow)])
def test_continue_sampling_on_parallel_backends(backend, data):
    import joblib

    X, y = data
    one = BayesianLogisticRegression(**_small(n_draws=60)).fit(X, y)
    with joblib.parallel_config(backend=backend, n_jobs=2):
        two = BayesianLogisticRegression(**_small(n_draws=40)).fit(X, y)
        two.continue_sampling(X, y, 20)
    _assert_same_fit(one, two, X)


@pytest.mark.parametrize("make, fit_kw", [
    (BayesianLinearRegression, {}),
    (BayesianPoissonRegressor, {"exposure": True}),
    (BayesianSplineClassifier, {}),
])
def test_continue_sampling_other_estimators(make, fit_kw, data):
    X, y = data
    kw = _small()
    if make is BayesianSplineClassifier:
        kw["n_knots"] = 4
        target = y
    elif make is BayesianPoissonRegressor:
        target = y * 3
        fit_kw = {"exposure": np.linspace(1.0, 2.0, len(y))}
    else:
        target = X @ [1.0, 2.0, 3.0] + np.sin(np.arange(len(y)))
    one = make(n_draws=50, **kw).fit(X, target, **fit_kw)
    two = make(n_draws=30, **kw).fit(X, target, **fit_kw)
    two.continue_sampling(X, target, 20, **fit_kw)
    _assert_same_fit(one, two, X)
    np.testing.assert_array_equal(one.predict(X[:30]), two.predict(X[:30]))


def test_continue_sampling_checks_its_input(data):
    X, y = data
    est = BayesianLogisticRegression(**_small(n_draws=20))
    with pytest.raises(NotFittedError):
        est.continue_sampling(X, y, 10)
    est.fit(X, y)
    before = _fitted_state(est)
    with pytest.raises(ValueError, match="other data"):
        est.continue_sampling(X[::-1], y[::-1], 10)
    with pytest.raises(ValueError, match="n_draws"):
        est.continue_sampling(X, y, 0)
    est.set_params(prior_scale=1.0)
    with pytest.raises(ValueError, match="prior_scale"):
        est.continue_sampling(X, y, 10)
    _same_state(before, _fitted_state(est))
    est.set_params(prior_scale=10.0, n_jobs=1, verbose=0)  # free to change
    est.continue_sampling(X, y, 10)
    assert est.coef_draws_.shape == (2, 30, 3)


def test_interrupted_continue_keeps_the_fit(monkeypatch, data):
    X, y = data
    est = BayesianLogisticRegression(**_small(n_draws=20)).fit(X, y)
    before = _fitted_state(est)
    monkeypatch.setattr(_engine._FitStop, "is_set", _StopAfter(5))
    with pytest.raises(KeyboardInterrupt):
        est.continue_sampling(X, y, 50)
    _same_state(before, _fitted_state(est))
    monkeypatch.undo()
    # The stored chain states were not advanced by the interrupted run.
    one = BayesianLogisticRegression(**_small(n_draws=30)).fit(X, y)
    _assert_same_fit(one, est.continue_sampling(X, y, 10), X)
