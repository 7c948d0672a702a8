"""CatBoost models with CTR (target statistic) categorical splits, against CatBoost itself.

Checks: the random stream against the values asserted in CatBoost's ``util/random/fast_ut.cpp`` and
the shuffles against a plain Fisher-Yates loop written here; the training-time leaves rebuilt from
the model and the data reproduce every stored leaf value at double precision (defaults with feature
combinations, sample weights with zeros, class weights, RMSE, Ordered, has_time, fold settings, one-
hot values inside combinations, a reloaded ``.cbm``) while the final model's leaves would not;
``CatBoostClassifier(cat_features=...)`` on a DataFrame with string categories and string labels,
binary and 3-class (MultiClass, MultiClassOneVsAll); LeafRefit against CatBoost retrained with the
row's weight at 0 (the row's label staying in the CTR statistics, as it does in CatBoost's weight-0
retrain) and LeafInfluence against finite differences of CatBoost retrained with the row's weight
moved; refusals.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

cb = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")

from influence_gbdt.adapters import catboost_ctr  # noqa: E402
from influence_gbdt.adapters.catboost import CatBoostAdapter  # noqa: E402

from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult  # noqa: E402
from influence_gbdt.engine import InfluenceEngine, TestPoints  # noqa: E402
from influence_gbdt.ensemble import TreeEnsemble  # noqa: E402
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError  # noqa: E402

N, M = 800, 200
CAT = list(ADULT_CATEGORICAL)


@pytest.fixture(autouse=True)
def _catboost_info_in_tmp(tmp_path, monkeypatch):
    """CatBoost writes catboost_info/ into the working directory: keep it out of the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def adult():
    X, y = load_adult()
    rows = np.random.default_rng(0).choice(len(y), 1500 + M, replace=False)
    X, y = X.iloc[rows].reset_index(drop=True), y[rows]
    return X.iloc[:1500].reset_index(drop=True), y[:1500], X.iloc[1500:].reset_index(drop=True), y[1500:]


def _params(**kw):
    params = dict(iterations=30, depth=4, thread_count=2, verbose=0, allow_writing_files=False, random_seed=0)
    params.update(kw)
    return params


def _structure(model) -> str:
    """The model's splits and the CTR / border descriptions they refer to (no leaf values, no CTR
    tables): equal strings mean the same trees."""
    path = "structure.json"
    model.save_model(path, format="json")
    with open(path) as fh:
        j = json.load(fh)
    return json.dumps([j["features_info"], [t["splits"] for t in j["oblivious_trees"]]], sort_keys=True)


# ----------------------------------------------------------------------------------------------
# The random stream and the shuffles


def _reference_shuffle(n: int, block: int, rng) -> list[int]:
    """Fisher-Yates over blocks (util/random/shuffle.h, NCB::Shuffle) written out, one
    ``Uniform(i + 1)`` draw of ``rng`` per swap."""
    blocks = list(range(-(-n // block)))
    for i in range(1, len(blocks)):
        j = int(rng.uniform(i + 1, 1)[0])
        blocks[i], blocks[j] = blocks[j], blocks[i]
    return [r for b in blocks for r in range(b * block, min((b + 1) * block, n))]


def test_random_stream_and_shuffles():
    # util/random/fast_ut.cpp: TFastRng64(17).GenRand() and Uniform(100) of TFastRng64(0, 1, 2, 3).
    assert catboost_ctr.CatBoostRng(17).draw() == 14895365814383052362
    expected = [37, 43, 76, 17, 12, 87, 60, 4, 83, 47, 57, 81, 28, 45, 66, 74, 18, 17, 18, 75]
    assert catboost_ctr.CatBoostRng.from_streams(0, 1, 2, 3).uniform(100, 20).tolist() == expected
    for n, block in ((1, 1), (7, 1), (1000, 1), (1001, 3), (2050, 256)):
        fast, slow = catboost_ctr.CatBoostRng(5), catboost_ctr.CatBoostRng(5)
        got = fast.shuffle(n, block)
        assert got.tolist() == _reference_shuffle(n, block, slow)
        assert fast.draw() == slow.draw()  # the same number of draws taken


# ----------------------------------------------------------------------------------------------
# The CTR buckets and bins, against loops written out


@pytest.mark.parametrize("n_keys", [3, 70_000])
def test_online_ctr_bins_count_the_earlier_rows_of_each_bucket(n_keys):
    # More than 2**16 buckets takes the sort by bucket and position instead of numpy's 16-bit radix sort.
    rng = np.random.default_rng(n_keys)
    n = 80_000
    keys = rng.permutation(np.arange(n) % n_keys)
    classes = rng.integers(0, 2, n).astype(float)
    order = rng.permutation(n)
    good, total = np.zeros(n), np.zeros(n)
    seen_good: dict[int, int] = {}
    seen: dict[int, int] = {}
    for row in order:  # CatBoost's online counts: the bucket's rows before this one along the fold
        k = int(keys[row])
        good[row], total[row] = seen_good.get(k, 0), seen.get(k, 0)
        seen_good[k] = seen_good.get(k, 0) + int(classes[row] > 0)
        seen[k] = seen.get(k, 0) + 1
    ctr = {"ctr_type": "Borders", "prior_numerator": 0.5, "scale": 15.0, "target_border_idx": 0}
    f32 = np.float32
    value = ((good.astype(f32) + f32(0.5)) / (total + 1).astype(f32)).astype(f32)
    expected = np.floor((value / f32(1.0) * f32(15.0)).astype(f32)).astype(np.int64)
    np.testing.assert_array_equal(catboost_ctr.online_ctr_bins(ctr, keys, classes, order), expected)


def test_bucket_numbers_are_ranks_of_the_distinct_values():
    rng = np.random.default_rng(3)
    for bound in (1, 7, 50_000, 10**12):  # small and large value ranges (a table, or a sort)
        values = rng.integers(0, bound, 20_000)
        ranks = np.searchsorted(np.array(sorted(set(values.tolist()))), values)
        np.testing.assert_array_equal(catboost_ctr._numbered(values, bound), ranks)


# ----------------------------------------------------------------------------------------------
# The self-check on the training data


def _ctr_model(adult, n=N, loss="Logloss", weights=None, **kw):
    X, y, Xt, _ = adult
    X = X.iloc[:n]
    target = X.pop("hours-per-week").to_numpy(float) if loss == "RMSE" else y[:n]
    Xt = Xt.drop(columns="hours-per-week") if loss == "RMSE" else Xt
    model = cb.CatBoost(_params(loss_function=loss, cat_features=CAT, **kw))  # takes every parameter
    model.fit(X, target, sample_weight=weights)
    return model, X, target, Xt


CONFIGS = {
    "defaults": dict(),
    "feature combinations": dict(max_ctr_complexity=4, depth=6),
    "weights with zeros": dict(weights="zeros"),
    "auto class weights": dict(auto_class_weights="Balanced"),
    "class weights": dict(class_weights=[1.0, 2.5]),
    "RMSE": dict(loss="RMSE"),
    "Ordered": dict(boosting_type="Ordered"),
    "has_time": dict(has_time=True),
    "permutation_count 1, n > 1000": dict(permutation_count=1, n=1500),
    "fold_permutation_block 16, seed 7": dict(fold_permutation_block=16, random_seed=7),
    "one-hot values inside combinations": dict(one_hot_max_size=10, max_ctr_complexity=3),
    "Gradient steps": dict(leaf_estimation_method="Gradient", leaf_estimation_iterations=3),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_self_check_exact(adult, name):
    """Every stored leaf value recomputed from the rebuilt training-time leaves to 1e-10 relative
    (measured <= 5e-14: double-precision rounding); the final model's leaves (calc_leaf_indexes,
    CTR tables over the whole learn set) are a different ensemble; test predictions = CatBoost's."""
    kw = dict(CONFIGS[name])
    n = kw.pop("n", N)
    weights = None
    if kw.pop("weights", None):
        weights = np.random.default_rng(3).uniform(0.2, 3.0, n).astype(np.float32)
        weights[::10] = 0.0
    model, X, y, Xt = _ctr_model(adult, n=n, weights=weights, **kw)
    ctrs = json.loads(_structure(model))[0]["ctrs"]
    assert ctrs, "no CTR feature: the test proves nothing"
    if "combinations" in name:
        assert any(len(c["elements"]) > 1 for c in ctrs), "no feature combination in the model"
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y, weights)
    assert eng.relative_residual <= 1e-10
    final = adapter.leaf_indices(X)
    moved = float(np.mean(final != eng.ensemble.leaf_index))
    assert moved > 0.0 or kw.get("has_time"), "training-time leaves equal the final ones: vacuous"
    native = model.predict(Xt, prediction_type="RawFormulaVal")
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(eng.predict_margin(test), native, rtol=0, atol=1e-10)
    print(f"{name}: residual {eng.relative_residual:.1e}, (tree, row) pairs moved by online CTRs {moved:.3f}")


def test_backtracking_objective_is_summed_in_averaging_order(adult):
    """CatBoost sums the AnyImprovement objective over the rows in averaging-fold order; its
    float32 lane sums depend on the order, and near-ties are decided by them. The adapter passes
    the fold as ``objective_order``: the model is reproduced; summed in data order, one of its 30
    trees takes another path (measured 5.8e-6)."""
    model, X, y, _ = _ctr_model(adult, depth=6, leaf_estimation_iterations=10,
                                leaf_estimation_backtracking="AnyImprovement")
    adapter = CatBoostAdapter(model)
    assert adapter.prepare(X, y).relative_residual <= 1e-10
    e = adapter.describe(X, y)
    assert not np.array_equal(e.objective_order, np.arange(len(y)))
    data_order = replace(e, objective_order=np.arange(len(y)))
    assert InfluenceEngine(data_order).relative_residual > 1e-7
    with pytest.raises(InputError, match="objective_order must be a permutation"):
        TreeEnsemble.build(leaf_index=np.zeros((1, 3), np.int32), leaf_values=[np.zeros(1)], y=np.zeros(3),
                           loss="squared_error", objective_order=[0, 0, 1])


def test_reloaded_model(adult, tmp_path):
    model, X, y, _ = _ctr_model(adult)
    path = str(tmp_path / "m.cbm")
    model.save_model(path)
    loaded = cb.CatBoost().load_model(path)
    assert CatBoostAdapter(loaded).prepare(X, y).relative_residual <= 1e-10


def test_classifier_defaults_on_a_dataframe_with_strings(adult):
    """``CatBoostClassifier(cat_features=[...])`` as users train it (auto learning rate, MVS
    bootstrap, random_strength 1, 10 Newton steps with AnyImprovement; CatBoost chose
    max_ctr_complexity 1 here), fewer trees to stay fast; string categories in a DataFrame and
    string labels."""
    X, y, Xt, _ = adult
    labels = np.where(y == 1, "rich", "modest")
    model = cb.CatBoostClassifier(iterations=60, cat_features=CAT, thread_count=2, verbose=0,
                                  allow_writing_files=False).fit(X, labels)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, labels)
    assert eng.relative_residual <= 1e-10
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(eng.predict_margin(test), model.predict(Xt, prediction_type="RawFormulaVal"),
                               rtol=0, atol=1e-10)


# ----------------------------------------------------------------------------------------------
# LeafRefit and LeafInfluence against CatBoost retraining


def test_leaf_refit_equals_weight_zero_retraining(adult):
    """LeafRefit on a CTR model keeps the row's label in every CTR statistic (the training-time
    leaves and the final tables stay): that is CatBoost retrained with the row's weight at 0
    (weights never enter CTR counts; the random stream is unchanged with n unchanged). With
    l2_leaf_reg=0 deletion and weight 0 coincide in the leaf values (the l2 term's N is their only
    other difference), so the retrain is the ground truth wherever it keeps the structure; agreement
    to 1e-9 of the largest change (float32 leaf storage, measured ~1e-13)."""
    params = _params(iterations=12, depth=3, learning_rate=0.3, l2_leaf_reg=0, random_strength=0,
                     bootstrap_type="No", cat_features=CAT)
    X, y, Xt, _ = adult
    X, y = X.iloc[:N], y[:N]
    model = cb.CatBoostClassifier(**params).fit(X, y)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    rows = np.arange(3, N, 40)
    refit = eng.leaf_refit(test, rows=rows, on="prediction")
    raw = model.predict(Xt, prediction_type="RawFormulaVal")
    reference = _structure(model)
    kept = 0
    for k, i in enumerate(rows):
        w = np.ones(N)
        w[i] = 0.0
        retrained = cb.CatBoostClassifier(**params).fit(X, y, sample_weight=w)
        if _structure(retrained) != reference:
            continue
        kept += 1
        truth = raw - retrained.predict(Xt, prediction_type="RawFormulaVal")
        np.testing.assert_allclose(refit[k], truth, rtol=0, atol=1e-9 * np.abs(truth).max())
    print(f"structure kept in {kept}/{len(rows)} weight-0 retrains")
    assert kept >= 3, f"structure kept in only {kept}/{len(rows)} retrains: the comparison is vacuous"


def test_leaf_influence_equals_retraining_differences(adult):
    """LeafInfluence = central differences of CatBoost retrained with row i's weight 1 +- eps: a
    weight never enters a CTR statistic, so the derivative has no CTR channel. eps = 1e-3 (exact
    in float32 steps of 1 +- eps up to 6e-8 relative); the central difference's O(eps^2) term and
    float32 leaf storage leave ~1e-6 of the largest derivative: tolerance 1e-4."""
    # random_seed=1: with seed 0 a split near-tie flips whenever sum(w) falls below n (every 1 - eps
    # retrain changes trees 3, 6 and 10), so no central difference would exist.
    params = _params(iterations=12, depth=3, learning_rate=0.3, random_strength=0, bootstrap_type="No",
                     cat_features=CAT, random_seed=1)
    X, y, Xt, _ = adult
    X, y = X.iloc[:N], y[:N]
    model = cb.CatBoostClassifier(**params).fit(X, y)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, y)
    rows = np.arange(5, N, 100)
    infl = eng.leaf_influence(TestPoints(leaf_index=adapter.leaf_indices(Xt)), rows=rows, on="prediction")
    reference = _structure(model)
    kept = 0
    for k, i in enumerate(rows):
        preds, steps = [], []
        for sign in (1, -1):
            w = np.ones(N, np.float32)
            w[i] = np.float32(1 + sign * 1e-3)
            retrained = cb.CatBoostClassifier(**params).fit(X, y, sample_weight=w)
            if _structure(retrained) != reference:
                break
            preds.append(retrained.predict(Xt, prediction_type="RawFormulaVal"))
            steps.append(float(w[i]))
        else:
            kept += 1
            fd = (preds[0] - preds[1]) / (steps[0] - steps[1])
            np.testing.assert_allclose(infl[k], fd, rtol=0, atol=1e-4 * np.abs(fd).max())
    assert kept >= 3


# ----------------------------------------------------------------------------------------------
# Multiclass with CTRs: Borders CTRs binarize the class index with K - 1 borders


def _three_classes(y: np.ndarray, X) -> np.ndarray:
    """A 3-class target as strings: income class, split by age."""
    return np.array(["low", "mid", "high"])[np.minimum(y + (X["age"].to_numpy() > 45), 2)]


@pytest.mark.parametrize("loss", ["MultiClass", "MultiClassOneVsAll"])
def test_multiclass_classifier_defaults_with_text_categories(adult, loss):
    """``CatBoostClassifier(cat_features=...)`` on a 3-class string target (the default loss is
    MultiClass; CatBoost makes Borders CTRs per border between classes, ``target_border_idx`` 0
    and 1), fewer trees to stay fast: every leaf reproduced, margins equal CatBoost's."""
    X, y, Xt, _ = adult
    labels = _three_classes(y, X)
    kw = {} if loss == "MultiClass" else {"loss_function": loss}
    model = cb.CatBoostClassifier(iterations=40, cat_features=CAT, thread_count=2, verbose=0,
                                  allow_writing_files=False, **kw).fit(X, labels)
    ctrs = json.loads(_json_of(model))["features_info"]["ctrs"]
    assert {int(c["target_border_idx"]) for c in ctrs if c["ctr_type"] == "Borders"} == {0, 1}
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, labels)
    assert eng.relative_residual <= 1e-10
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(eng.predict_margin(test), model.predict(Xt, prediction_type="RawFormulaVal"),
                               rtol=0, atol=1e-10)


def _json_of(model) -> str:
    model.save_model("model.json", format="json")
    with open("model.json") as fh:
        return fh.read()


def test_multiclass_leaf_refit_equals_weight_zero_retraining(adult):
    """As the binary test below: MultiClass with CTRs, every class's margin, against CatBoost
    retrained with the row's weight at 0 (l2_leaf_reg=0, where deletion and weight 0 coincide).
    Gradient leaves: Newton's joint step with l2 = 0 (CatBoost's 1e-20) inverts the singular
    softmax hessian, whose rounding CatBoost's solver decides (the self-check of the default Newton
    model is above)."""
    params = _params(iterations=8, depth=3, learning_rate=0.3, l2_leaf_reg=0, random_strength=0,
                     bootstrap_type="No", cat_features=CAT, leaf_estimation_method="Gradient")
    X, y, Xt, _ = adult
    X, y = X.iloc[:N], y[:N]
    labels = _three_classes(y, X)
    model = cb.CatBoostClassifier(**params).fit(X, labels)
    adapter = CatBoostAdapter(model)
    eng = adapter.prepare(X, labels)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    rows = np.arange(3, N, 20)
    refit = np.stack([eng.leaf_refit(test, rows=rows, on="prediction", output=k) for k in range(3)], axis=-1)
    raw = model.predict(Xt, prediction_type="RawFormulaVal")
    reference = _structure(model)
    kept = 0
    for k, i in enumerate(rows):
        w = np.ones(N)
        w[i] = 0.0
        retrained = cb.CatBoostClassifier(**params).fit(X, labels, sample_weight=w)
        if _structure(retrained) != reference:
            continue
        kept += 1
        truth = raw - retrained.predict(Xt, prediction_type="RawFormulaVal")
        np.testing.assert_allclose(refit[k], truth, rtol=0, atol=1e-9 * np.abs(truth).max())
        if kept == 4:
            break
    assert kept >= 3, f"structure kept in only {kept} retrains: the comparison is vacuous"


# ----------------------------------------------------------------------------------------------
# Refusals and wrong data


def _small(adult, **kw):
    X, y, _, _ = adult
    return cb.CatBoostClassifier(**_params(iterations=5, cat_features=CAT, **kw)).fit(X.iloc[:300], y[:300])


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(grow_policy="Depthwise"), "grow_policy='Depthwise'"),
        (dict(simple_ctr=["Buckets"], combinations_ctr=["Buckets"]), r"CTR types \['Buckets'\]"),
        (dict(ctr_leaf_count_limit=5), "ctr_leaf_count_limit=5"),
    ],
    ids=["depthwise", "buckets", "leaf-count-limit"],
)
def test_refusals(adult, kw, match):
    with pytest.raises(UnsupportedModelError, match=match):
        CatBoostAdapter(_small(adult, **kw))


def test_refusals_of_losses_and_target_borders(adult):
    X = adult[0]
    X = X.iloc[:300]
    borders = ["Borders:TargetBorderCount=2", "Counter"]
    rmse = cb.CatBoostRegressor(**_params(iterations=5, cat_features=CAT, simple_ctr=borders,
                                          combinations_ctr=borders))
    with pytest.raises(UnsupportedModelError, match="TargetBorderCount"):
        CatBoostAdapter(rmse.fit(X.drop(columns="age"), X["age"].to_numpy(float)))
    gpu = dict(task_type="GPU", grow_policy="SymmetricTree", loss_function="Logloss")
    assert "GPU" in catboost_ctr.ctr_refusal(gpu, {"features_info": {"ctrs": [{"ctr_type": "Borders"}]}},
                                             "Logloss")


def test_wrong_data_and_counter_with_eval_rows(adult):
    model, X, y, _ = _ctr_model(adult)
    adapter = CatBoostAdapter(model)
    with pytest.raises(ReproductionError, match="order matters"):
        adapter.prepare(X.iloc[::-1].reset_index(drop=True), y[::-1].copy())
    with pytest.raises(InputError, match="Pool"):
        adapter.prepare(cb.Pool(X, y, cat_features=CAT), y)
    X_all, y_all, _, _ = adult
    evaluation = (X_all.iloc[N:], y_all[N:])  # 700 eval rows: they enter the Counter counts
    full = cb.CatBoostClassifier(**_params(cat_features=CAT, counter_calc_method="Full"))
    full.fit(X, y, eval_set=evaluation)
    with pytest.raises(ReproductionError, match="counter_calc_method='SkipTest'"):
        CatBoostAdapter(full).prepare(X, y)
    grouped = cb.CatBoostClassifier(**_params()).fit(cb.Pool(X, y, cat_features=CAT,
                                                             group_id=np.arange(len(y)) // 4))
    with pytest.raises(ReproductionError, match="Pool with group_id"):  # its shuffles move whole groups
        CatBoostAdapter(grouped).prepare(X, y)
