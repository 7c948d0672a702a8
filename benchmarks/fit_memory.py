"""What ``fit`` holds at its peak per (tree, training row), against the adapter's estimate that
``max_memory`` is checked with (``BoosterAdapter.fit_bytes``); prints Markdown.

For each case (a library's classifier with one output, 3 and 10 classes) and each of two sizes
(``--rows``), a model is trained on synthetic rows (20 features) and saved; a fresh process then
loads it with its rows, resets its peak resident memory (``VmHWM``, Linux), fits
``BoostingInfluence`` and reports the peak above what it held before. The derivative cache (what
``max_memory`` leaves after fit, up to 1 GB) is turned off there, so that the difference between
the two sizes, per tree (as the adapter numbers them: K per round for K classes) and per added row,
is what the leaf indices cost. The table gives it next to the adapter's estimate per tree and row.

Run: ``python benchmarks/fit_memory.py [--rows 20000,40000] [--libraries catboost,lightgbm,xgboost]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

#: (classes, rounds) of each case: CatBoost's default of 1,000 rounds for one output, fewer for several
#: classes, whose training is slow.
SHAPES = {"catboost": ((2, 1000), (3, 300), (10, 100)), "lightgbm": ((2, 100), (3, 100), (10, 100)),
          "xgboost": ((2, 100), (3, 100), (10, 100))}


def _data(n: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 20))
    s = X[:, :3].sum(axis=1) + rng.normal(size=n)
    return X, np.digitize(s, np.quantile(s, np.linspace(0, 1, classes + 1)[1:-1]))


def _train(library: str, classes: int, rounds: int, X: np.ndarray, y: np.ndarray, path: str) -> None:
    if library == "catboost":
        import catboost

        catboost.CatBoostClassifier(iterations=rounds, verbose=0, thread_count=2).fit(X, y).save_model(path)
    elif library == "lightgbm":
        import lightgbm

        lightgbm.LGBMClassifier(n_estimators=rounds, verbose=-1).fit(X, y).booster_.save_model(path)
    else:
        import xgboost

        xgboost.XGBClassifier(n_estimators=rounds).fit(X, y).save_model(path)


def measure(library: str, path: str, n: int, classes: int) -> dict[str, Any]:
    """In this (fresh) process: the model at ``path`` fitted on the first ``n`` synthetic rows;
    the peak above what the process held before fit, in bytes, and the adapter's figures."""
    from benchmarks.speed import _memory_kb, _reset_peak
    from influence_gbdt import BoostingInfluence, explainer

    explainer.DEFAULT_CACHE_BYTES = 0  # the leaf indices alone: no derivative cache
    X, y = _data(n, classes)
    if library == "catboost":
        import catboost

        model: Any = catboost.CatBoostClassifier()
        model.load_model(path)
    elif library == "lightgbm":
        import lightgbm

        model = lightgbm.Booster(model_file=path)
    else:
        import xgboost

        model = xgboost.XGBClassifier()
        model.load_model(path)
    base_kb = _reset_peak()
    ex = BoostingInfluence(model, progress=False, max_memory=float("inf")).fit(X, y)
    peak = (_memory_kb("VmHWM") - base_kb) * 1024.0
    n_trees = ex.engine_.ensemble.n_trees
    return {"peak": peak, "trees": n_trees, "estimate": ex.adapter_.fit_bytes(n_trees, n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="20000,40000", help="two training sizes")
    parser.add_argument("--libraries", default="catboost,lightgbm,xgboost")
    args = parser.parse_args()
    n1, n2 = (int(v) for v in args.rows.split(","))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"| model | trees | peak at {n1:,} rows | at {n2:,} rows | bytes per tree and added row | "
          "estimate per tree and row |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for library in args.libraries.split(","):
            for classes, rounds in SHAPES[library]:
                got = []
                for n in (n1, n2):
                    path = os.path.join(tmp, f"{library}{classes}_{n}.json")  # XGBoost's JSON
                    _train(library, classes, rounds, *_data(n, classes), path)
                    code = (f"import json, benchmarks.fit_memory as f; "
                            f"print(json.dumps(f.measure({library!r}, {path!r}, {n}, {classes})))")
                    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                                         cwd=root, env={**os.environ, "PYTHONPATH": root}, check=True)
                    got.append(json.loads(out.stdout.strip().splitlines()[-1]))
                trees = got[0]["trees"]
                slope = (got[1]["peak"] - got[0]["peak"]) / (trees * (n2 - n1))
                print(f"| {library}, {classes} classes x {rounds} rounds | {trees:,} | "
                      f"{got[0]['peak'] / 1e6:.0f} MB | {got[1]['peak'] / 1e6:.0f} MB | {slope:.1f} | "
                      f"{got[1]['estimate'] / (trees * n2):.1f} |", flush=True)


if __name__ == "__main__":
    main()
