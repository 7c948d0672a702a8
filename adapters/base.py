"""The contract every booster adapter fulfils.

An adapter wraps one trained model of one library. It refuses, at construction, settings whose
leaf values can never be reproduced (:class:`~influence_gbdt.errors.UnsupportedModelError`), turns
the model plus its training data into a :class:`~influence_gbdt.ensemble.TreeEnsemble`, and maps any
data set to the leaves of every tree. It never reaches into the engine beyond the public
:class:`~influence_gbdt.engine.InfluenceEngine`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from influence_gbdt import _jit as numba
from influence_gbdt.engine import DEFAULT_CACHE_BYTES, InfluenceEngine
from influence_gbdt.ensemble import TreeEnsemble, check_weight_sum
from influence_gbdt.errors import InfluenceError, InputError, booster_message
from influence_gbdt.labels import LabelMap
from influence_gbdt.tabular import n_rows, take_rows

#: Most rows x trees a booster predicts on one thread (see :func:`one_thread`): about 5 ms on one
#: thread (LightGBM and XGBoost, Adult's defaults: 19-21 ns per row and tree).
ONE_THREAD_ROW_TREES = 250_000


def one_thread(rows: int, trees: int) -> bool:
    """Whether a booster should predict ``rows`` rows of ``trees`` trees on one thread: after a
    parallel predict, LightGBM's and XGBoost's OpenMP threads spin for some milliseconds, competing
    with the engine's threads that run next (measured on 2 cores, Adult's defaults: one test point's
    sweep 10.4 -> 17.5 ms (LightGBM) and 7.5 -> 13.8 ms (XGBoost) right after the booster predicted
    its leaves on its threads; no change after predicting them on one). Small predictions lose less
    on one thread than that."""
    return rows * trees <= ONE_THREAD_ROW_TREES


#: The adapters' kept threads: (how many, the pool), or empty before the first many-row pass.
_POOL: list[tuple[int, ThreadPoolExecutor]] = []


def thread_pool() -> ThreadPoolExecutor:
    """Threads kept for the adapters' passes over many rows (XGBoost's walk and rounding bound,
    :func:`tree_major`; idle ones wait, using no processor): starting two threads took 1.6 ms of a
    17 ms walk. One per core (or per numba thread, if more)."""
    want = max(numba.get_num_threads(), os.cpu_count() or 1)
    if not _POOL or _POOL[0][0] < want:
        pool = ThreadPoolExecutor(max_workers=want, thread_name_prefix="influence-gbdt-adapters")
        _POOL[:] = [(want, pool)]
    return _POOL[0][1]


os.register_at_fork(after_in_child=_POOL.clear)  # a forked child has none of the pool's threads

#: Entries (rows x trees) :func:`tree_major` copies a block at a time: 64 Ki, 256 KB of int32, so
#: that a block's rows stay in the L2 cache while they are written out tree by tree.
TREE_MAJOR_BLOCK = 1 << 16
#: Fewest entries one thread of :func:`tree_major` copies (smaller matrices take fewer threads).
TREE_MAJOR_PER_THREAD = 1 << 20


def tree_major(leaves: ArrayLike, n_trees: int, n_threads: int | None = None) -> NDArray[np.int32]:
    """A booster's leaf numbers, row by row (shape (n_rows, n_trees), or flat in that order), as
    the engine reads them: shape (n_trees, n_rows), C-ordered int32 (values cast as
    ``np.asarray(leaves, dtype=np.int32)`` casts them).

    Copied a block of rows at a time (:data:`TREE_MAJOR_BLOCK` entries), the blocks in contiguous
    runs over up to ``n_threads`` threads (None: every core; :func:`thread_pool`). A plain
    ``np.ascontiguousarray(leaves.T)`` reads each tree's column across all rows, a cache line per
    entry: measured on 1e6 rows x 100 trees (2 cores), 0.73 s, against 0.17 s in blocks on one
    thread and 0.08 s on two.
    """
    src = np.asarray(leaves).reshape(-1, n_trees)
    n = src.shape[0]
    out = np.empty((n_trees, n), dtype=np.int32)
    step = max(1, TREE_MAJOR_BLOCK // max(1, n_trees))

    def copy(j0: int, j1: int) -> None:
        for j in range(j0, j1, step):
            out[:, j : min(j + step, j1)] = src[j : min(j + step, j1)].T

    k = max(1, min(n_threads or os.cpu_count() or 1, n * n_trees // TREE_MAJOR_PER_THREAD))
    run_split(copy, n, k, step)
    return out


def run_split(job: Callable[[int, int], None], n: int, k: int, align: int) -> None:
    """``job(r0, r1)`` over rows ``0 .. n - 1`` cut in ``k`` contiguous runs (their starts
    multiples of ``align``): the first run on the calling thread, the others on
    :func:`thread_pool`'s; returns when all are done (a run's exception is raised here)."""
    cuts = [n * i // k // align * align for i in range(k)] + [n]
    rest = [thread_pool().submit(job, cuts[i], cuts[i + 1]) for i in range(1, k)]
    job(cuts[0], cuts[1])
    for done in rest:
        done.result()


def check_numeric_params(library: str, params: Mapping[str, Any], keys: Iterable[str]) -> None:
    """Refuse a ``params`` value under one of ``keys`` that is not a finite number.

    Raises
    ------
    InputError
        Naming the parameter and its value.
    """
    for key in keys:
        if key not in params:
            continue
        try:
            ok = bool(np.isfinite(float(params[key])))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise InputError(f"{library} parameter {key!r} must be a finite number, got {params[key]!r}.")


def target_matrix(y: ArrayLike, n_targets: int) -> NDArray[np.float64]:
    """The targets of a multi-target regressor as an ndarray of shape (n, n_targets), float64.

    Raises
    ------
    InputError
        On another shape or non-numeric values.
    """
    arr = np.asarray(y)
    if arr.ndim != 2 or arr.shape[1] != n_targets:
        raise InputError(f"y must have shape (n, {n_targets}) for this {n_targets}-target model (one column "
                         f"per target), got {arr.shape}.")
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError):
        raise InputError(f"y must hold numeric targets, got values like {arr[:1].tolist()}.") from None


class BoosterAdapter(ABC):
    """Base class of the per-library adapters.

    Parameters
    ----------
    model : object
        A trained model of the adapter's library (Booster or scikit-learn wrapper).
    params : mapping, optional
        Training parameters the model file lost (XGBoost after ``load_model``); checked by the
        self-check like everything else.
    """

    #: Library name as users write it ("xgboost", "lightgbm", "catboost").
    library: ClassVar[str]
    #: Relative self-check tolerance (max |recomputed - stored| / max |stored|), justified per library.
    rtol: ClassVar[float]
    #: The engine's loss ("logloss", "squared_error"), read from the model by the adapter.
    loss: str

    #: Peak memory of :meth:`leaf_indices` per (tree, row), bytes, measured for each library by
    #: ``benchmarks/fit_memory.py`` and rounded up (:meth:`fit_bytes`).
    fit_bytes_per_tree_row: ClassVar[float]

    def __init__(self, model: Any, params: Mapping[str, Any] | None = None) -> None:
        self.model = model
        self.params = dict(params or {})
        #: Threads the adapter's own passes over many rows may use (None: every core, as the
        #: engine's default); :meth:`prepare` sets the engine's.
        self.n_threads: int | None = None

    @abstractmethod
    def describe(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
    ) -> TreeEnsemble:
        """Describe the model on its training data (no self-check; see :meth:`prepare`)."""

    def describe_without(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None,
        init_score: ArrayLike | None,
        deleted: NDArray[np.int64],
    ) -> TreeEnsemble:
        """Describe the model on its training data (``X``, ``y``, ... as given to :meth:`describe`)
        with the rows ``deleted`` (positions) taken out, each remaining row routed as in training:
        what ``score_group`` refits. By default :meth:`describe` of the remaining rows, where a
        row's leaves do not depend on the other rows (XGBoost, LightGBM)."""
        keep = np.ones(n_rows(X), dtype=bool)
        keep[deleted] = False
        return self.describe(
            take_rows(X, np.flatnonzero(keep)), np.asarray(y)[keep],
            None if sample_weight is None else np.asarray(sample_weight)[keep],
            None if init_score is None else np.asarray(init_score)[keep],
        )

    @abstractmethod
    def leaf_indices(self, X: Any) -> NDArray[np.int32]:
        """Leaf of every row of ``X`` in every tree, ndarray of shape (n_trees, n_rows), int32,
        numbered as in :meth:`describe` (``0 .. n_leaves[t] - 1``)."""

    def fit_bytes(self, n_trees: int, n_rows: int) -> float:
        """Peak bytes of reading the leaf indices of ``n_rows`` rows in the ``n_trees`` trees that
        :meth:`leaf_indices` numbers, estimated on the safe side before anything is allocated
        (:class:`~influence_gbdt.BoostingInfluence` refuses a fit needing more than its
        ``max_memory``)."""
        return self.fit_bytes_per_tree_row * n_trees * n_rows

    @abstractmethod
    def raw_predict(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """The library's own raw (margin) prediction, ndarray of shape (n_rows,)."""

    def init_offset(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """Per-row offset of the initial margin for ``X`` (the user's init score / base margin)."""
        n = n_rows(X)
        if init_score is None:
            return np.zeros(n)
        offset = np.asarray(init_score, dtype=np.float64)
        if offset.ndim == 2 and offset.shape[1] == 1:
            offset = offset[:, 0]
        if offset.shape != (n,):
            raise InputError(f"init_score must have shape ({n},) (one value per row) for this single-output "
                             f"model, got {offset.shape}.")
        return offset

    def label_map(self) -> LabelMap:
        """How the model reads labels: a scikit-learn classifier's ``classes_`` (class index 1 is
        the class of ``predict_proba[:, 1]``); a raw Booster records none, so a binary loss needs
        0/1 labels; a regressor takes numbers. CatBoost overrides this (class_names, target_border)."""
        name = type(self.model).__name__
        if self.loss != "logloss":
            return LabelMap(source=name)
        classes = getattr(self.model, "classes_", None)
        if classes is not None:
            return LabelMap(classes=tuple(classes), source=f"{name}.classes_")
        return LabelMap(binary=True, source=f"A raw {self.library} {name}")

    def encode_labels(self, y: ArrayLike) -> NDArray[np.float64]:
        """Labels as the loss sees them, ndarray of shape (n_rows,), float64: the class index for a
        classifier (see :meth:`label_map`), the number for a regressor.

        Raises
        ------
        InputError
            On missing labels, labels the model never saw, or non-numeric labels for a regressor.
        """
        return self.label_map().encode(y)

    def model_features(self) -> tuple[int, list[str] | None]:
        """(number of features, their names as the model stores them or None when the model was
        trained without names)."""
        raise NotImplementedError

    def stored_name(self, column: Any) -> str:
        """A DataFrame column's name as the booster stores it (LightGBM replaces spaces)."""
        return str(column)

    def check_features(self, X: Any) -> None:
        """Refuse ``X`` unless it has the model's features: as many columns, and for a DataFrame the
        model's feature names in training order (where the model records names). A numpy array or
        sparse matrix is read by position, as the boosters read it.

        Raises
        ------
        InputError
            With the columns to select.
        """
        n_model, names = self.model_features()
        n = int(X.shape[1])
        if n != n_model:
            raise InputError(
                f"X has {n} columns but the {self.library} model was trained on {n_model} features"
                + (f" {names[:20]}" if names else "")
                + ": pass exactly the model's features, in training order."
            )
        if names is None or not isinstance(X, pd.DataFrame):
            return
        given = [self.stored_name(c) for c in X.columns]
        if given != names:
            diff = [c for c in names if c not in given][:5]
            extra = [c for c, s in zip(X.columns, given, strict=True) if s not in names][:5]
            detail = (
                f"missing {diff}, unknown {extra}" if diff or extra else "same names, another order"
            )
            raise InputError(
                f"X's columns are not the features the {self.library} model was trained on, in order "
                f"({detail}). Select them in the model's order: X[{names[:20]}]"
                + (" (and so on)" if len(names) > 20 else "")
                + "."
            )

    #: Exceptions the booster raises on data it cannot read (besides ValueError and TypeError).
    data_errors: ClassVar[tuple[type[Exception], ...]] = ()

    @contextmanager
    def reading(self, what: str = "X") -> Iterator[None]:
        """Turn the booster's error on unreadable data into one-line :class:`InputError`."""
        errors: tuple[type[Exception], ...] = (ValueError, TypeError, *self.data_errors)
        try:
            yield
        except InfluenceError:
            raise
        except errors as exc:
            raise InputError(
                f"{self.library} cannot read {what}: {booster_message(exc)}. Pass {what} as the model was "
                "trained on it (same columns, dtypes and categorical columns)."
            ) from exc

    @property
    def hint(self) -> str:
        """Likely causes of a failed self-check, for the error message."""
        return (
            "Pass exactly the training rows, in training order, with the labels and sample weights "
            "the model was trained with."
        )

    @property
    def base_hint(self) -> str:
        """Likely causes of a base margin the booster's rule does not give on the data, for the
        error message (:meth:`prepare`)."""
        return ("Pass the labels and sample weights the model was trained with (and its init score, "
                "if it had one).")

    def prepare(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
        cache_bytes: float = DEFAULT_CACHE_BYTES,
        n_threads: int | None = None,
    ) -> InfluenceEngine:
        """Describe the model on its training data and prove the description reproduces it
        (:meth:`verify`, which an adapter overrides to check in its library's terms).
        ``cache_bytes``, ``n_threads``: the engine's derivative-cache budget and threads
        (:class:`InfluenceEngine`).

        Raises
        ------
        ReproductionError
            If the recomputed leaf values do not reproduce the stored ones.
        """
        self.n_threads = n_threads
        ensemble = self.describe(X, y, sample_weight, init_score)
        check_weight_sum(float(ensemble.sample_weight.sum()))
        engine = self.verify(InfluenceEngine(ensemble, n_threads=n_threads, cache_bytes=cache_bytes))
        engine.check_base_estimate(f"{self.library}: {self.base_hint}")
        return engine

    def verify(self, engine: InfluenceEngine) -> InfluenceEngine:
        """Prove that ``engine`` (the description replayed) reproduces the model, and return the
        engine to score with. Default: every recomputed leaf value within ``rtol`` (relative to the
        largest stored one).

        Raises
        ------
        ReproductionError
            If a recomputed leaf value differs from the stored one by more than ``rtol``.
        """
        engine.check_reproduction(rtol=self.rtol, hint=f"{self.library}: {self.hint}")
        return engine
