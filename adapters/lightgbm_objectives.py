"""LightGBM objectives -> the engine's losses, base rules and init scores (LightGBM 4.x).

Each objective LightGBM names in its model text (``objective=...``) maps onto one
:class:`~influence_gbdt.losses.Loss`, written once for every library; this module only maps names
and parameters and computes LightGBM's boost_from_average init score the way LightGBM does (float32
labels and weights, sequential double sums), so that it can be taken out of the first tree(s) bit
for bit. Measured against LightGBM 4.7.0 (project notes, lightgbm-facts sections 4 and 5;
``tests/adapters/test_lightgbm_objectives.py``).

==========================  ==================================================================
LightGBM objective          influence_gbdt
==========================  ==================================================================
``regression``              exact: ``squared_error``; init = weighted label mean
``regression sqrt``         refused: ``reg_sqrt`` trains on sqrt-transformed labels
``huber``                   exact: ``huber(delta=alpha, outside_hessian=1)`` (LightGBM's hessian
                            is the weight inside and outside ``alpha``); init = mean
``fair``                    exact: ``fair(c=fair_c)``; init = mean
``poisson``                 exact: ``poisson(hessian_log_shift=poisson_max_delta_step)``
                            (hessian ``e^(m + 0.7)`` by default); init = log(mean)
``gamma``                   exact: ``gamma``; init = log(mean)
``tweedie``                 exact: ``tweedie(power=tweedie_variance_power)``; init = log(mean)
``binary``                  exact: ``logloss(sigma=sigmoid)``; init = logit(rate) / sigmoid;
                            ``is_unbalance`` / ``scale_pos_weight`` as label weights
``cross_entropy``           exact: ``logloss`` on labels in [0, 1]; init = logit(mean)
``regression_l1``           exact: ``quantile(alpha=0.5, scale=2)`` (test loss ``|y - F|``) with
                            renewed leaves (LightGBM's (weighted) percentile of the residuals);
                            init = float32 weighted median of the labels
``quantile``                exact: ``quantile(alpha)`` (alpha as float32, as LightGBM stores
                            it), renewed leaves; init = float32 alpha-percentile of the labels
``multiclass``              exact: ``softmax(factor=K/(K-1))``; init_k = log(max(kEps, share_k))
``multiclassova``           exact with sigmoid 1 and no label weights: ``one_vs_all``; init_k =
                            logit(share_k); refused with ``is_unbalance``, ``scale_pos_weight``
                            (per-class label weights differ per output, the engine's weights do
                            not) or ``sigmoid != 1``
``mape``                    refused: the training side maps (renewed medians weighted by
                            ``1 / max(1, |y|)``), but a test point's loss ``|y - F| / max(1, |y|)``
                            carries a label weight the engine's test loss has no place for
``cross_entropy_lambda``    refused: its weights enter the likelihood non-linearly
                            (``1 - exp(-w log(1 + e^m))``), not as factors of gradient and hessian
``lambdarank``,             refused: ranking objectives; a row's gradient depends on every row
``rank_xendcg``             of its query (sorting, pairs, a table sigmoid, random draws per query)
custom (callable)           refused: the gradients of a Python callable are not in the model
==========================  ==================================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from influence_gbdt.errors import UnsupportedModelError
from influence_gbdt.losses import Loss, clog

from .versions import release

#: LightGBM's kEpsilon, the float literal ``1e-15f`` (``include/LightGBM/meta.h``): it starts every
#: leaf's hessian sum, clips the init score's positive rate and is the threshold for folding it in.
K_EPSILON = float(np.float32(1e-15))
#: The weighted percentiles of L1 / quantile leaves and init scores (the engine's
#: ``quantile_method``): LightGBM 4.7's, and 4.4 to 4.6's (:func:`weighted_percentile`). A model
#: text does not name the release that wrote it.
PERCENTILE_RULES = ("lightgbm", "lightgbm_4.6")

_REFUSED = {
    "cross_entropy_lambda": "its sample weights enter the likelihood non-linearly (z = 1 - exp(-w "
    "log(1 + e^m))) instead of multiplying each row's gradient and hessian, which influence is "
    "defined through. Retrain with objective='cross_entropy'",
    "lambdarank": "ranking objectives are not supported: a row's gradient depends on every row of its "
    "query (sorted scores, document pairs, LightGBM's table sigmoid), so there is no per-row loss to "
    "reweight or delete. Use a pointwise objective (e.g. 'regression' or 'binary' on the relevance)",
    "rank_xendcg": "ranking objectives are not supported: a row's gradient depends on every row of its "
    "query and on random draws numbered by the query's rows, so deleting a row changes the draws of "
    "the others. Use a pointwise objective (e.g. 'regression' or 'binary' on the relevance)",
    "mape": "the training side would map (renewed medians weighted by 1 / max(1, |y|)), but a test "
    "point's loss |y - F| / max(1, |y|) carries a label weight that influence_gbdt's test loss cannot "
    "hold, so scores on the loss would be silently off. Retrain with objective='regression_l1' (or "
    "pass sample_weight = 1 / max(1, |y|) to it)",
}


@dataclass(frozen=True)
class Objective:
    """A LightGBM objective as the engine models it.

    Attributes
    ----------
    name : str
        LightGBM's objective name (``regression``, ``multiclass``, ...).
    loss : Loss
        The engine's loss (with ``n_outputs = K``).
    renewed : bool
        Whether LightGBM replaces each leaf by a percentile of its residuals (L1, quantile).
    alpha : float
        The percentile level of renewed leaves and of the init score (float32, as LightGBM).
    """

    name: str
    loss: Loss
    renewed: bool = False
    alpha: float = 0.5

    @property
    def n_classes(self) -> int:
        """``K``: trees per iteration (1 except for multiclass)."""
        return self.loss.n_outputs

    @property
    def multiclass(self) -> bool:
        return self.name in ("multiclass", "multiclassova")

    @property
    def base_rule(self) -> str:
        """The engine's rule for LightGBM's boost_from_average init score on changed data."""
        return "quantile" if self.renewed else "mean"

    def groups(self, labels: NDArray[np.float64]) -> tuple[NDArray[np.int64], int]:
        """Each row's weight group (its class for classifiers, where LightGBM or sklearn weight
        classes; one group otherwise), shape (n,), and the number of groups."""
        if self.multiclass:
            return labels.astype(np.int64), self.n_classes
        if self.name == "binary":  # both classes, even where the rows hold one (a Dask partition)
            return (labels > 0).astype(np.int64), 2
        return np.zeros(labels.shape[0], dtype=np.int64), 1

    def init_score(
        self, labels: NDArray[np.float64], w: NDArray[np.float64], weighted: bool, rule: str = "lightgbm"
    ) -> NDArray[np.float64]:
        """LightGBM's ``BoostFromScore`` per class, shape (K,), from float32 ``labels`` (n,) and the
        float32 Dataset weights ``w`` (n,) (label weights excluded, as LightGBM does; sums
        sequential in double; the percentile rounded to float32, weighted if LightGBM had a weight
        vector: ``weighted``, by the release's ``rule``: :data:`PERCENTILE_RULES`). NaN where the
        weights sum to 0 (LightGBM refuses to train; a Dask partition of weight-0 rows, whose init
        score comes from the whole set)."""
        total = float(np.cumsum(w)[-1]) if w.size else 0.0
        if not total > 0:
            return np.full(self.n_classes if self.multiclass else 1, np.nan)
        if self.renewed:
            q = weighted_percentile(labels, w if weighted else None, self.alpha, rule)
            return np.array([float(np.float32(q))])
        if self.multiclass:
            share = np.bincount(labels.astype(np.int64), weights=w, minlength=self.n_classes) / total
            if self.name == "multiclass":
                return clog(np.maximum(share, K_EPSILON))
            return _logit(share, 1.0)
        if self.name == "binary":
            labels = (labels > 0).astype(np.float64)
        return self.init_from_mean(float(np.cumsum(labels * w)[-1]) / total)

    def init_from_mean(self, mean: float) -> NDArray[np.float64]:
        """``BoostFromScore`` of a single-output objective from the Dataset-weighted label mean
        (binary: of the 0/1 targets), shape (1,); for callers that hold the sums of a training set
        split in parts (:mod:`influence_gbdt.distributed`)."""
        if self.renewed or self.multiclass:
            raise UnsupportedModelError(
                f"objective {self.name!r}: its init score is not a function of the label mean."
            )
        if self.name in ("binary", "cross_entropy"):
            return _logit(np.array([mean]), self.loss.params["sigma"])
        if self.name in ("poisson", "gamma", "tweedie"):
            return np.array([math.log(mean) if mean > 0 else -math.inf])
        return np.array([mean])


def _logit(rate: NDArray[np.float64], sigma: float) -> NDArray[np.float64]:
    rate = np.clip(rate, K_EPSILON, 1.0 - K_EPSILON)
    return clog(rate / (1.0 - rate)) / sigma


def percentile_rule(version: str) -> str:
    """The weighted percentile (:data:`PERCENTILE_RULES`) of the LightGBM release ``version``; a
    version string that names no release is taken as current."""
    found = release(version)
    return "lightgbm_4.6" if found and found < (4, 7) else "lightgbm"


def weighted_percentile(
    values: NDArray[np.float64], w: NDArray[np.float64] | None, alpha: float, rule: str = "lightgbm"
) -> float:
    """LightGBM's ``PercentileFun`` (``w`` None: linear interpolation at ``(n - 1) alpha``) or
    ``WeightedPercentileFun`` of ``values`` (n,) (``src/objective/regression_objective.hpp``): from
    the first order statistic ``p`` whose cumulative weight exceeds ``alpha`` times the total, by
    ``rule`` (:data:`PERCENTILE_RULES`) 4.7's interpolation from the previous one when ``p``'s own
    weight is >= 1, or 4.4 to 4.6's from ``p``'s cumulative weight by the next one's weight when
    that is >= 1 (else ``p`` itself). ``values`` are float32 labels (``label_t``): LightGBM
    interpolates with their differences in float32."""
    n = values.size
    order = np.argsort(values, kind="stable")
    v = values[order]
    if n == 1:
        return float(v[0])
    if w is None:
        pos = (n - 1) * (1.0 - alpha)
        p = int(pos) + 1
        if p >= n:
            return float(v[0])
        bias = pos - (p - 1)
        hi, lo = v[n - p], v[n - 1 - p]  # descending positions p - 1 and p
        return float(hi - float(np.float32(hi - lo)) * bias)
    cdf = np.cumsum(w[order])
    t = cdf[-1] * alpha
    p = min(int(np.searchsorted(cdf, t, side="right")), n - 1)
    if p in (0, n - 1):
        return float(v[p])
    gap = float(np.float32(v[p] - v[p - 1]))
    if rule == "lightgbm_4.6":
        step = cdf[p + 1] - cdf[p]
        return float((t - cdf[p]) / step * gap + v[p - 1] if step >= 1.0 else v[p])
    step = cdf[p] - cdf[p - 1]
    return float(v[p - 1] + (t - cdf[p - 1]) / step * gap if step >= 1.0 else v[p - 1])


def resolve(header: str, param: Callable[[str, float], float], flags: dict[str, str]) -> Objective:
    """The :class:`Objective` of a model's ``objective=`` header line.

    Parameters
    ----------
    header : str
        The model text's objective line without ``objective=`` (``"multiclass num_class:3"``).
    param : callable
        ``param(name, default)``: the exact value of a numeric training parameter.
    flags : dict
        The model text's parameters (for boolean ones such as ``is_unbalance``).

    Raises
    ------
    UnsupportedModelError
        For the objectives refused in the module table, with why and what to do.
    """
    name, *options = header.split(" ")
    if not name:
        raise UnsupportedModelError(
            "LightGBM model trained with a custom objective (a Python callable): its gradients are not "
            "part of the model, so leaf values cannot be reproduced. Retrain with a built-in objective."
        )
    if name in _REFUSED:
        raise UnsupportedModelError(f"LightGBM objective {name!r} is not supported: {_REFUSED[name]}.")
    if "sqrt" in options:
        raise UnsupportedModelError(
            f"LightGBM objective {header!r}: reg_sqrt trains on sqrt-transformed labels and predicts "
            "their square; retrain with reg_sqrt=False."
        )
    if name in ("regression_l1", "quantile"):
        alpha = float(np.float32(param("alpha", 0.9))) if name == "quantile" else 0.5
        scale = 2.0 if name == "regression_l1" else 1.0  # the L1 test loss is |y - F|
        return Objective(name, Loss("quantile", params={"alpha": alpha, "scale": scale}), True, alpha)
    if name in ("multiclass", "multiclassova"):
        K = int(param("num_class", 1))
        if name == "multiclass":
            return Objective(name, Loss("softmax", n_outputs=K, params={"factor": K / (K - 1.0)}))
        label_weights = flags.get("is_unbalance") == "1" or param("scale_pos_weight", 1.0) != 1.0
        if label_weights or param("sigmoid", 1.0) != 1.0:
            raise UnsupportedModelError(
                "LightGBM objective 'multiclassova' with is_unbalance, scale_pos_weight or sigmoid != 1 "
                "is not supported: its label weights differ per class output, which influence_gbdt's "
                "per-row weights cannot express. Retrain without them (or with objective='multiclass')."
            )
        return Objective(name, Loss("one_vs_all", n_outputs=K))
    losses = {
        "regression": Loss("squared_error"),
        "huber": Loss("huber", params={"delta": param("alpha", 0.9), "outside_hessian": 1.0}),
        "fair": Loss("fair", params={"c": param("fair_c", 1.0)}),
        "poisson": Loss("poisson", params={"hessian_log_shift": param("poisson_max_delta_step", 0.7)}),
        "gamma": Loss("gamma"),
        "tweedie": Loss("tweedie", params={"power": param("tweedie_variance_power", 1.5)}),
        "binary": Loss("logloss", params={"sigma": param("sigmoid", 1.0)}),
        "cross_entropy": Loss("logloss", params={"complement32": 1.0}),
    }
    if name not in losses:
        raise UnsupportedModelError(f"LightGBM objective {name!r} is not supported.")
    return Objective(name, losses[name])


def label_weights(counts: NDArray[np.float64], unbalance: bool, scale_pos: float) -> NDArray[np.float64]:
    """LightGBM's binary label weights (``BinaryLogloss::Init``) for rows of class counts
    ``[negatives, positives]``, shape (m, 2) -> (m, 2)."""
    neg, pos = counts[:, 0], counts[:, 1]
    out = np.ones_like(counts)
    if unbalance:
        both = (neg > 0) & (pos > 0)
        safe_neg, safe_pos = np.maximum(neg, 1.0), np.maximum(pos, 1.0)
        out[:, 0] = np.where(both & (pos > neg), pos / safe_neg, 1.0)
        out[:, 1] = np.where(both & (pos <= neg), neg / safe_pos, 1.0)
    out[:, 1] *= scale_pos
    return out
