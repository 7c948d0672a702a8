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

- **Replay and self-check.** Margins move by the *stored* leaf values, so every partition's engine
  (:class:`~influence_gbdt.engine.partitioned.Partition`) sums ``w g`` and ``w h`` per leaf of every tree in
  one pass (its replay); the per-partition tables (one value per leaf) are summed, the leaf values
  are recomputed from the sums on the client with the engine's own step rule (the head,
  :class:`~influence_gbdt.engine.partitioned.Head`) and
  compared with the stored ones (:meth:`DistributedEngine.check_reproduction`), as is the base margin
  the booster's rule estimates from all partitions' sums (:meth:`DistributedEngine.check_base_estimate`,
  where the base is re-estimated). Every partition then
  adopts the whole set's sums, leaf values and step derivatives.
- **Exact reverse sweep** (LeafInfluence, ``all_points``): the engine's reverse mode
  (:mod:`influence_gbdt.engine.passes`) split at its reductions. Per round, last to first: each
  partition's margin adjoints are summed per leaf (``gather_adjoints``, a table of B x leaves), the
  tables are added up, the leaf-level step (``leaf_adjoints``) turns them into the sums' adjoints,
  which go back to every partition for its rows (``row_adjoints``). A batch of ``B`` test objectives
  shares one sweep: one small reduction per tree, whatever ``B``.
- **single_point** (LeafRefit and LeafInfluence): only the deleted row's own margin change is
  propagated, so a row's result needs the whole set's leaf sums and its own row: each partition's
  engine scores its rows, no reduction at all.
- **LeafRefit with all_points and top_k_leaves, LeafInfluence with top_k_leaves**: the engine's
  ``refit_one`` (``forward_one``) split at its reductions, forward over the rounds, for a batch of
  scored rows: each partition keeps its rows' margin changes under each deletion (derivatives in
  each weight), sums them per leaf of the round's chosen leaves (top_k_leaves first ranks the
  leaves by the summed |margin change|), and the client's head turns the summed tables into the
  round's new leaf values (derivatives), which go back to the partitions.

Every row scored: lazy Dask arrays with the training set's partitioning, ``(n, m)`` or ``(n,)``
when aggregated; nothing n-sized is ever gathered on the client (the test set is: its leaf ids,
trees x test points). Rows chosen (``training_points``): an ndarray with a row per chosen row.

Scope, refused by name otherwise: XGBoost and LightGBM models (binary log loss, squared error),
one Newton or gradient step per leaf (the libraries' defaults), no class factors that depend on
the data (LightGBM ``class_weight='balanced'``, ``is_unbalance``). LeafRefit with ``all_points``
or ``top_k_leaves`` and LeafInfluence with ``top_k_leaves`` need the rows to score (each costs a
pass over the whole set per tree). Empty partitions are left out of the results. Sums over
partitions are added in another order than the single-machine engine's, so results agree with it
to rounding (~1e-15 relative), not bit for bit. Sign convention as everywhere: score > 0 = the
training row is harmful.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from tqdm.auto import tqdm

from .engine import (
    REVERSE_BATCH_BYTES,
    Progress,
    TestPoints,
    UpdateSet,
    check_aggregate,
    partitioned,
    resolve_rows,
)
from .errors import InputError, ReproductionError

LIBRARIES = partitioned.LIBRARIES
__all__ = ["LIBRARIES", "DistributedEngine", "fit_explainer", "is_dask_collection", "score_explainer"]


def is_dask_collection(obj: Any) -> bool:
    """Whether ``obj`` is a Dask collection (False without importing dask when it is not loaded)."""
    if "dask" not in sys.modules:
        return False
    import dask

    return bool(dask.is_dask_collection(obj))


def _stack(*rounds: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.concatenate(rounds, axis=1)


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
    head : partitioned.Head
        The engine on two training rows with the whole set's leaf sums, values, step derivatives
        and base margin: it describes the test side (leaves, margins, objective coefficients) and
        runs the leaf-level halves of the rounds.
    partitions : list of dask Delayed
        The persisted partitions (:class:`influence_gbdt.engine.partitioned.Partition`; on the workers
        under a distributed Client), each holding the whole set's sums.
    chunks : tuple of int
        Rows per partition; ``n_rows`` their sum.
    leaf_values, tree_residual, residual, relative_residual :
        As :class:`~influence_gbdt.engine.InfluenceEngine`'s, from the sums over all partitions.
    """

    def __init__(self, adapter: Any, X: Any, y: Any, sample_weight: Any = None,
                 init_score: Any = None) -> None:
        import dask
        from dask import delayed

        partitioned.check_library(adapter.library)
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
                *[delayed(partitioned.label_mean_sums)(ad, *a) for a in zip(xs, ys, ws, ss, strict=True)])
            total = np.sum(pieces, axis=0)
            label_mean = float(total[0] / total[1]) if total[1] > 0 else None
        parts = [delayed(partitioned.Partition.describe)(ad, *a, label_mean) for a in zip(xs, ys, ws, ss,
                                                                                          strict=True)]
        every = dask.persist(*parts)
        sizes = dask.compute(*[delayed(partitioned.summarize)(p) for p in every])
        # Empty partitions (a filtered DataFrame's) are left out: results have a chunk per non-empty one.
        described = [p for p, s in zip(every, sizes, strict=True) if s["n"] > 0]
        summaries = [s for s in sizes if s["n"] > 0]
        self.chunks = tuple(int(s["n"]) for s in summaries)
        self.n_rows = sum(self.chunks)
        first = next((i for i, s in enumerate(summaries) if s["n"] >= 2), None)
        if first is None:
            raise InputError("The training set needs a partition with at least two rows.")
        (header,) = dask.compute(delayed(partitioned.Partition.header)(described[first]))
        self.head = head = partitioned.Head(header, summaries)
        self.weight_sum = head.weight_sum
        self.base_sums = head.base_sums
        self.ensemble = head.engine.ensemble
        hd = delayed(head.engine, traverse=False)
        self.partitions: list[Any] = list(dask.persist(*[
            delayed(partitioned.adopt)(p, hd, (self.weight_sum - s["sum_w"], self.n_rows - int(s["n"])),
                                       self.base_sums)
            for p, s in zip(described, summaries, strict=True)]))
        self.starts = np.r_[0, np.cumsum(self.chunks)].astype(np.int64)

    @property
    def leaf_values(self) -> NDArray[np.float64]:
        return self.head.engine.leaf_values

    @property
    def relative_residual(self) -> float:
        return self.head.engine.relative_residual

    @property
    def tree_residual(self) -> NDArray[np.float64]:
        return self.head.engine.tree_residual

    def check_reproduction(self, rtol: float, hint: str = "") -> None:
        """Raise :class:`ReproductionError` if the leaf values recomputed from all partitions differ
        from the stored ones by more than ``rtol`` (relative)."""
        with self._partitions_named():
            self.head.engine.check_reproduction(rtol, hint)

    def check_base_estimate(self, hint: str = "") -> None:
        """Raise :class:`ReproductionError` if the base margin the booster's rule estimates from all
        partitions' labels and weights is not the stored one (as
        :meth:`InfluenceEngine.check_base_estimate`, on the whole set's sums)."""
        with self._partitions_named():
            self.head.engine.check_base_estimate(hint)

    @contextlib.contextmanager
    def _partitions_named(self) -> Iterator[None]:
        """A :class:`ReproductionError` raised inside, with the partitions and rows appended."""
        try:
            yield
        except ReproductionError as exc:
            raise ReproductionError(
                f"{exc} (Dask: {len(self.chunks)} partitions, {self.n_rows} rows.)") from None

    # ------------------------------------------------------------------------------------------
    # Scores.

    def leaf_influence(
        self, test: TestPoints, rows: ArrayLike | None = None, update_set: UpdateSet = "all_points",
        k: int | None = None, on: str = "loss", aggregate: str | None = None, refit_base: bool = True,
        output: int | None = None, batch_size: int = 64, progress: Progress = None,
    ) -> Any:
        """LeafInfluence of training rows: ``all_points`` exactly by the distributed reverse sweep
        (every row; ``rows`` selects from it), ``single_point`` by forward mode on each row's own
        partition (any rows), ``top_k_leaves`` by forward mode with the update set's margin
        changes reduced per tree, as :meth:`leaf_refit` runs its data-wide update sets (``rows``
        required).

        Parameters
        ----------
        test : TestPoints
            Test points by their leaves (in memory: trees x test points).
        rows : array-like of int or bool mask of shape (n,), optional
            Training rows to score (positions in the training set, in this order); default all.
        update_set, k : as :meth:`InfluenceEngine.leaf_influence`.
        on, aggregate, refit_base, output : as :meth:`InfluenceEngine.influence_reverse`.
        batch_size : int
            Most test points swept together (fewer where a partition's adjoints would exceed the
            engine's reverse-mode batch memory); for top_k_leaves, most rows per graph.
        progress : callable, optional
            Called with the number of rows finished after each graph of chosen rows (top_k_leaves,
            LeafRefit's all_points); the lazy results of every row report through Dask's own
            diagnostics instead.

        Returns
        -------
        Every row (``rows`` None): a dask.array.Array of shape (n, m), or (n,) when aggregated,
        chunked by the training set's partitions. Selected rows: an ndarray (len(rows), m) or
        (len(rows),). > 0 = harmful.
        """
        k_ = self.head.update_k(update_set, k)  # top_k_leaves' k, 0 for the others (checked)
        if update_set == "single_point":
            return self._local("leaf_influence", test, rows, on, aggregate, refit_base, output)
        if update_set == "top_k_leaves":
            return self._propagated_scores(test, rows, k_, on, aggregate, refit_base, output, batch_size,
                                           progress, refit=False)
        scores = self._influence_every_row(test, on, aggregate, refit_base, output, batch_size)
        if rows is None:
            return scores
        return np.asarray(scores[resolve_rows(rows, self.n_rows)].compute())

    def leaf_refit(
        self, test: TestPoints, rows: ArrayLike | None = None, update_set: UpdateSet = "all_points",
        k: int | None = None, on: str = "loss", aggregate: str | None = None, refit_base: bool = True,
        output: int | None = None, batch_size: int = 64, progress: Progress = None,
    ) -> Any:
        """LeafRefit scores of training rows (structure fixed, each row deleted in turn).

        ``single_point`` runs on each row's own partition, for any rows (all by default).
        ``all_points`` and ``top_k_leaves`` propagate every changed margin, so each deleted row costs
        a pass over the whole training set per tree: they need ``rows``, and run ``batch_size`` rows
        (fewer where a partition's margin changes would exceed the engine's batch memory) per graph
        of a few small reductions per tree (the leaf sums, and top_k_leaves' leaf ranking).

        Parameters and return as :meth:`leaf_influence`.
        """
        k_ = self.head.update_k(update_set, k)  # top_k_leaves' k, 0 for the others (checked)
        if update_set == "single_point":
            return self._local("leaf_refit", test, rows, on, aggregate, refit_base, output)
        return self._propagated_scores(test, rows, k_, on, aggregate, refit_base, output, batch_size,
                                       progress, refit=True)

    def _by_partition(self, idx: NDArray[np.int64]) -> list[tuple[int, NDArray[np.int64], NDArray[np.int64]]]:
        """(partition, its local rows, their positions in ``idx``) for every partition holding some
        of the training rows ``idx``."""
        owner = np.searchsorted(self.starts, idx, side="right") - 1
        return [(int(p), idx[owner == p] - self.starts[p], np.flatnonzero(owner == p))
                for p in np.unique(owner)]

    def _local(self, method: str, test: TestPoints, rows: ArrayLike | None, on: str,
               aggregate: str | None, refit_base: bool, output: int | None) -> Any:
        """single_point scores, each partition scoring its own rows (see :meth:`leaf_influence`)."""
        from dask import delayed

        check_aggregate(aggregate)  # type: ignore[arg-type]
        m = self.head.test_side(test, on, output)[0].shape[1]  # checks the test set
        kwargs = {"refit_base": refit_base, "on": on, "aggregate": aggregate, "output": output}
        tv = delayed(test, traverse=False)
        return self._rowwise(lambda part, local: delayed(partitioned.local_scores)(part, method, tv, local,
                                                                                   kwargs),
                             () if aggregate else (m,), rows)

    def row_weights(self, rows: ArrayLike | None = None) -> Any:
        """The user's sample weights of the training rows: every row (``rows`` None) as a Dask array
        chunked like the results, else an ndarray of ``rows``' weights in their order."""
        from dask import delayed

        return self._rowwise(lambda part, local: delayed(partitioned.row_weights)(part, local), (), rows)

    def _rowwise(self, task: Any, width: tuple[int, ...], rows: ArrayLike | None) -> Any:
        """Per-row results computed on each row's own partition: ``task(partition, local rows or
        None)`` makes the delayed block, ``width`` is a row's shape. Every row: a Dask array of
        shape (n, *width) chunked by partition; ``rows``: an ndarray (len(rows), *width)."""
        import dask
        import dask.array as da

        if rows is None:
            return da.concatenate([da.from_delayed(task(part, None), shape=(n, *width), dtype=np.float64)
                                   for part, n in zip(self.partitions, self.chunks, strict=True)])
        idx = resolve_rows(rows, self.n_rows)
        located = self._by_partition(idx)
        blocks = dask.compute(*[task(self.partitions[p], local) for p, local, _ in located])
        out = np.empty((idx.size, *width))
        for block, (_, _, where) in zip(blocks, located, strict=True):
            out[where] = block
        return out

    def _influence_every_row(self, test: TestPoints, on: str, aggregate: str | None, refit_base: bool,
                             output: int | None, batch_size: int) -> Any:
        """Exact all_points LeafInfluence of every row by the distributed reverse sweep, a Dask
        array (n, m) or (n,)."""
        import dask.array as da

        check_aggregate(aggregate)  # type: ignore[arg-type]
        head = self.head
        leaves, _, _, _, coef = head.test_side(test, on, output)
        if aggregate is not None:
            per = coef.shape[0] if aggregate == "mean" else 1.0
            c_leaf = head.leaf_coefficients(leaves, coef / per, aggregate=True)
            blocks = self._sweep(c_leaf, coef.sum(axis=0)[None, :] / per, refit_base)
            return da.concatenate([da.from_delayed(b, shape=(n, 1), dtype=np.float64)[:, 0]
                                   for b, n in zip(blocks, self.chunks, strict=True)])
        m = leaves.shape[1]
        fits = int(REVERSE_BATCH_BYTES / (8.0 * max(self.chunks) * (self.ensemble.n_outputs + 1)))
        per_batch = max(1, min(int(batch_size), fits))
        columns = []
        for s in range(0, m, per_batch):
            cols = np.arange(s, min(s + per_batch, m))
            c_leaf = head.leaf_coefficients(leaves[:, cols], coef[cols], aggregate=False)
            blocks = self._sweep(c_leaf, coef[cols], refit_base)
            columns.append([da.from_delayed(b, shape=(n, cols.size), dtype=np.float64)
                            for b, n in zip(blocks, self.chunks, strict=True)])
        if not columns:
            return da.zeros((self.n_rows, 0), chunks=(self.chunks, 0))
        return da.block([list(row) for row in zip(*columns, strict=True)])

    def _graph(self, name: str, dsk: dict[Any, Any], keys: list[str]) -> list[Any]:
        """Delayed objects for ``keys`` of the task dict ``dsk`` (which reads the partitions).

        A graph is written as one dict of tasks (rounds x partitions of them) and wrapped once:
        built call by call with ``dask.delayed``, every call merges the layers of all earlier ones
        (quadratic: 16 s for 30 rounds over 80 partitions, 5.6 minutes when a list argument made
        dask cull the whole history at each call)."""
        from dask.delayed import Delayed
        from dask.highlevelgraph import HighLevelGraph

        graph = HighLevelGraph.from_collections(name, dsk, dependencies=self.partitions)
        return [Delayed(key, graph, layer=name) for key in keys]

    def _sweep(self, c_leaf: NDArray[np.float64], coef_sum: NDArray[np.float64],
               refit_base: bool) -> list[Any]:
        """The graph of one reverse sweep for ``B`` objectives (leaf coefficients (B, n_total), test
        margin coefficients summed (B, K)): one delayed (n_p, B) score block per partition."""
        name = f"influence-sweep-{uuid.uuid4().hex}"
        parts = [p.key for p in self.partitions]
        B = c_leaf.shape[0]
        dsk: dict[Any, Any] = {f"{name}-head": self.head, f"{name}-c": np.ascontiguousarray(c_leaf)}
        states = []
        for i, p in enumerate(parts):
            states.append(f"{name}-start-{i}")
            dsk[states[-1]] = (partitioned.sweep_start, p, B)
        gathered: list[str] = []
        big: Any = np.zeros(B)
        for r in range(self.head.n_rounds - 1, -1, -1):
            adjoints = f"{name}-leaf-{r}"
            dsk[adjoints] = (partitioned.leaf_step, f"{name}-head", r, self.n_rows, f"{name}-c", big,
                             *gathered)
            big = f"{name}-big-{r}"
            dsk[big] = (operator.getitem, adjoints, 2)
            gathered = []
            for i, p in enumerate(parts):
                step = f"{name}-round-{r}-{i}"
                dsk[step] = (partitioned.sweep_round, states[i], p, r, adjoints)
                states[i] = f"{step}-state"
                dsk[states[i]] = (operator.getitem, step, 0)
                gathered.append(f"{step}-gathered")
                dsk[gathered[-1]] = (operator.getitem, step, 1)
        dsk[f"{name}-a0"] = (partitioned.add, *[(partitioned.sweep_margin_adjoints, s) for s in states])
        out = [f"{name}-scores-{i}" for i in range(len(parts))]
        for key, s, p in zip(out, states, parts, strict=True):
            dsk[key] = (partitioned.sweep_scores, s, p, f"{name}-a0", big, coef_sum, refit_base)
        return self._graph(name, dsk, out)

    def _propagated_scores(self, test: TestPoints, rows: ArrayLike | None, k: int, on: str,
                           aggregate: str | None, refit_base: bool, output: int | None,
                           batch_size: int, progress: Progress, refit: bool) -> NDArray[np.float64]:
        """LeafRefit (``refit``) or forward-mode LeafInfluence of the chosen ``rows`` with a
        data-wide update set (all_points: ``k`` = 0, or top_k_leaves), in batches of deleted rows
        (fewer than ``batch_size`` where a partition's margin changes would exceed the engine's
        batch memory), one graph each (:meth:`_propagate`). Returns (len(rows), m) or (len(rows),)."""
        if rows is None:
            what = "LeafRefit" if refit else "LeafInfluence by forward mode"
            raise InputError(
                f"{what} with a data-wide update set follows every row's margin for each scored row, "
                f"a pass over all {self.n_rows} training rows per tree and row: pass training_points "
                "(the rows to score), or use update_set='single_point' (row-local, every row) or "
                "method='leaf_influence' with update_set='all_points' (one sweep for every row).")
        check_aggregate(aggregate)  # type: ignore[arg-type]
        head = self.head
        leaves, f_test, y, column, coef = head.test_side(test, on, output)
        idx = resolve_rows(rows, self.n_rows)
        fits = int(REVERSE_BATCH_BYTES / (8.0 * max(self.chunks) * self.ensemble.n_outputs))
        size = max(1, min(int(batch_size), fits))
        out = []
        for s in range(0, idx.size, size):
            values, base = self._propagate(idx[s : s + size], k, refit_base, refit)
            scores = (head.engine.refit_scores(values, base, leaves, f_test, y, column) if refit
                      else head.engine.forward_scores(values, base, leaves, coef))
            out.append(scores if aggregate is None else getattr(scores, aggregate)(axis=1))
            if progress is not None:
                progress(scores.shape[0])
        if not out:
            return np.empty((0,) if aggregate else (0, leaves.shape[1]))
        return np.concatenate(out, axis=0)

    def _propagate(self, idx: NDArray[np.int64], k: int, refit_base: bool, refit: bool
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """With each of the rows ``idx`` deleted (``refit``): leaf values (B, n_total) and base-margin
        shifts (B, K); else their derivatives in each row's weight. all_points (``k`` = 0) or
        top_k_leaves: the engine's ``refit_one`` / ``forward_one`` split at their reductions, as
        one graph. Per round: each partition moves its rows' margin changes past the previous
        round (and ranks this round's leaves for top_k_leaves: ``select`` adds the ranks up), sums
        its rows in the chosen leaves (``refit_sums`` / ``forward_sums``), and the head turns the
        summed tables into the round's leaf values (``refit_step`` / ``forward_step``)."""
        import dask
        from dask import delayed

        B = idx.size
        base, own = np.zeros((B, self.ensemble.n_outputs)), np.zeros(B)
        located = self._by_partition(idx)
        facts = dask.compute(*[delayed(partitioned.row_facts)(self.partitions[p], local, refit_base, refit)
                               for p, local, _ in located])
        local_rows = np.full((len(self.partitions), B), -1, dtype=np.int64)
        for (p, local, where), (b, o) in zip(located, facts, strict=True):
            base[where], own[where] = b, o
            local_rows[p, where] = local
        if refit:  # the mean weight without each row; the sums, the step
            per_row = (self.weight_sum - own) / (self.n_rows - 1)
            sums, step = partitioned.refit_sums, partitioned.refit_step
        else:  # d (sum of weights) / d v_i / n
            per_row, sums, step = own / self.n_rows, partitioned.forward_sums, partitioned.forward_step

        name = f"influence-propagate-{uuid.uuid4().hex}"
        parts = [p.key for p in self.partitions]
        dsk: dict[Any, Any] = {f"{name}-head": self.head}
        states = []
        for i, p in enumerate(parts):
            states.append(f"{name}-start-{i}")
            dsk[states[-1]] = (partitioned.propagation_start, p, local_rows[i], base)
        values: Any = None
        rounds = []
        for r in range(self.head.n_rounds):
            masses = []
            for i, p in enumerate(parts):
                advance = f"{name}-advance-{r}-{i}"
                dsk[advance] = (partitioned.propagation_advance, states[i], p, r, values, k > 0, refit)
                states[i] = f"{advance}-state"
                dsk[states[i]] = (operator.getitem, advance, 0)
                masses.append(f"{advance}-mass")
                dsk[masses[-1]] = (operator.getitem, advance, 1)
            selection = f"{name}-select-{r}"
            dsk[selection] = (partitioned.select, f"{name}-head", r, k, B, *(masses if k > 0 else []))
            shares = []
            for i, p in enumerate(parts):
                shares.append(f"{name}-sums-{r}-{i}")
                dsk[shares[-1]] = (sums, states[i], p, r, selection)
            values = f"{name}-values-{r}"
            dsk[values] = (step, f"{name}-head", r, per_row, selection, *shares)
            rounds.append(values)
        dsk[f"{name}-all"] = (_stack, *rounds)
        (result,) = dask.compute(self._graph(name, dsk, [f"{name}-all"])[0])
        return np.asarray(result), base


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

    adapter = adapter_for(explainer._inside.booster, explainer.params)
    partitioned.check_library(adapter.library)
    meta = getattr(X, "_meta", None)
    adapter.check_features(meta if isinstance(meta, pd.DataFrame) else X)
    engine = DistributedEngine(adapter, X, y, sample_weight, init_score)
    engine.check_reproduction(rtol=adapter.rtol, hint=f"{adapter.library}: {adapter.hint}")
    engine.check_base_estimate(f"{adapter.library}: {adapter.base_hint}")
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
                    on: str, output: int | None, init_score: Any) -> Any:
    """:meth:`BoostingInfluence.score_training_points` after a Dask ``fit``: every training row, a
    Dask array of shape (n_train, n_test), or (n_train,) when aggregated; ``training_points``
    given, an ndarray (len(training_points), n_test) or (len(training_points),). The test set may
    be in memory or a Dask collection (gathered: it is scored by its leaves)."""
    engine: DistributedEngine = explainer.engine_
    test = explainer._test_points(gather_test(X), gather_test(y), on, gather_test(init_score))
    scorer = engine.leaf_influence if explainer.method == "leaf_influence" else engine.leaf_refit
    total = None if training_points is None else resolve_rows(training_points, engine.n_rows).size
    with tqdm(total=total, disable=not explainer.progress or total is None, unit="row", leave=False,
              desc=f"{explainer.method} ({explainer.update_set}) on Dask") as bar:
        return scorer(test, rows=training_points, update_set=explainer.update_set, k=explainer.k, on=on,
                      aggregate=aggregate, refit_base=explainer.base_score == "refit", output=output,
                      progress=bar.update)
