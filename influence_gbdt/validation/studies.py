"""Studies against the booster's own retraining: leave-one-out (:func:`loo_study`), finite
differences of the training weight (:func:`derivative_study`) and group removal
(:func:`removal_curve`, the paper's Figure 3).

Sign convention, the same as the scores': ``actual > 0`` means the training row is harmful
(removing it, or lowering its weight, lowers the test loss).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from tqdm.auto import tqdm

from ..errors import InputError
from ..explainer import BoostingInfluence
from ..tabular import n_rows, take_rows
from .metrics import compare
from .recipe import TrainingRecipe
from .retraining import Retraining

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

#: LeafInfluence with each update set: what :func:`derivative_study` compares by default.
DERIVATIVE_METHODS: tuple[tuple[str, str, int | None], ...] = tuple(
    c for c in DEFAULT_METHODS if c[0] == "leaf_influence"
)


def _run_all(executor: Any, job: Callable[..., Any], retraining: Retraining, items: Sequence[Any],
             progress: bool, desc: str) -> list[Any]:
    """``job(retraining, item)`` for every item, in order: here, or on ``executor`` (anything with
    ``submit(fn, *args)`` returning a future with ``result()``: a ``concurrent.futures`` executor or
    a Dask ``distributed.Client``, which gets ``retraining``, with its copy of the training data,
    scattered to every worker once instead of once per task)."""
    if executor is None:
        results: Iterable[Any] = (job(retraining, item) for item in items)
    else:
        shared = executor.scatter(retraining, broadcast=True) if hasattr(executor, "scatter") else retraining
        results = (f.result() for f in [executor.submit(job, shared, item) for item in items])
    return list(tqdm(results, total=len(items), disable=not progress, desc=desc, leave=False))


def _loo_row(retraining: Retraining, row: int) -> tuple[NDArray[np.float64], dict[str, Any] | None]:
    """Test-loss change of removing ``row`` (> 0 = harmful) and the structure report."""
    after, report = retraining.without([row])
    return retraining.base_losses - after, report


def _fd_row(retraining: Retraining, job: tuple[int, float, float]) -> tuple[NDArray[np.float64], Any]:
    """Central difference of the test losses in ``row``'s weight ``w``, step ``eps``: ``job`` is
    (row, w, eps). The report is of a retrain that changed the structure, if one did."""
    row, w, eps = job
    (up, up_report), (down, down_report) = (retraining.with_weight(row, w + step) for step in (eps, -eps))
    return (up - down) / (2 * eps), (up_report if not up_report["same"] else down_report)  # type: ignore[index]


def _removal(retraining: Retraining, removed: NDArray[np.int64]) -> NDArray[np.float64]:
    return retraining.without(removed)[0]


def method_label(method: str, update_set: str, k: int | None) -> str:
    """Short display name, e.g. ``leaf_refit/top_4_leaves``."""
    tail = f"top_{k}_leaves" if update_set == "top_k_leaves" else update_set
    return f"{method}/{tail}"


@dataclass
class LOOStudy:
    """Result of :func:`loo_study` or :func:`derivative_study`.

    Attributes
    ----------
    summary : DataFrame
        One line per (method, subset in {"all", "kept", "changed"}): ``method``, ``update_set``,
        ``k``, ``subset``, ``n_rows``, ``max_abs_err``, ``max_rel_err`` (max abs error / max |actual|
        in the subset), ``pearson``, ``spearman`` (over all (row, test point) pairs),
        ``sign_agreement``, ``ndcg`` (mean NDCG@``ndcg_k`` over test points).
    rows : ndarray of shape (r,)
        The studied training rows.
    actual : ndarray of shape (r, m)
        What retraining did. Leave-one-out: ``L(F) - L(F_without_row)`` per test point.
        Finite differences: ``(L(F_{w_i + eps}) - L(F_{w_i - eps})) / (2 eps)``, an estimate of
        ``dL / dw_i``.
    kept : ndarray of bool, shape (r,)
        Whether every retrained model kept the structure (:func:`structure_report` ``same``).
    structure : DataFrame
        The structure report of every studied row (of the first retrain that changed it, if any).
    scores : dict
        Method label -> scores of shape (r, m).
    ndcg_k : int
    seconds : dict
        Wall time of retraining and of each method.
    kind : {"leave-one-out", "finite-difference"}
    eps : float or None
        The weight step of a finite-difference study.
    """

    summary: pd.DataFrame
    rows: NDArray[np.int64]
    actual: NDArray[np.float64]
    kept: NDArray[np.bool_]
    structure: pd.DataFrame
    scores: dict[str, NDArray[np.float64]]
    ndcg_k: int
    seconds: dict[str, float]
    kind: Literal["leave-one-out", "finite-difference"] = "leave-one-out"
    eps: float | None = None


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
    executor: Any = None,
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
    executor : optional
        Where the retrains run, in parallel: a ``concurrent.futures`` executor or a Dask
        ``distributed.Client`` (the retrains then run on the cluster's workers, each with a copy of
        the training data). Default: one after the other, here.

    Returns
    -------
    LOOStudy
        ``.summary`` is the DataFrame of agreement figures; see :func:`write_report`.
    """
    return _study(recipe, X, y, X_test, y_test, rows, sample_weight, methods, None, model, ndcg_k,
                  base_score, progress, executor)


def derivative_study(
    recipe: TrainingRecipe,
    X: Any,
    y: ArrayLike,
    X_test: Any,
    y_test: ArrayLike,
    rows: ArrayLike,
    sample_weight: ArrayLike | None = None,
    methods: Iterable[tuple[str, str, int | None]] = DERIVATIVE_METHODS,
    *,
    eps: float = 0.05,
    model: Any | None = None,
    ndcg_k: int = 100,
    base_score: Literal["refit", "fixed"] = "refit",
    progress: bool = True,
    executor: Any = None,
) -> LOOStudy:
    """LeafInfluence against finite differences of real retraining (the paper's Proxy 2).

    Each row's weight is moved to ``w_i + eps`` and to ``w_i - eps`` (one retrain each, same
    parameters, seed and, for CatBoost, borders) and ``dL_j / dw_i`` is estimated by the central
    difference. Where both retrains kept the structure the tree structure is locally constant and
    the central difference equals the derivative up to ``O(eps**2)``: exact LeafInfluence must agree
    to that order (and to the booster's float precision divided by ``eps``). Parameters as
    :func:`loo_study`; ``eps`` is in units of the sample weight (default weights are 1).

    Returns
    -------
    LOOStudy
        With ``kind="finite-difference"``; ``actual`` holds the central differences.
    """
    if not 0 < eps < 1:
        raise InputError(f"eps must lie in (0, 1) (a step of the sample weight), got {eps}.")
    return _study(recipe, X, y, X_test, y_test, rows, sample_weight, methods, float(eps), model, ndcg_k,
                  base_score, progress, executor)


def _study(
    recipe: TrainingRecipe, X: Any, y: ArrayLike, X_test: Any, y_test: ArrayLike, rows: ArrayLike,
    sample_weight: ArrayLike | None, methods: Iterable[tuple[str, str, int | None]], eps: float | None,
    model: Any | None, ndcg_k: int, base_score: Literal["refit", "fixed"], progress: bool, executor: Any,
) -> LOOStudy:
    """Retrain per row (without it, or with its weight +- eps), then score with every method."""
    rows = np.asarray(rows, dtype=np.int64).ravel()
    n = n_rows(X)
    if rows.size == 0 or rows.min() < 0 or rows.max() >= n:
        raise InputError(f"rows must be non-empty indices into the {n} training rows.")
    if model is None:
        model = recipe.fit(X, y, sample_weight)
    # Leave-one-out compares the effect of removing each row; finite differences the derivative per
    # unit of weight.
    ex = BoostingInfluence(model, progress=False, base_score=base_score,
                           influence_unit="row" if eps is None else "weight").fit(X, y, sample_weight)
    yt = ex.adapter_.encode_labels(y_test)
    w0 = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)

    t0 = time.perf_counter()
    retraining = Retraining(recipe, model, X, y, X_test, yt, ex.engine_.ensemble.loss, sample_weight)
    if eps is None:
        done = _run_all(executor, _loo_row, retraining, [int(r) for r in rows], progress,
                        "leave-one-out retraining")
    else:
        done = _run_all(executor, _fd_row, retraining, [(int(r), float(w0[r]), eps) for r in rows],
                        progress, "finite-difference retraining")
    actual = np.array([d[0] for d in done]).reshape(rows.size, n_rows(X_test))
    reports = [d[1] for d in done]
    seconds = {"retrain": time.perf_counter() - t0}
    structure = pd.DataFrame(reports, index=pd.Index(rows, name="row"))
    kept = structure["same"].to_numpy(dtype=bool)

    scores: dict[str, NDArray[np.float64]] = {}
    lines = []
    for method, update_set, k in methods:
        ex.set_params(method=method, update_set=update_set, k=k)
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
    return LOOStudy(summary, rows, actual, kept, structure, scores, ndcg_k, seconds,
                    "leave-one-out" if eps is None else "finite-difference", eps)


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
    executor: Any = None,
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
    executor : optional
        Where the retrains run, in parallel (as :func:`loo_study`'s).

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
    n = n_rows(X)
    sizes = [int(m) for m in sizes]
    if not sizes or min(sizes) < 1 or max(sizes) > n:
        raise InputError(f"sizes must lie in 1..{n}.")
    if model is None:
        model = recipe.fit(X, y, sample_weight)
    ex = BoostingInfluence(model, progress=False).fit(X, y, sample_weight)
    retraining = Retraining(recipe, model, X, y, X_test, ex.adapter_.encode_labels(y_test),
                            ex.engine_.ensemble.loss, sample_weight, check_structure=False)
    target_cols = np.arange(n_rows(X_test)) if test_point is None else np.array([int(test_point)])
    before_t, before_all = retraining.base_losses[target_cols].mean(), retraining.base_losses.mean()
    plans: list[tuple[str, int, int, NDArray[np.int64], float]] = []
    for method, update_set, k in methods:
        ex.set_params(method=method, update_set=update_set, k=k)
        Xt = take_rows(X_test, target_cols)
        s = np.asarray(ex.score_training_points(Xt, np.asarray(y_test)[target_cols], aggregate="mean"))
        order = np.argsort(-s, kind="stable")
        for m in sizes:
            plans.append((method_label(method, update_set, k), m, 0, order[:m], float(s[order[:m]].sum())))
    for m in sizes:
        for rep in range(n_random):
            plans.append(("random", m, rep, rng.choice(n, size=m, replace=False), float("nan")))

    out = []
    losses = _run_all(executor, _removal, retraining, [p[3] for p in plans], progress, "removal curve")
    for (strategy, m, rep, _, predicted), after in zip(plans, losses, strict=True):
        after_t, after_all = after[target_cols].mean(), after.mean()
        out.append({
            "strategy": strategy, "m": m, "repeat": rep,
            "target_reduction": before_t - after_t,
            "relative_target_reduction": (before_t - after_t) / before_t if before_t else np.nan,
            "test_reduction": before_all - after_all,
            "predicted": predicted,
        })
    return pd.DataFrame(out)
