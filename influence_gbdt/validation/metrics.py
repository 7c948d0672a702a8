"""Agreement figures between predicted and actual changes: errors, correlations, sign agreement
and NDCG@k (see the package docstring for the NDCG definition)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import NDArray


def ndcg_at_k(scores: NDArray[np.float64], actual: NDArray[np.float64], k: int = 100) -> float:
    """Mean over test points (columns) of NDCG@k of ranking training rows (rows) by ``scores``,
    with linear gains ``max(actual, 0)`` (see the module docstring). NaN if no column has gain."""
    scores = np.asarray(scores, dtype=np.float64)
    gains = np.clip(np.asarray(actual, dtype=np.float64), 0.0, None)
    if gains.ndim == 1:
        gains, scores = gains[:, None], scores[:, None]
    k = min(int(k), gains.shape[0])
    if k == 0:
        return float("nan")
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    order = np.argsort(-scores, axis=0, kind="stable")[:k]
    dcg = (np.take_along_axis(gains, order, axis=0) * disc[:, None]).sum(axis=0)
    ideal = (-np.sort(-gains, axis=0)[:k] * disc[:, None]).sum(axis=0)
    ok = ideal > 0
    return float(np.mean(dcg[ok] / ideal[ok])) if ok.any() else float("nan")


def _corr(a: NDArray[np.float64], b: NDArray[np.float64]) -> tuple[float, float]:
    a, b = a.ravel(), b.ravel()
    if a.size < 2 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan"), float("nan")
    pearson = float(np.corrcoef(a, b)[0, 1])
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    return pearson, float(np.corrcoef(ra, rb)[0, 1])


def compare(pred: NDArray[np.float64], actual: NDArray[np.float64], ndcg_k: int = 100) -> dict[str, float]:
    """Agreement figures of predicted vs actual changes, arrays of shape (n_rows, n_test)."""
    n = int(pred.shape[0]) if pred.ndim else 0
    if n == 0:
        return {"n_rows": 0, "max_abs_err": np.nan, "max_rel_err": np.nan, "pearson": np.nan,
                "spearman": np.nan, "sign_agreement": np.nan, "ndcg": np.nan}
    err = np.abs(pred - actual)
    scale = float(np.abs(actual).max())
    nz = np.abs(actual) > 1e-12 * max(scale, 1e-300)
    pearson, spearman = _corr(pred, actual)
    return {
        "n_rows": n,
        "max_abs_err": float(err.max()),
        "max_rel_err": float(err.max() / scale) if scale > 0 else float("nan"),
        "pearson": pearson,
        "spearman": spearman,
        "sign_agreement": float(np.mean(np.sign(pred[nz]) == np.sign(actual[nz]))) if nz.any() else np.nan,
        "ndcg": ndcg_at_k(pred, actual, ndcg_k),
    }
