"""Rows in and out of feature tweaking: the user's DataFrame or array <-> encoded float rows.

Encoded rows are what :class:`~influence_gbdt.trees.TreeStructure` reads: numbers as they are,
categorical columns as the codes the trees compare. Decoding turns tweaked rows back into the
user's format (same columns and dtypes, categories as labels) so the booster itself can check them.
A categorical code decodes to a label when the model stores its labels (XGBoost, LightGBM pandas
categories), when codes are the labels (integer-coded categories), or when the label was seen in
the reference or query data (CatBoost, whose codes are hashes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from .adapters.trees import ModelTrees
from .errors import InputError


class Codec:
    """Encoder/decoder bound to one model and one input format.

    Parameters
    ----------
    reader : ModelTrees
    template : DataFrame or array-like of shape (n, n_features)
        Data in the format the model was trained on; later inputs must have the same columns.
    """

    def __init__(self, reader: ModelTrees, template: Any) -> None:
        self.reader = reader
        s = self.structure = reader.structure
        self.is_frame = isinstance(template, pd.DataFrame)
        if self.is_frame:
            self.columns = [str(c) for c in template.columns]
            self.dtypes = list(template.dtypes)
        else:
            self.columns = list(s.feature_names[: s.n_inputs])
            self.dtypes = []
        if len(self.columns) != s.n_inputs:
            raise InputError(f"X has {len(self.columns)} columns; the model reads {s.n_inputs}.")
        self.labels: list[dict[float, Any]] = [{} for _ in range(s.n_features)]
        for f in np.flatnonzero(s.feature_is_categorical):
            known = s.category_labels[f] if s.category_labels else None
            if known is not None:
                self.labels[f] = {float(i): v for i, v in enumerate(known)}

    def check(self, X: Any) -> None:
        """Raise InputError unless ``X`` has the template's format and columns."""
        if isinstance(X, pd.DataFrame) != self.is_frame:
            kind = "a DataFrame" if self.is_frame else "an array"
            raise InputError(f"X must be {kind}, as the data this FeatureTweaking was fitted on.")
        if self.is_frame and [str(c) for c in X.columns] != self.columns:
            raise InputError(f"X has columns {list(X.columns)}; expected {self.columns}.")

    def encode(self, X: Any) -> NDArray[np.float64]:
        """Encoded rows (n_rows, n_features), float64, derived columns (CatBoost's CTRs) included;
        records categorical labels for decoding."""
        self.check(X)
        Z = self.structure.complete(self.reader.encode(X))
        for f in np.flatnonzero(self.structure.feature_is_categorical).tolist():
            col = X.iloc[:, f] if self.is_frame else np.asarray(X, dtype=object).reshape(len(Z), -1)[:, f]
            values = np.asarray(col, dtype=object)
            codes, first = np.unique(Z[:, f], return_index=True)
            for code, i in zip(codes.tolist(), first.tolist(), strict=True):
                if np.isfinite(code) and code not in self.labels[f]:
                    self.labels[f][code] = values[i]
        return Z

    def decodable(self, feature: int, codes: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Whether each code of categorical ``feature`` can be written back as a label."""
        if self.structure.category_labels and self.structure.category_labels[feature] is not None:
            return np.isin(codes, list(self.labels[feature]))
        if self.reader.codes_are_labels:
            return np.isfinite(codes)
        return np.isin(codes, list(self.labels[feature]))

    def _label(self, f: int, code: float) -> Any:
        if not np.isfinite(code):
            return np.nan
        if code in self.labels[f]:
            return self.labels[f][code]
        return code  # integer-coded categories: the code is the label

    def decode(self, Z: NDArray[np.float64]) -> Any:
        """Encoded rows back in the template's format (DataFrame, or array) for the booster; derived
        columns are dropped."""
        Z = Z[:, : self.structure.n_inputs]
        cat = self.structure.feature_is_categorical[: self.structure.n_inputs]
        if not self.is_frame:
            if not cat.any():
                return np.asarray(Z, dtype=np.float64)
            out = np.asarray(Z, dtype=object)
            for f in np.flatnonzero(cat).tolist():
                out[:, f] = [self._label(f, c) for c in Z[:, f].tolist()]
            return out
        data: dict[str, Any] = {}
        for f, (name, dtype) in enumerate(zip(self.columns, self.dtypes, strict=True)):
            col = Z[:, f]
            if cat[f]:
                values = [self._label(f, c) for c in col.tolist()]
                if isinstance(dtype, pd.CategoricalDtype):
                    data[name] = pd.Categorical(values, categories=dtype.categories, ordered=dtype.ordered)
                else:
                    data[name] = pd.Series(
                        values, dtype=dtype if pd.api.types.is_object_dtype(dtype) else None
                    )
            elif pd.api.types.is_integer_dtype(dtype) and np.isfinite(col).all():
                data[name] = np.round(col).astype(dtype)
            elif pd.api.types.is_integer_dtype(dtype):  # rows without a tweak (NaN): <NA> keeps the ints
                data[name] = pd.array(np.round(col), dtype=_nullable(dtype))
            else:
                data[name] = col.astype(dtype) if pd.api.types.is_float_dtype(dtype) else col
        return pd.DataFrame(data)

    def frame(self, Z: NDArray[np.float64]) -> pd.DataFrame:
        """Encoded rows as a DataFrame for the user (labels for categories; NaN rows stay NaN)."""
        decoded = self.decode(Z)
        if self.is_frame:
            return decoded.reset_index(drop=True)
        return pd.DataFrame(decoded, columns=self.columns)


def _nullable(dtype: Any) -> Any:
    """pandas' nullable integer dtype of the same width and sign as ``dtype`` (itself if it is one)."""
    if isinstance(dtype, pd.api.extensions.ExtensionDtype):
        return dtype
    name = np.dtype(dtype).name  # int8 .. int64, uint8 .. uint64
    return "UInt" + name[4:] if name.startswith("uint") else "Int" + name[3:]

