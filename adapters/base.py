"""The contract every booster adapter fulfils.

An adapter wraps one trained model of one library. It refuses, at construction, settings whose
leaf values can never be reproduced (:class:`~influence_gbdt.errors.UnsupportedModelError`), turns
the model plus its training data into a :class:`~influence_gbdt.ensemble.TreeEnsemble`, and maps any
data set to the leaves of every tree. It never reaches into the engine beyond the public
:class:`~influence_gbdt.engine.InfluenceEngine`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from influence_gbdt.engine import InfluenceEngine
from influence_gbdt.ensemble import TreeEnsemble
from influence_gbdt.tabular import n_rows


class BoosterAdapter(ABC):
    """Base class of the per-library adapters.

    Parameters
    ----------
    model : object
        A trained model of the adapter's library (Booster or scikit-learn wrapper).
    params : mapping, optional
        Training parameters the model file lost (XGBoost after ``load_model``); checked by the
        self-check like everything else.
    """

    #: Library name as users write it ("xgboost", "lightgbm", "catboost").
    library: ClassVar[str]
    #: Relative self-check tolerance (max |recomputed - stored| / max |stored|), justified per library.
    rtol: ClassVar[float]

    def __init__(self, model: Any, params: Mapping[str, Any] | None = None) -> None:
        self.model = model
        self.params = dict(params or {})

    @abstractmethod
    def describe(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
    ) -> TreeEnsemble:
        """Describe the model on its training data (no self-check; see :meth:`prepare`)."""

    @abstractmethod
    def leaf_indices(self, X: Any) -> NDArray[np.int32]:
        """Leaf of every row of ``X`` in every tree, ndarray of shape (n_trees, n_rows), int32,
        numbered as in :meth:`describe` (``0 .. n_leaves[t] - 1``)."""

    @abstractmethod
    def raw_predict(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """The library's own raw (margin) prediction, ndarray of shape (n_rows,)."""

    def init_offset(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """Per-row offset of the initial margin for ``X`` (the user's init score / base margin)."""
        n = n_rows(X)
        if init_score is None:
            return np.zeros(n)
        offset = np.asarray(init_score, dtype=np.float64).ravel()
        if offset.shape != (n,):
            from influence_gbdt.errors import InputError

            raise InputError(f"init_score must have one value per row ({n}), got shape {offset.shape}.")
        return offset

    def encode_labels(self, y: ArrayLike) -> NDArray[np.float64]:
        """Labels as the loss sees them, ndarray of shape (n_rows,), float64.

        A scikit-learn classifier's labels (strings, {-1, 1}, ...) become 0/1 through its
        ``classes_`` (the second class is the positive one); other labels are cast to float.

        Raises
        ------
        InputError
            On NaN labels or labels the classifier never saw.
        """
        from influence_gbdt.errors import InputError

        arr = np.asarray(y)
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr.ravel()
        if arr.ndim != 1:
            raise InputError(f"Labels must be one-dimensional, got shape {arr.shape}.")
        classes = getattr(self.model, "classes_", None)
        if classes is not None and len(classes) == 2:
            known = np.isin(arr, classes)
            if not known.all():
                raise InputError(
                    f"Labels {np.unique(arr[~known])[:5].tolist()} are not among the classifier's "
                    f"classes {list(classes)}."
                )
            return (arr == classes[1]).astype(np.float64)
        try:
            out = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"Labels must be numeric for this model: {exc}.") from None
        if not np.all(np.isfinite(out)):
            raise InputError("Labels contain NaN or infinite values: drop or fix those rows first.")
        return out

    @property
    def hint(self) -> str:
        """Likely causes of a failed self-check, for the error message."""
        return (
            "Pass exactly the training rows, in training order, with the labels and sample weights "
            "the model was trained with."
        )

    def prepare(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
    ) -> InfluenceEngine:
        """Describe the model on its training data and prove the description reproduces it.

        Raises
        ------
        ReproductionError
            If a recomputed leaf value differs from the stored one by more than ``rtol``.
        """
        engine = InfluenceEngine(self.describe(X, y, sample_weight, init_score))
        engine.check_reproduction(rtol=self.rtol, hint=f"{self.library}: {self.hint}")
        return engine
