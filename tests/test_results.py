"""Tidy results: pandas in, pandas out keyed by the user's own index; NumPy in, NumPy out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, classifier

from influence_gbdt import BoostingInfluence


@pytest.fixture(scope="module", params=LIBRARIES)
def relabelled(request: pytest.FixtureRequest) -> tuple:
    """A model, its training data with a shuffled text index (as after train_test_split and
    set_index), and the same scores computed from NumPy arrays (positions) as the reference."""
    X, y, X_test, y_test = binary_data(n=200, n_test=8)
    model = classifier(request.param, X, y, n_trees=8)
    rng = np.random.default_rng(0)
    X_named = X.set_axis([f"id{i}" for i in rng.permutation(len(X))])
    X_test_named = X_test.set_axis(pd.Index(rng.permutation(100)[: len(X_test)], name="case"))
    reference = BoostingInfluence(model, progress=False).fit(X.to_numpy(), y)
    S = reference.score_training_points(X_test.to_numpy(), y_test)
    return model, X_named, y, X_test_named, y_test, S


def test_scores_are_keyed_by_the_training_and_test_index(relabelled: tuple) -> None:
    model, X, y, X_test, y_test, S = relabelled
    assert isinstance(S, np.ndarray)  # NumPy in, NumPy out, unchanged
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    frame = ex.score_training_points(X_test, y_test)
    assert isinstance(frame, pd.DataFrame) and frame.index.name == "train" and frame.columns.name == "case"
    for label, position in (("id7", X.index.get_loc("id7")), (X.index[-1], len(X) - 1)):
        np.testing.assert_array_equal(frame.loc[label].to_numpy(), S[position])
    j = X_test.index[3]
    np.testing.assert_array_equal(frame[j].to_numpy(), S[:, 3])
    mean = ex.score_training_points(X_test, y_test, aggregate="mean")
    assert isinstance(mean, pd.Series) and mean.name == "score" and mean.index.equals(X.index)
    np.testing.assert_allclose(mean.to_numpy(), S.mean(axis=1), rtol=1e-12, atol=1e-15)
    rows = [5, 0, 17]
    part = ex.score_training_points(X_test, y_test, training_points=rows, aggregate="sum")
    assert list(part.index) == list(X.index[rows])
    np.testing.assert_allclose(part.to_numpy(), S[rows].sum(axis=1), rtol=1e-12, atol=1e-15)
    # Test rows given as an array: the columns are their positions.
    assert list(ex.score_training_points(X_test.to_numpy(), y_test).columns) == list(range(len(X_test)))


def test_top_training_points_keeps_the_original_index(relabelled: tuple) -> None:
    model, X, y, X_test, y_test, S = relabelled
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    top = ex.top_training_points(X_test, y_test, n=4)
    expected = np.argsort(-S.mean(axis=1), kind="stable")[:4]
    assert list(top.index) == list(X.index[expected]) and list(top["row"]) == list(expected)
    np.testing.assert_array_equal(top[["a", "b", "c", "d"]].to_numpy(), X.loc[top.index].to_numpy())
    # NumPy training data: the rows' positions are their labels (the index, named "row", no column).
    plain = BoostingInfluence(model, progress=False).fit(X.to_numpy(), y)
    top_plain = plain.top_training_points(X_test.to_numpy(), y_test, n=4)
    assert list(top_plain.index) == list(expected) and top_plain.index.name == "row"
    assert "row" not in top_plain.columns
