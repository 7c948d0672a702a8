"""The training objective a backtracking tree compares between its tries, summed in parts
(numba). Private to the engine.

A part is a fixed piece of the rows: for the exact objective a chunk of :data:`.team.CHUNK_ROWS`
rows (the weighted losses of its rows summed in row order), for the booster's own arithmetic
(:mod:`.fastobj`) one of the booster's blocks. :func:`combine` adds the parts in order, so the
objective is the same whichever threads computed which parts (:mod:`.rowjobs` splits the replay's
over its team, :mod:`.pointjobs` the refit's; a team of one computes all of them in turn).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from ..losses import value as loss_value
from .common import per_row
from .fastobj import (
    SumOrder,
    block_bounds,
    block_stats,
    combine_blocks,
    fastexp_vec,
    n_blocks,
    objective_ranges,
    order_leaves,
)
from .state import Backtrack, Layout, LossSpec
from .team import CHUNK_ROWS

_internal = numba.njit(cache=True, nogil=True, internal=True)

#: Where a try of the fast objective finds its rows' exp-space approx (:func:`part`'s ``take``): at
#: their positions (``SumOrder.pt``, where an earlier try or the team computed it), in array order
#: where the leaf sums computed it, or not yet (the try computes it at the positions).
AT_POSITIONS, FILLED, FRESH = 0, 1, 2


@per_row
def after_try(take: int) -> int:
    """The ``take`` of the next try of the same step after a try given ``take``: one that computed
    the approx (:data:`FRESH`) left it at the rows' positions, which only an accepted step moves."""
    return AT_POSITIONS if take == FRESH else take


@_internal
def _layout(bt: Backtrack, n: int, skip: int) -> tuple[int, int]:
    """(rows summed, the booster's row ranges) of the fast objective with row ``skip`` (>= 0)
    deleted."""
    n_eff = n - 1 if skip >= 0 else n
    return n_eff, objective_ranges(n_eff, bt.bt_threads)


@_internal
def n_parts(bt: Backtrack, n: int, skip: int) -> int:
    """How many parts the objective of ``n`` rows (row ``skip`` >= 0 deleted) is summed in."""
    if bt.bt_obj < 0:
        return max(1, (n + CHUNK_ROWS - 1) // CHUNK_ROWS)
    n_eff, n_ranges = _layout(bt, n, skip)
    return n_blocks(n_eff, n_ranges)


@_internal
def start_tree(lay: Layout, bt: Backtrack, so: SumOrder, t: int, n: int, skip: int) -> None:
    """Before the tries of tree ``t`` (``n`` rows, row ``skip`` >= 0 deleted): the fast objective's
    rows ``so`` (:func:`.fastobj.fill_sum_order`) take the tree's leaves."""
    if bt.bt_obj >= 0:
        order_leaves(so, _layout(bt, n, skip)[0], lay.leaf[t])


@_internal
def prepare(lay: Layout, bt: Backtrack, t: int, step: NDArray[np.float64], dl: NDArray[np.float64]) -> None:
    """What every part of a try reads: the fast objective's exp of the try's leaf steps of tree
    ``t`` into ``dl`` (leaves of the tree)."""
    if bt.bt_obj >= 0:
        base = lay.leaf_off[t]
        L = lay.leaf_off[t + 1] - base
        fastexp_vec(step[base : base + L], dl[:L])


@_internal
def fresh_points(
    lay: Layout, t: int, A: NDArray[np.float64], delta: NDArray[np.float64], sel: NDArray[np.bool_],
    every: bool, u: NDArray[np.float64], so: SumOrder, pos0: int, pos1: int,
) -> None:
    """The exp-space approx (``exp`` of the margin at the moves ``u``) of the fast objective's rows
    at positions ``pos0 .. pos1 - 1`` of ``so``, into ``so.pt`` (arguments as in :func:`part`)."""
    base = lay.leaf_off[t]
    c = lay.out[t]
    track = delta.shape[0] > 0
    pt = so.pt
    for pos in range(pos0, pos1):
        j = so.rows[pos]
        gl = base + so.leaf[pos]
        m = A[j, c] + u[gl]
        if track and (every or sel[gl]):
            m += delta[j, c]
        pt[pos] = math.exp(m)


@_internal
def part(
    lay: Layout, y: NDArray[np.float64], loss: LossSpec, bt: Backtrack, t: int, A: NDArray[np.float64],
    delta: NDArray[np.float64], sel: NDArray[np.bool_], every: bool, u: NDArray[np.float64],
    step: NDArray[np.float64], dl: NDArray[np.float64], w: NDArray[np.float64], skip: int, so: SumOrder,
    point_buf: NDArray[np.float64], mrow: NDArray[np.float64], take: int, p: int,
) -> tuple[float, float]:
    """Part ``p`` of the objective of backtracking tree ``t`` with its leaves moved by ``u + step``:
    (weighted loss sum, weight sum; the exact objective leaves the second 0).

    Rows sit at ``A`` plus, where they are moved (``every`` or their leaf in ``sel``; only when
    ``delta`` has rows), their change ``delta``; ``w`` are the weights and row ``skip`` (>= 0) is
    deleted. ``bt.bt_obj < 0``: the rows of chunk ``p``, the weighted loss summed exactly. Otherwise
    block ``p`` of the booster's own arithmetic (:mod:`.fastobj`, with ``dl`` from :func:`prepare`,
    the rows, their targets, weights and leaves from ``so``, filled for this deletion and tree:
    :func:`.fastobj.fill_sum_order`, :func:`start_tree`);
    its rows' exp-space approx (``exp`` of the margin at ``u``; the tries of one step share it, only
    an accepted step moves ``u``) is read from ``point_buf`` (n,) in array order where the leaf sums
    at ``u`` filled it as they computed each row's derivatives (``take`` :data:`FILLED`,
    :func:`.rowjobs.fills_points`, :func:`.plain.refit_round_sums`), else from ``so.pt`` at the
    rows' positions (:data:`AT_POSITIONS`), computed there first where ``take`` is :data:`FRESH`
    (:func:`fresh_points`). ``mrow`` (K,) is scratch.
    """
    n = A.shape[0]
    base = lay.leaf_off[t]
    c = lay.out[t]
    track = delta.shape[0] > 0
    if bt.bt_obj < 0:
        total = 0.0
        for j in range(p * CHUNK_ROWS, min(n, (p + 1) * CHUNK_ROWS)):
            if j != skip:
                mrow[:] = A[j]
                if track and (every or sel[base + lay.leaf[t, j]]):
                    mrow += delta[j]
                mrow[c] += u[base + lay.leaf[t, j]] + step[base + lay.leaf[t, j]]
                total += w[j] * loss_value(loss.code, loss.prm, y[j], mrow)
        return total, 0.0
    n_eff, n_ranges = _layout(bt, n, skip)
    b0, b1, _ = block_bounds(n_eff, n_ranges, p)
    L = lay.leaf_off[t + 1] - base
    if take == FILLED:
        return block_stats(bt.bt_obj, point_buf, so.rows, dl[:L], so, b0, b1)
    if take == FRESH:
        fresh_points(lay, t, A, delta, sel, every, u, so, b0, b1)
    return block_stats(bt.bt_obj, so.pt, so.here, dl[:L], so, b0, b1)


@_internal
def combine(bt: Backtrack, n: int, skip: int, parts: NDArray[np.float64]) -> float:
    """The objective from its parts' sums ``parts`` (:func:`n_parts`, 2), added in order. Only
    comparisons of two values of the same tree mean anything."""
    if bt.bt_obj < 0:
        total = 0.0
        for p in range(n_parts(bt, n, skip)):
            total += parts[p, 0]
        return total
    n_eff, n_ranges = _layout(bt, n, skip)
    return combine_blocks(n_eff, n_ranges, parts)
