"""Labels as the user has them: the mapping in influence_gbdt.labels, and real classifiers trained on
string, bool, {-1, 1} and {1, 2} labels, CatBoost class_names and target_border.

For each model the proof is the booster's own behaviour: the explainer's margins on training and
test rows equal the booster's raw prediction, their sigmoid is ``predict_proba[:, 1]``, and the
labels the loss sees are 1 exactly for the class of ``predict_proba[:, 1]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from boosters import binary_data

from influence_gbdt import BoostingInfluence, InputError
from influence_gbdt.engine import TestPoints
from influence_gbdt.labels import LabelMap

# ----------------------------------------------------------------------------------------------
# The mapping itself.


def test_class_labels_map_to_their_index_by_equality() -> None:
    m = LabelMap(classes=("no", "yes"), source="LGBMClassifier.classes_")
    np.testing.assert_array_equal(m.encode(np.array(["yes", "no", "yes"], dtype=object)), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(LabelMap(classes=(1, 0)).encode([0, 1, 1.0]), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(LabelMap(classes=(False, True)).encode([True, False]), [1.0, 0.0])
    np.testing.assert_array_equal(LabelMap(classes=(-1, 1)).encode(pd.Series([1, -1])), [1.0, 0.0])
    three = LabelMap(classes=("a", "b", "c"))  # K classes: the class index
    np.testing.assert_array_equal(three.encode(["c", "a", "b"]), [2.0, 0.0, 1.0])
    with pytest.raises(InputError, match=r"labels \['maybe'\] .* classes \['no', 'yes'\] \(LGBMClassifier"):
        m.encode(["yes", "maybe"])
    with pytest.raises(InputError, match=r"labels \['1'\] that are not among"):
        LabelMap(classes=(0, 1)).encode(["1"])  # text "1" is not the number 1
    with pytest.raises(InputError, match="missing labels"):
        m.encode(["yes", None])


def test_border_binary_and_numeric_labels() -> None:
    np.testing.assert_array_equal(LabelMap(border=0.5).encode([0.2, 0.5, 0.7]), [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(LabelMap(binary=True).encode([0, 1, 1]), [0.0, 1.0, 1.0])
    with pytest.raises(InputError, match=r"outside \[0, 1\]: A raw lightgbm Booster records no class labels"):
        LabelMap(binary=True, source="A raw lightgbm Booster").encode([1, 2])
    with pytest.raises(InputError, match="non-numeric labels"):
        LabelMap(binary=True).encode(["yes", "no"])
    with pytest.raises(InputError, match=r"non-numeric labels .*: the model takes numeric labels"):
        LabelMap().encode(["1.5", "x"])
    with pytest.raises(InputError, match="NaN or infinite"):
        LabelMap().encode([1.0, np.inf])
    with pytest.raises(InputError, match="one-dimensional"):
        LabelMap().encode(np.zeros((3, 2)))


# ----------------------------------------------------------------------------------------------
# Real classifiers trained on the labels users have.

_X, _Y01, _XT, _YT01 = binary_data(n=300, n_test=30, seed=3)
_CONT = _X["a"].to_numpy() + np.random.default_rng(0).normal(scale=0.5, size=len(_X))
_CONT_T = _XT["a"].to_numpy()

#: label kind -> (training labels, test labels); encoded as the user would have them.
LABELS: dict[str, tuple[Any, Any]] = {
    "strings": (np.where(_Y01 == 1, "yes", "no"), np.where(_YT01 == 1, "yes", "no")),
    "bools": (_Y01.astype(bool), _YT01.astype(bool)),
    "minus-one-one": (2 * _Y01 - 1, 2 * _YT01 - 1),
    "one-two": (_Y01 + 1, _YT01 + 1),
    "pandas-strings": (pd.Series(np.where(_Y01 == 1, "b", "a")), pd.Series(np.where(_YT01 == 1, "b", "a"))),
}


def _lightgbm(**kw: Any) -> Any:
    import lightgbm

    return lightgbm.LGBMClassifier(n_estimators=8, num_leaves=6, verbose=-1, **kw)


def _catboost(**kw: Any) -> Any:
    import catboost

    return catboost.CatBoostClassifier(iterations=8, depth=3, verbose=0, allow_writing_files=False, **kw)


def _xgboost(**kw: Any) -> Any:
    import xgboost

    return xgboost.XGBClassifier(n_estimators=8, max_depth=3, **kw)


def _positive_is_classes_1(model: Any, y: Any) -> np.ndarray:
    return np.asarray(y) == model.classes_[1]


#: (id, estimator factory, label kind or (train, test) labels, which labels are positive)
CASES: list[tuple[str, Callable[[], Any], Any, Callable[[Any, Any], np.ndarray]]] = [
    *[(f"lightgbm-{k}", _lightgbm, k, _positive_is_classes_1) for k in LABELS],
    *[(f"catboost-{k}", _catboost, k, _positive_is_classes_1) for k in LABELS],
    ("xgboost-bools", _xgboost, "bools", lambda m, y: np.asarray(y) == 1),
    (
        "catboost-class-names-1-0",
        lambda: _catboost(class_names=[1, 0]),
        (_Y01, _YT01),
        lambda m, y: np.asarray(y) == 0,
    ),
    (
        "catboost-target-border",
        lambda: _catboost(loss_function="Logloss", target_border=0.3),
        (_CONT, _CONT_T),
        lambda m, y: np.asarray(y) > 0.3,
    ),
    (
        "lightgbm-class-weight-strings",
        lambda: _lightgbm(class_weight={"yes": 3.0, "no": 1.0}),
        "strings",
        _positive_is_classes_1,
    ),
]


@pytest.mark.parametrize(("name", "make", "labels", "positive"), CASES, ids=[c[0] for c in CASES])
def test_classifiers_take_the_labels_they_were_trained_on(
    name: str, make: Callable[[], Any], labels: Any, positive: Callable[[Any, Any], np.ndarray]
) -> None:
    y, y_test = LABELS[labels] if isinstance(labels, str) else labels
    model = make().fit(_X, y)
    ex = BoostingInfluence(model, progress=False).fit(_X, y)
    adapter, engine = ex.adapter_, ex.engine_
    atol = 1e-5 if adapter.library == "xgboost" else 1e-9  # XGBoost margins are float32
    # The engine's model is the booster's, on training and test rows.
    np.testing.assert_allclose(engine.train_margin, adapter.raw_predict(_X), rtol=0, atol=atol)
    f_test = engine.predict_margin(TestPoints(adapter.leaf_indices(_XT), adapter.init_offset(_XT)))
    np.testing.assert_allclose(f_test, adapter.raw_predict(_XT), rtol=0, atol=atol)
    np.testing.assert_allclose(1 / (1 + np.exp(-f_test)), model.predict_proba(_XT)[:, 1], atol=1e-6)
    # Class 1 of the loss is the class of predict_proba[:, 1], on training and test labels.
    np.testing.assert_array_equal(engine.ensemble.y[:, 0], positive(model, y))
    np.testing.assert_array_equal(adapter.encode_labels(y_test), positive(model, y_test))
    scores = ex.score_training_points(_XT, y_test)
    direct = engine.leaf_influence(
        TestPoints(adapter.leaf_indices(_XT), adapter.init_offset(_XT), positive(model, y_test).astype(float))
    )
    np.testing.assert_array_equal(scores, direct)
    assert ex.top_training_points(_XT, y_test, n=3)["label"].isin(np.asarray(y)).all()


def test_a_catboost_file_keeps_its_class_names(tmp_path: Any) -> None:
    from influence_gbdt.cli import load_model

    y, y_test = LABELS["strings"]
    model = _catboost().fit(_X, y)
    model.save_model(str(tmp_path / "m.cbm"))
    loaded = load_model(tmp_path / "m.cbm")
    ex = BoostingInfluence(loaded, progress=False).fit(_X, y)
    np.testing.assert_allclose(ex.engine_.train_margin, model.predict(_X, prediction_type="RawFormulaVal"))
    np.testing.assert_array_equal(
        ex.score_training_points(_XT, y_test),
        BoostingInfluence(model, progress=False).fit(_X, y).score_training_points(_XT, y_test),
    )


def test_a_raw_booster_needs_the_0_1_labels_it_was_trained_on() -> None:
    y, _ = LABELS["strings"]
    model = _lightgbm().fit(_X, y)
    with pytest.raises(InputError, match="A raw lightgbm Booster records no class labels"):
        BoostingInfluence(model.booster_).fit(_X, y)
    ex = BoostingInfluence(model.booster_, progress=False).fit(_X, (y == "yes").astype(int))
    np.testing.assert_allclose(ex.engine_.train_margin, model.predict(_X, raw_score=True), atol=1e-9)
