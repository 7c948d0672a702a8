"""Cold first use: ``fit`` + one ``score_training_points`` in a fresh process with an empty kernel cache.

For each case (a model as users have it, at the library's defaults, trained once here on the first
``--rows`` rows of UCI Adult (2,000 by default: small enough that what is measured is the start-up,
not the scoring; ``--rows 32561`` for all of them) and pickled) a new Python
process with an empty ``NUMBA_CACHE_DIR`` imports influence_gbdt, wraps the unpickled model, fits
on the training rows and scores one test row; its wall and CPU seconds (import, fit and score; not
unpickling the model) are reported, with the number of the package's kernels it compiled. Each case
runs with the precompiled kernels a wheel carries (when this environment's influence_gbdt has them:
``pip install .``, ``nox -s coldstart``) and without them (``INFLUENCE_GBDT_PRECOMPILED=0``: what a
user whose numba or Python differs from the wheel's gets), then warm (the same cache again). The
functions that took longest to compile, over the runs without precompiled kernels, close the report.

Run: ``python benchmarks/coldstart.py`` (or ``nox -s coldstart``, which installs the package as a
wheel first); ``--cases lightgbm,xgboost`` picks cases.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from typing import Any

import numpy as np

CASES = {
    "lightgbm": "LGBMClassifier()",
    "xgboost": "XGBClassifier()",
    "catboost": "CatBoostClassifier()",
    "catboost_ctr": "CatBoostClassifier(cat_features=...)",
}
DEFAULT_CASES = ["lightgbm", "xgboost", "catboost"]


def _adult(categorical: bool, rows: int) -> tuple[Any, np.ndarray, Any, np.ndarray]:
    """Adult's first ``rows`` training rows and its test rows; the categorical columns as integer
    codes unless ``categorical`` (then strings, for CatBoost's cat_features)."""
    from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult

    X, y = load_adult("train")
    X, y = X.iloc[:rows].copy(), y[:rows]
    X_test, y_test = load_adult("test")
    if not categorical:
        for col in ADULT_CATEGORICAL:
            codes = {v: float(i) for i, v in enumerate(sorted(set(X[col]) | set(X_test[col])))}
            X[col], X_test[col] = X[col].map(codes), X_test[col].map(codes)
    return X, y, X_test, y_test


def _train(case: str, folder: str, rows: int) -> str:
    """Train ``case`` at its defaults on Adult, pickle (model, data) into ``folder``; the path."""
    X, y, X_test, y_test = _adult(case == "catboost_ctr", rows)
    if case == "lightgbm":
        from lightgbm import LGBMClassifier

        model: Any = LGBMClassifier(verbose=-1).fit(X, y)
    elif case == "xgboost":
        from xgboost import XGBClassifier

        model = XGBClassifier().fit(X, y)
    else:
        from catboost import CatBoostClassifier

        from influence_gbdt.datasets import ADULT_CATEGORICAL

        cats = list(ADULT_CATEGORICAL) if case == "catboost_ctr" else None
        model = CatBoostClassifier(verbose=0, cat_features=cats).fit(X, y)
    path = os.path.join(folder, f"{case}.pkl")
    with open(path, "wb") as fh:
        pickle.dump((model, X, y, X_test.iloc[:1], y_test[:1]), fh)
    return path


def _child(path: str) -> None:
    """The measured first use (runs in its own process); prints one JSON line."""
    import numba.core.event as event

    compiled: defaultdict[str, float] = defaultdict(float)
    signatures = Counter[str]()
    starts: list[float] = []

    class Profile(event.Listener):
        """Compile seconds per kernel of the package, excluding the kernels compiled inside it."""

        def on_start(self, e: Any) -> None:
            starts.append(time.perf_counter())

        def on_end(self, e: Any) -> None:
            spent = time.perf_counter() - starts.pop()
            func = e.data["dispatcher"].py_func
            name = f"{func.__module__}.{func.__qualname__}"
            compiled[name] += spent
            signatures[name] += 1
            if starts:  # the caller's time excludes this callee's
                starts[-1] += spent

    event.register("numba:compile", Profile())
    with open(path, "rb") as fh:
        model, X, y, X_test, y_test = pickle.load(fh)
    wall, cpu = time.perf_counter(), time.process_time()
    from influence_gbdt import BoostingInfluence, _jit

    BoostingInfluence(model, progress=False).fit(X, y).score_training_points(X_test, y_test)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    ours = {k: v for k, v in compiled.items() if k.startswith("influence_gbdt")}
    print(json.dumps({"wall": wall, "cpu": cpu, "precompiled": _jit.SHIPPED_DIR is not None,
                      "compiled": ours, "signatures": sum(signatures[k] for k in ours)}))


def _first_use(path: str, cache: str, precompiled: bool) -> dict[str, Any]:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "INFLUENCE_GBDT_QUIET": "1"}
    if not precompiled:
        env["INFLUENCE_GBDT_PRECOMPILED"] = "0"
    out = subprocess.run([sys.executable, __file__, "--child", path], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                        help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--rows", type=int, default=2000, help="training rows of Adult (default 2000)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return
    from influence_gbdt import _jit

    shipped = _jit.SHIPPED_MAGIC is not None
    where = (f"{_jit.SHIPPED_DIR} (compiled for {_jit.SHIPPED_MAGIC[1]} CPUs)" if _jit.SHIPPED_MAGIC
             else f"not used: {_jit.NOT_SHIPPED}")
    print(f"numba {_jit._numba.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{args.rows} training rows of Adult; precompiled kernels: {where}\n")
    rows: list[tuple[str, str, float, float, int, float]] = []
    slowest: defaultdict[str, float] = defaultdict(float)  # compile seconds per kernel
    with tempfile.TemporaryDirectory() as folder:
        for case in args.cases.split(","):
            started = time.perf_counter()
            path = _train(case, folder, args.rows)
            print(f"trained {CASES[case]} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            for precompiled in ([True] if shipped else []) + [False]:
                cache = tempfile.mkdtemp(dir=folder)
                cold = _first_use(path, cache, precompiled)
                warm = _first_use(path, cache, precompiled)
                if not precompiled:
                    for name, seconds in cold["compiled"].items():
                        slowest[name] += seconds
                rows.append((CASES[case], "yes" if precompiled else "no", cold["wall"], cold["cpu"],
                             cold["signatures"], warm["wall"]))
    print("| model | precompiled | cold wall s | cold CPU s | kernels compiled | warm wall s |")
    print("|---|---|---:|---:|---:|---:|")
    for model, pre, wall, cpu, n, warm_wall in rows:
        print(f"| `{model}` | {pre} | {wall:.1f} | {cpu:.1f} | {n} | {warm_wall:.1f} |")
    print("\nLongest compiles without precompiled kernels (seconds, summed over the cases; a kernel's "
          "own time, not its callees'):\n")
    print("| kernel | compile s |")
    print("|---|---:|")
    for name, seconds in sorted(slowest.items(), key=lambda item: -item[1])[:10]:
        print(f"| `{name}` | {seconds:.2f} |")


if __name__ == "__main__":
    main()
