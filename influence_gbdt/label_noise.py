"""Finding mislabeled training rows: self-influence and the label-issue workflow.

:func:`self_influence` scores how strongly each training row pulls the model toward its own label:
the change of the row's *own* loss when it is down-weighted (``leaf_influence``) or deleted
(``leaf_refit``), with each tree's structure fixed. A mislabeled row has to be fitted against its
neighbours, so it pulls harder than a clean one.

:func:`label_issue_table` (``BoostingInfluence.find_label_issues``) ranks the training rows by a
suspicion score (the workflow that ``benchmarks/label_noise.py`` found best, see the docs page
"Label noise") and reports, next to it, each row's exact influence on the test loss when test data
is given: whether *removing* the suspect would help the predictions you care about.

Sign conventions: suspicion and self-influence > 0 = more suspicious; ``test_influence`` > 0 =
harmful to the test loss (as everywhere in influence-gbdt).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from .engine import InfluenceEngine
from .errors import InputError
from .inputs import check_choice, is_integer
from .results import keyed_table, label_columns

Signal = Literal["disagreement", "self_influence", "test_influence"]
_SIGNALS = ("disagreement", "self_influence", "test_influence")


def self_influence(
    engine: InfluenceEngine,
    rows: ArrayLike | None = None,
    method: Literal["leaf_influence", "leaf_refit"] = "leaf_influence",
    update_set: Literal["single_point", "top_k_leaves", "all_points"] = "single_point",
    k: int | None = None,
    refit_base: bool = True,
    chunk_size: int = 512,
) -> NDArray[np.float64]:
    """How much each training row lowers its *own* loss, with tree structures fixed.

    Parameters
    ----------
    engine : InfluenceEngine
        A fitted explainer's ``engine_`` (single-output models: binary or regression).
    rows : array-like of int or bool mask of shape (n_train,), optional
        Training rows to score; default all.
    method : {"leaf_influence", "leaf_refit"}
        ``leaf_influence``: ``-dL(y_i, F(x_i)) / dv_i`` per unit of the row's weight ``v_i``;
        ``leaf_refit``: ``L(y_i, F_without_i(x_i)) - L(y_i, F(x_i))``.
    update_set : {"single_point", "top_k_leaves", "all_points"}
        As in :class:`BoostingInfluence`. ``single_point`` (default) costs O(trees) per row, so all
        rows of a large data set are scored in seconds; ``all_points`` is exact but costs
        O(trees x n_train) per row.
    k : int, optional
        Leaves per tree for ``top_k_leaves``.
    refit_base : bool
        Let the initial margin move as the booster would re-estimate it.
    chunk_size : int
        Rows per batch (memory: ``chunk_size x total leaves`` floats).

    Returns
    -------
    ndarray of shape (n_scored,), float64: > 0 = the row pulls the model toward its own label
    (the larger, the more suspicious).

    Raises
    ------
    InputError
        A model with several outputs (multiclass, multi-target): not supported here yet.
    """
    e = engine.ensemble
    if e.n_outputs != 1:
        raise InputError(
            f"Self-influence is implemented for single-output models (binary, regression); this model "
            f"has {e.n_outputs} outputs."
        )
    check_choice("method", method, ("leaf_influence", "leaf_refit"))
    idx = engine.resolve_rows(rows)
    leaves = e.leaf_index.astype(np.int64) + e.leaf_offset[:-1, None]  # (T, n) global leaf numbers
    margin = np.asarray(engine.train_margin, dtype=np.float64).reshape(-1)
    out = np.empty(idx.size)
    for start in range(0, idx.size, max(1, int(chunk_size))):  # batches of rows, vectorized within
        chunk = idx[start:start + max(1, int(chunk_size))]
        cols = np.arange(chunk.size)[None, :]
        if method == "leaf_influence":
            d_values, d_base = engine.leaf_value_derivatives(chunk, update_set, k, refit_base)
            d_margin = d_values[cols, leaves[:, chunk]].sum(axis=0) + np.reshape(d_base, -1)
            grad = e.loss.gradients(e.y[chunk], margin[chunk, None])[:, 0]
            out[start:start + chunk.size] = -grad * d_margin
        else:
            values, base = engine.refit_leaf_values(chunk, update_set, k, refit_base)
            delta = values - engine.leaf_values[None, :]
            new_margin = margin[chunk] + delta[cols, leaves[:, chunk]].sum(axis=0) + (
                np.reshape(base, -1) - e.base_margin[0])
            y = e.y[chunk]
            out[start:start + chunk.size] = e.loss.values(y, new_margin[:, None]) - e.loss.values(
                y, margin[chunk, None])
    return out


def disagreement(engine: InfluenceEngine) -> NDArray[np.float64]:
    """The model's own loss on each training row, ``L(y_i, F(x_i))``, shape (n_train,).

    For log loss (and the multiclass losses) this ranks rows exactly as ``1 - P(label)`` does (the
    model disagrees with the label): the strongest simple detector of flipped labels (see the
    "Label noise" docs page).
    """
    e = engine.ensemble
    margin = np.asarray(engine.train_margin, dtype=np.float64).reshape(e.n_rows, -1)
    return np.asarray(e.loss.values(e.y, margin), dtype=np.float64)


def class_probabilities(engine: InfluenceEngine) -> NDArray[np.float64] | None:
    """The model's class probabilities of each training row, shape (n_train, n_classes); None for a
    model that does not predict classes (regression, or log loss on labels other than 0/1)."""
    e = engine.ensemble
    margin = np.asarray(engine.train_margin, dtype=np.float64).reshape(e.n_rows, -1)
    return e.loss.class_probabilities(margin, e.y)


def estimated_issue_count(engine: InfluenceEngine, loss_per_row: NDArray[np.float64]) -> int:
    """How many training labels look wrong, estimated from the data.

    Classifiers: confident learning's count (Northcutt et al., 2021, without cross-validation: the
    booster's own probabilities). Class ``j``'s threshold is the mean probability of ``j`` over the
    rows labelled ``j``; a row's confident class is its most probable class among those at or above
    their threshold; the count is the rows whose confident class exists and differs from their
    label. Regression: the rows whose own loss is an outlier, above the third quartile plus three
    interquartile ranges of ``loss_per_row`` (Tukey's far-out rule).

    The probabilities are in-sample: a model that fits its training labels closely (many deep trees)
    also fits some wrong ones, so the count tends to be low for such models (measured: 6-34
    rows flagged for 36 flipped of 400 on small binary models, 0-3 on 3-class ones). Pass
    ``n_issues`` where a count is known.
    """
    probs = class_probabilities(engine)
    if probs is None:
        q1, q3 = np.percentile(loss_per_row, [25, 75])
        return int(np.count_nonzero(loss_per_row > q3 + 3.0 * (q3 - q1)))
    label = np.asarray(engine.ensemble.y, dtype=np.float64).ravel().astype(np.int64)
    K = probs.shape[1]
    rows_of = np.bincount(label, minlength=K)
    sums = np.bincount(label, weights=probs[np.arange(label.size), label], minlength=K)
    threshold = np.full(K, np.inf)
    threshold[rows_of > 0] = sums[rows_of > 0] / rows_of[rows_of > 0]
    confident = np.where(probs >= threshold[None, :], probs, -np.inf)
    best = confident.argmax(axis=1)
    has_confident = np.isfinite(confident[np.arange(label.size), best])
    return int(np.count_nonzero(has_confident & (best != label)))


def check_label_issue_request(rank_by: str, n: int | None, has_test: bool, both_or_neither: bool,
                              n_issues: int | None = None) -> None:
    """Refuse a ``find_label_issues`` request that cannot be answered (see
    :meth:`BoostingInfluence.find_label_issues`)."""
    check_choice("rank_by", rank_by, _SIGNALS)
    if n is not None and (not is_integer(n) or n < 0):
        raise InputError(f"n must be an integer >= 0 (the rows to return), got {n!r}.")
    if n_issues is not None and (not is_integer(n_issues) or n_issues < 0):
        raise InputError(f"n_issues must be an integer >= 0 (the rows to flag) or None (estimated), "
                         f"got {n_issues!r}.")
    if not both_or_neither:
        raise InputError("Pass both X_test and y_test (trusted held-out rows), or neither.")
    if rank_by == "test_influence" and not has_test:
        raise InputError("rank_by='test_influence' needs X_test and y_test with trusted labels.")


def label_issue_table(
    engine: InfluenceEngine,
    labels: NDArray[Any],
    index: pd.Index | None,
    test_influence: NDArray[np.float64] | None = None,
    *,
    n: int | None = None,
    rank_by: Signal = "disagreement",
    self_influence_method: Literal["leaf_influence", "leaf_refit"] = "leaf_influence",
    refit_base: bool = True,
    n_issues: int | None = None,
) -> pd.DataFrame:
    """Training rows most likely mislabeled, most suspicious first (the table of
    :meth:`BoostingInfluence.find_label_issues`).

    Parameters
    ----------
    engine : InfluenceEngine
        A fitted explainer's engine.
    labels : ndarray of shape (n_train,) or (n_train, K)
        The training labels as given to ``fit`` (K targets: columns ``label_0 ..``).
    index : pandas Index, optional
        The training rows' index labels (None: positions).
    test_influence : ndarray of shape (n_train,), optional
        Each row's influence on the mean test loss (> 0 = removing the row lowers it).
    n, rank_by, self_influence_method, refit_base, n_issues :
        As :meth:`BoostingInfluence.find_label_issues` (``refit_base``: the explainer's
        ``base_score == "refit"``).

    Returns
    -------
    DataFrame, one line per training row, sorted by ``suspicion`` (descending), indexed by
    ``index``; columns ``row`` (position), ``suspicion``, ``label``, ``is_label_issue`` (the
    ``n_issues`` most suspicious rows, estimated by :func:`estimated_issue_count` when None),
    ``disagreement``, ``test_influence`` (with test data) and ``self_influence`` (when ranked by it).
    """
    check_label_issue_request(rank_by, n, test_influence is not None, True, n_issues)
    columns: dict[str, NDArray[Any]] = {"disagreement": disagreement(engine)}
    if test_influence is not None:
        columns["test_influence"] = np.asarray(test_influence, dtype=np.float64)
    if rank_by == "self_influence":
        columns["self_influence"] = self_influence(engine, method=self_influence_method,
                                                   refit_base=refit_base)
    suspicion = columns[rank_by]
    order = np.argsort(-suspicion, kind="stable")[: None if n is None else int(n)]
    flagged = estimated_issue_count(engine, columns["disagreement"]) if n_issues is None else int(n_issues)
    table = pd.DataFrame({"row": order, "suspicion": suspicion[order], **label_columns(labels[order]),
                          "is_label_issue": np.arange(order.size) < flagged})
    for name, values in columns.items():
        table[name] = values[order]
    return keyed_table(table, index, order)
