"""Save, or compare bit for bit, every score the engine computes on fixed models.

Refactors of the engine must change no score by a single bit. Before moving engine code::

    python benchmarks/engine_snapshot.py save before.npz

and after it::

    python benchmarks/engine_snapshot.py compare before.npz

``compare`` recomputes everything and reports each array that differs in any bit (NaNs compared by
position), then exits with status 1 if any does. Two families of cases:

- the engine's reference configurations (``tests/test_engine.py``'s ``CONFIGS``: every leaf rule,
  loss, base rule and class-factor rule), run through :class:`~influence_gbdt.engine.InfluenceEngine`
  with every method, update set, mode (forward and reverse), objective and aggregate, and with 1 and
  2 threads;
- real models of each library, as the adapters' tests train them (defaults, objectives,
  multiclass, class weights, backtracking, CTR categoricals, multi-target, weights, init scores),
  scored through :class:`~influence_gbdt.BoostingInfluence`.

The models are trained here (deterministic settings), so a snapshot is only comparable on the same
machine with the same booster versions: save and compare in one environment.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the engine's reference configurations

from engine_reference import random_spec  # noqa: E402
from test_engine import CONFIGS  # noqa: E402

from influence_gbdt import BoostingInfluence  # noqa: E402
from influence_gbdt.engine import InfluenceEngine, TestPoints  # noqa: E402

Results = dict[str, np.ndarray]


def _engine_cases() -> Iterator[tuple[str, np.ndarray]]:
    """Every result of the engine on the reference configurations."""
    rows = np.arange(0, 60, 7)
    for name in CONFIGS:
        spec = random_spec(3, **CONFIGS[name])
        K = spec.ensemble().n_outputs
        for threads in (1, 2):
            eng = InfluenceEngine(spec.ensemble(), n_threads=threads)
            tag = f"engine/{name}/t{threads}"
            yield f"{tag}/leaf_values", eng.leaf_values
            yield f"{tag}/train_margin", np.asarray(eng.train_margin)
            yield f"{tag}/n_steps", eng.n_steps.astype(np.float64)
            yield f"{tag}/step_scales", eng.step_scales
            test = TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
            yield f"{tag}/predict", eng.predict_margin(test)
            outputs = [None] if K == 1 else [0, K - 1]
            for update_set, k in (("all_points", None), ("single_point", None), ("top_k_leaves", 2)):
                values, base = eng.refit_leaf_values(rows, update_set, k)
                yield f"{tag}/refit_values/{update_set}", values
                yield f"{tag}/refit_base/{update_set}", np.asarray(base)
                d_values, d_base = eng.leaf_value_derivatives(rows, update_set, k)
                yield f"{tag}/derivatives/{update_set}", d_values
                yield f"{tag}/d_base/{update_set}", np.asarray(d_base)
                for on, output in [("loss", None)] + [("prediction", o) for o in outputs]:
                    for aggregate in (None, "mean"):
                        common = dict(rows=rows, update_set=update_set, k=k, on=on, aggregate=aggregate,
                                      output=output)
                        key = f"{update_set}/{on}{output}/{aggregate}"
                        yield f"{tag}/leaf_refit/{key}", eng.leaf_refit(test, **common)
                        yield f"{tag}/forward/{key}", eng.influence_forward(test, **common)
            for aggregate in (None, "mean", "sum"):
                yield f"{tag}/reverse/{aggregate}", eng.influence_reverse(test, aggregate=aggregate)
            yield f"{tag}/reverse/fixed_base", eng.influence_reverse(test, refit_base=False)


def _data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + 30, 5))
    lin = X[:, 0] + 0.5 * X[:, 1] * X[:, 2]
    binary = (lin + rng.normal(scale=0.7, size=n + 30) > 0).astype(int)
    classes = np.digitize(lin + rng.normal(scale=0.5, size=n + 30), [-0.5, 0.5])
    target = lin + rng.normal(scale=0.3, size=n + 30)
    w = rng.uniform(0.5, 2.0, n + 30)
    return X[:n], X[n:], binary[:n], binary[n:], classes[:n], classes[n:], target[:n], target[n:], w[:n]


def _models() -> Iterator[tuple[str, Any, Any, Any, Any, Any, dict[str, Any]]]:
    """(name, model, X, y, X_test, y_test, fit kwargs) of each adapter's kinds of models."""
    import catboost as cb
    import lightgbm as lgb
    import pandas as pd
    import xgboost as xgb

    X, Xt, yb, ybt, yc, yct, yr, yrt, w = _data()
    cbk = dict(verbose=0, thread_count=2, allow_writing_files=False, random_seed=0)
    yield "xgb/classifier", xgb.XGBClassifier(n_estimators=20).fit(X, yb), X, yb, Xt, ybt, {}
    yield "xgb/weighted", xgb.XGBClassifier(n_estimators=15).fit(X, yb, sample_weight=w), X, yb, Xt, ybt, \
        {"sample_weight": w}
    yield "xgb/regressor", xgb.XGBRegressor(n_estimators=15).fit(X, yr), X, yr, Xt, yrt, {}
    yield "xgb/multiclass", xgb.XGBClassifier(n_estimators=10).fit(X, yc), X, yc, Xt, yct, {}
    yield "xgb/poisson", xgb.XGBRegressor(n_estimators=10, objective="count:poisson").fit(
        X, np.round(np.exp(yr / 2))), X, np.round(np.exp(yr / 2)), Xt, np.round(np.exp(yrt / 2)), {}
    yield "xgb/l1", xgb.XGBRegressor(n_estimators=8, objective="reg:absoluteerror").fit(X, yr), X, yr, Xt, \
        yrt, {}
    Y = np.c_[yr, yr ** 2]
    yield "xgb/multi_target", xgb.XGBRegressor(n_estimators=6, multi_strategy="one_output_per_tree").fit(
        X, Y), X, Y, Xt, np.c_[yrt, yrt ** 2], {}
    yield "lgb/classifier", lgb.LGBMClassifier(n_estimators=20, verbose=-1).fit(X, yb), X, yb, Xt, ybt, {}
    yield "lgb/balanced", lgb.LGBMClassifier(n_estimators=10, verbose=-1, class_weight="balanced").fit(
        X, yb, sample_weight=w), X, yb, Xt, ybt, {"sample_weight": w}
    yield "lgb/regressor", lgb.LGBMRegressor(n_estimators=15, verbose=-1).fit(X, yr), X, yr, Xt, yrt, {}
    yield "lgb/multiclass", lgb.LGBMClassifier(n_estimators=8, verbose=-1).fit(X, yc), X, yc, Xt, yct, {}
    yield "lgb/quantile", lgb.LGBMRegressor(n_estimators=8, objective="quantile", alpha=0.3,
                                            verbose=-1).fit(X, yr), X, yr, Xt, yrt, {}
    yield "lgb/huber", lgb.LGBMRegressor(n_estimators=8, objective="huber", verbose=-1).fit(X, yr), X, yr, \
        Xt, yrt, {}
    share = 1 / (1 + np.exp(-yr))
    yield "lgb/cross_entropy", lgb.LGBMRegressor(n_estimators=8, objective="cross_entropy", verbose=-1).fit(
        X, share), X, share, Xt, 1 / (1 + np.exp(-yrt)), {}
    yield "cb/classifier_backtracking", cb.CatBoostClassifier(
        iterations=30, leaf_estimation_iterations=10, **cbk).fit(X, yb), X, yb, Xt, ybt, {}
    yield "cb/regressor", cb.CatBoostRegressor(iterations=20, **cbk).fit(X, yr), X, yr, Xt, yrt, {}
    yield "cb/multiclass_newton", cb.CatBoostClassifier(iterations=10, **cbk).fit(X, yc), X, yc, Xt, yct, {}
    yield "cb/auto_class_weights", cb.CatBoostClassifier(iterations=10, auto_class_weights="Balanced",
                                                         **cbk).fit(X, yb, sample_weight=w), X, yb, Xt, ybt, \
        {"sample_weight": w}
    yield "cb/quantile", cb.CatBoostRegressor(iterations=10, loss_function="Quantile:alpha=0.4", **cbk).fit(
        X, yr), X, yr, Xt, yrt, {}
    yield "cb/multi_rmse", cb.CatBoostRegressor(iterations=8, loss_function="MultiRMSE", **cbk).fit(X, Y), \
        X, Y, Xt, np.c_[yrt, yrt ** 2], {}
    from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult

    adult, ya = load_adult()
    adult, ya = adult.iloc[:1500].reset_index(drop=True), ya[:1500]
    at, yat = load_adult("test")
    at, yat = at.iloc[:20].reset_index(drop=True), yat[:20]
    ctr = cb.CatBoostClassifier(iterations=20, cat_features=list(ADULT_CATEGORICAL), **cbk).fit(adult, ya)
    yield "cb/ctr", ctr, adult, ya, at, yat, {}
    frame = pd.DataFrame(X, columns=list("abcde"))
    yield "lgb/pandas_strings", lgb.LGBMClassifier(n_estimators=10, verbose=-1).fit(
        frame, np.where(yb == 1, "yes", "no")), frame, np.where(yb == 1, "yes", "no"), \
        pd.DataFrame(Xt, columns=list("abcde")), np.where(ybt == 1, "yes", "no"), {}


def _model_cases() -> Iterator[tuple[str, np.ndarray]]:
    """Every score of the real models through the public API."""
    rows = np.arange(0, 40, 9)
    for name, model, X, y, Xt, yt, fit in _models():
        ex = BoostingInfluence(model, progress=False).fit(X, y, **fit)
        yield f"model/{name}/leaf_values", ex.engine_.leaf_values
        for method in ("leaf_influence", "leaf_refit"):
            for update_set, k in (("all_points", None), ("single_point", None), ("top_k_leaves", 2)):
                ex.set_params(method=method, update_set=update_set, k=k)
                key = f"model/{name}/{method}/{update_set}"
                for aggregate in (None, "mean"):
                    yield f"{key}/{aggregate}", np.asarray(
                        ex.score_training_points(Xt, yt, training_points=rows, aggregate=aggregate))
        ex.set_params(method="leaf_influence", update_set="all_points", k=None)
        yield f"model/{name}/reverse/every_row", np.asarray(ex.score_training_points(Xt, yt))
        yield f"model/{name}/reverse/mean", np.asarray(ex.score_training_points(Xt, yt, aggregate="mean"))


def compute(cases: Callable[[], Iterator[tuple[str, np.ndarray]]] | None = None) -> Results:
    """Every case's arrays, float64, by name."""
    out: Results = {}
    for source in ([cases] if cases else [_engine_cases, _model_cases]):
        for key, value in source():
            out[key] = np.array(value, dtype=np.float64, copy=True)
    return out


def differences(before: Results, after: Results) -> list[str]:
    """The names whose arrays differ in any bit (shape, NaN position or value), or are missing."""
    bad = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is None or b is None or a.shape != b.shape or a.tobytes() != b.tobytes():
            if a is not None and b is not None and a.shape == b.shape:
                diff = np.nanmax(np.abs(a - b)) if a.size else 0.0
                bad.append(f"{key}: max |difference| {diff:.3g}")
            else:
                bad.append(f"{key}: {'missing' if a is None or b is None else 'shape'}")
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["save", "compare"])
    parser.add_argument("file")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results = compute()
    print(f"{len(results)} arrays, {sum(a.size for a in results.values())} values, "
          f"{time.perf_counter() - start:.1f} s")
    if args.action == "save":
        np.savez_compressed(args.file, **results)
        print(f"saved to {args.file}")
        return 0
    with np.load(args.file) as saved:
        before = {key: saved[key] for key in saved.files}
    bad = differences(before, results)
    for line in bad:
        print(line)
    print(f"{len(bad)} of {len(results)} arrays differ" if bad else "bit-identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
