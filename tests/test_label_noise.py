"""Self-influence and find_label_issues, against the booster's own predictions and the engine's
independent scoring path (one training row scored against itself as a test point)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, classifier

from influence_gbdt import BoostingInfluence, InputError
from influence_gbdt.demo import roc_auc
from influence_gbdt.label_noise import disagreement, self_influence


@pytest.fixture(scope="module", params=LIBRARIES)
def noisy(request: pytest.FixtureRequest) -> tuple:
    X, y, X_test, y_test = binary_data(n=300, n_test=40, seed=3)
    flipped = np.zeros(len(y), dtype=bool)
    flipped[np.random.default_rng(1).choice(len(y), 30, replace=False)] = True
    y_noisy = np.where(flipped, 1 - y, y)
    X = X.set_axis([f"id{i}" for i in range(len(X))])
    model = classifier(request.param, X, y_noisy, n_trees=10)
    ex = BoostingInfluence(model, progress=False).fit(X, y_noisy)
    return model, ex, X, y_noisy, X_test, y_test, flipped


@pytest.mark.parametrize(("method", "update_set"), [("leaf_influence", "single_point"),
                                                    ("leaf_refit", "single_point"),
                                                    ("leaf_influence", "all_points"),
                                                    ("leaf_refit", "top_k_leaves")])
def test_self_influence_is_the_row_scored_against_itself(noisy: tuple, method: str, update_set: str) -> None:
    _, ex, X, y, *_ = noisy
    rows = np.array([0, 7, 123, 299])
    k = 2 if update_set == "top_k_leaves" else None
    fast = self_influence(ex.engine_, rows, method=method, update_set=update_set, k=k, chunk_size=3)
    ex.set_params(method=method, update_set=update_set, k=k)
    # Reference: each row as its own one-point test set, through the public scoring path.
    brute = np.array([ex.score_training_points(X.iloc[[i]], y[[i]], training_points=[i]).iloc[0, 0]
                      for i in rows])
    ex.set_params(method="leaf_influence", update_set="all_points", k=None)
    # Both sum the same leaf changes in another order: agreement to rounding of the largest term.
    np.testing.assert_allclose(fast, -brute, rtol=1e-9, atol=1e-12 * np.abs(brute).max())


def test_disagreement_is_the_booster_own_log_loss(noisy: tuple) -> None:
    model, ex, X, y, *_ = noisy
    p = model.predict_proba(X)[:, 1]
    expected = -np.log(np.where(y == 1, p, 1 - p))
    # The booster predicts in float32 (XGBoost, CatBoost); the engine sums float64 leaves.
    np.testing.assert_allclose(disagreement(ex.engine_), expected, rtol=1e-5)


def test_find_label_issues_ranks_flips_first_and_keeps_the_index(noisy: tuple) -> None:
    _, ex, X, y, X_test, y_test, flipped = noisy
    table = ex.find_label_issues(X_test, y_test)
    assert list(table.columns) == ["row", "suspicion", "label", "is_label_issue", "disagreement",
                                   "test_influence"]
    assert table["suspicion"].is_monotonic_decreasing and len(table) == len(X)
    assert list(table.index) == list(X.index[table["row"]])
    np.testing.assert_array_equal(table["label"], y[table["row"]])
    mean = ex.score_training_points(X_test, y_test, aggregate="mean")
    np.testing.assert_array_equal(table["test_influence"], mean.loc[table.index])
    # 10% flipped labels on a small noisy problem: the model's disagreement finds them well.
    assert roc_auc(flipped[table["row"]], table["suspicion"].to_numpy()) > 0.75
    by_self = ex.find_label_issues(n=5, rank_by="self_influence")
    assert len(by_self) == 5 and "self_influence" in by_self and "test_influence" not in by_self
    np.testing.assert_array_equal(by_self["suspicion"], by_self["self_influence"])


def test_find_label_issues_refuses_what_it_cannot_do(noisy: tuple) -> None:
    _, ex, _, _, X_test, _y_test, _ = noisy
    with pytest.raises(InputError, match="needs X_test and y_test"):
        ex.find_label_issues(rank_by="test_influence")
    with pytest.raises(InputError, match="both X_test and y_test"):
        ex.find_label_issues(X_test)
    with pytest.raises(InputError, match="rank_by"):
        ex.find_label_issues(rank_by="loss")
    assert isinstance(ex.find_label_issues(n=0), pd.DataFrame)


def _confident_learning_count(proba: np.ndarray, label: np.ndarray) -> tuple[int, int]:
    """Reference loops over the booster's own ``predict_proba``: confident learning's count of rows
    whose confident class is not their label, and how many rows lie within 1e-5 of a threshold
    (the booster predicts in float32, the engine in float64: those rows may go either way)."""
    K = proba.shape[1]
    threshold = [np.mean([proba[i, j] for i in range(len(label)) if label[i] == j]) for j in range(K)]
    count = ambiguous = 0
    for i in range(len(label)):
        above = [j for j in range(K) if proba[i, j] >= threshold[j]]
        ambiguous += any(abs(proba[i, j] - threshold[j]) < 1e-5 for j in range(K))
        if above and max(above, key=lambda j: proba[i, j]) != label[i]:
            count += 1
    return count, ambiguous


@pytest.mark.parametrize("library", LIBRARIES)
def test_label_issues_are_flagged_for_binary_and_multiclass_models(library: str) -> None:
    """``is_label_issue`` flags the most suspicious rows, as many as confident learning counts on the
    booster's own probabilities; flipped labels make up most of them; multiclass models (string
    labels where the wrapper takes them) work as binary ones do."""
    X, _, _, _ = binary_data(n=400, seed=5)
    rng = np.random.default_rng(2)
    clean = np.digitize(X.iloc[:, 0] + 0.5 * X.iloc[:, 1], [-0.5, 0.5])
    flipped = rng.random(len(clean)) < 0.1
    codes = np.where(flipped, (clean + rng.integers(1, 3, len(clean))) % 3, clean)
    names = np.array(["low", "mid", "high"])
    y = codes if library == "xgboost" else names[codes]
    model = classifier(library, X, y, n_trees=20)
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    table = ex.find_label_issues()
    proba = model.predict_proba(X)
    index = np.searchsorted(model.classes_, y) if library != "catboost" else np.array(
        [list(model.classes_).index(v) for v in y])
    expected, ambiguous = _confident_learning_count(proba, index)
    assert abs(int(table["is_label_issue"].sum()) - expected) <= ambiguous
    assert table["is_label_issue"].iloc[: int(table["is_label_issue"].sum())].all()  # the top rows
    # The model's own loss is -log of the booster's probability of the label (float32 predictions).
    np.testing.assert_allclose(disagreement(ex.engine_), -np.log(proba[np.arange(len(y)), index]), rtol=1e-5)
    flagged = table.index[table["is_label_issue"].to_numpy()]  # default index: the positions
    # In-sample probabilities fit most flips here (the count is 0-3 of 36: see the docstring of
    # estimated_issue_count), but what is flagged is mostly flipped (10% of all rows are).
    assert flagged.size == 0 or flipped[flagged].mean() > 0.5
    assert ex.find_label_issues(n_issues=7)["is_label_issue"].sum() == 7
    with pytest.raises(InputError, match="n_issues"):
        ex.find_label_issues(n_issues=-1)
