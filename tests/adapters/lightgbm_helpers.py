"""Helpers shared by the LightGBM adapter tests (test_lightgbm.py, test_lightgbm_objectives.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
from influence_gbdt.adapters.lightgbm import LightGBMAdapter

from influence_gbdt.engine import InfluenceEngine, TestPoints


def points_of(adapter: LightGBMAdapter, X: Any) -> TestPoints:
    return TestPoints(leaf_index=adapter.leaf_indices(X), offset=adapter.init_offset(X))


def assert_explains_predict(model, X, Xt, y, w=None) -> tuple[LightGBMAdapter, InfluenceEngine]:
    """The explained margins equal the model's own ``predict(raw_score=True)`` on training and new
    rows (measured: bit for bit; the engine adds LightGBM's stored leaves in LightGBM's order)."""
    adapter = LightGBMAdapter(model)
    engine = adapter.prepare(X, y, w)
    for rows in (X, Xt):
        theirs = np.asarray(model.predict(rows, raw_score=True), dtype=np.float64)
        ours = engine.predict_margin(points_of(adapter, rows))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12 * np.abs(theirs).max())
    return adapter, engine


def kept_retrains(model, X, y, Xt, weights, weighted: bool = True) -> list[tuple[int, Any]]:
    """(i, retrained model) for each (i, weights) whose retraining keeps every tree's structure.
    ``weighted=False``: retrain without a weight vector (rows with weight 0 dropped), as a model
    trained without sample_weight was (LightGBM's percentiles differ with and without weights)."""
    from sklearn.base import clone

    from influence_gbdt.validation import structure_report

    out = []
    for i, w in weights:
        keep = w > 0
        retrained = clone(model).fit(X[keep], y[keep], sample_weight=w[keep] if weighted else None)
        if structure_report(model, retrained, X, keep, Xt)["same"]:
            out.append((i, retrained))
    return out


def margin_changes(model, X, y, Xt, w, step: int, weighted: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """LeafRefit's ground truth: the rows ``0, step, 2 step, ...`` whose deletion keeps every tree's
    structure (B,), and the model's raw margin on ``Xt`` minus the retrained one, (B, m) or (B, m, K)."""
    n = len(y)
    deletions = [(i, np.where(np.arange(n) == i, 0.0, w)) for i in range(0, n, step)]
    kept = kept_retrains(model, X, y, Xt, deletions, weighted=weighted)
    truth = [model.predict(Xt, raw_score=True) - r.predict(Xt, raw_score=True) for _, r in kept]
    return np.array([i for i, _ in kept], dtype=np.int64), np.array(truth)


def finite_differences(model, X, y, Xt, w, step: int, eps: float = 2.0**-5) -> tuple[np.ndarray, np.ndarray]:
    """LeafInfluence's ground truth: the rows ``0, step, ...`` whose retraining with weight
    ``w_i +- eps`` keeps every tree's structure (B,), and the central differences of the retrained
    raw margins on ``Xt``, (B, m) or (B, m, K). The default eps: LightGBM's float32 gradients put
    ~1e-8 noise on each retraining, noise / eps must stay small."""
    n = len(y)
    changes = [(i, np.where(np.arange(n) == i, w + s * eps, w)) for i in range(0, n, step) for s in (1, -1)]
    up, down = (dict(kept_retrains(model, X, y, Xt, changes[s::2])) for s in (0, 1))
    rows = np.array(sorted(set(up) & set(down)), dtype=np.int64)
    fd = [(up[i].predict(Xt, raw_score=True) - down[i].predict(Xt, raw_score=True)) / (2 * eps) for i in rows]
    return rows, np.array(fd)
