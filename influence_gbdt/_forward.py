"""Forward mode (numba): d leaf value / d user weight of one training row at a time (the paper's
Algorithm 4, LeafInfluence), with an update set. Private: use the engine."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from . import _jit as numba
from . import _joint
from ._kernels import NONE, add_round, advance_row, round_sizes, select_leaves, step_point
from ._renew import forward_tree
from ._tables import Tables
from .losses import derivs1, grad_hess, jvp


@numba.njit(cache=True, nogil=True, inline="always")  # called per row: a call would cost the
def add_row_share(  # reference counts of every array in the tables
    tb: Tables, r: int, s: int, A: NDArray[np.float64], j: int, J: NDArray[np.float64], only: int,
    dG: NDArray[np.float64], dD: NDArray[np.float64], dM: NDArray[np.float64], scratch: NDArray[np.float64],
) -> None:
    """Add row ``j``'s share ``w_j (dg/dm . J_j, dh/dm . J_j)`` to the leaf derivatives of the
    round's trees (only tree ``only`` if >= 0). ``dG``, ``dD`` are indexed by global leaf minus
    the round's first leaf; a joint round fills ``dM`` (leaves, K) with the full hessian's
    derivative instead of ``dD``; ``scratch`` is (4, max(K, zsize))."""
    K = A.shape[1]
    rl0 = tb.leaf_off[tb.round_ptr[r]]
    if tb.joint[tb.round_ptr[r]]:
        _joint.add_row_derivative(tb, r, A, j, J, only, dG, dM, scratch[1, : tb.zsize], scratch[2, :K])
        return
    if K == 1:  # scalars: no per-row calls taking arrays (see _reverse._row_adjoints1)
        m = A[j, 0]
        for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
            m += tb.u_before[tb.sl_off[tb.step_ptr[t] + s] + tb.leaf[t, j]]
        _, hh, d2g, d2h = derivs1(tb.code, tb.prm, tb.y[j, 0], m)
        dg1 = d2g * J[0]
        dh1 = d2h * J[0] if hh >= tb.prm[0] else 0.0
        for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
            if only < 0 or t == only:
                x = tb.leaf_off[t] + tb.leaf[t, j] - rl0
                dG[x] += tb.w[j] * dg1
                if tb.newton[t]:
                    dD[x] += tb.w[j] * dh1
        return
    mrow, z, dg, dh = scratch[0, :K], scratch[1, : tb.zsize], scratch[2, :K], scratch[3, :K]
    step_point(tb, r, s, A, j, mrow, z)
    jvp(tb.code, tb.prm, tb.y[j], z, J, dg, dh)
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        if only < 0 or t == only:
            c = tb.out[t]
            x = tb.leaf_off[t] + tb.leaf[t, j] - rl0
            dG[x] += tb.w[j] * dg[c]
            if tb.newton[t]:
                dD[x] += tb.w[j] * dh[c]


@numba.njit(cache=True, nogil=True)
def forward_one(  # noqa: C901 -- one loop nest over rounds, steps and the update set
    tb: Tables, A0: NDArray[np.float64], i0: int, mode: int, k: int,
    d_base: NDArray[np.float64], d_fac: NDArray[np.float64], d_sumw: float,
    work: NDArray[np.float64], row_only: bool,
) -> NDArray[np.float64]:
    """d leaf value / d v_i0 for every leaf, shape (n_total,).

    ``A0`` (n, K) are the initial margins; ``d_base`` (K,) = d base margin / d v_i0;
    ``d_fac`` (G,) = d (dataset factor * objective factor) / d v_i0 per group; ``d_sumw`` =
    d (sum of effective weights) / d v_i0.
    The update set propagates the margin derivatives of its rows (SinglePoint: row i0 alone).
    ``row_only`` (single_point without renewed leaves: no other row is read) follows row ``i0``'s
    margins alone in ``work`` (n, K; holding ``A0``; the caller restores row ``i0``): O(leaves)
    per round.
    """
    n, K = A0.shape
    n_all = n + tb.outside[1]  # rows of the whole training set (a Dask partition holds some)
    A = work if row_only else A0.copy()
    track = mode != NONE
    J = np.empty((n if track else 1, K))
    J[:, :] = d_base
    ji0 = i0 if track else 0
    out = np.empty(tb.leaf_off[-1])
    du = np.zeros(tb.leaf_off[-1])
    sel = np.zeros(tb.leaf_off[-1], dtype=np.bool_)
    most_leaves, _ = round_sizes(tb)
    dG = np.empty(most_leaves)
    dD = np.empty(most_leaves)
    dM = np.empty((most_leaves, K))
    scratch = np.empty((4, max(K, tb.zsize)))
    z = np.empty(tb.zsize)
    g = np.empty(K)
    h = np.empty(K)
    mrow = np.empty(K)
    group_terms = tb.GV.shape[0] > 0
    s_i0 = tb.dfac[tb.grp[i0]] * tb.ofac[tb.grp[i0]]
    for r in range(tb.round_ptr.shape[0] - 1):
        t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
        rl0 = tb.leaf_off[t0]
        every = track
        for t in range(t0, t1):
            if track:
                every = select_leaves(tb, t, mode, k, J, sel[tb.leaf_off[t] : tb.leaf_off[t + 1]]) and every
            du[tb.leaf_off[t] : tb.leaf_off[t + 1]] = 0.0
        if tb.renew[t0]:
            forward_tree(tb, t0, A, J, i0, track, s_i0, out)
            _propagate(tb, r, t0, t1, track, i0, J, out)
            add_round(tb, r, A, tb.stored, 1.0)
            continue
        for s in range(tb.n_steps[t0]):
            dG[:] = 0.0
            dD[:] = 0.0
            dM[:, :] = 0.0
            if every:
                for j in range(n):
                    add_row_share(tb, r, s, A, j, J[j], -1, dG, dD, dM, scratch)
            else:
                for t in range(t0, t1):
                    if track:
                        for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
                            if sel[gl]:
                                first = tb.leaf_first[gl]
                                for q in range(first, first + tb.leaf_count[gl]):
                                    j = tb.rows_by_leaf[t, q]
                                    add_row_share(tb, r, s, A, j, J[j], t, dG, dD, dM, scratch)
                    if not (track and sel[tb.leaf_off[t] + tb.leaf[t, i0]]):
                        add_row_share(tb, r, s, A, i0, J[ji0], t, dG, dD, dM, scratch)  # the row's own change
            if tb.joint[t0]:
                _joint.forward_steps(tb, r, A, i0, s_i0, d_fac, tb.l2m[t0] * d_sumw / n_all, dG, dM, du)
                continue
            step_point(tb, r, s, A, i0, mrow, z)
            grad_hess(tb.code, tb.prm, tb.y[i0], z, g, h)
            for t in range(t0, t1):
                c = tb.out[t]
                o = tb.sl_off[tb.step_ptr[t] + s]
                li0 = tb.leaf[t, i0]
                for lj in range(tb.leaf_off[t + 1] - tb.leaf_off[t]):
                    gl = tb.leaf_off[t] + lj
                    dg_l = dG[gl - rl0] + du[gl] * tb.SDG[o + lj]
                    dd_l = dD[gl - rl0] + du[gl] * tb.SDH[o + lj] if tb.newton[t] else 0.0
                    if lj == li0:
                        dg_l += s_i0 * g[c]
                        dd_l += s_i0 * (h[c] if tb.newton[t] else 1.0)
                    if group_terms:
                        for q in range(d_fac.shape[0]):
                            dg_l += d_fac[q] * tb.GV[o + lj, q]
                            dd_l += d_fac[q] * tb.HV[o + lj, q]
                    dd_l += tb.l2m[t] * d_sumw / n_all
                    du[gl] += tb.scales[t, s] * (tb.RG[o + lj] * dg_l + tb.RD[o + lj] * dd_l)
        for t in range(t0, t1):
            for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
                out[gl] = tb.lr[t] * du[gl]
        _propagate(tb, r, t0, t1, track, i0, J, out)
        if row_only:
            advance_row(tb, r, A, i0)
        else:
            add_round(tb, r, A, tb.stored, 1.0)
    return out


@numba.njit(cache=True, nogil=True)
def _propagate(
    tb: Tables, r: int, t0: int, t1: int, track: bool, i0: int, J: NDArray[np.float64],
    out: NDArray[np.float64],
) -> None:
    """Add round ``r``'s leaf derivatives ``out`` to the margin derivatives ``J`` of the rows
    tracked (every row, or only row i0 in ``J[0]``)."""
    if track:
        add_round(tb, r, J, out, 1.0)
    else:
        for t in range(t0, t1):
            J[0, tb.out[t]] += out[tb.leaf_off[t] + tb.leaf[t, i0]]


@numba.njit(cache=True, nogil=True)
def forward_many(
    tb: Tables, A0: NDArray[np.float64], rows: NDArray[np.int64], mode: int, k: int,
    d_base: NDArray[np.float64], d_fac: NDArray[np.float64], d_sumw: NDArray[np.float64],
) -> NDArray[np.float64]:
    """:func:`forward_one` for each of ``rows`` (B,); ``d_base`` (B, K), ``d_fac`` (B, G),
    ``d_sumw`` (B,). Returns (B, n_total)."""
    out = np.empty((rows.shape[0], tb.leaf_off[-1]))
    fast = mode == NONE and not tb.renew.any()  # single_point: only row i0's margins are read
    work = A0.copy() if fast else np.empty((0, A0.shape[1]))
    for b in range(rows.shape[0]):
        out[b, :] = forward_one(tb, A0, rows[b], mode, k, d_base[b], d_fac[b], d_sumw[b], work, fast)
        if fast:
            work[rows[b]] = A0[rows[b]]
    return out
