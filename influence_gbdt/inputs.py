"""Checks of what users pass: tables of rows, per-row vectors, settings.

Every check raises :class:`~influence_gbdt.errors.InputError` with the cause and the fix, before
any booster or kernel sees the input. Rows are matched by *position* everywhere (as in
scikit-learn); a pandas ``y`` or weight whose index differs from ``X``'s is refused rather than
silently taken in another order.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from .errors import InputError

#: Training-library containers: (module prefix, class name) -> what to pass instead.
_CONTAINERS = {
    ("xgboost", "DMatrix"): "an XGBoost DMatrix",
    ("xgboost", "QuantileDMatrix"): "an XGBoost QuantileDMatrix",
    ("lightgbm", "Dataset"): "a LightGBM Dataset",
    ("catboost", "Pool"): "a CatBoost Pool",
}


def _container(X: Any) -> str | None:
    for cls in type(X).__mro__:
        name = _CONTAINERS.get((cls.__module__.split(".")[0], cls.__name__))
        if name:
            return name
    return None


def _polars_class(value: Any) -> str | None:
    """The class name of a polars object (``DataFrame``, ``LazyFrame``, ``Series``), else None;
    polars is never imported here."""
    cls = type(value)
    return cls.__name__ if cls.__module__.split(".")[0] == "polars" else None


def from_polars(X: Any, what: str = "X") -> Any:
    """A polars ``DataFrame`` as the pandas DataFrame it converts to (``X.to_pandas()``: nulls
    become NaN, a ``Categorical`` or ``Enum`` column a pandas categorical with the same categories in
    the same order, a default 0..n-1 index); anything else as given.

    The boosters read a polars frame as they read that pandas frame: the same predictions and
    leaves, which the adapters' self-check confirms on the training rows.

    Raises
    ------
    InputError
        A ``LazyFrame`` (not yet computed), or the conversion needs pyarrow and it is missing.
    """
    kind = _polars_class(X)
    if kind == "LazyFrame":
        raise InputError(f"{what} is a polars LazyFrame: compute it first, {what}.collect().")
    if kind != "DataFrame":
        return X
    try:
        return X.to_pandas()
    except ImportError as e:
        raise InputError(
            f"{what} is a polars DataFrame, whose conversion needs pyarrow ({e}): pip install pyarrow, "
            f"or pass {what}.to_pandas()."
        ) from None


def is_sparse(X: Any) -> bool:
    """Whether ``X`` is a SciPy sparse matrix or array (without importing SciPy)."""
    return type(X).__module__.startswith("scipy.sparse")


def check_table(X: Any, what: str = "X") -> Any:
    """``X`` as a 2-D table with at least one row and one column.

    pandas DataFrames, numpy arrays and SciPy sparse matrices are returned as given, a polars
    DataFrame as pandas (:func:`from_polars`); lists (of lists) and other sequences become float64
    ndarrays.

    Raises
    ------
    InputError
        A booster's own container (DMatrix, Dataset, Pool), a Series or 1-D array (one row?), a 3-D
        array, a ragged or non-numeric list, no rows, no columns, duplicate column names, a polars
        ``LazyFrame``.
    """
    container = _container(X)
    if container:
        raise InputError(
            f"{what} is {container}: pass the numpy array or DataFrame it was built from "
            "(its labels as y, its weights as sample_weight)."
        )
    X = from_polars(X, what)
    _refuse_series(X, what)
    if isinstance(X, pd.DataFrame):
        duplicated = X.columns[X.columns.duplicated()].unique().tolist()
        if duplicated:
            raise InputError(
                f"{what} has duplicate column names {duplicated[:5]}: give every column its own name."
            )
        table: Any = X
    elif is_sparse(X) or isinstance(X, np.ndarray):
        table = X
    elif isinstance(X, Sequence) and not isinstance(X, (str, bytes)):
        try:
            table = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"{what} is a list that is not a rectangular table of numbers ({exc}): pass a numpy "
                "array, or a DataFrame when there are categorical columns."
            ) from None
    else:
        raise InputError(
            f"{what} is a {type(X).__name__}: pass a numpy array, a pandas DataFrame or a SciPy sparse "
            "matrix."
        )
    shape = tuple(table.shape)
    if len(shape) == 1:
        raise InputError(
            f"{what} is one-dimensional (shape {shape}): pass a 2-D table of rows. For one row, use "
            f"{what}[[j]] or row.reshape(1, -1)."
        )
    if len(shape) != 2:
        raise InputError(f"{what} must be 2-D (rows x features), got shape {shape}.")
    if shape[0] == 0:
        raise InputError(f"{what} has no rows: pass at least one row.")
    if shape[1] == 0:
        raise InputError(f"{what} has no columns: pass the features the model was trained on.")
    return table


def _refuse_series(X: Any, what: str) -> None:
    """Refuse a pandas or polars Series passed as a table of rows."""
    if isinstance(X, pd.Series):
        raise InputError(
            f"{what} is a pandas Series: pass a DataFrame of rows. For one row, select it with double "
            f"brackets ({what}.iloc[[j]]) or use series.to_frame().T."
        )
    if _polars_class(X) == "Series":
        raise InputError(
            f"{what} is a polars Series (one column): pass a DataFrame of rows. For one row, slice it "
            "from its DataFrame, df[j : j + 1]."
        )


def check_rows(
    values: Any, n: int, what: str, index: pd.Index | None = None, numeric: bool = True,
    columns: bool = False,
) -> NDArray[Any]:
    """A per-row argument (``y``, ``sample_weight``, ``init_score``) as an ndarray of shape (n,),
    or (n, k) where ``columns`` allows one value per row and output.

    Parameters
    ----------
    values : array-like of shape (n,) or (n, 1), Series or one-column DataFrame (pandas or polars)
        With ``columns``: also of shape (n, k) or a DataFrame of k columns (a multi-target
        regressor's targets, a multi-output model's per-output initial margins); the adapter
        checks that ``k`` is the model's number of outputs.
    n : int
        Number of rows of ``X``.
    what : str
        The argument's name, for messages.
    index : pandas Index, optional
        ``X``'s index when ``X`` is a DataFrame: a pandas ``values`` must carry the same index.
    numeric : bool
        Cast to float64 and refuse NaN and infinite values (labels stay as given: see
        :class:`~influence_gbdt.labels.LabelMap`).
    columns : bool
        Accept several values per row.

    Raises
    ------
    InputError
        Wrong length or shape, misaligned pandas index, non-numeric or non-finite values.
    """
    if isinstance(values, (pd.Series, pd.DataFrame)):
        if isinstance(values, pd.DataFrame) and not (columns and values.shape[1] > 1):
            if values.shape[1] != 1:
                raise InputError(f"{what} must be one column, got a DataFrame of {values.shape[1]} columns.")
            values = values.iloc[:, 0]
        if index is not None and not values.index.equals(index):
            raise InputError(
                f"{what}'s index differs from X's: rows are matched by position, so {what} would be "
                f"taken in another order than you may expect. Select rows by position in both "
                f"(X.iloc[[j]], {what}.iloc[[j]]), or pass {what}.to_numpy() if the positions match."
            )
        arr = values.to_numpy()
    elif np.isscalar(values) or values is None:
        raise InputError(f"{what} must hold one value per row ({n}), got {values!r}.")
    else:
        arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.ravel()
    several = columns and arr.ndim == 2 and arr.shape[0] == n
    if arr.shape != (n,) and not several:
        raise InputError(f"X has {n} rows but {what} has shape {arr.shape}: pass one value per row"
                         + (" (or one row of values per row)." if columns else "."))
    if not numeric:
        return arr
    try:
        out = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be numeric, got values like {arr[:3].tolist()}.") from None
    if not np.all(np.isfinite(out)):
        raise InputError(f"{what} contains NaN or infinite values: fix or drop those rows.")
    return out


def n_columns(X: Any) -> int:
    """Number of columns of a table that passed :func:`check_table`."""
    return int(X.shape[1])


def is_integer(value: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """A real number (Python or numpy, NaN and infinities included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_choice(name: str, value: Any, options: Sequence[str | None]) -> None:
    """Refuse ``value`` unless it is one of ``options`` (strings compared exactly, no coercion)."""
    if not (value is None or isinstance(value, str)) or value not in options:
        raise InputError(f"{name} must be one of {list(options)}, got {value!r}.")
