"""polars DataFrames and Series wherever pandas ones are taken.

The proofs: the explainer's predictions on polars rows are the booster's own ``predict_proba`` of
those polars rows, and every score is, bit for bit, the score of the same explainer given the
rows' ``to_pandas()`` (which the rest of the suite holds to retraining, refresh and refit). A
pipeline fitted on polars transforms the user's polars rows itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, default_model, fit_or_skip

from influence_gbdt import BoostingInfluence, FeatureTweaking, InputError

pl = pytest.importorskip("polars")
pytest.importorskip("pyarrow")  # polars' to_pandas


def _with_nulls(frame: pd.DataFrame) -> Any:
    """``frame`` as polars, with column "b" null where "a" > 1.2 (missing values) and "c" float32."""
    out = pl.from_pandas(frame)
    return out.with_columns(pl.when(pl.col("a") > 1.2).then(None).otherwise(pl.col("b")).alias("b"),
                            pl.col("c").cast(pl.Float32))


@pytest.mark.parametrize("library", LIBRARIES)
def test_polars_rows_score_as_their_pandas_conversion(library: str) -> None:
    """Each library's default classifier trained on a polars frame (nulls, a float32 column), polars
    labels (text where the wrapper takes them) and polars weights: the explainer predicts what the
    booster predicts on the polars rows, and scores, LeafRefit and the top rows are those of the same
    data passed as pandas, bit for bit."""
    X, y, X_test, y_test = binary_data(n=300, n_test=6)
    Xp, Xp_test = _with_nulls(X), _with_nulls(X_test)
    if library != "xgboost":  # XGBClassifier takes encoded labels only
        y, y_test = np.array(["no", "yes"])[y], np.array(["no", "yes"])[y_test]
    yp, yp_test = pl.Series("y", y), pl.Series("y", y_test)
    weight = pl.Series("w", np.linspace(0.5, 2.0, len(y)))
    model = fit_or_skip(default_model(library), Xp, yp, sample_weight=weight)

    ex = BoostingInfluence(model, progress=False).fit(Xp, yp, sample_weight=weight)
    explained = ex.explain_prediction(Xp_test[2:3], yp_test[2:3])
    # The booster's float32 sums against the engine's float64 margins: a few float32 ulps.
    np.testing.assert_allclose(list(explained.probabilities.values()), model.predict_proba(Xp_test[2:3])[0],
                               rtol=1e-5)
    ref = BoostingInfluence(model, progress=False).fit(Xp.to_pandas(), y, sample_weight=weight.to_numpy())
    scores = ex.score_training_points(Xp_test, yp_test)
    pd.testing.assert_frame_equal(scores, ref.score_training_points(Xp_test.to_pandas(), y_test))
    ex.set_params(method="leaf_refit")
    ref.set_params(method="leaf_refit")
    got = ex.score_training_points(Xp_test, yp_test, training_points=[0, 9])
    want = ref.score_training_points(Xp_test.to_pandas(), y_test, training_points=[0, 9])
    pd.testing.assert_frame_equal(got, want)
    top = ex.top_training_points(Xp_test[:1], yp_test[:1], n=3)
    assert list(top.columns) == ["score", "label", *Xp.columns]
    pd.testing.assert_frame_equal(top, ref.top_training_points(Xp_test.to_pandas()[:1], y_test[:1], n=3))


def test_polars_categorical_columns_read_as_xgboost_reads_them() -> None:
    """``XGBClassifier(enable_categorical=True)`` on a polars ``Categorical`` column (categories in
    order of appearance): the explainer's leaves are the booster's (its prediction matches), and the
    scores are those of the pandas conversion; feature tweaking takes the polars rows too."""
    import xgboost

    X, y, X_test, y_test = binary_data(n=300, n_test=5)

    def colours(frame: pd.DataFrame) -> Any:
        colour = np.where(frame["d"] > 0.4, "red", np.where(frame["d"] < -0.6, "blue", "green"))
        return pl.from_pandas(frame.drop(columns="d")).with_columns(
            pl.Series("colour", colour).cast(pl.Categorical))

    Xp, Xp_test = colours(X), colours(X_test)
    model = xgboost.XGBClassifier(n_estimators=30, enable_categorical=True, max_cat_to_onehot=1).fit(Xp, y)
    ex = BoostingInfluence(model, progress=False).fit(Xp, y)
    proba = ex.explain_prediction(Xp_test[1:2], y_test[[1]]).probabilities[1]
    np.testing.assert_allclose(proba, model.predict_proba(Xp_test[1:2])[0, 1], rtol=1e-5)  # float32 sums
    ref = BoostingInfluence(model, progress=False).fit(Xp.to_pandas(), y)
    pd.testing.assert_series_equal(ex.score_training_points(Xp_test, y_test, aggregate="mean"),
                                  ref.score_training_points(Xp_test.to_pandas(), y_test, aggregate="mean"))
    tweaked = FeatureTweaking(model).fit(Xp).tweak(Xp_test[:2], target=1)
    want = FeatureTweaking(model).fit(Xp.to_pandas()).tweak(Xp_test.to_pandas()[:2], target=1)
    pd.testing.assert_frame_equal(tweaked, want)


def test_a_pipeline_fitted_on_polars_transforms_the_polars_rows() -> None:
    """A ``ColumnTransformer`` pipeline fitted on a polars frame with a text column: its steps get the
    user's polars rows (as its ``predict`` does), and the scores are the booster's alone on what
    they make."""
    pytest.importorskip("sklearn", minversion="1.4")  # its ColumnTransformer takes polars frames from 1.4
    import lightgbm
    from sklearn.compose import make_column_transformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    X, y, X_test, y_test = binary_data(n=300, n_test=5)

    def with_text(frame: pd.DataFrame) -> Any:
        return pl.from_pandas(frame).with_columns(
            pl.Series("g", np.where(frame["d"] > 0.3, "p", "q"))).drop("d")

    Xp, Xp_test = with_text(X), with_text(X_test)
    pre = make_column_transformer((OneHotEncoder(sparse_output=False), ["g"]), remainder="passthrough")
    pipe = make_pipeline(pre, lightgbm.LGBMClassifier(verbose=-1)).fit(Xp, y)
    ex = BoostingInfluence(pipe, progress=False).fit(Xp, y)
    alone = BoostingInfluence(pipe[-1], progress=False).fit(pipe[:-1].transform(Xp), y)
    np.testing.assert_array_equal(np.asarray(ex.score_training_points(Xp_test, y_test)),
                                  alone.score_training_points(pipe[:-1].transform(Xp_test), y_test))
    np.testing.assert_allclose(ex.explain_prediction(Xp_test[:1], y_test[:1]).probabilities[1],
                               pipe.predict_proba(Xp_test[:1])[0, 1], rtol=1e-5)  # float32 sums


def test_polars_inputs_that_are_not_rows_are_refused() -> None:
    import lightgbm

    X, y, _, _ = binary_data(n=200, n_test=1)
    Xp = pl.from_pandas(X)
    model = fit_or_skip(lightgbm.LGBMClassifier(verbose=-1, n_estimators=10), Xp, y)
    with pytest.raises(InputError, match=r"polars LazyFrame: compute it first, X.collect\(\)"):
        BoostingInfluence(model).fit(Xp.lazy(), y)
    ex = BoostingInfluence(model, progress=False).fit(Xp, y)
    with pytest.raises(InputError, match=r"polars Series \(one column\)"):
        ex.score_training_points(Xp["a"], y[:1])
    with pytest.raises(InputError, match="y contains missing labels"):
        BoostingInfluence(model).fit(Xp, pl.Series("y", [None, *y[1:]], dtype=pl.Float64))
