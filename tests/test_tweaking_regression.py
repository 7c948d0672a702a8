"""Feature tweaking of regressors: rows moved into a range of the booster's own ``predict``.

Ground truths: the booster's ``predict`` (every returned row must land in its range, on the scale
``predict`` returns: counts for Poisson, probabilities for ``reg:logistic``); an exhaustive
enumeration of every combination of cells, judged by the booster's ``predict`` (the exact MILP must
match its cheapest cost, the heuristics may only be above it); a numpy scan of the training rows
(the returned cost never exceeds the nearest admissible row already in range).
"""

from __future__ import annotations

from typing import Any

import catboost as cb
import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from influence_gbdt.adapters import trees_for
from tweak_reference import cheapest_over_cells

from influence_gbdt import FeatureTweaking
from influence_gbdt.errors import InputError, UnsupportedModelError
from influence_gbdt.links import LINKS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

LIBRARIES = ("xgboost", "lightgbm", "catboost")
CB = {"verbose": 0, "allow_writing_files": False, "thread_count": 1, "random_seed": 0}


def _frame(n: int = 600, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Four features (the last integer-valued) and a positive target (counts-like)."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, 4)), columns=["a", "b", "c", "d"])
    X["d"] = rng.integers(0, 10, n)
    y = np.exp(0.5 * X["a"] + 0.3 * X["b"] * X["c"]) + 0.1 * X["d"] + rng.uniform(0, 0.5, n)
    return X, y.to_numpy()


FRAME, Y = _frame()
HIGH = float(np.quantile(Y, 0.8))  # "at least this": most rows start below it


def _default(library: str) -> Any:
    """Each library's regressor as users build it: every setting at its default."""
    return {"xgboost": xgb.XGBRegressor(), "lightgbm": lgb.LGBMRegressor(verbose=-1),
            "catboost": cb.CatBoostRegressor(verbose=0, allow_writing_files=False)}[library]


def _assert_in_range(model: Any, out: pd.DataFrame, low: float, high: float, min_found: float = 0.9) -> None:
    """Rows with a tweak get a prediction in [low, high] from ``model.predict``, which the table's
    ``prediction`` column repeats; rows without one are NaN and say why."""
    found = out["cost"].notna().to_numpy()
    assert found.mean() >= min_found
    predicted = np.asarray(model.predict(out.loc[found, list(FRAME.columns)]), dtype=np.float64)
    assert ((predicted >= low) & (predicted <= high)).all()
    np.testing.assert_array_equal(out.loc[found, "prediction"].to_numpy(dtype=np.float64), predicted)
    assert (out.loc[~found, "reason"] != "").all()


# ---------------------------------------------------------------------------------- the users' models
@pytest.mark.parametrize("library", LIBRARIES)
def test_default_regressors_on_frames_reach_the_range(library: str) -> None:
    """The plain regressor of each library, pandas input: every tweak lands in the range by the
    booster's own predict, upwards and downwards; rows already inside are unchanged."""
    model = _default(library).fit(FRAME, Y)
    rows = FRAME.iloc[:15]
    ft = FeatureTweaking(model, progress=False).fit(FRAME)
    assert not hasattr(ft, "classes_") and ft.reference_prediction_.shape == (len(FRAME),)
    up = ft.tweak(rows, desired_range=(HIGH, None))
    assert list(up.columns) == [*FRAME.columns, "cost", "prediction", "n_changed", "source", "reason"]
    assert up.index.equals(rows.index) and list(up.dtypes[:4]) == list(FRAME.dtypes)
    _assert_in_range(model, up, HIGH, np.inf)
    already = model.predict(rows) >= HIGH
    assert (up.loc[already, "source"] == "unchanged").all() and (up.loc[already, "cost"] == 0).all()
    down = ft.tweak(rows, desired_range=(None, 1.0))
    _assert_in_range(model, down, -np.inf, 1.0)
    band = ft.tweak(rows, desired_range=(2.0, 2.5))  # a closed range, from both sides
    _assert_in_range(model, band, 2.0, 2.5)


@pytest.mark.filterwarnings("ignore:The argument 'eval_set' is deprecated")  # as users still write it
@pytest.mark.parametrize("library", LIBRARIES)
def test_early_stopped_regressors_use_the_trees_predict_uses(library: str) -> None:
    X_fit, X_val, y_fit, y_val = FRAME.iloc[:450], FRAME.iloc[450:], Y[:450], Y[450:]
    if library == "xgboost":
        model = xgb.XGBRegressor(n_estimators=400, early_stopping_rounds=5).fit(
            X_fit, y_fit, eval_set=[(X_val, y_val)], verbose=False)
    elif library == "lightgbm":
        model = lgb.LGBMRegressor(n_estimators=400, verbose=-1).fit(
            X_fit, y_fit, eval_set=[(X_val, y_val)], callbacks=[lgb.early_stopping(5, verbose=False)])
    else:
        model = cb.CatBoostRegressor(iterations=400, early_stopping_rounds=5, **CB).fit(
            X_fit, y_fit, eval_set=(X_val, y_val))
    out = FeatureTweaking(model, progress=False).fit(X_fit).tweak(X_val.iloc[:10], desired_range=(HIGH, None))
    _assert_in_range(model, out, HIGH, np.inf)


def _objective_models() -> list[tuple[str, Any, np.ndarray]]:
    """Regressors whose predict applies a link to the margin (and one whose predict does not)."""
    unit = (Y > np.median(Y)) * 0.8 + 0.1  # a target in (0, 1) for the logistic ones
    return [
        ("xgb count:poisson", xgb.XGBRegressor(objective="count:poisson", n_estimators=30), Y),
        ("xgb reg:gamma", xgb.XGBRegressor(objective="reg:gamma", n_estimators=30), Y),
        ("xgb reg:logistic", xgb.XGBRegressor(objective="reg:logistic", n_estimators=30), unit),
        ("lgb tweedie", lgb.LGBMRegressor(objective="tweedie", n_estimators=30, verbose=-1), Y),
        ("lgb cross_entropy",
         lgb.LGBMRegressor(objective="cross_entropy", n_estimators=30, verbose=-1), unit),
        ("lgb cross_entropy_lambda",
         lgb.LGBMRegressor(objective="cross_entropy_lambda", n_estimators=30, verbose=-1), unit),
        ("lgb reg_sqrt", lgb.LGBMRegressor(reg_sqrt=True, n_estimators=30, verbose=-1), Y),
        ("cb Poisson", cb.CatBoostRegressor(loss_function="Poisson", iterations=30, **CB), Y),
        ("cb generic Poisson", cb.CatBoost({"loss_function": "Poisson", "iterations": 30, **CB}), Y),
    ]


@pytest.mark.parametrize("case", range(len(_objective_models())),
                         ids=[name for name, _, _ in _objective_models()])
def test_ranges_are_on_the_scale_predict_returns(case: int) -> None:
    """Poisson's range is in counts (exp of the margin), reg:logistic's in probabilities, the
    generic ``CatBoost`` class's in raw margins (its predict's default): whatever ``predict``
    returns, the tweak lands there."""
    _, model, y = _objective_models()[case]
    model.fit(FRAME, y)
    reader = trees_for(model)
    link = LINKS[reader.prediction_link]
    np.testing.assert_allclose(link.prediction(reader.raw_margin(FRAME)[:, 0]), model.predict(FRAME),
                               rtol=1e-5)  # float32 predictions (XGBoost)
    predicted = np.asarray(model.predict(FRAME), dtype=np.float64)
    low = float(np.quantile(predicted, 0.85))
    rows = FRAME[predicted < low].iloc[:8]
    out = FeatureTweaking(model, progress=False).fit(FRAME).tweak(rows, desired_range=(low, None))
    _assert_in_range(model, out, low, np.inf)


def test_a_range_the_link_never_predicts_is_reported_per_row() -> None:
    model = xgb.XGBRegressor(objective="count:poisson", n_estimators=20).fit(FRAME, Y)
    ft = FeatureTweaking(model, progress=False).fit(FRAME)
    out = ft.tweak(FRAME.iloc[:3], desired_range=(None, -1.0))  # Poisson predicts > 0
    assert out["cost"].isna().all() and out["reason"].str.contains(r"\(0, inf\)").all()
    per_row = ft.tweak(FRAME.iloc[:2], desired_range=np.array([[None, -1.0], [HIGH, None]], dtype=object))
    assert np.isnan(per_row["cost"].iloc[0]) and per_row["cost"].iloc[1] >= 0
    _assert_in_range(model, per_row.iloc[1:], HIGH, np.inf, min_found=1.0)


def test_per_row_ranges_and_explain() -> None:
    model = lgb.LGBMRegressor(n_estimators=40, verbose=-1).fit(FRAME, Y)
    rows = FRAME.iloc[:6]
    now = model.predict(rows)
    ranges = np.c_[now + 0.5, np.full(6, np.nan)]  # NaN: open above
    out = FeatureTweaking(model, progress=False).fit(FRAME).tweak(rows, desired_range=ranges)
    found = out["cost"].notna().to_numpy()
    assert found.all()
    assert (model.predict(out[list(FRAME.columns)]) >= now + 0.5).all()
    ft = FeatureTweaking(model, progress=False).fit(FRAME)
    explained = ft.explain(rows.iloc[[0]], desired_range=(now[0] + 0.5, None))
    assert list(explained.columns) == ["feature", "from", "to", "change", "cost"] and len(explained) >= 1


# ---------------------------------------------------------------------------------- costs
def _cheapest_by_enumeration(
    ft: FeatureTweaking, model: Any, row: np.ndarray, low: float, high: float
) -> float:
    """Cheapest row in [low, high] by the booster's predict, over every combination of cells (the
    search space of the exact method)."""

    def inside(V: np.ndarray) -> np.ndarray:
        predicted = np.asarray(model.predict(V), dtype=np.float64)
        return (predicted >= low) & (predicted <= high)

    return cheapest_over_cells(ft, row, inside)


@pytest.mark.parametrize("library", LIBRARIES)
def test_exact_matches_the_enumeration_and_bounds_the_heuristics(library: str) -> None:
    X = FRAME.to_numpy()
    model = {"xgboost": xgb.XGBRegressor(n_estimators=8, max_depth=3),
             "lightgbm": lgb.LGBMRegressor(n_estimators=8, num_leaves=8, verbose=-1),
             "catboost": cb.CatBoostRegressor(iterations=8, depth=3, **CB)}[library].fit(X, Y)
    predicted = model.predict(X)
    low, high = float(np.quantile(predicted, 0.75)), float(np.quantile(predicted, 0.9))
    rows = X[predicted < low][:20]
    kw: dict[str, Any] = {"n_reference": 0, "immutable": [3], "progress": False}
    costs = {m: FeatureTweaking(model, method=m, **kw).fit(X).tweak(rows, desired_range=(low, high))["cost"]
             .to_numpy() for m in ("paths", "combine", "exact")}
    ft = FeatureTweaking(model, **kw).fit(X)
    truth = np.array([_cheapest_by_enumeration(ft, model, r, low, high) for r in rows])
    assert np.isfinite(truth).mean() >= 0.9
    np.testing.assert_allclose(costs["exact"], truth, rtol=1e-7)  # the solver stops at a 1e-7 relative gap
    reached = np.isfinite(truth)
    for method in ("paths", "combine"):
        assert (costs[method][reached] >= truth[reached] * (1 - 1e-9)).all()
    assert (costs["combine"] <= costs["paths"] * (1 + 1e-12)).all()


def test_cost_is_never_above_the_nearest_training_row_in_range() -> None:
    X = FRAME.to_numpy()
    model = xgb.XGBRegressor(n_estimators=50).fit(X, Y)
    predicted = model.predict(X)
    rows = X[predicted < HIGH][:15]
    out = FeatureTweaking(model, immutable=[3], n_reference=1, progress=False).fit(X).tweak(
        rows, desired_range=(HIGH, None))
    inside = X[predicted >= HIGH]
    scale = X.std(axis=0)
    for i, r in enumerate(rows):
        admissible = inside[inside[:, 3] == r[3]]
        if len(admissible):
            nearest = np.sqrt((((admissible - r) / scale) ** 2).sum(axis=1)).min()
            assert out["cost"].iloc[i] <= nearest + 1e-12


def test_constraints_hold_for_regressors() -> None:
    model = lgb.LGBMRegressor(n_estimators=60, verbose=-1).fit(FRAME, Y)
    rows = FRAME.iloc[:10]
    out = FeatureTweaking(model, immutable=["d"], monotone={"a": 1}, bounds={"b": (-1, 1)}, max_changes=2,
                          progress=False).fit(FRAME).tweak(rows, desired_range=(HIGH, None))
    found = out["cost"].notna().to_numpy()
    assert found.mean() >= 0.5
    t, r = out.loc[found], rows.loc[found]
    assert (t["d"] == r["d"]).all() and (t["a"] >= r["a"]).all()
    moved_b = t["b"] != r["b"]
    assert t.loc[moved_b, "b"].between(-1, 1).all() and (t["n_changed"] <= 2).all()
    _assert_in_range(model, out, HIGH, np.inf, min_found=0.5)


# ---------------------------------------------------------------------------------- refusals
def test_errors_name_the_cause() -> None:
    regressor = lgb.LGBMRegressor(n_estimators=3, verbose=-1).fit(FRAME, Y)
    classifier = lgb.LGBMClassifier(n_estimators=3, verbose=-1).fit(FRAME, Y > HIGH)
    ft = FeatureTweaking(regressor, progress=False).fit(FRAME)
    rows = FRAME.iloc[:2]
    with pytest.raises(InputError, match="pass desired_range"):
        ft.tweak(rows)
    with pytest.raises(InputError, match="no classes"):
        ft.tweak(rows, target=1)
    with pytest.raises(InputError, match="above high"):
        ft.tweak(rows, desired_range=(3, 2))
    with pytest.raises(InputError, match="finite low or high"):
        ft.tweak(rows, desired_range=(None, None))
    with pytest.raises(InputError, match=r"shape \(2, 2\)"):
        ft.tweak(rows, desired_range=[1, 2, 3])
    with pytest.raises(InputError, match="numbers or None"):
        ft.tweak(rows, desired_range=("high", None))
    with pytest.raises(InputError, match="for regressors"):
        FeatureTweaking(classifier, progress=False).tweak(rows, desired_range=(0, 1))
    multi_quantile = xgb.XGBRegressor(objective="reg:quantileerror", quantile_alpha=[0.2, 0.8],
                                      n_estimators=3)
    with pytest.raises(UnsupportedModelError, match="2 values per row"):
        FeatureTweaking(multi_quantile.fit(FRAME, Y)).fit()
    multi_rmse = cb.CatBoostRegressor(loss_function="MultiRMSE", iterations=3, **CB).fit(FRAME, np.c_[Y, Y])
    with pytest.raises(UnsupportedModelError, match="one model per target"):
        FeatureTweaking(multi_rmse).fit()


def test_the_walks_reach_rows_that_need_several_category_switches() -> None:
    """Three categorical features of additive effects: moving a row into the top 3% of
    predictions takes switching two or three categories at once. The beam alone misses 2 of these
    15 rows (measured: ``climbs=0``); the greedy walks reach every row the enumeration of all
    cells reaches, never below its cost, each checked by the booster's ``predict``."""
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 6, (1500, 3))
    effect = rng.normal(size=(3, 6))  # of each category of each feature
    X = np.column_stack([codes.astype(float), rng.normal(size=1500)])
    y = effect[np.arange(3), codes].sum(axis=1) + 0.3 * X[:, 3] + rng.normal(0, 0.2, 1500)
    model = lgb.LGBMRegressor(n_estimators=20, num_leaves=8, min_child_samples=5, min_data_per_group=5,
                              cat_smooth=1, max_cat_to_onehot=2, n_jobs=1, verbose=-1)
    model.fit(X, y, categorical_feature=[0, 1, 2])
    predicted = model.predict(X)
    low = float(np.quantile(predicted, 0.97))
    rows = X[predicted < np.median(predicted)][:15]
    ft = FeatureTweaking(model, n_reference=0, progress=False).fit(X)
    out = ft.tweak(rows, desired_range=(low, None))
    def reached(V: np.ndarray) -> np.ndarray:
        return np.asarray(model.predict(V)) >= low

    truth = np.array([cheapest_over_cells(ft, r, reached) for r in rows])
    assert np.isfinite(truth).all()
    cost = out["cost"].to_numpy()
    assert np.isfinite(cost).all()
    assert (cost >= truth * (1 - 1e-9)).all()
    assert (np.asarray(model.predict(out.iloc[:, :4].to_numpy(dtype=np.float64))) >= low).all()
