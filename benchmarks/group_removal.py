"""Deleting a group of training rows: ``score_group`` against the sum of the rows' own scores and
against true retraining, on UCI Adult; prints a Markdown table.

For each library's default classifier (``XGBClassifier()``, ``LGBMClassifier()``,
``CatBoostClassifier(one_hot_max_size=64)`` on Adult's categories), the ``k`` training rows most
harmful to the mean test log loss (by ``leaf_influence``, on 2,000 test rows) are deleted together.
The change of the mean test loss is then estimated four ways:

* ``sum leaf_influence``: the sum of the rows' scores (first order);
* ``sum leaf_refit``: the sum of the rows' own fixed-structure deletions (CatBoost: for 10 rows
  only: its leaf_refit takes seconds per row, each re-summing its ~10,000 leaf steps);
* ``score_group``: the group deleted together, structures fixed (one replay of the rows left);
* ``retrain``: the model retrained without the rows, with its own settings (new structures).

Each is "loss with the rows minus loss without them": > 0 means the group is harmful. Times are
wall seconds of one ``score_group`` call (2 threads), next to the booster's training time.

Run: ``python benchmarks/group_removal.py`` (about 3 minutes; ``--sizes 10 100 1000``).
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from influence_gbdt import BoostingInfluence
from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult


def adult(library: str) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray]:
    X, y = load_adult("train")
    X_test, y_test = load_adult("test")
    if library != "catboost":
        for col in ADULT_CATEGORICAL:
            X[col] = X[col].astype("category")
            X_test[col] = pd.Categorical(X_test[col], categories=X[col].cat.categories)
    return X, np.asarray(y), X_test.head(2000), np.asarray(y_test)[:2000]


def default(library: str) -> Any:
    if library == "xgboost":
        import xgboost as xgb

        return xgb.XGBClassifier(enable_categorical=True, n_jobs=2)
    if library == "lightgbm":
        import lightgbm as lgb

        return lgb.LGBMClassifier(verbose=-1, n_jobs=2)
    import catboost as cb

    return cb.CatBoostClassifier(verbose=0, thread_count=2, allow_writing_files=False, one_hot_max_size=64,
                                 cat_features=list(ADULT_CATEGORICAL))


def mean_log_loss(model: Any, X: pd.DataFrame, y: np.ndarray) -> float:
    p = np.clip(np.asarray(model.predict_proba(X))[:, 1], 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def study(library: str, sizes: list[int]) -> list[dict[str, Any]]:
    X, y, X_test, y_test = adult(library)
    model = default(library)
    t0 = time.perf_counter()
    model.fit(X, y)
    train_s = time.perf_counter() - t0
    base_loss = mean_log_loss(model, X_test, y_test)
    influence = BoostingInfluence(model, progress=False, n_threads=2).fit(X, y)
    refit = BoostingInfluence(model, method="leaf_refit", progress=False, n_threads=2).fit(X, y)
    scores = np.asarray(influence.score_training_points(X_test, y_test, aggregate="mean"))
    order = np.argsort(-scores, kind="stable")
    out = []
    for k in sizes:
        group = order[:k]
        t0 = time.perf_counter()
        together = refit.score_group(X_test, y_test, training_points=group, aggregate="mean")
        group_s = time.perf_counter() - t0
        apart = (float(np.asarray(refit.score_training_points(X_test, y_test, training_points=group,
                                                              aggregate="mean")).sum())
                 if library != "catboost" or k <= 10 else None)
        keep = np.ones(len(X), dtype=bool)
        keep[group] = False
        retrained = default(library).fit(X[keep], y[keep])
        out.append({
            "library": library,
            "rows deleted": k,
            "sum leaf_influence": f"{scores[group].sum():.5f}",
            "sum leaf_refit": "-" if apart is None else f"{apart:.5f}",
            "score_group": f"{together:.5f}",
            "retrain": f"{base_loss - mean_log_loss(retrained, X_test, y_test):.5f}",
            "score_group s": f"{group_s:.2f}",
            "training s": f"{train_s:.2f}",
        })
        print(out[-1], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", nargs="+", default=["xgboost", "lightgbm", "catboost"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[10, 100, 1000])
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = [row for library in args.libraries for row in study(library, args.sizes)]
    frame = pd.DataFrame(rows)
    print("\n| " + " | ".join(frame.columns) + " |")
    print("|" + "|".join("---" for _ in frame.columns) + "|")
    for r in frame.itertuples(index=False):
        print("| " + " | ".join(str(v) for v in r) + " |")


if __name__ == "__main__":
    main()
