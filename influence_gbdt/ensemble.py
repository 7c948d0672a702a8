"""The library-agnostic description of a boosted tree ensemble as seen on its training set.

Adapters (one per booster) turn a trained model plus its training data into a :class:`TreeEnsemble`;
the engine consumes nothing else. Every library quirk (XGBoost's probability-space base score,
LightGBM's init score folded into tree 0, CatBoost's l2 scaled by the mean weight, class weights)
is resolved by the adapter into the fields below, so the engine never branches on a library.

The leaf-value model
--------------------
Training rows ``j`` have labels ``y[j]`` and the user's weights ``v[j]``. Boosters weight classes
in two places, so each row's group ``q = weight_group[j]`` (its class) has two factors: the
*dataset weight* ``d[j] = R(v[j] * dataset_factor[q])`` (``R`` rounds to float32 where the booster
stores weights as float32) and the *effective weight* ``w[j] = d[j] * objective_factor[q]`` that
multiplies the row's gradient and hessian. Each row has a margin vector of ``K = n_outputs``
entries, starting at ``A0[j] = init_offset[j] + base_margin``.

Trees are grouped in *rounds* (``tree_round``): the trees of one round are all fitted at the
margins left by the earlier rounds (XGBoost and LightGBM grow one tree per class per round); a
single-output model has one tree per round. Tree ``t`` adds its leaf value to output
``tree_output[t]``, has a fixed structure (``leaf_index[t]``) and takes ``n_steps[t]`` leaf steps:
rows of leaf ``l`` sit at margin ``A[j] + u[l]`` (in output ``c = tree_output[t]``), where ``u``
starts at 0 and after each step ``s`` moves by ``step_scales[t, s] * delta[l]``::

    G = sum_{j in l} w[j] * g_c(y[j], A[j] + u[l])
    H = sum_{j in l} w[j] * h_c(y[j], A[j] + u[l])   if newton[t]   (Newton step)
        sum_{j in l} w[j]                            otherwise      (Gradient step)
    lam = l2[leaf] + R(l2_per_mean_weight[t] * sum_j w[j] / n)   (R: float32 where float32_l2)
    delta = -sign(G) * max(|G| - l1[t], 0) / (H + lam), clipped to +-max_delta_step[t] if > 0,
            and 0 where H <= 0 (an empty leaf).

A round of *joint* Newton trees (``full_hessian[t]``; CatBoost's MultiClass leaves) takes one
step for all its ``K`` trees at once, with the loss's full ``K x K`` hessian: the round's trees
``c = 0 .. K - 1`` share one structure and, per leaf, with ``H`` now the matrix
``sum_{j in l} w[j] * hess(y[j], A[j])`` (softmax: ``p_c (delta_cd - p_d)``)::

    lam = max(l2[leaf] + R(l2_per_mean_weight * sum_j w[j] / n), f32(f32(max_c H_cc) * FLT_EPSILON))
    delta = -(H + lam I)^{-1} G                     (0 where H + lam I is singular: an empty leaf)

The tree's leaf value is ``learning_rate[t] * u`` after its last step. ``g, h`` are the booster's
gradient and hessian of the :class:`~influence_gbdt.losses.Loss`. Trees with several steps are
alone in their round. With ``backtracking[t]`` (CatBoost's AnyImprovement) each of the tree's
``n_iterations[t]`` iterations tries the current step at the current scale and accepts it only if
the whole training set's weighted loss falls; otherwise the scale halves for the next try. The
engine decides those steps itself, in the replay (so the self-check verifies them) and again on
changed data; ``backtracking_objective`` says how the booster computes the loss it compares
(``"exact"``, or ``"fast_logloss"`` / ``"fast_cross_entropy"`` / ``"fast_poisson"``: CatBoost's
approximate exp-space arithmetic, which decides near-ties differently, with ``objective_threads``
its training thread count), and ``step_scales`` / ``n_steps`` of backtracking trees are ignored.

A *renewed* tree (``renewed[t]``; L1 and quantile objectives) takes no steps: each leaf value is
``learning_rate[t] * Q`` with ``Q`` the ``quantile_alpha[t]`` quantile of the residuals ``y - A``
of the leaf's rows, by the booster's definition ``quantile_method`` (``"xgboost"``,
``"lightgbm"``, ``"lightgbm_4.6"`` (LightGBM 4.4 to 4.6's weighted percentile) or ``"catboost"``;
:mod:`influence_gbdt.engine.quantile`), weighted by the effective
weights where ``quantile_weighted`` (CatBoost's leaves never are).

Base margin (``base_rule``)
---------------------------
``"fixed"``: ``base_margin`` stays when the data changes. ``"mean"``: it is the mean link
``base_link`` (logit, log, log of class shares, ...) of the label mean weighted by the dataset
weights (boost_from_average), ``mean = sum d y / sum d`` (class indicators for multiclass).
``"newton_step"``: one Newton step of the loss from ``base_anchor``,
``base_anchor - sum d g / sum d h`` (XGBoost's intercept with ``scale_pos_weight``; under the
``logit32`` link the step passes through XGBoost's float32 sigmoid and back, as XGBoost stores it
as a probability).
``"quantile"``: the ``alpha`` quantile of the labels (the quantile loss's ``alpha``) by the
booster's definition ``quantile_method``, weighted by the dataset weights. All are re-estimated
whenever the data changes.

Removing a row and reweighting it
---------------------------------
LeafRefit *deletes* a row: its weight goes to 0, the row count ``n`` drops by one (which moves
CatBoost's l2 term) and class factors the booster derives from the data change to
``*_factor_without[i]`` (one value per group, when row ``i`` is deleted). LeafInfluence
differentiates with respect to the user's weight ``v[i]`` (``n`` fixed): through ``w[i]``, through
the class factors (``*_factor_derivative[i]`` = ``d factor / d v[i]``, zero for factors computed
from row *counts*; float32 rounding is not differentiated) and through the base margin.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .errors import InputError
from .losses import LINKS, Loss

BaseRule = Literal["fixed", "mean", "newton_step", "quantile"]
BASE_RULES: tuple[str, ...] = ("fixed", "mean", "newton_step", "quantile")
#: The boosters' definitions of a (weighted) quantile of renewed leaves (see the engine's quantile module).
QUANTILE_METHODS: tuple[str, ...] = ("xgboost", "lightgbm", "lightgbm_4.6", "catboost")


def _per_tree(name: str, value: ArrayLike, n_trees: int, dtype: type) -> NDArray[Any]:
    arr: NDArray[Any] = np.asarray(value, dtype=dtype)
    if arr.ndim == 0:
        arr = np.full(n_trees, arr, dtype=dtype)
    if arr.shape != (n_trees,):
        raise InputError(f"{name} must be a scalar or have shape ({n_trees},), got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} contains NaN or infinite values.")
    return np.ascontiguousarray(arr)


#: Why a model's base margin or leaf value is not finite, and what to do (the error's second half).
_NOT_FINITE_MODEL = (
    "a model storing such a value predicts NaN, infinity or its link's limit (0 under a log link) for "
    "the rows that reach it, so no training row's influence on them is defined. A log-link objective "
    "(Poisson, Tweedie, Gamma) stores one when its labels' weighted mean is 0 (every label 0, or every "
    "positive label weighted 0): retrain it on labels whose positive values carry weight."
)


def _per_row(
    name: str, value: ArrayLike | None, shape: tuple[int, ...], default: float, why: str = ""
) -> NDArray[np.float64]:
    if value is None:
        return np.full(shape, default, dtype=np.float64)
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0 or (arr.ndim == 1 and len(shape) == 2 and shape[1] == 1 and arr.shape[0] == shape[0]):
        arr = np.broadcast_to(arr.reshape(arr.shape + (1,) * (len(shape) - arr.ndim)), shape)
    if arr.shape != shape:
        raise InputError(f"{name} must have shape {shape}, got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} contains NaN or infinite values{': ' + why if why else '.'}")
    return np.ascontiguousarray(arr)


def _optional_table(name: str, value: ArrayLike | None, shape: tuple[int, int]) -> NDArray[np.float64] | None:
    if value is None:
        return None
    table = _per_row(name, value, shape, 0.0)
    table.setflags(write=False)
    return table


def check_weight_sum(total: float) -> None:
    """Refuse a training set whose effective weights (sample weights times class weights) sum to 0
    or less: no booster trains on it. Checked on the whole set (a Dask partition may hold only rows
    of weight 0)."""
    if not total > 0:
        raise InputError(
            "The training rows' effective weights (sample weights times class weights) sum to "
            f"{total:g}: no booster trains on that. Pass the sample weights the model was trained with."
        )


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """An ensemble's structure, leaf-value rule, loss and training data (immutable).

    Build it with :meth:`TreeEnsemble.build`, which broadcasts scalars and validates; the fields
    below are the normalized arrays. ``T`` = trees, ``n`` = training rows, ``K`` = outputs,
    ``G`` = weight groups, ``n_total`` = total number of leaves over all trees.

    Attributes
    ----------
    leaf_index : ndarray of shape (T, n), int32
        Leaf of every training row in every tree, numbered ``0 .. n_leaves[t] - 1`` per tree: the
        leaf the row was in when the leaf values were estimated (for CatBoost CTR models, by the
        averaging fold's online CTRs, which the final model's leaves of the row may differ from).
    n_leaves : ndarray of shape (T,), int64
        Number of leaves of each tree (leaves no training row reaches included).
    leaf_values : ndarray of shape (n_total,), float64
        The stored leaf values, tree after tree: tree ``t`` holds
        ``leaf_values[leaf_offset[t]:leaf_offset[t + 1]]``. Used only by the self-check.
    n_outputs : int
        ``K``, the length of a row's margin vector (1 for binary and regression models).
    tree_output : ndarray of shape (T,), int64
        The output each tree adds to, ``0 .. K - 1``.
    tree_round : ndarray of shape (T,), int64
        Round of each tree, ``0, 0, ..., 1, ...``: the trees of a round are fitted at the same
        margins. Non-decreasing in steps of at most one.
    newton : ndarray of shape (T,), bool
        True for Newton steps (H = sum w*h), False for Gradient steps (H = sum w).
    full_hessian : ndarray of shape (T,), bool
        The tree's round takes one joint Newton step with the full softmax hessian (module
        docstring): its trees are tree ``round start + c`` for output ``c``, share their leaves,
        take one step of scale 1 without L1, clipping or backtracking.
    learning_rate, l1, max_delta_step : ndarray of shape (T,), float64
        Shrinkage; L1 soft threshold on G; clip of each step (0 = none).
    l2 : ndarray of shape (n_total,), float64
        Per-leaf L2 term (e.g. LightGBM's lambda_l2 + cat_l2 below categorical splits); ``inf``
        for a leaf the booster set to 0, which stays 0 (XGBoost's vector-leaf components whose
        hessian sum is below min_child_weight).
    l2_per_mean_weight : ndarray of shape (T,), float64
        L2 term per unit of the mean effective weight ``sum(w) / n`` (CatBoost's l2_leaf_reg).
    n_steps : ndarray of shape (T,), int64
        Accepted leaf-estimation steps of each tree (>= 1).
    step_scales : ndarray of shape (T, max(n_steps)), float64
        Accepted scale of every step (1 without backtracking); entries past ``n_steps`` are 0.
    backtracking : ndarray of shape (T,), bool
        Whether steps are accepted only when the training loss improves (CatBoost AnyImprovement).
    n_iterations : ndarray of shape (T,), int64
        Step tries of a backtracking tree (accepted or not); ``n_steps`` otherwise.
    renewed : ndarray of shape (T,), bool
        Whether the tree's leaves are renewed quantiles of residuals (module docstring).
    quantile_alpha : ndarray of shape (T,), float64
        The quantile level of each renewed tree.
    quantile_method : {"xgboost", "lightgbm", "lightgbm_4.6", "catboost"}
        Whose definition of the (weighted) quantile renewed leaves and the quantile base follow.
    quantile_weighted : bool
        Whether the booster weighted its quantiles (it had a weight vector).
    quantile_delta : float
        CatBoost's ``delta`` of its Exact leaves and quantile base (0 elsewhere).
    backtracking_objective : {"exact", "fast_logloss", "fast_cross_entropy", "fast_poisson"}
        How the booster computes the loss a backtracking step must lower (module docstring).
    objective_threads : int
        The booster's training thread count, which splits the fast objective's rows into ranges.
    objective_order : ndarray of shape (n,), int64
        The order the booster sums the fast objective's rows in (row at each position; CatBoost:
        its averaging fold, not the data order when features are categorical); float32 sums
        depend on it. ``arange(n)`` by default.
    loss : Loss
        The training loss (name, parameters, outputs, e.g. the hessian floor).
    base_margin : ndarray of shape (K,), float64
        The initial margin added to every row.
    base_rule : {"fixed", "mean", "newton_step", "quantile"}
        How the booster would re-estimate ``base_margin`` on changed data (see module docstring).
    base_anchor : ndarray of shape (K,), float64
        The margin a ``"newton_step"`` base estimate starts from.
    base_link : str
        The mean link of the ``"mean"`` rule (see :meth:`~influence_gbdt.losses.Loss.mean_link`).
    init_offset : ndarray of shape (n, K), float64
        Per-row offset added to the initial margin (a user baseline / base_margin), usually 0.
    y : ndarray of shape (n, label_width), float64
        Training labels as the booster saw them (float32-rounded where the booster rounds): the label
        or class index, or ``K`` targets for multi-target regression.
    user_weight : ndarray of shape (n,), float64
        The user's sample weights ``v`` (>= 0); scores are per unit of them.
    weight_group : ndarray of shape (n,), int64
        Group of every row (its class, where the booster weights classes), ``0 .. G - 1``.
    dataset_factor, objective_factor : ndarray of shape (G,), float64
        Each group's factor in the dataset weight and in the effective weight (module docstring).
    float32_weights : bool
        Whether the dataset weight ``v * dataset_factor`` is rounded to float32.
    dataset_factor_without, objective_factor_without : ndarray of shape (n, G) or None
        The factors after deleting row ``i`` (row ``i`` of the table); None = unchanged.
    dataset_factor_derivative, objective_factor_derivative : ndarray of shape (n, G) or None
        ``d factor / d v[i]``; None = zero.
    float32_gradients : bool
        Round each row's weighted gradient and hessian to float32 before the leaf sums, as
        LightGBM does (replay and refit only; derivatives for leaf_influence stay in float64).
    float32_l2 : bool
        Round the mean-weight L2 term ``l2_per_mean_weight * sum(w) / n`` to float32 (CatBoost's
        multi-dimensional leaves; replay and refit only, the rounding is not differentiated).
    float32_base : bool
        The booster's base-margin estimate is a float32 before its link: CatBoost's weighted mean
        (of float32 label-times-weight products) and quantile, LightGBM's ``BoostFromScore``
        percentile of the L1 and quantile objectives; XGBoost's mean, Newton step and quantile,
        whose links ``logit32`` and ``log32`` then compute in float32 too). A base margin
        re-estimated without a row is computed so (refit only; the rounding is not differentiated).
    float32_base_terms : bool
        Each row's terms ``d p`` and ``d q`` of the base estimate's ratio are float32 (CatBoost's
        float32 label times its weight; XGBoost's gradient pairs of its Newton step), as are the
        terms a deleted row takes out of its sums (refit only).
    """

    leaf_index: NDArray[np.int32]
    n_leaves: NDArray[np.int64]
    leaf_values: NDArray[np.float64]
    n_outputs: int
    tree_output: NDArray[np.int64]
    tree_round: NDArray[np.int64]
    newton: NDArray[np.bool_]
    full_hessian: NDArray[np.bool_]
    learning_rate: NDArray[np.float64]
    l1: NDArray[np.float64]
    max_delta_step: NDArray[np.float64]
    l2: NDArray[np.float64]
    l2_per_mean_weight: NDArray[np.float64]
    n_steps: NDArray[np.int64]
    step_scales: NDArray[np.float64]
    backtracking: NDArray[np.bool_]
    n_iterations: NDArray[np.int64]
    renewed: NDArray[np.bool_]
    quantile_alpha: NDArray[np.float64]
    quantile_method: str
    quantile_weighted: bool
    quantile_delta: float
    backtracking_objective: str
    objective_threads: int
    objective_order: NDArray[np.int64]
    loss: Loss
    base_margin: NDArray[np.float64]
    base_rule: str
    base_anchor: NDArray[np.float64]
    base_link: str
    init_offset: NDArray[np.float64]
    y: NDArray[np.float64]
    user_weight: NDArray[np.float64]
    weight_group: NDArray[np.int64]
    dataset_factor: NDArray[np.float64]
    objective_factor: NDArray[np.float64]
    float32_weights: bool
    dataset_factor_without: NDArray[np.float64] | None
    objective_factor_without: NDArray[np.float64] | None
    dataset_factor_derivative: NDArray[np.float64] | None
    objective_factor_derivative: NDArray[np.float64] | None
    float32_gradients: bool
    float32_l2: bool
    float32_base: bool
    float32_base_terms: bool
    leaf_offset: NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        offset = np.zeros(self.n_trees + 1, dtype=np.int64)
        np.cumsum(self.n_leaves, out=offset[1:])
        object.__setattr__(self, "leaf_offset", offset)
        for arr in (self.leaf_index, self.leaf_values, self.l2, self.y, self.user_weight, self.init_offset):
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

    @property
    def n_groups(self) -> int:
        """Number of weight groups ``G``."""
        return int(self.dataset_factor.size)

    @property
    def dataset_weight(self) -> NDArray[np.float64]:
        """Dataset weights ``d = R(v * dataset_factor[group])``, shape (n,)."""
        d = self.user_weight * self.dataset_factor[self.weight_group]
        return d.astype(np.float32).astype(np.float64) if self.float32_weights else d

    @property
    def sample_weight(self) -> NDArray[np.float64]:
        """Effective training weights ``w = d * objective_factor[group]``, shape (n,)."""
        return self.dataset_weight * self.objective_factor[self.weight_group]

    @cached_property
    def weight_factor(self) -> NDArray[np.float64]:
        """``d w / d v`` per row, ``dataset_factor * objective_factor`` of its group, shape (n,)
        (computed once: every scoring call reads it)."""
        return (self.dataset_factor * self.objective_factor)[self.weight_group]

    def head(self, n_trees: int) -> TreeEnsemble:
        """The ensemble of the first ``n_trees`` trees (same data, loss and base margin).

        Whole rounds only: ``n_trees`` must end a round.
        """
        T = int(n_trees)
        if not 1 <= T <= self.n_trees or (T < self.n_trees and self.tree_round[T] == self.tree_round[T - 1]):
            raise InputError(f"head needs a number of trees that ends a round, in 1 .. {self.n_trees}.")
        leaves = int(self.leaf_offset[T])
        per_tree = {name: getattr(self, name)[:T] for name in (
            "leaf_index", "n_leaves", "tree_output", "tree_round", "newton", "full_hessian", "learning_rate",
            "l1", "max_delta_step", "l2_per_mean_weight", "n_steps", "step_scales", "backtracking",
            "n_iterations", "renewed", "quantile_alpha")}
        return replace(self, leaf_values=self.leaf_values[:leaves], l2=self.l2[:leaves], **per_tree)

    def trees(self, start: int, end: int) -> TreeEnsemble:
        """Trees ``start .. end - 1`` as an ensemble of their own on the same data, replayed at the
        same margins: the initial margin becomes ``init_offset + base_margin`` plus the stored leaf
        values of the earlier trees, added tree by tree as the replay adds them (so bit for bit the
        margins the full replay reaches tree ``start`` with), with a fixed base margin of 0.

        Whole rounds only. Replaying it costs the trees it holds, not the ones before (used to probe
        one tree of a long ensemble).
        """
        head = self.head(end)
        S = int(start)
        if S == 0:
            return head
        if not 0 < S < end or self.tree_round[S] == self.tree_round[S - 1]:
            raise InputError(f"trees needs a start that begins a round, in 1 .. {end - 1}.")
        margin = self.init_offset + self.base_margin[None, :]
        for t in range(S):  # n-vector adds in tree order: a loop over trees, not rows
            margin[:, self.tree_output[t]] += self.leaf_values[self.leaf_offset[t] + self.leaf_index[t]]
        leaves = slice(int(self.leaf_offset[S]), int(self.leaf_offset[end]))
        per_tree = {name: getattr(head, name)[S:] for name in (
            "leaf_index", "n_leaves", "tree_output", "newton", "full_hessian", "learning_rate", "l1",
            "max_delta_step", "l2_per_mean_weight", "n_steps", "step_scales", "backtracking", "n_iterations",
            "renewed", "quantile_alpha")}
        return replace(
            head, leaf_values=self.leaf_values[leaves], l2=self.l2[leaves], init_offset=margin,
            base_margin=np.zeros_like(self.base_margin), base_rule="fixed",
            tree_round=self.tree_round[S:end] - self.tree_round[S], **per_tree,
        )

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
        loss: str | Loss,
        n_leaves: ArrayLike | None = None,
        tree_output: ArrayLike = 0,
        tree_round: ArrayLike | None = None,
        learning_rate: ArrayLike = 1.0,
        newton: ArrayLike = True,
        full_hessian: ArrayLike = False,
        l2: ArrayLike | list[ArrayLike] = 0.0,
        l2_per_mean_weight: ArrayLike = 0.0,
        l1: ArrayLike = 0.0,
        max_delta_step: ArrayLike = 0.0,
        step_scales: ArrayLike | None = None,
        n_steps: ArrayLike | None = None,
        backtracking: ArrayLike = False,
        n_iterations: ArrayLike | None = None,
        renewed: ArrayLike = False,
        quantile_alpha: ArrayLike = 0.5,
        quantile_method: str = "lightgbm",
        quantile_weighted: bool = False,
        quantile_delta: float = 0.0,
        backtracking_objective: str = "exact",
        objective_threads: int = 1,
        objective_order: ArrayLike | None = None,
        hessian_floor: float = 0.0,
        base_margin: ArrayLike = 0.0,
        base_rule: str = "fixed",
        base_anchor: ArrayLike = 0.0,
        base_link: str | None = None,
        init_offset: ArrayLike | None = None,
        user_weight: ArrayLike | None = None,
        weight_group: ArrayLike | None = None,
        dataset_factor: ArrayLike = 1.0,
        objective_factor: ArrayLike = 1.0,
        float32_weights: bool = False,
        dataset_factor_without: ArrayLike | None = None,
        objective_factor_without: ArrayLike | None = None,
        dataset_factor_derivative: ArrayLike | None = None,
        objective_factor_derivative: ArrayLike | None = None,
        float32_gradients: bool = False,
        float32_l2: bool = False,
        float32_base: bool = False,
        float32_base_terms: bool = False,
    ) -> TreeEnsemble:
        """Validate and normalize the description; scalars broadcast over trees, leaves or rows.

        Parameters
        ----------
        leaf_index : array-like of shape (T, n)
            Leaf of each training row in each tree, ``0 .. n_leaves[t] - 1``.
        leaf_values : array-like of shape (n_total,), or a list of T arrays (one per tree)
            Stored leaf values.
        y : array-like of shape (n,) or (n, K)
            Training labels.
        loss : str or Loss
            A single-output loss name (with ``hessian_floor``) or a
            :class:`~influence_gbdt.losses.Loss`.
        n_leaves : array-like of shape (T,), optional
            Leaves per tree; taken from the per-tree ``leaf_values`` list when omitted.
        tree_output : scalar or shape (T,)
        tree_round : array-like of shape (T,), optional
            Default: one tree per round.
        learning_rate, newton, l1, max_delta_step, l2_per_mean_weight, backtracking : scalar or (T,)
        full_hessian : scalar or (T,)
            Joint Newton rounds (see the class attributes); the softmax loss only.
        l2 : scalar, per tree (T,), per leaf (n_total,), or a list of T per-leaf arrays
        step_scales : array-like of shape (T, S), optional
            Accepted step scales; default one step of scale 1 per tree.
        n_steps, n_iterations : array-like of shape (T,), optional
            Accepted steps (default: all ``S`` columns) and tries (default: ``n_steps``).
        renewed, quantile_alpha : scalar or (T,)
        quantile_method, quantile_weighted, quantile_delta : see the class attributes.
        backtracking_objective : str
        objective_threads : int
        objective_order : (n,) permutation of the rows, optional
        hessian_floor : float
            With a loss name: the booster's hessian floor.
        base_margin : scalar or (K,)
        base_rule : {"fixed", "mean", "newton_step", "quantile"}
        base_anchor : scalar or (K,)
        base_link : str, optional
            Default: the loss's own mean link.
        init_offset : array-like of shape (n,) or (n, K), optional
        user_weight : array-like of shape (n,), optional
            Default 1.
        weight_group : array-like of shape (n,) of ints, optional
            Default: one group.
        dataset_factor, objective_factor : scalar or (G,)
            Default 1.
        float32_weights : bool
        dataset_factor_without, objective_factor_without : (n, G), optional
        dataset_factor_derivative, objective_factor_derivative : (n, G), optional
            See the class attributes.
        float32_gradients, float32_l2, float32_base, float32_base_terms : bool

        Raises
        ------
        InputError
            On inconsistent shapes, out-of-range leaf indices, NaN or negative weights,
            NaN labels or labels outside the loss's domain.
        """
        leaf_idx = np.asarray(leaf_index)
        if leaf_idx.ndim != 2:
            raise InputError(f"leaf_index must have shape (n_trees, n_rows), got {leaf_idx.shape}.")
        if not np.issubdtype(leaf_idx.dtype, np.integer) and not np.all(leaf_idx == np.round(leaf_idx)):
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
            raise InputError(f"leaf_values contains NaN or infinite values: {_NOT_FINITE_MODEL}")
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
        if l2_arr.shape != values.shape or np.any(l2_arr < 0) or np.any(np.isnan(l2_arr)):
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
        tries = (steps.copy() if n_iterations is None
                 else _per_tree("n_iterations", n_iterations, n_trees, np.int64))
        if np.any(tries < steps):
            raise InputError("n_iterations must be at least n_steps (every accepted step is a try).")

        loss_obj = loss if isinstance(loss, Loss) else Loss(str(loss), hessian_floor=float(hessian_floor))
        K = loss_obj.n_outputs
        outputs = _per_tree("tree_output", tree_output, n_trees, np.int64)
        if outputs.min() < 0 or outputs.max() >= K:
            raise InputError(f"tree_output must lie in 0 .. {K - 1}.")
        rounds = (np.arange(n_trees, dtype=np.int64) if tree_round is None
                  else _per_tree("tree_round", tree_round, n_trees, np.int64))
        if rounds[0] != 0 or np.any(np.diff(rounds) < 0) or np.any(np.diff(rounds) > 1):
            raise InputError("tree_round must start at 0 and grow by 0 or 1 from tree to tree.")
        shared = np.bincount(rounds)[rounds] > 1
        if np.any(shared & (steps > 1)) or np.any(shared & (tries > 1)):
            raise InputError("A tree with several leaf steps must be alone in its round.")
        fast = {"fast_logloss": "logloss", "fast_cross_entropy": "logloss", "fast_poisson": "poisson"}
        if backtracking_objective not in ("exact", *fast):
            raise InputError(f"backtracking_objective must be 'exact' or one of {sorted(fast)}, "
                             f"got {backtracking_objective!r}.")
        if backtracking_objective != "exact" and loss_obj.name != fast[backtracking_objective]:
            raise InputError(f"backtracking_objective={backtracking_objective!r} needs the "
                             f"{fast[backtracking_objective]} loss, not {loss_obj.name}.")
        if int(objective_threads) < 1:
            raise InputError(f"objective_threads must be >= 1, got {objective_threads}.")
        order = np.arange(n_rows) if objective_order is None else np.asarray(objective_order, np.int64)
        if order.shape != (n_rows,) or not np.array_equal(np.sort(order), np.arange(n_rows)):
            raise InputError(f"objective_order must be a permutation of the {n_rows} rows.")
        renew = _per_tree("renewed", renewed, n_trees, np.bool_)
        alphas = _per_tree("quantile_alpha", quantile_alpha, n_trees, np.float64)
        if quantile_method not in QUANTILE_METHODS:
            raise InputError(
                f"quantile_method must be one of {sorted(QUANTILE_METHODS)}, got {quantile_method!r}.")
        if renew.any() and (K != 1 or np.any(shared & renew) or np.any(renew & (steps > 1))):
            raise InputError("Renewed trees are modelled for single-output models, one tree per round.")
        if np.any(renew & ((alphas <= 0) | (alphas >= 1))):
            raise InputError("quantile_alpha of a renewed tree must lie in (0, 1).")

        joint = _per_tree("full_hessian", full_hessian, n_trees, np.bool_)
        if joint.any():
            _check_joint(joint, rounds, outputs, leaf_idx, counts, steps, tries, scales, loss_obj, K,
                         _per_tree("l1", l1, n_trees, np.float64),
                         _per_tree("max_delta_step", max_delta_step, n_trees, np.float64),
                         _per_tree("backtracking", backtracking, n_trees, np.bool_), renew)

        labels = loss_obj.as_labels(y, "training labels")
        if labels.shape[0] != n_rows:
            raise InputError(f"y has {labels.shape[0]} rows, leaf_index {n_rows}.")
        v = _per_row("user_weight", user_weight, (n_rows,), 1.0)
        if v.min() < 0:
            raise InputError("user_weight must be non-negative.")
        groups = (np.zeros(n_rows, dtype=np.int64) if weight_group is None
                  else np.ascontiguousarray(np.asarray(weight_group, dtype=np.int64)))
        if groups.shape != (n_rows,) or groups.min() < 0:
            raise InputError(f"weight_group must hold ({n_rows},) non-negative group numbers.")
        # A group may hold no row (a class that never occurs in y): the factors say how many there are.
        n_groups = max([int(groups.max()) + 1] + [np.size(f) for f in (dataset_factor, objective_factor)
                                                  if f is not None and np.ndim(f) == 1])
        data_f = _per_row("dataset_factor", dataset_factor, (n_groups,), 1.0)
        obj_f = _per_row("objective_factor", objective_factor, (n_groups,), 1.0)
        if data_f.min() < 0 or obj_f.min() < 0:
            raise InputError("Group factors must be non-negative.")
        if base_rule not in BASE_RULES:
            raise InputError(f"base_rule must be one of {BASE_RULES}, got {base_rule!r}.")
        link = loss_obj.default_link if base_link is None else base_link
        if link not in LINKS:
            raise InputError(f"base_link must be one of {LINKS}, got {link!r}.")
        if base_rule in ("newton_step", "quantile") and K != 1:
            raise InputError(f"The {base_rule!r} base rule is modelled for single-output losses only.")
        table = (n_rows, n_groups)

        return cls(
            leaf_index=leaf_idx,
            n_leaves=counts,
            leaf_values=np.ascontiguousarray(values),
            n_outputs=K,
            tree_output=outputs,
            tree_round=rounds,
            newton=_per_tree("newton", newton, n_trees, np.bool_),
            full_hessian=joint,
            learning_rate=_per_tree("learning_rate", learning_rate, n_trees, np.float64),
            l1=_per_tree("l1", l1, n_trees, np.float64),
            max_delta_step=_per_tree("max_delta_step", max_delta_step, n_trees, np.float64),
            l2=np.ascontiguousarray(l2_arr),
            l2_per_mean_weight=_per_tree("l2_per_mean_weight", l2_per_mean_weight, n_trees, np.float64),
            n_steps=steps,
            step_scales=np.ascontiguousarray(scales),
            backtracking=_per_tree("backtracking", backtracking, n_trees, np.bool_),
            n_iterations=tries,
            renewed=renew,
            quantile_alpha=alphas,
            quantile_method=quantile_method,
            quantile_weighted=bool(quantile_weighted),
            quantile_delta=float(quantile_delta),
            backtracking_objective=backtracking_objective,
            objective_threads=int(objective_threads),
            objective_order=np.ascontiguousarray(order),
            loss=loss_obj,
            base_margin=_per_row("base_margin", base_margin, (K,), 0.0, why=_NOT_FINITE_MODEL),
            base_rule=base_rule,
            base_anchor=_per_row("base_anchor", base_anchor, (K,), 0.0),
            base_link=link,
            init_offset=_per_row("init_offset", init_offset, (n_rows, K), 0.0),
            y=labels,
            user_weight=v,
            weight_group=groups,
            dataset_factor=data_f,
            objective_factor=obj_f,
            float32_weights=bool(float32_weights),
            dataset_factor_without=_optional_table("dataset_factor_without", dataset_factor_without, table),
            objective_factor_without=_optional_table(
                "objective_factor_without", objective_factor_without, table),
            dataset_factor_derivative=_optional_table(
                "dataset_factor_derivative", dataset_factor_derivative, table),
            objective_factor_derivative=_optional_table(
                "objective_factor_derivative", objective_factor_derivative, table),
            float32_gradients=bool(float32_gradients),
            float32_l2=bool(float32_l2),
            float32_base=bool(float32_base),
            float32_base_terms=bool(float32_base_terms),
        )


def _check_joint(
    joint: NDArray[np.bool_], rounds: NDArray[np.int64], outputs: NDArray[np.int64],
    leaf_idx: NDArray[np.int32], counts: NDArray[np.int64], steps: NDArray[np.int64],
    tries: NDArray[np.int64], scales: NDArray[np.float64], loss: Loss, K: int,
    l1: NDArray[np.float64], mds: NDArray[np.float64], backtracking: NDArray[np.bool_],
    renew: NDArray[np.bool_],
) -> None:
    """Refuse ``full_hessian`` trees whose round is not one joint softmax Newton step."""
    if loss.name != "softmax" or loss.params.get("factor", 1.0) != 1.0 or loss.hessian_floor != 0.0:
        raise InputError("full_hessian rounds are modelled for the softmax loss (factor 1, no hessian "
                         f"floor), not {loss.name}.")
    if np.any(joint & ((steps != 1) | (tries != 1) | (scales[:, 0] != 1.0) | (l1 != 0) | (mds != 0)
                       | backtracking | renew)):
        raise InputError("A full_hessian tree takes one step of scale 1, without l1, max_delta_step, "
                         "backtracking or renewal.")
    starts = np.flatnonzero(np.r_[True, np.diff(rounds) > 0])
    sizes = np.diff(np.r_[starts, rounds.size])
    for t0, size in zip(starts, sizes, strict=True):  # one check per round, not per row
        trees = slice(t0, t0 + size)
        if not joint[trees].any():
            continue
        if (not joint[trees].all() or size != K or not np.array_equal(outputs[trees], np.arange(K))
                or np.any(counts[trees] != counts[t0])
                or np.any(leaf_idx[trees] != leaf_idx[t0][None, :])):
            raise InputError(f"The full_hessian round starting at tree {t0} must hold {K} trees, one per "
                             "output in order, sharing one structure.")
