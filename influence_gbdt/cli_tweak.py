"""The ``influence-gbdt tweak`` subcommand: cheapest feature changes that flip a model's prediction.

Registered by :mod:`influence_gbdt.cli`; errors surface there as one line and exit code 2.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pandas as pd

from .cli_io import QUIET_HELP, check_output, json_object, load_model, read_table, write_table
from .errors import InputError


def add_parser(subparsers: Any) -> None:
    """Add ``tweak`` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "tweak",
        help="cheapest feature changes that move each row's prediction to a target class or range",
        description="Actionable feature tweaking (Tolomei et al., 2017) of the rows of --data.",
    )
    p.add_argument("model", help="model file: XGBoost .json/.ubj, LightGBM .txt, CatBoost .cbm/.json")
    p.add_argument("--data", required=True, help="rows to tweak, CSV or Parquet")
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    p.add_argument("--train", help="training data (CSV or Parquet): feature scales and nearest-row fallback")
    p.add_argument("--label", help="label column to drop from --data and --train, if present")
    p.add_argument("--target",
                   help="classifiers: class to reach (default: the other class / cheapest other class)")
    p.add_argument("--range", nargs=2, metavar=("LOW", "HIGH"), dest="desired_range",
                   help="regressors (required there): the range the model's prediction must reach, bounds "
                        "included, on the scale its predict returns; 'none' leaves a side open "
                        "(--range 300000 none: at least 300000)")
    p.add_argument("--cost", choices=["l2", "l1", "l0"], default="l2",
                   help="distance to minimise, in feature scales: l2 (default), l1, or l0 (fewest changed "
                        "features, then l2)")
    p.add_argument("--max-changes", type=int, help="change at most this many features per row")
    p.add_argument("--epsilon", type=float, default=0.05, help="margin inside a split, in feature scales")
    p.add_argument("--method", choices=["combine", "paths", "exact"], default="combine",
                   help="combine (default): leaf paths and their intersections, refined; paths: one"
                   " leaf's path per candidate (the paper); exact: the optimum by mixed-integer"
                   " programming (slow)")
    p.add_argument("--immutable", default="", help="comma-separated features that must not change")
    p.add_argument("--bounds", help='JSON {"feature": [low, high]} for changed values (null: unbounded)')
    p.add_argument("--monotone", help='JSON {"feature": 1 or -1}: the only direction a feature may move')
    p.add_argument("--output", "-o", help="write the tweaked rows here (.csv or .parquet)")
    p.add_argument("--show", type=int, default=5, help="rows whose changes are printed (default 5)")
    p.set_defaults(run=run)


def _json(text: str | None, what: str, example: str) -> dict[str, Any] | None:

    return json_object(text, what, example) if text else None


def _frame(path: str, label: str | None, reader: Any) -> pd.DataFrame:
    """Read a table as the model wants it: label dropped, the model's column order, stored
    categories restored (a CSV loses pandas' category dtype)."""

    frame = read_table(path)
    if label is not None and label in frame.columns:
        frame = frame.drop(columns=[label])
    s = reader.structure
    names = list(s.feature_names[: s.n_inputs])
    if set(names) <= set(map(str, frame.columns)):
        frame = frame[names]
    elif frame.shape[1] != s.n_inputs:
        raise InputError(f"{path} has columns {list(frame.columns)}; the model reads {names}.")
    for f in np.flatnonzero(s.feature_is_categorical).tolist():
        labels = s.category_labels[f] if s.category_labels else None
        if labels is not None:
            col = frame.iloc[:, f]
            kind = type(labels[0]) if labels else str
            values = col.astype(str) if kind is str else col
            frame[frame.columns[f]] = pd.Categorical(values, categories=list(labels))
    return frame


def _target(value: str | None, classes: np.ndarray) -> Any:
    if value is None:
        return None
    for c in classes:
        if str(c) == value:
            return c
    raise InputError(f"--target {value!r} is not a class of the model ({[str(c) for c in classes]}).")


def _range(values: list[str] | None) -> tuple[float | None, float | None] | None:
    """``--range LOW HIGH`` as numbers, 'none' (or 'inf' / '-inf') for an open side."""
    if values is None:
        return None
    out: list[float | None] = []
    for text in values:
        if text.strip().lower() in ("none", "null", ""):
            out.append(None)
            continue
        try:
            out.append(float(text))
        except ValueError:
            raise InputError(f"--range takes two numbers or 'none', got {text!r}.") from None
    return out[0], out[1]


def run(args: argparse.Namespace) -> int:
    """Run ``tweak``; returns the exit code."""
    from .adapters.trees import trees_for
    from .tweaking import FeatureTweaking

    if args.output:
        check_output(args.output)
    bounds: dict[str, tuple[float | None, float | None]] = {}
    for key, pair in (_json(args.bounds, "--bounds", '{"age": [18, null]}') or {}).items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise InputError(f"--bounds: {key!r} must map to [low, high], got {pair!r}.")
        bounds[key] = (pair[0], pair[1])
    monotone = _json(args.monotone, "--monotone", '{"income": 1}')
    model = load_model(args.model)
    reader = trees_for(model)
    data = _frame(args.data, args.label, reader)
    train = _frame(args.train, args.label, reader) if args.train else None
    immutable = [c.strip() for c in args.immutable.split(",") if c.strip()]
    ft = FeatureTweaking(
        model,
        epsilon=args.epsilon,
        cost=args.cost,
        immutable=immutable,
        bounds=bounds or None,
        monotone=monotone,
        method=args.method,
        max_changes=args.max_changes,
        progress=not args.quiet,
    ).fit(train)
    classifier = hasattr(ft, "classes_")
    target = _target(args.target, ft.classes_) if classifier else args.target
    table = ft.tweak(data, target=target, desired_range=_range(args.desired_range))
    found = table["cost"].notna()
    mean = f"mean cost {table.loc[found, 'cost'].mean():.4g}" if found.any() else "see the reason column"
    print(
        f"Tweaked {int(found.sum())} of {len(table)} rows ({int((table['source'] == 'unchanged').sum())} "
        f"already in the target {'class' if classifier else 'range'}); {mean}."
    )
    shown = 0
    for i in np.flatnonzero(found.to_numpy() & (table["source"] != "unchanged").to_numpy()).tolist():
        if shown >= args.show:
            break
        moves = [  # column by column: a row of ints and floats would read every int as a float
            f"{name}: {data[name].iloc[i]} -> {table[name].iloc[i]}"
            for name in data.columns
            if not _same(data[name].iloc[i], table[name].iloc[i])
        ]
        head = f"  row {i} -> {table['prediction'].iloc[i]} (cost {table['cost'].iloc[i]:.4g}): "
        print(head + "; ".join(moves))
        shown += 1
    if args.output:
        write_table(table, args.output)
        print(f"Wrote {len(table)} rows to {args.output}.")
    return 0


def _same(a: Any, b: Any) -> bool:
    """Whether a feature kept its value (17 and 17.0 alike, NaN and NaN alike)."""
    if pd.isna(a) or pd.isna(b):
        return bool(pd.isna(a) and pd.isna(b))
    return bool(a == b)
