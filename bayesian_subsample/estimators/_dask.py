"""Dask arrays (and zarr stores through :func:`dask.array.from_zarr`) as ``X``.

DESIGN §3: a GLM reads its data only as rows ``X[idx]`` and as full passes
over bounded-size chunks.  For a :class:`dask.array.Array` both happen where
the data live:

* **Validation** (:func:`validate_dask_fit_data`) is one dask computation of
  reductions -- NaN and infinity, the largest magnitude
  (:data:`~._validation.MAX_ABS_VALUE`), the classes of a classifier's labels
  or the range of a regressor's target, and the weights' checks -- instead of
  scikit-learn's ``validate_data``, which would load the whole array into
  this process.  ``float32`` data stay ``float32``; other numeric types are
  cast chunk by chunk on the workers.
* **Full passes** (the reference point theta*, the Taylor control-variate
  sums and the mass matrix, the curvature bounds, every theta* refinement and
  the full-data gradients) run through :meth:`DaskRows.map_model_chunks`: one
  task per dask block, which splits its rows into the model's own chunks and
  returns their partial results.  The row chunks of ``X`` are first aligned
  so that every block starts at a multiple of the model's ``chunk_size``;
  the per-chunk results are then exactly those of the in-memory pass, and the
  model adds them up in the same order, so the sums -- and the draws -- are
  bit-identical to the fit on the same data in memory.  Tasks run BLAS on
  one thread (the fit's policy, :class:`~._passes.SingleThreadedBLAS`).  With
  a :class:`distributed.Client` active when ``fit`` starts, every pass runs on
  its cluster (also from a chain that runs in another process: the
  scheduler's address travels with the data); without one, on dask's local
  scheduler.
* **Row gathers** (:meth:`_DaskSource.take`): the rows of ``X``, ``y`` and
  the weights for one index array come back in one computation, and the last
  gather is kept, so the Newton iterations of a subset mode search read their
  rows once.  HMC-ECS draws its subsample proposals ahead in batches
  (``HMCECS(prefetch=...)``), so that one gather serves many iterations and
  the iterations themselves touch only local arrays.

The arrays are wrapped in :class:`DaskRows`, which looks enough like an
array (``shape``, ``ndim``, ``dtype``, ``X[idx]``, ``X[start:stop]``) for
the models; it refuses ``numpy.asarray`` so that nothing loads the whole
array by accident.  Dask is imported only inside these functions.
"""

from __future__ import annotations

import copy
import threading
import warnings

import numpy as np

from ._passes import SingleThreadedBLAS
from ._validation import check_data_scale

__all__ = ["is_dask_array", "validate_dask_fit_data", "DaskRows", "wrap_fit_data",
           "chunked_sums", "dask_predict", "check_dask_sampler"]


def is_dask_array(a):
    """Whether ``a`` is a :class:`dask.array.Array` (without importing dask)."""
    if not (hasattr(a, "__dask_graph__") and hasattr(a, "chunks") and hasattr(a, "ndim")):
        return False
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - a dask collection implies dask
        return False
    return isinstance(a, da.Array)


# --------------------------------------------------------------- the cluster
#: Clients opened by a copy of the data unpickled in another process (a chain
#: in a joblib worker), one per scheduler address.
_CLIENTS = {}
_CLIENTS_LOCK = threading.Lock()


def _active_client():
    """The default :class:`distributed.Client`, or None."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:
        return None


def _client_for(address):
    """A client of the scheduler at ``address`` (the default one if it is that)."""
    if address is None:
        return None
    client = _active_client()
    if client is not None and client.scheduler.address == address:
        return client
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(address)
        if client is None or client.status not in ("running", "connecting", "newly-created"):
            from distributed import Client

            client = _CLIENTS[address] = Client(address, set_as_default=False)
    return client


def _compute(address, *collections):
    """``dask.compute(*collections)`` on the cluster at ``address`` (or locally)."""
    client = _client_for(address)
    if client is None:
        import dask

        return dask.compute(*collections)
    return tuple(client.compute(list(collections), sync=True))


# ------------------------------------------------------------------ validation
def _row_vector(a, X, name):
    """``a`` (array-like or dask, shape (n,) or (n, 1)) as a 1-D dask array
    chunked like the rows of ``X``."""
    import dask.array as da

    if not is_dask_array(a):
        a = np.asarray(a)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-d (one value per row of X), got shape {a.shape}.")
    if a.shape[0] != X.shape[0]:
        raise ValueError(
            f"Found input variables with inconsistent numbers of samples: X has "
            f"{X.shape[0]} rows but {name} has {a.shape[0]}.")
    if is_dask_array(a):
        if any(np.isnan(c) for c in a.chunks[0]):
            raise ValueError(f"{name} has unknown chunk sizes; call {name}.compute_chunk_sizes() "
                             "first.")
        return a.rechunk({0: X.chunks[0]})
    return da.from_array(a, chunks=(X.chunks[0],))


def _check_real(a, name):
    if a.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} must hold real numbers, got dtype {a.dtype}. Encode categorical or string "
            "columns as numbers first (e.g. with sklearn.preprocessing.OneHotEncoder).")


def _float_array(a, name):
    """float32 / float64 kept, other real numbers cast lazily to float64."""
    _check_real(a, name)
    if a.dtype in (np.float32, np.float64):
        return a
    return a.astype(np.float64)


def as_float64(a):
    """``a`` as float64 (the blocks' cast; no copy when it already is)."""
    return np.asarray(a, dtype=np.float64)


def as_fit_float(a):
    """float32 / float64 kept, other numbers as float64 (what ``validate_data`` gives)."""
    a = np.asarray(a)
    return a if a.dtype in (np.float32, np.float64) else a.astype(np.float64)


class EncodeBinary:
    """Labels as 0/1 float64: 1 where ``y == positive`` (a picklable block transform)."""

    def __init__(self, positive):
        self.positive = positive

    def __call__(self, y):
        return (np.asarray(y) == self.positive).astype(np.float64)


class EncodeClasses:
    """Labels as class codes ``0..K-1`` (intp), their positions in the sorted
    ``classes`` (a picklable block transform)."""

    dtype = np.dtype(np.intp)

    def __init__(self, classes):
        self.classes = np.asarray(classes)

    def __call__(self, y):
        return np.searchsorted(self.classes, np.asarray(y)).astype(np.intp)


def validate_dask_fit_data(estimator, X, y, sample_weight, y_numeric):
    """Check a dask ``X`` and its ``y`` and weights with one dask computation.

    Returns ``(X, y, sample_weight, classes)``: the user's dask arrays (no
    cast: the casts are done block by block where the blocks are read, see
    :func:`wrap_fit_data`), with aligned row chunks and ``X`` in one column
    chunk; ``classes`` the sorted distinct labels of a classifier, None for a
    regressor.  Sets
    ``n_features_in_`` (and removes a ``feature_names_in_`` of an earlier
    fit), as ``validate_data`` would.  Nothing is loaded into this process
    beyond a few numbers per chunk.
    """
    import dask.array as da

    if X.ndim != 2:
        raise ValueError(f"Expected a 2-d dask array for X, got {X.ndim} dimensions "
                         f"(shape {X.shape}).")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has unknown chunk sizes (for instance after boolean indexing); "
                         "call X.compute_chunk_sizes() first.")
    n, d = X.shape
    if n < 1 or d < 1:
        raise ValueError(f"Found array with {n} sample(s) and {d} feature(s) (shape {X.shape}) "
                         "while a minimum of 1 is required.")
    _check_real(X, "X")
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    y = _row_vector(y, X, "y")
    Xf = _float_array(X, "X")
    checks = {"x_nan": da.isnan(Xf).any(), "x_max": abs(Xf).max()}
    if y_numeric:
        _check_real(y, "y")
        yf = y.astype(np.float64)
        checks.update(y_nan=da.isnan(yf).any(), y_max=abs(yf).max(), y_min=yf.min())
    else:
        if y.dtype.kind == "f":
            checks["y_nan"] = da.isnan(y).any()
            checks["y_max"] = abs(y).max()
        if y.dtype.kind not in "biufUSO":
            raise ValueError(f"Unknown label type: y has dtype {y.dtype}.")
        checks["classes"] = da.unique(y)
    if sample_weight is not None:
        sample_weight = _row_vector(sample_weight, X, "sample_weight")
        _check_real(sample_weight, "sample_weight")
        wf = sample_weight.astype(np.float64)
        checks.update(w_finite=da.isfinite(wf).all(), w_min=wf.min(), w_max=wf.max())
    address = getattr(_active_client(), "scheduler", None)
    address = None if address is None else address.address
    keys = list(checks)
    values = dict(zip(keys, _compute(address, *(checks[k] for k in keys))))
    if values["x_nan"]:
        raise ValueError("Input X contains NaN. Remove or impute the missing values first "
                         "(e.g. sklearn.impute.SimpleImputer in a Pipeline).")
    if not np.isfinite(values["x_max"]):
        raise ValueError("Input X contains infinity or a value too large for "
                         f"dtype({X.dtype.name!r}).")
    check_data_scale(np.array([[values["x_max"]]]))
    if "y_nan" in values:
        if values["y_nan"]:
            raise ValueError("Input y contains NaN.")
        if not np.isfinite(values["y_max"]):
            raise ValueError("Input y contains infinity or a value too large for "
                             "dtype('float64').")
        if y_numeric:
            check_data_scale(np.zeros((1, 1)), np.array([values["y_max"]]))
    if sample_weight is not None:
        if not values["w_finite"]:
            raise ValueError("sample_weight contains NaN or infinity; pass finite weights.")
        if values["w_min"] < 0:
            raise ValueError("sample_weight contains negative values; weights must be >= 0.")
        if not values["w_max"] > 0:
            raise ValueError("sample_weight is all zeros; at least one weight must be positive.")
    estimator.n_features_in_ = int(d)
    if hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_
    estimator._dask_address = address
    estimator._dask_y_min = values.get("y_min")
    classes = values.get("classes")
    return X, y, sample_weight, (None if classes is None else np.asarray(classes))


def check_dask_sampler(sampler, X):
    """Refuse, before sampling, a sampler that would read rows from the cluster every
    iteration (one round trip per iteration)."""
    from ..samplers import HMC, HMCECS

    if isinstance(sampler, HMCECS) and sampler.estimator == "perturbed":
        return
    if type(sampler) is HMC:
        return
    raise ValueError(
        f"sampler={type(sampler).__name__}(...) is not supported for a dask array X: it reads "
        "a fresh random subsample of rows at every iteration that cannot be fetched ahead "
        "(one round trip to the cluster per iteration). Use sampler='hmc_ecs' (HMC-ECS, "
        "whose subsample proposals are fetched ahead in batches) or sampler='hmc' "
        "(full-data passes on the cluster), or load X into memory or a numpy.memmap "
        "(X.compute() or dask.array.to_npy_stack) for the other samplers.")


# ------------------------------------------------------------------ row source
class _DaskSource:
    """The dask arrays of one fit's data (``X``, ``y``, weights), gathered together."""

    def __init__(self, arrays, transforms, address):
        self.arrays = arrays
        #: Per-array block transforms (casts, label encoding), applied to the
        #: numpy blocks where they are read, so the dask graphs hold only the
        #: user's arrays (no intermediate keys shared between computations).
        self.transforms = transforms
        self.address = address
        self._last = None
        self._aligned = {}
        self._lock = threading.Lock()

    def __getstate__(self):
        state = dict(vars(self))
        state["_last"] = None
        state["_aligned"] = {}
        state["_lock"] = None
        return state

    def __setstate__(self, state):
        vars(self).update(state)
        self._lock = threading.Lock()

    def take(self, name, idx):
        """Rows ``idx`` of array ``name``; all arrays' rows come in one computation.

        The rows are gathered at the sorted distinct indices (dask's efficient
        take) and put back in the order of ``idx``; the last gather is kept
        (and a fresh copy returned each time).
        """
        idx = np.asarray(idx)
        with self._lock:
            last = self._last
            if last is None or last[0].shape != idx.shape or not np.array_equal(last[0], idx):
                uniq, inverse = np.unique(idx.ravel(), return_inverse=True)
                names = [k for k, a in self.arrays.items() if a is not None]
                values = _compute(self.address, *(self.arrays[k][uniq] for k in names))
                got = {k: self.transforms[k](v)[inverse.reshape(idx.shape)]
                       for k, v in zip(names, values)}
                last = self._last = (idx.copy(), got)
        # A copy, as numpy's own gather gives: callers may write into it.
        return last[1][name].copy()

    def aligned(self, chunk_size):
        """The arrays rechunked so that every row block starts at a multiple of
        ``chunk_size`` (a no-op when they already do)."""
        out = self._aligned.get(chunk_size)
        if out is not None:
            return out
        X = self.arrays["X"]
        sizes = np.asarray(X.chunks[0])
        starts = np.cumsum(sizes)[:-1]
        if np.any(starts % chunk_size):
            rows = max(chunk_size, int(round(float(np.median(sizes)) / chunk_size)) * chunk_size)
            X = X.rechunk({0: rows})
        out = {k: (None if a is None else (X if k == "X" else a.rechunk({0: X.chunks[0]})))
               for k, a in self.arrays.items()}
        self._aligned[chunk_size] = out
        return out


def _aligned(a):
    """A C-contiguous copy of ``a`` in memory numpy allocated (aligned)."""
    return np.array(a, order="C", copy=True)


def _pass_on_block(shell, method, args, transforms, Xb, yb, wb):
    """The model's ``method`` on every chunk of one dask block (a worker task)."""
    Xb, yb = transforms["X"](Xb), transforms["y"](yb)
    wb = None if wb is None else transforms["w"](wb)
    model = copy.copy(shell)
    # A worker reuses one unpickled shell for all its tasks: a model that
    # caches per-chunk results (the spline basis) must start empty per block
    # (BasisGLM's copy already does, through its __getstate__; any model
    # with a cache gets the same).
    reset = getattr(model, "_reset_cache", None)
    if reset is not None:
        reset()
    # Fresh copies (also of theta): an array unpickled from a message sits at
    # whatever address its bytes had, often not even 8-byte aligned, and numpy
    # then multiplies without BLAS, summing in another order; numpy's own
    # allocation gives the alignment the in-memory pass has.
    model.X = _aligned(Xb)
    model.y = _aligned(yb)
    model.sample_weight = None if wb is None else _aligned(wb)
    args = tuple(_aligned(a) if isinstance(a, np.ndarray) else a for a in args)
    fn = getattr(model, method)
    with SingleThreadedBLAS():
        return [fn(*model.chunk_rows(start, stop), *args) for start, stop in model.chunks()]


class DaskRows:
    """One of a fit's dask arrays, seen by a model as a read-only array of rows.

    ``rows[idx]`` with an index array gathers (with the other arrays of the
    same data: one computation), ``rows[start:stop]`` computes a slice, and
    ``numpy.asarray(rows)`` raises instead of loading the whole array.
    """

    #: Read by the models: keep as it is (no ``numpy.asarray``).
    lazy_rows = True

    def __init__(self, source, name):
        self.source = source
        self.name = name

    @property
    def dask_array(self):
        return self.source.arrays[self.name]

    @property
    def shape(self):
        return self.dask_array.shape

    @property
    def ndim(self):
        return self.dask_array.ndim

    @property
    def dtype(self):
        """The dtype of the rows a model reads (after the block transform)."""
        return self.source.dtypes[self.name]

    def __len__(self):
        return self.shape[0]

    def astype(self, dtype):
        """Itself when ``dtype`` is its dtype (the models' no-op casts)."""
        if np.dtype(dtype) != self.dtype:
            raise TypeError(f"{self.name!r} is {self.dtype}, not {np.dtype(dtype)}; cast the "
                            "dask array before wrapping it.")
        return self

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.source.transforms[self.name](
            _compute(self.source.address, self.dask_array[key])[0])
        return self.source.take(self.name, key)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            f"Refusing to load the whole dask array {self.name!r} (shape {self.shape}) into "
            "memory; the models read it by rows and chunked passes only.")

    def map_model_chunks(self, model, method, args):
        """``model.<method>(Xr, yr, wr, *args)`` on every chunk of the model's chunk grid,
        one dask task per block, in row order (see the module docstring)."""
        import dask

        arrays = self.source.aligned(model.chunk_size)
        shell = copy.copy(model)
        shell.X = shell.y = shell.sample_weight = None
        shell = dask.delayed(shell, traverse=False)
        xs = arrays["X"].to_delayed().ravel()
        ys = arrays["y"].to_delayed().ravel()
        ws = ([None] * len(xs) if arrays.get("w") is None
              else arrays["w"].to_delayed().ravel())
        task = dask.delayed(_pass_on_block, pure=True)
        parts = _compute(self.source.address,
                         *(task(shell, method, args, self.source.transforms, xb, yb, wb)
                           for xb, yb, wb in zip(xs, ys, ws)))
        return [part for block in parts for part in block]


def wrap_fit_data(X, y, sample_weight, address, y_transform=as_float64):
    """``(X, y, sample_weight)`` as :class:`DaskRows` sharing one source.

    The models read ``X`` as float32 or float64 (:func:`as_fit_float`), ``y``
    through ``y_transform`` (float64 numbers, or the encoded labels) and the
    weights as float64.
    """
    transforms = {"X": as_fit_float, "y": y_transform, "w": as_float64}
    source = _DaskSource({"X": X, "y": y, "w": sample_weight}, transforms, address)
    source.dtypes = {"X": X.dtype if X.dtype in (np.float32, np.float64) else np.dtype("f8"),
                     "y": np.dtype(getattr(y_transform, "dtype", "f8")), "w": np.dtype("f8")}
    return (DaskRows(source, "X"), DaskRows(source, "y"),
            None if sample_weight is None else DaskRows(source, "w"))


def chunked_sums(fn, arrays, chunk_size):
    """``sum_c fn(*chunk_c)`` over the row chunks ``[k chunk_size, (k + 1) chunk_size)``.

    ``arrays`` are numpy arrays or :class:`DaskRows` of one source; the partial
    results are added in chunk order from zero either way, so both give the
    same floating-point result (and a single chunk gives ``fn(*arrays)``).
    """
    if not any(isinstance(a, DaskRows) for a in arrays):
        n = len(arrays[0])
        with SingleThreadedBLAS():  # as on the workers (and independent of the machine)
            if n <= chunk_size:
                return fn(*arrays)
            parts = [fn(*(a[s:s + chunk_size] for a in arrays))
                     for s in range(0, n, chunk_size)]
    else:
        import dask

        source = arrays[0].source
        aligned = source.aligned(chunk_size)
        blocks = [aligned[a.name].to_delayed().ravel() for a in arrays]
        task = dask.delayed(_sums_on_block, pure=True)
        transforms = [source.transforms[a.name] for a in arrays]
        out = _compute(source.address,
                       *(task(fn, chunk_size, transforms, *bs) for bs in zip(*blocks)))
        parts = [p for block in out for p in block]
        if len(parts) == 1:
            return parts[0]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def _sums_on_block(fn, chunk_size, transforms, *blocks):
    blocks = [_aligned(t(b)) for t, b in zip(transforms, blocks)]
    n = len(blocks[0])
    with SingleThreadedBLAS():
        return [fn(*(b[s:s + chunk_size] for b in blocks)) for s in range(0, n, chunk_size)]


# ------------------------------------------------------------------ prediction
def _predict_block(block, estimator, method, kwargs, part):
    block = _aligned(block)  # see _pass_on_block
    with warnings.catch_warnings():
        # The feature-name check of an in-memory array does not apply to a block.
        warnings.simplefilter("ignore", UserWarning)
        out = getattr(estimator, method)(block, **kwargs)
    return out if part is None else out[part]


def dask_predict(estimator, method, X, n_columns=None, dtype=np.float64, n_parts=None,
                 **kwargs):
    """``estimator.<method>(X)`` as a lazy dask array, one task per row block.

    ``n_columns`` is the width of a 2-d result (None for one value per row);
    a method returning a tuple of ``n_parts`` arrays gives a tuple of dask
    arrays.  The fitted estimator travels with the tasks; each block is
    predicted by the in-memory code, so the values equal those of
    ``method(X.compute())`` row for row (the predictions are row-wise).
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator)
    if X.ndim != 2:
        raise ValueError(f"Expected a 2-d dask array for X, got shape {X.shape}.")
    if X.shape[1] != estimator.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting "
            f"{estimator.n_features_in_} features as input.")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first.")
    X = _float_array(X, "X")
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    if n_parts is not None:
        return tuple(_map_predict(estimator, method, X, n_columns, dtype, kwargs, part)
                     for part in range(n_parts))
    return _map_predict(estimator, method, X, n_columns, dtype, kwargs, None)


def _map_predict(estimator, method, X, n_columns, dtype, kwargs, part):
    if n_columns is None:
        return X.map_blocks(_predict_block, estimator, method, kwargs, part, drop_axis=1,
                            dtype=dtype, meta=np.empty((0,), dtype=dtype))
    return X.map_blocks(_predict_block, estimator, method, kwargs, part, dtype=dtype,
                        chunks=(X.chunks[0], (n_columns,)),
                        meta=np.empty((0, 0), dtype=dtype))
