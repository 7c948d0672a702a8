"""The reverse sweep of a one-output model whose rounds all take plain steps or all renew their
leaves (numba): a batch of objectives in one pass over the rows per round, the rows split over a
team of threads. Private to the engine. (A renewed round's part is :mod:`.renewed`'s
:func:`~.renewed.reverse_leaves` and :func:`~.renewed.reverse_rows`, in a sweep of its own:
:func:`sweep_renewed`.)

It computes what the general sweep (:func:`.passes.reverse` over :mod:`.plain`'s round functions)
computes, with the same additions in the same order except one: a leaf's sum over its rows runs
over fixed chunks of :data:`.team.CHUNK_ROWS` rows, each in row order, then over the chunks in
order (for up to 4,096 rows, the general sweep's order exactly). So the scores do not depend on the
number of threads or on which test points share a batch, bit for bit. What differs is the layout
and the passes over the rows:

- the rows' margin and weight adjoints are ``(n, B)``: a row's leaf index and loss derivatives
  are read once per step for the whole batch, and the batch's arithmetic runs over contiguous
  memory (each row's starting on a cache line: see :data:`LINE`);
- a round's row update and the next round's leaf gather are one pass over the rows, split over
  the team by chunks; one thread does each round's leaf level between two barriers;
- a row's terms of a step are the step's adjoint of G (one number per leaf and objective) times
  the row's two factors (:func:`.common.row_factors`, once per row, from the step's
  :func:`.common.step_ratio`): one product per row, step and objective for each of the margin and
  weight adjoints, where the adjoints of G and of H + lam took two;
- for more than :data:`DEFER_ABOVE` objectives of a model whose rounds are one cached log-loss
  Newton step each, the weight adjoints are summed after the sweep (where memory allows), block of
  rows by block of rows over all rounds, from the leaf-sum adjoints of every step, kept as
  ``(n_slots, B)``: the sweep itself then writes only the margin adjoints (``n x B``, which stays
  in the processor's cache for a batch of a few dozen objectives on ~30,000 rows).

Derivatives the replay did not cache are recomputed at the margins entering the round, rebuilt by
subtraction from the final ones, as the general sweep does. :func:`applies` says which models and
batches it takes.

Zeros: the general sweep adds ``0.0 +`` to a step's leaf-sum adjoints and to each term of a row's
adjoints, turning a -0.0 into +0.0. Here the leaf level stores the adjoints so (``GT``), and the
rows' loops add the terms as they are: a row's adjoint sums start at +0.0 and, rounding to
nearest, a sum is -0.0 only when both its terms are, so they never are, and adding -0.0 or +0.0
to them gives the same value. The same numbers, two additions fewer per row, step and
objective.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..losses import LOGLOSS, Params4, params4, point1, step_derivs1, step_logloss, step_logloss_at
from . import renewed as renewed_rule
from . import team
from .common import add_chunk_sums, kept_point, per_row, row_factors, start_leaf_sums, step_ratio
from .indexing import INDEX
from .plain import leaf_adjoints
from .state import (
    Cache,
    Layout,
    LossSpec,
    Renewed,
    Rows,
    State,
    Sums,
    Trees,
    every_step_cached,
    largest_round,
)
from .team import CHUNK_ROWS, barrier, n_chunks, own_rows, rows_team

_internal = numba.njit(cache=True, nogil=True, internal=True)
#: The batch's loops over rows and objectives, compiled knowing that no two of their arrays overlap
#: (:func:`.._jit.njit`'s ``distinct``: each array argument a different array, a matrix passed whole
#: with its rows' indices), so that the loop over the objectives runs without the compiler's check
#: at each row that they do not (same bits). Measured on Adult, 100 test points on two threads,
#: best of 21 in each of four processes alternating the order: ``LGBMClassifier()`` 78.2-81.7 ->
#: 70.7-81.3 ms, ``XGBClassifier()`` 80.7-83.9 -> 69.1-77.0 ms, ``LGBMRegressor()`` 103.7-115.6 ->
#: 92.0-108.2 ms, ``XGBRegressor()`` 110.1-119.4 -> 95.2-120.0 ms. (One test point's loop,
#: :func:`_kept_logloss`, has no loop over objectives: compiled so, it ran no faster.)
_distinct = numba.njit(cache=True, nogil=True, internal=True, distinct=True)

#: Most memory (bytes) the kept leaf-sum adjoints of every step may take (``8 * n_slots * B``), in
#: all the sweeps that run at once.
KEPT_BYTES = 256e6


class Work(NamedTuple):
    """The sweep's arrays, shared by the threads of its team (B objectives, n rows)."""

    A: NDArray[np.float64]  # (n, 1) margins entering the current round; (0, 1) if every step is cached
    aT: NDArray[np.float64]  # (n, B) each row's margin adjoints
    w_rows: NDArray[np.float64]  # (n, B) each row's weight adjoints: the result
    a0_bar: NDArray[np.float64]  # (B, 1) the initial margin's adjoint, summed over rows: the result
    big_w_bar: NDArray[np.float64]  # (B,) the l2 term's share: the result
    PT: NDArray[np.float64]  # (chunks, most leaves of a round, B) each chunk's leaf sums
    GT: NDArray[np.float64]  # (n_slots, B) every step's leaf-sum adjoints of G
    ratio: NDArray[np.float64]  # (n_slots,) each step-leaf slot's step_ratio (that of H + lam: GT times it)
    u_bar: NDArray[np.float64]  # (B, most leaves of a round) the leaf level's
    g_bar: NDArray[np.float64]  # (B, most slots of a round)
    d_bar: NDArray[np.float64]  # (B, most slots of a round)
    pivot: NDArray[np.float64]  # (most leaves of a round,) see .renewed.reverse_leaves; (0,) if none renewed


#: Rows per block of the deferred weight pass (its (block, B) sums stay in the L1/L2 cache).
BLOCK_ROWS = 1024

#: Bytes of a cache line: every (rows, B) array of the sweep starts on one, and a batch of 8 or
#: more objectives is padded to a multiple of its 8 doubles, so that each row of B adjoints does
#: too (a vector of 8 doubles that straddles two lines costs two loads or stores: measured on
#: Adult's LightGBM default, the sweep of 50 test points on one thread 0.077 -> 0.060 s).
LINE = 64


def padded(B: int) -> int:
    """The sweep's width for a batch of ``B`` objectives: ``B`` up to a multiple of 8 from 8
    objectives on (the padding's objectives are zero throughout and dropped)."""
    return B if B < 8 else -(-B // 8) * 8


def widest(most: int) -> int:
    """The most objectives a batch may hold when its padded width (:func:`padded`) may be at
    most ``most``."""
    return most if most < 8 else most // 8 * 8


#: Most objectives per sweep of a model whose every tree takes one leaf step (LightGBM's and
#: XGBoost's defaults): past it a round's per-leaf arrays (``GT`` and a chunk's ``PT``, leaves x
#: B doubles each) outgrow the L1 cache, and each objective costs more than a second sweep does.
#: Measured on Adult, 100 test points on two threads, best of 9, batches of at most 40 / 56 / 64 /
#: 80 / 104: LightGBM's default 89.6 / 78.6 / 76.5 / 77.4 / 80.6 ms, XGBoost's 97.2 / 80.9 / 80.6 /
#: 81.8 / 93.5 ms, LightGBM's default regressor (64 / 104) 100.4 / 121.0 ms, its quantile regressor
#: (56 / 64 / 80 / 104: renewed leaves) 45.3 / 42.1 / 42.2 / 55.0 ms. Models with several
#: steps per tree are not capped: a row's steps cost more than its objectives, and a wider batch
#: shares them (CatBoost's default, 100 test points in batches of 64 / 104: 10.3 / 8.6 s).
ONE_STEP_WIDTH = 64


def batch_width(st: State) -> int:
    """The most objectives one sweep of this model takes, for speed (the scores are the same for
    any batch): :data:`ONE_STEP_WIDTH` where every tree takes one leaf step (or renews its
    leaves), else no limit."""
    return ONE_STEP_WIDTH if bool(np.all(st.trees.n_steps == 1)) else sys.maxsize


def _lined(shape: tuple[int, ...], zero: bool = True) -> NDArray[np.float64]:
    """An array of ``shape``, C-ordered, starting on a cache line; zeros if ``zero``."""
    size = int(np.prod(shape))
    buf = (np.zeros if zero else np.empty)(size + LINE // 8)
    off = (-buf.ctypes.data % LINE) // 8
    return buf[off : off + size].reshape(shape)


@_internal
def _round_steps(lay: Layout, trees: Trees, cache: Cache, r: int) -> tuple[NDArray[np.int64], ...]:
    """Round ``r``'s steps as the row loops read them: (S, trees of the round) the first
    step-leaf slot of each tree's leaves in each step; (S,) the slot of each step's cached
    derivatives (-1: none)."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    S = trees.n_steps[t0]
    first = np.empty((S, t1 - t0), dtype=np.int64)
    for s in range(S):
        for t in range(t0, t1):
            first[s, t - t0] = lay.sl_off[lay.step_ptr[t] + s]
    return first, cache.der_slot[lay.step_ptr[t0] : lay.step_ptr[t0] + S]


@per_row
def _leaf_major(trees_in_round: int, B: int) -> bool:
    """Whether a round's leaf-sum adjoints are kept leaf by leaf (each leaf's steps one after
    another: ``GT[leaf * S + step]``) rather than step by step (``GT[step * L + leaf]``, the
    step-leaf slots' order): for a round of one tree swept with more than one objective. A row
    then reads its steps' adjoints from one stretch of memory instead of one per step, ``B``
    numbers each (CatBoost's default, 64 leaves and 10 steps, with 104 objectives: a round's
    adjoints take 1 MB, more than a core's L2 cache here). Measured: in a stand-alone loop, 0.74
    -> 0.47 ns per row, step and objective; in the sweep (8,000 rows, 200 trees, one thread),
    1.14-1.43 -> 1.10-1.29 s, faster in each of three alternating pairs. A one-step round's two
    orders are the same."""
    return trees_in_round == 1 and B > 1


@per_row
def _slot_row(k: int, L: int, S: int, leaf_major: bool) -> int:
    """The row of ``GT`` (from the round's first) of the round's step-leaf slot ``k`` (step
    ``k // L``, leaf ``k % L`` of a round of ``L`` leaves and ``S`` steps; see
    :func:`_leaf_major`)."""
    return (k % L) * S + k // L if leaf_major else k


@_internal
def _leaf_level(lay: Layout, trees: Trees, sums: Sums, r: int, n: int, c_leaf: NDArray[np.float64],
                work: Work, defer: bool) -> None:
    """Round ``r``'s leaf level, by one thread: its leaves' adjoints (the chunks' sums in chunk
    order), through its steps (:func:`.plain.leaf_adjoints`) to its leaf-sum adjoints of G in
    ``work.GT`` (kept for every step if ``defer``, else the round's from row 0) and its slots'
    ratios in ``work.ratio`` (by slot, kept); then round ``r - 1``'s sums started. (A renewed
    round's: :func:`_renewed_level`.)"""
    PT, u_bar = work.PT, work.u_bar
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    n_round = lay.leaf_off[t1] - lay.leaf_off[t0]
    add_chunk_sums(PT, n_round, u_bar)
    leaf_adjoints(lay, trees, sums, r, n, u_bar, work.g_bar, work.d_bar, work.big_w_bar, False)
    rs0 = lay.sl_off[lay.step_ptr[t0]]
    o = rs0 if defer else 0
    B = PT.shape[2]
    S = lay.step_ptr[t0 + 1] - lay.step_ptr[t0]
    for k in range(lay.sl_off[lay.step_ptr[t1]] - rs0):
        row = o + _slot_row(k, n_round, S, _leaf_major(t1 - t0, B))
        for b in range(B):
            work.GT[row, b] = 0.0 + work.g_bar[b, k]  # see the module's note on zeros
        work.ratio[rs0 + k] = step_ratio(sums.RG[rs0 + k], sums.RD[rs0 + k])
    if r > 0:
        start_leaf_sums(lay, r - 1, c_leaf, PT)


@_internal
def _renewed_level(lay: Layout, trees: Trees, rows: Rows, sums: Sums, ren: Renewed, r: int, n: int,
                   c_leaf: NDArray[np.float64], work: Work) -> None:
    """The leaf level of renewed round ``r`` (one tree), by one thread: its leaves' adjoints (the
    chunks' sums in chunk order) through its quantiles (:func:`.renewed.reverse_leaves`; its
    leaves' adjoints in ``work.GT``), then round ``r - 1``'s sums started."""
    t0 = lay.round_ptr[r]
    add_chunk_sums(work.PT, lay.leaf_off[t0 + 1] - lay.leaf_off[t0], work.u_bar)
    leaf_adjoints(lay, trees, sums, r, n, work.u_bar, work.g_bar, work.d_bar, work.big_w_bar, True)
    renewed_rule.reverse_leaves(lay, rows.y, ren, sums.stored, t0, work.A, work.u_bar, work.aT, work.GT,
                                work.pivot)
    if r > 0:
        start_leaf_sums(lay, r - 1, c_leaf, work.PT)


@_internal
def _row_pass(  # noqa: C901 -- one loop over the rows, written out: a call per row costs more than its arithmetic
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, r: int, every: bool,
    A: NDArray[np.float64], j0: int, j1: int, GT: NDArray[np.float64], ratio: NDArray[np.float64],
    base: int, aT: NDArray[np.float64], with_margins: bool, W: NDArray[np.float64], with_weights: bool,
    PT: NDArray[np.float64], gather: bool,
) -> None:
    """Rows ``j0 .. j1 - 1`` through round ``r``'s row level, from its steps' leaf-sum adjoints of
    G ``GT`` (step-leaf slot - ``base``, B) and the slots' ``ratio`` (by slot): each row's margin
    adjoints ``aT[j]`` (B,) if ``with_margins``, its weight adjoints ``W[j - j0]`` (B,) if
    ``with_weights`` (one of them alone only for the rounds :func:`_logloss_batch` takes: the
    weights are summed after the sweep only for models whose rounds are all such, see
    :func:`_weights_in_fours`), then (if ``gather``) its margin adjoints into round ``r - 1``'s
    leaves, the sums of its chunk ``PT[j // CHUNK_ROWS]`` (leaves of the round, B). ``A`` (j1 - j0,
    1) holds the rows' margins leaving round ``r`` unless ``every`` step is cached, and those
    entering it on return. The sums run in the order of :func:`.plain.cached_row_adjoints1`
    (each row's steps in order, a row's terms from :func:`.common.row_factors`) and each chunk's
    leaf sums over its rows in order."""
    t0, t1 = lay.round_ptr[r], lay.round_ptr[r + 1]
    first, qs = _round_steps(lay, trees, cache, r)
    S = qs.shape[0]
    B = GT.shape[1]
    newton = trees.newton[t0:t1]
    single = t1 - t0 == 1
    lm, S_all = _leaf_major(t1 - t0, B), lay.step_ptr[t0 + 1] - lay.step_ptr[t0]
    leaf, leaf_off, out, stored, u_before = lay.leaf, lay.leaf_off, lay.out, sums.stored, sums.u_before
    DER, code, prm, y, w = cache.DER, loss.code, loss.prm, rows.y, rows.w
    p4 = params4(prm)  # a call per row given an array would count references to it
    g0, g1 = (lay.round_ptr[r - 1], t0) if gather else (t0, t0)
    grl0 = leaf_off[g0]
    f = first[0, 0]
    fac = np.empty((t1 - t0, 2))  # a row's factors through a round of several trees
    if every and _logloss_round(lay, trees, loss, r) and g1 - g0 <= 1:  # see _logloss_batch
        _logloss_batch(p4, y, w, DER[qs[0]], leaf, t0, f - base, GT, ratio[f:], aT, with_margins, W,
                       with_weights, j0, j1, g0, PT)
        return
    if every and single and S == 1 and g1 - g0 <= 1:  # see _step_batch
        _step_batch(code, p4, y, w, DER[qs[0]], leaf, t0, f - base, GT, ratio[f:], newton[0], aT, W, j0, j1,
                    g0, PT)
        return
    for j in range(j0, j1):
        jj = j - j0
        if not every:
            for t in range(t0, t1):
                A[jj, out[t]] += -1.0 * stored[leaf_off[t] + leaf[t, j]]
        for s in range(S):
            q = qs[s]
            if q >= 0:
                z0, z1 = kept_point(DER, q, j)
            else:  # at the row's margin in the step, as plain.row_adjoints computes it
                m = A[jj, 0]
                for t in range(t0, t1):
                    m += u_before[first[s, t - t0] + leaf[t, j]]
                z0, z1 = point1(code, p4, m)
            g, h, wdg, wdh = step_derivs1(code, p4, y[j, 0], w[j], z0, z1)
            if single:  # the batch's loops are plain arithmetic on contiguous memory
                sl = first[s, 0] + leaf[t0, j]
                k = f - base + leaf[t0, j] * S_all + s if lm else sl - base
                fw, fm = row_factors(g, h, wdg, wdh, ratio[sl], newton[0])
                # (written out: an inlined function given the arrays counted references to them at
                # each row and step, atomically: measured 2.9x slower, CatBoost's default with two
                # objectives)
                for b in range(B):  # each adjoint read once for the two
                    gb = GT[k, b]
                    aT[j, b] += gb * fm
                    W[jj, b] += gb * fw
                continue
            for t in range(t0, t1):  # the row's factors through each tree, for every objective
                sl = first[s, t - t0] + leaf[t, j]
                fac[t - t0, 0], fac[t - t0, 1] = row_factors(g, h, wdg, wdh, ratio[sl], newton[t - t0])
            for b in range(B):
                acc = 0.0
                beta = 0.0
                for t in range(t0, t1):
                    gb = GT[first[s, t - t0] + leaf[t, j] - base, b]
                    acc += gb * fac[t - t0, 0]
                    beta += gb * fac[t - t0, 1]
                W[jj, b] += acc
                aT[j, b] += beta
        c = j // CHUNK_ROWS
        for t in range(g0, g1):
            gl = leaf_off[t] - grl0 + leaf[t, j]
            for b in range(B):
                PT[c, gl, b] += aT[j, b]


@per_row  # inlined where called: no kernel of its own to compile (benchmarks/coldstart.py)
def _logloss_round(lay: Layout, trees: Trees, loss: LossSpec, r: int) -> bool:
    """Whether round ``r`` is one log-loss tree taking one Newton step: the rounds
    :func:`_logloss_batch` and :func:`_logloss_weights4` sweep (where its points are cached)."""
    t0 = lay.round_ptr[r]
    return (loss.code == LOGLOSS and lay.round_ptr[r + 1] == t0 + 1 and trees.n_steps[t0] == 1
            and trees.newton[t0])


@_internal
def _logloss_batch(
    p4: Params4, y: NDArray[np.float64], w: NDArray[np.float64], kept: NDArray[np.float64],
    leaf: NDArray[np.int32], t: int, k0: int, GT: NDArray[np.float64], ratio: NDArray[np.float64],
    aT: NDArray[np.float64], with_margins: bool, W: NDArray[np.float64], with_weights: bool, j0: int, j1: int,
    t_next: int, PT: NDArray[np.float64],
) -> None:
    """:func:`_row_pass` for a log-loss round of one tree (``t``, leaves ``leaf[t]``; its step-leaf
    slots are rows ``k0 ..`` of ``GT``, their ratios ``ratio`` by leaf) and one Newton step whose points
    (p, 1 - p) the cache keeps (``kept`` (n, 2)): the margin adjoints ``aT[j]`` (B,)
    (:func:`_logloss_margins`) and the weight adjoints ``W[j - j0]`` (B,), both in one pass where
    both are asked for (:func:`_step_batch`), the same sums in the same order, in loops with no
    call per row (LightGBM's and XGBoost's binary defaults where every step is cached). Measured
    on Adult's LightGBM default, 100 test points on two threads: 0.163-0.175 -> 0.118-0.120 s. Kept
    to log loss with Newton steps: variants for every loss (a call in the loop, or the derivatives
    computed in a loop of their own first) ran 0.127-0.134 s and compiled ~2 s longer where the
    wheel's kernels cannot be used (the first use of a binary model there, ~24 s; see
    docs/performance.md)."""
    if with_margins and with_weights:  # each row's point, leaf and step adjoints read once for both
        _step_batch(LOGLOSS, p4, y, w, kept, leaf, t, k0, GT, ratio, True, aT, W, j0, j1, t_next, PT)
    elif with_margins:
        _logloss_margins(p4, y, w, kept, leaf, t, k0, GT, ratio, aT, j0, j1, t_next, PT)
    elif with_weights:
        for j in range(j0, j1):
            fw = _weight_factor(p4, y[j, 0], w[j], kept[j, 0], kept[j, 1], ratio[leaf[t, j]])
            k = k0 + leaf[t, j]
            jj = j - j0
            for b in range(GT.shape[1]):
                W[jj, b] += GT[k, b] * fw


@_distinct
def _step_batch(
    code: int, p4: Params4, y: NDArray[np.float64], w: NDArray[np.float64], kept: NDArray[np.float64],
    leaf: NDArray[np.int32], t: int, k0: int, GT: NDArray[np.float64], ratio: NDArray[np.float64],
    newton: bool, aT: NDArray[np.float64], W: NDArray[np.float64], j0: int, j1: int, t_next: int,
    PT: NDArray[np.float64],
) -> None:
    """:func:`_row_pass`, margins and weights, for a round of one tree (``t``, leaves ``leaf[t]``; its
    step-leaf slots are rows ``k0 ..`` of ``GT``, their ratios ``ratio`` by leaf) taking one step
    whose points the cache keeps (``kept`` (n, point size)), any loss, Newton or gradient (squared
    error, the regressors' default, among them; log loss's from :func:`_logloss_batch`): the
    general loop's sums in the same order, in one pass over the rows. Measured on Adult (two
    threads, best of 7, two alternating runs, with the weights summed after the sweep before):
    LightGBM's default regressor, 4 test points 93-134 -> 30-47 ms, 16: 144-157 -> 42-66 ms;
    XGBoost's, 4: 141-151 -> 40-45 ms; CatBoost's (one run), 8: 1.40 -> 0.44 s. LightGBM's default
    classifier, two test points on one thread, four alternating runs: 39.7-45.7 -> 31.9-33.0 ms,
    through a log-loss loop of its own; this one, six alternating runs against it, best 37.3
    against 32.7 ms for two points, 45.4 against 38.9 for four, medians 2-6% apart, within each
    version's own +-30%. Rows counted from ``j0`` over sliced arrays, leaves ``& INDEX``
    (:mod:`.indexing`; stop 65, two threads, best of 9 in two alternating runs: LightGBM's default
    classifier, 2 / 4 / 8 test points 16.4 / 19.2 / 26.4 -> 14.6 / 16.2 / 22.4 ms; its default
    regressor 15.2 / 18.0 / 24.7 -> 12.6 / 14.6 / 20.8 ms)."""
    B = GT.shape[1]
    y, w, kept, leaf_t, leaf_next = y[j0:j1], w[j0:j1], kept[j0:j1], leaf[t, j0:j1], leaf[t_next, j0:j1]
    a_rows = aT[j0:j1]
    two = kept.shape[1] > 1
    for i in range(j1 - j0):
        z0, z1 = kept[i, 0], (kept[i, 1] if two else 0.0)
        g, h, wdg, wdh = step_derivs1(code, p4, y[i, 0], w[i], z0, z1)
        lf = leaf_t[i] & INDEX
        fw, fm = row_factors(g, h, wdg, wdh, ratio[lf], newton)
        k = (k0 + lf) & INDEX
        c = ((j0 + i) // CHUNK_ROWS) & INDEX
        gl = leaf_next[i] & INDEX
        for b in range(B):
            gb = GT[k, b]
            a = a_rows[i, b] + gb * fm
            a_rows[i, b] = a
            PT[c, gl, b] += a
            W[i, b] += gb * fw


@_distinct
def _logloss_margins(
    p4: Params4, y: NDArray[np.float64], w: NDArray[np.float64], kept: NDArray[np.float64],
    leaf: NDArray[np.int32], t: int, k0: int, GT: NDArray[np.float64], ratio: NDArray[np.float64],
    aT: NDArray[np.float64], j0: int, j1: int, t_next: int, PT: NDArray[np.float64],
) -> None:
    """:func:`_logloss_batch`'s margin adjoints ``aT[j]`` (B,), each gathered in the same loop
    over the batch into the sums ``PT`` of its leaf ``leaf_next[j]`` in round ``r - 1``'s one tree
    (measured on Adult's LightGBM default, 50 test points on one thread: the margins' pass 0.068 ->
    0.053 s against an update loop and a gather loop). Round 0 gathers into its own tree's leaves
    sums that nothing reads: one loop instead of two to compile (``benchmarks/coldstart.py``).
    Rows counted from ``j0`` over sliced arrays, indices ``& INDEX`` (:mod:`.indexing`), here and in
    :func:`_logloss_weights4` (stop 68, Adult's defaults, 100 test points on two threads, best of
    9 in three alternating runs: LightGBM 94.9-114.4 -> 91.5-112.9 ms, most runs 91-97; XGBoost
    94.6-107.3 -> 89.4-94.2 ms)."""
    B = GT.shape[1]
    y, w, kept, leaf_t, leaf_next = y[j0:j1], w[j0:j1], kept[j0:j1], leaf[t, j0:j1], leaf[t_next, j0:j1]
    a_rows = aT[j0:j1]
    for i in range(j1 - j0):
        g, h, wdg, wdh = step_logloss(p4, y[i, 0], w[i], kept[i, 0], kept[i, 1])
        lf = leaf_t[i] & INDEX
        _, fm = row_factors(g, h, wdg, wdh, ratio[lf], True)
        k = (k0 + lf) & INDEX
        c = ((j0 + i) // CHUNK_ROWS) & INDEX
        gl = leaf_next[i] & INDEX
        for b in range(B):
            a = a_rows[i, b] + GT[k, b] * fm
            a_rows[i, b] = a
            PT[c, gl, b] += a


@_internal
def _row_pass_one(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, r: int,
    A: NDArray[np.float64] | None, j0: int, j1: int, GT: NDArray[np.float64], ratio: NDArray[np.float64],
    base: int, aT: NDArray[np.float64], W: NDArray[np.float64], PT: NDArray[np.float64], gather: bool,
) -> None:
    """:func:`_row_pass` (margins and weights) for one objective and a round of one tree (the
    one-output models of the three libraries): the same arithmetic, step by step over the rows
    (each row's steps still in order), each step in a loop short enough for the compiler to keep
    it in registers, log loss's with its arithmetic inlined (measured: 2.5x faster than the
    general loop on one objective with cached derivatives, 1.8x without; a cached step of
    CatBoost's rounds 3.5 ns per row on one thread by steps, 7.4 ns by rows). ``A`` (n, 1): rows
    ``j0 .. j1 - 1`` hold the margins leaving round ``r``, and those entering it on return; None
    where every step is cached, and then numba compiles no loop that reads margins (it drops the
    branches testing ``A is None`` when the argument is None; given an array it compiles both, so
    nothing here is ever assigned None)."""
    t0 = lay.round_ptr[r]
    first, qs = _round_steps(lay, trees, cache, r)
    newton = trees.newton[t0]
    leaf, DER = lay.leaf, cache.DER
    # Each (rows, 1) array of the one objective as a contiguous (rows,) view: the loops then index
    # them without a stride (measured on Adult's LightGBM default, one test point's sweep on one
    # thread: 16.2 -> 13.2 ms; the strides had kept the loop's values from fitting in registers).
    n = aT.shape[0]
    y, a_bar, w_bar = rows.y.reshape(n), aT.reshape(n), W.reshape(W.shape[0])
    GT = GT.reshape(GT.shape[0])
    sums_c = PT.reshape(PT.shape[0], PT.shape[1])
    code, w = loss.code, rows.w
    p4 = params4(loss.prm)  # a call per row given an array would count references to it
    tg = lay.round_ptr[r - 1] if gather else t0  # the next round's tree (its leaves are the round's)
    leaves, nexts = leaf[t0], leaf[tg]
    if A is None:
        if qs.shape[0] == 1 and code == LOGLOSS:  # every log loss default of LightGBM and XGBoost
            # (called here, not from the loop below: measured 1.07x faster)
            f0 = first[0, 0]
            _kept_logloss(p4, y, w, DER[qs[0]], leaves, nexts, GT[f0 - base :], ratio[f0:], newton, a_bar,
                          w_bar, sums_c, j0, j1, gather)
            return
    else:  # the margins entering the round, for the steps not cached
        a_in = A[j0:j1].reshape(j1 - j0)
        stored = sums.stored[lay.leaf_off[t0] : lay.leaf_off[t0 + 1]]
        for j in range(j0, j1):
            a_in[j - j0] += -1.0 * stored[leaves[j]]
    S = qs.shape[0]
    for s in range(S):
        f, q = first[s, 0], qs[s]
        gt, rt, u, last = GT[f - base :], ratio[f:], sums.u_before[f:], gather and s == S - 1
        if code != LOGLOSS:
            _any_step(code, p4, y, w, DER, q, A, u, leaves, nexts, gt, rt, newton, a_bar, w_bar, sums_c,
                      j0, j1, last)
        elif A is None or q >= 0:
            _kept_logloss(p4, y, w, DER[q], leaves, nexts, gt, rt, newton, a_bar, w_bar, sums_c, j0, j1, last)
        else:
            _margin_logloss(p4, y, w, a_in, u, leaves, nexts, gt, rt, newton, a_bar, w_bar, sums_c, j0, j1,
                            last)


# One leaf step of a round of one tree, rows ``j0 .. j1 - 1``, in three loops by where the rows'
# points come from (each alone in its function: a loop measured up to 1.15x slower beside another's
# calls). Arguments: ``y``, ``w`` (n,) the rows' labels and weights; their points at the step kept
# in ``kept`` (n, point size) (the cache's slot), or at the margins ``A`` (j1 - j0,) entering the
# round plus the step's in-tree moves ``u`` by leaf; ``leaf``, ``leaf_next`` (n,) each row's leaf
# in the round's tree and in the next round's (the one swept after it); ``gt`` the step's leaf-sum
# adjoints of G, ``rt`` its ratios (:func:`.common.step_ratio`), by leaf; ``a_bar`` (n,) the rows'
# margin adjoints, ``w_bar`` (j1 - j0,) their weight adjoints, each updated (:func:`_row_step`);
# ``PT`` (chunks, leaves) the chunks' leaf sums, gathered into if ``gather``. Each loop counts its
# rows from 0 over the arrays sliced from row ``j0`` (see :data:`.indexing.INDEX`).


@_internal
def _kept_logloss(
    p4: Params4, y: NDArray[np.float64], w: NDArray[np.float64], kept: NDArray[np.float64],
    leaf: NDArray[np.int32], leaf_next: NDArray[np.int32], gt: NDArray[np.float64], rt: NDArray[np.float64],
    newton: bool, a_bar: NDArray[np.float64], w_bar: NDArray[np.float64], PT: NDArray[np.float64], j0: int,
    j1: int, gather: bool,
) -> None:
    """Log loss, from the points kept (p, 1 - p): no call in the loop. The common case (a Newton
    step whose rows are gathered) has a loop of its own, compiled with both flags known (measured:
    one test point's sweep 13.1 -> 12.6 ms, as above)."""
    y, w, kept, leaf, leaf_next = y[j0:j1], w[j0:j1], kept[j0:j1], leaf[j0:j1], leaf_next[j0:j1]
    a_bar = a_bar[j0:j1]
    if newton and gather:
        for i in range(j1 - j0):
            g, h, wdg, wdh = step_logloss(p4, y[i], w[i], kept[i, 0], kept[i, 1])
            _row_step(i, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, True, a_bar, w_bar, PT, True)
    else:
        for i in range(j1 - j0):
            g, h, wdg, wdh = step_logloss(p4, y[i], w[i], kept[i, 0], kept[i, 1])
            _row_step(i, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, newton, a_bar, w_bar, PT, gather)


@_internal
def _margin_logloss(
    p4: Params4, y: NDArray[np.float64], w: NDArray[np.float64], A: NDArray[np.float64],
    u: NDArray[np.float64], leaf: NDArray[np.int32], leaf_next: NDArray[np.int32], gt: NDArray[np.float64],
    rt: NDArray[np.float64], newton: bool, a_bar: NDArray[np.float64], w_bar: NDArray[np.float64],
    PT: NDArray[np.float64], j0: int, j1: int, gather: bool,
) -> None:
    """Log loss, at the margins (:func:`.point1`'s arithmetic, inlined). Four rows' exponentials
    are taken side by side, then the four rows' steps: one row's ``exp``, divisions and step are a
    chain of dependent operations longer than the processor overlaps with the next row's
    (measured on one thread, 32,561 rows: 12.9 -> 9.6 ns per row and step, 14.1 -> 10.1 where the
    rows are gathered; CatBoost's default one test point 2.0-2.5 -> 1.36-1.44 s on two threads;
    two rows side by side gained less and eight lost: their values no longer fit in the
    registers). The per-row helpers take no arrays but the ones :func:`_row_step` takes: numba
    counts references to the arrays a helper inlined into another is given, at every row."""
    y, w, leaf, leaf_next, a_bar = y[j0:j1], w[j0:j1], leaf[j0:j1], leaf_next[j0:j1], a_bar[j0:j1]
    m = j1 - j0
    s = p4[1]
    for i in range(0, m - m % 4, 4):
        x0 = s * (A[i] + u[leaf[i] & INDEX])
        x1 = s * (A[i + 1] + u[leaf[i + 1] & INDEX])
        x2 = s * (A[i + 2] + u[leaf[i + 2] & INDEX])
        x3 = s * (A[i + 3] + u[leaf[i + 3] & INDEX])
        e0, e1, e2, e3 = math.exp(-abs(x0)), math.exp(-abs(x1)), math.exp(-abs(x2)), math.exp(-abs(x3))
        g, h, wdg, wdh = step_logloss_at(p4, y[i], w[i], x0, e0)
        _row_step(i, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, newton, a_bar, w_bar, PT, gather)
        g, h, wdg, wdh = step_logloss_at(p4, y[i + 1], w[i + 1], x1, e1)
        _row_step(i + 1, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, newton, a_bar, w_bar, PT, gather)
        g, h, wdg, wdh = step_logloss_at(p4, y[i + 2], w[i + 2], x2, e2)
        _row_step(i + 2, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, newton, a_bar, w_bar, PT, gather)
        g, h, wdg, wdh = step_logloss_at(p4, y[i + 3], w[i + 3], x3, e3)
        _row_step(i + 3, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, newton, a_bar, w_bar, PT, gather)
    for i in range(m - m % 4, m):
        x = s * (A[i] + u[leaf[i] & INDEX])
        g, h, wdg, wdh = step_logloss_at(p4, y[i], w[i], x, math.exp(-abs(x)))
        _row_step(i, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, newton, a_bar, w_bar, PT, gather)


@_internal
def _any_step(
    code: int, p4: Params4, y: NDArray[np.float64], w: NDArray[np.float64], DER: NDArray[np.float64], q: int,
    A: NDArray[np.float64] | None, u: NDArray[np.float64], leaf: NDArray[np.int32],
    leaf_next: NDArray[np.int32], gt: NDArray[np.float64], rt: NDArray[np.float64], newton: bool,
    a_bar: NDArray[np.float64], w_bar: NDArray[np.float64], PT: NDArray[np.float64], j0: int, j1: int,
    gather: bool,
) -> None:
    """Any one-output loss, from the points kept in the cache ``DER``'s slot ``q``, or (-1) at
    the margins ``A`` (n, 1) entering the round (None: every step is cached, see
    :func:`_row_pass_one`)."""
    y, w, leaf, leaf_next, a_bar = y[j0:j1], w[j0:j1], leaf[j0:j1], leaf_next[j0:j1], a_bar[j0:j1]
    if A is not None:
        a_in = A[j0:j1].reshape(j1 - j0)
    for i in range(j1 - j0):
        if A is None or q >= 0:
            z0, z1 = kept_point(DER, q, j0 + i)
        else:  # at the row's margin, as plain.row_adjoints computes it
            z0, z1 = point1(code, p4, a_in[i] + u[leaf[i] & INDEX])
        g, h, wdg, wdh = step_derivs1(code, p4, y[i], w[i], z0, z1)
        _row_step(i, j0, g, h, wdg, wdh, leaf, leaf_next, gt, rt, newton, a_bar, w_bar, PT, gather)


@per_row
def _row_step(
    i: int, j0: int, g: float, h: float, wdg: float, wdh: float, leaf: NDArray[np.int32],
    leaf_next: NDArray[np.int32], gt: NDArray[np.float64], rt: NDArray[np.float64], newton: bool,
    a_bar: NDArray[np.float64], w_bar: NDArray[np.float64], PT: NDArray[np.float64], gather: bool,
) -> None:
    """Row ``j0 + i`` through a leaf step, from its ``g, h, w dg/dm, w dh/dm`` at the step: its
    margin adjoint ``a_bar[i]`` and weight adjoint ``w_bar[i]`` updated, the former gathered into
    ``PT`` if ``gather`` (``leaf``, ``leaf_next``, ``a_bar``, ``w_bar`` from row ``j0`` on)."""
    k = leaf[i] & INDEX
    gb = gt[k]
    fw, fm = row_factors(g, h, wdg, wdh, rt[k], newton)
    a = a_bar[i] + gb * fm
    w_bar[i] += gb * fw
    a_bar[i] = a
    if gather:
        PT[((j0 + i) // CHUNK_ROWS) & INDEX, leaf_next[i] & INDEX] += a


@_internal
def _weights_after(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, j_start: int, j_end: int,
    work: Work,
) -> None:
    """The weight adjoints ``work.w_rows[j_start:j_end]`` (zeros on entry) of a model
    :func:`_weights_in_fours` takes, from every step's leaf-sum adjoints of G ``work.GT`` and the
    slots' ``work.ratio``
    (n_slots, B), block of rows by block of rows, rounds last to first (the sweep's order): four
    rounds at a time (:func:`_logloss_weights4`), the first ``R % 4`` rounds one at a time."""
    A = np.empty((0, 1))  # every step cached: no margins read
    R = lay.round_ptr.shape[0] - 1
    # each round's tree, its cache slot, its first step-leaf slot
    tree, slot, first = np.empty(R, dtype=np.int64), np.empty(R, dtype=np.int64), np.empty(R, dtype=np.int64)
    for r in range(R):
        tree[r] = lay.round_ptr[r]
        slot[r] = cache.der_slot[lay.step_ptr[tree[r]]]
        first[r] = lay.sl_off[lay.step_ptr[tree[r]]]
    p4 = params4(loss.prm)
    for j0 in range(j_start, j_end, BLOCK_ROWS):
        j1 = min(j_end, j0 + BLOCK_ROWS)
        W = work.w_rows[j0:j1]
        r = R - 1
        while r >= 3:
            four = slice(r - 3, r + 1)
            _logloss_weights4(p4, rows.y, rows.w, cache.DER, lay.leaf, tree[four], slot[four], first[four],
                              work.GT, work.ratio, W, j0, j1)
            r -= 4
        while r >= 0:
            _row_pass(lay, trees, rows, loss, sums, cache, r, True, A, j0, j1, work.GT, work.ratio, 0,
                      work.aT, False, W, True, work.PT, False)
            r -= 1


@_distinct
def _logloss_weights4(
    p4: Params4, y: NDArray[np.float64], w: NDArray[np.float64], DER: NDArray[np.float64],
    leaf: NDArray[np.int32], tree: NDArray[np.int64], slot: NDArray[np.int64], first: NDArray[np.int64],
    GT: NDArray[np.float64], ratio: NDArray[np.float64], W: NDArray[np.float64], j0: int, j1: int,
) -> None:
    """:func:`_logloss_batch`'s weight adjoints ``W[j - j0]`` (B,) of rows ``j0 .. j1 - 1`` for
    four consecutive rounds, each one log-loss tree ``tree[i]`` (leaves ``leaf[tree[i]]``, its
    step-leaf slots from ``first[i]``) taking one Newton step whose points the cache keeps
    (``DER[slot[i]]`` (n, 2)), latest round (``i = 3``) first: the same
    additions in the same order as four calls, but a row's ``W`` read and written once instead of
    four times (measured on Adult's LightGBM default, 50 test points on one thread: the weight pass
    0.037 -> 0.026 s; eight rounds at a time ran slower, and no faster compiled ``distinct``:
    docs/performance.md, stop 77)."""
    B = GT.shape[1]
    p3, p2, p1, p0 = DER[slot[3]], DER[slot[2]], DER[slot[1]], DER[slot[0]]
    l3, l2, l1, l0 = leaf[tree[3]], leaf[tree[2]], leaf[tree[1]], leaf[tree[0]]
    f3, f2, f1, f0 = first[3], first[2], first[1], first[0]
    y, w, p3, p2, p1, p0 = y[j0:j1], w[j0:j1], p3[j0:j1], p2[j0:j1], p1[j0:j1], p0[j0:j1]
    l3, l2, l1, l0 = l3[j0:j1], l2[j0:j1], l1[j0:j1], l0[j0:j1]
    for jj in range(j1 - j0):
        ka, kb = (f3 + l3[jj]) & INDEX, (f2 + l2[jj]) & INDEX
        kc, kd = (f1 + l1[jj]) & INDEX, (f0 + l0[jj]) & INDEX
        fa, fb, fc, fd = (_weight_factor(p4, y[jj, 0], w[jj], p3[jj, 0], p3[jj, 1], ratio[ka]),
                          _weight_factor(p4, y[jj, 0], w[jj], p2[jj, 0], p2[jj, 1], ratio[kb]),
                          _weight_factor(p4, y[jj, 0], w[jj], p1[jj, 0], p1[jj, 1], ratio[kc]),
                          _weight_factor(p4, y[jj, 0], w[jj], p0[jj, 0], p0[jj, 1], ratio[kd]))
        for b in range(B):
            W[jj, b] = (((W[jj, b] + GT[ka, b] * fa) + GT[kb, b] * fb) + GT[kc, b] * fc) + GT[kd, b] * fd


@per_row
def _weight_factor(p4: Params4, y: float, w: float, z0: float, z1: float, ratio: float) -> float:
    """A row's weight factor through a log-loss Newton step at its kept point ``(z0, z1)``
    (:func:`.common.row_factors`' first)."""
    g, h, wdg, wdh = step_logloss(p4, y, w, z0, z1)
    return row_factors(g, h, wdg, wdh, ratio, True)[0]


@per_row  # inlined in the three sweeps: no kernel of its own to compile (benchmarks/coldstart.py)
def _begin(tid: int, n_team: int, lay: Layout, c_leaf: NDArray[np.float64], work: Work) -> tuple[int, int]:
    """Thread ``tid``'s rows ``j0 .. j1 - 1`` of a sweep, returned, their margin and weight
    adjoints zeroed (each thread its own rows: not one thread for all); thread 0 also starts the
    last round's leaf sums (the general sweep adds zero margin adjoints there: its -0.0 become
    0.0)."""
    j0, j1 = own_rows(work.w_rows.shape[0], tid, n_team)
    work.aT[j0:j1] = 0.0
    work.w_rows[j0:j1] = 0.0
    R = lay.round_ptr.shape[0] - 1
    if R > 0 and tid == 0:
        start_leaf_sums(lay, R - 1, c_leaf, work.PT)
    return j0, j1


@per_row  # (as _begin)
def _sum_a0(work: Work) -> None:
    """``work.a0_bar`` (B, 1): the rows' margin adjoints summed in row order (thread 0, after the
    sweep's last barrier)."""
    n, B = work.aT.shape
    for j in range(n):
        for b in range(B):
            work.a0_bar[b, 0] += work.aT[j, b]


@numba.njit(cache=True, nogil=True)
def sweep(
    tid: int, n_team: int, bar: NDArray[np.int64], lay: Layout, trees: Trees, rows: Rows, loss: LossSpec,
    sums: Sums, cache: Cache, c_leaf: NDArray[np.float64], work: Work, defer: bool, every: bool,
) -> None:
    """Thread ``tid``'s part of the sweep of a team of ``n_team`` (see :mod:`.team`): the rows of
    its chunks; thread 0 also the leaf level of every round and ``work.a0_bar``. Fills
    ``work.w_rows``, ``work.a0_bar``, ``work.big_w_bar`` (see :func:`reverse`); the weight
    adjoints after the sweep if ``defer``, else in it. ``every``: whether every step is cached
    (:func:`.state.every_step_cached`; then ``work.A`` is empty and never read)."""
    n = work.w_rows.shape[0]
    j0, j1 = _begin(tid, n_team, lay, c_leaf, work)
    aT, PT = work.aT, work.PT
    A = work.A[j0:j1]
    W = work.w_rows[j0:j1]  # this thread's rows' weight adjoints (summed here unless deferred)
    for r in range(lay.round_ptr.shape[0] - 2, -1, -1):
        if tid == 0:
            _leaf_level(lay, trees, sums, r, n, c_leaf, work, defer)
        barrier(bar, n_team)
        base = 0 if defer else lay.sl_off[lay.step_ptr[lay.round_ptr[r]]]
        _row_pass(lay, trees, rows, loss, sums, cache, r, every, A, j0, j1, work.GT, work.ratio, base, aT,
                  True, W, not defer, PT, r > 0)
        barrier(bar, n_team)
    if tid == 0:
        _sum_a0(work)
    if defer:
        _weights_after(lay, trees, rows, loss, sums, cache, j0, j1, work)


@numba.njit(cache=True, nogil=True)
def sweep_one(
    tid: int, n_team: int, bar: NDArray[np.int64], lay: Layout, trees: Trees, rows: Rows, loss: LossSpec,
    sums: Sums, cache: Cache, c_leaf: NDArray[np.float64], work: Work, A: NDArray[np.float64] | None,
) -> None:
    """:func:`sweep` of one objective through a model whose every round is one tree (every
    one-output default of the three libraries), by :func:`_row_pass_one`: a kernel of its own,
    chosen in Python (:func:`reverse`), so that scoring one test point compiles none of the
    batch's loops, nor any loop reading margins where every step is cached (``A`` None; else
    ``work.A``). Measured with ``benchmarks/coldstart.py``, the first use of ``LGBMClassifier()``
    without the wheel's kernels: 34.0 -> 28.3 s for this kernel alone, 20.0 s with the replay's
    one-output choice (:func:`.passes.replay_scratch`)."""
    n = work.w_rows.shape[0]
    j0, j1 = _begin(tid, n_team, lay, c_leaf, work)
    W = work.w_rows[j0:j1]
    for r in range(lay.round_ptr.shape[0] - 2, -1, -1):
        if tid == 0:
            _leaf_level(lay, trees, sums, r, n, c_leaf, work, False)
        barrier(bar, n_team)
        _row_pass_one(lay, trees, rows, loss, sums, cache, r, A, j0, j1, work.GT, work.ratio,
                      lay.sl_off[lay.step_ptr[lay.round_ptr[r]]], work.aT, W, work.PT, r > 0)
        barrier(bar, n_team)
    if tid == 0:
        _sum_a0(work)


@numba.njit(cache=True, nogil=True)
def sweep_renewed(
    tid: int, n_team: int, bar: NDArray[np.int64], lay: Layout, trees: Trees, rows: Rows, sums: Sums,
    ren: Renewed, c_leaf: NDArray[np.float64], work: Work,
) -> None:
    """:func:`sweep` of a model whose every round is one renewed tree (the quantile, L1 and MAE
    objectives of the three libraries), whatever the batch: a kernel of its own, chosen in Python
    (:func:`reverse`), holding none of the plain rounds' loops, which such a model never runs
    (compiled into :func:`sweep` for its types, they had made its first use compile 10-15 s
    longer: docs/performance.md, stop 66). The same arithmetic in the same order."""
    n = work.w_rows.shape[0]
    j0, j1 = _begin(tid, n_team, lay, c_leaf, work)
    barrier(bar, n_team)  # the leaf level writes the margin adjoints of any thread's rows
    A = work.A[j0:j1]
    W = work.w_rows[j0:j1]
    for r in range(lay.round_ptr.shape[0] - 2, -1, -1):
        if tid == 0:
            _renewed_level(lay, trees, rows, sums, ren, r, n, c_leaf, work)
        barrier(bar, n_team)
        renewed_rule.reverse_rows(lay, rows.y, ren, sums.stored, r, A, j0, j1, work.GT, work.pivot, work.aT,
                                  W, work.PT, r > 0)
        barrier(bar, n_team)
    if tid == 0:
        _sum_a0(work)


def applies(st: State) -> bool:
    """Whether :func:`reverse` sweeps this model: one output, its rounds all plain or all renewed
    (no joint rounds; the adapters' models never mix renewed and plain rounds, a hand-built
    :class:`~influence_gbdt.TreeEnsemble` may, and the general sweep takes it). (Decided by the model
    alone, never by the batch or the threads: the scores must not depend on them.)"""
    return st.loss.K == 1 and st.joint is None and (st.renewed is None or bool(st.renewed.renew.all()))


#: Most objectives of a batch whose weight adjoints are summed in the sweep, in the same pass as
#: their margin adjoints, whatever the model. The pass after the sweep reads every row's leaf and
#: point a second time; it pays only for wider batches (measured on Adult's LightGBM default, two
#: threads, best of 9: 3-8 objectives 1.2-1.6x faster in the sweep, 12 faster after it).
DEFER_ABOVE = 8


def _weights_in_fours(st: State) -> bool:
    """Whether the pass after the sweep sums every round's weight adjoints four rounds at a time
    (:func:`_logloss_weights4`): every round one log-loss tree taking one Newton step, all cached
    (LightGBM's and XGBoost's binary defaults). Other models sum them in the sweep, whatever the
    batch: after it they take a round at a time (measured on Adult, two threads, after -> in the
    sweep: LightGBM's default regressor, 3 objectives 118 -> 55 ms, 16: 148 -> 74 ms, 32: 135 ->
    127 ms; CatBoost's default classifier, 4 objectives 10.5 -> 6.0 s, 8: 12.3 -> 5.3 s)."""
    lay, trees = st.lay, st.trees
    return bool(st.loss.code == LOGLOSS and np.all(np.diff(lay.round_ptr) == 1) and np.all(trees.n_steps == 1)
                and np.all(trees.newton) and np.all(st.cache.der_slot >= 0))


def reverse(
    st: State, A_final: NDArray[np.float64], c_leaf: NDArray[np.float64], threads: int, concurrent: int = 1,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """:func:`.passes.reverse` of a model :func:`applies` to (same results), by a team of up to
    ``threads`` threads (one per chunk of rows at most), while ``concurrent`` such sweeps run at
    once: ``c_leaf`` (B, n_total) from the test side; returns the weight adjoints ``w_rows``
    (n, Bp) (objective ``b`` in column ``b``; ``Bp = padded(B)``, the last ``Bp - B`` columns
    padding), ``a0_bar`` (B, 1), ``big_w_bar`` (B,). The weight adjoints are summed after the
    sweep for more than :data:`DEFER_ABOVE` objectives of a model :func:`_weights_in_fours` sums,
    when every step's leaf-sum adjoints of the ``concurrent`` sweeps fit in :data:`KEPT_BYTES`,
    else in it (the same sums in the same order)."""
    B, n = c_leaf.shape[0], A_final.shape[0]
    lay = st.lay
    most_leaves, most_slots = largest_round(lay)
    n_slots = int(lay.sl_off[-1])
    Bp = padded(B)
    defer = B > DEFER_ABOVE and _weights_in_fours(st) and n_slots * Bp * 8.0 * concurrent <= KEPT_BYTES
    renewed = st.renewed is not None  # a renewed round's leaf adjoints go in GT: a row per leaf
    kept = n_slots if defer else max(most_slots, most_leaves if renewed else 0)
    c = _lined((Bp, c_leaf.shape[1]))
    c[:B] = c_leaf
    every = every_step_cached(st)
    work = Work(A=A_final[:0] if every else A_final.copy(), aT=_lined((n, Bp), False),
                w_rows=_lined((n, Bp), False), a0_bar=np.zeros((Bp, 1)), big_w_bar=np.zeros(Bp),
                PT=_lined((n_chunks(n), most_leaves, Bp)), GT=_lined((kept, Bp), False),
                ratio=np.empty(0 if renewed else n_slots), u_bar=np.empty((Bp, most_leaves)),
                g_bar=np.empty((Bp, most_slots)), d_bar=np.empty((Bp, most_slots)),
                pivot=np.empty(most_leaves if renewed else 0))
    n_team = rows_team(threads, n)
    groups = (st.lay, st.trees, st.rows, st.loss, st.sums, st.cache)
    if st.renewed is not None:  # every round renewed (applies), whatever the batch: one kernel
        team.run(sweep_renewed, n_team, st.lay, st.trees, st.rows, st.sums, st.renewed, c, work)
    elif B == 1 and bool(np.all(np.diff(lay.round_ptr) == 1)):
        team.run(sweep_one, n_team, *groups, c, work, None if every else work.A)
    else:
        team.run(sweep, n_team, *groups, c, work, defer, every)
    return work.w_rows, work.a0_bar[:B], work.big_w_bar[:B]
