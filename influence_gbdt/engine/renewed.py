"""The renewed leaf rule (numba): replay, reverse, forward and refit of a tree whose leaves are
quantiles of residuals (:mod:`.quantile`). Private to the engine.

A renewed tree is alone in its round and adds to output 0. The replay stores, per leaf, the rows
(global indices) of the order statistics its quantile follows with their coefficients
(``ren_sel``, ``ren_coef``) and the weight-derivative descriptor (``ren_wd``); the reverse and
forward sweeps differentiate through those, the refit recomputes the quantiles.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from .quantile import QUANTILE_CATBOOST, quantile, residual
from .state import Layout, Renewed, Rows, Sums, Trees

#: Functions only compiled code calls: no Python wrapper to compile (see ``_jit.njit``).
_internal = numba.njit(cache=True, nogil=True, internal=True)


@_internal
def _leaf_quantile(
    lay: Layout, y: NDArray[np.float64], ren: Renewed, t: int, gl: int, A: NDArray[np.float64],
    delta: NDArray[np.float64], moved: bool, w: NDArray[np.float64], skip: int, buf: NDArray[np.float64],
    rows: NDArray[np.int64], sel: NDArray[np.int64], coef: NDArray[np.float64], wd: NDArray[np.float64],
    order: NDArray[np.int64],
) -> tuple[float, int]:
    """The quantile of leaf ``gl``'s residuals (row ``skip`` left out), rows at ``A`` plus, if
    ``moved``, their change ``delta``. Returns (quantile, number of rows); ``rows`` holds the rows,
    ``sel`` positions into them."""
    first = lay.leaf_first[gl]
    k = 0
    for q in range(first, first + lay.leaf_count[gl]):
        j = lay.rows_by_leaf[t, q]
        if j == skip:
            continue
        m = A[j, 0] + (delta[j, 0] if moved else 0.0)
        buf[k] = residual(ren.q_method, y[j, 0], m)
        rows[k] = j
        buf[buf.shape[0] // 2 + k] = 1.0 if ren.q_method == QUANTILE_CATBOOST else w[j]
        k += 1
    half = buf.shape[0] // 2
    value = quantile(ren.q_method, buf[:k], buf[half : half + k], ren.q_alpha[t], ren.q_weighted,
                     ren.q_delta, sel, coef, wd, order[:k])
    return value, k


@_internal
def _scratch(n: int) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64],
                              NDArray[np.float64], NDArray[np.float64]]:
    """Work arrays of :func:`_leaf_quantile` for ``n`` rows: buf, rows, order, sel, coef, wd."""
    return (np.empty(2 * n), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty(2, dtype=np.int64), np.empty(2), np.empty(4))


@_internal
def replay_tree(
    lay: Layout, trees: Trees, rw: Rows, sums: Sums, ren: Renewed, t: int, A: NDArray[np.float64]
) -> None:
    """Recompute renewed tree ``t``'s leaves at margins ``A`` (n, K); record the descriptors."""
    n = A.shape[0]
    buf, rows, order, sel, coef, wd = _scratch(n)
    none = np.empty((0, A.shape[1]))
    for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
        q, _ = _leaf_quantile(lay, rw.y, ren, t, gl, A, none, False, rw.w, -1, buf, rows, sel, coef, wd,
                              order)
        sums.values[gl] = trees.lr[t] * q
        for k in range(2):
            ren.ren_sel[gl, k] = rows[sel[k]] if sel[k] >= 0 else -1
            ren.ren_coef[gl, k] = coef[k]
        ren.ren_wd[gl, :] = wd


@_internal
def _before_pivot(ren: Renewed, gl: int, j: int, r_j: float, r_p: float) -> tuple[float, float]:
    """``(before, at)``: whether row ``j`` (residual ``r_j``) sorts before / is the order statistic
    ``p`` (row ``ren_sel[gl, 1]``, residual ``r_p``) in the stable order of the leaf."""
    pivot = ren.ren_sel[gl, 1]
    if j == pivot:
        return 0.0, 1.0
    return (1.0 if (r_j < r_p or (r_j == r_p and j < pivot)) else 0.0), 0.0


@_internal
def _weight_derivative(y: NDArray[np.float64], ren: Renewed, gl: int, A: NDArray[np.float64],
                       j: int) -> float:
    """``dQ / dw_j`` of leaf ``gl`` (LightGBM's weight-interpolated quantile; 0 otherwise)."""
    wd = ren.ren_wd[gl]
    if wd[0] == 0.0:
        return 0.0
    p = ren.ren_sel[gl, 1]
    r_p = residual(ren.q_method, y[p, 0], A[p, 0])
    before, at = _before_pivot(ren, gl, j, residual(ren.q_method, y[j, 0], A[j, 0]), r_p)
    return wd[0] * (wd[1] - before - at * wd[2])


@_internal
def reverse_tree(
    lay: Layout, y: NDArray[np.float64], ren: Renewed, t: int, A: NDArray[np.float64], u_bar:
    NDArray[np.float64],
    rl0: int, a_bar: NDArray[np.float64], w_bar: NDArray[np.float64],
) -> None:
    """Backward through renewed tree ``t`` for a batch: ``u_bar`` (B, leaves of the round) holds
    d objective / d (leaf value / learning rate); ``A`` are the margins the tree started from."""
    B = u_bar.shape[0]
    for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
        for k in range(2):
            j = ren.ren_sel[gl, k]
            if j >= 0:
                for b in range(B):
                    a_bar[b, j, 0] -= u_bar[b, gl - rl0] * ren.ren_coef[gl, k]  # residual = y - m
        if ren.ren_wd[gl, 0] != 0.0:
            first = lay.leaf_first[gl]
            for q in range(first, first + lay.leaf_count[gl]):
                j = lay.rows_by_leaf[t, q]
                slope = _weight_derivative(y, ren, gl, A, j)
                for b in range(B):
                    w_bar[b, j] += u_bar[b, gl - rl0] * slope


@_internal
def forward_tree(
    lay: Layout, trees: Trees, y: NDArray[np.float64], ren: Renewed, t: int, A: NDArray[np.float64],
    J: NDArray[np.float64], i0: int, track: bool, own: float, out: NDArray[np.float64],
) -> None:
    """d leaf value / d v_i0 of renewed tree ``t`` into ``out`` (global leaves): through the
    margins of the order statistics (``J``: rows' margin derivatives; only row ``i0``'s, in
    ``J[0]``, when not ``track``) and through row ``i0``'s own weight (``own`` = d w_i0 / d v_i0)."""
    li0 = lay.leaf_off[t] + lay.leaf[t, i0]
    for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
        acc = 0.0
        for k in range(2):
            j = ren.ren_sel[gl, k]
            if j >= 0 and (track or j == i0):
                acc -= ren.ren_coef[gl, k] * J[j if track else 0, 0]
        if gl == li0:
            acc += own * _weight_derivative(y, ren, gl, A, i0)
        out[gl] = trees.lr[t] * acc


@_internal
def refit_tree(
    lay: Layout, trees: Trees, y: NDArray[np.float64], sums: Sums, ren: Renewed, t: int, A:
    NDArray[np.float64],
    delta: NDArray[np.float64], sel_leaves: NDArray[np.bool_], every: bool, changed: bool,
    w: NDArray[np.float64], i0: int, out: NDArray[np.float64],
) -> None:
    """New leaves of renewed tree ``t`` without row ``i0`` into ``out`` (global leaves): a leaf
    whose rows all keep their margins and weights, and which did not hold ``i0``, keeps its value."""
    n = A.shape[0]
    buf, rows, order, sel, coef, wd = _scratch(n)
    track = delta.shape[0] > 0
    li0 = lay.leaf_off[t] + lay.leaf[t, i0]
    for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
        moved = track and (every or sel_leaves[gl])
        if not (moved or changed or gl == li0):
            out[gl] = sums.values[gl]
            continue
        q, _ = _leaf_quantile(lay, y, ren, t, gl, A, delta, moved, w, i0, buf, rows, sel, coef, wd, order)
        out[gl] = trees.lr[t] * q
