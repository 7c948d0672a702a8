"""The public BoostingInfluence API on all three libraries: inputs, outputs, errors, progress."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from boosters import LIBRARIES, binary_data, classifier, regressor

from influence_gbdt import (
    BoostingInfluence,
    InfluenceError,
    InputError,
    NotFittedError,
    ReproductionError,
    UnsupportedModelError,
)


@pytest.fixture(scope="module", params=LIBRARIES)
def fitted(request: pytest.FixtureRequest) -> tuple:
    X, y, X_test, y_test = binary_data()
    model = classifier(request.param, X, y)
    return request.param, model, X, y, X_test, y_test


def test_scores_have_documented_shapes_and_agree_across_input_types(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False)
    assert ex.fit(X, y) is ex
    S = ex.score_training_points(X_test, y_test)
    assert S.shape == (len(X), len(X_test)) and S.dtype == np.float64
    assert ex.n_train_ == len(X) and ex.n_features_in_ == 4
    assert list(ex.feature_names_in_) == ["a", "b", "c", "d"]
    # The same model trained and scored on ndarrays: identical scores (a DataFrame adds only names).
    library = fitted[0]
    model_np = classifier(library, X.to_numpy(), y)
    S_np = (
        BoostingInfluence(model_np, progress=False)
        .fit(X.to_numpy(), y)
        .score_training_points(X_test.to_numpy(), y_test)
    )
    np.testing.assert_allclose(S_np, S, rtol=1e-12, atol=1e-15)
    mean = ex.score_training_points(X_test, y_test, aggregate="mean")
    np.testing.assert_allclose(mean, S.mean(axis=1), rtol=1e-9, atol=1e-15)
    rows = np.array([5, 0, 17])
    np.testing.assert_allclose(
        ex.score_training_points(X_test, y_test, training_points=rows), S[rows], rtol=1e-12, atol=1e-15
    )


def test_every_method_and_update_set_runs_and_ranks_alike(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    rows = np.arange(0, len(X), 10)
    exact = (
        BoostingInfluence(model, progress=False)
        .fit(X, y)
        .score_training_points(X_test, y_test, aggregate="mean", training_points=rows)
    )
    for method in ("leaf_influence", "leaf_refit"):
        for update_set, k in (("all_points", None), ("single_point", None), ("top_k_leaves", 2)):
            ex = BoostingInfluence(model, method=method, update_set=update_set, k=k, progress=False)
            s = ex.fit(X, y).score_training_points(X_test, y_test, aggregate="mean", training_points=rows)
            assert s.shape == rows.shape
            # Fast variants and LeafRefit approximate the exact influence: same ranking broadly.
            assert np.corrcoef(s, exact)[0, 1] > 0.5, (method, update_set)


def test_prediction_scores_need_no_labels_and_fixed_base_differs(fitted: tuple) -> None:
    _library, model, X, y, X_test, _ = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    P = ex.score_training_points(X_test, on="prediction")
    assert P.shape == (len(X), len(X_test))
    fixed = BoostingInfluence(model, base_score="fixed", progress=False).fit(X, y)
    P_fixed = fixed.score_training_points(X_test, on="prediction")
    if ex.engine_.ensemble.base_rule != "fixed":
        # A refit base score moves every test margin: label-1 rows raise it, label-0 rows lower it.
        assert not np.allclose(P, P_fixed)
    else:
        np.testing.assert_allclose(P, P_fixed)


def test_top_training_points_returns_a_sorted_table(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    harmful = ex.top_training_points(X_test, y_test, n=5)
    helpful = ex.top_training_points(X_test, y_test, n=5, kind="helpful")
    assert list(harmful.columns[:3]) == ["row", "score", "label"] and len(harmful) == 5
    assert harmful["score"].is_monotonic_decreasing and helpful["score"].is_monotonic_increasing
    assert harmful["score"].iloc[0] > 0 > helpful["score"].iloc[0]
    np.testing.assert_array_equal(
        harmful[["a", "b"]].to_numpy(), X.iloc[harmful["row"]][["a", "b"]].to_numpy()
    )
    np.testing.assert_array_equal(harmful["label"], y[harmful["row"]])


def test_regressors_are_scored(fitted: tuple) -> None:
    library, _, X, _, X_test, _ = fitted
    rng = np.random.default_rng(1)
    y = X["a"].to_numpy() * 2 + rng.normal(size=len(X))
    model = regressor(library, X, y)
    y_test = X_test["a"].to_numpy() * 2
    S = BoostingInfluence(model, progress=False).fit(X, y).score_training_points(X_test, y_test)
    assert S.shape == (len(X), len(X_test)) and np.isfinite(S).all()


def test_errors_say_what_is_wrong(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False)
    with pytest.raises(NotFittedError, match="not fitted"):
        ex.score_training_points(X_test, y_test)
    with pytest.raises(InputError, match="rows but y has"):
        ex.fit(X, y[:-1])
    y_nan = y.astype(float)
    y_nan[3] = np.nan
    with pytest.raises(InputError, match=r"NaN|not among"):
        ex.fit(X, y_nan)
    with pytest.raises(InputError, match=r"not among|lie in"):
        ex.fit(X, np.where(y == 1, 2, 0))
    # Rows misaligned with their labels (X shuffled, y not): not the training data. (Shuffling X and
    # y together is the same data set in another order and is scored fine, row by row.)
    shuffled = np.random.default_rng(0).permutation(len(X))
    with pytest.raises(ReproductionError, match="not reproduced"):
        ex.fit(X.iloc[shuffled].reset_index(drop=True), y)
    ex.fit(X, y)
    with pytest.raises(InputError, match="features"):
        ex.score_training_points(X_test.iloc[:, :3], y_test)
    with pytest.raises(InputError, match="column names"):
        ex.score_training_points(X_test[["b", "a", "c", "d"]], y_test)
    with pytest.raises(InputError, match="needs y"):
        ex.score_training_points(X_test)
    with pytest.raises(InputError, match="rows but y has"):
        ex.score_training_points(X_test, y_test[:-1])
    with pytest.raises(InputError, match="would hold"):
        BoostingInfluence(model, progress=False, max_memory=100).fit(X, y).score_training_points(
            X_test, y_test
        )
    for kwargs, match in (
        ({"method": "magic"}, "method"),
        ({"update_set": "top_k_leaves"}, "needs k"),
        ({"base_score": "zero"}, "base_score"),
    ):
        with pytest.raises(InputError, match=match):
            BoostingInfluence(model, **kwargs).fit(X, y)
    assert issubclass(UnsupportedModelError, InfluenceError) and issubclass(ReproductionError, ValueError)


def test_unsupported_models_are_refused() -> None:
    from sklearn.ensemble import GradientBoostingClassifier

    X, y, _, _ = binary_data(n=100)
    with pytest.raises(UnsupportedModelError, match="not a supported model"):
        BoostingInfluence(GradientBoostingClassifier(n_estimators=2).fit(X, y)).fit(X, y)
    import xgboost

    sub = xgboost.XGBClassifier(n_estimators=3, subsample=0.5).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="subsample"):
        BoostingInfluence(sub).fit(X, y)


def test_progress_bar_shows_and_can_be_silenced(fitted: tuple, capsys: pytest.CaptureFixture) -> None:
    _, model, X, y, X_test, y_test = fitted
    BoostingInfluence(model, progress=True).fit(X, y).score_training_points(X_test, y_test)
    assert "leaf_influence" in capsys.readouterr().err
    BoostingInfluence(model, progress=False).fit(X, y).score_training_points(X_test, y_test)
    assert capsys.readouterr().err == ""


def test_importing_the_package_imports_no_booster() -> None:
    code = (
        "import sys, influence_gbdt, influence_gbdt.adapters, influence_gbdt.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('xgboost','lightgbm','catboost')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_get_and_set_params_follow_scikit_learn(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False)
    assert ex.get_params()["method"] == "leaf_influence" and ex.get_params()["model"] is model
    ex.fit(X, y)
    exact = ex.score_training_points(X_test, y_test, training_points=[0, 1, 2])
    # Scoring-time settings change without refitting, and give what a fresh explainer gives.
    assert ex.set_params(method="leaf_refit", update_set="top_k_leaves", k=2) is ex
    fresh = BoostingInfluence(model, method="leaf_refit", update_set="top_k_leaves", k=2, progress=False)
    np.testing.assert_array_equal(
        ex.score_training_points(X_test, y_test, training_points=[0, 1, 2]),
        fresh.fit(X, y).score_training_points(X_test, y_test, training_points=[0, 1, 2]),
    )
    assert not np.array_equal(exact, fresh.score_training_points(X_test, y_test, training_points=[0, 1, 2]))
    with pytest.raises(InputError, match="Unknown parameters"):
        ex.set_params(learning_rate=0.1)
    with pytest.raises(InputError, match="needs k"):
        ex.set_params(k=None)
    assert ex.k == 2  # a refused change leaves the settings as they were


def test_exact_influence_is_the_same_in_forward_and_reverse_mode(fitted: tuple) -> None:
    # Fewer training rows than test points run exact forward mode, all rows run reverse mode: two
    # independent algorithms (the paper's Algorithm 4 and its adjoint) that must agree to rounding.
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    rows = [3, 7, 11]
    assert ex.engine_.uses_reverse("all_points", len(y), len(y_test), None)
    assert not ex.engine_.uses_reverse("all_points", len(rows), len(y_test), None)
    reverse = ex.score_training_points(X_test, y_test)[rows]
    forward = ex.score_training_points(X_test, y_test, training_points=rows)
    np.testing.assert_allclose(forward, reverse, rtol=1e-9, atol=1e-12 * np.abs(reverse).max())
