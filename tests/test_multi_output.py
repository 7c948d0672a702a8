"""Models with several outputs through the public API, against the boosters' own retraining.

Multi-target regression (``y`` of shape (n, 2)), multiclass models trained with a per-class initial
margin (``init_score`` / ``base_margin`` / ``baseline`` of shape (n, K)) and a LightGBM multiclass
Booster with a class that never occurs in ``y``: each is fitted through
:class:`~influence_gbdt.BoostingInfluence` as a user would, and checked against the booster itself:
the self-check, margins equal to its ``predict``, LeafRefit equal to retraining without the row
where the retrain keeps the tree structure, LeafInfluence equal to central differences of
retraining in the row's weight. And one-vs-all and multi-target models near their defaults on
several chunks of rows: the same scores for any thread count, reverse mode against forward mode;
and a 3-class model's LeafRefit on a team of threads against XGBoost's refresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from influence_gbdt import BoostingInfluence
from influence_gbdt.validation.models import raw_predict, structure_report

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
cb = pytest.importorskip("catboost")

N, M = 300, 12
#: Rows deleted (or reweighted) until KEEP of the retrains keep the structure.
CANDIDATES = np.arange(3, N, 3)
KEEP = 3

Fit = Callable[[np.ndarray, np.ndarray], Any]  # (row mask, weights) -> a trained model
#: CatBoost settings that make retraining deterministic and structure-preserving.
CB_FIXED = dict(verbose=0, random_strength=0, bootstrap_type="No", thread_count=1, allow_writing_files=False)


@pytest.fixture(scope="module")
def data():
    """Few distinct feature values, so that deleting a row mostly keeps every tree's structure (the
    boosters' feature bins do not move)."""
    rng = np.random.default_rng(7)
    X = rng.integers(0, 6, size=(N + M, 4)).astype(float)
    noise = [0.3 * rng.normal(size=N + M) for _ in range(2)]
    targets = np.c_[X[:, 0] + noise[0], X[:, 1] * X[:, 2] / 5 + noise[1]]
    classes = np.argmax(X[:, :3] / 3 + rng.normal(scale=0.8, size=(N + M, 3)), axis=1)
    margin = 0.25 * rng.integers(-1, 2, size=(N + M, 3))  # coarse too: structures stay
    return X[:N], X[N:], targets[:N], targets[N:], classes[:N], classes[N:], margin[:N], margin[N:]


def _raw(model: Any, X: np.ndarray) -> np.ndarray:
    raw = raw_predict(model, X)
    return raw if raw.ndim == 2 else raw[:, None]


def _native(model: Any, X: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """The booster's own raw prediction of rows with a per-class initial margin."""
    if isinstance(model, xgb.XGBModel):  # base_margin replaces the base score
        return model.get_booster().predict(xgb.DMatrix(X, base_margin=margin), output_margin=True)
    if isinstance(model, cb.CatBoost):
        return model.predict(cb.Pool(X, baseline=margin), prediction_type="RawFormulaVal")
    return _raw(model, X) + margin


def _against_retraining(ex: BoostingInfluence, fit: Fit, X: np.ndarray, Xt: np.ndarray, n_out: int,
                        atol: float, predict: Callable[[Any, np.ndarray], np.ndarray] = _raw,
                        fd_rtol: float = 0.0, methods: tuple[str, ...] = ("leaf_refit", "leaf_influence"),
                        eps: float = 1e-3) -> None:
    """LeafRefit (every output's margin) equals deletion retraining where the structure is kept, and
    LeafInfluence the central difference of retraining in the row's weight (weights 1 +- ``eps`` as
    the boosters store them, float32), to ``atol`` plus, for the difference, ``fd_rtol`` of its
    largest entry; ``predict`` gives a model's raw margins on ``Xt``."""
    steps = tuple(float(np.float32(1 + s)) for s in (eps, -eps))
    model = ex.model
    raw = predict(model, Xt)
    ones = np.ones(N)
    for method in methods:
        ex.set_params(method=method)
        scores = np.stack([ex.score_training_points(Xt, training_points=CANDIDATES, on="prediction",
                                                    output=k if n_out > 1 else None)
                           for k in range(n_out)], axis=-1)
        kept = 0
        for s, i in zip(scores, CANDIDATES, strict=True):
            if method == "leaf_refit":
                keep = np.arange(N) != i
                other = fit(keep, ones)
                if not structure_report(model, other, X, keep, Xt)["same"]:
                    continue
                truth = raw - predict(other, Xt)
            else:
                up, down = ones.copy(), ones.copy()
                up[i], down[i] = steps
                both = [fit(np.ones(N, bool), w) for w in (up, down)]
                if not all(structure_report(model, b, X, None, Xt)["same"] for b in both):
                    continue
                truth = (predict(both[0], Xt) - predict(both[1], Xt)) / (steps[0] - steps[1])
            tol = atol + (fd_rtol * np.abs(truth).max() if method != "leaf_refit" else 0.0)
            np.testing.assert_allclose(s, truth, rtol=0, atol=tol, err_msg=f"{method}, row {i}")
            kept += 1
            if kept == KEEP:
                break
        assert kept == KEEP, f"{method}: structure kept in only {kept} retrains, the comparison is vacuous"


# ----------------------------------------------------------------------------------------------
# Multi-target regression: y of shape (n, 2).

def _xgb_multi_target(X, Y):
    def fit(mask, w):
        return xgb.XGBRegressor(n_estimators=6, max_depth=2, multi_strategy="one_output_per_tree",
                                tree_method="exact", n_jobs=1).fit(X[mask], Y[mask], sample_weight=w[mask])
    return fit


def _cb_multi_target(X, Y, boost_from_average=True):
    def fit(mask, w):
        return cb.CatBoostRegressor(iterations=5, depth=2, loss_function="MultiRMSE", learning_rate=0.3,
                                    boost_from_average=boost_from_average, **CB_FIXED
                                    ).fit(X[mask], Y[mask], sample_weight=w[mask])
    return fit


@pytest.mark.parametrize("make", [_xgb_multi_target, _cb_multi_target], ids=["xgboost", "catboost"])
def test_multi_target_regression(data, make):
    """``fit(X, Y)`` with Y of shape (n, 2), as a DataFrame too; ``on="loss"`` is the sum over the
    targets of each target's squared error ``(y - F)**2 / 2`` (both libraries' loss)."""
    pd = pytest.importorskip("pandas")
    X, Xt, Y, Yt = data[:4]
    fit = make(X, Y)
    model = fit(np.ones(N, bool), np.ones(N))
    frame = pd.DataFrame(Y, columns=["a", "b"])
    ex = BoostingInfluence(model, progress=False, method="leaf_refit").fit(X, frame)
    assert ex.reproduction_residual_ < 1e-6  # XGBoost: float32 margins (the adapter's own tolerance)
    np.testing.assert_allclose(ex.engine_.predict_margin(ex._test_points(Xt, None, "prediction", None)),
                               _raw(model, Xt), rtol=1e-6, atol=1e-6)
    # XGBoost's float32 margins make retraining differences good to ~1e-6 (1e-3 for the weight
    # derivative's central difference, a float32 difference divided by 2e-3).
    if make is _xgb_multi_target:
        _against_retraining(ex, fit, X, Xt, 2, atol=2e-3)
    else:
        # CatBoost stores its re-estimated bias as float32: a weight step of 1e-3 moves it by a few
        # ulps, so its central difference is noise (~10% here); LeafInfluence is checked without
        # the bias re-estimated (multi-output Newton leaves: see the l2 rounding note below).
        _against_retraining(ex, fit, X, Xt, 2, atol=1e-9, methods=("leaf_refit",))
        fixed = _cb_multi_target(X, Y, boost_from_average=False)
        held = BoostingInfluence(fixed(np.ones(N, bool), np.ones(N)), progress=False).fit(X, Y)
        _against_retraining(held, fixed, X, Xt, 2, atol=1e-9, fd_rtol=1e-3, methods=("leaf_influence",))
    rows = CANDIDATES[:4]
    ex.set_params(method="leaf_refit")
    loss = ex.score_training_points(Xt, Yt, training_points=rows)
    by_target = [ex.score_training_points(Xt, training_points=rows, on="prediction", output=k)
                 for k in (0, 1)]
    f = _raw(model, Xt)
    # L(F) - L(F - d) for L = sum_k (y_k - F_k)^2 / 2, d = the per-target refit changes.
    expected = sum(0.5 * (Yt[:, k] - f[:, k]) ** 2 - 0.5 * (Yt[:, k] - f[:, k] + by_target[k]) ** 2
                   for k in (0, 1))
    # The scores' own margins are float64 sums of the stored leaf values, XGBoost's float32 (2e-7 apart).
    np.testing.assert_allclose(loss, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("make", [_xgb_multi_target, _cb_multi_target], ids=["xgboost", "catboost"])
def test_multi_target_tables_and_explanations(data, make):
    """The tables show each target's label in a column of its own (``label_0``, ``label_1``, the
    labels given to fit), and ``explain_prediction`` takes the row's targets as ``Y[[j]]``: its
    scores are ``score_training_points`` of that row."""
    X, Xt, Y, Yt = data[:4]
    model = make(X, Y)(np.ones(N, bool), np.ones(N))
    ex = BoostingInfluence(model, progress=False).fit(X, Y)
    top = ex.top_training_points(Xt, Yt, n=4)
    np.testing.assert_array_equal(top[["label_0", "label_1"]].to_numpy(), Y[top.index.to_numpy()])
    explained = ex.explain_prediction(Xt[[3]], Yt[[3]])
    assert explained.label == tuple(Yt[3].tolist())
    np.testing.assert_array_equal(explained.scores.to_numpy(),
                                  np.asarray(ex.score_training_points(Xt[[3]], Yt[[3]]))[:, 0])
    issues = ex.find_label_issues(n=5)
    np.testing.assert_array_equal(issues[["label_0", "label_1"]].to_numpy(), Y[issues.index.to_numpy()])


def test_multi_target_shape_is_checked(data):
    X, _, Y = data[:3]
    model = _xgb_multi_target(X, Y)(np.ones(N, bool), np.ones(N))
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        BoostingInfluence(model, progress=False).fit(X, Y[:, 0])
    binary = xgb.XGBClassifier(n_estimators=2).fit(X, Y[:, 0] > 0)
    with pytest.raises(ValueError, match="one label per row"):
        BoostingInfluence(binary, progress=False).fit(X, np.c_[Y[:, 0] > 0, Y[:, 0] > 0])
    with pytest.raises(ValueError, match=r"init_score must have shape \(300,\)"):
        BoostingInfluence(binary, progress=False).fit(X, Y[:, 0] > 0, init_score=Y)


# ----------------------------------------------------------------------------------------------
# Multiclass models trained with a per-class initial margin of shape (n, K).

def _lgb_margin(X, y, B):
    def fit(mask, w):
        return lgb.LGBMClassifier(n_estimators=2, num_leaves=4, min_child_samples=50, verbose=-1, n_jobs=1,
                                  deterministic=True).fit(
            X[mask], y[mask], sample_weight=w[mask], init_score=B[mask])
    return fit


def _xgb_margin(X, y, B):
    def fit(mask, w):
        return xgb.XGBClassifier(n_estimators=5, max_depth=2, tree_method="exact", n_jobs=1).fit(
            X[mask], y[mask], sample_weight=w[mask], base_margin=B[mask])
    return fit


def _cb_margin(X, y, B):
    def fit(mask, w):
        pool = cb.Pool(X[mask], y[mask], weight=w[mask], baseline=B[mask])
        return cb.CatBoostClassifier(iterations=5, depth=2, learning_rate=0.3, **CB_FIXED).fit(pool)
    return fit


# Central differences of retraining in one weight: CatBoost's multiclass Newton leaves round the l2
# term l2 * sum(w) / N to float32, which over a difference of 2e-3 moves by one float32 ulp,
# measured up to 1e-3 of the difference's largest entry (tests/adapters/test_catboost_objectives.py;
# LeafInfluence does not differentiate the rounding). LightGBM rounds every row's weighted gradient
# to float32: over 2e-3 that is ~2e-3 of the largest entry, over 2e-2 (truncation O(eps^2) ~1e-4)
# measured up to 1.6e-4.
LGB_FD = dict(eps=1e-2, fd_rtol=5e-4)


@pytest.mark.parametrize(("make", "atol", "fd"),
                         [(_lgb_margin, 1e-9, LGB_FD), (_xgb_margin, 2e-3, {}),
                          (_cb_margin, 1e-9, dict(fd_rtol=1e-3))],
                         ids=["lightgbm", "xgboost", "catboost"])
def test_multiclass_with_a_per_class_initial_margin(data, make, atol, fd):
    X, Xt = data[:2]
    y, B, Bt = data[4], data[6], data[7]
    fit = make(X, y, B)
    model = fit(np.ones(N, bool), np.ones(N))
    ex = BoostingInfluence(model, progress=False, method="leaf_refit").fit(X, y, init_score=B)
    assert ex.reproduction_residual_ < 1e-6
    test = ex._test_points(Xt, None, "prediction", Bt)
    np.testing.assert_allclose(ex.engine_.predict_margin(test), _native(model, Xt, Bt), rtol=1e-6, atol=1e-6)
    s = ex.score_training_points(Xt, data[5], init_score=Bt)
    assert s.shape == (N, M) and np.all(np.isfinite(s))
    _against_retraining(ex, fit, X, Xt, 3, atol=atol, predict=lambda m, rows: _native(m, rows, Bt), **fd)


# ----------------------------------------------------------------------------------------------
# A LightGBM multiclass Booster with a class that never occurs in y.

def test_lightgbm_class_absent_from_the_labels(data):
    """``num_class=4`` trained on labels 0..2: it trains and predicts (class 3 gets the init score
    log(1e-15) and constant trees), and it is explained like any other model."""
    X, Xt, y = data[0], data[1], data[4]
    params = {"objective": "multiclass", "num_class": 4, "num_leaves": 4, "min_data_in_leaf": 50,
              "verbose": -1, "num_threads": 1, "deterministic": True}

    def fit(mask, w):
        return lgb.train(params, lgb.Dataset(X[mask], y[mask], weight=w[mask]), 2)

    model = fit(np.ones(N, bool), np.ones(N))
    ex = BoostingInfluence(model, progress=False, method="leaf_refit").fit(X, y)
    assert ex.reproduction_residual_ < 1e-12
    _against_retraining(ex, fit, X, Xt, 4, atol=1e-9, **LGB_FD)


# ----------------------------------------------------------------------------------------------
# The models users have, on a team of threads.

NAMES = np.array(["low", "mid", "high"])  # text class labels, as users pass them


def _one_vs_all(X: Any, labels: np.ndarray) -> Any:
    return lgb.LGBMClassifier(objective="multiclassova", n_estimators=20, verbose=-1).fit(X, labels)


def _xgb_targets(X: Any, labels: np.ndarray) -> Any:
    return xgb.XGBRegressor(n_estimators=30).fit(X, labels)  # the default: one tree per target


def _xgb_vector_targets(X: Any, labels: np.ndarray) -> Any:
    return xgb.XGBRegressor(n_estimators=30, multi_strategy="multi_output_tree").fit(X, labels)


def _cb_multirmse(X: Any, labels: np.ndarray) -> Any:
    return cb.CatBoostRegressor(loss_function="MultiRMSE", iterations=30, verbose=0,
                                allow_writing_files=False).fit(X, labels)


@pytest.mark.parametrize(("make", "classes"),
                         [(_one_vs_all, True), (_xgb_targets, False), (_xgb_vector_targets, False),
                          (_cb_multirmse, False)],
                         ids=["lightgbm-multiclassova", "xgboost-multi-target", "xgboost-vector-leaves",
                              "catboost-multirmse"])
def test_multi_output_defaults_score_the_same_on_a_team_of_any_size(make: Callable[..., Any],
                                                                       classes: bool) -> None:
    """One-vs-all and multi-target models, near their defaults, on 3 chunks of training rows
    (``engine.reverse_multi``'s team splits them): the scores of 4 test points and of their mean
    loss are the same, bit for bit, on 1, 2 and 3 threads; each point's column is the one it gets
    alone; and forward mode (a few training rows against every test point, an independent
    computation) agrees within 1e-9 of the largest score (measured 1.8e-15 to 6.5e-15)."""
    pd = pytest.importorskip("pandas")
    from influence_gbdt.engine.team import CHUNK_ROWS

    rng = np.random.default_rng(3)
    n = 3 * CHUNK_ROWS + 123
    X = pd.DataFrame(rng.normal(size=(n + 4, 4)), columns=["a", "b", "c", "d"])
    if classes:
        labels = NAMES[np.argmax(X[["a", "b", "c"]].to_numpy() + rng.normal(size=(n + 4, 3)), axis=1)]
    else:
        labels = np.c_[X["a"] + 0.5 * rng.normal(size=n + 4), X["b"] * X["c"] + 0.5 * rng.normal(size=n + 4)]
    X_test, y_test = X.iloc[n:], labels[n:]
    X_train, y_train = X.iloc[:n], labels[:n]
    ex = BoostingInfluence(make(X_train, y_train), progress=False, n_threads=1).fit(X_train, y_train)
    batch = np.asarray(ex.score_training_points(X_test, y_test))
    mean = np.asarray(ex.score_training_points(X_test, y_test, aggregate="mean"))
    alone = np.column_stack([np.asarray(ex.score_training_points(X_test.iloc[[i]], y_test[[i]]))[:, 0]
                             for i in range(4)])
    np.testing.assert_array_equal(batch, alone)
    for threads in (2, 3):
        ex.set_params(n_threads=threads)
        np.testing.assert_array_equal(np.asarray(ex.score_training_points(X_test, y_test)), batch)
        np.testing.assert_array_equal(np.asarray(ex.score_training_points(X_test, y_test, aggregate="mean")),
                                      mean)
    rows = [0, 5000, n - 1]  # fewer training rows than test points: forward mode
    forward = np.asarray(ex.score_training_points(X_test, y_test, training_points=rows))
    assert np.abs(forward - batch[rows]).max() <= 1e-9 * np.abs(batch[rows]).max()


@pytest.mark.filterwarnings("ignore:.*manually specified the `updater`:UserWarning")  # refresh is the updater
def test_multiclass_leaf_refit_on_a_team_matches_xgboost_refresh() -> None:
    """LeafRefit of a 3-class model on 3 chunks of training rows and more, one deleted row at a time
    (its several-output leaf sums go to a team of threads, chunk by chunk): every class's new
    margins equal XGBoost's own fixed-structure refit without the row (the ``refresh`` updater:
    each tree's leaves recomputed at the refreshed margins, as all_points does), to XGBoost's
    float32 margins (1e-5 of the largest, as ``tests/adapters/test_xgboost.py``; measured 1.2e-7),
    and they are the same bits on 1, 2 and 3 threads."""
    from influence_gbdt.engine.team import CHUNK_ROWS

    rng = np.random.default_rng(5)
    n, rounds = 3 * CHUNK_ROWS + 123, 8
    X = rng.normal(size=(n + 10, 4))
    y = np.argmax(X[:, :3] + rng.normal(size=(n + 10, 3)), axis=1).astype(float)
    X_train, y_train, X_test = X[:n], y[:n], X[n:]
    params = {"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "eta": 0.3, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(X_train, y_train), rounds)
    ex = BoostingInfluence(booster, method="leaf_refit", base_score="fixed", progress=False,
                           n_threads=1).fit(X_train, y_train)
    rows = [0, CHUNK_ROWS + 7, n - 1]

    def refit() -> np.ndarray:  # (rows, test points, classes); one row per call: the team is the call's
        return np.array([np.stack([np.asarray(ex.score_training_points(X_test, training_points=[i],
                                                                        on="prediction", output=c))[0]
                                   for c in range(3)], axis=-1) for i in rows])

    ours = refit()
    for threads in (2, 3):
        ex.set_params(n_threads=threads)
        np.testing.assert_array_equal(refit(), ours)
    refresh = {"process_type": "update", "updater": "refresh", "refresh_leaf": True, "min_child_weight": 0}
    margins = booster.predict(xgb.DMatrix(X_test), output_margin=True).astype(np.float64)
    truth = []
    for i in rows:
        keep = np.arange(n) != i
        new = xgb.train({**params, **refresh}, xgb.DMatrix(X_train[keep], y_train[keep]), rounds,
                        xgb_model=booster)
        truth.append(margins - new.predict(xgb.DMatrix(X_test), output_margin=True).astype(np.float64))
    tol = 1e-5 * np.abs(margins).max()
    assert np.abs(truth).max() > 10 * tol  # the deletions move the margins: a real comparison
    np.testing.assert_allclose(ours, np.array(truth), rtol=0, atol=tol)
    # the three rows and 97 more deleted together (score_group), against refresh without them all
    group = np.r_[rows, np.random.default_rng(6).choice(np.arange(3, CHUNK_ROWS), 97, replace=False)]
    keep = ~np.isin(np.arange(n), group)
    new = xgb.train({**params, **refresh}, xgb.DMatrix(X_train[keep], y_train[keep]), rounds,
                    xgb_model=booster)
    truth = margins - new.predict(xgb.DMatrix(X_test), output_margin=True).astype(np.float64)
    together = np.stack([ex.score_group(X_test, training_points=group, on="prediction", output=c)
                         for c in range(3)], axis=-1)
    assert np.abs(truth).max() > 100 * tol
    np.testing.assert_allclose(together, truth, rtol=0, atol=tol)
