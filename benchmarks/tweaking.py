"""Feature tweaking benchmark on UCI Adult; prints Markdown tables.

1. Round trip of the tree structures: max |margin - booster margin| over train and test rows (relative
   to the largest margin), and whether every leaf id equals the booster's.
2. Rows per second on a 100-tree model per library (default depth: XGBoost 6, LightGBM 31 leaves,
   CatBoost 6), for the paper's single paths and for the combined search, with the constraints of
   the worked example in docs/feature-tweaking.md; the first call (numba loading) is excluded.
3. Optimality gap, on 10 trees of depth 3 and on the 100-tree models: each heuristic's cost over
   the exact MILP optimum of the same search space (``n_reference=0`` so that all search the same
   cells; training rows sit off the cells and can undercut it by up to epsilon), and the time each
   takes per row; "combine, no walks" is the combined search with ``climbs=0``.

"catboost-ctr" is CatBoost with its own categorical defaults (CTRs, of feature combinations too)
instead of one-hot categories; its gap table uses CTRs of single features (``max_ctr_complexity=1``),
since the exact program cannot hold combinations' CTRs (it refuses them).

``--max-changes K`` prints the classifiers' gap table alone, every method (the exact program too,
which holds the limit as a constraint) with ``max_changes=K``.

``--regression`` runs tables 2 and 3 on regressors instead: each library's regressor of
``hours-per-week`` from the other columns, with squared error (its default) and with a Poisson
objective (a count, predicted as ``exp`` of the margin). Each model moves test rows it predicts under
its median into ``desired_range=(low, None)``: ``low`` is the 90th percentile of its test predictions
(about 47 hours for the 100-tree models), or halfway from the median to the highest prediction where
that is lower (a 10-tree model may have its highest value as 90th percentile, which only rows
reaching exactly that value meet). Every found row is checked with the booster's ``predict``.

Times are CPU seconds of this process (``time.process_time``), so that other work on a shared
machine does not inflate them; the search itself is single-threaded.

Run: ``python benchmarks/tweaking.py`` (about 5 CPU minutes; ``--regression``: regressors).
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd
from influence_gbdt.adapters import trees_for

from influence_gbdt import FeatureTweaking
from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult

LIBRARIES = ("xgboost", "lightgbm", "catboost", "catboost-ctr")
IMMUTABLE = ["age", "sex", "race", "native-country", "relationship", "marital-status", "fnlwgt"]
SETTINGS: dict[str, Any] = {
    "immutable": IMMUTABLE,
    "bounds": {"hours-per-week": (1, 80)},
    "monotone": {"education-num": "increase"},
}
#: The regressors' target column.
HOURS = "hours-per-week"
REGRESSION_SETTINGS: dict[str, Any] = {"immutable": IMMUTABLE, "monotone": {"education-num": "increase"}}


def adult(library: str) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """Training rows, labels and test rows in the format each library takes categories in."""
    X, y = load_adult("train")
    X_test, _ = load_adult("test")
    if not library.startswith("catboost"):  # XGBoost and LightGBM read pandas categories; CatBoost strings
        for col in ADULT_CATEGORICAL:
            X[col] = X[col].astype("category")
            X_test[col] = pd.Categorical(X_test[col], categories=X[col].cat.categories)
    return X, y, X_test


#: Each library's Poisson objective, as its regressor's parameter.
POISSON = {"xgboost": {"objective": "count:poisson"}, "lightgbm": {"objective": "poisson"},
           "catboost": {"loss_function": "Poisson"}}


def model(library: str, X: pd.DataFrame, y: np.ndarray, n_trees: int, depth: int | None,
          single_ctrs: bool = False, task: str = "classifier") -> Any:
    """A model of ``library``: a classifier, or (``task`` "regressor" / "poisson") a regressor
    with squared error or Poisson; "catboost-ctr": CatBoost's CTRs (``single_ctrs``: of single
    features only), "catboost": one-hot categories."""
    kind = "Classifier" if task == "classifier" else "Regressor"
    extra: dict[str, Any] = POISSON[library] if task == "poisson" else {}
    if library == "xgboost":
        import xgboost as xgb

        extra = {**extra, **({} if depth is None else {"max_depth": depth})}
        return getattr(xgb, f"XGB{kind}")(n_estimators=n_trees, enable_categorical=True, n_jobs=2,
                                          **extra).fit(X, y)
    if library == "lightgbm":
        import lightgbm as lgb

        extra = {**extra, **({} if depth is None else {"num_leaves": 2**depth, "max_depth": depth})}
        return getattr(lgb, f"LGBM{kind}")(n_estimators=n_trees, verbose=-1, n_jobs=2, **extra).fit(X, y)
    import catboost as cb

    extra = {**extra, **({} if depth is None else {"depth": depth})}
    if library == "catboost":
        extra["one_hot_max_size"] = 64
    elif single_ctrs:
        extra["max_ctr_complexity"] = 1
    return getattr(cb, f"CatBoost{kind}")(
        iterations=n_trees,
        verbose=0,
        thread_count=2,
        cat_features=list(ADULT_CATEGORICAL),
        allow_writing_files=False,
        **extra,
    ).fit(X, y)


def round_trip(library: str, m: Any, X: pd.DataFrame, X_test: pd.DataFrame) -> dict[str, Any]:
    reader = trees_for(m)
    rows = pd.concat([X.iloc[:5000], X_test.iloc[:5000]], ignore_index=True)
    ours = reader.structure.predict_margin(reader.encode(rows))
    theirs = reader.raw_margin(rows)
    same = np.array_equal(reader.structure.apply(reader.encode(rows)), reader.leaf_ids(rows))
    return {
        "library": library,
        "trees": reader.structure.n_trees,
        "CTR columns": reader.structure.n_features - reader.structure.n_inputs,
        "max |margin diff|": f"{np.abs(ours - theirs).max():.1e}",
        "relative": f"{np.abs(ours - theirs).max() / np.abs(theirs).max():.1e}",
        "leaf ids equal": "yes" if same else "NO",
    }


def speed(library: str, m: Any, X: pd.DataFrame, queries: pd.DataFrame,
          goal: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows per CPU second of each method; ``goal``: a regressor's ``desired_range`` (checked
    here with the booster's predict, as ``tweak`` does)."""
    tables, seconds = {}, {}
    settings = REGRESSION_SETTINGS if goal else SETTINGS
    for method in ("paths", "combine"):
        ft = FeatureTweaking(m, method=method, progress=False, **settings).fit(X)
        ft.tweak(queries.head(2), **(goal or {}))  # load the compiled kernel
        t0 = time.process_time()
        tables[method] = ft.tweak(queries, **(goal or {}))
        seconds[method] = time.process_time() - t0
        if goal:
            found = tables[method]["cost"].notna()
            low = goal["desired_range"][0]
            assert (m.predict(tables[method].loc[found, list(queries.columns)]) >= low).all()
    both = tables["paths"]["cost"].notna() & tables["combine"]["cost"].notna()
    return [
        {
            "library": library,
            "method": method,
            "rows per CPU s": f"{len(queries) / seconds[method]:.1f}",
            "found": f"{table['cost'].notna().mean():.1%}",
            "mean cost (rows both found)": f"{table.loc[both, 'cost'].mean():.3f}",
            "training row wins": int((table["source"] == "training_row").sum()),
        }
        for method, table in tables.items()
    ]


HEURISTICS: dict[str, dict[str, Any]] = {
    "paths": {"method": "paths"},
    "combine, no walks": {"method": "combine", "climbs": 0},
    "combine": {"method": "combine"},
    "combine, wide beam": {"method": "combine", "beam_width": 32, "pool": 256},
}


def gap(library: str, size: str, m: Any, X: pd.DataFrame, queries: pd.DataFrame,
        goal: dict[str, Any] | None = None, max_changes: int | None = None) -> list[dict[str, Any]]:
    """Cost of each heuristic over the exact optimum of the same cells, per row, every method
    changing at most ``max_changes`` features (None: any number)."""
    costs, seconds = {}, {}
    settings = {**(REGRESSION_SETTINGS if goal else SETTINGS), "max_changes": max_changes}
    for name, kw in [*HEURISTICS.items(), ("exact", {"method": "exact", "time_limit": 60.0})]:
        ft = FeatureTweaking(m, n_reference=0, progress=False, **kw, **settings).fit(X)
        ft.tweak(queries.head(1), **(goal or {}))
        t0 = time.process_time()
        costs[name] = ft.tweak(queries, **(goal or {}))["cost"].to_numpy()
        seconds[name] = (time.process_time() - t0) / len(queries)
    exact = costs["exact"]
    solved = np.isfinite(exact) & (exact > 0)
    rows = []
    for name in [*HEURISTICS, "exact"]:
        found = solved & np.isfinite(costs[name])
        g = costs[name][found] / exact[found] - 1
        rows.append(
            {
                "library": library,
                "trees": size,
                "method": name,
                "CPU s/row": f"{seconds[name]:.3f}",
                "found": f"{found.sum()}/{solved.sum()}",
                "mean gap": f"{g.mean():.1%}" if g.size else "-",
                "max gap": f"{g.max():.1%}" if g.size else "-",
                "optimal": f"{(g <= 1e-7).mean():.0%}" if g.size else "-",
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    frame = pd.DataFrame(rows)
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in r) + " |" for r in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200, help="query rows for the speed table")
    parser.add_argument("--gap-rows", type=int, default=50, help="query rows for the gap table")
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES))
    parser.add_argument("--regression", action="store_true",
                        help=f"regressors of {HOURS} (squared error and Poisson) instead of classifiers")
    parser.add_argument("--max-changes", type=int, default=None,
                        help="the gap table alone, every method with max_changes set to this")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.regression and args.max_changes is not None:
        parser.error("--max-changes runs the classifiers' gap table; it does not combine with --regression")
    if args.regression:
        regression(args)
        return
    trips, speeds, gaps = [], [], []
    for library in args.libraries:
        X, y, X_test = adult(library)
        big = model(library, X, y, 100, None)
        if args.max_changes is None:
            trips.append(round_trip(library, big, X, X_test))
            queries = X_test[np.asarray(big.predict(X_test)).ravel() == 0].head(args.rows)
            speeds += speed(library, big, X, queries)
        ctr = library == "catboost-ctr"
        sizes = (("10, depth 3", model(library, X, y, 10, 3, ctr)),
                 ("100", model(library, X, y, 100, None, True) if ctr else big))
        for label, m in sizes:
            queries = X_test[np.asarray(m.predict(X_test)).ravel() == 0].head(args.gap_rows)
            gaps += gap(library, label, m, X, queries, max_changes=args.max_changes)
        print(f"done: {library}", flush=True)
    if args.max_changes is not None:
        print(f"\n### Optimality gap with max_changes={args.max_changes} ({args.gap_rows} rows per model, "
              "no training-row candidates)\n")
        print(markdown(gaps))
        return
    print("\n### Round trip (100 trees, 5,000 training + 5,000 test rows)\n")
    print(markdown(trips))
    print(f"\n### Speed (100 trees, {args.rows} test rows predicted <=50K)\n")
    print(markdown(speeds))
    print(f"\n### Optimality gap ({args.gap_rows} rows per model, no training-row candidates)\n")
    print(markdown(gaps))


def regression(args: argparse.Namespace) -> None:
    """Tables 2 and 3 on regressors (see the module docstring)."""
    speeds, gaps = [], []

    def rows_and_goal(m: Any, X_test: pd.DataFrame, n: int) -> tuple[pd.DataFrame, dict[str, Any]]:
        """Test rows ``m`` predicts under its median, and the range (low, None) of the docstring."""
        predicted = np.asarray(m.predict(X_test))
        middle = float(np.median(predicted))
        low = min(float(np.quantile(predicted, 0.9)), (middle + float(predicted.max())) / 2)
        return X_test[predicted < np.median(predicted)].head(n), {"desired_range": (low, None)}

    for library in [lib for lib in args.libraries if lib != "catboost-ctr"]:
        X, _, X_test = adult(library)
        y = X.pop(HOURS).to_numpy(dtype=np.float64)
        X_test = X_test.drop(columns=[HOURS])
        for task in ("regressor", "poisson"):
            name = f"{library}{' Poisson' if task == 'poisson' else ''}"
            big = model(library, X, y, 100, None, task=task)
            queries, goal = rows_and_goal(big, X_test, args.rows)
            speeds += speed(f"{name}, range {goal['desired_range'][0]:.1f}+", big, X, queries, goal)
            for label, m in (("10, depth 3", model(library, X, y, 10, 3, task=task)), ("100", big)):
                queries, goal = rows_and_goal(m, X_test, args.gap_rows)
                gaps += gap(f"{name}, range {goal['desired_range'][0]:.1f}+", label, m, X, queries, goal)
        print(f"done: {library}", flush=True)
    print(f"\n### Speed (100 trees, {args.rows} test rows predicted under the median)\n")
    print(markdown(speeds))
    print(f"\n### Optimality gap ({args.gap_rows} rows per model, no training-row candidates)\n")
    print(markdown(gaps))


if __name__ == "__main__":
    main()
