"""XGBoost adapter: a trained ``xgboost.Booster``, ``XGBClassifier`` or ``XGBRegressor`` -> TreeEnsemble.

Objectives (XGBoost 3.x; the mapping lives in :mod:`.xgboost_objectives`, verified by
tests/adapters/test_xgboost_objectives.py against XGBoost's predict and retraining):

==============================================  ===========================================================
objective                                       status
==============================================  ===========================================================
reg:squarederror (also K targets,               exact (one tree per output per round; multi_squared)
one_output_per_tree)
binary:logistic, reg:logistic, binary:logitraw  exact (logitraw: the label mean is the start margin)
multi:softprob, multi:softmax                   exact (K trees per round, hessian 2 p (1 - p) floored at
                                                1e-16, base = centred log class shares; trained by
                                                3.1: the class shares themselves)
count:poisson                                   exact (hessian e^(m + max_delta_step), leaf steps clipped
                                                to +-max_delta_step, 0.7 by default)
reg:tweedie, reg:gamma                          exact (log link)
reg:pseudohubererror                            exact (huber_slope; base = one Newton step from 0)
reg:absoluteerror, reg:quantileerror (1 alpha)  exact LeafRefit (renewed leaves = XGBoost's weighted
                                                quantile); LeafInfluence is the a.e. derivative
                                                (hist / approx only)
multi_strategy="multi_output_tree"              exact (vector leaves: one tree per output sharing
                                                its leaves; a component below min_child_weight stays 0)
rank:*                                          refused: a row's gradient depends on its whole query
                                                group and the current ranking
survival:cox, survival:aft                      refused: censored labels and risk sets couple rows
reg:squaredlogerror                             refused: hessian floor and margin clamp not modelled
binary:hinge, custom objectives                 refused (custom: by name for a scikit-learn model;
                                                a Booster's base score, 0.5 and not estimated, fails
                                                the base check)
several quantile alphas / targets for a         refused: the engine renews single-output trees;
non-squared-error objective                     train one model per alpha or target
==============================================  ===========================================================

What XGBoost does, and how it lands in the description (verified by the tests of this module):

* **Which trees.** Exactly the trees the model's own ``predict`` uses. ``XGBClassifier`` /
  ``XGBRegressor`` predict, predict_proba and apply with rounds ``[0, best_iteration + 1)`` whenever
  the booster has a ``best_iteration`` attribute (set by early stopping, also when it never fired;
  kept by ``save_model``/``load_model`` and pickle), else with all rounds. ``Booster.predict``
  ignores the attribute and uses every tree, so a Booster is explained on every tree: pass
  ``booster[: booster.best_iteration + 1]`` to explain an ``xgb.train`` early-stopped model as its
  best iteration. Dropping the later trees is exact (boosting is sequential: the first ``r`` rounds
  are the model trained for ``r`` rounds). Leaf ids (``pred_leaf``), leaf values and margins are
  all restricted to those rounds.
* Leaf values come from the JSON model (``save_raw('json')``); a live leaf is a node reachable from
  the root with ``left_children == -1`` (pruned nodes of ``tree_method='exact'`` stay in the arrays,
  marked deleted). Leaves are numbered ``0 .. n_leaves - 1`` in node-id order. The training rows'
  leaves come from our own walk through the trees (:mod:`.xgboost_leaves`: XGBoost's rule for
  numerical splits, checked against ``pred_leaf`` on 512 rows), else (categorical splits, sparse
  input, few rows) from ``pred_leaf``, whose node ids are mapped onto that numbering.
* Leaf value = float32(eta * raw), raw = -ThresholdL1(G, alpha) / (H + lambda), clipped to
  +-max_delta_step when it is nonzero, and 0 when H < min_child_weight; the logistic hessian is
  floored at 1e-16. A grown leaf always has H >= min_child_weight (split constraint), so only a
  root-only tree can store such a 0: it is described with learning rate 0 (deleting rows only
  lowers its H). The self-check tolerance is explained at :meth:`XGBoostAdapter.verify`.
* ``scale_pos_weight`` (spw) multiplies the weight of rows whose label is exactly 1, in every
  ``reg:`` and ``binary:`` objective (also squared error): it is the factor of weight group 1, so
  scores stay per unit of the user's weight.
* **Base score.** Stored as a float32, in probability space for ``binary:logistic``: the start
  margin is ``-logf(1 / b - 1)`` with ``b`` clipped to ``[1e-6, 1 - 1e-6]``, in float32 with the C
  library's ``logf``, as XGBoost computes it (the engine's ``logit32`` link; ``log32`` for the log
  link). When XGBoost estimated it (no user ``base_score``) a retrain re-estimates it, by XGBoost's
  rule: the weighted label mean (``base_rule="mean"``, the weighted loss-minimising constant) when
  ``|spw - 1| <= 1e-6``; otherwise one Newton step from margin 0 with the weights ``w * spw`` on
  label-1 rows (``base_rule="newton_step"``, ``base_anchor = 0``, the step ``-G / max(H, 1e-6)``;
  spw is then the *dataset* factor of group 1, as it enters the estimate; XGBoost stores the step
  as its float32 sigmoid). Pseudo-Huber's intercept is that Newton step too. Each
  estimate is rounded to float32 before its link (``float32_base``), the Newton step's gradient
  pairs too (``float32_base_terms``): the re-estimated margin is the one a retrain starts from, bit
  for bit, for every objective but three (tested against ``eta=0`` retrains): pseudo-Huber (XGBoost
  computes its gradients in float32 arithmetic) and the weighted median within two float32 steps;
  a weighted multiclass intercept (XGBoost sums each class's weights in float32, one row after
  another) within that sum's rounding. It is
  held (``"fixed"``) for a user ``base_score``, for a per-row ``base_margin`` (``init_score`` here:
  it *replaces* the base score in training and prediction, so it becomes ``init_offset`` with
  ``base_margin = 0``, and a re-estimated base score would change nothing), and for a logistic
  estimate at the clip (all labels one class, where deleting a row leaves it there).
* **min_child_weight and XGBoost's refresh updater.** LeafRefit keeps every leaf as Newton leaf of
  its remaining rows. XGBoost's ``refresh`` updater instead zeroes a leaf whose hessian sum falls
  below ``min_child_weight`` (CalcWeight), so LeafRefit with ``base_score="fixed"`` matches
  ``refresh`` only when refresh runs with ``min_child_weight=0``. (Retraining from scratch would
  not grow such a leaf at all: its structure changes, which no fixed-structure method models.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import xgboost as xgb
from numpy.typing import ArrayLike, NDArray

from influence_gbdt.engine import InfluenceEngine
from influence_gbdt.ensemble import TreeEnsemble
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError
from influence_gbdt.labels import LabelMap
from influence_gbdt.tabular import n_rows, take_rows

from .base import BoosterAdapter, check_numeric_params, one_thread, target_matrix
from .xgboost_leaves import JsonTrees, NumericTrees, float32_rows
from .xgboost_objectives import RT_EPS, Objective, objective_from_config
from .xgboost_rounding import rounding_units
from .xgboost_trees import vector_leaf_values

#: Accepted ``params`` keys -> canonical name (XGBoost aliases included).
_ALIASES: dict[str, str] = {
    "eta": "eta",
    "learning_rate": "eta",
    "lambda": "lambda",
    "reg_lambda": "lambda",
    "alpha": "alpha",
    "reg_alpha": "alpha",
    "max_delta_step": "max_delta_step",
    "min_child_weight": "min_child_weight",
    "scale_pos_weight": "scale_pos_weight",
    "subsample": "subsample",
    "monotone_constraints": "monotone_constraints",
    "base_score": "base_score",
    "missing": "missing",
}
#: A leaf within this many float32 rounding bounds (:func:`rounding_units`) is reproduced.
ROUNDING_UNITS = 2.0
_MEASURED_UNITS = 0.6
#: Rows on which :meth:`XGBoostAdapter.leaf_indices` checks its own walk against ``pred_leaf``
#: (about 1 ms for 100 trees).
_CHECKED_ROWS = 512
#: Rows whose leaves one ``predict(pred_leaf=True)`` call reads (its float32 output: 4 bytes per
#: tree and row of them).
_LEAF_ROWS = 131_072


def _f32(value: Any) -> float:
    return float(np.float32(float(value)))


class XGBoostAdapter(BoosterAdapter):
    """Adapter for XGBoost tree models (objectives: module docstring).

    Parameters
    ----------
    model : xgboost.Booster, XGBClassifier or XGBRegressor
        A trained model; tree methods hist, approx and exact.
    params : mapping, optional
        Training parameters that override the model's saved configuration. Needed after
        ``save_model``/``load_model``, which drops them (eta reads back as 0.3): pass e.g.
        ``{'eta': 0.1, 'lambda': 1, 'alpha': 0, 'max_delta_step': 0}``. Aliases (learning_rate,
        reg_lambda, reg_alpha) are accepted; other keys raise InputError. ``base_score`` only marks
        the base score as set by hand (not re-estimated); its value is always read from the model.

    Notes
    -----
    The trees explained are the ones the model's own ``predict`` uses (module docstring): for a
    scikit-learn model fitted with early stopping, rounds ``[0, best_iteration + 1)``; for a
    Booster, every tree. :attr:`n_rounds` holds the number of rounds explained.

    Raises
    ------
    UnsupportedModelError
        Unfitted model, dart or gblinear booster, num_parallel_tree > 1, subsample < 1, monotone
        constraints, or a refused objective (module docstring).

    Examples
    --------
    >>> adapter = XGBoostAdapter(xgb.XGBClassifier(n_estimators=20).fit(X, y))  # doctest: +SKIP
    >>> engine = adapter.prepare(X, y)  # self-checked InfluenceEngine  # doctest: +SKIP
    """

    library: ClassVar[str] = "xgboost"
    #: Relative residual under which the self-check passes at once. Measured with
    #: ``benchmarks/xgboost_self_check.py`` (XGBClassifier() defaults, 100 to 1000 trees): correct data
    #: stays at or below RTOL_MEASURED (Adult, 1,000 to 32,561 rows, numeric or one-hot, with or without
    #: weights), while the least visible wrong data measured, one weight off by 1%, gives WRONG_MIN
    #: (a flipped label, two swapped rows, or eta/lambda lost by load_model: 1e-2 and more). Above rtol
    #: the per-leaf float32 rounding bound decides (:meth:`prepare`): on data whose rows share margins
    #: the rounding alone exceeds any fixed rtol (1.4e-5 on 20,000 rows of rounded features).
    rtol: ClassVar[float] = 1e-6
    #: Our int32 leaf indices (walked by our kernel, or ``pred_leaf`` in runs of rows): 4.6-5.2
    #: bytes per tree and added row, measured (``benchmarks/fit_memory.py``, 100,000 -> 200,000
    #: rows, 100 rounds of 1, 3 and 10 classes), and half more.
    fit_bytes_per_tree_row: ClassVar[float] = 8.0
    data_errors: ClassVar[tuple[type[Exception], ...]] = (xgb.core.XGBoostError,)
    #: The model's objective, with the base link of the release that estimated its base score.
    objective: Objective

    def __init__(self, model: Any, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, params)
        unknown = sorted(set(self.params) - set(_ALIASES))
        if unknown:
            raise InputError(f"params keys {unknown} are not used; accepted keys: {sorted(_ALIASES)}.")
        check_numeric_params("XGBoost", self.params, set(_ALIASES) - {"monotone_constraints"})
        self.booster = self._get_booster(model)
        config = json.loads(self.booster.save_config())["learner"]
        self._check_supported(config)
        tree_param = config["gradient_booster"]["tree_train_param"]
        user = {_ALIASES[k]: v for k, v in self.params.items()}
        self.eta = _f32(user.get("eta", tree_param["eta"]))
        self.reg_lambda = _f32(user.get("lambda", tree_param["lambda"]))
        self.reg_alpha = _f32(user.get("alpha", tree_param["alpha"]))
        self.max_delta_step = _f32(user.get("max_delta_step", tree_param["max_delta_step"]))
        self.min_child_weight = _f32(user.get("min_child_weight", tree_param["min_child_weight"]))
        spw = config["objective"].get("reg_loss_param", {}).get("scale_pos_weight", 1)
        self.scale_pos_weight = _f32(user.get("scale_pos_weight", spw))
        model_param = config["learner_model_param"]
        stored = np.asarray(json.loads(model_param["base_score"]), dtype=np.float32).ravel()
        self.n_outputs = self.objective.loss.n_outputs
        if stored.size != self.n_outputs:  # a single stored value is shared by every output
            stored = np.broadcast_to(stored[:1], (self.n_outputs,))
        self.base_estimated = model_param["boost_from_average"] == "1" and "base_score" not in user
        if self.base_estimated:
            self.objective = self.objective.as_estimated(stored)
        #: The logistic estimate sits at XGBoost's clip (all labels one class): held fixed.
        self._base_clipped = self.objective.clipped(stored)
        #: The start margin of every output, shape (K,).
        self.base_margin: NDArray[np.float64] = self.objective.start_margin(stored)
        self._described_base = self.base_margin  # 0 once described with a per-row base margin
        self.n_rounds = _predicted_rounds(model, self.booster)
        #: A copy of the booster that predicts on one thread, for small inputs (:meth:`_predict`).
        #: Made here, before the model is read: copying serializes the model on XGBoost's threads,
        #: which then spin for milliseconds (measured: a walk of the rows right after a copy 22.5
        #: instead of 17.3 ms); reading the JSON model next keeps this thread busy meanwhile.
        self._single = self.booster.copy()
        self._single.set_param({"nthread": 1})
        self._leaf_map, self._node_offset, self._leaf_values, self._tree_rate = self._leaf_tables()
        self._leaf_l2 = self._l2_terms()  # the L2 term of every described leaf
        self._cat = any(t == "c" for t in (self.booster.feature_types or []))

    # ----------------------------------------------------------------------------- construction
    @staticmethod
    def _get_booster(model: Any) -> xgb.Booster:
        if isinstance(model, xgb.Booster):
            booster = model
        elif isinstance(model, xgb.XGBModel):
            if not isinstance(model, (xgb.XGBClassifier, xgb.XGBRegressor)) and not _dask_wrapper(model):
                raise UnsupportedModelError(
                    f"{type(model).__name__} is not supported: pass an XGBClassifier, XGBRegressor, "
                    "DaskXGBClassifier, DaskXGBRegressor or Booster."
                )
            if not hasattr(model, "_Booster"):
                raise UnsupportedModelError(f"{type(model).__name__} is not fitted: call fit(X, y) first.")
            if callable(model.objective):
                raise UnsupportedModelError(
                    f"{type(model).__name__} trained with a custom objective (a Python callable): its "
                    "gradients are not part of the model, and XGBoost does not estimate a base score for it, "
                    "so leaf values and the base score cannot be reproduced. Retrain with a built-in "
                    "objective."
                )
            booster = model.get_booster()
        else:
            raise UnsupportedModelError(f"{type(model).__name__} is not an XGBoost Booster or sklearn model.")
        try:
            rounds = booster.num_boosted_rounds()
        except xgb.core.XGBoostError as err:
            raise UnsupportedModelError(
                f"The XGBoost Booster is not trained ({err}): train it first."
            ) from err
        if rounds == 0:
            raise UnsupportedModelError("The XGBoost model has no trees: train it first.")
        return booster

    def _check_supported(self, config: dict[str, Any]) -> None:
        booster = config["learner_train_param"]["booster"]
        if booster != "gbtree":
            raise UnsupportedModelError(
                f"XGBoost model trained with booster={booster!r}: "
                + (
                    "dart drops and rescales trees at random, so leaf values cannot be reproduced. "
                    if booster == "dart"
                    else "only tree models are modelled. "
                )
                + "Retrain with booster='gbtree'."
            )
        self.objective = objective_from_config(config)
        self.loss = self.objective.loss.name
        updaters = config["gradient_booster"]["gbtree_train_param"]["updater_seq"]
        if self.objective.renewed and "grow_colmaker" in updaters:
            raise UnsupportedModelError(
                f"XGBoost {self.objective.name} trained with tree_method='exact': that updater keeps no row "
                "positions, so XGBoost does not renew the leaves as quantiles and they are not modelled. "
                "Retrain with tree_method='hist' (the default) or 'approx'."
            )
        gb = config["gradient_booster"]
        if gb["gbtree_model_param"]["num_parallel_tree"] != "1":
            raise UnsupportedModelError(
                "XGBoost model trained with num_parallel_tree > 1 (boosted random forest): trees of one "
                "round share their margins, which is not modelled. Retrain with num_parallel_tree=1."
            )
        tree_param = {**gb["tree_train_param"], **{_ALIASES[k]: v for k, v in self.params.items()}}
        if float(tree_param["subsample"]) < 1:
            raise UnsupportedModelError(
                f"XGBoost model trained with subsample={float(tree_param['subsample']):g}: rows used per "
                "tree are not recorded, so leaf values cannot be reproduced. Retrain with subsample=1."
            )
        if _has_constraint(tree_param.get("monotone_constraints", "()")):
            raise UnsupportedModelError(
                "XGBoost model trained with monotone_constraints: they clip leaf values against their "
                "neighbours, which is not modelled. Retrain without monotone constraints."
            )

    def _leaf_tables(
        self,
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], list[NDArray[np.float64]], NDArray[np.float64]]:
        """Live leaves of the explained trees: node -> leaf number map (flat over trees), node
        offsets, leaf values, and each tree's learning rate (0 for a root-only tree that stores 0
        because its hessian sum is below min_child_weight). Sets :attr:`_walker`, the trees for
        :meth:`leaf_indices`' own walk (None with categorical splits)."""
        model = json.loads(self.booster.save_raw("json"))["learner"]["gradient_booster"]["model"]
        n_trees = int(model["iteration_indptr"][self.n_rounds])
        trees = model["trees"][:n_trees]
        #: Outputs each of XGBoost's trees adds to: 1, or K for vector leaves (multi_output_tree),
        #: whose tree is described as K trees of one round sharing its leaves, one per output.
        self._vector = max(int(trees[0]["tree_param"].get("size_leaf_vector", "1")) if trees else 1, 1)
        #: Output (class, target) and round of every described tree, shape (n_trees * _vector,).
        indptr = np.asarray(model["iteration_indptr"][: self.n_rounds + 1], dtype=np.int64)
        rounds = np.repeat(np.arange(self.n_rounds), np.diff(indptr))
        self._tree_round = np.repeat(rounds, self._vector)
        flat = JsonTrees.read(trees)
        roots = flat.start[:-1]
        self._walker = NumericTrees.of(flat)
        if self._vector > 1:
            self._tree_output = np.tile(np.arange(self._vector, dtype=np.int64), n_trees)
            values = self._vector_leaves(trees, flat)
            return flat.leaf_number, roots.copy(), values, np.full(len(values), self.eta)
        self._tree_output = np.asarray(model["tree_info"][:n_trees], dtype=np.int64)
        leaf_values = flat.condition[flat.leaf_number >= 0]  # tree by tree, in leaf-number order
        hessian = np.fromiter((tree["sum_hessian"][0] for tree in trees), dtype=np.float64, count=n_trees)
        # A root-only tree storing 0 because its hessian sum is below min_child_weight: rate 0.
        zero = (flat.left[roots] < 0) & (flat.condition[roots] == 0) & (hessian < self.min_child_weight)
        rates = np.where(zero & (not self.objective.renewed), 0.0, self.eta)
        return flat.leaf_number, roots.copy(), np.split(leaf_values, np.cumsum(flat.n_leaves)[:-1]), rates

    def _vector_leaves(self, trees: list[dict[str, Any]], flat: JsonTrees) -> list[NDArray[np.float64]]:
        """The leaf values of vector-leaf trees, one array per output of each tree (tree by tree,
        output by output), in leaf-number order (:func:`.xgboost_trees.vector_leaf_values`)."""
        K = self._vector
        out: list[NDArray[np.float64]] = []
        for t, tree in enumerate(trees):
            leaf_nodes = np.flatnonzero(flat.leaf_number[flat.start[t] : flat.start[t + 1]] >= 0)
            vectors = vector_leaf_values(tree, leaf_nodes, K)
            out.extend(np.ascontiguousarray(vectors[:, k]) for k in range(K))
        return out

    def _l2_terms(self) -> float | list[NDArray[np.float64]]:
        """Each leaf's L2 term: ``lambda``, and for vector leaves infinite where XGBoost stored an
        output's component as 0. XGBoost computes each component as a one-output leaf of that
        output's sums (``CalcWeight``), which is 0 where its hessian sum is below
        ``min_child_weight``; the split constraint is on the sum over the outputs, so such
        components sit inside grown leaves. An infinite L2 term keeps the component at 0 in the
        replay, its derivatives 0, and 0 without a row (deleting rows only lowers its hessian sum).
        A Newton component is exactly 0 only where its gradient sum is 0 or within ``alpha``."""
        if self._vector == 1 or self.min_child_weight <= 0:
            return float(self.reg_lambda)
        return [np.where(v == 0.0, np.inf, float(self.reg_lambda)) for v in self._leaf_values]

    # ----------------------------------------------------------------------------- data access
    def model_features(self) -> tuple[int, list[str] | None]:
        """(number of features, the booster's feature names or None)."""
        names = self.booster.feature_names
        return self.booster.num_features(), None if names is None else list(names)

    def check_features(self, X: Any) -> None:
        """:meth:`BoosterAdapter.check_features`, and for a DataFrame: each column categorical
        exactly where the model's feature is (``feature_types`` ``"c"``). XGBoost's own ``predict``
        refuses the other way round (integer codes or values for a categorical feature, a category
        column for a numeric one); a DMatrix built from it would read the codes as numbers.

        Raises
        ------
        InputError
            Naming the columns and the dtype they need.
        """
        super().check_features(X)
        types = self.booster.feature_types
        if not isinstance(X, pd.DataFrame) or not types:
            return
        is_cat = [isinstance(d, pd.CategoricalDtype) for d in X.dtypes]
        columns = list(zip(X.columns, types, is_cat, strict=True))
        need_cat = [str(c) for c, t, cat in columns if t == "c" and not cat]
        need_num = [str(c) for c, t, cat in columns if t != "c" and cat]
        parts = [f"{need_cat} are categorical features of the model but not pandas 'category' columns "
                 "(convert them with .astype(pd.CategoricalDtype(categories)), the training categories)"
                 ] if need_cat else []
        if need_num:
            parts.append(f"{need_num} are numeric features of the model but 'category' columns")
        if parts:
            raise InputError(f"X's column dtypes differ from the XGBoost model's feature types: "
                             f"{'; '.join(parts)}. XGBoost's own predict refuses them too.")

    @property
    def missing(self) -> float:
        """The value XGBoost reads as missing: ``params['missing']``, else the scikit-learn model's
        ``missing`` (a Booster does not record it: NaN)."""
        value = self.params.get("missing", getattr(self.model, "missing", None))
        return np.nan if value is None else float(value)

    def _dmatrix(
        self, X: Any, base_margin: ArrayLike | None = None, nthread: int | None = None
    ) -> xgb.DMatrix:
        if isinstance(X, xgb.DMatrix):
            raise InputError("Pass X as a numpy array or pandas DataFrame, not a DMatrix.")
        return xgb.DMatrix(
            X, base_margin=base_margin, missing=self.missing,
            enable_categorical=self._cat or hasattr(X, "dtypes"), nthread=nthread,
        )

    def _predict(self, X: Any, base_margin: ArrayLike | None = None, **kwargs: Any) -> NDArray[Any]:
        """``Booster.predict`` on ``X``; an array is read by position (as XGBClassifier.predict does),
        a DataFrame by the names :meth:`check_features` compared. Small inputs
        (:func:`.base.one_thread`) on one thread, by a one-thread DMatrix and a one-thread copy of the
        booster (both building the DMatrix and predicting on XGBoost's threads were measured to slow
        the sweep that follows; the booster's own ``nthread`` is the user's, and
        ``xgb.config_context(nthread=1)`` was measured to leave OpenMP on one thread for the user's
        later predictions)."""
        single = one_thread(n_rows(X), self._node_offset.size)
        booster = self._single if single else self.booster
        with self.reading():
            dm = self._dmatrix(X, base_margin, nthread=1 if single else None)
            return np.asarray(booster.predict(dm, validate_features=hasattr(X, "columns"), **kwargs))

    def leaf_indices(self, X: Any) -> NDArray[np.int32]:
        """Leaf of every row in every described tree, ndarray of shape (n_trees, n_rows), int32,
        ``0 .. n_leaves-1`` (a vector-leaf tree's row repeated for each of its outputs).

        Many rows of a dense numeric ``X`` are walked through the trees by our own kernel
        (:mod:`.xgboost_leaves`, 2-3x faster than ``pred_leaf``), which is checked against XGBoost's
        ``pred_leaf`` on :data:`_CHECKED_ROWS` rows spread over ``X`` (XGBoost answers where they
        differ). Otherwise XGBoost's ``pred_leaf``, :data:`_LEAF_ROWS` rows at a time: its float32
        node ids for all rows, and int64 copies of them, would be 4-24 bytes per tree and row on top
        of the result (2.8 GB at 1e6 rows x 100 trees)."""
        leaves = self._tree_leaves(X)
        return np.repeat(leaves, self._vector, axis=0) if self._vector > 1 else leaves

    def _tree_leaves(self, X: Any) -> NDArray[np.int32]:
        """:meth:`leaf_indices` per tree of XGBoost's, shape (XGBoost's trees, n_rows)."""
        n = n_rows(X)
        if self._walker is not None and not one_thread(n, self._node_offset.size):
            rows = float32_rows(X, self.missing)
            if rows is not None:
                leaves = self._walker.leaves(*rows, n_threads=self.n_threads)
                del rows
                check = np.unique(np.linspace(0, n - 1, min(n, _CHECKED_ROWS)).astype(np.int64))
                if np.array_equal(leaves[:, check], self._pred_leaf(take_rows(X, check))):
                    return leaves
        leaves = np.empty((self._node_offset.size, n), dtype=np.int32)
        for start in range(0, n, _LEAF_ROWS):
            stop = min(start + _LEAF_ROWS, n)
            part = X if stop - start == n else take_rows(X, np.arange(start, stop))
            leaves[:, start:stop] = self._pred_leaf(part)
        return leaves

    def _pred_leaf(self, X: Any) -> NDArray[np.int32]:
        """XGBoost's ``pred_leaf`` of ``X`` as our leaf numbers, shape (n_trees, n_rows), int32."""
        nodes = self._predict(X, pred_leaf=True, iteration_range=(0, self.n_rounds)).reshape(n_rows(X), -1)
        leaves = np.empty((nodes.shape[1], nodes.shape[0]), dtype=np.int32)
        for t in range(nodes.shape[1]):
            leaves[t] = self._leaf_map[nodes[:, t].astype(np.int64) + self._node_offset[t]]
        if leaves.size and leaves.min() < 0:
            raise InputError("XGBoost returned a node id that is not a leaf of the model: the model changed.")
        return leaves

    def raw_predict(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """XGBoost's margin (``output_margin=True``) with the explained rounds, as the model's own
        ``predict`` computes it, ndarray of shape (n_rows,), or (n_rows, K) for K outputs."""
        margin = None if init_score is None else self._per_row_margin(X, init_score).astype(np.float32)
        out = self._predict(X, margin, output_margin=True, iteration_range=(0, self.n_rounds))
        out = np.asarray(out, dtype=np.float64).reshape(n_rows(X), -1)
        return out[:, 0] if self.n_outputs == 1 else out

    def _per_row_margin(self, X: Any, init_score: ArrayLike) -> NDArray[np.float64]:
        """The user's per-row base margin, float32-rounded as XGBoost stores it, shape (n_rows, K)."""
        n, K = n_rows(X), self.n_outputs
        arr = np.asarray(init_score, dtype=np.float64)
        if arr.size != n * K or (K > 1 and arr.shape != (n, K)):
            shape = f"({n},)" if K == 1 else f"({n}, {K})"
            raise InputError(f"init_score must have shape {shape} for this model, got {arr.shape}.")
        return arr.reshape(n, K).astype(np.float32).astype(np.float64)

    def init_offset(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """Offset of each row's initial margin from the description's ``base_margin``, shape (n_rows,),
        or (n_rows, K) for K outputs.

        A per-row base margin replaces XGBoost's base score, so the offset is ``init_score`` minus the
        description's base margin (which is 0 when the model was described with a per-row base margin);
        rows without one start at the base score. The engine margin then equals :meth:`raw_predict`.
        """
        start = (np.broadcast_to(self.base_margin, (n_rows(X), self.n_outputs)) if init_score is None
                 else self._per_row_margin(X, init_score))
        offset = start - np.asarray(self._described_base)[None, :]
        return offset[:, 0] if self.n_outputs == 1 else np.ascontiguousarray(offset)

    @property
    def hint(self) -> str:
        """Likely causes of a failed self-check."""
        return (
            "If the model was reloaded with load_model, XGBoost dropped its training parameters (eta reads "
            "back as 0.3): pass them as params={'eta': ..., 'lambda': ..., 'alpha': ..., 'max_delta_step': "
            "..., 'min_child_weight': ...}. Otherwise pass exactly the training rows in training order, with "
            "the labels, sample weights and base_margin (init_score) the model was trained with. (A Booster "
            "trained with a custom objective, xgb.train(obj=...), cannot be reproduced: its gradients are "
            "not in the model.)"
        )

    def verify(self, engine: InfluenceEngine) -> InfluenceEngine:
        """Prove the description reproduces the model (see :meth:`BoosterAdapter.verify`).

        The stored leaves pass when the relative residual is at most :attr:`rtol`, or else when every
        recomputed leaf lies within :data:`ROUNDING_UNITS` times its own float32 rounding bound
        (:func:`rounding_units`): XGBoost's float32 rounding grows with the rows that share a margin,
        which no single relative tolerance can follow.

        Raises
        ------
        ReproductionError
            Saying how far the worst leaf is from float32 rounding.
        """
        if engine.relative_residual <= self.rtol:
            return engine
        units = rounding_units(engine)
        worst = int(np.argmax(units))
        if units[worst] <= ROUNDING_UNITS:
            return engine
        verdict = (
            "far above float32 rounding, so the data or parameters are not those of training"
            if units[worst] > 20 * ROUNDING_UNITS
            else "close to float32 rounding: if the data and parameters are exactly those of training, "
            "please report this model"
        )
        raise ReproductionError(
            f"The model is not reproduced from the data given: recomputed leaf values differ from the "
            f"stored ones by {engine.relative_residual:.3g} (relative; tolerance {self.rtol:.1g}). The worst "
            f"leaf, in tree {worst}, is off by {units[worst]:.3g} times its float32 rounding bound (correct "
            f"data stays below {_MEASURED_UNITS}): {verdict}. xgboost: {self.hint}"
        )

    def describe(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
    ) -> TreeEnsemble:
        """Describe the model on its training data ``X`` (n rows), labels ``y`` of shape (n,) (the
        class labels for a classifier; shape (n, K) for K regression targets).

        ``sample_weight`` (n,) are the user's weights; ``init_score`` (n,) or (n, K) the per-row
        base_margin used in training, if any. No self-check: see :meth:`prepare`.
        """
        labels = np.asarray(self.encode_labels(y), dtype=np.float32).astype(np.float64)
        n = labels.shape[0]
        if n_rows(X) != n:
            raise InputError(f"X has {n_rows(X)} rows but y has {n}.")
        user_w = (
            np.ones(n) if sample_weight is None else np.asarray(sample_weight, np.float32).astype(np.float64)
        )
        if user_w.shape != (n,):
            raise InputError(f"sample_weight must have shape ({n},), got {user_w.shape}.")
        rule = self._base_rule(init_score)
        # scale_pos_weight: the factor of group 1 (label exactly 1). It enters the Newton-step base
        # estimate (a dataset factor) but not the weighted label mean (then an objective factor).
        spw = self.objective.spw_applies and labels.shape[1:] in ((), (1,))
        groups = (labels.reshape(n, -1)[:, 0] == 1.0).astype(np.int64) if spw else np.zeros(n, np.int64)
        # Both groups even where the rows hold one class (a Dask partition's sums add up by group).
        factor = np.array([1.0, self.scale_pos_weight]) if spw else np.ones(1)
        self._described_base = np.zeros(self.n_outputs) if init_score is not None else self.base_margin
        offset = None if init_score is None else self.init_offset(X, init_score)
        obj = self.objective
        return TreeEnsemble.build(
            leaf_index=self.leaf_indices(X),
            leaf_values=self._leaf_values,
            y=labels,
            loss=obj.loss,
            tree_output=self._tree_output,
            tree_round=self._tree_round,
            learning_rate=self._tree_rate,
            newton=True,
            l2=self._leaf_l2,
            l1=self.reg_alpha,
            max_delta_step=self.max_delta_step,
            renewed=obj.renewed,
            quantile_alpha=obj.alpha,
            quantile_method="xgboost",
            quantile_weighted=sample_weight is not None,
            base_margin=self._described_base,
            base_rule=rule,
            base_anchor=0.0,
            base_link=obj.base_link,
            init_offset=offset,
            user_weight=user_w,
            weight_group=groups,
            dataset_factor=1.0 if rule == "mean" else factor,
            objective_factor=factor if rule == "mean" else 1.0,
            float32_weights=True,
            float32_base=True,  # XGBoost stores its estimate as a float32, its link computes in float32
            float32_base_terms=rule == "newton_step",  # its Newton step sums float32 gradient pairs
        )

    @property
    def base_hint(self) -> str:
        """A Booster trained with a custom objective (``xgb.train(obj=...)``) keeps base_score 0.5:
        XGBoost estimates none for it, and its gradients are not in the model. A model trained by
        XGBoost 2.x (measured at 2.1.0; 3.0 by its source) and loaded into a newer release estimated
        its base score by one Newton step from margin 0 (:mod:`.versions`), not by the rule of the
        release that loads it."""
        return (super().base_hint + " A Booster trained with a custom objective (xgb.train(obj=...)) keeps "
                "base_score 0.5, unestimated, and is not supported: retrain with a built-in objective. "
                "A model trained by XGBoost before 3.1 (then saved and loaded) estimated it by another "
                "rule: retrain it with this release.")

    def _base_rule(self, init_score: ArrayLike | None) -> str:
        """How a retrain would re-estimate the base score (module docstring)."""
        if not self.base_estimated or init_score is not None or self._base_clipped:
            return "fixed"
        if self.objective.estimated_rule == "mean" and abs(self.scale_pos_weight - 1.0) > RT_EPS:
            return "newton_step"
        return self.objective.estimated_rule

    def label_map(self) -> LabelMap:
        """Classes of a classifier: the scikit-learn model's ``classes_`` (XGBoost needs them to be
        ``0 .. K-1``, so users label-encode string labels first), or ``0 .. K-1`` for a Booster; the
        base class's rule otherwise. ``xgboost.dask`` classifiers list ``classes_`` in the order the
        labels first appear (``y.drop_duplicates()``, e.g. ``[1, 0]``) while training on the raw
        label values: their classes are sorted here (taken in that order, every label would be read
        as another class)."""
        classes = getattr(self.model, "classes_", None)
        if classes is not None and _dask_wrapper(self.model) and self.loss in ("logloss", "softmax"):
            return LabelMap(classes=tuple(np.sort(np.asarray(classes))),
                            source=f"{type(self.model).__name__}.classes_ (sorted)")
        if self.loss != "softmax":
            return super().label_map()
        if classes is not None:
            return LabelMap(classes=tuple(classes), source=f"{type(self.model).__name__}.classes_")
        return LabelMap(classes=tuple(range(self.n_outputs)), source="A raw xgboost Booster (classes 0..K-1)")

    def encode_labels(self, y: ArrayLike) -> NDArray[np.float64]:
        """Labels as the loss sees them: shape (n, K) numbers for K regression targets, else as
        :meth:`BoosterAdapter.encode_labels`."""
        if self.loss != "multi_squared":
            return super().encode_labels(y)
        return target_matrix(y, self.n_outputs)


def _dask_wrapper(model: Any) -> bool:
    """Whether ``model`` is ``xgboost.dask``'s DaskXGBClassifier or DaskXGBRegressor (checked by
    name: importing ``xgboost.dask`` needs Dask)."""
    return type(model).__module__ == "xgboost.dask" and type(model).__name__ in (
        "DaskXGBClassifier", "DaskXGBRegressor")


def _predicted_rounds(model: Any, booster: xgb.Booster) -> int:
    """Rounds the model's own ``predict`` uses: ``best_iteration + 1`` for a scikit-learn model whose
    booster has the attribute (``XGBModel._get_iteration_range``), else all of them."""
    rounds = int(booster.num_boosted_rounds())
    best = booster.attr("best_iteration")
    if isinstance(model, xgb.XGBModel) and best is not None:
        return min(int(best) + 1, rounds)
    return rounds


def _has_constraint(value: Any) -> bool:
    """Whether a monotone_constraints setting (string "(1,0)", tuple, list or dict) has a nonzero entry."""
    if isinstance(value, Mapping):
        value = list(value.values())
    text = value if isinstance(value, str) else ",".join(map(str, value))
    return any(int(c) != 0 for c in re.findall(r"(?<![\w.])-?\d+", text))

