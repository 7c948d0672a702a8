"""The replay's passes over the rows, shared by a team of threads (numba). Private to the engine.

The replay (:func:`.passes.replay`) walks the rounds on thread 0, the driver. At each pass over
the rows -- a leaf step's sums (:func:`step_sums`, a joint round's :func:`joint_sums`), a
backtracking try's objective (:func:`try_objective`), a renewed tree's quantiles
(:func:`renew_tree`), a round's margin update (:func:`add_round`) -- the driver *posts* a job
that every thread of the team (:mod:`.team`) does on its own chunks of :data:`.team.CHUNK_ROWS`
rows (for an objective: its share of the objective's parts, :mod:`.objective`; for quantiles:
its share of the tree's leaves, each leaf by one thread); the other threads wait for jobs in
:func:`serve`. The driver then adds the chunks' results in chunk order: a leaf's sum over its rows
is summed chunk by chunk, each chunk in row order (for up to 4,096 rows, one chunk: row order), so
the replay's sums, decisions and caches are the same whatever the number of threads.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..losses import (
    grad_hess,
    grad_hess_rows_into,
    jvp,
    params4,
    point,
    point1,
    point1_exp,
    probabilities,
    step_derivs1,
    weighted,
)
from . import objective
from . import renewed as renewed_rule
from .common import (
    cache_slot,
    clear_sums,
    keep_point,
    per_row,
    round_slots,
    row_margin,
)
from .fastobj import SumOrder, new_sum_order
from .indexing import INDEX
from .state import Backtrack, Cache, Joint, Layout, LossSpec, Renewed, Rows, Sums, Trees
from .team import CHUNK_ROWS, barrier, n_chunks, own_rows

_internal = numba.njit(cache=True, nogil=True, internal=True)

#: Job codes (``Work.job[0]``).
SUMS, OBJECTIVE, ADD, STOP, JOINT, RENEW = 1, 2, 3, 4, 5, 6


class Work(NamedTuple):
    """What the team of one replay shares (n rows, G weight groups)."""

    n_team: int  # threads in the team
    bar: NDArray[np.int64]  # (2,) the team's barrier (:func:`.team.barrier`)
    job: NDArray[np.int64]  # (4,) the posted job: code and three arguments
    P: NDArray[np.float64]  # (chunks, most step-leaf slots of a round, 4 + 2 G) each chunk's sums
    # of w g, w h, w dg/dm, w dh/dm (and per group v g, v h) per step-leaf slot of the round
    PJ: NDArray[np.float64]  # (chunks, most slots of a joint round, (G + 1) (2 + K)) each chunk's
    # joint sums (:func:`_joint_rows`); (0, 0, 0) for a model without joint rounds
    parts: NDArray[np.float64]  # (most objective parts, 2) a try's objective, part by part
    u: NDArray[np.float64]  # (n_total,) in-tree moves of the current round's leaves
    step: NDArray[np.float64]  # (n_total,) a backtracking try's leaf steps
    dl: NDArray[np.float64]  # (most leaves of a tree,) the fast objective's exp of a try's steps
    point_buf: NDArray[np.float64]  # (n,) the fast objective's exp-space approx of each row
    order: SumOrder  # (n or 0,) the fast objective's rows in its order (:func:`.passes.replay` fills it)


def make_work(n_team: int, n: int, n_groups: int, n_total: int, most_leaves: int, most_slots: int, parts: int,
              fast_rows: int, joint_K: int = 0) -> Work:
    """A :class:`Work` for a team of ``n_team`` (``parts``: most parts of a try's objective;
    ``fast_rows``: rows the booster's own objective arithmetic sums, ``n`` or 0; ``joint_K``: the
    outputs of a model with joint rounds, else 0)."""
    pj = (n_chunks(n), most_slots, (n_groups + 1) * (2 + joint_K)) if joint_K else (0, 0, 0)
    return Work(n_team=n_team, bar=np.zeros(2, dtype=np.int64), job=np.zeros(4, dtype=np.int64),
                P=np.zeros((n_chunks(n), most_slots, 4 + 2 * n_groups)), PJ=np.zeros(pj),
                parts=np.zeros((max(parts, 1), 2)),
                u=np.zeros(n_total), step=np.zeros(n_total), dl=np.empty(most_leaves), point_buf=np.empty(n),
                order=new_sum_order(fast_rows))


@_internal
def _sums_rows(  # noqa: C901 -- one loop over the rows; its multi-output branches are decided when numba compiles
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, cache: Cache, r: int, s: int, q: int,
    A: NDArray[np.float64], u: NDArray[np.float64], j0: int, j1: int, P: NDArray[np.float64],
    scratch: NDArray[np.float64] | None, tid: int, points: NDArray[np.float64], fill: bool,
) -> None:
    """Step ``s`` of round ``r`` at in-tree moves ``u``, rows ``j0 .. j1 - 1`` (one chunk): their
    sums into the chunk's ``P`` (step-leaf slot - the round's first, 4 + 2 G), zeroed first, and
    their derivatives into the cache's slot ``q`` (-1: none). The sums' derivatives in ``u`` for
    trees with several steps; per-group sums where ``P`` has room for them. If ``fill`` (a
    one-output round), each row's ``exp`` of its margin into ``points`` (n,): the exp-space
    approx the fast objective's tries at these moves read (:func:`.objective.part`), computed
    with the derivatives (:func:`.point1_exp`). ``scratch[tid]`` (7, max(K, zsize)) holds a row's
    outputs for a multi-output model. ``scratch`` is None for a one-output model, whose loops keep
    scalars: numba then compiles none of the multi-output code (it drops the branches that test
    ``scratch is None`` when the argument is None; given an array it compiles both, so nothing
    is ever assigned None here)."""
    K = A.shape[1]
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    if scratch is not None:
        mine = scratch[tid]
        mrow, z, g, h, unit, dg, dh = (mine[0, :K], mine[1, : loss.zsize], mine[2, :K], mine[3, :K],
                                       mine[4, :K], mine[5, :K], mine[6, :K])
        unit[:] = 0.0
    G = (P.shape[1] - 4) // 2
    multi = trees.n_iter[t0] > 1
    # Arrays taken out of their groups once: read from a group inside the loop, each would cost two
    # atomic reference counts per row (measured: a fifth of CatBoost's replay).
    leaf, leaf_off, out, newton, DER = lay.leaf, lay.leaf_off, lay.out, trees.newton, cache.DER
    code, prm, f32, y, w, v, grp = loss.code, loss.prm, rows.f32, rows.y, rows.w, rows.v, rows.grp
    p4 = params4(prm)
    first = np.empty(t1 - t0, dtype=np.int64)  # each tree's first slot of the step, from the round's
    for t in range(t0, t1):
        first[t - t0] = lay.sl_off[lay.step_ptr[t] + s] - rs0
        P[first[t - t0] : first[t - t0] + leaf_off[t + 1] - leaf_off[t]] = 0.0
    if scratch is None and t1 == t0 + 1 and G == 0:
        f = first[0]
        _sums_rows_one(code, p4, f32, newton[t0], multi, y[:, 0], w, A[:, 0], u[leaf_off[t0] :], leaf[t0],
                       DER, q, P[f:], j0, j1, points, fill)
        return
    GC = HC = np.empty((0, K))  # several outputs and one step: the chunk's derivatives, in one call
    if scratch is not None and not multi:
        GC, HC = _chunk_derivatives(lay, loss, r, A, u, y, j0, j1)
    for j in range(j0, j1):
        if scratch is None:  # scalars only: no per-row array views or calls taking arrays
            m = A[j, 0]
            for t in range(t0, t1):
                m += u[leaf_off[t] + leaf[t, j]]
            if fill:
                z0, z1, points[j] = point1_exp(code, p4, m)
            else:
                z0, z1 = point1(code, p4, m)
            if q >= 0:  # what the reverse sweep needs of this row at this step
                keep_point(DER, q, j, z0, z1)
            g0, h0, wdg, wdh = step_derivs1(code, p4, y[j, 0], w[j], z0, z1)
        elif multi:  # the point too, for the sums' derivatives below
            row_margin(lay, r, A, j, u, mrow)
            point(code, prm, mrow, z)
            grad_hess(code, prm, y[j], z, g, h)
        wj = w[j]
        for t in range(t0, t1):
            c = out[t]
            k = first[t - t0] + leaf[t, j]
            if scratch is None:
                gc, hc = g0, h0
            elif multi:
                gc, hc = g[c], h[c]
            else:
                gc, hc = GC[j - j0, c], HC[j - j0, c]
            wg, wh = weighted(code, gc, hc, wj, f32)
            P[k, 0] += wg
            P[k, 1] += wh if newton[t] else wj
            if G > 0:
                P[k, 4 + grp[j]] += v[j] * gc
                P[k, 4 + G + grp[j]] += v[j] * (hc if newton[t] else 1.0)
            if multi:  # d/du of the sums, for the steps after this one
                if scratch is not None:
                    unit[c] = 1.0
                    jvp(code, prm, y[j], z, unit, dg, dh)
                    unit[c] = 0.0
                    wdg, wdh = wj * dg[c], wj * dh[c]
                P[k, 2] += wdg
                P[k, 3] += wdh


@_internal
def _chunk_derivatives(
    lay: Layout, loss: LossSpec, r: int, A: NDArray[np.float64], u: NDArray[np.float64],
    y: NDArray[np.float64], j0: int, j1: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The gradients and hessians (j1 - j0, K) of rows ``j0 .. j1 - 1`` of a several-output model at
    their margins in round ``r`` (``A`` plus the in-tree moves ``u``, added as
    :func:`.common.row_margin` adds them), by :func:`..losses.grad_hess_rows_into`: one call for
    the chunk (measured on Adult, the replay of a 3-class LightGBM default on two threads: see
    docs/performance.md, stop 64)."""
    K = A.shape[1]
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    M = np.empty((j1 - j0, K))
    for j in range(j0, j1):
        for c in range(K):
            M[j - j0, c] = A[j, c]
        for t in range(t0, t1):
            M[j - j0, lay.out[t]] += u[lay.leaf_off[t] + lay.leaf[t, j]]
    GC, HC = np.empty_like(M), np.empty_like(M)
    grad_hess_rows_into(loss.code, loss.prm, y[j0:j1], M, loss.zsize, GC, HC)
    return GC, HC


@_internal
def _joint_rows(lay: Layout, rows: Rows, r: int, A: NDArray[np.float64], j0: int, j1: int,
               PJ: NDArray[np.float64]) -> None:
    """The replay's leaf sums of joint round ``r`` over rows ``j0 .. j1 - 1`` (whole chunks) at the
    margins ``A`` entering it, each chunk's into ``PJ[chunk]`` (slots of the round, (G + 1) (2 + K)),
    zeroed first: per step-leaf slot (from the round's first) ``G``, ``H`` (the diagonal) and
    ``HX`` (K), then, with ``G`` weight groups, group ``q``'s ``GV``, ``HV``, ``HXV`` (K) at
    ``(q + 1) (2 + K)``. Rows in order; scalar code per row (no calls): the replay's hot loop."""
    K = A.shape[1]
    t0 = lay.round_ptr[r]
    slot = round_slots(lay, r) - lay.sl_off[lay.step_ptr[t0]]
    width = 2 + K
    groups = PJ.shape[2] > width
    PJ[j0 // CHUNK_ROWS : -(-j1 // CHUNK_ROWS)] = 0.0
    p = np.empty(K)
    # Arrays taken out of their groups once, no per-row views (each costs atomic reference counts:
    # with them, a 3-class CatBoostClassifier()'s replay on one thread took 1.2x as long), slots
    # masked (.indexing.INDEX); add_hessian_row's arithmetic written out.
    y, w, v, grp, leaf = rows.y, rows.w, rows.v, rows.grp, lay.leaf[t0]
    for j in range(j0, j1):
        ch = (j // CHUNK_ROWS) & INDEX
        probabilities(A, j, p)
        lab = int(y[j, 0])
        wj = w[j]
        for c in range(K):
            k = (slot[c] + leaf[j]) & INDEX
            g = p[c] - (1.0 if lab == c else 0.0)
            PJ[ch, k, 0] += wj * g
            PJ[ch, k, 1] += wj * p[c] * (1.0 - p[c])
            for e in range(K):
                PJ[ch, k, 2 + e] += wj * p[c] * ((1.0 if c == e else 0.0) - p[e])
            if groups:
                o = ((grp[j] + 1) * width) & INDEX
                vj = v[j]
                PJ[ch, k, o] += vj * g
                PJ[ch, k, o + 1] += vj * p[c] * (1.0 - p[c])
                for e in range(K):
                    PJ[ch, k, o + 2 + e] += vj * p[c] * ((1.0 if c == e else 0.0) - p[e])


@_internal
def _add_joint_chunks(lay: Layout, sums: Sums, joint: Joint, r: int, P: NDArray[np.float64]) -> None:
    """Round ``r``'s leaf sums (``sums.G``, ``sums.H``, ``joint.HX`` and the group sums) from its
    chunks' :func:`_joint_rows` ``P`` (chunks, slots of the round, width), cleared first, then the
    chunks added in chunk order (for up to 4,096 rows, one chunk: the rows' order)."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    K = t1 - t0
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    L = lay.leaf_off[t0 + 1] - lay.leaf_off[t0]
    width = 2 + K
    G = sums.GV.shape[1] if sums.GV.shape[0] > 0 else 0
    slot = round_slots(lay, r)
    for c in range(K):
        clear_sums(sums, joint, slot[c], L)
    for ch in range(P.shape[0]):
        for c in range(K):
            for sl in range(slot[c], slot[c] + L):
                row = P[ch, sl - rs0]
                sums.G[sl] += row[0]
                sums.H[sl] += row[1]
                for e in range(K):
                    joint.HX[sl, e] += row[2 + e]
                for q in range(G):
                    o = (q + 1) * width
                    sums.GV[sl, q] += row[o]
                    sums.HV[sl, q] += row[o + 1]
                    for e in range(K):
                        joint.HXV[sl, q * K + e] += row[o + 2 + e]


@_internal
def _sums_rows_one(
    code: int, p4: tuple[float, float, float, float], f32: bool, newton: bool, multi: bool,
    y: NDArray[np.float64], w: NDArray[np.float64], a: NDArray[np.float64], u: NDArray[np.float64],
    leaf: NDArray[np.int32], DER: NDArray[np.float64], q: int, P: NDArray[np.float64], j0: int, j1: int,
    points: NDArray[np.float64], fill: bool,
) -> None:
    """:func:`_sums_rows` for one output, a round of one tree and no weight groups (every
    one-output default of the three libraries): the same arithmetic on the few arrays it reads, so
    that the loop holds nothing else (measured on Adult's LightGBM default: the replay 1.4x
    faster). ``y``, ``w``, ``a`` (n,) labels, weights, margins entering the round; ``u`` the tree's
    in-tree moves by leaf; ``leaf`` (n,) each row's leaf; ``DER`` the derivative cache, whose slot
    ``q`` gets each row's point (none if -1); ``P`` (leaves, 4) the chunk's sums by leaf of w g,
    w h (or w), and, for a tree of several steps (``multi``), w dg/du, w dh/du; ``points`` as
    :func:`_sums_rows`'s."""
    pg, ph, pdg, pdh = P[:, 0], P[:, 1], P[:, 2], P[:, 3]
    # rows counted from 0, leaves indexed as never negative: see indexing.INDEX
    y, w, a, leaf, points = y[j0:j1], w[j0:j1], a[j0:j1], leaf[j0:j1], points[j0:j1]
    for i in range(j1 - j0):
        k = leaf[i] & INDEX
        if fill:
            z0, z1, points[i] = point1_exp(code, p4, a[i] + u[k])
        else:
            z0, z1 = point1(code, p4, a[i] + u[k])
        if q >= 0:  # what the reverse sweep needs of this row at this step
            keep_point(DER, q, j0 + i, z0, z1)
        wj = w[i]
        gg, h, wdg, wdh = step_derivs1(code, p4, y[i], wj, z0, z1)
        wg, wh = weighted(code, gg, h, wj, f32)
        pg[k] += wg
        ph[k] += wh if newton else wj
        if multi:  # d/du of the sums, for the steps after this one
            pdg[k] += wdg
            pdh[k] += wdh


@per_row  # a one-line test: inlined, no kernel of its own to compile (benchmarks/coldstart.py)
def fills_points(lay: Layout, bt: Backtrack | None, r: int) -> bool:
    """Whether the sums of round ``r`` also give each row's exp-space approx (``Work.point_buf``):
    a backtracking tree with the booster's fast objective, whose tries at the moves just summed
    read it (so :func:`try_objective` never computes it afresh)."""
    return bt is not None and bt.bt_obj >= 0 and bt.backtrack[lay.round_ptr[r]]


@_internal
def _do(
    tid: int, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache,
    joint: Joint | None, bt: Backtrack | None, A: NDArray[np.float64], work: Work,
    scratch: NDArray[np.float64] | None,
) -> None:
    """Thread ``tid``'s share of the posted job. (``joint`` None: a model without joint rounds,
    which then compiles none of their code.)"""
    code, a1, a2, a3 = work.job[0], work.job[1], work.job[2], work.job[3]
    n = A.shape[0]
    j0, j1 = own_rows(n, tid, work.n_team)
    if code == SUMS:  # round a1, step a2, cache slot a3
        fill = fills_points(lay, bt, a1)
        for c0 in range(j0, j1, CHUNK_ROWS):
            _sums_rows(lay, trees, rows, loss, cache, a1, a2, a3, A, work.u, c0, min(j1, c0 + CHUNK_ROWS),
                       work.P[c0 // CHUNK_ROWS], scratch, tid, work.point_buf, fill)
    elif code == JOINT:  # joint round a1's leaf sums
        if joint is not None:
            _joint_rows(lay, rows, a1, A, j0, j1, work.PJ)
    elif code == ADD:  # round a1's stored leaf values added to the margins
        for t in range(lay.round_ptr[a1], lay.round_ptr[a1 + 1]):
            c = lay.out[t]
            base = lay.leaf_off[t]
            for j in range(j0, j1):
                A[j, c] += sums.stored[base + lay.leaf[t, j]]
    elif code == OBJECTIVE:  # tree a1 (the exp-space approx as the last sums left it)
        if bt is None:
            return
        n_p = objective.n_parts(bt, n, -1)
        no_delta = np.empty((0, A.shape[1]))
        no_sel = np.zeros(0, dtype=np.bool_)
        if scratch is None:
            mrow = np.empty(1)
        else:
            mrow = scratch[tid, 0, : A.shape[1]]
        for p in range(tid * n_p // work.n_team, (tid + 1) * n_p // work.n_team):
            work.parts[p, 0], work.parts[p, 1] = objective.part(
                lay, rows.y, loss, bt, a1, A, no_delta, no_sel, False, work.u, work.step, work.dl, rows.w, -1,
                work.order, work.point_buf, mrow, objective.FILLED, p)


@_internal
def _post(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, joint: Joint | None,
    bt: Backtrack | None, A: NDArray[np.float64], work: Work, scratch: NDArray[np.float64] | None, code: int,
    a1: int, a2: int, a3: int,
) -> None:
    """The driver posts a job, does its own share and waits for the team's."""
    work.job[0], work.job[1], work.job[2], work.job[3] = code, a1, a2, a3
    barrier(work.bar, work.n_team)
    _do(0, lay, trees, rows, loss, sums, cache, joint, bt, A, work, scratch)
    barrier(work.bar, work.n_team)


@_internal
def serve(
    tid: int, lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache,
    joint: Joint | None, ren: Renewed | None, bt: Backtrack | None, A: NDArray[np.float64], work: Work,
    scratch: NDArray[np.float64] | None,
) -> None:
    """Thread ``tid`` (> 0): do each job the driver posts, until it posts :data:`STOP`. A renewed
    tree's job (:func:`renew_tree`) is done here, not in :func:`_do`, so that ``ren`` (the model's
    renewed group, None if it has none) is in no type that :func:`_do` and the other posting
    functions take: they compile once for the models with renewed rounds and those without."""
    while True:
        barrier(work.bar, work.n_team)
        if work.job[0] == STOP:
            return
        if ren is not None and work.job[0] == RENEW:
            renewed_rule.replay_leaves(lay, trees, rows, sums, ren, work.job[1], A, tid, work.n_team)
        else:
            _do(tid, lay, trees, rows, loss, sums, cache, joint, bt, A, work, scratch)
        barrier(work.bar, work.n_team)


@_internal
def stop(work: Work) -> None:
    """The driver lets the team go (after its last job)."""
    work.job[0] = STOP
    barrier(work.bar, work.n_team)


@_internal
def step_sums(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, joint: Joint | None,
    bt: Backtrack | None, A: NDArray[np.float64], work: Work, scratch: NDArray[np.float64] | None, r: int,
    s: int,
) -> None:
    """Leaf sums of step ``s`` of round ``r`` at in-tree moves ``work.u``, into slot ``s``.

    Also the sums' derivatives in ``u`` for trees with several steps, per-group sums when class
    factors move with the weights, and each row's derivatives in the cache where it has a slot.
    ``scratch`` is (threads, 7, max(K, zsize)), None for a one-output model (see
    :func:`_sums_rows`)."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    q = cache_slot(cache, lay.step_ptr[t0] + s) if A.shape[1] == 1 else -1
    _post(lay, trees, rows, loss, sums, cache, joint, bt, A, work, scratch, SUMS, r, s, q)
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    G = sums.GV.shape[1] if sums.GV.shape[0] > 0 else 0
    for t in range(t0, t1):
        o = lay.sl_off[lay.step_ptr[t] + s]
        L = lay.leaf_off[t + 1] - lay.leaf_off[t]
        clear_sums(sums, joint, o, L)
        for c in range(work.P.shape[0]):
            Pc = work.P[c]
            for sl in range(o, o + L):
                k = sl - rs0
                sums.G[sl] += Pc[k, 0]
                sums.H[sl] += Pc[k, 1]
                sums.SDG[sl] += Pc[k, 2]
                sums.SDH[sl] += Pc[k, 3]
                for gi in range(G):
                    sums.GV[sl, gi] += Pc[k, 4 + gi]
                    sums.HV[sl, gi] += Pc[k, 4 + G + gi]


@_internal
def joint_sums(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, joint: Joint,
    bt: Backtrack | None, A: NDArray[np.float64], work: Work, scratch: NDArray[np.float64] | None, r: int,
) -> None:
    """Joint round ``r``'s leaf sums at the margins ``A`` entering it (:func:`_joint_rows` chunk by
    chunk, added in chunk order by :func:`_add_joint_chunks`)."""
    _post(lay, trees, rows, loss, sums, cache, joint, bt, A, work, scratch, JOINT, r, 0, 0)
    _add_joint_chunks(lay, sums, joint, r, work.PJ)


@_internal
def try_objective(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, bt: Backtrack,
    A: NDArray[np.float64], work: Work, scratch: NDArray[np.float64] | None, t: int,
) -> float:
    """The objective backtracking tree ``t`` compares (:func:`.objective.part`) at the moves
    ``work.u`` plus the try ``work.step``, no row deleted; the exp-space approx at ``work.u`` is
    ``work.point_buf``, which the last :func:`step_sums` filled (:func:`fills_points`)."""
    objective.prepare(lay, bt, t, work.step, work.dl)
    _post(lay, trees, rows, loss, sums, cache, None, bt, A, work, scratch, OBJECTIVE, t, 0, 0)
    return objective.combine(bt, A.shape[0], -1, work.parts)


@_internal
def renew_tree(
    lay: Layout, trees: Trees, rows: Rows, sums: Sums, ren: Renewed, A: NDArray[np.float64], work: Work,
    t: int,
) -> None:
    """Renewed tree ``t``'s leaves recomputed at margins ``A``, the team's threads taking shares of
    its leaves (:func:`.renewed.replay_leaves`; measured: docs/performance.md, stop 65). The driver
    posts the job and does its own share as :func:`serve` does the others' (see there)."""
    work.job[0], work.job[1], work.job[2], work.job[3] = RENEW, t, 0, 0
    barrier(work.bar, work.n_team)
    renewed_rule.replay_leaves(lay, trees, rows, sums, ren, t, A, 0, work.n_team)
    barrier(work.bar, work.n_team)


@_internal
def add_round(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, joint: Joint | None,
    bt: Backtrack | None, A: NDArray[np.float64], work: Work, scratch: NDArray[np.float64] | None, r: int,
) -> None:
    """Move every row's margins ``A`` past round ``r`` by its stored leaf values."""
    _post(lay, trees, rows, loss, sums, cache, joint, bt, A, work, scratch, ADD, r, 0, 0)
