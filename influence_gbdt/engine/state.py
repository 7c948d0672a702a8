"""The engine's state: small named groups of flat arrays, built from a TreeEnsemble.

The compiled kernels read and write these groups (numba NamedTuples); each kernel takes only the
groups it reads. Indexing conventions:

- tree ``t`` owns global leaves ``leaf_off[t] .. leaf_off[t + 1] - 1`` and adds to output ``out[t]``;
- round ``r`` owns trees ``round_ptr[r] .. round_ptr[r + 1] - 1`` (fitted at the same margins);
- tree ``t``'s leaf steps are the flat steps ``step_ptr[t] .. step_ptr[t + 1] - 1``, and flat step
  ``st`` owns per-leaf slots ``sl_off[st] .. sl_off[st] + n_leaves[t] - 1`` in the step-leaf caches;
- rows of leaf ``l`` of tree ``t`` are ``rows_by_leaf[t, leaf_first[l] : leaf_first[l] + leaf_count[l]]``.

Groups (:class:`State` holds one of each):

- :class:`Layout` -- trees, leaves, rounds, steps, and the rows sorted by leaf;
- :class:`Trees` -- the plain leaf rule of each tree (Newton or gradient steps, learning rate, L1,
  L2, max_delta_step, steps taken and their scales);
- :class:`Rows` -- labels, weights and the weight factors of each row;
- :class:`LossSpec` -- the loss as the compiled primitives of :mod:`influence_gbdt.losses` take it;
- :class:`Sums` -- what the replay leaves: recomputed leaf values and each leaf step's sums and
  derivatives (with the stored leaf values, which move the margins);
- :class:`Cache` -- the replay's per-row loss derivatives for the reverse sweep;
- one group per leaf rule beyond the plain one, ``None`` for a model without it:
  :class:`Joint` (joint softmax rounds), :class:`Renewed` (quantile leaves), :class:`Backtrack`
  (CatBoost's AnyImprovement). Compiled code branches on ``group is not None``, which numba
  decides when it compiles: a model without a rule never compiles that rule's code.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..ensemble import TreeEnsemble
from .fastobj import CB_CROSS_ENTROPY, CB_LOGLOSS, CB_POISSON
from .leafrows import leaf_rows
from .quantile import METHODS as QUANTILE_METHODS

_FAST_OBJECTIVES = {"exact": -1, "fast_logloss": CB_LOGLOSS, "fast_cross_entropy": CB_CROSS_ENTROPY,
                    "fast_poisson": CB_POISSON}
#: The exact objective is a double-precision sum in our order; a booster summing the same terms in
#: another order decides a try differently only when the gain is within a few ulps (CatBoost RMSE:
#: flips measured at gaps <= 8.5e-16 relative). 1e-11 covers that with room and stays far below
#: any real improvement a step makes. The fast objectives mirror the booster bit for bit: no band.
_EXACT_TIE = 1e-11


class Layout(NamedTuple):
    """Trees, leaves, rounds and steps (see the module docstring)."""

    leaf: NDArray[np.int32]  # (T, n) leaf of each training row, local to the tree
    leaf_off: NDArray[np.int64]  # (T + 1,)
    out: NDArray[np.int64]  # (T,) output of each tree
    round_ptr: NDArray[np.int64]  # (R + 1,)
    step_ptr: NDArray[np.int64]  # (T + 1,)
    sl_off: NDArray[np.int64]  # (n_flat_steps + 1,)
    leaf_first: NDArray[np.int64]  # (n_total,)
    leaf_count: NDArray[np.int64]  # (n_total,)
    rows_by_leaf: NDArray[np.int32]  # (T, n); (0, 0) until LeafRefit or forward mode needs it


class Trees(NamedTuple):
    """Each tree's plain leaf rule: ``delta = -ThresholdL1(G, l1) / (H + l2 + l2m * mean weight)``
    clipped to ``mds``, times ``lr``, over ``n_steps`` steps of scales ``scales``."""

    newton: NDArray[np.bool_]  # (T,) Newton (sum w h) or gradient (sum w) denominators
    lr: NDArray[np.float64]  # (T,)
    l1: NDArray[np.float64]  # (T,)
    mds: NDArray[np.float64]  # (T,) max_delta_step, 0 = none
    l2: NDArray[np.float64]  # (n_total,)
    l2m: NDArray[np.float64]  # (T,) l2 per unit of mean weight
    f32l2: bool  # round l2m * mean weight to float32
    n_steps: NDArray[np.int64]  # (T,) steps taken (backtracking trees: decided by the replay)
    scales: NDArray[np.float64]  # (T, S) accepted step scales (likewise)
    n_iter: NDArray[np.int64]  # (T,) step tries: a backtracking tree's, else n_steps


class Rows(NamedTuple):
    """The training rows' labels and weights."""

    y: NDArray[np.float64]  # (n, label width)
    v: NDArray[np.float64]  # (n,) user weights
    grp: NDArray[np.int64]  # (n,) weight group
    dfac: NDArray[np.float64]  # (G,) dataset factors
    ofac: NDArray[np.float64]  # (G,) objective factors
    f32w: bool  # dataset weights v * dfac rounded to float32
    w: NDArray[np.float64]  # (n,) effective weights R(v * dfac[grp]) * ofac[grp]
    f32: bool  # round each row's w g and w h to float32 before the leaf sums (LightGBM)
    outside: NDArray[np.float64]  # (2,) weight sum and row count of training rows this state does
    # not hold (a Dask partition's engine, influence_gbdt.distributed); zeros on one machine


class LossSpec(NamedTuple):
    """The loss as :mod:`influence_gbdt.losses`' compiled primitives take it."""

    code: int
    prm: NDArray[np.float64]
    zsize: int  # length of a row's loss point
    K: int  # outputs


class Sums(NamedTuple):
    """The stored leaf values, and what the replay computes: leaf values and, per step-leaf slot,
    the sums of the step and their derivatives."""

    stored: NDArray[np.float64]  # (n_total,) the model's stored leaf values: they move the margins
    values: NDArray[np.float64]  # (n_total,) recomputed leaf values
    u_before: NDArray[np.float64]  # (n_sl,) in-tree move before each step
    G: NDArray[np.float64]  # (n_sl,) sum w g
    H: NDArray[np.float64]  # (n_sl,) sum w h (Newton) or sum w (Gradient)
    SDG: NDArray[np.float64]  # (n_sl,) sum w dg/dm (own output), multi-step trees only
    SDH: NDArray[np.float64]  # (n_sl,) sum w dh/dm (own output), multi-step trees only
    RG: NDArray[np.float64]  # (n_sl,) d step / d G
    RD: NDArray[np.float64]  # (n_sl,) d step / d (H + lam); joint trees: the step itself
    GV: NDArray[np.float64]  # (n_sl, G) per-group sum v g (only with factor derivatives; else (0, 0))
    HV: NDArray[np.float64]  # (n_sl, G) per-group sum v h or v (as GV)


class Cache(NamedTuple):
    """What the replay keeps of each row at its first leaf steps (one-output models): the row's
    point (:func:`..losses.point1`: p and 1 - p for log loss, one number otherwise), from which
    the sweeps get g, h, w dg/dm, w dh/dm bit for bit without an exponential (in 8 or 16 bytes,
    where the four took 32)."""

    DER: NDArray[np.float64]  # (P, n, point size) each row's point at up to P flat steps; else (0, 0, size)
    der_slot: NDArray[np.int64]  # (n_flat_steps,) each flat step's slot of DER, -1 = not cached
    der_used: NDArray[np.int64]  # (1,) slots of DER taken (the replay assigns them as it computes steps)


class Joint(NamedTuple):
    """Joint rounds: one Newton step for a round's K trees with the full softmax hessian."""

    joint: NDArray[np.bool_]  # (T,) the tree's round takes one joint step
    HX: NDArray[np.float64]  # (n_sl, K) row out[t] of the leaf's full hessian sum
    MI: NDArray[np.float64]  # (n_sl, K) row out[t] of (H + lam I)^-1
    HXV: NDArray[np.float64]  # (n_sl, G * K) per-group sums of v * hessian row (as GV); else (0, 0)


class Renewed(NamedTuple):
    """Renewed trees: each leaf a quantile of its rows' residuals."""

    renew: NDArray[np.bool_]  # (T,)
    q_alpha: NDArray[np.float64]  # (T,) quantile level
    q_method: int  # quantile method code
    q_weighted: bool  # quantiles weighted by the effective weights
    q_delta: float  # CatBoost's delta
    # (n_total, 3) rows whose residuals a leaf follows, then the pivot row of its weight derivative
    # (-1: none; quantile.py's order statistic q)
    ren_sel: NDArray[np.int64]
    ren_coef: NDArray[np.float64]  # (n_total, 2) d leaf quantile / d residual of those rows
    ren_wd: NDArray[np.float64]  # (n_total, 4) the quantile's weight-derivative descriptor


class Backtrack(NamedTuple):
    """Backtracking trees (CatBoost's AnyImprovement): each try accepted where the objective falls."""

    backtrack: NDArray[np.bool_]  # (T,)
    bt_obj: int  # backtracking objective: -1 exact, else a fastobj loss code
    bt_tie: float  # relative gap within which the replay may decide a try either way
    bt_threads: int  # the booster's thread count, for the fast objective's row ranges
    bt_order: NDArray[np.int64]  # (n,) row at each position of the fast objective's sums
    bt_pos: NDArray[np.int64]  # (n,) position of each row in bt_order


class State(NamedTuple):
    """Every group of one ensemble (the rule groups None where the model has no such tree)."""

    lay: Layout
    trees: Trees
    rows: Rows
    loss: LossSpec
    sums: Sums
    cache: Cache
    joint: Joint | None
    renewed: Renewed | None
    backtrack: Backtrack | None


def largest_round(lay: Layout) -> tuple[int, int]:
    """The most leaves, and the most step-leaf slots, of any round (what
    :func:`.common.round_sizes` computes in compiled code), for the buffers Python allocates."""
    leaves = lay.leaf_off[lay.round_ptr[1:]] - lay.leaf_off[lay.round_ptr[:-1]]
    slots = lay.sl_off[lay.step_ptr[lay.round_ptr[1:]]] - lay.sl_off[lay.step_ptr[lay.round_ptr[:-1]]]
    return int(leaves.max(initial=0)), int(slots.max(initial=0))


def every_step_cached(st: State) -> bool:
    """Whether the replay cached every leaf step's row derivatives (each round's steps: a round's
    trees step together, so its first tree's slots stand for it). The reverse sweeps then never
    rebuild the margins entering a round: both take this answer (:func:`.passes.reverse` as its
    ``every``, :func:`.reverse1.reverse`)."""
    lay = st.lay
    t0 = lay.round_ptr[:-1]
    steps = st.trees.n_steps[t0]
    ends = np.cumsum(steps)
    taken = np.repeat(lay.step_ptr[t0] - (ends - steps), steps) + np.arange(ends[-1] if len(ends) else 0)
    return bool(np.all(st.cache.der_slot[taken] >= 0))


def derivative_cache_slots(e: TreeEnsemble, cache_bytes: float) -> int:
    """How many leaf steps' derivatives of ``e`` the cache holds within ``cache_bytes`` (0 when
    :func:`cache_eligible` is False). A round's trees step together (one slot per round and step);
    backtracking trees count every try: the replay decides how many steps they take, and steps
    beyond the cache are recomputed by the sweep."""
    if not cache_eligible(e) or not cache_bytes > 0:
        return 0
    first = np.r_[True, e.tree_round[1:] != e.tree_round[:-1]]  # each round's first tree
    slots = int(np.where(e.backtracking, e.n_iterations, e.n_steps)[first].sum())
    return int(min(slots, cache_bytes // (8 * e.loss.state_size * e.n_rows)))


def cache_eligible(e: TreeEnsemble) -> bool:
    """Whether the reverse sweep can run from cached row derivatives alone: one output, no
    renewed (L1 / quantile) leaves, no joint rounds (those need the margins themselves)."""
    return e.n_outputs == 1 and not e.renewed.any() and not e.full_hessian.any()


def sorted_rows(e: TreeEnsemble, round_ptr: NDArray[np.int64], threads: int = 1) -> NDArray[np.int32]:
    """``rows_by_leaf``: each tree's rows sorted by leaf (stable), shape (T, n), int32; ``round_ptr``
    as in :class:`Layout`. The trees of a joint round share the structure of its first: sorted by
    its leaves. On up to ``threads`` threads (see :mod:`.leafrows`)."""
    grouped = leaf_rows(e.leaf_index, e.leaf_offset, _sources(e, round_ptr), threads)[1]
    assert grouped is not None  # asked for with a source
    return grouped


def _sources(e: TreeEnsemble, round_ptr: NDArray[np.int64]) -> NDArray[np.int64]:
    """The tree whose leaves group each tree's rows: its joint round's first, else itself."""
    return np.where(e.full_hessian, round_ptr[e.tree_round], np.arange(e.n_trees))


def build_state(e: TreeEnsemble, group_sums: bool, cache_slots: int = 0, sort_rows: bool = True,
                threads: int = 1) -> State:
    """Flatten ``e`` into the kernels' groups and allocate the replay's sums and caches.

    ``group_sums``: also keep per-group leaf sums (needed for class factors that move with the
    user's weights). ``cache_slots``: leaf steps the derivative cache holds (the replay fills it
    with each row's loss derivatives at the first ``cache_slots`` steps it computes; see
    :func:`derivative_cache_slots`). ``sort_rows=False`` leaves ``rows_by_leaf`` empty (0, 0): only
    LeafRefit, forward mode and renewed leaves read it (:func:`sorted_rows` builds it later).
    ``threads``: threads counting (and sorting) the rows by leaf.
    """
    T, n = e.n_trees, e.n_rows
    # Backtracking trees get a slot for every try; the replay decides how many steps they take.
    slots = np.where(e.backtracking, e.n_iterations, e.n_steps)
    step_ptr = np.zeros(T + 1, dtype=np.int64)
    np.cumsum(slots, out=step_ptr[1:])
    sl_off = np.zeros(step_ptr[-1] + 1, dtype=np.int64)
    np.cumsum(np.repeat(e.n_leaves, slots), out=sl_off[1:])
    scales = np.zeros((T, int(slots.max())))
    scales[:, : e.step_scales.shape[1]] = e.step_scales
    scales[e.backtracking] = 0.0
    n_sl = int(sl_off[-1])
    round_ptr = np.searchsorted(e.tree_round, np.arange(int(e.tree_round[-1]) + 2)).astype(np.int64)
    # Counted (and, if asked, grouped) in one pass over the leaf matrix.
    source = _sources(e, round_ptr) if sort_rows else None
    leaf_count, grouped = leaf_rows(e.leaf_index, e.leaf_offset, source, threads)
    first_global = np.zeros(e.n_total_leaves + 1, dtype=np.int64)
    np.cumsum(leaf_count, out=first_global[1:])
    # Position of each leaf's first row inside its own tree's row of rows_by_leaf.
    leaf_first = first_global[:-1] - np.repeat(np.arange(T, dtype=np.int64) * n, e.n_leaves)
    G = e.n_groups if group_sums else 0
    K = e.n_outputs
    lay = Layout(leaf=e.leaf_index, leaf_off=e.leaf_offset, out=e.tree_output, round_ptr=round_ptr,
                 step_ptr=step_ptr, sl_off=sl_off, leaf_first=leaf_first, leaf_count=leaf_count,
                 rows_by_leaf=grouped if grouped is not None else np.empty((0, 0), dtype=np.int32))
    trees = Trees(newton=e.newton, lr=e.learning_rate, l1=e.l1, mds=e.max_delta_step, l2=e.l2,
                  l2m=e.l2_per_mean_weight, f32l2=e.float32_l2, n_steps=e.n_steps.copy(), scales=scales,
                  n_iter=e.n_iterations)
    rows = Rows(y=e.y, v=e.user_weight, grp=e.weight_group, dfac=e.dataset_factor, ofac=e.objective_factor,
                f32w=e.float32_weights, w=np.ascontiguousarray(e.sample_weight), f32=e.float32_gradients,
                outside=np.zeros(2))
    loss = LossSpec(code=e.loss.code, prm=e.loss.prm, zsize=e.loss.state_size, K=K)
    sums = Sums(stored=e.leaf_values, values=np.empty(e.n_total_leaves), u_before=np.zeros(n_sl),
                G=np.zeros(n_sl), H=np.zeros(n_sl), SDG=np.zeros(n_sl), SDH=np.zeros(n_sl),
                RG=np.zeros(n_sl), RD=np.zeros(n_sl), GV=np.zeros((n_sl if G else 0, G)),
                HV=np.zeros((n_sl if G else 0, G)))
    cache = Cache(DER=np.zeros((cache_slots, n if cache_slots else 0, e.loss.state_size)),
                  der_slot=np.full(int(step_ptr[-1]), -1), der_used=np.zeros(1, dtype=np.int64))
    joint = None
    if e.full_hessian.any():
        joint = Joint(joint=e.full_hessian, HX=np.zeros((n_sl, K)), MI=np.zeros((n_sl, K)),
                      HXV=np.zeros((n_sl if G else 0, G * K if G else 0)))
    renewed = None
    if e.renewed.any():
        renewed = Renewed(renew=e.renewed, q_alpha=e.quantile_alpha,
                          q_method=QUANTILE_METHODS[e.quantile_method], q_weighted=e.quantile_weighted,
                          q_delta=e.quantile_delta, ren_sel=np.full((e.n_total_leaves, 3), -1,
                                                                    dtype=np.int64),
                          ren_coef=np.zeros((e.n_total_leaves, 2)), ren_wd=np.zeros((e.n_total_leaves, 4)))
    backtrack = None
    if e.backtracking.any():
        backtrack = Backtrack(backtrack=e.backtracking, bt_obj=_FAST_OBJECTIVES[e.backtracking_objective],
                              bt_tie=_EXACT_TIE if e.backtracking_objective == "exact" else 0.0,
                              bt_threads=e.objective_threads, bt_order=e.objective_order,
                              bt_pos=np.argsort(e.objective_order).astype(np.int64))
    return State(*(_one_type(g) for g in (lay, trees, rows, loss, sums, cache)),
                 *(None if g is None else _one_type(g) for g in (joint, renewed, backtrack)))


#: Fields the TreeEnsemble always freezes (read-only arrays, never copied).
_READ_ONLY = frozenset({"leaf", "stored", "l2", "y", "v"})


def _one_type(group: Any) -> Any:
    """``group`` with every array C-contiguous, and read-only exactly for the :data:`_READ_ONLY`
    fields (others copied where they arrived read-only: they are at most per-row vectors).

    numba compiles every kernel again for each distinct combination of array layouts and
    read-only flags in its arguments; a field that is read-only for one model and writable for
    another (a factor shared with the adapter, a broadcast) would cost a second compilation of every
    kernel taking the group.
    """
    fixed: dict[str, Any] = {}
    for name, value in zip(group._fields, group, strict=True):
        if not isinstance(value, np.ndarray):
            continue
        arr = np.ascontiguousarray(value)
        if name in _READ_ONLY:
            if arr.flags.writeable:
                arr = arr.view()
                arr.setflags(write=False)
        elif not arr.flags.writeable:
            arr = arr.copy()
        if arr is not value:
            fixed[name] = arr
    return group._replace(**fixed)
