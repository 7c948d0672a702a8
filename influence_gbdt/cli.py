"""The ``influence-gbdt`` command: ``score``, ``check`` and ``demo``.

``main(argv)`` returns the exit code: 0 on success, 2 on an error the user can fix (printed as
one line on stderr, also for usage errors), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._jit import no_compile_notice
from .cli_io import QUIET_HELP, check_output, json_object, load_model, read_bytes, read_table, write_table
from .cli_tweak import add_parser as add_tweak
from .errors import InfluenceError, InputError, require


def _split(frame: pd.DataFrame, label: str, weight: str | None, what: str) -> tuple[pd.DataFrame, Any, Any]:
    missing = [c for c in (label, weight) if c is not None and c not in frame.columns]
    if missing:
        raise InputError(f"The {what} data has no column {missing[0]!r} (columns: {list(frame.columns)}).")
    y = frame[label].to_numpy()
    w = None
    if weight:
        w = pd.to_numeric(frame[weight], errors="coerce").to_numpy(dtype=float)
        if not np.all(np.isfinite(w)):
            raise InputError(f"The weight column {weight!r} of the {what} data holds non-numbers or blanks.")
    X = frame.drop(columns=[c for c in (label, weight) if c is not None])
    return X, y, w


def _categoricals(model: Any, X: pd.DataFrame, X_test: pd.DataFrame | None) -> tuple[Any, Any]:
    """Text columns of a CSV as pandas categoricals for XGBoost and LightGBM (CatBoost takes text).

    The test columns get the training columns' categories, so each category has the same code in
    both; LightGBM and XGBoost then map them onto the categories the model was trained with.
    """
    if type(model).__module__.split(".")[0] == "catboost":
        return X, X_test
    text = [c for c in X.columns if X[c].dtype == object or pd.api.types.is_string_dtype(X[c])]
    if not text:
        return X, X_test
    X = X.copy()
    for c in text:
        X[c] = X[c].astype("category")
    if X_test is not None:
        X_test = X_test.copy()
        for c in text:
            if c in X_test.columns:
                X_test[c] = pd.Categorical(X_test[c].astype(object), categories=X[c].cat.categories)
    return X, X_test


def _params(text: str | None) -> dict[str, Any] | None:
    """--params: a JSON object, or the name of a file that holds one."""
    if not text:
        return None
    try:
        is_file = Path(text).is_file()
    except (OSError, ValueError):  # a JSON text too long for a file name
        is_file = False
    if is_file:
        content = read_bytes(Path(text), "--params file").decode(errors="replace")
        return json_object(content, f"--params file {text}", '{"eta": 0.1}')
    return json_object(text, "--params", '{"eta": 0.1} (or a file holding one)')


def _explainer(args: argparse.Namespace, model: Any) -> Any:
    from .explainer import BoostingInfluence

    return BoostingInfluence(
        model, method=args.method, update_set=args.update_set, k=args.k,
        base_score=args.base_score, progress=not args.quiet, params=_params(args.params),
        max_memory=args.max_memory,
    )


def _keyed(frame: pd.DataFrame, id_column: str | None, what: str) -> pd.DataFrame:
    """``frame`` indexed by its ``--id`` column (which then is no feature), or as read."""
    if id_column is None:
        return frame
    if id_column not in frame.columns:
        raise InputError(
            f"The {what} data has no --id column {id_column!r} (columns: {list(frame.columns)})."
        )
    if frame[id_column].duplicated().any():
        twice = frame[id_column][frame[id_column].duplicated()].iloc[0]
        raise InputError(
            f"The --id column {id_column!r} of the {what} data repeats {twice!r}: ids must be unique."
        )
    return frame.set_index(id_column)


def _results_table(scores: Any, label: str, y: Any, id_column: str | None) -> pd.DataFrame:
    """One line per training row keyed by its id (``row``: its position, without ``--id``); then the
    score (aggregated) or one ``test_<id>`` column per test point."""
    if isinstance(scores, pd.Series):
        table = scores.to_frame("score")
        table[label] = np.asarray(y)
    else:
        table = scores.set_axis([f"test_{c}" for c in scores.columns], axis=1)
    return table.rename_axis(id_column or "row").reset_index()


def check_plot(path: str | Path) -> None:
    """Refuse a ``--plot`` file whose extension names no image format matplotlib writes, *before*
    any computing is done."""
    require("matplotlib", "plot", "--plot")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    kind = Path(path).suffix.lower().lstrip(".")
    if kind not in formats:
        named = f"a .{kind} file" if kind else "a file without an extension"
        raise InputError(
            f"--plot {path}: matplotlib cannot draw {named}; end the name with one of "
            f"{', '.join('.' + k for k in sorted(formats))} (e.g. {Path(path).stem or 'plot'}.png)."
        )


def _cmd_score(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot(args.plot)
    if args.output:
        check_output(args.output)
    if args.plot:
        check_output(args.plot, "--plot", table=False)
    model = load_model(args.model)
    X, y, w = _split(_keyed(read_table(args.train), args.id, "training"), args.label, args.weight, "training")
    test = _keyed(read_table(args.test), args.id, "test")
    has_labels = args.label in test.columns
    on = args.on or ("loss" if has_labels else "prediction")
    if on == "loss" and not has_labels:
        raise InputError(
            f"The test data has no label column {args.label!r}, which --on loss needs: add it, or pass "
            "--on prediction to score the effect on the raw prediction."
        )
    X_test, y_test, _ = _split(test, args.label, None, "test") if has_labels else (test, None, None)
    X, X_test = _categoricals(model, X, X_test)
    if on == "prediction" and not args.on:
        print(f"The test data has no {args.label!r} column: scoring the effect on the raw prediction "
              "(score > 0 = the row raises it).")
    ex = _fitted(args, model, X, y, w)
    aggregate = None if args.per_test_point else args.aggregate
    scores = ex.score_training_points(X_test, y_test if on == "loss" else None, aggregate=aggregate, on=on,
                                      output=_output(ex, args.output_class))
    if args.output:
        table = _results_table(scores, args.label, y, args.id)
        write_table(table, args.output)
        print(f"Wrote {table.shape[0]} rows x {table.shape[1]} columns to {args.output}.")
    overall = scores if scores.ndim == 1 else scores.mean(axis=1)
    if args.plot:
        from .plots import save_summary

        save_summary(overall, X, y, args.plot, on=on, n=args.top or 10)
        print(f"Wrote the plot to {args.plot}.")
    _print_top(args, on, overall, scores.ndim == 1, X, y)
    return 0


def _output(ex: Any, text: str | None) -> Any:
    """--class as the model names its outputs: the class label whose text it is (a CSV gives
    text, a model may store numbers), else an output index."""
    if text is None:
        return None
    classes = ex.adapter_.label_map().classes
    if classes is not None:
        named = [c for c in classes if str(c) == text]
        if not named:
            raise InputError(f"--class {text!r} is not a class of the model; its classes are "
                             f"{[str(c) for c in classes]}.")
        return named[0]
    try:
        return int(text)
    except ValueError:
        raise InputError(
            f"--class must be an output index (the model records no class labels), got {text!r}."
        ) from None


def _print_top(
    args: argparse.Namespace, on: str, overall: pd.Series, aggregated: bool, X: pd.DataFrame, y: Any
) -> None:
    what = f"{args.aggregate} test {on}" if aggregated else f"mean over test points of the {on}"
    if on == "loss":
        headings = (f"Most harmful training rows ({what}; score > 0 = harmful):",
                    f"Most helpful training rows ({what}; score < 0 = helpful):")
    else:
        headings = (f"Training rows that raise the prediction most ({what}; score > 0 = raises it):",
                    f"Training rows that lower the prediction most ({what}; score < 0 = lowers it):")
    values = overall.to_numpy()
    for heading, order in zip(headings, (np.argsort(-values), np.argsort(values)), strict=True):
        top = order[: args.top]
        shown = X.iloc[top].copy()
        shown.insert(0, args.label, np.asarray(y)[top])
        shown.insert(0, "score", values[top])
        shown.insert(0, args.id or "row", X.index[top])
        print(f"\n{heading}")
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def _fitted(args: argparse.Namespace, model: Any, X: Any, y: Any, w: Any) -> Any:
    """The explainer fitted on the training rows, saying on stderr what runs (unless --quiet): the
    self-check of a large model (CatBoost's 1,000 trees) takes many seconds without a bar."""
    if not args.quiet:
        print(f"influence-gbdt: reading {args.model} and recomputing every leaf value from {len(X)} training "
              "rows (the self-check) ...", file=sys.stderr, flush=True)
    return _explainer(args, model).fit(X, y, sample_weight=w)


def _cmd_check(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    X, y, w = _split(read_table(args.train), args.label, args.weight, "training")
    X, _ = _categoricals(model, X, None)
    ex = _fitted(args, model, X, y, w)
    e = ex.engine_.ensemble
    print(
        f"Supported: the {ex.adapter_.library} model ({e.n_trees} trees, {e.n_total_leaves} leaves, "
        f"{e.loss.name}) is reproduced from {e.n_rows} training rows with relative residual "
        f"{ex.reproduction_residual_:.2e} (tolerance {ex.adapter_.rtol:.0e})."
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(noise=args.noise, n_trees=args.trees, seed=args.seed, progress=not args.quiet)
    return 0


def _count(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``main`` turns them into exit code 2)."""

    def error(self, message: str) -> Any:
        raise InputError(f"{message} (see {self.prog} --help)")


#: ``--help`` examples, per command.
_EXAMPLES = {
    "influence-gbdt": """examples:
  influence-gbdt demo
  influence-gbdt check model.json --train train.csv --label income
  influence-gbdt score model.json --train train.csv --test test.csv --label income -o scores.csv
  influence-gbdt tweak model.json --data rejected.csv --train train.csv --label income
run 'influence-gbdt COMMAND --help' for a command's options.""",
    "score": """examples:
  influence-gbdt score model.json --train train.csv --test test.csv --label income
  influence-gbdt score model.txt --train train.parquet --test one_row.csv --label y --per-test-point -o s.csv
  influence-gbdt score model.cbm --train train.csv --test test.csv --label y --on prediction --class 2""",
    "check": """examples:
  influence-gbdt check model.json --train train.csv --label income
  influence-gbdt check model.json --train train.csv --label y --params '{"eta": 0.1}'""",
}

#: Words of the Python API in messages, as the command line says them.
_SHELL_WORDS = (
    ("e.g. output=0", "e.g. --class 0"),
    ("output must be", "--class must be"),
    (", or wrap the scikit-learn classifier instead of its booster", ""),
    ("max_memory (float('inf') for no limit)", "--max-memory (inf for no limit)"),
    ("max_memory", "--max-memory"),
    ("training_points", "rows"),
    ("aggregate='mean'", "--aggregate mean"),
)


def _shell_words(message: str) -> str:
    """An error message of the library, with the Python API's words replaced by the command's."""
    for python, shell in _SHELL_WORDS:
        message = message.replace(python, shell)
    return message


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog="influence-gbdt",
        description="Which training rows made my gradient-boosted model do this? (score > 0 = harmful)",
        epilog=_EXAMPLES["influence-gbdt"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"influence-gbdt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", help="model file: XGBoost .json/.ubj, LightGBM .txt, CatBoost .cbm/.json")
        p.add_argument("--train", required=True,
                       help="training data, CSV or Parquet: exactly the training rows, in training order")
        p.add_argument("--label", required=True,
                       help="label column name (labels as the model was trained on them)")
        p.add_argument("--weight", help="sample-weight column name, if training used weights")
        p.add_argument("--params", help="JSON object (or file) of training parameters the model file lost "
                                        "(XGBoost: eta, lambda, alpha, max_delta_step, missing, ...)")
        p.add_argument("--method", choices=["leaf_influence", "leaf_refit"], default="leaf_influence",
                       help="leaf_influence: d test loss / d row weight (default, fast); leaf_refit: "
                            "test loss change when the row is removed, leaves refitted (slow)")
        p.add_argument("--update-set", choices=["all_points", "single_point", "top_k_leaves"],
                       default="all_points",
                       help="rows whose changes propagate to later trees: all_points (exact, default) or "
                            "the paper's fast approximations")
        p.add_argument("-k", type=_count(1), help="leaves per tree for --update-set top_k_leaves")
        p.add_argument("--base-score", choices=["refit", "fixed"], default="refit",
                       help="refit (default): the initial margin moves as a retrain would re-estimate it; "
                            "fixed: it stays")
        p.add_argument("--max-memory", type=float, default=4e9, metavar="BYTES",
                       help="refuse work that needs more memory than this (default 4e9; inf: no limit)")
        p.add_argument("--quiet", action="store_true", help=QUIET_HELP)

    score = sub.add_parser(
        "score", help="score training rows against a test set",
        description="Score every training row by its influence on the test rows' loss (or raw prediction): "
                    "score > 0 means the row is harmful (removing it lowers the test loss).",
        epilog=_EXAMPLES["score"], formatter_class=argparse.RawDescriptionHelpFormatter)
    model_args(score)
    score.add_argument("--test", required=True, help="test data, CSV or Parquet (label column optional)")
    score.add_argument("--output", "-o",
                       help="write the influence table here (.csv, or .parquet/.pq); checked before scoring")
    score.add_argument("--aggregate", choices=["mean", "sum"], default="mean",
                       help="score the mean or summed test loss (default mean)")
    score.add_argument("--per-test-point", action="store_true",
                       help="write one column per test point instead of aggregating")
    score.add_argument("--on", choices=["loss", "prediction"], default=None,
                       help="loss: effect on the test loss, > 0 = harmful (default when the test data has "
                            "labels); prediction: effect on the raw prediction (default without labels)")
    score.add_argument("--class", dest="output_class", metavar="CLASS",
                       help="with --on prediction on a multiclass or multi-target model: the class label "
                            "(or output index) whose raw prediction is scored")
    score.add_argument("--top", type=_count(0), default=10, help="rows to print per kind (default 10)")
    score.add_argument("--id", help="column of both data files that names the rows (not a feature): the "
                                    "output is keyed by it instead of by row position")
    score.add_argument("--plot", help="draw the most harmful/helpful rows and the scores by label to this "
                                      "image (.png, .svg, .pdf; needs matplotlib)")
    score.set_defaults(run=_cmd_score)

    check = sub.add_parser(
        "check", help="check that a model is supported and reproduced by its data",
        description="Read the model, recompute every leaf value from the training data and report the "
                    "largest difference; exit code 2 with the cause when the model is not supported or "
                    "not reproduced (other rows, shuffled rows, other labels, missing weights).",
        epilog=_EXAMPLES["check"], formatter_class=argparse.RawDescriptionHelpFormatter)
    model_args(check)
    check.set_defaults(run=_cmd_check)

    demo = sub.add_parser("demo", help="find flipped labels in UCI Adult with CatBoost (the paper's setting)")
    demo.add_argument("--noise", type=float, default=0.1,
                      help="fraction of training labels flipped, between 0 and 1 (default 0.1)")
    demo.add_argument("--trees", type=_count(1), default=100, help="CatBoost trees (default 100)")
    demo.add_argument("--seed", type=_count(0), default=0, help="random seed for the flips and CatBoost")
    demo.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    demo.set_defaults(run=_cmd_demo)

    add_tweak(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``influence-gbdt`` command; returns the exit code."""
    command = "influence-gbdt"
    try:
        args = _parser().parse_args(argv)
        command = f"influence-gbdt {args.command}"
        with no_compile_notice() if getattr(args, "quiet", False) else contextlib.nullcontext():
            return int(args.run(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except (InfluenceError, ImportError) as exc:
        print(f"{command}: error: {_shell_words(' '.join(str(exc).split()))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
