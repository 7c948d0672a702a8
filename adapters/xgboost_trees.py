"""XGBoost tree reader: ``Booster``, ``XGBClassifier``, ``XGBRegressor`` -> :class:`TreeStructure`.

From the JSON model (``save_raw('json')``), resolved here:

* numerical nodes go left iff ``x < split_condition`` (strict), on features rounded to float32;
  a missing value (NaN, or the scikit-learn model's ``missing=``) follows ``default_left``;
* categorical nodes (``split_type == 1``) send the listed categories *right*, every other code
  (also an invalid one) left: the reader swaps the children so the listed set goes left;
* leaf values are ``split_conditions`` of leaves (float32), or for vector leaves
  (``multi_strategy='multi_output_tree'``) rows of ``leaf_weights`` (XGBoost 3.2 on) or of
  ``base_weights`` (3.1, :func:`vector_leaf_values`); ``pred_leaf`` numbers leaves by node id;
* the base score is stored through the objective's link (probability for logistic objectives, the
  mean for log-link ones) and is mapped back to the margin;
* a scikit-learn model fitted with early stopping predicts with the trees up to ``best_iteration``
  only, so only those trees are read; a plain Booster predicts with all of them.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, ClassVar

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray

from influence_gbdt.errors import UnsupportedModelError
from influence_gbdt.losses import margin32
from influence_gbdt.trees import MISSING_NAN, StructureBuilder, TreeStructure

from .trees import ModelTrees

#: objective -> (TreeStructure.objective, link of the stored base score: "logit", "log" or "identity").
_OBJECTIVES: dict[str, tuple[str, str]] = {
    "binary:logistic": ("binary", "logit"),
    "binary:logitraw": ("binary", "identity"),
    "reg:logistic": ("regression", "logit"),
    "reg:squarederror": ("regression", "identity"),
    "reg:squaredlogerror": ("regression", "identity"),
    "reg:pseudohubererror": ("regression", "identity"),
    "reg:absoluteerror": ("regression", "identity"),
    "reg:quantileerror": ("regression", "identity"),
    "count:poisson": ("regression", "log"),
    "reg:gamma": ("regression", "log"),
    "reg:tweedie": ("regression", "log"),
    "multi:softprob": ("multiclass", "identity"),
    "multi:softmax": ("multiclass", "identity"),
}


def _booster(model: Any) -> tuple[xgb.Booster, int]:
    """(Booster, number of boosting rounds ``predict`` uses) of a Booster or scikit-learn model."""
    if isinstance(model, xgb.XGBModel):
        if not hasattr(model, "_Booster"):
            raise UnsupportedModelError(f"{type(model).__name__} is not fitted: call fit(X, y) first.")
        booster = model.get_booster()
        rounds = booster.num_boosted_rounds()
        best = booster.attr("best_iteration")  # early stopping: the sklearn predict stops there
        return booster, (int(best) + 1 if best is not None else rounds)
    if isinstance(model, xgb.Booster):
        return model, model.num_boosted_rounds()
    raise UnsupportedModelError(f"{type(model).__name__} is not an XGBoost Booster or scikit-learn model.")


def _category_labels(cats: dict[str, Any], n_features: int) -> tuple[Any, ...]:
    """Per feature, the training categories XGBoost stored (code i <-> label i), else None."""
    enc = cats.get("enc", []) if cats else []
    labels: list[Any] = [None] * n_features
    for f, entry in enumerate(enc[:n_features]):
        values = entry.get("values", [])
        if not values:
            continue
        offsets = entry.get("offsets")
        if offsets:  # strings: utf-8 bytes cut at offsets
            raw = bytes(values)
            labels[f] = tuple(raw[a:b].decode() for a, b in itertools.pairwise(offsets))
        else:
            labels[f] = tuple(v.item() if hasattr(v, "item") else v for v in values)
    return tuple(labels)


class XGBoostTrees(ModelTrees):
    """Read an XGBoost gbtree model (any objective in ``_OBJECTIVES``, also multiclass).

    Raises
    ------
    UnsupportedModelError
        Unfitted model, gblinear, an objective whose margin link is not known (ranking, survival).
    """

    library: ClassVar[str] = "xgboost"

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.booster, self.n_rounds = _booster(model)
        config = json.loads(self.booster.save_config())["learner"]
        booster_kind = config["learner_train_param"]["booster"]
        if booster_kind == "gblinear":
            raise UnsupportedModelError("XGBoost booster='gblinear' has no trees: retrain with 'gbtree'.")
        self.objective_name = config["learner_train_param"]["objective"]
        if self.objective_name not in _OBJECTIVES:
            raise UnsupportedModelError(
                f"XGBoost objective {self.objective_name!r} is not supported for tree reading: its margin "
                f"link is not modelled. Supported: {sorted(_OBJECTIVES)}."
            )

    def _read(self) -> TreeStructure:
        learner = json.loads(self.booster.save_raw("json"))["learner"]
        model = learner["gradient_booster"]["model"]
        if "trees" not in model:  # dart keeps its trees one level down, with weights
            raise UnsupportedModelError(
                "XGBoost booster='dart' scales trees by dropout weights at prediction: retrain with "
                "booster='gbtree'."
            )
        params = learner["learner_model_param"]
        n_features = int(params["num_feature"])
        kind, link = _OBJECTIVES[self.objective_name]
        base = np.asarray(json.loads(params["base_score"]), dtype=np.float32).astype(np.float64).ravel()
        n_class = int(params.get("num_class", "0"))
        n_outputs = max(n_class, int(params.get("num_target", "1")), base.size, 1)
        if link != "identity":  # as XGBoost computes the margin it starts from
            base = margin32(base, link + "32")
        base = np.broadcast_to(base, (n_outputs,)).copy()
        n_trees = int(model["iteration_indptr"][self.n_rounds]) if "iteration_indptr" in model else None
        trees = model["trees"][:n_trees]
        tree_info = model["tree_info"][: len(trees)]
        builder = StructureBuilder(n_outputs)
        for tree, klass in zip(trees, tree_info, strict=True):
            _add_tree(builder, tree, int(klass) if n_outputs > 1 else 0)
        names = learner.get("feature_names") or [f"f{i}" for i in range(n_features)]
        types = learner.get("feature_types") or ["float"] * n_features
        missing = getattr(self.model, "missing", np.nan) if isinstance(self.model, xgb.XGBModel) else np.nan
        return builder.build(
            n_features=n_features,
            feature_names=tuple(names),
            feature_is_categorical=np.array([t == "c" for t in types], dtype=bool),
            objective=kind,
            base_margin=base,
            float32_inputs=True,
            missing_value=float(np.nan if missing is None else missing),
            category_labels=_category_labels(model.get("cats", {}), n_features),
        )

    # ------------------------------------------------------------------ the booster's own answers
    def _dmatrix(self, X: Any) -> xgb.DMatrix:
        missing = getattr(self.model, "missing", np.nan) if isinstance(self.model, xgb.XGBModel) else np.nan
        return xgb.DMatrix(X, missing=missing, enable_categorical=True)

    def raw_margin(self, X: Any) -> NDArray[np.float64]:
        out = self.booster.predict(self._dmatrix(X), output_margin=True, iteration_range=(0, self.n_rounds))
        return np.asarray(out, dtype=np.float64).reshape(out.shape[0], -1)

    def leaf_ids(self, X: Any) -> NDArray[np.int32]:
        out = self.booster.predict(self._dmatrix(X), pred_leaf=True, iteration_range=(0, self.n_rounds))
        return np.asarray(out, dtype=np.int32).reshape(out.shape[0], -1)

    def predict_value(self, X: Any) -> NDArray[np.float64]:
        if isinstance(self.model, xgb.XGBModel):
            out = self.model.predict(X)
        else:
            out = self.booster.predict(self._dmatrix(X), iteration_range=(0, self.n_rounds))
        return np.asarray(out, dtype=np.float64)

    @property
    def prediction_link(self) -> str:
        """The link of the objective (the one XGBoost stores its base score through)."""
        return _OBJECTIVES[self.objective_name][1]

    def predict_index(self, X: Any) -> NDArray[np.int64]:
        if isinstance(self.model, xgb.XGBClassifier):
            return self._labels_to_index(self.model.predict(X))
        prob = np.asarray(self.booster.predict(self._dmatrix(X), iteration_range=(0, self.n_rounds)))
        if self.objective_name == "multi:softmax":
            return prob.astype(np.int64).ravel()
        if prob.ndim == 2 and prob.shape[1] > 1:
            return np.argmax(prob, axis=1).astype(np.int64)
        if self.objective_name == "binary:logitraw":
            return (prob.ravel() > 0).astype(np.int64)
        return (prob.ravel() > 0.5).astype(np.int64)


def vector_leaf_values(tree: dict[str, Any], nodes: NDArray[np.int64], K: int) -> NDArray[np.float64]:
    """The vectors of the leaf ``nodes`` (local node ids) of one vector-leaf JSON tree, shape
    (len(nodes), K), as the JSON numbers read in float64.

    XGBoost 3.2 writes them to ``leaf_weights``, the leaf ``node``'s vector at row
    ``right_children[node]``; XGBoost 3.1 writes no ``leaf_weights`` and keeps them in
    ``base_weights`` (one row of K per node, the learning rate applied), at row ``node``: measured,
    the 3.1 margins are the base score plus these rows to float32 rounding.
    """
    if "leaf_weights" in tree:
        slots = np.asarray(tree["right_children"], dtype=np.int64)[nodes]
        return np.asarray(tree["leaf_weights"], dtype=np.float64).reshape(-1, K)[slots]
    return np.asarray(tree["base_weights"], dtype=np.float64).reshape(-1, K)[nodes]


def _add_tree(builder: StructureBuilder, tree: dict[str, Any], klass: int) -> None:
    """Append one JSON tree; node ids keep their order, so ``leaf_id`` is the local node id."""
    left = tree["left_children"]
    right = tree["right_children"]
    cond = np.asarray(tree["split_conditions"], dtype=np.float32).astype(np.float64)
    dim = int(tree["tree_param"].get("size_leaf_vector", "1"))
    vectors: dict[int, NDArray[np.float64]] = {}
    if dim > 1:  # leaf node -> its vector, float32 as XGBoost predicts with it
        leaves = np.flatnonzero(np.asarray(left) == -1)
        rows = vector_leaf_values(tree, leaves, dim).astype(np.float32).astype(np.float64)
        vectors = dict(zip(leaves.tolist(), rows, strict=True))
    cats: dict[int, list[int]] = {}
    for node, start, size in zip(
        tree.get("categories_nodes", []),
        tree.get("categories_segments", []),
        tree.get("categories_sizes", []),
        strict=True,
    ):
        cats[int(node)] = tree["categories"][start : start + size]
    split_type = tree.get("split_type", [0] * len(left))
    start = builder.n_nodes
    for n in range(len(left)):
        if left[n] == -1:
            value = vectors[n] if dim > 1 else cond[n]
            builder.add_node(value=value, leaf_id=n)
        elif split_type[n] == 1:  # listed categories go right in XGBoost: swapped below
            builder.add_node(
                feature=tree["split_indices"][n],
                default_left=not tree["default_left"][n],
                missing_type=MISSING_NAN,
                cats=cats.get(n, []),
            )
        else:
            builder.add_node(
                feature=tree["split_indices"][n],
                threshold=cond[n],
                inclusive=False,
                default_left=bool(tree["default_left"][n]),
                missing_type=MISSING_NAN,
            )
    for n in range(len(left)):
        if left[n] != -1:
            a, b = start + left[n], start + right[n]
            builder.set_children(start + n, *((b, a) if split_type[n] == 1 else (a, b)))
    builder.end_tree(klass if dim == 1 else -1)
