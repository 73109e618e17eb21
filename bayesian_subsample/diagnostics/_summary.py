"""Posterior summary table (ArviZ-like) without pandas or xarray."""

import math
from collections.abc import Mapping

import numpy as np

from ._convergence import ess_bulk, ess_tail, mcse_mean, mcse_sd, split_rhat
from ._validation import as_draws, as_signs
from ._weighted import weighted_mean, weighted_quantile, weighted_sd

__all__ = ["SummaryTable", "summarize"]


class SummaryTable(Mapping):
    """Ordered mapping from column name to a 1-D array over parameters.

    Rows are the flattened parameters (labelled by :attr:`index`), columns
    the summary statistics (:attr:`columns`). ``table["mean"]`` returns the
    column as a read-only ``numpy.ndarray``; iteration yields column names
    in order.

    Parameters
    ----------
    columns : mapping of str to array_like
        Column name -> values, one per row; insertion order is kept.
    index : sequence of str
        Row labels.

    Raises
    ------
    ValueError
        If a column does not have one value per row, or labels repeat.
    """

    #: Rows shown by ``repr`` before the middle of the table is elided.
    max_repr_rows = 60

    def __init__(self, columns, index):
        self._index = [str(name) for name in index]
        if len(set(self._index)) != len(self._index):
            raise ValueError("row labels (index) must be unique.")
        self._columns = {}
        for name, values in columns.items():
            arr = np.array(values, dtype=np.float64).reshape(-1)
            if arr.shape[0] != len(self._index):
                raise ValueError(
                    f"column {name!r} has {arr.shape[0]} values but there are "
                    f"{len(self._index)} rows."
                )
            arr.flags.writeable = False
            self._columns[str(name)] = arr

    # -- mapping protocol ---------------------------------------------------
    def __getitem__(self, column):
        try:
            return self._columns[column]
        except KeyError:
            raise KeyError(
                f"no column {column!r}; available columns: {self.columns}"
            ) from None

    def __iter__(self):
        return iter(self._columns)

    def __len__(self):
        return len(self._columns)

    def __eq__(self, other):
        if not isinstance(other, SummaryTable):
            return NotImplemented
        return (
            self.index == other.index
            and self.columns == other.columns
            and all(
                np.array_equal(self[c], other[c], equal_nan=True) for c in self.columns
            )
        )

    __hash__ = None

    # -- accessors ------------------------------------------------------------
    @property
    def columns(self):
        """list of str: Column names, in order."""
        return list(self._columns)

    @property
    def index(self):
        """list of str: Row (parameter) labels, in order."""
        return list(self._index)

    def row(self, label):
        """Return one row as a ``{column: float}`` dict.

        Parameters
        ----------
        label : str
            Row label, one of :attr:`index`.
        """
        try:
            i = self._index.index(label)
        except ValueError:
            raise KeyError(f"no row {label!r}") from None
        return {c: float(v[i]) for c, v in self._columns.items()}

    def to_dict(self):
        """Return ``{column: 1-D numpy array}`` (copies), in column order."""
        return {c: v.copy() for c, v in self._columns.items()}

    def to_pandas(self):
        """Return the table as a :class:`pandas.DataFrame` indexed by parameter.

        Raises
        ------
        ImportError
            If pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on environment
            raise ImportError(
                "SummaryTable.to_pandas() requires pandas, which is not installed; "
                "install it with `pip install pandas` or use to_dict()."
            ) from exc
        return pd.DataFrame(self.to_dict(), index=pd.Index(self.index))

    # -- display ----------------------------------------------------------------
    @staticmethod
    def _format(column, value):
        if np.isnan(value):
            return "nan"
        if column.startswith("ess"):
            return f"{value:.0f}"
        if column == "r_hat":
            return f"{value:.3f}"
        return f"{value:.4g}"

    def to_string(self, max_rows=None):
        """Render a fixed-width text table.

        Parameters
        ----------
        max_rows : int, optional
            If given and the table has more rows, only the first and last
            ``max_rows // 2`` rows are shown, separated by ``...``.

        Returns
        -------
        str
        """
        n_rows = len(self._index)
        rows = list(range(n_rows))
        elided = max_rows is not None and n_rows > max_rows
        if elided:
            head = max(1, max_rows // 2)
            rows = list(range(head)) + list(range(n_rows - head, n_rows))
        cells = {
            c: [self._format(c, v[i]) for i in rows] for c, v in self._columns.items()
        }
        labels = [self._index[i] for i in rows]
        label_width = max([len(s) for s in labels] + [0])
        widths = {
            c: max([len(c)] + [len(s) for s in cells[c]]) for c in self._columns
        }
        sep = "  "
        lines = [
            " " * label_width
            + "".join(sep + c.rjust(widths[c]) for c in self._columns)
        ]
        for k, label in enumerate(labels):
            if elided and k == len(labels) // 2:
                lines.append("...")
            lines.append(
                label.ljust(label_width)
                + "".join(sep + cells[c][k].rjust(widths[c]) for c in self._columns)
            )
        if elided:
            lines.append(f"[{n_rows} rows x {len(self._columns)} columns]")
        return "\n".join(lines)

    def __str__(self):
        return self.to_string()

    def __repr__(self):
        return self.to_string(max_rows=self.max_repr_rows)

    def _repr_html_(self):  # pragma: no cover - notebook display
        try:
            return self.to_pandas()._repr_html_()
        except ImportError:
            return None


def _quantile_label(q):
    return f"{100.0 * q:g}%"


def _row_labels(names, param_shape):
    n_params = math.prod(param_shape)
    if names is None or isinstance(names, str):
        base = "x" if names is None else names
        if not param_shape:
            return [base]
        return [
            f"{base}[{','.join(str(i) for i in idx)}]" for idx in np.ndindex(*param_shape)
        ]
    labels = [str(n) for n in names]
    if len(labels) != n_params:
        raise ValueError(
            f"names has {len(labels)} entries but the draws have {n_params} "
            f"parameter(s) (param_shape {param_shape}); pass one name per "
            "flattened parameter, or a single string prefix."
        )
    return labels


def summarize(draws, names=None, quantiles=(0.05, 0.5, 0.95), signs=None):
    """Summarise MCMC draws: moments, quantiles, MCSE, ESS and R-hat.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.
    names : sequence of str or str, optional
        Row labels, one per flattened (C-order) parameter. A single string
        is used as the variable name: ``"beta"`` gives ``beta[0]``,
        ``beta[1]``, ... Default ``"x"``: rows ``x[0]``, ``x[1]``, ... for a
        vector parameter, ``x[i,j]`` for a matrix, ``x`` for a scalar.
    quantiles : sequence of float, default=(0.05, 0.5, 0.95)
        Probabilities of the quantile columns, labelled like ``"5%"``.
    signs : array_like of shape (chain, draw), optional
        Per-draw signs of a signed sampler (e.g. signed HMC-ECS). When given,
        ``mean``, ``sd`` and the quantiles are the sign-weighted estimates
        (:func:`weighted_mean`, :func:`weighted_sd`,
        :func:`weighted_quantile`) and ``mcse_mean``/``mcse_sd`` are their
        delta-method standard errors; ``ess_bulk``, ``ess_tail`` and ``r_hat``
        are computed on the draws as they are (ignoring the signs), i.e. they
        diagnose the mixing of the underlying Markov chain.

    Returns
    -------
    SummaryTable
        Columns ``mean``, ``sd``, the quantile columns, ``mcse_mean``,
        ``mcse_sd``, ``ess_bulk``, ``ess_tail``, ``r_hat``; one row per
        flattened parameter. ``mean`` and ``sd`` (``ddof=1``) and the
        quantiles (linear interpolation) are over all chains and draws.

    Raises
    ------
    ValueError
        For malformed draws, names of the wrong length, probabilities
        outside ``[0, 1]`` or repeated, or malformed signs.

    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: An
       improved R-hat". *Bayesian Analysis* 16(2), 667-718.
    .. [2] Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M.
       (2019). "Hamiltonian Monte Carlo with energy conserving subsampling".
       *Journal of Machine Learning Research* 20(100), 1-31.
    """
    arr = as_draws(draws)
    param_shape = arr.shape[2:]
    labels = _row_labels(names, param_shape)
    probs = [float(q) for q in np.atleast_1d(np.asarray(quantiles, dtype=np.float64))]
    if any(not (0.0 <= q <= 1.0) for q in probs):
        raise ValueError(f"quantiles must be probabilities in [0, 1], got {quantiles!r}.")
    q_labels = [_quantile_label(q) for q in probs]
    if len(set(q_labels)) != len(q_labels):
        raise ValueError(f"quantiles must be distinct, got {quantiles!r}.")

    n_params = len(labels)
    flat = arr.reshape(arr.shape[0] * arr.shape[1], n_params)
    if signs is None:
        mean = flat.mean(axis=0)
        sd = flat.std(axis=0, ddof=1)
        qs = np.quantile(flat, probs, axis=0) if probs else np.empty((0, n_params))
        se_mean = mcse_mean(arr)
        se_sd = mcse_sd(arr)
    else:
        s = as_signs(signs, arr.shape)
        mean = weighted_mean(arr, s)
        sd = weighted_sd(arr, s)
        qs = weighted_quantile(arr, s, probs) if probs else np.empty((0, n_params))
        se_mean = mcse_mean(arr, s)
        se_sd = mcse_sd(arr, s)

    columns = {"mean": mean, "sd": sd}
    qs = np.asarray(qs).reshape(len(probs), n_params)
    for label, values in zip(q_labels, qs):
        columns[label] = values
    columns["mcse_mean"] = se_mean
    columns["mcse_sd"] = se_sd
    columns["ess_bulk"] = ess_bulk(arr)
    columns["ess_tail"] = ess_tail(arr)
    columns["r_hat"] = split_rhat(arr)
    return SummaryTable(columns, labels)
