"""Losses in the margin, written once and shared by every adapter.

A loss is named by a :class:`Loss` (its name and parameters). The engine's compiled kernels see
it as an integer ``code`` plus a float64 parameter vector ``prm`` and call the per-row primitives
below; Python code uses the vectorized helpers at the end of the module.

Conventions
-----------
``m`` is a row's raw margin, a vector of ``K`` outputs (``K = 1`` for binary and regression
models). ``g = dL/dm`` is the booster's gradient and ``h`` the *booster's* hessian diagonal (the
second derivative, possibly floored or scaled as the booster computes it: it enters Newton leaf
steps only). Derivatives of ``g`` and ``h`` with respect to the margins are the true ones:

- ``vjp``: ``out = sum_c beta_c * dg_c/dm + gamma_c * dh_c/dm`` (reverse mode);
- ``jvp``: ``dg_c = dg_c/dm . dm`` and ``dh_c = dh_c/dm . dm`` (forward mode).

Each primitive takes the row's *point* ``z``, a short state vector computed once from the margin
by :func:`point` (e.g. ``p`` and ``1 - p`` for log loss, both computed without cancellation), so
that several derivatives of one row cost one exponential.

Losses (``prm[0]`` is always the hessian floor: ``h = max(h, floor)`` and ``dh = 0`` where the
floor is active; 0 means none):

- ``logloss``: binary log loss on labels in [0, 1] (0/1 classes or probabilities),
  ``L = log(1 + e^m) - y m``, ``g = p - y``, ``h = p (1 - p)``, ``p = sigmoid(m)``.
- ``squared_error``: ``L = (m - y)^2 / 2``, ``g = m - y``, ``h = 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _jit as numba
from .errors import InputError

LOGLOSS = 0
SQUARED_ERROR = 1

_jit = numba.njit(cache=True, nogil=True)


@dataclass(frozen=True)
class Loss:
    """A loss with its parameters, as the engine models it.

    Parameters
    ----------
    name : str
        One of :data:`LOSSES`.
    hessian_floor : float
        Lower bound the booster puts on its hessian (XGBoost: 1e-16 for log loss); 0 for none.
    """

    name: str
    hessian_floor: float = 0.0
    code: int = field(init=False)
    n_outputs: int = field(init=False)

    def __post_init__(self) -> None:
        if self.name not in _CODES:
            raise InputError(f"loss must be one of {sorted(_CODES)}, got {self.name!r}.")
        if not (self.hessian_floor >= 0 and math.isfinite(self.hessian_floor)):
            raise InputError(f"hessian_floor must be a finite number >= 0, got {self.hessian_floor}.")
        object.__setattr__(self, "code", _CODES[self.name])
        object.__setattr__(self, "n_outputs", 1)

    @property
    def params(self) -> NDArray[np.float64]:
        """The parameter vector ``prm`` the kernels read (``prm[0]`` = hessian floor)."""
        return np.array([self.hessian_floor], dtype=np.float64)

    @property
    def state_size(self) -> int:
        """Length of a row's point ``z`` (see :func:`point`)."""
        return 2 if self.code == LOGLOSS else 1

    def check_labels(self, y: NDArray[np.float64], what: str = "labels") -> None:
        """Raise :class:`InputError` if ``y`` (n,) holds values outside the loss's domain."""
        if not np.all(np.isfinite(y)):
            raise InputError(f"The {what} contain NaN or infinite values: drop or fix those rows first.")
        if self.code == LOGLOSS and y.size and (y.min() < 0 or y.max() > 1):
            raise InputError(f"Log-loss {what} must lie in [0, 1] (0/1 classes or probabilities).")

    def values(self, y: NDArray[np.float64], margin: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per-row loss of margins ``margin`` (m,) or (m, K) for labels ``y`` (m,); shape (m,)."""
        return _values(self.code, self.params, _as_float(y), _as_2d(margin))

    def gradients(self, y: NDArray[np.float64], margin: NDArray[np.float64]) -> NDArray[np.float64]:
        """``dL/dm`` per row, shape (m, K)."""
        return self.grad_hess(y, margin)[0]

    def grad_hess(
        self, y: NDArray[np.float64], margin: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The booster's gradient and hessian diagonal per row, each shape (m, K)."""
        return _grad_hess_rows(self.code, self.params, _as_float(y), _as_2d(margin), self.state_size)

    def mean_link(self, mean: NDArray[np.float64]) -> NDArray[np.float64]:
        """The loss-minimising constant margin given the weighted label mean (elementwise).

        The mean itself for squared error; its logit for log loss, clipped to [1e-15, 1 - 1e-15]
        so that a single-class label set stays finite (as LightGBM does).
        """
        if self.code == LOGLOSS:
            mean = np.clip(mean, 1e-15, 1.0 - 1e-15)
            return np.log(mean / (1.0 - mean))
        return mean

    def mean_link_slope(self, mean: NDArray[np.float64]) -> NDArray[np.float64]:
        """Derivative of :meth:`mean_link` (0 where the clip is active)."""
        if self.code == LOGLOSS:
            inside = (mean > 1e-15) & (mean < 1.0 - 1e-15)
            return np.where(inside, 1.0 / np.where(inside, mean * (1.0 - mean), 1.0), 0.0)
        return np.ones_like(mean)


_CODES: dict[str, int] = {"logloss": LOGLOSS, "squared_error": SQUARED_ERROR}
LOSSES: tuple[str, ...] = tuple(_CODES)


def _as_float(y: Any) -> NDArray[np.float64]:
    return np.ascontiguousarray(y, dtype=np.float64)


def _as_2d(margin: Any) -> NDArray[np.float64]:
    m = np.asarray(margin, dtype=np.float64)
    return np.ascontiguousarray(m[:, None] if m.ndim == 1 else m)


# ----------------------------------------------------------------------------------------------
# Per-row primitives (compiled). ``m``, ``g``, ``h``, ``beta``, ``gamma``, ``dm``, ``out`` have
# length K; ``z`` has the loss's state size.


@_jit
def point(code: int, prm: NDArray[np.float64], m: NDArray[np.float64], z: NDArray[np.float64]) -> None:
    """Fill the row's point ``z`` from its margins ``m``."""
    if code == LOGLOSS:
        x = m[0]
        e = math.exp(-abs(x))
        big = 1.0 / (1.0 + e)
        small = e / (1.0 + e)
        if x >= 0.0:
            z[0], z[1] = big, small  # p, 1 - p
        else:
            z[0], z[1] = small, big
    else:
        z[0] = m[0]


@_jit
def grad_hess(
    code: int, prm: NDArray[np.float64], y: float, z: NDArray[np.float64],
    g: NDArray[np.float64], h: NDArray[np.float64],
) -> None:
    """The booster's gradient ``g`` and hessian diagonal ``h`` at point ``z``."""
    if code == LOGLOSS:
        g[0] = z[0] - y
        h[0] = max(z[0] * z[1], prm[0])
    else:
        g[0] = z[0] - y
        h[0] = max(1.0, prm[0])


@_jit
def _scalar_d2(code: int, prm: NDArray[np.float64], z: NDArray[np.float64]) -> tuple[float, float]:
    """``(dg/dm, dh/dm)`` of a one-output loss at point ``z``."""
    if code == LOGLOSS:
        v = z[0] * z[1]
        return v, (v * (z[1] - z[0]) if v >= prm[0] else 0.0)
    return 1.0, 0.0


@_jit
def vjp(
    code: int, prm: NDArray[np.float64], y: float, z: NDArray[np.float64],
    beta: NDArray[np.float64], gamma: NDArray[np.float64], out: NDArray[np.float64],
) -> None:
    """``out = sum_c beta_c dg_c/dm + gamma_c dh_c/dm`` at point ``z``."""
    dg, dh = _scalar_d2(code, prm, z)
    out[0] = beta[0] * dg + gamma[0] * dh


@_jit
def jvp(
    code: int, prm: NDArray[np.float64], y: float, z: NDArray[np.float64],
    dm: NDArray[np.float64], dg: NDArray[np.float64], dh: NDArray[np.float64],
) -> None:
    """``dg_c = dg_c/dm . dm``, ``dh_c = dh_c/dm . dm`` at point ``z``."""
    d2g, d2h = _scalar_d2(code, prm, z)
    dg[0] = d2g * dm[0]
    dh[0] = d2h * dm[0]


@_jit
def weighted(code: int, g: float, h: float, w: float, f32: bool) -> tuple[float, float]:
    """One row's ``(w g, w h)`` as the booster sums them per leaf.

    With ``f32`` both are rounded to float32 the way LightGBM computes them (``score_t = float``):
    ``f32(w g)``, ``f32(w h)`` for log loss, ``f32(f32(g) w)``, ``f32(w h)`` for squared error.
    """
    if not f32:
        return w * g, w * h
    if code == LOGLOSS:
        return np.float64(np.float32(w * g)), np.float64(np.float32(w * h))
    return np.float64(np.float32(np.float64(np.float32(g)) * w)), np.float64(np.float32(w * h))


@_jit
def value(code: int, prm: NDArray[np.float64], y: float, m: NDArray[np.float64]) -> float:
    """The loss of margins ``m`` for label ``y``, computed without overflow."""
    if code == LOGLOSS:
        x = m[0]
        return max(x, 0.0) + math.log1p(math.exp(-abs(x))) - y * x
    d = m[0] - y
    return 0.5 * d * d


@_jit
def _values(
    code: int, prm: NDArray[np.float64], y: NDArray[np.float64], m: NDArray[np.float64]
) -> NDArray[np.float64]:
    out = np.empty(m.shape[0])
    for j in range(m.shape[0]):
        out[j] = value(code, prm, y[j], m[j])
    return out


@_jit
def _grad_hess_rows(
    code: int, prm: NDArray[np.float64], y: NDArray[np.float64], m: NDArray[np.float64], size: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    g = np.empty_like(m)
    h = np.empty_like(m)
    z = np.empty(size)
    for j in range(m.shape[0]):
        point(code, prm, m[j], z)
        grad_hess(code, prm, y[j], z, g[j], h[j])
    return g, h
