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
from ._fastobj import exp_space_objective, fastexp_vec, objective_ranges
from ._joint import replay_sums as joint_replay_sums
from ._joint import round_slots, round_steps
from ._renew import replay_tree
from ._tables import Tables, clear_sums
from .losses import derivs1, grad_hess, jvp, point, value, weighted

ALL = 0
NONE = 1
TOPK = 2
#: Most ways of deciding a tree's near-ties the replay tries (see ``_replay_walk``).
_MAX_TIE_PATHS = 4096

_jit = numba.njit(cache=True, nogil=True)
#: Helpers called once per row and taking the tables: inlined (a call costs the reference counts
#: of every array in them, ~2 us; see ``_reverse._row_adjoints1``).
_per_row = numba.njit(cache=True, nogil=True, inline="always")


@_jit
def max_leaves(tb: Tables) -> int:
    """The largest number of leaves of any tree (size of per-tree scratch arrays)."""
    return int(np.max(tb.leaf_off[1:] - tb.leaf_off[:-1]))


@_jit
def l2_term(tb: Tables, t: int, mean_w: float) -> float:
    """Tree ``t``'s L2 term per unit of the mean weight, ``l2m[t] * mean_w`` (float32 where
    ``tb.f32l2``: CatBoost's multi-dimensional leaves store it in a float)."""
    x = tb.l2m[t] * mean_w
    return np.float64(np.float32(x)) if tb.f32l2 else x


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


@_per_row
def row_margin(
    tb: Tables, r: int, A: NDArray[np.float64], j: int, u: NDArray[np.float64], mrow: NDArray[np.float64]
) -> None:
    """``mrow = A[j]`` plus the in-tree moves ``u`` (per global leaf) of round ``r``'s trees."""
    mrow[:] = A[j]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        mrow[tb.out[t]] += u[tb.leaf_off[t] + tb.leaf[t, j]]


@_jit
def row_margin1(
    tb: Tables, t0: int, t1: int, A: NDArray[np.float64], j: int, u: NDArray[np.float64]
) -> float:
    """:func:`row_margin` of a one-output model (trees ``t0 .. t1 - 1`` of the round), as a scalar."""
    m = A[j, 0]
    for t in range(t0, t1):
        m += u[tb.leaf_off[t] + tb.leaf[t, j]]
    return m


@_jit
def add_round(tb: Tables, r: int, A: NDArray[np.float64], values: NDArray[np.float64], sign: float) -> None:
    """Add (``sign = 1``) or remove (``-1``) round ``r``'s leaf ``values`` to every row's margins."""
    n = A.shape[0]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        c = tb.out[t]
        base = tb.leaf_off[t]
        for j in range(n):
            A[j, c] += sign * values[base + tb.leaf[t, j]]


@_per_row  # once per round of every single-point row
def advance_row(tb: Tables, r: int, A: NDArray[np.float64], j: int) -> None:
    """Move row ``j``'s margins ``A[j]`` past round ``r`` by the stored leaf values (as
    :func:`add_round` does for every row; a single-point refit or forward pass reads no other)."""
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        A[j, tb.out[t]] += tb.stored[tb.leaf_off[t] + tb.leaf[t, j]]


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
        add_leaf_mass(tb, t, change, mass)
        mark_top(mass, k, selected)
    return False


@_jit
def add_leaf_mass(tb: Tables, t: int, change: NDArray[np.float64], mass: NDArray[np.float64]) -> None:
    """Add to ``mass`` (leaves of tree ``t``) each leaf's ``sum_j sum_c |change[j, c]|`` over its
    rows: what TOPK ranks leaves by (``change`` (n, K), these tables' rows)."""
    for j in range(change.shape[0]):
        acc = 0.0
        for c in range(change.shape[1]):
            acc += abs(change[j, c])
        mass[tb.leaf[t, j]] += acc


@_jit
def mark_top(mass: NDArray[np.float64], k: int, selected: NDArray[np.bool_]) -> None:
    """Mark in ``selected`` the ``k`` leaves of largest ``mass`` (ties: lower leaf first)."""
    order = np.argsort(-mass, kind="mergesort")
    for r in range(k):
        selected[order[r]] = True


@_per_row
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
def cache_slot(tb: Tables, flat: int) -> int:
    """The derivative cache's slot for flat leaf step ``flat``: its own if it has one, else the
    next free one (-1 when the cache is full or absent)."""
    if tb.der_slot[flat] < 0 and tb.der_used[0] < tb.DER.shape[0]:
        tb.der_slot[flat] = tb.der_used[0]
        tb.der_used[0] += 1
    return tb.der_slot[flat]


@_jit
def round_sizes(tb: Tables) -> tuple[int, int]:
    """The most leaves, and the most step-leaf slots, of any round."""
    most_leaves, most_slots = 0, 0
    for r in range(tb.round_ptr.shape[0] - 1):
        t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
        most_leaves = max(most_leaves, tb.leaf_off[t1] - tb.leaf_off[t0])
        most_slots = max(most_slots, tb.sl_off[tb.step_ptr[t1]] - tb.sl_off[tb.step_ptr[t0]])
    return most_leaves, most_slots


@_jit
def _replay_sums(
    tb: Tables, r: int, s: int, A: NDArray[np.float64], u: NDArray[np.float64], scratch: NDArray[np.float64]
) -> None:
    """Leaf sums of step ``s`` of round ``r``'s trees at in-tree moves ``u``, into slot ``s``.

    Also the sums' derivatives in ``u`` for trees with several steps, and per-group sums when
    class factors move with the weights. ``scratch`` is (7, max(K, zsize))."""
    n, K = A.shape
    t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
    mrow, z, g, h, unit, dg, dh = (scratch[0, :K], scratch[1, : tb.zsize], scratch[2, :K], scratch[3, :K],
                                   scratch[4, :K], scratch[5, :K], scratch[6, :K])
    unit[:] = 0.0
    group_sums = tb.GV.shape[0] > 0
    multi = tb.n_iter[t0] > 1
    q = cache_slot(tb, tb.step_ptr[t0] + s) if K == 1 else -1
    cache = q >= 0
    for t in range(t0, t1):
        clear_sums(tb, tb.sl_off[tb.step_ptr[t] + s], tb.leaf_off[t + 1] - tb.leaf_off[t])
    for j in range(n):
        if K == 1:  # scalars only: no per-row array views or calls taking arrays
            gg, hh, dg[0], dh[0] = derivs1(tb.code, tb.prm, tb.y[j, 0], row_margin1(tb, t0, t1, A, j, u))
            g[0], h[0] = gg, max(hh, tb.prm[0])
            if hh < tb.prm[0]:
                dh[0] = 0.0
            if cache:  # what the reverse sweep needs of this row at this step
                tb.DER[q, j, 0] = g[0]
                tb.DER[q, j, 1] = h[0]
                tb.DER[q, j, 2] = tb.w[j] * dg[0]
                tb.DER[q, j, 3] = tb.w[j] * dh[0]
        else:
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
                if K > 1:
                    unit[c] = 1.0
                    jvp(tb.code, tb.prm, tb.y[j], z, unit, dg, dh)
                    unit[c] = 0.0
                tb.SDG[sl] += wj * dg[c]
                tb.SDH[sl] += wj * dh[c]


@_jit
def _replay_steps(
    tb: Tables, r: int, s: int, mean_w: float, u: NDArray[np.float64], d: NDArray[np.float64]
) -> None:
    """The leaf steps of slot ``s`` of round ``r`` into ``d`` (indexed by global leaf minus the
    round's first), recording the step's derivatives and the moves ``u`` it starts from."""
    rl0 = tb.leaf_off[tb.round_ptr[r]]
    for t in range(tb.round_ptr[r], tb.round_ptr[r + 1]):
        base = tb.leaf_off[t]
        o = tb.sl_off[tb.step_ptr[t] + s]
        for lj in range(tb.leaf_off[t + 1] - base):
            lam = tb.l2[base + lj] + l2_term(tb, t, mean_w)
            delta, rg, rd = leaf_step(tb.G[o + lj], tb.H[o + lj], lam, tb.l1[t], tb.mds[t])
            d[base + lj - rl0] = delta
            tb.RG[o + lj] = rg
            tb.RD[o + lj] = rd
            tb.u_before[o + lj] = u[base + lj]


@_jit
def tree_objective(
    tb: Tables, t: int, A: NDArray[np.float64], delta: NDArray[np.float64], sel: NDArray[np.bool_],
    every: bool, u: NDArray[np.float64], step: NDArray[np.float64], w: NDArray[np.float64], skip: int,
    point_buf: NDArray[np.float64], dl: NDArray[np.float64], mrow: NDArray[np.float64], fresh: bool,
) -> float:
    """The objective a backtracking tree ``t`` compares, with its leaves moved by ``u + step``.

    Rows sit at ``A`` plus, where they are ``moved`` (``every`` or their leaf in ``sel``; only when
    ``delta`` is given), their change ``delta``; ``w`` are the weights and row ``skip`` (>= 0) is
    deleted. ``tb.bt_obj < 0``: the weighted loss summed exactly. Otherwise the booster's own
    arithmetic (:mod:`influence_gbdt._fastobj`: exp-space approx ``exp`` of the margin at ``u``,
    the try ``step`` through its fast exp, float32 lanes); the approx is computed into
    ``point_buf`` (n,) when ``fresh``, else reused from the last call (the tries of one step share
    it: only an accepted step moves ``u``). Only comparisons of two values of the same tree mean
    anything.
    """
    n = A.shape[0]
    base = tb.leaf_off[t]
    c = tb.out[t]
    track = delta.shape[0] > 0
    if tb.bt_obj < 0:
        total = 0.0
        for j in range(n):
            if j != skip:
                mrow[:] = A[j]
                if track and (every or sel[base + tb.leaf[t, j]]):
                    mrow += delta[j]
                mrow[c] += u[base + tb.leaf[t, j]] + step[base + tb.leaf[t, j]]
                total += w[j] * value(tb.code, tb.prm, tb.y[j], mrow)
        return total
    if fresh:
        for j in range(n):
            m = A[j, c] + u[base + tb.leaf[t, j]]
            if track and (every or sel[base + tb.leaf[t, j]]):
                m += delta[j, c]
            point_buf[j] = math.exp(m)
    L = tb.leaf_off[t + 1] - base
    fastexp_vec(step[base : base + L], dl[:L])
    n_eff = n - 1 if skip >= 0 else n
    return exp_space_objective(tb.bt_obj, point_buf, dl[:L], tb.leaf[t], tb.y[:, 0], w,
                               objective_ranges(n_eff, tb.bt_threads), tb.bt_pos[skip] if skip >= 0 else -1,
                               tb.bt_order)


@_jit
def _walk_once(
    tb: Tables, r: int, A: NDArray[np.float64], u: NDArray[np.float64], mean_w: float,
    d: NDArray[np.float64], step: NDArray[np.float64], point_buf: NDArray[np.float64],
    dl: NDArray[np.float64], scratch: NDArray[np.float64], flips: int,
) -> int:
    """AnyImprovement for round ``r``'s one tree from ``u = 0``: try each step at scale 1, 1/2,
    ..., accept it when the objective falls; record the steps taken (``n_steps``), their scales (0
    for a computed step never accepted) and each step's caches. The ``i``-th near-tie (relative gap
    within ``tb.bt_tie``) is decided the other way when bit ``i`` of ``flips`` is set. Returns the
    number of near-ties met."""
    t = tb.round_ptr[r]
    base, L = tb.leaf_off[t], tb.leaf_off[t + 1] - tb.leaf_off[t]
    no_delta = np.empty((0, A.shape[1]))
    no_sel = np.zeros(0, dtype=np.bool_)
    mrow = scratch[0, : A.shape[1]]
    u[base : base + L] = 0.0
    tb.scales[t, :] = 0.0
    _replay_sums(tb, r, 0, A, u, scratch)
    _replay_steps(tb, r, 0, mean_w, u, d)
    computed, scale, ties = 1, 1.0, 0
    step[base : base + L] = 0.0
    current = tree_objective(tb, t, A, no_delta, no_sel, False, u, step, tb.w, -1, point_buf, dl, mrow, True)
    fresh = False
    for it in range(tb.n_iter[t]):
        for lj in range(L):
            step[base + lj] = scale * d[lj]
        trial = tree_objective(tb, t, A, no_delta, no_sel, False, u, step, tb.w, -1, point_buf, dl, mrow,
                               fresh)
        fresh = False
        better = trial < current
        if abs(trial - current) <= tb.bt_tie * abs(current):
            if (flips >> ties) & 1:
                better = not better
            ties += 1
        if better:
            tb.scales[t, computed - 1] = scale
            for lj in range(L):
                u[base + lj] += step[base + lj]
            current, scale, fresh = trial, 1.0, True
            if it + 1 < tb.n_iter[t]:
                _replay_sums(tb, r, computed, A, u, scratch)
                _replay_steps(tb, r, computed, mean_w, u, d)
                computed += 1
        else:
            scale *= 0.5
    tb.n_steps[t] = computed
    return ties


@_jit
def _replay_walk(
    tb: Tables, r: int, A: NDArray[np.float64], u: NDArray[np.float64], mean_w: float,
    d: NDArray[np.float64], step: NDArray[np.float64], point_buf: NDArray[np.float64],
    dl: NDArray[np.float64], scratch: NDArray[np.float64],
) -> None:
    """The booster's accepted steps for round ``r``'s one tree (see :func:`_walk_once`).

    Where the objective is summed exactly while the booster's own sums round differently
    (``bt_tie > 0``), a step whose gain is within the tie band may have been decided either way:
    the ways of deciding the near-ties are tried until the tree reproduces its stored leaf values
    (the closest is kept). Decisions outside the band are never changed.
    """
    t = tb.round_ptr[r]
    base, L = tb.leaf_off[t], tb.leaf_off[t + 1] - tb.leaf_off[t]
    ties = _walk_once(tb, r, A, u, mean_w, d, step, point_buf, dl, scratch, 0)
    if ties == 0:
        return
    scale = max(1.0, np.abs(tb.stored[base : base + L]).max())
    best_flips, best = 0, np.abs(tb.lr[t] * u[base : base + L] - tb.stored[base : base + L]).max()
    flips, last = 1, 0
    while best > 1e-13 * scale and flips < min(1 << min(ties, 20), _MAX_TIE_PATHS):
        ties = max(ties, _walk_once(tb, r, A, u, mean_w, d, step, point_buf, dl, scratch, flips))
        last = flips
        res = np.abs(tb.lr[t] * u[base : base + L] - tb.stored[base : base + L]).max()
        if res < best:
            best_flips, best = flips, res
        flips += 1
    if last != best_flips:
        _walk_once(tb, r, A, u, mean_w, d, step, point_buf, dl, scratch, best_flips)


@numba.njit(cache=True, nogil=True)
def replay(tb: Tables, A: NDArray[np.float64]) -> None:
    """Recompute every leaf value from the data and fill the caches of ``tb`` in place.

    ``A`` (n, K) holds the initial margins on entry and the final ones on return; the recomputed
    leaf values are ``tb.values``. Steps take their recorded scales, except in backtracking trees,
    whose accepted steps are decided here as the booster decides them (and recorded in
    ``tb.n_steps`` / ``tb.scales``). Margins move by the *stored* leaf values, so every tree is
    recomputed at the booster's own margins and a last-bit difference in one tree cannot cascade
    into the next.
    """
    n, K = A.shape
    mean_w = (tb.w.sum() + tb.outside[0]) / (n + tb.outside[1])
    u = np.zeros(tb.leaf_off[-1])
    step = np.zeros(tb.leaf_off[-1])
    most_leaves, _ = round_sizes(tb)
    d = np.empty(most_leaves)
    dl = np.empty(most_leaves)
    point_buf = np.empty(n)
    scratch = np.empty((7, max(K, tb.zsize)))
    for r in range(tb.round_ptr.shape[0] - 1):
        t0, t1 = tb.round_ptr[r], tb.round_ptr[r + 1]
        rl0 = tb.leaf_off[t0]
        if tb.renew[t0]:
            replay_tree(tb, t0, A)
            add_round(tb, r, A, tb.stored, 1.0)
            continue
        if tb.backtrack[t0]:
            _replay_walk(tb, r, A, u, mean_w, d, step, point_buf, dl, scratch)
        elif tb.joint[t0]:  # one step for the round's trees together
            joint_replay_sums(tb, r, A)
            round_steps(tb, r, l2_term(tb, t0, mean_w), tb.G, tb.HX, round_slots(tb, r), d, True)
            for gl in range(rl0, tb.leaf_off[t1]):
                u[gl] += d[gl - rl0]
        else:
            for s in range(tb.n_steps[t0]):  # trees sharing a round take one step each
                _replay_sums(tb, r, s, A, u, scratch)
                _replay_steps(tb, r, s, mean_w, u, d)
                for t in range(t0, t1):
                    for gl in range(tb.leaf_off[t], tb.leaf_off[t + 1]):
                        u[gl] += tb.scales[t, s] * d[gl - rl0]
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
