"""ArviZ export: schema, pointwise log-likelihood, memory guard, LOO/compare, plots, I/O."""

import sys
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import (BayesianLinearRegression, BayesianLogisticRegression,
                                BayesianPoissonRegressor, BayesianSplineClassifier)

xr = pytest.importorskip("xarray")

SMALL = dict(n_chains=2, n_warmup=150, n_draws=100, random_state=0)


def _fit(est, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(*args, **kwargs)


def _logistic_data(n=1500, seed=0, beta=(1.0, -0.5, 0.25)):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, len(beta)))
    y = (rng.random(n) < expit(0.3 + X @ np.asarray(beta))).astype(int)
    return X, y


@pytest.fixture(scope="module")
def logistic_fit():
    X, y = _logistic_data()
    labels = np.array(["no", "yes"])[y]
    return _fit(BayesianLogisticRegression(**SMALL), X, labels), X, labels


@pytest.fixture(scope="module")
def poisson_fit():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((1500, 2))
    exposure = rng.uniform(0.5, 2.0, 1500)
    y = rng.poisson(exposure * np.exp(0.5 + X @ [0.3, -0.2]))
    return _fit(BayesianPoissonRegressor(**SMALL), X, y, exposure=exposure), X, y, exposure


@pytest.fixture(scope="module")
def linear_fit():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((1500, 2))
    y = 1.0 + X @ [2.0, -1.0] + 0.5 * rng.standard_normal(1500)
    return _fit(BayesianLinearRegression(**SMALL), X, y), X, y


def _flat(a):
    return np.asarray(a).reshape(-1, *np.shape(a)[2:])


def test_logistic_schema_and_pointwise_loglik(logistic_fit):
    clf, X, labels = logistic_fit
    w = np.random.default_rng(3).integers(1, 3, len(X)).astype(float)
    dt = clf.to_datatree(X, labels, sample_weight=w)
    assert set(dt.children) == {"posterior", "sample_stats", "log_likelihood",
                                "observed_data", "constant_data"}
    post = dt["posterior"]
    assert post["coef"].dims == ("chain", "draw", "feature")
    assert list(post["feature"].values) == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(post["coef"].values, clf.coef_draws_)
    np.testing.assert_array_equal(post["intercept"].values, clf.intercept_draws_)
    ss = dt["sample_stats"]
    for name in ("acceptance_rate", "diverging", "energy", "lp", "step_size", "n_steps"):
        assert ss[name].dims == ("chain", "draw")
    assert ss["diverging"].dtype == bool
    ll = dt["log_likelihood"]["y"]
    assert ll.dims == ("chain", "draw", "obs_id") and ll.shape == (2, 100, len(X))
    # Recompute from the stored draws with scipy.
    y01 = (labels == "yes").astype(int)
    p = expit(X @ _flat(clf.coef_draws_).T + _flat(clf.intercept_draws_))
    expected = w[:, None] * stats.bernoulli.logpmf(y01[:, None], p)
    np.testing.assert_allclose(_flat(ll.values).T, expected, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(dt["observed_data"]["y"].values, y01)
    assert dt["observed_data"].attrs["positive_class"] == "yes"


def test_poisson_pointwise_loglik_with_exposure(poisson_fit):
    reg, X, y, exposure = poisson_fit
    dt = reg.to_datatree(X, y, exposure=exposure)
    mu = exposure[:, None] * np.exp(X @ _flat(reg.coef_draws_).T + _flat(reg.intercept_draws_))
    expected = stats.poisson.logpmf(y[:, None], mu)
    got = _flat(dt["log_likelihood"]["y"].values).T
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(dt["constant_data"]["exposure"].values, exposure)
    with pytest.raises(ValueError, match="exposure"):
        reg.to_datatree(X, y, exposure=-exposure)


def test_linear_pointwise_loglik_and_sigma(linear_fit):
    reg, X, y = linear_fit
    dt = reg.to_datatree(X, y)
    np.testing.assert_array_equal(dt["posterior"]["sigma"].values, reg.sigma_draws_)
    loc = X @ _flat(reg.coef_draws_).T + _flat(reg.intercept_draws_)
    expected = stats.norm.logpdf(y[:, None], loc, _flat(reg.sigma_draws_))
    got = _flat(dt["log_likelihood"]["y"].values).T
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)


def test_spline_export_uses_basis_names():
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, (1500, 2))
    y = (rng.random(1500) < expit(np.sin(2 * X[:, 0]) + 0.5 * X[:, 1])).astype(int)
    clf = _fit(BayesianSplineClassifier(n_knots=5, **SMALL), X, y)
    dt = clf.to_datatree(X, y, rows=slice(0, 200))
    coef = dt["posterior"]["coef"]
    assert coef.dims == ("chain", "draw", "basis_function")
    assert list(coef["basis_function"].values) == list(clf.basis_feature_names_)
    Z = clf.spline_transformer_.transform(X[:200])
    p = expit(Z @ _flat(clf.coef_draws_).T + _flat(clf.intercept_draws_))
    expected = stats.bernoulli.logpmf(y[:200, None], p)
    got = _flat(dt["log_likelihood"]["y"].values).T
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)


def test_rows_thin_and_memory_guard(logistic_fit):
    clf, X, labels = logistic_fit
    full = clf.to_datatree(X, labels)
    rows = np.array([5, 0, 17])
    dt = clf.to_datatree(X, labels, rows=rows, thin=3)
    assert dt["posterior"].sizes["draw"] == 34
    np.testing.assert_array_equal(dt["posterior"]["draw"].values, np.arange(0, 100, 3))
    np.testing.assert_array_equal(dt["log_likelihood"]["obs_id"].values, rows)
    np.testing.assert_array_equal(
        dt["log_likelihood"]["y"].values,
        full["log_likelihood"]["y"].values[:, ::3][:, :, rows])
    with pytest.raises(ValueError, match=r"rows=.*thin="):
        clf.to_datatree(X, labels, max_log_likelihood_size=1000)
    small = clf.to_datatree(X, labels, rows=slice(0, 5), max_log_likelihood_size=1000)
    assert small["log_likelihood"].sizes["obs_id"] == 5
    with pytest.raises(ValueError, match="neither"):
        clf.to_datatree(X)
    with pytest.raises(ValueError, match="not seen in fit"):
        clf.to_datatree(X[:3], ["no", "maybe", "yes"])
    with pytest.raises(ValueError, match="thin"):
        clf.to_datatree(thin=0)
    no_data = clf.to_datatree()
    assert set(no_data.children) == {"posterior", "sample_stats"}


def test_signed_fit_exports_signs():
    X, y = _logistic_data(n=3000)
    from bayesian_subsample import HMCECS

    clf = _fit(BayesianLogisticRegression(sampler=HMCECS(estimator="signed"), **SMALL), X, y)
    dt = clf.to_datatree()
    np.testing.assert_array_equal(dt["sample_stats"]["sign"].values, clf.sample_stats_["sign"])
    assert dt["posterior"].attrs["sign_weighted"] == 1


@pytest.mark.parametrize("engine", ["h5netcdf", "netcdf4", "zarr"])
def test_round_trip(logistic_fit, tmp_path, engine):
    pytest.importorskip(engine if engine != "netcdf4" else "netCDF4")
    clf, X, labels = logistic_fit
    dt = clf.to_datatree(X, labels, rows=slice(0, 50))
    if engine == "zarr":
        path = tmp_path / "fit.zarr"
        dt.to_zarr(path, consolidated=False)
        back = xr.open_datatree(path, engine="zarr", consolidated=False)
    else:
        path = tmp_path / "fit.nc"
        dt.to_netcdf(path, engine=engine)
        back = xr.open_datatree(path, engine=engine)
    back = back.load()
    xr.testing.assert_identical(back, dt)


# ------------------------------------------------------------------ ArviZ 0.x
az = None


def _arviz():
    global az
    az = pytest.importorskip("arviz")
    return az


@pytest.fixture(scope="module")
def well_and_misspecified():
    # x1 has a strong effect: dropping it misspecifies the model.
    X, y = _logistic_data(n=1500, seed=5, beta=(0.5, 2.0, -0.3))
    params = dict(n_chains=2, n_warmup=300, n_draws=300, random_state=0)
    full = _fit(BayesianLogisticRegression(**params), X, y)
    missing = _fit(BayesianLogisticRegression(**params), X[:, [0, 2]], y)
    return full, missing, X, y


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="ArviZ 0.x path (Python < 3.12)")
def test_loo_compare_and_plots_arviz0(well_and_misspecified):
    az = _arviz()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full, missing, X, y = well_and_misspecified
    idata_full = full.to_inference_data(X, y)
    idata_missing = missing.to_inference_data(X[:, [0, 2]], y)
    assert isinstance(idata_full, az.InferenceData)
    loo = az.loo(idata_full, pointwise=True)
    assert np.all(loo.pareto_k.values < 0.7)
    cmp = az.compare({"full": idata_full, "missing_x1": idata_missing})
    assert cmp.index[0] == "full"
    # The difference is many standard errors: not a close call.
    assert cmp.loc["missing_x1", "elpd_diff"] > 4 * cmp.loc["missing_x1", "dse"]
    axes = az.plot_trace(idata_full, var_names=["intercept", "coef"])
    assert axes.shape[0] == 2
    axes = az.plot_rank(idata_full, var_names=["coef"])
    assert np.size(axes) == 3
    plt.close("all")


@pytest.mark.skipif(sys.version_info < (3, 12), reason="ArviZ 1.x needs Python >= 3.12")
def test_loo_compare_and_plots_arviz1(well_and_misspecified):
    az = _arviz()
    assert int(az.__version__.split(".")[0]) >= 1
    import matplotlib

    matplotlib.use("Agg")
    full, missing, X, y = well_and_misspecified
    dt_full = full.to_datatree(X, y)
    dt_missing = missing.to_datatree(X[:, [0, 2]], y)
    loo = az.loo(dt_full, pointwise=True)
    assert np.all(np.asarray(loo.pareto_k) < 0.7)
    cmp = az.compare({"full": dt_full, "missing_x1": dt_missing})
    assert cmp.index[0] == "full"
    assert full.to_inference_data(X, y) is not None
    az.plot_trace(dt_full, var_names=["coef"])
    az.plot_trace_dist(dt_full, var_names=["coef"])
    az.plot_rank(dt_full, var_names=["coef"])
