"""One test prediction explained: :class:`PredictionExplanation`, what
:meth:`BoostingInfluence.explain_prediction` returns.

Sign convention: a score > 0 means the training row is harmful to this prediction (removing it, or
lowering its weight, lowers the test point's loss; with ``on="prediction"``, it raises the margin).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray


@dataclass(frozen=True, repr=False)
class PredictionExplanation:
    """A test prediction with its most harmful and most helpful training rows; prints as text (and
    as HTML in a notebook) and plots itself (:meth:`plot`).

    Attributes
    ----------
    test_row : object
        The test row's index label (its position for NumPy input).
    label : object or None
        Its label as given (None when explained without one).
    margin : ndarray of shape (n_outputs,)
        The model's raw prediction (margin) for the row.
    probabilities : dict or None
        Class label -> the model's probability, for classifiers.
    loss : float or None
        The row's loss under the model (with a label).
    on : {"loss", "prediction"}
        What the scores measure: the test loss (with a label) or the raw prediction.
    harmful, helpful : DataFrame
        The most harmful (score > 0, largest first) and most helpful (most negative first) training
        rows: ``score``, ``label`` and the row's features, indexed by the rows, as
        :meth:`BoostingInfluence.top_training_points` gives them.
    scores : Series of shape (n_train,)
        Every training row's score for this prediction.
    """

    test_row: Any
    label: Any
    margin: NDArray[np.float64]
    probabilities: dict[Any, float] | None
    loss: float | None
    on: str
    harmful: pd.DataFrame
    helpful: pd.DataFrame
    scores: pd.Series
    X_train: Any = field(default=None)
    y_train: Any = field(default=None)

    def summary(self) -> str:
        """Two lines: the prediction (and its loss), then what the scores mean."""
        head = f"Test row {self.test_row}"
        if self.label is not None:
            head += f" (label {self.label!r})"
        if self.probabilities is not None:
            shown = sorted(self.probabilities.items(), key=lambda kv: -kv[1])[:3]
            head += ": predicted " + ", ".join(f"P({c!r}) = {p:.3f}" for c, p in shown)
        else:
            head += ": predicted margin " + ", ".join(f"{m:.4g}" for m in self.margin)
        if self.loss is not None:
            head += f"; loss {self.loss:.4g}"
        meaning = ("score > 0: the training row is harmful (removing it lowers this loss)"
                   if self.on == "loss" else "score > 0: the training row raises this raw prediction")
        return f"{head}\n{meaning}"

    def __repr__(self) -> str:
        with pd.option_context("display.max_columns", 8, "display.width", 120):
            return (f"{self.summary()}\n\nMost harmful training rows:\n{self.harmful.to_string()}"
                    f"\n\nMost helpful training rows:\n{self.helpful.to_string()}")

    def _repr_html_(self) -> str:
        first, second = (html.escape(line) for line in self.summary().splitlines())
        return (f"<p><b>{first}</b><br>{second}</p><p>Most harmful training rows</p>{self.harmful.to_html()}"
                f"<p>Most helpful training rows</p>{self.helpful.to_html()}")

    def plot(self, ax: Any = None) -> Any:
        """:func:`influence_gbdt.plots.plot_top_rows` of these rows, titled with the prediction.
        Returns the matplotlib Axes."""
        from .plots import plot_top_rows

        n = max(len(self.harmful), len(self.helpful))
        return plot_top_rows(self.scores, self.X_train, self.y_train, n=n, ax=ax,
                             title=self.summary().splitlines()[0])
