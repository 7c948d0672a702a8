"""Compiled building blocks every leaf rule and pass shares (numba). Private to the engine.

Margins are arrays of shape (n, K); everything is float64. Update-set modes: ``ALL`` (every row's
change is propagated), ``NONE`` (SinglePoint: only the scored row's own change is), ``TOPK`` (rows
of the k leaves with the largest accumulated |change|, Eq. 3 of the paper, plus the scored row).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..losses import point
from .indexing import INDEX
from .state import Cache, Joint, Layout, LossSpec, Sums, Trees

ALL = 0
NONE = 1
TOPK = 2

_jit = numba.njit(cache=True, nogil=True)
#: Functions only compiled code calls: no Python wrapper to compile (see ``_jit.njit``).
_internal = numba.njit(cache=True, nogil=True, internal=True)
#: Helpers called once per row: inlined (a call costs the reference counts of every array it is
#: given, ~2 us; measured 100x a row's arithmetic).
per_row = numba.njit(cache=True, nogil=True, inline="always", internal=True)


@per_row
def step_ratio(rg: float, rd: float) -> float:
    """A leaf step's ``rd / rg`` (``d delta / d (H + lam)`` over ``d delta / d G``: the step's
    unclipped delta, see :func:`leaf_step`), 0 where ``rg`` is (the step is then constant in its
    sums, and ``rd`` is 0 too). Its sums' adjoints are ``g_bar`` and ``g_bar * ratio``."""
    return rd / rg if rg != 0.0 else 0.0


@per_row
def row_factors(
    g: float, h: float, wdg: float, wdh: float, ratio: float, newton: bool
) -> tuple[float, float]:
    """What a row's weight and margin adjoints gain from a leaf step, per unit of the step's
    adjoint of G (``g_bar``): from the row's ``g, h, w dg/dm, w dh/dm`` at the step and the step's
    :func:`step_ratio`, ``(g + ratio h, w dg/dm + ratio w dh/dm)`` (``G = sum w g``, ``H = sum w
    h``); a gradient step's ``(g + ratio, w dg/dm)`` (its ``H`` is ``sum w``). Two products per row,
    then one per objective for each adjoint, where the sums' adjoints ``g_bar``, ``d_bar`` took two
    (reverse mode's row level, every one-output sweep)."""
    if newton:
        return g + ratio * h, wdg + ratio * wdh
    return g + ratio, wdg


@per_row
def keep_point(DER: NDArray[np.float64], q: int, j: int, z0: float, z1: float) -> None:
    """Keep row ``j``'s point ``(z0, z1)`` (:func:`..losses.point1`'s) in the derivative cache's
    slot ``q`` (``DER`` (P, n, point size): ``z1`` only where the loss's point has two numbers)."""
    DER[q, j, 0] = z0
    if DER.shape[2] > 1:
        DER[q, j, 1] = z1


@per_row
def kept_point(DER: NDArray[np.float64], q: int, j: int) -> tuple[float, float]:
    """Row ``j``'s point kept in slot ``q`` (see :func:`keep_point`)."""
    return DER[q, j, 0], (DER[q, j, 1] if DER.shape[2] > 1 else 0.0)


@_internal
def l2_term(trees: Trees, t: int, mean_w: float) -> float:
    """Tree ``t``'s L2 term per unit of the mean weight, ``l2m[t] * mean_w`` (float32 where
    ``trees.f32l2``: CatBoost's multi-dimensional leaves store it in a float)."""
    x = trees.l2m[t] * mean_w
    return np.float64(np.float32(x)) if trees.f32l2 else x


@_internal
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


@per_row
def row_margin(
    lay: Layout, r: int, A: NDArray[np.float64], j: int, u: NDArray[np.float64], mrow: NDArray[np.float64]
) -> None:
    """``mrow = A[j]`` plus the in-tree moves ``u`` (per global leaf) of round ``r``'s trees."""
    mrow[:] = A[j]
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        mrow[lay.out[t]] += u[lay.leaf_off[t] + lay.leaf[t, j]]


@_internal
def row_margin1(
    lay: Layout, t0: int, t1: int, A: NDArray[np.float64], j: int, u: NDArray[np.float64]
) -> float:
    """:func:`row_margin` of a one-output model (trees ``t0 .. t1 - 1`` of the round), as a scalar."""
    m = A[j, 0]
    for t in range(t0, t1):
        m += u[lay.leaf_off[t] + lay.leaf[t, j]]
    return m


@_jit
def add_round(lay: Layout, r: int, A: NDArray[np.float64], values: NDArray[np.float64], sign: float) -> None:
    """Add (``sign = 1``) or remove (``-1``) round ``r``'s leaf ``values`` to every row's margins."""
    n = A.shape[0]
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        c = lay.out[t]
        base = lay.leaf_off[t]
        for j in range(n):
            A[j, c] += sign * values[base + lay.leaf[t, j]]


@_internal
def start_leaf_sums(lay: Layout, r: int, c_leaf: NDArray[np.float64], PT: NDArray[np.float64]) -> None:
    """A team's reverse sweep (:mod:`.reverse1`, :mod:`.reverse_multi`): round ``r``'s leaf
    adjoints from the test side ``c_leaf`` (B, n_total) in the first chunk's sums ``PT[0]``
    (leaves of the round, B), the other chunks' sums zero."""
    rl0 = lay.leaf_off[lay.round_ptr[r]]
    n_round = lay.leaf_off[lay.round_ptr[r + 1]] - rl0
    for gl in range(n_round):
        for b in range(PT.shape[2]):
            PT[0, gl, b] = c_leaf[b, rl0 + gl]
    PT[1:, :n_round] = 0.0


@_internal
def add_chunk_sums(PT: NDArray[np.float64], n_round: int, u_bar: NDArray[np.float64]) -> None:
    """A team's reverse sweep: the chunks' leaf sums ``PT`` (chunks, leaves, B) of a round's
    ``n_round`` leaves added in chunk order (into ``PT[0]``), then copied to ``u_bar`` (B,
    leaves): the leaf adjoints, whatever the number of threads."""
    for c in range(1, PT.shape[0]):
        for gl in range(n_round):
            for b in range(PT.shape[2]):
                PT[0, gl, b] += PT[c, gl, b]
    for gl in range(n_round):
        for b in range(PT.shape[2]):
            u_bar[b, gl] = PT[0, gl, b]


@per_row  # once per round of every single-point row
def advance_row(lay: Layout, stored: NDArray[np.float64], r: int, A: NDArray[np.float64], j: int) -> None:
    """Move row ``j``'s margins ``A[j]`` past round ``r`` by the ``stored`` leaf values (as
    :func:`add_round` does for every row; a single-point refit or forward pass reads no other)."""
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        A[j, lay.out[t]] += stored[lay.leaf_off[t] + lay.leaf[t, j]]


@_internal
def select_leaves(
    lay: Layout, t: int, mode: int, k: int, change: NDArray[np.float64], selected: NDArray[np.bool_]
) -> bool:
    """Mark the update-set leaves of tree ``t`` in ``selected``; return True if all are selected.

    TOPK ranks leaves by the accumulated ``sum_j sum_c |change[j, c]|`` over their rows (ties:
    lower leaf first).
    """
    L = lay.leaf_off[t + 1] - lay.leaf_off[t]
    if mode == ALL or (mode == TOPK and k >= L):
        selected[:L] = True
        return True
    selected[:L] = False
    if ranks_leaves(lay, t, mode, k):
        mass = np.zeros(L)
        add_leaf_mass(lay, t, change, mass)
        mark_top(mass, k, selected)
    return False


@_internal
def ranks_leaves(lay: Layout, t: int, mode: int, k: int) -> bool:
    """Whether :func:`select_leaves` ranks tree ``t``'s leaves by their masses (TOPK choosing some
    of them, not none or all)."""
    return mode == TOPK and 0 < k < lay.leaf_off[t + 1] - lay.leaf_off[t]


@_internal
def add_leaf_mass(lay: Layout, t: int, change: NDArray[np.float64], mass: NDArray[np.float64]) -> None:
    """Add to ``mass`` (leaves of tree ``t``) each leaf's ``sum_j sum_c |change[j, c]|`` over its
    rows: what TOPK ranks leaves by (``change`` (n, K), the state's rows)."""
    leaf = lay.leaf[t]  # out of its group once: read from it in the loop, two reference counts per row
    for j in range(change.shape[0]):
        mass[leaf[j] & INDEX] += row_mass(change, j)


@per_row
def row_mass(change: NDArray[np.float64], j: int) -> float:
    """Row ``j``'s ``sum_c |change[j, c]|``, in output order: its share of its leaf's TOPK mass."""
    acc = 0.0
    for c in range(change.shape[1]):
        acc += abs(change[j, c])
    return acc


@_jit
def mark_top(mass: NDArray[np.float64], k: int, selected: NDArray[np.bool_]) -> None:
    """Mark in ``selected`` the ``k`` leaves of largest ``mass`` (ties: lower leaf first)."""
    order = np.argsort(-mass, kind="mergesort")
    for r in range(k):
        selected[order[r]] = True


@per_row
def step_point(
    lay: Layout, loss: LossSpec, u_before: NDArray[np.float64], r: int, s: int, A: NDArray[np.float64],
    j: int, mrow: NDArray[np.float64], z: NDArray[np.float64],
) -> None:
    """Loss point ``z`` of row ``j`` at step ``s`` of round ``r`` of the *original* replay: its
    margins ``A[j]`` entering the round plus the trees' cached in-tree moves ``u_before``."""
    mrow[:] = A[j]
    for t in range(lay.round_ptr[r], lay.round_ptr[r + 1]):
        mrow[lay.out[t]] += u_before[lay.sl_off[lay.step_ptr[t] + s] + lay.leaf[t, j]]
    point(loss.code, loss.prm, mrow, z)


@_internal
def round_slots(lay: Layout, r: int) -> NDArray[np.int64]:
    """The first step-leaf slot of each tree of round ``r`` (its one step), shape (K,)."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    slots = np.empty(t1 - t0, dtype=np.int64)
    for c in range(t1 - t0):
        slots[c] = lay.sl_off[lay.step_ptr[t0 + c]]
    return slots


@per_row
def add_hessian_row(z: NDArray[np.float64], c: int, w: float, out: NDArray[np.float64]) -> None:
    """``out += w * P[c]``: row ``c`` of the softmax hessian at probabilities ``z``, weighted (the
    sums of a joint round, :mod:`.joint`)."""
    for d in range(out.shape[0]):
        out[d] += w * z[c] * ((1.0 if c == d else 0.0) - z[d])


@_internal
def cache_slot(cache: Cache, flat: int) -> int:
    """The derivative cache's slot for flat leaf step ``flat``: its own if it has one, else the
    next free one (-1 when the cache is full or absent)."""
    if cache.der_slot[flat] < 0 and cache.der_used[0] < cache.DER.shape[0]:
        cache.der_slot[flat] = cache.der_used[0]
        cache.der_used[0] += 1
    return cache.der_slot[flat]


@_internal
def round_sizes(lay: Layout) -> tuple[int, int]:
    """The most leaves, and the most step-leaf slots, of any round."""
    most_leaves, most_slots = 0, 0
    for r in range(lay.round_ptr.shape[0] - 1):
        t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
        most_leaves = max(most_leaves, lay.leaf_off[t1] - lay.leaf_off[t0])
        most_slots = max(most_slots, lay.sl_off[lay.step_ptr[t1]] - lay.sl_off[lay.step_ptr[t0]])
    return most_leaves, most_slots


@_internal
def clear_sums(sums: Sums, joint: Joint | None, o: int, L: int) -> None:
    """Zero the leaf-sum caches of step-leaf slots ``o .. o + L - 1``: ``G``, ``H``, their
    derivatives, and the per-group and full-hessian sums where the model has them."""
    sums.G[o : o + L] = 0.0
    sums.H[o : o + L] = 0.0
    sums.SDG[o : o + L] = 0.0
    sums.SDH[o : o + L] = 0.0
    if sums.GV.shape[0] > 0:
        sums.GV[o : o + L] = 0.0
        sums.HV[o : o + L] = 0.0
    if joint is not None:
        joint.HX[o : o + L] = 0.0
        if joint.HXV.shape[0] > 0:
            joint.HXV[o : o + L] = 0.0


@numba.njit(cache=True, nogil=True)
def leaf_sums(
    lay: Layout, K: int, leaf_delta: NDArray[np.float64], base_delta: NDArray[np.float64],
    test_leaf: NDArray[np.int64],
) -> NDArray[np.float64]:
    """Margin changes of test points: ``out[b, j, c] = base_delta[b, c] + sum_{t: out[t] = c}
    leaf_delta[b, test_leaf[t, j]]``, shape (B, m, K). ``test_leaf`` (T, m) holds global leaves."""
    B = leaf_delta.shape[0]
    T, m = test_leaf.shape
    out = np.empty((B, m, K))
    for b in range(B):
        for j in range(m):
            out[b, j, :] = base_delta[b]
            for t in range(T):
                out[b, j, lay.out[t]] += leaf_delta[b, test_leaf[t, j]]
    return out
