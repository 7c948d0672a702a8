"""The XGBoost adapter's own walk through the trees (adapters/xgboost_leaves.py) against XGBoost's
``predict(pred_leaf=True)`` on every row: missing values both ways, a ``missing=`` sentinel, values
exactly at split conditions, pruned nodes (exact), deep unbalanced trees (lossguide), multiclass,
early stopping, DataFrames and Fortran-ordered arrays, 1 to 3 threads. The comparison is exact
(leaf numbers), so no tolerance."""

from __future__ import annotations

import influence_gbdt.adapters.base as base
import numpy as np
import pandas as pd
import pytest
import scipy.sparse
import xgboost as xgb
from influence_gbdt.adapters import adapter_for
from influence_gbdt.adapters.xgboost_leaves import float32_rows

from influence_gbdt.errors import InputError

N = 3000


def _data(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Features with ties at split conditions (integers, few distinct values), values that round
    when read as float32, and missing values in two columns; a binary label and a 3-class one."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([
        rng.integers(0, 6, N).astype(float),
        rng.normal(size=N) * 1e3 + 1e-9 * rng.normal(size=N),
        rng.normal(size=N),
        rng.exponential(size=N),
    ])
    X[rng.random(N) < 0.15, 2] = np.nan
    X[rng.random(N) < 0.3, 3] = np.nan
    logit = X[:, 0] - 2.5 + 1e-3 * X[:, 1] + np.nan_to_num(X[:, 2]) + rng.normal(size=N)
    return X, logit


def _same_leaves(adapter, X) -> None:
    rows = float32_rows(X, adapter.missing)
    assert rows is not None
    expected = adapter._pred_leaf(X)
    for threads in (1, 2, 3):
        np.testing.assert_array_equal(adapter._walker.leaves(*rows, n_threads=threads), expected)


@pytest.mark.parametrize("params", [
    {},
    {"tree_method": "exact", "max_depth": 5, "gamma": 2.0},
    {"grow_policy": "lossguide", "max_depth": 0, "max_leaves": 48, "min_child_weight": 0.1},
    {"tree_method": "approx", "max_depth": 8},
], ids=["default", "exact-pruned", "lossguide-deep", "approx"])
def test_walk_equals_pred_leaf(params):
    X, logit = _data()
    model = xgb.XGBClassifier(n_estimators=30, n_jobs=1, **params).fit(X, (logit > 0).astype(int))
    adapter = adapter_for(model)
    if params.get("grow_policy") == "lossguide":  # deeper than one check of the walk (8 levels)
        assert adapter._walker.depth.max() > 8
    _same_leaves(adapter, X)
    _same_leaves(adapter, np.nan_to_num(X, nan=0.25))  # nothing missing: the walk's other loop
    _same_leaves(adapter, np.asfortranarray(X))
    _same_leaves(adapter, pd.DataFrame(X, columns=["a", "b", "c", "d"]))


def test_walk_multiclass_early_stopping_and_sentinel_missing():
    """3 classes (3 trees a round) with early stopping (only rounds up to best_iteration are
    explained), and ``missing=-999``: a value equal to it (in float32) is missing, NaN too."""
    X, logit = _data(5)
    X = np.where(np.isnan(X), -999.0, X)
    X[::7, 1] = np.nan
    y = np.digitize(logit, [-1.0, 1.0])
    model = xgb.XGBClassifier(n_estimators=200, early_stopping_rounds=3, missing=-999.0, n_jobs=1)
    model.fit(X[:2000], y[:2000], eval_set=[(X[2000:], y[2000:])], verbose=False)
    adapter = adapter_for(model)
    assert adapter.n_rounds < 200 and adapter._walker.root.size == 3 * adapter.n_rounds
    _same_leaves(adapter, X)
    ints = pd.DataFrame({"a": X[:, 0].astype(np.int64), "b": X[:, 1], "c": X[:, 2], "d": X[:, 3]})
    _same_leaves(adapter, ints)


def test_leaf_indices_walks_many_rows_and_asks_xgboost_otherwise(monkeypatch):
    """Every input that is not one thread's (``base.one_thread``) is walked where the walk applies,
    otherwise read from ``pred_leaf``; both give XGBoost's leaves, and a fit reproduces the model.
    A walk that disagreed with ``pred_leaf`` on the checked rows is not used."""
    X, logit = _data(9)
    y = (logit > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=20, max_depth=4, n_jobs=1).fit(X, y)
    adapter = adapter_for(model)
    monkeypatch.setattr(base, "ONE_THREAD_ROW_TREES", 0)
    expected = adapter._pred_leaf(X)
    for x in (X, pd.DataFrame(X, columns=list("abcd")), scipy.sparse.csr_matrix(np.nan_to_num(X))):
        want = expected if not scipy.sparse.issparse(x) else adapter._pred_leaf(x)
        np.testing.assert_array_equal(adapter.leaf_indices(x), want)
    assert adapter.prepare(X, y).relative_residual < adapter.rtol

    class Wrong:  # a walk that puts every row in leaf 0
        def leaves(self, rows, has_missing, n_threads=None):
            return np.zeros((expected.shape[0], rows.shape[0]), np.int32)

    monkeypatch.setattr(adapter, "_walker", Wrong())
    np.testing.assert_array_equal(adapter.leaf_indices(X), expected)


def test_infinite_values_and_categorical_splits_go_to_xgboost(monkeypatch):
    """XGBoost refuses infinite values (the walk would not): the adapter says so, as before. A model
    with categorical splits has no walk; its leaves come from ``pred_leaf``."""
    X, logit = _data(11)
    y = (logit > 0).astype(int)
    monkeypatch.setattr(base, "ONE_THREAD_ROW_TREES", 0)
    adapter = adapter_for(xgb.XGBClassifier(n_estimators=5, n_jobs=1).fit(X, y))
    bad = X.copy()
    bad[4, 0] = np.inf
    assert float32_rows(bad, np.nan) is None
    assert float32_rows(np.array([[1e39, 0.0, 0.0, 0.0]]), np.nan) is None  # inf as float32
    with pytest.raises(InputError, match="xgboost cannot read X"):
        adapter.leaf_indices(bad)
    frame = pd.DataFrame({"a": pd.Categorical(X[:, 0].astype(int)), "b": X[:, 1]})
    cat = adapter_for(xgb.XGBClassifier(n_estimators=5, enable_categorical=True, n_jobs=1).fit(frame, y))
    assert cat._walker is None
    np.testing.assert_array_equal(cat.leaf_indices(frame), cat._pred_leaf(frame))
