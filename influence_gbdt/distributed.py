"""Influence on Dask: training sets partitioned over a cluster, scored where they live.

Optional (``pip install influence-gbdt[dask]``). ``BoostingInfluence(model).fit(X, y)`` with ``X``
and ``y`` Dask collections (``dask.dataframe`` or ``dask.array``, partitioned alike) lands here;
the single-machine engine (:mod:`influence_gbdt.engine`) stays the default for everything else.

How it runs. Each partition is described on its worker by the model's own adapter
(:meth:`~influence_gbdt.adapters.base.BoosterAdapter.describe`: leaf ids from the booster's
``predict(pred_leaf=True)`` on the partition, the adapter's learning rate, lambda and base-score
rules), so the leaf-index matrix (trees x rows) never leaves the workers. Where an adapter's
description depends on the whole training set (LightGBM's boost_from_average init score), the
whole-set statistic is reduced first and handed to it. Then:

- **Replay and self-check.** Margins move by the *stored* leaf values, so every partition sums
  ``w g`` and ``w h`` per leaf of every tree in one pass (the engine's ``_replay_sums``); the
  per-partition tables (one value per leaf) are summed, and the leaf values are recomputed from the
  sums on the client with the engine's own step rule (``_replay_steps``) and compared with the
  stored ones (:meth:`DistributedEngine.check_reproduction`).
- **Exact reverse sweep** (LeafInfluence, ``all_points``): the engine's reverse mode
  (:mod:`influence_gbdt._reverse`) split at its reductions. Per round, last to first: each
  partition's margin adjoints are summed per leaf (``gather_adjoints``, a table of B x leaves), the
  tables are added up, the leaf-level step (``leaf_adjoints``) turns them into the sums' adjoints,
  which go back to every partition for its rows (``row_adjoints``). A batch of ``B`` test objectives
  shares one sweep: one small reduction per tree, whatever ``B``.

Results are lazy Dask arrays with the training set's partitioning, ``(n, m)`` or ``(n,)`` when
aggregated; nothing n-sized is ever gathered on the client (the test set is: its leaf ids,
trees x test points).

Scope, refused by name otherwise: XGBoost and LightGBM models (binary log loss, squared error),
one Newton or gradient step per leaf (the libraries' defaults), no class factors that depend on
the data (LightGBM ``class_weight='balanced'``, ``is_unbalance``), ``method="leaf_influence"``
with ``update_set="all_points"`` and all training rows. Sums over partitions are added in another
order than the single-machine engine's, so results agree with it to rounding (~1e-15 relative),
not bit for bit. Sign convention as everywhere: score > 0 = the training row is harmful.
"""

from __future__ import annotations

import operator
import sys
import uuid
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from . import _jit as numba
from ._base import BaseMargin
from ._kernels import _replay_steps, _replay_sums, add_round, round_sizes
from ._reverse import gather_adjoints, leaf_adjoints, row_adjoints
from ._tables import Tables, build_tables
from .engine import _REVERSE_BATCH_BYTES, InfluenceEngine, TestPoints, _check_aggregate
from .ensemble import TreeEnsemble
from .errors import InputError, ReproductionError, UnsupportedModelError

#: Libraries whose adapters the distributed engine runs.
LIBRARIES = ("xgboost", "lightgbm")


def is_dask_collection(obj: Any) -> bool:
    """Whether ``obj`` is a Dask collection (False without importing dask when it is not loaded)."""
    if "dask" not in sys.modules:
        return False
    import dask

    return bool(dask.is_dask_collection(obj))


# ----------------------------------------------------------------------------------------------
# Kernels: the engine's per-row primitives, run on one partition or on the per-leaf sums.


@numba.njit(cache=True, nogil=True)
def _partition_sums(tb: Tables, A: NDArray[np.float64]) -> None:
    """Per-leaf sums ``tb.G``, ``tb.H`` of every (one-step) tree over this partition's rows, each
    round at the margins the stored earlier rounds give. ``A`` (n_p, K): initial margins on entry,
    final ones on return."""
    u = np.zeros(tb.leaf_off[-1])
    scratch = np.empty((7, max(A.shape[1], tb.zsize)))
    for r in range(tb.round_ptr.shape[0] - 1):
        _replay_sums(tb, r, 0, A, u, scratch)
        add_round(tb, r, A, tb.stored, 1.0)


@numba.njit(cache=True, nogil=True)
def _leaf_values_from_sums(tb: Tables, mean_w: float) -> None:
    """Leaf values ``tb.values`` (and the steps' derivatives ``tb.RG``, ``tb.RD``) of one-step trees
    from the whole training set's sums ``tb.G``, ``tb.H``; ``mean_w`` = sum of weights / n."""
    u = np.zeros(tb.leaf_off[-1])
    most_leaves, _ = round_sizes(tb)
    d = np.empty(most_leaves)
    for r in range(tb.round_ptr.shape[0] - 1):
        _replay_steps(tb, r, 0, mean_w, u, d)
        rl0 = tb.leaf_off[tb.round_ptr[r]]
        for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
            for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
                tb.values[gl] = tb.lr[t] * tb.scales[t, 0] * d[gl - rl0]


# ----------------------------------------------------------------------------------------------
# Work on one partition (runs on a worker).


def check_library(library: str) -> None:
    """Refuse a library whose models the distributed engine does not run."""
    if library not in LIBRARIES:
        raise UnsupportedModelError(
            f"Influence on Dask supports {' and '.join(LIBRARIES)} models, not {library}: gather the "
            "training set on one machine and use the in-memory path."
        )


def _check_scope(e: TreeEnsemble, library: str) -> None:
    """Refuse, by name, what the distributed engine does not model."""
    check_library(library)
    refusals = [
        (e.n_outputs != 1, "multiclass / multi-output models"),
        (bool(np.any(e.n_steps != 1)), "several leaf-estimation steps per tree"),
        (bool(e.backtracking.any()), "backtracking leaf estimation"),
        (bool(e.renewed.any()), "renewed (L1 / quantile) leaves"),
        (e.base_rule == "quantile", "a quantile base score"),
        (any(x is not None for x in (e.dataset_factor_without, e.objective_factor_without,
                                     e.dataset_factor_derivative, e.objective_factor_derivative)),
         "class weights computed from the data (class_weight='balanced', is_unbalance)"),
    ]
    for refused, what in refusals:
        if refused:
            raise UnsupportedModelError(
                f"Influence on Dask does not support {what} ({library} model): use the in-memory path "
                "(pass numpy or pandas data) or retrain without it."
            )


class _Partition:
    """One partition on its worker: the adapter's description of its rows, the kernel tables,
    the final training margins (n_p, K) and the partition's per-leaf sums."""

    def __init__(self, adapter: Any, X: Any, y: Any, weight: Any, init_score: Any,
                 label_mean: float | None) -> None:
        extra = {} if label_mean is None else {"label_mean": label_mean}
        e = adapter.describe(X, y, weight, init_score, **extra)
        _check_scope(e, adapter.library)
        # rows_by_leaf serves LeafRefit, forward mode and renewed leaves only: not built.
        tb = build_tables(e, group_sums=False, sort_rows=False)
        A = np.ascontiguousarray(e.init_offset + e.base_margin[None, :])
        _partition_sums(tb, A)
        self.ensemble, self.tables, self.margin = e, tb, A
        self.n_rows = e.n_rows

    def summary(self, header: bool) -> dict[str, Any]:
        """The small per-partition results the client reduces (one value per leaf, per output)."""
        e, tb = self.ensemble, self.tables
        base = BaseMargin(e)
        sums = base.sums if base.refits else (np.zeros((1, e.n_outputs)), np.zeros((1, e.n_outputs)))
        out = {"G": tb.G.copy(), "H": tb.H.copy(), "sum_w": float(tb.w.sum()), "n": e.n_rows,
               "P": sums[0].sum(0), "Q": sums[1].sum(0)}
        if header:
            if e.n_rows < 2:
                raise InputError("The first partition of the training set needs at least two rows.")
            two = slice(0, 2)
            out["header"] = replace(
                e, leaf_index=e.leaf_index[:, two], y=e.y[two], user_weight=e.user_weight[two],
                weight_group=e.weight_group[two], init_offset=e.init_offset[two])
        return out


def _label_mean(adapter: Any, X: Any, y: Any, weight: Any, init_score: Any) -> NDArray[np.float64]:
    """(sum d y, sum d) of a partition: the pieces of the whole set's weighted label mean."""
    base = BaseMargin(adapter.describe(X, y, weight, init_score))
    if not base.refits:
        return np.zeros(2)
    P, Q = base.sums
    return np.array([P.sum(), Q.sum()])


def _start(part: _Partition, B: int) -> list[NDArray[np.float64]]:
    """A sweep's state on a partition: margins (copy), margin adjoints (B, n_p, K), weight adjoints
    (B, n_p)."""
    n, K = part.margin.shape
    return [part.margin.copy(), np.zeros((B, n, K)), np.zeros((B, n))]


def _round(state: list[NDArray[np.float64]], part: _Partition, r: int,
           adjoints: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]
           ) -> tuple[list[NDArray[np.float64]], NDArray[np.float64]]:
    """Round ``r`` of the sweep on a partition's rows (in place: each state feeds one task), and
    the partition's per-leaf adjoint sums for round ``r - 1``, (B, leaves of that round)."""
    A, a_bar, w_bar = state
    g_bar, d_bar, _ = adjoints
    tb = part.tables
    add_round(tb, r, A, tb.stored, -1.0)
    row_adjoints(tb, r, 0, A, g_bar, d_bar, a_bar, w_bar)
    return state, _gathered(tb, r - 1, a_bar)


def _gathered(tb: Tables, r: int, a_bar: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-leaf sums of the margin adjoints for round ``r``, (B, leaves of the round); empty
    before round 0."""
    if r < 0:
        return np.zeros((a_bar.shape[0], 0))
    t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
    out = np.zeros((a_bar.shape[0], int(tb.leaf_off[t1] - tb.leaf_off[t0])))
    gather_adjoints(tb, r, a_bar, out)
    return out


def _scores(state: list[NDArray[np.float64]], part: _Partition, a0_bar: NDArray[np.float64],
            big_w_bar: NDArray[np.float64], coef_sum: NDArray[np.float64],
            base_sums: tuple[NDArray[np.float64], NDArray[np.float64]] | None) -> NDArray[np.float64]:
    """Scores of the partition's rows, (n_p, B): per unit of user weight, > 0 = harmful (as
    :meth:`InfluenceEngine._reverse_scores`, without data-dependent class factors)."""
    _, _, w_bar = state
    e = part.ensemble
    d_base = (np.zeros((e.n_rows, e.n_outputs)) if base_sums is None
              else BaseMargin(e, base_sums).derivative())
    total = e.weight_factor[None, :] * (w_bar + big_w_bar[:, None]) + (a0_bar + coef_sum) @ d_base.T
    return np.ascontiguousarray(total.T)


# ----------------------------------------------------------------------------------------------
# Work on the per-leaf tables (small; any worker).


def _leaf_step(head: InfluenceEngine, r: int, n: int, c_leaf: NDArray[np.float64],
               big_w_bar: NDArray[np.float64], *parts: NDArray[np.float64]
               ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Round ``r``'s leaf-level backward step: the objectives' leaf coefficients ``c_leaf`` (B, n_total)
    plus the partitions' per-leaf adjoint sums -> the sums' adjoints (g_bar, d_bar) and the l2
    term's running adjoint."""
    tb = head._tables
    t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
    rl0, rl1 = tb.leaf_off[t0], tb.leaf_off[t1]
    u_bar = np.ascontiguousarray(c_leaf[:, rl0:rl1]) + sum(parts, np.zeros((c_leaf.shape[0], rl1 - rl0)))
    g_bar, d_bar, big = np.zeros_like(u_bar), np.zeros_like(u_bar), big_w_bar.copy()
    leaf_adjoints(tb, r, n, u_bar, g_bar, d_bar, big)
    return g_bar, d_bar, big


def _add(*parts: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(sum(parts[1:], parts[0]))


def _a0(state: list[NDArray[np.float64]]) -> NDArray[np.float64]:
    return np.asarray(state[1].sum(axis=1))


# ----------------------------------------------------------------------------------------------
# The client side.


def _blocks(x: Any, what: str) -> list[Any]:
    """A Dask collection's row partitions as delayed objects (arrays: all columns in one chunk)."""
    if x is None:
        return []
    if not is_dask_collection(x):
        raise InputError(
            f"{what} must be a Dask collection partitioned like X (a dask DataFrame, Series or Array), "
            f"got {type(x).__name__}."
        )
    if hasattr(x, "rechunk") and getattr(x, "ndim", 1) == 2:
        x = x.rechunk({1: -1})
    return list(np.asarray(x.to_delayed(), dtype=object).ravel())


class DistributedEngine:
    """The influence engine over a Dask-partitioned training set (see the module docstring).

    Parameters
    ----------
    adapter : BoosterAdapter
        The model's adapter (XGBoost or LightGBM).
    X : dask DataFrame or Array of shape (n, n_features)
    y, sample_weight, init_score : dask Series or Array of shape (n,), partitioned like ``X``

    Attributes
    ----------
    head : InfluenceEngine
        The engine on two training rows with the whole set's leaf values, step derivatives and base
        margin: it describes the test side (leaves, margins, objective coefficients).
    partitions : list of dask Delayed
        The persisted partitions (on the workers under a distributed Client).
    chunks : tuple of int
        Rows per partition; ``n_rows`` their sum.
    leaf_values, tree_residual, residual, relative_residual :
        As :class:`~influence_gbdt.engine.InfluenceEngine`'s, from the sums over all partitions.
    """

    def __init__(self, adapter: Any, X: Any, y: Any, sample_weight: Any = None,
                 init_score: Any = None) -> None:
        import dask
        from dask import delayed

        check_library(adapter.library)
        xs = _blocks(X, "X")
        columns = [_blocks(y, "y"), _blocks(sample_weight, "sample_weight"),
                   _blocks(init_score, "init_score")]
        for name, parts in zip(("y", "sample_weight", "init_score"), columns, strict=True):
            if parts and len(parts) != len(xs):
                raise InputError(
                    f"{name} has {len(parts)} partitions but X has {len(xs)}: partition them alike.")
        ys, ws, ss = (parts or [None] * len(xs) for parts in columns)
        ad = delayed(adapter, traverse=False)
        label_mean = None
        if adapter.library == "lightgbm" and init_score is None:  # boost_from_average's whole-set mean
            pieces = dask.compute(
                *[delayed(_label_mean)(ad, *a) for a in zip(xs, ys, ws, ss, strict=True)])
            total = np.sum(pieces, axis=0)
            label_mean = float(total[0] / total[1]) if total[1] > 0 else None
        parts = [delayed(_Partition)(ad, *a, label_mean) for a in zip(xs, ys, ws, ss, strict=True)]
        self.partitions: list[Any] = list(dask.persist(*parts))
        summaries = dask.compute(
            *[delayed(_Partition.summary)(p, i == 0) for i, p in enumerate(self.partitions)])
        self.chunks = tuple(int(s["n"]) for s in summaries)
        self.n_rows = sum(self.chunks)
        self.head = head = InfluenceEngine(summaries[0]["header"])
        tb = head._tables
        tb.G[:] = _add(*[s["G"] for s in summaries])
        tb.H[:] = _add(*[s["H"] for s in summaries])
        _leaf_values_from_sums(tb, sum(s["sum_w"] for s in summaries) / self.n_rows)
        head._set_leaf_values(tb.values.copy())
        self.base_sums = None
        if head._base.refits:
            P, Q = _add(*[s["P"] for s in summaries]), _add(*[s["Q"] for s in summaries])
            self.base_sums = (P[None, :], Q[None, :])
        self.ensemble = head.ensemble

    @property
    def leaf_values(self) -> NDArray[np.float64]:
        return self.head.leaf_values

    @property
    def relative_residual(self) -> float:
        return self.head.relative_residual

    @property
    def tree_residual(self) -> NDArray[np.float64]:
        return self.head.tree_residual

    def check_reproduction(self, rtol: float, hint: str = "") -> None:
        """Raise :class:`ReproductionError` if the leaf values recomputed from all partitions differ
        from the stored ones by more than ``rtol`` (relative)."""
        try:
            self.head.check_reproduction(rtol, hint)
        except ReproductionError as exc:
            raise ReproductionError(
                f"{exc} (Dask: {len(self.chunks)} partitions, {self.n_rows} rows.)") from None

    def leaf_influence(
        self, test: TestPoints, on: str = "loss", aggregate: str | None = None, refit_base: bool = True,
        output: int | None = None, batch_size: int = 64,
    ) -> Any:
        """Exact ``all_points`` LeafInfluence of every training row by the distributed reverse sweep.

        Parameters
        ----------
        test : TestPoints
            Test points by their leaves (in memory: trees x test points).
        on, aggregate, refit_base, output : as :meth:`InfluenceEngine.influence_reverse`.
        batch_size : int
            Most test points swept together (fewer where a partition's adjoints would exceed the
            engine's reverse-mode batch memory).

        Returns
        -------
        dask.array.Array of shape (n, m), or (n,) when aggregated, chunked by the training set's
        partitions. > 0 = harmful.
        """
        import dask.array as da

        _check_aggregate(aggregate)  # type: ignore[arg-type]
        head = self.head
        leaves, offset, y = head._test_arrays(test, need_y=on == "loss")
        coef = head._test_coef(leaves, offset, y, head._output(on, output))
        if aggregate is not None:
            per = coef.shape[0] if aggregate == "mean" else 1.0
            c_leaf = head._leaf_coefficients(leaves, coef / per, aggregate=True)
            blocks = self._sweep(c_leaf, coef.sum(axis=0)[None, :] / per, refit_base)
            return da.concatenate([da.from_delayed(b, shape=(n, 1), dtype=np.float64)[:, 0]
                                   for b, n in zip(blocks, self.chunks, strict=True)])
        m = leaves.shape[1]
        fits = int(_REVERSE_BATCH_BYTES / (8.0 * max(self.chunks) * (self.ensemble.n_outputs + 1)))
        per_batch = max(1, min(int(batch_size), fits))
        columns = []
        for s in range(0, m, per_batch):
            cols = np.arange(s, min(s + per_batch, m))
            c_leaf = head._leaf_coefficients(leaves[:, cols], coef[cols], aggregate=False)
            blocks = self._sweep(c_leaf, coef[cols], refit_base)
            columns.append([da.from_delayed(b, shape=(n, cols.size), dtype=np.float64)
                            for b, n in zip(blocks, self.chunks, strict=True)])
        if not columns:
            return da.zeros((self.n_rows, 0), chunks=(self.chunks, 0))
        return da.block([list(row) for row in zip(*columns, strict=True)])

    def _sweep(self, c_leaf: NDArray[np.float64], coef_sum: NDArray[np.float64],
               refit_base: bool) -> list[Any]:
        """The graph of one reverse sweep for ``B`` objectives (leaf coefficients (B, n_total), test
        margin coefficients summed (B, K)): one delayed (n_p, B) score block per partition.

        The graph is written as one dict of tasks (rounds x partitions of them) and wrapped once:
        built call by call with ``dask.delayed``, every call merges the layers of all earlier ones
        (quadratic: 16 s for 30 rounds over 80 partitions, 5.6 minutes when a list argument made
        dask cull the whole history at each call)."""
        from dask.delayed import Delayed
        from dask.highlevelgraph import HighLevelGraph

        name = f"influence-sweep-{uuid.uuid4().hex}"
        parts = [p.key for p in self.partitions]
        B = c_leaf.shape[0]
        dsk: dict[Any, Any] = {f"{name}-head": self.head, f"{name}-c": np.ascontiguousarray(c_leaf)}
        states = []
        for i, p in enumerate(parts):
            states.append(f"{name}-start-{i}")
            dsk[states[-1]] = (_start, p, B)
        gathered: list[str] = []
        big: Any = np.zeros(B)
        for r in range(int(self.head._tables.round_ptr.shape[0]) - 2, -1, -1):
            adjoints = f"{name}-leaf-{r}"
            dsk[adjoints] = (_leaf_step, f"{name}-head", r, self.n_rows, f"{name}-c", big, *gathered)
            big = f"{name}-big-{r}"
            dsk[big] = (operator.getitem, adjoints, 2)
            gathered = []
            for i, p in enumerate(parts):
                step = f"{name}-round-{r}-{i}"
                dsk[step] = (_round, states[i], p, r, adjoints)
                states[i] = f"{step}-state"
                dsk[states[i]] = (operator.getitem, step, 0)
                gathered.append(f"{step}-gathered")
                dsk[gathered[-1]] = (operator.getitem, step, 1)
        dsk[f"{name}-a0"] = (_add, *[(_a0, s) for s in states])
        base = self.base_sums if refit_base else None
        out = [f"{name}-scores-{i}" for i in range(len(parts))]
        for key, s, p in zip(out, states, parts, strict=True):
            dsk[key] = (_scores, s, p, f"{name}-a0", big, coef_sum, base)
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=self.partitions)
        return [Delayed(key, graph, layer=name) for key in out]


def gather_test(X: Any) -> Any:
    """A Dask test set computed into memory (test sets are scored by their leaves on the client)."""
    if not is_dask_collection(X):
        return X
    out = X.compute()
    return out if isinstance(out, pd.DataFrame | pd.Series) else np.asarray(out)


# ----------------------------------------------------------------------------------------------
# BoostingInfluence on Dask collections (called from explainer.py).


def fit_explainer(explainer: Any, X: Any, y: Any, sample_weight: Any = None, init_score: Any = None) -> Any:
    """:meth:`BoostingInfluence.fit` for a Dask ``X``: the same checks, a :class:`DistributedEngine`
    as ``engine_``. Returns the explainer."""
    from influence_gbdt.adapters import adapter_for

    adapter = adapter_for(explainer.model, explainer.params)
    check_library(adapter.library)
    meta = getattr(X, "_meta", None)
    adapter.check_features(meta if isinstance(meta, pd.DataFrame) else X)
    engine = DistributedEngine(adapter, X, y, sample_weight, init_score)
    engine.check_reproduction(rtol=adapter.rtol, hint=f"{adapter.library}: {adapter.hint}")
    explainer.adapter_ = adapter
    explainer.engine_ = engine
    explainer.n_features_in_ = int(X.shape[1])
    if isinstance(meta, pd.DataFrame):
        explainer.feature_names_in_ = np.asarray(meta.columns, dtype=object)
    explainer.n_train_ = engine.n_rows
    explainer.reproduction_residual_ = engine.relative_residual
    explainer._X_train, explainer._y_train = X, y
    explainer._fit_model = explainer.model
    explainer._fit_params = dict(explainer.params or {})
    return explainer


def score_explainer(explainer: Any, X: Any, y: Any, aggregate: str | None, training_points: Any,
                    on: str, init_score: Any) -> Any:
    """:meth:`BoostingInfluence.score_training_points` after a Dask ``fit``: a Dask array of shape
    (n_train, n_test), or (n_train,) when aggregated. The test set may be in memory or a Dask
    collection (gathered: it is scored by its leaves)."""
    engine: DistributedEngine = explainer.engine_
    if explainer.method != "leaf_influence" or explainer.update_set != "all_points":
        raise InputError(
            f"On Dask, only method='leaf_influence' with update_set='all_points' (exact, reverse mode) "
            f"runs; got method={explainer.method!r}, update_set={explainer.update_set!r}. Use those, or "
            "the in-memory path for the others."
        )
    if training_points is not None:
        raise InputError(
            "On Dask every training row is scored: leave training_points=None and select rows of the "
            "returned Dask array."
        )
    test = explainer._test_points(gather_test(X), gather_test(y), on, gather_test(init_score))
    return engine.leaf_influence(test, on=on, aggregate=aggregate,
                                 refit_base=explainer.base_score == "refit")
