"""Compiled inner loops of the engine (numba). Private: use :mod:`influence_gbdt.engine`.

Every kernel takes a :class:`Tables` (flat arrays describing the ensemble and its replay on the
training data) and works in float64. Indexing conventions:

- tree ``t`` owns global leaves ``leaf_off[t] .. leaf_off[t + 1] - 1``;
- its leaf-estimation steps are the flat steps ``step_ptr[t] .. step_ptr[t + 1] - 1``;
- flat step ``st`` owns per-leaf slots ``sl_off[st] .. sl_off[st] + n_leaves[t] - 1`` in the
  step-leaf arrays (``u_before``, ``G``, ``H``, ``SWH``, ``SWK``, ``RG``, ``RD``);
- rows of leaf ``l`` of tree ``t`` are ``rows_by_leaf[t, leaf_first[l] : leaf_first[l] + leaf_count[l]]``.

Update-set modes: ``ALL`` (every row's change is propagated), ``NONE`` (SinglePoint: none is),
``TOPK`` (rows of the k leaves with the largest accumulated |change|, Eq. 3 of the paper).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from . import _jit as numba
from .losses import derivatives, point, weighted_gh

ALL = 0
NONE = 1
TOPK = 2

_jit = numba.njit(cache=True, nogil=True)


class Tables(NamedTuple):
    """Flat arrays shared by the kernels; see the module docstring for the layout."""

    leaf: NDArray[np.int32]  # (T, n) leaf of each training row, local to the tree
    leaf_off: NDArray[np.int64]  # (T + 1,)
    newton: NDArray[np.bool_]  # (T,)
    lr: NDArray[np.float64]  # (T,)
    l1: NDArray[np.float64]  # (T,)
    mds: NDArray[np.float64]  # (T,) max_delta_step, 0 = none
    l2: NDArray[np.float64]  # (n_total,)
    l2pw: NDArray[np.float64]  # (T,) l2 per unit of total weight
    n_steps: NDArray[np.int64]  # (T,)
    scales: NDArray[np.float64]  # (T, S) accepted step scales
    step_ptr: NDArray[np.int64]  # (T + 1,)
    sl_off: NDArray[np.int64]  # (n_flat_steps + 1,)
    rows_by_leaf: NDArray[np.int32]  # (T, n)
    leaf_first: NDArray[np.int64]  # (n_total,)
    leaf_count: NDArray[np.int64]  # (n_total,)
    y: NDArray[np.float64]  # (n,)
    w: NDArray[np.float64]  # (n,)
    loss: int
    floor: float
    f32: bool  # round each row's w g and w h to float32 before the leaf sums G, H (LightGBM)
    # Filled by replay():
    values: NDArray[np.float64]  # (n_total,) recomputed leaf values
    margin_before: NDArray[np.float64]  # (T, n) margins entering each tree
    Z: NDArray[np.float64]  # (n_flat_steps, n) loss point at each step's margins
    u_before: NDArray[np.float64]  # (n_step_leaves,) in-tree move before each step
    G: NDArray[np.float64]  # (n_step_leaves,) sum w g
    H: NDArray[np.float64]  # (n_step_leaves,) sum w h (Newton) or sum w (Gradient)
    SWH: NDArray[np.float64]  # (n_step_leaves,) sum w h
    SWK: NDArray[np.float64]  # (n_step_leaves,) sum w k
    RG: NDArray[np.float64]  # (n_step_leaves,) d step / d G
    RD: NDArray[np.float64]  # (n_step_leaves,) d step / d (H + lam)


@_jit
def _max_leaves(tb: Tables) -> int:
    """The largest number of leaves of any tree (size of per-tree scratch arrays)."""
    return int(np.max(tb.leaf_off[1:] - tb.leaf_off[:-1]))


@_jit
def leaf_step(G: float, H: float, lam: float, l1: float, mds: float) -> tuple[float, float, float]:
    """One leaf-estimation step and its partial derivatives.

    Returns ``(delta, d delta / d G, d delta / d D)`` with ``D = H + lam``;
    ``delta = -ThresholdL1(G, l1) / D`` clipped to ``+-mds`` (if ``mds > 0``); 0 where ``H <= 0``.
    """
    if H <= 0.0:
        return 0.0, 0.0, 0.0
    if l1 > 0.0:
        if G > l1:
            G = G - l1
        elif G < -l1:
            G = G + l1
        else:
            return 0.0, 0.0, 0.0
    D = H + lam
    raw = -G / D
    if mds > 0.0 and abs(raw) > mds:
        return math.copysign(mds, raw), 0.0, 0.0
    return raw, -1.0 / D, -raw / D


@numba.njit(cache=True)
def replay(
    tb: Tables, A0: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Recompute every leaf value from the data, filling the caches of ``tb`` in place.

    Returns ``(values, final_margin)``; ``tb.values`` etc. are written.
    """
    T, n = tb.leaf.shape
    W = tb.w.sum()
    A = A0.copy()
    for t in range(T):
        base = tb.leaf_off[t]
        L = tb.leaf_off[t + 1] - base
        tb.margin_before[t, :] = A
        u = np.zeros(L)
        for s in range(tb.n_steps[t]):
            st = tb.step_ptr[t] + s
            o = tb.sl_off[st]
            G = np.zeros(L)
            H = np.zeros(L)
            swh = np.zeros(L)
            swk = np.zeros(L)
            for j in range(n):
                lj = tb.leaf[t, j]
                z = point(tb.loss, A[j] + u[lj])
                tb.Z[st, j] = z
                g, h, k = derivatives(tb.loss, tb.y[j], z, tb.floor)
                wj = tb.w[j]
                wg, wh = weighted_gh(tb.loss, g, h, wj, tb.f32)
                G[lj] += wg
                swh[lj] += wj * h  # derivative caches stay unrounded
                swk[lj] += wj * k
                H[lj] += wh if tb.newton[t] else wj
            for lj in range(L):
                lam = tb.l2[base + lj] + tb.l2pw[t] * W
                d, rg, rd = leaf_step(G[lj], H[lj], lam, tb.l1[t], tb.mds[t])
                tb.u_before[o + lj] = u[lj]
                tb.G[o + lj] = G[lj]
                tb.H[o + lj] = H[lj]
                tb.SWH[o + lj] = swh[lj]
                tb.SWK[o + lj] = swk[lj]
                tb.RG[o + lj] = rg
                tb.RD[o + lj] = rd
                u[lj] += tb.scales[t, s] * d
        for lj in range(L):
            tb.values[base + lj] = tb.lr[t] * u[lj]
        for j in range(n):
            A[j] += tb.values[base + tb.leaf[t, j]]
    return tb.values, A


# ----------------------------------------------------------------------------------------------
# Reverse mode: the influence of every training row on one scalar objective.


@_jit
def _reverse_sweep(tb: Tables, c_leaf: NDArray[np.float64]) -> tuple[NDArray[np.float64], float]:
    """Vector-Jacobian product of one objective through the whole ensemble.

    ``c_leaf`` (n_total,) is d objective / d leaf value coming from the test side. Returns
    ``(d objective / d w, d objective / d initial margin)``, the first without the base-score
    term (added by the caller) and per unit of *effective* weight.
    """
    T, n = tb.leaf.shape
    max_l = _max_leaves(tb)
    max_s = tb.scales.shape[1]
    a_bar = np.zeros(n)
    w_bar = np.zeros(n)
    big_w_bar = 0.0
    g_bar = np.empty((max_s, max_l))
    d_bar = np.empty((max_s, max_l))
    u_bar = np.empty(max_l)
    for t in range(T - 1, -1, -1):
        base = tb.leaf_off[t]
        L = tb.leaf_off[t + 1] - base
        newton = tb.newton[t]
        for lj in range(L):
            u_bar[lj] = c_leaf[base + lj]
        for j in range(n):
            u_bar[tb.leaf[t, j]] += a_bar[j]
        for lj in range(L):
            u_bar[lj] *= tb.lr[t]
        for s in range(tb.n_steps[t] - 1, -1, -1):
            o = tb.sl_off[tb.step_ptr[t] + s]
            for lj in range(L):
                db = tb.scales[t, s] * u_bar[lj]
                gb = db * tb.RG[o + lj]
                dd = db * tb.RD[o + lj]
                g_bar[s, lj] = gb
                d_bar[s, lj] = dd
                u_bar[lj] += gb * tb.SWH[o + lj]
                if newton:
                    u_bar[lj] += dd * tb.SWK[o + lj]
                big_w_bar += dd * tb.l2pw[t]
        s0 = tb.step_ptr[t]
        for j in range(n):
            lj = tb.leaf[t, j]
            da = 0.0
            dw = 0.0
            for s in range(tb.n_steps[t]):
                g, h, k = derivatives(tb.loss, tb.y[j], tb.Z[s0 + s, j], tb.floor)
                gb = g_bar[s, lj]
                dd = d_bar[s, lj]
                if newton:
                    da += gb * h + dd * k
                    dw += gb * g + dd * h
                else:
                    da += gb * h
                    dw += gb * g + dd
            a_bar[j] += tb.w[j] * da
            w_bar[j] += dw
    for j in range(n):
        w_bar[j] += big_w_bar
    return w_bar, a_bar.sum()


@numba.njit(cache=True)
def reverse_one(tb: Tables, c_leaf: NDArray[np.float64]) -> tuple[NDArray[np.float64], float]:
    """:func:`_reverse_sweep` for one objective given as per-leaf coefficients."""
    return _reverse_sweep(tb, c_leaf)


@numba.njit(cache=True, parallel=True)
def reverse_many(
    tb: Tables, test_leaf: NDArray[np.int64], coef: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """One sweep per test point: objective ``coef[j] * F(x_j)``.

    ``test_leaf`` (T, m) holds *global* leaf numbers. Returns ``(w_bar (m, n), a0_bar (m,))``.
    """
    T, m = test_leaf.shape
    n = tb.leaf.shape[1]
    n_total = tb.leaf_off[T]
    out = np.empty((m, n))
    a0 = np.empty(m)
    for j in numba.prange(m):
        c_leaf = np.zeros(n_total)
        for t in range(T):
            c_leaf[test_leaf[t, j]] += coef[j]
        wb, ab = _reverse_sweep(tb, c_leaf)
        out[j, :] = wb
        a0[j] = ab
    return out, a0


# ----------------------------------------------------------------------------------------------
# Update sets (shared by forward mode and refit).


@_jit
def _select_leaves(
    tb: Tables, t: int, mode: int, k: int, change: NDArray[np.float64], selected: NDArray[np.bool_]
) -> bool:
    """Mark the update-set leaves of tree ``t`` in ``selected``; return True if all are selected.

    TOPK ranks leaves by the accumulated ``sum |change_j|`` over their rows (ties: lower leaf first).
    """
    base = tb.leaf_off[t]
    L = tb.leaf_off[t + 1] - base
    if mode == ALL or (mode == TOPK and k >= L):
        selected[:L] = True
        return True
    selected[:L] = False
    if mode == TOPK and k > 0:
        mass = np.zeros(L)
        for j in range(tb.leaf.shape[1]):
            mass[tb.leaf[t, j]] += abs(change[j])
        order = np.argsort(-mass, kind="mergesort")
        for r in range(k):
            selected[order[r]] = True
    return False


# ----------------------------------------------------------------------------------------------
# Forward mode (LeafInfluence, paper Algorithm 4, with update sets).


@_jit
def _forward_one(  # noqa: C901 -- one numba loop nest over trees and steps; helpers would cost calls
    tb: Tables, i0: int, mode: int, k: int, d_base: float
) -> NDArray[np.float64]:
    """d leaf value / d w_i0 for every leaf (n_total,), per unit of effective weight.

    ``d_base`` is d initial margin / d w_i0 (0 when the base score is fixed).
    """
    T, n = tb.leaf.shape
    track = mode != NONE
    J = np.full(n if track else 0, d_base)
    out = np.empty(tb.leaf_off[T])
    max_l = _max_leaves(tb)
    selected = np.zeros(max_l, dtype=np.bool_)
    for t in range(T):
        base = tb.leaf_off[t]
        L = tb.leaf_off[t + 1] - base
        newton = tb.newton[t]
        every = _select_leaves(tb, t, mode, k, J, selected) if track else False
        du = np.zeros(L)
        l0 = tb.leaf[t, i0]
        for s in range(tb.n_steps[t]):
            st = tb.step_ptr[t] + s
            o = tb.sl_off[st]
            dG = np.zeros(L)
            dD = np.zeros(L)
            if every:
                for j in range(n):
                    _, h, kk = derivatives(tb.loss, tb.y[j], tb.Z[st, j], tb.floor)
                    lj = tb.leaf[t, j]
                    dG[lj] += tb.w[j] * h * J[j]
                    dD[lj] += tb.w[j] * kk * J[j]
            elif track:
                for lj in range(L):
                    if selected[lj]:
                        first = tb.leaf_first[base + lj]
                        for r in range(first, first + tb.leaf_count[base + lj]):
                            j = tb.rows_by_leaf[t, r]
                            _, h, kk = derivatives(tb.loss, tb.y[j], tb.Z[st, j], tb.floor)
                            dG[lj] += tb.w[j] * h * J[j]
                            dD[lj] += tb.w[j] * kk * J[j]
            g0, h0, _ = derivatives(tb.loss, tb.y[i0], tb.Z[st, i0], tb.floor)
            dG[l0] += g0
            for lj in range(L):
                ddl = (dD[lj] + du[lj] * tb.SWK[o + lj]) if newton else 0.0
                if lj == l0:
                    ddl += h0 if newton else 1.0
                ddl += tb.l2pw[t]
                dgl = dG[lj] + du[lj] * tb.SWH[o + lj]
                du[lj] += tb.scales[t, s] * (tb.RG[o + lj] * dgl + tb.RD[o + lj] * ddl)
        for lj in range(L):
            out[base + lj] = tb.lr[t] * du[lj]
        if track:
            for j in range(n):
                J[j] += out[base + tb.leaf[t, j]]
    return out


@numba.njit(cache=True, parallel=True)
def forward_many(
    tb: Tables, rows: NDArray[np.int64], mode: int, k: int, d_base: NDArray[np.float64]
) -> NDArray[np.float64]:
    """:func:`_forward_one` for each of ``rows``; returns (len(rows), n_total)."""
    out = np.empty((rows.shape[0], tb.leaf_off[-1]))
    for b in numba.prange(rows.shape[0]):
        out[b, :] = _forward_one(tb, rows[b], mode, k, d_base[b])
    return out


# ----------------------------------------------------------------------------------------------
# LeafRefit (paper Algorithms 1-3, generalized to multi-step leaves): row i0's weight set to 0.


@_jit
def _refit_one(  # noqa: C901 -- one numba loop nest over trees and steps; helpers would cost calls
    tb: Tables, i0: int, mode: int, k: int, base_shift: float
) -> NDArray[np.float64]:
    """New leaf values (n_total,) with row ``i0`` removed (weight 0), structure fixed.

    ``base_shift`` = new initial margin - old one (0 when the base score is fixed).
    """
    T, n = tb.leaf.shape
    track = mode != NONE
    delta = np.full(n if track else 0, base_shift)
    w_total = tb.w.sum() - tb.w[i0]
    out = np.empty(tb.leaf_off[T])
    max_l = _max_leaves(tb)
    selected = np.zeros(max_l, dtype=np.bool_)
    for t in range(T):
        base = tb.leaf_off[t]
        L = tb.leaf_off[t + 1] - base
        newton = tb.newton[t]
        every = _select_leaves(tb, t, mode, k, delta, selected) if track else False
        u = np.zeros(L)
        l0 = tb.leaf[t, i0]
        for s in range(tb.n_steps[t]):
            st = tb.step_ptr[t] + s
            o = tb.sl_off[st]
            G = np.zeros(L)
            H = np.zeros(L)
            if every:
                for j in range(n):
                    if j != i0:
                        lj = tb.leaf[t, j]
                        g, h, _ = derivatives(
                            tb.loss, tb.y[j], point(tb.loss, tb.margin_before[t, j] + delta[j] + u[lj]),
                            tb.floor,
                        )
                        wg, wh = weighted_gh(tb.loss, g, h, tb.w[j], tb.f32)
                        G[lj] += wg
                        H[lj] += wh if newton else tb.w[j]
            else:
                for lj in range(L):
                    shifted = selected[lj]
                    if not shifted and u[lj] == tb.u_before[o + lj]:
                        # Nothing in this leaf moved: the cached sums minus row i0's share.
                        G[lj] = tb.G[o + lj]
                        H[lj] = tb.H[o + lj]
                        if lj == l0:
                            g0, h0, _ = derivatives(tb.loss, tb.y[i0], tb.Z[st, i0], tb.floor)
                            wg0, wh0 = weighted_gh(tb.loss, g0, h0, tb.w[i0], tb.f32)
                            G[lj] -= wg0
                            H[lj] -= wh0 if newton else tb.w[i0]
                        continue
                    first = tb.leaf_first[base + lj]
                    for r in range(first, first + tb.leaf_count[base + lj]):
                        j = tb.rows_by_leaf[t, r]
                        if j != i0:
                            m = tb.margin_before[t, j] + u[lj]
                            if shifted:
                                m += delta[j]
                            g, h, _ = derivatives(tb.loss, tb.y[j], point(tb.loss, m), tb.floor)
                            wg, wh = weighted_gh(tb.loss, g, h, tb.w[j], tb.f32)
                            G[lj] += wg
                            H[lj] += wh if newton else tb.w[j]
            for lj in range(L):
                lam = tb.l2[base + lj] + tb.l2pw[t] * w_total
                d, _, _ = leaf_step(G[lj], H[lj], lam, tb.l1[t], tb.mds[t])
                u[lj] += tb.scales[t, s] * d
        for lj in range(L):
            out[base + lj] = tb.lr[t] * u[lj]
        if track:
            for j in range(n):
                g_leaf = base + tb.leaf[t, j]
                delta[j] += out[g_leaf] - tb.values[g_leaf]
    return out


@numba.njit(cache=True, parallel=True)
def refit_many(
    tb: Tables, rows: NDArray[np.int64], mode: int, k: int, base_shift: NDArray[np.float64]
) -> NDArray[np.float64]:
    """:func:`_refit_one` for each of ``rows``; returns new leaf values (len(rows), n_total)."""
    out = np.empty((rows.shape[0], tb.leaf_off[-1]))
    for b in numba.prange(rows.shape[0]):
        out[b, :] = _refit_one(tb, rows[b], mode, k, base_shift[b])
    return out


# ----------------------------------------------------------------------------------------------
# Test side.


@numba.njit(cache=True, parallel=True)
def leaf_sums(
    leaf_delta: NDArray[np.float64], base_delta: NDArray[np.float64], test_leaf: NDArray[np.int64]
) -> NDArray[np.float64]:
    """``out[b, j] = base_delta[b] + sum_t leaf_delta[b, test_leaf[t, j]]``, shape (B, m)."""
    B = leaf_delta.shape[0]
    T, m = test_leaf.shape
    out = np.empty((B, m))
    for b in numba.prange(B):
        for j in range(m):
            acc = base_delta[b]
            for t in range(T):
                acc += leaf_delta[b, test_leaf[t, j]]
            out[b, j] = acc
    return out
