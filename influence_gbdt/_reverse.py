"""Reverse mode (numba): the exact LeafInfluence of every training row on a batch of objectives.

Private: use :meth:`influence_gbdt.engine.InfluenceEngine.influence_reverse`. One sweep over the
rounds, last to first, costs O(n * steps) for *all* training rows; the loss derivatives of a row
are evaluated once per step and shared by the whole batch of objectives.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from . import _jit as numba
from . import _joint
from ._kernels import add_round, round_sizes, step_point
from ._renew import reverse_tree
from ._tables import Tables
from .losses import derivs1, grad_hess, vjp


@numba.njit(cache=True, nogil=True)
def gather_adjoints(tb: Tables, r: int, a_bar: NDArray[np.float64], u_bar: NDArray[np.float64]) -> None:
    """Add each row's margin adjoint ``a_bar`` (B, n, K) to its leaf in round ``r``'s trees:
    ``u_bar[b, l - first leaf of the round] += sum_{j in l} a_bar[b, j, out[t]]``."""
    rl0 = tb.leaf_off[tb.round_ptr[r]]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        c = tb.out[t]
        base = tb.leaf_off[t] - rl0
        for b in range(u_bar.shape[0]):  # objective outer: a_bar[b] is read in order
            for j in range(a_bar.shape[1]):
                u_bar[b, base + tb.leaf[t, j]] += a_bar[b, j, c]


@numba.njit(cache=True, nogil=True)
def leaf_adjoints(
    tb: Tables, r: int, n: int, u_bar: NDArray[np.float64], g_bar: NDArray[np.float64],
    d_bar: NDArray[np.float64], big_w_bar: NDArray[np.float64],
) -> None:
    """Round ``r``'s leaf-level backward step (no rows): from ``u_bar`` (B, leaves of the round),
    d objective / d leaf value (in place: times the learning rate, then through the steps, last to
    first), the adjoints of each step's leaf sums, ``g_bar`` (of G) and ``d_bar`` (of H + lam),
    (B, step-leaf slots of the round); ``big_w_bar`` (B,) gains the l2 term's share (``n`` rows)."""
    B = u_bar.shape[0]
    t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
    rl0 = tb.leaf_off[t0]
    rs0 = tb.sl_off[tb.step_ptr[t0]]
    for t in range(t0, t1):
        for gl in range(tb.leaf_off[t] - rl0, tb.leaf_off[t + 1] - rl0):
            for b in range(B):
                u_bar[b, gl] *= tb.lr[t]
        if tb.renew[t]:
            continue
        for s in range(tb.n_steps[t] - 1, -1, -1):
            o = tb.sl_off[tb.step_ptr[t] + s]
            for lj in range(tb.leaf_off[t + 1] - tb.leaf_off[t]):
                gl = tb.leaf_off[t] + lj - rl0
                for b in range(B):
                    db = tb.scales[t, s] * u_bar[b, gl]
                    gb = db * tb.RG[o + lj]
                    dd = db * tb.RD[o + lj]
                    g_bar[b, o + lj - rs0] = gb
                    d_bar[b, o + lj - rs0] = dd
                    u_bar[b, gl] += gb * tb.SDG[o + lj]
                    if tb.newton[t]:
                        u_bar[b, gl] += dd * tb.SDH[o + lj]
                    big_w_bar[b] += dd * tb.l2m[t] / n


@numba.njit(cache=True, nogil=True)
def row_adjoints(
    tb: Tables, r: int, s: int, A: NDArray[np.float64], g_bar: NDArray[np.float64],
    d_bar: NDArray[np.float64], a_bar: NDArray[np.float64], w_bar: NDArray[np.float64],
) -> None:
    """Step ``s`` of round ``r`` for every row of ``A`` (its margins entering the round, (n, K)):
    add to ``w_bar`` (B, n) the adjoint of the row's weight through its leaf sums and to ``a_bar``
    (B, n, K) that of its margins, from the step's sum adjoints ``g_bar``, ``d_bar`` (as
    :func:`leaf_adjoints` leaves them)."""
    B = g_bar.shape[0]
    n, K = A.shape
    t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
    rs0 = tb.sl_off[tb.step_ptr[t0]]
    if K == 1:
        _row_adjoints1(tb, t0, t1, s, rs0, A, g_bar, d_bar, a_bar, w_bar)
        return
    z = np.empty(tb.zsize)
    g = np.empty(K)
    h = np.empty(K)
    mrow = np.empty(K)
    beta = np.empty(K)
    gamma = np.empty(K)
    vec = np.empty(K)
    for j in range(n):
        wj = tb.w[j]
        step_point(tb, r, s, A, j, mrow, z)
        grad_hess(tb.code, tb.prm, tb.y[j], z, g, h)
        for b in range(B):
            beta[:] = 0.0
            gamma[:] = 0.0
            acc = 0.0
            for t in range(t0, t1):
                c = tb.out[t]
                k = tb.sl_off[tb.step_ptr[t] + s] + tb.leaf[t, j] - rs0
                gb = g_bar[b, k]
                dd = d_bar[b, k]
                beta[c] += wj * gb
                if tb.newton[t]:
                    gamma[c] += wj * dd
                    acc += gb * g[c] + dd * h[c]
                else:
                    acc += gb * g[c] + dd
            w_bar[b, j] += acc
            vjp(tb.code, tb.prm, tb.y[j], z, beta, gamma, vec)
            for c in range(K):
                a_bar[b, j, c] += vec[c]


@numba.njit(cache=True, nogil=True)
def _row_adjoints1(
    tb: Tables, t0: int, t1: int, s: int, rs0: int, A: NDArray[np.float64], g_bar: NDArray[np.float64],
    d_bar: NDArray[np.float64], a_bar: NDArray[np.float64], w_bar: NDArray[np.float64],
) -> None:
    """:func:`row_adjoints` of a one-output model (trees ``t0 .. t1 - 1`` of the round), with the
    loss derivatives as scalars: no per-row calls taking the tables or arrays (each such call
    costs the reference counts of every array it is given, ~2 us a row, measured 100x the work).
    The rows' derivatives are computed once (as the replay caches them), then
    :func:`_cached_row_adjoints1` runs."""
    n = A.shape[0]
    floor = tb.prm[0]
    der = np.empty((n, 4))  # g, h, w dg/dm, w dh/dm of each row
    for j in range(n):
        m = A[j, 0]
        for t in range(t0, t1):
            m += tb.u_before[tb.sl_off[tb.step_ptr[t] + s] + tb.leaf[t, j]]
        g, h, dg, dh = derivs1(tb.code, tb.prm, tb.y[j, 0], m)
        if h < floor:  # the booster's floored hessian is constant in the margin
            h, dh = floor, 0.0
        der[j, 0], der[j, 1], der[j, 2], der[j, 3] = g, h, tb.w[j] * dg, tb.w[j] * dh
    _cached_row_adjoints1(tb, t0, t1, s, rs0, der, g_bar, d_bar, a_bar, w_bar)


@numba.njit(cache=True, nogil=True)
def _cached_row_adjoints1(
    tb: Tables, t0: int, t1: int, s: int, rs0: int, der: NDArray[np.float64], g_bar: NDArray[np.float64],
    d_bar: NDArray[np.float64], a_bar: NDArray[np.float64], w_bar: NDArray[np.float64],
) -> None:
    """:func:`row_adjoints` of a one-output model from the rows' derivatives at the step, ``der``
    (n, 4): g, h (floored), w dg/dm, w dh/dm. Each objective runs over the rows in order (its rows
    of ``w_bar`` and ``a_bar`` are contiguous; objective-inner order strides by n)."""
    n = der.shape[0]
    for b in range(g_bar.shape[0]):
        for j in range(n):
            beta = 0.0
            gamma = 0.0
            acc = 0.0
            for t in range(t0, t1):
                k = tb.sl_off[tb.step_ptr[t] + s] + tb.leaf[t, j] - rs0
                gb = g_bar[b, k]
                dd = d_bar[b, k]
                beta += gb
                if tb.newton[t]:
                    gamma += dd
                    acc += gb * der[j, 0] + dd * der[j, 1]
                else:
                    acc += gb * der[j, 0] + dd
            w_bar[b, j] += acc
            a_bar[b, j, 0] += beta * der[j, 2] + gamma * der[j, 3]


@numba.njit(cache=True, nogil=True)
def _every_step_cached(tb: Tables) -> bool:
    """Whether the derivative cache holds every leaf step the replay took."""
    for r in range(tb.round_ptr.shape[0] - 1):
        t0 = tb.round_ptr[r]
        for s in range(tb.n_steps[t0]):
            if tb.der_slot[tb.step_ptr[t0] + s] < 0:
                return False
    return True


@numba.njit(cache=True, nogil=True)
def reverse(
    tb: Tables, A_final: NDArray[np.float64], c_leaf: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Vector-Jacobian products of ``B`` objectives through the whole ensemble.

    Parameters
    ----------
    A_final : (n, K) the replay's final training margins.
    c_leaf : (B, n_total) d objective / d leaf value coming from the test side.

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
    most_leaves, most_slots = round_sizes(tb)
    u_bar = np.empty((B, most_leaves))
    g_bar = np.empty((B, most_slots))
    d_bar = np.empty((B, most_slots))
    every_step_cached = _every_step_cached(tb)  # then the margins are never needed
    for r in range(tb.round_ptr.shape[0] - 2, -1, -1):
        t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
        rl0 = tb.leaf_off[t0]
        n_round = tb.leaf_off[t1] - rl0
        for b in range(B):
            u_bar[b, :n_round] = c_leaf[b, rl0 : rl0 + n_round]
        if tb.joint[t0]:
            _joint.gather_and_rewind(tb, r, A, a_bar, u_bar)
            _joint.leaf_adjoints(tb, r, n, u_bar, g_bar, big_w_bar)
            _joint.row_adjoints(tb, r, A, g_bar, a_bar, w_bar)
            continue
        gather_adjoints(tb, r, a_bar, u_bar)
        leaf_adjoints(tb, r, n, u_bar, g_bar, d_bar, big_w_bar)
        if not every_step_cached:  # margins entering the round, for the derivatives not cached
            add_round(tb, r, A, tb.stored, -1.0)
        if tb.renew[t0]:
            reverse_tree(tb, t0, A, u_bar, rl0, a_bar, w_bar)
            continue
        for s in range(tb.n_steps[t0]):
            q = tb.der_slot[tb.step_ptr[t0] + s]
            if q >= 0:  # the replay's derivatives of this step
                _cached_row_adjoints1(tb, t0, t1, s, tb.sl_off[tb.step_ptr[t0]], tb.DER[q], g_bar,
                                      d_bar, a_bar, w_bar)
            else:
                row_adjoints(tb, r, s, A, g_bar, d_bar, a_bar, w_bar)
    a0_bar = np.zeros((B, K))
    for b in range(B):
        for j in range(n):
            for c in range(K):
                a0_bar[b, c] += a_bar[b, j, c]
    return w_bar, a0_bar, big_w_bar
