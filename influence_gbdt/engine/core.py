"""The shared influence engine: LeafRefit, LeafInfluence, their update sets, exact reverse mode.

The engine takes a :class:`~influence_gbdt.ensemble.TreeEnsemble` (the ensemble as seen on its
training set) and knows nothing about any booster. It replays the ensemble once (recomputing every
leaf value, which is the adapters' self-check, and caching each step's per-leaf sums), then
scores training rows against test points given by their leaves.

Sign convention, everywhere: **score > 0 means the training row is harmful** to that test point
(removing or downweighting it lowers that test loss). With ``on="prediction"`` a score > 0 means
the row raises the test margin.

Methods (Sharchilev et al., 2018):

- ``leaf_refit``: ``L(y_j, F(x_j)) - L(y_j, F_without_i(x_j))`` where ``F_without_i`` keeps every
  tree's structure and recomputes the leaf values tree by tree with row ``i`` *deleted* (as
  retraining without it would: the row count, class factors the booster derives from the data, the
  base margin and backtracking decisions follow).
- ``leaf_influence``: ``dL(y_j, F(x_j; v)) / dv_i``, the derivative with respect to the user's
  weight of row ``i`` through the same fixed-structure map (with backtracking, the accepted step
  scales are held: they are piecewise constant in the weights, so this is the derivative almost
  everywhere). With ``update_set="all_points"`` it is computed exactly by reverse mode (one
  backward sweep per objective, O(T n)), otherwise by forward mode (the paper's Algorithm 4).
- Update sets: ``"all_points"``, ``"single_point"`` (U = {i}: only the row's own prediction change
  is propagated, as in the paper's reference code) and ``"top_k_leaves"`` (Eq. 3, plus the row).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numba
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..ensemble import TreeEnsemble, check_weight_sum
from ..errors import InputError, ReproductionError
from . import passes, reverse1, reverse_multi, team
from .base import BaseMargin, products
from .common import ALL, NONE, TOPK, leaf_sums
from .scores import scores_into
from .state import State, build_state, derivative_cache_slots, every_step_cached, sorted_rows

UpdateSet = Literal["all_points", "single_point", "top_k_leaves"]
_Result = TypeVar("_Result")
Objective = Literal["loss", "prediction"]
Aggregate = Literal["mean", "sum"] | None
Progress = Callable[[int], None] | None

_MODES = {"all_points": ALL, "single_point": NONE, "top_k_leaves": TOPK}
#: Memory (bytes) one reverse-mode batch may use for its per-row adjoints.
REVERSE_BATCH_BYTES = 128e6

#: Most relative difference (to ``max(1, |stored|)``) between the base margin the ensemble's rule
#: estimates on its training rows and the stored one (:meth:`InfluenceEngine.check_base_estimate`).
#: The boosters' float32 arithmetic that the rules do not mirror leaves a few float32 steps (measured:
#: 2.4e-7 for XGBoost's weighted multiclass intercept, 1.2e-7 for pseudo-Huber); a base score the
#: booster did not estimate from these rows (other labels, XGBoost's custom objectives, which keep 0.5)
#: differs by far more.
BASE_RTOL = 1e-5

#: Default most memory an engine's derivative cache may take (see :class:`InfluenceEngine`).
DEFAULT_CACHE_BYTES = 1e9
#: Relative reproduction residual above which a group's deletion is measured against the group
#: replay of every row rather than the fit's replay (:meth:`InfluenceEngine.group_refit`): the
#: group replay moves the margins by the leaf values it recomputes, the fit's by the stored ones,
#: so the two differ as much as those do (XGBoost's float32 leaves: ~1e-7). Below it (LightGBM and
#: CatBoost: 1e-16 to 1e-15) they differ by float64 rounding only, and a second replay would
#: double the first call's time (CatBoost's default: ~4 s) for nothing.
GROUP_REFERENCE_ABOVE = 1e-12


@dataclass(frozen=True, eq=False)
class TestPoints:
    """Points to score against, described by their leaves.

    Attributes
    ----------
    leaf_index : ndarray of shape (T, m)
        Leaf of each test point in each tree, numbered like the ensemble's ``leaf_index``.
    offset : ndarray of shape (m,) or (m, K), optional
        Per-point offset of the initial margin (user base margin); default 0.
    y : ndarray of shape (m,), optional
        Labels; required to score the loss, not the prediction.
    """

    __test__ = False  # not a pytest test class, despite the name

    leaf_index: ArrayLike
    offset: ArrayLike | None = None
    y: ArrayLike | None = None


def _team_batches(m: int, per_batch: int) -> list[NDArray[np.int64]]:
    """Test points ``0 .. m - 1`` in consecutive batches of at most ``per_batch``, as few as
    possible, each as wide as a team's sweep runs it (:func:`.reverse1.padded`): 100 points in
    56 + 44 (swept 56 + 48 wide), not 50 + 50 (56 + 56)."""
    size = -(-m // -(-m // per_batch))
    size = min(per_batch, reverse1.padded(size))
    return [np.arange(i, min(m, i + size)) for i in range(0, m, size)]


class InfluenceEngine:
    """Replays a :class:`TreeEnsemble` on its training data and scores training rows.

    Parameters
    ----------
    ensemble : TreeEnsemble
        The description produced by an adapter (or built directly for tests).
    n_threads : int, optional
        Threads (default: numba's thread count, every core unless ``NUMBA_NUM_THREADS`` says
        otherwise): the replay at construction splits its passes over the rows over them (models
        without renewed rounds); scoring splits the test points' batches of reverse mode
        (or one sweep's rows), and the scored rows of LeafRefit and forward mode (fewer of them
        than threads: each row's passes over the rows over a team, :mod:`.pointjobs`). Results do not
        depend on it, bit for bit (each sum is summed in one order whatever the threads). Settable
        after construction, for scoring (``engine.n_threads = 4``; None = the default).
    cache_bytes : float, default 1e9
        Most memory for the derivative cache: the replay keeps what every row's loss derivatives
        come from (its point) at the leaf steps it computes first, as many as fit (16 bytes per
        row and step for log loss, 8 for the other losses), for models whose reverse sweep can
        use them (one output, no renewed leaves, no joint rounds); the sweep recomputes the
        others (one test point's sweep on LightGBM's default, Adult: 0.017 s without the cache,
        0.007 s with it). 0 = never.

    Attributes
    ----------
    ensemble : TreeEnsemble
    leaf_values : ndarray of shape (n_total,)
        Leaf values recomputed from the data, each tree at the margins of the stored earlier trees
        (the self-check); scores are changes relative to them.
    train_margin : ndarray of shape (n,) or (n, K)
        The model's margins on the training rows (from the stored leaf values).
    tree_residual : ndarray of shape (T,)
        max |recomputed - stored| leaf value per tree.
    residual, relative_residual : float
        max of ``tree_residual``, and the same divided by max |stored leaf value|.
    n_steps : ndarray of shape (T,)
        Leaf steps each tree takes (decided by the replay for backtracking trees).
    step_scales : ndarray of shape (T, S)
        The scale each step was accepted at (0 for a step computed but never accepted).
    """

    def __init__(self, ensemble: TreeEnsemble, n_threads: int | None = None,
                 cache_bytes: float = DEFAULT_CACHE_BYTES) -> None:
        self.ensemble = e = ensemble
        if e.n_rows < 1:
            raise InputError("The ensemble needs training rows.")
        self.n_threads = n_threads
        self.cache_bytes = cache_bytes
        self._dfac = self._combined_factor_derivative()
        # Rows sorted by leaf (4 bytes per tree and row) serve LeafRefit, forward mode and renewed
        # leaves only: built when first needed (``_row_state``), except for renewed leaves.
        self._state = build_state(e, group_sums=self._dfac is not None,
                                  cache_slots=derivative_cache_slots(e, cache_bytes),
                                  sort_rows=bool(e.renewed.any()), threads=self.n_threads)
        self._A0 = np.ascontiguousarray(e.init_offset + e.base_margin[None, :])
        self._margin = margin = _replay(self._state, self._A0, self.n_threads)
        self.n_steps: NDArray[np.int64] = self._state.trees.n_steps
        self.step_scales: NDArray[np.float64] = self._state.trees.scales
        self.train_margin: NDArray[np.float64] = margin[:, 0] if e.n_outputs == 1 else margin
        self._set_leaf_values(self._state.sums.values)
        #: :meth:`_group_reference`'s replays, by ``refit_base``.
        self._group_references: dict[bool, tuple[NDArray[np.float64], NDArray[np.float64]]] = {}
        self._group_v = np.bincount(e.weight_group, e.user_weight, e.n_groups).astype(np.float64, copy=False)
        self._base = BaseMargin(e)

    @property
    def n_threads(self) -> int:
        """Threads for scoring (see the class docstring)."""
        return self._n_threads

    @n_threads.setter
    def n_threads(self, value: int | None) -> None:
        self._n_threads = max(1, int(value or numba.get_num_threads()))

    @property
    def cached_steps(self) -> tuple[int, int]:
        """(leaf steps whose row derivatives the replay kept for the reverse sweep, leaf steps in
        all; the trees of a round step together): all of them when they fit in ``cache_bytes``;
        (0, steps) for models the cache does not serve."""
        st = self._state
        return int(st.cache.der_used[0]), int(st.trees.n_steps[st.lay.round_ptr[:-1]].sum())

    def _set_leaf_values(self, values: NDArray[np.float64]) -> None:
        """Take ``values`` (n_total,) as the recomputed leaf values and measure the residuals. The
        distributed engine (:mod:`influence_gbdt.distributed`) sets those it recomputed from all
        partitions."""
        e = self.ensemble
        self.leaf_values: NDArray[np.float64] = values
        diff = np.abs(values - e.leaf_values)
        self.tree_residual: NDArray[np.float64] = np.maximum.reduceat(diff, e.leaf_offset[:-1])
        self.residual = float(diff.max())
        scale = float(np.abs(e.leaf_values).max())
        self.relative_residual = self.residual / scale if scale > 0 else self.residual

    def adopt_whole_set(self, whole: InfluenceEngine, outside: tuple[float, int],
                        base_sums: tuple[NDArray[np.float64], NDArray[np.float64]] | None) -> None:
        """Score this engine's rows as rows of a larger training set (a Dask partition's engine,
        :mod:`influence_gbdt.distributed`): take the per-leaf sums, step derivatives and leaf values
        of ``whole`` (an engine of the same ensemble holding the whole set's sums), the weight sum
        and row count of the rows this engine does not hold, and the whole set's base-margin sums
        (P, Q), each (G, K) (None where the base margin is fixed).

        Valid where the whole set's leaf sums determine every step: one output, fixed step counts,
        no renewed leaves and no class factors computed from the data (the distributed scope).
        Row-local results then equal the whole set's engine's: LeafRefit and LeafInfluence with
        ``update_set="single_point"`` (the row's own change alone is propagated)."""
        src, st = whole._state.sums, self._state
        self._state = st._replace(
            sums=st.sums._replace(G=src.G.copy(), H=src.H.copy(), SDG=src.SDG.copy(), SDH=src.SDH.copy(),
                                  RG=src.RG.copy(), RD=src.RD.copy(), u_before=src.u_before.copy(),
                                  values=src.values.copy()),
            rows=st.rows._replace(outside=np.array([float(outside[0]), float(outside[1])])))
        self._set_leaf_values(whole.leaf_values)
        if self._base.refits:
            if base_sums is None:
                raise ValueError("The base margin is re-estimated from the data: pass the whole set's sums.")
            self._base = BaseMargin(self.ensemble, base_sums)

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

    def check_base_estimate(self, hint: str = "") -> None:
        """Raise :class:`ReproductionError` if the base margin the ensemble's rule estimates on its
        rows (:meth:`.base.BaseMargin.estimate`) is more than :data:`BASE_RTOL` (relative to
        ``max(1, |stored|)``) from the stored one, where the base is re-estimated (``base_rule``
        not "fixed"): ``base_score="refit"`` would start each retrain from the wrong place.
        ``hint``: likely causes, appended to the message."""
        if not self._base.refits:
            return
        stored, estimate = self.ensemble.base_margin, self._base.estimate()
        off = float(np.abs(estimate - stored).max()) / max(1.0, float(np.abs(stored).max()))
        if not off <= BASE_RTOL:
            raise ReproductionError(
                f"The model's base margin {np.round(stored, 8).tolist()} is not the one its booster "
                f"estimates from the labels and weights given ({np.round(estimate, 8).tolist()}; relative "
                f"difference {off:.3g}, tolerance {BASE_RTOL:.0e}). {hint}"
            )

    def predict_margin(self, test: TestPoints) -> NDArray[np.float64]:
        """The engine's margin for each test point, ndarray of shape (m,) (or (m, K))."""
        leaves, offset, _ = self._test_arrays(test, need_y=False)
        return self._squeeze(self._margins(leaves, offset))

    # ------------------------------------------------------------------------------------------
    # Leaf-level results.

    def refit_leaf_values(
        self,
        rows: ArrayLike, update_set: UpdateSet = "all_points",
        k: int | None = None, refit_base: bool = True,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Leaf values recomputed with each of ``rows`` deleted, structure fixed.

        Returns
        -------
        values : ndarray of shape (len(rows), n_total)
        base_margin : ndarray of shape (len(rows),) (or (len(rows), K))
            The initial margin without the row (re-estimated if ``refit_base`` and the ensemble's
            booster would re-estimate it, else the stored one).
        """
        idx = self.resolve_rows(rows)
        mode, kk = self._mode(update_set, k)
        shift = self._base_shift(idx, refit_base)
        values = self._refit(idx, mode, kk, shift)
        return values, self._squeeze(self.ensemble.base_margin[None, :] + shift)

    def leaf_value_derivatives(
        self,
        rows: ArrayLike, update_set: UpdateSet = "all_points",
        k: int | None = None, refit_base: bool = True,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """d leaf value / d v_i for each of ``rows`` by forward mode (paper's Algorithm 4).

        Returns
        -------
        d_values : ndarray of shape (len(rows), n_total)
        d_base : ndarray of shape (len(rows),) (or (len(rows), K))
            Both per unit of the user's sample weight of the row.
        """
        idx = self.resolve_rows(rows)
        mode, kk = self._mode(update_set, k)
        d_base = self._dbase(idx, refit_base)
        return self._forward(idx, mode, kk, d_base), self._squeeze(d_base)

    # ------------------------------------------------------------------------------------------
    # Scores.

    def leaf_refit(
        self,
        test: TestPoints, rows: ArrayLike | None = None,
        update_set: UpdateSet = "all_points",
        k: int | None = None, refit_base: bool = True,
        on: Objective = "loss", aggregate: Aggregate = None,
        chunk_size: int = 64, progress: Progress = None,
        output: int | None = None,
    ) -> NDArray[np.float64]:
        """LeafRefit scores: ``L(F(x_j)) - L(F_without_i(x_j))`` (``on="loss"``) or
        ``F(x_j) - F_without_i(x_j)`` (``on="prediction"``).

        Parameters
        ----------
        test : TestPoints
        rows : array-like of int, optional
            Training rows to delete, one at a time; default all.
        update_set, k : the update set (``k`` leaves for ``"top_k_leaves"``).
        refit_base : bool
            Re-estimate the base margin without the row where the booster would.
        on : {"loss", "prediction"}
        aggregate : {None, "mean", "sum"}
            Combine the scores over test points.
        chunk_size : int
            Rows deleted per batch; memory is O(chunk_size * (n_total + m)).
        progress : callable, optional
            Called with the number of rows finished after each batch.
        output : int, optional
            With ``on="prediction"``: the output (class, target) whose margin is scored; required
            when the model has several outputs.

        Returns
        -------
        ndarray of shape (len(rows), m), or (len(rows),) when aggregated. > 0 = harmful.
        """
        check_aggregate(aggregate)
        leaves, offset, y = self._test_arrays(test, need_y=on == "loss")
        column = self._output(on, output)
        f_test = self._margins(leaves, offset)
        idx = self.resolve_rows(rows)
        mode, kk = self._mode(update_set, k)

        def batch(chunk: NDArray[np.int64], threads: int) -> NDArray[np.float64]:
            shift = self._base_shift(chunk, refit_base)
            new_values = self._refit(chunk, mode, kk, shift, threads)
            return self.refit_scores(new_values, shift, leaves, f_test, y, column)

        return self._chunked(batch, idx, chunk_size, aggregate, progress)

    def group_refit(
        self,
        test: TestPoints, without: TreeEnsemble, refit_base: bool = True,
        on: Objective = "loss", aggregate: Aggregate = None, output: int | None = None,
    ) -> NDArray[np.float64]:
        """LeafRefit of a group of training rows deleted together: ``L(F(x_j)) - L(F_without(x_j))``
        (``on="prediction"``: ``F(x_j) - F_without(x_j)``), every tree's structure kept and its leaf
        values recomputed on the rows that remain, tree by tree at their new margins (as
        ``update_set="all_points"``). The change is measured against the same replay of every row
        where the stored leaf values are further from the recomputed ones than float64 rounding
        (:data:`GROUP_REFERENCE_ABOVE`), so that a group whose deletion changes nothing scores 0.

        Parameters
        ----------
        test : TestPoints
        without : TreeEnsemble
            This ensemble described on the remaining rows (the same trees, read by the same adapter,
            so that the row count and the class factors follow the data as retraining would). Only
            its rows are read: the stored leaf values and base margin are this ensemble's (an
            adapter may derive them from the rows it is given: LightGBM's boost-from-average score,
            folded into its first tree, is unfolded with the labels' mean). Its leaf values are
            replayed from its rows, starting from the base margin re-estimated on them
            (``refit_base``, where the booster estimates one) or the stored one.
        refit_base, on, aggregate, output
            As in :meth:`leaf_refit`.

        Returns
        -------
        ndarray of shape (m,), or (1,) when aggregated. > 0 = the group is harmful.
        """
        check_aggregate(aggregate)
        e = self.ensemble
        if without.n_outputs != e.n_outputs or not np.array_equal(without.n_leaves, e.n_leaves):
            raise InputError("The ensemble without the group must have the same trees as this one.")
        leaves, offset, y = self._test_arrays(test, need_y=on == "loss")
        column = self._output(on, output)
        values, base = self._group_replay(without, refit_base)
        reference, ref_base = self._group_reference(refit_base)
        f_test = self._margins(leaves, offset)
        scores = self.refit_scores(values[None, :], (base - ref_base)[None, :], leaves, f_test, y, column,
                                   reference=reference)
        scores = _aggregated(scores, aggregate)
        return scores if aggregate else scores[0]

    def _group_replay(
        self, rows: TreeEnsemble, refit_base: bool,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The leaf values (n_total,) and base margin (K,) this ensemble's trees take when replayed
        on the rows of ``rows`` (this ensemble described on some of its rows), as in fit except
        that the margins move by the values the replay recomputes (the refitted model's) instead
        of the stored ones: ``stored`` is a read-only view of ``values``, which starts as the
        stored values (a backtracking near-tie, which the fit's replay settles by the stored
        values, then goes the model's way)."""
        e = self.ensemble
        rows = dataclasses.replace(rows, leaf_values=e.leaf_values, base_margin=e.base_margin)
        base = BaseMargin(rows).estimate() if refit_base else e.base_margin
        check_weight_sum(float(rows.sample_weight.sum()))
        st = build_state(rows, group_sums=False, sort_rows=bool(rows.renewed.any()), threads=self.n_threads)
        values = rows.leaf_values.copy()
        moving = values.view()
        moving.setflags(write=False)
        st = st._replace(sums=st.sums._replace(values=values, stored=moving))
        _replay(st, np.ascontiguousarray(rows.init_offset + base[None, :]), self.n_threads)
        return values, base

    def _group_reference(self, refit_base: bool) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """What a group's deletion is measured against, leaf values (n_total,) and base margin (K,):
        the group replay of every row (computed once per ``refit_base``, kept), so that deleting
        rows that change nothing changes no score; the fit's values and the stored base where they
        differ from it by float64 rounding only (:data:`GROUP_REFERENCE_ABOVE`)."""
        if self.relative_residual <= GROUP_REFERENCE_ABOVE:
            return self.leaf_values, self.ensemble.base_margin
        if refit_base not in self._group_references:
            self._group_references[refit_base] = self._group_replay(self.ensemble, refit_base)
        return self._group_references[refit_base]

    def refit_scores(
        self, new_values: NDArray[np.float64], shift: NDArray[np.float64], leaves: NDArray[np.int64],
        f_test: NDArray[np.float64], y: NDArray[np.float64] | None, column: int,
        reference: NDArray[np.float64] | None = None,
    ) -> NDArray[np.float64]:
        """LeafRefit scores (B, m) from the leaf values ``new_values`` (B, n_total) and base shifts
        ``shift`` (B, K) of B deletions, for test points with global leaves ``leaves`` (T, m) and
        margins ``f_test`` (m, K): the loss change (labels ``y``), or minus the margin change of
        output ``column`` (``y`` None), the leaf values' changes taken from ``reference``
        (n_total,) (default: :attr:`leaf_values`). > 0 = harmful."""
        before = self.leaf_values if reference is None else reference
        d_f = leaf_sums(self._state.lay, self.ensemble.n_outputs, new_values - before[None, :], shift, leaves)
        if y is None:
            return -d_f[:, :, column]
        loss = self.ensemble.loss
        new_f = f_test[None, :, :] + d_f
        new_loss = loss.values(np.tile(y, (new_values.shape[0], 1)), new_f.reshape(-1, new_f.shape[2]))
        return loss.values(y, f_test)[None, :] - new_loss.reshape(new_values.shape[0], -1)

    def leaf_influence(
        self,
        test: TestPoints, rows: ArrayLike | None = None,
        update_set: UpdateSet = "all_points",
        k: int | None = None, refit_base: bool = True,
        on: Objective = "loss", aggregate: Aggregate = None,
        chunk_size: int = 64, progress: Progress = None,
        output: int | None = None,
    ) -> NDArray[np.float64]:
        """LeafInfluence scores ``dL(y_j, F(x_j)) / dv_i`` (``on="prediction"``: ``dF(x_j)/dv_i``).

        With ``update_set="all_points"`` the result is exact, by reverse mode (one sweep per test
        point, or one in all when aggregated; see :meth:`influence_reverse`) or, when fewer training
        rows than test points are asked for, by exact forward mode (one sweep per row); see
        :meth:`uses_reverse`. Other update sets use forward mode. Parameters and return as
        :meth:`leaf_refit`; the result is a new array, the caller's to change (``BoostingInfluence``
        scales it in place).
        """
        n_test = np.asarray(test.leaf_index).shape[1]
        if self.uses_reverse(update_set, self.resolve_rows(rows).size, n_test, aggregate):
            return self.influence_reverse(
                test, rows=rows, refit_base=refit_base, on=on, aggregate=aggregate, chunk_size=chunk_size,
                progress=progress, output=output,
            )
        return self.influence_forward(
            test, rows=rows, update_set=update_set, k=k, refit_base=refit_base, on=on,
            aggregate=aggregate, chunk_size=chunk_size, progress=progress, output=output,
        )

    def uses_reverse(self, update_set: UpdateSet, n_rows: int, n_test: int, aggregate: Aggregate) -> bool:
        """Whether :meth:`leaf_influence` runs reverse mode: exact LeafInfluence (``all_points``) costs
        O(T n) per test point (one per aggregate) in reverse mode and O(T n) per training row in
        forward mode, so the mode with fewer sweeps is taken."""
        if _MODES.get(update_set) != ALL:
            return False
        return (1 if aggregate is not None else n_test) <= n_rows

    def influence_forward(
        self,
        test: TestPoints, rows: ArrayLike | None = None,
        update_set: UpdateSet = "all_points",
        k: int | None = None, refit_base: bool = True,
        on: Objective = "loss", aggregate: Aggregate = None,
        chunk_size: int = 64, progress: Progress = None,
        output: int | None = None,
    ) -> NDArray[np.float64]:
        """LeafInfluence by forward mode, one training row at a time (O(T n) per row with
        ``all_points``). Same parameters and return as :meth:`leaf_refit`."""
        check_aggregate(aggregate)
        leaves, offset, y = self._test_arrays(test, need_y=on == "loss")
        coef = self._test_coef(leaves, offset, y, self._output(on, output))
        idx = self.resolve_rows(rows)
        mode, kk = self._mode(update_set, k)

        def batch(chunk: NDArray[np.int64], threads: int) -> NDArray[np.float64]:
            d_base = self._dbase(chunk, refit_base)
            d_values = self._forward(chunk, mode, kk, d_base, threads)
            return self.forward_scores(d_values, d_base, leaves, coef)

        return self._chunked(batch, idx, chunk_size, aggregate, progress)

    def forward_scores(
        self, d_values: NDArray[np.float64], d_base: NDArray[np.float64], leaves: NDArray[np.int64],
        coef: NDArray[np.float64],
    ) -> NDArray[np.float64]:
        """LeafInfluence scores (B, m) from the leaf-value and base-margin derivatives in B rows'
        weights, ``d_values`` (B, n_total) and ``d_base`` (B, K), for test points with global leaves
        ``leaves`` (T, m) and objective coefficients ``coef`` (m, K) (d objective / d margin)."""
        lay = self._state.lay
        return np.einsum("bjc,jc->bj", leaf_sums(lay, self.ensemble.n_outputs, d_values, d_base, leaves),
                         coef)

    def influence_reverse(
        self,
        test: TestPoints, rows: ArrayLike | None = None,
        refit_base: bool = True, on: Objective = "loss",
        aggregate: Aggregate = None,
        chunk_size: int = 64, progress: Progress = None,
        output: int | None = None,
    ) -> NDArray[np.float64]:
        """Exact all_points LeafInfluence of every training row by reverse mode (adjoint).

        One backward sweep over the trees per objective (a test point, or the mean/sum over the
        test set when ``aggregate`` is set), O(T n) each, instead of O(T n) per *training row*;
        a batch of objectives shares one sweep.

        Parameters
        ----------
        chunk_size : int
            Most test points swept together (fewer when the training set is large).
        progress : callable, optional
            Called with the number of test points finished after each batch (all of them at once
            when aggregated).

        Returns
        -------
        ndarray of shape (len(rows), m), or (len(rows),) when aggregated. > 0 = harmful.
        """
        check_aggregate(aggregate)
        leaves, offset, y = self._test_arrays(test, need_y=on == "loss")
        coef = self._test_coef(leaves, offset, y, self._output(on, output))
        idx = self.resolve_rows(rows)
        e = self.ensemble
        d_base = self._dbase_every_row(refit_base)
        if aggregate is not None:
            total_coef = coef.sum(axis=0) / (coef.shape[0] if aggregate == "mean" else 1.0)
            per_point = coef / (coef.shape[0] if aggregate == "mean" else 1.0)
            c_leaf = self._leaf_coefficients(leaves, per_point, aggregate=True)
            scores = np.empty((idx.size, 1))
            self._reverse_scores(c_leaf, total_coef[None, :], d_base, self.n_threads, 1, scores, 0, idx)
            if progress is not None:
                progress(leaves.shape[1])  # every test point is done
            return scores.reshape(-1)
        m = leaves.shape[1]
        fits = int(REVERSE_BATCH_BYTES / (8.0 * e.n_rows * (e.n_outputs + 1)))
        per_batch = max(1, min(int(chunk_size), fits))
        if reverse1.applies(self._state):  # swept padded: the padded width within the limit too
            per_batch = reverse1.widest(min(per_batch, reverse1.batch_width(self._state)))
        out = np.empty((idx.size, m))
        teamed = reverse1.applies(self._state) or reverse_multi.applies(self._state)
        whole_team = teamed and team.n_chunks(e.n_rows) >= self.n_threads
        if whole_team or (m <= per_batch and m < 2 * self.n_threads):
            # One sweep per batch, its rows split over the threads, batches in turn: a row's leaf and
            # derivatives are read once for the whole batch (measured on Adult's LightGBM and XGBoost
            # defaults, 2 threads: 1.15-1.8x faster than concurrent one-thread sweeps for 4-100
            # points, as fast for 200; a 3-class LGBMClassifier(): 10 points 0.58 -> 0.48 s, 100
            # points 3.9 -> 3.8 s). Sweeps without a team (other rules, or fewer chunks of rows than
            # threads) run side by side instead, below.
            chunks = _team_batches(m, per_batch)
            threads, concurrent = self.n_threads, 1
        else:  # equal batches, at least one per thread: 100 points on two threads sweep 50 + 50, not 64 + 36
            n_batches = max(-(-m // per_batch), min(self.n_threads, m))
            chunks, threads = [c for c in np.array_split(np.arange(m), n_batches) if c.size], 1
            concurrent = min(len(chunks), self.n_threads)

        def batch(cols: NDArray[np.int64]) -> NDArray[np.int64]:
            """Scores of the test points ``cols`` (consecutive) into their columns of ``out``."""
            c_leaf = self._leaf_coefficients(leaves[:, cols], coef[cols], aggregate=False)
            self._reverse_scores(c_leaf, coef[cols], d_base, threads, concurrent, out, int(cols[0]), idx)
            return cols

        for cols in map(batch, chunks) if threads > 1 else self._map(batch, chunks):
            if progress is not None:
                progress(cols.size)
        return out

    # ------------------------------------------------------------------------------------------
    # Helpers.

    def _squeeze(self, a: NDArray[np.float64]) -> NDArray[np.float64]:
        return a[..., 0] if self.ensemble.n_outputs == 1 else a

    def _map(self, fn: Callable[[NDArray[np.int64]], _Result],
             chunks: list[NDArray[np.int64]]) -> Iterator[_Result]:
        """``fn`` over ``chunks`` on the engine's threads (the kernels release the GIL), in order."""
        if self.n_threads == 1 or len(chunks) == 1:
            return map(fn, chunks)
        pool = ThreadPoolExecutor(max_workers=self.n_threads)
        results = pool.map(fn, chunks)
        pool.shutdown(wait=False)
        return results

    def _refit(self, idx: NDArray[np.int64], mode: int, k: int, shift: NDArray[np.float64],
               threads: int | None = None) -> NDArray[np.float64]:
        if self.ensemble.n_rows + self._state.rows.outside[1] < 2:
            raise InputError("LeafRefit deletes a training row: the training set needs at least two.")
        fac_new, changed = self._factors_without(idx)
        st = self._row_state()
        groups = (st.lay, st.trees, st.rows, st.loss, st.sums, st.joint, st.renewed, st.backtrack)
        return self._per_point(passes.refit_many, groups, idx, mode, k, (shift, fac_new, changed), False,
                               threads)

    def _forward(self, idx: NDArray[np.int64], mode: int, k: int, d_base: NDArray[np.float64],
                 threads: int | None = None) -> NDArray[np.float64]:
        d_fac, d_sumw = self._factor_derivatives(idx)
        st = self._row_state()
        groups = (st.lay, st.trees, st.rows, st.loss, st.sums, st.joint, st.renewed)
        return self._per_point(passes.forward_many, groups, idx, mode, k, (d_base, d_fac, d_sumw), True,
                               threads)

    def _per_point(
        self, kernel: Callable[..., None], groups: tuple[Any, ...], idx: NDArray[np.int64], mode: int, k: int,
        per_row: tuple[NDArray[Any], ...], forward: bool, threads: int | None,
    ) -> NDArray[np.float64]:
        """(len(idx), n_total) from ``kernel`` (:func:`.passes.refit_many` or, if ``forward``,
        :func:`.passes.forward_many`) given the state ``groups`` it takes, one training point of
        ``idx`` after another, split over ``threads``: contiguous slices of the points, each on a
        team of threads (:func:`.passes.point_team`); ``per_row`` are the arrays whose first axis
        follows ``idx``."""
        A0, n_total = self._A0, int(self._state.lay.leaf_off[-1])

        def part(sl: slice, n_team: int) -> NDArray[np.float64]:
            st = self._state
            n_team = passes.point_team(st, n_team, mode, A0.shape[1], forward)
            jobs = passes.point_work(st, n_team, mode, A0.shape[1], forward)
            out = np.empty((sl.stop - sl.start, n_total))
            team.run(kernel, n_team, *groups, A0, idx[sl], mode, k, *(a[sl] for a in per_row), jobs, out,
                     bar=jobs.bar)
            return out

        return self._split_rows(part, idx.size, threads)

    def _row_state(self) -> State:
        """The state with ``rows_by_leaf`` (sorted on first use; two threads racing sort the same
        rows twice, harmlessly)."""
        st = self._state
        if st.lay.rows_by_leaf.shape[0] == 0 and self.ensemble.n_trees > 0:
            lay = st.lay._replace(rows_by_leaf=sorted_rows(self.ensemble, st.lay.round_ptr, self.n_threads))
            st = self._state = st._replace(lay=lay)
        return st

    def _split_rows(self, fn: Callable[[slice, int], NDArray[np.float64]], n: int,
                    threads: int | None) -> NDArray[np.float64]:
        """Run ``fn(rows, team)`` over contiguous slices of ``n`` rows on up to ``threads`` threads,
        stacked: one slice per thread, or, for fewer rows than threads, one row per slice and the
        threads shared out among them (``team`` threads each)."""
        threads = threads or self.n_threads
        parts = max(1, min(n, threads))
        bounds = np.linspace(0, n, parts + 1).astype(int)
        slices = [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        if parts == 1:
            return fn(slices[0], threads)
        with ThreadPoolExecutor(max_workers=parts) as pool:
            return np.concatenate(list(pool.map(fn, slices, [threads // parts] * parts)), axis=0)

    def _chunked(
        self,
        batch: Callable[[NDArray[np.int64], int], NDArray[np.float64]],
        idx: NDArray[np.int64], chunk_size: int,
        aggregate: Aggregate, progress: Progress,
    ) -> NDArray[np.float64]:
        """Run ``batch(rows, threads)`` over chunks of training rows on the engine's threads,
        aggregating over test points if asked. Chunks hold at most ``chunk_size`` rows, fewer where
        that leaves a thread without a chunk (64 rows on 16 threads: 16 chunks of 4, not one of
        64); with fewer rows than threads, each chunk (one row) gets its share of the threads. Each
        row's scores are computed on their own, so the chunking does not change them."""
        size = max(1, min(int(chunk_size), -(-idx.size // self.n_threads)))
        chunks = [idx[s : s + size] for s in range(0, idx.size, size)]
        threads = max(1, self.n_threads // max(1, len(chunks)))
        parts = []
        for scores in self._map(lambda chunk: batch(chunk, threads), chunks):
            scores = _aggregated(scores, aggregate)
            parts.append(scores)
            if progress is not None:
                progress(scores.shape[0])
        if not parts:
            return np.empty((0,) if aggregate else (0, 0))
        return np.concatenate(parts, axis=0)

    def _reverse_scores(
        self, c_leaf: NDArray[np.float64], coef_sum: NDArray[np.float64], d_base: NDArray[np.float64],
        team: int, concurrent: int, out: NDArray[np.float64], col0: int, rows: NDArray[np.int64],
    ) -> None:
        """Scores per unit of user weight (> 0 = harmful) of training rows ``rows`` (m,) into
        ``out[:, col0 : col0 + B]`` (``out`` (m, ...)), for B objectives whose leaf coefficients
        are ``c_leaf`` (B, n_total) and whose test margins' derivative summed over their test
        points is ``coef_sum`` (B, K) (the base margin's direct channel); one sweep, its rows
        split over ``team`` threads where the model's sweep can split them (the scores' formula
        too), while ``concurrent`` such sweeps run at once."""
        e = self.ensemble
        st = self._state
        B = c_leaf.shape[0]
        if reverse1.applies(st):
            w_rows, a0_bar, big_w_bar = reverse1.reverse(st, self._margin, c_leaf, team, concurrent)
        elif reverse_multi.applies(st):
            w_rows, a0_bar, big_w_bar = reverse_multi.reverse(st, self._margin, c_leaf, team)
        else:
            w_bar, a0_bar, big_w_bar = passes.reverse(st.lay, st.trees, st.rows, st.loss, st.sums, st.cache,
                                                      st.renewed, self._margin, np.ascontiguousarray(c_leaf),
                                                      every_step_cached(st))
            w_rows = np.ascontiguousarray(w_bar.T)
        scores_into(out, col0, rows, w_rows, big_w_bar, a0_bar + coef_sum, d_base, e.weight_factor, team)
        if self._dfac is not None:
            gamma = np.stack([np.bincount(e.weight_group, e.user_weight * wb, e.n_groups)
                              for wb in w_rows[:, :B].T])
            groups = products(gamma + big_w_bar[:, None] * self._group_v[None, :], self._dfac)
            out[:, col0 : col0 + B] += groups[:, rows].T

    def _leaf_coefficients(
        self, leaves: NDArray[np.int64], coef: NDArray[np.float64], aggregate: bool
    ) -> NDArray[np.float64]:
        """d objective / d leaf value: (1, n_total) for the aggregate of all test points, else
        (m, n_total), one row per test point. ``coef`` (m, K) = d objective / d test margin."""
        e = self.ensemble
        per_tree = coef[:, e.tree_output].T  # (T, m): each tree's output's coefficient
        if aggregate:
            return np.bincount(leaves.ravel(), per_tree.ravel(), e.n_total_leaves).astype(np.float64)[None, :]
        m = leaves.shape[1]
        # Each (point, leaf) cell gets one tree's coefficient (a leaf is one tree's): np.add.at's
        # values, about 10x sooner.
        flat = (np.arange(m)[None, :] * e.n_total_leaves + leaves).ravel()
        out = np.bincount(flat, per_tree.ravel(), m * e.n_total_leaves).astype(np.float64, copy=False)
        return out.reshape(m, e.n_total_leaves)

    def _margins(self, leaves: NDArray[np.int64], offset: NDArray[np.float64]) -> NDArray[np.float64]:
        """Test margins (m, K) of points with global leaves ``leaves`` (T, m), from the stored leaf
        values: the model as the booster predicts with it."""
        e = self.ensemble
        return leaf_sums(self._state.lay, e.n_outputs, e.leaf_values[None, :], e.base_margin[None, :],
                         leaves)[0] + offset

    def _test_coef(
        self, leaves: NDArray[np.int64], offset: NDArray[np.float64], y: NDArray[np.float64] | None,
        column: int,
    ) -> NDArray[np.float64]:
        """dObjective/dF per test point, (m, K): L'(y, F) for the loss, the unit vector of output
        ``column`` for the prediction."""
        if y is None:
            coef = np.zeros((leaves.shape[1], self.ensemble.n_outputs))
            coef[:, column] = 1.0
            return coef
        return self.ensemble.loss.gradients(y, self._margins(leaves, offset))

    def _output(self, on: str, output: int | None) -> int:
        """The output scored with ``on="prediction"`` (0 for single-output models)."""
        K = self.ensemble.n_outputs
        if on != "prediction" or (output is None and K == 1):
            return 0
        if output is None:
            raise InputError(
                f"The model has {K} outputs (classes or targets): scoring the prediction needs the "
                "output to score, e.g. output=0."
            )
        if not (isinstance(output, int | np.integer) and 0 <= int(output) < K):
            raise InputError(f"output must be an integer in 0 .. {K - 1}, got {output!r}.")
        return int(output)

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
        K_ = e.n_outputs
        offset = np.zeros((m, K_)) if test.offset is None else np.asarray(test.offset, dtype=np.float64)
        if offset.shape == (m,) and K_ == 1:
            offset = offset[:, None]
        if offset.shape != (m, K_):
            raise InputError(f"Test offset must have shape ({m},) or ({m}, {K_}), got {offset.shape}.")
        if not need_y:
            return leaves, offset, None
        if test.y is None:
            raise InputError("Scoring the loss needs test labels y; use on='prediction' without labels.")
        y = e.loss.as_labels(test.y, "test labels")
        if y.shape[0] != m:
            raise InputError(f"Test labels must have one row per test point ({m}), got {y.shape[0]}.")
        return leaves, offset, y

    def row_weights(self, rows: ArrayLike | None = None) -> NDArray[np.float64]:
        """The user's sample weight of each of ``rows`` (default all), ndarray of shape (len(rows),):
        what turns a LeafInfluence score per unit of weight into the first-order effect of removing
        the row."""
        return self.ensemble.user_weight[self.resolve_rows(rows)]

    def resolve_rows(self, rows: ArrayLike | None) -> NDArray[np.int64]:
        """Training-row indices from None (all), integer indices or a boolean mask of shape (n,)."""
        return resolve_rows(rows, self.ensemble.n_rows)

    def _mode(self, update_set: str, k: int | None) -> tuple[int, int]:
        if update_set not in _MODES:
            raise InputError(f"update_set must be one of {sorted(_MODES)}, got {update_set!r}.")
        mode = _MODES[update_set]
        if mode == TOPK:
            if k is None or int(k) < 1:
                raise InputError("update_set='top_k_leaves' needs k >= 1 (leaves updated per tree).")
            return mode, int(min(k, np.iinfo(np.int32).max))
        return mode, 0

    # -- class factors and the base margin ------------------------------------------------------

    def _factors_without(self, idx: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """Dataset and objective factors with each row of ``idx`` deleted, (B, 2, G), and whether
        they changed, (B,)."""
        e = self.ensemble
        new = np.empty((idx.size, 2, e.n_groups))
        for k, (table, now) in enumerate(((e.dataset_factor_without, e.dataset_factor),
                                          (e.objective_factor_without, e.objective_factor))):
            new[:, k] = now[None, :] if table is None else table[idx]
        now_both = np.stack([e.dataset_factor, e.objective_factor])
        return new, np.any(new != now_both[None], axis=(1, 2))

    def _combined_factor_derivative(self) -> NDArray[np.float64] | None:
        """d (dataset factor * objective factor) / d v_i, (n, G), or None when zero."""
        e = self.ensemble
        if e.dataset_factor_derivative is None and e.objective_factor_derivative is None:
            return None
        out = np.zeros((e.n_rows, e.n_groups))
        if e.dataset_factor_derivative is not None:
            out += e.dataset_factor_derivative * e.objective_factor[None, :]
        if e.objective_factor_derivative is not None:
            out += e.objective_factor_derivative * e.dataset_factor[None, :]
        return out

    def _factor_derivatives(self, idx: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """d (combined factors) / d v_i (B, G) and d (sum of effective weights) / d v_i (B,)."""
        e = self.ensemble
        own = e.weight_factor[idx]
        if self._dfac is None:
            return np.zeros((idx.size, e.n_groups)), own
        d_fac = np.ascontiguousarray(self._dfac[idx])
        # Summed over the groups in order (a BLAS product sums in another order for one row than
        # for several: a row's score would then depend on the rows deleted with it).
        return d_fac, own + products(d_fac, self._group_v[None, :])[:, 0]

    def _base_shift(self, idx: NDArray[np.int64], refit_base: bool) -> NDArray[np.float64]:
        """New minus old base margin with each row of ``idx`` deleted, shape (B, K)."""
        if not refit_base:
            return np.zeros((idx.size, self.ensemble.n_outputs))
        return self._base.shift_without(idx)

    def _dbase(self, idx: NDArray[np.int64], refit_base: bool) -> NDArray[np.float64]:
        """d base margin / d v_i for each row of ``idx``, shape (B, K)."""
        return self._dbase_every_row(refit_base)[idx]

    def _dbase_every_row(self, refit_base: bool) -> NDArray[np.float64]:
        if not refit_base:
            return np.zeros((self.ensemble.n_rows, self.ensemble.n_outputs))
        return self._base.derivative()


def _replay(st: State, A0: NDArray[np.float64], n_threads: int) -> NDArray[np.float64]:
    """Run :func:`.passes.replay` on ``st`` from the initial margins ``A0`` (n, K) on up to
    ``n_threads`` threads; the final margins (n, K). The leaf values land in ``st.sums.values``."""
    margin = A0.copy()
    n_team = passes.replay_team(st, n_threads)
    work = passes.replay_work(st, n_team)
    scratch = passes.replay_scratch(st, n_team)
    team.run(passes.replay, n_team, *st, margin, work, scratch, bar=work.bar)
    return margin


def _aggregated(scores: NDArray[np.float64], aggregate: Aggregate) -> NDArray[np.float64]:
    """Scores (B, m) of B training rows (or groups) over m test points, or their mean or sum over
    the test points, (B,)."""
    if aggregate == "mean":
        return scores.mean(axis=1)
    if aggregate == "sum":
        return scores.sum(axis=1)
    return scores


def check_aggregate(aggregate: Aggregate) -> None:
    if aggregate not in (None, "mean", "sum"):
        raise InputError(f"aggregate must be None, 'mean' or 'sum', got {aggregate!r}.")


def resolve_rows(rows: ArrayLike | None, n: int) -> NDArray[np.int64]:
    """Indices into ``n`` training rows from None (all), integer indices (negative from the end)
    or a boolean mask of shape (n,)."""
    if rows is None:
        return np.arange(n, dtype=np.int64)
    idx = np.asarray(rows)
    if idx.dtype == np.bool_:
        if idx.shape != (n,):
            raise InputError(f"A boolean row mask must have shape ({n},), got {idx.shape}.")
        return np.flatnonzero(idx).astype(np.int64)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise InputError("Training rows must be a 1-d array of integer indices or a boolean mask.")
    idx = idx.astype(np.int64)  # a new array: the caller's stays as it was
    if idx.size:
        lo, hi = idx.min(), idx.max()
        if lo < -n or hi >= n:
            raise InputError(f"Training row index out of range for {n} training rows.")
        if lo < 0:  # (the common case, indices from 0, skips this pass and its temporaries)
            idx[idx < 0] += n
    return idx
