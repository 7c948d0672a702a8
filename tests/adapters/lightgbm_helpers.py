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


#: The stored models of LightGBM 4.6 (``models/lightgbm-4.6-weighted-*.txt``) and the ground truth
#: that release's own retraining gave for them (``models/lightgbm-4.6-weighted.npz``), written by
#: ``models/lightgbm_46_weighted.py`` under LightGBM 4.6.0.
MODELS_46 = {"regression_l1": {}, "quantile": {"alpha": 0.3}}
SETTINGS_46 = dict(n_estimators=3, num_leaves=4, min_child_samples=40, learning_rate=0.3, verbose=-1,
                   n_jobs=1, deterministic=True)


def lightgbm46_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training rows ``X`` (300, 4), heavy-tailed labels ``y`` (300,), weights ``w`` (300,) on
    both sides of 1 (exact in float32: LightGBM's weighted percentiles branch on a weight >= 1) and
    test rows ``Xt`` (40, 4) of the LightGBM 4.6 models (:data:`MODELS_46`)."""
    rng = np.random.default_rng(46)
    X = rng.integers(0, 6, size=(340, 4)).astype(float)
    lin = 0.8 * X[:, 0] - 0.6 * X[:, 1] + 0.4 * X[:, 2]
    y = lin + rng.normal(scale=1.0, size=340) + rng.standard_t(2, 340)
    w = rng.integers(32, 128, 300) / 64.0
    return X[:300], y[:300], w, X[300:]
