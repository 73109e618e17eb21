"""Reproducible synthetic tall data sets for the demo, examples and benchmarks.

One loader of real data, :func:`load_movielens_100k`: the MovieLens-100k
ratings (GroupLens), which are *not* shipped with this library (their
licence forbids redistribution); it reads them from a copy the user has, or
fetches the PyPI wheel of RecBole that ships them (``fetch_movielens_100k``).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["make_higgs_like", "make_bankruptcy_like", "make_multiclass_like",
           "make_ratings_like", "load_movielens_100k", "fetch_movielens_100k"]


def make_higgs_like(n_samples=100_000, n_features=29, correlation=0.5, coef_scale=0.5,
                    intercept=0.0, random_state=0, dtype=np.float64, chunk_size=262_144):
    """A HIGGS-like binary classification problem with a known logistic model.

    Mimics the shape of the HIGGS data of Baldi et al. (2014) used by Dang et
    al. (2019, §6.5): 29 continuous, correlated covariates and a balanced
    binary response.  Covariates are Gaussian with ``corr(x_j, x_k) =
    correlation ** |j - k|``; the true coefficients are drawn from
    ``N(0, coef_scale^2)`` and ``y ~ Bernoulli(sigmoid(intercept + x^T coef))``.

    Parameters
    ----------
    n_samples : int, default=100_000
        Number of rows (``n_obs``).
    n_features : int, default=29
    correlation : float, default=0.5
        Lag-one correlation of the AR(1)-like covariance of the covariates.
    coef_scale : float, default=0.5
        Standard deviation of the true coefficients.
    intercept : float, default=0.0
    random_state : int or None, default=0
    dtype : numpy dtype, default=float64
    chunk_size : int, default=262_144
        Rows generated at a time (bounds temporary memory).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,), values 0 and 1
    coef : ndarray of shape (n_features,)
        The true coefficients (the true intercept is ``intercept``).
    """
    if n_samples < 1 or n_features < 1:
        raise ValueError("n_samples and n_features must be positive.")
    if not -1.0 < correlation < 1.0:
        raise ValueError("correlation must lie strictly between -1 and 1.")
    rng = np.random.default_rng(random_state)
    coef = rng.normal(0.0, coef_scale, n_features)
    lags = np.abs(np.subtract.outer(np.arange(n_features), np.arange(n_features)))
    chol = np.linalg.cholesky(correlation**lags)
    X = np.empty((n_samples, n_features), dtype=dtype)
    y = np.empty(n_samples, dtype=np.int64)
    for start in range(0, n_samples, chunk_size):
        stop = min(start + chunk_size, n_samples)
        z = rng.standard_normal((stop - start, n_features)) @ chol.T
        X[start:stop] = z
        y[start:stop] = rng.random(stop - start) < expit(intercept + z @ coef)
    return X, y, coef


def make_multiclass_like(n_samples=100_000, n_features=20, n_classes=5, correlation=0.5,
                         coef_scale=0.3, random_state=0, dtype=np.float64,
                         chunk_size=262_144):
    """A tall multiclass problem with a known multinomial (softmax) model.

    Covariates as in :func:`make_higgs_like` (Gaussian, ``corr(x_j, x_k) =
    correlation ** |j - k|``); true intercepts and coefficients of every class
    are drawn from ``N(0, coef_scale^2)`` and
    ``y ~ Categorical(softmax(intercept + coef x))`` (drawn by the Gumbel-max
    trick, chunk by chunk).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,), values ``0 .. n_classes - 1``
    coef : ndarray of shape (n_classes, n_features + 1)
        True ``(intercept, coef)`` per class.
    """
    if n_samples < 1 or n_features < 1 or n_classes < 2:
        raise ValueError("n_samples and n_features must be positive and n_classes >= 2.")
    if not -1.0 < correlation < 1.0:
        raise ValueError("correlation must lie strictly between -1 and 1.")
    rng = np.random.default_rng(random_state)
    coef = rng.normal(0.0, coef_scale, (n_classes, n_features + 1))
    lags = np.abs(np.subtract.outer(np.arange(n_features), np.arange(n_features)))
    chol = np.linalg.cholesky(correlation**lags)
    X = np.empty((n_samples, n_features), dtype=dtype)
    y = np.empty(n_samples, dtype=np.int64)
    for start in range(0, n_samples, chunk_size):
        stop = min(start + chunk_size, n_samples)
        z = rng.standard_normal((stop - start, n_features)) @ chol.T
        X[start:stop] = z
        eta = z @ coef[:, 1:].T + coef[:, 0]
        y[start:stop] = np.argmax(eta + rng.gumbel(size=eta.shape), axis=1)
    return X, y, coef


#: Covariate names of :func:`make_bankruptcy_like`: six firm-specific ratios and
#: two macroeconomic variables, as in the bankruptcy data of Dang et al.
#: (2019, §6.6) and Giordani et al. (2014).
BANKRUPTCY_FEATURES = ("earnings_ratio", "liquidity", "debt_ratio", "size",
                       "interest_coverage", "turnover", "gdp_growth", "yield_spread")

_T_DF = 5.0


def _bankruptcy_latent(rng, m):
    """Latent standardised scores s (m, 8); covariates 0 and 4 heavy-tailed (t_5)."""
    s = rng.standard_normal((m, 8))
    for j in (0, 4):
        s[:, j] = rng.standard_t(_T_DF, m) / np.sqrt(_T_DF / (_T_DF - 2.0))
    return s


def _bankruptcy_x_from_s(s):
    """Monotone maps from latent scores to covariates on their natural scales."""
    x = np.empty_like(s)
    x[:, 0] = 0.05 + 0.12 * s[:, 0]          # earnings / assets, heavy tails
    x[:, 1] = np.exp(0.5 * s[:, 1]) - 0.8     # liquidity, right-skewed
    x[:, 2] = expit(0.8 * s[:, 2] + 0.3)      # debt ratio in (0, 1)
    x[:, 3] = 10.0 + 1.5 * s[:, 3]            # log total assets
    x[:, 4] = 3.0 + 2.0 * s[:, 4]             # interest coverage, heavy tails
    x[:, 5] = np.exp(0.6 * s[:, 5])           # turnover, right-skewed
    x[:, 6] = 0.02 + 0.02 * s[:, 6]           # GDP growth
    x[:, 7] = 1.0 + 0.8 * s[:, 7]             # yield spread
    return x


def _bankruptcy_s_from_x(X):
    """Inverse of :func:`_bankruptcy_x_from_s`."""
    X = np.asarray(X, dtype=np.float64)
    s = np.empty_like(X)
    s[:, 0] = (X[:, 0] - 0.05) / 0.12
    s[:, 1] = 2.0 * np.log(X[:, 1] + 0.8)
    s[:, 2] = (np.log(X[:, 2]) - np.log1p(-X[:, 2]) - 0.3) / 0.8
    s[:, 3] = (X[:, 3] - 10.0) / 1.5
    s[:, 4] = (X[:, 4] - 3.0) / 2.0
    s[:, 5] = np.log(X[:, 5]) / 0.6
    s[:, 6] = (X[:, 6] - 0.02) / 0.02
    s[:, 7] = (X[:, 7] - 1.0) / 0.8
    return s


def _bankruptcy_effects_s(s):
    """True additive log-odds contributions f_j as functions of the latent scores."""
    f = np.empty_like(s)
    s0 = s[:, 0]
    # Earnings: losses raise the risk steeply, very high earnings a little (non-monotone).
    f[:, 0] = -1.0 * np.tanh(1.5 * s0) + 0.25 * s0**2 / (1.0 + 0.1 * s0**2)
    f[:, 1] = 0.7 * np.sin(1.3 * s[:, 1])                      # liquidity: wave
    s2 = s[:, 2]
    f[:, 2] = 0.8 * (s2**2 - 1.0) / (1.0 + 0.3 * s2**2) + 0.4 * s2   # debt: U-shape
    f[:, 3] = -0.4 * s[:, 3]                                    # size: linear
    f[:, 4] = -1.0 * np.exp(-0.5 * (s[:, 4] - 0.5) ** 2)        # coverage: dip
    f[:, 5] = 0.0                                               # turnover: no effect
    f[:, 6] = -0.3 * s[:, 6]                                    # GDP growth: linear
    f[:, 7] = 0.5 * np.tanh(2.0 * s[:, 7])                      # spread: monotone S
    return f


def make_bankruptcy_like(n_samples=100_000, event_rate=0.01, random_state=0,
                         dtype=np.float64, chunk_size=262_144):
    """A bankruptcy-like rare-event problem with a known additive log-odds.

    Mimics the structure of the Swedish firm-failure data of Dang et al.
    (2019, §6.6), modelled there (after Giordani et al., 2014) by an additive
    spline logistic model: 8 covariates (six financial ratios and two
    macroeconomic variables, see :data:`BANKRUPTCY_FEATURES`) and about 1%
    events.  The true log-odds is ``intercept + sum_j f_j(x_j)`` with
    non-monotone ``f_j`` for earnings ratio (losses raise the risk, very high
    earnings slightly too), liquidity (a wave), debt ratio (U-shaped) and
    interest coverage (a dip); linear effects for size and GDP growth, a
    monotone S-shape for the yield spread and no effect of turnover.  The
    covariates are independent (so a partial-dependence curve equals the
    event frequency as a function of one covariate), two of them heavy-tailed
    (Student-t with 5 degrees of freedom), three skewed or bounded.

    The intercept is calibrated once (on a fixed internal pilot of 200,000
    rows, independent of ``random_state``) so that the expected event rate is
    ``event_rate``.  Rows are generated ``chunk_size`` at a time with
    vectorised numpy; 10^6 rows take about a second.

    Parameters
    ----------
    n_samples : int, default=100_000
    event_rate : float in (0, 0.5], default=0.01
        Expected fraction of events (``y = 1``).
    random_state : int or None, default=0
    dtype : numpy dtype, default=float64
    chunk_size : int, default=262_144

    Returns
    -------
    X : ndarray of shape (n_samples, 8)
    y : ndarray of shape (n_samples,), values 0 and 1
    info : dict
        ``intercept`` (float); ``feature_names`` (tuple of str);
        ``nonlinear`` (names of the covariates with non-linear effects);
        ``effects(X)`` -> (m, 8) true contributions ``f_j(x_j)`` of any rows
        ``X``; ``log_odds(X)`` -> (m,) true log-odds; ``proba(X)`` -> (m,)
        true event probabilities.
    """
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}.")
    if not 0.0 < event_rate <= 0.5:
        raise ValueError(f"event_rate must lie in (0, 0.5], got {event_rate!r}.")
    n_samples = int(n_samples)
    pilot = _bankruptcy_effects_s(_bankruptcy_latent(np.random.default_rng(20190601),
                                                     200_000)).sum(axis=1)
    intercept = float(np.log(event_rate / (1.0 - event_rate)))
    for _ in range(50):  # Newton on mean(sigmoid(b + f)) = event_rate
        p = expit(intercept + pilot)
        step = (p.mean() - event_rate) / max((p * (1.0 - p)).mean(), 1e-12)
        intercept -= step
        if abs(step) < 1e-12:
            break

    rng = np.random.default_rng(random_state)
    X = np.empty((n_samples, 8), dtype=dtype)
    y = np.empty(n_samples, dtype=np.int64)
    for start in range(0, n_samples, chunk_size):
        stop = min(start + chunk_size, n_samples)
        s = _bankruptcy_latent(rng, stop - start)
        X[start:stop] = _bankruptcy_x_from_s(s)
        eta = intercept + _bankruptcy_effects_s(s).sum(axis=1)
        y[start:stop] = rng.random(stop - start) < expit(eta)

    def effects(Xq):
        return _bankruptcy_effects_s(_bankruptcy_s_from_x(Xq))

    def log_odds(Xq):
        return intercept + effects(Xq).sum(axis=1)

    def proba(Xq):
        return expit(log_odds(Xq))

    info = {
        "intercept": intercept,
        "feature_names": BANKRUPTCY_FEATURES,
        "nonlinear": ("earnings_ratio", "liquidity", "debt_ratio", "interest_coverage",
                      "yield_spread"),
        "effects": effects,
        "log_odds": log_odds,
        "proba": proba,
    }
    return X, y, info


def make_ratings_like(n_users=6000, n_items=4000, n_ratings=1_000_000, n_components=20,
                      noise_sd=0.85, random_state=0, mean_rating=3.6, user_bias_sd=0.35,
                      item_bias_sd=0.45, interaction_sd=0.5):
    """MovieLens-like ratings from a known low-rank model (known RMSE floor).

    ``r = mean_rating + b_u + c_i + U_u . V_i + N(0, noise_sd^2)`` with
    ``b_u ~ N(0, user_bias_sd^2)``, ``c_i ~ N(0, item_bias_sd^2)`` and factor
    entries of column ``k`` ``N(0, s_k^2)`` with ``s_k^4`` proportional to
    ``0.8^k`` (a few strong latent directions and a tail, as in real rating
    matrices), scaled so that the interaction ``U_u . V_i`` has standard
    deviation ``interaction_sd``.
    Users and items are drawn with log-normal activity and popularity
    (a few heavy raters and blockbusters, a long tail, as in MovieLens), each
    (user, item) pair at most once.  Ratings are continuous (not rounded) so
    that the best possible predictive RMSE is exactly ``noise_sd``: no
    method can beat it, and the gap to it is the estimation error.  The
    defaults match the size of MovieLens-1M used by Chen, Fox and Guestrin
    (2014, §4.3): about a million ratings, 6,040 users, 3,952 movies.

    Returns
    -------
    X : ndarray of int64 (n_ratings, 2)
        (user id, item id) pairs, ids ``0..n_users-1`` and ``0..n_items-1``
        (some ids may have no rating).
    y : ndarray of float64 (n_ratings,)
    """
    n_users, n_items, n_ratings = int(n_users), int(n_items), int(n_ratings)
    K = int(n_components)
    if K < 1:
        raise ValueError(f"n_components must be >= 1, got {n_components!r}.")
    if not 0 < n_ratings <= n_users * n_items:
        raise ValueError(f"n_ratings must be in [1, n_users * n_items], got {n_ratings!r}.")
    rng = np.random.default_rng(random_state)
    p_user = np.exp(0.8 * rng.standard_normal(n_users))
    p_item = np.exp(1.0 * rng.standard_normal(n_items))
    p_user /= p_user.sum()
    p_item /= p_item.sum()
    keys = np.empty(0, dtype=np.int64)
    while len(keys) < n_ratings:
        size = int(1.2 * (n_ratings - len(keys))) + 16
        # Fall back to uniform pairs when the skewed draws keep hitting taken pairs.
        if len(keys) > 0.5 * n_users * n_items:
            u, i = rng.integers(0, n_users, size), rng.integers(0, n_items, size)
        else:
            u, i = rng.choice(n_users, size, p=p_user), rng.choice(n_items, size, p=p_item)
        new = np.concatenate([keys, u.astype(np.int64) * n_items + i])
        _, first = np.unique(new, return_index=True)
        keys = new[np.sort(first)]
    keys = keys[:n_ratings]
    users, items = keys // n_items, keys % n_items
    # Component k carries a share of the interaction variance decaying as
    # 0.8^k (real rating matrices have a few strong directions and a tail).
    share = 0.8 ** np.arange(K)
    s = np.sqrt(interaction_sd * np.sqrt(share / share.sum()))
    U = s * rng.standard_normal((n_users, K))
    V = s * rng.standard_normal((n_items, K))
    b = user_bias_sd * rng.standard_normal(n_users)
    c = item_bias_sd * rng.standard_normal(n_items)
    y = (mean_rating + b[users] + c[items] + np.einsum("nk,nk->n", U[users], V[items])
         + noise_sd * rng.standard_normal(n_ratings))
    return np.column_stack([users, items]).astype(np.int64), y


#: The PyPI wheel of RecBole (Zhao et al., 2021) ships the MovieLens-100k
#: ratings in its atomic-file format (``user_id:token  item_id:token
#: rating:float  timestamp:float``, tab-separated, one header line).
_RECBOLE_WHEEL = "recbole-1.2.1-py3-none-any.whl"
_RECBOLE_REQUIREMENT = "recbole==1.2.1"
_ML100K_MEMBER = "recbole/dataset_example/ml-100k/ml-100k.inter"
_ML100K_N_RATINGS = 100_000


def _movielens_cache_dir(cache_dir):
    import os

    if cache_dir is not None:
        return os.fspath(cache_dir)
    root = os.environ.get("BAYESIAN_SUBSAMPLE_DATA",
                          os.path.join(os.path.expanduser("~"), ".cache", "bayesian_subsample"))
    return os.path.join(root, "movielens")


def fetch_movielens_100k(cache_dir=None):
    """Path of a local copy of the RecBole wheel holding MovieLens-100k, fetched if needed.

    Runs ``python -m pip download recbole==1.2.1 --no-deps -d CACHE`` (pip's
    ordinary client and index configuration; no package is installed) unless
    the wheel is already in ``cache_dir`` (default
    ``$BAYESIAN_SUBSAMPLE_DATA/movielens`` or
    ``~/.cache/bayesian_subsample/movielens``).  Raises ``OSError`` with the
    manual alternative when pip cannot fetch it (offline, no index).

    The ratings are GroupLens' MovieLens-100k (Harper and Konstan, 2015),
    under the GroupLens licence: research use, no redistribution, cite the
    paper.  Fetching them this way is the user's act; the library neither
    ships nor re-hosts them.
    """
    import os
    import subprocess
    import sys

    cache = _movielens_cache_dir(cache_dir)
    wheel = os.path.join(cache, _RECBOLE_WHEEL)
    if os.path.exists(wheel):
        return wheel
    os.makedirs(cache, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", _RECBOLE_REQUIREMENT, "--no-deps",
           "--only-binary", ":all:", "-d", cache, "--quiet"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        proc = None
        detail = str(exc)
    else:
        detail = (proc.stderr or proc.stdout).strip()[-600:]
    if proc is None or proc.returncode != 0 or not os.path.exists(wheel):
        raise OSError(
            "Could not fetch the MovieLens-100k ratings (" + " ".join(cmd[2:]) + " failed: "
            + (detail or "no wheel written") + "). Are you offline? Either download "
            "ml-100k.zip from https://grouplens.org/datasets/movielens/100k/ (accepting its "
            "licence) and pass its path, or its u.data file, to load_movielens_100k(path=...).")
    return wheel


def load_movielens_100k(path=None, download=False, cache_dir=None, as_frame=False):
    """The 100,000 MovieLens-100k ratings: (user, movie) pairs, ratings, timestamps.

    943 users rate 1,682 movies on the 1-5 star scale, each user at least 20
    movies (GroupLens; Harper and Konstan, 2015).  The data are not shipped
    with the library (the GroupLens licence allows research use but not
    redistribution); give ``path`` to a copy, or ``download=True`` to fetch
    the RecBole wheel that ships them (:func:`fetch_movielens_100k`).

    Parameters
    ----------
    path : None or path-like
        One of: the RecBole wheel (or any zip) holding
        ``recbole/dataset_example/ml-100k/ml-100k.inter``; GroupLens'
        ``ml-100k.zip`` (its ``ml-100k/u.data``); an extracted
        ``ml-100k.inter`` (tab-separated, typed header) or ``u.data``
        (tab-separated, no header).  None: the wheel in ``cache_dir`` (see
        ``download``).
    download : bool, default=False
        With ``path=None``: fetch the wheel into ``cache_dir`` if it is not
        there.  Without it a missing copy is an error that says how to get
        one.
    cache_dir : None or path-like
        Where the wheel is looked for and fetched to (default
        ``$BAYESIAN_SUBSAMPLE_DATA/movielens`` or
        ``~/.cache/bayesian_subsample/movielens``).
    as_frame : bool, default=False
        Return one ``DataFrame`` with columns ``user``, ``movie``,
        ``rating``, ``timestamp`` instead of arrays.

    Returns
    -------
    X : ndarray of int64 (100000, 2)
        (user id, movie id) pairs, GroupLens' ids (users 1-943, movies
        1-1682), in the file's order.
    y : ndarray of float64 (100000,)
        Ratings 1-5.
    timestamp : ndarray of int64 (100000,)
        Unix seconds of each rating (for time-ordered, online splits).

    References
    ----------
    Harper, F. M. and Konstan, J. A. (2015). The MovieLens datasets: history
    and context. *ACM Transactions on Interactive Intelligent Systems* 5(4).
    """
    import io
    import os
    import zipfile

    import pandas as pd

    if path is None:
        wheel = os.path.join(_movielens_cache_dir(cache_dir), _RECBOLE_WHEEL)
        if not os.path.exists(wheel):
            if not download:
                raise FileNotFoundError(
                    f"No MovieLens-100k copy at {wheel}. Pass download=True to fetch it "
                    f"(pip download {_RECBOLE_REQUIREMENT} --no-deps), or path= to a copy "
                    "(the RecBole wheel, GroupLens' ml-100k.zip, ml-100k.inter or u.data).")
            wheel = fetch_movielens_100k(cache_dir)
        path = wheel
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such file: {path!r} (expected the RecBole wheel, "
                                "ml-100k.zip, ml-100k.inter or u.data).")
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            member = next((n for n in names if n.endswith("ml-100k.inter")), None)
            member = member or next((n for n in names if n.endswith("ml-100k/u.data")), None)
            if member is None:
                raise ValueError(f"{path!r} is a zip without ml-100k.inter or ml-100k/u.data.")
            raw = zf.read(member)
    else:
        with open(path, "rb") as fh:
            raw = fh.read()
    header = raw.split(b"\n", 1)[0]
    has_header = b"user_id" in header
    try:
        df = pd.read_csv(io.BytesIO(raw), sep="\t", header=0 if has_header else None,
                         names=["user", "movie", "rating", "timestamp"],
                         dtype={"user": np.int64, "movie": np.int64, "rating": np.float64,
                                "timestamp": np.float64})
    except (ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"{path!r} is not in the MovieLens-100k format (user, item, rating, "
                         f"timestamp, tab-separated): {exc}") from None
    if len(df) != _ML100K_N_RATINGS or df.isna().any().any():
        raise ValueError(f"{path!r} holds {len(df)} ratings, not MovieLens-100k's "
                         f"{_ML100K_N_RATINGS} (or has missing fields).")
    df["timestamp"] = df["timestamp"].astype(np.int64)
    if as_frame:
        return df
    return (df[["user", "movie"]].to_numpy(dtype=np.int64), df["rating"].to_numpy(),
            df["timestamp"].to_numpy())
