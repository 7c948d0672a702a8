"""Issue 15's table: timings on the models users have (each library's scikit-learn defaults on
Adult's numeric columns) and on a synthetic 1e6-row x 20-feature, 100-tree case; prints Markdown.

Columns: booster training and our ``fit`` (describe + replay + self-check), each the best of three
on Adult (once in the other tables), one test point against every training row (best of three),
100 test points in one pass (and its ratio to one), ``leaf_refit`` per removed row (all_points),
and for the 1e6-row case the peak memory above the data (the subprocess's ``VmHWM``, reset once
the data is built, minus what it then holds; ours measured after the booster trained) and the
mean test loss over 10,000 rows.

Run: ``python benchmarks/speed.py [--quick] [--big-rows N] [--tables adult,multiclass,big,threads]
[--libraries lightgbm,xgboost,catboost]`` (or ``nox -s bench``). The ``threads`` table scores each
default on 1, 2, 4, ... threads up to the machine's cores. Compilation is
excluded (a warm-up on a small model first); the machine's load is not: run it on an idle machine
for figures to compare with the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from influence_gbdt import BoostingInfluence
from influence_gbdt.datasets import load_adult
from influence_gbdt.errors import InputError, UnsupportedModelError

LIBRARIES = ("lightgbm", "xgboost", "catboost")


def default_model(library: str, seed: int = 0, n_estimators: int | None = None) -> Any:
    """The library's scikit-learn classifier with its defaults (quiet; ``n_estimators`` only when
    given)."""
    extra = {} if n_estimators is None else {"n_estimators": n_estimators}
    if library == "lightgbm":
        import lightgbm

        return lightgbm.LGBMClassifier(verbose=-1, random_state=seed, **extra)
    if library == "xgboost":
        import xgboost

        return xgboost.XGBClassifier(random_state=seed, **extra)
    import catboost

    return catboost.CatBoostClassifier(verbose=0, random_seed=seed, **extra)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def adult(quick: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Adult's numeric columns (train, test); ``quick``: the first 3,000 training rows."""
    X, y = load_adult("train")
    Xt, yt = load_adult("test")
    Xn = X.select_dtypes("number").to_numpy(np.float64)
    Xtn = Xt.select_dtypes("number").to_numpy(np.float64)
    if quick:
        Xn, y = Xn[:3000], y[:3000]
    return Xn, y, Xtn[:100], yt[:100]


def adult_row(library: str, quick: bool, refit_rows: int) -> dict[str, float]:
    """One row of the table for ``library``'s defaults on Adult."""
    X, y, Xt, yt = adult(quick)
    model = default_model(library)
    # Training and fit each the best of three (the same model each time: fixed seeds), so that
    # neither pays a first run's costs (memory first touched, kernels loaded) the other does not.
    train_s = min(timed(lambda: model.fit(X, y))[0] for _ in range(3))
    bi = BoostingInfluence(model, progress=False)
    fit_s = min(timed(lambda: bi.fit(X, y))[0] for _ in range(3))
    # One and 100 test points each the best of several runs alike, so that their ratio compares
    # like with like: five (three for CatBoost's ~10 s batch); on a small virtual machine the
    # first calls after other work often run ~1.7x slower (measured: 0.11 s, then 0.063 s).
    reps = 3 if library == "catboost" else 5
    one_s = min(timed(lambda: bi.score_training_points(Xt[:1], yt[:1]))[0] for _ in range(reps))
    many_s = min(timed(lambda: bi.score_training_points(Xt, yt))[0] for _ in range(reps))
    refit = BoostingInfluence(model, method="leaf_refit", progress=False).fit(X, y)
    rows = np.arange(refit_rows)
    refit_s, _ = timed(lambda: refit.score_training_points(Xt[:1], yt[:1], training_points=rows))
    return {"train_s": train_s, "fit_s": fit_s, "one_s": one_s, "many_s": many_s,
            "refit_ms_per_row": 1e3 * refit_s / refit_rows}


def _memory_kb(field: str) -> int:
    """This process's ``VmRSS`` (resident now) or ``VmHWM`` (peak since the last reset) in KB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> int:
    """Reset this process's peak resident memory to what it holds now (Linux: ``clear_refs`` 5);
    return that, in KB. Not ``ru_maxrss``: a process inherits it across fork and exec, so a case
    started by a large parent would report the parent's peak."""
    Path("/proc/self/clear_refs").write_text("5")
    return _memory_kb("VmRSS")


def _big_case(library: str, n: int, n_test: int) -> dict[str, float]:
    """The 1e6-row case, run in a fresh process (its peak memory is this case's alone)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n + n_test, 20))
    y = (X[:, :5].sum(axis=1) + rng.normal(size=n + n_test) > 0).astype(np.int64)
    model = default_model(library, n_estimators=100)
    base_kb = _reset_peak()
    train_s, _ = timed(lambda: model.fit(X[:n], y[:n]))
    booster_kb = _memory_kb("VmHWM") - base_kb
    base_kb = _reset_peak()
    bi = BoostingInfluence(model, progress=False)
    fit_s, _ = timed(lambda: bi.fit(X[:n], y[:n]))
    mean_s, _ = timed(lambda: bi.score_training_points(X[n:], y[n:], aggregate="mean"))
    ours_kb = _memory_kb("VmHWM") - base_kb
    return {"train_s": train_s, "fit_s": fit_s, "mean_loss_s": mean_s,
            "peak_above_data_gb": ours_kb / 2**20, "booster_peak_above_data_gb": booster_kb / 2**20}


def big_row(library: str, n: int, n_test: int) -> dict[str, float]:
    code = (f"import json, benchmarks.speed as s; "
            f"print(json.dumps(s._big_case({library!r}, {n}, {n_test})))")
    # -P: not the working directory first on sys.path, so that the package comes from PYTHONPATH
    # where it is set (benchmarks/side_by_side.py's versions); this checkout's benchmarks after it.
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), root) if p)
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True,
                          cwd=root, env={**os.environ, "PYTHONPATH": path})
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def covertype_like(n: int, n_test: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """A 10-class set shaped like covertype: 10 continuous columns and 44 one-hot indicator columns
    (4 "wilderness areas", 40 "soil types"); classes from the argmax of noisy linear scores."""
    rng = np.random.default_rng(seed)
    m = n + n_test
    cont = rng.normal(size=(m, 10))
    wild = np.eye(4)[rng.integers(0, 4, m)]
    soil = np.eye(40)[rng.integers(0, 40, m)]
    X = np.hstack([cont, wild, soil])
    scores = X @ rng.normal(size=(54, 10)) + rng.gumbel(size=(m, 10))
    y = scores.argmax(axis=1)
    return X[:n], y[:n], X[n:], y[n:]


def multiclass_row(library: str, n: int) -> dict[str, Any]:
    """Issue 13's row: the library's default classifier on the 10-class set, all rows vs one test
    point (and 100 in one pass); a refusal is reported, not hidden."""
    X, y, Xt, yt = covertype_like(n, 100)
    model = default_model(library)
    train_s, _ = timed(lambda: model.fit(X, y))
    bi = BoostingInfluence(model, progress=False)
    try:
        fit_s, _ = timed(lambda: bi.fit(X, y))
    except (UnsupportedModelError, InputError) as err:  # the table shows what is refused (memory too)
        return {"train_s": train_s, "refused": f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"}
    one_s = min(timed(lambda: bi.score_training_points(Xt[:1], yt[:1]))[0] for _ in range(3))
    many_s, _ = timed(lambda: bi.score_training_points(Xt, yt))
    return {"train_s": train_s, "fit_s": fit_s, "one_s": one_s, "many_s": many_s,
            "trees": bi.engine_.ensemble.n_trees}


def thread_rows(library: str, quick: bool) -> dict[int, dict[str, float]]:
    """``library``'s default on Adult scored on 1, 2, 4, ... threads up to the machine's cores
    (``BoostingInfluence(n_threads=k)``; the same fitted model, best of repeats)."""
    from engine import thread_counts  # benchmarks/engine.py

    X, y, Xt, yt = adult(quick)
    model = default_model(library).fit(X, y)
    bi = BoostingInfluence(model, progress=False).fit(X, y)
    out = {}
    for k in thread_counts():
        bi.set_params(n_threads=k)
        out[k] = {"one_s": min(timed(lambda: bi.score_training_points(Xt[:1], yt[:1]))[0] for _ in range(5)),
                  "many_s": min(timed(lambda: bi.score_training_points(Xt, yt))[0] for _ in range(2)),
                  "mean_s": min(timed(lambda: bi.score_training_points(Xt, yt, aggregate="mean"))[0]
                                for _ in range(5))}
    return out


def warm_up() -> None:
    """Compile (or load from the cache) every kernel the table uses, on a tiny model."""
    X, y, Xt, yt = adult(True)
    for library in LIBRARIES:
        model = default_model(library, n_estimators=3).fit(X[:300], y[:300])
        for method in ("leaf_influence", "leaf_refit"):
            bi = BoostingInfluence(model, method=method, progress=False).fit(X[:300], y[:300])
            bi.score_training_points(Xt[:2], yt[:2], training_points=[0])
    Xm, ym, Xmt, ymt = covertype_like(600, 2)
    for library in LIBRARIES:
        model = default_model(library, n_estimators=3).fit(Xm, ym)
        try:
            BoostingInfluence(model, progress=False).fit(Xm, ym).score_training_points(Xmt, ymt)
        except UnsupportedModelError:  # a refused default shows in its own row
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3,000 Adult rows, 20,000-row big case")
    parser.add_argument("--big-rows", type=int, default=1_000_000)
    parser.add_argument("--refit-rows", type=int, default=10)
    parser.add_argument("--multiclass-rows", type=int, default=50_000)
    parser.add_argument("--tables", default="adult,multiclass,big,threads",
                        help="comma-separated tables to print (default: all)")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated (default: all)")
    args = parser.parse_args()
    big = 20_000 if args.quick else args.big_rows
    tables = args.tables.split(",")
    libraries = [library for library in LIBRARIES if library in args.libraries.split(",")]
    warm_up()
    if "adult" in tables:
        adult_table(libraries, args.quick, args.refit_rows)
    if "multiclass" in tables:
        multiclass_table(libraries, 5_000 if args.quick else args.multiclass_rows)
    if "big" in tables:
        big_table(libraries, big)
    if "threads" in tables:
        threads_table(libraries, args.quick)


def threads_table(libraries: list[str], quick: bool) -> None:
    print("\n| default on Adult | threads | 1 test point | 100 test points | mean loss of 100 |")
    print("|---|---:|---:|---:|---:|")
    for library in libraries:
        rows = thread_rows(library, quick)
        for k, r in rows.items():
            cells = [f"{r[c]:.4f} s ({rows[1][c] / r[c]:.2f}x)" for c in ("one_s", "many_s", "mean_s")]
            print(f"| {library} | {k} | " + " | ".join(cells) + " |", flush=True)


def adult_table(libraries: list[str], quick: bool, refit_rows: int) -> None:
    print("| model | booster training | our fit | 1 test point | 100 test points (x one) | "
          "leaf_refit per row |")
    print("|---|---|---|---|---|---|")
    for library in libraries:
        r = adult_row(library, quick, refit_rows)
        print(f"| {library} default | {r['train_s']:.3f} s | {r['fit_s']:.3f} s | {r['one_s']:.4f} s | "
              f"{r['many_s']:.3f} s ({r['many_s'] / r['one_s']:.1f}x) | {r['refit_ms_per_row']:.0f} ms |",
              flush=True)


def multiclass_table(libraries: list[str], n_mc: int) -> None:
    print("\n| 10 classes, covertype-like (54 features) | rows | trees | booster training | our fit | "
          "1 test point | 100 test points (x one) |")
    print("|---|---|---|---|---|---|---|")
    # CatBoost's default grows 1000 trees x 10 classes: at 50,000 rows its leaf indices exceed the
    # default max_memory (4 GB), so it is also measured on a fifth of the rows.
    runs = [(library, n_mc) for library in libraries] + [("catboost", n_mc // 5)] * ("catboost" in libraries)
    for library, n in runs:
        r = multiclass_row(library, n)
        if "refused" in r:
            print(f"| {library} default | {n:,} | - | {r['train_s']:.1f} s | refused: {r['refused']} | | |",
                  flush=True)
            continue
        print(f"| {library} default | {n:,} | {r['trees']} | {r['train_s']:.1f} s | {r['fit_s']:.1f} s | "
              f"{r['one_s']:.3f} s | {r['many_s']:.3f} s ({r['many_s'] / r['one_s']:.1f}x) |", flush=True)


def big_table(libraries: list[str], big: int) -> None:
    print(f"\n| {big:,} rows x 20 features, 100 trees | booster training | our fit | "
          "peak memory above data (ours / booster's) | mean test loss, 10,000 rows |")
    print("|---|---|---|---|---|")
    for library in libraries:
        r = big_row(library, big, 10_000)
        print(f"| {library} | {r['train_s']:.1f} s | {r['fit_s']:.1f} s | "
              f"{r['peak_above_data_gb']:.2f} / {r['booster_peak_above_data_gb']:.2f} GB | "
              f"{r['mean_loss_s']:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
