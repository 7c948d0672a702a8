"""The ``influence-gbdt`` command: ``score``, ``check`` and ``demo``.

``main(argv)`` returns the exit code: 0 on success, 2 on an error the user can fix (printed as
one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import InfluenceError, InputError


def load_model(path: str | Path) -> Any:
    """Load a model file written by a booster, choosing the library from its format.

    XGBoost ``.json`` / ``.ubj`` (training parameters are lost by the file: pass ``--params``),
    LightGBM ``.txt``, CatBoost ``.cbm`` / ``.json``.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Model file {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".json":
        with path.open() as fh:
            head = json.load(fh)
        suffix = ".xgb" if "learner" in head else ".cbm-json" if "oblivious_trees" in head else ".unknown"
    if suffix in (".xgb", ".ubj"):
        import xgboost

        return xgboost.Booster(model_file=str(path))
    if suffix == ".txt":
        import lightgbm

        return lightgbm.Booster(model_file=str(path))
    if suffix in (".cbm", ".cbm-json"):
        import catboost

        model = catboost.CatBoost()
        model.load_model(str(path), format="json" if suffix == ".cbm-json" else "cbm")
        return model
    raise InputError(
        f"Cannot tell which booster wrote {path.name}: use XGBoost .json/.ubj, LightGBM .txt or "
        "CatBoost .cbm/.json."
    )


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Data file {path} does not exist.")
    if path.suffix.lower() in (".parquet", ".pq"):
        return pd.read_parquet(path)
    return pd.read_csv(path)


def write_table(frame: pd.DataFrame, path: str | Path) -> None:
    """Write a CSV or Parquet file (by extension)."""
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)


def _split(frame: pd.DataFrame, label: str, weight: str | None, what: str) -> tuple[pd.DataFrame, Any, Any]:
    missing = [c for c in (label, weight) if c is not None and c not in frame.columns]
    if missing:
        raise InputError(f"The {what} data has no column {missing[0]!r} (columns: {list(frame.columns)}).")
    y = frame[label].to_numpy()
    w = frame[weight].to_numpy(dtype=float) if weight else None
    X = frame.drop(columns=[c for c in (label, weight) if c is not None])
    return X, y, w


def _params(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    path = Path(text)
    try:
        return dict(json.loads(path.read_text() if path.is_file() else text))
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        raise InputError(f"--params must be a JSON object or a JSON file: {exc}") from None


def _explainer(args: argparse.Namespace) -> Any:
    from .explainer import BoostingInfluence

    return BoostingInfluence(
        load_model(args.model), method=args.method, update_set=args.update_set, k=args.k,
        base_score=args.base_score, progress=not args.quiet, params=_params(args.params),
    )


def _cmd_score(args: argparse.Namespace) -> int:
    X, y, w = _split(read_table(args.train), args.label, args.weight, "training")
    test = read_table(args.test)
    on = "prediction" if args.label not in test.columns else args.on
    X_test, y_test, _ = (
        _split(test, args.label, None, "test") if args.label in test.columns else (test, None, None)
    )
    ex = _explainer(args).fit(X, y, sample_weight=w)
    aggregate = None if args.per_test_point else args.aggregate
    scores = ex.score_training_points(X_test, y_test, aggregate=aggregate, on=on)
    if scores.ndim == 1:
        table = pd.DataFrame({"row": np.arange(scores.size), "score": scores, args.label: y})
    else:
        table = pd.DataFrame(scores, columns=[f"test_{j}" for j in range(scores.shape[1])])
        table.insert(0, "row", np.arange(scores.shape[0]))
    if args.output:
        write_table(table, args.output)
        print(f"Wrote {table.shape[0]} rows x {table.shape[1]} columns to {args.output}.")
    overall = scores if scores.ndim == 1 else scores.mean(axis=1)
    what = f"{args.aggregate} test {on}" if scores.ndim == 1 else f"mean over test points of the {on}"
    for kind, order in (("harmful", np.argsort(-overall)), ("helpful", np.argsort(overall))):
        top = order[: args.top]
        shown = X.iloc[top].copy()
        shown.insert(0, args.label, np.asarray(y)[top])
        shown.insert(0, "score", overall[top])
        shown.insert(0, "row", top)
        print(f"\nMost {kind} training rows ({what}; score > 0 = harmful):")
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    X, y, w = _split(read_table(args.train), args.label, args.weight, "training")
    ex = _explainer(args).fit(X, y, sample_weight=w)
    e = ex.engine_.ensemble
    print(
        f"Supported: the {ex.adapter_.library} model ({e.n_trees} trees, {e.n_total_leaves} leaves, "
        f"{e.loss}) is reproduced from {e.n_rows} training rows with relative residual "
        f"{ex.reproduction_residual_:.2e} (tolerance {ex.adapter_.rtol:.0e})."
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(noise=args.noise, n_trees=args.trees, seed=args.seed, progress=not args.quiet)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="influence-gbdt",
        description="Which training rows made my gradient-boosted model do this? (score > 0 = harmful)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", help="model file: XGBoost .json/.ubj, LightGBM .txt, CatBoost .cbm/.json")
        p.add_argument("--train", required=True, help="training data, CSV or Parquet, in training order")
        p.add_argument("--label", required=True, help="label column name")
        p.add_argument("--weight", help="sample-weight column name, if training used weights")
        p.add_argument("--params", help="JSON object (or file) of training parameters the model file lost "
                                        "(XGBoost: eta, lambda, alpha, max_delta_step, ...)")
        p.add_argument("--method", choices=["leaf_influence", "leaf_refit"], default="leaf_influence")
        p.add_argument("--update-set", choices=["all_points", "single_point", "top_k_leaves"],
                       default="all_points")
        p.add_argument("-k", type=int, help="leaves per tree for --update-set top_k_leaves")
        p.add_argument("--base-score", choices=["refit", "fixed"], default="refit")
        p.add_argument("--quiet", action="store_true", help="no progress bar")

    score = sub.add_parser("score", help="score training rows against a test set")
    model_args(score)
    score.add_argument("--test", required=True, help="test data, CSV or Parquet (label column optional)")
    score.add_argument("--output", "-o", help="write the influence table here (.csv or .parquet)")
    score.add_argument("--aggregate", choices=["mean", "sum"], default="mean",
                       help="score the mean or summed test loss (default mean)")
    score.add_argument("--per-test-point", action="store_true",
                       help="write one column per test point instead of aggregating")
    score.add_argument("--on", choices=["loss", "prediction"], default="loss")
    score.add_argument("--top", type=int, default=10, help="rows to print per kind (default 10)")
    score.set_defaults(run=_cmd_score)

    check = sub.add_parser("check", help="check that a model is supported and reproduced by its data")
    model_args(check)
    check.set_defaults(run=_cmd_check)

    demo = sub.add_parser("demo", help="find flipped labels in UCI Adult with CatBoost (the paper's setting)")
    demo.add_argument("--noise", type=float, default=0.1, help="fraction of training labels flipped")
    demo.add_argument("--trees", type=int, default=100)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(run=_cmd_demo)
    from .cli_tweak import add_parser as add_tweak  # the tweak subcommand lives in its own module

    add_tweak(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``influence-gbdt`` command; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (InfluenceError, ImportError) as exc:
        print(f"influence-gbdt {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
