"""Influence on Dask (influence_gbdt.distributed) against the in-memory engine, on a LocalCluster.

The in-memory engine is itself proven against retraining and finite differences elsewhere; here the
distributed sweep must give the same scores on the same model and rows. The two add per-leaf sums in
a different order (partition by partition), so they agree to rounding, not bit for bit: 1e-12
relative to the largest score leaves three orders of magnitude over the ~1e-15 measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from influence_gbdt import BoostingInfluence  # noqa: E402
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError  # noqa: E402

RTOL = 1e-12
#: LeafRefit scores are differences of leaf values (and losses) a thousand times larger than the
#: scores themselves: a leaf sum added in another order (last bit of the value) shows as ~1e-12 of
#: the largest score (measured up to 1.9e-12 on XGBoost's float64 sums), so 1e-10.
RTOL_REFIT = 1e-10
N, N_TEST, PARTITIONS = 3000, 40, 4


@pytest.fixture(scope="module")
def client() -> Any:
    # In-process workers start in a second (worker processes would each load numba and the boosters).
    # They get no memory limit: an in-process worker measures the whole test process, and once the
    # suite before it has grown that past 80% of a limit the workers pause and the test waits forever
    # (what hung CI). The bounded-memory run, with worker processes, is benchmarks/distributed_influence.py.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=0, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def _data(seed: int = 0) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N + N_TEST, 6))
    y = (X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + rng.normal(scale=0.8, size=N + N_TEST) > 0).astype(np.int64)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(6)])
    return frame.iloc[:N], y[:N], frame.iloc[N:].reset_index(drop=True), y[N:]


def _close(dist: Any, local: Any, rtol: float = RTOL) -> None:
    """Distributed scores equal the in-memory ones (a DataFrame/Series for pandas inputs)."""
    local = np.asarray(local)
    got = np.asarray(dist.compute() if hasattr(dist, "compute") else dist)
    assert got.shape == local.shape
    assert np.abs(got - local).max() <= rtol * np.abs(local).max()


def _both(model: Any, X: pd.DataFrame, y: np.ndarray,
          **kw: Any) -> tuple[BoostingInfluence, BoostingInfluence]:
    Xd = dd.from_pandas(X, npartitions=PARTITIONS)
    yd = dd.from_pandas(pd.Series(y, index=X.index), npartitions=PARTITIONS)
    return BoostingInfluence(model, **kw).fit(Xd, yd), BoostingInfluence(model, **kw).fit(X, y)


def test_xgboost_classifier(client: Any) -> None:
    """XGBClassifier (scikit-learn defaults, estimated base score) explained on a Dask DataFrame;
    a Dask test set is gathered."""
    import xgboost

    X, y, X_test, y_test = _data()
    model = xgboost.XGBClassifier(n_estimators=20, max_depth=3).fit(X, y)
    dist, local = _both(model, X, y)
    assert dist.reproduction_residual_ <= 1e-6
    scores = dist.score_training_points(X_test, y_test)
    assert isinstance(scores, da.Array) and scores.chunks[0] == dist.engine_.chunks
    _close(scores, local.score_training_points(X_test, y_test))
    rows = [5, -1, 2000]  # chosen rows: taken from the sweep of every row, an ndarray
    _close(dist.score_training_points(X_test, y_test, training_points=rows),
           local.score_training_points(X_test, y_test, training_points=rows))
    _close(dist.score_training_points(X_test, y_test, aggregate="mean"),
           local.score_training_points(X_test, y_test, aggregate="mean"))
    _close(dist.score_training_points(dd.from_pandas(X_test, npartitions=2), on="prediction"),
           local.score_training_points(X_test, on="prediction"))


def test_lightgbm_regressor_dask_array_weights(client: Any) -> None:
    """LightGBM squared error with sample weights and boost_from_average, on Dask arrays with an
    empty chunk (left out): the init score folded into tree 0 comes from the whole set's weighted
    label mean."""
    import lightgbm

    X, _, X_test, _ = _data(1)
    rng = np.random.default_rng(1)
    target = X["f0"].to_numpy() * 2 + rng.normal(size=N) + 3.0
    y_test = X_test["f0"].to_numpy() * 2 + 3.0
    weight = rng.uniform(0.5, 2.0, size=N)
    model = lightgbm.LGBMRegressor(n_estimators=20, num_leaves=8, verbose=-1).fit(X.to_numpy(), target,
                                                                                   sample_weight=weight)
    chunks = (700, 0, 800, 900, 600)
    Xd = da.from_array(X.to_numpy(), chunks=(chunks, 3))
    dist = BoostingInfluence(model).fit(Xd, da.from_array(target, chunks=(chunks,)),
                                        sample_weight=da.from_array(weight, chunks=(chunks,)))
    local = BoostingInfluence(model).fit(X.to_numpy(), target, sample_weight=weight)
    for aggregate in (None, "sum"):
        _close(dist.score_training_points(X_test.to_numpy(), y_test, aggregate=aggregate),
               local.score_training_points(X_test.to_numpy(), y_test, aggregate=aggregate))


def test_lightgbm_classifier_string_labels(client: Any) -> None:
    """LGBMClassifier with string labels, base score held fixed."""
    import lightgbm

    X, y, X_test, y_test = _data(2)
    names = np.array(["no", "yes"])
    model = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=8, verbose=-1).fit(X, names[y])
    dist, local = _both(model, X, names[y], base_score="fixed")
    _close(dist.score_training_points(X_test, names[y_test]),
           local.score_training_points(X_test, names[y_test]))


def test_models_trained_with_xgboost_dask(client: Any) -> None:
    """DaskXGBClassifier / DaskXGBRegressor trained on the cluster, explained where the data lives.
    xgboost.dask lists ``classes_`` in the order labels first appear: a first label 1 gives
    ``[1, 0]``, which read as the class order flipped every label (relative residual ~30, what made
    such models fail the self-check before); the classes are the sorted label values."""
    import xgboost
    import xgboost.dask

    X, y, X_test, y_test = _data(3)
    y = y.copy()
    y[0] = 1
    Xd = dd.from_pandas(X, npartitions=PARTITIONS)
    yd = dd.from_pandas(pd.Series(y, index=X.index), npartitions=PARTITIONS)
    clf = xgboost.dask.DaskXGBClassifier(n_estimators=20, max_depth=3)
    clf.client = client
    clf.fit(Xd, yd)
    assert list(clf.classes_) == [1, 0]
    dist = BoostingInfluence(clf).fit(Xd, yd)
    local = BoostingInfluence(clf.get_booster()).fit(X, y)
    assert dist.reproduction_residual_ <= 1e-6
    _close(dist.score_training_points(X_test, y_test), local.score_training_points(X_test, y_test))
    reg = xgboost.dask.DaskXGBRegressor(n_estimators=20, max_depth=3)
    reg.client = client
    target = X["f0"] * 2.0 + y
    reg.fit(Xd, dd.from_pandas(target, npartitions=PARTITIONS))
    dist = BoostingInfluence(reg).fit(Xd, dd.from_pandas(target, npartitions=PARTITIONS))
    local = BoostingInfluence(reg.get_booster()).fit(X, target)
    test_target = X_test["f0"] * 2.0 + y_test
    _close(dist.score_training_points(X_test, test_target), local.score_training_points(X_test, test_target))


@pytest.mark.filterwarnings("ignore:Parameter n_jobs will be ignored")  # LightGBM's Dask training
def test_models_trained_with_lightgbm_dask(client: Any) -> None:
    """DaskLGBMClassifier trained on the cluster (LightGBM's own distributed training) is
    reproduced and explained where the data lives, like its in-memory equivalent."""
    import lightgbm

    X, y, X_test, y_test = _data(4)
    Xd = dd.from_pandas(X, npartitions=PARTITIONS)
    yd = dd.from_pandas(pd.Series(y, index=X.index), npartitions=PARTITIONS)
    model = lightgbm.DaskLGBMClassifier(n_estimators=20, num_leaves=8, verbose=-1, client=client).fit(Xd, yd)
    dist = BoostingInfluence(model).fit(Xd, yd)
    local = BoostingInfluence(model.to_local()).fit(X, y)
    assert dist.reproduction_residual_ <= 1e-12
    _close(dist.score_training_points(X_test, y_test), local.score_training_points(X_test, y_test))


def _classifier(library: str) -> Any:
    """A small scikit-learn classifier of ``library`` (15 trees of 8 leaves)."""
    if library == "xgboost":
        import xgboost

        return xgboost.XGBClassifier(n_estimators=15, max_depth=3)
    import lightgbm

    return lightgbm.LGBMClassifier(n_estimators=15, num_leaves=8, verbose=-1)


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_single_point_scores_every_row_on_its_partition(client: Any, library: str) -> None:
    """single_point LeafRefit and LeafInfluence run on each row's own partition with the whole set's
    leaf sums: every row (a Dask array), chosen rows (an ndarray, in the order asked, any
    partitions), aggregated, on the loss and the prediction; the base margin re-estimated without
    the row (XGBoost's estimated base score, LightGBM's boost_from_average with sample weights)."""
    X, y, X_test, y_test = _data(5)
    weight = np.random.default_rng(5).uniform(0.5, 2.0, size=N)
    model = _classifier(library).fit(X, y, sample_weight=weight)
    rows = np.array([2999, 4, 1600, -1, 751])
    for method in ("leaf_refit", "leaf_influence"):
        rtol = RTOL_REFIT if method == "leaf_refit" else RTOL
        kw = {"method": method, "update_set": "single_point"}
        Xd = dd.from_pandas(X, npartitions=PARTITIONS)
        dist = BoostingInfluence(model, **kw).fit(
            Xd, dd.from_pandas(pd.Series(y, index=X.index), npartitions=PARTITIONS),
            sample_weight=dd.from_pandas(pd.Series(weight, index=X.index), npartitions=PARTITIONS))
        local = BoostingInfluence(model, **kw).fit(X, y, sample_weight=weight)
        every = dist.score_training_points(X_test, y_test)
        assert isinstance(every, da.Array) and every.chunks[0] == dist.engine_.chunks
        _close(every, local.score_training_points(X_test, y_test), rtol)
        chosen = dist.score_training_points(X_test, y_test, training_points=rows)
        assert isinstance(chosen, np.ndarray)
        _close(chosen, local.score_training_points(X_test, y_test, training_points=rows), rtol)
        _close(dist.score_training_points(X_test, y_test, aggregate="mean"),
               local.score_training_points(X_test, y_test, aggregate="mean"), rtol)
        _close(dist.score_training_points(X_test, on="prediction", training_points=rows),
               local.score_training_points(X_test, on="prediction", training_points=rows), rtol)


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_data_wide_update_sets(client: Any, library: str) -> None:
    """LeafRefit with all_points and top_k_leaves, and LeafInfluence with top_k_leaves (forward
    mode), on Dask (the rounds' leaf sums and top_k's leaf ranking reduced over the partitions)
    equal the in-memory engine's on rows of several partitions, given as indices or a boolean mask,
    in batches smaller than the rows asked."""
    X, y, X_test, y_test = _data(6)
    model = _classifier(library).fit(X, y)
    rows = np.array([10, 2990, 1501, 760, 0])
    mask = np.zeros(N, dtype=bool)
    mask[[3, 900, 2200]] = True
    for method, update_set, k in (("leaf_refit", "all_points", None), ("leaf_refit", "top_k_leaves", 2),
                                  ("leaf_influence", "top_k_leaves", 3)):
        rtol = RTOL_REFIT if method == "leaf_refit" else RTOL
        dist, local = _both(model, X, y, method=method, update_set=update_set, k=k)
        engine = dist.engine_
        test = dist._test_points(X_test, y_test, "loss", None)
        scorer = engine.leaf_refit if method == "leaf_refit" else engine.leaf_influence
        _close(scorer(test, rows=rows, update_set=update_set, k=k, batch_size=2),
               local.score_training_points(X_test, y_test, training_points=rows), rtol)
        _close(dist.score_training_points(X_test, y_test, training_points=mask, aggregate="sum"),
               local.score_training_points(X_test, y_test, training_points=mask, aggregate="sum"), rtol)


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_any_partitioning_gives_the_in_memory_scores(client: Any, library: str) -> None:
    """Partitions of one class only (data sorted by label; a one-row partition) and a partition of
    weight-0 rows: every row's scores equal the in-memory ones, as for mixed partitions (a partition
    holding one class once added its base-margin sums into both classes' and shifted every row's
    scores by 4% to 21x while the self-check passed)."""
    X, y, X_test, y_test = _data(7)
    order = np.argsort(y, kind="stable")
    X, y = X.to_numpy()[order], y[order]
    weight = np.where(np.arange(N) < 500, 0.0, np.random.default_rng(7).uniform(0.5, 2.0, N))
    for sample_weight, chunks in ((None, (1, 1499, 1500)), (None, (1000,) * 3), (weight, (500, 2500))):
        model = _classifier(library).fit(X, y, sample_weight=sample_weight)
        for method, update_set in (("leaf_refit", "single_point"), ("leaf_influence", "all_points")):
            rtol = RTOL_REFIT if method == "leaf_refit" else RTOL
            kw = {"method": method, "update_set": update_set}
            wd = None if sample_weight is None else da.from_array(sample_weight, chunks=(chunks,))
            dist = BoostingInfluence(model, **kw).fit(da.from_array(X, chunks=(chunks, X.shape[1])),
                                                      da.from_array(y, chunks=(chunks,)), sample_weight=wd)
            local = BoostingInfluence(model, **kw).fit(X, y, sample_weight=sample_weight)
            _close(dist.score_training_points(X_test.to_numpy(), y_test),
                   local.score_training_points(X_test.to_numpy(), y_test), rtol)


def test_self_check_refuses_wrong_labels(client: Any) -> None:
    import xgboost

    X, y, _, _ = _data()
    model = xgboost.XGBClassifier(n_estimators=20, max_depth=3).fit(X, y)
    flipped = y.copy()
    flipped[::7] = 1 - flipped[::7]
    with pytest.raises(ReproductionError, match="partitions"):
        _both(model, X, flipped)


def test_base_margin_is_checked_on_the_whole_set(client: Any) -> None:
    """A Booster trained with a Python objective keeps XGBoost's 0.5: the base re-estimated from all
    partitions' labels (the mean, ~3) would move every score, so fit refuses it as in memory."""
    import xgboost

    X, y, _, _ = _data()
    label = y + 3.0
    bst = xgboost.train({"max_depth": 2}, xgboost.DMatrix(X, label), 3,
                        obj=lambda p, d: (p - d.get_label(), np.ones_like(p)))
    with pytest.raises(ReproductionError, match=r"base margin \[0\.5\].*custom objective.*partitions"):
        _both(bst, X, label)
    with pytest.raises(ReproductionError, match=r"base margin \[0\.5\]"):
        BoostingInfluence(bst).fit(X, label)


def test_refusals(client: Any) -> None:
    import lightgbm

    X, y, X_test, y_test = _data()
    balanced = lightgbm.LGBMClassifier(n_estimators=5, class_weight="balanced", verbose=-1).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="balanced"):
        _both(balanced, X, y)
    model = lightgbm.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y)
    dist = _both(model, X, y, method="leaf_refit")[0]
    with pytest.raises(InputError, match="training_points"):  # every row: n passes over the data
        dist.score_training_points(X_test, y_test)
    dist = _both(model, X, y, method="leaf_influence", update_set="top_k_leaves", k=2)[0]
    with pytest.raises(InputError, match="training_points"):
        dist.score_training_points(X_test, y_test)
    with pytest.raises(InputError, match="partitioned like X"):
        BoostingInfluence(model).fit(dd.from_pandas(X, npartitions=2), y)
    l1 = lightgbm.LGBMRegressor(objective="l1", n_estimators=5, verbose=-1).fit(X, X["f0"])
    with pytest.raises(UnsupportedModelError, match="renewed"):
        BoostingInfluence(l1).fit(dd.from_pandas(X, npartitions=2), dd.from_pandas(X["f0"], npartitions=2))
    yd, zero = (dd.from_pandas(pd.Series(v, index=X.index), npartitions=2) for v in (y, np.zeros(N)))
    with pytest.raises(InputError, match="sum to 0"):
        BoostingInfluence(model).fit(dd.from_pandas(X, npartitions=2), yd, zero)


def test_validation_studies_run_their_retrains_on_the_workers(client: Any) -> None:
    """loo_study, derivative_study and removal_curve with the retrains on the cluster's workers give
    what they give run here: the same retrains (same seed and data), so equal results."""
    from influence_gbdt.validation import TrainingRecipe, derivative_study, loo_study, removal_curve

    X, y, Xt, yt = _data(seed=3)
    X, y = X.iloc[:400], y[:400]
    recipe = TrainingRecipe("xgboost", {"objective": "binary:logistic", "max_depth": 2, "eta": 0.3},
                            num_boost_round=10)
    model = recipe.fit(X, y)
    methods = (("leaf_refit", "all_points", None), ("leaf_influence", "all_points", None))
    rows = np.arange(6)
    for study in (loo_study, derivative_study):
        here = study(recipe, X, y, Xt, yt, rows, methods=methods, model=model, progress=False)
        there = study(recipe, X, y, Xt, yt, rows, methods=methods, model=model, progress=False,
                      executor=client)
        np.testing.assert_array_equal(there.actual, here.actual)
        np.testing.assert_array_equal(there.kept, here.kept)
        pd.testing.assert_frame_equal(there.summary, here.summary)
    kw = {"sizes": (5, 10), "n_random": 2, "methods": methods[:1], "model": model, "progress": False}
    pd.testing.assert_frame_equal(removal_curve(recipe, X, y, Xt, yt, executor=client, **kw),
                                  removal_curve(recipe, X, y, Xt, yt, **kw))
