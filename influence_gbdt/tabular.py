"""Row helpers shared by the API, the adapters and the validation tools (numpy arrays, pandas
frames, SciPy sparse matrices and sequences)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .inputs import is_sparse


def n_rows(X: Any) -> int:
    """Number of rows of a 2-D array-like (``X.shape[0]``, else ``len(X)``)."""
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None else len(X)


def take_rows(X: Any, idx: NDArray[Any]) -> Any:
    """Rows ``idx`` (integer indices or a boolean mask) of ``X``, keeping a DataFrame a DataFrame
    and a SciPy sparse matrix sparse."""
    import pandas as pd

    idx = np.asarray(idx)
    if isinstance(X, (pd.DataFrame, pd.Series)):
        return X.iloc[np.flatnonzero(idx) if idx.dtype == bool else idx]
    if is_sparse(X):
        return X[np.flatnonzero(idx) if idx.dtype == bool else idx]
    return np.asarray(X)[idx]
