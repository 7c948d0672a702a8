"""Read any of the three libraries' models the same way: raw margins, leaf ids, split signatures,
and whether two models share their tree structure (the paper's Assumption 1)."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import InputError
from ..tabular import n_rows


def _library_of(model: Any) -> str:
    lib = type(model).__module__.split(".")[0]
    if lib not in ("xgboost", "lightgbm", "catboost"):
        raise InputError(f"Unsupported model type {type(model).__name__}.")
    return lib


def raw_predict(model: Any, X: Any) -> NDArray[np.float64]:
    """Raw margin of an XGBoost / LightGBM / CatBoost model on ``X``, float64, shape (n,), or (n, K)
    for a model with K outputs (classes, targets)."""
    lib = _library_of(model)
    if lib == "xgboost":
        import xgboost as xgb

        booster = model.get_booster() if hasattr(model, "get_booster") else model
        return booster.predict(xgb.DMatrix(X), output_margin=True).astype(np.float64)
    if lib == "lightgbm":
        booster = getattr(model, "booster_", model)
        return np.asarray(booster.predict(X, raw_score=True), dtype=np.float64)
    return np.asarray(model.predict(X, prediction_type="RawFormulaVal"), dtype=np.float64)


def leaf_ids(model: Any, X: Any) -> NDArray[np.int64]:
    """Native leaf id of every row in every tree, shape (n, T) (XGBoost: node ids)."""
    lib = _library_of(model)
    if lib == "xgboost":
        import xgboost as xgb

        booster = model.get_booster() if hasattr(model, "get_booster") else model
        return booster.predict(xgb.DMatrix(X), pred_leaf=True).astype(np.int64).reshape(n_rows(X), -1)
    if lib == "lightgbm":
        booster = getattr(model, "booster_", model)
        return np.asarray(booster.predict(X, pred_leaf=True), dtype=np.int64).reshape(n_rows(X), -1)
    import catboost

    pool = catboost.Pool(X, cat_features=model.get_cat_feature_indices() or None)
    return np.asarray(model.calc_leaf_indexes(pool), dtype=np.int64)


def split_signature(model: Any) -> list[tuple[Any, ...]]:
    """Per tree: the split features and thresholds (cheap to compare between two models)."""
    lib = _library_of(model)
    if lib == "xgboost":
        booster = model.get_booster() if hasattr(model, "get_booster") else model
        trees = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"]
        out = []
        for t in trees:
            left = np.asarray(t["left_children"])
            inner = left != -1
            out.append((tuple(left), tuple(np.asarray(t["split_indices"])[inner]),
                        tuple(np.asarray(t["split_conditions"], dtype=np.float32)[inner])))
        return out
    if lib == "lightgbm":
        booster = getattr(model, "booster_", model)
        sig: list[tuple[Any, ...]] = []
        for line in booster.model_to_string().splitlines():
            if line.startswith("Tree="):
                sig.append(())
            elif sig and line.startswith(("split_feature=", "threshold=", "left_child=", "cat_threshold=")):
                sig[-1] = (*sig[-1], line)
        return sig
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.json")
        model.save_model(path, format="json")
        with open(path) as fh:
            js = json.load(fh)
    trees = js.get("oblivious_trees") or js.get("trees") or []
    return [json.dumps(t.get("splits", t.get("split")), sort_keys=True) for t in trees]  # type: ignore[misc]


def structure_report(
    original: Any,
    retrained: Any,
    X_train: Any,
    mask: ArrayLike | None = None,
    X_test: Any | None = None,
    *,
    original_leaves: NDArray[np.int64] | None = None,
    original_test_leaves: NDArray[np.int64] | None = None,
    original_splits: list[Any] | None = None,
) -> dict[str, Any]:
    """Compare the tree structures of two models of the same library.

    Parameters
    ----------
    original, retrained : models
    X_train : array-like of shape (n, d)
        The original training rows (all of them, also the removed ones).
    mask : bool array of shape (n,), optional
        The rows kept in the retrained model (weight > 0); default all.
    X_test : array-like, optional
        Test rows whose leaves must also agree.
    original_leaves, original_test_leaves, original_splits : optional
        Precomputed :func:`leaf_ids` / :func:`split_signature` of ``original`` (speed).

    Returns
    -------
    dict with ``n_trees_equal``, ``train_leaves_equal`` (every kept row in the same leaf of every
    tree), ``test_leaves_equal`` (None without ``X_test``), ``splits_equal`` (same split features
    and thresholds), ``first_changed_tree`` (first tree where a kept train row moved, or -1) and
    ``same`` (the number of trees and all leaf assignments agree: Assumption 1 for the rows
    given).
    """
    a = leaf_ids(original, X_train) if original_leaves is None else original_leaves
    b = leaf_ids(retrained, X_train)
    keep = np.ones(a.shape[0], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    n_trees_equal = a.shape[1] == b.shape[1]
    train_eq = False
    first = -1
    if n_trees_equal:
        moved = (a[keep] != b[keep]).any(axis=0)
        train_eq = not bool(moved.any())
        first = int(np.argmax(moved)) if moved.any() else -1
    test_eq: bool | None = None
    if X_test is not None:
        ta = leaf_ids(original, X_test) if original_test_leaves is None else original_test_leaves
        tb = leaf_ids(retrained, X_test)
        test_eq = bool(ta.shape == tb.shape and np.array_equal(ta, tb))
    sa = split_signature(original) if original_splits is None else original_splits
    splits_eq = sa == split_signature(retrained)
    return {
        "n_trees_equal": n_trees_equal,
        "train_leaves_equal": train_eq,
        "test_leaves_equal": test_eq,
        "splits_equal": bool(splits_eq),
        "first_changed_tree": first,
        "same": bool(n_trees_equal and train_eq and test_eq is not False),
    }


def same_structure(original: Any, retrained: Any, X_train: Any, mask: ArrayLike | None = None,
                   X_test: Any | None = None) -> bool:
    """Whether every tree of ``retrained`` sends every kept training row (``mask``; and every row of
    ``X_test`` if given) to the same leaf as ``original``. See :func:`structure_report`."""
    return bool(structure_report(original, retrained, X_train, mask, X_test)["same"])
