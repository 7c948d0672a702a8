"""Compile every kernel the package runs, for every combination of types it calls them with.

``python -m influence_gbdt._warmup --ship DIR`` is what a wheel build runs (``setup.py``): it
compiles the kernels for a CPU level that runs on most machines (x86-64-v3 where the building
machine has it, else generic: see :mod:`influence_gbdt._cpu`) into a fresh cache, and moves that
cache to ``DIR/<key>`` with a manifest (see :mod:`influence_gbdt._jit`), so that an installed
wheel compiles nothing at first use. :func:`run` is the workload; the test suite runs it first
(compiled by :func:`compile_into` on two cores, as the build does) and then checks that nothing it
does compiles a kernel the workload missed.

The workload builds small synthetic ensembles, one for each leaf rule and combination of rules a
model can have (plain Newton or gradient steps, several steps, rounds of several outputs, joint
softmax rounds, renewed quantile leaves, backtracking, class factors that move with the weights),
and runs every pass of the engine on them: the replay, reverse and forward mode, LeafRefit with each
update set, on the loss and on the prediction; the partitioned engine's halves (Dask); the losses'
vectorized methods; the base-margin rules; CatBoost's random stream, table exp and predict-time CTR values;
the feature-tweaking margin kernel; the XGBoost adapter's walk through its trees and its float32
rounding bound. No booster is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np


def _ensemble(rng: np.random.Generator, loss: str, K: int = 1, **kw: Any) -> Any:
    """A random structure whose stored leaves are its own replay (so every self-check passes)."""
    from .engine import InfluenceEngine
    from .ensemble import TreeEnsemble
    from .losses import Loss

    n, n_rounds, leaves = 40, 3, 4
    n_trees = n_rounds * K
    joint = bool(kw.get("full_hessian", False))
    leaf = rng.integers(0, leaves, (n_trees, n))
    if joint:
        leaf = np.repeat(leaf[::K], K, axis=0)
    if loss in ("softmax", "one_vs_all"):
        y = rng.integers(0, K, n).astype(float)
    elif loss == "multi_squared":
        y = rng.normal(size=(n, K))
    elif loss == "logloss":
        y = (rng.random(n) < 0.4).astype(float)
    else:
        y = rng.normal(size=n)
    classes = loss in ("logloss", "softmax", "one_vs_all")
    common = dict(leaf_index=leaf, n_leaves=np.full(n_trees, leaves), y=y, loss=Loss(loss, n_outputs=K),
                  tree_output=np.tile(np.arange(K), n_rounds), tree_round=np.repeat(np.arange(n_rounds), K),
                  user_weight=rng.uniform(0.5, 2.0, n), weight_group=y.astype(int) if classes else None, **kw)
    draft = TreeEnsemble.build(leaf_values=np.zeros(n_trees * leaves), **common)
    return TreeEnsemble.build(leaf_values=InfluenceEngine(draft).leaf_values, **common)


def _factors(groups: int) -> dict[str, Any]:
    """Class factors that move with the weights (``groups`` weight groups)."""
    return dict(dataset_factor=np.arange(1.0, groups + 1), dataset_factor_derivative=np.zeros((40, groups)))


#: One ensemble per combination of leaf rules and per shape of the state (module docstring), as
#: the arguments of :func:`_ensemble`.
CONFIGURATIONS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "plain": ("logloss", 1, dict(base_margin=-0.3, base_rule="mean", **_factors(2))),
    "gradient_steps": ("squared_error", 1, dict(newton=False, n_steps=3, step_scales=[1.0, 0.5, 1.0],
                                                l2_per_mean_weight=1.0, base_rule="mean")),
    "softmax": ("softmax", 3, dict(base_rule="mean")),
    # a loss whose outputs do not interact (its reverse sweep: reverse_multi._separable_row_pass)
    "one_vs_all": ("one_vs_all", 3, dict(base_rule="mean")),
    "joint_softmax": ("softmax", 3, dict(full_hessian=True, l2_per_mean_weight=1.0, float32_l2=True,
                                         **_factors(3))),
    "renewed_quantile": ("quantile", 1, dict(renewed=True, quantile_method="lightgbm",
                                             quantile_weighted=True, base_rule="quantile",
                                             float32_base=True)),
    "backtracking_fast": ("logloss", 1, dict(n_steps=4, backtracking=True, n_iterations=4,
                                             step_scales=np.ones(4), l2_per_mean_weight=3.0,
                                             backtracking_objective="fast_logloss", objective_threads=2)),
    "backtracking_exact": ("squared_error", 1, dict(n_steps=3, backtracking=True, n_iterations=3,
                                                    step_scales=np.ones(3))),
}


def _engine(ensemble: Any, rng: np.random.Generator) -> None:
    """Every pass of the engine on ``ensemble``, on 1 and 2 threads."""
    from .engine import InfluenceEngine, TestPoints

    m = 3
    K = ensemble.n_outputs
    test = TestPoints(rng.integers(0, 4, (ensemble.n_trees, m)), None,
                      ensemble.y[:m] if ensemble.y.shape[1] > 1 else ensemble.y[:m, 0])
    rows = np.array([0, 5, 9])
    outputs = [None] if K == 1 else [0]
    update_sets: list[tuple[Any, int | None]] = [("all_points", None), ("single_point", None),
                                                 ("top_k_leaves", 2)]
    targets: list[tuple[Any, int | None]] = [("loss", None)] + [("prediction", o) for o in outputs]
    for threads in (1, 2):
        engine = InfluenceEngine(ensemble, n_threads=threads)
        engine.predict_margin(test)
        for update_set, k in update_sets:
            engine.refit_leaf_values(rows, update_set, k)
            engine.leaf_value_derivatives(rows, update_set, k)
            for on, output in targets:
                for aggregate in (None, "mean"):
                    engine.leaf_refit(test, rows=rows, update_set=update_set, k=k, on=on,
                                      aggregate=aggregate, output=output)
                    engine.influence_forward(test, rows=rows, update_set=update_set, k=k, on=on,
                                             aggregate=aggregate, output=output)
        engine.influence_reverse(test, aggregate=None)
        engine.influence_reverse(test, aggregate="mean")
    uncached = InfluenceEngine(ensemble, cache_bytes=0)  # the sweeps that read margins
    uncached.influence_reverse(test)
    uncached.influence_reverse(test, aggregate="mean")


def _partitioned(ensemble: Any, rng: np.random.Generator) -> None:
    """The partitioned engine's halves (what :mod:`influence_gbdt.distributed` runs) on two
    partitions of ``ensemble``."""
    from .engine import InfluenceEngine, TestPoints, partitioned

    halves = []
    for rows in (np.arange(0, 20), np.arange(20, ensemble.n_rows)):
        part = partitioned.Partition.__new__(partitioned.Partition)
        part.ensemble = replace(ensemble, leaf_index=ensemble.leaf_index[:, rows], y=ensemble.y[rows],
                                user_weight=ensemble.user_weight[rows],
                                weight_group=ensemble.weight_group[rows],
                                init_offset=ensemble.init_offset[rows], objective_order=np.arange(rows.size))
        part.engine = InfluenceEngine(part.ensemble, n_threads=1, cache_bytes=0)
        part.n_rows = rows.size
        halves.append(part)
    summaries = [p.summary() for p in halves]
    head = partitioned.Head(halves[0].header(), summaries)
    for p, s in zip(halves, summaries, strict=True):
        partitioned.adopt(p, head.engine, (head.weight_sum - s["sum_w"], head.n_rows - int(s["n"])),
                          head.base_sums)
    test = TestPoints(rng.integers(0, 4, (ensemble.n_trees, 2)), None, ensemble.y[:2, 0])
    leaves, _, _, _, coef = head.test_side(test, "loss", None)
    c_leaf = head.leaf_coefficients(leaves, coef, aggregate=False)
    sweeps = [partitioned.sweep_start(p, 2) for p in halves]
    gathered: list[Any] = []
    big = np.zeros(2)
    for r in range(head.n_rounds - 1, -1, -1):
        adjoints = partitioned.leaf_step(head, r, head.n_rows, c_leaf, big, *gathered)
        big = adjoints[2]
        steps = [partitioned.sweep_round(s, p, r, adjoints)
                 for s, p in zip(sweeps, halves, strict=True)]
        gathered = [g for _, g in steps]
    a0 = partitioned.add(*[partitioned.sweep_margin_adjoints(s) for s in sweeps])
    for sweep, p in zip(sweeps, halves, strict=True):
        partitioned.sweep_scores(sweep, p, a0, big, coef, True)
    rows = np.array([1, -1])
    for refit, sums, step in ((True, partitioned.refit_sums, partitioned.refit_step),
                              (False, partitioned.forward_sums, partitioned.forward_step)):
        facts = [partitioned.row_facts(p, np.array([1]), True, refit) for p in halves]
        states = [partitioned.propagation_start(p, rows, np.zeros((2, 1))) for p in halves]
        values = None
        for r in range(head.n_rounds):
            moved = [partitioned.propagation_advance(s, p, r, values, True, refit)
                     for s, p in zip(states, halves, strict=True)]
            selection = partitioned.select(head, r, 2, 2, *[mass for _, mass in moved])
            shares = [sums(s, p, r, selection) for (s, _), p in zip(moved, halves, strict=True)]
            values = step(head, r, np.full(2, float(facts[0][1][0])), selection, *shares)
        partitioned.row_weights(halves[0], None)
    partitioned.local_scores(halves[0], "leaf_refit", test, None, {"refit_base": True, "on": "loss",
                                                                   "aggregate": None, "output": None})


def _losses() -> None:
    """The losses' vectorized methods, for one output and several."""
    from .losses import Loss

    for loss, K in (("logloss", 1), ("softmax", 3)):
        obj = Loss(loss, n_outputs=K)
        y = np.array([0.0, 1.0, 1.0]) if K == 1 else np.array([0.0, 2.0, 1.0])
        margin = np.zeros((3, K))
        obj.values(y, margin)
        obj.gradients(y, margin)
        obj.grad_hess(y, margin)


def _base_margins(rng: np.random.Generator) -> None:
    """Each booster's quantile of the labels without a row, and its weight derivative."""
    from .engine.quantile import METHODS, quantile_weight_derivative, quantile_without

    y, w = rng.normal(size=30), rng.uniform(0.5, 2.0, 30)
    for method in METHODS.values():
        for weighted in (False, True):
            quantile_without(method, y, w, 0.3, weighted, 1e-6, True, np.array([0, 4]))
            quantile_weight_derivative(method, y, w, 0.3, weighted, 1e-6, True)


def _catboost_stream() -> None:
    """CatBoost's random stream (its learn-set and fold shuffles), and its table exp of a
    boost_from_average bias (where its log loss starts the training rows)."""
    from .adapters.catboost_ctr import CatBoostRng
    from .engine.fastobj import fast_exp_scalar

    rng = CatBoostRng(0)
    rng.shuffle(50)
    rng.shuffle(50, 4)
    rng.uniform(10, 3)
    fast_exp_scalar(-13.5)


def _stored_ctrs() -> None:
    """CatBoost's predict-time CTR values: one CTR of one category, with and without a base row."""
    from .adapters.catboost_stored_ctr import _ctr_values

    i64 = np.int64
    tables = (np.array([0, 1], i64), np.zeros(1, i64), np.zeros(1, i64), np.zeros(1), np.array([0, 1], i64),
              np.array([7], np.uint64), np.array([0.5]), np.array([0.25]))
    Z, out = np.array([[3.0], [np.nan]]), np.empty((2, 1))
    _ctr_values(Z, np.empty(0), *tables, out)
    _ctr_values(Z, np.array([3.0, 0.5]), *tables, out)


def _xgboost(rng: np.random.Generator) -> None:
    """The XGBoost adapter's kernels: its walk through the trees, with and without missing values,
    on one tree of one split (in the JSON model's form), and the float32 rounding bound of its
    self-check (one kernel for every loss)."""
    from .adapters.xgboost_leaves import JsonTrees, NumericTrees, float32_rows
    from .adapters.xgboost_rounding import rounding_units
    from .engine import InfluenceEngine

    rounding_units(InfluenceEngine(_ensemble(rng, "softmax", 3)))

    tree = {"left_children": [1, -1, -1], "right_children": [2, -1, -1], "split_indices": [0, 0, 0],
            "split_conditions": [0.5, -1.0, 1.0], "default_left": [1, 0, 0]}
    walker = NumericTrees.of(JsonTrees.read([tree]))
    assert walker is not None
    for X in (np.array([[0.0], [1.0]]), np.array([[np.nan], [1.0]])):
        rows = float32_rows(X, np.nan)
        assert rows is not None
        walker.leaves(*rows, n_threads=1)


def _tweak_kernel() -> None:
    """The feature-tweaking margin kernels, with and without a base row (an oblivious one too), on
    a real (read-only) tree structure: one split on feature 0 and two leaves."""
    from . import _tweak_kernels as T
    from .trees import TreeStructure

    int32 = np.int32
    structure = TreeStructure(
        n_features=2, feature_names=("a", "b"), feature_is_categorical=np.zeros(2, bool),
        objective="binary", tree_offset=np.array([0, 3]), tree_class=np.zeros(1, int32),
        feature=np.array([0, -1, -1], int32), threshold=np.array([0.5, 0.0, 0.0]),
        inclusive=np.zeros(3, bool), default_left=np.ones(3, bool), missing_type=np.zeros(3, np.int8),
        left=np.array([1, -1, -1], int32), right=np.array([2, -1, -1], int32),
        is_categorical_split=np.zeros(3, bool), cat_offset=np.zeros(4, np.int64),
        cat_codes=np.zeros(0, np.int64), value=np.array([[0.0], [-1.0], [1.0]]),
        leaf_id=np.array([-1, 0, 1], int32), base_margin=np.zeros(1))
    X = np.array([[0.0, 1.0], [1.0, 0.0]])
    T.predict_margin(structure, X)
    T.predict_margin(structure, X, T.Base(structure, X[0], T.tree_uses(structure)))
    T.predict_margin(structure, X, T.Base(structure, X[0], T.tree_uses(structure), T.Oblivious(structure)))


def _configured(name: str) -> None:
    """Every pass of the engine on the configuration ``name``."""
    rng = np.random.default_rng(len(name))
    loss, K, kw = CONFIGURATIONS[name]
    _engine(_ensemble(rng, loss, K, **kw), rng)


#: The workload's pieces in the order :func:`run` shares them out (every other one, for two
#: processes). A process compiles each kernel signature once for all its pieces, and pieces whose
#: state has the same types reach the same signatures: the one-output pieces without renewed or
#: joint rounds (plain, gradient steps, the partitioned halves) and the two backtracking ones stay
#: in the first share, the multi-output ones (softmax, joint softmax, one-vs-all) in the other.
#: When the workload had 234 signatures (about 250 since), the two shares reached 158 and 156 of
#: them; in their shared cache (:func:`compile_into`) one process read most of the 80 they had in
#: common from the other (measured on two cores: 150 and 141 s, against 157 and 196 s with a
#: cache each).
ORDER = ("plain", "joint_softmax", "backtracking_fast", "renewed_quantile", "gradient_steps", "softmax",
         "partitioned", "losses", "backtracking_exact", "base_margins", "catboost_stream", "stored_ctrs",
         "tweak", "one_vs_all", "xgboost")


def _jobs() -> dict[str, Callable[[], None]]:
    """The workload's pieces by name, in :data:`ORDER`; each builds its own data, so that a process
    compiles only the pieces it runs."""
    rng = np.random.default_rng(0)
    jobs: dict[str, Callable[[], None]] = {name: partial(_configured, name) for name in CONFIGURATIONS}
    jobs.update(partitioned=lambda: _partitioned(_ensemble(rng, "logloss", base_margin=-0.3,
                                                           base_rule="mean"), rng),
                losses=_losses, base_margins=lambda: _base_margins(rng), catboost_stream=_catboost_stream,
                stored_ctrs=_stored_ctrs, tweak=_tweak_kernel, xgboost=lambda: _xgboost(rng))
    if set(jobs) != set(ORDER):
        raise RuntimeError(f"_warmup.ORDER must name every piece of the workload once: {sorted(jobs)}")
    return {name: jobs[name] for name in ORDER}


def run(part: int = 0, parts: int = 1, only: list[str] | None = None) -> None:
    """The workload (module docstring), or its share ``part`` of ``parts`` (about equal shares of
    compile time, for processes that compile side by side); ``only`` names the pieces to run (all
    by default; the test of the shipping runs one small piece)."""
    jobs = _jobs()
    names = [name for name in jobs if only is None or name in only]
    for name in names[part::parts]:
        jobs[name]()


#: Prints, as JSON, the codegen magic tuple (triple, cpu name, features) numba compiles under.
_MAGIC = ("import json; from numba.core.registry import cpu_target; "
          "print(json.dumps(cpu_target.target_context.codegen().magic_tuple()))")


def processes() -> int:
    """How many processes compile the workload side by side: one per core, up to 2 (its two about
    equal shares, :func:`run`)."""
    return max(1, min(2, os.cpu_count() or 1))


def signatures() -> set[tuple[str, str]]:
    """(module.function, signature) of every overload the package's kernels hold in this process
    (compiled in it, or read from a cache: see ``tests/conftest.py``)."""
    from . import _jit

    return {(f"{k.py_func.__module__}.{k.py_func.__qualname__}", str(sig))
            for k in _jit.KERNELS for sig in k.overloads}


def compile_into(out: str, env: dict[str, str] | None = None,
                 only: list[str] | None = None) -> set[tuple[str, str]]:
    """Compile the workload (or the pieces ``only`` names) in :func:`processes` processes side by
    side, each its share (:func:`run`), and add their kernels to the kernel cache directory ``out``
    (created if need be; what it holds is kept). ``env``: the processes' environment (default:
    this one's). Returns the :func:`signatures` the processes compiled.

    Where the cache's entries can be locked (:class:`influence_gbdt._jit._LockedIndex`), the
    processes share one fresh cache, so that a kernel signature one of them compiled is read by the
    other (measured on two cores: the whole workload 199 -> 153 s); elsewhere each has a cache of
    its own."""
    from . import _jit

    env = {**(os.environ if env is None else env), "INFLUENCE_GBDT_QUIET": "1"}
    parts = processes()
    pieces = ["--only", ",".join(only)] if only else []
    compiled: set[tuple[str, str]] = set()
    with tempfile.TemporaryDirectory() as scratch:
        caches = [os.path.join(scratch, "cache" if _jit.LOCKED_CACHE else f"cache{i}") for i in range(parts)]
        commands = [[sys.executable, "-m", "influence_gbdt._warmup", "--part", str(i), "--parts", str(parts),
                     "--signatures", os.path.join(scratch, f"signatures{i}.json"), *pieces]
                    for i in range(parts)]
        children = [subprocess.Popen(command, env={**env, "NUMBA_CACHE_DIR": cache})
                    for command, cache in zip(commands, caches, strict=True)]
        if any([child.wait() for child in children]):  # a list: wait for every process
            raise RuntimeError("a warmup process failed (its error is above)")
        os.makedirs(out, exist_ok=True)
        for i in range(parts):
            with open(os.path.join(scratch, f"signatures{i}.json")) as fh:
                compiled |= {(name, sig) for name, sig in json.load(fh)}
        for cache in sorted(set(caches)):
            if os.path.isdir(os.path.join(cache, _jit.DIGEST)):  # a share may have had nothing to do
                _merge(os.path.join(cache, _jit.DIGEST), out)
    return compiled


def ship(target: str, only: list[str] | None = None) -> str:
    """Compile the workload (or the pieces ``only`` names) into ``target/<key>`` (see
    :func:`compile_into`) and return that directory. The kernels are compiled for the CPU level
    :func:`influence_gbdt._cpu.build_cpu` picks (``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES`` of
    the processes are set to it), which the manifest records.

    The whole workload's result is also kept in the user's kernel cache (``<level>-<key>`` in
    :data:`influence_gbdt._jit.CACHE_DIR`, when there is one), and taken from there when it is
    already: building the same sources again (a reinstall) compiles nothing."""
    from . import _cpu, _jit

    if _jit.SHIPPED_DIR is not None:
        raise RuntimeError("precompiled kernels of this version exist already: nothing to ship")
    cpu = _cpu.build_cpu()
    env = {**os.environ, "NUMBA_CPU_NAME": cpu, "NUMBA_CPU_FEATURES": ""}
    out = os.path.join(target, _jit.shipped_key())
    shutil.rmtree(out, ignore_errors=True)
    kept = None
    if not only and _jit.CACHE_DIR is not None:
        kept = os.path.join(_jit.CACHE_DIR, f"{cpu}-{_jit.shipped_key()}")
    if kept is not None and os.path.isfile(os.path.join(kept, "manifest.json")):
        shutil.copytree(kept, out)
        return out
    compile_into(out, env, only)
    magic = json.loads(subprocess.run([sys.executable, "-c", _MAGIC], env=env, capture_output=True, text=True,
                                      check=True).stdout)
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump({"magic": magic, "key": _jit.shipped_key()}, fh)
    if kept is not None:  # best effort: a full disk only costs the next build its compile
        try:
            shutil.copytree(out, kept + ".partial", dirs_exist_ok=True)
            os.replace(kept + ".partial", kept)
        except OSError:
            shutil.rmtree(kept + ".partial", ignore_errors=True)
    return out


def _merge(source: str, target: str) -> None:
    """Add the compiled overloads of the numba cache ``source`` to the cache ``target`` (same
    source stamp): per function, the index entries ``target`` lacks, with their data files."""
    from numba.core.caching import IndexDataCacheFile

    from ._jit import DIGEST

    stamp = ("influence-gbdt", DIGEST)
    for name in sorted(os.listdir(source)):
        if not name.endswith(".nbi"):
            continue
        base = name[: -len(".nbi")]
        src = IndexDataCacheFile(source, base, stamp)
        dst = IndexDataCacheFile(target, base, stamp)
        have = dst._load_index()
        taken = set(have.values())
        for key, data_name in src._load_index().items():
            if key in have:
                continue
            number = 1
            while dst._data_name(number) in taken:
                number += 1
            new_name = dst._data_name(number)
            shutil.copyfile(os.path.join(source, data_name), os.path.join(target, new_name))
            have[key] = new_name
            taken.add(new_name)
        dst._save_index(have)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ship", metavar="DIR",
                        help="compile into fresh caches and merge them into DIR/<key>")
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--signatures", help=argparse.SUPPRESS)  # where to write them (JSON)
    parser.add_argument("--only", help="comma-separated pieces of the workload (default: all)")
    args = parser.parse_args(argv)
    only = args.only.split(",") if args.only else None
    start = time.perf_counter()
    if args.ship:
        out = ship(args.ship, only=only)
        print(f"influence-gbdt: precompiled kernels in {out} ({time.perf_counter() - start:.0f} s)")
    else:
        run(args.part, args.parts, only)
        if args.signatures:
            os.makedirs(os.path.dirname(os.path.abspath(args.signatures)), exist_ok=True)
            with open(args.signatures, "w") as fh:
                json.dump(sorted(signatures()), fh)
        print(f"influence-gbdt: kernels ready ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
