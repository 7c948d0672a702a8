"""Labels as the user has them -> labels as the model's loss sees them.

A classifier is trained on whatever labels the user had ("yes"/"no", bools, {-1, 1}, {1, 2}, ...)
and the booster turns them into class indices ``0 .. K-1``; a regressor's labels are numbers. A
:class:`LabelMap` records that mapping as the *model* defines it (scikit-learn ``classes_``,
CatBoost ``class_names`` or ``target_border``), so that ``fit`` and scoring take the same labels the
model was trained with, and class index 1 of a binary model is the class of ``predict_proba[:, 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from .errors import InputError


def _key(value: Any) -> Any:
    """A hashable Python value that compares like the label (numpy scalars -> Python scalars)."""
    return value.item() if isinstance(value, np.generic) else value


def _one_dimensional(y: ArrayLike, what: str) -> NDArray[Any]:
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.ravel()
    if arr.ndim != 1:
        raise InputError(f"{what} must be one-dimensional (one label per row), got shape {arr.shape}.")
    return arr


def _numeric(arr: NDArray[Any], what: str, why: str) -> NDArray[np.float64]:
    try:
        out = arr.astype(np.float64)
    except (TypeError, ValueError):
        shown = pd.unique(arr)[:5].tolist()
        raise InputError(f"{what} holds non-numeric labels {shown}: {why}") from None
    if not np.all(np.isfinite(out)):
        raise InputError(f"{what} contains NaN or infinite labels: drop or fix those rows first.")
    return out


@dataclass(frozen=True)
class LabelMap:
    """How one model reads labels.

    Attributes
    ----------
    classes : tuple, optional
        The class labels in class-index order (``classes[1]`` is the positive class of a binary
        model). Labels are matched by equality (``1 == 1.0 == True``; ``"1" != 1``).
    border : float, optional
        Binarize numeric labels: ``label > border`` is class 1 (CatBoost ``target_border``).
    binary : bool
        Without classes or border: the labels must already be the 0/1 targets of a binary loss.
    source : str
        Where the mapping comes from, for messages ("LGBMClassifier.classes_", ...).

    Neither ``classes`` nor ``border`` nor ``binary``: numeric labels (regression).
    """

    classes: tuple[Any, ...] | None = None
    border: float | None = None
    binary: bool = False
    source: str = "the model"

    def encode(self, y: ArrayLike, what: str = "y") -> NDArray[np.float64]:
        """The loss's labels for ``y``: class indices as float64 for a classifier, else the numbers.

        Parameters
        ----------
        y : array-like of shape (n,)
        what : str
            The argument's name, for messages.

        Returns
        -------
        ndarray of shape (n,), float64

        Raises
        ------
        InputError
            Missing labels, labels the model never saw, non-numeric labels where numbers are needed.
        """
        arr = _one_dimensional(y, what)
        if self.classes is not None:
            return self._class_index(self.classes, arr, what)
        if self.border is not None:
            values = _numeric(arr, what, f"{self.source} binarizes numeric labels at {self.border:g}.")
            return (values.astype(np.float32) > np.float32(self.border)).astype(np.float64)
        if not self.binary:
            why = f"{self.source} takes numeric labels: pass the numbers it was trained on."
            return _numeric(arr, what, why)
        values = _numeric(arr, what, self._binary_hint)
        outside = (values < 0) | (values > 1)
        if outside.any():
            raise InputError(
                f"{what} holds labels {np.unique(values[outside])[:5].tolist()} outside [0, 1]: "
                + self._binary_hint
            )
        return values

    @property
    def _binary_hint(self) -> str:
        return (
            f"{self.source} records no class labels, so labels must be the 0/1 targets it was trained "
            "on (1 = the positive class of predict_proba[:, 1]). Map your labels to 0/1, or wrap the "
            "scikit-learn classifier instead of its booster."
        )

    def _class_index(self, classes: tuple[Any, ...], arr: NDArray[Any], what: str) -> NDArray[np.float64]:
        codes, uniques = pd.factorize(arr, use_na_sentinel=True)
        if (codes < 0).any():
            raise InputError(f"{what} contains missing labels (NaN or None): drop those rows first.")
        lookup: dict[Any, int] = {}
        for index, value in enumerate(classes):
            lookup.setdefault(_key(value), index)
        seen = [_key(u) for u in np.asarray(uniques, dtype=object)]
        found = np.array([lookup.get(u, -1) for u in seen], dtype=np.int64)
        if (found < 0).any():
            unknown = [u for u, f in zip(seen, found, strict=True) if f < 0]
            raise InputError(
                f"{what} holds labels {unknown[:5]} that are not among the model's classes "
                f"{[_key(c) for c in classes]} ({self.source}): pass the labels the model was "
                "trained with."
            )
        return found[codes].astype(np.float64)
