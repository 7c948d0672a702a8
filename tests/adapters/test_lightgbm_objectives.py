"""LightGBM objectives beyond binary / L2 and multiclass models, against LightGBM itself.

Ground truth: LightGBM's stored leaves (self-check), its ``predict(raw_score=True)`` on training
and new rows, and retraining with the same parameters (deterministic, one thread) without a row
(LeafRefit) or with its weight 1 +- eps (LeafInfluence, central differences), kept only where
every tree keeps its structure. Retraining rather than ``Booster.refit``: refit takes Newton
steps with the sign gradients of L1 / quantile instead of renewing leaves, and keeps a
boost_from_average init folded into tree 0 (project notes, lightgbm-facts section 7).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

lgb = pytest.importorskip("lightgbm")

from engine_reference import ref_quantile  # noqa: E402
from influence_gbdt.adapters.lightgbm import LightGBMAdapter  # noqa: E402
from influence_gbdt.adapters.versions import release  # noqa: E402
from lightgbm_helpers import (  # noqa: E402
    MODELS_46,
    assert_explains_predict,
    finite_differences,
    lightgbm46_data,
    margin_changes,
    points_of,
)

from influence_gbdt.engine import InfluenceEngine, TestPoints  # noqa: E402
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError  # noqa: E402

N, N_TEST = 300, 40
MODELS = Path(__file__).parent / "models"
#: objective -> (extra parameters, label column of the ``data`` fixture)
OBJECTIVES = {
    "regression": ({}, "real"),
    "huber": ({"alpha": 1.0}, "heavy"),
    "fair": ({"fair_c": 0.5}, "heavy"),
    "poisson": ({}, "count"),
    "gamma": ({}, "positive"),
    "tweedie": ({"tweedie_variance_power": 1.3}, "claims"),
    "cross_entropy": ({}, "share"),
    "binary_sigmoid": ({"objective": "binary", "sigmoid": 1.7}, "binary"),
    "regression_l1": ({}, "heavy"),
    "quantile": ({"alpha": 0.3}, "heavy"),
}
RENEWED = ("regression_l1", "quantile")
#: The weighted percentile of this release's L1 / quantile models: 4.7 changed 4.4 to 4.6's.
PERCENTILE = "lightgbm_4.6" if release(lgb.__version__) < (4, 7) else "lightgbm"


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    """Few distinct feature values, so that deleting a row mostly keeps small trees' structure."""
    rng = np.random.default_rng(0)
    m = N + N_TEST
    X = rng.integers(0, 6, size=(m, 4)).astype(float)
    lin = 0.4 * X[:, 0] - 0.3 * X[:, 1] + 0.2 * X[:, 2] + rng.normal(scale=0.5, size=m)
    labels = {
        "real": 2 * lin,
        "heavy": 2 * lin + rng.standard_t(2, size=m),  # residuals beyond Huber's delta
        "count": rng.poisson(np.exp(lin)).astype(float),
        "positive": rng.gamma(2.0, np.exp(lin) / 2),
        "claims": np.where(rng.random(m) < 0.4, 0.0, rng.gamma(2.0, np.exp(lin))),
        "share": 1 / (1 + np.exp(-2 * lin + rng.normal(size=m))),
        "binary": (lin + rng.normal(size=m) > 0.5).astype(float),
        "class": np.digitize(lin, np.quantile(lin, [0.3, 0.55, 0.8])).astype(float),  # 4 classes
    }
    w = rng.integers(32, 128, m) / 64.0  # exact in float32
    out = {k: v[:N] for k, v in labels.items()}
    out.update(X=X[:N], Xt=X[N:], w=w[:N])
    return out


COARSE = dict(n_estimators=3, num_leaves=4, min_child_samples=20, learning_rate=0.3, verbose=-1, n_jobs=1,
              deterministic=True)


def model_of(name: str, **settings) -> lgb.LGBMModel:
    extra, _ = OBJECTIVES[name]
    params = {"objective": name, **extra, **settings}
    cls = lgb.LGBMClassifier if params["objective"] == "binary" else lgb.LGBMRegressor
    return cls(**params)


# ---------------------------------------------------------------------------------------------
# Self-check and predictions.


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_objectives_reproduce_lightgbm(data, name, weighted):
    y, w = data[OBJECTIVES[name][1]], data["w"] if weighted else None
    model = model_of(name, n_estimators=30, num_leaves=8, verbose=-1).fit(data["X"], y, sample_weight=w)
    _, engine = assert_explains_predict(model, data["X"], data["Xt"], y, w)
    # Measured <= 3e-16 (stored-margin check, float32 gradients and labels mirrored; cross_entropy
    # with LightGBM's gradient (f32(1 - y) - y e^-m) / (1 + e^-m): 2.3e-8 as p - y).
    assert engine.relative_residual < 1e-13
    e = engine.ensemble
    assert e.renewed.all() == (name in RENEWED) and e.base_rule == ("quantile" if name in RENEWED else "mean")
    if weighted and name in RENEWED:  # the installed release trained it, and its percentile reproduces it
        assert e.quantile_method == PERCENTILE
    if name == "huber":  # rows beyond delta, where LightGBM's hessian stays the weight
        assert np.any(np.abs(y - engine.train_margin) > 1.0)


def test_poisson_max_delta_step_is_the_hessian_shift(data):
    y = data["count"]
    for step in (0.7, 0.2):
        model = lgb.LGBMRegressor(objective="poisson", poisson_max_delta_step=step, n_estimators=20,
                                  verbose=-1)
        engine = LightGBMAdapter(model.fit(data["X"], y)).prepare(data["X"], y)
        assert engine.ensemble.loss.params["hessian_log_shift"] == step
        assert engine.relative_residual < 1e-13


#: Weights (in 64ths, exact in float32; on both sides of 1) under which the labels below make both
#: weighted percentiles, 4.7's and 4.4 to 4.6's, interpolate across a gap float32 does not hold.
FAR_WEIGHTS = np.array([124, 62, 108, 50, 66, 96, 87, 50, 95, 87, 120, 89, 116, 124, 40, 38, 80, 79, 85, 103,
                        62, 49, 97, 69, 121, 38, 100, 101, 58, 40, 62, 69, 126, 115, 54, 77, 89, 119, 44,
                        105]) / 64.0


@pytest.mark.parametrize(("alpha", "weighted"), [(0.3, False), (0.32, True)])
def test_the_init_score_interpolates_float32_labels_as_lightgbm_does(alpha, weighted):
    """LightGBM's L1 / quantile init score is a percentile of its float32 labels (``label_t``), and
    it interpolates with their difference in float32. Labels whose order statistics at the
    percentile, 7440.0234375 and 0.0061588... (float32 both), differ by more than a float32 holds:
    the difference in double gives another float32 init score (the reference percentile, both
    ways), and the model would then not be reproduced (measured: 8.4e-7 relative, refused). The
    adapter's init score is LightGBM's: every stored leaf and LightGBM's margins are reproduced."""
    hi, lo = 7440.0234375, float(np.float32(0.0061588157))
    y = np.concatenate([hi + 10.0 * np.arange(1, 28), [hi, lo], -np.arange(1.0, 12.0)])
    X = np.random.default_rng(0).normal(size=(y.size, 2))
    w = FAR_WEIGHTS if weighted else None
    model = lgb.LGBMRegressor(objective="quantile", alpha=alpha, n_estimators=5, num_leaves=4,
                              min_child_samples=5, verbose=-1).fit(X, y, sample_weight=w)
    _, engine = assert_explains_predict(model, X, X[:8], y, w)
    assert engine.relative_residual < 1e-13
    a32, weights = float(np.float32(alpha)), np.ones(y.size) if w is None else w
    label_t, double = (float(np.float32(ref_quantile(PERCENTILE, y, weights, a32, weighted, 0.0, labels=f32)))
                       for f32 in (True, False))
    assert label_t != double and engine.ensemble.base_margin[0] == label_t


def test_boost_from_average_off_and_init_score(data):
    y = data["heavy"]
    X = data["X"]
    off = lgb.train(dict(objective="quantile", alpha=0.3, verbose=-1, boost_from_average=False),
                    lgb.Dataset(X, y), 10)
    engine = LightGBMAdapter(off).prepare(X, y)
    assert engine.ensemble.base_rule == "fixed" and engine.relative_residual < 1e-13
    init = np.linspace(-1, 1, N)
    given = lgb.train(dict(objective="huber", verbose=-1), lgb.Dataset(X, y, init_score=init), 10)
    adapter = LightGBMAdapter(given)
    engine = adapter.prepare(X, y, init_score=init)
    assert engine.relative_residual < 1e-13
    np.testing.assert_allclose(engine.train_margin, given.predict(X, raw_score=True) + init, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Scores against retraining.


@pytest.mark.parametrize(
    ("name", "weighted"), [(name, False) for name in OBJECTIVES] + [(name, True) for name in RENEWED]
)
def test_leaf_refit_matches_retraining(data, name, weighted):
    X, Xt, y = data["X"], data["Xt"], data[OBJECTIVES[name][1]]
    w = data["w"] if weighted else np.ones(N)
    # Weighted percentiles move with every deletion: larger leaves keep more structures.
    settings = {**COARSE, "min_child_samples": 40} if weighted else COARSE
    model = model_of(name, **settings).fit(X, y, sample_weight=w if weighted else None)
    adapter = LightGBMAdapter(model)
    engine = adapter.prepare(X, y, w if weighted else None)
    rows, truth = margin_changes(model, X, y, Xt, w, step=10, weighted=weighted)
    assert rows.size >= 2
    ours = engine.leaf_refit(points_of(adapter, Xt), rows=rows, on="prediction")
    scale = np.abs(truth).max()
    assert scale > 1e-4
    # Measured <= 5e-14 relative (weighted L1: 7.9e-15; 2.7e-7 before the engine rounded the
    # re-estimated percentile init score to float32 as LightGBM does; cross_entropy 7.4e-7 before
    # it computed LightGBM's gradient, which rounds 1 - y to float32).
    assert np.abs(ours - truth).max() < 1e-9 * scale


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_leaf_influence_matches_finite_differences(data, name):
    X, Xt, y = data["X"], data["Xt"], data[OBJECTIVES[name][1]]
    # Weighted (a weight vector of all ones is dropped by LightGBM, and its unweighted percentile
    # differs from the weighted one the retraining with 1 +- eps would use).
    w = data["w"]
    model = model_of(name, **COARSE).fit(X, y, sample_weight=w)
    adapter = LightGBMAdapter(model)
    engine = adapter.prepare(X, y, w)
    # Renewed leaves have no float32 gradient noise, and their percentile interpolates with weight
    # ratios (curved in a row's weight): a small eps (2^-5: 6e-3 relative for L1; 2^-10: 9e-5).
    eps = 2.0**-10 if name in RENEWED else 2.0**-5
    rows, fd = finite_differences(model, X, y, Xt, w, step=25, eps=eps)
    assert rows.size >= 4
    ours = engine.leaf_influence(points_of(adapter, Xt), rows=rows, on="prediction")
    # Measured 2.4e-6 (huber) .. 2.6e-5 (regression), 4.7e-4 (L1, eps 2^-10), 2.4e-5 (quantile).
    assert np.abs(ours - fd).max() < 1e-3 * np.abs(fd).max()


@pytest.mark.parametrize("name", list(MODELS_46))
def test_a_weighted_model_of_lightgbm_4_6_is_read_with_its_percentile(name):
    """LightGBM 4.4 to 4.6 renewed the leaves (and the init score) of weighted L1 / quantile models
    with another weighted percentile than 4.7, and a model text does not say which release wrote
    it. A model LightGBM 4.6.0 wrote (``models/lightgbm_46_weighted.py``), loaded into the installed
    release: the adapter takes 4.6's percentile, which reproduces every stored leaf and LightGBM's
    margins where 4.7's does not, and its LeafRefit and LeafInfluence match 4.6's own retraining,
    recorded with the model (tolerances as the tests above against the installed release)."""
    X, y, w, Xt = lightgbm46_data()
    booster = lgb.Booster(model_file=MODELS / f"lightgbm-4.6-weighted-{name}.txt")
    adapter = LightGBMAdapter(booster)
    engine = adapter.prepare(X, y, w)
    assert adapter.percentile_rule == engine.ensemble.quantile_method == "lightgbm_4.6"
    assert engine.relative_residual < 1e-13
    theirs = booster.predict(X, raw_score=True)
    np.testing.assert_allclose(engine.train_margin, theirs, rtol=0, atol=1e-12 * np.abs(theirs).max())
    other = LightGBMAdapter(booster)
    other.percentile_rule = "lightgbm"
    assert InfluenceEngine(other.describe(X, y, w)).relative_residual > LightGBMAdapter.WRONG_MEASURED
    wrong = LightGBMAdapter(booster)  # neither percentile reproduces wrong weights: the error says so
    with pytest.raises(ReproductionError, match=r"4\.7 and of 4\.4 to 4\.6 were both tried"):
        wrong.prepare(X, y, w[::-1])
    assert wrong.percentile_rule == PERCENTILE  # the installed release's, kept for the next call
    truth, points = np.load(MODELS / "lightgbm-4.6-weighted.npz"), points_of(adapter, Xt)
    refit = truth[f"{name}_refit"]
    assert refit.shape[0] >= 2 and np.abs(refit).max() > 1e-4
    ours = engine.leaf_refit(points, rows=truth[f"{name}_refit_rows"], on="prediction")
    assert np.abs(ours - refit).max() < 1e-9 * np.abs(refit).max()
    fd = truth[f"{name}_fd"]
    ours = engine.leaf_influence(points, rows=truth[f"{name}_fd_rows"], on="prediction")
    assert np.abs(ours - fd).max() < 1e-3 * np.abs(fd).max()


# ---------------------------------------------------------------------------------------------
# Multiclass: LGBMClassifier defaults, pandas, string labels, class and sample weights.


def multiclass_frame(K: int, n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, 4)), columns=["a", "b c", "d", "e"])
    X["cat"] = pd.Categorical(rng.integers(0, 6, n))
    lin = X["a"] + 0.5 * X["b c"] * X["d"] + 0.3 * X["cat"].cat.codes + rng.normal(scale=0.5, size=n)
    codes = np.digitize(lin, np.quantile(lin, np.arange(1, K) / K))
    labels = np.array([f"class {k}" for k in range(K)])[codes]
    return X, labels, rng.uniform(0.3, 3.0, n)


@pytest.mark.parametrize(
    ("objective", "K", "case"),
    [
        ("multiclass", 3, "plain"),
        ("multiclass", 3, "balanced"),
        ("multiclass", 3, "dict"),
        ("multiclass", 6, "sample_weight"),
        ("multiclass", 10, "balanced"),
        ("multiclassova", 3, "plain"),
        ("multiclassova", 5, "sample_weight"),
    ],
)
def test_multiclass_defaults_explain_their_predictions(objective, K, case):
    X, y, w = multiclass_frame(K, 450)
    class_weight = {"balanced": "balanced", "dict": {"class 0": 3.0, "class 2": 0.5}}.get(case)
    model = lgb.LGBMClassifier(objective=objective, class_weight=class_weight, verbose=-1)
    w = w if case == "sample_weight" else None
    model.fit(X.iloc[:400], y[:400], sample_weight=None if w is None else w[:400])
    assert model.booster_.num_trees() == 100 * K
    adapter, engine = assert_explains_predict(model, X.iloc[:400], X.iloc[400:], y[:400],
                                              None if w is None else w[:400])
    assert engine.ensemble.n_outputs == K and engine.ensemble.loss.name in ("softmax", "one_vs_all")
    # Measured 2e-15 .. 3.1e-13 (1000 trees), growing with the number of trees: LightGBM's leaf
    # sums come from histograms with subtraction (project notes, lightgbm-facts section 6).
    assert engine.relative_residual < 1e-11
    with pytest.raises(InputError, match="not among the model's classes"):
        adapter.prepare(X.iloc[:400], np.where(y[:400] == "class 0", "class x", y[:400]))


@pytest.mark.filterwarnings("ignore:The argument 'eval_set' is deprecated")
def test_multiclass_early_stopping():
    X, y, _ = multiclass_frame(4, 700, seed=1)
    model = lgb.LGBMClassifier(n_estimators=300, learning_rate=0.3, num_leaves=8, verbose=-1).fit(
        X.iloc[:400], y[:400], eval_set=[(X.iloc[400:600], y[400:600])],
        callbacks=[lgb.early_stopping(5, verbose=False)],
    )
    assert 0 < model.best_iteration_ < 300
    adapter, _ = assert_explains_predict(model, X.iloc[:400], X.iloc[600:], y[:400])
    assert adapter.n_trees == model.best_iteration_ * 4


def test_raw_multiclass_booster_takes_class_indices(data):
    X, y = data["X"], data["class"]
    booster = lgb.train(dict(objective="multiclass", num_class=4, verbose=-1), lgb.Dataset(X, y), 10)
    assert LightGBMAdapter(booster).prepare(X, y).relative_residual < 1e-13
    with pytest.raises(InputError, match=r"not among the model's classes \[0, 1, 2, 3\]"):
        LightGBMAdapter(booster).prepare(X, y + 0.5)
    init = np.random.default_rng(2).normal(size=(N, 4))
    params = dict(objective="multiclass", num_class=4, verbose=-1)
    given = lgb.train(params, lgb.Dataset(X, y, init_score=init), 5)
    engine = LightGBMAdapter(given).prepare(X, y, init_score=init)
    assert engine.relative_residual < 1e-13 and engine.ensemble.base_rule == "fixed"


MC_CASES = [
    ("multiclass", None, False),
    ("multiclass", "balanced", False),
    ("multiclass", {"c1": 2.0}, True),
    ("multiclassova", None, True),
    ("multiclassova", "balanced", False),
]


def multiclass_model(data, objective, class_weight):
    labels = np.array(["c0", "c1", "c2", "c3"])[data["class"].astype(int)]
    # Fewer, smaller trees than COARSE: K trees per iteration make a kept structure rarer.
    model = lgb.LGBMClassifier(objective=objective, class_weight=class_weight, **{**COARSE, "num_leaves": 3})
    return model, labels


@pytest.mark.parametrize(("objective", "class_weight", "weighted"), MC_CASES)
def test_multiclass_leaf_refit_matches_retraining(data, objective, class_weight, weighted):
    X, Xt = data["X"], data["Xt"]
    model, y = multiclass_model(data, objective, class_weight)
    w = data["w"] if weighted else np.ones(N)
    model.fit(X, y, sample_weight=w)
    adapter = LightGBMAdapter(model)
    engine = adapter.prepare(X, y, w)
    rows, truth = margin_changes(model, X, y, Xt, w, step=10)
    assert rows.size >= 3
    test = points_of(adapter, Xt)
    ours = np.stack([engine.leaf_refit(test, rows=rows, on="prediction", output=k) for k in range(4)], -1)
    scale = np.abs(truth).max()
    assert scale > 1e-3
    # Measured 1e-14 .. 5e-14 (multiclass, balanced, ova balanced).
    assert np.abs(ours - truth).max() < 1e-9 * scale


@pytest.mark.parametrize("objective", ["multiclass", "multiclassova"])
def test_multiclass_leaf_influence_matches_finite_differences(data, objective):
    X, Xt = data["X"], data["Xt"]
    model, y = multiclass_model(data, objective, None)
    model.fit(X, y, sample_weight=np.ones(N))
    adapter = LightGBMAdapter(model)
    engine = adapter.prepare(X, y, np.ones(N))
    rows, fd = finite_differences(model, X, y, Xt, np.ones(N), step=20)
    assert rows.size >= 4
    test = points_of(adapter, Xt)
    ours = np.stack([engine.leaf_influence(test, rows=rows, on="prediction", output=k) for k in range(4)], -1)
    # Measured 1.8e-5 (multiclass), 1.4e-5 (multiclassova): float32 noise of the retraining / eps.
    assert np.abs(ours - fd).max() < 1e-3 * np.abs(fd).max()


@pytest.mark.parametrize("objective", ["multiclass", "multiclassova"])
def test_multiclass_reverse_mode_equals_forward_mode(data, objective):
    X, Xt = data["X"], data["Xt"]
    model, y = multiclass_model(data, objective, "balanced")
    model.fit(X, y, sample_weight=data["w"])
    adapter = LightGBMAdapter(model)
    engine = adapter.prepare(X, y, data["w"])
    yt = np.array(["c0", "c1", "c2", "c3"])[np.arange(N_TEST) % 4]
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), y=adapter.encode_labels(yt))
    for kwargs in ({"on": "loss"}, {"on": "prediction", "output": 2}):
        reverse = engine.influence_reverse(test, **kwargs)
        forward = engine.influence_forward(test, **kwargs)
        assert np.abs(forward).max() > 1e-6
        # Same derivatives summed in another order: rounding only (measured 2e-16).
        np.testing.assert_allclose(reverse, forward, rtol=0, atol=1e-11 * np.abs(forward).max())
    with pytest.raises(InputError, match="needs the output"):
        engine.leaf_influence(test, rows=[0], on="prediction")


# ---------------------------------------------------------------------------------------------
# Refusals.


def _custom(preds, train_data):
    return preds - train_data.get_label(), np.ones_like(preds)


@pytest.mark.parametrize(
    ("params", "labels", "match"),
    [
        ({"objective": "mape"}, "real", "objective 'mape' is not supported: .*label weight"),
        ({"objective": "cross_entropy_lambda"}, "share", "'cross_entropy_lambda' .*non-linearly"),
        ({"objective": "lambdarank"}, "binary", "'lambdarank' .*ranking objectives"),
        ({"objective": "rank_xendcg"}, "binary", "'rank_xendcg' .*ranking objectives"),
        ({"objective": _custom}, "real", "custom objective"),
        ({"objective": "regression", "reg_sqrt": True}, "real", "reg_sqrt"),
        ({"objective": "multiclassova", "num_class": 4, "is_unbalance": True}, "class", "multiclassova"),
        ({"objective": "multiclassova", "num_class": 4, "sigmoid": 2.0}, "class", "multiclassova"),
    ],
)
def test_refused_objectives(data, params, labels, match):
    group = [N // 10] * 10 if params["objective"] in ("lambdarank", "rank_xendcg") else None
    ds = lgb.Dataset(data["X"], data[labels], group=group)
    booster = lgb.train({"verbose": -1, "num_leaves": 4, **params}, ds, 3)
    with pytest.raises(UnsupportedModelError, match=match):
        LightGBMAdapter(booster)
