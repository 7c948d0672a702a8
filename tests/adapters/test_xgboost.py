"""XGBoost adapter against XGBoost itself: self-check, refresh-updater refit, finite differences.

Ground truth is always XGBoost: its stored leaves (self-check), its ``refresh`` updater (fixed-structure
refit, leaves recomputed tree by tree at refreshed margins, base score kept) and its margins.

Tolerances. XGBoost keeps labels, weights, gradients and margins in float32 (eps32 = 1.2e-7) and
sums gradients in double. A margin is a float32 sum of ~15 float32 leaf values, so XGBoost's own
margins carry ~1e-7 * max|margin| rounding each (measured: 2e-7..7e-7 on margins of size ~5).
* Self-check: relative residual <= 1e-5 (the adapter's ``rtol``); measured 5e-8..1e-6 (alpha's
  |G| - alpha cancellation is the largest).
* Refit vs refresh: |engine - XGBoost| <= 1e-5 * max|margin| (about 20x the measured float32 noise),
  while the score itself is 100x larger than that tolerance for most rows (so it is really tested).
* Finite differences of refresh with user weight 1 +- eps, eps = 0.05: central differences err
  O(eps^2) relative (~3e-3 here, the weight response is smooth) plus float32 noise 2 * 1e-6 / (2 eps)
  = 2e-5 absolute; tolerance 2e-2 * max|derivative| + 1e-4.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from influence_gbdt.adapters import adapter_for
from influence_gbdt.adapters.xgboost import XGBoostAdapter

from influence_gbdt.engine import TestPoints
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError

# XGBoost warns that the refresh updater ignores tree_method, and that gblinear ignores max_depth.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

N, M, ROUNDS = 500, 80, 12
REFRESH = {"process_type": "update", "updater": "refresh", "refresh_leaf": True, "min_child_weight": 0}


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N + M, 6))
    logit = X[:, 0] + 0.7 * X[:, 1] ** 2 - 0.5 + rng.normal(size=N + M)
    return {
        "X": X[:N],
        "Xt": X[N:],
        "binary": (logit[:N] > 0).astype(float),
        "regression": 2 * X[:N, 0] + np.sin(2 * X[:N, 1]) + rng.normal(size=N),
        "w": rng.uniform(0.3, 3.0, N),
        "bm": 0.5 * rng.normal(size=N + M),
    }


def _train(params: dict, X, y, w=None, bm=None, rounds: int = ROUNDS) -> xgb.Booster:
    return xgb.train(params, xgb.DMatrix(X, y, weight=w, base_margin=bm), rounds)


def _refresh(bst, params, X, y, w, bm, Xt, bmt) -> np.ndarray:
    """XGBoost's own fixed-structure refit on (X, y, w), test margins of shape (m,)."""
    new = xgb.train({**params, **REFRESH}, xgb.DMatrix(X, y, weight=w, base_margin=bm), ROUNDS, xgb_model=bst)
    return new.predict(xgb.DMatrix(Xt, base_margin=bmt), output_margin=True).astype(np.float64)


# (objective, params, weighted, base_margin)
SETTINGS = [
    ("binary", {"tree_method": "hist"}, False, False),
    ("binary", {"tree_method": "approx", "lambda": 0.1, "alpha": 0.5, "max_delta_step": 1.0}, True, False),
    ("binary", {"tree_method": "exact", "gamma": 0.5, "lambda": 5.0}, True, False),
    ("binary", {"tree_method": "hist", "scale_pos_weight": 2.5, "base_score": 0.4}, True, True),
    ("regression", {"tree_method": "hist", "lambda": 3.0}, True, False),
    ("regression", {"tree_method": "exact", "alpha": 1.0, "max_delta_step": 1.5}, False, False),
    ("regression", {"tree_method": "approx"}, False, True),
]
OBJECTIVE = {"binary": "binary:logistic", "regression": "reg:squarederror"}


@pytest.mark.parametrize("target, extra, weighted, with_bm", SETTINGS)
def test_reproduces_and_matches_refresh(data, target, extra, weighted, with_bm):
    X, Xt, y = data["X"], data["Xt"], data[target]
    w = data["w"] if weighted else None
    bm, bmt = (data["bm"][:N], data["bm"][N:]) if with_bm else (None, None)
    params = {"objective": OBJECTIVE[target], "max_depth": 4, "eta": 0.3, **extra}
    bst = _train(params, X, y, w, bm)
    adapter = XGBoostAdapter(bst)
    engine = adapter.prepare(X, y, w, bm)
    assert engine.relative_residual < 1e-5

    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt, bmt))
    f_xgb = adapter.raw_predict(Xt, bmt)
    scale = np.abs(f_xgb).max()
    np.testing.assert_allclose(engine.predict_margin(test), f_xgb, rtol=0, atol=1e-5 * scale)

    rows = np.random.default_rng(1).choice(N, 10, replace=False)
    refit = engine.leaf_refit(test, rows=rows, refit_base=False, on="prediction")
    user_w = np.ones(N) if w is None else w
    for r, i in enumerate(rows):
        keep = np.arange(N) != i
        ref = _refresh(bst, params, X[keep], y[keep], user_w[keep], None if bm is None else bm[keep], Xt, bmt)
        np.testing.assert_allclose(refit[r], f_xgb - ref, rtol=0, atol=1e-5 * scale)
    assert np.median(np.abs(refit).max(axis=1)) > 100 * 1e-5 * scale  # the scores are not noise

    eps = 0.05
    infl = engine.leaf_influence(test, rows=rows[:3], refit_base=False, on="prediction")
    for r, i in enumerate(rows[:3]):
        margins = []
        for sign in (1, -1):
            w2 = user_w.copy()
            w2[i] += sign * eps
            margins.append(_refresh(bst, params, X, y, w2, bm, Xt, bmt))
        fd = (margins[0] - margins[1]) / (2 * eps)
        assert np.abs(fd).max() > 1e-3  # the row moves some test margin: a real comparison
        np.testing.assert_allclose(infl[r], fd, rtol=0, atol=2e-2 * np.abs(fd).max() + 1e-4)


def test_base_score_refit_matches_xgboost_estimate(data):
    """base_rule="mean": XGBoost re-estimates the base score as the weighted label mean."""
    X, y, w = data["X"], data["binary"], data["w"]
    params = {"objective": "binary:logistic", "max_depth": 3}
    engine = XGBoostAdapter(_train(params, X, y, w)).prepare(X, y, w)
    assert engine.ensemble.base_rule == "mean"
    rows = np.array([0, 5, 17])
    _, base = engine.refit_leaf_values(rows, refit_base=True)
    for b, i in zip(base, rows, strict=True):
        keep = np.arange(N) != i
        cfg = json.loads(_train(params, X[keep], y[keep], w[keep], rounds=1).save_config())
        p = float(json.loads(cfg["learner"]["learner_model_param"]["base_score"])[0])
        assert abs(b - np.log(p / (1 - p))) < 1e-6
    for fixed in ({"base_score": 0.5}, {"scale_pos_weight": 2.0}):
        bst = _train({**params, **fixed}, X, y, w)
        assert XGBoostAdapter(bst).prepare(X, y, w).ensemble.base_rule == "fixed"


def test_sklearn_wrappers_booster_and_dataframe_agree(data):
    X, Xt, y, w = data["X"], data["Xt"], data["binary"], data["w"]
    kw = {"n_estimators": ROUNDS, "max_depth": 3, "learning_rate": 0.2, "reg_lambda": 2.0}
    rows = np.arange(10)
    for cls, target in ((xgb.XGBClassifier, "binary"), (xgb.XGBRegressor, "regression")):
        y = data[target]
        model = cls(**kw).fit(X, y, sample_weight=w)
        scores = []
        for m, Xin, Xtin in (
            (model, X, Xt),
            (model.get_booster(), X, Xt),
            (model, pd.DataFrame(X, columns=[f"f{j}" for j in range(6)]), pd.DataFrame(Xt)),
        ):
            adapter = adapter_for(m)
            engine = adapter.prepare(Xin, y, w)
            test = TestPoints(leaf_index=adapter.leaf_indices(Xtin), offset=adapter.init_offset(Xtin))
            np.testing.assert_allclose(engine.predict_margin(test), adapter.raw_predict(Xtin), atol=1e-5)
            scores.append(engine.leaf_influence(test, rows=rows, refit_base=True, on="prediction"))
        np.testing.assert_array_equal(scores[0], scores[1])
        np.testing.assert_array_equal(scores[0], scores[2])


def test_categorical_dataframe(data):
    X, y = data["X"], data["binary"]
    df = pd.DataFrame(X[:, :4], columns=list("abcd"))
    df["cat"] = pd.Categorical(np.where(X[:, 4] > 0.3, "u", np.where(X[:, 5] > 0, "v", "z")))
    model = xgb.XGBClassifier(n_estimators=8, max_depth=3, enable_categorical=True, tree_method="hist")
    model.fit(df, y)
    assert XGBoostAdapter(model).prepare(df, y).relative_residual < 1e-5


def test_wrong_data_is_refused(data):
    X, y, w = data["X"], data["binary"], data["w"]
    adapter = XGBoostAdapter(_train({"objective": "binary:logistic", "max_depth": 4}, X, y, w))
    perm = np.random.default_rng(0).permutation(N)
    with pytest.raises(ReproductionError, match="training rows in training order"):
        adapter.prepare(X[perm], y, w)
    with pytest.raises(ReproductionError, match="labels, sample weights"):
        adapter.prepare(X, 1 - y, w)
    with pytest.raises(ReproductionError, match="not reproduced"):
        adapter.prepare(X, y)  # weights missing
    with pytest.raises(InputError, match="rows"):
        adapter.prepare(X[:-1], y, w)


def test_reloaded_model_needs_params(data, tmp_path):
    X, Xt, y = data["X"], data["Xt"], data["regression"]
    params = {"objective": "reg:squarederror", "eta": 0.1, "lambda": 2.0, "max_depth": 3}
    bst = _train(params, X, y)
    bst.save_model(tmp_path / "m.json")
    loaded = xgb.Booster(model_file=tmp_path / "m.json")
    with pytest.raises(ReproductionError, match=r"load_model.*params="):
        XGBoostAdapter(loaded).prepare(X, y)
    adapter = XGBoostAdapter(loaded, params={"learning_rate": 0.1, "reg_lambda": 2.0})
    engine = adapter.prepare(X, y)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt))
    reference = (
        XGBoostAdapter(bst).prepare(X, y).leaf_refit(test, rows=[3, 4], refit_base=False, on="prediction")
    )
    np.testing.assert_allclose(
        engine.leaf_refit(test, rows=[3, 4], refit_base=False, on="prediction"), reference
    )
    with pytest.raises(InputError, match="not used"):
        XGBoostAdapter(loaded, params={"etaa": 0.1})


@pytest.mark.parametrize(
    "params, match",
    [
        ({"subsample": 0.7}, "subsample=0.7.*Retrain with subsample=1"),
        ({"booster": "dart"}, "booster='dart'.*Retrain with booster='gbtree'"),
        ({"booster": "gblinear"}, "booster='gblinear'"),
        ({"monotone_constraints": "(1,0,0,0,0,-1)"}, "monotone_constraints"),
        ({"num_parallel_tree": 3}, "num_parallel_tree"),
        ({"objective": "reg:absoluteerror"}, "'reg:absoluteerror' is not supported yet"),
        ({"objective": "multi:softprob", "num_class": 3}, "'multi:softprob' is not supported yet"),
    ],
)
def test_unsupported_settings_are_refused(data, params, match):
    X = data["X"][:200]
    y = np.arange(200) % 3 if "num_class" in params else data["binary"][:200]
    bst = _train({"objective": "binary:logistic", "max_depth": 2, **params}, X, y, rounds=2)
    with pytest.raises(UnsupportedModelError, match=match):
        XGBoostAdapter(bst)


def test_unfitted_and_foreign_models_are_refused():
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        XGBoostAdapter(xgb.XGBClassifier())
    with pytest.raises(UnsupportedModelError, match="not trained"):
        XGBoostAdapter(xgb.Booster())
    with pytest.raises(UnsupportedModelError, match="XGBClassifier, XGBRegressor or Booster"):
        XGBoostAdapter(xgb.XGBRanker())
    with pytest.raises(UnsupportedModelError, match=r"subsample=0\.5"):
        XGBoostAdapter(xgb.XGBRegressor(n_estimators=2, subsample=0.5).fit(np.eye(5), np.arange(5.0)))
    bst = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(np.eye(5), np.arange(5.0)), 2)
    with pytest.raises(UnsupportedModelError, match=r"subsample=0\.5"):
        XGBoostAdapter(bst, params={"subsample": 0.5})  # a reloaded model's lost setting, stated


def test_sklearn_missing_value_is_the_one_prediction_uses(data):
    # XGBClassifier(missing=0): rows holding 0 go where predict sends them, not down the NaN branch.
    X = np.round(data["X"]).astype(float)  # about 40% exact zeros
    Xt = np.round(data["Xt"]).astype(float)
    model = xgb.XGBClassifier(n_estimators=8, max_depth=3, missing=0.0).fit(X, data["binary"])
    adapter = adapter_for(model)
    engine = adapter.prepare(X, data["binary"])
    np.testing.assert_allclose(engine.train_margin, model.predict(X, output_margin=True), atol=1e-5)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(engine.predict_margin(test), model.predict(Xt, output_margin=True), atol=1e-5)
    # A Booster does not record it: pass it back like the other lost parameters.
    booster = model.get_booster()
    with pytest.raises(ReproductionError):
        XGBoostAdapter(booster).prepare(X, data["binary"])
    assert XGBoostAdapter(booster, {"missing": 0.0}).prepare(X, data["binary"]).relative_residual < 1e-5
