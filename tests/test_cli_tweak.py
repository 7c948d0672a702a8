"""``influence-gbdt tweak`` end to end on model files written by each booster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, classifier, save_model
from influence_gbdt.adapters import trees_for

from influence_gbdt.cli import load_model, main

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.usefixtures("no_compile_notice")]  # stderr is read line for line


@pytest.fixture(scope="module", params=LIBRARIES)
def files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    library = request.param
    directory = tmp_path_factory.mktemp(f"tweak-{library}")
    X, y, X_test, _ = binary_data(n=300, n_test=60)
    model = classifier(library, X, y)
    path, _ = save_model(library, model, directory)
    train, data = directory / "train.csv", directory / "data.csv"
    X.assign(label=y).to_csv(train, index=False)
    X_test.assign(label=0).to_csv(data, index=False)
    return path, train, data, directory


def _predict(path: str, rows: pd.DataFrame) -> np.ndarray[Any, Any]:
    reader = trees_for(load_model(path))
    return reader.predict_index(rows)


def test_tweak_writes_rows_the_model_file_assigns_to_the_target(files: tuple, capsys: Any) -> None:
    path, train, data, directory = files
    out = directory / "tweaked.csv"
    args = [
        "tweak",
        path,
        "--data",
        str(data),
        "--train",
        str(train),
        "--label",
        "label",
        "--target",
        "1",
        "--immutable",
        "d",
        "--bounds",
        '{"a": [-2, 2]}',
        "-o",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Tweaked ") and f"Wrote 60 rows to {out}" in printed
    table = pd.read_csv(out)
    assert list(table.columns) == ["a", "b", "c", "d", "cost", "prediction", "n_changed", "source", "reason"]
    found = table["cost"].notna()
    assert found.mean() >= 0.9
    rows = table.loc[found, ["a", "b", "c", "d"]]
    assert (_predict(path, rows) == 1).all()
    original = pd.read_csv(data)
    np.testing.assert_array_equal(rows["d"], original.loc[found, "d"])


def test_tweak_errors_are_one_line_with_exit_code_2(files: tuple, capsys: Any) -> None:
    path, _, data, _ = files
    assert main(["tweak", path, "--data", str(data), "--label", "label", "--target", "7"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("influence-gbdt tweak: error:") and "not a class" in err and "\n" not in err
    assert main(["tweak", path, "--data", str(data), "--label", "label", "--bounds", "[1"]) == 2
    assert "--bounds must be a JSON object" in capsys.readouterr().err
    assert main(["tweak", path, "--data", str(data), "--label", "label", "--immutable", "zz"]) == 2
    assert "not a feature" in capsys.readouterr().err
    text = data.parent / "tweaked.txt"  # was written as CSV under a name that says otherwise
    assert main(["tweak", path, "--data", str(data), "--label", "label", "-o", str(text)]) == 2
    assert "name it tweaked.csv, tweaked.parquet or tweaked.pq" in capsys.readouterr().err
    assert not text.exists()


def test_tweak_restores_categories_lost_by_csv(tmp_path: Path) -> None:
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({"x": rng.normal(size=n), "job": pd.Categorical(rng.choice(["a", "b", "c"], n))})
    y = ((frame.x > 0) ^ (frame.job == "b")).astype(int).to_numpy()
    model = lgb.LGBMClassifier(
        n_estimators=20, num_leaves=4, min_data_per_group=5, cat_smooth=1, verbose=-1, n_jobs=1
    ).fit(frame, y)
    path = str(tmp_path / "model.txt")
    model.booster_.save_model(path)
    data = tmp_path / "data.csv"
    frame[model.predict(frame) == 0].head(10).to_csv(data, index=False)
    out = tmp_path / "out.csv"
    assert main(["tweak", path, "--data", str(data), "-o", str(out)]) == 0
    table = pd.read_csv(out)
    assert table["cost"].notna().all()
    rows = table[["x", "job"]].assign(job=lambda t: pd.Categorical(t.job, categories=["a", "b", "c"]))
    assert (model.predict(rows) == 1).all()


def test_tweak_a_catboost_model_file_with_ctrs(tmp_path: Path, capsys: Any) -> None:
    """CatBoost's defaults on a text category (CTRs, saved as .cbm): the CSV's strings are hashed as
    CatBoost hashes them and every tweak is assigned the target class by the model file."""
    import catboost as cb

    X, y, X_test, _ = binary_data(n=300, n_test=40)
    city = np.array(["oslo", "rome", "lima", "pune", "kobe"])
    X = X.assign(city=city[np.arange(len(X)) % 5])
    X_test = X_test.assign(city=city[np.arange(len(X_test)) % 5])
    y = (y ^ (X["city"] == "rome").to_numpy()).astype(int)
    model = cb.CatBoostClassifier(iterations=200, cat_features=["city"], verbose=0, thread_count=1,
                                  allow_writing_files=False, random_seed=0).fit(X, y)
    path, train, data, out = (tmp_path / name for name in ("m.cbm", "train.csv", "data.csv", "o.csv"))
    model.save_model(str(path))
    X.assign(label=y).to_csv(train, index=False)
    X_test.assign(label=0).to_csv(data, index=False)
    assert trees_for(load_model(str(path))).structure.derived is not None  # the model splits on CTRs
    assert main(["tweak", str(path), "--data", str(data), "--train", str(train), "--label", "label",
                 "--target", "1", "--quiet", "-o", str(out)]) == 0
    table = pd.read_csv(out)
    found = table["cost"].notna()
    assert found.mean() >= 0.9
    assert (model.predict(table.loc[found, list(X.columns)]) == 1).all()


@pytest.mark.parametrize("library", LIBRARIES)
def test_tweak_a_poisson_regressor_file_into_a_range_of_counts(
    library: str, tmp_path: Path, capsys: Any
) -> None:
    """``--range`` is on the scale the regressor that wrote the file predicts: counts for Poisson
    (exp of the margin), for each library's file (CatBoost's read as the CatBoostRegressor it was)."""
    import catboost as cb
    import lightgbm as lgb
    import xgboost as xgb

    X, _, X_test, _ = binary_data(n=300, n_test=20)
    y = np.random.default_rng(1).poisson(np.exp(0.7 * X["a"].to_numpy() + 0.3))
    model = {"xgboost": xgb.XGBRegressor(objective="count:poisson", n_estimators=30),
             "lightgbm": lgb.LGBMRegressor(objective="poisson", n_estimators=30, verbose=-1),
             "catboost": cb.CatBoostRegressor(loss_function="Poisson", iterations=30, verbose=0,
                                              allow_writing_files=False)}[library].fit(X, y)
    path, _ = save_model(library, model, tmp_path)
    X_test.to_csv(tmp_path / "data.csv", index=False)
    out = tmp_path / "tweaked.csv"
    low = float(np.quantile(model.predict(X), 0.8))
    args = ["tweak", path, "--data", str(tmp_path / "data.csv"), "--range", str(low), "none", "--quiet",
            "-o", str(out)]
    assert main(args) == 0
    assert "already in the target range" in capsys.readouterr().out
    table = pd.read_csv(out)
    found = table["cost"].notna()
    assert found.mean() >= 0.9
    counts = model.predict(table.loc[found, ["a", "b", "c", "d"]])  # the Python model, not the file
    assert (counts >= low).all()
    np.testing.assert_allclose(table.loc[found, "prediction"], counts, rtol=1e-6)  # CSV keeps 17 digits
    assert main(["tweak", path, "--data", str(tmp_path / "data.csv"), "--range", "many", "none"]) == 2
    assert "--range takes two numbers" in capsys.readouterr().err
    assert main(["tweak", path, "--data", str(tmp_path / "data.csv")]) == 2
    assert "desired_range" in capsys.readouterr().err


def test_tweak_prints_only_the_features_it_changed(tmp_path: Path, capsys: Any) -> None:
    """An int column next to floats is not printed as changed (``i: 17.0 -> 17``)."""
    import xgboost as xgb

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=500), "i": rng.integers(0, 20, 500)})
    y = (X.a + 0.2 * (X.i - 10) > 0).astype(int)
    xgb.XGBClassifier(n_estimators=10, n_jobs=1).fit(X, y).save_model(tmp_path / "m.json")
    X.head(20).to_csv(tmp_path / "rows.csv", index=False)
    assert main(["tweak", str(tmp_path / "m.json"), "--data", str(tmp_path / "rows.csv"), "--immutable", "i",
                 "--quiet", "--show", "4"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  row ")]
    assert printed and all(" i: " not in line for line in printed) and all(" a: " in line for line in printed)
    # Nothing may change: no tweak, and no "mean cost nan".
    assert main(["tweak", str(tmp_path / "m.json"), "--data", str(tmp_path / "rows.csv"),
                 "--immutable", "a,i", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Tweaked 0 of 20 rows") and "see the reason column" in out and "nan" not in out
