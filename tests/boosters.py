"""Small real models of each library, shared by the API and CLI tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pytest

LIBRARIES = ("xgboost", "lightgbm", "catboost")
T = TypeVar("T")


def binary_data(
    n: int = 400, n_test: int = 25, seed: int = 0
) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray]:
    """Numeric features, a 0/1 label with some noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + n_test, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + rng.normal(scale=0.7, size=n + n_test) > 0).astype(int)
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    return frame.iloc[:n].reset_index(drop=True), y[:n], frame.iloc[n:].reset_index(drop=True), y[n:]


def default_model(library: str, kind: str = "Classifier") -> Any:
    """The library's unfitted scikit-learn ``kind`` ("Classifier" or "Regressor") with its defaults
    (LightGBM quiet, CatBoost quiet and writing no files): the models users have."""
    if library == "xgboost":
        import xgboost

        return getattr(xgboost, f"XGB{kind}")()
    if library == "lightgbm":
        import lightgbm

        return getattr(lightgbm, f"LGBM{kind}")(verbose=-1)
    import catboost

    return getattr(catboost, f"CatBoost{kind}")(verbose=0, allow_writing_files=False)


def classifier(library: str, X: Any, y: np.ndarray, n_trees: int = 15) -> Any:
    """A fitted scikit-learn-style binary classifier of ``library``."""
    if library == "xgboost":
        import xgboost

        return xgboost.XGBClassifier(n_estimators=n_trees, max_depth=3, learning_rate=0.3).fit(X, y)
    if library == "lightgbm":
        import lightgbm

        return lightgbm.LGBMClassifier(n_estimators=n_trees, num_leaves=8, learning_rate=0.3, verbose=-1).fit(
            X, y
        )
    import catboost

    return catboost.CatBoostClassifier(
        iterations=n_trees, depth=3, learning_rate=0.3, verbose=0, random_seed=0, allow_writing_files=False
    ).fit(X, y)


def regressor(library: str, X: Any, y: np.ndarray, n_trees: int = 15) -> Any:
    """A fitted scikit-learn-style squared-error regressor of ``library``."""
    if library == "xgboost":
        import xgboost

        return xgboost.XGBRegressor(n_estimators=n_trees, max_depth=3).fit(X, y)
    if library == "lightgbm":
        import lightgbm

        return lightgbm.LGBMRegressor(n_estimators=n_trees, num_leaves=8, verbose=-1).fit(X, y)
    import catboost

    return catboost.CatBoostRegressor(
        iterations=n_trees, depth=3, verbose=0, random_seed=0, allow_writing_files=False
    ).fit(X, y)


def save_model(library: str, model: Any, directory: Any) -> tuple[str, dict[str, Any] | None]:
    """Write ``model`` in its library's native format; return the path and the params it lost."""
    if library == "xgboost":
        path = str(directory / "model.json")
        model.get_booster().save_model(path)
        return path, {"eta": 0.3, "lambda": 1.0}
    if library == "lightgbm":
        path = str(directory / "model.txt")
        model.booster_.save_model(path)
        return path, None
    path = str(directory / "model.cbm")
    model.save_model(path)
    return path, None


#: What an older booster says where it cannot train on an input at all (CatBoost 1.2.7 and older on a
#: polars frame, CatBoost with pandas 2.0 on ``pd.NA``, XGBoost 3.1 on binary labels of one class,
#: LightGBM 4.6's scikit-learn models on a polars frame beside scikit-learn 1.8): there is no model
#: whose influence to test.
_INPUT_REFUSED = ("Invalid data type=", "Cannot convert obj <NA> to float",
                  "base_score must be in (0,1) for the logistic loss",
                  "property 'feature_names_in_' of 'LGBM")


def trained_or_skip(train: Callable[[], T]) -> T:
    """``train()``, or the test skipped where the installed booster itself refuses this kind of
    input (``nox -s oldest``: releases that do not read it yet)."""
    try:
        return train()
    except Exception as e:  # the booster's own error class, whichever library
        if not any(said in str(e) for said in _INPUT_REFUSED):
            raise
        pytest.skip(f"This release of the booster does not train on this input: {e}")


def fit_or_skip(model: Any, X: Any, y: Any, **fit_params: Any) -> Any:
    """``model.fit(X, y, **fit_params)`` under :func:`trained_or_skip`."""
    return trained_or_skip(lambda: model.fit(X, y, **fit_params))
