"""The public estimator: wrap a trained booster and score its training points."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from tqdm.auto import tqdm

from .engine import InfluenceEngine, TestPoints
from .errors import InputError, NotFittedError
from .tabular import n_rows

_METHODS = ("leaf_influence", "leaf_refit")
_UPDATE_SETS = ("all_points", "single_point", "top_k_leaves")
_BASE_SCORES = ("refit", "fixed")
_PARAMS = ("model", "method", "update_set", "k", "base_score", "progress", "params", "max_memory")


class BoostingInfluence:
    """Influence of training points on the predictions of a trained gradient-boosted model.

    Wraps an XGBoost, LightGBM or CatBoost model that is already trained (Booster or scikit-learn
    wrapper), in the way ``SelectFromModel(prefit=True)`` wraps an estimator. :meth:`fit` reads the
    model's trees, checks that it reproduces every stored leaf value from the training data, and
    :meth:`score_training_points` scores each training row against test points.

    Sign convention: **a score > 0 means the training row is harmful** to that test point:
    removing it (``leaf_refit``) or lowering its weight (``leaf_influence``) lowers the test loss.

    Parameters
    ----------
    model : XGBoost, LightGBM or CatBoost model
        Trained; stored as given. Only the library the model comes from is imported.
    method : {"leaf_influence", "leaf_refit"}
        ``leaf_influence``: d test loss / d training weight, with fixed tree structures.
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
        (boost_from_average); ``"fixed"``: it stays (what XGBoost's refresh and LightGBM's refit do).
    progress : bool
        Show a progress bar for long computations.
    params : mapping, optional
        Training parameters the model lost (an XGBoost model reloaded from a file forgets eta,
        lambda, ...): e.g. ``{"eta": 0.1, "lambda": 1.0}``.
    max_memory : float
        Largest score matrix (bytes) returned without ``aggregate``; larger requests raise with
        advice (score fewer ``training_points`` or aggregate).

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
        max |recomputed - stored| leaf value / max |stored| leaf value found by the self-check.

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
    ) -> None:
        self.model = model
        self.method = method
        self.update_set = update_set
        self.k = k
        self.base_score = base_score
        self.progress = progress
        self.params = params
        self.max_memory = max_memory

    # ------------------------------------------------------------------------------------------

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor settings, as in scikit-learn (``deep`` is accepted and ignored)."""
        return {name: getattr(self, name) for name in _PARAMS}

    def set_params(self, **params: Any) -> BoostingInfluence:
        """Change constructor settings, as in scikit-learn; returns self.

        ``method``, ``update_set``, ``k``, ``base_score``, ``progress`` and ``max_memory`` act at
        scoring time, so a fitted explainer keeps its fit; changing ``model`` or ``params`` needs a
        new :meth:`fit`.
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
        return self

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
        X : array-like or DataFrame of shape (n_train, n_features)
            Exactly the training rows, in training order, as the booster accepted them.
        y : array-like of shape (n_train,)
            The training labels.
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
            Wrong shapes, NaN labels, labels outside the objective's domain.
        """
        self._check_settings()
        from influence_gbdt.adapters import adapter_for

        n = n_rows(X)
        adapter = adapter_for(self.model, self.params)
        labels = adapter.encode_labels(y)
        if labels.shape != (n,):
            raise InputError(f"X has {n} rows but y has {labels.size} labels.")
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=np.float64).ravel()
            if sample_weight.shape != (n,):
                raise InputError(f"X has {n} rows but sample_weight has {sample_weight.size} values.")
        self.adapter_ = adapter
        self.engine_: InfluenceEngine = adapter.prepare(X, labels, sample_weight, init_score)
        self.n_features_in_ = _n_columns(X)
        if isinstance(X, pd.DataFrame):
            self.feature_names_in_ = np.asarray(X.columns, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self.n_train_ = n
        self.reproduction_residual_ = self.engine_.relative_residual
        self._X_train = X
        self._y_train = np.asarray(y).ravel()
        return self

    def score_training_points(
        self,
        X: Any,
        y: ArrayLike | None = None,
        *,
        aggregate: Literal["mean", "sum"] | None = None,
        training_points: ArrayLike | None = None,
        on: Literal["loss", "prediction"] = "loss",
        init_score: ArrayLike | None = None,
    ) -> NDArray[np.float64]:
        """Score training rows by their influence on the test points ``X``.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_test, n_features)
        y : array-like of shape (n_test,), optional
            Test labels; required with ``on="loss"``.
        aggregate : {None, "mean", "sum"}
            Score the mean or sum of the test losses instead of each test point.
        training_points : array-like of int or bool mask of shape (n_train,), optional
            Score only these training rows (in this order); default all.
        on : {"loss", "prediction"}
            ``"loss"``: effect on the test loss, > 0 = harmful. ``"prediction"``: effect on the raw
            margin (``leaf_refit``: F(x) - F_without_row(x); ``leaf_influence``: dF(x)/dw), > 0 = the
            row raises the margin; needs no labels.
        init_score : array-like of shape (n_test,), optional
            Per-row initial margin of the test points, if the model was trained with one.

        Returns
        -------
        ndarray of shape (n_scored, n_test), or (n_scored,) when aggregated, float64.
        """
        engine = self._fitted_engine()
        self._check_settings()
        if on not in ("loss", "prediction"):
            raise InputError(f"on must be 'loss' or 'prediction', got {on!r}.")
        test = self._test_points(X, y, on, init_score)
        rows = engine.resolve_rows(training_points)
        m = np.asarray(test.leaf_index).shape[1]
        if aggregate is None and rows.size * m * 8 > self.max_memory:
            raise InputError(
                f"The score matrix would hold {rows.size} x {m} values ({rows.size * m * 8 / 1e9:.1f} GB). "
                "Pass aggregate='mean', score fewer training_points, or raise max_memory."
            )
        use_reverse = self.method == "leaf_influence" and engine.uses_reverse(
            self.update_set, rows.size, m, aggregate)
        total = (m if aggregate is None else 1) if use_reverse else rows.size
        with tqdm(total=total, disable=not self.progress, desc=f"{self.method} ({self.update_set})",
                  unit="test pt" if use_reverse else "row", leave=False) as bar:
            scorer = engine.leaf_influence if self.method == "leaf_influence" else engine.leaf_refit
            return scorer(
                test, rows=rows, update_set=self.update_set, k=self.k,
                refit_base=self.base_score == "refit", on=on, aggregate=aggregate,
                progress=bar.update,
            )

    def top_training_points(
        self,
        X: Any,
        y: ArrayLike | None = None,
        n: int = 10,
        kind: Literal["harmful", "helpful"] = "harmful",
        **score_kwargs: Any,
    ) -> pd.DataFrame:
        """The ``n`` most harmful (largest score) or helpful (smallest) training rows for the mean
        test loss of ``X`` (a single test point works too).

        Returns
        -------
        DataFrame with columns ``row`` (training row index), ``score``, ``label`` and the row's
        features, sorted from the most influential down.
        """
        if kind not in ("harmful", "helpful"):
            raise InputError(f"kind must be 'harmful' or 'helpful', got {kind!r}.")
        score_kwargs.setdefault("aggregate", "mean")
        scores = self.score_training_points(X, y, **score_kwargs)
        if scores.ndim != 1:
            raise InputError("top_training_points needs one score per row: keep aggregate set.")
        rows = self.engine_.resolve_rows(score_kwargs.get("training_points"))
        order = np.argsort(-scores if kind == "harmful" else scores, kind="stable")[:n]
        features = pd.DataFrame(self._X_train).iloc[rows[order]].reset_index(drop=True)
        head = pd.DataFrame({"row": rows[order], "score": scores[order], "label": self._y_train[rows[order]]})
        return pd.concat([head, features], axis=1)

    # ------------------------------------------------------------------------------------------

    def _check_settings(self) -> None:
        if self.method not in _METHODS:
            raise InputError(f"method must be one of {_METHODS}, got {self.method!r}.")
        if self.update_set not in _UPDATE_SETS:
            raise InputError(f"update_set must be one of {_UPDATE_SETS}, got {self.update_set!r}.")
        if self.update_set == "top_k_leaves" and (self.k is None or int(self.k) < 1):
            raise InputError("update_set='top_k_leaves' needs k >= 1 (the leaves updated per tree).")
        if self.base_score not in _BASE_SCORES:
            raise InputError(f"base_score must be one of {_BASE_SCORES}, got {self.base_score!r}.")

    def _fitted_engine(self) -> InfluenceEngine:
        if not hasattr(self, "engine_"):
            raise NotFittedError(
                "This BoostingInfluence is not fitted yet: call fit(X_train, y_train) with the model's "
                "training data first."
            )
        return self.engine_

    def _test_points(self, X: Any, y: ArrayLike | None, on: str, init_score: ArrayLike | None) -> TestPoints:
        n_cols = _n_columns(X)
        if n_cols != self.n_features_in_:
            raise InputError(f"X has {n_cols} features, but the model was fitted with {self.n_features_in_}.")
        names = getattr(self, "feature_names_in_", None)
        if names is not None and isinstance(X, pd.DataFrame) and list(X.columns) != list(names):
            raise InputError("X's column names differ from those seen in fit (same names, same order).")
        m = n_rows(X)
        labels = None
        if on == "loss":
            if y is None:
                raise InputError(
                    "Scoring the test loss needs y; pass on='prediction' to score without labels."
                )
            labels = self.adapter_.encode_labels(y)
            if labels.shape != (m,):
                raise InputError(f"X has {m} rows but y has {labels.size} labels.")
        return TestPoints(self.adapter_.leaf_indices(X), self.adapter_.init_offset(X, init_score), labels)


def _n_columns(X: Any) -> int:
    n_rows(X)
    return int(X.shape[1])
