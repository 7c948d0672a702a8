"""Influence scores against real leave-one-out retraining with each booster (issue 7).

Small studies (300 training rows, 2 integer features with 4 values, 30 trees, 30 removed rows) that
run in a few seconds each on 2 cores. Low-capacity settings (stumps / 4 leaves, few features with few
distinct values) make near-ties between candidate splits rare, so that removing one row keeps the
whole structure for a fair share of rows; there LeafRefit must equal the real change. The agreement
floors below are set a little under the values measured with these seeds (stated next to each) and
were not loosened to make a failing run pass.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from influence_gbdt.validation import (
    TrainingRecipe,
    derivative_study,
    loo_study,
    ndcg_at_k,
    removal_curve,
    same_structure,
    write_report,
)

METHODS = (
    ("leaf_refit", "all_points", None),
    ("leaf_refit", "single_point", None),
    ("leaf_refit", "top_k_leaves", 1),
    ("leaf_influence", "all_points", None),
    ("leaf_influence", "single_point", None),
    ("leaf_influence", "top_k_leaves", 1),
)


def _data(seed: int = 0, n: int = 300, m: int = 100, d: int = 2):
    rng = np.random.default_rng(seed)

    def gen(k: int):
        Z = rng.integers(0, 4, size=(k, d)).astype(float)
        p = 1.0 / (1.0 + np.exp(-(1.5 * Z[:, 0] - Z[:, 1] - 1.0)))
        return Z, (rng.random(k) < p).astype(float)

    X, y = gen(n)
    Xt, yt = gen(m)
    return X, y, Xt, yt


RECIPES = {
    "xgboost": TrainingRecipe(
        "xgboost",
        {"objective": "binary:logistic", "max_depth": 1, "eta": 0.3, "tree_method": "hist"},
        num_boost_round=30,
    ),
    "lightgbm": TrainingRecipe(
        "lightgbm",
        {"objective": "binary", "num_leaves": 4, "learning_rate": 0.3, "min_data_in_leaf": 5},
        num_boost_round=30,
    ),
    "catboost": TrainingRecipe(
        "catboost",
        {
            "loss_function": "Logloss",
            "boosting_type": "Plain",
            "leaf_estimation_method": "Newton",
            "depth": 2,
            "learning_rate": 0.3,
            "random_strength": 0,
            "bootstrap_type": "No",  # deleting a row must not shift the bootstrap's random stream
        },
        num_boost_round=30,
    ),
}


def _require(library: str) -> None:
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed")
    if importlib.util.find_spec(f"influence_gbdt.adapters.{library}") is None:
        pytest.skip(f"the {library} adapter is not available yet")


def _study(library: str):
    _require(library)
    X, y, Xt, yt = _data()
    rows = np.arange(0, 300, 10)  # 30 rows
    return loo_study(RECIPES[library], X, y, Xt, yt, rows, methods=METHODS, progress=False)


def _row(study, label: str, subset: str):
    s = study.summary
    method, update_set = label.split("/")
    k = None
    if update_set.startswith("top_"):
        k, update_set = int(update_set.split("_")[1]), "top_k_leaves"
    sel = (s.method == method) & (s.update_set == update_set) & (s.subset == subset)
    sel &= s.k.isna() if k is None else (s.k == k)
    (i,) = np.flatnonzero(sel.to_numpy())
    return s.iloc[i]


def _check_common(study, rel_tol: float, min_kept: int, per_point_offset: bool = False) -> None:
    kept = study.kept
    assert kept.sum() >= min_kept
    assert (~kept).sum() >= 1  # the study exercises both groups
    scale = np.abs(study.actual).max()
    # Exactness where the structure was kept: LeafRefit (all points) is the real retraining.
    err = np.abs(study.scores["leaf_refit/all_points"][kept] - study.actual[kept]).max()
    assert err <= rel_tol * scale
    # LeafInfluence is its first-order version: near-perfect agreement where the structure is kept.
    li = _row(study, "leaf_influence/all_points", "kept")
    if per_point_offset:
        # CatBoost's l2 scales with the mean weight sum(w) / n: a weight derivative moves it, deleting
        # a unit-weight row does not. That adds one constant per test point to every row's score, so
        # only the ranking is compared here; derivative_study checks the derivative itself.
        assert li.ndcg > 0.99
    else:
        assert li.pearson > 0.999 and li.sign_agreement > 0.99 and li.ndcg > 0.99
    # Fast variants approximate LeafRefit, not better than it where it is exact.
    assert _row(study, "leaf_refit/single_point", "kept").ndcg <= 1.0


@pytest.mark.parametrize("library", ["xgboost"])
def test_loo_xgboost(library: str) -> None:
    study = _study(library)
    # Measured (seed 0, stumps): structure kept for 11/30 rows (37%); max |refit - actual| where kept
    # 1.0e-6 = 1.2e-5 of the largest change 0.085 (float32 margins and leaves: ~1e-7 abs per margin),
    # hence the 1e-4 bound. LeafRefit, all rows: pearson 0.67, spearman 0.69, sign 0.85, NDCG 0.93;
    # kept: 1.0 everywhere; changed: pearson 0.66, spearman 0.62, NDCG 0.94.
    _check_common(study, rel_tol=1e-4, min_kept=8)
    allr = _row(study, "leaf_refit/all_points", "all")
    assert allr.pearson > 0.6 and allr.spearman > 0.6 and allr.ndcg > 0.85


@pytest.mark.parametrize("library", ["lightgbm"])
def test_loo_lightgbm(library: str) -> None:
    study = _study(library)
    # Measured (seed 0, 4 leaves, min_data_in_leaf 5): structure kept for only 3/30 rows (10%; with
    # 2 leaves 5%, the first change comes at trees 9..19); max |refit - actual| where kept 8.9e-16
    # (2.6e-15 of the largest change 0.34). LeafRefit, all rows: pearson 0.61, spearman 0.25,
    # sign 0.63, NDCG 0.72; changed: pearson 0.61, NDCG 0.72.
    _check_common(study, rel_tol=1e-9, min_kept=3)
    allr = _row(study, "leaf_refit/all_points", "all")
    assert allr.pearson > 0.55 and allr.ndcg > 0.65


@pytest.mark.parametrize("library", ["catboost"])
def test_loo_catboost(library: str) -> None:
    study = _study(library)
    # Measured (seed 0, depth 2, random_strength 0, no bootstrap, true deletion with the full
    # quantization grid): see the figures printed by the study (test output with -s).
    _check_common(study, rel_tol=1e-9, min_kept=3, per_point_offset=True)
    allr = _row(study, "leaf_refit/all_points", "all")
    assert allr.pearson > 0.6 and allr.ndcg > 0.75


# Finite-difference retraining (weight 1 +- eps, eps = 0.05) against exact LeafInfluence, on rows
# whose two retrains kept the structure; errors relative to the largest such derivative. Measured
# (seed 0, rows 0, 15, ..., 285), at eps = 0.1 / 0.05 / 0.025:
# - XGBoost, 20/20 kept at 0.05: 8.1e-5 / 1.4e-4 / 3.2e-4, growing as 1/eps: float32 margins
#   (~1e-7 absolute) divided by 2 eps, hence 1e-3;
# - LightGBM, 16/20: 9.7e-6 / 2.0e-5 / 2.0e-5: O(eps^2) truncation meets float32 gradients, hence 1e-4;
# - CatBoost, 14/20: 3.9e-5 / 9.4e-6 / 1.1e-6, falling as eps^2 (float64 throughout), hence 5e-5.
# A wrong derivative (sign, a missing tree, a wrong hessian) is off by O(1).
FD_BOUNDS = {"xgboost": (1e-3, 16), "lightgbm": (1e-4, 12), "catboost": (5e-5, 10)}


@pytest.mark.parametrize("library", sorted(FD_BOUNDS))
def test_leaf_influence_matches_finite_difference_retraining(library: str) -> None:
    _require(library)
    X, y, Xt, yt = _data()
    study = derivative_study(
        RECIPES[library],
        X,
        y,
        Xt,
        yt,
        np.arange(0, 300, 15),
        eps=0.05,
        methods=(("leaf_influence", "all_points", None),),
        progress=False,
    )
    rel_tol, min_kept = FD_BOUNDS[library]
    kept = study.kept
    assert study.kind == "finite-difference" and kept.sum() >= min_kept
    err = np.abs(study.scores["leaf_influence/all_points"][kept] - study.actual[kept]).max()
    assert err <= rel_tol * np.abs(study.actual[kept]).max()


def test_same_structure_and_report(tmp_path) -> None:
    _require("xgboost")
    X, y, Xt, yt = _data()
    recipe = RECIPES["xgboost"]
    model = recipe.fit(X, y)
    # Retraining on the same data reproduces the model exactly (same seed, same params).
    again = recipe.retrain(X, y)
    assert same_structure(model, again, X, X_test=Xt)
    np.testing.assert_array_equal(recipe.raw_predict(model, Xt), recipe.raw_predict(again, Xt))
    # Labels that depend on the other feature do not (flipped labels would: stumps are symmetric).
    other = recipe.retrain(X, (X[:, 1] >= 2).astype(float))
    assert not same_structure(model, other, X)
    study = loo_study(recipe, X, y, Xt, yt, np.arange(5), methods=METHODS[:1], model=model, progress=False)
    text = write_report(study, tmp_path / "loo.md")
    assert "leaf_refit" in text and (tmp_path / "loo.md").exists()
    if importlib.util.find_spec("matplotlib") is not None:
        assert os.path.exists(tmp_path / "loo_leaf_refit_all_points.png")


def test_ndcg_definition() -> None:
    actual = np.array([[3.0], [-1.0], [1.0], [0.0]])
    assert ndcg_at_k(actual, actual) == pytest.approx(1.0)
    # Gains max(actual, 0) = [3, 0, 1, 0]; ranking [1, 3, 2, 0] puts gains 0, 0, 1, 3.
    pred = np.array([[0.0], [3.0], [1.0], [2.0]])
    dcg = 1 / np.log2(4) + 3 / np.log2(5)
    assert ndcg_at_k(pred, actual) == pytest.approx(dcg / (3 + 1 / np.log2(3)))
    assert ndcg_at_k(pred, actual, k=2) == pytest.approx(0.0)


def test_removal_curve_beats_random() -> None:
    _require("catboost")
    X, y, Xt, yt = _data(seed=1)
    df = removal_curve(
        RECIPES["catboost"],
        X,
        y,
        Xt,
        yt,
        sizes=(10, 20),
        n_random=5,
        methods=(("leaf_refit", "all_points", None),),
        progress=False,
    )
    # Measured (seed 1): mean test-loss reduction 0.0141 (m=10) and 0.0169 (m=20) after removing the
    # most harmful rows by LeafRefit (2.8% / 3.4% of the loss); random removal -0.0029 / -0.0035.
    mean = df.groupby(["strategy", "m"])["test_reduction"].mean()
    for m in (10, 20):
        assert mean[("leaf_refit/all_points", m)] > mean[("random", m)]
        assert mean[("leaf_refit/all_points", m)] > 0


# Multiclass (issue 13): 3 classes, 6 rounds (18 trees for XGBoost/LightGBM, 6 three-output trees for
# CatBoost), stumps or depth 2, so that removing one row keeps the structure for a share of rows.
# Test loss: multiclass log loss of the true class.
def _multiclass_data(seed: int = 0, n: int = 300, m: int = 60):
    rng = np.random.default_rng(seed)

    def gen(k: int):
        Z = rng.integers(0, 4, size=(k, 2)).astype(float)
        s = np.stack([1.2 * Z[:, 0], 1.2 * Z[:, 1], np.full(k, 2.0)], axis=1) + rng.gumbel(size=(k, 3))
        return Z, s.argmax(axis=1).astype(float)

    return (*gen(n), *gen(m))


MULTICLASS = {
    "xgboost": TrainingRecipe(
        "xgboost",
        {"objective": "multi:softprob", "num_class": 3, "max_depth": 1, "eta": 0.3, "tree_method": "hist"},
        num_boost_round=6,
    ),
    "lightgbm": TrainingRecipe(
        "lightgbm",
        {"objective": "multiclass", "num_class": 3, "num_leaves": 2, "learning_rate": 0.3,
         "min_data_in_leaf": 20, "verbose": -1},
        num_boost_round=6,
    ),
    "catboost": TrainingRecipe(
        "catboost",
        {"loss_function": "MultiClass", "boosting_type": "Plain",  # default leaves: Newton, full hessian
         "depth": 2, "learning_rate": 0.3, "random_strength": 0, "bootstrap_type": "No"},
        num_boost_round=6,
    ),
}
# Measured (seed 0, rows 0, 10, ..., 290): structure kept for 19 (XGBoost), 12 (LightGBM) and 15
# (CatBoost) of 30 rows; there max |LeafRefit - retraining| relative to the largest change: 1.1e-6
# (XGBoost's float32 margins, hence 1e-4 as in the binary study), 2.8e-15 and 5.1e-15 (hence 1e-9).
# LeafInfluence where kept: Pearson >= 0.99985. Finite differences of retraining (eps = 0.05, rows
# 0, 15, ..., 285; 20/20 kept): 3.9e-5 (XGBoost; bound 1e-3 as binary), 8.6e-6 (LightGBM; 1e-4),
# 3.7e-6 (CatBoost's joint Newton leaves; 5e-5).
MULTICLASS_BOUNDS = {"xgboost": (1e-4, 15, 1e-3), "lightgbm": (1e-9, 9, 1e-4), "catboost": (1e-9, 8, 5e-5)}


@pytest.mark.parametrize("library", sorted(MULTICLASS))
def test_multiclass_studies_against_retraining(library: str) -> None:
    _require(library)
    X, y, Xt, yt = _multiclass_data()
    recipe = MULTICLASS[library]
    refit_tol, min_kept, fd_tol = MULTICLASS_BOUNDS[library]
    study = loo_study(recipe, X, y, Xt, yt, np.arange(0, 300, 10), methods=METHODS[::3], progress=False)
    kept = study.kept
    assert kept.sum() >= min_kept
    err = np.abs(study.scores["leaf_refit/all_points"][kept] - study.actual[kept]).max()
    assert err <= refit_tol * np.abs(study.actual).max()
    assert _row(study, "leaf_influence/all_points", "kept").pearson > 0.999
    fd = derivative_study(recipe, X, y, Xt, yt, np.arange(0, 300, 15), eps=0.05,
                          methods=(("leaf_influence", "all_points", None),), progress=False)
    assert fd.kept.sum() >= 15
    err = np.abs(fd.scores["leaf_influence/all_points"][fd.kept] - fd.actual[fd.kept]).max()
    assert err <= fd_tol * np.abs(fd.actual[fd.kept]).max()
