"""CatBoost objectives beyond Logloss / RMSE, and multi-output models, against real CatBoost.

Ground truth is CatBoost itself: the self-check (every stored leaf recomputed from the training
rows) at double precision, ``predict(prediction_type="RawFormulaVal")`` on train and test rows,
retraining with a row deleted (same quantization grid, ``bootstrap_type="No"``,
``random_strength=0``) wherever the retrain keeps the structure, and central differences of
retraining with a row's weight moved. Refusals name the setting and what to retrain with.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

cb = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")

from influence_gbdt.adapters.catboost import CatBoostAdapter  # noqa: E402

from influence_gbdt.engine import InfluenceEngine, TestPoints  # noqa: E402
from influence_gbdt.errors import UnsupportedModelError  # noqa: E402
from influence_gbdt.losses import Loss  # noqa: E402
from influence_gbdt.validation.models import structure_report  # noqa: E402

N, M = 300, 40


@pytest.fixture(autouse=True)
def _catboost_info_in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def _labels(rng, X):
    lin = X[:, 0] - 0.5 * X[:, 1]
    n = X.shape[0]
    return {
        "Poisson": rng.poisson(np.exp(0.5 * lin)).astype(float),
        "Tweedie:variance_power=1.3": rng.poisson(np.exp(0.5 * lin)) * rng.gamma(2, 1, n),
        "Huber:delta=0.7": 2 * lin + rng.normal(size=n),
        "Quantile:alpha=0.3": 2 * lin + rng.normal(size=n),
        "MAE": 2 * lin + rng.standard_t(2, size=n),
        "CrossEntropy": 1 / (1 + np.exp(-lin - 0.3 * rng.normal(size=n))),
        "MultiClass": np.digitize(lin + rng.normal(size=n), [-0.7, 0.6]),
        "MultiClassOneVsAll": np.digitize(lin + rng.normal(size=n), [-0.7, 0.6, 1.2]),
        "MultiRMSE": np.c_[lin, X[:, 2] ** 2, np.sin(X[:, 3])],
    }


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N + M, 5))
    w = rng.uniform(0.3, 2.0, size=N)
    return X[:N], X[N:], {k: (v[:N], v[N:]) for k, v in _labels(rng, X).items()}, w


BASE = dict(iterations=12, depth=4, learning_rate=0.3, verbose=0, random_seed=0, thread_count=2,
            allow_writing_files=False)
#: Loss -> extra settings reproduced exactly (each also with sample weights).
SETTINGS = [
    ("Poisson", dict(), True),
    ("Poisson", dict(leaf_estimation_iterations=5), False),  # AnyImprovement, CatBoost's fast objective
    ("Poisson", dict(leaf_estimation_method="Gradient"), True),
    ("Tweedie:variance_power=1.3", dict(), False),
    ("Tweedie:variance_power=1.3", dict(leaf_estimation_iterations=4), True),
    ("Huber:delta=0.7", dict(), False),
    ("Huber:delta=0.7", dict(leaf_estimation_iterations=3, leaf_estimation_backtracking="No"), True),
    ("Quantile:alpha=0.3", dict(), False),
    ("Quantile:alpha=0.3", dict(boost_from_average=False), True),
    ("MAE", dict(), False),
    ("CrossEntropy", dict(leaf_estimation_iterations=5), True),
    ("CrossEntropy", dict(leaf_estimation_method="Gradient", boost_from_average=True), False),
    ("MultiClass", dict(leaf_estimation_method="Gradient"), True),
    ("MultiClass", dict(leaf_estimation_method="Gradient", class_weights=[1.0, 2.5, 0.7]), False),
    ("MultiClass", dict(), True),  # the default: Newton, one joint step with the full hessian
    ("MultiClass", dict(class_weights=[1.0, 2.5, 0.7], l2_leaf_reg=0.5), False),
    ("MultiClassOneVsAll", dict(), True),
    ("MultiClassOneVsAll", dict(leaf_estimation_method="Gradient", auto_class_weights="SqrtBalanced"), False),
    ("MultiRMSE", dict(), True),
    ("MultiRMSE", dict(leaf_estimation_method="Gradient", boost_from_average=False), False),
]


def fit(data, loss, weights=False, **kw):
    X, _, labels, w = data
    y = labels[loss][0]
    sw = w if weights else None
    return cb.CatBoost({**BASE, "loss_function": loss, **kw}).fit(X, y, sample_weight=sw), y, sw


def points_of(adapter, X):
    return TestPoints(leaf_index=adapter.leaf_indices(X), offset=adapter.init_offset(X))


@pytest.mark.parametrize(("loss", "kw", "weights"), SETTINGS)
def test_self_check_and_raw_predictions(data, loss, kw, weights):
    model, y, sw = fit(data, loss, weights, **kw)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(data[0], y, sw)
    # Measured 0 to 5.4e-16 over these settings; float32 parameters or a float64 l2 where CatBoost
    # rounds it give 1e-8 to 3e-7, so 1e-12 separates them.
    assert eng.relative_residual < 1e-12
    for X in data[:2]:
        np.testing.assert_allclose(eng.predict_margin(points_of(adapter, X)), adapter.raw_predict(X),
                                   rtol=0, atol=1e-12)


def test_huber_residual_equal_to_delta_is_outside(data):
    """CatBoost's Huber counts |y - m| = delta as outside (hessian 0): integer labels with delta 1
    sit exactly there at the first tree's margin 0. The engine's ``closed=0`` matches it; the
    closed interval (LightGBM's convention) does not."""
    X = data[0]
    y = np.round(2 * X[:, 0] + np.random.default_rng(3).normal(size=N))
    assert np.sum(np.abs(y) == 1.0) > 20
    model = cb.CatBoost({**BASE, "loss_function": "Huber:delta=1"}).fit(X, y)
    adapter = CatBoostAdapter(model)
    e = adapter.describe(X, y)
    assert InfluenceEngine(e).relative_residual < 1e-12
    closed = Loss("huber", params={**e.loss.params, "closed": 1.0})
    assert InfluenceEngine(replace(e, loss=closed)).relative_residual > 1e-3


@pytest.mark.parametrize(
    ("loss", "kw", "needle"),
    [
        ("Expectile:alpha=0.3", {}, "'Expectile' is not supported"),
        ("LogLinQuantile", {}, "'LogLinQuantile' is not supported"),
        ("MAPE", {}, "'MAPE' is not supported"),
        ("Quantile:alpha=0.3", dict(leaf_estimation_method="Gradient"), "leaf_estimation_method='Exact'"),
        ("MAE", dict(leaf_estimation_iterations=3), "leaf_estimation_iterations=1"),
        ("Huber:delta=0.7", dict(leaf_estimation_iterations=3), "rejects every step"),
        ("MultiClass", dict(leaf_estimation_iterations=3), "leaf_estimation_iterations=1"),
        ("MultiClass", dict(leaf_estimation_method="Gradient", leaf_estimation_iterations=3),
         "leaf_estimation_iterations=1"),
        ("MultiRMSE", dict(leaf_estimation_iterations=2), "leaf_estimation_iterations=1"),
    ],
)
def test_refusals_name_the_cause(data, loss, kw, needle):
    X, _, labels, _ = data
    stand_in = {"Expectile:alpha=0.3": "Huber:delta=0.7", "LogLinQuantile": "Poisson", "MAPE": "MAE"}
    key = stand_in.get(loss, loss)
    y = labels[key][0] + (1.0 if loss == "MAPE" else 0.0)
    model = cb.CatBoost({**BASE, "loss_function": loss, **kw}).fit(X, y)
    with pytest.raises(UnsupportedModelError, match=re.escape(needle)):
        CatBoostAdapter(model)


# ----------------------------------------------------------------------------------------------
# LeafRefit against deletion retraining, LeafInfluence against retraining differences.

RETRAIN = dict(BASE, iterations=8, depth=3, random_strength=0, bootstrap_type="No", random_seed=3)
REFIT_CASES = [  # smaller models where deletion retrains rarely keep the structure at depth 3
    ("Poisson", dict(leaf_estimation_iterations=3, depth=2, iterations=5), True),
    ("Tweedie:variance_power=1.3", dict(), False),
    ("Huber:delta=0.7", dict(), True),
    # Renewed leaves; MAE's +-0.5 gradients tie split scores, and deletion retrains kept the
    # structure in 1 of 16 (measured), so the quantile model stands for both.
    ("Quantile:alpha=0.3", dict(), True),
    ("CrossEntropy", dict(leaf_estimation_iterations=3), True),
    ("MultiClass", dict(leaf_estimation_method="Gradient", depth=2, iterations=5), True),
    ("MultiClass", dict(depth=2, iterations=5), True),  # Newton, full hessian
    ("MultiClassOneVsAll", dict(depth=2, iterations=5), False),
    ("MultiRMSE", dict(depth=2, iterations=5), True),
]


def _raw(model, X):
    raw = np.asarray(model.predict(X, prediction_type="RawFormulaVal"), dtype=np.float64)
    return raw if raw.ndim == 2 else raw[:, None]


@pytest.mark.parametrize(("loss", "kw", "weighted"), REFIT_CASES)
def test_leaf_refit_equals_deletion_retraining(data, loss, kw, weighted, tmp_path):
    X, Xt, labels, w = data
    y = labels[loss][0]
    sw = f32(w) if weighted else None
    params = {**RETRAIN, "loss_function": loss, **kw}
    model = cb.CatBoost(params).fit(X, y, sample_weight=sw)
    grid = cb.Pool(X, y)
    grid.quantize()
    borders = str(tmp_path / "borders.tsv")
    grid.save_quantization_borders(borders)  # the full grid: a deleted row must not re-quantize
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, sw)
    K = eng.ensemble.n_outputs
    test = points_of(adapter, Xt)
    rows = np.arange(0, N, 13)  # retrained in this order until 4 keep the structure (at most 16)
    atol = 1e-9  # measured ~1e-15 (a re-estimated bias from CatBoost's float32 mean, as it computes it)
    refit = np.stack([eng.leaf_refit(test, rows=rows, on="prediction", output=k if K > 1 else None)
                      for k in range(K)], axis=-1)
    raw = _raw(model, Xt)
    kept, worst = 0, 0.0
    for k, i in enumerate(rows[:16]):
        if kept == 4:
            break
        keep = np.arange(N) != i
        retrained = cb.CatBoost({**params, "input_borders": borders}).fit(
            X[keep], y[keep], sample_weight=None if sw is None else sw[keep])
        if not structure_report(model, retrained, X, keep, Xt)["same"]:
            continue
        kept += 1
        truth = raw - _raw(retrained, Xt)
        np.testing.assert_allclose(refit[k], truth, rtol=0, atol=atol)
        worst = max(worst, float(np.abs(refit[k] - truth).max()))
    print(f"{loss} {kw}: structure kept in {kept}/{k + 1} deletion retrains, "
          f"max |refit - retrain| {worst:.1e}")
    assert kept >= 3, f"structure kept in only {kept}/{k + 1} retrains: the comparison is vacuous"


INFLUENCE_CASES = [
    ("Poisson", dict()),
    ("Tweedie:variance_power=1.3", dict(leaf_estimation_iterations=2)),
    ("CrossEntropy", dict()),
    ("MultiClass", dict(leaf_estimation_method="Gradient")),
    ("MultiClass", dict()),  # Newton, full hessian
    ("MultiClassOneVsAll", dict()),
    ("MultiRMSE", dict(boost_from_average=False)),
]


@pytest.mark.parametrize(("loss", "kw"), INFLUENCE_CASES)
def test_leaf_influence_equals_retraining_differences(data, loss, kw):
    """LeafInfluence = central differences of CatBoost retrained with row i's weight v_i +- eps
    (weights float32 as CatBoost stores them; the step is taken in the float32 weights)."""
    X, Xt, labels, w = data
    y = labels[loss][0]
    v0 = f32(w)
    params = {**RETRAIN, "loss_function": loss, **kw}
    model = cb.CatBoost(params).fit(X, y, sample_weight=v0)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, v0)
    K = eng.ensemble.n_outputs
    test = points_of(adapter, Xt)
    rows = np.arange(0, N, 41)
    infl = np.stack([eng.leaf_influence(test, rows=rows, on="prediction", output=k if K > 1 else None)
                     for k in range(K)], axis=-1)
    kept = 0
    for k, i in enumerate(rows):
        preds, steps = [], []
        for sign in (1, -1):
            v = v0.copy()
            v[i] = f32(v0[i] + sign * (1e-2 if eng.ensemble.float32_l2 else 1e-3))
            retrained = cb.CatBoost(params).fit(X, y, sample_weight=v)
            if not structure_report(model, retrained, X, None, Xt)["same"]:
                break
            preds.append(_raw(retrained, Xt))
            steps.append(v[i])
        else:
            kept += 1
            fd = (preds[0] - preds[1]) / (steps[0] - steps[1])
            # Central differences are exact to O(eps^2) ~1e-6 relative; CatBoost's float32 weights
            # add ~1e-7 / 2e-3 of the difference. Multi-output Newton leaves round the l2 term
            # l2 * sum(w) / N to float32: its change over a difference with eps = 1e-3 (2e-5) is
            # resolved to one float32 ulp (2.4e-7), ~1% of the l2 channel, the only one that moves
            # test points outside row i's leaves: measured up to 1.3e-3 of max |fd| there
            # (LeafInfluence does not differentiate the rounding). eps = 1e-2 cuts that tenfold
            # at an O(eps^2) ~1e-4 truncation.
            f32_l2 = eng.ensemble.float32_l2
            np.testing.assert_allclose(infl[k], fd, rtol=0,
                                       atol=(1e-3 if f32_l2 else 2e-5) * np.abs(fd).max() + 1e-9)
    assert kept >= 3


def test_exact_leaves_do_not_move_with_weights(data):
    """CatBoost's Exact (quantile) leaves ignore sample weights and its quantile base is a step
    function of them: LeafInfluence is 0, and so are retraining differences."""
    X, Xt, labels, w = data
    y = labels["MAE"][0]
    v0 = f32(w)
    model = cb.CatBoost({**RETRAIN, "loss_function": "MAE"}).fit(X, y, sample_weight=v0)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, v0)
    infl = eng.leaf_influence(points_of(adapter, Xt), rows=[0, 5, 9], on="prediction")
    assert np.all(infl == 0.0)
    v = v0.copy()
    v[5] = f32(v0[5] + 1e-3)
    moved = cb.CatBoost({**RETRAIN, "loss_function": "MAE"}).fit(X, y, sample_weight=v)
    np.testing.assert_array_equal(_raw(moved, Xt), _raw(model, Xt))


@pytest.mark.parametrize("kw", [
    dict(leaf_estimation_method="Gradient", class_weights=[1.0, 2.0, 0.5]),
    dict(class_weights=[1.0, 2.0, 0.5]),  # Newton: the joint full-hessian step
    dict(auto_class_weights="Balanced"),  # class factors that move with the weights
])
def test_multiclass_reverse_equals_forward(data, kw):
    X, Xt, labels, w = data
    y = labels["MultiClass"][0]
    model = cb.CatBoost({**BASE, "loss_function": "MultiClass", **kw}).fit(X, y, sample_weight=w)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, w)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt),
                      y=labels["MultiClass"][1])
    rows = np.arange(0, N, 7)
    rev = eng.influence_reverse(test, rows=rows)
    fwd = eng.influence_forward(test, rows=rows)
    # Both are exact; they differ by summation order only.
    np.testing.assert_allclose(rev, fwd, rtol=0, atol=1e-12 * np.abs(fwd).max())
    for k in range(3):
        np.testing.assert_allclose(eng.influence_reverse(test, rows=rows, on="prediction", output=k),
                                   eng.influence_forward(test, rows=rows, on="prediction", output=k),
                                   rtol=0, atol=1e-12 * np.abs(fwd).max())


# ----------------------------------------------------------------------------------------------
# The models users have: classifiers with string labels on DataFrames, class weights, early stopping.


@pytest.mark.parametrize(("loss", "leaves"), [
    ("MultiClass", {}),  # CatBoost's defaults: Newton, one step
    ("MultiClass", dict(leaf_estimation_method="Gradient", leaf_estimation_iterations=1)),
    ("MultiClassOneVsAll", dict(leaf_estimation_method="Gradient", leaf_estimation_iterations=1)),
])
def test_multiclass_classifier_string_labels_dataframe_early_stopping(data, loss, leaves):
    X, Xt, labels, w = data
    cols = ["a", "b", "c", "d", "e"]
    Xf, Xtf = pd.DataFrame(X, columns=cols), pd.DataFrame(Xt, columns=cols)
    names = np.array(["setosa", "versicolor", "virginica"])
    y, yt = names[labels["MultiClass"][0]], names[labels["MultiClass"][1]]
    model = cb.CatBoostClassifier(
        loss_function=loss, **leaves, auto_class_weights="Balanced",
        iterations=200, learning_rate=0.2, depth=3, verbose=0, random_seed=0, thread_count=2,
        allow_writing_files=False, early_stopping_rounds=5,
    ).fit(Xf, y, sample_weight=w, eval_set=(Xtf, yt))
    assert model.tree_count_ < 200
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(Xf, y, w)
    assert eng.relative_residual < 1e-12
    for frame in (Xf, Xtf):
        np.testing.assert_allclose(eng.predict_margin(points_of(adapter, frame)), _raw(model, frame),
                                   rtol=0, atol=1e-12)
    # Class weights derived from the data are re-derived without each row (Balanced: from counts).
    assert eng.ensemble.dataset_factor_without is not None


@pytest.mark.parametrize("loss", ["MultiClassOneVsAll", "MultiRMSE"])
def test_multi_output_newton_rounds_l2_to_float32(data, loss):
    """CatBoost's multi-dimensional Newton leaves use float32(l2_leaf_reg * sum(w) / N): with the
    term in double the leaves differ by ~1e-8 relative (measured), far above the self-check's 1e-12."""
    model, y, sw = fit(data, loss, True)
    e = CatBoostAdapter(model).describe(data[0], y, sw)
    assert e.float32_l2
    assert InfluenceEngine(e).relative_residual < 1e-12
    assert InfluenceEngine(replace(e, float32_l2=False)).relative_residual > 1e-9


def test_multiclass_newton_needs_the_full_hessian(data):
    """CatBoost's MultiClass Newton leaves solve the full K x K softmax system: the diagonal
    hessian (each class alone, as XGBoost / LightGBM trees do) misses its leaves by ~0.1-1 relative
    (measured), the joint step reproduces them to rounding."""
    model, y, sw = fit(data, "MultiClass", True)
    e = CatBoostAdapter(model).describe(data[0], y, sw)
    assert e.full_hessian.all()
    assert InfluenceEngine(e).relative_residual < 1e-12
    assert InfluenceEngine(replace(e, full_hessian=np.zeros_like(e.full_hessian))).relative_residual > 1e-3
