"""Adapter for LightGBM: ``lightgbm.Booster``, ``LGBMClassifier`` and ``LGBMRegressor``.

Objectives (LightGBM 4.x; the mapping onto the engine's losses and LightGBM's init scores live in
:mod:`.lightgbm_objectives`, whose table gives the details):

========================================================  =========================================
objective                                                 influence_gbdt
========================================================  =========================================
regression, huber, fair, poisson, gamma, tweedie,         exact (Newton leaves; the init score is
binary (any sigmoid, is_unbalance, scale_pos_weight),     re-estimated without a row)
cross_entropy (labels in [0, 1])
regression_l1, quantile                                   exact: renewed leaves, LightGBM's (weighted)
                                                          percentile; LeafInfluence differentiates
                                                          it where it is linear (a.e.)
multiclass (softmax), multiclassova                       exact, K trees per iteration, one output
                                                          each; ova refused with label weights or
                                                          sigmoid != 1 (per-output label weights)
mape                                                      refused: its test loss carries a label
                                                          weight 1 / max(1, |y|)
cross_entropy_lambda                                      refused: weights enter non-linearly
lambdarank, rank_xendcg                                   refused: per-query gradients
custom (callable)                                         refused: gradients not in the model
========================================================  =========================================

What the adapter resolves (measured against LightGBM 4.7.0, see the project's LightGBM notes):

- **which trees**: exactly those LightGBM's default ``predict`` uses: ``min(best_iteration,
  current_iteration())`` iterations when ``best_iteration > 0`` (early stopping), else all of them.
  ``best_iteration`` is a Python attribute: pickling keeps it, ``save_model``/load and
  ``copy.deepcopy`` lose it, and then ``predict`` (and the adapter) use every tree held;
- **exact parameters**: the model text prints parameters and each tree's shrinkage with 6
  significant digits, and ``lgb.train`` / ``fit`` reload the booster from that text. The values
  given at training (``Booster.params``, under any alias, e.g. the wrapper's ``reg_lambda``) replace
  the printed ones where they agree to 6 digits; ``params`` overrides both. A learning-rate
  schedule (``lgb.reset_parameter``) is reproduced only for a booster kept as trained
  (``keep_training_booster=True``, exact rates) without boost_from_average (whose first tree's rate
  the model does not keep); otherwise it is refused, naming the schedule;
- leaf ids from ``predict(pred_leaf=True)``, leaf values from the model text; leaf rule
  ``-ThresholdL1(G, lambda_l1) / (H + kEpsilon + l2)``, clipped to ``max_delta_step``, times the
  shrinkage, with ``l2 = lambda_l2 + cat_l2`` for the two children of a many-vs-many categorical
  split (a categorical feature with more than ``max_cat_to_onehot`` bins), ``lambda_l2`` elsewhere;
  ``kEpsilon`` is the float literal ``1e-15f``;
- boost_from_average: LightGBM computes the init score (per objective: the weighted label mean
  through the objective's link, or a float32 percentile of the labels for L1 / quantile; float32
  labels and weights, sequential sums), starts training from it and adds it to every leaf of tree 0
  (shrinkage 1) if ``|init| > kEpsilon``. The adapter takes it out of
  tree 0 (``base_margin``, re-estimated on changed data: ``base_rule="mean"`` or ``"quantile"``) so that
  ``init + leaf`` is bit for bit LightGBM's training margin, and gives tree 0 its learning rate;
- labels, weights and every row's weighted gradient and hessian are float32 inside LightGBM
  (``float32_weights``, ``float32_gradients``);
- multiclass: tree ``it * K + k`` adds to class ``k``; all K trees of an iteration are fitted at
  the margins before it (one round); the init score of each class is folded into its first tree;
  labels are ``classes_`` of an ``LGBMClassifier`` (strings included) or the class indices of a raw
  Booster; ``init_score`` has shape (n, K);
- a weight vector of all ones is dropped by LightGBM's Python package: L1 / quantile percentiles
  then take their unweighted definition. The weighted one changed in 4.7 (``PERCENTILE_RULES``):
  :meth:`LightGBMAdapter.prepare` takes the installed release's, else the one that reproduces the
  model;
- class weights (each row's group is its class):

  * sklearn ``class_weight`` (``LGBMClassifier`` only) multiplies the sample weight in float64 before
    LightGBM stores it as float32, so it enters the init score: ``dataset_factor``. ``"balanced"``
    is ``n / (K * count_c)`` from row *counts*: deleting row ``i`` changes it
    (``dataset_factor_without``), a weight change does not; a dict is constant;
  * ``is_unbalance=True``: label weights from row *counts* (the larger class over the smaller one for
    the smaller class, 1 for the other), applied in the objective only, not in the init score:
    ``objective_factor`` with ``objective_factor_without``; ``scale_pos_weight`` multiplies the
    positive class's label weight (constant).

Comparing with ``Booster.refit(decay_rate=0)``: the engine with ``refit_base=False``
(``base_score="fixed"``) is LightGBM's refit only for models trained with
``boost_from_average=False`` (or an ``init_score``) and without many-vs-many categorical splits:
refit starts from 0 (or the given init score), so it refits tree 0 with LightGBM's init score still
folded in, and it uses ``lambda_l2`` alone, ignoring ``cat_l2``. Retraining without the row is the
reference in every case.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import lightgbm as lgb
import numpy as np
from numpy.typing import ArrayLike, NDArray

from influence_gbdt.engine import DEFAULT_CACHE_BYTES, InfluenceEngine
from influence_gbdt.ensemble import TreeEnsemble
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError
from influence_gbdt.labels import LabelMap
from influence_gbdt.losses import Loss
from influence_gbdt.tabular import n_rows

from .base import BoosterAdapter, check_numeric_params, one_thread, tree_major
from .lightgbm_objectives import (
    K_EPSILON,
    PERCENTILE_RULES,
    Objective,
    label_weights,
    percentile_rule,
    resolve,
)

__all__ = ["K_EPSILON", "LightGBMAdapter"]
#: Parameters that enter leaf values (the ones whose 6-digit print can spoil the self-check).
_LEAF_PARAMS = ("learning_rate", "lambda_l1", "lambda_l2", "cat_l2", "max_delta_step", "scale_pos_weight")


def _booster_of(model: Any) -> lgb.Booster:
    """The fitted ``lgb.Booster`` of a Booster or scikit-learn wrapper; refuses unfitted models."""
    if isinstance(model, lgb.Booster):
        booster = model
    elif isinstance(model, lgb.LGBMModel):
        if getattr(model, "_Booster", None) is None:
            raise UnsupportedModelError(
                f"This {type(model).__name__} is not fitted: call fit(X, y) before computing influence."
            )
        if isinstance(model, lgb.LGBMRanker) or not isinstance(
            model, (lgb.LGBMClassifier, lgb.LGBMRegressor)
        ):
            raise UnsupportedModelError(
                f"{type(model).__name__} is not supported: use LGBMClassifier, LGBMRegressor or a Booster."
            )
        if model.get_params().get("pred_early_stop"):
            raise UnsupportedModelError(
                f"{type(model).__name__} was built with pred_early_stop=True: its predict stops early per "
                "row, so no fixed set of trees explains it. Set pred_early_stop=False "
                "(model.set_params(pred_early_stop=False))."
            )
        booster = model.booster_
    else:
        raise UnsupportedModelError(f"{type(model).__name__} is not a LightGBM Booster or LGBM estimator.")
    if booster.num_trees() == 0:
        raise UnsupportedModelError("The LightGBM model has no trees: train it before computing influence.")
    return booster


def _parse_parameters(model_str: str) -> dict[str, str]:
    """The ``parameters:`` section of a model string as ``{name: value}`` (canonical names)."""
    start = model_str.find("\nparameters:\n")
    end = model_str.find("\nend of parameters", start)
    params: dict[str, str] = {}
    if start >= 0:
        for line in model_str[start:end].splitlines():
            if line.startswith("[") and ": " in line:
                key, value = line[1:-1].split(": ", 1)
                params[key] = value
    return params


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (booleans, strings, lists are not numbers here)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number | str):
        return None
    try:
        out = float(value)
    except ValueError:
        return None
    return out if math.isfinite(out) else None


def _six_digits(value: float) -> float:
    """``value`` as LightGBM prints it in a model text (``std::ostream``, 6 significant digits)."""
    return float(f"{value:.6g}")


def _exact_values(printed: Mapping[str, str], given: Mapping[str, Any]) -> dict[str, float]:
    """Exact values of the printed numeric parameters: a value given at training (under any alias)
    that prints as the model text does replaces the 6-digit print."""
    aliases = getattr(getattr(lgb, "basic", None), "_ConfigAliases", None)
    exact: dict[str, float] = {}
    for key, text in printed.items():
        shown = _number(text)
        if shown is None:
            continue
        names = {key} | (set(aliases.get(key)) if aliases is not None else set())
        for name in sorted(names):
            value = _number(given.get(name))
            if value is not None and _six_digits(value) == shown:
                exact[key] = value
    return exact


def _text_trees(model_str: str) -> list[dict[str, str]]:
    """Each tree of a model text as its ``key=value`` lines (``{"num_leaves": "31", ...}``)."""
    body = model_str[model_str.find("\nTree=") + 1 : model_str.find("\nend of trees")]
    return [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            for block in re.split(r"^Tree=\d+\n", body, flags=re.M) if block.strip()]


def _schedule(printed: list[float], lr: float) -> bool:
    """Whether trees' printed shrinkages are other than the learning rate's 6-digit print and 1
    (the first tree's, with boost_from_average): the model was trained with a learning-rate
    schedule."""
    return any(rate not in (_six_digits(lr), 1.0) for rate in printed)


def _header(model_str: str, key: str) -> str:
    for line in model_str[: model_str.find("\nTree=")].splitlines():
        if line.startswith(key + "="):
            return line[len(key) + 1 :]
    return ""


def _refuse_settings(p: Mapping[str, str]) -> None:
    """Raise UnsupportedModelError for every setting whose leaf values cannot be reproduced."""

    def f(key: str, default: str = "0") -> float:
        return float(p.get(key, default) or default)

    fractions = [f"{k}={p.get(k)}" for k in ("bagging_fraction", "pos_bagging_fraction",
                                             "neg_bagging_fraction") if f(k, "1") < 1]

    refusals = [
        (
            p.get("boosting", "gbdt") != "gbdt",
            f"boosting={p.get('boosting')}: dart drops and rescales trees, rf averages bagged trees",
            "boosting='gbdt'",
        ),
        (
            p.get("data_sample_strategy") == "goss",
            "data_sample_strategy=goss: the rows sampled and re-weighted per tree are not recorded",
            "data_sample_strategy='bagging' and bagging_fraction=1",
        ),
        (
            f("bagging_freq") > 0 and bool(fractions),
            f"{', '.join(fractions)}, bagging_freq={p.get('bagging_freq')}: the rows used per tree are not "
            "recorded",
            f"{' and '.join(k.split('=')[0] + '=1' for k in fractions)} (or bagging_freq=0)",
        ),
        (f("linear_tree") != 0, "linear_tree=True: leaves hold linear models", "linear_tree=False"),
        (
            f("use_quantized_grad") != 0,
            "use_quantized_grad=True: leaf values come from randomly rounded gradients",
            "use_quantized_grad=False",
        ),
        (
            any(float(c) != 0 for c in p.get("monotone_constraints", "").replace(",", " ").split()),
            "monotone constraints: leaf values are clipped to bounds that depend on the whole tree",
            "no monotone_constraints",
        ),
        (
            f("path_smooth") > 0,
            f"path_smooth={p.get('path_smooth')}: leaf values are shrunk towards their parents' outputs",
            "path_smooth=0",
        ),
    ]
    for refused, why, fix in refusals:
        if refused:
            raise UnsupportedModelError(
                f"LightGBM model trained with {why}, so leaf values cannot be reproduced. Retrain with {fix}."
            )


class LightGBMAdapter(BoosterAdapter):
    """Describe a LightGBM model (Booster, LGBMClassifier, LGBMRegressor) on its training data.

    Parameters
    ----------
    model : lightgbm.Booster, LGBMClassifier or LGBMRegressor
        A trained model with one of the objectives of :mod:`.lightgbm_objectives` marked exact.
    params : mapping, optional
        Exact values of training parameters (canonical names, as the model text lists them under
        ``parameters:``), e.g. the learning rate of a loaded model whose file printed it with 6
        significant digits.

    Raises
    ------
    UnsupportedModelError
        If the model is unfitted or trained with a setting that cannot be reproduced.
    """

    library = "lightgbm"
    data_errors: ClassVar[tuple[type[Exception], ...]] = (lgb.basic.LightGBMError,)
    # The self-check recomputes each tree at the margins of the model's *stored* earlier trees, so
    # rounding does not cascade. Correct data, measured (Adult numeric columns, LGBMClassifier
    # defaults, 500..3000 rows, 300..4000 trees, with sample weights, 'balanced', is_unbalance;
    # regressors; pandas categoricals; the test models): at most ROUNDING_MEASURED (3000 rows, 2000
    # and 4000 trees; 1.1e-9 at 1000 rows; <= 2e-14 at the 100-tree defaults). It comes from the rows
    # whose float32 gradient rounds the other way than LightGBM's: the engine computes log-loss
    # gradients as p - y, LightGBM as -y'/(1 + exp(y' s)); with LightGBM's form the same models give
    # <= 2.1e-12. Wrong data or parameters: at least WRONG_MEASURED (the project's LightGBM notes: a
    # learning-rate schedule read from 6-digit shrinkages). Measured here on the same models: one
    # row's weight off by 1%: >= 1.1e-6 (lower bound over every row), 1e-5 .. 3e-5 in full;
    # lambda_l2 1e-6 instead of 0: 7.5e-5; the learning rate off by 1e-6: 1e-5; the last row
    # missing: 9e-3; a label flipped or two rows swapped: >= 3.7. rtol is the geometric middle of
    # the gap, ~6x from either side.
    rtol = 3e-8
    #: ``pred_leaf``'s output and our int32 transposition: 12.0 bytes per tree and added row,
    #: measured (``benchmarks/fit_memory.py``, 100,000 -> 200,000 rows, 100 rounds of 1, 3 and 10
    #: classes), and a third more.
    fit_bytes_per_tree_row: ClassVar[float] = 16.0
    ROUNDING_MEASURED: ClassVar[float] = 5.2e-9
    WRONG_MEASURED: ClassVar[float] = 2e-7

    def __init__(self, model: Any, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, params)
        self.booster = booster = _booster_of(model)
        per_iteration = booster.num_model_per_iteration()
        current, best = booster.current_iteration(), booster.best_iteration
        #: Iterations LightGBM's default predict uses, and the trees they hold.
        self.n_iter = min(best, current) if best > 0 else current
        self.n_trees = self.n_iter * per_iteration
        model_str = booster.model_to_string(num_iteration=self.n_iter)
        self._params = _parse_parameters(model_str)
        unknown = sorted(set(self.params) - set(self._params))
        if unknown:
            raise InputError(
                f"params keys {unknown} are not LightGBM parameters of this model: use the canonical names "
                "the model file lists under 'parameters:' (learning_rate, lambda_l1, lambda_l2, ...)."
            )
        numeric = [k for k, v in self._params.items() if _number(v) is not None]
        check_numeric_params("LightGBM", self.params, numeric)
        self._exact = _exact_values(self._params, booster.params or {})
        for key, value in self.params.items():
            self._params[key] = str(int(value)) if isinstance(value, bool) else str(value)
            if _number(value) is not None:
                self._exact[key] = float(value)
        self.objective: Objective = resolve(_header(model_str, "objective"), self._param, self._params)
        _refuse_settings(self._params)
        self.loss = self.objective.loss.name
        self._model_str = model_str
        #: The weighted percentile of L1 / quantile leaves (``PERCENTILE_RULES``): the installed
        #: release's, until :meth:`prepare` finds that the other one reproduces the model.
        self.percentile_rule = percentile_rule(lgb.__version__)
        self._weighted_percentile = False  # whether the last description used it (``describe``)

    def _param(self, key: str, default: float = 0.0) -> float:
        if key in self._exact:
            return self._exact[key]
        value = self._params.get(key, "")
        return float(value) if value != "" else default

    def _leaves(self) -> tuple[list[NDArray[np.float64]], list[NDArray[np.float64]], NDArray[np.float64]]:
        """Per tree: stored leaf values (n_leaves,), per-leaf l2 (n_leaves,); shrinkages (T,), where
        a 6-digit print of the learning rate is replaced by its exact value. Read from the model
        text (leaf values printed with 17 digits: exact); its shrinkages are 6-digit prints, exact
        where the booster was reloaded from its text (``lgb.train``'s default), so a tree whose
        printed shrinkage is neither the learning rate's print nor 1 (a learning-rate schedule)
        takes every shrinkage from ``dump_model()`` (17 digits; 25 ms on Adult's 100 trees, against
        2 ms for the text)."""
        lambda_l2, cat_l2 = self._param("lambda_l2"), self._param("cat_l2", 10.0)
        onehot_max = self._param("max_cat_to_onehot", 4.0)
        lr = self._param("learning_rate", 0.1)
        # A categorical feature's info lists its categories ("0:3:1"), a numerical one its range.
        n_bins = np.array([0 if info.startswith("[") or info == "none" else len(info.split(":"))
                           for info in _header(self._model_str, "feature_infos").split(" ")])
        values, l2s, printed = [], [], []
        for tree in _text_trees(self._model_str):
            val = np.array([float(v) for v in tree["leaf_value"].split()])
            l2 = np.full(val.size, lambda_l2)
            if val.size > 1:  # a many-vs-many categorical split's two children get cat_l2 too
                feature, kind, left, right = (np.array(tree[key].split(), dtype=np.int64) for key in
                                              ("split_feature", "decision_type", "left_child", "right_child"))
                many = (kind & 1).astype(bool) & (n_bins[feature] > onehot_max)
                for child in np.concatenate([left[many], right[many]]):
                    if child < 0:  # ~leaf
                        l2[~child] = lambda_l2 + cat_l2
            values.append(val)
            l2s.append(l2 + K_EPSILON)  # LightGBM's hessian sums start at kEpsilon
            printed.append(float(tree["shrinkage"]))
        if _schedule(printed, lr):
            dump = self.booster.dump_model(num_iteration=self.n_iter)
            printed = [float(tree["shrinkage"]) for tree in dump["tree_info"]]
        shrinkage = [lr if rate in (lr, _six_digits(lr)) else rate for rate in printed]
        return values, l2s, np.asarray(shrinkage)

    def _class_factors(self, y_raw: NDArray[Any], labels: NDArray[np.float64], unit: bool) -> dict[str, Any]:
        """The class weighting as :meth:`TreeEnsemble.build` arguments (see the module docstring):
        ``weight_group`` (n,), the factors (G,) and their deletion tables (n, G) or None. ``unit``:
        every user weight is 1, so the Dataset weight is the float32 class factor itself."""
        groups, n_groups = self.objective.groups(labels)
        n = groups.shape[0]
        out: dict[str, Any] = {"weight_group": groups, "dataset_factor": np.ones(n_groups)}
        if n_groups == 1:
            return out
        n_classes = max(n_groups, 2)
        counts = np.bincount(groups, minlength=n_classes).astype(np.float64)  # rows per class
        without = np.repeat(counts[None, :], n, axis=0)  # the counts after deleting row i
        without[np.arange(n), groups] -= 1.0

        class_weight = getattr(self.model, "class_weight", None)
        if isinstance(self.model, lgb.LGBMClassifier) and class_weight is not None:
            if isinstance(class_weight, str) and class_weight == "balanced":
                # sklearn compute_sample_weight: n_samples / (n_classes * bincount), from counts. With
                # unit user weights the factors are given as LightGBM stores them (float32), so that
                # sums rescaled from one factor to another stay exact.
                rounding = _float32 if unit else np.asarray
                out["dataset_factor"] = rounding(n / (n_classes * np.maximum(counts, 1.0)))[:n_groups]
                factor_without = (n - 1) / (n_classes * np.maximum(without, 1.0))  # (a class without rows)
                out["dataset_factor_without"] = rounding(factor_without)[:, :n_groups]
            else:
                from sklearn.utils.class_weight import compute_sample_weight

                per_row = np.asarray(compute_sample_weight(class_weight, y_raw), dtype=np.float64)
                factor = np.ones(n_groups)
                factor[groups] = per_row  # constant within a class
                out["dataset_factor"] = factor

        # Label weights of the binary objective (multiclass softmax ignores them; multiclassova
        # with them is refused).
        unbalance = self._params.get("is_unbalance") == "1"
        scale_pos = self._param("scale_pos_weight", 1.0)
        if self.objective.name == "binary" and (unbalance or scale_pos != 1.0):
            out["objective_factor"] = label_weights(counts[None, :], unbalance, scale_pos)[0, :n_groups]
            if unbalance:
                out["objective_factor_without"] = label_weights(without, unbalance, scale_pos)[:, :n_groups]
        return out

    def label_map(self) -> LabelMap:
        """A multiclass ``LGBMClassifier`` reads labels by its ``classes_``; a raw multiclass Booster
        takes the class indices ``0 .. K - 1`` it was trained on (named when others are refused); otherwise as
        :meth:`BoosterAdapter.label_map` (binary and cross-entropy: 0/1 or [0, 1] targets)."""
        if not self.objective.multiclass:
            return super().label_map()
        classes = getattr(self.model, "classes_", None)
        name = type(self.model).__name__
        if classes is not None:
            return LabelMap(classes=tuple(classes), source=f"{name}.classes_")
        K = self.objective.n_classes
        return LabelMap(classes=tuple(range(K)), source=f"A raw LightGBM {name} (classes 0..{K - 1})")

    def _labels(self, y: ArrayLike) -> tuple[NDArray[Any], NDArray[np.float64]]:
        """(labels as given, labels as LightGBM trains on them, float32-rounded), shape (n,)."""
        y_raw = np.asarray(y).ravel()
        labels = self.encode_labels(y).astype(np.float32).astype(np.float64)  # classes_ -> 0 .. K-1
        if self.objective.name == "binary" and not np.all((labels == 0) | (labels == 1)):
            raise InputError("LightGBM 'binary' labels must be 0 or 1.")
        if self.objective.multiclass:
            Loss("softmax", n_outputs=self.objective.n_classes).check_labels(labels, "class labels")
        return y_raw, labels

    def describe(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
        *,
        label_mean: float | None = None,
    ) -> TreeEnsemble:
        """Describe the model on its training data (no self-check; see :meth:`prepare`).

        Parameters
        ----------
        X : ndarray or DataFrame of shape (n, n_features)
            The training rows, in training order.
        y : array-like of shape (n,)
            Labels (class labels as the classifier knows them, class indices 0 .. K-1 for a raw
            multiclass Booster).
        sample_weight : array-like of shape (n,), optional
            The user's training weights (sklearn ``class_weight`` and ``is_unbalance`` /
            ``scale_pos_weight`` are applied on top, as LightGBM does).
        init_score : array-like of shape (n,) or (n, K), optional
            The init score passed to training, if any (then no boost_from_average took place).
        label_mean : float, optional
            The Dataset-weighted label mean of the *whole* training set, when ``X`` holds only part
            of it (a Dask partition, :mod:`influence_gbdt.distributed`): boost_from_average's init
            score is taken from it. Default: the mean over these rows.
        """
        leaf_index = self.leaf_indices(X)
        T, n = leaf_index.shape
        K = self.objective.n_classes
        y_raw, labels = self._labels(y)
        if labels.shape != (n,):
            raise InputError(f"y has {labels.size} labels for {n} rows of X.")
        user_w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, np.float64).ravel()
        if user_w.shape != (n,):
            raise InputError(f"sample_weight has shape {user_w.shape}, expected ({n},).")
        classes = self._class_factors(y_raw, labels, unit=bool(np.all(user_w == 1.0)))
        offset = self.init_offset(X, init_score)

        values, l2, shrinkage = self._leaves()
        learning_rate = shrinkage.copy()
        # A tree without a split is LightGBM's constant tree: in the first iteration its value is
        # the init score (a class that is not trained, or training stopped there), later 0; not a
        # leaf step from the gradient sums (with float32 gradients that step is ~1e-9, not 0).
        # Learning rate 0 makes its modelled value exactly 0 once the init score is taken out; the
        # init score itself is base_margin.
        constant = np.array([v.size == 1 for v in values])
        lr = self._param("learning_rate", 0.1)
        base, base_refit = np.zeros(K), False
        given_w = user_w * classes["dataset_factor"][classes["weight_group"]]
        # LightGBM's Python package drops a weight vector of all ones (Dataset.set_weight): the
        # percentiles of L1 / quantile then take their unweighted definition.
        weighted = not np.all(given_w == 1.0)
        self._weighted_percentile = weighted and self.objective.renewed
        if init_score is None and self._params.get("boost_from_average", "1") == "1":
            base_refit = True
            data_w = _float32(given_w)  # LightGBM's Dataset weight
            base = (self.objective.init_score(labels, data_w, weighted, self.percentile_rule)
                    if label_mean is None else self.objective.init_from_mean(label_mean))
            folded = np.abs(base) > K_EPSILON  # LightGBM adds an init score only above kEpsilon
            if np.any(folded & (shrinkage[:K] != 1.0)) and lr != 1.0:
                raise InputError(
                    "The first trees keep their shrinkage, so no boost_from_average init score was folded "
                    "in: the model was trained with an init_score. Pass the same init_score."
                )
            for k in np.flatnonzero(folded):
                values[k] = _unfold(values[k], base[k])
                learning_rate[k] = lr
            base = np.where(folded, base, 0.0)
        elif init_score is not None and np.any(shrinkage[:K] == 1.0) and lr != 1.0:
            raise InputError(
                "A first tree has shrinkage 1: LightGBM folded a boost_from_average init score into it, "
                "so the model was trained without init_score. Call without init_score."
            )
        rule = self.objective.base_rule if base_refit else "fixed"
        trees = np.arange(T)
        return TreeEnsemble.build(
            leaf_index=leaf_index,
            leaf_values=values,
            y=labels,
            loss=self.objective.loss,
            tree_output=trees % K,
            tree_round=trees // K,
            learning_rate=np.where(constant, 0.0, learning_rate),
            l2=l2,
            l1=self._param("lambda_l1"),
            max_delta_step=self._param("max_delta_step"),
            renewed=self.objective.renewed,
            quantile_alpha=self.objective.alpha,
            quantile_method=self.percentile_rule,
            quantile_weighted=weighted,
            base_margin=base,
            base_rule=rule,
            init_offset=offset,
            user_weight=user_w,
            float32_weights=True,
            float32_gradients=True,
            float32_base=bool(self.objective.renewed),  # BoostFromScore's percentile is a float
            **classes,
        )

    def prepare(
        self,
        X: Any,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        init_score: ArrayLike | None = None,
        cache_bytes: float = DEFAULT_CACHE_BYTES,
        n_threads: int | None = None,
    ) -> InfluenceEngine:
        """:meth:`BoosterAdapter.prepare`; for a weighted L1 / quantile model that the installed
        release's weighted percentile does not reproduce, then the other release's
        (``PERCENTILE_RULES``: a model trained by LightGBM 4.4 to 4.6 and loaded into 4.7, or the
        reverse; the model text does not name its release). The rule that reproduces every stored
        leaf is kept in ``percentile_rule``; if neither does, the first rule's error is raised."""
        try:
            return super().prepare(X, y, sample_weight, init_score, cache_bytes, n_threads)
        except ReproductionError as error:
            if not self._weighted_percentile:
                raise
            first = self.percentile_rule
            self.percentile_rule = next(rule for rule in PERCENTILE_RULES if rule != first)
            try:
                return super().prepare(X, y, sample_weight, init_score, cache_bytes, n_threads)
            except ReproductionError:
                self.percentile_rule = first
                raise error from None

    def verify(self, engine: InfluenceEngine) -> InfluenceEngine:
        """:meth:`BoosterAdapter.verify` whose :class:`ReproductionError` says whether the residual
        is at the level of float rounding or of a mismatch (see :meth:`_mismatch`)."""
        if not engine.relative_residual <= self.rtol:
            raise ReproductionError(self._mismatch(engine))
        return engine

    def _mismatch(self, engine: InfluenceEngine) -> str:
        """The self-check failure message: rounding (a residual below every wrong-data level
        measured) or not reproduced, with what to do."""
        r = engine.relative_residual
        where = (f"recomputed leaf values differ from the stored ones by {r:.2g} (relative; tolerance "
                 f"{self.rtol:.0g}, worst in tree {int(np.argmax(engine.tree_residual))})")
        if r < self.WRONG_MEASURED:
            return (
                f"LightGBM model reproduced only up to float rounding: {where}. That is more than "
                f"LightGBM's own rounding leaves on correct data (<= {self.ROUNDING_MEASURED:.2g} measured, "
                f"growing with the number of trees) but less than any wrong data or parameter measured "
                f"(>= {self.WRONG_MEASURED:.1g}): most likely rounding on a longer model than measured, "
                "not a data mismatch." + self._printed_params_note()
            )
        printed = [float(tree["shrinkage"]) for tree in _text_trees(self._model_str)]
        if _schedule(printed, self._param("learning_rate", 0.1)):
            return (
                f"LightGBM model not reproduced: {where}. Its trees were trained with different learning "
                "rates (a schedule, such as lgb.reset_parameter): LightGBM keeps each tree's rate to 6 "
                "significant digits once lgb.train reloads the booster from its model text (its default), "
                "and with boost_from_average the first tree's rate is not kept at all. Such a model is "
                "reproduced only when trained with lgb.train(..., keep_training_booster=True) and "
                "boost_from_average=False (and then with exactly its training data)."
            )
        return (
            f"LightGBM model not reproduced from the data given: {where}; LightGBM's own rounding leaves "
            f"at most {self.ROUNDING_MEASURED:.2g}, so the data or a parameter differs. {self.hint}"
            + self._printed_params_note()
        )

    def _printed_params_note(self) -> str:
        """Name the leaf parameters that may be 6-digit prints (6 significant digits, no more precise
        value given), if any."""
        printed = {}
        for key in _LEAF_PARAMS:
            value = self._param(key)
            digits = f"{value:.6g}".split("e")[0].lstrip("-").replace(".", "").lstrip("0")
            maybe_rounded = value == _six_digits(value) and len(digits) >= 6
            if maybe_rounded and key in self._params and key not in self.params:
                printed[key] = value
        if not printed:
            return ""
        exact = ", ".join(f"'{k}': <exact value>" for k in printed)
        return (
            f" The model text prints {printed} with 6 significant digits: if training used more digits "
            f"(a loaded or copied model keeps only the print), pass params={{{exact}}}."
        )

    def model_features(self) -> tuple[int, list[str] | None]:
        """(number of features, the booster's feature names, None for LightGBM's Column_0, ...)."""
        names = list(self.booster.feature_name())
        generated = names == [f"Column_{i}" for i in range(len(names))]
        return self.booster.num_feature(), None if generated else names

    def stored_name(self, column: Any) -> str:
        """LightGBM stores feature names with spaces replaced by underscores."""
        return str(column).replace(" ", "_")

    def _predict(self, X: Any, **kwargs: Any) -> Any:
        """``Booster.predict`` with the iterations the model's own predict uses; on one thread for a
        small ``X`` (:func:`.base.one_thread`)."""
        if one_thread(n_rows(X), self.n_trees):
            kwargs["num_threads"] = 1
        with self.reading():
            return self.booster.predict(X, num_iteration=self.n_iter, **kwargs)

    def leaf_indices(self, X: Any) -> NDArray[np.int32]:
        """Leaf of every row of ``X`` in every tree predict uses, ndarray of shape (n_trees, n_rows),
        int32."""
        leaves = self._predict(X, pred_leaf=True)
        return tree_major(leaves, self.n_trees, self.n_threads)

    def init_offset(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """Per-row offset of the initial margin: ``init_score`` of shape (n,), or (n, K) for a
        multiclass model (LightGBM's flat class-major layout (n * K,) is accepted too)."""
        K = self.objective.n_classes
        if K == 1:
            return super().init_offset(X, init_score)
        n = n_rows(X)
        if init_score is None:
            return np.zeros((n, K))
        offset = np.asarray(init_score, dtype=np.float64)
        if offset.shape == (n * K,):
            offset = offset.reshape(K, n).T
        if offset.shape != (n, K):
            raise InputError(
                f"init_score of a {K}-class model must have shape ({n}, {K}), got {offset.shape}."
            )
        return offset

    def raw_predict(self, X: Any, init_score: ArrayLike | None = None) -> NDArray[np.float64]:
        """LightGBM's ``raw_score=True`` prediction plus ``init_score``, ndarray of shape (n_rows,),
        or (n_rows, K) for a multiclass model."""
        raw = np.asarray(self._predict(X, raw_score=True), np.float64)
        return raw + self.init_offset(X, init_score)

    @property
    def hint(self) -> str:
        """Likely causes of a failed self-check (for weighted L1 and quantile models also the
        releases whose percentiles were tried: :meth:`prepare`)."""
        renewed = (
            f" The weighted percentiles of LightGBM 4.7 and of 4.4 to 4.6 were both tried for this "
            f"{self.objective.name} model." if self._weighted_percentile else ""
        )
        return (
            "Pass exactly the training rows, in training order, with the labels, sample weights and "
            "init_score the model was trained with (LightGBM keeps none of them); for an LGBMClassifier "
            "trained with class_weight, pass the classifier, not its booster_." + renewed
        )


def _float32(values: ArrayLike) -> NDArray[np.float64]:
    """``values`` rounded to float32, as float64."""
    return np.asarray(values, dtype=np.float32).astype(np.float64)


def _unfold(stored: NDArray[np.float64], init: float) -> NDArray[np.float64]:
    """Tree-0 leaves without the folded init score: ``x`` with ``init + x == stored`` in float64,
    so the engine's margins after tree 0 are bit for bit LightGBM's (which trains from ``init`` and
    stores ``x + init``), shape (n_leaves,)."""
    with np.errstate(invalid="ignore"):  # a degenerate model's init of -inf: NaN, refused with its cause
        x = stored - init
    for _ in range(4):
        off = (init + x) != stored
        if not off.any():
            break
        x[off] = np.nextafter(x[off], np.where(init + x[off] < stored[off], np.inf, -np.inf))
    return x
