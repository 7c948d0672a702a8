"""pandas' nullable and pyarrow-backed dtypes, as users' frames hold them.

The proofs: the explainer's probabilities are the booster's own ``predict_proba`` of the same frame,
and every score is, bit for bit, the score of the frame with those columns as plain float64 (NaN for
missing), which the rest of the suite holds to retraining, refresh and refit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, default_model, fit_or_skip

from influence_gbdt import BoostingInfluence


def _nullable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with "a" as Float64 (pd.NA where "a" > 1.3), "b" as Int64 (rounded, pd.NA where
    "b" < -1.2) and "c" as boolean ("c" > 0)."""
    out = frame.copy()
    out["a"] = out["a"].astype("Float64").mask(frame["a"] > 1.3)
    out["b"] = frame["b"].round().astype("Int64").mask(frame["b"] < -1.2)
    out["c"] = (frame["c"] > 0).astype("boolean")
    return out


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """The same columns as float64, missing values as NaN."""
    return frame.astype({"a": "float64", "b": "float64", "c": "float64"})


@pytest.mark.parametrize("library", LIBRARIES)
def test_nullable_dtypes_score_as_their_float_columns(library: str) -> None:
    """Each library's default classifier trained on Float64 / Int64 columns with pd.NA and a
    boolean column: the explainer predicts what the booster predicts, and scores as the float64
    frame, bit for bit."""
    X, y, X_test, y_test = binary_data(n=300, n_test=5)
    X, X_test = _nullable(X), _nullable(X_test)
    model: Any = fit_or_skip(default_model(library), X, y)
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    proba = ex.explain_prediction(X_test.iloc[[2]], y_test[[2]]).probabilities[1]
    np.testing.assert_allclose(proba, model.predict_proba(X_test.iloc[[2]])[0, 1], rtol=1e-5)  # float32 sums
    ref = BoostingInfluence(model, progress=False).fit(_plain(X), y)
    pd.testing.assert_frame_equal(ex.score_training_points(X_test, y_test),
                                  ref.score_training_points(_plain(X_test), y_test))


def test_pyarrow_strings_are_catboost_categories() -> None:
    """``CatBoostClassifier(cat_features=[...])`` on a pyarrow-backed string column: the explainer
    predicts what CatBoost predicts, and scores as the same column of Python strings."""
    pytest.importorskip("pyarrow")
    X, y, X_test, y_test = binary_data(n=300, n_test=5)

    def colours(frame: pd.DataFrame, dtype: str) -> pd.DataFrame:
        colour = np.where(frame["d"] > 0.4, "red", np.where(frame["d"] < -0.6, "blue", "green"))
        return frame.drop(columns="d").assign(colour=pd.array(colour, dtype=dtype))

    model = default_model("catboost").set_params(cat_features=["colour"], iterations=60)
    model.fit(colours(X, "string[pyarrow]"), y)
    ex = BoostingInfluence(model, progress=False).fit(colours(X, "string[pyarrow]"), y)
    test = colours(X_test, "string[pyarrow]")
    proba = ex.explain_prediction(test.iloc[[1]], y_test[[1]]).probabilities[1]
    np.testing.assert_allclose(proba, model.predict_proba(test.iloc[[1]])[0, 1], rtol=1e-12)  # float64 sums
    ref = BoostingInfluence(model, progress=False).fit(colours(X, "object"), y)
    pd.testing.assert_frame_equal(ex.score_training_points(test, y_test),
                                  ref.score_training_points(colours(X_test, "object"), y_test))
