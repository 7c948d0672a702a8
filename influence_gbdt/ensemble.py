"""The library-agnostic description of a boosted tree ensemble as seen on its training set.

Adapters (one per booster) turn a trained model plus its training data into a :class:`TreeEnsemble`;
the engine consumes nothing else. Every library quirk (XGBoost's probability-space base score,
LightGBM's init score folded into tree 0, CatBoost's l2 scaled by the weight sum, class weights) is
resolved by the adapter into the fields below, so the engine never branches on a library.

The leaf-value model
--------------------
Training rows ``j`` have labels ``y[j]``, effective weights ``w[j] = sample_weight[j]`` and initial
margins ``A0[j] = init_offset[j] + base_margin``. Tree ``t`` has a fixed structure (the leaf of
every training row, ``leaf_index[t]``) and ``n_steps[t]`` leaf-estimation steps. Within the tree,
rows of leaf ``l`` sit at margin ``A[j] + u[l]``, where ``u`` starts at 0 and after each step ``s``
moves by ``step_scales[t, s] * delta[l]`` with::

    G = sum_{j in l} w[j] * g(y[j], A[j] + u[l])
    H = sum_{j in l} w[j] * h(y[j], A[j] + u[l])     if newton[t]   (Newton step)
        sum_{j in l} w[j]                            otherwise      (Gradient step)
    lam = l2[leaf] + l2_per_weight_sum[t] * sum_j w[j]
    delta = -sign(G) * max(|G| - l1[t], 0) / (H + lam), clipped to +-max_delta_step[t] if > 0,
            and 0 where H <= 0 (an empty leaf).

The tree's leaf value is ``learning_rate[t] * u`` after its last step, and every row's margin then
moves by its leaf's value. ``g, h`` are the first and second derivatives of the loss in the margin.

``base_margin`` is either kept (``base_margin_refit=False``) or, as boost_from_average does, the
constant margin minimising the weighted training loss, re-estimated whenever the weights change.

Weights
-------
Scores are derivatives with respect to, or removals of, the *user's* sample weight ``v[j]``; the
booster may multiply it by a per-row factor (class weights, ``scale_pos_weight``), giving
``sample_weight[j] = weight_scale[j] * v[j]``. The engine reports ``d/dv = weight_scale * d/dw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .errors import InputError

LossName = Literal["logloss", "squared_error"]
LOSSES: tuple[str, ...] = ("logloss", "squared_error")


def _per_tree(name: str, value: ArrayLike, n_trees: int, dtype: type) -> NDArray:
    arr: NDArray[Any] = np.asarray(value, dtype=dtype)
    if arr.ndim == 0:
        arr = np.full(n_trees, arr, dtype=dtype)
    if arr.shape != (n_trees,):
        raise InputError(f"{name} must be a scalar or have shape ({n_trees},), got {arr.shape}.")
    return np.ascontiguousarray(arr)


def _per_row(name: str, value: ArrayLike | None, n_rows: int, default: float) -> NDArray[np.float64]:
    if value is None:
        return np.full(n_rows, default, dtype=np.float64)
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n_rows, arr, dtype=np.float64)
    if arr.shape != (n_rows,):
        raise InputError(f"{name} must have shape ({n_rows},), got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} contains NaN or infinite values.")
    return np.ascontiguousarray(arr)


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """An ensemble's structure, leaf-value rule, loss and training data (immutable).

    Build it with :meth:`TreeEnsemble.build`, which broadcasts scalars and validates; the fields
    below are the normalized arrays. ``T`` = number of trees, ``n`` = training rows,
    ``n_total`` = total number of leaves over all trees.

    Attributes
    ----------
    leaf_index : ndarray of shape (T, n), int32
        Leaf of every training row in every tree, numbered ``0 .. n_leaves[t] - 1`` per tree.
    n_leaves : ndarray of shape (T,), int64
        Number of leaves of each tree (leaves no training row reaches included).
    leaf_values : ndarray of shape (n_total,), float64
        The stored leaf values, tree after tree: tree ``t`` holds
        ``leaf_values[leaf_offset[t]:leaf_offset[t + 1]]``. Used only by the self-check.
    tree_class : ndarray of shape (T,), int64
        The output (class) each tree adds to. Only single-output models (all 0) are modelled now.
    newton : ndarray of shape (T,), bool
        True for Newton steps (H = sum w*h), False for Gradient steps (H = sum w).
    learning_rate : ndarray of shape (T,), float64
    l1 : ndarray of shape (T,), float64
        L1 soft threshold on G.
    max_delta_step : ndarray of shape (T,), float64
        Clip of each step's raw value; 0 means no clip.
    l2 : ndarray of shape (n_total,), float64
        Per-leaf L2 term (e.g. LightGBM's lambda_l2 + cat_l2 below categorical splits).
    l2_per_weight_sum : ndarray of shape (T,), float64
        Extra L2 proportional to the total training weight (CatBoost: l2_leaf_reg / n).
    n_steps : ndarray of shape (T,), int64
        Leaf-estimation steps of each tree (>= 1).
    step_scales : ndarray of shape (T, max(n_steps)), float64
        Accepted scale of every step (1 without backtracking); entries past ``n_steps`` are 0.
    loss : {"logloss", "squared_error"}
        Binary log loss on labels in [0, 1] or squared error 1/2 (margin - y)^2.
    hessian_floor : float
        Lower bound of the log-loss hessian p(1-p) (XGBoost: 1e-16); 0 for none.
    base_margin : float
        The initial margin added to every row.
    base_margin_refit : bool
        Whether a retrain on changed weights re-estimates ``base_margin`` as the weighted
        loss-minimising constant (boost_from_average).
    init_offset : ndarray of shape (n,), float64
        Per-row offset added to the initial margin (a user baseline / base_margin), usually 0.
    y : ndarray of shape (n,), float64
        Training labels as the booster saw them (float32-rounded where the booster rounds).
    sample_weight : ndarray of shape (n,), float64
        Effective training weights (>= 0), class weights folded in.
    weight_scale : ndarray of shape (n,), float64
        ``d sample_weight / d user weight`` per row (the class-weight factor), usually 1.
    float32_gradients : bool
        Round each row's weighted gradient and hessian to float32 before the leaf sums, as
        LightGBM does (replay and refit only; derivatives for leaf_influence stay in float64).
    """

    leaf_index: NDArray[np.int32]
    n_leaves: NDArray[np.int64]
    leaf_values: NDArray[np.float64]
    tree_class: NDArray[np.int64]
    newton: NDArray[np.bool_]
    learning_rate: NDArray[np.float64]
    l1: NDArray[np.float64]
    max_delta_step: NDArray[np.float64]
    l2: NDArray[np.float64]
    l2_per_weight_sum: NDArray[np.float64]
    n_steps: NDArray[np.int64]
    step_scales: NDArray[np.float64]
    loss: str
    hessian_floor: float
    base_margin: float
    base_margin_refit: bool
    init_offset: NDArray[np.float64]
    y: NDArray[np.float64]
    sample_weight: NDArray[np.float64]
    weight_scale: NDArray[np.float64]
    float32_gradients: bool
    leaf_offset: NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        offset = np.zeros(self.n_trees + 1, dtype=np.int64)
        np.cumsum(self.n_leaves, out=offset[1:])
        object.__setattr__(self, "leaf_offset", offset)
        for arr in (self.leaf_index, self.leaf_values, self.l2, self.y, self.sample_weight):
            arr.setflags(write=False)

    @property
    def n_trees(self) -> int:
        """Number of trees ``T``."""
        return int(self.leaf_index.shape[0])

    @property
    def n_rows(self) -> int:
        """Number of training rows ``n``."""
        return int(self.leaf_index.shape[1])

    @property
    def n_total_leaves(self) -> int:
        """Total number of leaves over all trees."""
        return int(self.leaf_offset[-1])

    def tree_leaf_values(self, t: int) -> NDArray[np.float64]:
        """Stored leaf values of tree ``t``, ndarray of shape (n_leaves[t],)."""
        return self.leaf_values[self.leaf_offset[t] : self.leaf_offset[t + 1]]

    @classmethod
    def build(  # noqa: C901 -- a flat list of per-field checks and broadcasts
        cls,
        *,
        leaf_index: ArrayLike,
        leaf_values: ArrayLike | list[ArrayLike],
        y: ArrayLike,
        loss: str,
        n_leaves: ArrayLike | None = None,
        learning_rate: ArrayLike = 1.0,
        newton: ArrayLike = True,
        l2: ArrayLike | list[ArrayLike] = 0.0,
        l2_per_weight_sum: ArrayLike = 0.0,
        l1: ArrayLike = 0.0,
        max_delta_step: ArrayLike = 0.0,
        step_scales: ArrayLike | None = None,
        n_steps: ArrayLike | None = None,
        hessian_floor: float = 0.0,
        base_margin: float = 0.0,
        base_margin_refit: bool = False,
        init_offset: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
        weight_scale: ArrayLike | None = None,
        tree_class: ArrayLike = 0,
        float32_gradients: bool = False,
    ) -> TreeEnsemble:
        """Validate and normalize the description; scalars broadcast over trees, leaves or rows.

        Parameters
        ----------
        leaf_index : array-like of shape (T, n)
            Leaf of each training row in each tree, ``0 .. n_leaves[t] - 1``.
        leaf_values : array-like of shape (n_total,), or a list of T arrays (one per tree)
            Stored leaf values.
        y : array-like of shape (n,)
            Training labels.
        loss : {"logloss", "squared_error"}
        n_leaves : array-like of shape (T,), optional
            Leaves per tree; taken from the per-tree ``leaf_values`` list when omitted.
        learning_rate, newton, l1, max_delta_step, l2_per_weight_sum : scalar or shape (T,)
        l2 : scalar, per tree (T,), per leaf (n_total,), or a list of T per-leaf arrays
        step_scales : array-like of shape (T, S), optional
            Accepted step scales; default one step of scale 1 per tree.
        n_steps : array-like of shape (T,), optional
            Steps per tree; default: the count of leading nonzero ``step_scales`` is not assumed,
            all ``S`` columns are used.
        hessian_floor, base_margin, base_margin_refit, float32_gradients : see the class attributes.
        init_offset, sample_weight, weight_scale : array-like of shape (n,), optional
            Default 0, 1 and 1.
        tree_class : scalar or shape (T,)

        Raises
        ------
        InputError
            On inconsistent shapes, out-of-range leaf indices, NaN or negative weights,
            NaN labels or labels outside the loss's domain.
        """
        leaf_idx = np.asarray(leaf_index)
        if leaf_idx.ndim != 2:
            raise InputError(f"leaf_index must have shape (n_trees, n_rows), got {leaf_idx.shape}.")
        if not np.issubdtype(leaf_idx.dtype, np.integer):
            if not np.all(leaf_idx == np.round(leaf_idx)):
                raise InputError("leaf_index must hold integer leaf numbers.")
        leaf_idx = np.ascontiguousarray(leaf_idx, dtype=np.int32)
        n_trees, n_rows = leaf_idx.shape
        if n_trees == 0 or n_rows == 0:
            raise InputError("The ensemble needs at least one tree and one training row.")

        if isinstance(leaf_values, list):
            per_tree = [np.asarray(v, dtype=np.float64).ravel() for v in leaf_values]
            if len(per_tree) != n_trees:
                raise InputError(f"leaf_values lists {len(per_tree)} trees, leaf_index {n_trees}.")
            counts = np.array([len(v) for v in per_tree], dtype=np.int64)
            values = np.concatenate(per_tree)
        else:
            values = np.asarray(leaf_values, dtype=np.float64).ravel()
            if n_leaves is None:
                raise InputError("n_leaves is required when leaf_values is one flat array.")
            counts = np.asarray(n_leaves, dtype=np.int64)
        if n_leaves is not None and not np.array_equal(np.asarray(n_leaves), counts):
            raise InputError("n_leaves disagrees with the per-tree leaf_values lengths.")
        if counts.shape != (n_trees,) or np.any(counts < 1):
            raise InputError(f"n_leaves must be ({n_trees},) positive counts, got {counts}.")
        if values.shape != (int(counts.sum()),):
            raise InputError(f"leaf_values has {values.size} entries, n_leaves sums to {counts.sum()}.")
        if not np.all(np.isfinite(values)):
            raise InputError("leaf_values contains NaN or infinite values.")
        if leaf_idx.min() < 0 or np.any(leaf_idx.max(axis=1) >= counts):
            raise InputError("leaf_index holds a leaf number outside 0 .. n_leaves[t] - 1.")

        if isinstance(l2, list):
            l2_arr = np.concatenate([np.broadcast_to(np.asarray(v, np.float64), (c,))
                                     for v, c in zip(l2, counts, strict=True)])
        else:
            l2_arr = np.asarray(l2, dtype=np.float64)
            if l2_arr.ndim == 0:
                l2_arr = np.full(values.size, float(l2_arr))
            elif l2_arr.shape == (n_trees,) and n_trees != values.size:
                l2_arr = np.repeat(l2_arr, counts)
        if l2_arr.shape != values.shape or np.any(l2_arr < 0) or not np.all(np.isfinite(l2_arr)):
            raise InputError("l2 must be non-negative: a scalar, one value per tree or per leaf.")

        if step_scales is None:
            scales = np.ones((n_trees, 1), dtype=np.float64)
        else:
            scales = np.asarray(step_scales, dtype=np.float64)
            if scales.ndim == 1:
                scales = np.broadcast_to(scales, (n_trees, scales.size)).copy()
        if scales.ndim != 2 or scales.shape[0] != n_trees or scales.shape[1] < 1:
            raise InputError(f"step_scales must have shape ({n_trees}, n_steps), got {scales.shape}.")
        steps = (
            np.full(n_trees, scales.shape[1], dtype=np.int64)
            if n_steps is None
            else _per_tree("n_steps", n_steps, n_trees, np.int64)
        )
        if np.any(steps < 1) or np.any(steps > scales.shape[1]):
            raise InputError("n_steps must lie in 1 .. step_scales.shape[1].")
        scales = np.where(np.arange(scales.shape[1])[None, :] < steps[:, None], scales, 0.0)

        if loss not in LOSSES:
            raise InputError(f"loss must be one of {LOSSES}, got {loss!r}.")
        labels = _per_row("y", y, n_rows, 0.0)
        if loss == "logloss" and (labels.min() < 0 or labels.max() > 1):
            raise InputError("logloss labels must lie in [0, 1] (0/1 class labels or probabilities).")
        weights = _per_row("sample_weight", sample_weight, n_rows, 1.0)
        if weights.min() < 0 or weights.sum() <= 0:
            raise InputError("sample_weight must be non-negative with a positive sum.")
        classes = _per_tree("tree_class", tree_class, n_trees, np.int64)
        if np.any(classes != 0):
            raise InputError("Only single-output ensembles (tree_class all 0) are modelled so far.")

        return cls(
            leaf_index=leaf_idx,
            n_leaves=counts,
            leaf_values=np.ascontiguousarray(values),
            tree_class=classes,
            newton=_per_tree("newton", newton, n_trees, np.bool_),
            learning_rate=_per_tree("learning_rate", learning_rate, n_trees, np.float64),
            l1=_per_tree("l1", l1, n_trees, np.float64),
            max_delta_step=_per_tree("max_delta_step", max_delta_step, n_trees, np.float64),
            l2=np.ascontiguousarray(l2_arr),
            l2_per_weight_sum=_per_tree("l2_per_weight_sum", l2_per_weight_sum, n_trees, np.float64),
            n_steps=steps,
            step_scales=np.ascontiguousarray(scales),
            loss=loss,
            hessian_floor=float(hessian_floor),
            base_margin=float(base_margin),
            base_margin_refit=bool(base_margin_refit),
            init_offset=_per_row("init_offset", init_offset, n_rows, 0.0),
            y=labels,
            sample_weight=weights,
            weight_scale=_per_row("weight_scale", weight_scale, n_rows, 1.0),
            float32_gradients=bool(float32_gradients),
        )
