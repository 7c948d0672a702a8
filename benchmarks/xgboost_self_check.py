"""The XGBoost self-check on correct and on wrong data: the measurement behind the tolerances of
``XGBoostAdapter.prepare`` (``rtol`` and ``ROUNDING_UNITS``). Prints a Markdown table.

Two numbers per case, each over the first ``r`` trees (each tree is recomputed at the margins of the
*stored* earlier trees, so the first ``r`` entries of one 1000-tree replay are the ``r``-tree model):

* ``rel`` = ``engine.relative_residual``: max |recomputed - stored| leaf value / max |stored|;
* ``units`` = ``rounding_units``: the worst leaf's residual over its own float32 rounding bound.

Correct data: ``XGBClassifier()`` defaults (depth 6, eta 0.3, hist) with ``n_estimators=1000`` on the
Adult training rows (the first ``n`` of a fixed shuffle), numeric columns or one-hot, without and
with random sample weights; and synthetic data of rounded features, where many rows share a margin.
Wrong data, same models (the smallest over a few rows, i.e. the least detectable case): one label
flipped, two rows (of different labels) swapped, one weight off by 1%, and the parameters a
``load_model`` drops (eta 0.1 and lambda 2 read back as 0.3 and 1).

Run: ``python benchmarks/xgboost_self_check.py [--sizes 1000 4000] [--trees 1000]`` (about an hour on
2 busy cores for the defaults; ``--sizes 1000 --trees 200`` takes a minute).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb
from influence_gbdt.adapters.xgboost import XGBoostAdapter, rounding_units

from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult
from influence_gbdt.engine import InfluenceEngine


def adult(encoding: str) -> tuple[pd.DataFrame, np.ndarray]:
    X, y = load_adult("train")
    if encoding == "numeric":
        X = X.drop(columns=list(ADULT_CATEGORICAL))
    else:
        X = pd.get_dummies(X, columns=list(ADULT_CATEGORICAL), dtype=float)
    order = np.random.default_rng(0).permutation(len(y))
    return X.iloc[order].reset_index(drop=True).astype(float), y[order]


def measure(engine: InfluenceEngine, slices: list[int]) -> list[tuple[float, float]]:
    """(relative residual, rounding units) of the first r trees, for each r in ``slices``."""
    e = engine.ensemble
    stored = np.abs(e.leaf_values)
    units = rounding_units(engine)
    return [(float(engine.tree_residual[:r].max() / stored[: e.leaf_offset[r]].max()), float(units[:r].max()))
            for r in slices]


def engine_of(model: Any, X: Any, y: np.ndarray, w: np.ndarray | None, params: dict | None = None
              ) -> InfluenceEngine:
    return InfluenceEngine(XGBoostAdapter(model, params).describe(X, y, w))


def wrong_cases(model: Any, X: pd.DataFrame, y: np.ndarray, slices: list[int], tries: int
                ) -> dict[str, list[tuple[float, float]]]:
    rng = np.random.default_rng(1)
    n = len(y)
    out: dict[str, list[list[tuple[float, float]]]] = {
        "one label flipped": [], "two rows swapped": [], "one weight +1%": []}
    for _ in range(tries):
        i = int(rng.integers(n))
        y2 = y.copy()
        y2[i] = 1 - y2[i]
        out["one label flipped"].append(measure(engine_of(model, X, y2, None), slices))
        j = int(rng.choice(np.flatnonzero(y != y[i])))
        perm = np.arange(n)
        perm[[i, j]] = perm[[j, i]]
        out["two rows swapped"].append(measure(engine_of(model, X.iloc[perm], y, None), slices))
        w2 = np.ones(n)
        w2[i] = 1.01
        out["one weight +1%"].append(measure(engine_of(model, X, y, w2), slices))
    return {k: [min(t) for t in zip(*v, strict=True)] for k, v in out.items()}  # least detectable


def run(tag: str, X: pd.DataFrame, y: np.ndarray, n_trees: int, slices: list[int], tries: int,
        wrong: bool = True) -> list[str]:
    rows = []
    for weighted in (False, True):
        n = len(y)
        w = np.random.default_rng(2).uniform(0.5, 2.0, n) if weighted else None
        name = f"{tag}, n={n}, {'weights' if weighted else 'no weights'}"
        t0 = time.perf_counter()
        model = xgb.XGBClassifier(n_estimators=n_trees, n_jobs=1).fit(X, y, sample_weight=w)
        rows.append(_row(name, "correct", measure(engine_of(model, X, y, w), slices)))
        if wrong and not weighted:
            for kind, vals in wrong_cases(model, X, y, slices, tries).items():
                rows.append(_row(name, kind, vals))
            slow = xgb.XGBClassifier(n_estimators=n_trees, learning_rate=0.1, reg_lambda=2.0, n_jobs=1)
            slow.fit(X, y)
            booster = xgb.Booster(model_file=bytearray(slow.get_booster().save_raw("ubj")))
            rows.append(_row(name, "load_model: eta 0.1 -> 0.3, lambda 2 -> 1",
                             measure(engine_of(booster, X, y, None), slices)))
            rows.append(_row(name, "load_model: lambda 2 -> 1 only",
                             measure(engine_of(booster, X, y, None, {"eta": 0.1}), slices)))
        print(f"<!-- {name}: {time.perf_counter() - t0:.0f} s -->", flush=True)
        for row in rows:
            print(row, flush=True)
        rows = []
    return rows


def rounded(n: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Rounded normal features (about 100 distinct rows): many rows share every margin."""
    rng = np.random.default_rng(3)
    X = np.round(rng.normal(size=(n, 4)))
    y = (X[:, 0] + X[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(int)
    return pd.DataFrame(X, columns=list("abcd")), y


def _row(tag: str, case: str, values: list[tuple[float, float]]) -> str:
    return f"| {tag} | {case} | " + " | ".join(f"{r:.1e} / {u:.2g}" for r, u in values) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 16000, 32561])
    parser.add_argument("--encodings", nargs="+", default=["numeric", "onehot"])
    parser.add_argument("--trees", type=int, default=1000)
    parser.add_argument("--tries", type=int, default=2)
    parser.add_argument("--rounded-extra", type=int, nargs="*", default=[100000],
                        help="further sizes for the rounded-features data only")
    args = parser.parse_args()
    slices = [r for r in (100, 300) if r < args.trees] + [args.trees]
    print(f"xgboost {xgb.__version__}; rel / units of the first r trees")
    print("| model | data | " + " | ".join(f"r={r}" for r in slices) + " |")
    print("|---|---|" + "---|" * len(slices))
    for n in [*args.sizes, *args.rounded_extra]:
        X, y = rounded(n)
        run("rounded features", X, y, args.trees, slices, args.tries, wrong=n <= 4000)
    for enc in args.encodings:
        X_all, y_all = adult(enc)
        for n in args.sizes:
            X = X_all.iloc[:n].reset_index(drop=True)
            run(f"Adult {enc}", X, y_all[:n], args.trees, slices, args.tries)


if __name__ == "__main__":
    main()
