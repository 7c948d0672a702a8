"""LightGBM tree reader: ``Booster``, ``LGBMClassifier``, ``LGBMRegressor`` -> :class:`TreeStructure`.

From ``dump_model()`` (the trees ``predict`` uses: ``best_iteration`` when early stopping set it),
resolved here:

* numerical nodes go left iff ``x <= threshold`` (double precision, no rounding of inputs);
  ``missing_type`` None turns NaN into 0.0, Zero also sends 0.0 (and NaN) the default way, NaN sends
  NaN the default way;
* categorical nodes (``decision_type == '=='``, threshold ``"1||4||7"``) send the listed codes left;
  the code is ``int(x)``; NaN and negative codes go right;
* the boost_from_average init score is already folded into tree 0's leaves, so the base margin is 0;
  ``average_output`` (random forest mode) divides the sum by the number of iterations (``scale``);
* tree ``i`` adds to class ``i % num_tree_per_iteration``; leaves are numbered by ``leaf_index``.

Linear trees (``linear_tree=True``) are refused: their leaves are linear models of the features.
"""

from __future__ import annotations

from typing import Any, ClassVar

import lightgbm as lgb
import numpy as np
from numpy.typing import NDArray

from influence_gbdt.errors import UnsupportedModelError
from influence_gbdt.trees import MISSING_NAN, MISSING_NONE, MISSING_ZERO, StructureBuilder, TreeStructure

from .trees import ModelTrees

_MISSING = {"None": MISSING_NONE, "Zero": MISSING_ZERO, "NaN": MISSING_NAN}


def _objective(name: str) -> str:
    head = name.split(" ")[0]
    if head == "binary":
        return "binary"
    if head in ("multiclass", "multiclassova", "softmax", "multiclass_ova", "ova", "ovr"):
        return "multiclass"
    return "regression"


class LightGBMTrees(ModelTrees):
    """Read a LightGBM model (any objective; multiclass included).

    Raises
    ------
    UnsupportedModelError
        Unfitted model, no trees, or linear trees.
    """

    library: ClassVar[str] = "lightgbm"

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        if isinstance(model, lgb.LGBMModel):
            if getattr(model, "_Booster", None) is None:
                raise UnsupportedModelError(
                    f"This {type(model).__name__} is not fitted: call fit(X, y) first."
                )
            self.booster = model.booster_
        elif isinstance(model, lgb.Booster):
            self.booster = model
        else:
            raise UnsupportedModelError(
                f"{type(model).__name__} is not a LightGBM Booster or LGBM estimator."
            )
        if self.booster.num_trees() == 0:
            raise UnsupportedModelError("The LightGBM model has no trees: train it first.")
        best = self.booster.best_iteration
        self.n_iter = best if best > 0 else self.booster.current_iteration()

    def _read(self) -> TreeStructure:
        dump = self.booster.dump_model(num_iteration=self.n_iter)
        per_iter = int(dump["num_tree_per_iteration"])
        self.objective_text = str(dump.get("objective") or "")  # name and its settings
        kind = _objective(self.objective_text or "regression")
        n_outputs = per_iter if kind == "multiclass" else 1
        builder = StructureBuilder(n_outputs)
        categorical: set[int] = set()
        params = _parameters(self.booster)
        if params.get("linear_tree", "0") not in ("0", "false", "False", ""):
            raise UnsupportedModelError(
                "LightGBM model trained with linear_tree=True: its leaves are linear models, not "
                "constants. Retrain with linear_tree=False."
            )
        for i, tree in enumerate(dump["tree_info"]):
            _add_tree(builder, tree["tree_structure"], categorical)
            builder.end_tree(i % per_iter if n_outputs > 1 else 0)
        names = list(dump["feature_names"])
        declared = params.get("categorical_feature", "").replace(",", " ").split()
        categorical |= {int(v) for v in declared if v.isdigit() and int(v) < len(names)}
        is_cat = np.array([f in categorical for f in range(len(names))], dtype=bool)
        n_iter = len(dump["tree_info"]) // max(per_iter, 1)
        return builder.build(
            n_features=len(names),
            feature_names=tuple(names),
            feature_is_categorical=is_cat,
            objective=kind,
            base_margin=np.zeros(n_outputs),
            scale=1.0 / n_iter if dump.get("average_output") else 1.0,
            category_labels=_category_labels(dump.get("pandas_categorical"), is_cat),
        )

    # ------------------------------------------------------------------ the booster's own answers
    def raw_margin(self, X: Any) -> NDArray[np.float64]:
        """LightGBM's ``raw_score``; for ``average_output`` models (rf) divided by the number of
        iterations, as LightGBM does before the link (its ``raw_score`` there is the plain sum)."""
        out = np.asarray(self.booster.predict(X, raw_score=True, num_iteration=self.n_iter), dtype=np.float64)
        return out.reshape(out.shape[0], -1) * self.structure.scale

    def leaf_ids(self, X: Any) -> NDArray[np.int32]:
        out = np.asarray(self.booster.predict(X, pred_leaf=True, num_iteration=self.n_iter))
        return out.astype(np.int32).reshape(out.shape[0], -1)

    def predict_value(self, X: Any) -> NDArray[np.float64]:
        if isinstance(self.model, lgb.LGBMModel):
            return np.asarray(self.model.predict(X), dtype=np.float64)
        return np.asarray(self.booster.predict(X, num_iteration=self.n_iter), dtype=np.float64)

    @property
    def prediction_link(self) -> str:
        """LightGBM's output conversion of the objective (``ConvertOutput``), as its dump names it:
        exp for poisson/gamma/tweedie, the sigmoid for cross_entropy, log1p(exp) for
        cross_entropy_lambda, the signed square for ``reg_sqrt`` ("sqrt" in the name), else none
        (a custom objective, ranking)."""
        _ = self.structure  # reads objective_text with the trees
        words = self.objective_text.split()
        head = words[0] if words else ""
        if head in ("poisson", "gamma", "tweedie"):
            return "log"
        if head == "cross_entropy":
            return "logit"
        if head == "cross_entropy_lambda":
            return "softplus"
        return "signed_square" if "sqrt" in words[1:] else "identity"

    def predict_index(self, X: Any) -> NDArray[np.int64]:
        if isinstance(self.model, lgb.LGBMClassifier):
            return self._labels_to_index(self.model.predict(X))
        prob = np.asarray(self.booster.predict(X, num_iteration=self.n_iter))
        if prob.ndim == 2 and prob.shape[1] > 1:
            return np.argmax(prob, axis=1).astype(np.int64)
        return (prob.ravel() > 0.5).astype(np.int64)


def _add_tree(builder: StructureBuilder, root: dict[str, Any], categorical: set[int]) -> None:
    """Append one dumped tree (depth-first, explicit stack); records categorical features seen."""
    stack: list[tuple[dict[str, Any], int, bool]] = [(root, -1, True)]
    while stack:
        node, parent, is_left = stack.pop()
        if "split_index" not in node:
            idx = builder.add_node(value=float(node["leaf_value"]), leaf_id=int(node.get("leaf_index", 0)))
        elif node["decision_type"] == "==":
            categorical.add(int(node["split_feature"]))
            codes = [int(c) for c in str(node["threshold"]).split("||")]
            # Categorical: NaN and negative codes go right, whatever missing_type says.
            idx = builder.add_node(
                feature=int(node["split_feature"]), cats=codes, default_left=False, missing_type=MISSING_NAN
            )
        else:
            idx = builder.add_node(
                feature=int(node["split_feature"]),
                threshold=float(node["threshold"]),
                inclusive=True,
                default_left=bool(node["default_left"]),
                missing_type=_MISSING[node["missing_type"]],
            )
        if parent >= 0:
            builder.set_child(parent, idx, is_left)
        if "split_index" in node:
            stack.append((node["right_child"], idx, False))
            stack.append((node["left_child"], idx, True))


def _parameters(booster: lgb.Booster) -> dict[str, str]:
    """The ``parameters:`` section of the model string as ``{name: value}`` (empty if absent)."""
    text = booster.model_to_string(num_iteration=1)
    start = text.find("\nparameters:\n")
    params: dict[str, str] = {}
    if start >= 0:
        for line in text[start : text.find("\nend of parameters", start)].splitlines():
            if line.startswith("[") and ": " in line:
                key, value = line[1:-1].split(": ", 1)
                params[key] = value
    return params


def _category_labels(
    pandas_categorical: list[list[Any]] | None, is_cat: NDArray[np.bool_]
) -> tuple[Any, ...]:
    """Per feature, the pandas categories LightGBM stored (code i <-> label i), else None.

    LightGBM stores one list per categorical column of the training DataFrame, in column order.
    """
    labels: list[Any] = [None] * is_cat.size
    cats = list(pandas_categorical or [])
    cat_features = np.flatnonzero(is_cat)
    if cats and len(cats) == cat_features.size:
        for f, values in zip(cat_features, cats, strict=True):
            labels[int(f)] = tuple(values)
    return tuple(labels)
