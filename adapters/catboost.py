"""Adapter for CatBoost models (``CatBoost``, ``CatBoostClassifier``, ``CatBoostRegressor``).

CatBoost computes a leaf by ``leaf_estimation_iterations`` Newton or Gradient steps taken at the
margins moved by the earlier steps of the same tree, with L2 ``l2_leaf_reg * sum(w) / N``, and
stores ``learning_rate * sum of steps``. With ``leaf_estimation_backtracking='AnyImprovement'`` each
step is tried at scale 1, 1/2, 1/4, ... and accepted as soon as the whole training set's weighted
mean loss falls; every rejected try uses up one of the iterations, and a tree may end with tries
that were never accepted. For Logloss CatBoost computes that loss in exp space with a fast exp and
log in float32 lanes (x86-64), so near-ties are decided by its arithmetic: the engine decides every
step itself with the same arithmetic (``backtracking_objective="fast_logloss"``, see
:mod:`influence_gbdt.engine.fastobj`) and the self-check proves the decisions. That arithmetic splits rows
into ranges by the training thread count when 10,000 < N < 100,000; the model does not record it, so
:meth:`CatBoostAdapter.verify` finds it (``params={"thread_count": k}`` gives it directly).

Objectives: Logloss, CrossEntropy, RMSE, Poisson, Tweedie, Huber, Quantile / MAE (Exact leaves),
MultiClassOneVsAll, MultiRMSE and MultiClass (Newton: one joint step with the full softmax
hessian; or Gradient) are reproduced exactly; the table of what is refused and why is in
:mod:`influence_gbdt.adapters.catboost_objectives`. A model with K outputs (classes, targets) is
described as K engine trees per CatBoost tree, one per output, sharing its structure, in one round.

What "without the row" means (LeafRefit)
----------------------------------------
LeafRefit is CatBoost retrained with the row *deleted*, the tree structures fixed. That is not the
same as giving the row weight 0, in two ways CatBoost's own retraining shows:

- ``N`` in the L2 term ``l2_leaf_reg * sum(w) / N`` counts learn rows, weight-0 rows included, so
  deletion gives ``N - 1`` (measured: the weight-0 and the deletion retrain differ by ~4e-4 in the
  leaves). The description gives ``l2_leaf_reg`` as ``l2_per_mean_weight``; the engine divides by
  ``N - 1`` when it deletes a row.
- ``auto_class_weights`` are derived from the data: ``max_j S_j / S_k`` (Balanced) or its square
  root (SqrtBalanced), ``S_k`` = class ``k``'s row count or sum of sample weights, *truncated to an
  integer* (CatBoost passes the float sums through ``ui64``). The class weights without each row
  are recomputed that way (``dataset_factor_without``); with row counts every deletion moves them.
  Their derivative in a row's weight is 0 almost everywhere (the truncation is a step function), so
  LeafInfluence holds them; with integer weights (no sample weights: counts) a weight just below
  its value already moves a sum's integer part, so LeafInfluence is the derivative for an increase.
  ``class_weights`` and ``scale_pos_weight`` are constants and stay.

What a retrain from scratch would also change, and LeafRefit keeps: the *auto* learning rate
(``learning_rate`` unset, ``lr = f(N, iterations, ...)``; CatBoost recomputes it from the row count,
e.g. 0.063299 for N = 500 and 0.063245 for N = 499; an ``eval_set`` changes it too), the
quantization borders (deletion re-quantizes; pass the original ones as ``input_borders`` to
compare) and, with bootstrap or ``random_strength``, the random draws that choose the structures.
LeafRefit keeps the trained learning rate.

Categorical features with CTRs (target statistics)
--------------------------------------------------
A categorical feature with more values than ``one_hot_max_size`` (the default 2) is split on by
CTRs, whose values for a training row were computed online along CatBoost's averaging-fold
permutation. :mod:`adapters.catboost_ctr` rebuilds the leaf every training row visited when the leaf
values were estimated (CPU, symmetric trees, Borders and Counter CTRs, Plain and Ordered, Logloss,
RMSE, MultiClass and MultiClassOneVsAll, whose Borders CTRs count the rows of a class above each of
the K - 1 borders between classes); test rows get ``calc_leaf_indexes`` (the final CTR tables, what
``predict`` uses). CatBoost also sums the AnyImprovement objective in averaging-fold order, which
float32 near-ties depend on: the description carries that order (``objective_order``). A model whose
categorical features are all one-hot encoded (no CTRs) still shuffles its learn set and sums the
objective in that shuffled order. Pass the training rows in training order, categorical values as
trained: the order fixes the permutations. Other CTR settings are refused by name.

A row's *weight* never enters a CTR statistic (CatBoost counts rows), so LeafInfluence is exact
with no CTR channel. LeafRefit deletes the row from the leaf-value estimation as above **and
keeps its label in every CTR statistic**: every other row keeps its training-time leaf and test
rows their final-table leaf. Why that default: CTR values are part of the structure the rows
see, which LeafRefit holds fixed; it is what CatBoost itself does when the row's weight goes to
0 (the random stream is unchanged), so it is checked against CatBoost (with ``l2_leaf_reg=0``,
where deletion and weight 0 coincide: equal to 1e-13); it is the finite counterpart of
LeafInfluence. The label's own channel (rows after it in its bucket lose its count, the final
tables change) is discrete, and CatBoost's deletion retrain also redraws every permutation (the
learn shuffle takes one draw less), which no method predicts; removing the label with the order
kept is CatBoost's deletion only for ``has_time=True`` models and is not offered.

Early stopping: the model holds the trees ``predict`` uses (``best_iteration_ + 1`` of them with
``use_best_model``, the default with an ``eval_set``; every tree trained up to the stop without it),
and those are the trees explained.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import catboost
import numpy as np
from numpy.typing import ArrayLike, NDArray

from influence_gbdt.engine import InfluenceEngine
from influence_gbdt.engine.fastobj import fast_exp_scalar
from influence_gbdt.ensemble import TreeEnsemble
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError
from influence_gbdt.labels import LabelMap
from influence_gbdt.losses import Loss
from influence_gbdt.tabular import n_rows

from . import catboost_ctr
from .base import BoosterAdapter, target_matrix, tree_major
from .catboost_objectives import CatBoostObjective, parse_objective

#: CatBoost's losses whose approx is kept in exp space (``IsStoreExpApprox``) and started at
#: ``fast_exp(bias)`` under boost_from_average (Poisson, also exp space, refuses boost_from_average).
_EXP_SPACE = ("Logloss", "CrossEntropy")

#: Relative residual up to which every tree may differ by rounding alone (float32 epsilon ~1.2e-7;
#: wrong data measured >= 5.8e-6, see ``rtol``).
_FLOAT32_LEVEL = 1e-7


def _f32(a: ArrayLike) -> NDArray[np.float64]:
    return np.asarray(a, dtype=np.float32).astype(np.float64)


class CatBoostAdapter(BoosterAdapter):
    """Describe a trained CatBoost model with Logloss or RMSE (Plain or Ordered boosting).

    Parameters
    ----------
    model : catboost.CatBoost, CatBoostClassifier or CatBoostRegressor
        A trained model (also one loaded with ``load_model``).
    params : mapping, optional
        Only ``{"thread_count": k}``, the training thread count, which CatBoost does not record and
        its backtracking arithmetic depends on for 10,000 < N < 100,000 rows (found by trial when
        not given). Every other training parameter is read from the model (``get_all_params``).
    """

    library: ClassVar[str] = "catboost"
    data_errors: ClassVar[tuple[type[Exception], ...]] = (catboost.CatBoostError,)
    #: Relative self-check tolerance. Measured on the training data (CatBoost 1.2.10): <= 6e-16 over
    #: Logloss / RMSE, Newton / Gradient, 1-10 steps, Plain / Ordered, weights, class weights;
    #: 3.1e-15 for ``CatBoostClassifier()`` on Adult's numeric columns (1000 trees x 10 Newton steps
    #: with AnyImprovement, every tree reproduced); up to 2.4e-13 where the tie search stops at its
    #: 1e-13 match (Ordered, 1000 trees). On wrong data: one weight of 600 off by 0.1% gives >= 5.8e-6,
    #: one label changed >= 2.1e-2, weights left out >= 0.1 (every tree then differs). 1e-10 is 400
    #: times the largest correct residual and 1/50000 of the smallest wrong one.
    rtol: ClassVar[float] = 1e-10
    #: Our int32 copy of the leaf indices per described tree and row, and a quarter more (CatBoost's
    #: own output per CatBoost tree: :meth:`fit_bytes`).
    fit_bytes_per_tree_row: ClassVar[float] = 5.0

    def __init__(self, model: Any, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, params)
        if not hasattr(model, "get_all_params") or not model.is_fitted():
            raise UnsupportedModelError("The CatBoost model is not trained: call fit() before wrapping it.")
        _refuse_model_kind(model, self.params)
        self._p: dict[str, Any] = model.get_all_params()
        recorded = int(self._p.get("thread_count", -1) or -1)
        default = recorded if recorded > 0 else os.cpu_count() or 1
        self._threads = int(self.params.get("thread_count", default))
        p = self._p
        self.objective: CatBoostObjective = parse_objective(p)
        self.loss = self.objective.loss
        backtracking = p.get("leaf_estimation_backtracking", "No")
        self._json: dict[str, Any] = json.loads(self._json_text())
        self._ctr = bool(self._json["features_info"].get("ctrs"))
        ctr_why = catboost_ctr.ctr_refusal(p, self._json, str(p.get("loss_function", "")).split(":")[0])
        refusals = [
            (any(float(c) != 0 for c in _constraints(p)),
             "monotone_constraints change the leaf values; retrain without them"),
            (p.get("posterior_sampling", False),  # before langevin, which CatBoost turns on with it
             "posterior_sampling=True adds random noise to the leaves; retrain without it"),
            (p.get("langevin", False), "langevin=True adds random noise to the leaves; retrain without it"),
            (float(p.get("model_shrink_rate", 0) or 0) > 0,
             "model_shrink_rate > 0 shrinks the model every iteration; retrain with model_shrink_rate=0"),
            (backtracking not in ("No", "AnyImprovement"),
             f"leaf_estimation_backtracking={backtracking!r} is not modelled; use 'AnyImprovement' or 'No'"),
            (ctr_why is not None, f"its categorical features are encoded with CTRs (target statistics) "
             f"and {ctr_why}"),
        ]
        for bad, why in refusals:
            if bad:
                raise UnsupportedModelError(f"Cannot reproduce this CatBoost model: {why}.")

    def _check(self, engine: InfluenceEngine) -> None:
        e, r = engine.ensemble, engine.relative_residual
        scale = float(np.abs(e.leaf_values).max()) or 1.0
        off = np.flatnonzero(engine.tree_residual > self.rtol * scale)
        # Other data changes every tree (every row is in a leaf of each); an unresolved near-tie of
        # backtracking changes the tree it is in (measured: 2-4 of 50-100 trees when ties are not
        # searched), as margins move by the stored leaf values.
        few = off.size <= e.n_trees // 4 and bool(np.all(e.backtracking[off]))
        if off.size and (r <= _FLOAT32_LEVEL or few):
            cause = (
                f"{'Those trees take' if off.size > 1 else 'That tree takes'} AnyImprovement steps whose "
                "accept/reject decisions are near-ties that the replay of CatBoost's float arithmetic "
                f"decided otherwise (its thread count tried: {e.objective_threads})"
                if few else
                "Every difference is below float32 rounding: a value CatBoost stores as float32 (labels, "
                "weights, baseline, class weights) was given or rounded otherwise"
            )
            raise ReproductionError(
                f"The CatBoost model is reproduced except for rounding: recomputed leaf values differ "
                f"from the stored ones by {r:.3g} (relative; tolerance {self.rtol:.0e}) in {off.size} of "
                f"{e.n_trees} trees (first: tree {off[0]}). {cause}. The data looks like the training "
                f"data, but scores would be approximate: please report this model (catboost "
                f"{catboost.__version__})."
            )
        engine.check_reproduction(
            rtol=self.rtol,
            hint=f"{self.library}: {off.size} of {e.n_trees} trees differ. {self.hint}",
        )

    def _json_text(self) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.json")
            self.model.save_model(path, format="json")
            with open(path) as fh:
                return fh.read()

    def _pool(self, X: Any) -> Any:
        if isinstance(X, catboost.Pool):
            return X
        return catboost.Pool(X, cat_features=list(self.model.get_cat_feature_indices()) or None)

    @property
    def n_outputs(self) -> int:
        """Entries of a leaf value: the classes or targets of a multi-output loss, else 1."""
        return int(np.size(self.model.get_scale_and_bias()[1])) if self.objective.multi_output else 1

    def init_offset(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """Per-row baseline, shape (n_rows,) or (n_rows, K) for K outputs, rounded to float32 as
        CatBoost stores it."""
        K = self.n_outputs
        if K == 1:
            return _f32(super().init_offset(X, init_score))
        n = n_rows(X)
        if init_score is None:
            return np.zeros((n, K))
        offset = np.asarray(init_score, dtype=np.float64)
        if offset.shape != (n, K):
            raise InputError(f"init_score must have shape ({n}, {K}) (one value per row and output), "
                             f"got {offset.shape}.")
        return _f32(offset)

    @property
    def hint(self) -> str:
        return (
            "Pass exactly the training rows in training order (numpy or DataFrame, categorical columns "
            "as in training), the labels, the user sample weights and any baseline (init_score)."
        ) + (
            " With CTRs the order matters: it fixes CatBoost's permutations. A model trained with "
            "counter_calc_method='Full' and an eval_set counted the eval rows in its Counter CTRs, "
            "which are not given here: retrain with counter_calc_method='SkipTest' (the default)."
            if self._ctr and str(self._p.get("counter_calc_method")) == "Full" else
            " With CTRs the order matters: it fixes CatBoost's permutations (a model trained on a "
            "Pool with group_id permuted whole groups, which is not supported)." if self._ctr else ""
        )

    def model_features(self) -> tuple[int, list[str] | None]:
        """(number of features, the model's feature names, None for CatBoost's "0", "1", ...)."""
        names = [str(name) for name in self.model.feature_names_]
        return len(names), None if names == [str(i) for i in range(len(names))] else names

    def leaf_indices(self, X: Any) -> NDArray[np.int32]:
        """Leaf of every row in every tree, ndarray of shape (n_trees * K, n_rows), int32: a
        model with K outputs is described as K trees (one per output) per CatBoost tree."""
        with self.reading():
            leaves = self.model.calc_leaf_indexes(self._pool(X))
        by_tree = tree_major(leaves, leaves.shape[1], self.n_threads)
        return by_tree if self.n_outputs == 1 else np.repeat(by_tree, self.n_outputs, axis=0)

    def fit_bytes(self, n_trees: int, n_rows: int) -> float:
        """As :meth:`.BoosterAdapter.fit_bytes`. CatBoost gives each row's leaf once per CatBoost
        tree, which a model of K outputs describes as K trees (:meth:`leaf_indices`): per CatBoost
        tree and row, CatBoost's uint32 and our int32 transposition (8 bytes), and per described
        tree and row our int32 copy (4; :attr:`fit_bytes_per_tree_row`), each with a quarter more.
        Measured (``benchmarks/fit_memory.py``, 100,000 -> 200,000 rows): 8.2 bytes per described
        tree and added row for 1,000 trees of one output, 6.8 for 300 x 3 outputs, 4.3 for 100 x 10
        (estimated: 15, 8.3, 6)."""
        return super().fit_bytes(n_trees, n_rows) + 10.0 * n_trees / self.n_outputs * n_rows

    def raw_predict(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """``RawFormulaVal`` prediction plus ``init_score`` (CatBoost's baseline), shape (n_rows,) or
        (n_rows, K)."""
        with self.reading():
            raw = np.asarray(self.model.predict(self._pool(X), prediction_type="RawFormulaVal"), np.float64)
        return raw + self.init_offset(X, init_score)

    def label_map(self) -> LabelMap:
        """As CatBoost reads labels: ``target_border`` binarizes numbers (label > border is class 1),
        else ``class_names`` lists the classes in class-index order (``class_names[1]`` is the class
        of ``predict_proba[:, 1]``); a regressor takes numbers."""
        if self.objective.kind == "probability":
            return LabelMap(binary=True, source=f"The CatBoost {self.objective.name} model")
        if not self.objective.classifier:
            return LabelMap(source="CatBoost regressor")
        border = self._p.get("target_border")
        if border is not None:
            return LabelMap(border=float(border), source="The CatBoost model's target_border")
        names = self._p.get("class_names")
        if names:
            return LabelMap(classes=tuple(names), source="CatBoost class_names")
        return LabelMap(binary=True, source="The CatBoost model")

    def encode_labels(self, y: ArrayLike) -> NDArray[np.float64]:
        """Labels as the loss sees them: shape (n, K) numbers for a MultiRMSE model's K targets, else
        as :meth:`BoosterAdapter.encode_labels`."""
        if self.objective.kind == "multi_target":
            return target_matrix(y, self.n_outputs)
        return super().encode_labels(y)

    def _labels(self, y: ArrayLike) -> NDArray[np.float64]:
        """Labels as CatBoost trains on them (float32; classes as class indices), shape (n,), or
        (n, K) for multi-target regression."""
        return _f32(self.encode_labels(y))

    def describe(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
    ) -> TreeEnsemble:
        """Describe the model on its training data (rows ``n``, trees ``T``).

        ``sample_weight`` (n,) is the user weight; class weights (``class_weights``,
        ``scale_pos_weight``, ``auto_class_weights``) are the ``dataset_factor`` of each class,
        multiplied with it in float32 as CatBoost does; ``auto_class_weights`` also give the class
        weights without each row (``dataset_factor_without``). ``init_score`` (n,) is the baseline
        the model was trained with.
        """
        return self._describe(X, y, sample_weight, init_score, None)

    def describe_without(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None,
        init_score: ArrayLike | None,
        deleted: NDArray[np.int64],
    ) -> TreeEnsemble:
        """:meth:`describe` with the rows ``deleted`` taken out (see
        :meth:`BoosterAdapter.describe_without`). The remaining rows keep the leaves they had in
        training and their place in its shuffle: with CTRs, a row's training-time CTRs come from
        the rows before it in the shuffle, and recomputing them without the deleted rows would move
        rows to other leaves, which no fixed-structure method models (LeafRefit keeps them too).
        ``auto_class_weights`` are derived from the remaining rows, as a retrain derives them."""
        keep = np.ones(n_rows(X), dtype=bool)
        keep[deleted] = False
        return self._describe(X, y, sample_weight, init_score, keep)

    def _describe(
        self, X: Any, y: ArrayLike, sample_weight: ArrayLike | None, init_score: ArrayLike | None,
        keep: NDArray[np.bool_] | None,
    ) -> TreeEnsemble:
        """:meth:`describe` (``keep`` None) or :meth:`describe_without` (``keep`` (n,): the rows
        that remain)."""
        n = n_rows(X)
        labels = self._labels(y)
        if labels.shape[0] != n:
            raise InputError(f"y must have one label per row of X ({n}), got shape {labels.shape}.")
        user_w = np.ones(n) if sample_weight is None else _f32(np.ravel(sample_weight))
        if user_w.shape != (n,):
            raise InputError(f"sample_weight must have shape ({n},), got {user_w.shape}.")
        o, K = self.objective, self.n_outputs
        groups = labels.astype(np.int64) if o.classifier else np.zeros(n, dtype=np.int64)
        class_weights, without = self._class_weights(groups, user_w)
        leaf_index = self.leaf_indices(X)
        if leaf_index.shape[1] != n:
            raise InputError(f"calc_leaf_indexes returned {leaf_index.shape[1]} rows for {n} rows of X.")
        order = None
        if self._ctr:
            learn_w = _f32(user_w * class_weights[groups])
            # One row per CatBoost tree (its K outputs share the leaves), repeated back after.
            trained, order = self._ctr_training_leaves(X, labels, leaf_index[::K], learn_w)
            leaf_index = np.repeat(trained, K, axis=0) if K > 1 else trained
        elif len(self.model.get_cat_feature_indices()):
            # Categorical features shuffle the learn set even when every one is one-hot encoded,
            # and the backtracking objective is summed in that order (measured: summed in data
            # order, CatBoostClassifier(one_hot_max_size=255) on Adult decides 1-3 of its ~10,000
            # tries otherwise; in shuffled order every tree is reproduced to 3e-15).
            order = catboost_ctr.fold_permutations(n, self._p)[0]
        offset = self.init_offset(X, init_score)
        if keep is not None:  # the remaining rows, as trained; their class weights derived anew
            labels, user_w, groups, offset = labels[keep], user_w[keep], groups[keep], offset[keep]
            leaf_index = leaf_index[:, keep]
            if order is not None:  # the shuffle's order of the remaining rows, renumbered
                order = (np.cumsum(keep) - 1)[order[keep[order]]]
            class_weights, without = self._class_weights(groups, user_w, class_weights.size, derive=True)
        counts = np.asarray(self.model.get_tree_leaf_counts(), dtype=np.int64)
        scale, bias = self.model.get_scale_and_bias()
        b0 = float(np.ravel(np.asarray(bias, dtype=np.float64))[0])
        if K == 1 and o.name in _EXP_SPACE and b0 != 0.0:
            # CatBoost keeps these losses' approx in exp space and starts it at its scalar table exp
            # fast_exp(bias) (InitApproxes), not exp(bias): the training rows start at the margin
            # log(fast_exp(bias)), up to ~5e-10 from the bias (test rows: bias, as predict).
            offset = offset + (math.log(fast_exp_scalar(b0)) - b0)
        values = np.asarray(self.model.get_leaf_values(), dtype=np.float64) * float(scale)
        # A leaf holds K values (value index leaf * K + output): output k of CatBoost tree t is
        # engine tree t * K + k, all K in one round.
        per_tree = np.split(values, np.cumsum(counts * K)[:-1])
        leaf_values = [v.reshape(-1, K)[:, k] for v in per_tree for k in range(K)]
        p = self._p
        lr = float(np.float32(p["learning_rate"]))
        l2_leaf_reg = float(np.float32(p["l2_leaf_reg"]))
        iterations = int(p.get("leaf_estimation_iterations", 1))
        backtracking = iterations > 1 and p.get("leaf_estimation_backtracking", "No") == "AnyImprovement"
        from_average = bool(p.get("boost_from_average", False))
        newton = p["leaf_estimation_method"] == "Newton"
        return TreeEnsemble.build(
            leaf_index=leaf_index, leaf_values=leaf_values, tree_output=np.tile(np.arange(K), counts.size),
            tree_round=np.repeat(np.arange(counts.size), K),
            loss=Loss(o.loss, n_outputs=K, params=o.params), learning_rate=lr,
            newton=newton, full_hessian=newton and o.name == "MultiClass", l1=0.0, max_delta_step=0.0,
            l2=0.0, l2_per_mean_weight=l2_leaf_reg, step_scales=np.ones(iterations),
            backtracking=backtracking,
            backtracking_objective=o.backtracking_objective() if backtracking else "exact",
            objective_threads=self._threads, objective_order=order,
            renewed=o.renewed, quantile_alpha=o.quantile_alpha, quantile_method="catboost",
            quantile_weighted=sample_weight is not None, quantile_delta=o.quantile_delta,
            base_margin=np.atleast_1d(np.asarray(bias, dtype=np.float64)),
            base_rule=("quantile" if o.renewed else "mean") if from_average else "fixed",
            init_offset=offset, y=labels, user_weight=user_w,
            weight_group=groups, dataset_factor=class_weights, float32_weights=True,
            dataset_factor_without=without, float32_l2=K > 1 and newton, float32_base=True,
            float32_base_terms=True,
        )

    def _ctr_training_leaves(
        self, X: Any, labels: NDArray[np.float64], final: NDArray[np.int32], weights: NDArray[np.float64]
    ) -> tuple[NDArray[np.int32], NDArray[np.int64]]:
        """The leaves the training rows visited when the leaf values were estimated, shape (T, n),
        with the online CTRs of the averaging fold (:mod:`adapters.catboost_ctr`), and that fold
        (n,), the order CatBoost sums the backtracking objective in; ``final``: the rows'
        ``calc_leaf_indexes``; ``weights`` (n,): CatBoost's learn weights, for the cheap
        leaf-weight check that runs before the self-check."""
        if isinstance(X, catboost.Pool):
            raise InputError(
                "A CatBoost model with CTRs needs the training rows' categorical values, which a Pool "
                "does not give back (and its group ids would change the shuffles): pass X as a "
                "DataFrame or array with the categorical columns as trained."
            )
        classes = catboost_ctr.ctr_target_classes(self._p, labels)
        cats = list(self.model.get_cat_feature_indices())
        rebuilt = catboost_ctr.training_leaves(self._json, self._p, X, cats, classes, final)
        rebuilt.check_leaf_weights(weights, self._json, self.hint)
        return rebuilt.leaves, rebuilt.averaging

    def _class_weights(
        self, classes: NDArray[np.int64], user_w: NDArray[np.float64], k: int | None = None,
        derive: bool = False,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
        """Class weights (one per class index, float32 values) and, for ``auto_class_weights``, the
        class weights CatBoost derives with each row deleted, ndarray of shape (n, n_classes).
        ``k``: the number of classes (default: the largest class index + 1). ``derive``: derive
        ``auto_class_weights`` from these rows instead of checking them against the stored ones
        (rows deleted from the training data).

        Raises
        ------
        ReproductionError
            If ``auto_class_weights`` recomputed from the labels and weights given differ from the
            stored ones (the data is not the training data).
        """
        k = int(classes.max()) + 1 if k is None else k
        stored = self._p.get("class_weights") if self.objective.classifier else None
        if not stored:
            return np.ones(k), None
        weights = _f32(stored)[:k]
        kind = self._p.get("auto_class_weights", "None")
        if kind in (None, "None"):
            return weights, None  # class_weights / scale_pos_weight: constants given by the user
        threads = int(self.model.get_params().get("thread_count", -1) or -1)
        blocks = threads if threads > 0 else os.cpu_count() or 1  # one block of rows per thread
        sums = _class_sums(classes, user_w, k, blocks)
        if derive:
            weights = _auto_weights(kind, sums)
        elif not np.array_equal(_auto_weights(kind, sums), weights):
            raise ReproductionError(
                f"The model's auto_class_weights={kind!r} derived class weights {weights.tolist()} from "
                f"its training data; the labels and sample weights given give "
                f"{_auto_weights(kind, sums).tolist()}. Pass the training labels and sample weights."
            )
        return weights, _auto_weights(kind, _sums_without(classes, user_w, sums, k, blocks))

    def verify(self, engine: InfluenceEngine) -> InfluenceEngine:
        """Prove the description reproduces the model (see :meth:`BoosterAdapter.verify`).

        Where CatBoost's backtracking arithmetic depends on the training thread count (10,000 <
        N < 100,000 rows), the counts that change it are tried, most likely first, on the first
        tree a wrong count got wrong alone (replayed at the margins the earlier trees leave), until
        one reproduces the whole model.

        Raises
        ------
        ReproductionError
            "reproduced except for rounding" when the only differences are at float32 rounding
            level or in a few backtracking trees (near-ties decided otherwise: the data is the
            training data, the scores would be approximate); otherwise "not reproduced" (other data
            than the training data, in the engine's words).
        """
        ensemble = engine.ensemble
        candidates = self._thread_candidates(ensemble)
        while engine.relative_residual > self.rtol and candidates:
            first_bad = int(np.argmax(engine.tree_residual > self.rtol * np.abs(ensemble.leaf_values).max()))
            same_round = np.flatnonzero(ensemble.tree_round == ensemble.tree_round[first_bad])
            first = ensemble.trees(int(same_round[0]), int(same_round[-1]) + 1)
            for threads in list(candidates):
                candidates.remove(threads)
                probe = InfluenceEngine(replace(first, objective_threads=threads), n_threads=engine.n_threads,
                                        cache_bytes=0)
                if probe.tree_residual.max() <= self.rtol * np.abs(ensemble.leaf_values).max():
                    self._threads = threads
                    ensemble = replace(ensemble, objective_threads=threads)
                    engine = InfluenceEngine(ensemble, n_threads=engine.n_threads,
                                             cache_bytes=engine.cache_bytes)
                    break
            else:
                break
        self._check(engine)
        return engine

    def _thread_candidates(self, ensemble: TreeEnsemble) -> list[int]:
        """Thread counts that would split the fast objective's rows differently from the one
        tried (none when the arithmetic does not depend on it)."""
        n = ensemble.n_rows
        if ensemble.backtracking_objective == "exact" or not 10000 < n < 100000:
            return []
        distinct = min(-(-n // 1000), 256)  # more threads than ranges change nothing
        likely = [os.cpu_count() or 1, 1, 2, 4, 8, 16]
        order = [k for k in likely if k <= distinct] + list(range(1, distinct + 1))
        return [k for k in dict.fromkeys(order) if k != ensemble.objective_threads]


def _refuse_model_kind(model: Any, params: Mapping[str, Any]) -> None:
    """Refuse, before any parameter is read, CatBoost models whose leaves cannot be recomputed (and
    ``params`` other than ``thread_count``, which would be ignored)."""
    ignored = sorted(set(params) - {"thread_count"})
    if ignored:
        raise InputError(
            f"params {ignored} would be ignored: a CatBoost model records every training parameter "
            "itself. Leave params unset (only thread_count, which it does not record, is accepted)."
        )
    threads = params.get("thread_count", 1)
    if not (isinstance(threads, int) and threads > 0):
        raise InputError(f"params['thread_count'] must be a positive integer, got {threads!r}.")
    for kind, indices, why in (
        ("text", model.get_text_feature_indices, "tokenized and turned into numbers by estimators "
         "fitted on the labels (BoW, NaiveBayes, BM25)"),
        ("embedding", model.get_embedding_feature_indices, "turned into numbers by estimators fitted "
         "on the labels (LDA, KNN)"),
    ):
        if len(indices()):
            raise UnsupportedModelError(
                f"Cannot reproduce this CatBoost model: its {kind} features (columns {list(indices())}) "
                f"are {why}, whose training-time values the model does not record. Retrain without "
                f"{kind}_features (turn them into numeric columns yourself)."
            )
    try:
        model.get_all_params()
    except catboost.CatBoostError:
        raise UnsupportedModelError(
            "Cannot reproduce this CatBoost model: it records no training parameters (a model made "
            "by sum_models, or converted from another format), so its leaf values cannot be "
            "recomputed. Wrap a model trained by fit()."
        ) from None


def _constraints(p: Mapping[str, Any]) -> list[Any]:
    mc = p.get("monotone_constraints") or []
    if isinstance(mc, str):
        return [c for c in mc.strip("()").split(",") if c.strip() not in ("", "0")]
    if isinstance(mc, Mapping):
        return list(mc.values())
    return list(mc)


def _class_sums(
    classes: NDArray[np.int64], v: NDArray[np.float64], k: int, blocks: int
) -> NDArray[np.float64]:
    """Per-class sums of the sample weights as CatBoost forms them for ``auto_class_weights``
    (``CalculateSummaryClassWeight``): double sums over ``blocks`` contiguous blocks of rows (one
    per training thread), added into a float32 total; shape (k,)."""
    n = classes.size
    size = max(-(-n // blocks), 1)
    total = np.zeros(k, dtype=np.float32)
    for start in range(0, n, size):
        part = np.bincount(classes[start : start + size], v[start : start + size], k)
        total = (total.astype(np.float64) + part).astype(np.float32)
    return total.astype(np.float64)


def _auto_weights(kind: str, sums: NDArray[np.float64]) -> NDArray[np.float64]:
    """``auto_class_weights`` from per-class weight sums, shape (..., k) -> (..., k).

    CatBoost passes the float sums through ``ui64`` (``std::function<float(ui64, ui64)>`` wrapping
    float lambdas), so each is *truncated to an integer* first; a class whose truncated sum is 0
    gets weight 1. Balanced: ``max_j S_j / S_k``; SqrtBalanced: its square root (float32).
    """
    whole = np.floor(sums).astype(np.float32)
    top = whole.max(axis=-1, keepdims=True)
    ratio = top / np.where(whole > 0, whole, np.float32(1))
    if kind == "SqrtBalanced":
        ratio = np.sqrt(ratio.astype(np.float64)).astype(np.float32)
    elif kind != "Balanced":
        raise UnsupportedModelError(f"auto_class_weights={kind!r} is not modelled; use 'Balanced' or "
                                    "'SqrtBalanced', or pass class_weights.")
    return np.where(whole > 0, ratio, np.float32(1)).astype(np.float64)


def _sums_without(
    classes: NDArray[np.int64], v: NDArray[np.float64], sums: NDArray[np.float64], k: int, blocks: int
) -> NDArray[np.float64]:
    """Per-class weight sums with each row deleted, shape (n, k) (only their integer parts matter).

    ``sums - v[i]`` in double has the right integer part unless it lies within float32 rounding of
    an integer; those rows are recomputed as CatBoost would on the data without the row. Integer
    weights (row counts included) are summed exactly, so they never need that.
    """
    n = classes.size
    table = np.broadcast_to(sums, (n, k)).copy()
    table[np.arange(n), classes] -= v
    exact = bool(np.all(v == np.round(v))) and float(v.sum()) < 2.0**24
    if not exact:
        own = table[np.arange(n), classes]
        near = np.flatnonzero(np.abs(own - np.round(own)) <= 1e-5 * np.maximum(own, 1.0))
        for i in near:
            keep = np.arange(n) != i
            table[i] = _class_sums(classes[keep], v[keep], k, blocks)
    return table
