"""Engine timings on a synthetic ensemble of the paper's Adult size; prints a Markdown table.

n = 32,561 training rows, 100 trees of 64 leaves (depth 6), binary log loss, Newton leaves.
Run: ``python benchmarks/engine.py`` (or ``nox -s bench``). Numba compilation is excluded by a
warm-up call on a tiny problem. Targets on a 2-core machine (issue 2): one test point <= 0.03 s,
100 test points <= 1 s, mean test loss <= 0.05 s, leaf_refit <= 20 ms per removed row.
A second table runs the same operations on 1, 2, 4, ... threads up to the machine's cores (issue
27's many-core table: ``--n 300000``).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from influence_gbdt.engine import InfluenceEngine, TestPoints
from influence_gbdt.ensemble import TreeEnsemble


def synthetic(
    n: int, n_trees: int, n_leaves: int, m: int, seed: int = 0
) -> tuple[InfluenceEngine, TestPoints]:
    """A random-structure ensemble whose stored leaves are its own replay (residual 0)."""
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, n_leaves, (n_trees, n))
    y = (rng.random(n) < 0.24).astype(float)
    draft = TreeEnsemble.build(
        leaf_index=leaf,
        leaf_values=np.zeros(n_trees * n_leaves),
        n_leaves=np.full(n_trees, n_leaves),
        y=y,
        loss="logloss",
        learning_rate=0.2,
        l2=3.0,
        base_margin=-1.15,
        base_rule="mean",
    )
    values = InfluenceEngine(draft).leaf_values
    ens = TreeEnsemble.build(
        leaf_index=leaf,
        leaf_values=values,
        n_leaves=draft.n_leaves,
        y=y,
        loss="logloss",
        learning_rate=0.2,
        l2=3.0,
        base_margin=-1.15,
        base_rule="mean",
    )
    test = TestPoints(rng.integers(0, n_leaves, (n_trees, m)), None, (rng.random(m) < 0.24).astype(float))
    return InfluenceEngine(ens), test


def timed(fn, repeat: int = 3) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32_561)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--leaves", type=int, default=64)
    args = parser.parse_args()

    warm, warm_test = synthetic(200, 3, 4, 5)
    warm.influence_reverse(warm_test)
    warm.influence_reverse(warm_test, aggregate="mean")
    warm.influence_forward(warm_test, rows=[0, 1])
    warm.leaf_refit(warm_test, rows=[0, 1])
    warm.leaf_refit(warm_test, rows=[0, 1], update_set="top_k_leaves", k=2)
    warm.influence_forward(warm_test, rows=[0, 1], update_set="single_point")

    t0 = time.perf_counter()
    engine, test = synthetic(args.n, args.trees, args.leaves, 1000)
    setup = time.perf_counter() - t0

    def sub(m: int) -> TestPoints:
        return TestPoints(np.asarray(test.leaf_index)[:, :m], None, np.asarray(test.y)[:m])

    rows = np.arange(0, args.n, args.n // 64)[:64]
    rows16 = rows[:16]
    results = [
        ("replay + caches (once per model)", "s", setup, ""),
        (
            "exact influence, all rows, 1 test point",
            "s",
            timed(lambda: engine.influence_reverse(sub(1))),
            "<= 0.03",
        ),
        (
            "exact influence, all rows, 100 test points",
            "s",
            timed(lambda: engine.influence_reverse(sub(100)), 1),
            "<= 1",
        ),
        (
            "exact influence, all rows, 1,000 test points",
            "s",
            timed(lambda: engine.influence_reverse(sub(1000)), 1),
            "",
        ),
        (
            "exact influence, all rows, mean loss of 1,000 points",
            "s",
            timed(lambda: engine.influence_reverse(sub(1000), aggregate="mean")),
            "<= 0.05",
        ),
        (
            "forward mode all_points (paper Alg. 4)",
            "s / row",
            timed(lambda: engine.influence_forward(sub(100), rows=rows16), 1) / rows16.size,
            "",
        ),
        (
            "forward mode top_k_leaves k=8",
            "s / row",
            timed(lambda: engine.influence_forward(sub(100), rows=rows16, update_set="top_k_leaves", k=8), 1)
            / rows16.size,
            "",
        ),
        (
            "forward mode single_point",
            "s / row",
            timed(lambda: engine.influence_forward(sub(100), rows=rows, update_set="single_point"), 1)
            / rows.size,
            "",
        ),
        (
            "leaf_refit all_points, batched",
            "s / row",
            timed(lambda: engine.leaf_refit(sub(100), rows=rows), 1) / rows.size,
            "<= 0.02",
        ),
        (
            "leaf_refit top_k_leaves k=8",
            "s / row",
            timed(lambda: engine.leaf_refit(sub(100), rows=rows16, update_set="top_k_leaves", k=8), 1)
            / rows16.size,
            "",
        ),
        (
            "leaf_refit single_point",
            "s / row",
            timed(lambda: engine.leaf_refit(sub(100), rows=rows, update_set="single_point"), 1) / rows.size,
            "",
        ),
    ]
    print(f"n = {args.n}, {args.trees} trees x {args.leaves} leaves, logloss Newton, {os.cpu_count()} CPUs\n")
    print("| operation | seconds | unit | target |")
    print("|---|---:|---|---|")
    for name, unit, sec, target in results:
        print(f"| {name} | {sec:.4g} | {unit} | {target} |")
    thread_scaling(engine.ensemble, sub, rows)


def thread_counts() -> list[int]:
    """1, 2, 4, ... up to this machine's cores, and the core count itself."""
    cores = os.cpu_count() or 1
    return sorted({1 << i for i in range(cores.bit_length()) if 1 << i <= cores} | {cores})


def thread_scaling(ensemble: TreeEnsemble, sub, rows: np.ndarray) -> None:
    """The same engine's operations on 1, 2, 4, ... threads, in one run (best of repeats)."""
    columns = ("replay (fit)", "1 test point", "100 test points", "mean loss of 1,000", "leaf_refit per row")
    table = {}
    for k in thread_counts():
        t0 = time.perf_counter()
        engine = InfluenceEngine(ensemble, n_threads=k)
        replay = time.perf_counter() - t0
        table[k] = (replay, timed(lambda e=engine: e.influence_reverse(sub(1)), 5),
                    timed(lambda e=engine: e.influence_reverse(sub(100)), 2),
                    timed(lambda e=engine: e.influence_reverse(sub(1000), aggregate="mean"), 5),
                    timed(lambda e=engine: e.leaf_refit(sub(100), rows=rows), 1) / rows.size)
    print("\nThreads (`InfluenceEngine(..., n_threads=k)`; seconds, and the speed-up over 1 thread):\n")
    print("| threads | " + " | ".join(columns) + " |")
    print("|---:|" + "---:|" * len(columns))
    for k, times in table.items():
        cells = [f"{t:.4g} ({table[1][i] / t:.2f}x)" for i, t in enumerate(times)]
        print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
