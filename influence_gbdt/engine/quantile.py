"""Renewed leaves (numba): a leaf's value is a quantile of its rows' residuals. Private to the engine.

For L1 / quantile objectives the boosters grow a tree with pinball gradients and then *replace*
each leaf value by ``learning_rate * Q_alpha(residuals of the leaf's rows)``, residual ``y - m``
at the margins the tree starts from. The three boosters define the (weighted) quantile
differently; each definition is reproduced here, measured against the boosters' stored leaves
(project notes: xgboost-facts Q3/Q5, lightgbm-facts section 4, catboost-facts section 7):

- ``QUANTILE_XGBOOST``: residuals rounded to float32. Without weights the (n + 1) rule with
  linear interpolation (``x = alpha (n + 1)``, between order statistics ``floor(x) - 1`` and the
  next; the extremes below ``1 / (n + 1)`` and above ``n / (n + 1)``); with weights a step function
  of the float32 cumulative weight (the first order statistic whose cumulative weight reaches
  ``alpha`` times the total).
- ``QUANTILE_LIGHTGBM``: residuals in double (the init score's float32 labels: their differences
  in float32, ``label32``). Without weights linear interpolation at position
  ``(n - 1) alpha``; with weights (4.7.0) the first order statistic ``p`` whose cumulative weight
  exceeds ``alpha W``, interpolated from the previous one by ``(alpha W - C[p-1]) / w[p]`` when
  ``w[p] >= 1`` (else the previous one itself).
- ``QUANTILE_LIGHTGBM_46``: LightGBM 4.4 to 4.6, as ``QUANTILE_LIGHTGBM`` but for the weighted
  interpolation (``WeightedPercentileFun`` before 4.7): from the same ``p`` it returns
  ``v[p-1] + (alpha W - C[p]) / w[p+1] * (v[p] - v[p-1])`` when ``w[p+1] >= 1`` (an
  extrapolation below ``v[p-1]``: ``alpha W < C[p]``), else ``v[p]`` itself.
- ``QUANTILE_CATBOOST`` (``leaf_estimation_method='Exact'``): residuals rounded to float32; the
  smallest order statistic whose cumulative weight reaches ``alpha W`` (a bisection from 100 rows
  on, which differs only at 0), then ``-delta`` if the weight below it plus ``alpha`` times the
  weight equal to it reach ``alpha W``, else ``+delta``; the result rounded to float32. Its leaves
  weight every row 1 (CatBoost ignores sample weights there); its quantile base uses the weights.

Derivatives (what LeafInfluence differentiates): the quantile is piecewise linear in the
residuals -- it follows one or two order statistics, with coefficients ``coef`` -- and, for
LightGBM's weighted interpolation only, piecewise linear in the weights: ``dQ/dw_j = slope *
(alpha - [j before q] - c [j is q])`` with ``c`` the interpolation fraction and the pivot ``q = p``,
``slope = (v[p] - v[p-1]) / w[p]`` (4.7) or ``q = p + 1``, ``slope = (v[p] - v[p-1]) / w[p+1]``
(4.4 to 4.6). Every other definition is a step function of the weights (derivative 0). At the
points where the selected order statistic changes the quantile is not differentiable; those are a
null set of weights and margins.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba

QUANTILE_XGBOOST = 0
QUANTILE_LIGHTGBM = 1
QUANTILE_CATBOOST = 2
QUANTILE_LIGHTGBM_46 = 3
METHODS = {"xgboost": QUANTILE_XGBOOST, "lightgbm": QUANTILE_LIGHTGBM, "catboost": QUANTILE_CATBOOST,
           "lightgbm_4.6": QUANTILE_LIGHTGBM_46}

_jit = numba.njit(cache=True, nogil=True)
#: Functions only compiled code calls: no Python wrapper to compile (see ``_jit.njit``).
_internal = numba.njit(cache=True, nogil=True, internal=True)
_DBL_EPS = 2.220446049250313e-16


@_internal
def _f32(x: float) -> float:
    return np.float64(np.float32(x))


@_internal
def residual(method: int, y: float, m: float) -> float:
    """A row's residual ``y - m`` as the booster computes it (float32 for XGBoost and CatBoost)."""
    return y - m if method == QUANTILE_LIGHTGBM or method == QUANTILE_LIGHTGBM_46 else _f32(y - m)


@_internal
def _diff(a: float, b: float, label32: bool) -> float:
    """``a - b``, rounded to float32 where ``label32`` (``a``, ``b`` float32 values that LightGBM
    subtracts as ``label_t``)."""
    return _f32(a - b) if label32 else a - b


@_internal
def _kth(r: NDArray[np.float64], k: int) -> int:
    """The position in ``r`` (n,) of its ``k``-th smallest value in the stable ascending order
    (ties by position: ``np.argsort(r, kind="mergesort")[k]``), in O(n): the value by
    ``np.partition``, then its ``k - (values below it)``-th occurrence. Measured in the replay of
    ``LGBMRegressor(objective="quantile")`` on Adult: see docs/performance.md (stop 65)."""
    v = np.partition(r, k)[k]
    below = 0
    for i in range(r.shape[0]):
        if r[i] < v:
            below += 1
    left = k - below
    for i in range(r.shape[0]):
        if r[i] == v:
            if left == 0:
                return i
            left -= 1
    return -1  # not reached: v is one of r's values


@_internal
def quantile(  # noqa: C901 -- one branch per booster definition
    method: int, r: NDArray[np.float64], w: NDArray[np.float64], alpha: float, weighted: bool,
    delta: float, sel: NDArray[np.int64], coef: NDArray[np.float64], wd: NDArray[np.float64],
    order: NDArray[np.int64], label32: bool,
) -> float:
    """The booster's ``alpha`` quantile of residuals ``r`` (n,) with weights ``w`` (n,).

    ``weighted``: the booster used a weight vector (XGBoost and LightGBM take another path then,
    even for all-one weights). ``label32``: ``r`` are float32 labels, whose differences LightGBM
    interpolates with in float32 (its init score's percentile of ``label_t``; leaves take residuals
    in double). Outputs: ``order`` (n,) the stable ascending order of ``r`` where
    the definition sums weights in that order (XGBoost's and LightGBM's weighted quantiles,
    CatBoost's with weights other than 1), else left as it was (the order statistics are then
    selected, :func:`_kth`, in O(n) instead of sorted); ``sel`` (2,) positions in ``r`` of the
    order statistics the quantile follows (-1: none) and ``coef`` (2,) ``dQ / dr[sel]``; ``wd``
    (4,) = ``(slope, alpha, c, q)`` of the weight derivative, ``q`` the position of its pivot in
    ``order`` (slope 0: none; see :func:`weight_slope`). Returns 0 for an empty leaf.
    """
    n = r.shape[0]
    sel[:] = -1
    coef[:] = 0.0
    wd[:] = 0.0
    if n == 0:
        return 0.0
    if method == QUANTILE_CATBOOST:  # its -/+ delta applies to a single row too
        return _catboost(r, w, order, alpha, delta, sel, coef)
    if n == 1:
        sel[0], coef[0] = 0, 1.0
        return r[0]
    if method == QUANTILE_XGBOOST and not weighted:
        if alpha <= 1.0 / (n + 1):
            sel[0], coef[0] = _kth(r, 0), 1.0
            return r[sel[0]]
        if alpha >= n / (n + 1.0):
            sel[0], coef[0] = _kth(r, n - 1), 1.0
            return r[sel[0]]
        x = alpha * (n + 1)
        k = math.floor(x) - 1
        d = x - 1 - k
        sel[0], sel[1], coef[0], coef[1] = _kth(r, k), _kth(r, k + 1), 1.0 - d, d
        lo, hi = r[sel[0]], r[sel[1]]
        return _f32(lo + d * _f32(hi - lo))
    if not weighted:  # LightGBM, linear interpolation at (n - 1) alpha over the ascending order
        fp = (n - 1) * (1.0 - alpha)
        p = int(fp) + 1
        if p >= n:
            sel[0], coef[0] = _kth(r, 0), 1.0
            return r[sel[0]]
        b = fp - (p - 1)
        upper, lower = _kth(r, n - p), _kth(r, n - 1 - p)  # descending positions p - 1 and p
        sel[0], sel[1], coef[0], coef[1] = upper, lower, 1.0 - b, b
        return r[upper] - _diff(r[upper], r[lower], label32) * b
    order[:] = np.argsort(r, kind="mergesort")
    if method == QUANTILE_XGBOOST:  # weighted: a step function of the float32 cumulative weight
        cdf = np.empty(n)
        acc32 = np.float32(0.0)
        for i in range(n):
            acc32 = np.float32(acc32 + np.float32(w[order[i]]))
            cdf[i] = acc32
        thresh = _f32(cdf[n - 1] * alpha)
        i = 0
        while i < n - 1 and cdf[i] < thresh:
            i += 1
        sel[0], coef[0] = order[i], 1.0
        return r[order[i]]
    # LightGBM weighted
    cdf = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc += np.float64(np.float32(w[order[i]]))
        cdf[i] = acc
    t = cdf[n - 1] * alpha
    p = 0
    while p < n - 1 and not cdf[p] > t:
        p += 1
    if p == 0 or p == n - 1:
        sel[0], coef[0] = order[p], 1.0
        return r[order[p]]
    v1, v2 = r[order[p - 1]], r[order[p]]
    step = _diff(v2, v1, label32)
    if method == QUANTILE_LIGHTGBM_46:  # p < n - 1 here, so p + 1 is a row
        w_next = cdf[p + 1] - cdf[p]
        if w_next >= 1.0:
            c = (t - cdf[p]) / w_next
            sel[0], sel[1], coef[0], coef[1] = order[p - 1], order[p], 1.0 - c, c
            wd[0], wd[1], wd[2], wd[3] = step / w_next, alpha, c, p + 1
            return c * step + v1
        sel[0], coef[0] = order[p], 1.0
        return v2
    w_p = cdf[p] - cdf[p - 1]
    if w_p >= 1.0:
        c = (t - cdf[p - 1]) / w_p
        sel[0], sel[1], coef[0], coef[1] = order[p - 1], order[p], 1.0 - c, c
        wd[0], wd[1], wd[2], wd[3] = step / w_p, alpha, c, p
        return v1 + c * step
    sel[0], coef[0] = order[p - 1], 1.0
    return v1


@_internal
def _catboost_stat(r: NDArray[np.float64], w: NDArray[np.float64], order: NDArray[np.int64],
                   need: float) -> int:
    """The position in ``r`` of :func:`_catboost`'s order statistic: the first in the stable
    ascending order whose cumulative weight reaches ``need``. Its leaves weigh every row 1: then
    it is selected (:func:`_kth`), the cumulative weight of the first ``i + 1`` being ``i + 1``;
    ``order`` is filled only for other weights."""
    n = r.shape[0]
    unit = True
    for j in range(n):
        unit = unit and w[j] == 1.0
    if unit:
        i, acc = 0, 1.0
        while i < n - 1 and acc < need - _DBL_EPS:
            i += 1
            acc += 1.0
        return _kth(r, i)
    order[:] = np.argsort(r, kind="mergesort")
    i, acc = 0, w[order[0]]
    while i < n - 1 and acc < need - _DBL_EPS:
        i += 1
        acc += w[order[i]]
    return order[i]


@_internal
def _catboost(
    r: NDArray[np.float64], w: NDArray[np.float64], order: NDArray[np.int64], alpha: float, delta: float,
    sel: NDArray[np.int64], coef: NDArray[np.float64],
) -> float:
    """CatBoost's weighted sample quantile (no interpolation), then -/+ delta, float32."""
    n = r.shape[0]
    total = 0.0
    for j in range(n):
        total += w[j]
    need = total * alpha
    at = _catboost_stat(r, w, order, need)
    q = r[at]
    if n >= 100 and q == 0.0:  # CatBoost bisects from 100 rows on: it lands just above 0 there
        lo, hi = r[_kth(r, 0)] - _DBL_EPS, r[_kth(r, n - 1)]
        for _ in range(100):
            mid = (lo + hi) / 2
            below = 0.0
            for j in range(n):
                if r[j] <= mid:
                    below += w[j]
            if below < need - _DBL_EPS:
                lo = mid
            else:
                hi = mid
        q = hi
    sel[0], coef[0] = at, 1.0
    if delta > 0.0:
        less, equal = 0.0, 0.0
        for j in range(n):
            if r[j] < q:
                less += w[j]
            elif r[j] == q:
                equal += w[j]
        q = q - delta if less + equal * alpha >= need - _DBL_EPS else q + delta
    return _f32(q)


@_jit
def quantile_without(
    method: int, values: NDArray[np.float64], w: NDArray[np.float64], alpha: float, weighted: bool,
    delta: float, label32: bool, idx: NDArray[np.int64],
) -> NDArray[np.float64]:
    """The quantile of ``values`` (n,) with each row of ``idx`` (B,) deleted in turn, shape (B,)
    (``label32``: see :func:`quantile`)."""
    n = values.shape[0]
    out = np.empty(idx.shape[0])
    sel = np.empty(2, dtype=np.int64)
    coef = np.empty(2)
    wd = np.empty(4)
    order = np.empty(n - 1, dtype=np.int64)
    v = np.empty(n - 1)
    ww = np.empty(n - 1)
    for b in range(idx.shape[0]):
        k = 0
        for j in range(n):
            if j != idx[b]:
                v[k], ww[k] = values[j], w[j]
                k += 1
        out[b] = quantile(method, v, ww, alpha, weighted, delta, sel, coef, wd, order, label32)
    return out


@_jit
def quantile_weight_derivative(
    method: int, values: NDArray[np.float64], w: NDArray[np.float64], alpha: float, weighted: bool,
    delta: float, label32: bool,
) -> NDArray[np.float64]:
    """``dQ / dw_j`` of the quantile of ``values`` (n,) for every row, shape (n,) (``label32``: see
    :func:`quantile`)."""
    n = values.shape[0]
    sel = np.empty(2, dtype=np.int64)
    coef = np.empty(2)
    wd = np.empty(4)
    order = np.empty(n, dtype=np.int64)
    quantile(method, values, w, alpha, weighted, delta, sel, coef, wd, order, label32)
    out = np.zeros(n)
    if wd[0] == 0.0:  # a step function of the weights (and ``order`` perhaps not filled)
        return out
    for position in range(n):
        out[order[position]] = weight_slope(wd, position)
    return out


@_internal
def weight_slope(wd: NDArray[np.float64], position: int) -> float:
    """``dQ / dw`` of the row at ``position`` in the sorted order, from the descriptor ``wd`` of
    :func:`quantile` (``wd[3]`` is the position ``q`` of the module docstring)."""
    if wd[0] == 0.0:
        return 0.0
    before = 1.0 if position < wd[3] else 0.0
    at = 1.0 if position == wd[3] else 0.0
    return wd[0] * (wd[1] - before - at * wd[2])
