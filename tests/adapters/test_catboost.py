"""The CatBoost adapter against real CatBoost models (never mocked).

Checks: the self-check residual at double precision over the supported settings, refusals, the
engine's LeafRefit against a plain per-row numpy refit loop written here, LeafInfluence against
central finite differences of that loop, LeafRefit against true CatBoost retraining with the row
deleted where the retrain keeps the structure (and its gap to the weight-0 retrain), refit leaf
values written back into a native model, what a failed self-check says; the models users have
(``CatBoostClassifier()`` / ``CatBoostRegressor()`` defaults, DataFrames, string labels,
``class_names=[1, 0]``, early stopping) against CatBoost's raw prediction; ``auto_class_weights``
against CatBoost's own class weights, deletion retraining and weight finite differences.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

cb = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")

from influence_gbdt.adapters import adapter_for  # noqa: E402
from influence_gbdt.adapters.catboost import CatBoostAdapter  # noqa: E402

from influence_gbdt.engine import InfluenceEngine, TestPoints  # noqa: E402
from influence_gbdt.ensemble import TreeEnsemble  # noqa: E402
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError  # noqa: E402
from influence_gbdt.validation.models import structure_report  # noqa: E402

N, M = 600, 40
RESIDUALS: dict[str, float] = {}


@pytest.fixture(autouse=True)
def _catboost_info_in_tmp(tmp_path, monkeypatch):
    """CatBoost writes catboost_info/ into the working directory: keep it out of the checkout."""
    monkeypatch.chdir(tmp_path)


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N + M, 5))
    y_cls = (X[:, 0] - X[:, 1] + rng.normal(size=N + M) > 0).astype(float)
    y_reg = 2 * X[:, 0] + np.sin(3 * X[:, 1]) + 0.5 * rng.normal(size=N + M)
    w = rng.uniform(0.3, 2.0, size=N)
    return X[:N], X[N:], y_cls[:N], y_cls[N:], y_reg[:N], y_reg[N:], w


def fit(loss, data, weights=False, **kw):
    X, _, yc, _, yr, _, w = data
    params = dict(iterations=15, depth=4, learning_rate=0.3, verbose=0, random_seed=0, thread_count=2)
    params.update(kw)
    model = (cb.CatBoostClassifier if loss == "Logloss" else cb.CatBoostRegressor)(**params)
    y = yc if loss == "Logloss" else yr
    sw = w if weights else None
    model.fit(X, y, sample_weight=sw)
    return model, y, sw


SETTINGS = [
    ("Logloss", dict(leaf_estimation_method="Newton", leaf_estimation_iterations=1), False),
    ("Logloss", dict(leaf_estimation_method="Newton", leaf_estimation_iterations=10), True),
    ("Logloss", dict(leaf_estimation_method="Gradient", leaf_estimation_iterations=10), False),
    ("Logloss", dict(leaf_estimation_iterations=10, leaf_estimation_backtracking="No"), True),
    ("Logloss", dict(boost_from_average=True, class_weights=[1.0, 3.0]), True),
    ("Logloss", dict(auto_class_weights="Balanced", leaf_estimation_iterations=5), False),
    ("Logloss", dict(scale_pos_weight=2.5, boost_from_average=True), False),
    ("Logloss", dict(boosting_type="Ordered", leaf_estimation_iterations=10), False),
    ("Logloss", dict(bootstrap_type="Bayesian", random_strength=5, rsm=0.6), True),
    ("Logloss", dict(grow_policy="Depthwise", leaf_estimation_iterations=3), False),
    ("RMSE", dict(leaf_estimation_method="Newton", leaf_estimation_iterations=1), True),
    ("RMSE", dict(leaf_estimation_method="Newton", leaf_estimation_iterations=10), False),
    ("RMSE", dict(leaf_estimation_method="Gradient", leaf_estimation_iterations=10), True),
    ("RMSE", dict(boosting_type="Ordered", bootstrap_type="Bernoulli", subsample=0.7), False),
    ("RMSE", dict(grow_policy="Lossguide", max_leaves=12, leaf_estimation_iterations=2), True),
    ("RMSE", dict(boost_from_average=False, l2_leaf_reg=0.0), False),
]


@pytest.mark.parametrize(("loss", "kw", "weights"), SETTINGS)
def test_self_check_and_predictions(data, loss, kw, weights):
    model, y, sw = fit(loss, data, weights, **kw)
    adapter = adapter_for(model)
    assert isinstance(adapter, CatBoostAdapter)
    eng = adapter.prepare(data[0], y, sw)
    # ~1e-16 measured; up to ~2e-13 with boost_from_average (CatBoost's stored bias vs its start).
    assert eng.relative_residual < 1e-12
    RESIDUALS[f"{loss} {kw} weights={weights}"] = eng.relative_residual
    Xt = data[1]
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(eng.predict_margin(test), adapter.raw_predict(Xt), rtol=0, atol=1e-12)


def _rare_label(case: str) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray | None]:
    """Models whose boost_from_average bias puts every row's margin far from 0 (|bias| 7-21)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1000, 4))
    noise = np.abs(X[:, 0] + rng.normal(size=1000))
    w = None
    if case == "soft labels ~1e-6":  # bias -13.6
        kw, y = dict(loss_function="CrossEntropy"), 1e-6 * noise + 1e-7
    elif case == "soft labels ~1 - 1e-6":  # bias +13.6
        kw, y = dict(loss_function="CrossEntropy"), 1.0 - (1e-6 * noise + 1e-7)
    elif case == "1 positive in 1,000, weights 1e-3 and 1e4":  # bias -20.5
        kw, y = {}, (np.arange(1000) == 17).astype(float)
        r = np.random.default_rng(1)
        w = np.where(r.random(1000) < 0.1, 1e4, r.uniform(0.5, 1.5, 1000) * 1e-3)
    else:  # 1 negative in 1,000, Newton steps with backtracking; bias +6.9
        kw, y = dict(leaf_estimation_iterations=10), (np.arange(1000) != 17).astype(float)
    return kw, X, y, w


@pytest.mark.parametrize("case", [
    "soft labels ~1e-6", "soft labels ~1 - 1e-6", "1 positive in 1,000, weights 1e-3 and 1e4",
    "1 negative in 1,000, 10 Newton steps",
])
def test_far_from_zero_margins_reproduced(case):
    """CatBoost's log loss computes p = 1 - 1/(1 + e^m), which cancels where p is small, and starts
    its exp-space approx at its table exp of the bias: both mirrored, every stored leaf is
    recomputed to double rounding (before: refused, 4e-10 to 2e-8 relative)."""
    kw, X, y, w = _rare_label(case)
    model = cb.CatBoostClassifier(iterations=10, depth=3, boost_from_average=True, thread_count=1,
                                  verbose=0, random_seed=0, **kw).fit(X, y, sample_weight=w)
    assert abs(model.get_scale_and_bias()[1]) > 6.5
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, w)
    assert eng.relative_residual < 1e-12  # 0 to 1.3e-13 measured over 60 such models
    test = TestPoints(leaf_index=adapter.leaf_indices(X[:50]), offset=adapter.init_offset(X[:50]))
    np.testing.assert_allclose(eng.predict_margin(test), adapter.raw_predict(X[:50]), rtol=0, atol=1e-12)


def test_backtracking_decisions_matter(data):
    """AnyImprovement rejects steps: the engine decides which (the self-check proves it), and with
    every step accepted the model is not reproduced."""
    model, y, sw = fit("RMSE", data, leaf_estimation_iterations=10)
    assert model.get_all_params()["leaf_estimation_backtracking"] == "AnyImprovement"
    eng = CatBoostAdapter(model).prepare(data[0], y, sw)
    assert eng.relative_residual < 1e-12
    assert eng.n_steps.min() < 10 or np.any((eng.step_scales != 1) & (eng.step_scales != 0))
    T = eng.ensemble.n_trees
    every_step = replace(eng.ensemble, backtracking=np.zeros(T, bool), n_steps=np.full(T, 10),
                         step_scales=np.ones((T, 10)), n_iterations=np.full(T, 10))
    assert InfluenceEngine(every_step).relative_residual > 1e-9


def test_base_margin_is_catboost_bias(data):
    _, _, yc, _, _, _, w = data
    model, y, sw = fit("Logloss", data, True, boost_from_average=True, class_weights=[1.0, 3.0])
    we = f32(f32(w) * np.where(yc == 1, 3.0, 1.0))
    p = np.dot(we, yc) / we.sum()
    assert abs(model.get_scale_and_bias()[1] - np.log(p / (1 - p))) < 1e-6  # CatBoost works in float32
    ens = CatBoostAdapter(model).describe(data[0], y, sw)
    np.testing.assert_allclose(ens.sample_weight, we, rtol=0, atol=0)
    np.testing.assert_allclose(ens.weight_factor, np.where(yc == 1, 3.0, 1.0))


# ----------------------------------------------------------------------------------------------
# A plain numpy refit written from CatBoost's documented rules, one row at a time.


def numpy_refit(model, X, y01, w_eff, Xt, scales, bias, n_rows=None):
    """Test margins of the fixed-structure model retrained (leaves only) with weights ``w_eff`` on
    ``n_rows`` rows (CatBoost's l2 is l2_leaf_reg * sum(w) / n_rows; a deleted row has weight 0
    and is not counted)."""
    P = model.get_all_params()
    lr, n = float(np.float32(P["learning_rate"])), len(y01)
    lam = float(np.float32(P["l2_leaf_reg"])) * w_eff.sum() / (n if n_rows is None else n_rows)
    newton = P["leaf_estimation_method"] == "Newton"
    logloss = P["loss_function"] == "Logloss"
    leaves = model.calc_leaf_indexes(cb.Pool(X)).astype(np.int64)
    test_leaves = model.calc_leaf_indexes(cb.Pool(Xt)).astype(np.int64)
    A, F = np.full(n, bias), np.full(len(Xt), bias)
    for t, n_leaf in enumerate(np.asarray(model.get_tree_leaf_counts(), dtype=np.int64)):
        li, u = leaves[:, t], np.zeros(n_leaf)
        for s in scales[t]:
            if s == 0:
                continue
            m = A + u[li]
            if logloss:
                p = 1 / (1 + np.exp(-m))
                g, h = p - y01, p * (1 - p)
            else:
                g, h = m - y01, np.ones(n)
            G = np.bincount(li, w_eff * g, n_leaf)
            H = np.bincount(li, w_eff * h if newton else w_eff, n_leaf)
            u = u - s * G / (H + lam)
        A += lr * u[li]
        F += lr * u[test_leaves[:, t]]
    return F


def const_bias(loss, y, w, catboost_rounding=False):
    """The boost_from_average bias: the link of the weighted label mean; with ``catboost_rounding``
    as CatBoost computes it (``CalculateWeightedTargetAverage``: float32 label-times-weight products
    summed in double, the mean returned as a float32)."""
    if catboost_rounding:
        mean = float(np.float32(np.cumsum(f32(y * w))[-1] / np.cumsum(w)[-1]))
    else:
        mean = np.dot(w, y) / w.sum()
    return np.log(mean / (1 - mean)) if loss == "Logloss" else mean


REFIT_SETTINGS = [
    ("Logloss", dict(boost_from_average=True, class_weights=[1.0, 2.0]), True),
    ("Logloss", dict(leaf_estimation_iterations=10, leaf_estimation_method="Gradient",
                     leaf_estimation_backtracking="No"), False),
    ("RMSE", dict(leaf_estimation_iterations=10, boosting_type="Ordered", leaf_estimation_backtracking="No"),
     True),
    ("RMSE", dict(leaf_estimation_method="Newton", leaf_estimation_iterations=1), False),
]


@pytest.mark.parametrize(("loss", "kw", "weights"), REFIT_SETTINGS)
def test_refit_and_influence_match_numpy_loop(data, loss, kw, weights):
    X, Xt = data[0], data[1]
    model, y, sw = fit(loss, data, weights, **kw)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, sw)
    ens = eng.ensemble
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    rows = np.array([0, 5, 17, 123, 399, 598])
    refit = eng.leaf_refit(test, rows=rows, on="prediction")
    infl = eng.leaf_influence(test, rows=rows, on="prediction")
    scales = [ens.step_scales[t, : ens.n_steps[t]] for t in range(ens.n_trees)]
    user = np.ones(N) if sw is None else f32(sw)
    factor = ens.weight_factor
    refit_bias = bool(model.get_all_params()["boost_from_average"])

    stored_bias = model.get_scale_and_bias()[1]

    def margins(v, bias=None, bump=0.0, n_rows=None):
        # A retrain (deletion: n_rows given) re-estimates the bias as CatBoost computes it; the weight
        # derivative is of the unrounded mean.
        w_eff = f32(v * factor) + bump
        if bias is None:
            bias = (const_bias(loss, ens.y[:, 0], w_eff, catboost_rounding=n_rows is not None) if refit_bias
                    else stored_bias)
        return numpy_refit(model, X, ens.y[:, 0], w_eff, Xt, scales, bias, n_rows)

    base = margins(user, stored_bias)
    np.testing.assert_allclose(base, adapter.raw_predict(Xt), rtol=0, atol=1e-12)
    eps = 1e-4
    for k, i in enumerate(rows):
        v = user.copy()
        v[i] = 0.0  # deleted: weight 0 and one row fewer
        np.testing.assert_allclose(refit[k], base - margins(v, n_rows=N - 1), rtol=0, atol=1e-10)
        bump = np.zeros(N)
        bump[i] = eps * factor[i]  # d/d(user weight), in float64 (no float32 rounding of 1 +- eps)
        fd = (margins(user, bump=bump) - margins(user, bump=-bump)) / (2 * eps)
        np.testing.assert_allclose(infl[k], fd, rtol=1e-5, atol=1e-9 * max(1.0, np.abs(fd).max()))
    # 40 rows deleted together: the replay on the rows that remain, against the loop without them
    group = np.random.default_rng(4).choice(N, 40, replace=False)
    keep = ~np.isin(np.arange(N), group)
    without = adapter.describe(X[keep], y[keep], None if sw is None else sw[keep])
    together = eng.group_refit(test, without, on="prediction")
    v = user.copy()
    v[group] = 0.0
    truth = base - margins(v, n_rows=N - group.size)
    assert np.abs(truth).max() > 1e-3
    np.testing.assert_allclose(together, truth, rtol=0, atol=1e-10)


# ----------------------------------------------------------------------------------------------
# Ground truth: CatBoost itself.


@pytest.mark.parametrize(
    ("loss", "from_average", "weighted"),
    [("Logloss", False, True), ("Logloss", True, False), ("RMSE", False, False), ("RMSE", True, True)],
)
def test_leaf_refit_equals_deletion_retraining_not_weight_zero(data, loss, from_average, weighted, tmp_path):
    """LeafRefit = CatBoost retrained with the row *deleted* (N - 1 rows in l2_leaf_reg * sum(w) / N;
    a re-estimated bias from CatBoost's float32 mean), to 1e-9, wherever the retrain keeps the
    structure; the weight-0 retrain (N rows) differs from it by far more. The refit leaves written
    back into a native model predict the same."""
    X, Xt = data[0], data[1]
    params = dict(
        iterations=10,
        depth=3,
        learning_rate=0.3,
        verbose=0,
        random_seed=3,
        thread_count=2,
        random_strength=0,
        bootstrap_type="No",
        boost_from_average=from_average,
        allow_writing_files=False,
    )
    Model = cb.CatBoostClassifier if loss == "Logloss" else cb.CatBoostRegressor
    y = data[2] if loss == "Logloss" else data[4]
    sw = f32(data[6]) if weighted else np.ones(N)
    model = Model(**params).fit(X, y, sample_weight=sw if weighted else None)
    borders = str(tmp_path / "borders.tsv")
    grid = cb.Pool(X, y)
    grid.quantize()
    grid.save_quantization_borders(borders)  # the full grid: a deleted row must not re-quantize
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, sw if weighted else None)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    rows = np.arange(0, N, 30)
    refit = eng.leaf_refit(test, rows=rows, on="prediction")
    values, base = eng.refit_leaf_values(rows)
    raw = adapter.raw_predict(Xt)
    kept, worst, zero_gap = 0, 0.0, 0.0
    for k, i in enumerate(rows):
        keep = np.arange(N) != i
        retrained = Model(**params, input_borders=borders).fit(X[keep], y[keep], sample_weight=sw[keep])
        if not structure_report(model, retrained, X, keep, Xt)["same"]:
            continue
        kept += 1
        truth = raw - retrained.predict(Xt, prediction_type="RawFormulaVal")
        np.testing.assert_allclose(refit[k], truth, rtol=0, atol=1e-9)
        worst = max(worst, float(np.abs(refit[k] - truth).max()))
        if kept <= 3:  # weight 0 instead of deletion: same rows for the quantization, N unchanged
            zero = Model(**params, input_borders=borders).fit(X, y, sample_weight=np.where(keep, sw, 0.0))
            if structure_report(model, zero, X, keep, Xt)["same"]:
                gap = raw - zero.predict(Xt, prediction_type="RawFormulaVal") - refit[k]
                zero_gap = max(zero_gap, float(np.abs(gap).max()))
        # The engine's refit leaves written back into a native model predict the same.
        native = model.copy()
        native.shrink(native.tree_count_)
        native.set_leaf_values(values[k] / native.get_scale_and_bias()[0])
        native.set_scale_and_bias(native.get_scale_and_bias()[0], float(base[k]))
        np.testing.assert_allclose(
            native.predict(Xt, prediction_type="RawFormulaVal"), raw - refit[k], rtol=0, atol=1e-12
        )
    print(
        f"{loss} boost_from_average={from_average} weighted={weighted}: structure kept in {kept}/{len(rows)} "
        f"deletion retrains, max |refit - retrain| {worst:.1e}; weight-0 retrain differs by {zero_gap:.1e}"
    )
    assert kept >= 3, f"structure kept in only {kept}/{len(rows)} retrains: the comparison is vacuous"
    assert zero_gap > 1e-6


# ----------------------------------------------------------------------------------------------
# Inputs: DataFrames with one-hot categoricals, baselines; refusals.


def test_dataframe_one_hot_categoricals_and_baseline(data):
    X, Xt, yc = data[0], data[1], data[2]
    rng = np.random.default_rng(1)
    cats = np.array(["a", "b", "c"])[rng.integers(0, 3, N + M)]
    frame = pd.DataFrame(np.vstack([X, Xt]), columns=[f"f{j}" for j in range(5)]).assign(c=cats)
    y = np.where(yc + (cats[:N] == "a") > 0.5, "yes", "no")
    baseline = 0.4 * rng.normal(size=N + M)
    model = cb.CatBoostClassifier(
        iterations=12,
        depth=3,
        verbose=0,
        random_seed=0,
        thread_count=2,
        cat_features=["c"],
        one_hot_max_size=4,
        leaf_estimation_iterations=4,
    )
    model.fit(cb.Pool(frame[:N], y, cat_features=["c"], baseline=baseline[:N]))
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(frame[:N], y, init_score=baseline[:N])
    assert eng.relative_residual < 1e-13
    ft = frame[N:]
    test = TestPoints(leaf_index=adapter.leaf_indices(ft), offset=adapter.init_offset(ft, baseline[N:]))
    pool = cb.Pool(ft, cat_features=["c"], baseline=baseline[N:])
    native = model.predict(pool, prediction_type="RawFormulaVal")
    np.testing.assert_allclose(adapter.raw_predict(ft, baseline[N:]), native, atol=1e-12)
    np.testing.assert_allclose(eng.predict_margin(test), native, atol=1e-12)
    with pytest.raises(ReproductionError, match="init_score"):
        adapter.prepare(frame[:N], y)  # baseline forgotten


def test_refusals(data):
    X, _, yc, _, yr, _, _ = data
    # CTR models (categorical features with more values than one_hot_max_size): test_catboost_ctr.py.
    langevin = cb.CatBoostRegressor(iterations=3, verbose=0, langevin=True, thread_count=2).fit(X, yr)
    with pytest.raises(UnsupportedModelError, match="langevin"):
        CatBoostAdapter(langevin)
    posterior = cb.CatBoostRegressor(iterations=3, verbose=0, posterior_sampling=True,
                                     thread_count=2).fit(X, yr)
    with pytest.raises(UnsupportedModelError, match="posterior_sampling=True"):  # CatBoost sets langevin too
        CatBoostAdapter(posterior)
    shrink = cb.CatBoostRegressor(iterations=3, verbose=0, model_shrink_rate=0.1, thread_count=2).fit(X, yr)
    with pytest.raises(UnsupportedModelError, match="model_shrink_rate"):
        CatBoostAdapter(shrink)
    expectile = cb.CatBoostRegressor(iterations=3, verbose=0, loss_function="Expectile:alpha=0.3",
                                     thread_count=2).fit(X, yr)
    with pytest.raises(UnsupportedModelError, match=r"'Expectile' is not supported.*Supported: Logloss"):
        CatBoostAdapter(expectile)
    mono = cb.CatBoostClassifier(
        iterations=3, verbose=0, monotone_constraints=[1, 0, 0, 0, 0], thread_count=2
    ).fit(X, yc)
    with pytest.raises(UnsupportedModelError, match="monotone_constraints"):
        CatBoostAdapter(mono)
    with pytest.raises(UnsupportedModelError, match="not trained"):
        CatBoostAdapter(cb.CatBoostRegressor())


def test_wrong_data_refused(data):
    model, y, sw = fit("Logloss", data, True, leaf_estimation_iterations=10)
    adapter = CatBoostAdapter(model)
    with pytest.raises(ReproductionError, match="training rows"):
        adapter.prepare(data[0], y[::-1].copy(), sw)
    with pytest.raises(ReproductionError, match="sample weights"):
        adapter.prepare(data[0], y, None)
    with pytest.raises(InputError, match="classes"):
        adapter.prepare(data[0], y + 2, sw)
    with pytest.raises(InputError, match="one label per row"):
        adapter.prepare(data[0], y[:-1], sw)


def test_rounding_level_step_rejections_are_resolved(data):
    """CatBoost's Logloss loss is computed with a fast exp and float32 logs: it rejects steps that
    improve the exact loss by ~1e-7. Deciding by the exact loss misses them; the engine's mirror of
    CatBoost's arithmetic reproduces every tree. RMSE near-ties (a few ulps) are resolved by the
    replay's tie search."""
    for loss in ("Logloss", "RMSE"):
        model, y = fit(loss, data, leaf_estimation_iterations=10, learning_rate=0.5, depth=3)[:2]
        eng = CatBoostAdapter(model).prepare(data[0], y)
        assert eng.relative_residual < 1e-12
        if loss == "Logloss":
            assert eng.ensemble.backtracking_objective == "fast_logloss"
            exact = InfluenceEngine(replace(eng.ensemble, backtracking_objective="exact"))
            assert exact.relative_residual > 1e-9


def test_reproduction_error_tells_rounding_from_other_data(data, monkeypatch):
    """Other data changes every tree: "not reproduced". A near-tie of AnyImprovement decided
    otherwise (here: in exact arithmetic, not CatBoost's fast exp) changes only the trees it is in,
    by up to ~1e-3: "reproduced except for rounding", with the cause."""
    import influence_gbdt.adapters.catboost as module

    model, y, _ = fit("Logloss", data, iterations=50, depth=3, leaf_estimation_iterations=10)
    adapter = CatBoostAdapter(model)
    assert adapter.prepare(data[0], y).relative_residual < 1e-12
    flipped = y.copy()
    flipped[0] = 1 - flipped[0]
    with pytest.raises(ReproductionError, match=r"not reproduced .* 50 of 50 trees differ"):
        adapter.prepare(data[0], flipped)
    monkeypatch.setattr(module.CatBoostObjective, "backtracking_objective", lambda self: "exact")
    with pytest.raises(ReproductionError, match=r"except for rounding: .* in \d+ of 50 trees .* near-ties"):
        adapter.prepare(data[0], y)


# ----------------------------------------------------------------------------------------------
# The models users have: scikit-learn wrappers with their defaults, DataFrames, string labels,
# early stopping. Explained margins must equal CatBoost's own raw prediction.


def _explained_margins(adapter, eng, X):
    return eng.predict_margin(TestPoints(leaf_index=adapter.leaf_indices(X), offset=adapter.init_offset(X)))


@pytest.fixture(scope="module")
def frame_data(data):
    X, Xt, yc, ytc, yr, ytr, w = data
    cols = ["age", "income", "score", "tenure", "visits"]
    return pd.DataFrame(X, columns=cols), pd.DataFrame(Xt, columns=cols), yc, ytc, yr, ytr, w


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_default_sklearn_models_on_dataframes(frame_data, kind):
    """``CatBoostClassifier()`` / ``CatBoostRegressor()`` as users train them: 1000 trees, the auto
    learning rate, MVS bootstrap, random_strength 1, and for the classifier 10 Newton steps per leaf
    with AnyImprovement backtracking; DataFrame input and string labels."""
    X, Xt, yc, _, yr, _, _ = frame_data
    X, Xt = X[:300], Xt[:20]
    if kind == "classifier":
        y = np.where(yc[:300] == 1, "churn", "stay")  # class_names ['churn', 'stay']: 'stay' is class 1
        model = cb.CatBoostClassifier(thread_count=2, verbose=0, allow_writing_files=False).fit(X, y)
    else:
        y = yr[:300]
        model = cb.CatBoostRegressor(thread_count=2, verbose=0, allow_writing_files=False).fit(X, y)
    p = model.get_all_params()
    assert model.tree_count_ == 1000
    if kind == "classifier":
        assert (p["leaf_estimation_iterations"], p["leaf_estimation_backtracking"]) == (10, "AnyImprovement")
        assert list(model.classes_) == ["churn", "stay"]
    adapter = adapter_for(model)
    eng = adapter.prepare(X, y)
    assert eng.relative_residual < 1e-12
    for rows in (X, Xt):
        native = model.predict(rows, prediction_type="RawFormulaVal")
        np.testing.assert_allclose(_explained_margins(adapter, eng, rows), native, rtol=0, atol=1e-10)
    if kind == "classifier":  # the margin is the log-odds of class_names[1]
        proba = model.predict_proba(Xt)[:, 1]
        np.testing.assert_allclose(1 / (1 + np.exp(-_explained_margins(adapter, eng, Xt))), proba, atol=1e-12)


def test_adult_one_hot_categoricals_at_the_defaults():
    """The flagship: ``CatBoostClassifier(cat_features=..., one_hot_max_size=255)``, otherwise at its
    defaults (1000 trees x 10 Newton steps with AnyImprovement), on UCI Adult's training split with
    its categorical columns as pandas categories. Categorical features make CatBoost shuffle the
    learn set even when every one is one-hot encoded, and it sums the backtracking objective in that
    order: summed in data order, 1-3 of its ~10,000 tries are decided otherwise (measured, trees 70,
    76 and 111 at 2 threads); in shuffled order every tree is reproduced."""
    from influence_gbdt import BoostingInfluence
    from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult

    X, y = load_adult("train")
    Xt = load_adult("test")[0].iloc[:500]
    for frame in (X, Xt):
        for col in ADULT_CATEGORICAL:
            frame[col] = pd.Categorical(frame[col], categories=sorted(X[col].unique()))
    model = cb.CatBoostClassifier(cat_features=list(ADULT_CATEGORICAL), one_hot_max_size=255, verbose=0,
                                  allow_writing_files=False).fit(X, y)
    p = model.get_all_params()
    assert (model.tree_count_, p["leaf_estimation_iterations"]) == (1000, 10)
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    assert ex.reproduction_residual_ < 1e-12
    eng = ex.engine_
    assert not np.array_equal(eng.ensemble.objective_order, np.arange(len(y)))
    native = model.predict(Xt, prediction_type="RawFormulaVal")
    np.testing.assert_allclose(_explained_margins(ex.adapter_, eng, Xt), native, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    ("use_best_model", "kw"), [(True, {}), (False, dict(auto_class_weights="Balanced"))], ids=["best", "all"]
)
def test_early_stopping(frame_data, use_best_model, kw):
    """eval_set + early_stopping_rounds: with use_best_model (the default with an eval_set) CatBoost
    shrinks the model to best_iteration_ + 1 trees; without it all trees trained up to the stop are
    kept, and predict uses them all. Either way the stored trees are what is explained (here also
    with auto class weights and sample weights)."""
    X, Xt, yc, ytc, _, _, w = frame_data
    sw = w if kw else None
    model = cb.CatBoostClassifier(
        iterations=300, depth=4, thread_count=2, verbose=0, allow_writing_files=False,
        early_stopping_rounds=10, use_best_model=use_best_model, **kw,
    ).fit(X, yc, sample_weight=sw, eval_set=(Xt, ytc))
    assert model.tree_count_ < 300
    expected = model.best_iteration_ + 1 if use_best_model else model.best_iteration_ + 11
    assert model.tree_count_ == expected
    adapter = adapter_for(model)
    eng = adapter.prepare(X, yc, sw)
    assert eng.ensemble.n_trees == model.tree_count_
    assert eng.relative_residual < 1e-12
    for rows in (X, Xt):
        native = model.predict(rows, prediction_type="RawFormulaVal")
        np.testing.assert_allclose(_explained_margins(adapter, eng, rows), native, rtol=0, atol=1e-12)


def test_class_names_reversed_make_label_zero_positive(frame_data):
    """``class_names=[1, 0]``: label 0 is class index 1 (the margin's positive class)."""
    X, Xt, yc, _, _, _, w = frame_data
    model = cb.CatBoostClassifier(
        iterations=20, depth=3, thread_count=2, verbose=0, allow_writing_files=False, class_names=[1, 0],
        leaf_estimation_iterations=3,
    ).fit(X, yc.astype(int), sample_weight=w)
    adapter = adapter_for(model)
    eng = adapter.prepare(X, yc.astype(int), w)
    np.testing.assert_array_equal(eng.ensemble.y[:, 0], 1 - yc)
    assert eng.relative_residual < 1e-12
    margins = _explained_margins(adapter, eng, Xt)
    native = model.predict(Xt, prediction_type="RawFormulaVal")
    np.testing.assert_allclose(margins, native, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.predict_proba(Xt)[:, 1], 1 / (1 + np.exp(-margins)), atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Class weights CatBoost derives from the data (auto_class_weights): recomputed without each row.


@pytest.fixture(scope="module")
def imbalanced():
    """400 rows, about 1 in 4 positive, non-integer float32 sample weights."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(460, 5))
    y = (X[:, 0] - X[:, 1] + rng.normal(size=460) > 1.2).astype(int)
    return X[:400], X[400:], y[:400], f32(rng.uniform(0.3, 2.0, 400))


def _auto_model(X, y, sw, **kw):
    params = dict(iterations=3, depth=3, learning_rate=0.3, verbose=0, random_seed=0, thread_count=1,
                  random_strength=0, bootstrap_type="No", allow_writing_files=False)
    params.update(kw)
    return cb.CatBoostClassifier(**params).fit(X, y, sample_weight=sw), params


@pytest.mark.parametrize("kind", ["Balanced", "SqrtBalanced"])
@pytest.mark.parametrize("weighted", [False, True])
def test_auto_class_weights_without_a_row_are_catboosts(imbalanced, kind, weighted):
    """The class weights the adapter derives with row i deleted are the ones CatBoost stores when
    retrained without row i: from class counts, or from per-class weight sums truncated to integers
    (a deletion that does not move the integer part changes nothing)."""
    X, _, y, w = imbalanced
    sw = w.copy() if weighted else None
    if weighted:  # put class 1's weight sum just above an integer: deleting row 0 (weight 0.5) moves it
        positive = np.flatnonzero(y == 1)
        sw[positive[0]] = 0.5
        total = float(np.float32(sw[y == 1].sum()))
        sw[positive[1]] += np.ceil(total) - total + 0.25  # sum = integer + 0.25
    model, params = _auto_model(X, y, sw, auto_class_weights=kind)
    ens = CatBoostAdapter(model).describe(X, y, sw)
    np.testing.assert_array_equal(ens.dataset_factor, f32(model.get_all_params()["class_weights"]))
    assert ens.dataset_factor_without is not None
    rows = [*np.flatnonzero(y == 0)[:3], *np.flatnonzero(y == 1)[:3]]
    moved = 0
    for i in rows:
        keep = np.arange(len(y)) != i
        retrained = cb.CatBoostClassifier(**params).fit(
            X[keep], y[keep], sample_weight=None if sw is None else sw[keep])
        truth = f32(retrained.get_all_params()["class_weights"])
        np.testing.assert_array_equal(ens.dataset_factor_without[i], truth)
        moved += not np.array_equal(truth, ens.dataset_factor)
    assert moved >= (len(rows) if not weighted else 1)  # counts: every deletion moves them


@pytest.fixture(scope="module")
def grid(imbalanced, tmp_path_factory):
    """CatBoost's full quantization grid of the training rows (so a deletion cannot re-quantize)."""
    X, _, y, _ = imbalanced
    path = str(tmp_path_factory.mktemp("grid") / "borders.tsv")
    pool = cb.Pool(X, y)
    pool.quantize()
    pool.save_quantization_borders(path)
    return path


AUTO_REFIT = [  # settings under which many deletion retrains keep the structure (measured 7-17 of 20)
    ("Balanced", False, dict(depth=3)),
    ("Balanced", True, dict(depth=2, boost_from_average=True)),
    ("SqrtBalanced", True, dict(depth=3, leaf_estimation_iterations=5)),
    ("SqrtBalanced", False, dict(depth=2, boost_from_average=True, leaf_estimation_iterations=5)),
]


@pytest.mark.parametrize(("kind", "weighted", "kw"), AUTO_REFIT)
def test_auto_class_weights_leaf_refit_equals_deletion_retraining(imbalanced, grid, kind, weighted, kw):
    """LeafRefit with auto_class_weights equals CatBoost retrained with the row deleted (class
    weights re-derived, N - 1 in the l2 term) wherever the retrain keeps the structure; holding the
    class weights fixed, as before, is off by a large fraction of the effect."""
    X, Xt, y, w = imbalanced
    sw = w if weighted else None
    model, params = _auto_model(X, y, sw, auto_class_weights=kind, iterations=6, **kw)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, sw)
    fields = {k: getattr(eng.ensemble, k) for k in TreeEnsemble.__dataclass_fields__ if k != "leaf_offset"}
    held = InfluenceEngine(TreeEnsemble(**{**fields, "dataset_factor_without": None}))
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt))
    rows = np.arange(0, len(y), 20)
    refit = eng.leaf_refit(test, rows=rows, on="prediction")
    refit_held = held.leaf_refit(test, rows=rows, on="prediction")
    raw = model.predict(Xt, prediction_type="RawFormulaVal")
    kept, worst, worst_held = 0, 0.0, 0.0
    for k, i in enumerate(rows):
        keep = np.arange(len(y)) != i
        retrained = cb.CatBoostClassifier(**params, input_borders=grid).fit(
            X[keep], y[keep], sample_weight=None if sw is None else sw[keep])
        if not structure_report(model, retrained, X, keep, Xt)["same"]:
            continue
        kept += 1
        truth = raw - retrained.predict(Xt, prediction_type="RawFormulaVal")
        np.testing.assert_allclose(refit[k], truth, rtol=0, atol=1e-9)
        worst = max(worst, float(np.abs(refit[k] - truth).max()))
        worst_held = max(worst_held, float(np.abs(refit_held[k] - truth).max() / np.abs(truth).max()))
    print(f"{kind} weighted={weighted} {kw}: structure kept in {kept}/{len(rows)} deletion retrains, "
          f"max |refit - retrain| {worst:.1e}; class weights held fixed: {worst_held:.0%} of max |effect|")
    assert kept >= 3, f"structure kept in only {kept}/{len(rows)} retrains: the comparison is vacuous"
    assert worst_held > 0.05


@pytest.mark.parametrize(
    ("kind", "kw"),
    [("Balanced", dict()), ("SqrtBalanced", dict(leaf_estimation_iterations=5))],
)
def test_auto_class_weights_leaf_influence_equals_retraining_differences(imbalanced, kind, kw):
    """LeafInfluence = central differences of CatBoost retrained with row i's weight v_i +- eps.
    With non-integer weights the truncated class sums do not move, so the class weights' derivative
    is 0 (they stay in every row's weight). CatBoost trains on float32(v_i * class weight): the step
    is taken in that weight (divided by the class weight) so that its rounding (1e-7 relative, 1e-4
    of the difference at eps = 1e-3) does not enter; measured agreement ~1e-9 relative."""
    X, Xt, y, w = imbalanced
    model, params = _auto_model(X, y, w, auto_class_weights=kind, iterations=8, **kw)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, w)
    rows = np.arange(0, len(y), 80)
    infl = eng.leaf_influence(TestPoints(leaf_index=adapter.leaf_indices(Xt)), rows=rows, on="prediction")
    kept = 0
    for k, i in enumerate(rows):
        preds, steps = [], []
        for sign in (1, -1):
            v = w.copy()
            v[i] = f32(w[i] + sign * 1e-3)
            retrained = cb.CatBoostClassifier(**params).fit(X, y, sample_weight=v)
            if not structure_report(model, retrained, X, None, Xt)["same"]:
                break
            preds.append(retrained.predict(Xt, prediction_type="RawFormulaVal"))
            class_weight = np.float32(retrained.get_all_params()["class_weights"][y[i]])
            steps.append(float(np.float32(v[i]) * class_weight) / float(class_weight))
        else:
            kept += 1
            fd = (preds[0] - preds[1]) / (steps[0] - steps[1])
            np.testing.assert_allclose(infl[k], fd, rtol=0, atol=1e-7 * np.abs(fd).max())
    assert kept >= 3
