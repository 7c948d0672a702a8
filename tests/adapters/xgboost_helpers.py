"""Shared ground-truth helpers of the XGBoost adapter tests: float32 margin tolerance, retraining
with ``xgb.train`` and the structure comparison that decides whether a retrain is comparable."""

from __future__ import annotations

from typing import Any

import numpy as np
import xgboost as xgb

from influence_gbdt.validation import structure_report

EPS32 = float(np.finfo(np.float32).eps)


def margin_tol(n_trees: int, *margins: np.ndarray) -> float:
    """Float32 tolerance of XGBoost margins summed over ``n_trees`` rounds: each addition rounds by
    eps32 / 2 of the running sum, the errors add up like a random walk (sqrt(T)), x4 for the tails
    and a second model's own rounding."""
    scale = max(1.0, *(float(np.abs(m).max()) for m in margins))
    return 4.0 * np.sqrt(n_trees) * EPS32 * scale


def train(params: dict[str, Any], X: Any, y: Any, w: Any = None, rounds: int = 12) -> xgb.Booster:
    """``xgb.train`` on one thread (the thread count does not change an XGBoost model)."""
    return xgb.train({"nthread": 1, **params}, xgb.DMatrix(X, y, weight=w), rounds)


def kept_margins(
    original: xgb.Booster, retrained: xgb.Booster, X: Any, keep: Any, Xt: Any
) -> np.ndarray | None:
    """The retrained model's test margins (m,) or (m, K) when it keeps every tree's structure on the
    kept training rows and the test rows (same trees, same leaf of every row); None otherwise."""
    if not structure_report(original, retrained, X, keep, Xt)["same"]:
        return None
    return np.asarray(retrained.predict(xgb.DMatrix(Xt), output_margin=True), dtype=np.float64)
