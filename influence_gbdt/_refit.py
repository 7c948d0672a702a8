"""LeafRefit (numba): every leaf recomputed with one training row deleted, structure fixed (the
paper's Algorithms 1-3, generalized to rounds, multi-step leaves and backtracking). Private."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from . import _jit as numba
from ._joint import add_hessian_row, round_steps
from ._kernels import (
    NONE,
    add_round,
    advance_row,
    l2_term,
    leaf_step,
    round_sizes,
    select_leaves,
    step_point,
    tree_objective,
)
from ._renew import refit_tree
from ._tables import Tables
from .losses import derivs1, grad_hess, point, weighted


@numba.njit(cache=True, nogil=True)
def _margin(
    tb: Tables, t: int, A: NDArray[np.float64], delta: NDArray[np.float64], moved: bool, j: int,
    u: NDArray[np.float64], mrow: NDArray[np.float64],
) -> None:
    """Row ``j``'s margins for tree ``t`` in the refit: original ``A[j]``, plus its propagated
    change ``delta[j]`` if ``moved``, plus the tree's in-tree move ``u``."""
    mrow[:] = A[j]
    if moved:
        for c in range(mrow.shape[0]):
            mrow[c] += delta[j, c]
    mrow[tb.out[t]] += u[tb.leaf_off[t] + tb.leaf[t, j]]


@numba.njit(cache=True, nogil=True)
def refit_round_sums(
    tb: Tables, r: int, a: int, A: NDArray[np.float64], delta: NDArray[np.float64], u: NDArray[np.float64],
    w_new: NDArray[np.float64], sel: NDArray[np.bool_], every: bool, changed: bool, i0: int,
    Gs: NDArray[np.float64], Hs: NDArray[np.float64], HXs: NDArray[np.float64], scratch: NDArray[np.float64],
) -> None:
    """Leaf sums of round ``r`` at in-tree moves ``u`` (its ``a``-th step), row ``i0`` deleted
    (-1: a row these tables do not hold); a joint round also sums its full hessian rows into
    ``HXs`` (leaves, K).

    A leaf whose rows all keep their original margins and weights, at the original replay's
    ``a``-th step, reuses the cached sums minus row ``i0``'s share; the others are summed anew.
    """
    K = A.shape[1]
    t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
    rl0 = tb.leaf_off[t0]
    mrow, z, g, h = scratch[0, :K], scratch[1, : tb.zsize], scratch[2, :K], scratch[3, :K]
    track = delta.shape[0] > 0
    joint = tb.joint[t0]
    for t in range(t0, t1):
        c = tb.out[t]
        for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
            lj = gl - tb.leaf_off[t]
            sl = tb.sl_off[tb.step_ptr[t] + a] + lj if a < tb.n_steps[t] else -1
            clean = not (every or changed or sel[gl]) and sl >= 0 and u[gl] == tb.u_before[sl]
            Gs[gl - rl0] = 0.0
            Hs[gl - rl0] = 0.0
            if joint:
                HXs[gl - rl0] = 0.0
            if clean:
                Gs[gl - rl0] = tb.G[sl]
                Hs[gl - rl0] = tb.H[sl]
                if joint:
                    HXs[gl - rl0] = tb.HX[sl]
                if i0 >= 0 and lj == tb.leaf[t, i0]:  # the cached sums without row i0's share
                    step_point(tb, r, a, A, i0, mrow, z)
                    grad_hess(tb.code, tb.prm, tb.y[i0], z, g, h)
                    wg, wh = weighted(tb.code, g[c], h[c], tb.w[i0], tb.f32)
                    Gs[gl - rl0] -= wg
                    Hs[gl - rl0] -= wh if tb.newton[t] else tb.w[i0]
                    if joint:
                        add_hessian_row(z, c, -tb.w[i0], HXs[gl - rl0])
                continue
            first = tb.leaf_first[gl]
            moved = track and (every or sel[gl])
            for q in range(first, first + tb.leaf_count[gl]):
                j = tb.rows_by_leaf[t, q]
                if j == i0:
                    continue
                if K == 1:  # scalars, no per-row calls taking arrays (see _reverse._row_adjoints1)
                    m = A[j, 0] + delta[j, 0] if moved else A[j, 0]
                    gg, hh, _, _ = derivs1(tb.code, tb.prm, tb.y[j, 0], m + u[gl])
                    wg, wh = weighted(tb.code, gg, max(hh, tb.prm[0]), w_new[j], tb.f32)
                else:
                    _margin(tb, t, A, delta, moved, j, u, mrow)
                    point(tb.code, tb.prm, mrow, z)
                    grad_hess(tb.code, tb.prm, tb.y[j], z, g, h)
                    wg, wh = weighted(tb.code, g[c], h[c], w_new[j], tb.f32)
                    if joint:
                        add_hessian_row(z, c, w_new[j], HXs[gl - rl0])
                Gs[gl - rl0] += wg
                Hs[gl - rl0] += wh if tb.newton[t] else w_new[j]


@numba.njit(cache=True, nogil=True)
def refit_round_steps(
    tb: Tables, r: int, Gs: NDArray[np.float64], Hs: NDArray[np.float64], mean_w: float,
    d: NDArray[np.float64],
) -> None:
    """The leaf steps ``d`` (indexed like ``Gs``) of round ``r`` from its leaf sums."""
    rl0 = tb.leaf_off[tb.round_ptr[r]]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
            lam = tb.l2[gl] + l2_term(tb, t, mean_w)
            d[gl - rl0] = leaf_step(Gs[gl - rl0], Hs[gl - rl0], lam, tb.l1[t], tb.mds[t])[0]


@numba.njit(cache=True, nogil=True)
def refit_one(  # noqa: C901 -- one loop nest over rounds and steps, with the backtracking walk
    tb: Tables, A0: NDArray[np.float64], i0: int, mode: int, k: int,
    shift: NDArray[np.float64], fac_new: NDArray[np.float64], changed: bool,
    work: NDArray[np.float64], row_only: bool, w_sum: float,
) -> NDArray[np.float64]:
    """New leaf values, shape (n_total,), with row ``i0`` deleted.

    ``A0`` (n, K) are the original initial margins, ``shift`` (K,) the change of the base margin
    and ``fac_new`` (2, G) the dataset and objective factors without the row (``changed``: they
    differ from the original ones). A backtracking tree re-decides which steps it accepts on the
    changed data.

    ``row_only`` (see :func:`reads_one_row`): no leaf is summed anew, so only row ``i0``'s margins
    are followed, in ``work`` (n, K; holding ``A0``; the caller restores row ``i0``), and the mean
    weight comes from ``w_sum`` (the sum of ``tb.w``): O(leaves) per round instead of O(n).
    """
    n, K = A0.shape
    A = work if row_only else A0.copy()
    track = mode != NONE
    delta = np.empty((n if track else 0, K))
    delta[:, :] = shift
    if row_only:  # no leaf is summed anew: the weights are read for row i0's share only
        w_new = tb.w
        mean_w = (w_sum - tb.w[i0] + tb.outside[0]) / (n + tb.outside[1] - 1)
    else:
        w_new = tb.w.copy()
        if changed:
            for j in range(n):
                d = tb.v[j] * fac_new[0, tb.grp[j]]
                w_new[j] = (np.float64(np.float32(d)) if tb.f32w else d) * fac_new[1, tb.grp[j]]
        w_new[i0] = 0.0
        mean_w = (w_new.sum() + tb.outside[0]) / (n + tb.outside[1] - 1)
    n_total = tb.leaf_off[-1]
    out = np.empty(n_total)
    u = np.zeros(n_total)
    step = np.zeros(n_total)
    sel = np.zeros(n_total, dtype=np.bool_)
    most_leaves, _ = round_sizes(tb)
    Gs = np.empty(most_leaves)
    Hs = np.empty(most_leaves)
    HXs = np.empty((most_leaves if tb.HX.shape[0] else 0, K))
    d = np.empty(most_leaves)
    dl = np.empty(most_leaves)
    point_buf = np.empty(0 if row_only else n)
    scratch = np.empty((4, max(K, tb.zsize)))
    mrow = np.empty(K)
    for r in range(tb.round_ptr.shape[0] - 1):
        t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
        rl0, rl1 = tb.leaf_off[t0], tb.leaf_off[t1]
        every = track
        for t in range(t0, t1):
            if track:
                chosen = sel[tb.leaf_off[t] : tb.leaf_off[t + 1]]
                every = select_leaves(tb, t, mode, k, delta, chosen) and every
        if tb.renew[t0]:  # quantiles of residuals, recomputed without the row
            refit_tree(tb, t0, A, delta, sel, every, changed, w_new, i0, out)
        elif tb.backtrack[t0]:  # alone in its round: AnyImprovement, re-decided without the row
            accepted, scale = 0, 1.0
            refit_round_sums(tb, r, 0, A, delta, u, w_new, sel, every, changed, i0, Gs, Hs, HXs, scratch)
            refit_round_steps(tb, r, Gs, Hs, mean_w, d)
            step[rl0:rl1] = 0.0
            current = tree_objective(
                tb, t0, A, delta, sel, every, u, step, w_new, i0, point_buf, dl, mrow, True)
            fresh = False
            for it in range(tb.n_iter[t0]):
                for gl in range(rl0, rl1):
                    step[gl] = scale * d[gl - rl0]
                trial = tree_objective(
                    tb, t0, A, delta, sel, every, u, step, w_new, i0, point_buf, dl, mrow, fresh)
                fresh = False
                if trial < current:
                    for gl in range(rl0, rl1):
                        u[gl] += step[gl]
                    current, accepted, scale, fresh = trial, accepted + 1, 1.0, True
                    if it + 1 < tb.n_iter[t0]:
                        refit_round_sums(tb, r, accepted, A, delta, u, w_new, sel, every, changed, i0,
                                    Gs, Hs, HXs, scratch)
                        refit_round_steps(tb, r, Gs, Hs, mean_w, d)
                else:
                    scale *= 0.5
        elif tb.joint[t0]:  # one step for the round's trees together
            refit_round_sums(tb, r, 0, A, delta, u, w_new, sel, every, changed, i0, Gs, Hs, HXs, scratch)
            local = tb.leaf_off[t0:t1] - rl0
            round_steps(tb, r, l2_term(tb, t0, mean_w), Gs, HXs, local, d, False)
            for gl in range(rl0, rl1):
                u[gl] += d[gl - rl0]
        else:
            for s in range(tb.n_steps[t0]):
                refit_round_sums(tb, r, s, A, delta, u, w_new, sel, every, changed, i0, Gs, Hs, HXs, scratch)
                refit_round_steps(tb, r, Gs, Hs, mean_w, d)
                for t in range(t0, t1):
                    for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
                        u[gl] += tb.scales[t, s] * d[gl - rl0]
        for t in range(t0, t1):
            for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
                if not tb.renew[t]:
                    out[gl] = tb.lr[t] * u[gl]
                u[gl] = 0.0
        if track:
            for t in range(t0, t1):
                c = tb.out[t]
                for j in range(n):
                    gl = tb.leaf_off[t] + tb.leaf[t, j]
                    delta[j, c] += out[gl] - tb.values[gl]
        if row_only:
            advance_row(tb, r, A, i0)
        else:
            add_round(tb, r, A, tb.stored, 1.0)
    return out


@numba.njit(cache=True, nogil=True)
def reads_one_row(tb: Tables, mode: int) -> bool:
    """Whether a deletion whose class factors stay unchanged re-sums no leaf, so that
    :func:`refit_one` needs only the deleted row's margins: single_point (no other row's change
    propagated) and every tree one step, neither renewed nor backtracking (whose later steps and
    objectives read every row of a leaf)."""
    if mode != NONE:
        return False
    for t in range(tb.n_steps.shape[0]):
        if tb.renew[t] or tb.backtrack[t] or tb.n_steps[t] != 1:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def refit_many(
    tb: Tables, A0: NDArray[np.float64], rows: NDArray[np.int64], mode: int, k: int,
    shift: NDArray[np.float64], fac_new: NDArray[np.float64], changed: NDArray[np.bool_],
) -> NDArray[np.float64]:
    """:func:`refit_one` for each of ``rows`` (B,); ``shift`` (B, K), ``fac_new`` (B, 2, G),
    ``changed`` (B,). Returns (B, n_total)."""
    out = np.empty((rows.shape[0], tb.leaf_off[-1]))
    one_row = reads_one_row(tb, mode)
    work = A0.copy() if one_row else np.empty((0, A0.shape[1]))
    w_sum = tb.w.sum()
    for b in range(rows.shape[0]):
        fast = one_row and not changed[b]
        out[b, :] = refit_one(tb, A0, rows[b], mode, k, shift[b], fac_new[b], changed[b], work, fast,
                              w_sum)
        if fast:
            work[rows[b]] = A0[rows[b]]
    return out
