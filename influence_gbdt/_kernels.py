"""Compiled building blocks shared by the engine's kernels, and the replay (numba). Private.

Every kernel takes a :class:`~influence_gbdt._tables.Tables` and works in float64; margins are
arrays of shape (n, K). Update-set modes: ``ALL`` (every row's change is propagated), ``NONE``
(SinglePoint: only the scored row's own change is), ``TOPK`` (rows of the k leaves with the
largest accumulated |change|, Eq. 3 of the paper, plus the scored row).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from . import _jit as numba
from ._tables import Tables
from .losses import grad_hess, jvp, point, weighted

ALL = 0
NONE = 1
TOPK = 2

_jit = numba.njit(cache=True, nogil=True)


@_jit
def max_leaves(tb: Tables) -> int:
    """The largest number of leaves of any tree (size of per-tree scratch arrays)."""
    return int(np.max(tb.leaf_off[1:] - tb.leaf_off[:-1]))


@_jit
def leaf_step(G: float, H: float, lam: float, l1: float, mds: float) -> tuple[float, float, float]:
    """One leaf-estimation step and its partial derivatives.

    Returns ``(delta, d delta / d G, d delta / d D)`` with ``D = H + lam``;
    ``delta = -ThresholdL1(G, l1) / D`` clipped to ``+-mds`` (if ``mds > 0``); 0 where ``D <= 0``
    (an empty leaf without l2). A leaf whose rows all have zero hessian (CatBoost's Huber outside
    delta) takes ``-G / lam``.
    """
    if H + lam <= 0.0:
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


@_jit
def row_margin(
    tb: Tables, r: int, A: NDArray[np.float64], j: int, u: NDArray[np.float64], mrow: NDArray[np.float64]
) -> None:
    """``mrow = A[j]`` plus the in-tree moves ``u`` (per global leaf) of round ``r``'s trees."""
    mrow[:] = A[j]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        mrow[tb.out[t]] += u[tb.leaf_off[t] + tb.leaf[t, j]]


@_jit
def add_round(tb: Tables, r: int, A: NDArray[np.float64], values: NDArray[np.float64], sign: float) -> None:
    """Add (``sign = 1``) or remove (``-1``) round ``r``'s leaf ``values`` to every row's margins."""
    n = A.shape[0]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        c = tb.out[t]
        base = tb.leaf_off[t]
        for j in range(n):
            A[j, c] += sign * values[base + tb.leaf[t, j]]


@_jit
def select_leaves(
    tb: Tables, t: int, mode: int, k: int, change: NDArray[np.float64], selected: NDArray[np.bool_]
) -> bool:
    """Mark the update-set leaves of tree ``t`` in ``selected``; return True if all are selected.

    TOPK ranks leaves by the accumulated ``sum_j sum_c |change[j, c]|`` over their rows (ties:
    lower leaf first).
    """
    L = tb.leaf_off[t + 1] - tb.leaf_off[t]
    if mode == ALL or (mode == TOPK and k >= L):
        selected[:L] = True
        return True
    selected[:L] = False
    if mode == TOPK and k > 0:
        mass = np.zeros(L)
        for j in range(tb.leaf.shape[1]):
            acc = 0.0
            for c in range(change.shape[1]):
                acc += abs(change[j, c])
            mass[tb.leaf[t, j]] += acc
        order = np.argsort(-mass, kind="mergesort")
        for r in range(k):
            selected[order[r]] = True
    return False


@_jit
def step_point(
    tb: Tables, r: int, s: int, A: NDArray[np.float64], j: int, mrow: NDArray[np.float64],
    z: NDArray[np.float64],
) -> None:
    """Loss point ``z`` of row ``j`` at step ``s`` of round ``r`` of the *original* replay: its
    margins ``A[j]`` entering the round plus the trees' cached in-tree moves."""
    mrow[:] = A[j]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        mrow[tb.out[t]] += tb.u_before[tb.sl_off[tb.step_ptr[t] + s] + tb.leaf[t, j]]
    point(tb.code, tb.prm, mrow, z)


@_jit
def round_sizes(tb: Tables) -> tuple[int, int]:
    """The most leaves, and the most step-leaf slots, of any round."""
    most_leaves, most_slots = 0, 0
    for r in range(tb.round_ptr.shape[0] - 1):
        t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
        most_leaves = max(most_leaves, tb.leaf_off[t1] - tb.leaf_off[t0])
        most_slots = max(most_slots, tb.sl_off[tb.step_ptr[t1]] - tb.sl_off[tb.step_ptr[t0]])
    return most_leaves, most_slots


@numba.njit(cache=True)
def replay(tb: Tables, A: NDArray[np.float64]) -> None:  # noqa: C901 -- one loop nest over rounds and steps
    """Recompute every leaf value from the data and fill the caches of ``tb`` in place.

    ``A`` (n, K) holds the initial margins on entry and the final ones on return; the recomputed
    leaf values are ``tb.values``. Accepted step scales are taken as recorded (never re-decided).
    Margins move by the *stored* leaf values, so every tree is recomputed at the booster's own
    margins and a last-bit difference in one tree cannot cascade into the next.
    """
    n, K = A.shape
    W = tb.w.sum() / n
    u = np.zeros(tb.leaf_off[-1])
    z = np.empty(tb.zsize)
    g = np.empty(K)
    h = np.empty(K)
    mrow = np.empty(K)
    unit = np.zeros(K)
    dg = np.empty(K)
    dh = np.empty(K)
    group_sums = tb.GV.shape[0] > 0
    for r in range(tb.round_ptr.shape[0] - 1):
        t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
        for s in range(tb.n_steps[t0]):  # trees sharing a round take one step each
            for t in range(t0, t1):
                o = tb.sl_off[tb.step_ptr[t] + s]
                L = tb.leaf_off[t + 1] - tb.leaf_off[t]
                tb.G[o : o + L] = 0.0
                tb.H[o : o + L] = 0.0
                if group_sums:
                    tb.GV[o : o + L] = 0.0
                    tb.HV[o : o + L] = 0.0
            multi = tb.n_steps[t0] > 1
            for j in range(n):
                row_margin(tb, r, A, j, u, mrow)
                point(tb.code, tb.prm, mrow, z)
                grad_hess(tb.code, tb.prm, tb.y[j], z, g, h)
                wj = tb.w[j]
                for t in range(t0, t1):
                    c = tb.out[t]
                    sl = tb.sl_off[tb.step_ptr[t] + s] + tb.leaf[t, j]
                    wg, wh = weighted(tb.code, g[c], h[c], wj, tb.f32)
                    tb.G[sl] += wg
                    tb.H[sl] += wh if tb.newton[t] else wj
                    if group_sums:
                        tb.GV[sl, tb.grp[j]] += tb.v[j] * g[c]
                        tb.HV[sl, tb.grp[j]] += tb.v[j] * (h[c] if tb.newton[t] else 1.0)
                    if multi:  # d/du of the sums, for the steps after this one
                        unit[c] = 1.0
                        jvp(tb.code, tb.prm, tb.y[j], z, unit, dg, dh)
                        unit[c] = 0.0
                        tb.SDG[sl] += wj * dg[c]
                        tb.SDH[sl] += wj * dh[c]
            for t in range(t0, t1):
                base = tb.leaf_off[t]
                o = tb.sl_off[tb.step_ptr[t] + s]
                for lj in range(tb.leaf_off[t + 1] - base):
                    lam = tb.l2[base + lj] + tb.l2m[t] * W
                    d, rg, rd = leaf_step(tb.G[o + lj], tb.H[o + lj], lam, tb.l1[t], tb.mds[t])
                    tb.u_before[o + lj] = u[base + lj]
                    tb.RG[o + lj] = rg
                    tb.RD[o + lj] = rd
                    u[base + lj] += tb.scales[t, s] * d
        for t in range(t0, t1):
            for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
                tb.values[gl] = tb.lr[t] * u[gl]
                u[gl] = 0.0
        add_round(tb, r, A, tb.stored, 1.0)


@numba.njit(cache=True, nogil=True)
def leaf_sums(
    tb: Tables, leaf_delta: NDArray[np.float64], base_delta: NDArray[np.float64], test_leaf: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Margin changes of test points: ``out[b, j, c] = base_delta[b, c] + sum_{t: out[t] = c}
    leaf_delta[b, test_leaf[t, j]]``, shape (B, m, K). ``test_leaf`` (T, m) holds global leaves."""
    B = leaf_delta.shape[0]
    T, m = test_leaf.shape
    out = np.empty((B, m, tb.K))
    for b in range(B):
        for j in range(m):
            out[b, j, :] = base_delta[b]
            for t in range(T):
                out[b, j, tb.out[t]] += leaf_delta[b, test_leaf[t, j]]
    return out
