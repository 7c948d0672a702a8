"""Actionable feature tweaking (Tolomei et al., KDD 2017) for XGBoost, LightGBM and CatBoost.

Given rows the model assigns to one class, find the cheapest change of their features that makes the
*booster itself* assign them the target class, under the user's constraints::

    from influence_gbdt import FeatureTweaking
    ft = FeatureTweaking(model, cost="l2", immutable=["age"], bounds={"hours": (0, 80)})
    ft.fit(X_train)                     # optional: per-feature scales, nearest-training-row fallback
    table = ft.tweak(X_rejected)        # one row per input row: tweaked features, cost, prediction
    ft.explain(X_rejected.iloc[[0]])    # the changed features of one row

A regressor's rows are moved into a range of its own ``predict`` instead
(``ft.tweak(X, desired_range=(300_000, None))``: at least 300,000).

See :mod:`influence_gbdt._tweak_search` for the algorithm and :mod:`influence_gbdt._tweak_exact`
for the exact search used to measure its optimality gap.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from tqdm.auto import tqdm

from ._settings import settings_repr
from ._tweak_codec import Codec
from ._tweak_exact import solve
from ._tweak_goals import ClassTargets, Targets, targets_for
from ._tweak_search import EXACT, SOURCES, Cost, Goal, Search, Solutions, changed_features
from ._tweak_space import Constraints, Grid
from .errors import InputError
from .inputs import check_table, is_integer, is_number
from .trees import ZERO_THRESHOLD

_METHODS = ("paths", "combine", "exact")


#: Rows from which :meth:`FeatureTweaking.tweak` shows a progress bar (a row takes 0.01-1 s).
_PROGRESS_FROM = 20


class FeatureTweaking:
    """Cheapest feature changes that move a tree ensemble's prediction to a target class, or a
    regressor's prediction into a target range.

    Parameters
    ----------
    model : object
        A trained XGBoost, LightGBM or CatBoost model (Booster or scikit-learn wrapper): a classifier,
        binary or multiclass, or a regressor with one output (any objective whose prediction is an
        increasing function of the margin: squared error, L1, quantile, Poisson, Gamma, Tweedie,
        ...). Stored as given.
    epsilon : float, default=0.05
        How far inside a split's region a tweaked value is placed, in units of the feature's scale
        (the paper's epsilon): larger values are more robust, smaller ones cheaper.
    cost : {"l2", "l1", "l0"} or callable, default="l2"
        "l2": Euclidean norm of the per-feature scaled changes; "l1": their sum; "l0": the fewest
        changed features, then the smallest "l2" among those (reported as ``count + tanh(l2)``).
        A numerical change of ``d`` counts ``|d| / scale``; changing a category counts
        ``categorical_cost``. A callable ``cost(x, V) -> ndarray of shape (m,)`` receives one
        encoded row ``x`` (n_features,) and candidate rows ``V`` (m, n_features) (categories as
        the trees' codes); ``method="exact"`` needs "l1" or "l2".
    immutable : iterable of str or int, default=()
        Features (names or positions) that must not change.
    bounds : mapping, optional
        ``{feature: (low, high)}``: a changed value must lie in [low, high] (None: unbounded).
    integer : iterable of str or int, or "auto", default="auto"
        Features whose changed values must be integers, besides the integer-typed columns of the
        rows tweaked (which cannot hold fractions); "auto": the integer-typed columns of the
        data passed to :meth:`fit` or :meth:`tweak`.
    monotone : mapping, optional
        ``{feature: +1 or -1}`` (or "increase" / "decrease"): the direction a feature may move.
    scale : {"auto", "std", "mad"}, array-like, mapping or None, default="auto"
        Unit of each numerical feature for cost and epsilon: "std" / "mad" of the data passed to
        :meth:`fit` (a zero spread counts as 1), explicit values per feature, or None (1 for all).
        "auto" is "std" when :meth:`fit` was given data, else None.
    categorical_cost : float, default=1.0
        Cost of changing a categorical feature (in scaled units).
    method : {"combine", "paths", "exact"}, default="combine"
        "paths": the paper (one leaf's path per candidate); "combine": paths plus intersections of
        several leaves' paths (beam search), nearest target-class training rows and a coordinate
        polish; "exact": the optimum of the same search space by mixed-integer programming (small
        ensembles; needs SciPy), with the "combine" result as fallback.
    beam_width, pool, rounds : int, default=8, 64, 6
        Beam search size for "combine": boxes kept per round, single leaves tried against each, rounds.
    climbs : int, default=4
        Greedy walks from the row for "combine", one feature changed per step (each step the
        change that buys the most target score per unit of cost), each from another first step:
        they assemble several category switches, which the beam rarely does. 0 turns them off.
    n_reference : int, default=3
        Nearest training rows the booster already gives the target (class or range) offered as
        candidates (needs :meth:`fit` data).
    time_limit : float, default=10.0
        Seconds per row and class for "exact".
    max_changes : int, optional
        At most this many features may change; a row whose every valid candidate changes more gets
        NaN, with the reason in the ``reason`` column. ("exact" finds the cheapest tweak within
        the limit.)
    progress : bool, default=True
        Show a progress bar (tqdm) over the rows of :meth:`tweak` when there are more than a few.

    Attributes
    ----------
    reader_ : ModelTrees
        The model's tree reader (structure in ``reader_.structure``).
    classes_ : ndarray
        Class labels, in the model's order (classifiers only).
    feature_names_in_ : ndarray of str
    n_features_in_ : int
    scale_ : ndarray of shape (n_features,)
    reference_ : ndarray of shape (n_reference_rows, n_features) or None
        Encoded reference rows; ``reference_class_`` is the class index the booster gives each
        (classifiers), ``reference_prediction_`` its prediction (regressors).

    Notes
    -----
    Every returned row is checked with the booster's own ``predict``; a row for which no candidate
    passes gets NaN. Missing values (NaN) of a row are never changed. With :meth:`fit` data, the cost
    is never above that of the nearest reference row the booster assigns to the target class (or
    range) and that satisfies the constraints (it is one of the candidates).

    A regressor's target is a range of what its own ``predict`` returns (``exp`` of the margin for
    Poisson, Gamma and Tweedie objectives, the sigmoid for ``reg:logistic`` and ``cross_entropy``,
    ...): the search works on the margin range the objective's link gives, and each tweak is
    checked with ``predict``.
    """

    def __init__(
        self,
        model: Any,
        *,
        epsilon: float = 0.05,
        cost: str | Callable[..., NDArray[np.float64]] = "l2",
        immutable: Iterable[str | int] = (),
        bounds: Mapping[Any, tuple[float | None, float | None]] | None = None,
        integer: Iterable[str | int] | str = "auto",
        monotone: Mapping[Any, int | str] | None = None,
        scale: Any = "auto",
        categorical_cost: float = 1.0,
        method: str = "combine",
        beam_width: int = 8,
        pool: int = 64,
        rounds: int = 6,
        climbs: int = 4,
        n_reference: int = 3,
        time_limit: float = 10.0,
        max_changes: int | None = None,
        progress: bool = True,
    ) -> None:
        self.model = model
        self.epsilon = epsilon
        self.cost = cost
        self.immutable = immutable
        self.bounds = bounds
        self.integer = integer
        self.monotone = monotone
        self.scale = scale
        self.categorical_cost = categorical_cost
        self.method = method
        self.beam_width = beam_width
        self.pool = pool
        self.rounds = rounds
        self.climbs = climbs
        self.n_reference = n_reference
        self.time_limit = time_limit
        self.max_changes = max_changes
        self.progress = progress

    # ------------------------------------------------------------------ scikit-learn plumbing
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor settings, as in scikit-learn (``deep`` is ignored: the model is trained)."""
        names = [p for p in inspect.signature(FeatureTweaking.__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    def __repr__(self) -> str:
        return settings_repr(self, self.get_params())

    def __sklearn_clone__(self) -> FeatureTweaking:
        """``sklearn.base.clone``: a new unfitted instance with the same settings, wrapping *the
        same* trained model (cloning the model would give an untrained booster)."""
        return type(self)(**self.get_params())

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "reader_")

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            input_tags=InputTags(categorical=True, string=True, allow_nan=True),
            requires_fit=True,
        )

    def set_params(self, **params: Any) -> FeatureTweaking:
        """Change constructor settings, as in scikit-learn; they act at the next :meth:`fit`
        (structure, scales, reference rows) or :meth:`tweak` (everything else). Returns self."""
        valid = self.get_params()
        for key, value in params.items():
            if key not in valid:
                raise InputError(f"Unknown parameter {key!r}; valid: {sorted(valid)}.")
            setattr(self, key, value)
        return self

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any = None, y: Any = None) -> FeatureTweaking:
        """Read the model's trees and, optionally, learn from reference (training) data.

        Parameters
        ----------
        X : DataFrame or array-like of shape (n_rows, n_features), optional
            Reference rows in the model's input format (usually the training data): they give the
            per-feature scales (``scale="auto"``/"std"/"mad") and the target-class rows offered as
            candidates. Without it, tweaking still works (unit scales, no row fallback).
        y : ignored
            Present for scikit-learn compatibility: reference rows are grouped by what the booster
            predicts for them, which is what a candidate must reproduce.

        Returns
        -------
        self

        Raises
        ------
        UnsupportedModelError
            A regressor with several outputs, or a model whose trees cannot be read.
        InputError
            Invalid settings (the message names the parameter), or ``X`` without rows.
        """
        from .adapters.trees import trees_for

        self._check_settings()
        if X is not None:
            X = check_table(X, "X")
        reader = trees_for(self.model)
        s = reader.structure
        goals = targets_for(reader)
        self.reader_, self._goals = reader, goals
        self._check_method()
        for name in ("classes_", "reference_class_", "reference_prediction_"):  # a refit may change kind
            self.__dict__.pop(name, None)
        if isinstance(goals, ClassTargets):
            self.classes_ = goals.classes
        self.n_features_in_ = s.n_inputs
        # Without reference data the input format is taken from each call of tweak.
        self._codec = Codec(reader, X) if X is not None else None
        codec = self._codec or Codec(reader, np.zeros((1, s.n_inputs)))
        self.feature_names_in_ = np.asarray(codec.columns, dtype=object)
        self.reference_ = None if X is None else codec.encode(X)[:, : s.n_inputs]
        self._reference_answer: NDArray[Any] | None = None if X is None else goals.answer(X)
        name = "reference_class_" if isinstance(goals, ClassTargets) else "reference_prediction_"
        setattr(self, name, self._reference_answer)
        extra = [np.asarray(list(codec.labels[f]), dtype=np.float64) for f in range(s.n_features)]
        self.grid_ = Grid(s, extra_codes=extra)
        self.scale_ = self._scales(self.reference_)
        self._integer_auto = self._integer_columns(X) if X is not None else np.zeros(s.n_inputs, bool)
        return self

    def _check_settings(self) -> None:
        """Refuse a constructor setting of the wrong type or range, naming it."""
        if not isinstance(self.method, str) or self.method not in _METHODS:
            raise InputError(f"method must be one of {_METHODS}, got {self.method!r}.")
        if not callable(self.cost) and not (isinstance(self.cost, str) and self.cost in ("l0", "l1", "l2")):
            raise InputError(f"cost must be 'l0', 'l1', 'l2' or a callable, got {self.cost!r}.")
        if self.method == "exact" and (callable(self.cost) or self.cost == "l0"):
            raise InputError("method='exact' needs a separable cost: use cost='l1' or 'l2'.")
        if self.max_changes is not None and not (is_integer(self.max_changes) and self.max_changes >= 1):
            raise InputError(f"max_changes must be an integer >= 1 or None, got {self.max_changes!r}.")
        if not (is_number(self.epsilon) and np.isfinite(self.epsilon) and self.epsilon >= 0):
            raise InputError(
                f"epsilon must be a finite number >= 0 (in feature scales), got {self.epsilon!r}."
            )
        for name in ("categorical_cost", "time_limit"):
            value = getattr(self, name)
            if not (is_number(value) and value > 0):
                raise InputError(f"{name} must be a number > 0, got {value!r}.")
        for name, least in (("beam_width", 1), ("pool", 1), ("rounds", 1), ("climbs", 0), ("n_reference", 0)):
            value = getattr(self, name)
            if not (is_integer(value) and value >= least):
                raise InputError(f"{name} must be an integer >= {least}, got {value!r}.")
        self._check_feature_settings()

    def _check_method(self) -> None:
        """Refuse ``method="exact"`` on a model the program cannot express (CatBoost CTRs of feature
        combinations, whose values the program would have to hold fixed)."""
        s = self.reader_.structure
        combined = 0 if s.derived is None else int((s.derived.single_source < 0).sum())
        if self.method == "exact" and combined:
            raise InputError(
                f"method='exact' cannot model this CatBoost model's {combined} CTRs of feature combinations "
                "(a CTR of one categorical feature it can); use method='combine', which evaluates every "
                "candidate with the CTR tables the model stores."
            )

    def _check_feature_settings(self) -> None:
        """The settings that name features have the right containers (the features themselves are
        checked against the model by :meth:`_constraints`)."""
        for name in ("immutable", "integer"):
            value = getattr(self, name)
            if name == "integer" and isinstance(value, str):
                continue  # "auto", checked with the data
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise InputError(f"{name} must be a list of features (names or positions), got {value!r}: "
                                 f"for one feature pass [{value!r}].")
        for name in ("bounds", "monotone"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise InputError(f"{name} must be a mapping from features to settings, got {value!r}.")

    def _feature_index(self, key: str | int, what: str) -> int:
        names = [str(n) for n in self.feature_names_in_]
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if 0 <= int(key) < len(names):
                return int(key)
        elif str(key) in names:
            return names.index(str(key))
        raise InputError(f"{what}: {key!r} is not a feature of the model (features: {names}).")

    def _scales(self, ref: NDArray[np.float64] | None) -> NDArray[np.float64]:
        F = self.n_features_in_
        kind = self.scale
        if kind == "auto":
            kind = "std" if ref is not None else None
        if kind is None:
            return np.ones(F)
        if isinstance(kind, str):
            if kind not in ("std", "mad"):
                raise InputError(
                    f"scale must be 'auto', 'std', 'mad', None or per-feature values, got {kind!r}."
                )
            if ref is None:
                raise InputError(f"scale={kind!r} needs reference data: call fit(X_train) first.")
            with np.errstate(invalid="ignore"):
                if kind == "std":
                    spread = np.nanstd(ref, axis=0)
                else:
                    spread = np.nanmedian(np.abs(ref - np.nanmedian(ref, axis=0)), axis=0)
            spread = np.where(np.isfinite(spread) & (spread > 0), spread, 1.0)
            return np.where(self.reader_.structure.feature_is_categorical[:F], 1.0, spread)
        if isinstance(kind, Mapping):
            out = np.ones(F)
            for key, value in kind.items():
                out[self._feature_index(key, "scale")] = float(value)
        else:
            out = np.asarray(kind, dtype=np.float64).ravel()
            if out.shape != (F,):
                raise InputError(f"scale must have one value per feature ({F}), got shape {out.shape}.")
        if not (np.isfinite(out).all() and (out > 0).all()):
            raise InputError("scale values must be finite and > 0.")
        return out

    def _integer_columns(self, X: Any) -> NDArray[np.bool_]:
        F = self.n_features_in_
        if isinstance(X, pd.DataFrame):
            return np.array([pd.api.types.is_integer_dtype(t) for t in X.dtypes], dtype=bool)
        arr = np.asarray(X)
        return np.full(F, np.issubdtype(arr.dtype, np.integer))

    def _constraints(self, X: Any) -> Constraints:
        """The user's constraints per column the trees read: derived columns (CatBoost's CTRs) are
        immutable, since they follow the input columns (the search keeps a candidate's derived
        values at the row's own, and the margin recomputes them)."""
        F = self.n_features_in_
        cat = self.reader_.structure.feature_is_categorical[:F]
        mutable = np.ones(F, dtype=bool)
        for key in self.immutable:
            mutable[self._feature_index(key, "immutable")] = False
        lower, upper = np.full(F, -np.inf), np.full(F, np.inf)
        for key, pair in (self.bounds or {}).items():
            f = self._feature_index(key, "bounds")
            if cat[f]:
                raise InputError(f"bounds: feature {key!r} is categorical; bounds apply to numbers.")
            try:
                lo, hi = pair
            except (TypeError, ValueError):
                raise InputError(f"bounds: {key!r} must map to (low, high), got {pair!r}.") from None
            if not all(v is None or (is_number(v) and not np.isnan(v)) for v in (lo, hi)):
                raise InputError(f"bounds: {key!r} must map to two numbers (None: unbounded), got {pair!r}.")
            lower[f] = -np.inf if lo is None else float(lo)
            upper[f] = np.inf if hi is None else float(hi)
            if lower[f] > upper[f]:
                raise InputError(f"bounds: {key!r} has low {lo} above high {hi}.")
        direction = np.zeros(F, dtype=np.int64)
        for key, way in (self.monotone or {}).items():
            f = self._feature_index(key, "monotone")
            known = isinstance(way, str) or is_number(way)  # not a list, which no key matches
            sign = {"increase": 1, "decrease": -1, 1: 1, -1: -1}.get(way) if known else None
            if sign is None or cat[f]:
                raise InputError(
                    f"monotone: {key!r} must map to +1/'increase' or -1/'decrease' on a numerical feature."
                )
            direction[f] = sign
        if isinstance(self.integer, str):
            if self.integer != "auto":
                raise InputError(f"integer must be 'auto' or a list of features, got {self.integer!r}.")
            integer = self._integer_auto | self._integer_columns(X)
        else:  # with the integer-typed columns of X, which cannot hold a fraction whatever the list says
            integer = self._integer_columns(X)
            for key in self.integer:
                integer[self._feature_index(key, "integer")] = True
        integer &= ~cat
        extra = self.reader_.structure.n_features - F
        return Constraints(
            np.append(mutable, np.zeros(extra, bool)), np.append(lower, np.full(extra, -np.inf)),
            np.append(upper, np.full(extra, np.inf)), np.append(integer, np.zeros(extra, bool)),
            np.append(direction, np.zeros(extra, np.int64)), np.append(self.scale_, np.ones(extra)),
            np.full(F + extra, float(self.categorical_cost)),
        )

    # ------------------------------------------------------------------ tweak
    def _delta(self) -> float:
        """Safety margin on the target score: the booster's own rounding of a margin (XGBoost sums
        float32, ~1e-7 relative per addition) must not undo a flip found on the exact sums."""
        s = self.reader_.structure
        reach = float(np.abs(s.base_margin).max()) + s.scale * sum(
            float(np.abs(s.value[s.tree_offset[t] : s.tree_offset[t + 1]]).max()) for t in range(s.n_trees)
        )
        return (1e-6 if s.float32_inputs else 1e-12) * (1.0 + reach)

    def _search_row(
        self, point: Any, aims: list[tuple[Goal, Any]], rows_for: Callable[[Any], Any], search: Search,
        cost: Cost, n_answers: int = 1,
    ) -> Solutions:
        """Candidates for one row, cheapest first, over ``aims`` (each a goal and its target)."""
        found = Solutions.empty(point.x.size)
        for goal, target in aims:
            rows = rows_for(target)
            if self.method == "exact":  # the program's optimum, then the combined search's candidates:
                # the fallback where the optimum fails the booster's predict or the time limit
                result = solve(point, goal, cost, float(self.time_limit), search.max_changes)
                if result.values is not None:
                    found.add(result.values[None, :], np.array([result.cost]), EXACT)
            part = search.run(point, goal, rows)
            found.add(part.values, part.cost, part.source)
        return found.best(search.keep + n_answers)

    def tweak(
        self, X: Any, target: Any = None, *, desired_range: Any = None, n_answers: int = 1
    ) -> pd.DataFrame:
        """Cheapest tweak of every row of ``X`` towards ``target`` (a classifier) or into
        ``desired_range`` (a regressor).

        Parameters
        ----------
        X : DataFrame or array-like of shape (n_rows, n_features)
            Rows in the model's input format.
        target : label, array-like of shape (n_rows,), or None
            Classifiers: the class each row should reach. None: the other class (binary) or the
            cheapest other class (multiclass). Rows already predicted as their target are returned
            unchanged (cost 0).
        desired_range : (low, high) or array-like of shape (n_rows, 2)
            Regressors (required there): the range the booster's own ``predict`` of each tweaked
            row must lie in, bounds included, on the scale ``predict`` returns (counts for
            Poisson, not log counts); None (or NaN) leaves a side open: ``(300_000, None)`` is "at
            least 300,000". Rows already in their range are returned unchanged (cost 0).
        n_answers : int, default=1
            Up to this many valid tweaks per row, cheapest first, each changing a different set of
            features (as DiCE's several counterfactuals); the index then has a second level,
            ``answer`` (0 = the cheapest). Fewer when the search finds fewer.

        Returns
        -------
        DataFrame with n_rows rows, indexed like ``X`` (a DataFrame's own index, else 0..n_rows-1)
            The tweaked features (the input's columns and dtypes; all NaN where no tweak was found,
            where an integer column becomes pandas' nullable integer of its width, NaN as <NA>),
            then ``cost`` (NaN if none), ``prediction`` (the booster's own prediction of the tweaked
            row: a class label, or a regressor's value), ``n_changed`` (features changed),
            ``source`` (which candidate won: "unchanged", "path", "combined", "climbed",
            "training_row", "exact" or "none") and ``reason`` (why a row has no tweak; empty otherwise).

        Raises
        ------
        InputError
            ``X`` without rows or in another format than :meth:`fit`'s, an invalid setting or
            constraint, a target or range of the wrong kind, or a ``cost`` callable that does not
            return one number per candidate row.
        UnsupportedModelError
            A regressor whose ``predict`` does not follow from its margin by its objective's link.
        """
        if not hasattr(self, "reader_"):
            self.fit()
        self._check_settings()  # set_params may have changed them since fit
        self._check_method()
        if not (is_integer(n_answers) and n_answers >= 1):
            raise InputError(f"n_answers must be an integer >= 1, got {n_answers!r}.")
        index = X.index if isinstance(X, pd.DataFrame) else None
        X = check_table(X, "X")
        codec = self._codec or Codec(self.reader_, X)
        Z = codec.encode(X)
        n = Z.shape[0]
        s = self.reader_.structure
        con = self._constraints(X)
        cost = Cost(self.cost, con.scale, con.weight, s.feature_is_categorical, s.n_inputs)
        search = Search(
            self.grid_,
            cost,
            "paths" if self.method == "paths" else "combine",
            int(self.beam_width),
            int(self.pool),
            int(self.rounds),
            climbs=int(self.climbs),
            max_changes=None if self.max_changes is None else int(self.max_changes),
            keep=max(4, 2 * int(n_answers)),  # room for answers that change different features
        )
        goals = self._goals
        current = goals.current(X)
        targets = goals.per_row(current, target, desired_range)
        delta = self._delta()
        decodable = self._decodable(codec)
        results: list[Solutions] = []
        unreachable: NDArray[np.object_] = np.full(n, "", dtype=object)
        for i in tqdm(range(n), disable=not self.progress or n < _PROGRESS_FROM, unit="row",
                      desc="feature tweaking", leave=False):
            if goals.reached(current[i], targets[i]):
                results.append(Solutions(Z[i : i + 1], np.zeros(1), np.zeros(1, dtype=np.int64)))
                continue
            point = self.grid_.point(Z[i], con, float(self.epsilon), decodable)
            aims: list[tuple[Goal, Any]] = []
            for t in targets[i]:
                goal = goals.goal(t, delta)
                if isinstance(goal, str):  # why the model never predicts in it
                    unreachable[i] = goal
                else:
                    aims.append((goal, t))
            rows_for = self._rows_for(point.x, point.frozen, con, cost)
            found = self._search_row(point, aims, rows_for, search, cost, int(n_answers))
            if n_answers > 1 and found.cost.size:
                # Other answers: the search again without each feature the cheapest one changes.
                for f in np.flatnonzero(changed_features(found.values[0], Z[i]))[: int(n_answers)]:
                    fixed = replace(con, mutable=con.mutable & (np.arange(con.mutable.size) != f))
                    other = self.grid_.point(Z[i], fixed, float(self.epsilon), decodable)
                    part = self._search_row(other, aims, self._rows_for(other.x, other.frozen, fixed, cost),
                                            search, cost, 1)
                    found.add(part.values, part.cost, part.source)
                found = found.best(search.keep + 2 * int(n_answers))
            results.append(found)
        table, owner, answer = self._verify(codec, Z, results, targets, int(n_answers), unreachable)
        _keep_unencodable(table, X, owner)
        labels = index if index is not None else pd.RangeIndex(n)
        table.index = (labels[owner] if n_answers == 1
                       else pd.MultiIndex.from_arrays([labels[owner], answer], names=[labels.name, "answer"]))
        return table

    def _decodable(self, codec: Codec) -> NDArray[np.bool_]:
        g = self.grid_
        out = np.ones(g.n_cells, dtype=bool)
        for f in np.flatnonzero(g.categorical):
            span = slice(g.offset[f], g.offset[f + 1])
            out[span] = codec.decodable(int(f), g.cell_code[span])
        return out

    def _rows_for(
        self, x: NDArray[np.float64], frozen: NDArray[np.bool_], con: Constraints, cost: Cost
    ) -> Callable[[Any], NDArray[np.float64] | None]:
        """Nearest reference rows that meet a target and satisfy the constraints for row ``x``."""
        k = int(self.n_reference)
        s = self.reader_.structure

        def read_missing(A: NDArray[np.float64]) -> NDArray[np.bool_]:
            """Which input values the model reads as missing (NaN, ``missing_value``, LightGBM's zero
            as missing), shaped like ``A`` (..., F)."""
            F = A.shape[-1]
            with np.errstate(invalid="ignore"):
                return (np.isnan(A) | (A == s.missing_value)
                        | (self.grid_.zero_missing[:F] & (np.abs(A) <= ZERO_THRESHOLD)))

        def rows(target: Any) -> NDArray[np.float64] | None:
            if self.reference_ is None or self._reference_answer is None or k <= 0:
                return None
            # the input columns (n_rows, F) of the rows that meet the target
            R = self.reference_[self._goals.meets(self._reference_answer, target)]
            F = R.shape[1]
            xi = x[:F]
            same = ~changed_features(R, xi)
            ok = np.all(same | (con.mutable[:F] & ~frozen[:F]), axis=1)
            with np.errstate(invalid="ignore"):
                inside = (R >= con.lower[:F]) & (R <= con.upper[:F]) & (~con.integer[:F] | (R == np.round(R)))
                way = (con.direction[:F] == 0) | (np.sign(R - xi) == con.direction[:F])
            ok &= np.all(same | (inside & way), axis=1)
            ok &= ~np.any(read_missing(R) & ~read_missing(xi), axis=1)  # no value changed to missing
            if not ok.any():
                return None
            # derived columns (CatBoost's CTRs) as the search has them: x's own
            R = np.hstack([R[ok], np.broadcast_to(x[F:], (int(ok.sum()), x.size - F))])
            c = cost(x, R)
            return R[np.argsort(c, kind="stable")[:k]]

        return rows

    def _verify(
        self, codec: Codec, Z: NDArray[np.float64], results: list[Solutions], targets: list[list[Any]],
        n_answers: int, unreachable: NDArray[np.object_],
    ) -> tuple[pd.DataFrame, NDArray[np.int64], NDArray[np.int64]]:
        """Keep, per row, the ``n_answers`` cheapest candidates the booster itself gives a target
        (class or range), each changing another set of features; a row with none gets one line of
        NaN. ``unreachable``: per row, why a target cannot be reached at all ("" if it can).
        Returns the table and, per line, the input row it answers and the answer's number (0 =
        cheapest)."""
        n, F = Z.shape
        goals: Targets = self._goals
        aim = "target class" if isinstance(goals, ClassTargets) else "target range"
        reason: NDArray[np.object_] = np.full(n, "", dtype=object)
        reason[[r.cost.size == 0 for r in results]] = f"no candidate reaches the {aim}"
        reason[unreachable != ""] = unreachable[unreachable != ""]
        moved = [changed_features(r.values, Z[k]) for k, r in enumerate(results)]  # (candidates, F) per row
        if self.max_changes is not None:
            for k, r in enumerate(results):
                keep = moved[k].sum(axis=1) <= int(self.max_changes)
                if r.cost.size and not keep.any():
                    reason[k] = f"every candidate changes more than max_changes={self.max_changes} features"
                results[k], moved[k] = Solutions(r.values[keep], r.cost[keep], r.source[keep]), moved[k][keep]
        changed_sets = [[frozenset(np.flatnonzero(row).tolist()) for row in m] for m in moved]
        chosen: list[list[int]] = [[] for _ in range(n)]
        attempt = np.zeros(n, dtype=np.int64)

        def next_untried(k: int) -> bool:
            """Move row ``k``'s attempt past candidates whose feature set is taken; whether any is left."""
            taken = {changed_sets[k][a] for a in chosen[k]}
            while attempt[k] < results[k].cost.size and changed_sets[k][attempt[k]] in taken:
                attempt[k] += 1
            return bool(attempt[k] < results[k].cost.size)

        pending = np.array([next_untried(k) for k in range(n)])
        while pending.any():
            rows = np.flatnonzero(pending)
            V = np.vstack([results[k].values[attempt[k]] for k in rows])
            predicted = goals.answer(codec.decode(V))
            for k, p in zip(rows.tolist(), predicted, strict=True):
                unchanged = results[k].source[attempt[k]] == 0  # already at its target
                if goals.reached(p, targets[k]) or unchanged:
                    chosen[k].append(int(attempt[k]))
                attempt[k] += 1
                pending[k] = not unchanged and len(chosen[k]) < n_answers and next_untried(k)
        none_valid = np.array([r.cost.size > 0 and not c for r, c in zip(results, chosen, strict=True)])
        tried = none_valid & (reason == "")
        reason[tried] = f"no candidate is given the {aim} by the booster's predict"
        lines = [(k, a, answer) for k in range(n) for answer, a in enumerate(chosen[k] or [-1])]
        owner = np.array([k for k, _, _ in lines], dtype=np.int64)
        m = len(lines)
        out = np.full((m, F), np.nan)
        cost = np.full(m, np.nan)
        source = np.full(m, "none", dtype=object)
        for line, (k, a, _) in enumerate(lines):
            if a >= 0:
                out[line] = results[k].values[a]
                cost[line] = results[k].cost[a]
                source[line] = SOURCES[results[k].source[a]]
        found = np.array([a >= 0 for _, a, _ in lines], dtype=bool)
        table = codec.frame(out)
        prediction = np.full(m, np.nan, dtype=object if isinstance(goals, ClassTargets) else np.float64)
        if found.any():
            prediction[found] = goals.shown(goals.answer(codec.decode(out[found])))
        changed = changed_features(out, Z[owner])
        table["cost"] = cost
        table["prediction"] = prediction
        table["n_changed"] = pd.array(np.where(found, changed.sum(axis=1), 0), dtype="Int64")
        table.loc[~found, "n_changed"] = pd.NA
        table["source"] = source
        table["reason"] = reason[owner]
        return table, owner, np.array([answer for _, _, answer in lines])

    def explain(self, x: Any, target: Any = None, *, desired_range: Any = None) -> pd.DataFrame:
        """The changed features of one row's cheapest tweak.

        Parameters
        ----------
        x : DataFrame with one row, or array-like of shape (n_features,) or (1, n_features)
        target : label or None
            As in :meth:`tweak` (classifiers).
        desired_range : (low, high)
            As in :meth:`tweak` (regressors).

        Returns
        -------
        DataFrame
            One row per changed feature, most costly first: ``feature``, ``from``, ``to``,
            ``change`` (to - from for numerical features, NaN for categorical ones) and ``cost``
            (its scaled distance). Empty when the row already has its target or no tweak was
            found (see :meth:`tweak`'s ``source``).
        """
        if not hasattr(self, "reader_"):
            self.fit()
        if not isinstance(x, pd.DataFrame):
            x = np.asarray(x, dtype=object if self.reader_.structure.feature_is_categorical.any() else float)
            x = x.reshape(1, -1)
        if (x.shape[0] if hasattr(x, "shape") else len(x)) != 1:
            raise InputError("explain takes exactly one row; use tweak for several.")
        table = self.tweak(x, target, desired_range=desired_range)
        columns = ["feature", "from", "to", "change", "cost"]
        if table["source"].iloc[0] in ("none", "unchanged"):
            return pd.DataFrame(columns=columns)
        codec = self._codec or Codec(self.reader_, x)
        names = codec.columns
        z = codec.encode(x)[0]
        tweaked = table[names] if codec.is_frame else table[names].to_numpy()
        z_new = codec.encode(tweaked)[0]
        con = self._constraints(x)
        per = Cost("l1", con.scale, con.weight, self.reader_.structure.feature_is_categorical).per_feature(
            z, z_new[None, :]
        )[0]
        before = codec.frame(z[None, :])
        rows = []
        for f in np.flatnonzero(per[: self.n_features_in_] > 0).tolist():
            cat = bool(self.reader_.structure.feature_is_categorical[f])
            rows.append(
                {
                    "feature": names[f],
                    "from": before.iloc[0, f],
                    "to": table.iloc[0, f],
                    "change": np.nan if cat else z_new[f] - z[f],
                    "cost": per[f],
                }
            )
        return pd.DataFrame(rows, columns=columns).sort_values("cost", ascending=False, ignore_index=True)


def _keep_unencodable(table: pd.DataFrame, X: Any, owner: NDArray[np.int64]) -> None:
    """Show the given value where the encoding could not hold it (a category the model never saw,
    which the booster reads as missing) and the tweak left it: decoded it would read NaN. A found
    tweak never changes a value to missing, so a NaN there is such a value. ``table``'s first
    columns are the features of ``X``'s rows ``owner`` (one per line), changed in place."""
    given = X.iloc[owner] if isinstance(X, pd.DataFrame) else pd.DataFrame(np.asarray(X)[owner])
    found = (table["source"] != "none").to_numpy()
    for j in range(given.shape[1]):
        name = table.columns[j]
        values = given.iloc[:, j].to_numpy()
        lines = np.flatnonzero(found & table[name].isna().to_numpy() & pd.notna(values))
        if lines.size == 0:
            continue
        dtype = table[name].dtype
        if isinstance(dtype, pd.CategoricalDtype):
            unseen = [v for v in pd.unique(values[lines]) if v not in dtype.categories]
            table[name] = table[name].cat.add_categories(unseen)
        elif not (pd.api.types.is_object_dtype(dtype)
                  or (pd.api.types.is_numeric_dtype(dtype) and pd.api.types.is_numeric_dtype(values))):
            table[name] = table[name].astype(object)
        table.iloc[lines, j] = values[lines]


__all__ = ["FeatureTweaking"]
