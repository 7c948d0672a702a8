"""Tree structures read from real models reproduce each booster's own margins and leaf ids.

Round trip: for every library and setting, ``TreeStructure.predict_margin`` equals the booster's raw
margin on training and unseen rows, and ``TreeStructure.apply`` equals its ``pred_leaf`` /
``calc_leaf_indexes`` exactly. Tolerances: XGBoost sums float32 leaf values in float32, whose
rounding is ~6e-8 relative per addition, so 100 trees leave ~1e-6 of the margin scale (measured
4e-6 absolute on margins of size ~5); LightGBM and CatBoost sum doubles (measured <= 1e-14).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import catboost as cb
import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st
from influence_gbdt.adapters import read_trees, trees_for
from influence_gbdt.adapters._cityhash import cityhash64

from influence_gbdt.errors import UnsupportedModelError
from influence_gbdt.trees import MISSING_NAN, MISSING_NONE, MISSING_ZERO, StructureBuilder, TreeStructure

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

N, N_TEST = 400, 100
# Default models apart from the thread count: one thread each, as the suite shares two cores (LightGBM
# with all threads on a loaded machine is ~70x slower on these sizes).
CB = {"verbose": 0, "allow_writing_files": False, "thread_count": 1, "random_seed": 0}
LG = {"verbose": -1, "n_jobs": 1}
XG = {"n_jobs": 1}
TOL = {"xgboost": 1e-6, "lightgbm": 1e-12, "catboost": 1e-12}  # relative to max |margin|


def _numeric(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Features with NaNs and exact zeros; binary labels; 3-class labels; regression target."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N + N_TEST, 4))
    X[::9, 1] = np.nan
    X[::5, 3] = 0.0
    score = X[:, 0] + np.nan_to_num(X[:, 1]) * X[:, 2] + rng.normal(scale=0.5, size=len(X))
    y3 = np.digitize(score, [-0.5, 0.5])
    return X, (score > 0).astype(int), y3, 2 * X[:, 0] + np.sin(X[:, 2])


def _frame(seed: int = 1) -> tuple[pd.DataFrame, np.ndarray]:
    """A DataFrame with string and integer categories (pandas categorical dtype)."""
    rng = np.random.default_rng(seed)
    n = N + N_TEST
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
            "colour": pd.Categorical(rng.choice(list("vwxyz"), n)),
            "size": pd.Categorical(rng.choice([3, 7, 11], n)),
        }
    )
    y = ((frame.a > 0) ^ frame.colour.isin(["x", "y"]) ^ (frame["size"] == 7)).astype(int).to_numpy()
    return frame, y


X, Y, Y3, YR = _numeric()
FRAME, YC = _frame()
CB_FRAME = FRAME.assign(colour=FRAME.colour.astype(str), size=FRAME["size"].astype(int))
# CatBoost's defaults turn "colour" and "size" (more values than one_hot_max_size=2) into CTRs and
# the two-valued "shift" into one-hot splits, which CTRs of combinations then include, with float
# borders; "b" has NaNs (nan_mode="Max" makes their border bits true).
CTR_FRAME = CB_FRAME.assign(shift=np.where(np.arange(N + N_TEST) % 3 == 0, "night", "day"))
CTR_CATS = ["colour", "size", "shift"]
YC_SHIFT = YC ^ ((CTR_FRAME["shift"] == "night").to_numpy() & (CTR_FRAME.a > 1).to_numpy())


def _es_xgb() -> Any:
    model = xgb.XGBClassifier(**XG, n_estimators=300, early_stopping_rounds=5)
    return model.fit(X[:300], Y[:300], eval_set=[(X[300:N], Y[300:N])], verbose=False)


def _es_lgb() -> Any:
    model = lgb.LGBMClassifier(n_estimators=300, **LG)
    with warnings.catch_warnings():  # eval_set, as users still write it (LightGBM 4.7 prefers eval_X)
        warnings.filterwarnings("ignore", "The argument 'eval_set' is deprecated")
        stop = lgb.early_stopping(5, verbose=False)
        return model.fit(X[:300], Y[:300], eval_set=[(X[300:N], Y[300:N])], callbacks=[stop])


CASES: dict[str, tuple[str, Callable[[], Any], Any]] = {
    # library, factory, rows (training rows are the first N)
    "xgb-classifier-default": ("xgboost", lambda: xgb.XGBClassifier(**XG).fit(X[:N], Y[:N]), X),
    "xgb-regressor-default": ("xgboost", lambda: xgb.XGBRegressor(**XG).fit(X[:N], YR[:N]), X),
    "xgb-multiclass": ("xgboost", lambda: xgb.XGBClassifier(**XG, n_estimators=20).fit(X[:N], Y3[:N]), X),
    "xgb-vector-leaves": (
        "xgboost",
        lambda: xgb.XGBClassifier(
            **XG, n_estimators=10, multi_strategy="multi_output_tree", tree_method="hist"
        ).fit(X[:N], Y3[:N]),
        X,
    ),
    "xgb-early-stopping": ("xgboost", _es_xgb, X),
    "xgb-categorical-partition": (
        "xgboost",
        lambda: xgb.XGBClassifier(**XG, n_estimators=20, enable_categorical=True, max_cat_to_onehot=1).fit(
            FRAME[:N], YC[:N]
        ),
        FRAME,
    ),
    "xgb-categorical-onehot": (
        "xgboost",
        lambda: xgb.XGBClassifier(**XG, n_estimators=20, enable_categorical=True, max_cat_to_onehot=8).fit(
            FRAME[:N], YC[:N]
        ),
        FRAME,
    ),
    "xgb-missing-value": (
        "xgboost",
        lambda: xgb.XGBClassifier(**XG, n_estimators=20, missing=0.0).fit(X[:N], Y[:N]),
        X,
    ),
    "xgb-exact-pruned": (
        "xgboost",
        lambda: xgb.XGBClassifier(**XG, n_estimators=10, tree_method="exact", gamma=2.0).fit(X[:N], Y[:N]),
        X,
    ),
    "xgb-poisson-booster": (
        "xgboost",
        lambda: xgb.train(
            {"objective": "count:poisson", "nthread": 1}, xgb.DMatrix(X[:N], np.round(np.exp(X[:N, 0])))
        ),
        X,
    ),
    "lgb-classifier-default": ("lightgbm", lambda: lgb.LGBMClassifier(**LG).fit(X[:N], Y[:N]), X),
    "lgb-regressor-default": ("lightgbm", lambda: lgb.LGBMRegressor(**LG).fit(X[:N], YR[:N]), X),
    "lgb-multiclass": ("lightgbm", lambda: lgb.LGBMClassifier(n_estimators=20, **LG).fit(X[:N], Y3[:N]), X),
    "lgb-early-stopping": ("lightgbm", _es_lgb, X),
    "lgb-zero-as-missing": (
        "lightgbm",
        lambda: lgb.LGBMClassifier(n_estimators=20, zero_as_missing=True, **LG).fit(X[:N], Y[:N]),
        X,
    ),
    "lgb-no-missing": (
        "lightgbm",
        lambda: lgb.LGBMClassifier(n_estimators=20, use_missing=False, **LG).fit(X[:N], Y[:N]),
        X,
    ),
    "lgb-categorical": (
        "lightgbm",
        lambda: lgb.LGBMClassifier(n_estimators=20, min_data_per_group=5, cat_smooth=1, **LG).fit(
            FRAME[:N], YC[:N]
        ),
        FRAME,
    ),
    "lgb-rf-average-output": (
        "lightgbm",
        lambda: lgb.LGBMClassifier(
            n_estimators=10, boosting_type="rf", bagging_freq=1, bagging_fraction=0.7, **LG
        ).fit(X[:N], Y[:N]),
        X,
    ),
    "cb-classifier-default": ("catboost", lambda: cb.CatBoostClassifier(**CB).fit(X[:N], Y[:N]), X),
    "cb-regressor-default": ("catboost", lambda: cb.CatBoostRegressor(**CB).fit(X[:N], YR[:N]), X),
    "cb-multiclass": (
        "catboost",
        lambda: cb.CatBoostClassifier(iterations=20, loss_function="MultiClass", **CB).fit(X[:N], Y3[:N]),
        X,
    ),
    "cb-nan-max": (
        "catboost",
        lambda: cb.CatBoostClassifier(iterations=20, nan_mode="Max", **CB).fit(X[:N], Y[:N]),
        X,
    ),
    "cb-depthwise": (
        "catboost",
        lambda: cb.CatBoostClassifier(iterations=20, grow_policy="Depthwise", depth=4, **CB).fit(
            X[:N], Y[:N]
        ),
        X,
    ),
    "cb-lossguide-multiclass": (
        "catboost",
        lambda: cb.CatBoostClassifier(
            iterations=20, grow_policy="Lossguide", max_leaves=12, loss_function="MultiClass", **CB
        ).fit(X[:N], Y3[:N]),
        X,
    ),
    "cb-onehot-categorical": (
        "catboost",
        lambda: cb.CatBoostClassifier(
            iterations=20, cat_features=["colour", "size"], one_hot_max_size=10, **CB
        ).fit(CB_FRAME[:N], YC[:N]),
        CB_FRAME,
    ),
    "cb-ctr-classifier-default": (
        "catboost",
        lambda: cb.CatBoostClassifier(cat_features=CTR_CATS, **CB).fit(CTR_FRAME[:N], YC_SHIFT[:N]),
        CTR_FRAME,
    ),
    "cb-ctr-nan-max": (
        "catboost",
        lambda: cb.CatBoostClassifier(iterations=200, cat_features=CTR_CATS, nan_mode="Max", **CB).fit(
            CTR_FRAME[:N], YC_SHIFT[:N]
        ),
        CTR_FRAME,
    ),
    "cb-ctr-regressor-default": (
        "catboost",
        lambda: cb.CatBoostRegressor(cat_features=CTR_CATS, **CB).fit(CTR_FRAME[:N], YR[:N] + YC[:N]),
        CTR_FRAME,
    ),
    "cb-ctr-multiclass-strings": (
        "catboost",
        lambda: cb.CatBoostClassifier(iterations=100, cat_features=CTR_CATS, **CB).fit(
            CTR_FRAME[:N], np.array(["low", "mid", "high"])[Y3[:N]]
        ),
        CTR_FRAME,
    ),
    "cb-ctr-buckets-counter-multiclass": (
        "catboost",
        lambda: cb.CatBoostClassifier(
            iterations=100, cat_features=CTR_CATS, simple_ctr=["Buckets", "Counter"],
            combinations_ctr=["Buckets"], loss_function="MultiClass", **CB
        ).fit(CTR_FRAME[:N], Y3[:N]),
        CTR_FRAME,
    ),
    "cb-ctr-regressor-target-borders": (
        "catboost",
        lambda: cb.CatBoostRegressor(
            iterations=100, cat_features=CTR_CATS, simple_ctr=["Borders:TargetBorderCount=3"],
            combinations_ctr=["Borders:TargetBorderCount=3"], **CB
        ).fit(CTR_FRAME[:N], YR[:N]),
        CTR_FRAME,
    ),
    "cb-ctr-depthwise": (
        "catboost",
        lambda: cb.CatBoostClassifier(
            iterations=60, grow_policy="Depthwise", depth=4, cat_features=CTR_CATS, **CB
        ).fit(CTR_FRAME[:N], YC_SHIFT[:N]),
        CTR_FRAME,
    ),
    "cb-ctr-early-stopping": (
        "catboost",
        lambda: cb.CatBoostClassifier(early_stopping_rounds=10, cat_features=CTR_CATS, **CB).fit(
            CTR_FRAME[:300], YC_SHIFT[:300], eval_set=(CTR_FRAME[300:N], YC_SHIFT[300:N])
        ),
        CTR_FRAME,
    ),
    "cb-onehot-lossguide": (
        "catboost",
        lambda: cb.CatBoostClassifier(
            iterations=20, cat_features=["colour", "size"], one_hot_max_size=10, grow_policy="Lossguide", **CB
        ).fit(CB_FRAME[:N], YC[:N]),
        CB_FRAME,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_structure_reproduces_margins_and_leaf_ids(case: str) -> None:
    library, factory, rows = CASES[case]
    reader = trees_for(factory())
    assert reader.library == library
    s = reader.structure
    Z = reader.encode(rows)
    ours, theirs = s.predict_margin(Z), reader.raw_margin(rows)
    assert ours.shape == theirs.shape == (len(rows), s.n_outputs)
    scale = max(1.0, float(np.abs(theirs).max()))
    for part in (slice(0, N), slice(N, None)):  # training rows, unseen rows
        assert np.abs(ours[part] - theirs[part]).max() <= TOL[library] * scale
    np.testing.assert_array_equal(s.apply(Z), reader.leaf_ids(rows))
    if s.objective != "regression":
        np.testing.assert_array_equal(reader.predict_index_from_margin(theirs), reader.predict_index(rows))


def test_catboost_ctrs_are_derived_columns_of_the_inputs() -> None:
    """A CTR split reads a derived column, computed from the input row with the model's stored
    tables; every element kind CatBoost hashes (categories, float borders, one-hot values) occurs in
    the default model's CTRs, and a category the tables never saw reads the prior (the booster's own
    margin on it is the check)."""
    model = cb.CatBoostClassifier(cat_features=CTR_CATS, **CB).fit(CTR_FRAME[:N], YC_SHIFT[:N])
    reader = trees_for(model)
    s = reader.structure
    assert s.derived is not None and s.n_inputs == CTR_FRAME.shape[1] < s.n_features
    assert not s.feature_is_categorical[s.n_inputs :].any()
    assert (s.derived.single_source >= 0).any() and (s.derived.single_source < 0).any()
    assert all(name.startswith("CTR ") for name in s.feature_names[s.n_inputs :])
    assert set(np.unique(s.derived._tables[1]).tolist()) >= {0, 1, 3}  # categories, floats, one-hot
    unseen = CTR_FRAME[N:].assign(colour="never-seen", size=99)
    np.testing.assert_allclose(s.predict_margin(reader.encode(unseen)), reader.raw_margin(unseen),
                               rtol=0, atol=1e-12 * max(1.0, float(np.abs(reader.raw_margin(unseen)).max())))
    Z = reader.encode(CTR_FRAME)
    full = s.complete(Z)
    np.testing.assert_array_equal(full[:, : s.n_inputs], Z)  # inputs as given
    like = s.prepare_inputs(Z[:1])[0]
    np.testing.assert_array_equal(s.prepare_inputs(Z, like), s.prepare_inputs(Z))  # a base row is a shortcut


@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    cardinalities=st.lists(st.integers(2, 12), min_size=1, max_size=3),
    task=st.sampled_from(["Logloss", "MultiClass", "RMSE"]),
    complexity=st.integers(1, 4),
    one_hot=st.integers(1, 4),
    nan_mode=st.sampled_from(["Min", "Max"]),
    ctr=st.sampled_from([None, ["Borders"], ["Counter"], ["Buckets", "Counter"], ["Borders", "Buckets"]]),
    depth=st.integers(2, 6),
    seed=st.integers(0, 2**16),
)
def test_catboost_ctr_structures_match_the_booster_on_random_models(
    cardinalities: list[int], task: str, complexity: int, one_hot: int, nan_mode: str, ctr: list[str] | None,
    depth: int, seed: int,
) -> None:
    """Random categorical data and CTR settings (types, combination depth, one-hot sizes, NaN modes,
    losses): the derived columns route training rows and unseen rows, with categories the tables
    never saw, as the booster does."""
    rng = np.random.default_rng(seed)
    n = 240
    z = np.where(rng.random(n) < 0.15, np.nan, rng.normal(size=n))
    frame = pd.DataFrame({"x": rng.normal(size=n), "z": z})
    for i, k in enumerate(cardinalities):
        frame[f"c{i}"] = rng.choice([f"v{j}" for j in range(k)], n)
    cats = [f"c{i}" for i in range(len(cardinalities))]
    signal = frame["x"] + frame[cats[0]].str[1:].astype(int) % 3 + rng.normal(scale=0.5, size=n)
    y = (signal.to_numpy() if task == "RMSE" else np.digitize(signal, [0.5, 1.5]) if task == "MultiClass"
         else (signal > 1).to_numpy().astype(int))
    buckets_need_classes = task == "RMSE" and ctr is not None and "Buckets" in ctr
    extra: dict[str, Any] = {} if ctr is None or buckets_need_classes else {"simple_ctr": ctr,
                                                                          "combinations_ctr": ctr}
    model_cls = cb.CatBoostRegressor if task == "RMSE" else cb.CatBoostClassifier
    model = model_cls(iterations=40, depth=depth, loss_function=task, cat_features=cats,
                      max_ctr_complexity=complexity, one_hot_max_size=one_hot, nan_mode=nan_mode, **extra,
                      **CB).fit(frame[:200], y[:200])
    reader = trees_for(model)
    rows = frame.copy()
    rows.loc[200:219, cats[-1]] = "never-seen"
    Z = reader.encode(rows)
    ours, theirs = reader.structure.predict_margin(Z), reader.raw_margin(rows)
    assert np.abs(ours - theirs).max() <= 1e-12 * max(1.0, float(np.abs(theirs).max()))
    np.testing.assert_array_equal(reader.structure.apply(Z), reader.leaf_ids(rows))


def test_multiclass_structure_maps_trees_to_classes() -> None:
    s = read_trees(lgb.LGBMClassifier(n_estimators=4, **LG).fit(X[:N], Y3[:N]))
    assert s.objective == "multiclass" and s.n_outputs == 3
    np.testing.assert_array_equal(s.tree_class, np.tile([0, 1, 2], 4))
    s = read_trees(cb.CatBoostClassifier(iterations=3, loss_function="MultiClass", **CB).fit(X[:N], Y3[:N]))
    assert s.n_outputs == 3 and (s.tree_class == -1).all()  # vector leaves


def test_early_stopping_reads_only_the_trees_predict_uses() -> None:
    model = _es_xgb()
    assert read_trees(model).n_trees == model.best_iteration + 1
    booster = model.get_booster()  # a plain Booster predicts with every tree
    assert read_trees(booster).n_trees == booster.num_boosted_rounds()


def test_structure_is_immutable() -> None:
    s = read_trees(lgb.LGBMClassifier(n_estimators=3, **LG).fit(X[:N], Y[:N]))
    with pytest.raises(ValueError, match="read-only"):
        s.threshold[0] = 1.0
    with pytest.raises(AttributeError):
        s.scale = 2.0  # type: ignore[misc]


def test_cityhash_matches_catboost() -> None:
    labels = ["x", "Private", "Self-emp-not-inc", "a" * 17, "b" * 40, "c" * 65, "d" * 200]
    pool = cb.Pool(np.zeros((len(labels), 1)), group_id=labels)  # CatBoost hashes group ids alike
    np.testing.assert_array_equal(
        np.asarray(pool.get_group_id_hash(), dtype=np.uint64),
        np.array([cityhash64(v.encode()) for v in labels], dtype=np.uint64),
    )


def _hand_built() -> TreeStructure:
    """One tree per rule: a numerical split per missing type, and a categorical split."""
    b = StructureBuilder(1)
    for kind, default_left, inclusive in (
        (MISSING_NAN, True, False),
        (MISSING_NONE, False, True),
        (MISSING_ZERO, True, True),
    ):
        root = b.add_node(
            feature=0, threshold=0.5, inclusive=inclusive, default_left=default_left, missing_type=kind
        )
        b.set_children(root, b.add_node(value=-1.0, leaf_id=1), b.add_node(value=1.0, leaf_id=2))
        b.end_tree(0)
    root = b.add_node(feature=1, cats=[2, 5], default_left=False)
    b.set_children(root, b.add_node(value=-1.0, leaf_id=1), b.add_node(value=1.0, leaf_id=2))
    b.end_tree(0)
    return b.build(
        n_features=2,
        feature_names=("x", "c"),
        feature_is_categorical=np.array([False, True]),
        objective="binary",
        base_margin=np.zeros(1),
    )


def test_routing_rules_of_missing_values_and_categories() -> None:
    s = _hand_built()
    rows = np.array([[0.5, 2.0], [np.nan, 5.9], [0.0, -2.0], [1e-36, np.nan], [0.7, 3.0]])
    # tree 0 (NaN missing, default left, strict <): 0.5 right; NaN left; 0 left; 1e-36 left; 0.7 right
    # tree 1 (None: NaN -> 0; <=): 0.5 left; NaN -> 0 left; 0 left; left; 0.7 right
    # tree 2 (Zero missing, default left): 0.5 left; NaN -> 0 missing left; 0 missing left; left; right
    # tree 3 (categories {2, 5} left; code = trunc): 2 left; 5.9 -> 5 left; -2 right; NaN right; 3 right
    expected = np.array([[2, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 2], [1, 1, 1, 2], [2, 2, 2, 2]])
    np.testing.assert_array_equal(s.apply(rows), expected)


def test_readers_refuse_what_they_cannot_read() -> None:
    with pytest.raises(UnsupportedModelError, match="linear_tree=True"):
        read_trees(lgb.LGBMRegressor(n_estimators=2, linear_tree=True, **LG).fit(X[:N], YR[:N]))
    with pytest.raises(UnsupportedModelError, match="BinarizedTargetMeanValue"):
        read_trees(
            cb.CatBoostClassifier(
                iterations=3, cat_features=["colour", "size"], simple_ctr=["BinarizedTargetMeanValue"], **CB
            ).fit(CB_FRAME[:N], YC[:N])
        )
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        read_trees(xgb.train({"booster": "gblinear", "nthread": 1}, xgb.DMatrix(X[:N], Y[:N]), 2))
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        read_trees(xgb.XGBClassifier(**XG))
    with pytest.raises(UnsupportedModelError, match="not trained"):
        read_trees(cb.CatBoostClassifier())
    with pytest.raises(UnsupportedModelError, match="not a supported model"):
        read_trees(object())


@pytest.mark.parametrize("objective", ["binary:logistic", "count:poisson", "reg:gamma"])
def test_xgboost_base_margin_is_the_one_xgboost_starts_from(objective: str) -> None:
    """XGBoost stores its base score through the link and derives the margin in float32 with the C
    library's ``logf``: the reader's margin is that one, bit for bit (a model of one round with
    ``learning_rate=0`` predicts its base margin everywhere)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 3))
    for seed in range(8):
        y = np.random.default_rng(seed).poisson(1.0 + seed / 3, 300).astype(float)
        y = (y > 1).astype(float) if objective == "binary:logistic" else y + 0.01 * (objective == "reg:gamma")
        cls = xgb.XGBClassifier if objective == "binary:logistic" else xgb.XGBRegressor
        zero = cls(n_estimators=1, learning_rate=0.0, objective=objective).fit(X, y)
        expected = zero.predict(X[:1], output_margin=True).astype(np.float64).ravel()
        np.testing.assert_array_equal(trees_for(zero).structure.base_margin, expected)
