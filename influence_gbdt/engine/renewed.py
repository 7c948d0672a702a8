"""The renewed leaf rule (numba): replay, reverse, forward and refit of a tree whose leaves are
quantiles of residuals (:mod:`.quantile`). Private to the engine.

A renewed tree is alone in its round and adds to output 0. The replay stores, per leaf, the rows
(global indices) of the order statistics its quantile follows with their coefficients
(``ren_sel[:, :2]``, ``ren_coef``) and the weight-derivative descriptor (``ren_wd``, its pivot row
in ``ren_sel[:, 2]``); the reverse and forward sweeps differentiate through those, the refit
recomputes the quantiles. The reverse sweep's step is written twice: :func:`reverse_tree` for the
general sweep (:func:`.passes.reverse`, the tests' reference) and :func:`reverse_leaves` /
:func:`reverse_rows` for a team's (:mod:`.reverse1`), the same additions in the same order.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from .indexing import INDEX
from .quantile import QUANTILE_CATBOOST, quantile, residual
from .state import Layout, Renewed, Rows, Sums, Trees
from .team import CHUNK_ROWS

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
                     ren.q_delta, sel, coef, wd, order[:k], False)
    return value, k


@_internal
def _most_rows(lay: Layout, t: int, n: int, tid: int, n_team: int) -> int:
    """The most rows of tree ``t``'s leaves that are thread ``tid``'s (:func:`_mine`)."""
    most = 0
    for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
        if _mine(lay, gl, n, tid, n_team):
            most = max(most, lay.leaf_count[gl])
    return most


@_internal
def _scratch(n: int) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64],
                              NDArray[np.float64], NDArray[np.float64]]:
    """Work arrays of :func:`_leaf_quantile` for ``n`` rows: buf, rows, order, sel, coef, wd."""
    return (np.empty(2 * n), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty(2, dtype=np.int64), np.empty(2), np.empty(4))


@_internal
def _mine(lay: Layout, gl: int, n: int, tid: int, n_team: int) -> bool:
    """Whether leaf ``gl`` (of a tree of ``n`` rows) is thread ``tid``'s, of a team of ``n_team``
    sharing out a renewed tree's leaves: the leaf whose rows' middle (in the tree's rows by leaf)
    falls in the ``tid``-th of ``n_team`` equal parts of the rows."""
    return min((2 * lay.leaf_first[gl] + lay.leaf_count[gl]) * n_team // (2 * n), n_team - 1) == tid


@_internal
def replay_leaves(
    lay: Layout, trees: Trees, rw: Rows, sums: Sums, ren: Renewed, t: int, A: NDArray[np.float64], tid: int,
    n_team: int,
) -> None:
    """Thread ``tid``'s share of renewed tree ``t``'s leaves, recomputed at margins ``A`` (n, K),
    their descriptors recorded (the replay's job :data:`.rowjobs.RENEW`): the leaves :func:`_mine`
    gives it. Each leaf is computed whole by one thread, so the values do not depend on the team."""
    n = A.shape[0]
    buf, rows, order, sel, coef, wd = _scratch(_most_rows(lay, t, n, tid, n_team))
    none = np.empty((0, A.shape[1]))
    for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
        if not _mine(lay, gl, n, tid, n_team):
            continue
        q, _ = _leaf_quantile(lay, rw.y, ren, t, gl, A, none, False, rw.w, -1, buf, rows, sel, coef, wd,
                              order)
        sums.values[gl] = trees.lr[t] * q
        for k in range(2):
            ren.ren_sel[gl, k] = rows[sel[k]] if sel[k] >= 0 else -1
            ren.ren_coef[gl, k] = coef[k]
        ren.ren_sel[gl, 2] = rows[order[int(wd[3])]] if wd[0] != 0.0 else -1  # ``order``: filled then
        ren.ren_wd[gl, :] = wd


@_internal
def _before_pivot(ren: Renewed, gl: int, j: int, r_j: float, r_p: float) -> tuple[float, float]:
    """``(before, at)``: whether row ``j`` (residual ``r_j``) sorts before / is the pivot of the
    weight derivative (row ``ren_sel[gl, 2]``, residual ``r_p``) in the stable order of the leaf."""
    pivot = ren.ren_sel[gl, 2]
    if j == pivot:
        return 0.0, 1.0
    return (1.0 if (r_j < r_p or (r_j == r_p and j < pivot)) else 0.0), 0.0


@_internal
def _slope(ren: Renewed, gl: int, j: int, r_j: float, r_p: float) -> float:
    """``dQ / dw_j`` of leaf ``gl`` whose descriptor ``ren_wd[gl, 0]`` is not 0, from row ``j``'s
    residual ``r_j`` and the pivot's ``r_p``."""
    wd = ren.ren_wd[gl]
    before, at = _before_pivot(ren, gl, j, r_j, r_p)
    return wd[0] * (wd[1] - before - at * wd[2])


@_internal
def _weight_derivative(y: NDArray[np.float64], ren: Renewed, gl: int, A: NDArray[np.float64],
                       j: int) -> float:
    """``dQ / dw_j`` of leaf ``gl`` (LightGBM's weight-interpolated quantile; 0 otherwise)."""
    if ren.ren_wd[gl, 0] == 0.0:
        return 0.0
    p = ren.ren_sel[gl, 2]
    r_p = residual(ren.q_method, y[p, 0], A[p, 0])
    return _slope(ren, gl, j, residual(ren.q_method, y[j, 0], A[j, 0]), r_p)


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
def reverse_leaves(
    lay: Layout, y: NDArray[np.float64], ren: Renewed, stored: NDArray[np.float64], t: int,
    A: NDArray[np.float64], u_bar: NDArray[np.float64], aT: NDArray[np.float64], UT: NDArray[np.float64],
    pivot: NDArray[np.float64],
) -> None:
    """:func:`reverse_tree`'s leaf level on a team (:mod:`.reverse1`'s layout), by one thread
    between two barriers: from ``u_bar`` (B, leaves of the round), d objective / d (leaf value /
    learning rate), the margin adjoints ``aT`` (n, B) of each leaf's order statistics, in
    :func:`reverse_tree`'s order; for :func:`reverse_rows`, each leaf's ``u_bar`` in ``UT``
    (leaves, B) and, where the leaf's quantile depends on the weights, its pivot's residual in
    ``pivot`` (leaves,), at the margin entering the tree (``A`` (n, 1) holds those leaving it,
    ``stored`` the tree's leaf values: :func:`.common.add_round`'s subtraction)."""
    B = aT.shape[1]
    gl0 = lay.leaf_off[t]
    for gl in range(gl0, lay.leaf_off[t + 1]):
        lj = gl - gl0
        for k in range(2):
            j = ren.ren_sel[gl, k]
            if j >= 0:
                for b in range(B):
                    aT[j, b] -= u_bar[b, lj] * ren.ren_coef[gl, k]  # residual = y - m
        for b in range(B):
            UT[lj, b] = u_bar[b, lj]
        if ren.ren_wd[gl, 0] != 0.0:
            p = ren.ren_sel[gl, 2]
            pivot[lj] = residual(ren.q_method, y[p, 0], A[p, 0] + -1.0 * stored[gl0 + lay.leaf[t, p]])


@_internal
def _margins_and_gather(
    leaf_t: NDArray[np.int32], leaf_g: NDArray[np.int32], stored_t: NDArray[np.float64],
    a_in: NDArray[np.float64], a_rows: NDArray[np.float64], PT: NDArray[np.float64], j0: int,
) -> None:
    """:func:`reverse_rows`'s margins and gather in one pass, chunk by chunk (rows ``j0 ..``:
    ``leaf_t`` their leaves in the round's tree, ``leaf_g`` in the previous round's one tree)."""
    m, B = a_rows.shape
    for c in range(j0 // CHUNK_ROWS, (j0 + m - 1) // CHUNK_ROWS + 1):
        i0, i1 = max(c * CHUNK_ROWS - j0, 0), min((c + 1) * CHUNK_ROWS - j0, m)
        sums = PT[c]
        if B == 1:  # one objective: contiguous (rows,) and (leaves,) views, no loop over the batch
            one, sums1 = a_rows.reshape(m), sums.reshape(sums.shape[0])
            for i in range(i0, i1):
                a_in[i] += -1.0 * stored_t[leaf_t[i] & INDEX]
                sums1[leaf_g[i] & INDEX] += one[i]
            continue
        for i in range(i0, i1):
            a_in[i] += -1.0 * stored_t[leaf_t[i] & INDEX]
            k = leaf_g[i] & INDEX
            row, to = a_rows[i], sums[k]
            for b in range(B):
                to[b] += row[b]


@_internal
def reverse_rows(
    lay: Layout, y: NDArray[np.float64], ren: Renewed, stored: NDArray[np.float64], r: int,
    A: NDArray[np.float64], j0: int, j1: int, UT: NDArray[np.float64], pivot: NDArray[np.float64],
    aT: NDArray[np.float64], W: NDArray[np.float64], PT: NDArray[np.float64], gather: bool,
) -> None:
    """:func:`reverse_tree`'s rows ``j0 .. j1 - 1`` on a team (:mod:`.reverse1`'s layout) for
    renewed round ``r`` (one tree), after :func:`reverse_leaves`: each row's margin ``A[j - j0]``
    ((j1 - j0, 1)) moved back to the one entering the round, its weight adjoints ``W[j - j0]`` (B,)
    through its leaf's quantile where that depends on the weights, then (if ``gather``) its margin
    adjoints ``aT[j]`` (B,) into round ``r - 1``'s leaves, the sums ``PT[j // CHUNK_ROWS]`` of its
    chunk (leaves of that round, B). Loops over arrays sliced from ``j0``, indices ``& INDEX``
    (see :mod:`.indexing`)."""
    B = aT.shape[1]
    t = lay.round_ptr[r]
    gl0, gl1 = lay.leaf_off[t], lay.leaf_off[t + 1]
    m = j1 - j0
    leaf_t, a_in, stored_t, a_rows = lay.leaf[t, j0:j1], A.reshape(m), stored[gl0:gl1], aT[j0:j1]
    weighted = False
    for gl in range(gl0, gl1):
        weighted = weighted or ren.ren_wd[gl, 0] != 0.0
    g0 = lay.round_ptr[r - 1] if gather else t
    if gather and t - g0 == 1 and not weighted:  # one pass: every renewed default of the three libraries
        _margins_and_gather(leaf_t, lay.leaf[g0, j0:j1], stored_t, a_in, a_rows, PT, j0)
        return
    for i in range(m):
        a_in[i] += -1.0 * stored_t[leaf_t[i] & INDEX]
    if weighted:  # LightGBM's weight-interpolated quantiles
        for i in range(m):
            lj = leaf_t[i] & INDEX
            if ren.ren_wd[gl0 + lj, 0] != 0.0:
                r_j = residual(ren.q_method, y[j0 + i, 0], a_in[i])
                slope = _slope(ren, gl0 + lj, j0 + i, r_j, pivot[lj])
                for b in range(B):
                    W[i, b] += UT[lj, b] * slope
    for tg in range(g0, t):
        leaf_g, base = lay.leaf[tg, j0:j1], lay.leaf_off[tg] - lay.leaf_off[g0]
        for i in range(m):
            c = ((j0 + i) // CHUNK_ROWS) & INDEX
            k = base + (leaf_g[i] & INDEX)
            for b in range(B):
                PT[c, k, b] += a_rows[i, b]


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
def refit_leaves(
    lay: Layout, trees: Trees, y: NDArray[np.float64], sums: Sums, ren: Renewed, t: int,
    A: NDArray[np.float64], delta: NDArray[np.float64], sel_leaves: NDArray[np.bool_], every: bool,
    changed: bool, w: NDArray[np.float64], i0: int, out: NDArray[np.float64], tid: int, n_team: int,
) -> None:
    """Thread ``tid``'s share (:func:`_mine`; LeafRefit's job :data:`.pointjobs.RENEW`) of renewed
    tree ``t``'s new leaves without row ``i0``, into ``out`` (global leaves): a leaf whose rows all
    keep their margins and weights, and which did not hold ``i0``, keeps its value."""
    n = A.shape[0]
    buf, rows, order, sel, coef, wd = _scratch(_most_rows(lay, t, n, tid, n_team))
    track = delta.shape[0] > 0
    li0 = lay.leaf_off[t] + lay.leaf[t, i0]
    for gl in range(lay.leaf_off[t], lay.leaf_off[t + 1]):
        if not _mine(lay, gl, n, tid, n_team):
            continue
        moved = track and (every or sel_leaves[gl])
        if not (moved or changed or gl == li0):
            out[gl] = sums.values[gl]
            continue
        q, _ = _leaf_quantile(lay, y, ren, t, gl, A, delta, moved, w, i0, buf, rows, sel, coef, wd, order)
        out[gl] = trees.lr[t] * q
