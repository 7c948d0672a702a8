"""scikit-learn Pipelines that end in a booster, wrapped whole.

The proofs: the explainer's predictions are the pipeline's own ``predict_proba`` / ``predict`` (the
booster's arithmetic on the rows its preprocessing makes), and every score is, bit for bit, the
score of the booster wrapped alone on the rows ``pipeline[:-1].transform`` makes (which the rest of
the suite holds to retraining, refresh and refit), while the results are keyed and shown in the
user's own rows and columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, default_model

from influence_gbdt import (
    BoostingInfluence,
    FeatureTweaking,
    InputError,
    ReproductionError,
    UnsupportedModelError,
)

sklearn = pytest.importorskip("sklearn")
from sklearn.base import BaseEstimator, TransformerMixin, clone  # noqa: E402
from sklearn.compose import TransformedTargetRegressor, make_column_transformer  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    FunctionTransformer,
    MinMaxScaler,
    OneHotEncoder,
    StandardScaler,
    TargetEncoder,
)

NUMERIC = ["a", "b", "c"]


def _frames(n: int = 300, n_test: int = 6) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray]:
    """Three numeric columns and a text column, indexed by the user's own labels (not 0 .. n-1)."""
    X, y, X_test, y_test = binary_data(n=n, n_test=n_test)
    X, X_test = (frame.assign(g=np.where(frame["d"] > 0.3, "p", np.where(frame["d"] < -0.5, "q", "r")))
                 .drop(columns="d") for frame in (X, X_test))
    X.index = pd.Index([f"train{i}" for i in range(n)], name="id")
    X_test.index = pd.Index([f"test{i}" for i in range(n_test)], name="id")
    return X, y, X_test, y_test


def _preprocessing() -> Any:
    return make_column_transformer((OneHotEncoder(sparse_output=False, handle_unknown="ignore"), ["g"]),
                                   (StandardScaler(), NUMERIC))


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_pipeline_is_scored_as_its_booster_on_the_rows_it_makes(library: str) -> None:
    """Each library's default classifier behind a ColumnTransformer (one-hot text, scaled numbers),
    text labels where the wrapper takes them: the explainer predicts what the pipeline predicts;
    test points, their mean and LeafRefit score as the booster alone on the transformed rows, bit
    for bit; the results carry the user's row labels and show the user's columns."""
    X, y, X_test, y_test = _frames()
    if library != "xgboost":  # XGBClassifier takes encoded labels only
        y, y_test = np.array(["no", "yes"])[y], np.array(["no", "yes"])[y_test]
    pipe = make_pipeline(_preprocessing(), default_model(library)).fit(X, y)
    ex = BoostingInfluence(pipe, progress=False).fit(X, y)
    alone = BoostingInfluence(pipe[-1], progress=False).fit(pipe[:-1].transform(X), y)
    X_test_model = pipe[:-1].transform(X_test)

    explained = ex.explain_prediction(X_test.iloc[[2]], y_test[[2]])
    proba = pipe.predict_proba(X_test.iloc[[2]])[0]
    # The booster's float32 sums against the engine's float64 margins: a few float32 ulps.
    np.testing.assert_allclose(list(explained.probabilities.values()), proba, rtol=1e-5)
    assert list(explained.probabilities) == list(pipe.classes_)

    scores = ex.score_training_points(X_test, y_test)
    np.testing.assert_array_equal(np.asarray(scores), alone.score_training_points(X_test_model, y_test))
    assert list(scores.index) == list(X.index) and list(scores.columns) == list(X_test.index)
    mean = ex.score_training_points(X_test, y_test, aggregate="mean")
    np.testing.assert_array_equal(np.asarray(mean),
                                  alone.score_training_points(X_test_model, y_test, aggregate="mean"))
    ex.set_params(method="leaf_refit")
    alone.set_params(method="leaf_refit")
    refit = ex.score_training_points(X_test, y_test, training_points=[0, 7, 150])
    want = alone.score_training_points(X_test_model, y_test, training_points=[0, 7, 150])
    np.testing.assert_array_equal(np.asarray(refit), want)
    assert list(refit.index) == ["train0", "train7", "train150"]

    top = ex.set_params(method="leaf_influence").top_training_points(X_test, y_test, n=3)
    assert list(top.columns) == ["row", "score", "label", *X.columns]  # the user's columns, not encoded ones
    assert set(top["g"]) <= {"p", "q", "r"}
    pd.testing.assert_frame_equal(top[list(X.columns)], X.loc[top.index], check_names=False)
    assert clone(ex).model is pipe


def test_nested_pipelines_and_pandas_output_are_flattened() -> None:
    """A pipeline inside a pipeline, pandas output between steps, LightGBM's default regressor: the
    steps run in order, the scores are the booster's on the rows they make."""
    import lightgbm

    X, _, X_test, _ = _frames()
    y = X["a"].to_numpy() * 2 + np.where(X["g"] == "p", 1.0, 0.0)
    y_test = X_test["a"].to_numpy() * 2
    inner = make_pipeline(MinMaxScaler().set_output(transform="pandas"), lightgbm.LGBMRegressor(verbose=-1))
    pipe = make_pipeline(_preprocessing(), inner).set_output(transform="pandas").fit(X, y)
    ex = BoostingInfluence(pipe, progress=False).fit(X, y)
    rows = inner[:-1].transform(pipe[:-1].transform(X))
    assert isinstance(rows, pd.DataFrame)  # the booster was trained on named columns
    alone = BoostingInfluence(inner[-1], progress=False).fit(rows, y)
    np.testing.assert_array_equal(
        np.asarray(ex.score_training_points(X_test, y_test)),
        np.asarray(alone.score_training_points(inner[:-1].transform(pipe[:-1].transform(X_test)), y_test)))
    prediction = ex.explain_prediction(X_test.iloc[[0]]).margin
    np.testing.assert_allclose(prediction, pipe.predict(X_test.iloc[[0]]), rtol=1e-6)  # float32 vs float64


class _Resampler(TransformerMixin, BaseEstimator):
    """A step as imbalanced-learn's samplers are to its pipelines (a ``Pipeline`` subclass that
    calls ``fit_resample`` in fit and skips the step at transform): what the explainer recognizes
    them by. (Here, in scikit-learn's own Pipeline, it transforms nothing.)"""

    def fit(self, X: Any, y: Any = None) -> _Resampler:
        return self

    def transform(self, X: Any) -> Any:
        return X

    def fit_resample(self, X: Any, y: Any) -> tuple[Any, Any]:
        return X[::2], y[::2]


@pytest.mark.filterwarnings("ignore:X does not have valid feature names")  # the rows passed twice
def test_pipelines_that_cannot_be_explained_are_refused_with_the_reason() -> None:
    import lightgbm

    X, y, X_test, y_test = _frames()
    booster = lightgbm.LGBMClassifier(verbose=-1, n_estimators=20)

    encoded = make_pipeline(make_column_transformer((TargetEncoder(), ["g"]), remainder="passthrough"),
                            clone(booster)).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="holds a TargetEncoder, which encodes the training rows"):
        BoostingInfluence(encoded).fit(X, y)

    resampled = make_pipeline(_Resampler(), clone(booster)).fit(X[NUMERIC], y)
    with pytest.raises(UnsupportedModelError, match="step '_resampler' is a sampler"):
        BoostingInfluence(resampled).fit(X[NUMERIC], y)

    no_model = make_pipeline(_preprocessing(), "passthrough")
    with pytest.raises(UnsupportedModelError, match="last step 'passthrough' is 'passthrough'"):
        BoostingInfluence(no_model).fit(X, y)

    pipe = make_pipeline(_preprocessing(), clone(booster)).fit(X, y)
    with pytest.raises(InputError, match=r"could not transform X .*ColumnTransformer is expecting 4"):
        BoostingInfluence(pipe).fit(pipe[:-1].transform(X), y)  # rows already transformed
    scaled = make_pipeline(StandardScaler(), clone(booster)).fit(X[NUMERIC], y)
    with pytest.raises(ReproductionError, match=r"The model wraps its booster \(a Pipeline or a Transformed"):
        BoostingInfluence(scaled, progress=False).fit(scaled[:-1].transform(X[NUMERIC]), y)

    dropping = make_pipeline(FunctionTransformer(), clone(booster)).fit(X[NUMERIC], y)
    dropping.steps[0] = ("drop_first", FunctionTransformer(lambda frame: frame.iloc[1:]).fit(X[NUMERIC]))
    with pytest.raises(InputError, match="turned 300 rows of X into 299"):
        BoostingInfluence(dropping).fit(X[NUMERIC], y)

    ex = BoostingInfluence(pipe, progress=False).fit(X, y)
    with pytest.raises(InputError, match="column names differ"):
        ex.score_training_points(X_test[["g", *NUMERIC]], y_test)
    with pytest.raises(UnsupportedModelError, match=r"pass its trained booster, pipeline\[-1\]"):
        FeatureTweaking(pipe).fit()


def test_early_stopping_inside_a_pipeline_scores_the_trees_predict_uses() -> None:
    """``XGBClassifier(early_stopping_rounds=...)`` behind the preprocessing, its validation rows
    transformed by it: the explainer's prediction is the pipeline's (the trees up to the best
    iteration), and the scores are the booster's alone."""
    import xgboost

    X, y, X_test, y_test = _frames(n=400, n_test=40)
    pre = _preprocessing().fit(X)
    booster = xgboost.XGBClassifier(n_estimators=200, learning_rate=0.5, early_stopping_rounds=3)
    pipe = make_pipeline(pre, booster)
    pipe.fit(X, y, xgbclassifier__eval_set=[(pre.transform(X_test), y_test)], xgbclassifier__verbose=False)
    # Stopped early: predict uses fewer trees than the booster holds.
    assert booster.best_iteration < booster.get_booster().num_boosted_rounds() - 1
    ex = BoostingInfluence(pipe, progress=False).fit(X, y)
    explained = ex.explain_prediction(X_test.iloc[[3]], y_test[[3]])
    np.testing.assert_allclose(explained.probabilities[1], pipe.predict_proba(X_test.iloc[[3]])[0, 1],
                               rtol=1e-5)  # the booster's float32 sums against float64 margins
    alone = BoostingInfluence(pipe[-1], progress=False).fit(pre.transform(X), y)
    want = alone.score_training_points(pre.transform(X_test), y_test, aggregate="mean")
    got = ex.score_training_points(X_test, y_test, aggregate="mean")
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_transformed_target_is_scored_on_the_loss_the_booster_minimised(library: str) -> None:
    """``TransformedTargetRegressor(regressor, func=np.log1p, inverse_func=np.expm1)`` around each
    library's default regressor, on a positive target: the explainer's raw prediction is the
    regressor's (``predict`` is its ``expm1``), and the scores are the booster's alone trained on
    ``log1p(y)``, bit for bit: the loss it minimised, in the transformed target."""
    X, _, X_test, _ = _frames()
    X, X_test = X[NUMERIC], X_test[NUMERIC]
    y, y_test = np.exp(X["a"].to_numpy() + 0.3 * X["b"].to_numpy()), np.exp(X_test["a"].to_numpy())
    model = TransformedTargetRegressor(regressor=default_model(library, "Regressor"), func=np.log1p,
                                       inverse_func=np.expm1)
    model.fit(X, y)
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    margin = ex.explain_prediction(X_test.iloc[[1]]).margin
    np.testing.assert_allclose(margin, model.regressor_.predict(X_test.iloc[[1]]), rtol=1e-6)  # float32 sums
    np.testing.assert_allclose(np.expm1(margin), model.predict(X_test.iloc[[1]]), rtol=1e-6)
    alone = BoostingInfluence(model.regressor_, progress=False).fit(X, np.log1p(y))
    np.testing.assert_array_equal(np.asarray(ex.score_training_points(X_test, y_test)),
                                  alone.score_training_points(X_test, np.log1p(y_test)))
    ex.set_params(method="leaf_refit")
    alone.set_params(method="leaf_refit")
    want = alone.score_training_points(X_test, np.log1p(y_test), training_points=[3, 40])
    got = ex.score_training_points(X_test, y_test, training_points=[3, 40])
    np.testing.assert_array_equal(np.asarray(got), want)


def test_a_target_transform_and_a_pipeline_inside_each_other() -> None:
    """A pipeline inside a ``TransformedTargetRegressor`` (a standardised target) and one around it:
    rows go through the pipeline's steps, labels through the target transform, in either order of
    nesting; labels already transformed are caught by the self-check, which says why."""
    import lightgbm

    X, _, X_test, _ = _frames()
    y = 3.0 * X["a"].to_numpy() + np.where(X["g"] == "p", 5.0, 0.0) + 40.0
    y_test = 3.0 * X_test["a"].to_numpy() + 40.0
    booster = lightgbm.LGBMRegressor(verbose=-1)
    inner = TransformedTargetRegressor(regressor=make_pipeline(_preprocessing(), clone(booster)),
                                       transformer=StandardScaler()).fit(X, y)
    outer = make_pipeline(_preprocessing(),
                          TransformedTargetRegressor(regressor=clone(booster), transformer=StandardScaler()))
    outer.fit(X, y)
    cases = ((inner, inner.regressor_[-1], inner.regressor_[:-1], inner.transformer_),
             (outer, outer[-1].regressor_, outer[:-1], outer[-1].transformer_))
    for model, fitted, pre, target in cases:
        ex = BoostingInfluence(model, progress=False).fit(X, y)
        y_model = target.transform(y[:, None])[:, 0]
        alone = BoostingInfluence(fitted, progress=False).fit(pre.transform(X), y_model)
        want = alone.score_training_points(pre.transform(X_test), target.transform(y_test[:, None])[:, 0])
        np.testing.assert_array_equal(np.asarray(ex.score_training_points(X_test, y_test)), want)
        np.testing.assert_allclose(ex.explain_prediction(X_test.iloc[[0]]).margin,
                                   fitted.predict(pre.transform(X_test.iloc[[0]])), rtol=1e-6)
    with pytest.raises(ReproductionError, match="the target transform of y"):
        BoostingInfluence(inner, progress=False).fit(X, inner.transformer_.transform(y[:, None])[:, 0])
    with pytest.raises(UnsupportedModelError, match="TransformedTargetRegressor is not fitted"):
        BoostingInfluence(TransformedTargetRegressor(regressor=lightgbm.LGBMRegressor())).fit(X[NUMERIC], y)
    with pytest.raises(UnsupportedModelError, match=r"here pass its trained regressor, model.regressor_"):
        FeatureTweaking(inner).fit()


def test_a_search_or_a_frozen_model_is_scored_as_the_model_it_predicts_with() -> None:
    """A ``GridSearchCV`` over a pipeline around LightGBM's classifier, fitted with sample weights:
    the explainer predicts what the search predicts, and scores as its ``best_estimator_`` wrapped
    alone, bit for bit; so does a ``FrozenEstimator`` holding that pipeline. Feature tweaking reads
    a search's booster. A search without a best estimator is refused with the reason."""
    import lightgbm
    from sklearn.model_selection import GridSearchCV

    frozen_module = pytest.importorskip("sklearn.frozen")  # scikit-learn >= 1.6
    X, y, X_test, y_test = _frames()
    weight = np.linspace(0.5, 2.0, len(y))
    pipe = make_pipeline(_preprocessing(), lightgbm.LGBMClassifier(verbose=-1, n_estimators=20))
    search = GridSearchCV(pipe, {"lgbmclassifier__num_leaves": [4, 15]}, cv=3)
    search.fit(X, y, lgbmclassifier__sample_weight=weight)
    best = BoostingInfluence(search.best_estimator_, progress=False).fit(X, y, sample_weight=weight)
    want = best.score_training_points(X_test, y_test)
    for model in (search, frozen_module.FrozenEstimator(search.best_estimator_)):
        ex = BoostingInfluence(model, progress=False).fit(X, y, sample_weight=weight)
        pd.testing.assert_frame_equal(ex.score_training_points(X_test, y_test), want)
        np.testing.assert_allclose(ex.explain_prediction(X_test.iloc[[4]], y_test[[4]]).probabilities[1],
                                   model.predict_proba(X_test.iloc[[4]])[0, 1], rtol=1e-5)  # float32 sums

    bare = GridSearchCV(lightgbm.LGBMClassifier(verbose=-1, n_estimators=20), {"num_leaves": [4, 15]}, cv=3)
    bare.fit(X[NUMERIC], y)
    pd.testing.assert_frame_equal(FeatureTweaking(bare).fit(X[NUMERIC]).tweak(X_test[NUMERIC], target=1),
                                  FeatureTweaking(bare.best_estimator_).fit(X[NUMERIC]).tweak(X_test[NUMERIC],
                                                                                              target=1))
    no_refit = GridSearchCV(clone(pipe), {"lgbmclassifier__num_leaves": [4, 15]}, cv=3, refit=False).fit(X, y)
    with pytest.raises(UnsupportedModelError, match=r"refit=False, so no model was trained on all its rows"):
        BoostingInfluence(no_refit).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="GridSearchCV has no best_estimator_: it is not fitted"):
        BoostingInfluence(GridSearchCV(clone(pipe), {})).fit(X, y)


def test_wrappers_whose_prediction_is_not_one_booster_are_refused_with_what_to_pass() -> None:
    """Calibration, one booster per target, scikit-learn's own boosting and model ensembles: refused
    by name, by the explainer and by feature tweaking, saying what to explain instead."""
    import lightgbm
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import HistGradientBoostingClassifier, VotingClassifier
    from sklearn.multioutput import MultiOutputRegressor

    X, y, _, _ = _frames(n=120)
    X = X[NUMERIC]
    small = lightgbm.LGBMClassifier(verbose=-1, n_estimators=5)
    Y = np.column_stack([X["a"], X["b"]])
    cases = [
        (CalibratedClassifierCV(small, cv=2).fit(X, y), y, r"calibrated_classifiers_\[i\].estimator"),
        (MultiOutputRegressor(lightgbm.LGBMRegressor(verbose=-1, n_estimators=5)).fit(X, Y), Y,
         r"one booster per target: explain each, BoostingInfluence\(model.estimators_\[k\]\)"),
        (HistGradientBoostingClassifier(max_iter=5).fit(X, y), y, "scikit-learn's own gradient boosting"),
        (VotingClassifier([("a", small), ("b", clone(small))]).fit(X, y), y, "combines several models"),
    ]
    for model, labels, reason in cases:
        name = type(model).__name__
        refused = rf"scikit-learn's {name} is not supported"
        with pytest.raises(UnsupportedModelError, match=rf"{refused}: .*{reason}"):
            BoostingInfluence(model).fit(X, labels)
        with pytest.raises(UnsupportedModelError, match=refused):
            FeatureTweaking(model).fit()
