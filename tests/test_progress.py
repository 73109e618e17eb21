"""progress_bar: live per-chain updates on stderr (also from worker processes), same draws."""

import os
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import BayesianLogisticRegression

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    warnings.simplefilter("ignore")
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.datasets import make_higgs_like

    X, y, _ = make_higgs_like(n_samples=10_000, n_features=3, random_state=0)
    for spec in sys.argv[1:]:
        sampler, n_iter = spec.split(":")
        params = dict(sampler=sampler, n_chains=2, n_warmup=int(n_iter), n_draws=int(n_iter),
                      n_jobs=2, random_state=0)
        sys.stderr.write(f"FIT-START {sampler}\\n")
        sys.stderr.flush()
        with_bar = BayesianLogisticRegression(progress_bar=True, **params).fit(X, y)
        sys.stderr.write("FIT-DONE\\n")
        sys.stderr.flush()
        without = BayesianLogisticRegression(**params).fit(X, y)
        same = (np.array_equal(with_bar.coef_draws_, without.coef_draws_)
                and np.array_equal(with_bar.intercept_draws_, without.intercept_draws_))
        print(sampler, "SAME" if same else "DIFFERENT", flush=True)
""")

RUNS = {"hmc_ecs": 300, "hmc": 60, "sgld": 300, "sbps": 25}


@pytest.fixture(scope="module")
def progress_runs():
    """Run the script once for all samplers; per sampler, the stderr reads during its fit."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [f"{k}:{v}" for k, v in RUNS.items()]
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)
    chunks = []

    def reader():
        # Each read returns what arrived since the previous one: several reads
        # between FIT-START and FIT-DONE mean output arrived while the fit ran.
        while True:
            data = os.read(proc.stderr.fileno(), 65536)
            if not data:
                break
            chunks.append(data.decode(errors="replace"))

    thread = threading.Thread(target=reader)
    thread.start()
    out = proc.stdout.read().decode()
    proc.wait(timeout=900)
    thread.join()
    assert proc.returncode == 0, "".join(chunks)[-3000:]
    during, current = {}, None
    for chunk in chunks:
        for piece in chunk.split("FIT-"):
            if piece.startswith("START "):
                current = piece.split()[1]
                during[current] = []
            elif piece.startswith("DONE"):
                current = None
            elif current is not None and piece:
                during[current].append(piece)
    same = dict(line.split() for line in out.strip().splitlines())
    return during, same


@pytest.mark.parametrize("sampler", list(RUNS))
def test_progress_bar_in_worker_processes(progress_runs, sampler):
    during, same = progress_runs
    assert same[sampler] == "SAME"
    updates = [c for c in during[sampler] if "chain" in c]
    assert len(updates) >= 3, during[sampler]  # repeated updates while the fit runs
    text = "".join(during[sampler])
    assert "chain 0" in text and "chain 1" in text
    assert "warmup" in text and "sampling" in text
    assert "divergences=" in text and "step_size=" in text and "it/s" in text


def test_plain_text_fallback_without_tqdm(monkeypatch, capfd):
    # tqdm missing: a plain line per chain (at least at the phase switch and the end).
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 2))
    y = (rng.random(2000) < 0.5).astype(int)
    params = dict(n_chains=2, n_warmup=100, n_draws=100, random_state=0, sampler="hmc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = BayesianLogisticRegression(progress_bar=True, **params).fit(X, y)
        b = BayesianLogisticRegression(**params).fit(X, y)
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("chain")]
    assert any(ln.startswith("chain 0: sampling 200/200") for ln in lines), err
    assert any(ln.startswith("chain 1: sampling 200/200") for ln in lines), err
    assert all("it/s" in ln and "divergences" in ln and "step size" in ln for ln in lines)
    np.testing.assert_array_equal(a.coef_draws_, b.coef_draws_)


def test_progress_bar_validation():
    with pytest.raises(ValueError, match="progress_bar"):
        BayesianLogisticRegression(progress_bar="yes").fit(np.eye(4), [0, 1, 0, 1])
