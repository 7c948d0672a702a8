"""XGBoost adapter against XGBoost itself: self-check, refresh-updater refit, finite differences.

Ground truth is always XGBoost: its stored leaves (self-check), its ``refresh`` updater (fixed-structure
refit, leaves recomputed tree by tree at refreshed margins, base score kept), its margins, its own base
score estimate and, for the scikit-learn models users have, retraining from scratch.

Tolerances. XGBoost keeps labels, weights, gradients and margins in float32 (eps32 = 1.2e-7) and
sums gradients in double. A margin is a float32 sum of ~15 float32 leaf values, so XGBoost's own
margins carry ~1e-7 * max|margin| rounding each (measured: 2e-7..7e-7 on margins of size ~5).
* Self-check: the adapter's (relative residual <= ``rtol`` = 1e-6, else every leaf within 2 of its
  float32 rounding bounds); measured here 5e-8..1e-6 relative (alpha's |G| - alpha cancellation is
  the largest).
* Refit vs refresh (one row deleted, and a group of 40 deleted together):
  |engine - XGBoost| <= 1e-5 * max|margin| (about 20x the measured float32 noise),
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
from boosters import trained_or_skip
from influence_gbdt.adapters import adapter_for
from influence_gbdt.adapters.xgboost import XGBoostAdapter, rounding_units
from xgboost_helpers import margin_tol

from influence_gbdt import BoostingInfluence
from influence_gbdt.engine import TestPoints
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError
from influence_gbdt.validation import structure_report

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
    return xgb.train({"nthread": 1, **params}, xgb.DMatrix(X, y, weight=w, base_margin=bm), rounds)


def _refresh(bst, params, X, y, w, bm, Xt, bmt) -> np.ndarray:
    """XGBoost's own fixed-structure refit on (X, y, w), test margins of shape (m,)."""
    dtrain = xgb.DMatrix(X, y, weight=w, base_margin=bm)
    new = xgb.train({"nthread": 1, **params, **REFRESH}, dtrain, ROUNDS, xgb_model=bst)
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

    group = np.random.default_rng(2).choice(N, 40, replace=False)  # deleted together
    keep = ~np.isin(np.arange(N), group)
    bm_kept = None if bm is None else bm[keep]
    without = adapter.describe(X[keep], y[keep], None if w is None else w[keep], bm_kept)
    ref = _refresh(bst, params, X[keep], y[keep], user_w[keep], bm_kept, Xt, bmt)
    together = engine.group_refit(test, without, refit_base=False, on="prediction")
    np.testing.assert_allclose(together, f_xgb - ref, rtol=0, atol=1e-5 * scale)
    assert np.abs(together).max() > 100 * 1e-5 * scale

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


def _stored_base_margin(bst: xgb.Booster, logistic: bool) -> float:
    cfg = json.loads(bst.save_config())
    b = float(json.loads(cfg["learner"]["learner_model_param"]["base_score"])[0])
    return float(np.log(b / (1 - b))) if logistic else b


@pytest.mark.parametrize(
    "target, extra, rule",
    [
        ("binary", {}, "mean"),  # weighted label mean
        ("binary", {"scale_pos_weight": 3.0}, "newton_step"),  # one Newton step from 0, weights w*spw
        ("integers", {}, "mean"),
        ("integers", {"scale_pos_weight": 2.0}, "newton_step"),  # spw also weights label-1 rows here
        ("binary", {"base_score": 0.5}, "fixed"),
        ("binary", {"scale_pos_weight": 3.0, "base_score": 0.4}, "fixed"),
    ],
)
def test_base_score_refit_matches_xgboost_estimate(data, target, extra, rule):
    """The base score without a row is XGBoost's own estimate on the data without it."""
    X, w = data["X"], data["w"]
    y = np.round(data["regression"]) if target == "integers" else data["binary"]
    assert np.sum(y == 1) > 50
    params = {"objective": OBJECTIVE.get(target, "reg:squarederror"), "max_depth": 3, **extra}
    engine = XGBoostAdapter(_train(params, X, y, w)).prepare(X, y, w)
    assert engine.ensemble.base_rule == rule
    rows = np.array([0, 5, 17, 33])
    assert len(set(y[rows] == 1)) == 2  # rows of both weight groups (label 1 and not)
    _, base = engine.refit_leaf_values(rows, refit_base=True)
    for b, i in zip(base, rows, strict=True):
        keep = np.arange(N) != i
        retrained = _train(params, X[keep], y[keep], w[keep], rounds=1)
        expected = _stored_base_margin(retrained, target == "binary")
        assert abs(b - expected) < 1e-6 * max(1.0, abs(expected))  # stored as float32
    if rule == "fixed":
        np.testing.assert_array_equal(base, engine.ensemble.base_margin[0])


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


def test_leaf_indices_read_in_row_chunks_equal_one_read(data, monkeypatch):
    """Large inputs are read _LEAF_ROWS rows at a time; with chunks of 7 rows, arrays, DataFrames and
    sparse matrices give the leaves of one whole read, and the model is still reproduced."""
    import influence_gbdt.adapters.xgboost as module
    import scipy.sparse

    X, y = data["X"], data["binary"]
    model = xgb.XGBClassifier(n_estimators=ROUNDS, max_depth=3).fit(X, y)
    adapter = adapter_for(model)
    inputs = (X, pd.DataFrame(X, columns=[f"f{j}" for j in range(6)]), scipy.sparse.csr_matrix(X))
    whole = [adapter.leaf_indices(x) for x in inputs]
    monkeypatch.setattr(module, "_LEAF_ROWS", 7)
    for x, expected in zip(inputs, whole, strict=True):
        np.testing.assert_array_equal(adapter.leaf_indices(x), expected)
    assert adapter.prepare(X, y).relative_residual < adapter.rtol


def test_small_inputs_are_predicted_on_one_thread_alike(data, monkeypatch):
    """Small inputs are predicted on one thread (``adapters.base.one_thread``: a one-thread DMatrix
    and a one-thread copy of the booster; XGBoost's threads slow the engine's sweep that follows):
    the same leaves and margins as on XGBoost's threads and as the model's own predict, and the
    user's booster keeps its settings."""
    import influence_gbdt.adapters.base as base

    X, y = data["X"], data["binary"]
    model = xgb.XGBClassifier(n_estimators=ROUNDS, max_depth=3, n_jobs=2).fit(X, y)
    config = model.get_booster().save_config()
    adapter = adapter_for(model)
    assert base.one_thread(X.shape[0], ROUNDS)
    leaves, margins = adapter.leaf_indices(X), adapter.raw_predict(X)
    monkeypatch.setattr(base, "ONE_THREAD_ROW_TREES", 0)  # every input on XGBoost's threads
    np.testing.assert_array_equal(adapter.leaf_indices(X), leaves)
    np.testing.assert_array_equal(adapter.raw_predict(X), margins)
    np.testing.assert_array_equal(margins, model.predict(X, output_margin=True))
    assert model.get_booster().save_config() == config
    assert xgb.get_config()["nthread"] == 0


def test_categorical_dataframe(data):
    X, y = data["X"], data["binary"]
    df = pd.DataFrame(X[:, :4], columns=list("abcd"))
    df["cat"] = pd.Categorical(np.where(X[:, 4] > 0.3, "u", np.where(X[:, 5] > 0, "v", "z")))
    model = xgb.XGBClassifier(n_estimators=8, max_depth=3, enable_categorical=True, tree_method="hist")
    model.fit(df, y)
    assert XGBoostAdapter(model).prepare(df, y).relative_residual < 1e-5
    ex = BoostingInfluence(model, progress=False).fit(df, y)
    test = df.iloc[:30].copy()

    def margins(rows):
        return ex.engine_.predict_margin(ex._test_points(rows, None, "prediction", None))

    # Categories in another order, or only those that occur, are re-coded by value, as XGBoost does;
    # an array of the training codes is read as codes by both.
    reordered = test.assign(cat=pd.Categorical(test["cat"].astype(str), categories=["z", "v", "u"]))
    codes = test.assign(cat=test["cat"].cat.codes).to_numpy()
    for rows in (test, reordered, codes):
        np.testing.assert_allclose(margins(rows), model.predict(rows, output_margin=True), rtol=0, atol=1e-6)
    # Integer codes or strings in a DataFrame column: XGBoost's predict refuses them, and so do we,
    # naming the column (integer codes were once scored as numbers, with other margins).
    for wrong in (test.assign(cat=test["cat"].cat.codes), test.assign(cat=test["cat"].astype(str))):
        with pytest.raises(Exception):  # noqa: B017 -- XGBoostError or ValueError, the booster's own
            model.predict(wrong)
        with pytest.raises(InputError, match=r"\['cat'\] are categorical features of the model"):
            ex.score_training_points(wrong, y[:30])
    with pytest.raises(InputError, match=r"\['a'\] are numeric features of the model but 'category'"):
        ex.score_training_points(test.assign(a=pd.Categorical(test["a"])), y[:30])


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
        ({"objective": "reg:squaredlogerror"}, "'reg:squaredlogerror' is not supported: its hessian floor"),
        ({"objective": "binary:hinge"}, "'binary:hinge' is not supported"),
    ],
)
def test_unsupported_settings_are_refused(data, params, match):
    X = data["X"][:200]
    y = data["binary"][:200]
    bst = _train({"objective": "binary:logistic", "max_depth": 2, **params}, X, y, rounds=2)
    with pytest.raises(UnsupportedModelError, match=match):
        XGBoostAdapter(bst)


def test_unfitted_and_foreign_models_are_refused():
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        XGBoostAdapter(xgb.XGBClassifier())
    with pytest.raises(UnsupportedModelError, match="not trained"):
        XGBoostAdapter(xgb.Booster())
    with pytest.raises(UnsupportedModelError, match="DaskXGBRegressor or Booster"):
        XGBoostAdapter(xgb.XGBRanker())
    with pytest.raises(UnsupportedModelError, match=r"subsample=0\.5"):
        XGBoostAdapter(xgb.XGBRegressor(n_estimators=2, subsample=0.5).fit(np.eye(5), np.arange(5.0)))
    bst = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(np.eye(5), np.arange(5.0)), 2)
    with pytest.raises(UnsupportedModelError, match=r"subsample=0\.5"):
        XGBoostAdapter(bst, params={"subsample": 0.5})  # a reloaded model's lost setting, stated


def test_custom_objectives_are_refused(data):
    """A Python objective's gradients are not in the model, and XGBoost estimates no base score for
    it (0.5 stays): re-estimating one would move every row's score (measured: 20-50x off). The
    scikit-learn model names it; a Booster's base score is not the one the rule gives its labels."""
    X, y = data["X"][:300], data["regression"][:300] + 3.0

    def squared_error(y_true, pred, sample_weight=None):
        return pred - y_true, np.ones_like(pred)

    with pytest.raises(UnsupportedModelError, match="custom objective"):
        XGBoostAdapter(xgb.XGBRegressor(objective=squared_error, n_estimators=3).fit(X, y))
    bst = xgb.train({"max_depth": 2}, xgb.DMatrix(X, y), 3,
                    obj=lambda p, d: (p - d.get_label(), np.ones_like(p)))
    with pytest.raises(ReproductionError, match=r"base margin \[0\.5\].*custom objective"):
        XGBoostAdapter(bst).prepare(X, y)


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


# -- The models users have: plain scikit-learn wrappers, against XGBoost's own predict and retraining.
#
# Tolerance for margins (the engine's vs XGBoost's, and score vs retraining). XGBoost adds the T trees'
# float32 leaves into a float32 margin: each addition rounds by up to eps32 / 2 * |margin| (sd about
# eps32 * |margin| / sqrt(12)), so a margin carries sqrt(T) * 0.3 * eps32 * max|margin| of noise; a
# score compares two such margins plus the engine's leaves, which differ from XGBoost's by the
# self-check residual (float64 vs float32 gradients, the same order). ``margin_tol`` is 4 sqrt(T)
# eps32 max(1, max|margin|), about 10 sd: 2.4e-5 for 100 trees and margins of 5. Measured: at most
# 3.1e-6 (100 trees) and 6.8e-7 (14 trees), while the compared scores reach 1e-2 to 1e-1.
# Finite differences with weight 1 +- EPS: the margin tolerance over 2 EPS (twice, divided by 2 EPS)
# plus the central-difference truncation O(EPS^2) relative; measured at most 3.3e-5 against
# derivatives of 1e-2 to 4e-2.
EPS = 0.05
N_USER = 400


@pytest.fixture(scope="module")
def cells() -> dict[str, object]:
    """Two features of 2 and 5 levels (10 cells), 400 training rows, 200 validation rows.

    Few distinct values keep XGBoost's histogram cuts and most split choices unchanged when one row
    is deleted, so that retraining without a row keeps every tree for several rows (Assumption 1):
    on data with continuous features no row of a 100-tree depth-6 model keeps it.
    """
    rng = np.random.default_rng(0)
    n = N_USER + 200
    X = np.column_stack([rng.integers(0, 2, n), rng.integers(0, 5, n)]).astype(float)
    binary = (1.3 * X[:, 0] - 0.6 * X[:, 1] + 0.5 + 0.8 * rng.normal(size=n) > 0).astype(int)
    regression = X[:, 0] + np.sin(X[:, 1]) + rng.normal(size=n)
    return {
        "X": X,
        "Xt": np.array([[a, b] for a in range(2) for b in range(5)], dtype=float),  # every cell
        "binary": binary,
        "regression": regression,
        "w": rng.uniform(0.5, 2.0, N_USER),
        "columns": ["tenure", "plan"],
    }


# name: (estimator class, constructor arguments, target, weighted, pandas, early stopping)
USER_MODELS = {
    "XGBClassifier()": (xgb.XGBClassifier, {}, "binary", False, False, False),
    "XGBRegressor()": (xgb.XGBRegressor, {}, "regression", False, False, False),
    "pandas": (xgb.XGBClassifier, {}, "binary", False, True, False),
    "sample_weight": (xgb.XGBClassifier, {}, "binary", True, False, False),
    "scale_pos_weight": (xgb.XGBClassifier, {"scale_pos_weight": 3.0}, "binary", False, False, False),
    "early_stopping": (xgb.XGBClassifier, {"early_stopping_rounds": 5, "n_estimators": 500}, "binary",
                       False, False, True),
    "early_stopping_regressor": (xgb.XGBRegressor, {"early_stopping_rounds": 5, "n_estimators": 500},
                                 "regression", False, True, True),
}


def _user_model(cells, name):
    cls, kwargs, target, weighted, pandas, early = USER_MODELS[name]
    X, Xt, y = cells["X"], cells["Xt"], cells[target]
    if pandas:
        X, Xt = pd.DataFrame(X, columns=cells["columns"]), pd.DataFrame(Xt, columns=cells["columns"])
    w = cells["w"] if weighted else None
    fit = {"eval_set": [(X[N_USER:], y[N_USER:])], "verbose": False} if early else {}
    model = cls(**kwargs).fit(X[:N_USER], y[:N_USER], sample_weight=w, **fit)
    return model, X[:N_USER], Xt, y[:N_USER], w


def _retrain(model, n_rounds, X, y, w, rows=None):
    """The same estimator and parameters, trained for ``n_rounds`` rounds on ``rows`` of (X, y, w).

    One thread: the thread count does not change an XGBoost model, and it is 10x faster on a busy
    machine."""
    params = {**model.get_params(), "n_estimators": n_rounds, "early_stopping_rounds": None, "n_jobs": 1}
    rows = np.arange(len(y)) if rows is None else rows
    take = (lambda a: a.iloc[rows]) if isinstance(X, pd.DataFrame) else (lambda a: a[rows])
    return type(model)(**params).fit(take(X), y[rows], sample_weight=None if w is None else w[rows])


@pytest.mark.parametrize("name", list(USER_MODELS))
def test_user_models_explain_predict_and_match_retraining(cells, name):
    """Explained margins == the model's own predict(output_margin=True) on train and test rows;
    leaf_refit == retraining without the row, leaf_influence == finite differences of retraining,
    wherever the retrained model keeps every tree's structure."""
    model, X, Xt, y, w = _user_model(cells, name)
    adapter = adapter_for(model)
    engine = adapter.prepare(X, y, w)
    n_rounds = adapter.n_rounds
    booster = model.get_booster()
    if USER_MODELS[name][-1]:  # early stopping: predict uses best_iteration + 1 of the rounds held
        assert n_rounds == booster.best_iteration + 1 < booster.num_boosted_rounds()
    else:
        assert n_rounds == booster.num_boosted_rounds() == (model.n_estimators or 100)
    f_train, f_test = model.predict(X, output_margin=True), model.predict(Xt, output_margin=True)
    tol = margin_tol(n_rounds, f_train, f_test)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(engine.train_margin, f_train, rtol=0, atol=tol)
    np.testing.assert_allclose(engine.predict_margin(test), f_test, rtol=0, atol=tol)

    original = booster[:n_rounds]
    probe = np.array([0, 1, 2, 3, 5, 6, 7])  # row 4 repeats row 3 (same cell and label)
    refit = engine.leaf_refit(test, rows=probe, on="prediction")  # update_set all_points, base refit
    kept: list[int] = []
    for r, i in enumerate(probe):
        keep = np.arange(N_USER) != i
        retrained = _retrain(model, n_rounds, X, y, w, np.flatnonzero(keep))
        if not structure_report(original, retrained.get_booster(), X, keep, Xt)["same"]:
            continue
        kept.append(r)
        f_without = retrained.predict(Xt, output_margin=True)
        atol = margin_tol(n_rounds, f_test, f_without)
        np.testing.assert_allclose(refit[r], f_test - f_without, rtol=0, atol=atol)
        assert np.abs(refit[r]).max() > 100 * tol  # a real comparison, not two roundings
    assert len(kept) >= 2, f"only rows {probe[kept]} of {probe} keep the structure"

    # The most influential kept rows whose +-EPS retrains also keep the structure.
    v = np.ones(N_USER) if w is None else w
    compared, largest = 0, 0.0
    for r in sorted(kept, key=lambda r: -np.abs(refit[r]).max())[:3]:
        i = probe[r]
        margins = []
        for sign in (1, -1):
            v2 = v.copy()
            v2[i] += sign * EPS
            retrained = _retrain(model, n_rounds, X, y, v2)
            if structure_report(original, retrained.get_booster(), X, None, Xt)["same"]:
                margins.append(retrained.predict(Xt, output_margin=True).astype(np.float64))
        if len(margins) < 2:
            continue
        fd = (margins[0] - margins[1]) / (2 * EPS)
        fd_tol = tol / EPS + EPS**2 * np.abs(fd).max()
        influence = engine.leaf_influence(test, rows=[i], on="prediction")[0]
        np.testing.assert_allclose(influence, fd, rtol=0, atol=fd_tol)
        largest = max(largest, np.abs(fd).max() / fd_tol)
        compared += 1
    assert compared >= 1
    assert largest > 10  # the derivatives are well above the tolerance


def test_early_stopping_explains_the_rounds_predict_uses(cells, tmp_path):
    """sklearn predict uses best_iteration + 1 rounds whenever the booster has the attribute (also
    when early stopping never fired, and after load_model); Booster.predict uses every tree."""
    X, Xt, y = cells["X"][:N_USER], cells["Xt"], cells["binary"][:N_USER]
    valid = {"eval_set": [(cells["X"][N_USER:], cells["binary"][N_USER:])], "verbose": False}
    stopped = xgb.XGBClassifier(n_estimators=500, early_stopping_rounds=5).fit(X, y, **valid)
    never_fired = xgb.XGBClassifier(n_estimators=20, early_stopping_rounds=50).fit(X, y, **valid)
    stopped.save_model(tmp_path / "m.json")
    reloaded = xgb.XGBClassifier()
    reloaded.load_model(tmp_path / "m.json")
    dtrain, dvalid = xgb.DMatrix(X, y), xgb.DMatrix(*valid["eval_set"][0])
    booster = xgb.train({"objective": "binary:logistic", "nthread": 1}, dtrain, 500, evals=[(dvalid, "v")],
                        early_stopping_rounds=5, verbose_eval=False)
    best = booster[: booster.best_iteration + 1]  # how a Booster user picks the best iteration

    def booster_margin(b):
        return lambda Z: b.predict(xgb.DMatrix(Z), output_margin=True)

    cases = [
        (stopped, lambda Z: stopped.predict(Z, output_margin=True), stopped.best_iteration + 1),
        (never_fired, lambda Z: never_fired.predict(Z, output_margin=True), never_fired.best_iteration + 1),
        (reloaded, lambda Z: reloaded.predict(Z, output_margin=True), stopped.best_iteration + 1),
        (booster, booster_margin(booster), booster.num_boosted_rounds()),
        (best, booster_margin(best), booster.best_iteration + 1),
    ]
    assert never_fired.get_booster().num_boosted_rounds() == 20 > never_fired.best_iteration + 1
    assert stopped.get_booster().num_boosted_rounds() > stopped.best_iteration + 1
    for model, margin, rounds in cases:
        adapter = adapter_for(model)
        assert adapter.n_rounds == rounds
        engine = adapter.prepare(X, y)
        assert engine.ensemble.n_trees == rounds
        f_train, f_test = margin(X), margin(Xt)
        tol = margin_tol(rounds, f_train, f_test)
        np.testing.assert_allclose(engine.train_margin, f_train, rtol=0, atol=tol)
        test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
        np.testing.assert_allclose(engine.predict_margin(test), f_test, rtol=0, atol=tol)
        np.testing.assert_allclose(adapter.raw_predict(Xt), f_test, rtol=0, atol=0)
    every_tree = booster_margin(stopped.get_booster())(Xt)
    assert np.abs(every_tree - stopped.predict(Xt, output_margin=True)).max() > 1e-2  # what was explained


def test_root_only_trees_storing_zero_are_reproduced(cells):
    """Weights normalised to sum 1: each tree's hessian sum is below min_child_weight = 1, so XGBoost
    grows root-only trees and stores 0 (CalcWeight). Deleting a row only lowers H: they stay 0."""
    X, y = cells["X"][:N_USER], cells["binary"][:N_USER]
    w = np.full(N_USER, 1.0 / N_USER)
    model = xgb.XGBClassifier(n_estimators=10).fit(X, y, sample_weight=w)
    engine = adapter_for(model).prepare(X, y, w)
    assert engine.residual == 0 and np.all(engine.ensemble.learning_rate == 0)
    values, base = engine.refit_leaf_values([0, 1])
    assert np.all(values == 0)
    keep = np.arange(N_USER) != 0
    retrained = _retrain(model, 10, X, y, w, np.flatnonzero(keep))
    f_without = retrained.predict(cells["Xt"], output_margin=True)
    np.testing.assert_allclose(f_without, base[0], rtol=0, atol=1e-6)  # only the re-estimated base


def test_self_check_follows_float32_rounding_not_a_fixed_tolerance(cells):
    """XGBoost's float32 rounding grows with the rows that share a margin: on 5,000 rows of rounded
    features the relative residual passes rtol, yet every leaf is within its rounding bound. A model
    whose every leaf is rounding noise (weights 0.02: no tree can split, G ~ 0) passes too. Wrong
    data is refused as far above rounding."""
    rng = np.random.default_rng(3)
    X = np.round(rng.normal(size=(5000, 4)))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    adapter = adapter_for(xgb.XGBClassifier(n_jobs=1).fit(X, y))
    engine = adapter.prepare(X, y)
    assert engine.relative_residual > adapter.rtol
    assert rounding_units(engine).max() < 0.6  # measured; ROUNDING_UNITS is 2
    flipped = y.copy()
    flipped[7] = 1 - flipped[7]
    with pytest.raises(ReproductionError, match="far above float32 rounding"):
        adapter.prepare(X, flipped)

    Xc, yc = cells["X"][:N_USER], cells["binary"][:N_USER]
    w = np.full(N_USER, 0.02)
    adapter = adapter_for(xgb.XGBClassifier(n_estimators=20).fit(Xc, yc, sample_weight=w))
    engine = adapter.prepare(Xc, yc, w)
    assert engine.relative_residual > 0.1  # every stored leaf is ~1e-8 of noise
    assert rounding_units(engine).max() < 0.6
    w_off = w.copy()
    w_off[0] *= 1.01
    with pytest.raises(ReproductionError, match=r"times its float32 rounding bound"):
        adapter.prepare(Xc, yc, w_off)


def test_logistic_labels_of_one_class(data):
    """All labels 0: XGBoost stores base score 0 and starts from logit(1e-6) = -13.8 (its clip);
    the hessians p(1-p) ~ 1e-6 leave every tree a root storing 0."""
    X = data["X"]
    y = np.zeros(N)
    booster = trained_or_skip(lambda: _train({"objective": "binary:logistic"}, X, y, rounds=5))
    adapter = XGBoostAdapter(booster)
    engine = adapter.prepare(X, y)
    assert engine.ensemble.base_rule == "fixed" and engine.residual == 0
    np.testing.assert_allclose(engine.train_margin, adapter.raw_predict(X), rtol=0, atol=1e-6)
    assert adapter.raw_predict(X)[0] == pytest.approx(-13.8155, abs=1e-4)
