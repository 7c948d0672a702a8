"""The demo: find flipped labels in UCI Adult with a Plain-mode CatBoost model (the paper's setting).

Trains CatBoost (Plain boosting, Newton leaves, 100 trees of depth 6, learning rate 0.2, one-hot
categoricals) on the shipped Adult training set with a fraction of labels flipped, wraps it,
scores every training row by its influence on the mean test loss (exact reverse mode), and prints
the most harmful rows for the worst test predictions and how well the scores find the flipped
labels (ROC-AUC), next to the model's own disagreement with the label.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .datasets import ADULT_CATEGORICAL, load_adult
from .errors import InputError, require
from .explainer import BoostingInfluence
from .inputs import is_integer


def roc_auc(is_positive: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve of ``score`` for the binary target ``is_positive`` (ties averaged)."""
    ranks = pd.Series(score).rank(method="average").to_numpy()
    pos = np.asarray(is_positive, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def run_demo(
    noise: float = 0.1,
    n_trees: int = 100,
    seed: int = 0,
    n_worst: int = 3,
    n_rows: int = 5,
    progress: bool = True,
    echo: Callable[[str], Any] = print,
) -> dict[str, float]:
    """Run the demo and print its tables; returns the headline figures.

    Returns
    -------
    dict with ``auc_influence``, ``auc_detector`` (ROC-AUC of finding flipped labels by mean-test-loss
    influence and by the model's disagreement with the label), ``seconds_scoring`` and
    ``seconds_training``.

    Raises
    ------
    InputError
        ``noise`` outside (0, 1) (no flipped or no clean label to rank), ``n_trees < 1`` or
        ``seed`` outside [0, 2**32).
    MissingDependencyError
        Without CatBoost.
    """
    if not isinstance(noise, numbers.Real) or not 0 < noise < 1:
        raise InputError(f"noise must be a fraction between 0 and 1 (exclusive), got {noise!r}.")
    if not is_integer(n_trees) or n_trees < 1:
        raise InputError(f"n_trees must be an integer >= 1, got {n_trees!r}.")
    if not is_integer(seed) or not 0 <= seed < 2**32:
        raise InputError(f"seed must be an integer in [0, 2**32), got {seed!r}.")
    CatBoostClassifier = require("catboost", "catboost", "The demo").CatBoostClassifier

    X, y = load_adult("train")
    X_test, y_test = load_adult("test")
    rng = np.random.default_rng(seed)
    flipped = np.zeros(y.size, dtype=bool)
    n_flipped = min(max(round(noise * y.size), 1), y.size - 1)  # both kinds present for the ROC-AUC
    flipped[rng.choice(y.size, n_flipped, replace=False)] = True
    y_noisy = np.where(flipped, 1 - y, y)
    echo(f"UCI Adult: {y.size} training rows ({flipped.sum()} labels flipped), {y_test.size} test rows.")

    t0 = time.perf_counter()
    model = CatBoostClassifier(
        iterations=n_trees, depth=6, learning_rate=0.2, loss_function="Logloss",
        leaf_estimation_method="Newton", boosting_type="Plain", one_hot_max_size=255,
        cat_features=list(ADULT_CATEGORICAL), random_seed=seed, verbose=0, allow_writing_files=False,
    )
    model.fit(X, y_noisy)
    trained = time.perf_counter() - t0
    echo(f"Trained CatBoost (Plain, Newton, {n_trees} trees, depth 6, lr 0.2) in {trained:.1f} s.")

    t0 = time.perf_counter()
    explainer = BoostingInfluence(model, progress=progress).fit(X, y_noisy)
    mean_scores = np.asarray(explainer.score_training_points(X_test, y_test, aggregate="mean"))
    p_test = model.predict_proba(X_test)[:, 1]
    test_loss = -np.log(np.where(y_test == 1, p_test, 1 - p_test))
    worst = np.argsort(-test_loss)[:n_worst]
    per_point = np.asarray(explainer.score_training_points(X_test.iloc[worst], y_test[worst]))
    scored = time.perf_counter() - t0
    echo(f"Self-check passed (relative residual {explainer.reproduction_residual_:.1e}); "
         f"exact influence of all {y.size} rows on the mean test loss and on {n_worst} test points "
         f"in {scored:.1f} s.\n")

    for col, j in enumerate(worst):
        echo(f"Test row {j} (label {y_test[j]}, predicted P(>50K) = {p_test[j]:.3f}, "
             f"loss {test_loss[j]:.2f}): most harmful training rows")
        top = np.argsort(-per_point[:, col])[:n_rows]
        table = pd.DataFrame({
            "row": top, "score": per_point[top, col], "label": y_noisy[top], "flipped": flipped[top],
            "age": X["age"].to_numpy()[top], "education": X["education"].to_numpy()[top],
            "occupation": X["occupation"].to_numpy()[top],
        })
        echo(table.to_string(index=False, float_format=lambda v: f"{v:.3g}") + "\n")

    p_train = model.predict_proba(X)[:, 1]
    detector = np.where(y_noisy == 1, 1 - p_train, p_train)
    auc_influence = roc_auc(flipped, mean_scores)
    auc_detector = roc_auc(flipped, detector)
    top_share = flipped[np.argsort(-mean_scores)[: int(flipped.sum())]].mean()
    echo("Finding the flipped labels by influence on the mean test loss (score > 0 = harmful):")
    echo(f"  ROC-AUC, leaf_influence (exact, all_points):   {auc_influence:.3f}")
    echo(f"  ROC-AUC, model disagrees with label (Detector): {auc_detector:.3f}")
    echo(f"  flipped among the {int(flipped.sum())} most harmful rows: {top_share:.1%} (chance {noise:.0%})")
    return {"auc_influence": auc_influence, "auc_detector": auc_detector,
            "seconds_scoring": scored, "seconds_training": trained}
