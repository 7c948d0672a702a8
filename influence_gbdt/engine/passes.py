"""The engine's four passes over the rounds (numba), and the one place each round's leaf rule is
chosen. Private to the engine.

- :func:`replay`: recompute every leaf value from the data (the self-check) and fill the caches,
  its passes over the rows shared by a team of threads (:mod:`.rowjobs`);
- :func:`reverse`: exact LeafInfluence of every training row on a batch of objectives (adjoints,
  last round to first);
- :func:`forward_many`: d leaf value / d v_i of one training row at a time (the paper's
  Algorithm 4), with an update set;
- :func:`refit_many`: every leaf recomputed with one training row deleted (the paper's
  Algorithms 1-3), with an update set;

the last two also with their passes over the rows shared by a team (:mod:`.pointjobs`).

(The reverse sweep of one-output models, their rounds plain or renewed, runs in :mod:`.reverse1`
instead, and that of models of several outputs, their rounds plain or joint, in
:mod:`.reverse_multi`, each on a team of threads; :mod:`.core` chooses them. :func:`reverse` is
the reference the tests hold the other two to.) Each pass walks the
rounds and hands each one to its leaf rule: :mod:`.plain` (Newton or gradient steps), :mod:`.joint`
(one joint softmax step), :mod:`.renewed` (quantile leaves) or :mod:`.backtracking`
(AnyImprovement). The rule groups of a model without such trees are None, and the tests ``group is
not None`` are decided when numba compiles: a plain model compiles the plain rule only. A new leaf
rule adds its module, its state group (:mod:`.state`) and one branch per pass here.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from . import backtracking, plain, pointjobs
from . import joint as joint_rule
from . import renewed as renewed_rule
from .common import NONE, add_round, advance_row, per_row, round_sizes
from .fastobj import fill_sum_order
from .pointjobs import FORWARD, KEEP, REFIT, PointWork, advance, leaf_shares1, make_point_work, share_sums
from .rowjobs import Work, joint_sums, make_work, renew_tree, serve, stop
from .rowjobs import add_round as add_round_team
from .state import Backtrack, Cache, Joint, Layout, LossSpec, Renewed, Rows, State, Sums, Trees, largest_round
from .team import n_chunks, rows_team

_jit = numba.njit(cache=True, nogil=True)
#: Functions only compiled code calls: no Python wrapper to compile (see ``_jit.njit``).
_internal = numba.njit(cache=True, nogil=True, internal=True)


# ----------------------------------------------------------------------------------------------
# Replay


@numba.njit(cache=True, nogil=True)
def replay(
    tid: int, n_team: int, bar: NDArray[np.int64], lay: Layout, trees: Trees, rows: Rows, loss: LossSpec,
    sums: Sums, cache: Cache, joint: Joint | None, renewed: Renewed | None, bt: Backtrack | None,
    A: NDArray[np.float64], work: Work, scratch: NDArray[np.float64] | None,
) -> None:
    """Recompute every leaf value from the data and fill the caches in place: thread ``tid``'s
    part of a team of ``n_team`` (:func:`.team.run`; ``bar`` is ``work.bar``, where
    :mod:`.rowjobs` meets). Thread 0 walks the rounds and posts the passes over the rows;
    the others do their share of each.

    ``scratch`` (n_team, 7, max(K, zsize)) holds each thread's scratch rows for a multi-output
    model; None for a one-output model (:func:`replay_scratch`), which then compiles none of the
    multi-output code (see :func:`.rowjobs._sums_rows`).

    ``A`` (n, K) holds the initial margins on entry and the final ones on return; the recomputed
    leaf values are ``sums.values``. Steps take their recorded scales, except in backtracking trees,
    whose accepted steps are decided here as the booster decides them (and recorded in
    ``trees.n_steps`` / ``trees.scales``). Margins move by the *stored* leaf values, so every tree is
    recomputed at the booster's own margins and a last-bit difference in one tree cannot cascade
    into the next. A renewed round's leaves are shared out to the team, each leaf to one thread.
    """
    n = A.shape[0]
    if tid > 0:
        serve(tid, lay, trees, rows, loss, sums, cache, joint, renewed, bt, A, work, scratch)
        return
    mean_w = (rows.w.sum() + rows.outside[0]) / (n + rows.outside[1])
    if bt is not None and bt.bt_obj >= 0:
        fill_sum_order(work.order, bt.bt_obj, rows.y[:, 0], rows.w, bt.bt_order, -1)
    u = work.u
    most_leaves, _ = round_sizes(lay)
    d = np.empty(most_leaves)
    for r in range(lay.round_ptr.shape[0] - 1):
        t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
        if renewed is not None and renewed.renew[t0]:
            renew_tree(lay, trees, rows, sums, renewed, A, work, t0)
        else:
            if bt is not None and bt.backtrack[t0]:
                backtracking.replay_round(lay, trees, rows, loss, sums, cache, bt, r, A, mean_w, work, d,
                                          scratch)
            elif joint is not None and joint.joint[t0]:
                joint_sums(lay, trees, rows, loss, sums, cache, joint, bt, A, work, scratch, r)
                joint_rule.replay_round(lay, trees, sums, joint, r, mean_w, u, d)
            else:
                plain.replay_round(lay, trees, rows, loss, sums, cache, joint, bt, r, A, mean_w, work, d,
                                   scratch)
            for t in range(t0, t1):
                for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
                    sums.values[gl] = trees.lr[t] * u[gl]
                    u[gl] = 0.0
        add_round_team(lay, trees, rows, loss, sums, cache, joint, bt, A, work, scratch, r)
    stop(work)


def replay_team(st: State, threads: int) -> int:
    """How many threads replay ``st``'s model: up to ``threads`` (one per chunk of rows at
    most)."""
    return rows_team(threads, st.lay.leaf.shape[1])


def replay_scratch(st: State, n_team: int) -> NDArray[np.float64] | None:
    """The ``scratch`` :func:`replay` of ``st`` takes on a team of ``n_team``: None for a
    one-output model."""
    K = st.loss.K
    return np.empty((n_team, 7, max(K, st.loss.zsize))) if K > 1 else None


def replay_work(st: State, n_team: int) -> Work:
    """The team's shared arrays for :func:`replay` of ``st``."""
    lay = st.lay
    n = lay.leaf.shape[1]
    n_groups = st.sums.GV.shape[1] if st.sums.GV.shape[0] > 0 else 0
    bt = st.backtrack
    parts = n_chunks(n) + (bt.bt_threads if bt is not None else 0)
    return make_work(n_team, n, n_groups, int(lay.leaf_off[-1]), int(np.diff(lay.leaf_off).max()),
                     largest_round(lay)[1], parts, n if bt is not None and bt.bt_obj >= 0 else 0,
                     st.loss.K if st.joint is not None else 0)


# ----------------------------------------------------------------------------------------------
# Reverse


@_jit
def reverse(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, renewed: Renewed | None,
    A_final: NDArray[np.float64], c_leaf: NDArray[np.float64], every: bool,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Vector-Jacobian products of ``B`` objectives through the whole ensemble.

    Parameters
    ----------
    A_final : (n, K) the replay's final training margins.
    c_leaf : (B, n_total) d objective / d leaf value coming from the test side.
    every : whether the cache holds every leaf step's derivatives
        (:func:`.state.every_step_cached`); then the margins are never rebuilt.

    Returns
    -------
    w_bar : (B, n) d objective / d effective weight of each row, through its own leaf sums.
    a0_bar : (B, K) d objective / d initial margin (summed over rows): the base-margin channel.
    big_w_bar : (B,) d objective / d (sum of effective weights), through the l2 term.
    """
    B = c_leaf.shape[0]
    n, K = A_final.shape
    A = A_final.copy()  # margins entering the current round, rebuilt by subtraction
    a_bar = np.zeros((B, n, K))
    w_bar = np.zeros((B, n))
    big_w_bar = np.zeros(B)
    most_leaves, most_slots = round_sizes(lay)
    u_bar = np.empty((B, most_leaves))
    g_bar = np.empty((B, most_slots))
    d_bar = np.empty((B, most_slots))
    for r in range(lay.round_ptr.shape[0] - 2, -1, -1):
        t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
        rl0 = lay.leaf_off[t0]
        n_round = lay.leaf_off[t1] - rl0
        for b in range(B):
            u_bar[b, :n_round] = c_leaf[b, rl0 : rl0 + n_round]
        renewed_round = renewed is not None and renewed.renew[t0]
        plain.gather_adjoints(lay, r, a_bar, u_bar)
        plain.leaf_adjoints(lay, trees, sums, r, n, u_bar, g_bar, d_bar, big_w_bar, renewed_round)
        if not every:  # margins entering the round, for the derivatives not cached
            add_round(lay, r, A, sums.stored, -1.0)
        if renewed is not None and renewed.renew[t0]:
            renewed_rule.reverse_tree(lay, rows.y, renewed, t0, A, u_bar, rl0, a_bar, w_bar)
            continue
        plain.reverse_round(lay, trees, rows, loss, sums, cache, r, A, g_bar, d_bar, a_bar, w_bar)
    a0_bar = np.zeros((B, K))
    for b in range(B):
        for j in range(n):
            for c in range(K):
                a0_bar[b, c] += a_bar[b, j, c]
    return w_bar, a0_bar, big_w_bar


# ----------------------------------------------------------------------------------------------
# Forward


@per_row
def _add_share(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, joint: Joint | None, r: int, s: int,
    A: NDArray[np.float64], j: int, J: NDArray[np.float64], only: int, dG: NDArray[np.float64],
    dD: NDArray[np.float64], dM: NDArray[np.float64], scratch: NDArray[np.float64],
) -> None:
    """Row ``j``'s share of round ``r``'s leaf-sum derivatives, by the round's rule (a joint round's
    full hessian into ``dM`` (leaves, K), a plain one's into ``dD``)."""
    if joint is not None and joint.joint[lay.round_ptr[r]]:
        joint_rule.add_row_derivative(lay, rows, r, A, j, J, only, dG, dM, scratch[1, : loss.zsize],
                                      scratch[2, : A.shape[1]])
        return
    plain.add_row_share(lay, trees, rows, loss, sums.u_before, r, s, A, j, J, only, dG, dD, scratch)


@_internal
def forward_one(  # noqa: C901 -- one loop nest over rounds, steps and the update set
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, joint: Joint | None,
    renewed: Renewed | None, A0: NDArray[np.float64], i0: int, mode: int, k: int, d_base: NDArray[np.float64],
    d_fac: NDArray[np.float64], d_sumw: float, jobs: PointWork, row_only: bool,
) -> None:
    """d leaf value / d v_i0 for every leaf into ``jobs.out`` (n_total,): thread 0 of the team
    (:mod:`.pointjobs`), whose arrays it resets and whose passes over every row it posts.

    ``A0`` (n, K) are the initial margins; ``d_base`` (K,) = d base margin / d v_i0;
    ``d_fac`` (G,) = d (dataset factor * objective factor) / d v_i0 per group; ``d_sumw`` =
    d (sum of effective weights) / d v_i0.
    The update set propagates the margin derivatives ``jobs.delta`` of its rows (SinglePoint: row
    i0 alone, in its one row). ``row_only`` (single_point without renewed leaves: no other row is
    read) follows row ``i0``'s margins alone in ``jobs.A`` (holding ``A0``; the caller restores
    row ``i0``): O(leaves) per round.
    """
    n, K = A0.shape
    n_all = n + rows.outside[1]  # rows of the whole training set (a Dask partition holds some)
    A, J, out, du, sel = jobs.A, jobs.delta, jobs.out, jobs.u, jobs.sel
    if not row_only:
        A[:, :] = A0
    track = mode != NONE  # then ``J`` has a row per row, else row i0's alone
    J[:, :] = d_base
    ji0 = i0 if track else 0
    du[:] = 0.0
    sel[:] = False
    most_leaves, _ = round_sizes(lay)
    dG = np.empty(most_leaves)
    dD = np.empty(most_leaves)
    dM = np.empty((most_leaves if joint is not None else 0, K))
    scratch = np.empty((4, max(K, loss.zsize)))
    s_i0 = rows.dfac[rows.grp[i0]] * rows.ofac[rows.grp[i0]]
    for r in range(lay.round_ptr.shape[0] - 1):
        t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
        every = track
        for t in range(t0, t1):
            if track:
                every = pointjobs.select_leaves(jobs, lay, trees, rows, loss, sums, t, mode, k,
                                                sel[lay.leaf_off[t] : lay.leaf_off[t + 1]]) and every
            du[lay.leaf_off[t] : lay.leaf_off[t + 1]] = 0.0
        if renewed is not None and renewed.renew[t0]:
            renewed_rule.forward_tree(lay, trees, rows.y, renewed, t0, A, J, i0, track, s_i0, out)
            _forward_past(lay, trees, rows, loss, sums, jobs, r, track, i0, row_only)
            continue
        for s in range(trees.n_steps[t0]):
            dG[:] = 0.0
            dD[:] = 0.0
            dM[:, :] = 0.0
            if every and K == 1:
                share_sums(jobs, lay, trees, rows, loss, sums, r, s, dG, dD)
            elif every:
                for j in range(n):
                    _add_share(lay, trees, rows, loss, sums, joint, r, s, A, j, J[j], -1, dG, dD, dM, scratch)
            elif K == 1 and t1 == t0 + 1:
                leaf_shares1(lay, trees, rows, loss, sums.u_before, r, s, A, J, sel, track, i0, dG, dD)
            else:
                for t in range(t0, t1):
                    if track:
                        for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
                            if sel[gl]:
                                first = lay.leaf_first[gl]
                                for q in range(first, first + lay.leaf_count[gl]):
                                    j = lay.rows_by_leaf[t, q]
                                    _add_share(lay, trees, rows, loss, sums, joint, r, s, A, j, J[j], t, dG,
                                               dD, dM, scratch)
                    if not (track and sel[lay.leaf_off[t] + lay.leaf[t, i0]]):  # the row's own change
                        _add_share(lay, trees, rows, loss, sums, joint, r, s, A, i0, J[ji0], t, dG, dD, dM,
                                   scratch)
            if joint is not None and joint.joint[t0]:
                joint_rule.forward_steps(lay, rows, loss, sums, joint, r, A, i0, s_i0, d_fac,
                                         trees.l2m[t0] * d_sumw / n_all, dG, dM, du)
                continue
            plain.forward_steps(lay, trees, rows, loss, sums, r, s, A, i0, s_i0, d_fac, d_sumw, n_all, dG, dD,
                                du, scratch)
        for t in range(t0, t1):
            for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
                out[gl] = trees.lr[t] * du[gl]
        _forward_past(lay, trees, rows, loss, sums, jobs, r, track, i0, row_only)


@_internal
def _forward_past(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, jobs: PointWork, r: int, track: bool,
    i0: int, row_only: bool,
) -> None:
    """Forward mode past round ``r``: its leaf derivatives ``jobs.out`` added to the margin
    derivatives ``jobs.delta`` of the rows tracked (every row, or row i0 alone in its one row), the
    margins ``jobs.A`` moved by the stored leaf values (row i0's alone where ``row_only``)."""
    if track:
        advance(jobs, lay, trees, rows, loss, sums, r, FORWARD)
        return
    J, out = jobs.delta, jobs.out
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        J[0, lay.out[t]] += out[lay.leaf_off[t] + lay.leaf[t, i0]]
    if row_only:
        advance_row(lay, sums.stored, r, jobs.A, i0)
    else:
        advance(jobs, lay, trees, rows, loss, sums, r, KEEP)


@numba.njit(cache=True, nogil=True)
def forward_many(
    tid: int, n_team: int, bar: NDArray[np.int64], lay: Layout, trees: Trees, rows: Rows, loss: LossSpec,
    sums: Sums, joint: Joint | None, renewed: Renewed | None, A0: NDArray[np.float64], idx: NDArray[np.int64],
    mode: int, k: int, d_base: NDArray[np.float64], d_fac: NDArray[np.float64], d_sumw: NDArray[np.float64],
    jobs: PointWork, out: NDArray[np.float64],
) -> None:
    """:func:`forward_one` for each of the rows ``idx`` (B,), one after the other, into ``out`` (B,
    n_total): thread ``tid``'s part of a team of ``n_team`` (:func:`.team.run`; ``bar`` is
    ``jobs.bar``); ``d_base`` (B, K), ``d_fac`` (B, G), ``d_sumw`` (B,)."""
    if tid > 0:
        pointjobs.serve(tid, jobs, lay, trees, rows, loss, sums, None, None)
        return
    fast = mode == NONE and renewed is None  # single_point: only row i0's margins are read
    if fast:
        jobs.A[:, :] = A0
    for b in range(idx.shape[0]):
        forward_one(lay, trees, rows, loss, sums, joint, renewed, A0, idx[b], mode, k, d_base[b], d_fac[b],
                    d_sumw[b], jobs, fast)
        out[b, :] = jobs.out
        if fast:
            jobs.A[idx[b]] = A0[idx[b]]
    pointjobs.stop(jobs)


# ----------------------------------------------------------------------------------------------
# Refit


@_internal
def refit_one(  # noqa: C901 -- one loop nest over rounds and the rules
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, joint: Joint | None,
    renewed: Renewed | None, bt: Backtrack | None, A0: NDArray[np.float64], i0: int, mode: int, k: int,
    shift: NDArray[np.float64], fac_new: NDArray[np.float64], changed: bool, jobs: PointWork,
    row_only: bool, w_sum: float,
) -> None:
    """New leaf values, with row ``i0`` deleted, into ``jobs.out`` (n_total,): thread 0 of the
    refit's team (:mod:`.pointjobs`), whose arrays it resets and whose passes over every row it
    posts.

    ``A0`` (n, K) are the original initial margins, ``shift`` (K,) the change of the base margin
    and ``fac_new`` (2, G) the dataset and objective factors without the row (``changed``: they
    differ from the original ones). A backtracking tree re-decides which steps it accepts on the
    changed data.

    ``row_only`` (see :func:`reads_one_row`): no leaf is summed anew, so only row ``i0``'s margins
    are followed, in ``jobs.A`` (holding ``A0``; the caller restores row ``i0``), and the mean
    weight comes from ``w_sum`` (the sum of ``rows.w``): O(leaves) per round instead of O(n).
    """
    n, K = A0.shape
    A, delta, u, step, sel, out = jobs.A, jobs.delta, jobs.u, jobs.step, jobs.sel, jobs.out
    track = mode != NONE  # then ``delta`` has a row per row, else none
    delta[:, :] = shift
    u[:] = 0.0
    step[:] = 0.0
    sel[:] = False
    if row_only:  # no leaf is summed anew: the weights are read for row i0's share only
        w_new = rows.w
        mean_w = (w_sum - rows.w[i0] + rows.outside[0]) / (n + rows.outside[1] - 1)
    else:
        A[:, :] = A0
        w_new = jobs.w_new
        w_new[:] = rows.w
        if changed:
            for j in range(n):
                dj = rows.v[j] * fac_new[0, rows.grp[j]]
                w_new[j] = (np.float64(np.float32(dj)) if rows.f32w else dj) * fac_new[1, rows.grp[j]]
        w_new[i0] = 0.0
        mean_w = (w_new.sum() + rows.outside[0]) / (n + rows.outside[1] - 1)
    most_leaves, _ = round_sizes(lay)
    Gs = np.empty(most_leaves)
    Hs = np.empty(most_leaves)
    HXs = np.empty((most_leaves if joint is not None else 0, K))
    d = np.empty(most_leaves)
    if bt is not None and bt.bt_obj >= 0:  # the fast objective's rows in its order, for this deletion
        fill_sum_order(jobs.so, bt.bt_obj, rows.y[:, 0], w_new, bt.bt_order, bt.bt_pos[i0])
    scratch = np.empty((4, max(K, loss.zsize)))
    for r in range(lay.round_ptr.shape[0] - 1):
        t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
        every = track
        for t in range(t0, t1):
            if track:
                chosen = sel[lay.leaf_off[t] : lay.leaf_off[t + 1]]
                every = pointjobs.select_leaves(jobs, lay, trees, rows, loss, sums, t, mode, k,
                                                chosen) and every
        is_renewed = renewed is not None and renewed.renew[t0]
        if renewed is not None and renewed.renew[t0]:  # quantiles of residuals, recomputed without the row
            pointjobs.renew_tree(jobs, lay, trees, rows, sums, renewed, t0, i0, every, changed)
        elif bt is not None and bt.backtrack[t0]:  # alone in its round: re-decided without the row
            backtracking.refit_round(lay, trees, rows, loss, sums, bt, r, every, changed, i0, mean_w, Gs, Hs,
                                     HXs, d, scratch, jobs)
        elif joint is not None and joint.joint[t0]:  # one step for the round's trees together
            joint_rule.refit_round(lay, trees, rows, loss, sums, joint, r, A, delta, u, w_new, sel, every,
                                   changed, i0, mean_w, Gs, Hs, HXs, d, scratch)
        else:
            plain.refit_round(lay, trees, rows, loss, sums, r, A, delta, u, w_new, sel, every, changed, i0,
                              mean_w, Gs, Hs, HXs, d, scratch, jobs)
        for t in range(t0, t1):
            for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
                if not is_renewed:
                    out[gl] = trees.lr[t] * u[gl]
                u[gl] = 0.0
        if row_only:
            advance_row(lay, sums.stored, r, A, i0)
        else:
            advance(jobs, lay, trees, rows, loss, sums, r, REFIT if track else KEEP)


@_internal
def reads_one_row(trees: Trees, renewed: Renewed | None, bt: Backtrack | None, mode: int) -> bool:
    """Whether a deletion whose class factors stay unchanged re-sums no leaf, so that
    :func:`refit_one` needs only the deleted row's margins: single_point (no other row's change
    propagated) and every tree one step, neither renewed nor backtracking (whose later steps and
    objectives read every row of a leaf)."""
    if mode != NONE or renewed is not None or bt is not None:
        return False
    for t in range(trees.n_steps.shape[0]):
        if trees.n_steps[t] != 1:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def refit_many(
    tid: int, n_team: int, bar: NDArray[np.int64], lay: Layout, trees: Trees, rows: Rows, loss: LossSpec,
    sums: Sums, joint: Joint | None, renewed: Renewed | None, bt: Backtrack | None, A0: NDArray[np.float64],
    idx: NDArray[np.int64], mode: int, k: int, shift: NDArray[np.float64], fac_new: NDArray[np.float64],
    changed: NDArray[np.bool_], jobs: PointWork, out: NDArray[np.float64],
) -> None:
    """:func:`refit_one` for each of the rows ``idx`` (B,), one after the other, into ``out`` (B,
    n_total): thread ``tid``'s part of a team of ``n_team`` (:func:`.team.run`; ``bar`` is
    ``jobs.bar``); ``shift`` (B, K), ``fac_new`` (B, 2, G), ``changed`` (B,)."""
    if tid > 0:
        pointjobs.serve(tid, jobs, lay, trees, rows, loss, sums, renewed, bt)
        return
    one_row = reads_one_row(trees, renewed, bt, mode)
    w_sum = rows.w.sum()
    at_a0 = False  # whether ``jobs.A`` holds ``A0`` (a row-only deletion's start)
    for b in range(idx.shape[0]):
        fast = one_row and not changed[b]
        if fast and not at_a0:
            jobs.A[:, :] = A0
        refit_one(lay, trees, rows, loss, sums, joint, renewed, bt, A0, idx[b], mode, k, shift[b], fac_new[b],
                  changed[b], jobs, fast, w_sum)
        out[b, :] = jobs.out
        at_a0 = fast
        if fast:
            jobs.A[idx[b]] = A0[idx[b]]
    pointjobs.stop(jobs)


def point_team(st: State, threads: int, mode: int, n_outputs: int, forward: bool) -> int:
    """How many threads share each training point of :func:`refit_many` (:func:`forward_many` if
    ``forward``) on ``st``'s model: one for models with joint rounds, for forward mode of several
    outputs (whose leaves thread 0 sums alone) and where only the point's own row is read
    (single_point: :func:`reads_one_row`; forward mode's whenever no renewed round re-sorts
    residuals), else up to ``threads`` (one per chunk of rows at most). (Forward mode of renewed
    rounds: thread 0 takes each tree's leaf derivatives, O(leaves), and the team moves every row's
    margins past the round.)"""
    row_only = mode == NONE and (forward or (st.backtrack is None and bool((st.trees.n_steps == 1).all())))
    renewed = st.renewed is not None
    if st.joint is not None or (forward and n_outputs > 1) or (row_only and not renewed):
        return 1
    return rows_team(threads, st.lay.leaf.shape[1])


def point_work(st: State, n_team: int, mode: int, n_outputs: int, forward: bool) -> PointWork:
    """The team's shared arrays for :func:`refit_many` (:func:`forward_many` if ``forward``) of
    ``st``."""
    lay = st.lay
    n = lay.leaf.shape[1]
    bt = None if forward else st.backtrack
    parts = n_chunks(n) + (bt.bt_threads if bt is not None else 0)
    changes = n if mode != NONE else int(forward)
    return make_point_work(n_team, n, n_outputs, int(lay.leaf_off[-1]), largest_round(lay)[0], parts, changes,
                           n if bt is not None and bt.bt_obj >= 0 else 0)
