"""How the initial margin (base score) follows the training data: its change when a row is deleted
and its derivative with respect to a row's weight. Private: used by the engine.

Every rule that re-estimates the base margin is a ratio of dataset-weighted row sums, mapped::

    b = T(r),   r = sum_j d_j p_j / sum_j d_j q_j      (d = dataset weights)

- ``"mean"`` (boost_from_average): ``p = y``, ``q = 1``, ``T`` = the loss's mean link;
- ``"newton_step"`` (one Newton step from ``base_anchor``, XGBoost's intercept with
  ``scale_pos_weight``): ``p = g(y, anchor)``, ``q = h(y, anchor)``, ``T(r) = anchor - r``.

Deleting row ``i`` removes its terms and rescales each group's sums by its new dataset factor;
the derivative follows from ``dr/dv_i = (a_i (p_i - r q_i) + sum_g da_g/dv_i (P_g - r Q_g) / a_g) / Q``
with ``a`` the dataset factors and ``P_g, Q_g`` the group sums.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .ensemble import TreeEnsemble


class BaseMargin:
    """The base-margin rule of an ensemble, evaluated on its training data.

    Parameters
    ----------
    ensemble : TreeEnsemble
    """

    def __init__(self, ensemble: TreeEnsemble) -> None:
        self.ensemble = e = ensemble
        self.refits = e.base_rule != "fixed"
        self._derivative: NDArray[np.float64] | None = None
        if not self.refits:
            return
        if e.base_rule == "mean":
            self._p, self._q = e.y, np.ones(e.n_rows)
        else:  # newton_step
            g, h = e.loss.grad_hess(e.y, np.broadcast_to(e.base_anchor, (e.n_rows, e.n_outputs)))
            self._p, self._q = g[:, 0], h[:, 0]
        d = e.dataset_weight
        self._P = np.bincount(e.weight_group, d * self._p, e.n_groups).astype(np.float64)
        self._Q = np.bincount(e.weight_group, d * self._q, e.n_groups).astype(np.float64)

    def _map(self, r: NDArray[np.float64]) -> NDArray[np.float64]:
        e = self.ensemble
        if e.base_rule == "mean":
            return e.loss.mean_link(r)
        return e.base_anchor[0] - r

    def _slope(self, r: float) -> float:
        e = self.ensemble
        if e.base_rule == "mean":
            return float(e.loss.mean_link_slope(np.array([r]))[0])
        return -1.0

    def shift_without(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        """New minus stored base margin with each row of ``idx`` deleted, shape (B, K).

        Where the deletion changes the dataset factors, each group's sums scale by new / old factor
        (exact up to the float32 rounding of the dataset weights). The difference is taken to the
        *stored* margin: a retrained booster stores its new constant rounded as the old one was
        (CatBoost: float32), so this matches true retraining to one rounding.
        """
        e = self.ensemble
        if not self.refits:
            return np.zeros((idx.size, e.n_outputs))
        own = np.zeros((idx.size, e.n_groups))
        own[np.arange(idx.size), e.weight_group[idx]] = 1.0
        d_i = e.dataset_weight[idx, None]
        old = np.where(e.dataset_factor > 0, e.dataset_factor, 1.0)
        scale = (np.ones((idx.size, e.n_groups)) if e.dataset_factor_without is None
                 else e.dataset_factor_without[idx] / old[None, :])
        num = ((self._P[None, :] - own * d_i * self._p[idx, None]) * scale).sum(1)
        den = ((self._Q[None, :] - own * d_i * self._q[idx, None]) * scale).sum(1)
        return (self._map(num / den) - e.base_margin[0])[:, None]

    def derivative(self) -> NDArray[np.float64]:
        """d base margin / d v_i for every training row, shape (n, K) (zeros for a fixed base)."""
        e = self.ensemble
        if not self.refits:
            return np.zeros((e.n_rows, e.n_outputs))
        if self._derivative is None:
            total = float(self._Q.sum())
            r = float(self._P.sum()) / total
            d_r = e.dataset_factor[e.weight_group] * (self._p - r * self._q)
            if e.dataset_factor_derivative is not None:
                safe = np.where(e.dataset_factor > 0, e.dataset_factor, 1.0)
                per_unit = np.where(e.dataset_factor > 0, 1.0 / safe, 0.0)
                d_r = d_r + e.dataset_factor_derivative @ ((self._P - r * self._Q) * per_unit)
            self._derivative = (self._slope(r) * d_r / total)[:, None]
        return self._derivative
