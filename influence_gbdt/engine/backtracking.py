"""The backtracking leaf rule (numba): CatBoost's AnyImprovement. Private to the engine.

A backtracking tree is alone in its round and takes its plain Newton or gradient steps
(:mod:`.plain`) at scale 1, 1/2, 1/4, ..., each try accepted as soon as the training objective
falls; every rejected try uses up one of the tree's tries. The replay decides the steps as the
booster did (:func:`replay_round`, with the booster's own objective arithmetic,
:mod:`.fastobj`, where it has one; the objective summed in parts, :mod:`.objective`, which the
replay's team of threads splits) and records them; the refit re-decides them on the changed
data (:func:`refit_round`). Reverse and forward mode hold the accepted steps (their scales are
piecewise constant in the weights) and run the plain rule's passes over them.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from . import objective
from .plain import refit_round_steps, refit_round_sums, replay_steps
from .pointjobs import PointWork
from .pointjobs import try_objective as try_refit_objective
from .rowjobs import Work, step_sums, try_objective
from .state import Backtrack, Cache, Layout, LossSpec, Rows, Sums, Trees

#: Most ways of deciding a tree's near-ties the replay tries (see :func:`replay_round`).
_MAX_TIE_PATHS = 4096

#: Functions only compiled code calls: no Python wrapper to compile (see ``_jit.njit``).
_internal = numba.njit(cache=True, nogil=True, internal=True)


@_internal
def _walk_once(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, bt: Backtrack, r: int,
    A: NDArray[np.float64], mean_w: float, work: Work, d: NDArray[np.float64],
    scratch: NDArray[np.float64] | None,
    flips: int,
) -> int:
    """AnyImprovement for round ``r``'s one tree from ``work.u = 0``: try each step at scale 1,
    1/2, ..., accept it when the objective falls; record the steps taken (``n_steps``), their
    scales (0 for a computed step never accepted) and each step's caches. The ``i``-th near-tie
    (relative gap within ``bt.bt_tie``) is decided the other way when bit ``i`` of ``flips`` is
    set. The rows' passes run on the team (:mod:`.rowjobs`). Returns the number of near-ties met."""
    t = lay.round_ptr[r]
    base, L = lay.leaf_off[t], lay.leaf_off[t + 1] - lay.leaf_off[t]
    u, step = work.u, work.step
    u[base : base + L] = 0.0
    trees.scales[t, :] = 0.0
    objective.start_tree(lay, bt, work.order, t, A.shape[0], -1)
    step_sums(lay, trees, rows, loss, sums, cache, None, bt, A, work, scratch, r, 0)
    replay_steps(lay, trees, sums, r, 0, mean_w, u, d)
    computed, scale, ties = 1, 1.0, 0
    step[base : base + L] = 0.0
    current = try_objective(lay, trees, rows, loss, sums, cache, bt, A, work, scratch, t)
    for it in range(trees.n_iter[t]):
        for lj in range(L):
            step[base + lj] = scale * d[lj]
        trial = try_objective(lay, trees, rows, loss, sums, cache, bt, A, work, scratch, t)
        better = trial < current
        if abs(trial - current) <= bt.bt_tie * abs(current):
            if (flips >> ties) & 1:
                better = not better
            ties += 1
        if better:
            trees.scales[t, computed - 1] = scale
            for lj in range(L):
                u[base + lj] += step[base + lj]
            current, scale = trial, 1.0
            if it + 1 < trees.n_iter[t]:
                step_sums(lay, trees, rows, loss, sums, cache, None, bt, A, work, scratch, r, computed)
                replay_steps(lay, trees, sums, r, computed, mean_w, u, d)
                computed += 1
        else:
            scale *= 0.5
    trees.n_steps[t] = computed
    return ties


@_internal
def replay_round(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, cache: Cache, bt: Backtrack, r: int,
    A: NDArray[np.float64], mean_w: float, work: Work, d: NDArray[np.float64],
    scratch: NDArray[np.float64] | None,
) -> None:
    """The booster's accepted steps for round ``r``'s one tree (see :func:`_walk_once`), into
    ``work.u``.

    Where the objective is summed exactly while the booster's own sums round differently
    (``bt_tie > 0``), a step whose gain is within the tie band may have been decided either way:
    the ways of deciding the near-ties are tried until the tree reproduces its stored leaf values
    (the closest is kept). Decisions outside the band are never changed.
    """
    t = lay.round_ptr[r]
    base, L = lay.leaf_off[t], lay.leaf_off[t + 1] - lay.leaf_off[t]
    u = work.u
    ties = _walk_once(lay, trees, rows, loss, sums, cache, bt, r, A, mean_w, work, d, scratch, 0)
    if ties == 0:
        return
    scale = max(1.0, np.abs(sums.stored[base : base + L]).max())
    best_flips, best = 0, np.abs(trees.lr[t] * u[base : base + L] - sums.stored[base : base + L]).max()
    flips, last = 1, 0
    while best > 1e-13 * scale and flips < min(1 << min(ties, 20), _MAX_TIE_PATHS):
        ties = max(ties, _walk_once(lay, trees, rows, loss, sums, cache, bt, r, A, mean_w, work, d, scratch,
                                    flips))
        last = flips
        res = np.abs(trees.lr[t] * u[base : base + L] - sums.stored[base : base + L]).max()
        if res < best:
            best_flips, best = flips, res
        flips += 1
    if last != best_flips:
        _walk_once(lay, trees, rows, loss, sums, cache, bt, r, A, mean_w, work, d, scratch, best_flips)


@_internal
def refit_round(
    lay: Layout, trees: Trees, rows: Rows, loss: LossSpec, sums: Sums, bt: Backtrack, r: int, every: bool,
    changed: bool, i0: int, mean_w: float, Gs: NDArray[np.float64], Hs: NDArray[np.float64],
    HXs: NDArray[np.float64], d: NDArray[np.float64], scratch: NDArray[np.float64], jobs: PointWork,
) -> None:
    """Round ``r``'s one tree with row ``i0`` deleted: AnyImprovement re-decided on the changed data,
    the accepted steps accumulated into the in-tree moves ``jobs.u``. The deletion's arrays are the
    refit team's (:mod:`.pointjobs`; its ``so``: the fast objective's rows for this deletion,
    :func:`.fastobj.fill_sum_order`); ``HXs`` as for :func:`.plain.refit_round`."""
    t0 = lay.round_ptr[r]
    rl0, rl1 = lay.leaf_off[t0], lay.leaf_off[t0 + 1]
    A, delta, u, step, w_new, sel = jobs.A, jobs.delta, jobs.u, jobs.step, jobs.w_new, jobs.sel
    point_buf = jobs.point_buf
    accepted, scale = 0, 1.0
    fill = bt.bt_obj >= 0  # the sums give the fast objective's exp-space approx where they can
    objective.start_tree(lay, bt, jobs.so, t0, A.shape[0], i0)  # before the sums, which may use it
    take = refit_round_sums(lay, trees, rows, loss, sums, None, r, 0, A, delta, u, w_new, sel, every,
                            changed, i0, Gs, Hs, HXs, scratch, point_buf, fill, jobs)
    refit_round_steps(lay, trees, r, Gs, Hs, mean_w, d)
    step[rl0:rl1] = 0.0
    current = try_refit_objective(jobs, lay, trees, rows, loss, sums, bt, t0, every, i0, take)
    take = objective.after_try(take)
    for it in range(trees.n_iter[t0]):
        for gl in range(rl0, rl1):
            step[gl] = scale * d[gl - rl0]
        trial = try_refit_objective(jobs, lay, trees, rows, loss, sums, bt, t0, every, i0, take)
        take = objective.after_try(take)
        if trial < current:
            for gl in range(rl0, rl1):
                u[gl] += step[gl]
            current, accepted, scale = trial, accepted + 1, 1.0
            if it + 1 < trees.n_iter[t0]:
                take = refit_round_sums(lay, trees, rows, loss, sums, None, r, accepted, A, delta, u, w_new,
                                        sel, every, changed, i0, Gs, Hs, HXs, scratch, point_buf, fill, jobs)
                refit_round_steps(lay, trees, r, Gs, Hs, mean_w, d)
        else:
            scale *= 0.5
