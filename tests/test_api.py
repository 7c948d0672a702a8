"""The public BoostingInfluence API on all three libraries: inputs, outputs, errors, progress."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, classifier, default_model, fit_or_skip, regressor

from influence_gbdt import (
    BoostingInfluence,
    InfluenceError,
    InputError,
    NotFittedError,
    ReproductionError,
    UnsupportedModelError,
)
from influence_gbdt.engine.team import CHUNK_ROWS


@pytest.fixture(scope="module", params=LIBRARIES)
def fitted(request: pytest.FixtureRequest) -> tuple:
    X, y, X_test, y_test = binary_data()
    model = classifier(request.param, X, y)
    return request.param, model, X, y, X_test, y_test


def test_scores_have_documented_shapes_and_agree_across_input_types(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False)
    assert ex.fit(X, y) is ex
    S_frame = ex.score_training_points(X_test, y_test)
    # DataFrames in: a DataFrame out, keyed by the training index (rows) and the test index (columns).
    assert isinstance(S_frame, pd.DataFrame)
    assert S_frame.index.equals(X.index) and S_frame.columns.equals(X_test.index)
    S = S_frame.to_numpy()
    assert S.shape == (len(X), len(X_test)) and S.dtype == np.float64
    assert ex.n_train_ == len(X) and ex.n_features_in_ == 4
    assert list(ex.feature_names_in_) == ["a", "b", "c", "d"]
    # The same model trained and scored on ndarrays: identical scores (a DataFrame adds only names).
    library = fitted[0]
    model_np = classifier(library, X.to_numpy(), y)
    S_np = (
        BoostingInfluence(model_np, progress=False)
        .fit(X.to_numpy(), y)
        .score_training_points(X_test.to_numpy(), y_test)
    )
    assert isinstance(S_np, np.ndarray)  # NumPy in, NumPy out
    np.testing.assert_allclose(S_np, S, rtol=1e-12, atol=1e-15)
    mean = ex.score_training_points(X_test, y_test, aggregate="mean")
    np.testing.assert_allclose(mean, S.mean(axis=1), rtol=1e-9, atol=1e-15)
    rows = np.array([5, 0, 17])
    np.testing.assert_allclose(
        ex.score_training_points(X_test, y_test, training_points=rows), S[rows], rtol=1e-12, atol=1e-15
    )


def test_every_method_and_update_set_runs_and_ranks_alike(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    rows = np.arange(0, len(X), 10)
    exact = (
        BoostingInfluence(model, progress=False)
        .fit(X, y)
        .score_training_points(X_test, y_test, aggregate="mean", training_points=rows)
    )
    for method in ("leaf_influence", "leaf_refit"):
        for update_set, k in (("all_points", None), ("single_point", None), ("top_k_leaves", 2)):
            ex = BoostingInfluence(model, method=method, update_set=update_set, k=k, progress=False)
            s = ex.fit(X, y).score_training_points(X_test, y_test, aggregate="mean", training_points=rows)
            assert s.shape == rows.shape
            # Fast variants and LeafRefit approximate the exact influence: same ranking broadly.
            assert np.corrcoef(s, exact)[0, 1] > 0.5, (method, update_set)


def test_prediction_scores_need_no_labels_and_fixed_base_differs(fitted: tuple) -> None:
    _library, model, X, y, X_test, _ = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    P = ex.score_training_points(X_test, on="prediction")
    assert P.shape == (len(X), len(X_test))
    fixed = BoostingInfluence(model, base_score="fixed", progress=False).fit(X, y)
    P_fixed = fixed.score_training_points(X_test, on="prediction")
    if ex.engine_.ensemble.base_rule != "fixed":
        # A refit base score moves every test margin: label-1 rows raise it, label-0 rows lower it.
        assert not np.allclose(P, P_fixed)
    else:
        np.testing.assert_allclose(P, P_fixed)


def test_output_names_the_scored_margin_of_a_binary_model(fitted: tuple) -> None:
    """A binary model has one margin, its positive class's: naming that class is the default, the
    other class is refused with the sign rule, and output has no meaning for the loss."""
    _library, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    P = ex.score_training_points(X_test, on="prediction")
    np.testing.assert_array_equal(ex.score_training_points(X_test, on="prediction", output=1), P)
    with pytest.raises(InputError, match="sign flipped"):
        ex.score_training_points(X_test, on="prediction", output=0)
    with pytest.raises(InputError, match=r"output=7 is not a class of this 2-class model: .* \[0, 1\]"):
        ex.score_training_points(X_test, on="prediction", output=7)
    with pytest.raises(InputError, match="on='prediction'"):
        ex.score_training_points(X_test, y_test, output=1)


def test_top_training_points_returns_a_sorted_table(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    harmful = ex.top_training_points(X_test, y_test, n=5)
    helpful = ex.top_training_points(X_test, y_test, n=5, kind="helpful")
    # X has the default 0 .. n-1 index: the table's index is the rows' positions, named "row" (a
    # "row" column would repeat it).
    assert list(harmful.columns[:2]) == ["score", "label"] and len(harmful) == 5
    assert harmful.index.name == "row" and "row" not in harmful.columns
    assert harmful["score"].is_monotonic_decreasing and helpful["score"].is_monotonic_increasing
    assert harmful["score"].iloc[0] > 0 > helpful["score"].iloc[0]
    np.testing.assert_array_equal(
        harmful[["a", "b"]].to_numpy(), X.iloc[harmful.index][["a", "b"]].to_numpy()
    )
    np.testing.assert_array_equal(harmful["label"], y[harmful.index])
    assert list(harmful.reset_index().columns[:3]) == ["row", "score", "label"]


def test_regressors_are_scored(fitted: tuple) -> None:
    library, _, X, _, X_test, _ = fitted
    rng = np.random.default_rng(1)
    y = X["a"].to_numpy() * 2 + rng.normal(size=len(X))
    model = regressor(library, X, y)
    y_test = X_test["a"].to_numpy() * 2
    S = BoostingInfluence(model, progress=False).fit(X, y).score_training_points(X_test, y_test)
    assert S.shape == (len(X), len(X_test)) and np.isfinite(S.to_numpy()).all()


def test_errors_say_what_is_wrong(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False)
    with pytest.raises(NotFittedError, match="not fitted"):
        ex.score_training_points(X_test, y_test)
    with pytest.raises(InputError, match="rows but y has"):
        ex.fit(X, y[:-1])
    y_nan = y.astype(float)
    y_nan[3] = np.nan
    with pytest.raises(InputError, match=r"NaN|not among"):
        ex.fit(X, y_nan)
    with pytest.raises(InputError, match=r"not among|lie in"):
        ex.fit(X, np.where(y == 1, 2, 0))
    with pytest.raises(InputError, match="sum to 0"):
        ex.fit(X, y, sample_weight=np.zeros(len(y)))
    # Rows misaligned with their labels (X shuffled, y not): not the training data. (Shuffling X and
    # y together is the same data set in another order and is scored fine, row by row.)
    shuffled = np.random.default_rng(0).permutation(len(X))
    with pytest.raises(ReproductionError, match="not reproduced"):
        ex.fit(X.iloc[shuffled].reset_index(drop=True), y)
    ex.fit(X, y)
    with pytest.raises(InputError, match=r"column names differ .*missing \['d'\]"):
        ex.score_training_points(X_test.iloc[:, :3], y_test)
    with pytest.raises(InputError, match="column names"):
        ex.score_training_points(X_test[["b", "a", "c", "d"]], y_test)
    with pytest.raises(InputError, match="needs y"):
        ex.score_training_points(X_test)
    with pytest.raises(InputError, match="rows but y has"):
        ex.score_training_points(X_test, y_test[:-1])
    with pytest.raises(InputError, match="would hold"):
        ex.set_params(max_memory=100).score_training_points(X_test, y_test)
    ex.set_params(max_memory=4e9)
    # fit refuses before allocating, from the adapter's estimate of the leaf indices' bytes
    # (benchmarks/fit_memory.py measures them).
    fitted_ex = BoostingInfluence(model, progress=False).fit(X, y)
    n_trees = fitted_ex.engine_.ensemble.n_trees
    need = fitted_ex.adapter_.fit_bytes(n_trees, len(X))
    assert need > 4.0 * n_trees * len(X)  # more than the int32 leaf indices fit keeps
    with pytest.raises(InputError, match=f"leaf indices of {n_trees} trees x {len(X)} rows"):
        BoostingInfluence(model, progress=False, max_memory=0.97 * need).fit(X, y)
    BoostingInfluence(model, progress=False, max_memory=1.03 * need).fit(X, y)
    for kwargs, match in (
        ({"method": "magic"}, "method"),
        ({"update_set": "top_k_leaves"}, "needs k"),
        ({"base_score": "zero"}, "base_score"),
        ({"influence_unit": "rows"}, "influence_unit"),
    ):
        with pytest.raises(InputError, match=match):
            BoostingInfluence(model, **kwargs).fit(X, y)
    assert issubclass(UnsupportedModelError, InfluenceError) and issubclass(ReproductionError, ValueError)


def test_unsupported_models_are_refused() -> None:
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.svm import SVC

    X, y, _, _ = binary_data(n=100)
    with pytest.raises(UnsupportedModelError, match=r"sklearn\.svm\._classes\.SVC is not a supported model"):
        BoostingInfluence(SVC().fit(X, y)).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="GradientBoostingClassifier is not supported: it is sci"):
        BoostingInfluence(GradientBoostingClassifier(n_estimators=2).fit(X, y)).fit(X, y)
    import xgboost

    sub = xgboost.XGBClassifier(n_estimators=3, subsample=0.5).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="subsample"):
        BoostingInfluence(sub).fit(X, y)


def test_progress_bar_shows_and_can_be_silenced(fitted: tuple, capsys: pytest.CaptureFixture) -> None:
    _, model, X, y, X_test, y_test = fitted
    BoostingInfluence(model, progress=True).fit(X, y).score_training_points(X_test, y_test)
    assert "leaf_influence" in capsys.readouterr().err
    BoostingInfluence(model, progress=False).fit(X, y).score_training_points(X_test, y_test)
    assert capsys.readouterr().err == ""


def test_importing_the_package_imports_no_booster() -> None:
    code = (
        "import sys, influence_gbdt, influence_gbdt.adapters, influence_gbdt.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('xgboost','lightgbm','catboost')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_get_and_set_params_follow_scikit_learn(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False)
    assert ex.get_params()["method"] == "leaf_influence" and ex.get_params()["model"] is model
    ex.fit(X, y)
    exact = ex.score_training_points(X_test, y_test, training_points=[0, 1, 2])
    # Scoring-time settings change without refitting, and give what a fresh explainer gives.
    assert ex.set_params(method="leaf_refit", update_set="top_k_leaves", k=2) is ex
    fresh = BoostingInfluence(model, method="leaf_refit", update_set="top_k_leaves", k=2, progress=False)
    np.testing.assert_array_equal(
        ex.score_training_points(X_test, y_test, training_points=[0, 1, 2]),
        fresh.fit(X, y).score_training_points(X_test, y_test, training_points=[0, 1, 2]),
    )
    assert not np.array_equal(exact, fresh.score_training_points(X_test, y_test, training_points=[0, 1, 2]))
    with pytest.raises(InputError, match="Unknown parameters"):
        ex.set_params(learning_rate=0.1)
    with pytest.raises(InputError, match="needs k"):
        ex.set_params(k=None)
    assert ex.k == 2  # a refused change leaves the settings as they were


def test_exact_influence_is_the_same_in_forward_and_reverse_mode(fitted: tuple) -> None:
    # Fewer training rows than test points run exact forward mode, all rows run reverse mode: two
    # independent algorithms (the paper's Algorithm 4 and its adjoint) that must agree to rounding.
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    rows = [3, 7, 11]
    assert ex.engine_.uses_reverse("all_points", len(y), len(y_test), None)
    assert not ex.engine_.uses_reverse("all_points", len(rows), len(y_test), None)
    reverse = ex.score_training_points(X_test, y_test).to_numpy()[rows]
    forward = ex.score_training_points(X_test, y_test, training_points=rows)
    np.testing.assert_allclose(forward, reverse, rtol=1e-9, atol=1e-12 * np.abs(reverse).max())


# ----------------------------------------------------------------------------------------------
# Issue 12: cases that used to return a silently wrong result.


def test_changing_the_model_discards_the_fit(fitted: tuple) -> None:
    library, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    other = classifier(library, X, 1 - y, n_trees=5)
    ex.set_params(model=model, method="leaf_influence")  # the same model: the fit stays
    assert ex.score_training_points(X_test, y_test).shape == (len(X), len(X_test))
    ex.set_params(model=other)
    assert not hasattr(ex, "engine_")
    with pytest.raises(NotFittedError, match="not fitted"):
        ex.score_training_points(X_test, y_test)
    S_other = ex.fit(X, 1 - y).score_training_points(X_test, y_test)
    np.testing.assert_array_equal(
        S_other, BoostingInfluence(other, progress=False).fit(X, 1 - y).score_training_points(X_test, y_test)
    )


def test_scikit_learn_clone_tags_and_fitted_check(fitted: tuple) -> None:
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError as SklearnNotFitted
    from sklearn.utils.validation import check_is_fitted

    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, method="leaf_refit", params=None, progress=False)
    with pytest.raises(SklearnNotFitted):
        check_is_fitted(ex)
    with pytest.raises(SklearnNotFitted, match="not fitted") as raised:  # our own error, caught as theirs
        ex.score_training_points(X_test, y_test)
    assert isinstance(raised.value, NotFittedError) and isinstance(raised.value, AttributeError)
    ex.fit(X, y)
    check_is_fitted(ex)
    twin = clone(ex)
    assert twin.model is model and twin.get_params() == ex.get_params() and not hasattr(twin, "engine_")
    rows = [0, 5, 9]
    np.testing.assert_array_equal(
        twin.fit(X, y).score_training_points(X_test, y_test, training_points=rows),
        ex.score_training_points(X_test, y_test, training_points=rows),
    )
    assert repr(ex).startswith("BoostingInfluence(model=") and "method='leaf_refit'" in repr(ex)
    assert "update_set" not in repr(ex)  # defaults are not shown, as in scikit-learn
    import sklearn.utils

    if hasattr(sklearn.utils, "Tags"):  # scikit-learn 1.6 on reads __sklearn_tags__ (before: _get_tags)
        assert ex.__sklearn_tags__().input_tags.sparse


def test_pandas_labels_are_matched_by_position_and_a_misaligned_index_is_refused(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    S = ex.score_training_points(X_test, y_test).to_numpy()
    # A test set with a shuffled index, as train_test_split leaves it.
    order = np.random.default_rng(0).permutation(len(X_test))
    Xs = X_test.iloc[order]
    ys = pd.Series(y_test[order], index=Xs.index)
    shuffled = ex.score_training_points(Xs, ys)
    np.testing.assert_array_equal(shuffled, S[:, order])
    assert shuffled.columns.equals(Xs.index)  # each column keeps its test point's own label
    j = int(np.flatnonzero(order != np.arange(len(order)))[0])
    one = ex.score_training_points(Xs.iloc[[j]], ys.iloc[[j]])
    np.testing.assert_array_equal(one[Xs.index[j]], S[:, order[j]])
    # ys[[j]] selects by label, i.e. another row than Xs.iloc[[j]]: refused, not silently scored.
    with pytest.raises(InputError, match="y's index differs from X's"):
        ex.score_training_points(Xs.iloc[[j]], ys[[j]])


def test_top_training_points_edge_cases(fitted: tuple) -> None:
    from scipy import sparse

    library, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    top = ex.top_training_points(X_test, y_test, n=3)
    # CSR training data: the feature columns hold the rows' numbers, not sparse objects.
    csr = BoostingInfluence(model, progress=False).fit(sparse.csr_matrix(X.to_numpy()), y)
    top_csr = csr.top_training_points(sparse.csr_matrix(X_test.to_numpy()), y_test, n=3)
    np.testing.assert_array_equal(top_csr.index, top.index)
    np.testing.assert_array_equal(top_csr[[0, 1, 2, 3]].to_numpy(), X.to_numpy()[top.index])
    assert all(top_csr[c].dtype == np.float64 for c in range(4))
    # n beyond the rows returns them all; no rows selected returns an empty, well-formed table.
    assert len(ex.top_training_points(X_test, y_test, n=10**6)) == len(X)
    empty = ex.top_training_points(X_test, y_test, training_points=[])
    assert empty.shape == (0, 2 + 4) and list(empty.columns[:2]) == ["score", "label"]
    assert ex.score_training_points(X_test, y_test, training_points=[]).shape == (0, len(X_test))
    assert ex.score_training_points(X_test, y_test, training_points=[], aggregate="sum").shape == (0,)
    # A feature named like a table column (or the index) keeps both.
    renamed = {"a": "score", "b": "row"}
    model_r = classifier(library, X.rename(columns=renamed), y, n_trees=5)
    ex_r = BoostingInfluence(model_r, progress=False).fit(X.rename(columns=renamed), y)
    top_r = ex_r.top_training_points(X_test.rename(columns=renamed), y_test, n=3)
    assert list(top_r.columns) == ["score", "label", "feature:score", "feature:row", "c", "d"]
    np.testing.assert_array_equal(top_r["feature:score"], X["a"].to_numpy()[top_r.index])
    assert list(top_r.reset_index().columns[:3]) == ["row", "score", "label"]
    assert top_r["score"].is_monotonic_decreasing


def test_progress_total_matches_what_is_counted(fitted: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    import influence_gbdt.explainer as explainer

    bars: list[dict] = []

    class Recorder:  # stands in for tqdm: records the total and the counts reported
        def __init__(self, total: int, **kwargs: object) -> None:
            bars.append({"total": total, "done": 0})

        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def update(self, count: int) -> None:
            bars[-1]["done"] += count

    monkeypatch.setattr(explainer, "tqdm", Recorder)
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model).fit(X, y)
    ex.score_training_points(X_test, y_test, aggregate="mean")  # reverse mode, one sweep
    ex.score_training_points(X_test, y_test)  # reverse mode, per test point
    ex.score_training_points(X_test, y_test, training_points=[1, 2])  # forward mode, per row
    ex.set_params(method="leaf_refit").score_training_points(X_test, y_test, aggregate="sum")
    assert [b["total"] for b in bars] == [len(X_test), len(X_test), 2, len(X)]
    assert all(b["done"] == b["total"] for b in bars)


def test_long_runs_warn_with_what_to_do_instead(fitted: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    import influence_gbdt.explainer as explainer
    from influence_gbdt import LongRunWarning

    monkeypatch.setattr(explainer, "LONG_RUN_SECONDS", 0.0)  # every run counts as long
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, method="leaf_refit", progress=False).fit(X, y)
    with pytest.warns(LongRunWarning, match=r"more hours .*training_points=.*method='leaf_influence'"):
        ex.score_training_points(X_test, y_test, aggregate="mean")


def test_a_small_memory_budget_batches_the_work_and_gives_the_same_scores(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    rows = np.arange(0, len(X), 3)
    expected = [ex.score_training_points(X_test, y_test), ex.set_params(method="leaf_refit")
                .score_training_points(X_test, y_test, training_points=rows)]
    scores_bytes = 8 * len(X) * len(X_test)
    ex.set_params(method="leaf_influence", max_memory=scores_bytes + 3e5)  # a few test points per batch
    assert ex._chunk_size(ex.engine_, len(X), len(X_test), None, True) < 256
    np.testing.assert_array_equal(ex.score_training_points(X_test, y_test), expected[0])
    ex.set_params(method="leaf_refit")
    np.testing.assert_array_equal(ex.score_training_points(X_test, y_test, training_points=rows), expected[1])
    with pytest.raises(InputError, match="working memory"):
        ex.set_params(max_memory=scores_bytes + 1).score_training_points(X_test, y_test)


def test_any_k_beyond_the_largest_tree_means_every_leaf(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, update_set="top_k_leaves", k=10**30, progress=False).fit(X, y)
    largest = int(ex.engine_.ensemble.n_leaves.max())
    rows = [0, 3]
    np.testing.assert_array_equal(
        ex.score_training_points(X_test, y_test, training_points=rows),
        ex.set_params(k=largest).score_training_points(X_test, y_test, training_points=rows),
    )


def test_a_model_trained_on_a_dataframe_reads_arrays_by_position(fitted: tuple) -> None:
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    arrays = BoostingInfluence(model, progress=False).fit(X.to_numpy(), y)
    np.testing.assert_array_equal(
        arrays.score_training_points(X_test.to_numpy(), y_test), ex.score_training_points(X_test, y_test)
    )
    lists = BoostingInfluence(model, progress=False).fit(X.to_numpy().tolist(), list(y))
    np.testing.assert_array_equal(lists.engine_.train_margin, ex.engine_.train_margin)


def _three_class(library: str) -> tuple:
    """A 3-class model of ``library`` as users train one (string labels where the wrapper takes
    them; XGBoost wants them encoded), with its training and test rows."""
    rng = np.random.default_rng(4)
    X = pd.DataFrame(rng.normal(size=(360, 3)), columns=["a", "b", "c"])
    names = np.array(["cat", "dog", "eel"])
    y = names[np.argmax(X.to_numpy() + 0.5 * rng.normal(size=(360, 3)), axis=1)]
    X_test, y_test = X.iloc[300:], y[300:]
    X, y = X.iloc[:300], y[:300]
    if library == "xgboost":
        import xgboost

        y, y_test = np.searchsorted(names, y), np.searchsorted(names, y_test)
        model = xgboost.XGBClassifier(n_estimators=8, max_depth=3).fit(X, y)
    elif library == "lightgbm":
        import lightgbm

        model = lightgbm.LGBMClassifier(n_estimators=8, num_leaves=8, verbose=-1).fit(X, y)
    else:
        import catboost

        model = catboost.CatBoostClassifier(  # default leaves: Newton with the full softmax hessian
            iterations=8, depth=3, verbose=0, random_seed=0, allow_writing_files=False,
        ).fit(X, y)
    return model, X, y, X_test, y_test


@pytest.mark.parametrize("library", LIBRARIES)
def test_multiclass_loss_scores_are_the_booster_probabilities_times_class_margin_scores(library: str) -> None:
    """d(-log p_y)/dw = sum_k (p_k - [y = k]) dF_k/dw: the loss scores of a softmax model equal the
    per-class prediction scores combined with the booster's own predict_proba (columns in classes_
    order), which checks that output= names the class the booster means."""
    model, X, y, X_test, y_test = _three_class(library)
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    S = ex.score_training_points(X_test, y_test).to_numpy()  # pandas in: a DataFrame keyed by index
    assert S.shape == (len(X), len(X_test))
    proba = model.predict_proba(X_test)
    onehot = (np.asarray(y_test)[:, None] == np.asarray(model.classes_)[None, :]).astype(float)
    combined = sum(
        ex.score_training_points(X_test, on="prediction", output=c).to_numpy() * (proba - onehot)[:, k]
        for k, c in enumerate(model.classes_)
    )
    np.testing.assert_allclose(S, combined, rtol=0, atol=1e-6 * np.abs(S).max())  # float32 proba
    with pytest.raises(InfluenceError, match="output"):
        ex.score_training_points(X_test, on="prediction")
    top = ex.top_training_points(X_test.iloc[[0]], y_test[:1], n=3)
    assert list(top["label"]) == [y[i] for i in top.index]


@pytest.mark.parametrize("library", LIBRARIES)
def test_influence_is_invariant_to_the_unit_of_the_weights(library: str) -> None:
    """A model trained with weights ``w`` is also exactly the model of weights ``2 w`` (no L2 in
    absolute units; CatBoost scales its L2 by the mean weight): the self-check passes with either.
    ``leaf_influence`` scores the first-order effect of removing a row (``w_i dL/dw_i``) by
    default, the same under both, like ``leaf_refit``; ``influence_unit="weight"`` scores
    ``dL/dw_i``, which halves."""
    import catboost
    import lightgbm
    import xgboost

    X, y, Xt, yt = binary_data(n=300, n_test=10, seed=4)
    w = np.random.default_rng(4).uniform(0.5, 2.0, len(y)).astype(np.float32).astype(float)
    model = {
        "xgboost": lambda: xgboost.XGBClassifier(n_estimators=8, max_depth=3, reg_lambda=0.0),
        "lightgbm": lambda: lightgbm.LGBMClassifier(n_estimators=8, num_leaves=8, verbose=-1),
        "catboost": lambda: catboost.CatBoostClassifier(iterations=8, depth=3, verbose=0, thread_count=1,
                                                        allow_writing_files=False),
    }[library]().fit(X, y, sample_weight=w)
    scores = {}
    for scale in (1.0, 2.0):
        ex = BoostingInfluence(model, progress=False).fit(X, y, sample_weight=scale * w)
        scores[scale] = {key: np.asarray(ex.set_params(**settings).score_training_points(Xt, yt))
                         for key, settings in (("row", {}), ("weight", {"influence_unit": "weight"}),
                                               ("refit", {"method": "leaf_refit"}))}
    one, two = scores[1.0], scores[2.0]
    # XGBoost's float32 leaves: the two descriptions agree to its rounding (~1e-7 relative).
    rtol = 1e-5 if library == "xgboost" else 1e-10
    for key in ("row", "refit"):
        np.testing.assert_allclose(two[key], one[key], rtol=rtol, atol=rtol * np.abs(one[key]).max())
    np.testing.assert_allclose(2.0 * two["weight"], one["weight"], rtol=rtol,
                               atol=rtol * np.abs(one["weight"]).max())
    np.testing.assert_allclose(one["row"], one["weight"] * w[:, None], rtol=1e-12)


def test_explain_prediction_prints_plots_and_matches_the_booster(fitted: tuple) -> None:
    """One test row explained: the booster's own probability and log loss, the scores of
    score_training_points for that row, the top rows of top_training_points, text and a figure."""
    _, model, X, y, X_test, y_test = fitted
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    row = X_test.iloc[[3]]
    told = ex.explain_prediction(row, y_test[[3]], n=4)
    p = float(model.predict_proba(row)[0, 1])
    # The booster predicts in float32 (XGBoost, CatBoost); the engine sums float64 leaves.
    assert told.probabilities is not None
    assert told.probabilities[model.classes_[1]] == pytest.approx(p, rel=1e-5)
    label_p = p if y_test[3] == model.classes_[1] else 1 - p
    assert told.loss == pytest.approx(-np.log(label_p), rel=1e-5)
    expected = np.asarray(ex.score_training_points(row, y_test[[3]])).reshape(-1)
    np.testing.assert_array_equal(told.scores.to_numpy(), expected)
    top = ex.top_training_points(row, y_test[[3]], n=4)
    pd.testing.assert_frame_equal(told.harmful, top)
    assert (told.helpful["score"].to_numpy() == np.sort(expected)[:4]).all()
    text = repr(told)
    assert text.startswith(f"Test row {row.index[0]} (label ")
    assert "score > 0: the training row is harmful" in text
    assert "<table" in told._repr_html_()
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    ax = told.plot()
    assert ax.get_title().startswith(f"Test row {row.index[0]}") and len(ax.patches) == 8
    plt.close("all")
    unlabelled = ex.explain_prediction(row)
    assert unlabelled.loss is None and unlabelled.on == "prediction"
    with pytest.raises(InputError, match="one test row"):
        ex.explain_prediction(X_test.iloc[:2], y_test[:2])


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])  # CatBoost refuses to train on one class
def test_explaining_a_classifier_trained_on_one_class(library: str) -> None:
    """XGBoost and LightGBM train a binary model on labels of one class (``classes_ == [0]``): its
    explanation gives that class the booster's own probability."""
    X, _, X_test, _ = binary_data(n=60, n_test=3)
    y = np.zeros(len(X), dtype=int)
    model = fit_or_skip(default_model(library), X, y)
    told = BoostingInfluence(model, progress=False).fit(X, y).explain_prediction(X_test.iloc[[0]], [0])
    assert told.probabilities is not None and list(told.probabilities) == [0]
    p0 = float(model.predict_proba(X_test.iloc[[0]])[0, 0])
    assert told.probabilities[0] == pytest.approx(p0, rel=1e-5)


def _default_classifier(library: str, X: pd.DataFrame, y: np.ndarray) -> object:
    """The library's classifier with its defaults, fitted (XGBoost on encoded labels)."""
    if library == "xgboost":
        from sklearn.preprocessing import LabelEncoder

        y = LabelEncoder().fit_transform(y)
    return default_model(library).fit(X, y)


@pytest.mark.parametrize("library", LIBRARIES)
def test_one_training_point_is_scored_the_same_on_a_team_of_any_size(library: str) -> None:
    """Each library's default classifier (CatBoost's with 40 trees, for time, and 10 leaf steps, which
    its default takes with 1,000 trees and 40 do not: its backtracking and its own objective
    arithmetic, whose blocks the team shares; with a categorical feature, so that it sums the rows
    in a permuted order) on 4 chunks of rows: one training point's LeafRefit and
    LeafInfluence (forward mode: one row, three test points), its passes over the rows split over
    a team of 2 or 3 threads, give the one-thread scores bit for bit, for every update set."""
    X, y, X_test, y_test = binary_data(n=3 * CHUNK_ROWS + 123, n_test=3)
    if library == "catboost":
        import catboost

        X, X_test = (frame.assign(g=np.where(frame["d"] > 0.3, "p", "q")) for frame in (X, X_test))
        model: object = catboost.CatBoostClassifier(iterations=40, leaf_estimation_iterations=10, verbose=0,
                                                    allow_writing_files=False)
        model.fit(X, y, cat_features=["g"])
    else:
        model = _default_classifier(library, X, y)
    ex = BoostingInfluence(model, progress=False, n_threads=1).fit(X, y)
    settings = [{"method": method, "update_set": update_set} for method in ("leaf_refit", "leaf_influence")
                for update_set in ("all_points", "single_point")]
    settings += [{"method": method, "update_set": "top_k_leaves", "k": 2}
                 for method in ("leaf_refit", "leaf_influence")]
    expected = [np.asarray(ex.set_params(**kw).score_training_points(X_test, y_test, training_points=[5]))
                for kw in settings]
    for threads in (2, 3):
        ex.set_params(n_threads=threads)
        for kw, want in zip(settings, expected, strict=True):
            got = ex.set_params(**kw).score_training_points(X_test, y_test, training_points=[5])
            np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_scores_do_not_depend_on_the_thread_count(library: str, n_classes: int) -> None:
    """Each library's default classifier, binary and 3 classes (text labels where the wrapper takes
    them): the scores of a batch of test points, of their mean loss and of LeafRefit are the same,
    bit for bit, on 1, 2 and every thread; and each test point's column is the one it gets when
    scored alone (a sweep of its own: for one-output models another layout and order of loops)."""
    X, y, X_test, y_test = binary_data(n=300, n_test=12)
    if n_classes == 3:
        y, y_test = (np.where(X["b"] > 0.5, 2, y), np.where(X_test["b"] > 0.5, 2, y_test))
    names = np.array(["low", "high", "other"])
    if library != "xgboost":  # XGBClassifier takes encoded labels only
        y, y_test = names[y], names[y_test]
    model = _default_classifier(library, X, y)
    ex = BoostingInfluence(model, progress=False, n_threads=1).fit(X, y)
    rows = np.arange(0, len(X), 37)

    def scores(method: str, X_: pd.DataFrame, y_: np.ndarray, **kw: object) -> np.ndarray:
        return np.asarray(ex.set_params(method=method).score_training_points(X_, y_, **kw))

    expected = (scores("leaf_influence", X_test, y_test),
                scores("leaf_influence", X_test, y_test, aggregate="mean"),
                scores("leaf_refit", X_test, y_test, training_points=rows))
    alone = np.column_stack([scores("leaf_influence", X_test.iloc[[i]], y_test[[i]])[:, 0]
                             for i in range(len(X_test))])
    np.testing.assert_array_equal(expected[0], alone)
    for threads in (2, None):
        ex.set_params(n_threads=threads)
        np.testing.assert_array_equal(scores("leaf_influence", X_test, y_test), expected[0])
        np.testing.assert_array_equal(scores("leaf_influence", X_test, y_test, aggregate="mean"), expected[1])
        np.testing.assert_array_equal(scores("leaf_refit", X_test, y_test, training_points=rows), expected[2])
    with pytest.raises(InputError, match="n_threads"):
        BoostingInfluence(model, n_threads=0).fit(X, y)
