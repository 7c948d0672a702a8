"""Engine timings on a synthetic ensemble of the paper's Adult size; prints a Markdown table.

n = 32,561 training rows, 100 trees of 64 leaves (depth 6), binary log loss, Newton leaves.
Run: ``python benchmarks/engine.py`` (or ``nox -s bench``). Numba compilation is excluded by a
warm-up call on a tiny problem. Targets on a 2-core machine (issue 2): one test point <= 0.03 s,
100 test points <= 1 s, mean test loss <= 0.05 s, leaf_refit <= 20 ms per removed row.
A second table runs the same operations on 1, 2, 4, ... threads up to the machine's cores, each
row printed as it is measured (issue 27's many-core table: ``--n 300000 --scaling-only``, with
``--threads 1,4,16`` to choose the counts and ``--refit-rows`` the rows LeafRefit deletes).
``--ceiling`` adds the machine's own scaling on the same team of threads: a loop of independent
exponentials and divisions on data each thread keeps in its cache (no memory traffic), the same
in the sweep's rounds and barriers, and a plain read of 1.6 GB; what the engine's speed-ups are to
be compared with. ``--busy K`` runs K busy processes beside the scaling table (a machine running
more threads than it has cores: what the team's barrier must not make slower than one thread).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numba
import numpy as np

from influence_gbdt.engine import InfluenceEngine, TestPoints, team
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


@contextlib.contextmanager
def busy(k: int) -> Iterator[None]:
    """``k`` processes that keep a core busy each, for as long as the block runs."""
    if k:
        print(f"\n({k} busy process{'es' if k > 1 else ''} beside this table)")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32_561)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--leaves", type=int, default=64)
    parser.add_argument("--threads", default=None,
                        help="thread counts of the scaling table, e.g. 1,4,16 (default: 1, 2, 4 ... cores)")
    parser.add_argument("--scaling-only", action="store_true",
                        help="print only the thread-scaling table (what a many-core machine is lent for)")
    parser.add_argument("--refit-rows", type=int, default=64,
                        help="rows removed by the scaling table's leaf_refit (default 64)")
    parser.add_argument("--ceiling", action="store_true",
                        help="also print the machine's own scaling (arithmetic alone, a plain read)")
    parser.add_argument("--busy", type=int, default=0,
                        help="busy processes to run beside the scaling table (default 0)")
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
    counts = [int(k) for k in args.threads.split(",")] if args.threads else thread_counts()
    refit_rows = np.arange(0, args.n, max(1, args.n // args.refit_rows))[: args.refit_rows]
    if args.scaling_only:
        with busy(args.busy):
            thread_scaling(engine.ensemble, sub, refit_rows, counts, setup)
        if args.ceiling:
            machine_ceiling(counts)
        return
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
    with busy(args.busy):
        thread_scaling(engine.ensemble, sub, refit_rows, counts, setup)
    if args.ceiling:
        machine_ceiling(counts)


def thread_counts() -> list[int]:
    """1, 2, 4, ... up to this machine's cores, and the core count itself."""
    cores = os.cpu_count() or 1
    return sorted({1 << i for i in range(cores.bit_length()) if 1 << i <= cores} | {cores})


def thread_scaling(ensemble: TreeEnsemble, sub, rows: np.ndarray, counts: list[int], setup: float) -> None:
    """The same engine's operations on each of ``counts`` threads, in one run (best of repeats;
    the replay is the best of two constructions; LeafRefit per row over ``rows``, split over the
    threads, and of one row alone, on a team of them). Each row is printed as soon as it is
    measured."""
    columns = ("replay (fit)", "1 test point", "100 test points", "mean loss of 1,000", "leaf_refit per row",
               "leaf_refit of one row")
    print(f"\nn = {ensemble.n_rows}, {ensemble.n_trees} trees, {os.cpu_count()} CPUs; setup {setup:.3g} s")
    print("\nThreads (`InfluenceEngine(..., n_threads=k)`; seconds, and the speed-up over the first row):\n")
    print("| threads | " + " | ".join(columns) + " |")
    print("|---:|" + "---:|" * len(columns), flush=True)
    table: dict[int, tuple[float, ...]] = {}
    for k in counts:
        replay = np.inf
        for _ in range(2):
            engine = None  # the last engine's memory is freed first, as a new fit would find it
            t0 = time.perf_counter()
            engine = InfluenceEngine(ensemble, n_threads=k)
            replay = min(replay, time.perf_counter() - t0)
        table[k] = (replay, timed(lambda e=engine: e.influence_reverse(sub(1)), 5),
                    timed(lambda e=engine: e.influence_reverse(sub(100)), 2),
                    timed(lambda e=engine: e.influence_reverse(sub(1000), aggregate="mean"), 5),
                    timed(lambda e=engine: e.leaf_refit(sub(100), rows=rows), 1) / rows.size,
                    timed(lambda e=engine: e.leaf_refit(sub(100), rows=rows[:1]), 2))
        first = table[counts[0]]
        cells = [f"{t:.4g} ({first[i] / t:.2f}x)" for i, t in enumerate(table[k])]
        print(f"| {k} | " + " | ".join(cells) + " |", flush=True)


@numba.njit(nogil=True, inline="always")
def _row_arithmetic(v: float) -> float:
    """One row's arithmetic in the ceiling's loops: an exponential and two divisions, as a
    log-loss row of the engine takes them."""
    e = np.exp(v)
    return e / (1.0 + e) + 1.0 / (1.0 + e)


@numba.njit(nogil=True)
def _arithmetic(tid: int, n_team: int, bar: np.ndarray, x: np.ndarray, passes: int, out: np.ndarray) -> None:
    """``passes`` passes over ``x`` (4,096 rows: 32 KB, in the L1 cache), shared out over the team:
    per row an exponential and two divisions, independent between rows (as the engine's log-loss
    rows are). ``out[tid]`` keeps the sum so the work is not optimized away."""
    s = 0.0
    for _ in range(tid * passes // n_team, (tid + 1) * passes // n_team):
        for v in x:
            s += _row_arithmetic(v)
    out[tid] = s


@numba.njit(nogil=True)
def _arithmetic_rounds(
    tid: int, n_team: int, bar: np.ndarray, x: np.ndarray, rounds: int, passes: int, out: np.ndarray
) -> None:
    """The same arithmetic as :func:`_arithmetic` in ``rounds`` rounds of ``passes`` passes over
    ``x``, each thread its contiguous share of ``x`` and two barriers a round: the sweep's shape
    (:mod:`influence_gbdt.engine.reverse1`) without its memory traffic or its one thread's leaf
    level."""
    j0, j1 = tid * x.size // n_team, (tid + 1) * x.size // n_team
    s = 0.0
    for _ in range(rounds):
        for _ in range(passes):
            for j in range(j0, j1):
                s += _row_arithmetic(x[j])
        team.barrier(bar, n_team)
        team.barrier(bar, n_team)
    out[tid] = s


@numba.njit(nogil=True)
def _plain_read(tid: int, n_team: int, bar: np.ndarray, big: np.ndarray, out: np.ndarray) -> None:
    """Sum this thread's contiguous share of ``big`` (four sums side by side, so the read bounds it)."""
    n = big.size
    j0, j1 = tid * n // n_team, (tid + 1) * n // n_team
    s0 = s1 = s2 = s3 = 0.0
    j = j0
    while j + 4 <= j1:
        s0 += big[j]
        s1 += big[j + 1]
        s2 += big[j + 2]
        s3 += big[j + 3]
        j += 4
    while j < j1:
        s0 += big[j]
        j += 1
    out[tid] = s0 + s1 + s2 + s3


def machine_ceiling(counts: list[int]) -> None:
    """The machine's own speed-ups on the engine's team of threads (:func:`team.run`): arithmetic
    alone, the same in the sweep's rounds (100 rounds of ~300,000 rows, two barriers each), and a
    plain read of memory; each the best of 5, printed per thread count."""
    x = np.linspace(-4.0, 4.0, 4096)
    x_rounds = np.linspace(-4.0, 4.0, 65_536)  # 512 KB, in each core's L2 cache; x 5 passes a round
    big = np.ones(200_000_000)  # 1.6 GB, far beyond any cache
    out = np.zeros(max(counts))
    passes = 20_000  # 82 million rows: ~0.5 s on one thread
    team.run(_arithmetic, 1, x, 2, out)
    team.run(_arithmetic_rounds, 1, x_rounds[:64], 1, 1, out)
    team.run(_plain_read, 1, big[:64], out)
    print("\nThe machine's own scaling on the same team (best of 5; the speed-up over the first row):\n")
    print("| threads | arithmetic alone (ns per row, all threads together) | the same in rounds (s) "
          "| plain read (GB/s) |")
    print("|---:|---:|---:|---:|", flush=True)
    first: tuple[float, ...] | None = None
    for k in counts:
        t_math = timed(lambda k=k: team.run(_arithmetic, k, x, passes, out), 5)
        t_rounds = timed(lambda k=k: team.run(_arithmetic_rounds, k, x_rounds, 100, 5, out), 5)
        t_read = timed(lambda k=k: team.run(_plain_read, k, big, out), 5)
        first = first or (t_math, t_rounds, t_read)
        print(f"| {k} | {t_math / (passes * x.size) * 1e9:.3g} ({first[0] / t_math:.2f}x) "
              f"| {t_rounds:.4g} ({first[1] / t_rounds:.2f}x) "
              f"| {big.nbytes / t_read / 1e9:.3g} ({first[2] / t_read:.2f}x) |", flush=True)


if __name__ == "__main__":
    main()
