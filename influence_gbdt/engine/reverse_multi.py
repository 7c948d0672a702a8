"""The reverse sweep of a model of several outputs (numba): the rows split over a team of threads.
Private to the engine.

Plain rounds: LightGBM's and XGBoost's multiclass defaults (one tree per class and round, one
Newton step each), CatBoost's MultiClass with gradient leaf steps, one-vs-all models (each class's
sigmoid log loss) and multi-target regression (squared error per target). Joint rounds: CatBoost's
MultiClass default (one Newton step for the round's trees with the full softmax hessian,
:mod:`.joint`; only this sweep sweeps them). For plain rounds it computes what the general sweep
(:func:`.passes.reverse` over :mod:`.plain`'s round functions) computes, with the same operations
on each row in the same order, written out in the row loop (:func:`_row_pass` for the softmax,
:func:`_separable_row_pass` for the losses whose outputs do not interact): the general sweep
calls the loss's primitives for each row and objective (:func:`..losses.point`,
:func:`..losses.grad_hess`, :func:`..losses.vjp`), and each call counts references to the arrays
it is given, atomically (measured on a 3-class ``LGBMClassifier()`` on Adult, one test point on
two threads: 0.630 s there, 0.306 s here on one thread, 0.156 s on two; a one-vs-all one 0.53 ->
0.10 s). One difference in order: a leaf's sum over its rows runs over fixed chunks of
:data:`.team.CHUNK_ROWS` rows, each in row order, then over the chunks in order (for up to 4,096
rows, the general sweep's order exactly), so that the scores do not depend on the number of
threads.

A batch's adjoints are laid out (rows, classes, batch): each row's loops over the objectives are
the innermost, contiguous ones, which the compiler vectorizes (a 3-class ``LGBMClassifier()``, 100
test points: 3.9 -> 1.4 s); each objective's operations keep their order, so a point's scores are
the same in any batch.

No derivative cache: a multi-output model's steps are recomputed at the margins entering each
round, rebuilt by subtraction from the final ones, as the general sweep does.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..losses import MULTI_SQUARED, ONE_VS_ALL, SOFTMAX, params4, probabilities, sigmoid_pair
from . import joint as joint_rule
from . import team
from .common import add_chunk_sums, per_row, round_slots, start_leaf_sums
from .indexing import INDEX
from .plain import leaf_adjoints
from .state import Joint, Layout, LossSpec, Rows, State, Sums, Trees, largest_round
from .team import CHUNK_ROWS, barrier, n_chunks, own_rows, rows_team

_internal = numba.njit(cache=True, nogil=True, internal=True)
#: The softmax's and the joint rounds' row loops, compiled knowing that no two of their arrays
#: overlap (:func:`.._jit.njit`'s ``distinct``, as :mod:`.reverse1`'s batch loops; same bits): the
#: arrays they write, ``work.A``, ``work.a_bar`` and ``work.w_rows`` (and their own scratch), are
#: allocated by :func:`reverse`, each apart from every other argument. Measured
#: side by side (two processes alternating the order, best of 4; 10 classes on 20,000 rows, 100
#: test points, two threads): ``LGBMClassifier()`` 3.36 / 3.48 -> 3.09 / 3.19 s,
#: ``XGBClassifier()`` 3.33 / 3.25 -> 3.12 / 3.14 s; ``CatBoostClassifier()`` (joint rounds, 10,000
#: rows, best of 2) 14.4 / 13.1 -> 13.4 / 12.9 s; one test point the same. The one-vs-all loop
#: (:func:`_separable_row_pass`) measured no faster so (3.10 / 2.94 -> 3.15 / 2.90 s) and is
#: compiled as before.
_distinct = numba.njit(cache=True, nogil=True, internal=True, distinct=True)


class Work(NamedTuple):
    """The sweep's arrays, shared by the threads of its team (B objectives, n rows, K outputs)."""

    A: NDArray[np.float64]  # (n, K) margins entering the current round
    a_bar: NDArray[np.float64]  # (n, K, B) each row's margin adjoints (the batch contiguous)
    w_rows: NDArray[np.float64]  # (n, B) each row's weight adjoints: the result
    a0_bar: NDArray[np.float64]  # (B, K) the initial margin's adjoint, summed over rows: the result
    big_w_bar: NDArray[np.float64]  # (B,) the l2 term's share: the result
    PT: NDArray[np.float64]  # (chunks, most leaves of a round, B) each chunk's leaf sums
    u_bar: NDArray[np.float64]  # (B, most leaves of a round) the leaf level's
    g_bar: NDArray[np.float64]  # (B, most slots of a round)
    d_bar: NDArray[np.float64]  # (B, most slots of a round)
    gT: NDArray[np.float64]  # (most slots of a round, B): g_bar transposed, for the rows' batch loops
    dT: NDArray[np.float64]  # (most slots of a round, B): d_bar transposed


@_internal
def _gather(lay: Layout, r: int, shared: bool, a_bar: NDArray[np.float64], j0: int, j1: int,
            PT: NDArray[np.float64]) -> None:
    """Rows ``j0 .. j1 - 1``'s margin adjoints ``a_bar`` (n, K, B) into round ``r``'s leaves: the
    sums of each row's chunk, ``PT[j // CHUNK_ROWS]`` (leaves of the round, B), rows in order.
    ``shared``: the round's trees share its first tree's structure (a joint round), whose leaf
    index is then the only one read."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    rl0 = lay.leaf_off[t0]
    # The rows counted from 0 over arrays sliced from j0, every other index masked (.indexing.INDEX).
    a_bar = a_bar[j0:j1]
    leaf = lay.leaf[t0 : t0 + 1 if shared else t1, j0:j1]  # (trees of the round, or its first, rows)
    off = lay.leaf_off[t0:t1] - rl0
    cls = lay.out[t0:t1] & INDEX
    for i in range(j1 - j0):
        ch = ((j0 + i) // CHUNK_ROWS) & INDEX
        for q in range(t1 - t0):
            gl = (off[q] + leaf[0 if shared else q, i]) & INDEX
            c = cls[q]
            for b in range(PT.shape[2]):
                PT[ch, gl, b] += a_bar[i, c, b]


@_internal
def _leaf_level(lay: Layout, trees: Trees, sums: Sums, joint: Joint | None, r: int, n: int,
                c_leaf: NDArray[np.float64], work: Work) -> None:
    """Round ``r``'s leaf level, by one thread: its leaves' adjoints (the chunks' sums in chunk
    order), through its steps (:func:`.plain.leaf_adjoints`, or a joint round's
    :func:`.joint.leaf_adjoints`) to its leaf-sum adjoints ``work.g_bar`` (and ``work.d_bar``),
    copied transposed to ``work.gT`` (``work.dT``); then round ``r - 1``'s sums started from the
    test side."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    add_chunk_sums(work.PT, lay.leaf_off[t1] - lay.leaf_off[t0], work.u_bar)
    n_slots = lay.sl_off[lay.step_ptr[t1]] - lay.sl_off[lay.step_ptr[t0]]
    if joint is not None and joint.joint[t0]:  # (g_bar alone: the row level derives the hessian's share)
        joint_rule.leaf_adjoints(lay, trees, sums, joint, r, n, work.u_bar, work.g_bar, work.big_w_bar)
    else:
        leaf_adjoints(lay, trees, sums, r, n, work.u_bar, work.g_bar, work.d_bar, work.big_w_bar, False)
        work.dT[:n_slots] = work.d_bar[:, :n_slots].T
    work.gT[:n_slots] = work.g_bar[:, :n_slots].T
    if r > 0:
        start_leaf_sums(lay, r - 1, c_leaf, work.PT)


@per_row
def _rewind(lay: Layout, stored: NDArray[np.float64], r: int, A: NDArray[np.float64],
            leaf: NDArray[np.int32]) -> None:
    """Margins ``A`` (rows, K) moved back to those entering round ``r`` (``leaf`` (trees of the
    round, rows) their leaves): :func:`.common.add_round`'s order, tree by tree."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    for q in range(t1 - t0):
        c = lay.out[t0 + q] & INDEX
        base = lay.leaf_off[t0 + q]
        for i in range(A.shape[0]):
            A[i, c] += -1.0 * stored[(base + leaf[q, i]) & INDEX]


@per_row
def _step_row(A: NDArray[np.float64], u_before: NDArray[np.float64], first: NDArray[np.int64],
              leaf: NDArray[np.int32], cls: NDArray[np.int64], rs0: int, i: int, vec: NDArray[np.float64],
              slot: NDArray[np.int64]) -> None:
    """Row ``i``'s margins at a step, ``vec`` (K,) (:func:`.common.step_point`'s), and each tree's
    slot of the row's leaf in the step from the round's first, ``slot`` (trees of the round,);
    ``first`` each tree's first slot in the step."""
    for c in range(vec.shape[0]):
        vec[c] = A[i, c]
    for q in range(cls.shape[0]):
        vec[cls[q]] += u_before[(first[q] + leaf[q, i]) & INDEX]
    for q in range(cls.shape[0]):
        slot[q] = (first[q] + leaf[q, i] - rs0) & INDEX


@per_row
def _step_terms(
    gT: NDArray[np.float64], dT: NDArray[np.float64], slot: NDArray[np.int64], cls: NDArray[np.int64],
    nw: NDArray[np.bool_], g: NDArray[np.float64], h: NDArray[np.float64], wj: float,
    beta: NDArray[np.float64], gamma: NDArray[np.float64], acc: NDArray[np.float64],
) -> None:
    """A row's terms of one step (:func:`.plain.row_adjoints`' order), from the leaf-sum adjoints
    of its trees' slots ``gT[slot[q]]``, ``dT[slot[q]]`` (B,) and its gradient ``g`` and hessian
    ``h`` (K,): ``beta[c]`` (K, B) is ``w_j`` times the sum of ``gT`` over class ``c``'s trees,
    ``gamma[c]`` that of ``dT`` over its Newton trees, ``acc`` (B,) the row's weight adjoint, the
    sum over trees of ``gT g_c + dT h_c`` (``gT g_c + dT`` for a gradient tree). One objective
    scalar, a batch's innermost (the loops over a batch of one made one test point of a 3-class
    ``LGBMClassifier()`` on Adult 1.2x slower)."""
    B = acc.shape[0]
    K = beta.shape[0]
    if B == 1:
        acc1 = 0.0
        for c in range(K):
            beta[c, 0] = 0.0
            gamma[c, 0] = 0.0
        for q in range(cls.shape[0]):
            c = cls[q]
            gb, dd = gT[slot[q] & INDEX, 0], dT[slot[q] & INDEX, 0]
            beta[c, 0] += wj * gb
            if nw[q]:
                gamma[c, 0] += wj * dd
                acc1 += gb * g[c] + dd * h[c]
            else:
                acc1 += gb * g[c] + dd
        acc[0] = acc1
        return
    for b in range(B):
        acc[b] = 0.0
    for c in range(K):
        for b in range(B):
            beta[c, b] = 0.0
            gamma[c, b] = 0.0
    for q in range(cls.shape[0]):
        c = cls[q]
        gq, dq = gT[slot[q] & INDEX], dT[slot[q] & INDEX]
        if nw[q]:
            for b in range(B):
                beta[c, b] += wj * gq[b]
                gamma[c, b] += wj * dq[b]
                acc[b] += gq[b] * g[c] + dq[b] * h[c]
        else:
            for b in range(B):
                beta[c, b] += wj * gq[b]
                acc[b] += gq[b] * g[c] + dq[b]


@_distinct
def _row_pass(  # noqa: C901 -- one loop over the rows, written out: a call per row costs more than its arithmetic
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, r: int, j0: int, j1: int, work: Work,
) -> None:
    """Rows ``j0 .. j1 - 1`` of a softmax model through round ``r``'s row level: their margins
    moved back to those entering the round, then each step's weight adjoints ``work.w_rows`` and
    margin adjoints ``work.a_bar`` from its leaf-sum adjoints ``work.gT``, ``work.dT``. The
    arithmetic of :func:`.plain.row_adjoints` with :func:`..losses.point`,
    :func:`..losses.grad_hess` and :func:`..losses.vjp` of the softmax written out, in the same
    order (what does not depend on the objective taken out of its loop)."""
    # The rows counted from 0 over arrays sliced from j0, every other index masked (.indexing.INDEX),
    # the row's scratch allocated here (the compiler then knows no store to the adjoints changes it).
    A, a_bar, w_rows = work.A[j0:j1], work.a_bar[j0:j1], work.w_rows[j0:j1]
    y, w = rows.y[j0:j1], rows.w[j0:j1]
    K = A.shape[1]
    B = work.gT.shape[1]
    p4 = params4(loss.prm)
    floor, factor = p4[0], p4[1]
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    leaf = lay.leaf[t0:t1, j0:j1]  # (trees of the round, rows)
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    z, g, h, vec, slope = np.empty(K), np.empty(K), np.empty(K), np.empty(K), np.empty(K)
    beta, gamma, V = np.empty((K, B)), np.empty((K, B)), np.empty((K, B))
    acc, tot = np.empty(B), np.empty(B)
    curved = np.empty(K, dtype=np.bool_)
    slot = np.empty(t1 - t0, dtype=np.int64)
    cls, nw = lay.out[t0:t1] & INDEX, trees.newton[t0:t1]
    _rewind(lay, sums.stored, r, A, leaf)
    for s in range(trees.n_steps[t0]):
        first = lay.sl_off[lay.step_ptr[t0:t1] + s]  # each tree's first slot in the step
        for i in range(j1 - j0):
            wj = w[i]
            _step_row(A, sums.u_before, first, leaf, cls, rs0, i, vec, slot)
            top = vec.max()  # losses.point
            total = 0.0
            for c in range(K):
                z[c] = math.exp(vec[c] - top)
                total += z[c]
            for c in range(K):
                z[c] /= total
            yj = y[i, 0]
            for c in range(K):  # losses.grad_hess, and what losses.vjp takes of the point
                g[c] = z[c] - (1.0 if yj == c else 0.0)
                hc = factor * z[c] * (1.0 - z[c])  # the hessian before its floor
                h[c] = max(hc, floor)
                curved[c] = hc >= floor
                slope[c] = 1.0 - 2.0 * z[c]
            _step_terms(work.gT, work.dT, slot, cls, nw, g, h, wj, beta, gamma, acc)
            if B == 1:  # one objective: the same operations, scalar (see _step_terms)
                w_rows[i, 0] += acc[0]
                total1 = 0.0
                for c in range(K):
                    if curved[c]:
                        V[c, 0] = (beta[c, 0] + gamma[c, 0] * factor * slope[c]) * z[c]
                    else:
                        V[c, 0] = beta[c, 0] * z[c]
                    total1 += V[c, 0]
                for c in range(K):
                    a_bar[i, c, 0] += V[c, 0] - z[c] * total1
                continue
            # The objectives, innermost (contiguous): each one's operations in the general sweep's order.
            for b in range(B):
                w_rows[i, b] += acc[b]
                tot[b] = 0.0  # losses.vjp
            for c in range(K):
                if curved[c]:
                    for b in range(B):
                        V[c, b] = (beta[c, b] + gamma[c, b] * factor * slope[c]) * z[c]
                        tot[b] += V[c, b]
                else:
                    for b in range(B):
                        V[c, b] = beta[c, b] * z[c]
                        tot[b] += V[c, b]
            for c in range(K):
                for b in range(B):
                    a_bar[i, c, b] += V[c, b] - z[c] * tot[b]


@_internal
def _separable_row_pass(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, r: int, j0: int, j1: int, work: Work,
) -> None:
    """:func:`_row_pass` for a loss whose outputs do not interact (each output's gradient and
    hessian depend on its own margin alone): one-vs-all (each class's sigmoid log loss) and
    multi-target squared error, with :func:`..losses.grad_hess` and :func:`..losses.vjp` of
    each written out in the same order."""
    A, a_bar, w_rows = work.A[j0:j1], work.a_bar[j0:j1], work.w_rows[j0:j1]
    y, w = rows.y[j0:j1], rows.w[j0:j1]
    K = A.shape[1]
    B = work.gT.shape[1]
    floor = params4(loss.prm)[0]
    ova = loss.code == ONE_VS_ALL
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    leaf = lay.leaf[t0:t1, j0:j1]
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    # g, h; v: one-vs-all's dg/dm = p (1 - p); spread: its (1 - p) - p, dh/dm over dg/dm
    g, h, v, spread, vec = np.empty(K), np.empty(K), np.empty(K), np.empty(K), np.empty(K)
    beta, gamma, acc = np.empty((K, B)), np.empty((K, B)), np.empty(B)
    curved = np.empty(K, dtype=np.bool_)
    slot = np.empty(t1 - t0, dtype=np.int64)
    cls, nw = lay.out[t0:t1] & INDEX, trees.newton[t0:t1]
    _rewind(lay, sums.stored, r, A, leaf)
    for s in range(trees.n_steps[t0]):
        first = lay.sl_off[lay.step_ptr[t0:t1] + s]
        for i in range(j1 - j0):
            _step_row(A, sums.u_before, first, leaf, cls, rs0, i, vec, slot)
            for c in range(K):
                if ova:  # losses.point (p, 1 - p), grad_hess and the vjp's factors
                    p, q = sigmoid_pair(vec[c])
                    g[c] = p - (1.0 if y[i, 0] == c else 0.0)
                    v[c] = p * q
                    h[c] = max(v[c], floor)
                    curved[c] = v[c] >= floor
                    spread[c] = q - p
                else:  # the point is the margins; dg/dm = 1, dh/dm = 0
                    g[c] = vec[c] - y[i, c]
                    h[c] = max(1.0, floor)
            _step_terms(work.gT, work.dT, slot, cls, nw, g, h, w[i], beta, gamma, acc)
            for b in range(B):
                w_rows[i, b] += acc[b]
            for c in range(K):  # losses.vjp
                if not ova:
                    for b in range(B):
                        a_bar[i, c, b] += beta[c, b]
                elif curved[c]:
                    for b in range(B):
                        a_bar[i, c, b] += beta[c, b] * v[c] + gamma[c, b] * v[c] * spread[c]
                else:
                    for b in range(B):
                        a_bar[i, c, b] += beta[c, b] * v[c] + 0.0


@_distinct
def _joint_row_pass(  # noqa: C901 -- one loop over the rows, written out (as _row_pass)
    lay: Layout, rows: Rows, sums: Sums, r: int, j0: int, j1: int, work: Work,
) -> None:
    """Rows ``j0 .. j1 - 1`` through joint round ``r``'s row level: their margins moved back to
    those entering the round, then the weight adjoints ``work.w_rows`` gain ``a . g + a^T P delta``
    and the margin adjoints ``work.a_bar`` gain ``w J (a + q)`` (:mod:`.joint`'s docstring), with
    ``a`` from ``work.gT`` (:func:`.joint.leaf_adjoints`' ``g_bar``, transposed)."""
    # The rows counted from 0 over arrays sliced from j0, every other index masked (.indexing.INDEX),
    # the row's scratch allocated here (the compiler then knows no store to the adjoints changes it).
    A, a_bar, w_rows = work.A[j0:j1], work.a_bar[j0:j1], work.w_rows[j0:j1]
    y, w = rows.y[j0:j1], rows.w[j0:j1]
    gT, stored, RD = work.gT, sums.stored, sums.RD
    K = A.shape[1]
    B = gT.shape[1]
    t0 = lay.round_ptr[r]
    leaf = lay.leaf[t0][j0:j1]  # the round's trees share the first one's structure
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    slot = round_slots(lay, r) - rs0
    off = lay.leaf_off[t0 : t0 + K]
    p, g, dl = np.empty(K), np.empty(K), np.empty(K)
    k = np.empty(K, dtype=np.int64)
    a, pa, acc, px = np.empty((K, B)), np.empty(B), np.empty(B), np.empty(B)
    for i in range(j1 - j0):
        lj = leaf[i]
        for c in range(K):
            A[i, c] -= stored[(off[c] + lj) & INDEX]
        probabilities(A, i, p)
        lab = int(y[i, 0])
        wj = w[i]
        pd = 0.0  # what does not depend on the objective first
        for c in range(K):
            k[c] = (slot[c] + lj) & INDEX
            dl[c] = RD[(k[c] + rs0) & INDEX]
            g[c] = p[c] - (1.0 if lab == c else 0.0)
            pd += p[c] * dl[c]
        if B == 1:  # one objective: the same operations, scalar (as in _row_pass)
            pa1 = 0.0
            for c in range(K):
                a[c, 0] = gT[k[c] & INDEX, 0]
                pa1 += p[c] * a[c, 0]
            acc1 = -pa1 * pd
            px1 = 0.0
            for c in range(K):
                acc1 += a[c, 0] * (g[c] + p[c] * dl[c])
                x = a[c, 0] * (1.0 + dl[c] - pd) - dl[c] * pa1
                px1 += p[c] * x
                a_bar[i, c, 0] += wj * p[c] * x
            w_rows[i, 0] += acc1
            for c in range(K):
                a_bar[i, c, 0] -= wj * p[c] * px1
            continue
        # The objectives, innermost (contiguous): each one's operations in the order of the
        # formulas, a[c] = g_bar[b, k[c]]; pa = p . a; acc = -pa pd + sum_c a[c] (g[c] + p[c] dl[c]).
        for b in range(B):
            pa[b] = 0.0
        for c in range(K):
            ac = gT[k[c] & INDEX]
            for b in range(B):
                a[c, b] = ac[b]
                pa[b] += p[c] * ac[b]
        for b in range(B):
            acc[b] = -pa[b] * pd
            px[b] = 0.0
        for c in range(K):
            gc, fc, wp = g[c] + p[c] * dl[c], 1.0 + dl[c] - pd, wj * p[c]
            for b in range(B):
                acc[b] += a[c, b] * gc
                x = a[c, b] * fc - dl[c] * pa[b]
                px[b] += p[c] * x
                a_bar[i, c, b] += wp * x  # the -p_c px part below, once px is known
        for b in range(B):
            w_rows[i, b] += acc[b]
        for c in range(K):
            wp = wj * p[c]
            for b in range(B):
                a_bar[i, c, b] -= wp * px[b]


@_internal
def _is_joint(lay: Layout, joint: Joint | None, r: int) -> bool:
    """Whether round ``r`` takes one joint step."""
    return joint is not None and joint.joint[lay.round_ptr[r]]


@numba.njit(cache=True, nogil=True)
def sweep(
    tid: int, n_team: int, bar: NDArray[np.int64], lay: Layout, trees: Trees, rows: Rows, loss: LossSpec,
    sums: Sums, joint: Joint | None, c_leaf: NDArray[np.float64], work: Work,
) -> None:
    """Thread ``tid``'s part of the sweep of a team of ``n_team`` (see :mod:`.team`): the rows of
    its chunks; thread 0 also the leaf level of every round and ``work.a0_bar``. Fills
    ``work.w_rows``, ``work.a0_bar``, ``work.big_w_bar`` (see :func:`reverse`); ``work.A`` holds
    the final margins on entry."""
    n, K, B = work.a_bar.shape
    R = lay.round_ptr.shape[0] - 1
    j0, j1 = own_rows(n, tid, n_team)
    work.a_bar[j0:j1] = 0.0  # (each thread its own rows)
    work.w_rows[j0:j1] = 0.0
    if R > 0:
        if tid == 0:
            start_leaf_sums(lay, R - 1, c_leaf, work.PT)
        barrier(bar, n_team)
        # the zero adjoints too, as the general sweep gathers them: a -0.0 from the test side becomes 0.0
        _gather(lay, R - 1, _is_joint(lay, joint, R - 1), work.a_bar, j0, j1, work.PT)
        barrier(bar, n_team)
    for r in range(R - 1, -1, -1):
        if tid == 0:
            _leaf_level(lay, trees, sums, joint, r, n, c_leaf, work)
        barrier(bar, n_team)
        if _is_joint(lay, joint, r):
            _joint_row_pass(lay, rows, sums, r, j0, j1, work)
        elif loss.code == SOFTMAX:
            _row_pass(lay, trees, rows, loss, sums, r, j0, j1, work)
        else:
            _separable_row_pass(lay, trees, rows, loss, sums, r, j0, j1, work)
        if r > 0:
            _gather(lay, r - 1, _is_joint(lay, joint, r - 1), work.a_bar, j0, j1, work.PT)
        barrier(bar, n_team)
    if tid == 0:
        for j in range(n):  # (each objective's and output's sum in row order)
            for c in range(K):
                for b in range(B):
                    work.a0_bar[b, c] += work.a_bar[j, c, b]


def applies(st: State) -> bool:
    """Whether :func:`reverse` sweeps this model: several outputs (a softmax, its rounds plain or
    joint; one-vs-all; multi-target squared error), no renewed leaves. (Decided by the model alone,
    never by the batch or the threads: the scores must not depend on them.)"""
    return st.loss.K > 1 and st.loss.code in (SOFTMAX, ONE_VS_ALL, MULTI_SQUARED) and st.renewed is None


def reverse(
    st: State, A_final: NDArray[np.float64], c_leaf: NDArray[np.float64], threads: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The reverse sweep of a model :func:`applies` to (:func:`.passes.reverse`'s results; see the
    module's note on the order of sums), by a team of up to ``threads`` threads (one per chunk of
    rows at most): ``A_final`` (n, K) the replay's final margins, ``c_leaf`` (B, n_total) from the
    test side; returns the weight adjoints ``w_rows`` (n, B) (objective ``b`` in column ``b``),
    ``a0_bar`` (B, K), ``big_w_bar`` (B,)."""
    B = c_leaf.shape[0]
    n, K = A_final.shape
    most_leaves, most_slots = largest_round(st.lay)
    work = Work(A=A_final.copy(), a_bar=np.empty((n, K, B)), w_rows=np.empty((n, B)), a0_bar=np.zeros((B, K)),
                big_w_bar=np.zeros(B), PT=np.zeros((n_chunks(n), most_leaves, B)),
                u_bar=np.empty((B, most_leaves)), g_bar=np.empty((B, most_slots)),
                d_bar=np.empty((B, most_slots)), gT=np.empty((most_slots, B)),
                dT=np.empty((most_slots, B)))
    n_team = rows_team(threads, n)
    team.run(sweep, n_team, st.lay, st.trees, st.rows, st.loss, st.sums, st.joint,
             np.ascontiguousarray(c_leaf), work)
    return work.w_rows, work.a0_bar, work.big_w_bar
