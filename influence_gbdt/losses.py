"""Losses in the margin: values and first, second and third derivatives, compiled with numba.

Conventions: the margin ``m`` is the raw score; ``g = dL/dm``, ``h = d2L/dm2``, ``k = d3L/dm3``.

- ``LOGLOSS`` (binary log loss, labels in [0, 1]): ``p = sigmoid(m)``, ``L = log(1 + e^m) - y m``,
  ``g = p - y``, ``h = p (1 - p)``, ``k = h (1 - 2p)``; with a hessian floor (XGBoost's 1e-16),
  ``h = max(h, floor)`` and ``k = 0`` where the floor is active.
- ``SQUARED_ERROR``: ``L = (m - y)^2 / 2``, ``g = m - y``, ``h = 1``, ``k = 0``.

The kernels cache the *point* ``z`` of a margin (``p`` for log loss, ``m`` for squared error),
from which derivatives cost no exponential.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from . import _jit as numba

LOGLOSS = 0
SQUARED_ERROR = 1
LOSS_CODES: dict[str, int] = {"logloss": LOGLOSS, "squared_error": SQUARED_ERROR}

_jit = numba.njit(cache=True, nogil=True)


@_jit
def point(loss: int, m: float) -> float:
    """The cached point of margin ``m``: sigmoid(m) for log loss, ``m`` itself for squared error."""
    if loss == LOGLOSS:
        if m >= 0.0:
            return 1.0 / (1.0 + math.exp(-m))
        e = math.exp(m)
        return e / (1.0 + e)
    return m


@_jit
def derivatives(loss: int, y: float, z: float, floor: float) -> tuple[float, float, float]:
    """``(g, h, k)`` at point ``z`` (see :func:`point`) for label ``y``."""
    if loss == LOGLOSS:
        h = z * (1.0 - z)
        if h < floor:
            return z - y, floor, 0.0
        return z - y, h, h * (1.0 - 2.0 * z)
    return z - y, 1.0, 0.0


@_jit
def weighted_gh(loss: int, g: float, h: float, w: float, f32: bool) -> tuple[float, float]:
    """One row's weighted ``(w g, w h)`` from its derivatives, as the booster sums them per leaf.

    With ``f32`` both are rounded to float32 the way LightGBM computes them (``score_t = float``):
    ``f32(w g)``, ``f32(w h)`` for log loss, ``f32(f32(g) w)``, ``f32(w h)`` for squared error.
    """
    if not f32:
        return w * g, w * h
    if loss == LOGLOSS:
        return np.float64(np.float32(w * g)), np.float64(np.float32(w * h))
    return np.float64(np.float32(np.float64(np.float32(g)) * w)), np.float64(np.float32(w * h))


@_jit
def value(loss: int, y: float, m: float) -> float:
    """Loss of margin ``m`` for label ``y``, computed without overflow."""
    if loss == LOGLOSS:
        return max(m, 0.0) + math.log1p(math.exp(-abs(m))) - y * m
    d = m - y
    return 0.5 * d * d


@numba.njit(cache=True, parallel=True)
def values(loss: int, y: NDArray[np.float64], m: NDArray[np.float64]) -> NDArray[np.float64]:
    """Elementwise :func:`value` over arrays of equal shape (1-d)."""
    out = np.empty_like(m)
    for j in numba.prange(m.shape[0]):
        out[j] = value(loss, y[j], m[j])
    return out


@numba.njit(cache=True, parallel=True)
def gradients(loss: int, y: NDArray[np.float64], m: NDArray[np.float64]) -> NDArray[np.float64]:
    """Elementwise ``dL/dm`` over 1-d arrays of equal shape."""
    out = np.empty_like(m)
    for j in numba.prange(m.shape[0]):
        out[j] = point(loss, m[j]) - y[j]
    return out


def constant_from_mean(loss: int, mean: NDArray[np.float64]) -> NDArray[np.float64]:
    """The loss-minimising constant margin given the weighted label mean (elementwise).

    The mean itself for squared error, its logit for log loss (clipped to [1e-15, 1 - 1e-15] so
    that a single-class label set stays finite, as LightGBM does).
    """
    if loss == LOGLOSS:
        mean = np.clip(mean, 1e-15, 1.0 - 1e-15)
        return np.log(mean / (1.0 - mean))
    return mean


def optimal_constant(loss: int, y: NDArray[np.float64], w: NDArray[np.float64]) -> float:
    """The constant margin minimising ``sum_j w_j L(y_j, c)`` (boost_from_average)."""
    return float(constant_from_mean(loss, np.array([np.dot(w, y) / w.sum()]))[0])
