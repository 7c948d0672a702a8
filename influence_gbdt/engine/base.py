"""How the initial margin (base score) follows the training data: its change when a row is deleted
and its derivative with respect to a row's weight. Private to the engine.

Every rule that re-estimates the base margin is a ratio of dataset-weighted row sums, mapped::

    b = T(r),   r_c = sum_j d_j p_jc / sum_j d_j q_jc      (d = dataset weights, c = output)

- ``"mean"`` (boost_from_average): ``p`` = the label vector (class indicators for multiclass),
  ``q = 1``, ``T`` = the mean link (logit, log, log of class shares, ...);
- ``"newton_step"`` (one Newton step from ``base_anchor``, XGBoost's intercept with
  ``scale_pos_weight`` and for pseudo-Huber): ``p = g(y, anchor)``, ``q = h(y, anchor)``,
  ``T(r) = anchor - r``, the hessian sum floored at :data:`NEWTON_HESSIAN_FLOOR` (XGBoost's
  ``CalcUnregularizedWeight``: ``-G / max(H, kRtEps)``); where it is floored, ``r`` is ``P / floor``
  and its derivative takes no ``q`` term.

The ``"quantile"`` rule (L1 / quantile objectives) is instead the booster's weighted quantile of
the labels (:mod:`.quantile`), recomputed without each deleted row; its derivative
in the weights is zero except where that quantile interpolates by weight (LightGBM).

Deleting row ``i`` removes its terms and rescales each group's sums by its new dataset factor;
the derivative follows from ``dr/dv_i = (a_i (p_i - r q_i) + sum_g da_g/dv_i (P_g - r Q_g) / a_g) / Q``
with ``a`` the dataset factors and ``P_g, Q_g`` the group sums, then ``db = dT/dr . dr``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..ensemble import TreeEnsemble
from ..losses import ONE_VS_ALL, SOFTMAX, sigmoid32
from .quantile import METHODS, quantile_weight_derivative, quantile_without


def _group_sums(groups: NDArray[np.int64], values: NDArray[np.float64], n_groups: int) -> NDArray[np.float64]:
    """Per group and column: the sum of ``values`` (n, K), shape (G, K)."""
    out = np.zeros((n_groups, values.shape[1]))
    np.add.at(out, groups, values)
    return out


#: The least hessian sum of the ``"newton_step"`` rule's step (XGBoost's ``kRtEps``): a pseudo-Huber
#: model on labels far above its ``huber_slope`` (hessians ~ slope^3 / |y|^3) reaches it on a few
#: hundred rows of labels ~ 1,000, and XGBoost then stores ``-G / 1e-6``.
NEWTON_HESSIAN_FLOOR = 1e-6


def _rounded(r: NDArray[np.float64], float32: bool) -> NDArray[np.float64]:
    """``r`` rounded to float32 where the booster computes its estimate (the mean, the Newton step,
    the quantile) in float32 (:attr:`TreeEnsemble.float32_base`)."""
    return r.astype(np.float32).astype(np.float64) if float32 else r


class BaseMargin:
    """The base-margin rule of an ensemble, evaluated on its training data.

    Parameters
    ----------
    ensemble : TreeEnsemble
    sums : (P, Q), optional
        The per-group sums ``sum_j d_j p_j`` and ``sum_j d_j q_j``, each (G, K), over a training set
        of which ``ensemble`` holds only some rows (a partition, :mod:`influence_gbdt.distributed`);
        default: over ``ensemble``'s rows (:attr:`sums`).
    """

    def __init__(self, ensemble: TreeEnsemble,
                 sums: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None) -> None:
        self.ensemble = e = ensemble
        self.refits = e.base_rule != "fixed"
        self._derivative: NDArray[np.float64] | None = None
        if not self.refits or e.base_rule == "quantile":
            return
        K = e.n_outputs
        if e.base_rule == "newton_step":
            self._p, self._q = e.loss.grad_hess(e.y, np.broadcast_to(e.base_anchor, (e.n_rows, K)))
        else:
            if e.loss.code in (SOFTMAX, ONE_VS_ALL):
                self._p = (e.y[:, :1] == np.arange(K)[None, :]).astype(np.float64)
            else:
                self._p = e.y.astype(np.float64)
            self._q = np.ones((e.n_rows, K))
        d = e.dataset_weight[:, None]
        #: Each row's terms of the ratio's sums, (n, K) each.
        self._dp, self._dq = d * self._p, d * self._q
        if e.float32_base_terms:
            self._dp = self._dp.astype(np.float32).astype(np.float64)
            self._dq = self._dq.astype(np.float32).astype(np.float64)
        self._P = _group_sums(e.weight_group, self._dp, e.n_groups)
        self._Q = _group_sums(e.weight_group, self._dq, e.n_groups)
        if sums is not None:
            self._P, self._Q = sums

    @property
    def sums(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The ratio's per-group sums (P, Q) over the training rows, each (G, K) (rules "mean" and
        "newton_step" only)."""
        return self._P, self._Q

    def _quantile_args(
        self,
    ) -> tuple[int, NDArray[np.float64], NDArray[np.float64], float, bool, float, bool]:
        """The arguments of :mod:`.quantile` for the labels' quantile (a float32 estimate's, as
        LightGBM's percentile of float32 labels, interpolates with float32 differences)."""
        e = self.ensemble
        return (METHODS[e.quantile_method], np.ascontiguousarray(e.y[:, 0]), e.dataset_weight,
                float(e.loss.params.get("alpha", 0.5)), e.quantile_weighted, e.quantile_delta,
                e.float32_base)

    def _denominator(self, Q: NDArray[np.float64]) -> NDArray[np.float64]:
        """The ratio's denominator from its sums ``Q`` (any shape): floored for the Newton step."""
        if self.ensemble.base_rule == "newton_step":
            return np.maximum(Q, NEWTON_HESSIAN_FLOOR)
        return Q

    def _map(self, r: NDArray[np.float64]) -> NDArray[np.float64]:
        """``T(r)`` for ratios ``r`` of shape (B, K)."""
        e = self.ensemble
        if e.base_rule == "newton_step":
            step = e.base_anchor[None, :] - r
            if e.base_link == "logit32":  # XGBoost stores the step as its float32 probability
                return e.loss.mean_link(sigmoid32(step), e.base_link)
            return step
        return e.loss.mean_link(r if e.n_outputs > 1 else r[:, 0], e.base_link).reshape(r.shape)

    def _jacobian(self, r: NDArray[np.float64]) -> NDArray[np.float64]:
        """``dT/dr`` at one ratio vector (K,), shape (K, K)."""
        e = self.ensemble
        if e.base_rule == "newton_step":
            return -np.eye(e.n_outputs)
        return e.loss.mean_link_jacobian(r, e.base_link)

    def estimate(self) -> NDArray[np.float64]:
        """The base margin the rule gives on exactly this ensemble's rows, shape (K,) (the stored
        one where the base is fixed): where retraining on these rows would start. Rounded to
        float32 where the booster's estimate is (as :meth:`shift_without`)."""
        e = self.ensemble
        if not self.refits:
            return e.base_margin.copy()
        if e.base_rule == "quantile":
            method, values, w, alpha, weighted, delta, label32 = self._quantile_args()
            # quantile_without deletes one row in turn: an extra row, deleted, leaves exactly these
            extra = np.array([values.size], dtype=np.int64)
            q = quantile_without(method, np.append(values, 0.0), np.append(w, 0.0), alpha, weighted, delta,
                                 label32, extra)
            return _rounded(q, e.float32_base)
        r = self._P.sum(0) / self._denominator(self._Q.sum(0))
        return self._map(_rounded(r[None, :], e.float32_base))[0]

    def shift_without(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        """New minus stored base margin with each row of ``idx`` deleted, shape (B, K).

        Where the deletion changes the dataset factors, each group's sums scale by new / old factor
        (exact up to the float32 rounding of the dataset weights). The difference is taken to the
        *stored* margin; where the booster's estimate is a float32 (``float32_base``: CatBoost's mean
        and quantile, LightGBM's percentile, XGBoost's mean, Newton step and quantile), the new one
        is rounded so before its link, as retraining computes it; the deleted row takes out of the
        sums the terms they hold (``float32_base_terms``).
        """
        e = self.ensemble
        if not self.refits:
            return np.zeros((idx.size, e.n_outputs))
        if e.base_rule == "quantile":
            q = quantile_without(*self._quantile_args(), np.ascontiguousarray(idx, dtype=np.int64))
            return (_rounded(q, e.float32_base) - e.base_margin[0])[:, None]
        own = np.zeros((idx.size, e.n_groups))
        own[np.arange(idx.size), e.weight_group[idx]] = 1.0
        old = np.where(e.dataset_factor > 0, e.dataset_factor, 1.0)
        scale = (np.ones((idx.size, e.n_groups)) if e.dataset_factor_without is None
                 else e.dataset_factor_without[idx] / old[None, :])[:, :, None]
        own3 = own[:, :, None]
        num = ((self._P[None] - own3 * self._dp[idx, None, :]) * scale).sum(1)
        den = ((self._Q[None] - own3 * self._dq[idx, None, :]) * scale).sum(1)
        return self._map(_rounded(num / self._denominator(den), e.float32_base)) - e.base_margin[None, :]

    def derivative(self) -> NDArray[np.float64]:
        """d base margin / d v_i for every training row, shape (n, K) (zeros for a fixed base)."""
        e = self.ensemble
        if not self.refits:
            return np.zeros((e.n_rows, e.n_outputs))
        if self._derivative is None and e.base_rule == "quantile":
            slope = quantile_weight_derivative(*self._quantile_args())
            self._derivative = (slope * e.dataset_factor[e.weight_group])[:, None]
        if self._derivative is None:
            total = self._Q.sum(0)
            free = self._denominator(total) == total  # (K,): where the denominator moves with the rows
            total = self._denominator(total)
            r = self._P.sum(0) / total
            r_free = (r * free)[None, :]
            d_r = e.dataset_factor[e.weight_group, None] * (self._p - r_free * self._q)
            if e.dataset_factor_derivative is not None:
                safe = np.where(e.dataset_factor > 0, e.dataset_factor, 1.0)
                per_unit = np.where(e.dataset_factor > 0, 1.0 / safe, 0.0)[:, None]
                d_r = d_r + e.dataset_factor_derivative @ ((self._P - r_free * self._Q) * per_unit)
            self._derivative = (d_r / total[None, :]) @ self._jacobian(r).T
        return self._derivative


def products(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """``a @ b.T`` for ``a`` (B, k) and ``b`` (n, k) with a small ``k``, each entry summed over
    ``k`` in order, so that it does not depend on how many rows ``a`` has (a BLAS product may sum
    in another order, by a last bit, for another B: scores would then change with the thread
    count, which splits the test points into other batches)."""
    out = a[:, :1] * b[None, :, 0]
    for c in range(1, a.shape[1]):
        out += a[:, c : c + 1] * b[None, :, c]
    return out
