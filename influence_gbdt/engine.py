"""The shared influence engine: LeafRefit, LeafInfluence, their update sets, exact reverse mode.

The engine takes a :class:`~influence_gbdt.ensemble.TreeEnsemble` (the ensemble as seen on its
training set) and knows nothing about any booster. It replays the ensemble once (recomputing every
leaf value, which is the adapters' self-check, and caching each step's loss point and per-leaf
sums), then scores training rows against test points given by their leaves.

Sign convention, everywhere: **score > 0 means the training row is harmful** to that test point
(removing or downweighting it lowers that test loss). With ``on="prediction"`` a score > 0 means
the row raises the test margin.

Methods (Sharchilev et al., 2018):

- ``leaf_refit``: ``L(y_j, F(x_j)) - L(y_j, F_without_i(x_j))`` where ``F_without_i`` keeps every
  tree's structure and recomputes leaf values tree by tree with row ``i``'s weight set to 0.
- ``leaf_influence``: ``dL(y_j, F(x_j; w)) / dw_i`` through the same fixed-structure map.
  With ``update_set="all_points"`` it is computed exactly by reverse mode (one backward sweep per
  objective, O(T n)), otherwise by forward mode (the paper's Algorithm 4) with the update set.
- Update sets: ``"all_points"``, ``"single_point"`` (U = empty) and ``"top_k_leaves"`` (Eq. 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _kernels as K
from .ensemble import TreeEnsemble
from .errors import InputError, ReproductionError
from .losses import LOSS_CODES, constant_from_mean, derivatives, point
from .losses import gradients as loss_gradients
from .losses import values as loss_values

UpdateSet = Literal["all_points", "single_point", "top_k_leaves"]
Objective = Literal["loss", "prediction"]
Aggregate = Literal["mean", "sum"] | None
Progress = Callable[[int], None] | None

_MODES = {"all_points": K.ALL, "single_point": K.NONE, "top_k_leaves": K.TOPK}


@dataclass(frozen=True, eq=False)
class TestPoints:
    """Points to score against, described by their leaves.

    Attributes
    ----------
    leaf_index : ndarray of shape (T, m)
        Leaf of each test point in each tree, numbered like the ensemble's ``leaf_index``.
    offset : ndarray of shape (m,), optional
        Per-point offset of the initial margin (user base margin); default 0.
    y : ndarray of shape (m,), optional
        Labels; required to score the loss, not the prediction.
    """

    __test__ = False  # not a pytest test class, despite the name

    leaf_index: ArrayLike
    offset: ArrayLike | None = None
    y: ArrayLike | None = None


class InfluenceEngine:
    """Replays a :class:`TreeEnsemble` on its training data and scores training rows.

    Parameters
    ----------
    ensemble : TreeEnsemble
        The description produced by an adapter (or built directly for tests).

    Attributes
    ----------
    ensemble : TreeEnsemble
    leaf_values : ndarray of shape (n_total,)
        Leaf values recomputed from the data (the engine's model uses these, not the stored ones).
    train_margin : ndarray of shape (n,)
        The recomputed model's margins on the training rows.
    tree_residual : ndarray of shape (T,)
        max |recomputed - stored| leaf value per tree.
    residual, relative_residual : float
        max of ``tree_residual``, and the same divided by max |stored leaf value|.
    """

    def __init__(self, ensemble: TreeEnsemble) -> None:
        self.ensemble = ensemble
        e = ensemble
        self._loss = LOSS_CODES[e.loss]
        self._tables = _build_tables(e, self._loss)
        a0 = e.init_offset + e.base_margin
        values, margin = K.replay(self._tables, a0)
        self.leaf_values: NDArray[np.float64] = values
        self.train_margin: NDArray[np.float64] = margin
        diff = np.abs(values - e.leaf_values)
        self.tree_residual: NDArray[np.float64] = np.maximum.reduceat(diff, e.leaf_offset[:-1])
        self.residual = float(diff.max())
        scale = float(np.abs(e.leaf_values).max())
        self.relative_residual = self.residual / scale if scale > 0 else self.residual
        # d base margin / d w_i (effective weight) when it is re-estimated: implicit function
        # theorem on sum_j w_j g(y_j, b) = 0  ->  db/dw_i = -g(y_i, b) / sum_j w_j h(y_j, b).
        zb = point(self._loss, e.base_margin)
        g_b = np.array([derivatives(self._loss, yi, zb, 0.0)[0] for yi in (0.0, 1.0)])
        h_b = derivatives(self._loss, 0.0, zb, 0.0)[1]
        g_rows = g_b[0] + (g_b[1] - g_b[0]) * e.y  # g is affine in y for both losses
        self._dbase_dw = -g_rows / float(np.dot(e.sample_weight, np.full(e.n_rows, h_b)))

    # ------------------------------------------------------------------------------------------
    # Self-check and predictions.

    def check_reproduction(self, rtol: float, hint: str = "") -> None:
        """Raise :class:`ReproductionError` if ``relative_residual > rtol``.

        Parameters
        ----------
        rtol : float
            Tolerance on max |recomputed - stored| / max |stored| leaf value.
        hint : str
            Likely causes, appended to the message.
        """
        if not self.relative_residual <= rtol:
            worst = int(np.argmax(self.tree_residual))
            raise ReproductionError(
                f"The model is not reproduced from the data given: recomputed leaf values differ from "
                f"the stored ones by {self.relative_residual:.3g} (relative; tolerance {rtol:.1g}), "
                f"worst in tree {worst}. "
                f"{hint}"
            )

    def predict_margin(self, test: TestPoints) -> NDArray[np.float64]:
        """The engine's margin for each test point, ndarray of shape (m,)."""
        leaves, offset, _ = self._test_arrays(test, need_y=False)
        return self._margin(leaves, offset)

    # ------------------------------------------------------------------------------------------
    # Leaf-level results.

    def refit_leaf_values(
        self,
        rows: ArrayLike,
        update_set: UpdateSet = "all_points",
        k: int | None = None,
        refit_base: bool = True,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Leaf values recomputed without each of ``rows`` (weight set to 0), structure fixed.

        Returns
        -------
        values : ndarray of shape (len(rows), n_total)
        base_margin : ndarray of shape (len(rows),)
            The initial margin without the row (re-estimated if ``refit_base`` and the ensemble's
            booster would re-estimate it, else the stored one).
        """
        idx = self.resolve_rows(rows)
        mode, kk = self._mode(update_set, k)
        shift = self._base_shift(idx, refit_base)
        values = K.refit_many(self._tables, idx, mode, kk, shift)
        return values, self.ensemble.base_margin + shift

    def leaf_value_derivatives(
        self,
        rows: ArrayLike,
        update_set: UpdateSet = "all_points",
        k: int | None = None,
        refit_base: bool = True,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """d leaf value / d w_i for each of ``rows`` by forward mode (paper's Algorithm 4).

        Returns
        -------
        d_values : ndarray of shape (len(rows), n_total)
        d_base : ndarray of shape (len(rows),)
            Both per unit of the user's sample weight of the row.
        """
        idx = self.resolve_rows(rows)
        mode, kk = self._mode(update_set, k)
        d_base = self._dbase(idx, refit_base)
        d_values = K.forward_many(self._tables, idx, mode, kk, d_base)
        scale = self.ensemble.weight_scale[idx]
        return d_values * scale[:, None], d_base * scale

    # ------------------------------------------------------------------------------------------
    # Scores.

    def leaf_refit(
        self,
        test: TestPoints,
        rows: ArrayLike | None = None,
        update_set: UpdateSet = "all_points",
        k: int | None = None,
        refit_base: bool = True,
        on: Objective = "loss",
        aggregate: Aggregate = None,
        chunk_size: int = 64,
        progress: Progress = None,
    ) -> NDArray[np.float64]:
        """LeafRefit scores: ``L(F(x_j)) - L(F_without_i(x_j))`` (``on="loss"``) or
        ``F(x_j) - F_without_i(x_j)`` (``on="prediction"``).

        Parameters
        ----------
        test : TestPoints
        rows : array-like of int, optional
            Training rows to remove, one at a time; default all.
        update_set, k : the update set (``k`` leaves for ``"top_k_leaves"``).
        refit_base : bool
            Re-estimate the base margin without the row where the booster would.
        on : {"loss", "prediction"}
        aggregate : {None, "mean", "sum"}
            Combine the scores over test points.
        chunk_size : int
            Rows removed per batch; memory is O(chunk_size * (n_total + m)).
        progress : callable, optional
            Called with the number of rows finished after each batch.

        Returns
        -------
        ndarray of shape (len(rows), m), or (len(rows),) when aggregated. > 0 = harmful.
        """
        leaves, offset, y = self._test_arrays(test, need_y=on == "loss")
        f_test = self._margin(leaves, offset)
        loss_test = None if y is None else loss_values(self._loss, y, f_test)
        idx = self.resolve_rows(rows)
        mode, kk = self._mode(update_set, k)

        def batch(chunk: NDArray[np.int64]) -> NDArray[np.float64]:
            shift = self._base_shift(chunk, refit_base)
            new_values = K.refit_many(self._tables, chunk, mode, kk, shift)
            d_f = K.leaf_sums(new_values - self.leaf_values, shift, leaves)
            if y is None or loss_test is None:
                return -d_f
            new_f = f_test[None, :] + d_f
            new_loss = loss_values(self._loss, np.broadcast_to(y, new_f.shape).ravel(), new_f.ravel())
            return loss_test[None, :] - new_loss.reshape(new_f.shape)

        return _chunked(batch, idx, chunk_size, aggregate, progress)

    def leaf_influence(
        self,
        test: TestPoints,
        rows: ArrayLike | None = None,
        update_set: UpdateSet = "all_points",
        k: int | None = None,
        refit_base: bool = True,
        on: Objective = "loss",
        aggregate: Aggregate = None,
        chunk_size: int = 64,
        progress: Progress = None,
    ) -> NDArray[np.float64]:
        """LeafInfluence scores ``dL(y_j, F(x_j)) / dw_i`` (``on="prediction"``: ``dF(x_j)/dw_i``).

        With ``update_set="all_points"`` the result is exact, by reverse mode (one sweep per test
        point, or one in all when aggregated; see :meth:`influence_reverse`) or, when fewer training
        rows than test points are asked for, by exact forward mode (one sweep per row); see
        :meth:`uses_reverse`. Other update sets use forward mode. Parameters and return as
        :meth:`leaf_refit`.
        """
        n_test = np.asarray(test.leaf_index).shape[1]
        if self.uses_reverse(update_set, self.resolve_rows(rows).size, n_test, aggregate):
            return self.influence_reverse(
                test, rows=rows, refit_base=refit_base, on=on, aggregate=aggregate,
                chunk_size=chunk_size, progress=progress,
            )
        return self.influence_forward(
            test, rows=rows, update_set=update_set, k=k, refit_base=refit_base, on=on,
            aggregate=aggregate, chunk_size=chunk_size, progress=progress,
        )

    def uses_reverse(self, update_set: UpdateSet, n_rows: int, n_test: int, aggregate: Aggregate) -> bool:
        """Whether :meth:`leaf_influence` runs reverse mode: exact LeafInfluence (``all_points``) costs
        O(T n) per test point (one per aggregate) in reverse mode and O(T n) per training row in
        forward mode, so the mode with fewer sweeps is taken."""
        if _MODES.get(update_set) != K.ALL:
            return False
        return (1 if aggregate is not None else n_test) <= n_rows

    def influence_forward(
        self,
        test: TestPoints,
        rows: ArrayLike | None = None,
        update_set: UpdateSet = "all_points",
        k: int | None = None,
        refit_base: bool = True,
        on: Objective = "loss",
        aggregate: Aggregate = None,
        chunk_size: int = 64,
        progress: Progress = None,
    ) -> NDArray[np.float64]:
        """LeafInfluence by forward mode, one training row at a time (O(T n) per row with
        ``all_points``). Same parameters and return as :meth:`leaf_refit`."""
        leaves, offset, y = self._test_arrays(test, need_y=on == "loss")
        coef = self._test_coef(leaves, offset, y)
        idx = self.resolve_rows(rows)

        def batch(chunk: NDArray[np.int64]) -> NDArray[np.float64]:
            d_values, d_base = self.leaf_value_derivatives(chunk, update_set, k, refit_base)
            return K.leaf_sums(d_values, d_base, leaves) * coef[None, :]

        return _chunked(batch, idx, chunk_size, aggregate, progress)

    def influence_reverse(
        self,
        test: TestPoints,
        rows: ArrayLike | None = None,
        refit_base: bool = True,
        on: Objective = "loss",
        aggregate: Aggregate = None,
        chunk_size: int = 256,
        progress: Progress = None,
    ) -> NDArray[np.float64]:
        """Exact all_points LeafInfluence of every training row by reverse mode (adjoint).

        One backward sweep over the trees per objective (a test point, or the mean/sum over the
        test set when ``aggregate`` is set), O(T n) each, instead of O(T n) per *training row*.

        Parameters
        ----------
        chunk_size : int
            Test points swept together; memory is O(chunk_size * n).
        progress : callable, optional
            Called with the number of test points finished after each batch.

        Returns
        -------
        ndarray of shape (len(rows), m), or (len(rows),) when aggregated. > 0 = harmful.
        """
        leaves, offset, y = self._test_arrays(test, need_y=on == "loss")
        coef = self._test_coef(leaves, offset, y)
        idx = self.resolve_rows(rows)
        e = self.ensemble
        d_base = self._dbase(np.arange(e.n_rows), refit_base)
        if aggregate is not None:
            if aggregate == "mean":
                coef = coef / coef.size
            c_leaf = np.bincount(leaves.ravel(), weights=np.tile(coef, leaves.shape[0]),
                                 minlength=e.n_total_leaves).astype(np.float64, copy=False)
            w_bar, a0_bar = K.reverse_one(self._tables, c_leaf)
            total = (w_bar + (a0_bar + coef.sum()) * d_base) * e.weight_scale
            if progress is not None:
                progress(leaves.shape[1])
            return total[idx]
        out = np.empty((idx.size, leaves.shape[1]))
        for start in range(0, leaves.shape[1], chunk_size):
            sl = slice(start, start + chunk_size)
            w_bars, a0_bars = K.reverse_many(self._tables, np.ascontiguousarray(leaves[:, sl]), coef[sl])
            block = w_bars + (a0_bars + coef[sl])[:, None] * d_base[None, :]
            out[:, sl] = (block * e.weight_scale[None, :]).T[idx]
            if progress is not None:
                progress(block.shape[0])
        return out

    # ------------------------------------------------------------------------------------------
    # Helpers.

    def _margin(self, leaves: NDArray[np.int64], offset: NDArray[np.float64]) -> NDArray[np.float64]:
        one = np.zeros(1)
        return K.leaf_sums(self.leaf_values[None, :], one + self.ensemble.base_margin, leaves)[0] + offset

    def _test_coef(
        self, leaves: NDArray[np.int64], offset: NDArray[np.float64], y: NDArray[np.float64] | None
    ) -> NDArray[np.float64]:
        """dObjective/dF per test point: L'(y, F) for the loss, 1 for the prediction."""
        if y is None:
            return np.ones(leaves.shape[1])
        return loss_gradients(self._loss, y, self._margin(leaves, offset))

    def _test_arrays(
        self, test: TestPoints, need_y: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64] | None]:
        e = self.ensemble
        local = np.asarray(test.leaf_index)
        if local.ndim != 2 or local.shape[0] != e.n_trees:
            raise InputError(
                f"Test leaf indices must have shape ({e.n_trees}, n_points), got {local.shape}."
            )
        if local.size and (local.min() < 0 or np.any(local.max(axis=1) >= e.n_leaves)):
            raise InputError("Test leaf indices hold a leaf number outside a tree's leaves.")
        m = local.shape[1]
        leaves = np.ascontiguousarray(local.astype(np.int64) + e.leaf_offset[:-1, None])
        offset = np.zeros(m) if test.offset is None else np.asarray(test.offset, dtype=np.float64)
        if offset.shape != (m,):
            raise InputError(f"Test offset must have shape ({m},), got {offset.shape}.")
        if not need_y:
            return leaves, offset, None
        if test.y is None:
            raise InputError("Scoring the loss needs test labels y; use on='prediction' without labels.")
        y = np.asarray(test.y, dtype=np.float64)
        if y.shape != (m,):
            raise InputError(f"Test labels must have shape ({m},), got {y.shape}.")
        if not np.all(np.isfinite(y)):
            raise InputError("Test labels contain NaN or infinite values.")
        if e.loss == "logloss" and (y.min() < 0 or y.max() > 1):
            raise InputError("Test labels for a binary classifier must lie in [0, 1].")
        return leaves, offset, y

    def resolve_rows(self, rows: ArrayLike | None) -> NDArray[np.int64]:
        """Training-row indices from None (all), integer indices or a boolean mask of shape (n,)."""
        n = self.ensemble.n_rows
        if rows is None:
            return np.arange(n, dtype=np.int64)
        idx = np.asarray(rows)
        if idx.dtype == np.bool_:
            if idx.shape != (n,):
                raise InputError(f"A boolean row mask must have shape ({n},), got {idx.shape}.")
            return np.flatnonzero(idx).astype(np.int64)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise InputError("Training rows must be a 1-d array of integer indices or a boolean mask.")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise InputError(f"Training row index out of range for {n} training rows.")
        return np.where(idx < 0, idx + n, idx)

    def _mode(self, update_set: str, k: int | None) -> tuple[int, int]:
        if update_set not in _MODES:
            raise InputError(f"update_set must be one of {sorted(_MODES)}, got {update_set!r}.")
        mode = _MODES[update_set]
        if mode == K.TOPK:
            if k is None or int(k) < 1:
                raise InputError("update_set='top_k_leaves' needs k >= 1 (leaves updated per tree).")
            return mode, int(k)
        return mode, 0

    def _refits_base(self, refit_base: bool) -> bool:
        return bool(refit_base and self.ensemble.base_margin_refit)

    def _base_shift(self, idx: NDArray[np.int64], refit_base: bool) -> NDArray[np.float64]:
        """New minus old base margin with each row's weight set to 0."""
        if not self._refits_base(refit_base):
            return np.zeros(idx.size)
        e = self.ensemble
        # New minus *stored* margin: a retrained booster stores its new constant rounded as the
        # old one was (CatBoost: float32), so this matches true retraining to one rounding.
        return _constant_without(self._loss, e.y, e.sample_weight, idx) - e.base_margin

    def _dbase(self, idx: NDArray[np.int64], refit_base: bool) -> NDArray[np.float64]:
        if not self._refits_base(refit_base):
            return np.zeros(idx.size)
        return self._dbase_dw[idx]


def _constant_without(
    loss: int, y: NDArray[np.float64], w: NDArray[np.float64], idx: NDArray[np.int64]
) -> NDArray[np.float64]:
    """:func:`~influence_gbdt.losses.optimal_constant` with each row of ``idx`` (B,) in turn given
    weight 0, vectorized; returns shape (B,)."""
    return constant_from_mean(loss, (np.dot(w, y) - w[idx] * y[idx]) / (w.sum() - w[idx]))


def _chunked(
    batch: Callable[[NDArray[np.int64]], NDArray[np.float64]],
    idx: NDArray[np.int64],
    chunk_size: int,
    aggregate: Aggregate,
    progress: Progress,
) -> NDArray[np.float64]:
    """Run ``batch`` over chunks of training rows, aggregating over test points if asked."""
    if aggregate not in (None, "mean", "sum"):
        raise InputError(f"aggregate must be None, 'mean' or 'sum', got {aggregate!r}.")
    parts = []
    for start in range(0, idx.size, max(int(chunk_size), 1)):
        scores = batch(idx[start : start + chunk_size])
        if aggregate == "mean":
            scores = scores.mean(axis=1)
        elif aggregate == "sum":
            scores = scores.sum(axis=1)
        parts.append(scores)
        if progress is not None:
            progress(scores.shape[0])
    if not parts:
        return np.empty((0,) if aggregate else (0, 0))
    return np.concatenate(parts, axis=0)


def _build_tables(e: TreeEnsemble, loss: int) -> K.Tables:
    """Flatten the description into the kernels' layout and allocate the replay caches."""
    T, n = e.n_trees, e.n_rows
    step_ptr = np.zeros(T + 1, dtype=np.int64)
    np.cumsum(e.n_steps, out=step_ptr[1:])
    leaves_per_step = np.repeat(e.n_leaves, e.n_steps)
    sl_off = np.zeros(step_ptr[-1] + 1, dtype=np.int64)
    np.cumsum(leaves_per_step, out=sl_off[1:])
    n_sl = int(sl_off[-1])
    rows_by_leaf = np.argsort(e.leaf_index, axis=1, kind="stable").astype(np.int32)
    global_leaf = e.leaf_index.astype(np.int64) + e.leaf_offset[:-1, None]
    leaf_count = np.bincount(global_leaf.ravel(), minlength=e.n_total_leaves).astype(np.int64)
    first_global = np.zeros(e.n_total_leaves + 1, dtype=np.int64)
    np.cumsum(leaf_count, out=first_global[1:])
    # Position of each leaf's first row inside its own tree's row of rows_by_leaf.
    leaf_first = first_global[:-1] - np.repeat(np.arange(T, dtype=np.int64) * n, e.n_leaves)
    return K.Tables(
        leaf=e.leaf_index, leaf_off=e.leaf_offset, newton=e.newton, lr=e.learning_rate, l1=e.l1,
        mds=e.max_delta_step, l2=e.l2, l2pw=e.l2_per_weight_sum, n_steps=e.n_steps,
        scales=e.step_scales, step_ptr=step_ptr, sl_off=sl_off, rows_by_leaf=rows_by_leaf,
        leaf_first=leaf_first, leaf_count=leaf_count, y=e.y, w=e.sample_weight, loss=loss,
        floor=e.hessian_floor, f32=e.float32_gradients, values=np.empty(e.n_total_leaves),
        margin_before=np.empty((T, n)),
        Z=np.empty((int(step_ptr[-1]), n)), u_before=np.empty(n_sl), G=np.empty(n_sl),
        H=np.empty(n_sl), SWH=np.empty(n_sl), SWK=np.empty(n_sl), RG=np.empty(n_sl),
        RD=np.empty(n_sl),
    )
