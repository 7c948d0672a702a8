"""The example figures of the docs (docs/images/): top rows for one prediction, scores by label, a
removal curve retrained with XGBoost. Small Adult samples; about a minute on 2 cores.

Run: ``python benchmarks/example_plots.py`` (the ROC figure comes from ``benchmarks/label_noise.py``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import xgboost as xgb

from influence_gbdt import BoostingInfluence
from influence_gbdt.datasets import load_adult
from influence_gbdt.plots import plot_removal_curve, plot_score_distribution, plot_top_rows
from influence_gbdt.validation import TrainingRecipe, removal_curve

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
NUMERIC = ["age", "education-num", "capital-gain", "capital-loss", "hours-per-week"]


def save(ax, name: str) -> None:
    ax.figure.savefig(IMAGES / name, dpi=110)
    plt.close(ax.figure)
    print(f"wrote {IMAGES / name}")


def main() -> None:
    X, y = load_adult("train")
    X_test, y_test = load_adult("test")
    X, y = X[NUMERIC].iloc[:4000], y[:4000]
    X_test, y_test = X_test[NUMERIC].iloc[:1000], y_test[:1000]
    recipe = TrainingRecipe("xgboost", {"objective": "binary:logistic", "max_depth": 4, "eta": 0.3},
                            num_boost_round=30)
    model = recipe.fit(X, y)
    ex = BoostingInfluence(model, progress=False).fit(X, y)
    p = model.predict(xgb.DMatrix(X_test))
    j = int(np.argmax(-np.log(np.where(y_test == 1, p, 1 - p))))
    one = ex.score_training_points(X_test.iloc[[j]], y_test[[j]])[X_test.index[j]]
    ax = plot_top_rows(one, X, y, n=6, title=f"Test row {j} (label {y_test[j]}, P(>50K) = {p[j]:.2f}): "
                                            "most harmful (top) and helpful rows")
    save(ax, "top_rows.png")
    mean = ex.score_training_points(X_test, y_test, aggregate="mean")
    save(plot_score_distribution(mean, np.where(y == 1, ">50K", "<=50K")), "score_distribution.png")
    curve = removal_curve(recipe, X, y, X_test, y_test, sizes=(5, 10, 20, 40), test_point=j, model=model,
                          methods=[("leaf_influence", "all_points", None)], n_random=3, progress=False)
    save(plot_removal_curve(curve, target="target_reduction"), "removal_curve.png")


if __name__ == "__main__":
    main()
