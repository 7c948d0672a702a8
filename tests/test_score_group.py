"""``BoostingInfluence.score_group``: training rows deleted together, on the models users have.

The boosters' own fixed-structure refits are the ground truth of the engine's group refit
(``tests/adapters``: XGBoost's refresh, LightGBM's refit, CatBoost's numpy loop, a 3-class model
in ``test_multi_output``). Here, on each library's default classifier and regressor with pandas
input, text labels, sample weights, early stopping and a pipeline: a group of one row is that
row's LeafRefit score (another code path: the deletion rules against a replay of the rows that
remain), deleting nothing changes nothing, a group's score is not the sum of its rows' scores, and
the results are keyed and refused as the rest of the explainer's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, default_model

from influence_gbdt import BoostingInfluence
from influence_gbdt.errors import InputError, NotFittedError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: XGBoost's stored leaves are float32, a relative 1e-7 from the float64 values the engine
#: recomputes. LeafRefit follows the deleted row's changes from the booster's own margins; the group
#: replay moves its margins by the values it recomputes, and measures the group's change against
#: the same replay of every row, which cancels that offset to first order: the two paths agree to
#: its second order, 1e-6 of the largest test margin (measured: 3e-8); LightGBM and CatBoost to
#: float64 rounding (1e-9 of the largest score).


def _close(ex: BoostingInfluence, X_test: Any, a: Any, b: Any, library: str) -> None:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if library == "xgboost":
        tol = 1e-6 * max(1.0, float(np.abs(ex.adapter_.raw_predict(X_test)).max()))
    else:
        tol = 1e-9 * max(float(np.abs(b).max()), 1e-12)
    assert np.abs(a - b).max() <= tol


@pytest.fixture(scope="module")
def frames() -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray]:
    X, y, X_test, y_test = binary_data(n=400, n_test=15)
    labels = np.array(["no", "yes"])
    return X, labels[y], X_test, labels[y_test]




@pytest.mark.parametrize("library", LIBRARIES)
def test_default_classifiers_on_frames_with_text_labels(library: str, frames: tuple) -> None:
    X, y, X_test, y_test = frames
    if library == "xgboost":  # XGBClassifier takes 0 .. n_classes-1 only
        y, y_test = (y == "yes").astype(int), (y_test == "yes").astype(int)
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    model = default_model(library).fit(X, y, sample_weight=w)
    ex = BoostingInfluence(model, method="leaf_refit", progress=False).fit(X, y, sample_weight=w)
    one = ex.score_training_points(X_test, y_test, training_points=[17])
    alone = ex.score_group(X_test, y_test, training_points=[17])
    assert isinstance(alone, pd.Series) and alone.index.equals(X_test.index) and alone.name == "score"
    _close(ex, X_test, alone, one.iloc[0], library)
    group = np.arange(0, len(X), 9)
    together = ex.score_group(X_test, y_test, training_points=group)
    apart = ex.score_training_points(X_test, y_test, training_points=group).sum(axis=0)
    assert np.abs(together - apart).max() > 1e-3 * np.abs(together).max()  # not additive
    mask = np.zeros(len(X), dtype=bool)
    mask[group] = True
    by_mask = ex.score_group(X_test, y_test, training_points=mask, aggregate="mean")
    assert isinstance(by_mask, float) and by_mask == pytest.approx(together.mean(), rel=1e-12)
    prediction = ex.score_group(X_test, training_points=np.r_[group, group[:3]], on="prediction")
    assert np.abs(prediction).max() > 0  # repeats count once: the same group
    np.testing.assert_array_equal(prediction, ex.score_group(X_test, training_points=group, on="prediction"))
    for base_score in ("refit", "fixed"):  # deleting nothing retrains the same model
        ex.set_params(base_score=base_score)
        assert (ex.score_group(X_test, training_points=[], on="prediction") == 0).all()


@pytest.mark.parametrize("library", LIBRARIES)
def test_default_regressors_and_arrays(library: str, frames: tuple) -> None:
    X, _, X_test, _ = frames
    rng = np.random.default_rng(1)
    y = X.to_numpy() @ rng.normal(size=X.shape[1]) + rng.normal(size=len(X))
    y_test = X_test.to_numpy() @ rng.normal(size=X.shape[1])
    model = default_model(library, "Regressor").fit(X.to_numpy(), y)
    ex = BoostingInfluence(model, method="leaf_refit", progress=False).fit(X.to_numpy(), y)
    alone = ex.score_group(X_test.to_numpy(), y_test, training_points=[5])
    assert isinstance(alone, np.ndarray) and alone.shape == (len(X_test),)
    one = ex.score_training_points(X_test.to_numpy(), y_test, training_points=[5])[0]
    _close(ex, X_test.to_numpy(), alone, one, library)
    ex.set_params(base_score="fixed")
    assert (ex.score_group(X_test.to_numpy(), y_test, training_points=[]) == 0).all()


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
@pytest.mark.parametrize("kind", ["Classifier", "Regressor"])
def test_rows_of_weight_zero_deleted_together_change_nothing(library: str, kind: str, frames: tuple) -> None:
    """Retraining without rows of weight 0 trains the same model: the group's score is 0, bit for
    bit, the base margin re-estimated or not, as each row's LeafRefit is. (Not CatBoost, whose l2
    term scales with the row count: deleting any row moves its leaves, as retraining does.) For
    XGBoost this holds because the group is measured against the same replay of every row, not
    against the fit's, whose margins moved by XGBoost's float32 leaves."""
    X, _, X_test, _ = frames
    score = X.to_numpy() @ np.linspace(-1, 1, X.shape[1])
    y = (score > 0).astype(int) if kind == "Classifier" else score
    w = np.random.default_rng(4).uniform(0.5, 2.0, len(X))
    w[[3, 30, 300]] = 0.0
    model = default_model(library, kind).fit(X, y, sample_weight=w)
    for base_score in ("refit", "fixed"):
        ex = BoostingInfluence(model, method="leaf_refit", base_score=base_score, progress=False)
        ex.fit(X, y, sample_weight=w)
        alone = ex.score_training_points(X_test, training_points=[3, 30, 300], on="prediction")
        together = ex.score_group(X_test, training_points=[3, 30, 300], on="prediction")
        assert (np.asarray(alone) == 0).all() and (np.asarray(together) == 0).all()
        assert np.abs(ex.score_group(X_test, training_points=[3, 4], on="prediction")).max() > 0


@pytest.mark.filterwarnings("ignore:The argument 'eval_set' is deprecated")  # as users still write it
def test_early_stopped_model_and_pipeline(frames: tuple) -> None:
    import lightgbm as lgb
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, X_test, y_test = frames
    model = lgb.LGBMClassifier(n_estimators=300, verbose=-1).fit(
        X.iloc[:300], y[:300], eval_set=[(X.iloc[300:], y[300:])],
        callbacks=[lgb.early_stopping(5, verbose=False)])
    assert model.best_iteration_ < 300
    ex = BoostingInfluence(model, method="leaf_refit", progress=False).fit(X.iloc[:300], y[:300])
    _close(ex, X_test, ex.score_group(X_test, y_test, training_points=[3]),
           ex.score_training_points(X_test, y_test, training_points=[3]).iloc[0], "lightgbm")
    pipe = make_pipeline(ColumnTransformer([("scale", StandardScaler(), list(X.columns))]),
                         lgb.LGBMClassifier(n_estimators=30, verbose=-1)).fit(X, y)
    ex = BoostingInfluence(pipe, method="leaf_refit", progress=False).fit(X, y)
    _close(ex, X_test, ex.score_group(X_test, y_test, training_points=[8]),
           ex.score_training_points(X_test, y_test, training_points=[8]).iloc[0], "lightgbm")


def test_refusals(frames: tuple) -> None:
    X, y, X_test, y_test = frames
    model = default_model("lightgbm").fit(X, y)
    ex = BoostingInfluence(model, progress=False)
    with pytest.raises(NotFittedError):
        ex.score_group(X_test, y_test, training_points=[1])
    ex.fit(X, y)
    with pytest.raises(InputError, match="at least one must remain"):
        ex.score_group(X_test, y_test, training_points=np.ones(len(X), dtype=bool))
    with pytest.raises(InputError, match="out of range"):
        ex.score_group(X_test, y_test, training_points=[len(X)])
    with pytest.raises(InputError, match="needs y"):
        ex.score_group(X_test, training_points=[1])
    with pytest.raises(InputError, match="aggregate"):
        ex.score_group(X_test, y_test, training_points=[1], aggregate="median")


def _family_models() -> list[tuple[str, str, Any, str]]:
    """(id, library, model, target): leaf rules beyond the plain Newton step."""
    import catboost as cb
    import lightgbm as lgb
    import xgboost as xgb

    quiet = {"verbose": 0, "allow_writing_files": False, "iterations": 30}
    return [
        ("lightgbm quantile (renewed leaves)", "lightgbm",
         lgb.LGBMRegressor(objective="quantile", alpha=0.7, n_estimators=30, verbose=-1), "regression"),
        ("xgboost absolute error (renewed leaves)", "xgboost",
         xgb.XGBRegressor(objective="reg:absoluteerror", n_estimators=30), "regression"),
        ("lightgbm 3 classes", "lightgbm", lgb.LGBMClassifier(n_estimators=30, verbose=-1), "multiclass"),
        ("catboost 3 classes (joint rounds)", "catboost", cb.CatBoostClassifier(**quiet), "multiclass"),
        ("catboost default classifier (backtracking)", "catboost", cb.CatBoostClassifier(**quiet), "binary"),
        ("xgboost 3 classes", "xgboost", xgb.XGBClassifier(n_estimators=30), "multiclass"),
    ]


@pytest.mark.parametrize("case", range(len(_family_models())), ids=[c[0] for c in _family_models()])
def test_a_group_of_one_row_is_its_leaf_refit_for_every_leaf_rule(case: int, frames: tuple) -> None:
    _, library, model, target = _family_models()[case]
    X, _, X_test, _ = frames
    score = X.to_numpy() @ np.linspace(-1, 1, X.shape[1])
    y = {"regression": score, "binary": (score > 0).astype(int),
         "multiclass": np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))}[target]
    model.fit(X, y)
    ex = BoostingInfluence(model, method="leaf_refit", progress=False).fit(X, y)
    output = 1 if target == "multiclass" else None
    for row in (4, 250):
        one = ex.score_training_points(X_test, training_points=[row], on="prediction", output=output)
        alone = ex.score_group(X_test, training_points=[row], on="prediction", output=output)
        assert np.abs(np.asarray(one)).max() > 0
        _close(ex, X_test, alone, one.iloc[0], library)


def test_catboost_class_weights_derived_from_the_rows_that_remain(frames: tuple) -> None:
    """``auto_class_weights`` are derived from the training rows: retraining without the group
    derives them from the rows that remain (here 1.4540 -> 1.4568), and so does the group's
    refit. Ground truth: CatBoost retrained without the group, on features of few values (its
    borders stay) with a structure checked to be the same."""
    import catboost as cb

    X, _, X_test, _ = frames
    X, X_test = (X * 2).round(), (X_test * 2).round()
    y = (X.to_numpy() @ np.linspace(-1, 1, X.shape[1]) > 0.8).astype(int)
    settings = {"iterations": 6, "depth": 2, "auto_class_weights": "Balanced", "random_strength": 0,
                "bootstrap_type": "No", "thread_count": 1, "verbose": 0, "allow_writing_files": False}
    model = cb.CatBoostClassifier(**settings).fit(X, y)
    group = [10, 20]
    rest = np.setdiff1d(np.arange(len(X)), group)
    retrained = cb.CatBoostClassifier(**settings).fit(X.iloc[rest], y[rest])
    assert retrained.get_all_params()["class_weights"] != model.get_all_params()["class_weights"]
    for rows in (X.iloc[rest], X_test):  # the same trees: the retrained leaves are the refit's reference
        np.testing.assert_array_equal(model.calc_leaf_indexes(rows), retrained.calc_leaf_indexes(rows))
    truth = (model.predict(X_test, prediction_type="RawFormulaVal")
             - retrained.predict(X_test, prediction_type="RawFormulaVal"))
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    together = ex.score_group(X_test, training_points=group, on="prediction")
    assert np.abs(together - truth).max() <= 1e-9 * np.abs(truth).max()  # float64 rounding (measured 6e-14)


def test_catboost_ctr_rows_keep_their_training_routing() -> None:
    """With CTRs (CatBoost's default for a categorical feature) a row's training-time value of a
    CTR depends on the rows before it in CatBoost's shuffle: the rows that remain keep the leaves
    they had in training, as each row's LeafRefit keeps them, so a group of one row is its
    LeafRefit score."""
    import catboost as cb

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"num": rng.normal(size=400), "cat": rng.choice(list("abcdefghij"), 400)})
    y = ((X["num"] + (X["cat"] < "e") + 0.5 * rng.normal(size=400)) > 0.5).astype(int).to_numpy()
    model = cb.CatBoostClassifier(iterations=10, thread_count=1, verbose=0, allow_writing_files=False,
                                  cat_features=["cat"]).fit(X, y)
    ex = BoostingInfluence(model, method="leaf_refit", progress=False).fit(X, y)
    X_test = X.iloc[:15]
    for row in (4, 250):
        one = ex.score_training_points(X_test, training_points=[row], on="prediction")
        alone = ex.score_group(X_test, training_points=[row], on="prediction")
        assert np.abs(np.asarray(one)).max() > 0
        _close(ex, X_test, alone, one.iloc[0], "catboost")


def test_the_same_scores_on_any_number_of_threads() -> None:
    """The replay of the remaining rows splits them over the threads in chunks (three chunks
    here) and sums in a fixed order: one thread and three give the same bits."""
    import lightgbm as lgb

    from influence_gbdt.engine.team import CHUNK_ROWS

    rng = np.random.default_rng(3)
    n = 3 * CHUNK_ROWS + 5
    X = rng.normal(size=(n + 20, 4))
    y = (X[:, 0] + rng.normal(size=n + 20) > 0).astype(int)
    model = lgb.LGBMClassifier(n_estimators=20, verbose=-1).fit(X[:n], y[:n])
    ex = BoostingInfluence(model, progress=False, n_threads=1).fit(X[:n], y[:n])
    group = np.arange(0, n, 7)
    one = ex.score_group(X[n:], y[n:], training_points=group)
    three = ex.set_params(n_threads=3).score_group(X[n:], y[n:], training_points=group)
    assert np.abs(one).max() > 0
    np.testing.assert_array_equal(one, three)
