"""What a tweaked row must reach: a class of a classifier, or a range of a regressor's prediction.

:class:`~influence_gbdt.tweaking.FeatureTweaking` asks one of these two objects everything that
depends on the kind of model: the booster's own answer for rows (a class index, or the value its
``predict`` gives), the targets of each row, whether an answer meets a target (the final check of
every tweak), the search's :class:`~influence_gbdt._tweak_search.Goal` in margin space, and which
reference rows already meet a target.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._tweak_search import Goal
from .errors import InputError, UnsupportedModelError
from .inputs import is_number
from .links import LINKS


class ClassTargets:
    """Targets of a classifier: class indices into ``reader.classes``."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.classes = np.asarray(reader.classes)

    def answer(self, X: Any) -> NDArray[Any]:
        """The class index the booster's ``predict`` gives each row, shape (n_rows,)."""
        return np.asarray(self.reader.predict_index(X), dtype=np.int64)

    current = answer  # (the rows to tweak need no other check)

    def per_row(self, current: NDArray[Any], target: Any, desired_range: Any) -> list[list[Any]]:
        """Per row, the class indices to try: ``target`` (one label or one per row), or every other
        class when it is None."""
        if desired_range is not None:
            raise InputError("desired_range is for regressors; a classifier's rows reach a class: "
                             "pass target.")
        n, k = current.size, self.classes.size
        if target is None:
            return [[c for c in range(k) if c != cur] for cur in current]
        values = np.asarray(target, dtype=object).ravel()
        if values.size == 1:
            values = np.repeat(values, n)
        if values.size != n:
            raise InputError(f"target must be one label or one per row ({n}), got {values.size}.")
        lookup = {(c.item() if hasattr(c, "item") else c): i for i, c in enumerate(self.classes)}
        out = []
        for v in values:
            key = v.item() if hasattr(v, "item") else v
            if key not in lookup:
                raise InputError(f"target {v!r} is not a class of the model ({list(self.classes)}).")
            out.append([lookup[key]])
        return out

    def reached(self, answer: Any, targets: list[Any]) -> bool:
        return bool(answer in targets)

    def goal(self, target: int, delta: float) -> Goal | str:
        return Goal(self.reader.structure, int(target), self.reader.decision_threshold, delta)

    def meets(self, answers: NDArray[Any], target: int) -> NDArray[np.bool_]:
        """Which ``answers`` (of reference rows) meet ``target``."""
        return np.asarray(answers == target)

    def shown(self, answers: NDArray[Any]) -> NDArray[Any]:
        """The ``prediction`` column: class labels."""
        return self.classes[answers]


class RangeTargets:
    """Targets of a single-output regressor: ``(low, high)`` on its ``predict`` (either may be
    infinite), searched as the margin range the model's link gives."""

    def __init__(self, reader: Any) -> None:
        s = reader.structure
        if s.n_outputs != 1:
            raise UnsupportedModelError(
                f"This regressor predicts {s.n_outputs} values per row (several targets or quantiles, or "
                "CatBoost's RMSEWithUncertainty); feature tweaking moves one prediction: train one model "
                "per target."
            )
        self.reader = reader
        self.link = LINKS[reader.prediction_link]

    def answer(self, X: Any) -> NDArray[Any]:
        """The booster's own prediction of each row, shape (n_rows,)."""
        return np.asarray(self.reader.predict_value(X), dtype=np.float64).reshape(-1)

    def current(self, X: Any) -> NDArray[Any]:
        """:meth:`answer` for the rows to tweak, refusing a model whose ``predict`` does not follow
        from its raw margin by the link its objective names (the search would aim elsewhere)."""
        answers = self.answer(X)
        expected = self.link.prediction(self.reader.raw_margin(X)[:, 0])
        # float32 predictions (XGBoost) round at ~6e-8 relative; 1e-5 leaves room for the link
        if not np.allclose(expected, answers, rtol=1e-5, atol=1e-12, equal_nan=True):
            raise UnsupportedModelError(
                f"This model's predict does not follow from its raw margin by the {self.link.name!r} link "
                "its objective names (a custom prediction transform?); feature tweaking cannot aim at its "
                "predictions."
            )
        return answers

    def per_row(self, current: NDArray[Any], target: Any, desired_range: Any) -> list[list[Any]]:
        """Per row, one ``(low, high)`` pair from ``desired_range``: one pair for every row, or an
        array of shape (n_rows, 2); None or NaN leaves a side open."""
        if target is not None:
            raise InputError(
                "A regressor has no classes: pass desired_range=(low, high) (None for an open side), "
                "not target."
            )
        if desired_range is None:
            raise InputError(
                "A regressor's rows reach a range of its prediction: pass desired_range=(low, high), "
                "e.g. (300_000, None) for 'at least 300,000'."
            )
        n = current.size
        pairs = np.asarray(desired_range, dtype=object)
        if pairs.shape == (2,):
            pairs = np.broadcast_to(pairs, (n, 2))
        if pairs.shape != (n, 2):
            raise InputError(
                f"desired_range must be (low, high) or one pair per row, shape ({n}, 2); "
                f"got shape {pairs.shape}."
            )
        out = []
        for low, high in pairs.tolist():
            bounds = [_bound(low, -np.inf), _bound(high, np.inf)]
            if bounds[0] > bounds[1]:
                raise InputError(f"desired_range: low {low} is above high {high}.")
            if bounds == [-np.inf, np.inf]:
                raise InputError("desired_range needs a finite low or high: (None, None) is every "
                                 "prediction.")
            out.append([tuple(bounds)])
        return out

    def reached(self, answer: float, targets: list[tuple[float, float]]) -> bool:
        low, high = targets[0]
        return bool(low <= answer <= high)

    def goal(self, target: tuple[float, float], delta: float) -> Goal | str:
        """The margin range of ``target``, or why the model cannot predict in it."""
        low, high = (float(v) for v in self.link.margin(np.asarray(target)))
        if low == np.inf or high == -np.inf or low > high:
            return (f"the model's predictions lie in ({self.link.lowest:g}, {self.link.highest:g}) "
                    f"(its {self.link.name!r} link): the range cannot be reached")
        return Goal(self.reader.structure, 0, 0.0, delta, low, high)

    def meets(self, answers: NDArray[Any], target: tuple[float, float]) -> NDArray[np.bool_]:
        low, high = target
        return np.asarray((answers >= low) & (answers <= high))

    def shown(self, answers: NDArray[Any]) -> NDArray[Any]:
        return answers


def _bound(value: Any, open_side: float) -> float:
    """One side of a desired range as a float (None or NaN: ``open_side``)."""
    if value is None:
        return open_side
    if not is_number(value):
        raise InputError(f"desired_range bounds must be numbers or None, got {value!r}.")
    v = float(value)
    return open_side if np.isnan(v) else v


Targets = ClassTargets | RangeTargets


def targets_for(reader: Any) -> Targets:
    """The targets of ``reader``'s model (a classifier or a regressor)."""
    return RangeTargets(reader) if reader.structure.objective == "regression" else ClassTargets(reader)
