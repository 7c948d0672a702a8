"""The influence-gbdt command, end to end on model files written by each booster."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pandas as pd
import pytest
from boosters import LIBRARIES, binary_data, classifier, save_model

from influence_gbdt import cli
from influence_gbdt.cli import main

pytestmark = pytest.mark.usefixtures("no_compile_notice")  # stderr is read line for line


@pytest.fixture(scope="module", params=LIBRARIES)
def files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    library = request.param
    directory = tmp_path_factory.mktemp(library)
    X, y, X_test, y_test = binary_data(n=300)
    model = classifier(library, X, y)
    path, params = save_model(library, model, directory)
    train, test = directory / "train.csv", directory / "test.parquet"
    X.assign(label=y).to_csv(train, index=False)
    X_test.assign(label=y_test).to_parquet(test, index=False)
    return library, path, params, train, test, directory


def _model_args(path: str, params: dict | None, train: object) -> list[str]:
    args = [path, "--train", str(train), "--label", "label", "--quiet"]
    return args + (["--params", json.dumps(params)] if params else [])


def test_check_reports_a_supported_model(files: tuple, capsys: pytest.CaptureFixture) -> None:
    library, path, params, train, _, _ = files
    assert main(["check", *_model_args(path, params, train)]) == 0
    out = capsys.readouterr().out
    assert f"Supported: the {library} model" in out and "relative residual" in out


def test_score_writes_the_table_and_prints_top_rows(files: tuple, capsys: pytest.CaptureFixture) -> None:
    _, path, params, train, test, directory = files
    output = directory / "scores.csv"
    assert (
        main(
            ["score", *_model_args(path, params, train), "--test", str(test), "-o", str(output), "--top", "3"]
        )
        == 0
    )
    table = pd.read_csv(output)
    assert list(table.columns) == ["row", "score", "label"] and len(table) == 300
    out = capsys.readouterr().out
    assert "Most harmful training rows" in out and "Most helpful training rows" in out
    # Per test point, as Parquet, with LeafRefit.
    wide = directory / "wide.parquet"
    assert (
        main(
            [
                "score",
                *_model_args(path, params, train),
                "--test",
                str(test),
                "-o",
                str(wide),
                "--per-test-point",
                "--method",
                "leaf_refit",
            ]
        )
        == 0
    )
    assert pd.read_parquet(wide).shape == (300, 1 + 25)


def test_errors_become_one_line_and_exit_code_2(files: tuple, capsys: pytest.CaptureFixture) -> None:
    _, path, params, train, _, directory = files
    shuffled = directory / "shuffled.csv"
    frame = pd.read_csv(train)  # labels shuffled against their rows: not the training data
    frame["label"] = frame["label"].sample(frac=1.0, random_state=0).to_numpy()
    frame.to_csv(shuffled, index=False)
    assert main(["check", *_model_args(path, params, shuffled)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("influence-gbdt check: error:") and "not reproduced" in err and "\n" not in err
    args = _model_args(path, params, train)
    args[args.index("--label") + 1] = "nope"
    assert main(["check", *args]) == 2
    assert "no column 'nope'" in capsys.readouterr().err
    assert main(["check", str(directory / "missing.txt"), "--train", str(train), "--label", "label"]) == 2


def test_xgboost_file_without_params_is_refused_with_advice(tmp_path: object) -> None:
    X, y, _, _ = binary_data(n=200)
    model = classifier("xgboost", X, y)
    model.set_params(learning_rate=0.1).fit(X, y)
    path, _ = save_model("xgboost", model, tmp_path)
    train = tmp_path / "train.csv"  # type: ignore[operator]
    X.assign(label=y).to_csv(train, index=False)
    assert main(["check", path, "--train", str(train), "--label", "label", "--quiet"]) == 2
    assert (
        main(
            ["check", path, "--train", str(train), "--label", "label", "--quiet", "--params", '{"eta": 0.1}']
        )
        == 0
    )


def test_demo_runs_and_reports_auc(capsys: pytest.CaptureFixture) -> None:
    assert main(["demo", "--trees", "15", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "most harmful training rows" in out and "ROC-AUC, leaf_influence" in out
    auc = float(out.split("ROC-AUC, leaf_influence (exact, all_points):")[1].split()[0])
    assert np.isfinite(auc) and auc > 0.6  # flipped labels are found far above chance (0.5)


def test_unlabelled_test_data_is_scored_on_the_prediction_and_says_so(
    files: tuple, capsys: pytest.CaptureFixture
) -> None:
    _, path, params, train, _, directory = files
    unlabelled = directory / "unlabelled.csv"
    binary_data(n=300)[2].to_csv(unlabelled, index=False)
    assert main(["score", *_model_args(path, params, train), "--test", str(unlabelled), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "scoring the effect on the raw prediction" in out and "raise the prediction most" in out
    assert "harmful" not in out


@pytest.mark.parametrize("library", ["xgboost", "lightgbm", "catboost"])
def test_text_categoricals_in_a_csv(library: str, tmp_path, capsys: pytest.CaptureFixture) -> None:
    # A categorical model trained on a DataFrame; its CSV holds the categories as text.
    X, y, X_test, y_test = binary_data(n=300)
    rng = np.random.default_rng(0)
    colour = rng.choice(["red", "green", "blue"], len(X) + len(X_test))
    X = X.assign(colour=pd.Categorical(colour[: len(X)], categories=["red", "green", "blue"]))
    X_test = X_test.iloc[:10].assign(colour=pd.Categorical(colour[len(X):][:10]))  # another category order
    y = np.where(X["colour"] == "red", 1 - y, y)
    if library == "xgboost":
        import xgboost

        model = xgboost.XGBClassifier(n_estimators=6, max_depth=3, enable_categorical=True).fit(X, y)
        params = ["--params", json.dumps({"eta": 0.3, "lambda": 1.0})]
    elif library == "lightgbm":
        import lightgbm

        model = lightgbm.LGBMClassifier(n_estimators=6, num_leaves=6, verbose=-1).fit(X, y)
        params = []
    else:
        import catboost

        X, X_test = X.astype({"colour": str}), X_test.astype({"colour": str})
        model = catboost.CatBoostClassifier(iterations=6, depth=3, verbose=0, one_hot_max_size=4,
                                            cat_features=["colour"], allow_writing_files=False).fit(X, y)
        params = []
    path, _ = save_model(library, model, tmp_path)
    X.assign(label=y).to_csv(tmp_path / "train.csv", index=False)
    X_test.assign(label=y_test[:10]).to_csv(tmp_path / "test.csv", index=False)
    args = [path, "--train", str(tmp_path / "train.csv"), "--label", "label", "--quiet", *params]
    assert main(["check", *args]) == 0, capsys.readouterr().err
    assert main(["score", *args, "--test", str(tmp_path / "test.csv"), "-o", str(tmp_path / "s.csv")]) == 0
    scores = pd.read_csv(tmp_path / "s.csv")["score"].to_numpy()
    from influence_gbdt import BoostingInfluence

    expected = BoostingInfluence(model, progress=False).fit(X, y).score_training_points(
        X_test, y_test[:10], aggregate="mean")
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-12)


def test_text_labels_with_a_catboost_file(tmp_path, capsys: pytest.CaptureFixture) -> None:
    X, y, X_test, y_test = binary_data(n=300)
    labels = np.where(y == 1, "yes", "no")
    path, _ = save_model("catboost", classifier("catboost", X, labels), tmp_path)
    X.assign(label=labels).to_csv(tmp_path / "train.csv", index=False)
    X_test.assign(label=np.where(y_test == 1, "yes", "no")).to_csv(tmp_path / "test.csv", index=False)
    args = [path, "--train", str(tmp_path / "train.csv"), "--label", "label", "--quiet"]
    assert main(["score", *args, "--test", str(tmp_path / "test.csv")]) == 0
    assert "Most harmful training rows" in capsys.readouterr().out
    # --class names a class as the CSV spells it: the positive class's margin is the one scored.
    prediction = [*args, "--test", str(tmp_path / "test.csv"), "--on", "prediction", "--top", "1"]
    assert main(["score", *prediction, "--class", "yes"]) == 0
    assert main(["score", *prediction, "--class", "maybe"]) == 2
    assert "'maybe' is not a class of the model" in capsys.readouterr().err


def test_version_and_help_for_every_option(capsys: pytest.CaptureFixture) -> None:
    import argparse

    from influence_gbdt import __version__
    from influence_gbdt.cli import _parser

    assert main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"influence-gbdt {__version__}"
    for command in ("score", "check", "demo"):
        assert main([command, "--help"]) == 0
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"


def test_score_keys_rows_by_an_id_and_draws_a_plot(files: tuple, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("matplotlib")
    _, path, params, train, test, directory = files
    plain = directory / "plain.csv"
    assert main(["score", *_model_args(path, params, train), "--test", str(test), "-o", str(plain)]) == 0
    # The same data with a text id column (not a feature) in both files, the training rows shuffled
    # in the id space but not in order: the output is keyed by the ids, the scores unchanged.
    frame = pd.read_csv(train)
    ids = np.random.default_rng(0).permutation(len(frame))
    keyed_train = directory / "keyed_train.csv"
    frame.assign(case=[f"c{i}" for i in ids]).to_csv(keyed_train, index=False)
    test_frame = pd.read_parquet(test)
    keyed_test = directory / "keyed_test.csv"
    test_frame.assign(case=[f"t{i}" for i in range(len(test_frame))]).to_csv(keyed_test, index=False)
    keyed, image = directory / "keyed.csv", directory / "top.png"
    argv = ["score", *_model_args(path, params, keyed_train), "--test", str(keyed_test), "--id", "case",
            "-o", str(keyed), "--plot", str(image), "--top", "4"]
    assert main(argv) == 0
    table, reference = pd.read_csv(keyed), pd.read_csv(plain)
    assert list(table.columns) == ["case", "score", "label"]
    assert list(table["case"]) == [f"c{i}" for i in ids]
    np.testing.assert_allclose(table["score"], reference["score"], rtol=1e-12, atol=1e-15)
    assert image.read_bytes().startswith(b"\x89PNG")
    wide = directory / "keyed_wide.csv"
    assert main([*argv[:-6], "-o", str(wide), "--per-test-point"]) == 0
    assert list(pd.read_csv(wide).columns[:3]) == ["case", "test_t0", "test_t1"]
    capsys.readouterr()
    assert main([*argv[:-6], "--id", "nothing"]) == 2
    assert "no --id column 'nothing'" in capsys.readouterr().err


def test_ubj_files_are_checked_whole_before_xgboost_reads_them(tmp_path) -> None:
    """XGBoost's UBJSON reader trusts the lengths it reads (a cut file crashed the process, issue 25):
    the document is walked in Python first, and XGBoost loads exactly the checked bytes."""
    import xgboost

    from influence_gbdt.cli import load_model
    from influence_gbdt.errors import InputError

    X, y, X_test, _ = binary_data(n=200, n_test=10)
    booster = classifier("xgboost", X, y, n_trees=5).get_booster()
    path = tmp_path / "model.ubj"
    booster.save_model(path)
    test = xgboost.DMatrix(X_test)
    np.testing.assert_array_equal(load_model(path).predict(test), booster.predict(test))
    raw = path.read_bytes()
    key = b"i\x01a"  # the key "a": int8 length 1
    malformed = {
        "trailing": (raw + b"Z", "ends at byte .* but 1 bytes follow"),
        "unknown-marker": (b"{" + key + b"X}", "'X', which starts no UBJSON value"),
        "negative-length": (b"{" + key + b"Si\xff}", r"negative \(-1\)"),
        "count-beyond-the-end": (b"{" + key + b"[$d#L" + (2**40).to_bytes(8, "big") + b"}", "truncated"),
        "nested-too-deeply": (b"{" + key + b"[" * 100 + b"]" * 100 + b"}", "nested more than 64 deep"),
        "not-an-object": (b"[]", r"does not start with a UBJSON object"),
        "no-learner": (b"{" + key + b"Z}", r"no XGBoost model \(its keys are \['a'\]"),
    }
    for name, (data, match) in malformed.items():
        bad = tmp_path / f"{name}.ubj"
        bad.write_bytes(data)
        with pytest.raises(InputError, match=match):
            load_model(bad)


def test_help_has_examples_and_every_command_a_description(capsys: pytest.CaptureFixture) -> None:
    assert main(["--help"]) == 0
    assert "examples:" in capsys.readouterr().out
    for command in ("score", "check"):
        assert main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "examples:" in out and f"influence-gbdt {command} model" in out
        assert "harmful" in out or "recompute every leaf value" in out  # a description, not just usage


def test_multiclass_lightgbm_file_with_text_labels_names_the_classes(
    tmp_path, capsys: pytest.CaptureFixture
) -> None:
    """A raw multiclass LightGBM file records no class names: text labels are refused by naming the
    class indices it takes (it used to call the model a regressor)."""
    import lightgbm

    X, _, _, _ = binary_data(n=300)
    y3 = np.digitize(X.iloc[:, 0], np.quantile(X.iloc[:, 0], [1 / 3, 2 / 3]))
    booster = lightgbm.train({"objective": "multiclass", "num_class": 3, "verbose": -1},
                             lightgbm.Dataset(X, y3), num_boost_round=3)
    booster.save_model(str(tmp_path / "m.txt"))
    X.assign(label=np.array(["a", "b", "c"])[y3]).to_csv(tmp_path / "text.csv", index=False)
    X.assign(label=y3).to_csv(tmp_path / "codes.csv", index=False)
    args = [str(tmp_path / "m.txt"), "--label", "label", "--quiet", "--train"]
    assert main(["check", *args, str(tmp_path / "text.csv")]) == 2
    err = capsys.readouterr().err
    assert "regressor" not in err and "not among the model's classes [0, 1, 2]" in err
    assert main(["check", *args, str(tmp_path / "codes.csv")]) == 0


def test_messages_speak_the_command_line(files: tuple, tmp_path, capsys: pytest.CaptureFixture) -> None:
    """Errors name the command's flags (--class, --max-memory), never a Python argument (output=,
    max_memory=) or a remedy a shell cannot apply (wrapping a scikit-learn classifier)."""
    from influence_gbdt.cli import _shell_words

    refusal = "Map your labels to 0/1, or wrap the scikit-learn classifier instead of its booster."
    assert _shell_words(refusal) == "Map your labels to 0/1."
    assert _shell_words("the output to score, e.g. output=0.") == "the output to score, e.g. --class 0."
    library, path, params, train, test, _ = files
    assert main(["score", *_model_args(path, params, train), "--test", str(test), "--per-test-point",
                 "--max-memory", "100"]) == 2
    err = capsys.readouterr().err
    assert "--max-memory" in err and "max_memory" not in err and "training_points" not in err
    if library != "xgboost":  # an XGBoost file records no binary labels map either; one case suffices
        return
    labels = pd.read_csv(train).assign(label=lambda t: np.where(t.label == 1, "yes", "no"))
    labels.to_csv(tmp_path / "text.csv", index=False)
    assert main(["check", *_model_args(path, params, tmp_path / "text.csv")]) == 2
    err = capsys.readouterr().err
    assert "Map your labels to 0/1" in err and "scikit-learn" not in err


def test_check_says_what_runs_unless_quiet(files: tuple, capsys: pytest.CaptureFixture,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, path, params, train, _, _ = files
    args = [a for a in _model_args(path, params, train) if a != "--quiet"]
    quiet_blocks = []  # --quiet also silences the compile notice (tests/test_jit.py: the block itself)
    monkeypatch.setattr(cli, "no_compile_notice", lambda: quiet_blocks.append(1) or contextlib.nullcontext())
    assert main(["check", *args]) == 0
    assert "recomputing every leaf value from 300 training rows" in capsys.readouterr().err
    assert quiet_blocks == []
    assert main(["check", *args, "--quiet"]) == 0
    assert capsys.readouterr().err == "" and quiet_blocks == [1]
