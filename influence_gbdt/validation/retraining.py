"""One retrain at a time, measured: :class:`Retraining` retrains a model without some rows (or with
one row's weight changed) and reports the new test losses and whether the structure was kept."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..losses import Loss
from ..tabular import n_rows
from .models import leaf_ids, split_signature, structure_report
from .recipe import TrainingRecipe


def test_losses(loss: str | Loss, y: NDArray[np.float64], margin: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-point loss (a :class:`~influence_gbdt.losses.Loss` or its name) of raw margins, shape (m,)."""
    return (loss if isinstance(loss, Loss) else Loss(loss)).values(y, margin)


class Retraining:
    """Retrain ``model`` on changed training data with its recipe and measure the test losses.

    Parameters
    ----------
    recipe : TrainingRecipe
        How ``model`` was trained.
    model : the original model.
    X, y, sample_weight : its training data.
    X_test : test rows, shape (m, d).
    y_test : array of shape (m,) or (m, K)
        Test labels as the loss sees them (0/1 for log loss, the class index for multiclass, K
        targets for multi-target regression).
    loss : str or Loss
        The model's loss (:class:`~influence_gbdt.losses.Loss` or its name).
    check_structure : bool
        Compare every retrained model's structure with the original's (:func:`structure_report`,
        with the original's leaves and splits computed once here).

    Attributes
    ----------
    base_losses : ndarray of shape (m,)
        The original model's test losses.
    """

    def __init__(
        self,
        recipe: TrainingRecipe,
        model: Any,
        X: Any,
        y: ArrayLike,
        X_test: Any,
        y_test: ArrayLike,
        loss: str | Loss = "logloss",
        sample_weight: ArrayLike | None = None,
        check_structure: bool = True,
    ) -> None:
        self.recipe, self.model, self.X, self.y, self.X_test = recipe, model, X, y, X_test
        self.y_test = np.asarray(y_test, dtype=np.float64)
        self.loss, self.sample_weight = loss, sample_weight
        self.base_losses = test_losses(loss, self.y_test, recipe.raw_predict(model, X_test))
        self._reference: dict[str, Any] | None = None
        if check_structure:
            self._reference = {
                "original_leaves": leaf_ids(model, X),
                "original_test_leaves": leaf_ids(model, X_test),
                "original_splits": split_signature(model),
            }

    def without(self, rows: ArrayLike) -> tuple[NDArray[np.float64], dict[str, Any] | None]:
        """Retrain without ``rows`` (deleted or weight 0, per the recipe).

        Returns
        -------
        losses : ndarray of shape (m,), the retrained model's test losses.
        report : the structure report over the remaining rows, or None without ``check_structure``.
        """
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        mask = np.ones(n_rows(self.X), dtype=bool)
        mask[rows] = False
        return self._measure(self.recipe.retrain_without(self.X, self.y, rows, self.sample_weight), mask)

    def with_weight(self, row: int, weight: float) -> tuple[NDArray[np.float64], dict[str, Any] | None]:
        """Retrain with training row ``row`` at ``weight`` (the others as trained); returns as
        :meth:`without`, the structure compared over all rows."""
        n = n_rows(self.X)
        w = (
            np.ones(n)
            if self.sample_weight is None
            else np.asarray(self.sample_weight, dtype=np.float64).copy()
        )
        w[row] = weight
        return self._measure(self.recipe.retrain(self.X, self.y, w), np.ones(n, dtype=bool))

    def _measure(
        self, new: Any, mask: NDArray[np.bool_]
    ) -> tuple[NDArray[np.float64], dict[str, Any] | None]:
        losses = test_losses(self.loss, self.y_test, self.recipe.raw_predict(new, self.X_test))
        if self._reference is None:
            return losses, None
        return losses, structure_report(self.model, new, self.X, mask, self.X_test, **self._reference)
