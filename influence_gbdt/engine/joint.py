"""The joint leaf rule (numba): one Newton step for all ``K`` trees of a round with the full softmax
hessian (CatBoost's MultiClass leaves). Private to the engine; its passes: :func:`replay_round`,
:func:`leaf_adjoints` (reverse mode's leaf level; the row level is
:func:`.reverse_multi._joint_row_pass`, on a team of threads), :func:`add_row_derivative` with
:func:`forward_steps`, :func:`refit_round`.

In a joint round the trees ``t0 + c`` (output ``c``) share one structure. Per leaf, with
``G`` the K-vector ``sum w g`` and ``H`` the K x K matrix ``sum w P`` (``P = diag(p) - p p^T`` at
the row's margins), the step is ``delta = -M^{-1} G`` with ``M = H + lam I`` (see
:class:`~influence_gbdt.ensemble.TreeEnsemble`). Its differential is
``d delta = -M^{-1} (dG + dM delta)``; in reverse, with ``a = -M^{-1} delta_bar`` (``M`` is
symmetric), ``G_bar = a`` and ``M_bar = a delta^T``, so one row of weight ``w`` and probabilities
``p`` receives ``w_bar = a . g + a^T P delta`` and a margin adjoint ``w J (a + q)`` where
``J = diag(p) - p p^T`` is the softmax Jacobian and ``q = d(a^T P delta)/dp``. Every per-row
quantity costs O(K); the K x K solves are per leaf.

Layout: for joint tree ``t`` (output ``c``) and leaf slot ``o`` of its step, ``joint.HX[o]`` is row
``c`` of the leaf's ``H``, ``joint.MI[o]`` row ``c`` of ``M^{-1}`` and ``sums.RD[o]`` the step
``delta_c`` (filled by the replay).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..losses import probabilities
from .common import l2_term, per_row, round_slots
from .plain import refit_round_sums
from .state import Joint, Layout, LossSpec, Rows, Sums, Trees

#: Functions only compiled code calls: no Python wrapper to compile (see ``_jit.njit``).
_internal = numba.njit(cache=True, nogil=True, internal=True)
_per_row = per_row

#: float32 machine epsilon: the booster's floor of the l2 term relative to the hessian's diagonal.
FLT_EPSILON = np.float32(np.finfo(np.float32).eps)


@_internal
def solve_leaf(
    M: NDArray[np.float64], G: NDArray[np.float64], lam: float, Minv: NDArray[np.float64],
    delta: NDArray[np.float64],
) -> None:
    """The joint step of one leaf: on entry ``M`` (K, K) holds the hessian sum ``H``; on return
    ``M = H + lam' I`` with ``lam' = max(lam, f32(f32(max_c H_cc) * FLT_EPSILON))``,
    ``Minv = M^{-1}`` and ``delta = -Minv G`` (all 0 where ``M`` is singular: an empty leaf)."""
    K = G.shape[0]
    top = 0.0
    for c in range(K):
        top = max(top, M[c, c])
    lam = max(lam, np.float64(np.float32(np.float32(top) * FLT_EPSILON)))
    for c in range(K):
        M[c, c] += lam
    if not _spd_inverse(M, Minv):
        Minv[:, :] = 0.0
        delta[:] = 0.0
        return
    for c in range(K):
        acc = 0.0
        for d in range(K):
            acc += Minv[c, d] * G[d]
        delta[c] = -acc


@_internal
def _spd_inverse(M: NDArray[np.float64], out: NDArray[np.float64]) -> bool:
    """``out = M^{-1}`` of a symmetric positive definite ``M`` by Cholesky; False if it is not
    positive definite (to rounding)."""
    K = M.shape[0]
    L = np.zeros((K, K))
    for i in range(K):
        for j in range(i + 1):
            acc = M[i, j]
            for q in range(j):
                acc -= L[i, q] * L[j, q]
            if i == j:
                if acc <= 0.0:
                    return False
                L[i, i] = np.sqrt(acc)
            else:
                L[i, j] = acc / L[j, j]
    inv_l = np.zeros((K, K))  # L^{-1}, lower triangular
    for i in range(K):
        inv_l[i, i] = 1.0 / L[i, i]
        for j in range(i):
            acc = 0.0
            for q in range(j, i):
                acc += L[i, q] * inv_l[q, j]
            inv_l[i, j] = -acc / L[i, i]
    for i in range(K):  # M^{-1} = L^{-T} L^{-1}
        for j in range(i + 1):
            acc = 0.0
            for q in range(i, K):
                acc += inv_l[q, i] * inv_l[q, j]
            out[i, j] = acc
            out[j, i] = acc
    return True


@_internal
def round_steps(
    lay: Layout, trees: Trees, sums: Sums, joint: Joint, r: int, lam_term: float, G: NDArray[np.float64],
    HX: NDArray[np.float64], slot0: NDArray[np.int64], d: NDArray[np.float64], record: bool,
) -> None:
    """The joint steps of round ``r`` into ``d`` (indexed by global leaf minus the round's first),
    from leaf sums ``G[slot0[c] + leaf]`` and ``HX[slot0[c] + leaf]`` (K,) of tree ``c`` of the
    round; ``lam_term`` is the l2 term of the mean weight (:func:`.common.l2_term`). With
    ``record``, also the caches ``MI``, ``RD`` (the step) and ``u_before`` (0: one step from the
    round's margins) of the original replay, whose slots ``slot0`` must then be."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    K = t1 - t0
    rl0 = lay.leaf_off[t0]
    M = np.empty((K, K))
    Minv = np.empty((K, K))
    Gv = np.empty(K)
    delta = np.empty(K)
    for lj in range(lay.leaf_off[t0 + 1] - lay.leaf_off[t0]):
        for c in range(K):
            Gv[c] = G[slot0[c] + lj]
            M[c, :] = HX[slot0[c] + lj]
        solve_leaf(M, Gv, trees.l2[lay.leaf_off[t0] + lj] + lam_term, Minv, delta)
        for c in range(K):
            d[lay.leaf_off[t0 + c] + lj - rl0] = delta[c]
            if record:
                o = slot0[c] + lj
                joint.MI[o, :] = Minv[c]
                sums.RD[o] = delta[c]
                sums.u_before[o] = 0.0


@_internal
def replay_round(
    lay: Layout, trees: Trees, sums: Sums, joint: Joint, r: int, mean_w: float, u: NDArray[np.float64],
    d: NDArray[np.float64],
) -> None:
    """Round ``r``'s one joint step into the in-tree moves ``u``, from its leaf sums (summed by the
    replay's team: :func:`.rowjobs.joint_sums`), recording the replay's caches."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rl0 = lay.leaf_off[t0]
    round_steps(lay, trees, sums, joint, r, l2_term(trees, t0, mean_w), sums.G, joint.HX, round_slots(lay, r),
                d, True)
    for gl in range(rl0, lay.leaf_off[t1]):
        u[gl] += d[gl - rl0]


@_internal
def leaf_adjoints(
    lay: Layout, trees: Trees, sums: Sums, joint: Joint, r: int, n: int, u_bar: NDArray[np.float64],
    g_bar: NDArray[np.float64], big_w_bar: NDArray[np.float64],
) -> None:
    """:func:`.plain.leaf_adjoints` of a joint round: ``u_bar`` (B, leaves of the round) ->
    ``g_bar`` (B, slots of the round) = ``a = -M^{-1} delta_bar`` per leaf and class;
    ``big_w_bar`` gains ``a . delta`` times the l2 term's derivative (``n`` rows)."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    K = t1 - t0
    rl0 = lay.leaf_off[t0]
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    dbar = np.empty(K)
    for lj in range(lay.leaf_off[t0 + 1] - lay.leaf_off[t0]):
        for b in range(u_bar.shape[0]):
            for c in range(K):
                dbar[c] = trees.lr[t0 + c] * u_bar[b, lay.leaf_off[t0 + c] + lj - rl0]
            acc = 0.0
            for c in range(K):
                o = lay.sl_off[lay.step_ptr[t0 + c]] + lj
                a = 0.0
                for e in range(K):
                    a -= joint.MI[o, e] * dbar[e]
                g_bar[b, o - rs0] = a
                acc += a * sums.RD[o]
            big_w_bar[b] += acc * trees.l2m[t0] / n


@_per_row
def add_row_derivative(
    lay: Layout, rows: Rows, r: int, A: NDArray[np.float64], j: int, J: NDArray[np.float64], only: int,
    dG: NDArray[np.float64], dM: NDArray[np.float64], p: NDArray[np.float64], dp: NDArray[np.float64],
) -> None:
    """Forward mode: row ``j``'s margin derivative ``J`` (K,) moves its share of the joint leaf
    sums: ``dG[x] += w dg``, ``dM[x] += w dP[c]`` for its leaf ``x`` (global leaf minus the
    round's first) of each tree of the round (only tree ``only`` if >= 0)."""
    K = A.shape[1]
    t0 = lay.round_ptr[r]
    rl0 = lay.leaf_off[t0]
    probabilities(A, j, p)
    mean = 0.0
    for c in range(K):
        mean += p[c] * J[c]
    for c in range(K):
        dp[c] = p[c] * (J[c] - mean)
    wj = rows.w[j]
    for c in range(K):
        t = t0 + c
        if only >= 0 and t != only:
            continue
        x = lay.leaf_off[t] + lay.leaf[t, j] - rl0
        dG[x] += wj * dp[c]
        for d in range(K):
            dM[x, d] += wj * (dp[c] * ((1.0 if c == d else 0.0) - p[d]) - p[c] * dp[d])


@_internal
def forward_steps(
    lay: Layout, rows: Rows, loss: LossSpec, sums: Sums, joint: Joint, r: int, A: NDArray[np.float64], i0:
    int,
    s_i0: float, d_fac: NDArray[np.float64], d_lam: float, dG: NDArray[np.float64], dM: NDArray[np.float64],
    du: NDArray[np.float64],
) -> None:
    """Forward mode: the joint steps' derivatives ``du`` (global leaves) of round ``r`` from the
    propagated sums ``dG``, ``dM`` plus the direct terms of row ``i0``'s weight (``s_i0`` = its
    d w / d v), the group factors (``d_fac``) and the l2 term (``d_lam``):
    ``d delta = -M^{-1} (dG + dM delta)``."""
    K = A.shape[1]
    t0 = lay.round_ptr[r]
    rl0 = lay.leaf_off[t0]
    p = np.empty(loss.zsize)
    probabilities(A, i0, p)
    li0 = lay.leaf[t0, i0]
    lab = int(rows.y[i0, 0])
    G_groups = d_fac.shape[0] if sums.GV.shape[0] > 0 else 0
    rhs = np.empty(K)
    for lj in range(lay.leaf_off[t0 + 1] - lay.leaf_off[t0]):
        for c in range(K):
            o = lay.sl_off[lay.step_ptr[t0 + c]] + lj
            x = lay.leaf_off[t0 + c] + lj - rl0
            v = dG[x]
            for d in range(K):
                od = lay.sl_off[lay.step_ptr[t0 + d]] + lj
                m = dM[x, d]
                if lj == li0:
                    m += s_i0 * p[c] * ((1.0 if c == d else 0.0) - p[d])
                for q in range(G_groups):
                    m += d_fac[q] * joint.HXV[o, q * K + d]
                if c == d:
                    m += d_lam
                v += m * sums.RD[od]
            if lj == li0:
                v += s_i0 * (p[c] - (1.0 if lab == c else 0.0))
            for q in range(G_groups):
                v += d_fac[q] * sums.GV[o, q]
            rhs[c] = v
        for c in range(K):
            o = lay.sl_off[lay.step_ptr[t0 + c]] + lj
            acc = 0.0
            for d in range(K):
                acc -= joint.MI[o, d] * rhs[d]
            du[lay.leaf_off[t0 + c] + lj] += acc


@_internal
def refit_round(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, joint: Joint, r: int,
    A: NDArray[np.float64], delta: NDArray[np.float64], u: NDArray[np.float64], w_new: NDArray[np.float64],
    sel: NDArray[np.bool_], every: bool, changed: bool, i0: int, mean_w: float, Gs: NDArray[np.float64],
    Hs: NDArray[np.float64], HXs: NDArray[np.float64], d: NDArray[np.float64], scratch: NDArray[np.float64],
) -> None:
    """Round ``r``'s one joint step with row ``i0`` deleted, into the in-tree moves ``u``."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rl0, rl1 = lay.leaf_off[t0], lay.leaf_off[t1]
    refit_round_sums(lay, trees, rows, loss, sums, joint, r, 0, A, delta, u, w_new, sel, every, changed, i0,
                     Gs, Hs, HXs, scratch, u[:0], False, None)
    local = lay.leaf_off[t0:t1] - rl0
    round_steps(lay, trees, sums, joint, r, l2_term(trees, t0, mean_w), Gs, HXs, local, d, False)
    for gl in range(rl0, rl1):
        u[gl] += d[gl - rl0]
