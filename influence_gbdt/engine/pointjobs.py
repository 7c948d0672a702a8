"""The passes over the rows of one training point's LeafRefit or forward derivative, shared by a
team of threads (numba). Private to the engine.

:func:`.passes.refit_many` deletes its rows one after the other on thread 0, the driver, and
:func:`.passes.forward_many` differentiates in their weights one after the other, as
:mod:`.rowjobs` does for the replay. Each pass over every row of a round is *posted* as a job that
every thread of the team (:mod:`.team`) does on its own chunks of :data:`.team.CHUNK_ROWS` rows:

- the refit's leaf sums of a one-output tree where every leaf is summed anew (:func:`tree_sums`),
  of a several-output round that is not joint where every leaf is summed anew at its first step
  (:func:`round_sums`), and a backtracking try's objective (:func:`try_objective`; each thread
  its share of the parts, :mod:`.objective`);
- forward mode's leaf-sum derivatives where every row's margin moves (:func:`share_sums`);
- the margins and the propagated changes moved past the round (:func:`advance`);
- a renewed tree's quantiles, each leaf by one thread (:func:`renew_tree`);
- where only some leaves are summed anew (SinglePoint, TopKLeaves), whole leaves to a thread: the
  leaves' masses that rank them (:func:`select_leaves`) and the refit's sums of the leaves whose
  rows moved (:func:`resum_leaves`), in the same job as a backtracking tree's exp-space approx for
  its next try, which the threads take from a queue as they are free.

The other threads wait for jobs in :func:`serve`. The rest of a round (the leaf steps,
backtracking's decisions, the leaves whose cached sums serve) is the driver's.

A leaf's sum over every row goes chunk by chunk, each chunk in row order, then the chunks' sums in
chunk order, as the replay's: whatever the number of threads, the sums, decisions and leaf values
are the same, and for up to 4,096 rows they are the sums in row order. A sum over one leaf's rows
(``rows_by_leaf``) goes in row order on one thread. A team of one thread does the same jobs, in the
same order.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..losses import (
    LOGLOSS,
    Params4,
    derivs1,
    derivs1_exp,
    grad_hess_rows_into,
    params4,
    step_logloss_at,
    weighted,
)
from . import objective
from . import renewed as renewed_rule
from .common import mark_top, per_row, ranks_leaves, row_mass
from .common import select_leaves as select_all_or_none
from .fastobj import SumOrder, new_sum_order
from .indexing import INDEX
from .state import Backtrack, Layout, LossSpec, Renewed, Rows, Sums, Trees
from .team import CHUNK_ROWS, barrier, n_chunks, own_rows, take_items

_internal = numba.njit(cache=True, nogil=True, internal=True)

#: Rows of :func:`_chunk_sums_logloss`'s scratch (``PointWork.rowbuf``): its margins, the objective's
#: margins, the exponentials (where the exp-space approx is not filled: else they go into it) and the
#: two shares.
ROWBUF = 5


#: Job codes (``PointWork.job[0]``).
SUMS, OBJECTIVE, SHARES, ADVANCE, STOP, MASSES, LEAVES, ROUND, RENEW = 1, 2, 3, 4, 5, 6, 7, 8, 9


class PointWork(NamedTuple):
    """What the team of one training point's pass shares: the job board and the arrays of the point
    (n rows, K outputs, n_total leaves; thread 0 resets them for each point). Named for the refit;
    forward mode keeps the margin derivatives in ``delta`` and the leaf-value derivatives' in-tree
    parts in ``u``."""

    n_team: int  # threads in the team
    bar: NDArray[np.int64]  # (2,) the team's barrier (:func:`.team.barrier`)
    job: NDArray[np.int64]  # (6,) the posted job: code and five arguments
    P: NDArray[np.float64]  # (chunks, most leaves of a round, 2) each chunk's sums by leaf (of a tree, or
    # of a several-output round from its first): w g, w h (or w) for the refit, the derivatives' sums
    # dG, dD for forward mode
    parts: NDArray[np.float64]  # (most objective parts, 2) a try's objective, part by part
    A: NDArray[np.float64]  # (n, K) the original margins entering the round
    delta: NDArray[np.float64]  # (n, K) each row's margin change so far; 0 rows (refit) or 1 (forward:
    # the point's own) where other rows' changes are not propagated
    u: NDArray[np.float64]  # (n_total,) in-tree moves of the round's leaves
    step: NDArray[np.float64]  # (n_total,) a backtracking try's leaf steps
    out: NDArray[np.float64]  # (n_total,) the new leaf values
    sel: NDArray[np.bool_]  # (n_total,) the update set's leaves
    w_new: NDArray[np.float64]  # (n,) the weights without the deleted row
    point_buf: NDArray[np.float64]  # (n,) the fast objective's exp-space approx of each row
    dl: NDArray[np.float64]  # (most leaves of a tree,) the fast objective's exp of a try's steps
    so: SumOrder  # (n or 0,) the fast objective's rows in its order, this deletion's
    mass: NDArray[np.float64]  # (most leaves of a round,) a tree's leaves' masses (:func:`select_leaves`)
    resum: NDArray[np.bool_]  # (most leaves of a round,) the tree's leaves a :func:`resum_leaves` job sums
    queue: NDArray[np.int64]  # (1,) the next position of the approx a :func:`resum_leaves` job computes
    rowbuf: NDArray[np.float64]  # (n_team, ROWBUF, rows of a chunk) each thread's scratch for the log-loss
    # sums (:func:`_chunk_sums_logloss`)
    intbuf: NDArray[np.int64]  # (n_team, 2 + most leaves of a round + rows of a chunk) each thread's integer
    # scratch for them: leaf cursors (:func:`_leaf_totals`), then a list of rows (``need``)


def make_point_work(n_team: int, n: int, K: int, n_total: int, most_leaves: int, parts: int, changes: int,
                    fast_rows: int) -> PointWork:
    """A :class:`PointWork` for a team of ``n_team`` (``most_leaves``: of a round; ``parts``: most
    parts of a try's objective; ``changes``: rows of ``delta``; ``fast_rows``: rows the booster's
    own objective arithmetic sums, ``n`` or 0)."""
    return PointWork(n_team=n_team, bar=np.zeros(2, dtype=np.int64), job=np.zeros(6, dtype=np.int64),
                     P=np.zeros((n_chunks(n), most_leaves, 2)), parts=np.zeros((max(parts, 1), 2)),
                     A=np.empty((n, K)), delta=np.empty((changes, K)), u=np.zeros(n_total),
                     step=np.zeros(n_total), out=np.empty(n_total), sel=np.zeros(n_total, dtype=np.bool_),
                     w_new=np.empty(n), point_buf=np.empty(n), dl=np.empty(most_leaves),
                     so=new_sum_order(fast_rows), mass=np.zeros(most_leaves),
                     resum=np.zeros(most_leaves, dtype=np.bool_), queue=np.zeros(1, dtype=np.int64),
                     rowbuf=np.empty((n_team, ROWBUF, min(n, CHUNK_ROWS))),
                     intbuf=np.full((n_team, 2 + most_leaves + min(n, CHUNK_ROWS)), -1))


@_internal
def _chunk_sums(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, t: int, A: NDArray[np.float64],
    delta: NDArray[np.float64], all_moved: bool, track: bool, sel: NDArray[np.bool_], u: NDArray[np.float64],
    w_new: NDArray[np.float64], i0: int, j0: int, j1: int, P: NDArray[np.float64],
    points: NDArray[np.float64], fill: bool, buf: NDArray[np.float64], ints: NDArray[np.int64],
) -> None:
    """Every leaf's sums of one-output tree ``t`` over rows ``j0 .. j1 - 1`` (one chunk), row ``i0``
    deleted, into ``P`` (leaves of the tree, 2), zeroed first: w g, and w h (Newton) or w
    (``buf``, ``ints``: log loss's scratch, :data:`ROWBUF` x the chunk's rows, and 2 + the tree's
    leaves (cursors, :func:`_leaf_totals`) + the chunk's rows).

    A row's margin is ``A`` plus the tree's in-tree move ``u``, plus its change ``delta`` if
    ``all_moved``, or if ``track`` and its leaf is in ``sel``. If ``fill``, also each row's ``exp``
    of its margin as :func:`.objective.part` adds it (``A + u``, then ``delta``) into ``points``
    (n,): the exp-space approx of a backtracking try, the exponential shared with the derivatives'
    (:func:`.derivs1_exp`) where the two margins are the same number (the two orders of addition
    mostly round alike)."""
    base = lay.leaf_off[t]
    L = lay.leaf_off[t + 1] - base
    P[:L] = 0.0
    newton = trees.newton[t]
    # arrays taken out of their groups once (two reference counts per row each otherwise); leaves
    # indexed ``& INDEX``: no wrap-around
    u_t, sel_t, leaf, y, code, f32 = u[base:], sel[base:], lay.leaf[t], rows.y, loss.code, rows.f32
    prm = params4(loss.prm)
    h_min = loss.prm[0]
    if code == LOGLOSS and (prm[1] == 1.0 or not fill):
        n = A.shape[0]
        _chunk_sums_logloss(prm, f32, newton, leaf, y.reshape(n), A.reshape(n), delta.reshape(delta.shape[0]),
                            all_moved, track, sel_t, u_t, w_new, i0, j0, j1, P, points, fill, buf, t,
                            lay.rows_by_leaf[t], lay.leaf_first[base : base + L],
                            lay.leaf_count[base : base + L], ints[: 2 + L], ints[2 + L :])
        return
    for j in range(j0, j1):
        if j == i0:
            continue
        lj = leaf[j] & INDEX
        moved = all_moved or (track and sel_t[lj])
        m = (A[j, 0] + delta[j, 0] if moved else A[j, 0]) + u_t[lj]
        if fill:
            gg, hh, _, _, em = derivs1_exp(code, prm, y[j, 0], m)
            mo = A[j, 0] + u_t[lj] + delta[j, 0] if moved else m  # the objective's order
            points[j] = em if mo == m else math.exp(mo)
        else:
            gg, hh, _, _ = derivs1(code, prm, y[j, 0], m)
        wg, wh = weighted(code, gg, max(hh, h_min), w_new[j], f32)
        P[lj, 0] += wg
        P[lj, 1] += wh if newton else w_new[j]


@numba.njit(cache=True, nogil=True, internal=True, error_model="numpy")  # no branch after a division
def _chunk_sums_logloss(
    prm: Params4, f32: bool, newton: bool, leaf: NDArray[np.int32], y: NDArray[np.float64],
    A: NDArray[np.float64], delta: NDArray[np.float64], all_moved: bool, track: bool,
    sel_t: NDArray[np.bool_], u_t: NDArray[np.float64], w_new: NDArray[np.float64], i0: int, j0: int, j1: int,
    P: NDArray[np.float64], points: NDArray[np.float64], fill: bool, buf: NDArray[np.float64], t: int,
    by_leaf: NDArray[np.int32], first: NDArray[np.int64], count: NDArray[np.int64], cur: NDArray[np.int64],
    need: NDArray[np.int64],
) -> None:
    """:func:`_chunk_sums` of log loss (``fill`` at scale 1 only; ``y``, ``A``, ``delta``: the
    one-output arrays as contiguous ``(n,)`` views), in passes over the chunk: the margins; their
    exponentials (glibc's ``exp``, one call per row); the rows' shares, without branches, which the
    compiler computes on vectors (each row's operations and their rounding unchanged); each leaf's
    sums (:func:`_leaf_totals`, tree ``t``'s rows by leaf ``by_leaf`` from ``first``, ``count``,
    cursors ``cur``); with ``fill``, the exp-space approx: the exponentials are written into
    ``points`` to begin with, and the rows listed in ``need`` (scratch of >= j1 - j0) then take an
    ``exp`` of their own (a positive margin, about 15% of Adult's rows, whose ``exp(-|m|)`` is not
    the approx; or the objective's margin another number, about 3%). ``buf`` (:data:`ROWBUF`, >=
    j1 - j0): scratch. The same operations on each row, and the same sums in the same order, as
    :func:`.derivs1_exp`, :func:`.derivs1` and row-by-row sums, so the same bits.

    Measured against the previous code (every row's work in one loop, four rows side by side), one
    process, `CatBoostClassifier()` on Adult's leaves and margins, ns per row: 8.7-9.6 -> 6.9-8.2
    with the approx filled, 7.0-7.1 -> 5.6-6.6 without; a deleted row's LeafRefit with every point
    updated (`benchmarks/speed.py`'s model) 4.0-4.3 -> 3.6 s on one thread, 2.02-2.12 -> 1.80-1.82 s
    on two (docs/performance.md, stop 55). The margins pass on slices and the ``need`` list (stop
    56): the kernel 7.8 -> 6.7 ns per row with the approx filled, 6.2 -> 6.0 without; the refit
    1.79-1.92 -> 1.40-1.49 s on two threads."""
    s = prm[1]
    k = j1 - j0
    m, mo, wg, wh = buf[0], buf[1], buf[3], buf[4]
    # the chunk's rows counted from 0 (no wrap-around test per row), a loop per case (no test of
    # ``all_moved`` per row)
    leaf_c, a_c, d_c = leaf[j0:j1], A[j0:j1], delta[j0:j1]
    if all_moved:
        for q in range(k):
            a, d, uj = a_c[q], d_c[q], u_t[leaf_c[q] & INDEX]
            m[q] = (a + d) + uj
            mo[q] = a + uj + d  # the objective's order of addition
    else:
        for q in range(k):
            lj = leaf_c[q] & INDEX
            d = d_c[q] if track and sel_t[lj] else 0.0  # 0: not moved
            a, uj = a_c[q], u_t[lj]
            m[q] = (a + d) + uj
            mo[q] = a + uj + d
    if fill:
        # the exponentials go where the approx goes: ``exp(m)`` of a row whose margin is negative
        # and whose two margins are the same number; the other rows are listed (``need``) and take
        # ``exp(mo)`` after the shares have read ``e``. The deleted row's approx is not written.
        e = points[j0:j1]
        kept = points[i0] if j0 <= i0 < j1 else 0.0
        n_need = 0
        for q in range(k):
            e[q] = math.exp(-abs(s * m[q]))
            need[n_need] = q
            n_need += (m[q] >= 0.0) | (mo[q] != m[q])
    else:
        e = buf[2]
        for q in range(k):
            e[q] = math.exp(-abs(s * m[q]))
    _logloss_shares(prm, f32, newton, y[j0:j1], w_new[j0:j1], m, e, wg, wh, k)
    _leaf_totals(t, by_leaf, first, count, cur, i0, j0, j1, wg, wh, P)
    if fill:
        for c in range(n_need):
            q = need[c]
            e[q] = math.exp(mo[q])
        if j0 <= i0 < j1:
            points[i0] = kept


@per_row
def _leaf_totals(t: int, by_leaf: NDArray[np.int32], first: NDArray[np.int64], count: NDArray[np.int64],
                 cur: NDArray[np.int64], i0: int, j0: int, j1: int, wg: NDArray[np.float64],
                 wh: NDArray[np.float64], P: NDArray[np.float64]) -> None:
    """Each leaf's sums of the shares ``wg``, ``wh`` (indexed by row - ``j0``) of rows ``j0 .. j1 -
    1`` of tree ``t`` but ``i0``, in row order, into ``P`` (leaves, 2): leaf by leaf, its rows of
    the chunk read from ``by_leaf`` (the tree's rows sorted by leaf, then row; leaf ``l``'s from
    ``first[l]``, ``count[l]`` of them), each leaf's two sums in registers: the same additions in
    the same order from 0 as row by row into ``P``, so the same bits, without a leaf's next row
    waiting for its previous row's sum to be stored and loaded again.

    ``cur`` (2 + leaves): the tree and row the cursors ``cur[2:]`` (each leaf's position in
    ``by_leaf``) are at, moved past the chunk; positioned by bisection where they are not at
    ``(t, j0)`` (a thread's first chunk, another tree)."""
    L = first.shape[0]
    if not (cur[0] == t and cur[1] == j0):
        for lj in range(L):
            f = first[lj]
            cur[2 + lj] = f + np.searchsorted(by_leaf[f : f + count[lj]], j0) if j0 > 0 else f
    for lj in range(L):
        q, end = cur[2 + lj], first[lj] + count[lj]
        g, h = 0.0, 0.0
        while q < end and by_leaf[q] < j1:
            j = by_leaf[q]
            if j != i0:
                g += wg[(j - j0) & INDEX]
                h += wh[(j - j0) & INDEX]
            q += 1
        cur[2 + lj] = q
        P[lj, 0], P[lj, 1] = g, h
    cur[0], cur[1] = t, j1


@per_row
def _logloss_shares(prm: Params4, f32: bool, newton: bool, y: NDArray[np.float64], w: NDArray[np.float64],
                    m: NDArray[np.float64], e: NDArray[np.float64], wg: NDArray[np.float64],
                    wh: NDArray[np.float64], k: int) -> None:
    """Rows ``0 .. k - 1``'s ``(w g, w h)`` (``w`` second for a gradient step) into ``wg``, ``wh``
    at margins ``m``, from ``e = exp(-|s m|)`` (``h`` floored at ``prm[0]``)."""
    for q in range(k):
        g, h, _, _ = step_logloss_at(prm, y[q], 1.0, prm[1] * m[q], e[q])
        a, b = weighted(LOGLOSS, g, h, w[q], f32)
        wg[q] = a
        wh[q] = b if newton else w[q]


@_internal
def tree_sums(
    jobs: PointWork | None, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, t: int,
    A: NDArray[np.float64], delta: NDArray[np.float64], all_moved: bool, track: bool, sel: NDArray[np.bool_],
    u: NDArray[np.float64], w_new: NDArray[np.float64], i0: int, Gs: NDArray[np.float64],
    Hs: NDArray[np.float64], points: NDArray[np.float64], fill: bool,
) -> None:
    """Every leaf's sums of one-output tree ``t``, row ``i0`` deleted (arguments as
    :func:`_chunk_sums`'s), added into ``Gs``, ``Hs`` (indexed by the tree's leaves) chunk by
    chunk in chunk order: posted to the team of ``jobs``, whose arrays the others must be, or,
    without a team (None), summed here."""
    n = A.shape[0]
    L = lay.leaf_off[t + 1] - lay.leaf_off[t]
    if jobs is None:
        chunk = min(n, CHUNK_ROWS)
        P, buf, ints = np.empty((L, 2)), np.empty((ROWBUF, chunk)), np.full(2 + L + chunk, -1)
        for c0 in range(0, n, CHUNK_ROWS):
            _chunk_sums(lay, trees, rows, loss, t, A, delta, all_moved, track, sel, u, w_new, i0, c0,
                        min(n, c0 + CHUNK_ROWS), P, points, fill, buf, ints)
            _add_chunk(P, L, Gs, Hs)
        return
    _post(jobs, lay, trees, rows, loss, sums, None, SUMS, t, i0, int(all_moved), int(track), int(fill))
    for c in range(jobs.P.shape[0]):
        _add_chunk(jobs.P[c], L, Gs, Hs)


@_internal
def _chunk_round_sums(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, r: int, A: NDArray[np.float64],
    delta: NDArray[np.float64], moved: bool, w_new: NDArray[np.float64], i0: int, j0: int, j1: int,
    P: NDArray[np.float64],
) -> None:
    """Every leaf's sums of several-output round ``r`` (not joint) at its first step over rows ``j0
    .. j1 - 1`` (one chunk), row ``i0`` deleted, into ``P`` (leaves of the round from its first, 2),
    zeroed first: w g, and w h (Newton) or w. No in-tree move yet, so the round's trees share each
    row's margins (``A``, plus ``delta`` if ``moved``): a row's point and derivatives are taken
    once for all the round's trees (:func:`..losses.grad_hess_rows_into`), its leaves read in row
    order."""
    K = A.shape[1]
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rl0 = lay.leaf_off[t0]
    P[: lay.leaf_off[t1] - rl0] = 0.0
    # the chunk's margins, then their derivatives in one call (a call per row, given arrays, would
    # count references to them at every row: docs/performance.md, stop 64)
    M = np.empty((j1 - j0, K))
    for j in range(j0, j1):
        for c in range(K):
            M[j - j0, c] = A[j, c] + delta[j, c] if moved else A[j, c]
    g, h = np.empty_like(M), np.empty_like(M)
    grad_hess_rows_into(loss.code, loss.prm, rows.y[j0:j1], M, loss.zsize, g, h)
    # arrays out of their groups (two reference counts per row each, read in the loop)
    leaf, out, leaf_off, newton, code, f32 = (lay.leaf, lay.out, lay.leaf_off, trees.newton, loss.code,
                                              rows.f32)
    for j in range(j0, j1):
        if j == i0:
            continue
        for t in range(t0, t1):
            c = out[t]
            at = leaf_off[t] + (leaf[t, j] & INDEX) - rl0
            wg, wh = weighted(code, g[j - j0, c], h[j - j0, c], w_new[j], f32)
            P[at, 0] += wg
            P[at, 1] += wh if newton[t] else w_new[j]


@_internal
def round_sums(
    jobs: PointWork | None, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, r: int,
    A: NDArray[np.float64], delta: NDArray[np.float64], moved: bool, w_new: NDArray[np.float64], i0: int,
    Gs: NDArray[np.float64], Hs: NDArray[np.float64],
) -> None:
    """Every leaf's sums of several-output round ``r`` (not joint) at its first step, row ``i0``
    deleted (arguments as :func:`_chunk_round_sums`'s), into ``Gs``, ``Hs`` (indexed from the
    round's first leaf): chunk by chunk in chunk order, as the replay sums them, posted to the team
    of ``jobs``, whose arrays the others must be, or, without a team (None), summed here."""
    n = A.shape[0]
    n_round = lay.leaf_off[lay.round_ptr[r + 1]] - lay.leaf_off[lay.round_ptr[r]]
    Gs[:n_round] = 0.0
    Hs[:n_round] = 0.0
    if jobs is None:
        P = np.empty((n_round, 2))
        for c0 in range(0, n, CHUNK_ROWS):
            _chunk_round_sums(lay, trees, rows, loss, r, A, delta, moved, w_new, i0, c0,
                              min(n, c0 + CHUNK_ROWS), P)
            _add_chunk(P, n_round, Gs, Hs)
        return
    _post(jobs, lay, trees, rows, loss, sums, None, ROUND, r, i0, int(moved), 0, 0)
    for c in range(jobs.P.shape[0]):
        _add_chunk(jobs.P[c], n_round, Gs, Hs)


@_internal
def _add_chunk(P: NDArray[np.float64], L: int, first: NDArray[np.float64],
               second: NDArray[np.float64]) -> None:
    """One chunk's sums ``P`` (>= L, 2) of ``L`` leaves added into ``first`` and ``second`` (the
    chunks are added in chunk order: see the module docstring)."""
    for lj in range(L):
        first[lj] += P[lj, 0]
        second[lj] += P[lj, 1]


@_internal
def try_objective(
    jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, bt: Backtrack, t: int,
    every: bool, i0: int, take: int,
) -> float:
    """The objective backtracking tree ``t`` compares (:func:`.objective.part`) at the moves
    ``jobs.u`` plus the try ``jobs.step``, row ``i0`` deleted, rows moved by ``jobs.delta`` where
    ``every`` or their leaf is in ``jobs.sel``; its parts posted to the team. ``take``: where the
    exp-space approx at ``u`` is (:data:`.objective.FILLED`: ``jobs.point_buf``;
    ``AT_POSITIONS``: ``jobs.so.pt``; ``FRESH``: not yet)."""
    objective.prepare(lay, bt, t, jobs.step, jobs.dl)
    _post(jobs, lay, trees, rows, loss, sums, bt, OBJECTIVE, t, i0, int(every), take, 0)
    return objective.combine(bt, jobs.A.shape[0], i0, jobs.parts)


@_internal
def share_sums(
    jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, r: int, s: int,
    dG: NDArray[np.float64], dD: NDArray[np.float64],
) -> None:
    """Forward mode's step ``s`` of one-output round ``r``: every row's share (:func:`add_row_share1`,
    margins ``jobs.A``, margin derivatives ``jobs.delta``) added into ``dG``, ``dD`` (the round's
    leaves) chunk by chunk in chunk order, posted to the team."""
    _post(jobs, lay, trees, rows, loss, sums, None, SHARES, r, s, 0, 0, 0)
    L = lay.leaf_off[lay.round_ptr[r + 1]] - lay.leaf_off[lay.round_ptr[r]]
    for c in range(jobs.P.shape[0]):
        _add_chunk(jobs.P[c], L, dG, dD)


@per_row  # called per row: a call would cost the reference counts of every array it is given
def add_row_share1(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, u_before: NDArray[np.float64], r: int, s: int,
    A: NDArray[np.float64], j: int, J0: float, only: int, dG: NDArray[np.float64], dD: NDArray[np.float64],
) -> None:
    """One-output row ``j``'s share ``w_j (dg/dm J0, dh/dm J0)`` of step ``s`` of round ``r``, at
    margin derivative ``J0``, added to the leaf derivatives ``dG``, ``dD`` (indexed by global leaf
    minus the round's first leaf) of the round's trees (only tree ``only`` if >= 0): scalars only,
    no per-row calls taking arrays (:func:`.plain.add_row_share`'s one-output case)."""
    rl0 = lay.leaf_off[lay.round_ptr[r]]
    m = A[j, 0]
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        m += u_before[lay.sl_off[lay.step_ptr[t] + s] + lay.leaf[t, j]]
    g, h = _share1(loss.code, params4(loss.prm), loss.prm[0], rows.y[j, 0], rows.w[j], m, J0)
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        if only < 0 or t == only:
            x = lay.leaf_off[t] + lay.leaf[t, j] - rl0
            dG[x] += g
            if trees.newton[t]:
                dD[x] += h


@per_row
def _share1(code: int, prm: Params4, h_min: float, y: float, w: float, m: float,
            J0: float) -> tuple[float, float]:
    """A one-output row's share (w dg/dm J0, w dh/dm J0; the second 0 for a floored hessian, and
    not added for a gradient step) at margin ``m``, label ``y``, weight ``w``, margin derivative
    ``J0``: what :func:`add_row_share1` adds, from scalars."""
    _, hh, d2g, d2h = derivs1(code, prm, y, m)
    return w * (d2g * J0), w * (d2h * J0 if hh >= h_min else 0.0)


@_internal
def _chunk_shares(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, u_before: NDArray[np.float64], r: int, s: int,
    A: NDArray[np.float64], J: NDArray[np.float64], j0: int, j1: int, P: NDArray[np.float64],
) -> None:
    """:func:`share_sums` of rows ``j0 .. j1 - 1`` (one chunk) into ``P`` (leaves of the round, 2),
    zeroed first: a round of one tree (every one-output default) with its arrays taken out of their
    groups before the loop (read from a group in the loop, each costs two atomic reference counts
    per row, which the team's threads contend for), the same arithmetic as
    :func:`add_row_share1`'s; a round of several trees through it."""
    P[:] = 0.0
    t0 = lay.round_ptr[r]
    if lay.round_ptr[r + 1] > t0 + 1:
        dG, dD = P[:, 0], P[:, 1]
        for j in range(j0, j1):
            add_row_share1(lay, trees, rows, loss, u_before, r, s, A, j, J[j, 0], -1, dG, dD)
        return
    code, prm, h_min, y, w = loss.code, params4(loss.prm), loss.prm[0], rows.y, rows.w
    newton = trees.newton[t0]
    leaf, ub = lay.leaf[t0], u_before[lay.sl_off[lay.step_ptr[t0] + s] :]  # leaves indexed ``& INDEX``
    for j in range(j0, j1):
        lj = leaf[j] & INDEX
        g, h = _share1(code, prm, h_min, y[j, 0], w[j], A[j, 0] + ub[lj], J[j, 0])
        P[lj, 0] += g
        if newton:
            P[lj, 1] += h


@_internal
def leaf_shares1(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, u_before: NDArray[np.float64], r: int, s: int,
    A: NDArray[np.float64], J: NDArray[np.float64], sel: NDArray[np.bool_], track: bool, i0: int,
    dG: NDArray[np.float64], dD: NDArray[np.float64],
) -> None:
    """Forward mode's step ``s`` of a one-output round ``r`` of one tree where not every row's
    margin moves: the shares of the rows of the update set's leaves ``sel`` (if ``track``; each
    leaf's rows in row order, from ``rows_by_leaf``), then row ``i0``'s own if its leaf is not one
    of them, added into ``dG``, ``dD`` (the tree's leaves); ``J`` (n, K) the margin derivatives,
    or row i0's alone in its one row. On the driver, arrays out of their groups, as
    :func:`_chunk_shares`."""
    t = lay.round_ptr[r]
    base = lay.leaf_off[t]
    code, prm, h_min, y, w = loss.code, params4(loss.prm), loss.prm[0], rows.y, rows.w
    newton = trees.newton[t]
    leaf, ub, by_leaf = lay.leaf[t], u_before[lay.sl_off[lay.step_ptr[t] + s] :], lay.rows_by_leaf[t]
    first, count = lay.leaf_first[base:], lay.leaf_count[base:]
    if track:
        for lj in range(lay.leaf_off[t + 1] - base):
            if sel[base + lj]:
                for q in range(first[lj], first[lj] + count[lj]):
                    j = by_leaf[q]
                    g, h = _share1(code, prm, h_min, y[j, 0], w[j], A[j, 0] + ub[lj], J[j, 0])
                    dG[lj] += g
                    if newton:
                        dD[lj] += h
    li0 = leaf[i0]
    if not (track and sel[base + li0]):  # the row's own change
        g, h = _share1(code, prm, h_min, y[i0, 0], w[i0], A[i0, 0] + ub[li0], J[i0 if track else 0, 0])
        dG[li0] += g
        if newton:
            dD[li0] += h


@_internal
def select_leaves(
    jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, t: int, mode: int,
    k: int, selected: NDArray[np.bool_],
) -> bool:
    """:func:`.common.select_leaves` of tree ``t`` on the changes ``jobs.delta``, its leaves'
    masses summed by the team: each leaf's over its rows in row order (``rows_by_leaf``), the order
    in which the common function adds them, on the thread holding the leaf's first row."""
    if not ranks_leaves(lay, t, mode, k):
        return select_all_or_none(lay, t, mode, k, jobs.delta, selected)
    L = lay.leaf_off[t + 1] - lay.leaf_off[t]
    jobs.mass[:L] = 0.0
    _post(jobs, lay, trees, rows, loss, sums, None, MASSES, t, 0, 0, 0, 0)
    selected[:L] = False
    mark_top(jobs.mass[:L], k, selected)
    return False


@_internal
def _leaf_masses(lay: Layout, t: int, change: NDArray[np.float64], mass: NDArray[np.float64], q0: int,
                 q1: int) -> None:
    """Into ``mass`` (leaves of tree ``t``): ``sum_j sum_c |change[j, c]|`` over the rows of each
    leaf whose first row sits at positions ``q0 .. q1 - 1`` of ``rows_by_leaf[t]``, in row order."""
    base = lay.leaf_off[t]
    by_leaf, first, count = lay.rows_by_leaf[t], lay.leaf_first[base:], lay.leaf_count[base:]
    for lj in range(lay.leaf_off[t + 1] - base):
        if q0 <= first[lj] < q1:
            m = 0.0
            for q in range(first[lj], first[lj] + count[lj]):
                m += row_mass(change, by_leaf[q])
            mass[lj] = m


@_internal
def leaf_sums1(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, t: int, gl: int, moved: bool,
    A: NDArray[np.float64], delta: NDArray[np.float64], u: NDArray[np.float64], w_new: NDArray[np.float64],
    i0: int,
) -> tuple[float, float]:
    """One-output leaf ``gl`` of tree ``t`` summed anew over its rows in row order
    (``rows_by_leaf``), row ``i0`` deleted: (w g, w h) (Newton) or (w g, w) at each row's margin
    ``A`` (plus its change ``delta`` if ``moved``) plus the leaf's in-tree move ``u[gl]``, with the
    weights ``w_new``."""
    # arrays out of their groups (two reference counts per row each, read in the loop)
    by_leaf, y, code, h_min, f32 = lay.rows_by_leaf[t], rows.y, loss.code, loss.prm[0], rows.f32
    prm = params4(loss.prm)
    newton = trees.newton[t]
    G, H = 0.0, 0.0
    first = lay.leaf_first[gl]
    for q in range(first, first + lay.leaf_count[gl]):
        j = by_leaf[q]
        if j == i0:
            continue
        m = A[j, 0] + delta[j, 0] if moved else A[j, 0]
        gg, hh, _, _ = derivs1(code, prm, y[j, 0], m + u[gl])
        wg, wh = weighted(code, gg, max(hh, h_min), w_new[j], f32)
        G += wg
        H += wh if newton else w_new[j]
    return G, H


@_internal
def resum_leaves(
    jobs: PointWork | None, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, t: int,
    i0: int, track: bool, todo: NDArray[np.bool_], Gs: NDArray[np.float64], Hs: NDArray[np.float64],
    fresh: bool,
) -> None:
    """:func:`leaf_sums1` of one-output tree ``t``'s leaves marked in ``todo`` (L,) into ``Gs``,
    ``Hs`` (indexed by the tree's leaves), row ``i0`` deleted, rows moved by ``jobs.delta`` where
    ``track`` and their leaf is in ``jobs.sel``: posted to the team, whole leaves to a thread, the
    marked leaves' rows shared out evenly (``jobs`` None: nothing).

    ``fresh``: in the same job, the fast objective's exp-space approx at ``jobs.u`` for the tree's
    next try (:func:`.objective.fresh_points`, into ``jobs.so.pt``; ``jobs.so`` holds the tree's
    leaves), in runs of positions each thread takes from a queue as it is free: while one thread
    sums the deleted row's leaf (SinglePoint: one leaf), the others compute the approx, which
    the try would otherwise compute after the sums."""
    if jobs is None:
        return
    L = todo.shape[0]
    if not (fresh or todo.any()):
        return
    jobs.resum[:L] = todo
    jobs.queue[0] = 0
    _post(jobs, lay, trees, rows, loss, sums, None, LEAVES, t, i0, int(track), int(fresh), 0)
    for lj in range(L):
        if todo[lj]:
            Gs[lj], Hs[lj] = jobs.P[0, lj, 0], jobs.P[0, lj, 1]


@_internal
def _resum_share(jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, t: int, i0: int,
                 track: bool, tid: int) -> None:
    """Thread ``tid``'s leaves of :func:`resum_leaves` (those marked in ``jobs.resum``): leaf by
    leaf in order, the one whose marked rows before it number ``s`` going to thread
    ``s * n_team // (marked rows)``, its sums into ``jobs.P[0]``."""
    base = lay.leaf_off[t]
    L = lay.leaf_off[t + 1] - base
    total = 0
    for lj in range(L):
        if jobs.resum[lj]:
            total += lay.leaf_count[base + lj]
    before = 0
    for lj in range(L):
        if not jobs.resum[lj]:
            continue
        if before * jobs.n_team // max(total, 1) == tid:
            gl = base + lj
            moved = track and jobs.sel[gl]
            jobs.P[0, lj, 0], jobs.P[0, lj, 1] = leaf_sums1(lay, trees, rows, loss, t, gl, moved, jobs.A,
                                                          jobs.delta, jobs.u, jobs.w_new, i0)
        before += lay.leaf_count[base + lj]


#: Positions of the approx a thread takes from :func:`resum_leaves`' queue at a time.
FRESH_RUN = 1024


@_internal
def _fresh_share(jobs: PointWork, lay: Layout, t: int, i0: int) -> None:
    """A thread's runs of :func:`resum_leaves`' approx of tree ``t`` (row ``i0`` deleted), taken
    from the queue until it is empty (each position's value is the same whichever thread computes
    it)."""
    n_eff = jobs.A.shape[0] - (1 if i0 >= 0 else 0)
    while True:
        p0 = take_items(jobs.queue, FRESH_RUN)
        if p0 >= n_eff:
            return
        objective.fresh_points(lay, t, jobs.A, jobs.delta, jobs.sel, False, jobs.u, jobs.so, p0,
                               min(n_eff, p0 + FRESH_RUN))


#: How :func:`advance` moves ``PointWork.delta``.
KEEP, REFIT, FORWARD = 0, 1, 2


@_internal
def advance(
    jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, r: int, how: int,
) -> None:
    """Every row past round ``r``: the original margins ``jobs.A`` by the stored leaf values, and
    ``jobs.delta`` by the new leaf values ``jobs.out`` less the original ones (``how`` =
    :data:`REFIT`: the refit's margin changes), by ``jobs.out`` (:data:`FORWARD`: forward mode's
    margin derivatives) or not at all (:data:`KEEP`)."""
    _post(jobs, lay, trees, rows, loss, sums, None, ADVANCE, r, how, 0, 0, 0)


@_internal
def _advance_rows(
    lay: Layout, sums: Sums, r: int, how: int, A: NDArray[np.float64], delta: NDArray[np.float64],
    out: NDArray[np.float64], j0: int, j1: int,
) -> None:
    """:func:`advance` for rows ``j0 .. j1 - 1``, a one-output model's arrays as contiguous ``(n,)``
    views (a column of an ``(n, 1)`` array is indexed with a stride; sampled on one thread, 300,000
    rows: this pass took 18% of a deleted row's LeafRefit with strides, 12% without)."""
    K = A.shape[1]
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        c = lay.out[t]
        base = lay.leaf_off[t]
        leaf, stored, values, new = lay.leaf[t], sums.stored[base:], sums.values[base:], out[base:]
        if K == 1:
            a, d = A.reshape(A.shape[0]), delta.reshape(delta.shape[0])
            _advance_column(a, d, leaf, stored, values, new, how, j0, j1)
        else:
            _advance_column(A[:, c], delta[:, c], leaf, stored, values, new, how, j0, j1)


@per_row
def _advance_column(
    a: NDArray[np.float64], d: NDArray[np.float64], leaf: NDArray[np.int32], stored: NDArray[np.float64],
    values: NDArray[np.float64], new: NDArray[np.float64], how: int, j0: int, j1: int,
) -> None:
    """One tree's :func:`advance` of rows ``j0 .. j1 - 1`` of one output: the margins ``a`` by the
    ``stored`` leaf values, the changes ``d`` as ``how`` says (``values``, ``new``: the tree's
    original and new leaf values; leaves indexed ``& INDEX``)."""
    for j in range(j0, j1):
        lj = leaf[j] & INDEX
        if how == REFIT:
            d[j] += new[lj] - values[lj]
        elif how == FORWARD:
            d[j] += new[lj]
        a[j] += stored[lj]


@_internal
def _do(  # noqa: C901 -- one branch per job code
    tid: int, jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums,
    bt: Backtrack | None, mrow: NDArray[np.float64],
) -> None:
    """Thread ``tid``'s share of the posted job (``bt`` None where the driver posting it has none:
    then no objective is posted)."""
    code, a1, a2, a3, a4, a5 = jobs.job[0], jobs.job[1], jobs.job[2], jobs.job[3], jobs.job[4], jobs.job[5]
    n = jobs.A.shape[0]
    j0, j1 = own_rows(n, tid, jobs.n_team)
    if code == SUMS:  # tree a1, row a2 deleted, all moved a3, changes tracked a4, points filled a5
        for c0 in range(j0, j1, CHUNK_ROWS):
            _chunk_sums(lay, trees, rows, loss, a1, jobs.A, jobs.delta, a3 != 0, a4 != 0, jobs.sel, jobs.u,
                        jobs.w_new, a2, c0, min(j1, c0 + CHUNK_ROWS), jobs.P[c0 // CHUNK_ROWS],
                        jobs.point_buf, a5 != 0, jobs.rowbuf[tid], jobs.intbuf[tid])
    elif code == OBJECTIVE:  # tree a1, row a2 deleted, every row moved a3, approx taken as a4 says
        if bt is None:
            return
        n_p = objective.n_parts(bt, n, a2)
        for p in range(tid * n_p // jobs.n_team, (tid + 1) * n_p // jobs.n_team):
            jobs.parts[p, 0], jobs.parts[p, 1] = objective.part(
                lay, rows.y, loss, bt, a1, jobs.A, jobs.delta, jobs.sel, a3 != 0, jobs.u, jobs.step, jobs.dl,
                jobs.w_new, a2, jobs.so, jobs.point_buf, mrow, a4, p)
    elif code == ROUND:  # round a1, row a2 deleted, rows moved a3
        for c0 in range(j0, j1, CHUNK_ROWS):
            _chunk_round_sums(lay, trees, rows, loss, a1, jobs.A, jobs.delta, a3 != 0, jobs.w_new, a2, c0,
                              min(j1, c0 + CHUNK_ROWS), jobs.P[c0 // CHUNK_ROWS])
    elif code == SHARES:  # round a1, step a2
        for c0 in range(j0, j1, CHUNK_ROWS):
            _chunk_shares(lay, trees, rows, loss, sums.u_before, a1, a2, jobs.A, jobs.delta, c0,
                          min(j1, c0 + CHUNK_ROWS), jobs.P[c0 // CHUNK_ROWS])
    elif code == ADVANCE:  # round a1, delta moved as a2 says
        _advance_rows(lay, sums, a1, a2, jobs.A, jobs.delta, jobs.out, j0, j1)
    elif code == MASSES:  # tree a1
        _leaf_masses(lay, a1, jobs.delta, jobs.mass, j0, j1)
    elif code == LEAVES:  # tree a1, row a2 deleted, changes tracked a3, the approx computed a4
        _resum_share(jobs, lay, trees, rows, loss, a1, a2, a3 != 0, tid)
        if a4 != 0:
            _fresh_share(jobs, lay, a1, a2)


@_internal
def renew_tree(
    jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, sums: Sums, ren: Renewed, t: int, i0: int,
    every: bool, changed: bool,
) -> None:
    """Renewed tree ``t``'s new leaves without row ``i0`` into ``jobs.out``, the team's threads
    taking shares of its leaves (:func:`.renewed.refit_leaves`; ``every``: every row's margin
    moved; ``changed``: the class factors did). The driver posts the job and does its own share as
    :func:`serve` does the others' (see there)."""
    jobs.job[0], jobs.job[1], jobs.job[2], jobs.job[3], jobs.job[4], jobs.job[5] = (RENEW, t, i0, int(every),
                                                                                  int(changed), 0)
    barrier(jobs.bar, jobs.n_team)
    _renew_share(jobs, lay, trees, rows, sums, ren, 0)
    barrier(jobs.bar, jobs.n_team)


@_internal
def _renew_share(
    jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, sums: Sums, ren: Renewed, tid: int,
) -> None:
    """Thread ``tid``'s share of the posted :func:`renew_tree` job."""
    t, i0, every, changed = jobs.job[1], jobs.job[2], jobs.job[3] != 0, jobs.job[4] != 0
    renewed_rule.refit_leaves(lay, trees, rows.y, sums, ren, t, jobs.A, jobs.delta, jobs.sel, every, changed,
                              jobs.w_new, i0, jobs.out, tid, jobs.n_team)


@_internal
def _post(
    jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, bt: Backtrack | None,
    code: int, a1: int, a2: int, a3: int, a4: int, a5: int,
) -> None:
    """The driver posts a job, does its own share and waits for the team's."""
    jobs.job[0], jobs.job[1], jobs.job[2], jobs.job[3], jobs.job[4], jobs.job[5] = code, a1, a2, a3, a4, a5
    barrier(jobs.bar, jobs.n_team)
    _do(0, jobs, lay, trees, rows, loss, sums, bt, np.empty(jobs.A.shape[1]))
    barrier(jobs.bar, jobs.n_team)


@_internal
def serve(
    tid: int, jobs: PointWork, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums,
    ren: Renewed | None, bt: Backtrack | None,
) -> None:
    """Thread ``tid`` (> 0): do each job the driver posts, until it posts :data:`STOP`. A renewed
    tree's job (:func:`renew_tree`) is done here, not in :func:`_do`, so that ``ren`` (the model's
    renewed group, None if it has none or the driver posts no such job) is in no type that
    :func:`_do` and the other posting functions take: they compile once for the models with
    renewed rounds and those without."""
    mrow = np.empty(jobs.A.shape[1])
    while True:
        barrier(jobs.bar, jobs.n_team)
        if jobs.job[0] == STOP:
            return
        if ren is not None and jobs.job[0] == RENEW:
            _renew_share(jobs, lay, trees, rows, sums, ren, tid)
        else:
            _do(tid, jobs, lay, trees, rows, loss, sums, bt, mrow)
        barrier(jobs.bar, jobs.n_team)


@_internal
def stop(jobs: PointWork) -> None:
    """The driver lets the team go (after its last job)."""
    jobs.job[0] = STOP
    barrier(jobs.bar, jobs.n_team)
