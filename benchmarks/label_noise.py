"""Finding flipped labels on UCI Adult: influence against what practitioners use today.

Setting (the paper's and the demo's): CatBoost, Plain boosting, Newton leaves, 100 trees of depth 6,
learning rate 0.2, one-hot categoricals, trained on the 32,561 Adult training rows with a fraction
(default 10%) of the labels flipped at random. Each detector ranks the training rows (larger =
more suspicious); we report the ROC-AUC of finding the flipped rows, the precision among the top
``k`` rows, and the detector's time (training included where it needs its own models):

* influence on the mean test loss (exact LeafInfluence, all points, reverse mode), > 0 = harmful;
* self-influence (the row's effect on its own loss) with LeafInfluence and LeafRefit, single-point
  update set (top-k update sets cost ~6 ms per row, minutes on all rows: left out);
* the model's own disagreement with the label (its training loss on the row);
* cleanlab's ``find_label_issues`` (and its per-row label quality) on 5-fold cross-validated
  probabilities of the same CatBoost recipe: the usual data-centric workflow;
* two combinations: disagreement of the cross-validated model, and the product rule
  "disagreement, then confirmed by test influence" (rank average).

Usage::

    python benchmarks/label_noise.py [--noise 0.1] [--seeds 0 1] [--out docs/label-noise.md]

Writes a Markdown table (and docs/images/label_noise_roc.png) with the command that produced it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from influence_gbdt import BoostingInfluence
from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult
from influence_gbdt.demo import roc_auc
from influence_gbdt.label_noise import disagreement, self_influence
from influence_gbdt.validation import markdown_table

ROOT = Path(__file__).resolve().parent.parent


def catboost_model(seed: int, n_trees: int):
    from catboost import CatBoostClassifier

    return CatBoostClassifier(
        iterations=n_trees, depth=6, learning_rate=0.2, loss_function="Logloss",
        leaf_estimation_method="Newton", boosting_type="Plain", one_hot_max_size=255,
        cat_features=list(ADULT_CATEGORICAL), random_seed=seed, verbose=0, allow_writing_files=False,
        thread_count=2,
    )


def cross_validated_proba(
    X: pd.DataFrame, y: np.ndarray, seed: int, n_trees: int, folds: int = 5
) -> np.ndarray:
    """Out-of-fold P(class) of shape (n, 2), the input cleanlab expects."""
    rng = np.random.default_rng(seed)
    fold = rng.permutation(np.arange(y.size) % folds)
    proba = np.empty((y.size, 2))
    for f in range(folds):
        held = fold == f
        model = catboost_model(seed, n_trees).fit(X[~held], y[~held])
        proba[held] = model.predict_proba(X[held])
    return proba


def precision_at(flipped: np.ndarray, score: np.ndarray, k: int) -> float:
    return float(flipped[np.argsort(-score, kind="stable")[:k]].mean())


def rank01(score: np.ndarray) -> np.ndarray:
    return pd.Series(score).rank(method="average").to_numpy() / score.size


def run(noise: float, seed: int, n_trees: int) -> tuple[pd.DataFrame, dict[str, np.ndarray], np.ndarray]:
    import cleanlab

    X, y = load_adult("train")
    X_test, y_test = load_adult("test")
    rng = np.random.default_rng(seed)
    flipped = np.zeros(y.size, dtype=bool)
    flipped[rng.choice(y.size, round(noise * y.size), replace=False)] = True
    y_noisy = np.where(flipped, 1 - y, y)

    t0 = time.perf_counter()
    model = catboost_model(seed, n_trees).fit(X, y_noisy)
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex = BoostingInfluence(model, progress=False).fit(X, y_noisy)
    t_fit = time.perf_counter() - t0

    scores: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}

    def timed(name: str, fn, extra: float = 0.0) -> None:
        t = time.perf_counter()
        scores[name] = np.asarray(fn(), dtype=np.float64)
        seconds[name] = time.perf_counter() - t + extra
        print(f"{name}: ROC-AUC {roc_auc(flipped, scores[name]):.3f} ({seconds[name]:.0f} s)", flush=True)

    timed("disagreement (model's training loss)", lambda: disagreement(ex.engine_), t_train)
    t0 = time.perf_counter()
    ours = ex.find_label_issues()
    ours_flagged = np.zeros(y.size, dtype=bool)
    ours_flagged[ours.index[ours["is_label_issue"].to_numpy()]] = True
    t_ours = time.perf_counter() - t0 + t_train + t_fit
    timed("influence on mean test loss (exact)",
          lambda: ex.score_training_points(X_test, y_test, aggregate="mean"), t_train + t_fit)
    timed("self-influence, LeafInfluence single-point",
          lambda: self_influence(ex.engine_, method="leaf_influence"), t_train + t_fit)
    timed("self-influence, LeafRefit single-point",
          lambda: self_influence(ex.engine_, method="leaf_refit"), t_train + t_fit)

    t0 = time.perf_counter()
    proba = cross_validated_proba(X, y_noisy, seed, n_trees)
    t_cv = time.perf_counter() - t0
    timed("disagreement of 5-fold cross-validated model", lambda: 1 - proba[np.arange(y.size), y_noisy], t_cv)
    timed("cleanlab label quality (self-confidence), CV",
          lambda: -cleanlab.rank.get_label_quality_scores(y_noisy, proba), t_cv)
    t0 = time.perf_counter()
    issues = cleanlab.filter.find_label_issues(y_noisy, proba, return_indices_ranked_by="self_confidence")
    t_issues = time.perf_counter() - t0 + t_cv
    timed("disagreement, then test influence (rank average)",  # the influence run is its cost
          lambda: rank01(scores["disagreement (model's training loss)"])
          + rank01(scores["influence on mean test loss (exact)"]),
          seconds["influence on mean test loss (exact)"])

    n_flipped = int(flipped.sum())
    rows = []
    for name, s in scores.items():
        rows.append({"detector": name, "ROC-AUC": roc_auc(flipped, s),
                     "precision@100": precision_at(flipped, s, 100),
                     "precision@1000": precision_at(flipped, s, 1000),
                     f"precision@{n_flipped}": precision_at(flipped, s, n_flipped),
                     "seconds": seconds[name]})
    flagged = np.zeros(y.size, dtype=bool)
    flagged[issues] = True
    table = pd.DataFrame(rows)
    table.attrs["cleanlab"] = {"flagged": int(flagged.sum()), "precision": float(flipped[flagged].mean()),
                               "recall": float(flagged[flipped].mean()), "seconds": t_issues}
    table.attrs["ours"] = {"flagged": int(ours_flagged.sum()),
                           "precision": float(flipped[ours_flagged].mean()) if ours_flagged.any() else 0.0,
                           "recall": float(ours_flagged[flipped].mean()), "seconds": t_ours}
    table.attrs["n_flipped"] = n_flipped
    return table, scores, flipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--out", default=None, help="write the Markdown table here")
    args = parser.parse_args(argv)
    tables = []
    for seed in args.seeds:
        table, scores, flipped = run(args.noise, seed, args.trees)
        print(f"seed {seed}: cleanlab find_label_issues {table.attrs['cleanlab']}")
        print(f"seed {seed}: influence-gbdt find_label_issues {table.attrs['ours']}")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        tables.append(table)
        if seed == args.seeds[0]:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            from influence_gbdt.plots import plot_noise_roc

            keep = ["disagreement (model's training loss)", "influence on mean test loss (exact)",
                    "self-influence, LeafInfluence single-point", "self-influence, LeafRefit single-point",
                    "cleanlab label quality (self-confidence), CV"]
            fig, ax = plt.subplots(figsize=(6.5, 6.5), layout="constrained")
            plot_noise_roc(flipped, {k: scores[k] for k in keep}, ax=ax)
            ax.set_title(f"Finding {args.noise:.0%} flipped labels on Adult (CatBoost, {args.trees} trees)")
            fig.savefig(ROOT / "docs" / "images" / "label_noise_roc.png", dpi=110)
            plt.close(fig)
    mean = pd.concat(tables).groupby("detector", sort=False).mean(numeric_only=True).reset_index()
    flags = pd.DataFrame([t.attrs["cleanlab"] for t in tables]).mean()
    own = pd.DataFrame([t.attrs["ours"] for t in tables]).mean()
    if args.out:
        command = "python benchmarks/label_noise.py " + " ".join(sys.argv[1:] if argv is None else argv)
        text = [f"Regenerated by `{command.strip()}` (seeds {args.seeds}; mean over seeds; seconds on 2 "
                "shared cores, training included).", "", markdown_table(mean), "",
                f"cleanlab's `find_label_issues` (CV probabilities) flags {flags['flagged']:.0f} rows: "
                f"precision {flags['precision']:.3f}, recall {flags['recall']:.3f} of the "
                f"{tables[0].attrs['n_flipped']} flipped labels ({flags['seconds']:.0f} s).", "",
                f"influence-gbdt's `find_label_issues` (`is_label_issue`: confident learning's count on the "
                f"booster's own probabilities, no retraining) flags {own['flagged']:.0f} rows: precision "
                f"{own['precision']:.3f}, recall {own['recall']:.3f} ({own['seconds']:.0f} s, training "
                "included)."]
        Path(args.out).write_text("\n".join(text) + "\n")
        print(f"Wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
