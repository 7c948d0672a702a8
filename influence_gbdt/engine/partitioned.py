"""The engine over a training set split in partitions: what :mod:`influence_gbdt.distributed` runs
on each Dask partition (on its worker) and on the client's head engine. Public through the
engine's door (``from influence_gbdt.engine import partitioned``).

A :class:`Partition` holds an :class:`~influence_gbdt.engine.InfluenceEngine` on the partition's
rows: its replay sums the rows per leaf (the client adds the partitions' sums up), and once it has
adopted the whole set's sums (:func:`adopt`) it scores its own rows as the whole set's engine would
where a row's result depends on its own row only (``single_point``). The other per-partition
functions are the row halves of the exact reverse sweep and of LeafRefit with an update set of
many rows; the leaf halves (:func:`leaf_step`, :func:`select`, :func:`refit_step`,
:func:`forward_step`) run on the :class:`Head`, an engine holding the whole set's sums.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..ensemble import TreeEnsemble, check_weight_sum
from ..errors import UnsupportedModelError
from ..losses import grad_hess
from .base import BaseMargin
from .common import add_leaf_mass, add_round, mark_top, round_sizes, step_point
from .core import InfluenceEngine, TestPoints
from .plain import (
    add_row_share,
    gather_adjoints,
    leaf_adjoints,
    refit_round_steps,
    refit_round_sums,
    replay_steps,
    row_adjoints,
)
from .scores import scores_into
from .state import Layout, LossSpec, Rows, Sums, Trees
from .state import State as EngineState

#: Libraries whose adapters the distributed engine runs.
LIBRARIES = ("xgboost", "lightgbm")

State = list[Any]  # a round's per-partition arrays (see the functions that start one)


def check_library(library: str) -> None:
    """Refuse a library whose models the distributed engine does not run."""
    if library not in LIBRARIES:
        raise UnsupportedModelError(
            f"Influence on Dask supports {' and '.join(LIBRARIES)} models, not {library}: gather the "
            "training set on one machine and use the in-memory path."
        )


def check_scope(e: TreeEnsemble, library: str) -> None:
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


class Partition:
    """One partition on its worker: the adapter's description of its rows and an engine on them
    (one thread: Dask runs the partitions in parallel).

    Parameters
    ----------
    adapter : BoosterAdapter
    X, y, weight, init_score : the partition's rows
    label_mean : float, optional
        The whole set's weighted label mean, where the adapter's base margin depends on it
        (LightGBM's boost_from_average).
    """

    def __init__(self, adapter: Any, X: Any, y: Any, weight: Any, init_score: Any,
                 label_mean: float | None) -> None:
        extra = {} if label_mean is None else {"label_mean": label_mean}
        e = adapter.describe(X, y, weight, init_score, **extra)
        check_scope(e, adapter.library)
        self.ensemble = e
        self.engine = InfluenceEngine(e, n_threads=1, cache_bytes=0)
        self.n_rows = e.n_rows

    @classmethod
    def describe(cls, adapter: Any, X: Any, y: Any, weight: Any, init_score: Any,
                 label_mean: float | None) -> Partition | None:
        """The partition, or None when it has no rows (a filtered Dask DataFrame's partitions may
        be empty; the client leaves those out)."""
        if X.shape[0] == 0:
            return None
        return cls(adapter, X, y, weight, init_score, label_mean)

    @property
    def state(self) -> EngineState:
        return self.engine._state

    @property
    def margin(self) -> NDArray[np.float64]:
        """Final training margins of the partition's rows, (n_p, K)."""
        return self.engine._margin

    def summary(self) -> dict[str, Any]:
        """The small per-partition results the client reduces (one value per leaf, per output):
        its rows' leaf sums (before :func:`adopt`), weight sum, row count and base-margin sums per
        weight group (G, K)."""
        e, st = self.ensemble, self.state
        base = BaseMargin(e)
        empty = np.zeros((e.n_groups, e.n_outputs))
        P, Q = base.sums if base.refits else (empty, empty)
        return {"G": st.sums.G.copy(), "H": st.sums.H.copy(), "sum_w": float(st.rows.w.sum()), "n": e.n_rows,
                "P": P, "Q": Q}

    def header(self) -> TreeEnsemble:
        """The description of the partition's first two rows (the client's head engine)."""
        two = slice(0, 2)
        e = self.ensemble
        return replace(e, leaf_index=e.leaf_index[:, two], y=e.y[two], user_weight=e.user_weight[two],
                       weight_group=e.weight_group[two], init_offset=e.init_offset[two],
                       objective_order=np.arange(2))


def summarize(part: Partition | None) -> dict[str, Any]:
    """:meth:`Partition.summary`; ``{"n": 0}`` for an empty partition."""
    return {"n": 0} if part is None else part.summary()


def label_mean_sums(adapter: Any, X: Any, y: Any, weight: Any, init_score: Any) -> NDArray[np.float64]:
    """(sum d y, sum d) of a partition: the pieces of the whole set's weighted label mean."""
    if X.shape[0] == 0:
        return np.zeros(2)
    e = adapter.describe(X, y, weight, init_score)
    check_scope(e, adapter.library)  # before the sums, which a quantile base does not have
    base = BaseMargin(e)
    if not base.refits:
        return np.zeros(2)
    P, Q = base.sums
    return np.array([P.sum(), Q.sum()])


def adopt(part: Partition, head: InfluenceEngine, outside: tuple[float, int],
          base_sums: tuple[NDArray[np.float64], NDArray[np.float64]] | None) -> Partition:
    """The partition after its engine took the whole set's sums (a task of its own, so that a
    partition Dask recomputes on a lost worker adopts them again)."""
    part.engine.adopt_whole_set(head, outside, base_sums)
    return part


# ----------------------------------------------------------------------------------------------
# Row-local scores (after adopt).


def row_weights(part: Partition, rows: NDArray[np.int64] | None) -> NDArray[np.float64]:
    """The user's sample weights of the partition's ``rows`` (local positions; None: all)."""
    return part.engine.row_weights(rows)


def local_scores(part: Partition, method: str, test: TestPoints, rows: NDArray[np.int64] | None,
                 kwargs: dict[str, Any]) -> NDArray[np.float64]:
    """``single_point`` scores of the partition's ``rows`` (local indices; None = all), (r, m) or
    (r,) when aggregated, by its engine: LeafRefit, or LeafInfluence by forward mode."""
    engine = part.engine
    scorer = engine.leaf_refit if method == "leaf_refit" else engine.influence_forward
    return scorer(test, rows=rows, update_set="single_point", **kwargs)


def row_facts(part: Partition, rows: NDArray[np.int64], refit_base: bool, refit: bool
              ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Of the partition's ``rows`` (local indices), for LeafRefit (``refit``): the base margin's
    shift when each is deleted (r, K) and their effective weights (r,); for LeafInfluence: the base
    margin's derivative in each row's weight (r, K) and that of the sum of weights (r,)."""
    engine = part.engine
    if refit:
        return engine._base_shift(rows, refit_base), engine._state.rows.w[rows].copy()
    return engine._dbase(rows, refit_base), engine._factor_derivatives(rows)[1]


# ----------------------------------------------------------------------------------------------
# The exact reverse sweep (LeafInfluence, all_points): the partition's half of each round.


def sweep_start(part: Partition, B: int) -> State:
    """A sweep's state on a partition: margins (copy), margin adjoints (B, n_p, K), weight adjoints
    (B, n_p)."""
    n, K = part.margin.shape
    return [part.margin.copy(), np.zeros((B, n, K)), np.zeros((B, n))]


def sweep_round(state: State, part: Partition, r: int,
                adjoints: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]
                ) -> tuple[State, NDArray[np.float64]]:
    """Round ``r`` of the sweep on a partition's rows (in place: each state feeds one task), and
    the partition's per-leaf adjoint sums for round ``r - 1``, (B, leaves of that round)."""
    A, a_bar, w_bar = state
    g_bar, d_bar, _ = adjoints
    st = part.state
    add_round(st.lay, r, A, st.sums.stored, -1.0)
    row_adjoints(st.lay, st.trees, st.rows, st.loss, st.sums, r, 0, A, g_bar, d_bar, a_bar, w_bar)
    return state, _gathered(st.lay, r - 1, a_bar)


def _gathered(lay: Layout, r: int, a_bar: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-leaf sums of the margin adjoints for round ``r``, (B, leaves of the round); empty
    before round 0."""
    if r < 0:
        return np.zeros((a_bar.shape[0], 0))
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    out = np.zeros((a_bar.shape[0], int(lay.leaf_off[t1] - lay.leaf_off[t0])))
    gather_adjoints(lay, r, a_bar, out)
    return out


def sweep_margin_adjoints(state: State) -> NDArray[np.float64]:
    """The partition's sum of its rows' initial-margin adjoints, (B, K)."""
    return np.asarray(state[1].sum(axis=1))


def sweep_scores(state: State, part: Partition, a0_bar: NDArray[np.float64],
                 big_w_bar: NDArray[np.float64], coef_sum: NDArray[np.float64], refit_base: bool
                 ) -> NDArray[np.float64]:
    """Scores of the partition's rows, (n_p, B): per unit of user weight, > 0 = harmful (as
    :meth:`InfluenceEngine._reverse_scores`, without data-dependent class factors)."""
    _, _, w_bar = state
    e = part.ensemble
    d_base = part.engine._dbase_every_row(refit_base)
    out = np.empty((w_bar.shape[1], w_bar.shape[0]))
    scores_into(out, 0, np.arange(w_bar.shape[1]), np.ascontiguousarray(w_bar.T), big_w_bar,
                a0_bar + coef_sum, d_base, e.weight_factor, part.engine.n_threads)
    return out


# ----------------------------------------------------------------------------------------------
# LeafRefit, or forward-mode LeafInfluence, of B rows with an update set of many rows (all_points,
# top_k_leaves): the partition's half of each round. The state is the partition's margins entering
# the round (n_p, K), each row's change of them so far (B, n_p, K) (LeafRefit: the change with the
# row deleted; forward mode: the derivative in its weight) and the rows (local index, -1 where the
# row lives in another partition).


def propagation_start(part: Partition, rows: NDArray[np.int64], initial: NDArray[np.float64]) -> State:
    """The state before round 0 for ``rows``: every margin changes by the base margin's change
    ``initial`` (B, K)."""
    n, K = part.engine._A0.shape
    change = np.empty((rows.size, n, K))
    change[:] = initial[:, None, :]
    return [part.engine._A0.copy(), change, rows.astype(np.int64)]


def propagation_advance(state: State, part: Partition, r: int, values: NDArray[np.float64] | None,
                        mass: bool, refit: bool) -> tuple[State, NDArray[np.float64]]:
    """Move the state past round ``r - 1``, whose leaf values with each row deleted (``refit``), or
    their derivatives, are ``values`` (B, leaves of that round; None before round 0), and, if
    ``mass``, each round-``r`` leaf's sum of |margin change| over the partition's rows (B, leaves
    of round ``r``) that top_k_leaves ranks leaves by."""
    A, change, _ = state
    st = part.state
    lay = st.lay
    if values is not None:
        prev = r - 1
        rl0, rl1 = lay.leaf_off[lay.round_ptr[prev]], lay.leaf_off[lay.round_ptr[prev + 1]]
        diff = np.zeros(lay.leaf_off[-1])
        for b in range(change.shape[0]):
            diff[rl0:rl1] = values[b] - st.sums.values[rl0:rl1] if refit else values[b]
            add_round(lay, prev, change[b], diff, 1.0)
        add_round(lay, prev, A, st.sums.stored, 1.0)
    if not mass:
        return state, np.zeros((change.shape[0], 0))
    out = np.zeros((change.shape[0],
                    int(lay.leaf_off[lay.round_ptr[r + 1]] - lay.leaf_off[lay.round_ptr[r]])))
    _leaf_mass(lay, r, change, out)
    return state, out


@numba.njit(cache=True, nogil=True)
def _leaf_mass(lay: Layout, r: int, change: NDArray[np.float64], out: NDArray[np.float64]) -> None:
    """``out[b, leaf - round's first leaf] = sum over the leaf's rows of sum_c |change[b, j, c]|``
    for the trees of round ``r`` (the ranking of :func:`.common.select_leaves`)."""
    rl0 = lay.leaf_off[lay.round_ptr[r]]
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        lo, hi = lay.leaf_off[t] - rl0, lay.leaf_off[t + 1] - rl0
        for b in range(change.shape[0]):
            add_leaf_mass(lay, t, change[b], out[b, lo:hi])


def refit_sums(state: State, part: Partition, r: int,
               selection: tuple[NDArray[np.bool_], NDArray[np.bool_]]) -> NDArray[np.float64]:
    """The partition's share of round ``r``'s leaf sums with each row deleted, (B, 2, leaves of the
    round) (sum w g, sum w h): over its rows at their changed margins in the leaves the update set
    selects (``selection``: (B, leaves) chosen, (B,) every leaf), minus the deleted row's original
    share in the others, whose whole-set sums the client adds."""
    st = part.engine._row_state()
    zero = st._replace(sums=st.sums._replace(G=np.zeros_like(st.sums.G), H=np.zeros_like(st.sums.H)))
    return _shares(_refit_sums, zero, state, r, selection)


def _shares(kernel: Any, st: EngineState, state: State, r: int,
            selection: tuple[NDArray[np.bool_], NDArray[np.bool_]]) -> NDArray[np.float64]:
    """Run the per-round ``kernel`` (``_refit_sums`` or ``_forward_sums``) on a state: the
    partition's shares (B, 2, leaves of round ``r``)."""
    A, change, rows = state
    chosen, every = selection
    lay = st.lay
    rl0, rl1 = lay.leaf_off[lay.round_ptr[r]], lay.leaf_off[lay.round_ptr[r + 1]]
    out = np.empty((change.shape[0], 2, rl1 - rl0))
    kernel(lay, st.trees, st.rows, st.loss, st.sums, r, A, change, rows, chosen, every, out)
    return out


@numba.njit(cache=True, nogil=True)
def _refit_sums(lay: Layout, trees: Trees, rw: Rows, loss: LossSpec, sums: Sums, r: int,
                A: NDArray[np.float64],
                change: NDArray[np.float64], rows: NDArray[np.int64], chosen: NDArray[np.bool_],
                every: NDArray[np.bool_], out: NDArray[np.float64]) -> None:
    """:func:`refit_sums` for a state whose cached sums are zero."""
    n_total = lay.leaf_off[-1]
    rl0, rl1 = lay.leaf_off[lay.round_ptr[r]], lay.leaf_off[lay.round_ptr[r + 1]]
    K = A.shape[1]
    most_leaves, _ = round_sizes(lay)
    Gs, Hs = np.empty(most_leaves), np.empty(most_leaves)
    HXs = np.empty((0, K))
    scratch = np.empty((4, max(K, loss.zsize)))
    u = np.zeros(n_total)
    sel = np.zeros(n_total, dtype=np.bool_)
    for b in range(rows.shape[0]):
        sel[rl0:rl1] = chosen[b]
        refit_round_sums(lay, trees, rw, loss, sums, None, r, 0, A, change[b], u, rw.w, sel, every[b], False,
                         rows[b], Gs, Hs, HXs, scratch, u[:0], False, None)
        out[b, 0, :] = Gs[: rl1 - rl0]
        out[b, 1, :] = Hs[: rl1 - rl0]


def forward_sums(state: State, part: Partition, r: int,
                 selection: tuple[NDArray[np.bool_], NDArray[np.bool_]]) -> NDArray[np.float64]:
    """The partition's share of the derivatives of round ``r``'s leaf sums in the weight of each of B
    rows, (B, 2, leaves of the round) (d sum w g, d sum w h): its rows' margin derivatives in the
    leaves the update set chooses (``selection``: (B, leaves), (B,) every leaf), the row's own
    where not chosen, and the row's own weight's share (forward mode's ``forward_one`` per round)."""
    return _shares(_forward_sums, part.engine._row_state(), state, r, selection)


@numba.njit(cache=True, nogil=True)
def _forward_sums(lay: Layout, trees: Trees, rw: Rows, loss: LossSpec, sums: Sums, r: int,
                  A: NDArray[np.float64], J: NDArray[np.float64], rows: NDArray[np.int64],
                  chosen: NDArray[np.bool_], every: NDArray[np.bool_], out: NDArray[np.float64]) -> None:
    """:func:`forward_sums` (one-step trees without joint rounds: the distributed scope)."""
    K = A.shape[1]
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rl0, rl1 = lay.leaf_off[t0], lay.leaf_off[t1]
    most_leaves, _ = round_sizes(lay)
    dG, dD = np.empty(most_leaves), np.empty(most_leaves)
    scratch = np.empty((4, max(K, loss.zsize)))
    mrow, z, g, h = np.empty(K), np.empty(loss.zsize), np.empty(K), np.empty(K)
    for b in range(rows.shape[0]):
        i0 = rows[b]
        dG[:] = 0.0
        dD[:] = 0.0
        if every[b]:
            for j in range(A.shape[0]):
                add_row_share(lay, trees, rw, loss, sums.u_before, r, 0, A, j, J[b, j], -1, dG, dD, scratch)
        else:
            for t in range(t0, t1):
                for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
                    if chosen[b, gl - rl0]:
                        first = lay.leaf_first[gl]
                        for q in range(first, first + lay.leaf_count[gl]):
                            j = lay.rows_by_leaf[t, q]
                            add_row_share(lay, trees, rw, loss, sums.u_before, r, 0, A, j, J[b, j], t, dG, dD,
                                          scratch)
                if i0 >= 0 and not chosen[b, lay.leaf_off[t] + lay.leaf[t, i0] - rl0]:  # its own change
                    add_row_share(lay, trees, rw, loss, sums.u_before, r, 0, A, i0, J[b, i0], t, dG, dD,
                                  scratch)
        if i0 >= 0:  # the row's own weight
            step_point(lay, loss, sums.u_before, r, 0, A, i0, mrow, z)
            grad_hess(loss.code, loss.prm, rw.y[i0], z, g, h)
            s_i0 = rw.dfac[rw.grp[i0]] * rw.ofac[rw.grp[i0]]
            for t in range(t0, t1):
                x = lay.leaf_off[t] + lay.leaf[t, i0] - rl0
                dG[x] += s_i0 * g[lay.out[t]]
                dD[x] += s_i0 * (h[lay.out[t]] if trees.newton[t] else 1.0)
        out[b, 0, :] = dG[: rl1 - rl0]
        out[b, 1, :] = dD[: rl1 - rl0]


# ----------------------------------------------------------------------------------------------
# The head: an engine holding the whole set's sums, and the leaf-level halves of the rounds
# (small: one value per leaf; any worker).


class Head:
    """The client's engine over the whole partitioned training set: the description of two of its
    rows with the whole set's leaf sums, leaf values, step derivatives and base-margin sums. It
    describes the test side (leaves, margins, objective coefficients) and runs the leaf-level
    halves of the rounds.

    Parameters
    ----------
    header : TreeEnsemble
        The description of two training rows (:meth:`Partition.header`).
    summaries : list of dict
        Every non-empty partition's :meth:`Partition.summary`.
    """

    def __init__(self, header: TreeEnsemble, summaries: list[dict[str, Any]]) -> None:
        self.engine = engine = InfluenceEngine(header, n_threads=1, cache_bytes=0)
        self.n_rows = int(sum(int(s["n"]) for s in summaries))
        self.weight_sum = float(sum(s["sum_w"] for s in summaries))
        check_weight_sum(self.weight_sum)
        st = engine._state
        st.sums.G[:] = add(*[s["G"] for s in summaries])
        st.sums.H[:] = add(*[s["H"] for s in summaries])
        _leaf_values_from_sums(st.lay, st.trees, st.sums, self.weight_sum / self.n_rows)
        engine._set_leaf_values(st.sums.values.copy())
        self.base_sums: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
        if engine._base.refits:
            self.base_sums = (add(*[s["P"] for s in summaries]), add(*[s["Q"] for s in summaries]))
            engine._base = BaseMargin(engine.ensemble, self.base_sums)

    @property
    def n_rounds(self) -> int:
        return int(self.engine._state.lay.round_ptr.shape[0]) - 1

    def update_k(self, update_set: str, k: int | None) -> int:
        """top_k_leaves' ``k`` (0 for the other update sets), checked as the engine checks it."""
        return self.engine._mode(update_set, k)[1]

    def test_side(self, test: TestPoints, on: str, output: int | None
                  ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64] | None, int,
                             NDArray[np.float64]]:
        """The test points checked and described: global leaves (T, m), test margins (m, K), labels
        (None for the prediction), the scored output and d objective / d margin (m, K)."""
        engine = self.engine
        leaves, offset, y = engine._test_arrays(test, need_y=on == "loss")
        column = engine._output(on, output)
        coef = engine._test_coef(leaves, offset, y, column)
        return leaves, engine._margins(leaves, offset), y, column, coef

    def leaf_coefficients(self, leaves: NDArray[np.int64], coef: NDArray[np.float64],
                          aggregate: bool) -> NDArray[np.float64]:
        """d objective / d leaf value (see :meth:`InfluenceEngine.refit_scores`)."""
        return self.engine._leaf_coefficients(leaves, coef, aggregate)


def add(*parts: NDArray[np.float64]) -> NDArray[np.float64]:
    """The partitions' arrays summed in order; all must have one shape (never broadcast: a
    partition whose arrays had another shape would be added into every row)."""
    if any(p.shape != parts[0].shape for p in parts):
        raise ValueError(f"Partition sums of different shapes: {sorted({p.shape for p in parts})}.")
    return np.asarray(sum(parts[1:], parts[0]))


@numba.njit(cache=True, nogil=True)
def _leaf_values_from_sums(lay: Layout, trees: Trees, sums: Sums, mean_w: float) -> None:
    """Leaf values ``sums.values`` (and the steps' derivatives ``RG``, ``RD``) of one-step trees
    from the whole training set's sums ``G``, ``H``; ``mean_w`` = sum of weights / n."""
    u = np.zeros(lay.leaf_off[-1])
    most_leaves, _ = round_sizes(lay)
    d = np.empty(most_leaves)
    for r in range(lay.round_ptr.shape[0] - 1):
        replay_steps(lay, trees, sums, r, 0, mean_w, u, d)
        rl0 = lay.leaf_off[lay.round_ptr[r]]
        for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
            for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
                sums.values[gl] = trees.lr[t] * trees.scales[t, 0] * d[gl - rl0]


def leaf_step(head: Head, r: int, n: int, c_leaf: NDArray[np.float64], big_w_bar: NDArray[np.float64],
              *parts: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                                    NDArray[np.float64]]:
    """Round ``r``'s leaf-level backward step: the objectives' leaf coefficients ``c_leaf`` (B, n_total)
    plus the partitions' per-leaf adjoint sums -> the sums' adjoints (g_bar, d_bar) and the l2
    term's running adjoint."""
    st = head.engine._state
    lay = st.lay
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rl0, rl1 = lay.leaf_off[t0], lay.leaf_off[t1]
    u_bar = np.ascontiguousarray(c_leaf[:, rl0:rl1]) + sum(parts, np.zeros((c_leaf.shape[0], rl1 - rl0)))
    g_bar, d_bar, big = np.zeros_like(u_bar), np.zeros_like(u_bar), big_w_bar.copy()
    leaf_adjoints(lay, st.trees, st.sums, r, n, u_bar, g_bar, d_bar, big, False)
    return g_bar, d_bar, big


def select(head: Head, r: int, k: int, B: int, *masses: NDArray[np.float64]
           ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """The update set of round ``r`` for B deletions: top_k_leaves (``k`` > 0) keeps, per tree, the
    ``k`` leaves whose rows' margins changed most (the partitions' ``masses`` (B, leaves) added up;
    ties: lower leaf first), all_points (``k`` = 0) every leaf. Returns (chosen (B, leaves of the
    round), every (B,): all leaves of the round chosen), as :func:`.common.select_leaves` decides
    them."""
    lay = head.engine._state.lay
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rl0 = lay.leaf_off[t0]
    chosen = np.ones((B, int(lay.leaf_off[t1] - rl0)), dtype=bool)
    if k == 0:
        return chosen, np.ones(B, dtype=bool)
    mass = add(*masses)
    every = True
    for t in range(t0, t1):
        lo, hi = lay.leaf_off[t] - rl0, lay.leaf_off[t + 1] - rl0
        if k >= hi - lo:
            continue
        every = False
        chosen[:, lo:hi] = False
        for b in range(B):  # as select_leaves ranks them, on the summed masses
            mark_top(mass[b, lo:hi], k, chosen[b, lo:hi])
    return chosen, np.full(B, every)


def _round_leaves(lay: Layout, r: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """For the leaves of round ``r`` (one-step trees), in order: their tree, and their step-leaf
    slot (index into ``G``, ``H``, ``RG``, ``RD``)."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    tree = np.repeat(np.arange(t0, t1), np.diff(lay.leaf_off[t0 : t1 + 1]))
    leaf = np.arange(lay.leaf_off[t0], lay.leaf_off[t1])
    return tree, lay.sl_off[lay.step_ptr[tree]] + leaf - lay.leaf_off[tree]


def refit_step(head: Head, r: int, facts: NDArray[np.float64],
               selection: tuple[NDArray[np.bool_], NDArray[np.bool_]], *parts: NDArray[np.float64]
               ) -> NDArray[np.float64]:
    """Round ``r``'s leaf values with each of B rows deleted, (B, leaves of the round): the
    partitions' sums (B, 2, leaves) plus the whole set's cached sums of the leaves the update set
    leaves alone, through the step (``facts`` (B,): the mean weight without each row)."""
    st = head.engine._state
    tree, slots = _round_leaves(st.lay, r)
    chosen, every = selection
    clean = ~(chosen | every[:, None])
    total = add(*parts)
    G = np.where(clean, st.sums.G[slots][None, :], 0.0) + total[:, 0]
    H = np.where(clean, st.sums.H[slots][None, :], 0.0) + total[:, 1]
    d = np.empty(tree.size)
    out = np.empty_like(G)
    for b in range(G.shape[0]):
        refit_round_steps(st.lay, st.trees, r, G[b], H[b], float(facts[b]), d)
        out[b] = st.trees.lr[tree] * (st.trees.scales[tree, 0] * d)  # as refit_one: lr * (0 + scale * d)
    return out


def forward_step(head: Head, r: int, facts: NDArray[np.float64],
                 selection: tuple[NDArray[np.bool_], NDArray[np.bool_]], *parts: NDArray[np.float64]
                 ) -> NDArray[np.float64]:
    """Round ``r``'s leaf-value derivatives in the weight of each of B rows, (B, leaves of the
    round), from the partitions' sum derivatives (B, 2, leaves) through the step's derivatives
    (``facts`` (B,): the derivative of the mean weight, for the L2 term scaled by it)."""
    st = head.engine._state
    tree, slots = _round_leaves(st.lay, r)
    total = add(*parts)
    trees, sums = st.trees, st.sums
    d_h = total[:, 1] + trees.l2m[tree][None, :] * facts[:, None]
    return trees.lr[tree] * (trees.scales[tree, 0] * (sums.RG[slots] * total[:, 0] + sums.RD[slots] * d_h))
