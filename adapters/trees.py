"""Tree-structure readers: one per library, each turning a trained model into a :class:`TreeStructure`.

Unlike the influence adapters (:mod:`influence_gbdt.adapters.base`), a reader needs no training data
and refuses little: any objective whose margin is a sum of tree leaves is read (multiclass,
regression, dart, bagging, ...), since only the trees' structure and leaf values are used. A reader
also answers, through the library itself, what the *booster* predicts (margins, leaf ids, classes),
so that anything computed from the structure can be checked against the booster's own output.

Dispatch is by the top-level module of the model's class; each library is imported only when a model
of it is read.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from influence_gbdt.errors import InputError, UnsupportedModelError
from influence_gbdt.pipelines import is_pipeline, is_target_transformed, selected, why_not
from influence_gbdt.trees import TreeStructure

from .versions import require

#: Top-level module of the model's class -> "module:ReaderClass" (imported lazily).
_READERS: dict[str, str] = {
    "xgboost": "influence_gbdt.adapters.xgboost_trees:XGBoostTrees",
    "lightgbm": "influence_gbdt.adapters.lightgbm_trees:LightGBMTrees",
    "catboost": "influence_gbdt.adapters.catboost_trees:CatBoostTrees",
}


class ModelTrees(ABC):
    """A trained model, its :class:`TreeStructure`, and the booster's own predictions.

    Parameters
    ----------
    model : object
        A trained Booster or scikit-learn wrapper of the reader's library.

    Attributes
    ----------
    structure : TreeStructure
        The trees the model's own ``predict`` uses (early stopping's best iteration included).
    classes : ndarray or None
        Class labels in margin-column order (binary: ``[negative, positive]``), None for regression.
    decision_threshold : float
        Binary models predict the positive class iff margin > this (0 unless the library stores a
        probability threshold other than 0.5).
    """

    library: ClassVar[str]

    def __init__(self, model: Any) -> None:
        self.model = model

    @cached_property
    def structure(self) -> TreeStructure:
        return self._read()

    @abstractmethod
    def _read(self) -> TreeStructure:
        """Read the model's trees (called once, on first access of :attr:`structure`)."""

    @abstractmethod
    def raw_margin(self, X: Any) -> NDArray[np.float64]:
        """The library's own raw margin, ndarray of shape (n_rows, n_outputs), float64."""

    @abstractmethod
    def leaf_ids(self, X: Any) -> NDArray[np.int32]:
        """The library's own leaf number per row and tree, ndarray of shape (n_rows, n_trees)."""

    @abstractmethod
    def predict_index(self, X: Any) -> NDArray[np.int64]:
        """Class index (into :attr:`classes`) the model's own ``predict`` gives, shape (n_rows,)."""

    @abstractmethod
    def predict_value(self, X: Any) -> NDArray[np.float64]:
        """What a regressor's own ``predict`` gives (the wrapper's, or the Booster's), shape
        (n_rows,) or (n_rows, n_outputs), float64: :attr:`prediction_link` of the raw margin."""

    @property
    def prediction_link(self) -> str:
        """How :meth:`predict_value` follows from the raw margin: a name of
        :data:`influence_gbdt.links.LINKS` (regressors; "identity" unless the objective or the
        model's ``predict`` applies another)."""
        return "identity"

    @property
    def classes(self) -> NDArray[Any] | None:
        if self.structure.objective == "regression":
            return None
        labels = getattr(self.model, "classes_", None)
        if labels is not None:
            return np.asarray(labels)
        return np.arange(max(2, self.structure.n_outputs))

    @property
    def decision_threshold(self) -> float:
        return 0.0

    #: Whether a categorical code is the label itself when the model stores no labels (integer-coded
    #: categories); False where codes are hashes of the labels (CatBoost).
    codes_are_labels: ClassVar[bool] = True

    def category_codes(self, feature: int, labels: ArrayLike) -> NDArray[np.float64]:
        """Codes the trees compare for categorical ``feature`` given its labels, shape (n,), float64.

        Missing labels (None, NaN) give NaN. Each distinct label is converted once.
        """
        import pandas as pd

        index, uniques = pd.factorize(np.asarray(labels, dtype=object).ravel(), use_na_sentinel=True)
        table = np.append(self._codes_of_labels(feature, list(uniques)), np.nan)
        return table[index]  # index -1 (missing) reads the trailing NaN

    def _codes_of_labels(self, feature: int, labels: list[Any]) -> NDArray[np.float64]:
        """Codes of distinct non-missing labels: the position among the model's stored labels (NaN if
        unseen), or the label itself when the model stores none (integer-coded categories)."""
        known = self.structure.category_labels[feature] if self.structure.category_labels else None
        if known is None:
            return np.asarray(labels, dtype=np.float64)
        position = {label: float(i) for i, label in enumerate(known)}
        return np.array([position.get(v, np.nan) for v in labels], dtype=np.float64)

    def encode(self, X: Any) -> NDArray[np.float64]:
        """Input rows as the structure reads them, ndarray of shape (n_rows, n_inputs), float64.

        Numerical columns as numbers; categorical columns (DataFrame categories or strings, or
        integer codes) as the codes the trees compare. Derived columns (CatBoost's CTRs) are not
        included: ``structure.complete`` adds them, and the structure's methods do so themselves.
        """
        import pandas as pd

        cat = self.structure.feature_is_categorical
        columns: list[Any]
        if isinstance(X, pd.DataFrame):
            columns = [X.iloc[:, j] for j in range(X.shape[1])]
        else:
            arr = np.asarray(X, dtype=object if cat.any() else np.float64)
            arr = arr.reshape(1, -1) if arr.ndim == 1 else arr
            columns = [arr[:, j] for j in range(arr.shape[1])]
        if len(columns) != self.structure.n_inputs:
            raise InputError(f"X has {len(columns)} columns; the model reads {self.structure.n_inputs}.")
        out = np.empty((len(columns[0]) if columns else 0, len(columns)))
        for j, col in enumerate(columns):
            if cat[j]:
                out[:, j] = self.category_codes(j, np.asarray(col, dtype=object))
            else:
                out[:, j] = np.asarray(col, dtype=np.float64)
        return out

    def predict_index_from_margin(self, margin: NDArray[np.float64]) -> NDArray[np.int64]:
        """Class index from margins of shape (n_rows, n_outputs), by the library's own rule."""
        if self.structure.objective == "binary":
            return (margin[:, 0] > self.decision_threshold).astype(np.int64)
        return np.argmax(margin, axis=1).astype(np.int64)

    def _labels_to_index(self, labels: ArrayLike) -> NDArray[np.int64]:
        classes = self.classes
        assert classes is not None  # only called for classifiers
        arr = np.asarray(labels).ravel()
        lookup = {c.item() if hasattr(c, "item") else c: i for i, c in enumerate(classes)}
        return np.array([lookup[v.item() if hasattr(v, "item") else v] for v in arr], dtype=np.int64)


def not_a_model(model: Any) -> UnsupportedModelError:
    """The error for a ``model`` that no adapter or tree reader takes (a scikit-learn ``Pipeline`` or
    ``TransformedTargetRegressor`` named as such: only :class:`~influence_gbdt.BoostingInfluence`
    takes one whole; the scikit-learn wrappers of :func:`~influence_gbdt.pipelines.why_not` with
    what to pass instead)."""
    if is_pipeline(model):
        return UnsupportedModelError(
            "A scikit-learn Pipeline is taken whole by BoostingInfluence only; here pass its trained "
            "booster, pipeline[-1], and rows as the booster takes them, pipeline[:-1].transform(X)."
        )
    if is_target_transformed(model):
        return UnsupportedModelError(
            "A TransformedTargetRegressor is taken whole by BoostingInfluence only; here pass its trained "
            "regressor, model.regressor_ (whose predictions are in the transformed target)."
        )
    why = why_not(model)
    if why is not None:
        return UnsupportedModelError(why)
    return UnsupportedModelError(
        f"{type(model).__module__}.{type(model).__name__} is not a supported model: pass a trained "
        "XGBoost, LightGBM or CatBoost model (Booster or scikit-learn wrapper)."
    )


def trees_for(model: Any) -> ModelTrees:
    """Return the tree reader for ``model`` (a search's or ``FrozenEstimator``'s model in its place:
    :func:`~influence_gbdt.pipelines.selected`), chosen by the library its class comes from.

    Raises
    ------
    UnsupportedModelError
        If the model's class does not come from XGBoost, LightGBM or CatBoost, its library is
        older than the adapters' floor (:data:`.versions.MINIMUM`), or the reader refuses the model
        (the message names the setting and the fix).
    """
    model = selected(model)
    library = type(model).__module__.split(".")[0]
    target = _READERS.get(library)
    if target is None:
        raise not_a_model(model)
    require(library)
    module_name, class_name = target.split(":")
    reader_cls: type[ModelTrees] = getattr(importlib.import_module(module_name), class_name)
    return reader_cls(model)


def read_trees(model: Any) -> TreeStructure:
    """The :class:`TreeStructure` of a trained XGBoost, LightGBM or CatBoost model."""
    return trees_for(model).structure
