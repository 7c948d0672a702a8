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
        n = _n_rows(X)
        if init_score is None:
            return np.zeros(n)
        offset = np.asarray(init_score, dtype=np.float64).ravel()
        if offset.shape != (n,):
            from influence_gbdt.errors import InputError

            raise InputError(f"init_score must have one value per row ({n}), got shape {offset.shape}.")
        return offset

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


def _n_rows(X: Any) -> int:
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None else len(X)
