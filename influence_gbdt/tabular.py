"""Row helpers shared by the API, the adapters and the validation tools (numpy arrays, pandas
frames, SciPy sparse matrices and sequences)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray


def n_rows(X: Any) -> int:
    """Number of rows of a 2-D array-like (``X.shape[0]``, else ``len(X)``)."""
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None else len(X)


def take_rows(X: Any, idx: NDArray[Any]) -> Any:
    """Rows ``idx`` (integer indices or a boolean mask) of ``X``, keeping a DataFrame a DataFrame."""
    import pandas as pd

    if isinstance(X, (pd.DataFrame, pd.Series)):
        idx = np.asarray(idx)
        return X.iloc[np.flatnonzero(idx) if idx.dtype == bool else idx]
    return np.asarray(X)[idx]
