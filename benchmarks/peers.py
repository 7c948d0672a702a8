"""Side by side with what users would otherwise run: CatBoost's own ``get_object_importance``
(LeafInfluence-style, AllPoints update set) against our ``leaf_influence`` (all_points, exact
reverse mode) on the same rows, model and test points. Prints a Markdown table of times and
ratios for growing ``n`` and saves the log-log plot ``docs/peers_scaling.png``.

Both score every training row against the same 100 test rows (CatBoost: ``update_method=
"AllPoints"``, ``importance_values_sign="All"``; ours: their mean loss), on ``CatBoostClassifier(
iterations=100, leaf_estimation_iterations=1)`` trained on the first ``n`` Adult rows.
tree_influence (BoostIn, LeafInfluence) is not included: it is not a dependency of this project.
Run: ``python benchmarks/peers.py [--quick]`` (or ``nox -s bench``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import catboost
import numpy as np

from influence_gbdt import BoostingInfluence
from influence_gbdt.datasets import load_adult

DOCS = Path(__file__).resolve().parents[1] / "docs"


def one_size(n: int, n_trees: int, Xall: np.ndarray, yall: np.ndarray, Xt: np.ndarray, yt: np.ndarray
             ) -> tuple[float, float]:
    """(CatBoost get_object_importance seconds, our fit + score seconds) at ``n`` training rows."""
    X, y = Xall[:n], yall[:n]
    model = catboost.CatBoostClassifier(iterations=n_trees, verbose=0, random_seed=0,
                                        leaf_estimation_iterations=1).fit(X, y)
    t0 = time.perf_counter()
    model.get_object_importance(catboost.Pool(Xt, yt), catboost.Pool(X, y), update_method="AllPoints",
                                importance_values_sign="All", thread_count=-1)
    theirs = time.perf_counter() - t0
    t0 = time.perf_counter()
    BoostingInfluence(model, progress=False).fit(X, y).score_training_points(Xt, yt, aggregate="mean")
    ours = time.perf_counter() - t0
    return theirs, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 2,000")
    parser.add_argument("--trees", type=int, default=100)
    args = parser.parse_args()
    X, y = load_adult("train")
    Xt, yt = load_adult("test")
    Xn = X.select_dtypes("number").to_numpy(np.float64)
    Xtn = Xt.select_dtypes("number").to_numpy(np.float64)[:100]
    sizes = [500, 1000, 2000] if args.quick else [1000, 2000, 4000, 8000, 16000]
    one_size(300, 3, Xn, y, Xtn, yt[:100])  # compile / load the kernels
    print(f"| n ({args.trees} trees) | CatBoost get_object_importance | influence-gbdt fit + score | ratio |")
    print("|---|---|---|---|")
    rows = []
    for n in sizes:
        theirs, ours = one_size(n, args.trees, Xn, y, Xtn, yt[:100])
        rows.append((n, theirs, ours))
        print(f"| {n:,} | {theirs:.3f} s | {ours:.3f} s | {theirs / ours:.0f}x |", flush=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_arr, theirs_arr, ours_arr = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.loglog(n_arr, theirs_arr, "o-", label="CatBoost get_object_importance")
    ax.loglog(n_arr, ours_arr, "s-", label="influence-gbdt leaf_influence")
    ax.set_xlabel("training rows n")
    ax.set_ylabel("seconds (100 test points)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(DOCS / "peers_scaling.png", dpi=120)
    slopes = [np.polyfit(np.log(n_arr), np.log(t), 1)[0] for t in (theirs_arr, ours_arr)]
    print(f"\nlog-log slopes: CatBoost {slopes[0]:.2f}, influence-gbdt {slopes[1]:.2f}")


if __name__ == "__main__":
    main()
