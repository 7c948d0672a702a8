"""How a regressor's prediction follows from its raw margin (the sum of its trees).

Every single-output regressor of the three boosters predicts an *increasing* function of its margin:
the identity (squared error, L1, Huber, quantiles, ...), ``exp`` (Poisson, Gamma, Tweedie), the
sigmoid (XGBoost's ``reg:logistic``, LightGBM's ``cross_entropy``), ``log1p(exp)`` (LightGBM's
``cross_entropy_lambda``) or the signed square (LightGBM's ``reg_sqrt``). So a range of predictions
is a range of margins, which is what feature tweaking searches in. The tree readers
(:mod:`influence_gbdt.adapters.trees`) name each model's link; :class:`Link` maps both ways.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

_Map = Callable[[NDArray[np.float64]], NDArray[np.float64]]


def _log(p: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.log(p)


def _logit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.log(p) - np.log1p(-p)


def _sigmoid(m: NDArray[np.float64]) -> NDArray[np.float64]:
    return 1.0 / (1.0 + np.exp(-m))


def _softplus(m: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.logaddexp(0.0, m)


def _softplus_inverse(p: NDArray[np.float64]) -> NDArray[np.float64]:
    return p + np.log(-np.expm1(-p))  # log(exp(p) - 1), without overflow for large p


def _signed_square(m: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.sign(m) * m * m


def _signed_root(p: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.sign(p) * np.sqrt(np.abs(p))


def _same(v: NDArray[np.float64]) -> NDArray[np.float64]:
    return v


@dataclass(frozen=True)
class Link:
    """An increasing map from margin to prediction and back.

    Attributes
    ----------
    name : str
        "identity", "log", "logit", "softplus" or "signed_square" (the margin as a function of
        the prediction: log for ``exp``, logit for the sigmoid, ...).
    lowest, highest : float
        Predictions lie strictly between these (the identity and signed square: all numbers).
    """

    name: str
    to_prediction: _Map
    to_margin: _Map
    lowest: float = -np.inf
    highest: float = np.inf

    def prediction(self, margin: ArrayLike) -> NDArray[np.float64]:
        """Predictions of margins (any shape)."""
        with np.errstate(over="ignore"):
            return self.to_prediction(np.asarray(margin, dtype=np.float64))

    def margin(self, prediction: ArrayLike) -> NDArray[np.float64]:
        """Margins of predictions (any shape): -inf at or below :attr:`lowest`, +inf at or above
        :attr:`highest` (no margin gives such a prediction, so a bound there is never or always
        met), ±inf for ±inf."""
        p = np.asarray(prediction, dtype=np.float64)
        inside = (p > self.lowest) & (p < self.highest)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = self.to_margin(np.where(inside, p, np.nan))
        return np.where(inside, m, np.where(p <= self.lowest, -np.inf, np.inf))


#: The links, by name.
LINKS: dict[str, Link] = {
    link.name: link
    for link in (
        Link("identity", _same, _same),
        Link("log", np.exp, _log, lowest=0.0),
        Link("logit", _sigmoid, _logit, lowest=0.0, highest=1.0),
        Link("softplus", _softplus, _softplus_inverse, lowest=0.0),
        Link("signed_square", _signed_square, _signed_root),
    )
}

__all__ = ["LINKS", "Link"]
