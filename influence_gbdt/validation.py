"""Validate influence scores against real leave-one-out retraining with the booster itself.

The scores of :class:`~influence_gbdt.BoostingInfluence` are *proxies*: ``leaf_refit`` recomputes
every leaf without a training row while keeping every tree's structure (the paper's Assumption 1),
``leaf_influence`` is its first-order (derivative) version, and the Fast update sets approximate
both. This module measures how close they come to what the booster really does when a row is
removed and the model is retrained from scratch with the same parameters and seed:

* :class:`TrainingRecipe` -- library + parameters + seed + rounds; ``fit`` / ``retrain`` /
  ``retrain_without`` train with the booster itself (XGBoost ``xgb.train``, LightGBM ``lgb.train``
  with ``deterministic=True`` and fixed threads, CatBoost with the original model's
  ``input_borders`` and removal as weight 0, so that quantisation and the random stream stay put).
* :func:`same_structure` / :func:`structure_report` -- did the retrained model partition the
  remaining training rows (and the test rows) exactly as the original one?
* :func:`loo_study` -- leave-one-out for a set of rows, compared with every method / update set:
  exactness where the structure was kept, Pearson / Spearman correlation, sign agreement and
  NDCG@k (Sharchilev et al. 2018, Table 2) split into structure-kept and structure-changed rows.
* :func:`write_report` -- Markdown summary plus scatter plots (matplotlib optional).
* :func:`removal_curve` -- remove the top-m harmful rows (paper Figure 3) vs m random rows, retrain,
  measure the real change of the test loss.

Sign convention everywhere: ``actual = L(F) - L(F_without_rows)``, > 0 = the removed rows were
harmful (removing them lowered the loss), the same sign as the scores.

NDCG definition (documented choice; the paper says "NDCG with linear gains"): for one test point,
training rows are ranked by a method's score (descending); the gain of a row is its *true* change
clipped at zero, ``max(actual, 0)`` (only harmful rows are relevant: the search is for harmful
rows); ``DCG@k = sum_{r=1..k} gain_r / log2(r + 1)``, normalised by the DCG of the ideal order.
Test points whose ideal DCG is 0 (no harmful row among those studied) are left out of the mean.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from tqdm.auto import tqdm

from .errors import InputError
from .explainer import BoostingInfluence
from .losses import LOSS_CODES
from .losses import values as loss_values

Library = Literal["xgboost", "lightgbm", "catboost"]
Removal = Literal["delete", "zero_weight"]

#: (method, update_set, k) compared by default: exact LeafRefit / LeafInfluence and their Fast variants.
DEFAULT_METHODS: tuple[tuple[str, str, int | None], ...] = (
    ("leaf_refit", "all_points", None),
    ("leaf_refit", "single_point", None),
    ("leaf_refit", "top_k_leaves", 1),
    ("leaf_refit", "top_k_leaves", 2),
    ("leaf_refit", "top_k_leaves", 8),
    ("leaf_influence", "all_points", None),
    ("leaf_influence", "single_point", None),
    ("leaf_influence", "top_k_leaves", 1),
    ("leaf_influence", "top_k_leaves", 2),
    ("leaf_influence", "top_k_leaves", 8),
)


def method_label(method: str, update_set: str, k: int | None) -> str:
    """Short display name, e.g. ``leaf_refit/top_4_leaves``."""
    tail = f"top_{k}_leaves" if update_set == "top_k_leaves" else update_set
    return f"{method}/{tail}"


# ----------------------------------------------------------------------------------------------
# Training recipe.


@dataclass
class TrainingRecipe:
    """How a model was trained, so that it can be retrained on changed data with the booster itself.

    Parameters
    ----------
    library : {"xgboost", "lightgbm", "catboost"}
    params : mapping
        Native training parameters (``xgb.train`` params, ``lgb.train`` params, CatBoost ``CatBoost``
        params). Loss must be binary log loss or squared error.
    num_boost_round : int
        Number of boosting rounds (CatBoost: ``iterations``).
    seed : int
        Random seed (XGBoost ``seed``, LightGBM ``seed``, CatBoost ``random_seed``).
    n_threads : int
        Fixed thread count (LightGBM needs it for determinism).
    removal : {"delete", "zero_weight"}, optional
        How :meth:`retrain_without` removes rows. Default: ``"zero_weight"`` for CatBoost (deleting
        rows shifts its random stream), ``"delete"`` otherwise (true leave-one-out).

    Notes
    -----
    The recipe adds only what determinism needs: the seed and thread count for all three,
    ``deterministic=True`` and ``verbose=-1`` for LightGBM, ``allow_writing_files=False`` for
    CatBoost and, for CatBoost, the feature borders of the model trained by :meth:`fit` (saved with
    ``save_borders`` and passed back as ``input_borders``), so that removing a row does not
    re-quantise the features.
    """

    library: Library
    params: Mapping[str, Any]
    num_boost_round: int = 100
    seed: int = 0
    n_threads: int = 2
    removal: Removal | None = None
    _borders: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.library not in ("xgboost", "lightgbm", "catboost"):
            raise InputError(f"library must be 'xgboost', 'lightgbm' or 'catboost', got {self.library!r}.")
        if self.removal is None:
            self.removal = "zero_weight" if self.library == "catboost" else "delete"
        if self.removal not in ("delete", "zero_weight"):
            raise InputError(f"removal must be 'delete' or 'zero_weight', got {self.removal!r}.")

    # -- training ------------------------------------------------------------------------------

    def fit(self, X: Any, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Any:
        """Train the original model (CatBoost: and remember its feature borders).

        Returns
        -------
        xgboost.Booster, lightgbm.Booster or catboost.CatBoost
        """
        if self.library == "catboost":
            self._borders = None
            model = self._train(X, y, sample_weight)
            tmp = tempfile.mkdtemp(prefix="influence_gbdt_borders_")
            weakref.finalize(self, shutil.rmtree, tmp, True)
            path = os.path.join(tmp, "borders.tsv")
            model.save_borders(path)
            self._borders = path
            return model
        return self._train(X, y, sample_weight)

    def retrain(self, X: Any, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Any:
        """Train a model on ``(X, y, sample_weight)`` with the same parameters, seed and (CatBoost)
        borders as :meth:`fit`."""
        if self.library == "catboost" and self._borders is None:
            raise InputError("Call fit() first: CatBoost retraining reuses the original model's borders.")
        return self._train(X, y, sample_weight)

    def retrain_without(
        self, X: Any, y: ArrayLike, rows: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Any:
        """Retrain without the training rows ``rows`` (deleted, or weight 0 per :attr:`removal`)."""
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        n = _n_rows(X)
        w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).copy()
        if self.removal == "zero_weight":
            w[rows] = 0.0
            return self.retrain(X, y, w)
        keep = np.ones(n, dtype=bool)
        keep[rows] = False
        y_arr = np.asarray(y)
        return self.retrain(_take(X, keep), y_arr[keep], None if sample_weight is None else w[keep])

    def _train(self, X: Any, y: ArrayLike, sample_weight: ArrayLike | None) -> Any:
        p = dict(self.params)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if self.library == "xgboost":
            import xgboost as xgb

            p.setdefault("seed", self.seed)
            p.setdefault("nthread", self.n_threads)
            dtrain = xgb.DMatrix(X, label=np.asarray(y), weight=w)
            return xgb.train(p, dtrain, num_boost_round=self.num_boost_round)
        if self.library == "lightgbm":
            import lightgbm as lgb

            p.update(seed=p.get("seed", self.seed), deterministic=True, num_threads=self.n_threads)
            p.setdefault("verbose", -1)
            ds = lgb.Dataset(X, label=np.asarray(y), weight=w, params={"verbose": -1}, free_raw_data=False)
            return lgb.train(p, ds, num_boost_round=self.num_boost_round)
        import catboost

        p.setdefault("random_seed", self.seed)
        p.setdefault("thread_count", self.n_threads)
        p.update(iterations=self.num_boost_round, allow_writing_files=False)
        p.setdefault("verbose", False)
        if self._borders is not None:
            p["input_borders"] = self._borders
        model = catboost.CatBoost(p)
        model.fit(catboost.Pool(X, label=np.asarray(y), weight=w))
        return model

    # -- native predictions --------------------------------------------------------------------

    def raw_predict(self, model: Any, X: Any) -> NDArray[np.float64]:
        """The model's raw margin on ``X`` (the booster's own prediction), shape (n,)."""
        return raw_predict(model, X)


def _library_of(model: Any) -> str:
    lib = type(model).__module__.split(".")[0]
    if lib not in ("xgboost", "lightgbm", "catboost"):
        raise InputError(f"Unsupported model type {type(model).__name__}.")
    return lib


def raw_predict(model: Any, X: Any) -> NDArray[np.float64]:
    """Raw margin of an XGBoost / LightGBM / CatBoost model on ``X``, shape (n,), float64."""
    lib = _library_of(model)
    if lib == "xgboost":
        import xgboost as xgb

        booster = model.get_booster() if hasattr(model, "get_booster") else model
        return booster.predict(xgb.DMatrix(X), output_margin=True).astype(np.float64)
    if lib == "lightgbm":
        booster = getattr(model, "booster_", model)
        return np.asarray(booster.predict(X, raw_score=True), dtype=np.float64)
    return np.asarray(model.predict(X, prediction_type="RawFormulaVal"), dtype=np.float64)


def leaf_ids(model: Any, X: Any) -> NDArray[np.int64]:
    """Native leaf id of every row in every tree, shape (n, T) (XGBoost: node ids)."""
    lib = _library_of(model)
    if lib == "xgboost":
        import xgboost as xgb

        booster = model.get_booster() if hasattr(model, "get_booster") else model
        return booster.predict(xgb.DMatrix(X), pred_leaf=True).astype(np.int64).reshape(_n_rows(X), -1)
    if lib == "lightgbm":
        booster = getattr(model, "booster_", model)
        return np.asarray(booster.predict(X, pred_leaf=True), dtype=np.int64).reshape(_n_rows(X), -1)
    import catboost

    return np.asarray(model.calc_leaf_indexes(catboost.Pool(X)), dtype=np.int64)


def split_signature(model: Any) -> list[tuple[Any, ...]]:
    """Per tree: the split features and thresholds (cheap to compare between two models)."""
    lib = _library_of(model)
    if lib == "xgboost":
        booster = model.get_booster() if hasattr(model, "get_booster") else model
        trees = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"]
        out = []
        for t in trees:
            left = np.asarray(t["left_children"])
            inner = left != -1
            out.append((tuple(left), tuple(np.asarray(t["split_indices"])[inner]),
                        tuple(np.asarray(t["split_conditions"], dtype=np.float32)[inner])))
        return out
    if lib == "lightgbm":
        booster = getattr(model, "booster_", model)
        sig: list[tuple[Any, ...]] = []
        for line in booster.model_to_string().splitlines():
            if line.startswith("Tree="):
                sig.append(())
            elif sig and line.startswith(("split_feature=", "threshold=", "left_child=", "cat_threshold=")):
                sig[-1] = (*sig[-1], line)
        return sig
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.json")
        model.save_model(path, format="json")
        with open(path) as fh:
            js = json.load(fh)
    trees = js.get("oblivious_trees") or js.get("trees") or []
    return [json.dumps(t.get("splits", t.get("split")), sort_keys=True) for t in trees]  # type: ignore[misc]


def structure_report(
    original: Any,
    retrained: Any,
    X_train: Any,
    mask: ArrayLike | None = None,
    X_test: Any | None = None,
    *,
    original_leaves: NDArray[np.int64] | None = None,
    original_test_leaves: NDArray[np.int64] | None = None,
    original_splits: list[Any] | None = None,
) -> dict[str, Any]:
    """Compare the tree structures of two models of the same library.

    Parameters
    ----------
    original, retrained : models
    X_train : array-like of shape (n, d)
        The original training rows (all of them, also the removed ones).
    mask : bool array of shape (n,), optional
        The rows kept in the retrained model (weight > 0); default all.
    X_test : array-like, optional
        Test rows whose leaves must also agree.
    original_leaves, original_test_leaves, original_splits : optional
        Precomputed :func:`leaf_ids` / :func:`split_signature` of ``original`` (speed).

    Returns
    -------
    dict with ``n_trees_equal``, ``train_leaves_equal`` (every kept row in the same leaf of every
    tree), ``test_leaves_equal`` (None without ``X_test``), ``splits_equal`` (same split features
    and thresholds), ``first_changed_tree`` (first tree where a kept train row moved, or -1) and
    ``same`` (the number of trees and all leaf assignments agree: Assumption 1 for the rows
    given).
    """
    a = leaf_ids(original, X_train) if original_leaves is None else original_leaves
    b = leaf_ids(retrained, X_train)
    keep = np.ones(a.shape[0], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    n_trees_equal = a.shape[1] == b.shape[1]
    train_eq = False
    first = -1
    if n_trees_equal:
        moved = (a[keep] != b[keep]).any(axis=0)
        train_eq = not bool(moved.any())
        first = int(np.argmax(moved)) if moved.any() else -1
    test_eq: bool | None = None
    if X_test is not None:
        ta = leaf_ids(original, X_test) if original_test_leaves is None else original_test_leaves
        tb = leaf_ids(retrained, X_test)
        test_eq = bool(ta.shape == tb.shape and np.array_equal(ta, tb))
    sa = split_signature(original) if original_splits is None else original_splits
    splits_eq = sa == split_signature(retrained)
    return {
        "n_trees_equal": n_trees_equal,
        "train_leaves_equal": train_eq,
        "test_leaves_equal": test_eq,
        "splits_equal": bool(splits_eq),
        "first_changed_tree": first,
        "same": bool(n_trees_equal and train_eq and test_eq is not False),
    }


def same_structure(original: Any, retrained: Any, X_train: Any, mask: ArrayLike | None = None,
                   X_test: Any | None = None) -> bool:
    """Whether every tree of ``retrained`` sends every kept training row (``mask``; and every row of
    ``X_test`` if given) to the same leaf as ``original``. See :func:`structure_report`."""
    return bool(structure_report(original, retrained, X_train, mask, X_test)["same"])


# ----------------------------------------------------------------------------------------------
# Metrics.


def ndcg_at_k(scores: NDArray[np.float64], actual: NDArray[np.float64], k: int = 100) -> float:
    """Mean over test points (columns) of NDCG@k of ranking training rows (rows) by ``scores``,
    with linear gains ``max(actual, 0)`` (see the module docstring). NaN if no column has gain."""
    scores = np.asarray(scores, dtype=np.float64)
    gains = np.clip(np.asarray(actual, dtype=np.float64), 0.0, None)
    if gains.ndim == 1:
        gains, scores = gains[:, None], scores[:, None]
    k = min(int(k), gains.shape[0])
    if k == 0:
        return float("nan")
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    order = np.argsort(-scores, axis=0, kind="stable")[:k]
    dcg = (np.take_along_axis(gains, order, axis=0) * disc[:, None]).sum(axis=0)
    ideal = (-np.sort(-gains, axis=0)[:k] * disc[:, None]).sum(axis=0)
    ok = ideal > 0
    return float(np.mean(dcg[ok] / ideal[ok])) if ok.any() else float("nan")


def _corr(a: NDArray[np.float64], b: NDArray[np.float64]) -> tuple[float, float]:
    a, b = a.ravel(), b.ravel()
    if a.size < 2 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan"), float("nan")
    pearson = float(np.corrcoef(a, b)[0, 1])
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    return pearson, float(np.corrcoef(ra, rb)[0, 1])


def compare(pred: NDArray[np.float64], actual: NDArray[np.float64], ndcg_k: int = 100) -> dict[str, float]:
    """Agreement figures of predicted vs actual changes, arrays of shape (n_rows, n_test)."""
    n = int(pred.shape[0]) if pred.ndim else 0
    if n == 0:
        return {"n_rows": 0, "max_abs_err": np.nan, "max_rel_err": np.nan, "pearson": np.nan,
                "spearman": np.nan, "sign_agreement": np.nan, "ndcg": np.nan}
    err = np.abs(pred - actual)
    scale = float(np.abs(actual).max())
    nz = np.abs(actual) > 1e-12 * max(scale, 1e-300)
    pearson, spearman = _corr(pred, actual)
    return {
        "n_rows": n,
        "max_abs_err": float(err.max()),
        "max_rel_err": float(err.max() / scale) if scale > 0 else float("nan"),
        "pearson": pearson,
        "spearman": spearman,
        "sign_agreement": float(np.mean(np.sign(pred[nz]) == np.sign(actual[nz]))) if nz.any() else np.nan,
        "ndcg": ndcg_at_k(pred, actual, ndcg_k),
    }


# ----------------------------------------------------------------------------------------------
# Leave-one-out study.


@dataclass
class LOOStudy:
    """Result of :func:`loo_study`.

    Attributes
    ----------
    summary : DataFrame
        One line per (method, subset in {"all", "kept", "changed"}): ``method``, ``update_set``,
        ``k``, ``subset``, ``n_rows``, ``max_abs_err``, ``max_rel_err`` (max abs error / max |actual|
        in the subset), ``pearson``, ``spearman`` (over all (row, test point) pairs),
        ``sign_agreement``, ``ndcg`` (mean NDCG@``ndcg_k`` over test points).
    rows : ndarray of shape (r,)
        The removed training rows.
    actual : ndarray of shape (r, m)
        Real test-loss changes ``L(F) - L(F_without_row)`` after retraining.
    kept : ndarray of bool, shape (r,)
        Whether the retrained model kept the structure (:func:`structure_report` ``same``).
    structure : DataFrame
        The structure report of every removed row.
    scores : dict
        Method label -> scores of shape (r, m).
    ndcg_k : int
    seconds : dict
        Wall time of retraining and of each method.
    """

    summary: pd.DataFrame
    rows: NDArray[np.int64]
    actual: NDArray[np.float64]
    kept: NDArray[np.bool_]
    structure: pd.DataFrame
    scores: dict[str, NDArray[np.float64]]
    ndcg_k: int
    seconds: dict[str, float]


def _test_loss(loss_code: int, y: NDArray[np.float64], margin: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(loss_values(loss_code, np.ascontiguousarray(y, dtype=np.float64),
                                  np.ascontiguousarray(margin, dtype=np.float64)))


def loo_study(
    recipe: TrainingRecipe,
    X: Any,
    y: ArrayLike,
    X_test: Any,
    y_test: ArrayLike,
    rows: ArrayLike,
    sample_weight: ArrayLike | None = None,
    methods: Iterable[tuple[str, str, int | None]] = DEFAULT_METHODS,
    *,
    model: Any | None = None,
    ndcg_k: int = 100,
    base_score: Literal["refit", "fixed"] = "refit",
    progress: bool = True,
) -> LOOStudy:
    """Leave-one-out retraining of ``rows`` compared with the influence methods.

    Parameters
    ----------
    recipe : TrainingRecipe
    X, y, sample_weight : the training data.
    X_test, y_test : the test points whose losses are tracked.
    rows : array-like of int
        Training rows removed one at a time.
    methods : iterable of (method, update_set, k)
        Configurations of :class:`~influence_gbdt.BoostingInfluence` to compare.
    model : optional
        The original model; default ``recipe.fit(X, y, sample_weight)``.
    ndcg_k : int
        Cut-off of NDCG (the paper uses 100; with fewer rows it is over all of them).
    base_score : {"refit", "fixed"}
        Passed to :class:`~influence_gbdt.BoostingInfluence` (``"refit"`` matches retraining).
    progress : bool

    Returns
    -------
    LOOStudy
        ``.summary`` is the DataFrame of agreement figures; see :func:`write_report`.
    """
    import time

    rows = np.asarray(rows, dtype=np.int64).ravel()
    n = _n_rows(X)
    if rows.size == 0 or rows.min() < 0 or rows.max() >= n:
        raise InputError(f"rows must be non-empty indices into the {n} training rows.")
    if model is None:
        model = recipe.fit(X, y, sample_weight)
    ex = BoostingInfluence(model, progress=False, base_score=base_score).fit(X, y, sample_weight)
    loss_code = LOSS_CODES[ex.engine_.ensemble.loss]
    yt = ex.adapter_.encode_labels(y_test)
    base_loss = _test_loss(loss_code, yt, recipe.raw_predict(model, X_test))

    t0 = time.perf_counter()
    lv_train, lv_test = leaf_ids(model, X), leaf_ids(model, X_test)
    splits = split_signature(model)
    actual = np.empty((rows.size, _n_rows(X_test)))
    reports = []
    for j, r in enumerate(tqdm(rows, disable=not progress, desc="leave-one-out retraining", leave=False)):
        new = recipe.retrain_without(X, y, [r], sample_weight)
        actual[j] = base_loss - _test_loss(loss_code, yt, recipe.raw_predict(new, X_test))
        mask = np.ones(n, dtype=bool)
        mask[r] = False
        reports.append(structure_report(model, new, X, mask, X_test, original_leaves=lv_train,
                                        original_test_leaves=lv_test, original_splits=splits))
    seconds = {"retrain": time.perf_counter() - t0}
    structure = pd.DataFrame(reports, index=pd.Index(rows, name="row"))
    kept = structure["same"].to_numpy(dtype=bool)

    scores: dict[str, NDArray[np.float64]] = {}
    lines = []
    for method, update_set, k in methods:
        ex.method, ex.update_set, ex.k = method, update_set, k  # type: ignore[assignment]
        ex._check_settings()
        t0 = time.perf_counter()
        s = np.asarray(ex.score_training_points(X_test, y_test, training_points=rows), dtype=np.float64)
        label = method_label(method, update_set, k)
        seconds[label] = time.perf_counter() - t0
        scores[label] = s
        for subset, sel in (("all", slice(None)), ("kept", kept), ("changed", ~kept)):
            lines.append({"method": method, "update_set": update_set, "k": k, "subset": subset,
                          **compare(s[sel], actual[sel], ndcg_k)})
    summary = pd.DataFrame(lines)
    summary["k"] = summary["k"].astype("Int64")
    return LOOStudy(summary, rows, actual, kept, structure, scores, ndcg_k, seconds)


# ----------------------------------------------------------------------------------------------
# Report.


def _markdown_table(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else format(float(v), floatfmt)
        return "" if v is pd.NA or v is None else str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def write_report(study: LOOStudy, path: str | os.PathLike[str], title: str = "Leave-one-out validation",
                 plots: bool = True) -> str:
    """Write a Markdown report of a :class:`LOOStudy` (and scatter plots next to it).

    Parameters
    ----------
    study : LOOStudy
    path : path of the ``.md`` file; plots go to ``<stem>_<method>.png`` in the same folder.
    title : str
    plots : bool
        Draw scatter plots of predicted vs actual changes (kept vs changed structure). Skipped with
        a note in the report if matplotlib is not installed.

    Returns
    -------
    str
        The Markdown text written.
    """
    path = os.fspath(path)
    kept = study.kept
    lines = [
        f"# {title}", "",
        f"Removed rows: {study.rows.size}; test points: {study.actual.shape[1]}; structure kept for "
        f"{int(kept.sum())} of {kept.size} rows ({kept.mean():.0%}).",
        f"Largest |actual test-loss change|: {np.abs(study.actual).max():.3g}. "
        f"Retraining took {study.seconds.get('retrain', float('nan')):.1f} s.", "",
        "Errors are max |score - actual| (relative: divided by the largest |actual| in the subset); "
        "correlations are over all (row, test point) pairs; sign agreement ignores actual changes of 0; "
        f"NDCG@{study.ndcg_k} ranks rows per test point by the score, gains = max(actual, 0).", "",
        _markdown_table(study.summary), "",
    ]
    if plots:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            lines += ["_Plots skipped: matplotlib is not installed (pip install influence-gbdt[plot])._", ""]
        else:
            stem = os.path.splitext(path)[0]
            for label, s in study.scores.items():
                fig, ax = plt.subplots(figsize=(4.5, 4.5))
                for sel, name, color in ((kept, "structure kept", "tab:blue"),
                                         (~kept, "structure changed", "tab:orange")):
                    if sel.any():
                        ax.scatter(study.actual[sel].ravel(), s[sel].ravel(), s=6, alpha=0.6, c=color,
                                   label=name)
                lim = [float(min(study.actual.min(), s.min())), float(max(study.actual.max(), s.max()))]
                ax.plot(lim, lim, "k--", lw=0.8)
                ax.set_xlabel("actual L(F) - L(F without row)")
                ax.set_ylabel(label)
                ax.legend(fontsize=7)
                fig.tight_layout()
                png = f"{stem}_{label.replace('/', '_')}.png"
                fig.savefig(png, dpi=100)
                plt.close(fig)
                lines += [f"![{label}]({os.path.basename(png)})", ""]
    text = "\n".join(lines)
    with open(path, "w") as fh:
        fh.write(text)
    return text


# ----------------------------------------------------------------------------------------------
# Removal curves (paper Figure 3).


def removal_curve(
    recipe: TrainingRecipe,
    X: Any,
    y: ArrayLike,
    X_test: Any,
    y_test: ArrayLike,
    sizes: Sequence[int] = (10, 20, 50),
    methods: Iterable[tuple[str, str, int | None]] = (("leaf_refit", "all_points", None),
                                                      ("leaf_influence", "all_points", None)),
    sample_weight: ArrayLike | None = None,
    *,
    test_point: int | None = None,
    model: Any | None = None,
    n_random: int = 5,
    seed: int = 0,
    progress: bool = True,
) -> pd.DataFrame:
    """Remove the ``m`` most harmful training rows by a method, retrain, measure the real change.

    Parameters
    ----------
    recipe : TrainingRecipe
    X, y, sample_weight : the training data.
    X_test, y_test : test points.
    sizes : sequence of int
        Numbers ``m`` of rows removed (each from the full training set).
    methods : iterable of (method, update_set, k)
    test_point : int, optional
        Target one test point (row of ``X_test``); default the mean loss over ``X_test``.
    model : optional
        The original model; default ``recipe.fit(X, y, sample_weight)``.
    n_random : int
        Random removals of ``m`` rows per size (the baseline).
    seed : int
        Seed of the random removals.
    progress : bool

    Returns
    -------
    DataFrame
        One line per (strategy, m, repeat): ``strategy`` (method label or ``"random"``), ``m``,
        ``repeat``, ``target_reduction`` (target loss before - after; > 0 = the removal helped),
        ``relative_target_reduction`` (divided by the loss before), ``test_reduction`` (same for the
        mean loss over all of ``X_test``), ``predicted`` (sum of the removed rows' scores, a
        first-order prediction of ``target_reduction``; NaN for random).
    """
    rng = np.random.default_rng(seed)
    n = _n_rows(X)
    sizes = [int(m) for m in sizes]
    if not sizes or min(sizes) < 1 or max(sizes) > n:
        raise InputError(f"sizes must lie in 1..{n}.")
    if model is None:
        model = recipe.fit(X, y, sample_weight)
    ex = BoostingInfluence(model, progress=False).fit(X, y, sample_weight)
    loss_code = LOSS_CODES[ex.engine_.ensemble.loss]
    yt = ex.adapter_.encode_labels(y_test)
    target_cols = np.arange(_n_rows(X_test)) if test_point is None else np.array([int(test_point)])

    def losses(m: Any) -> tuple[float, float]:
        lt = _test_loss(loss_code, yt, recipe.raw_predict(m, X_test))
        return float(lt[target_cols].mean()), float(lt.mean())

    before_t, before_all = losses(model)
    plans: list[tuple[str, int, int, NDArray[np.int64], float]] = []
    for method, update_set, k in methods:
        ex.method, ex.update_set, ex.k = method, update_set, k  # type: ignore[assignment]
        ex._check_settings()
        Xt = _take(X_test, target_cols)
        s = np.asarray(ex.score_training_points(Xt, np.asarray(y_test)[target_cols], aggregate="mean"))
        order = np.argsort(-s, kind="stable")
        for m in sizes:
            plans.append((method_label(method, update_set, k), m, 0, order[:m], float(s[order[:m]].sum())))
    for m in sizes:
        for rep in range(n_random):
            plans.append(("random", m, rep, rng.choice(n, size=m, replace=False), float("nan")))

    out = []
    for strategy, m, rep, removed, predicted in tqdm(plans, disable=not progress, desc="removal curve",
                                                      leave=False):
        after_t, after_all = losses(recipe.retrain_without(X, y, removed, sample_weight))
        out.append({
            "strategy": strategy, "m": m, "repeat": rep,
            "target_reduction": before_t - after_t,
            "relative_target_reduction": (before_t - after_t) / before_t if before_t else np.nan,
            "test_reduction": before_all - after_all,
            "predicted": predicted,
        })
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------------------------


def _n_rows(X: Any) -> int:
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None else len(X)


def _take(X: Any, idx: NDArray[Any]) -> Any:
    if isinstance(X, (pd.DataFrame, pd.Series)):
        idx = np.asarray(idx)
        return X.iloc[np.flatnonzero(idx) if idx.dtype == bool else idx]
    return np.asarray(X)[idx]


__all__ = [
    "DEFAULT_METHODS", "LOOStudy", "TrainingRecipe", "compare", "leaf_ids", "loo_study", "method_label",
    "ndcg_at_k", "raw_predict", "removal_curve", "same_structure", "split_signature", "structure_report",
    "write_report",
]
