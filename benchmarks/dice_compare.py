"""FeatureTweaking next to DiCE (dice-ml) on the models users have; prints a Markdown table.

For each data set (UCI Adult with its categorical columns; scikit-learn's breast-cancer data, all
numeric) and each library's default classifier (``XGBClassifier()``, ``LGBMClassifier()``,
``CatBoostClassifier()``), the first ``--rows`` test rows the model predicts negative are given to

* ``FeatureTweaking(model, cost="l2", immutable=..., bounds=...).fit(X_train).tweak(rows)``;
* DiCE's model-agnostic ``random`` and ``genetic`` methods, one counterfactual per row
  (``total_CFs=1``, ``desired_class="opposite"``), with the same features to vary and the same
  permitted ranges (DiCE has no monotone constraints, so none are used here).

Every answer is checked with the booster's own ``predict`` (validity), and costed in our cost: the
Euclidean norm of the changes, each numerical change in units of the training standard deviation,
a changed category 1. Columns: validity, mean and median cost over the valid answers, mean number
of changed features, wall seconds per row. DiCE's genetic method is slow (~20 s per row), so it
runs on the first ``--genetic-rows`` rows only.

Run: ``python benchmarks/dice_compare.py [--rows 200] [--genetic-rows 20]`` (``nox -s dice``:
installs dice-ml in the session only; it is never a dependency of the package).
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from influence_gbdt import FeatureTweaking
from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult
from influence_gbdt.validation import markdown_table

LIBRARIES = ("xgboost", "lightgbm", "catboost")
ADULT_IMMUTABLE = ["age", "sex", "race", "native-country", "relationship", "marital-status", "fnlwgt"]


#: (training rows, labels, test rows, immutable features, bounds {feature: (low, high)})
Task = tuple[pd.DataFrame, np.ndarray, pd.DataFrame, list[str], dict[str, tuple[float, float]]]


def adult() -> Task:
    X, y = load_adult("train")
    X_test, _ = load_adult("test")
    return X, y, X_test, ADULT_IMMUTABLE, {"hours-per-week": (1, 80)}


def breast_cancer() -> Task:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer(as_frame=True)
    X = data.frame.drop(columns="target")
    X.columns = [c.replace(" ", "_") for c in X.columns]
    y = data.frame["target"].to_numpy()
    order = np.random.default_rng(0).permutation(len(X))
    train, test = order[:400], order[400:]
    bounds = {c: (float(X[c].min()), float(X[c].max())) for c in X.columns}
    return X.iloc[train].reset_index(drop=True), y[train], X.iloc[test].reset_index(drop=True), [], bounds


DATASETS = {"adult": adult, "breast_cancer": breast_cancer}


def default_model(library: str, X: pd.DataFrame, y: np.ndarray, categorical: list[str]) -> Any:
    if library == "xgboost":
        import xgboost as xgb

        return xgb.XGBClassifier(enable_categorical=True).fit(X, y)
    if library == "lightgbm":
        import lightgbm as lgb

        return lgb.LGBMClassifier(verbose=-1).fit(X, y)
    import catboost as cb

    return cb.CatBoostClassifier(verbose=0, cat_features=categorical, one_hot_max_size=255,
                                 allow_writing_files=False, random_seed=0).fit(X, y)


class AsTrained:
    """The booster behind DiCE's sklearn backend: DiCE passes frames with categories as text; the
    model gets them as it was trained (pandas categories for XGBoost / LightGBM)."""

    def __init__(self, model: Any, dtypes: pd.Series) -> None:
        self.model, self.dtypes = model, dtypes

    def frame(self, X: pd.DataFrame) -> pd.DataFrame:
        X = X[list(self.dtypes.index)].copy()
        for c, t in self.dtypes.items():
            if isinstance(t, pd.CategoricalDtype):
                X[c] = X[c].astype(t)
            elif pd.api.types.is_numeric_dtype(t):
                X[c] = pd.to_numeric(X[c])
            else:  # CatBoost's categories: text
                X[c] = X[c].astype(str)
        return X

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model.predict_proba(self.frame(X)))

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.model.predict(self.frame(X)))


def our_cost(original: pd.DataFrame, tweaked: pd.DataFrame, std: pd.Series, categorical: list[str]) -> tuple[
        np.ndarray, np.ndarray]:
    """(cost, changed features) of each tweaked row against its original."""
    costs, counts = [], []
    for (_, a), (_, b) in zip(original.iterrows(), tweaked.iterrows(), strict=True):
        parts = []
        for c in original.columns:
            if c in categorical:
                parts.append(0.0 if str(a[c]) == str(b[c]) else 1.0)
            else:
                parts.append(abs(float(b[c]) - float(a[c])) / (float(std[c]) or 1.0))
        d = np.array(parts)
        costs.append(float(np.sqrt((d * d).sum())))
        counts.append(int((d > 1e-12).sum()))
    return np.array(costs), np.array(counts)


def run_dice(method: str, model: AsTrained, X: pd.DataFrame, y: np.ndarray, rows: pd.DataFrame,
             numeric: list[str], vary: list[str], bounds: dict[str, tuple[float, float]]) -> tuple[
        list[pd.Series | None], float]:
    import dice_ml

    frame = X.copy()
    for c in frame.columns:
        if c not in numeric:
            frame[c] = frame[c].astype(str)
    data = dice_ml.Data(dataframe=frame.assign(outcome=y), continuous_features=numeric,
                        outcome_name="outcome")
    explainer = dice_ml.Dice(data, dice_ml.Model(model=model, backend="sklearn"), method=method)
    answers: list[pd.Series | None] = []
    start = time.perf_counter()
    for i in range(len(rows)):
        query = rows.iloc[[i]].copy()
        for c in query.columns:
            if c not in numeric:
                query[c] = query[c].astype(str)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = explainer.generate_counterfactuals(
                    query, total_CFs=1, desired_class="opposite", features_to_vary=vary,
                    permitted_range={k: list(v) for k, v in bounds.items() if k in vary}, verbose=False)
            cfs = out.cf_examples_list[0].final_cfs_df
            answers.append(None if cfs is None or cfs.empty else cfs.iloc[0].drop("outcome"))
        except Exception:
            answers.append(None)
    return answers, (time.perf_counter() - start) / max(len(rows), 1)


def summarise(name: str, rows: pd.DataFrame, answers: list[pd.Series | None], seconds: float,
              model: AsTrained, std: pd.Series, categorical: list[str]) -> dict[str, Any]:
    valid_rows, tweaked = [], []
    for i, a in enumerate(answers):
        if a is None:
            continue
        candidate = pd.DataFrame([a])[list(rows.columns)]
        if int(model.predict(candidate)[0]) == 1:
            valid_rows.append(i)
            tweaked.append(candidate.iloc[0])
    cost, changed = (our_cost(rows.iloc[valid_rows], pd.DataFrame(tweaked), std, categorical) if valid_rows
                     else (np.array([np.nan]), np.array([np.nan])))
    return {"method": name, "rows": len(rows), "valid": len(valid_rows) / len(rows),
            "mean cost": float(np.mean(cost)), "median cost": float(np.median(cost)),
            "changed features": float(np.mean(changed)), "s / row": seconds}


def compare(dataset: str, library: str, n_rows: int, genetic_rows: int) -> list[dict[str, Any]]:
    X, y, X_test, immutable, bounds = DATASETS[dataset]()
    categorical = [c for c in ADULT_CATEGORICAL if c in X.columns]
    if library != "catboost":
        for c in categorical:
            X[c] = X[c].astype("category")
            X_test[c] = pd.Categorical(X_test[c], categories=X[c].cat.categories)
    model = default_model(library, X, y, categorical)
    wrapped = AsTrained(model, X.dtypes)
    rows = X_test[model.predict(X_test) == 0].head(n_rows)
    numeric = [c for c in X.columns if c not in categorical]
    vary = [c for c in X.columns if c not in immutable]
    std = X[numeric].std()
    out = []
    ft = FeatureTweaking(model, cost="l2", immutable=immutable, bounds=bounds, progress=False).fit(X)
    ft.tweak(rows.head(2))  # kernels loaded: not timed
    start = time.perf_counter()
    table = ft.tweak(rows)
    seconds = (time.perf_counter() - start) / len(rows)
    ours = [None if np.isnan(c) else r[list(X.columns)] for (_, r), c in zip(table.iterrows(), table["cost"],
                                                                             strict=True)]
    out.append(summarise("influence-gbdt FeatureTweaking", rows, ours, seconds, wrapped, std, categorical))
    for method, count in (("random", n_rows), ("genetic", genetic_rows)):
        part = rows.head(count)
        answers, sec = run_dice(method, wrapped, X, y, part, numeric, vary, bounds)
        out.append(summarise(f"DiCE {method}", part, answers, sec, wrapped, std, categorical))
        if method == "genetic":  # ours on the same rows, for a like-for-like line
            out.append(summarise(f"influence-gbdt, the {count} genetic rows", part, ours[:count], seconds,
                                 wrapped, std, categorical))
    for line in out:
        line.update(dataset=dataset, library=library)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--genetic-rows", type=int, default=20)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    args = parser.parse_args(argv)
    lines = []
    for dataset in args.datasets.split(","):
        for library in args.libraries.split(","):
            lines += compare(dataset, library, args.rows, args.genetic_rows)
            print(f"done: {dataset} / {library}", flush=True)
    frame = pd.DataFrame(lines)[["dataset", "library", "method", "rows", "valid", "mean cost", "median cost",
                                 "changed features", "s / row"]]
    print(markdown_table(frame))


if __name__ == "__main__":
    main()
