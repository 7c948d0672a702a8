"""The public estimator: wrap a trained booster and score its training points."""

from __future__ import annotations

import numbers
import os
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from tqdm.auto import tqdm

from . import distributed
from ._settings import settings_repr
from .engine import DEFAULT_CACHE_BYTES, InfluenceEngine, TestPoints
from .errors import InputError, LongRunWarning, NotFittedError, ReproductionError
from .explanation import PredictionExplanation
from .inputs import check_choice, check_rows, check_table, is_integer, is_sparse, n_columns
from .pipelines import REPRODUCTION_HINT, unwrap
from .results import Scores, keyed_table, label_columns, point_labels, row_labels, tidy_scores
from .tabular import n_rows, take_rows

_METHODS = ("leaf_influence", "leaf_refit")
_UPDATE_SETS = ("all_points", "single_point", "top_k_leaves")
_BASE_SCORES = ("refit", "fixed")
_AGGREGATES = (None, "mean", "sum")
_INFLUENCE_UNITS = ("row", "weight")
_PARAMS = ("model", "method", "update_set", "k", "base_score", "progress", "params", "max_memory",
           "influence_unit", "n_threads")
_SCORE_KWARGS = ("aggregate", "training_points", "on", "output", "init_score")
#: A run projected to need more than this many seconds warns once (LongRunWarning) with advice.
LONG_RUN_SECONDS = 3600.0


class BoostingInfluence:
    """Influence of training points on the predictions of a trained gradient-boosted model.

    Wraps an XGBoost, LightGBM or CatBoost model that is already trained (Booster or scikit-learn
    wrapper), in the way ``SelectFromModel(prefit=True)`` wraps an estimator. :meth:`fit` reads the
    model's trees, checks that it reproduces every stored leaf value from the training data, and
    :meth:`score_training_points` scores each training row against test points.

    Sign convention: **a score > 0 means the training row is harmful** to that test point:
    removing it (``leaf_refit``) or lowering its weight (``leaf_influence``) lowers the test loss.
    Both methods are, by default, in the same units: the change of the test loss when the row is
    removed (``leaf_influence`` to first order; see ``influence_unit``).

    Parameters
    ----------
    model : XGBoost, LightGBM or CatBoost model, or a Pipeline or TransformedTargetRegressor around one
        Trained; stored as given. Only the library the model comes from is imported. A
        ``Pipeline`` takes rows as the pipeline does: its steps before the booster transform them,
        and the booster is scored on what they make; a ``TransformedTargetRegressor`` takes labels
        as it does, and its booster is scored on its loss in the transformed target; a fitted
        hyper-parameter search (``GridSearchCV``, ...) is its ``best_estimator_``, a
        ``FrozenEstimator`` the estimator it holds (:mod:`influence_gbdt.pipelines`).
    method : {"leaf_influence", "leaf_refit"}
        ``leaf_influence``: the derivative of the test loss in the row's training weight, with fixed
        tree structures (by default times the row's weight: see ``influence_unit``).
        ``leaf_refit``: test loss minus the test loss after recomputing every leaf without the row.
    update_set : {"all_points", "single_point", "top_k_leaves"}
        Which training rows' prediction changes are propagated to later trees (the paper's Fast
        variants). ``all_points`` is exact; with ``leaf_influence`` it runs in reverse mode, at the
        cost of one pass over the trees per test point for *all* training rows at once (or in exact
        forward mode, one pass per row, when fewer ``training_points`` than test points are scored).
    k : int, optional
        Leaves updated per tree with ``update_set="top_k_leaves"`` (required then).
    base_score : {"refit", "fixed"}
        ``"refit"``: the initial margin moves as the booster would re-estimate it on the changed data
        (boost_from_average); ``"fixed"``: it stays. XGBoost's refresh and LightGBM's refit hold it
        too, but agree with ``"fixed"`` only under conditions (see the user guide).
    progress : bool
        Show a progress bar for long computations.
    params : mapping, optional
        Training parameters the model lost (an XGBoost model reloaded from a file forgets eta,
        lambda, ...): e.g. ``{"eta": 0.1, "lambda": 1.0}``.
    max_memory : float
        Memory budget in bytes. :meth:`fit` refuses data and a model whose leaf indices would need
        more (estimated before anything is allocated). Scoring: a score matrix larger than it is
        refused with advice (aggregate, or score fewer ``training_points``); the working arrays are
        processed in batches small enough to fit. ``float('inf')`` for no limit. What :meth:`fit`
        leaves of it, up to 1 GB, may hold the derivative cache that speeds up reverse mode (see
        :class:`~influence_gbdt.engine.InfluenceEngine`).
    influence_unit : {"row", "weight"}
        What a ``leaf_influence`` score measures. ``"row"`` (default): the first-order estimate of
        removing the row, ``w_i * dL/dw_i`` with ``w_i`` its sample weight; in the units of
        ``leaf_refit``, and unchanged when every sample weight is rescaled (a model trained with
        weights ``w`` and ``2 w`` is the same model). ``"weight"``: the derivative ``dL/dw_i`` per
        unit of sample weight (the paper's LeafInfluence), which halves when the weights double.
        Without sample weights (every ``w_i = 1``) both are the same.
    n_threads : int, optional
        Threads for :meth:`fit` and scoring; default: every core (numba's thread count, which
        ``NUMBA_NUM_THREADS`` sets), as the boosters use them. :meth:`fit`'s replay of the trees
        splits each pass over the training rows over them, and test points or an aggregate are
        swept in batches, each sweep's rows split over them (every model but those with renewed
        quantile/L1 leaves, replayed on one thread and whose batches take a thread each);
        LeafRefit and forward mode split the training rows they score, and fewer rows than
        threads each split their passes over the training rows over a share of them (one-output
        models without renewed leaves, not ``single_point``). Results are the same, bit for bit,
        for any count.

    Attributes
    ----------
    adapter_ : BoosterAdapter
        The library adapter.
    engine_ : InfluenceEngine
        The replayed ensemble.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` in :meth:`fit` was a DataFrame.
    n_train_ : int
        Number of training rows.
    reproduction_residual_ : float
        ``max |recomputed - stored| leaf value / max |stored| leaf value`` found by the self-check.

    Examples
    --------
    >>> ex = BoostingInfluence(model).fit(X_train, y_train)           # doctest: +SKIP
    >>> S = ex.score_training_points(X_test, y_test)                  # (n_train, n_test)
    >>> s = ex.score_training_points(X_test, y_test, aggregate="mean")  # (n_train,)
    """

    def __init__(
        self,
        model: Any,
        method: Literal["leaf_influence", "leaf_refit"] = "leaf_influence",
        update_set: Literal["all_points", "single_point", "top_k_leaves"] = "all_points",
        k: int | None = None,
        base_score: Literal["refit", "fixed"] = "refit",
        progress: bool = True,
        params: Mapping[str, Any] | None = None,
        max_memory: float = 4e9,
        influence_unit: Literal["row", "weight"] = "row",
        n_threads: int | None = None,
    ) -> None:
        self.model = model
        self.method = method
        self.update_set = update_set
        self.k = k
        self.base_score = base_score
        self.progress = progress
        self.params = params
        self.max_memory = max_memory
        self.influence_unit = influence_unit
        self.n_threads = n_threads

    # ------------------------------------------------------------------------------------------
    # scikit-learn protocol

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor settings, as in scikit-learn.

        ``deep`` is accepted and ignored: the wrapped model is trained already, so its own
        parameters are not settable through the explainer.
        """
        return {name: getattr(self, name) for name in _PARAMS}

    def set_params(self, **params: Any) -> BoostingInfluence:
        """Change constructor settings, as in scikit-learn; returns self.

        ``method``, ``update_set``, ``k``, ``base_score``, ``progress``, ``max_memory``,
        ``influence_unit`` and ``n_threads`` act at scoring time (``n_threads`` at fit too), so a
        fitted explainer keeps its fit. Changing ``model`` or ``params`` discards the fit: call
        :meth:`fit` again before scoring.
        """
        unknown = set(params) - set(_PARAMS)
        if unknown:
            raise InputError(f"Unknown parameters {sorted(unknown)}; valid ones are {list(_PARAMS)}.")
        before = self.get_params()
        for name, value in params.items():
            setattr(self, name, value)
        try:
            self._check_settings()
        except InputError:
            for name, value in before.items():  # a refused change leaves the explainer as it was
                setattr(self, name, value)
            raise
        if hasattr(self, "engine_") and not self._fit_matches_settings():
            self._forget_fit()
        return self

    def __repr__(self) -> str:
        return settings_repr(self, _PARAMS)

    def __sklearn_clone__(self) -> BoostingInfluence:
        """``sklearn.base.clone``: a new unfitted explainer with the same settings that wraps *the
        same* trained model (cloning it would give an untrained booster; compare
        ``sklearn.frozen.FrozenEstimator``)."""
        params = self.get_params()
        if isinstance(self.params, Mapping):
            params["params"] = dict(self.params)
        return type(self)(**params)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "engine_") and self._fit_matches_settings()

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=True),
            input_tags=InputTags(sparse=True, categorical=True, string=True, allow_nan=True),
            requires_fit=True,
        )

    # ------------------------------------------------------------------------------------------

    def fit(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
    ) -> BoostingInfluence:
        """Read the model on its training data and prove it is reproduced.

        Parameters
        ----------
        X : array-like, DataFrame (pandas or polars) or SciPy sparse matrix of shape (n_train, n_features)
            Exactly the training rows, in training order, as the model accepted them (as the
            pipeline did, for a ``Pipeline``). A DataFrame must have the model's feature names in
            training order (where the model records names). A polars DataFrame is read as its
            ``to_pandas()`` (as the boosters read it); the results' row index is then 0 .. n - 1.
        y : array-like of shape (n_train,)
            The training labels, as the model was trained on them (strings, bools, {-1, 1}, ...
            for a scikit-learn or CatBoost classifier; 0/1 for a raw Booster). A pandas ``y`` must
            have ``X``'s index: rows are matched by position.
        sample_weight : array-like of shape (n_train,), optional
            The sample weights used in training (required if training used them).
        init_score : array-like of shape (n_train,), optional
            Per-row initial margin used in training (XGBoost base_margin, LightGBM init_score,
            CatBoost baseline).

        Returns
        -------
        self

        Raises
        ------
        UnsupportedModelError
            The model uses a setting whose leaf values cannot be reproduced.
        ReproductionError
            The data does not reproduce the model (other rows, order, labels, weights, params).
        InputError
            Wrong shapes or columns, misaligned indexes, NaN labels, labels the model never saw.

        Notes
        -----
        A failed ``fit`` leaves the explainer unfitted: a previous fit is discarded first.
        """
        self._forget_fit()
        self._check_settings()
        inside = unwrap(self.model)
        wrapped = inside.rows is not None or inside.labels is not None  # a pipeline's or target's maps
        if distributed.is_dask_collection(X):  # training set on a Dask cluster
            if wrapped:
                raise InputError(
                    "A Pipeline's or TransformedTargetRegressor's training rows on a Dask cluster are not "
                    "supported: transform them (pipeline[:-1], or the target) and wrap the booster alone."
                )
            self._inside = inside
            return distributed.fit_explainer(self, X, y, sample_weight, init_score)
        from influence_gbdt.adapters import adapter_for

        raw, X = X, check_table(X, "X")
        n = n_rows(X)
        index = X.index if isinstance(X, pd.DataFrame) else None
        labels = check_rows(y, n, "y", index, numeric=False, columns=True)
        weights = None if sample_weight is None else check_rows(sample_weight, n, "sample_weight", index)
        offsets = None if init_score is None else check_rows(init_score, n, "init_score", index, columns=True)
        adapter = adapter_for(inside.booster, self.params)
        X_model = self._model_inputs(inside.rows, raw, X, "X")
        adapter.check_features(X_model)
        fit_bytes = self._check_fit_memory(adapter, X_model, n)
        # The derivative cache (speeds up reverse mode) takes what max_memory leaves after fit.
        y_model = _apply(inside.labels, labels)
        try:
            engine = adapter.prepare(X_model, y_model, weights, offsets,
                                     cache_bytes=min(DEFAULT_CACHE_BYTES, self.max_memory - fit_bytes),
                                     n_threads=self.n_threads)
        except ReproductionError as e:
            if not wrapped:
                raise
            raise ReproductionError(f"{e}{REPRODUCTION_HINT}") from e
        self.adapter_ = adapter
        self.engine_: InfluenceEngine = engine
        self.n_features_in_ = n_columns(X)
        if isinstance(X, pd.DataFrame):
            self.feature_names_in_ = np.asarray(X.columns, dtype=object)
        self.n_train_ = n
        self.reproduction_residual_ = engine.relative_residual
        self._X_train = X
        self._y_train = labels
        self._fit_data = (X_model, y_model, weights, offsets)  # as the adapter read them (score_group)
        self._inside = inside
        self._fit_model = self.model
        self._fit_params = dict(self.params or {})
        return self

    def score_training_points(
        self,
        X: Any,
        y: ArrayLike | None = None,
        *,
        aggregate: Literal["mean", "sum"] | None = None,
        training_points: ArrayLike | None = None,
        on: Literal["loss", "prediction"] = "loss",
        output: Any = None,
        init_score: ArrayLike | None = None,
    ) -> Scores:
        """Score training rows by their influence on the test points ``X``.

        Parameters
        ----------
        X : array-like, DataFrame (pandas or polars) or SciPy sparse matrix of shape (n_test, n_features)
            Test rows with the columns seen in :meth:`fit`. One row: ``X.iloc[[j]]`` or ``X[[j]]``
            (polars: ``X[j : j + 1]``).
        y : array-like of shape (n_test,), optional
            Test labels, as the model was trained on them; required with ``on="loss"``.
        aggregate : {None, "mean", "sum"}
            Score the mean or sum of the test losses instead of each test point.
        training_points : array-like of int or bool mask of shape (n_train,), optional
            Score only these training rows (in this order); default all.
        on : {"loss", "prediction"}
            ``"loss"``: effect on the test loss, > 0 = harmful. ``"prediction"``: effect on the raw
            margin (``leaf_refit``: F(x) - F_without_row(x); ``leaf_influence``: dF(x)/dw), > 0 = the
            row raises the margin; needs no labels. With ``"loss"`` a multiclass model's test loss
            is the log loss of the true class (softmax) or the sum of its per-class losses (one vs
            all), a multi-target regressor's the sum over targets.
        output : class label or int, optional
            With ``on="prediction"`` on a model with several outputs (required there): whose raw
            margin is scored, a class label as the model was trained on (``"cat"``) for a classifier
            that records its classes, else the output's index (a raw multiclass Booster, a
            multi-target regressor). A binary model has one margin, that of its positive class.
        init_score : array-like of shape (n_test,), optional
            Per-row initial margin of the test points, if the model was trained with one.

        Returns
        -------
        ndarray of shape (n_scored, n_test), or (n_scored,) when aggregated, float64.
            When ``fit`` was given a DataFrame: a DataFrame indexed by the training rows' own index
            labels, with the test points' index (or 0 .. n_test-1) as columns; a Series named
            ``score`` when aggregated (see :mod:`influence_gbdt.results`). When ``fit`` was given
            Dask collections: a Dask array chunked like the training set, or, with
            ``training_points``, an ndarray (see :mod:`influence_gbdt.distributed`).

        Raises
        ------
        InputError
            Bad settings or inputs, or a request larger than ``max_memory`` (with what to do).
        NotFittedError
            Before :meth:`fit`, or after ``model`` or ``params`` changed.

        Warns
        -----
        LongRunWarning
            When the run, timed on its first batches, is projected to take more than an hour.
        """
        engine = self._fitted_engine()
        self._check_settings()
        check_choice("on", on, ("loss", "prediction"))
        check_choice("aggregate", aggregate, _AGGREGATES)
        column = self._output_index(on, output)
        if isinstance(engine, distributed.DistributedEngine):  # fitted on Dask: a Dask array
            scores = distributed.score_explainer(self, X, y, aggregate, training_points, on, column,
                                                 init_score)
            return self._in_unit(scores, engine, training_points)
        test = self._test_points(X, y, on, init_score)
        rows = engine.resolve_rows(training_points)
        m = np.asarray(test.leaf_index).shape[1]
        if rows.size == 0:
            return tidy_scores(np.empty((0,) if aggregate else (0, m)), self._train_index(), rows, X)
        use_reverse = self.method == "leaf_influence" and engine.uses_reverse(
            self.update_set, rows.size, m, aggregate)
        chunk = self._chunk_size(engine, rows.size, m, aggregate, use_reverse)
        total, unit = (m, "test pt") if use_reverse else (rows.size, "row")
        k = None if self.k is None else min(int(self.k), int(engine.ensemble.n_leaves.max()))
        with tqdm(total=total, disable=not self.progress, desc=f"{self.method} ({self.update_set})",
                  unit=unit, leave=False) as bar:
            scorer = engine.leaf_influence if self.method == "leaf_influence" else engine.leaf_refit
            scores = scorer(
                test, rows=rows, update_set=self.update_set, k=k,
                refit_base=self.base_score == "refit", on=on, aggregate=aggregate, output=column,
                chunk_size=chunk, progress=_Progress(bar, total, unit, self._speedup_advice()),
            )
        return tidy_scores(self._in_unit(scores, engine, rows), self._train_index(), rows, X)

    def score_group(
        self,
        X: Any,
        y: ArrayLike | None = None,
        *,
        training_points: ArrayLike,
        aggregate: Literal["mean", "sum"] | None = None,
        on: Literal["loss", "prediction"] = "loss",
        output: Any = None,
        init_score: ArrayLike | None = None,
    ) -> Any:
        """Score the training rows ``training_points`` *together*: the effect on the test points of
        deleting all of them at once, every tree's structure kept (LeafRefit of the group).

        Every tree's leaf values are recomputed on the rows that remain, tree by tree at their new
        margins, as the boosters' own fixed-structure refits do (XGBoost's ``refresh`` updater,
        LightGBM's ``Booster.refit(decay_rate=0)``), with the class weights the booster derives
        from the data and, with ``base_score="refit"``, the base margin re-estimated on them. So it
        answers "what if I drop these rows" where summing the rows' own scores is only a first-order
        estimate. Whatever ``method`` and ``update_set`` are, every row's prediction change is
        propagated (``update_set="all_points"``). One call costs about one :meth:`fit`.

        Parameters
        ----------
        X, y, on, output, init_score
            As in :meth:`score_training_points`.
        training_points : array-like of int or bool mask of shape (n_train,)
            The rows deleted together (positions in the training set; repeats count once).
        aggregate : {None, "mean", "sum"}
            Score the mean or sum of the test losses instead of each test point.

        Returns
        -------
        ndarray of shape (n_test,), or a float when aggregated.
            ``L(F(x)) - L(F_without_group(x))`` (``on="loss"``: > 0 = the group is harmful) or
            ``F(x) - F_without_group(x)`` (``on="prediction"``: > 0 = the group raises the margin).
            When ``fit`` was given a DataFrame: a Series named ``score``, indexed by the test
            points' index (0 .. n_test-1 when ``X`` is not pandas), as the columns of
            :meth:`score_training_points`' table.

        Raises
        ------
        InputError
            Bad settings or inputs, a group holding every training row, or an explainer fitted on
            Dask collections.
        """
        engine = self._fitted_engine()
        self._check_settings()
        check_choice("on", on, ("loss", "prediction"))
        check_choice("aggregate", aggregate, _AGGREGATES)
        column = self._output_index(on, output)
        if isinstance(engine, distributed.DistributedEngine):
            raise InputError("score_group needs the training rows in this process: fit on a pandas or NumPy "
                             "training set (a Dask explainer scores rows one at a time).")
        test = self._test_points(X, y, on, init_score)
        keep = np.ones(self.n_train_, dtype=bool)
        keep[engine.resolve_rows(training_points)] = False
        if not keep.any():
            raise InputError("training_points holds every training row: at least one must remain.")
        X_model, y_model, weights, offsets = self._fit_data
        if keep.all():  # deleting nothing retrains the same model
            scores = np.zeros(1 if aggregate else np.shape(test.leaf_index)[1])
        else:
            deleted = np.flatnonzero(~keep)
            without = self.adapter_.describe_without(X_model, y_model, weights, offsets, deleted)
            scores = engine.group_refit(test, without, refit_base=self.base_score == "refit", on=on,
                                        aggregate=aggregate, output=column)
        if aggregate is not None:
            return float(scores[0])
        if self._train_index() is None:
            return scores
        return pd.Series(scores, index=point_labels(X, scores.size), name="score")

    def top_training_points(
        self,
        X: Any,
        y: ArrayLike | None = None,
        n: int = 10,
        kind: Literal["harmful", "helpful"] = "harmful",
        **score_kwargs: Any,
    ) -> pd.DataFrame:
        """The ``n`` most harmful (largest score) or helpful (smallest) training rows for the mean
        test loss of ``X`` (a single test point works too: ``X.iloc[[j]]``).

        Parameters
        ----------
        n : int
            Rows to return (all scored rows if fewer).
        kind : {"harmful", "helpful"}
        **score_kwargs
            ``aggregate`` ("mean" by default, or "sum"), ``training_points``, ``on``, ``output``,
            ``init_score`` as in :meth:`score_training_points`.

        Returns
        -------
        DataFrame with columns ``row`` (training row position), ``score``, ``label`` (as passed to
        :meth:`fit`) and the row's features, sorted from the most influential down. A feature whose
        name is one of ``row``, ``score``, ``label`` is shown as ``feature:<name>``. Its index is the
        rows' own index labels when ``fit`` was given a DataFrame (else 0 .. n-1).
        """
        if not is_integer(n) or n < 0:
            raise InputError(f"n must be an integer >= 0 (the rows to return), got {n!r}.")
        check_choice("kind", kind, ("harmful", "helpful"))
        unknown = sorted(set(score_kwargs) - set(_SCORE_KWARGS))
        if unknown:
            raise InputError(f"Unknown arguments {unknown}; top_training_points takes {list(_SCORE_KWARGS)}.")
        score_kwargs.setdefault("aggregate", "mean")
        if score_kwargs["aggregate"] is None:
            raise InputError("top_training_points needs one score per row: aggregate 'mean' or 'sum'.")
        scores = np.asarray(self.score_training_points(X, y, **score_kwargs))
        rows = self.engine_.resolve_rows(score_kwargs.get("training_points"))
        return self._top_table(scores, rows, n, kind)

    def _top_table(
        self, scores: NDArray[np.float64], rows: NDArray[np.int64], n: int, kind: str
    ) -> pd.DataFrame:
        """The ``n`` rows of ``rows`` (r,) with the largest (``harmful``) or smallest scores (r,)."""
        order = np.argsort(-scores if kind == "harmful" else scores, kind="stable")[: int(n)]
        picked = rows[order]
        head = pd.DataFrame({"row": picked, "score": scores[order], **label_columns(self._y_train[picked])})
        features = self._training_features(picked)
        features.columns = _free_names(list(features.columns), tuple(head.columns))
        return keyed_table(pd.concat([head, features], axis=1), self._train_index(), picked)

    def explain_prediction(
        self, x: Any, y: Any = None, *, n: int = 5, output: Any = None
    ) -> PredictionExplanation:
        """One test prediction explained: the model's prediction (and loss), and the training rows
        most harmful and most helpful to it.

        Parameters
        ----------
        x : DataFrame with one row, or array-like of shape (1, n_features)
        y : label or array-like of shape (1,), optional
            The row's label: the scores are then on its loss; without it, on the raw prediction
            (``output`` selects the class of a multiclass model).
        n : int
            Rows shown per side.
        output : class label or output index, optional
            As in :meth:`score_training_points` (``on="prediction"`` only).

        Returns
        -------
        PredictionExplanation
            Prints as text (HTML in a notebook); ``.plot()`` draws it; ``.scores`` holds every
            training row's score (> 0 = harmful).
        """
        engine = self._fitted_engine()
        if not is_integer(n) or n < 0:
            raise InputError(f"n must be an integer >= 0 (the rows to show per side), got {n!r}.")
        if n_rows(check_table(x, "x")) != 1:
            raise InputError("explain_prediction explains one test row: pass x.iloc[[j]] (and y[[j]]); "
                             "score_training_points scores several.")
        targets = self._y_train.ndim == 2 and self._y_train.shape[1] > 1  # a label is a vector of K targets
        labels = None if y is None else np.asarray(y, dtype=object).reshape((1, -1) if targets else -1)
        on: Literal["loss", "prediction"] = "prediction" if labels is None else "loss"
        scores = np.asarray(self.score_training_points(x, labels, on=on, output=output),
                            dtype=np.float64).reshape(-1)
        test = self._test_points(x, labels, on, None)
        e = engine.ensemble
        margin = np.asarray(engine.predict_margin(test), dtype=np.float64).reshape(1, -1)
        proba = e.loss.class_probabilities(margin, test.y)
        classes = list(self.adapter_.label_map().classes or range(0 if proba is None else proba.shape[1]))
        if proba is not None and len(classes) == 1:  # one class trained: a binary model, class 1 unseen
            proba = proba[:, :1]
        rows = np.arange(e.n_rows)
        index = self._train_index()
        return PredictionExplanation(
            test_row=x.index[0] if isinstance(x, pd.DataFrame) else 0,
            label=None if labels is None else tuple(map(_plain, labels[0])) if targets else _plain(labels[0]),
            margin=margin[0],
            probabilities=None if proba is None else {_plain(c): p for c, p in zip(classes, proba[0].tolist(),
                                                                                   strict=True)},
            loss=None if labels is None else float(e.loss.values(test.y, margin)[0]),
            on=on,
            harmful=self._top_table(scores, rows, n, "harmful"),
            helpful=self._top_table(scores, rows, n, "helpful"),
            scores=pd.Series(scores, index=index if index is not None else pd.RangeIndex(e.n_rows)),
            X_train=self._X_train,
            y_train=self._y_train,
        )

    def find_label_issues(
        self,
        X_test: Any = None,
        y_test: ArrayLike | None = None,
        *,
        n: int | None = None,
        rank_by: Literal["disagreement", "self_influence", "test_influence"] = "disagreement",
        self_influence_method: Literal["leaf_influence", "leaf_refit"] = "leaf_influence",
        n_issues: int | None = None,
    ) -> pd.DataFrame:
        """Training rows most likely mislabeled, most suspicious first, with their influence on the
        test loss when ``X_test``, ``y_test`` (trusted labels) are given.

        Parameters
        ----------
        X_test, y_test : optional
            Held-out rows with trusted labels. When given, every row's exact influence on their mean
            loss is reported (``test_influence``, > 0 = removing the row lowers the test loss).
        n : int, optional
            Rows to return; default all.
        rank_by : {"disagreement", "self_influence", "test_influence"}
            The suspicion score. ``"disagreement"`` (default): the model's own loss on the row, the
            best detector of flipped labels measured on Adult. ``"self_influence"``:
            :func:`influence_gbdt.label_noise.self_influence`. ``"test_influence"``: the influence on
            the test loss (needs ``X_test``, ``y_test``); ranks the rows whose removal helps the test
            loss most, mislabeled or not.
        self_influence_method : {"leaf_influence", "leaf_refit"}
            For ``rank_by="self_influence"`` (single-point update set, a few seconds on 30k rows).
        n_issues : int, optional
            How many of the most suspicious rows to flag as label issues. Default: estimated from
            the data (:func:`influence_gbdt.label_noise.estimated_issue_count`): for a classifier,
            confident learning's count of rows whose confidently predicted class is not their label
            (as cleanlab, but with the booster's own probabilities instead of cross-validated ones);
            for a regressor, the rows whose own loss is a far outlier (above Q3 + 3 IQR).

        Returns
        -------
        DataFrame, one line per training row, sorted by ``suspicion`` (descending), indexed like the
        training data of ``fit`` (its index when it was a DataFrame); columns ``row`` (position),
        ``suspicion``, ``label``, ``is_label_issue`` (True for the ``n_issues`` most suspicious
        rows), ``disagreement``, ``test_influence`` (with test data) and ``self_influence`` (when
        ranked by it). Binary, multiclass and regression models. The "Label noise" docs page says
        when influence adds value.
        """
        from .label_noise import check_label_issue_request, label_issue_table

        engine = self._fitted_engine()
        check_label_issue_request(rank_by, n, X_test is not None, (X_test is None) == (y_test is None),
                                  n_issues)
        test_influence = None
        if X_test is not None:
            test_influence = np.asarray(self.score_training_points(X_test, y_test, aggregate="mean"),
                                        np.float64)
        return label_issue_table(engine, self._y_train, self._train_index(), test_influence, n=n,
                                 rank_by=rank_by, self_influence_method=self_influence_method,
                                 refit_base=self.base_score == "refit", n_issues=n_issues)

    # ------------------------------------------------------------------------------------------

    def _in_unit(self, scores: Any, engine: Any, rows: ArrayLike | None) -> Any:
        """``leaf_influence`` scores (per unit of weight, as the engines give them) in
        ``influence_unit``: times each scored row's sample weight for ``"row"``. ``scores`` has one
        row per training row of ``rows`` (ndarray or Dask array, (r, m) or (r,))."""
        if self.method != "leaf_influence" or self.influence_unit == "weight":
            return scores
        w = engine.row_weights(rows)
        w = w[:, None] if scores.ndim == 2 else w
        if isinstance(scores, np.ndarray):  # the engine's new array: scaled where it lies
            if (w == 1.0).all():  # no sample weights: x * 1.0 == x, a pass over (r, m) saved
                return scores
            return np.multiply(scores, w, out=scores)
        return scores * w

    def _check_settings(self) -> None:
        check_choice("method", self.method, _METHODS)
        check_choice("influence_unit", self.influence_unit, _INFLUENCE_UNITS)
        check_choice("update_set", self.update_set, _UPDATE_SETS)
        check_choice("base_score", self.base_score, _BASE_SCORES)
        if self.k is not None and (not is_integer(self.k) or self.k < 1):
            raise InputError(
                f"k must be an integer >= 1 (the leaves updated per tree with update_set='top_k_leaves'), "
                f"got {self.k!r}."
            )
        if self.update_set == "top_k_leaves" and self.k is None:
            raise InputError("update_set='top_k_leaves' needs k >= 1 (the leaves updated per tree).")
        mm = self.max_memory
        if not isinstance(mm, numbers.Real) or isinstance(mm, (bool, np.bool_)) or not mm > 0:
            raise InputError(
                f"max_memory must be a positive number of bytes (e.g. 4e9; float('inf') for no limit), "
                f"got {mm!r}."
            )
        if self.n_threads is not None and (not is_integer(self.n_threads) or self.n_threads < 1):
            raise InputError(
                f"n_threads must be None (every core) or an integer >= 1, got {self.n_threads!r}."
            )
        if self.params is not None and not isinstance(self.params, Mapping):
            raise InputError(f"params must be a mapping such as {{'eta': 0.1}}, got {self.params!r}.")
        if not isinstance(self.progress, (bool, np.bool_)):
            raise InputError(f"progress must be True or False, got {self.progress!r}.")

    def _check_fit_memory(self, adapter: Any, X: Any, n: int) -> float:
        """Refuse, before anything n-sized is allocated, a fit that would need more than
        ``max_memory`` (the tree count comes from the leaf indices of one row, the bytes from the
        adapter's estimate); return the bytes it needs."""
        first = take_rows(X, np.arange(1))
        n_trees = int(adapter.leaf_indices(first).shape[0])
        need = adapter.fit_bytes(n_trees, n)
        if need > self.max_memory:
            raise InputError(
                f"fit needs about {need / 1e9:.2f} GB for the leaf indices of {n_trees} trees x {n} rows, "
                f"more than max_memory={self.max_memory:.3g} bytes. Raise max_memory (float('inf') for no "
                "limit) on a machine that has the memory, or explain a model with fewer trees."
            )
        return need

    def _fit_matches_settings(self) -> bool:
        return self.model is self._fit_model and dict(self.params or {}) == self._fit_params

    def _forget_fit(self) -> None:
        for name in ("adapter_", "engine_", "n_features_in_", "feature_names_in_", "n_train_",
                     "reproduction_residual_", "_X_train", "_y_train", "_fit_data", "_inside", "_fit_model",
                     "_fit_params"):
            self.__dict__.pop(name, None)

    def _fitted_engine(self) -> InfluenceEngine:
        if not hasattr(self, "engine_"):
            raise NotFittedError(
                "This BoostingInfluence is not fitted yet: call fit(X_train, y_train) with the model's "
                "training data first."
            )
        if not self._fit_matches_settings():
            raise NotFittedError(
                "model or params changed since fit: call fit(X_train, y_train) again for the new model."
            )
        self.engine_.n_threads = self.n_threads
        return self.engine_

    def _test_points(self, X: Any, y: ArrayLike | None, on: str, init_score: ArrayLike | None) -> TestPoints:
        raw, X = X, check_table(X, "X")
        names = getattr(self, "feature_names_in_", None)
        if names is not None and isinstance(X, pd.DataFrame) and list(X.columns) != list(names):
            missing = [c for c in names if c not in set(X.columns)][:5]
            unknown = [c for c in X.columns if c not in set(names)][:5]
            detail = f"missing {missing}, unknown {unknown}" if missing or unknown else "another order"
            raise InputError(
                f"X's column names differ from those seen in fit ({detail}): pass the same columns in "
                f"the same order, X[{list(names)[:20]}]."
            )
        n_cols = n_columns(X)
        if n_cols != self.n_features_in_:
            raise InputError(f"X has {n_cols} features, but the model was fitted with {self.n_features_in_}.")
        m = n_rows(X)
        index = X.index if isinstance(X, pd.DataFrame) else None
        X = self._model_inputs(self._inside.rows, raw, X, "X")
        self.adapter_.check_features(X)
        labels = None
        if on == "loss":
            if y is None:
                raise InputError(
                    "Scoring the test loss needs y; pass on='prediction' to score without labels."
                )
            given = check_rows(y, m, "y", index, numeric=False, columns=True)
            labels = self.adapter_.encode_labels(_apply(self._inside.labels, given))
        offsets = None if init_score is None else check_rows(init_score, m, "init_score", index, columns=True)
        return TestPoints(self.adapter_.leaf_indices(X), self.adapter_.init_offset(X, offsets), labels)

    @staticmethod
    def _model_inputs(transform: Callable[[Any], Any] | None, raw: Any, X: Any, name: str) -> Any:
        """The rows as the booster takes them: ``X`` (``raw`` through :func:`.inputs.check_table`)
        when the model is the booster, else the user's own ``raw`` through a pipeline's
        preprocessing ``transform`` (:func:`.pipelines.unwrap`), as the pipeline's ``predict`` takes
        them (a polars frame stays one)."""
        if transform is None:
            return X
        n = n_rows(X)
        try:
            X_model = transform(raw)
        except Exception as e:  # the step's own error, with what to do
            raise InputError(
                f"The Pipeline's steps before its model could not transform {name} "
                f"({type(e).__name__}: {e}). Pass {name} as the pipeline itself takes it (for fit: the raw "
                "rows it was fitted on)."
            ) from e
        X_model = check_table(X_model, f"{name} transformed by the pipeline")
        if n_rows(X_model) != n:
            raise InputError(
                f"The Pipeline's steps before its model turned {n} rows of {name} into {n_rows(X_model)}: "
                "each row must stay one row (a step that drops or adds rows cannot be explained)."
            )
        return X_model

    def _output_index(self, on: str, output: Any) -> int | None:
        """The engine's output index for ``output`` (None: the only output, or scoring the loss).

        Raises
        ------
        InputError
            ``output`` with ``on="loss"``, none with ``on="prediction"`` on a model with several
            outputs, a class the model does not have (the message names its classes), an index out of
            range, or a binary model's negative class.
        """
        if on != "prediction":
            if output is None:
                return None
            raise InputError(
                "output names the margin scored with on='prediction'; the loss (on='loss') covers every "
                "output already. Drop output, or pass on='prediction'."
            )
        K = self.engine_.ensemble.n_outputs
        labels = self.adapter_.label_map()
        classes = labels.classes
        shown = None if classes is None else [c.item() if isinstance(c, np.generic) else c for c in classes]
        if output is None:
            if K == 1:
                return None
            outputs = f"classes {shown}" if shown else f"classes or targets 0 .. {K - 1}"
            raise InputError(
                f"The model has {K} outputs ({outputs}): scoring the prediction needs the output to score, "
                f"e.g. output={shown[0] if shown else 0!r}."
            )
        if shown is not None:
            try:
                index = int(labels.encode([output], "output")[0])
            except InputError:
                raise InputError(
                    f"output={output!r} is not a class of this {len(shown)}-class model: its classes are "
                    f"{shown} ({labels.source}). Pass one of them, e.g. output={shown[-1]!r}."
                ) from None
            if K == 1:
                if index != 1:
                    raise InputError(
                        f"A binary model has one margin, that of its positive class {shown[1]!r}: scores "
                        f"for class {output!r} are those of {shown[1]!r} with the sign flipped. Pass "
                        f"output={shown[1]!r} or leave it out."
                    )
                return None
            return index
        if not is_integer(output) or not 0 <= int(output) < K:
            if K == 1:
                raise InputError(f"output={output!r}: this model has a single output; leave output out.")
            raise InputError(
                f"output={output!r} is not an output of this model: it has {K} outputs (classes or targets "
                f"0 .. {K - 1}; {labels.source} records no class labels). Pass an index in 0 .. {K - 1}."
            )
        return None if K == 1 else int(output)

    def _chunk_size(
        self, engine: InfluenceEngine, n_scored: int, m: int, aggregate: str | None, use_reverse: bool
    ) -> int:
        """Rows (or test points, in reverse mode) per batch so that the scores and the working
        arrays fit in ``max_memory``; refuses with advice when even one per batch does not."""
        e = engine.ensemble
        result = 8.0 * n_scored * (1 if aggregate else m)
        if result > self.max_memory:
            raise InputError(
                f"The score matrix would hold {n_scored} x {m} values ({result / 1e9:.2f} GB), more than "
                f"max_memory={self.max_memory:.3g} bytes. Pass aggregate='mean', score fewer "
                "training_points or test points, or raise max_memory."
            )
        # Test leaves (int32 and int64 copies) and each thread's per-row scratch of the kernels.
        fixed = result + 12.0 * e.n_trees * m + 32.0 * e.n_rows * (os.cpu_count() or 1)
        if use_reverse:  # per test point of a batch: adjoint weights, scaled and transposed copies
            per_item, default = 8.0 * (3 * e.n_rows + n_scored), 256
        else:  # per training row of a batch: new leaf values and their change, test margins and losses
            per_item, default = 8.0 * (2 * e.n_total_leaves + 4 * m), 64
        fits = int(min((self.max_memory - fixed) // per_item, default)) if self.max_memory > fixed else 0
        if fits < 1:
            raise InputError(
                f"Scoring needs about {(fixed + per_item) / 1e9:.2f} GB of working memory, more than "
                f"max_memory={self.max_memory:.3g} bytes. Score fewer test points or training_points "
                "at a time, or raise max_memory."
            )
        return fits

    def _speedup_advice(self) -> str:
        if self.method == "leaf_refit":
            return (
                "Interrupt it and score fewer rows (training_points=...), or use "
                "method='leaf_influence', which scores every row at once."
            )
        return "Interrupt it and use update_set='all_points' (exact, reverse mode), or fewer training_points."

    def _train_index(self) -> pd.Index | None:
        return row_labels(self._X_train)

    def _training_features(self, rows: NDArray[np.int64]) -> pd.DataFrame:
        """The features of training ``rows`` as a DataFrame (DataFrame columns, or 0 .. p-1)."""
        X = self._X_train
        if isinstance(X, pd.DataFrame):
            return X.iloc[rows].reset_index(drop=True)
        if is_sparse(X):
            return pd.DataFrame(X.tocsr()[rows].toarray())
        return pd.DataFrame(np.asarray(X)[rows])


class _Progress:
    """Advances the progress bar and warns once when the run is projected to take hours.

    The rate is measured from the end of the first batch (which includes compilation).
    """

    def __init__(self, bar: Any, total: int, unit: str, advice: str) -> None:
        self.bar, self.total, self.unit, self.advice = bar, total, unit, advice
        self.done = 0
        self.start: tuple[float, int] | None = None
        self.warned = False

    def __call__(self, count: int) -> None:
        self.bar.update(count)
        self.done += count
        now = time.perf_counter()
        if self.start is None:
            self.start = (now, self.done)
            return
        t0, done0 = self.start
        if self.warned or self.done <= done0 or now <= t0:
            return
        rate = (self.done - done0) / (now - t0)
        remaining = (self.total - self.done) / rate
        if remaining > LONG_RUN_SECONDS:
            self.warned = True
            warnings.warn(
                f"This run is projected to need about {remaining / 3600:.1f} more hours "
                f"({self.total - self.done} {self.unit}s left at {rate:.3g} per second). {self.advice}",
                LongRunWarning,
                stacklevel=2,
            )


def _apply(transform: Callable[[Any], Any] | None, value: Any) -> Any:
    """``transform(value)``, or ``value`` where there is nothing to do (None)."""
    return value if transform is None else transform(value)


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python value it holds (for printing), anything else unchanged."""
    return value.item() if isinstance(value, np.generic) else value


def _free_names(names: list[Any], taken: tuple[str, ...]) -> list[Any]:
    """``names`` with any that collide with ``taken`` (or with each other) prefixed ``feature:``."""
    used = set(taken)
    out = []
    for name in names:
        while name in used:
            name = f"feature:{name}"
        used.add(name)
        out.append(name)
    return out
