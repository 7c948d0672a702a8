"""CatBoost tree reader: ``CatBoost``, ``CatBoostClassifier``, ``CatBoostRegressor`` -> TreeStructure.

From the JSON export (``save_model(format='json')``), resolved here:

* a float split sends ``x > border`` right (so left iff ``x <= border``) on features rounded to
  float32; NaN follows the feature's ``nan_value_treatment`` (``AsTrue``: right; ``AsFalse`` and
  ``AsIs``, where ``NaN > border`` is false: left);
* a one-hot split sends the category whose hash equals ``value`` right: the reader swaps the
  children, so the listed set goes left. Category codes are CatBoost's own hashes of the labels
  (the low 32 bits of CityHash64 of the label as text, signed; see ``_cityhash``);
* an oblivious tree of depth ``d`` is expanded to a full binary tree whose leaf ``i`` has
  ``bit_k(i) = 1`` iff split ``k`` went right, the numbering of ``calc_leaf_indexes``;
* a non-symmetric tree (Depthwise / Lossguide) keeps CatBoost's node order: the JSON gives the
  splits and CatBoost's step nodes give the leaf numbers (``_get_tree_step_nodes`` and
  ``_get_tree_node_to_leaf``, what CatBoost's own ``plot_tree`` reads);
* the margin is ``scale * sum + bias`` (``scale_and_bias``); multiclass leaves are vectors.

* a split on a CTR (a target statistic of a categorical feature or of a combination of features)
  compares a number that, at predict time, CatBoost reads from the tables the model stores: it
  becomes a numerical split (``value > border`` right) on a *derived column*
  (:mod:`.catboost_stored_ctr` computes them from the input row; ``TreeStructure.derived``).

Text and embedding features are refused: their values are not computed here.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from influence_gbdt.errors import UnsupportedModelError
from influence_gbdt.trees import MISSING_NAN, StructureBuilder, TreeStructure

from ._cityhash import cityhash64
from .catboost_stored_ctr import ctr_split_columns, stored_ctrs
from .trees import ModelTrees

_MULTICLASS = ("MultiClass", "MultiClassOneVsAll")
_BINARY = ("Logloss", "CrossEntropy")


def cat_feature_hash(labels: ArrayLike) -> NDArray[np.int64]:
    """CatBoost's hash of categorical labels (as one-hot splits store it), shape (n,), int64.

    The low 32 bits, read as a signed integer, of CityHash64 of the label's text (integers written
    without a decimal point, as CatBoost converts them).
    """
    out = []
    for v in np.asarray(labels, dtype=object).ravel():
        low = cityhash64(_as_text(v).encode()) & 0xFFFFFFFF
        out.append(low - (1 << 32) if low >= 1 << 31 else low)
    return np.asarray(out, dtype=np.int64)


def _as_text(value: Any) -> str:
    """A categorical label as CatBoost turns it into text (integers without a decimal point)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value.item() if hasattr(value, "item") else value)


class CatBoostTrees(ModelTrees):
    """Read a trained CatBoost model (oblivious or non-symmetric trees; any loss, multiclass included).

    Raises
    ------
    UnsupportedModelError
        Unfitted model, text or embedding features, or CTRs of a type not modelled.
    """

    library: ClassVar[str] = "catboost"
    codes_are_labels: ClassVar[bool] = False

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        if not hasattr(model, "get_all_params") or not model.is_fitted():
            raise UnsupportedModelError("The CatBoost model is not trained: call fit() before wrapping it.")
        self.loss = str(model.get_all_params().get("loss_function", "RMSE")).split(":")[0]

    def _json(self) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.json")
            self.model.save_model(path, format="json")
            with open(path) as fh:
                return dict(json.load(fh))

    def _read(self) -> TreeStructure:
        doc = self._json()
        info = doc["features_info"]
        if info.get("text_features") or info.get("embedding_features"):
            raise UnsupportedModelError(
                "This CatBoost model uses text or embedding features, whose values are not computed "
                "here. Retrain without text or embedding features."
            )
        floats = {int(f["feature_index"]): f for f in info.get("float_features", [])}
        cats = {int(f["feature_index"]): f for f in info.get("categorical_features", [])}
        names = list(self.model.feature_names_)
        derived = stored_ctrs(doc, len(names))
        scale, bias = doc.get("scale_and_bias", [1.0, [0.0]])
        bias = np.atleast_1d(np.asarray(bias, dtype=np.float64))
        n_outputs = bias.size
        kind = (
            "multiclass" if self.loss in _MULTICLASS else "binary" if self.loss in _BINARY else "regression"
        )
        splitter = _Splits(floats, cats, info, len(names))
        builder = StructureBuilder(n_outputs)
        if "oblivious_trees" in doc:
            for tree in doc["oblivious_trees"]:
                _add_oblivious(builder, tree, splitter, n_outputs)
        else:
            for t, tree in enumerate(doc["trees"]):
                steps = self.model._get_tree_step_nodes(t)
                to_leaf = np.asarray(self.model._get_tree_node_to_leaf(t), dtype=np.int64)
                _add_nonsymmetric(builder, tree, splitter, steps, to_leaf)
        n_derived = 0 if derived is None else derived.n_derived
        is_cat = np.zeros(len(names) + n_derived, dtype=bool)
        is_cat[[int(f["flat_feature_index"]) for f in cats.values()]] = True
        is_cat[list(self.model.get_cat_feature_indices())] = True
        return builder.build(
            n_features=len(names) + n_derived,
            feature_names=tuple(str(n) for n in names) + (() if derived is None else derived.names),
            feature_is_categorical=is_cat,
            objective=kind,
            base_margin=bias,
            scale=float(scale),
            float32_inputs=True,
            category_labels=(None,) * (len(names) + n_derived),
            derived=derived,
        )

    # ------------------------------------------------------------------ the booster's own answers
    def _pool(self, X: Any) -> Any:
        import catboost

        if isinstance(X, catboost.Pool):
            return X
        return catboost.Pool(X, cat_features=list(self.model.get_cat_feature_indices()) or None)

    def raw_margin(self, X: Any) -> NDArray[np.float64]:
        out = np.asarray(self.model.predict(self._pool(X), prediction_type="RawFormulaVal"), dtype=np.float64)
        return out.reshape(out.shape[0], -1)

    def leaf_ids(self, X: Any) -> NDArray[np.int32]:
        return np.asarray(self.model.calc_leaf_indexes(self._pool(X)), dtype=np.int32)

    def predict_value(self, X: Any) -> NDArray[np.float64]:
        return np.asarray(self.model.predict(self._pool(X)), dtype=np.float64)

    @property
    def prediction_link(self) -> str:
        """``CatBoostRegressor.predict`` gives the exponent of the margin for Poisson and Tweedie
        (its default ``prediction_type``); the generic ``CatBoost.predict`` the margin itself."""
        import catboost

        exponent = isinstance(self.model, catboost.CatBoostRegressor) and self.loss in ("Poisson", "Tweedie")
        return "log" if exponent else "identity"

    def predict_index(self, X: Any) -> NDArray[np.int64]:
        labels = self.model.predict(self._pool(X), prediction_type="Class")
        return self._labels_to_index(np.asarray(labels).ravel())

    @property
    def classes(self) -> NDArray[Any] | None:
        if self.structure.objective == "regression":
            return None
        names = getattr(self.model, "classes_", None)
        if names is None or len(names) == 0:
            return np.arange(max(2, self.structure.n_outputs))
        return np.asarray(names)

    @property
    def decision_threshold(self) -> float:
        get = getattr(self.model, "get_probability_threshold", None)
        p = float(get()) if get is not None and self.structure.objective == "binary" else 0.5
        return float(np.log(p / (1.0 - p)))

    def _codes_of_labels(self, feature: int, labels: list[Any]) -> NDArray[np.float64]:
        """CatBoost's hash of each label (what the one-hot splits compare)."""
        return cat_feature_hash(labels).astype(np.float64)


class _Splits:
    """Turns a JSON split into StructureBuilder arguments (and whether the children swap); a CTR
    split reads derived column ``n_inputs + k`` for the model's k-th CTR feature."""

    def __init__(self, floats: dict[int, dict[str, Any]], cats: dict[int, dict[str, Any]],
                 info: dict[str, Any], n_inputs: int) -> None:
        self.floats, self.cats, self.n_inputs = floats, cats, n_inputs
        self.first_ctr, self.ctr_of = ctr_split_columns(info)

    def node(self, split: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        kind = split.get("split_type")
        if kind == "FloatFeature":
            feat = self.floats[int(split["float_feature_index"])]
            return {
                "feature": int(feat["flat_feature_index"]),
                "threshold": float(np.float32(split["border"])),
                "inclusive": True,
                "default_left": feat.get("nan_value_treatment", "AsIs") != "AsTrue",
                "missing_type": MISSING_NAN,
            }, False
        if kind == "OneHotFeature":
            feat = self.cats[int(split["cat_feature_index"])]
            return {
                "feature": int(feat["flat_feature_index"]),
                "cats": [int(split["value"])],
                "default_left": False,
                "missing_type": MISSING_NAN,
            }, True
        if kind == "OnlineCtr":
            return {
                "feature": self.n_inputs + int(self.ctr_of[int(split["split_index"]) - self.first_ctr]),
                "threshold": float(np.float32(split["border"])),
                "inclusive": True,
                "default_left": True,  # a CTR value is never missing
                "missing_type": MISSING_NAN,
            }, False
        raise UnsupportedModelError(f"This CatBoost model splits on {kind}, which is not modelled.")


def _add_oblivious(builder: StructureBuilder, tree: dict[str, Any], splits: _Splits, dim: int) -> None:
    """Expand an oblivious tree level by level; leaf index bit k is 1 iff split k went right."""
    values = np.asarray(tree["leaf_values"], dtype=np.float64)
    levels = [splits.node(s) for s in tree.get("splits") or []]
    # Frontier of (node, leaf index bits so far); level k tests split k.
    root_bits = [(-1, True, 0)]  # (parent, is_left, bits)
    for depth, (args, swap) in enumerate(levels):
        nxt = []
        for parent, is_left, bits in root_bits:
            node = builder.add_node(**args)
            if parent >= 0:
                builder.set_child(parent, node, is_left)
            # bit 0 (split false) is the library's left; a one-hot split's true side is our left.
            nxt.append((node, not swap, bits))
            nxt.append((node, swap, bits | (1 << depth)))
        root_bits = nxt
    for parent, is_left, bits in root_bits:
        leaf = builder.add_node(value=values[bits * dim : (bits + 1) * dim], leaf_id=bits)
        if parent >= 0:
            builder.set_child(parent, leaf, is_left)
    builder.end_tree(-1 if dim > 1 else 0)


def _add_nonsymmetric(
    builder: StructureBuilder,
    tree: dict[str, Any],
    splits: _Splits,
    steps: list[tuple[int, int]],
    to_leaf: NDArray[np.int64],
) -> None:
    """Walk the JSON tree and CatBoost's flat step nodes together (flat index i <-> JSON node)."""
    dim = builder.n_outputs
    # Stack of (json node, flat index, parent, is_left); a zero step means the child is a leaf held
    # by the same flat node.
    stack: list[tuple[dict[str, Any], int, int, bool]] = [(tree, 0, -1, True)]
    while stack:
        node, flat, parent, is_left = stack.pop()
        if "split" not in node:
            value = np.atleast_1d(np.asarray(node["value"], dtype=np.float64))
            idx = builder.add_node(value=value[:dim], leaf_id=int(to_leaf[flat]))
        else:
            args, swap = splits.node(node["split"])
            idx = builder.add_node(**args)
            step_left, step_right = steps[flat]
            # CatBoost's left is "split false"; a one-hot split's true side is our left.
            for child, step, lib_left in (
                (node["left"], step_left, True),
                (node["right"], step_right, False),
            ):
                stack.append((child, flat + step, idx, lib_left != swap))
        if parent >= 0:
            builder.set_child(parent, idx, is_left)
    builder.end_tree(-1 if dim > 1 else 0)
