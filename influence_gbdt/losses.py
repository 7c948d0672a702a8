"""Losses in the margin, written once and shared by every adapter.

A loss is named by a :class:`Loss` (name, parameters, number of outputs). The engine's compiled
kernels see it as an integer ``code`` plus a float64 parameter vector ``prm`` and call the
per-row primitives below; Python code uses the vectorized methods of :class:`Loss`.

Conventions
-----------
``m`` is a row's raw margin, a vector of ``K`` outputs (``K = 1`` for binary and regression
models) and ``y`` its label vector (one entry: the label, or the class index for multiclass;
``K`` entries for multi-target regression). ``g = dL/dm`` is the booster's gradient and ``h`` the
*booster's* hessian diagonal (possibly floored, scaled or replaced, as the booster computes it:
it enters Newton leaf steps only). Derivatives of ``g`` and ``h`` with respect to the margins are
the true ones:

- ``vjp``: ``out = sum_c beta_c * dg_c/dm + gamma_c * dh_c/dm`` (reverse mode);
- ``jvp``: ``dg_c = dg_c/dm . dm`` and ``dh_c = dh_c/dm . dm`` (forward mode).

Each primitive takes the row's *point* ``z``, a short state vector computed once from the margin by
:func:`point` (e.g. ``p`` and ``1 - p`` for log loss, both without cancellation), so several
derivatives of one row cost one exponential.

Losses (``prm[0]`` is always the hessian floor: ``h = max(h, floor)``, ``dh = 0`` where active).
Values are the objective's own loss; for the log-link regressions the *half deviance*, which is 0
at a perfect prediction (the negative log-likelihood up to a constant in ``y``):

==================  ==============================================  ============================
name                loss (r = m - y; p = sigmoid or softmax)         booster hessian h
==================  ==============================================  ============================
``logloss``         log(1 + e^(s m)) - y s m, labels in [0, 1]      s^2 p(1-p); s = ``sigma``
                    (``complement32`` = 1: the booster's gradient is
                    p f32(1 - y) - (1 - p) y, LightGBM's cross_entropy;
                    ``one_minus`` = 1: p = 1 - 1/(1 + e^m), 1 - p
                    taken from it, CatBoost's arithmetic)
``squared_error``   r^2 / 2                                         1
``poisson``         e^m - y m - (y - y log y)                       e^(m + ``hessian_log_shift``)
``gamma``           y e^-m + m - 1 - log y, y > 0                   y e^-m
``tweedie``         half Tweedie deviance, power rho in (1, 2)      d2L/dm2
``huber``           r^2/2 if |r| <= delta, else delta (|r| - delta/2)   1 inside, ``outside_hessian``
                    (``closed`` = 0: |r| = delta counts as outside)
``pseudo_huber``    delta^2 (sqrt(1 + (r/delta)^2) - 1)             d2L/dm2
``fair``            c^2 (|r|/c - log(1 + |r|/c))                    d2L/dm2
``quantile``        ``scale`` * pinball_alpha(y - m)                1 (leaves are renewed)
``softmax``         -log p_y (K classes)                            ``factor`` p_k (1 - p_k)
``one_vs_all``      sum_k logloss(m_k, [y = k]) (K classes)         p_k (1 - p_k)
``multi_squared``   sum_k (m_k - y_k)^2 / 2 (K targets)             1
==================  ==============================================  ============================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _jit as numba
from ._cmath32 import expf, logf
from .errors import InputError

LOGLOSS = 0
SQUARED_ERROR = 1
POISSON = 2
GAMMA = 3
TWEEDIE = 4
HUBER = 5
PSEUDO_HUBER = 6
FAIR = 7
QUANTILE = 8
SOFTMAX = 9
ONE_VS_ALL = 10
MULTI_SQUARED = 11

_jit = numba.njit(cache=True, nogil=True)
#: Primitives only compiled code calls: no Python wrapper to compile (see ``_jit.njit``).
_internal = numba.njit(cache=True, nogil=True, internal=True)
#: Per-row helpers inlined where they are called (numba IR): the row loops' arithmetic compiled in
#: one piece.
_inlined = numba.njit(cache=True, nogil=True, internal=True, inline="always")

#: name -> (code, parameter names with defaults, multi-output, point size (None = K))
_SPECS: dict[str, tuple[int, dict[str, float], bool, int | None]] = {
    "logloss": (LOGLOSS, {"sigma": 1.0, "complement32": 0.0, "one_minus": 0.0}, False, 2),
    "squared_error": (SQUARED_ERROR, {}, False, 1),
    "poisson": (POISSON, {"hessian_log_shift": 0.0}, False, 1),
    "gamma": (GAMMA, {}, False, 1),
    "tweedie": (TWEEDIE, {"power": 1.5}, False, 1),
    "huber": (HUBER, {"delta": 1.0, "outside_hessian": 1.0, "closed": 1.0}, False, 1),
    "pseudo_huber": (PSEUDO_HUBER, {"delta": 1.0}, False, 1),
    "fair": (FAIR, {"c": 1.0}, False, 1),
    "quantile": (QUANTILE, {"alpha": 0.5, "scale": 1.0}, False, 1),
    "softmax": (SOFTMAX, {"factor": 1.0}, True, None),
    "one_vs_all": (ONE_VS_ALL, {}, True, None),
    "multi_squared": (MULTI_SQUARED, {}, True, None),
}
LOSSES: tuple[str, ...] = tuple(_SPECS)
#: Mean links (boost_from_average): how a weighted label mean becomes a starting margin.
LINKS: tuple[str, ...] = ("identity", "logit", "log", "log_share", "logit32", "log32", "log_share_centered32")
#: The clip of a mean under the ``logit32`` link: XGBoost's ``kRtEps``.
LOGIT32_CLIP = 1e-6

#: Floor of a class share under the ``log_share`` link: LightGBM's ``kEpsilon`` (``1e-15f``, a float,
#: so 1.0000000036e-15), which its multiclass init score ``log(max(kEpsilon, share))`` uses. A class
#: that never occurs in the labels starts at log of this.
SHARE_FLOOR = float(np.float32(1e-15))


def clog(x: ArrayLike) -> NDArray[np.float64]:
    """The C library's float64 ``log`` of each element (Python's :func:`math.log`), any shape:
    LightGBM's and CatBoost's ``std::log(double)``, bit for bit (-inf at 0, NaN below). numpy's
    ``log`` is its own vectorized routine, a last bit away from the C library's on some values: on
    an AVX-512 processor, 0.35% of 200,000 uniform values with numpy 2.4 and 21% with numpy 1.24
    (measured 2026-11-30), enough to refuse a LightGBM model whose unfolded first-tree leaves are
    all 0 (the LightGBM adapter's ``_unfold``)."""
    arr = np.asarray(x, dtype=np.float64)
    flat = [math.log(v) if v > 0.0 else (-math.inf if v == 0.0 else math.nan) for v in arr.ravel().tolist()]
    return np.array(flat, dtype=np.float64).reshape(arr.shape)


def margin32(mean: ArrayLike, link: str) -> NDArray[np.float64]:
    """The margin of a float32 mean under the ``logit32`` or ``log32`` link, any shape: XGBoost's
    ``ProbToMargin``, ``-logf(1 / b - 1)`` with ``b`` clipped to [1e-6, 1 - 1e-6] or ``logf(b)``,
    in float32 arithmetic with the C library's ``logf`` (:mod:`._cmath32`)."""
    b, one = np.asarray(mean, dtype=np.float32), np.float32(1.0)
    if link == "logit32":
        b = one / np.clip(b, np.float32(LOGIT32_CLIP), one - np.float32(LOGIT32_CLIP)) - one
    out = logf(b).astype(np.float64)
    return -out if link == "logit32" else out


def sigmoid32(margin: NDArray[np.float64]) -> NDArray[np.float64]:
    """The mean a margin stands for under the ``logit32`` link, any shape: XGBoost's float32
    sigmoid ``1 / (expf(min(-m, 88.7)) + 1 + 1e-16)`` of the margin rounded to float32 (its
    ``PredTransform``, through which it stores an intercept it fits as a Newton step)."""
    one = np.float32(1.0)
    x = np.minimum(-np.asarray(margin, dtype=np.float32), np.float32(88.7))
    return (one / (expf(x) + one + np.float32(1e-16))).astype(np.float64)


@dataclass(frozen=True)
class Loss:
    """A loss with its parameters, as the engine models it.

    Parameters
    ----------
    name : str
        One of :data:`LOSSES`.
    hessian_floor : float
        Lower bound the booster puts on its hessian (XGBoost: 1e-16 for log loss); 0 for none.
    n_outputs : int
        ``K``: 1 for single-output losses; the number of classes or targets otherwise.
    params : mapping, optional
        The loss's parameters (see the module table); missing ones take their defaults.

    Raises
    ------
    InputError
        On an unknown name or parameter, or a parameter outside its range.
    """

    name: str
    hessian_floor: float = 0.0
    n_outputs: int = 1
    params: dict[str, float] = field(default_factory=dict)
    code: int = field(init=False)

    def __post_init__(self) -> None:
        if self.name not in _SPECS:
            raise InputError(f"loss must be one of {sorted(_SPECS)}, got {self.name!r}.")
        code, defaults, multi, _ = _SPECS[self.name]
        unknown = sorted(set(self.params) - set(defaults))
        if unknown:
            raise InputError(f"Loss {self.name!r} has no parameters {unknown}; it takes {sorted(defaults)}.")
        if not (self.hessian_floor >= 0 and math.isfinite(self.hessian_floor)):
            raise InputError(f"hessian_floor must be a finite number >= 0, got {self.hessian_floor}.")
        if (self.n_outputs < 2) if multi else (self.n_outputs != 1):
            need = "n_outputs >= 2" if multi else "n_outputs = 1"
            raise InputError(f"Loss {self.name!r} needs {need}, got {self.n_outputs}.")
        full = {**defaults, **{k: float(v) for k, v in self.params.items()}}
        _check_params(self.name, full)
        object.__setattr__(self, "params", full)
        object.__setattr__(self, "code", code)

    @property
    def prm(self) -> NDArray[np.float64]:
        """The parameter vector the kernels read: the hessian floor, then the parameters in order."""
        return np.array([self.hessian_floor, *self.params.values()], dtype=np.float64)

    @property
    def state_size(self) -> int:
        """Length of a row's point ``z`` (see :func:`point`)."""
        size = _SPECS[self.name][3]
        if size is None:
            return 2 * self.n_outputs if self.code == ONE_VS_ALL else self.n_outputs
        return size

    @property
    def label_width(self) -> int:
        """Entries of a row's label vector: ``K`` for multi-target regression, else 1."""
        return self.n_outputs if self.code == MULTI_SQUARED else 1

    @property
    def default_link(self) -> str:
        """The mean link of boost_from_average for this loss (see :meth:`mean_link`)."""
        if self.code in (LOGLOSS, ONE_VS_ALL):
            return "logit"
        if self.code in (POISSON, GAMMA, TWEEDIE):
            return "log"
        if self.code == SOFTMAX:
            return "log_share"
        return "identity"

    def as_labels(self, y: Any, what: str = "labels") -> NDArray[np.float64]:
        """Labels as an array of shape (n, label_width), checked against the loss's domain.

        Raises
        ------
        InputError
            On NaN or infinite labels, or labels outside the domain (log loss: [0, 1]; Poisson and
            Tweedie: >= 0; gamma: > 0; classes: integers 0 .. K - 1).
        """
        arr = np.asarray(y, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[1] != self.label_width:
            raise InputError(
                f"The {what} must have shape (n,) or (n, {self.label_width}), got {np.shape(y)}.")
        if not np.all(np.isfinite(arr)):
            raise InputError(f"The {what} contain NaN or infinite values: drop or fix those rows first.")
        lo, hi, strict, integer = _DOMAINS.get(self.code, (-np.inf, np.inf, False, False))
        if self.code in (SOFTMAX, ONE_VS_ALL):
            hi = self.n_outputs - 1
        bad = (arr < lo) | (arr > hi) | ((arr == lo) if strict else False)
        if integer:
            bad |= arr != np.round(arr)
        if arr.size and np.any(bad):
            raise InputError(f"The {what} must lie in {_describe_domain(self.code, self.n_outputs)} for the "
                             f"{self.name} loss; found {arr[bad].ravel()[:3].tolist()}.")
        return np.ascontiguousarray(arr)

    def check_labels(self, y: Any, what: str = "labels") -> None:
        """Raise :class:`InputError` if ``y`` holds values outside the loss's domain."""
        self.as_labels(y, what)

    def values(self, y: Any, margin: Any) -> NDArray[np.float64]:
        """Per-row loss of margins ``margin`` (m,) or (m, K) for labels ``y``; shape (m,)."""
        return _values(self.code, self.prm, self.as_labels(y), _as_2d(margin))

    def class_probabilities(self, margin: Any, y: Any = None) -> NDArray[np.float64] | None:
        """The class probabilities of margins ``margin`` (m,) or (m, K), shape (m, n_classes) (a
        binary loss: [P(0), P(1)]); None for a loss that does not predict classes, and for log loss
        on labels ``y`` other than 0/1 (cross-entropy: the label is a probability, not a class)."""
        m = _as_2d(margin)
        if self.code == LOGLOSS:
            if y is not None and not np.isin(np.asarray(y, dtype=np.float64), (0.0, 1.0)).all():
                return None
            p1 = 1.0 / (1.0 + np.exp(-self.params["sigma"] * m[:, 0]))
            return np.column_stack([1.0 - p1, p1])
        if self.code == SOFTMAX:
            z = np.exp(m - m.max(axis=1, keepdims=True))
            return np.asarray(z / z.sum(axis=1, keepdims=True), dtype=np.float64)
        if self.code == ONE_VS_ALL:
            p = 1.0 / (1.0 + np.exp(-m))
            return np.asarray(p / p.sum(axis=1, keepdims=True), dtype=np.float64)
        return None

    def gradients(self, y: Any, margin: Any) -> NDArray[np.float64]:
        """``dL/dm`` per row, shape (m, K)."""
        return self.grad_hess(y, margin)[0]

    def grad_hess(self, y: Any, margin: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The booster's gradient and hessian diagonal per row, each shape (m, K)."""
        return _grad_hess_rows(self.code, self.prm, self.as_labels(y), _as_2d(margin), self.state_size)

    def mean_link(self, mean: NDArray[np.float64], link: str | None = None) -> NDArray[np.float64]:
        """The starting margin(s) from weighted label means, per link (default :attr:`default_link`).

        ``mean`` has shape (B,) (one output) or (B, K). ``identity``: the mean; ``logit``:
        log(mean / (1 - mean)) / sigma with the mean clipped to [1e-15, 1 - 1e-15]; ``log``: log of
        the mean; ``log_share``: log(max(share, :data:`SHARE_FLOOR`)) per class; these three with the
        C library's ``log`` (:func:`clog`), as LightGBM and CatBoost compute them. XGBoost's, in its
        float32 arithmetic on the mean rounded to float32, with the C library's ``logf``
        (:mod:`._cmath32`): ``logit32`` and ``log32``, its ``ProbToMargin``, ``-log(1 / b - 1)`` with
        ``b`` clipped to [1e-6, 1 - 1e-6] and ``log(b)`` (the margin it starts from given its stored
        base score); ``log_share_centered32``, its multiclass intercept, ``log(share + 1e-6)`` minus
        the sum of each class's log over ``K`` in class order.
        """
        link = link or self.default_link
        if link == "logit":
            mean = np.clip(mean, 1e-15, 1.0 - 1e-15)
            return clog(mean / (1.0 - mean)) / self.params.get("sigma", 1.0)
        if link in ("logit32", "log32"):
            return margin32(mean, link)
        if link == "log":
            return clog(mean)
        if link == "log_share":
            return clog(np.maximum(mean, SHARE_FLOOR))
        if link == "log_share_centered32":  # XGBoost's multiclass intercept, in float32
            logs = logf(np.asarray(mean, dtype=np.float32) + np.float32(1e-6))
            K = logs.shape[-1]
            centre = np.zeros(logs.shape[:-1], dtype=np.float32)
            for c in range(K):  # its mean, summed in class order
                centre = centre + logs[..., c] / np.float32(K)
            return (logs - centre[..., None]).astype(np.float64)
        return np.array(mean, dtype=np.float64)

    def mean_link_jacobian(self, mean: NDArray[np.float64], link: str | None = None) -> NDArray[np.float64]:
        """d link / d mean at one mean vector (K,): shape (K, K) (0 where a clip is active)."""
        link = link or self.default_link
        mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
        K = mean.size
        if link in ("logit", "logit32"):
            clip = LOGIT32_CLIP if link == "logit32" else 1e-15
            inside = (mean > clip) & (mean < 1.0 - clip)
            slope = np.where(inside, 1.0 / np.where(inside, mean * (1.0 - mean), 1.0), 0.0)
            return np.diag(slope / (1.0 if link == "logit32" else self.params.get("sigma", 1.0)))
        if link in ("log", "log32"):
            return np.diag(1.0 / mean)
        if link == "log_share":
            inside = mean > SHARE_FLOOR
            return np.diag(np.where(inside, 1.0 / np.where(inside, mean, 1.0), 0.0))
        if link == "log_share_centered32":
            d = np.diag(1.0 / (mean + 1e-6))
            return d - d.mean(axis=0, keepdims=True)
        return np.eye(K)


def _check_params(name: str, p: dict[str, float]) -> None:
    rules = {
        "sigma": (lambda v: v > 0, "> 0"),
        "power": (lambda v: 1.0 < v < 2.0, "in (1, 2) (use 'poisson' for power 1)"),
        "delta": (lambda v: v > 0, "> 0"),
        "c": (lambda v: v > 0, "> 0"),
        "alpha": (lambda v: 0.0 < v < 1.0, "in (0, 1)"),
        "scale": (lambda v: v > 0, "> 0"),
        "factor": (lambda v: v > 0, "> 0"),
        "outside_hessian": (lambda v: v >= 0, ">= 0"),
        "closed": (lambda v: v in (0.0, 1.0), "0 or 1"),
        "complement32": (lambda v: v in (0.0, 1.0), "0 or 1"),
        "one_minus": (lambda v: v in (0.0, 1.0), "0 or 1"),
        "hessian_log_shift": (lambda v: math.isfinite(v), "finite"),
    }
    for key, value in p.items():
        ok, what = rules[key]
        if not (math.isfinite(value) and ok(value)):
            raise InputError(f"Loss {name!r}: parameter {key} must be {what}, got {value}.")


#: code -> (lowest, highest, lowest excluded, integer)
_DOMAINS: dict[int, tuple[float, float, bool, bool]] = {
    LOGLOSS: (0.0, 1.0, False, False),
    POISSON: (0.0, np.inf, False, False),
    TWEEDIE: (0.0, np.inf, False, False),
    GAMMA: (0.0, np.inf, True, False),
    SOFTMAX: (0.0, np.inf, False, True),
    ONE_VS_ALL: (0.0, np.inf, False, True),
}


def _describe_domain(code: int, K: int) -> str:
    if code in (SOFTMAX, ONE_VS_ALL):
        return f"the class indices 0 .. {K - 1}"
    lo, hi, strict, _ = _DOMAINS[code]
    return f"{'(' if strict else '['}{lo:g}, {hi:g}{']' if np.isfinite(hi) else ')'}"


def _as_2d(margin: Any) -> NDArray[np.float64]:
    m = np.asarray(margin, dtype=np.float64)
    return np.ascontiguousarray(m[:, None] if m.ndim == 1 else m)


# ----------------------------------------------------------------------------------------------
# Per-row primitives (compiled). ``m``, ``g``, ``h``, ``beta``, ``gamma``, ``dm``, ``out`` have
# length K; ``y`` is the row's label vector; ``z`` has the loss's point size.


@_inlined
def probabilities(A: NDArray[np.float64], j: int, p: NDArray[np.float64]) -> None:
    """``p = softmax(A[j])``, the row's margins shifted by their largest (a joint round's one step
    starts at the row's margins ``A[j]``; XGBoost's float32 bound takes the softmax at a row's
    margins)."""
    K = A.shape[1]
    top = A[j, 0]
    for c in range(1, K):
        top = max(top, A[j, c])
    total = 0.0
    for c in range(K):
        p[c] = np.exp(A[j, c] - top)
        total += p[c]
    for c in range(K):
        p[c] /= total


@_inlined
def sigmoid_pair(x: float) -> tuple[float, float]:
    """``(sigmoid(x), 1 - sigmoid(x))`` without cancellation."""
    z0, z1, _ = sigmoid_pair_exp(x)
    return z0, z1


@_inlined
def sigmoid_pair_exp(x: float) -> tuple[float, float, float]:
    """:func:`sigmoid_pair` and the exponential it takes, ``exp(-|x|)``."""
    e = math.exp(-abs(x))
    z0, z1 = sigmoid_pair_of(x, e)
    return z0, z1, e


@_inlined
def sigmoid_pair_of(x: float, e: float) -> tuple[float, float]:
    """:func:`sigmoid_pair` of ``x`` from ``e = exp(-|x|)``, taken by the caller (which may take
    several rows' exponentials side by side)."""
    big = 1.0 / (1.0 + e)
    small = e / (1.0 + e)
    return (big, small) if x >= 0.0 else (small, big)


@_internal
def one_minus_pair(z1: float) -> tuple[float, float]:
    """The log-loss point ``(p, 1 - p)`` as CatBoost computes it (``one_minus``, ``prm[3]``) from
    the accurate ``z1 = 1 / (1 + e^m)``: ``p = 1 - 1 / (1 + e^m)`` and ``1 - p`` from it
    (``error_functions.cpp``). ``p = 1 - z1`` carries ``z1``'s absolute rounding (~1e-16), which
    for a small ``p`` (a very negative margin, e.g. a boost_from_average bias of -14) is a relative
    error of 1e-16 / p in every gradient. A call of its own, made only where ``one_minus`` is set:
    inlined in :func:`point1`, it made the replay of every log-loss model 8-12% slower (measured
    on 32,561 rows x 100 trees; as a call, within 2%)."""
    p = 1.0 - z1
    return p, 1.0 - p


@_internal
def point(code: int, prm: NDArray[np.float64], m: NDArray[np.float64], z: NDArray[np.float64]) -> None:
    """Fill the row's point ``z`` from its margins ``m``: (p, 1 - p) for log loss, the softmax
    probabilities, the per-class sigmoids p_k then 1 - p_k for one-vs-all, ``e^m`` for Poisson,
    the margin itself otherwise."""
    if code == SOFTMAX:
        top = m.max()
        total = 0.0
        for c in range(m.shape[0]):
            z[c] = math.exp(m[c] - top)
            total += z[c]
        for c in range(m.shape[0]):
            z[c] /= total
    elif code == ONE_VS_ALL:
        K = m.shape[0]
        for c in range(K):
            z[c], z[K + c] = sigmoid_pair(m[c])
    elif code == MULTI_SQUARED:
        z[:] = m
    elif code == LOGLOSS:
        z[0], z[1] = point1(code, params4(prm), m[0])
    else:
        z[0] = point1(code, params4(prm), m[0])[0]


#: A loss's parameter vector as four scalars (see :func:`params4`).
Params4 = tuple[float, float, float, float]


@_internal
def params4(prm: NDArray[np.float64]) -> Params4:
    """The parameter vector ``prm`` as a tuple of four (zeros past its end): what the per-row
    scalar functions take. A compiled call given an array counts a reference to it on the way in
    and out, atomically (measured: a fifth of CatBoost's replay, and the threads of a team
    contend for the count); a tuple of floats is copied."""
    n = prm.shape[0]
    return prm[0], prm[1] if n > 1 else 0.0, prm[2] if n > 2 else 0.0, prm[3] if n > 3 else 0.0


@_internal
def point1(code: int, prm: Params4, m: float) -> tuple[float, float]:
    """:func:`point` of a one-output loss from its margin ``m``, as scalars ``(z0, z1)`` (``z1``
    is ``1 - p`` for log loss and unused otherwise); ``prm`` from :func:`params4`."""
    if code == LOGLOSS:
        if prm[3] > 0.0:
            return one_minus_pair(sigmoid_pair(prm[1] * m)[1])
        return sigmoid_pair(prm[1] * m)
    if code == POISSON:
        return math.exp(m), 0.0
    return m, 0.0


@_inlined
def point1_exp(code: int, prm: Params4, m: float) -> tuple[float, float, float]:
    """:func:`point1` at margin ``m`` and ``exp(m)``, the exponential computed once where
    :func:`point1` takes the same one: log loss at scale 1 where ``m < 0`` (its ``exp(-|m|)``),
    Poisson (its point). Bit for bit what the two computed apart give (``1.0 * m`` is ``m``)."""
    if code == LOGLOSS and prm[1] == 1.0:
        z0, z1, e = sigmoid_pair_exp(m)
        if prm[3] > 0.0:
            z0, z1 = one_minus_pair(z1)
        return z0, z1, e if m < 0.0 else math.exp(m)
    z0, z1 = point1(code, prm, m)
    return z0, z1, z0 if code == POISSON else math.exp(m)


@_inlined
def derivs1_exp(code: int, prm: Params4, y: float, m: float) -> tuple[float, float, float, float, float]:
    """:func:`derivs1` at margin ``m`` and ``exp(m)``, the exponential shared as
    :func:`point1_exp` shares it."""
    z0, z1, em = point1_exp(code, prm, m)
    g, h, dg, dh = _scalar_logloss_inlined(code, prm, y, z0, z1)
    return g, h, dg, dh, em


@_inlined
def derivs1(code: int, prm: Params4, y: float, m: float) -> tuple[float, float, float, float]:
    """``(g, h, dg/dm, dh/dm)`` of a one-output loss at margin ``m``, all scalars (``h``
    unfloored): what :func:`point` then :func:`grad_hess` / :func:`jvp` compute, without the
    per-row arrays (the replay's, refit's and reverse sweep's hot loops for K = 1); ``prm`` from
    :func:`params4`, taken once before the loop. Inlined where it is called: LeafRefit's sums over
    a chunk of rows called it per row, 42% of a deleted row's time (sampled on one thread,
    300,000 rows; LLVM did not inline it there)."""
    z0, z1 = point1(code, prm, m)
    return _scalar_logloss_inlined(code, prm, y, z0, z1)


@_inlined
def _scalar_logloss_inlined(
    code: int, prm: Params4, y: float, z0: float, z1: float
) -> tuple[float, float, float, float]:
    """:func:`_scalar`, log loss's and squared error's arithmetic inlined where this is called (in a
    row loop: the call per row cost a twelfth of CatBoost's LeafRefit and a seventh of LightGBM's;
    LightGBM's default regressor's LeafRefit 29.8 -> 25.1-26.1 ms per row), the other losses'
    called."""
    if code == LOGLOSS:
        return _logloss(prm, y, z0, z1)
    if code == SQUARED_ERROR:
        return z0 - y, 1.0, 1.0, 0.0
    return _scalar(code, prm, y, z0, z1)


@_inlined
def step_derivs1(
    code: int, prm: Params4, y: float, w: float, z0: float, z1: float
) -> tuple[float, float, float, float]:
    """What a leaf step uses of a one-output row with label ``y`` and weight ``w`` at point
    ``(z0, z1)`` (:func:`point1`'s): ``(g, h, w dg/dm, w dh/dm)``, the hessian floored at
    ``prm[0]`` (and constant in the margin there: ``dh = 0``). The replay's derivative cache keeps
    the point; from it, this gives bit for bit what the margin gives, with no exponential. Log
    loss's and squared error's arithmetic is inlined where it is called (measured: a batch's sweep
    1.15x slower through a call per row and step; one test point of LightGBM's default regressor on
    Adult, one thread, 27.6-46.7 -> 16.2-16.3 ms), the other losses' called."""
    if code == LOGLOSS:
        return step_logloss(prm, y, w, z0, z1)
    if code == SQUARED_ERROR:
        return _floored(prm[0], w, z0 - y, 1.0, 1.0, 0.0)
    return _step_derivs_called(code, prm, y, w, z0, z1)


@_internal
def _step_derivs_called(
    code: int, prm: Params4, y: float, w: float, z0: float, z1: float
) -> tuple[float, float, float, float]:
    """:func:`step_derivs1`, compiled once."""
    g, h, dg, dh = _scalar(code, prm, y, z0, z1)
    return _floored(prm[0], w, g, h, dg, dh)


@_inlined
def step_logloss(prm: Params4, y: float, w: float, z0: float, z1: float) -> tuple[float, float, float, float]:
    """:func:`step_derivs1` of log loss."""
    g, h, dg, dh = _logloss(prm, y, z0, z1)
    return _floored(prm[0], w, g, h, dg, dh)


@_inlined
def step_logloss_at(
    prm: Params4, y: float, w: float, x: float, e: float
) -> tuple[float, float, float, float]:
    """:func:`step_logloss` of a row at scaled margin ``x``, from ``e = exp(-|x|)`` taken by the
    caller (row loops take several rows' exponentials side by side)."""
    z0, z1 = sigmoid_pair_of(x, e)
    if prm[3] > 0.0:
        z0, z1 = one_minus_pair(z1)
    return step_logloss(prm, y, w, z0, z1)


@_inlined
def _floored(
    floor: float, w: float, g: float, h: float, dg: float, dh: float
) -> tuple[float, float, float, float]:
    """``(g, h, w dg/dm, w dh/dm)``, ``h`` floored at ``floor`` (where ``dh = 0``: the floored
    hessian is constant in the margin)."""
    if h < floor:
        h, dh = floor, 0.0
    return g, h, w * dg, w * dh


@_inlined
def _logloss(prm: Params4, y: float, z0: float, z1: float) -> tuple[float, float, float, float]:
    """:func:`_scalar` of log loss."""
    s = prm[1]
    v = z0 * z1
    # LightGBM's cross_entropy computes ((1.0f - y) - y e^-m) / (1 + e^-m) with 1 - y rounded
    # to float32 (its labels are float32, so 1.0 - y is exact before the rounding).
    g = z0 * np.float64(np.float32(1.0 - y)) - z1 * y if prm[2] > 0.0 else z0 - y
    return s * g, s * s * v, s * s * v, s * s * s * v * (z1 - z0)


@_internal
def _scalar(code: int, prm: Params4, y: float, z0: float, z1: float) -> tuple[float, float, float, float]:
    """``(g, h, dg/dm, dh/dm)`` of a one-output loss at point ``(z0, z1)`` (``h`` unfloored;
    ``prm`` from :func:`params4`)."""
    if code == LOGLOSS:
        return _logloss(prm, y, z0, z1)
    if code == SQUARED_ERROR:
        return z0 - y, 1.0, 1.0, 0.0
    if code == POISSON:
        e = z0
        h = e * math.exp(prm[1])
        return e - y, h, e, h
    if code == GAMMA:
        e = y * math.exp(-z0)
        return 1.0 - e, e, e, -e
    if code == TWEEDIE:
        rho = prm[1]
        e1 = y * math.exp((1.0 - rho) * z0)
        e2 = math.exp((2.0 - rho) * z0)
        h = -(1.0 - rho) * e1 + (2.0 - rho) * e2
        return e2 - e1, h, h, -(1.0 - rho) ** 2 * e1 + (2.0 - rho) ** 2 * e2
    r = z0 - y
    if code == HUBER:
        delta = prm[1]
        if abs(r) < delta or (abs(r) == delta and prm[3] > 0.0):
            return r, 1.0, 1.0, 0.0
        return math.copysign(delta, r), prm[2], 0.0, 0.0
    if code == PSEUDO_HUBER:
        delta = prm[1]
        q = 1.0 + (r / delta) ** 2
        h = 1.0 / (q * math.sqrt(q))
        return r / math.sqrt(q), h, h, -3.0 * r / (delta * delta) * h / q
    if code == FAIR:
        c = prm[1]
        a = abs(r) + c
        h = c * c / (a * a)
        return c * r / a, h, h, -2.0 * math.copysign(c * c, r) / (a * a * a)
    # QUANTILE: the pinball gradient (the tree's leaves are renewed, not Newton steps)
    return (prm[2] * (1.0 - prm[1]) if r >= 0.0 else -prm[2] * prm[1]), 1.0, 0.0, 0.0


@_internal
def _scalar_at(
    code: int, prm: NDArray[np.float64], y: float, z: NDArray[np.float64]
) -> tuple[float, float, float, float]:
    """:func:`_scalar` at a point array ``z`` (length 1, or 2 for log loss)."""
    return _scalar(code, params4(prm), y, z[0], z[1] if z.shape[0] > 1 else 0.0)


@_internal
def grad_hess(
    code: int, prm: NDArray[np.float64], y: NDArray[np.float64], z: NDArray[np.float64],
    g: NDArray[np.float64], h: NDArray[np.float64],
) -> None:
    """The booster's gradient ``g`` and hessian diagonal ``h`` at point ``z``."""
    if code == SOFTMAX:
        for c in range(g.shape[0]):
            g[c] = z[c] - (1.0 if y[0] == c else 0.0)
            h[c] = max(prm[1] * z[c] * (1.0 - z[c]), prm[0])
    elif code == ONE_VS_ALL:
        K = g.shape[0]
        for c in range(K):
            g[c] = z[c] - (1.0 if y[0] == c else 0.0)
            h[c] = max(z[c] * z[K + c], prm[0])
    elif code == MULTI_SQUARED:
        for c in range(g.shape[0]):
            g[c] = z[c] - y[c]
            h[c] = max(1.0, prm[0])
    else:
        gg, hh, _, _ = _scalar_at(code, prm, y[0], z)
        g[0] = gg
        h[0] = max(hh, prm[0])


@_internal
def vjp(
    code: int, prm: NDArray[np.float64], y: NDArray[np.float64], z: NDArray[np.float64],
    beta: NDArray[np.float64], gamma: NDArray[np.float64], out: NDArray[np.float64],
) -> None:
    """``out = sum_c beta_c dg_c/dm + gamma_c dh_c/dm`` at point ``z``."""
    K = out.shape[0]
    if code == SOFTMAX:
        # dg_c/dm_k = p_c (d_ck - p_k); dh_c/dm_k = factor (1 - 2 p_c) dg_c/dm_k (unfloored)
        acc = 0.0
        for c in range(K):
            a = beta[c]
            if prm[1] * z[c] * (1.0 - z[c]) >= prm[0]:
                a += gamma[c] * prm[1] * (1.0 - 2.0 * z[c])
            out[c] = a * z[c]
            acc += out[c]
        for c in range(K):
            out[c] -= z[c] * acc
    elif code == ONE_VS_ALL:
        for c in range(K):
            v = z[c] * z[K + c]
            out[c] = beta[c] * v + (gamma[c] * v * (z[K + c] - z[c]) if v >= prm[0] else 0.0)
    elif code == MULTI_SQUARED:
        out[:] = beta
    else:
        _, hh, dg, dh = _scalar_at(code, prm, y[0], z)
        out[0] = beta[0] * dg + (gamma[0] * dh if hh >= prm[0] else 0.0)


@_internal
def jvp(
    code: int, prm: NDArray[np.float64], y: NDArray[np.float64], z: NDArray[np.float64],
    dm: NDArray[np.float64], dg: NDArray[np.float64], dh: NDArray[np.float64],
) -> None:
    """``dg_c = dg_c/dm . dm``, ``dh_c = dh_c/dm . dm`` at point ``z``."""
    K = dg.shape[0]
    if code == SOFTMAX:
        mean = 0.0
        for c in range(K):
            mean += z[c] * dm[c]
        for c in range(K):
            dg[c] = z[c] * (dm[c] - mean)
            floored = prm[1] * z[c] * (1.0 - z[c]) < prm[0]
            dh[c] = 0.0 if floored else prm[1] * (1.0 - 2.0 * z[c]) * dg[c]
    elif code == ONE_VS_ALL:
        for c in range(K):
            v = z[c] * z[K + c]
            dg[c] = v * dm[c]
            dh[c] = v * (z[K + c] - z[c]) * dm[c] if v >= prm[0] else 0.0
    elif code == MULTI_SQUARED:
        dg[:] = dm
        dh[:] = 0.0
    else:
        _, hh, d2g, d2h = _scalar_at(code, prm, y[0], z)
        dg[0] = d2g * dm[0]
        dh[0] = d2h * dm[0] if hh >= prm[0] else 0.0


@_internal
def weighted(code: int, g: float, h: float, w: float, f32: bool) -> tuple[float, float]:
    """One row's ``(w g, w h)`` as the booster sums them per leaf.

    With ``f32`` both are rounded to float32 the way LightGBM computes them (``score_t = float``):
    ``f32(f32(g) w)``, ``w h`` for squared error, ``f32(w g)``, ``f32(w h)`` for every other loss.
    """
    if not f32:
        return w * g, w * h
    if code == SQUARED_ERROR:
        return np.float64(np.float32(np.float64(np.float32(g)) * w)), np.float64(np.float32(w * h))
    return np.float64(np.float32(w * g)), np.float64(np.float32(w * h))


@_internal
def value(  # noqa: C901 -- one branch per loss, in the order of the module table
    code: int, prm: NDArray[np.float64], y: NDArray[np.float64], m: NDArray[np.float64]
) -> float:
    """The loss of margins ``m`` for labels ``y``, computed without overflow."""
    if code == LOGLOSS:
        x = prm[1] * m[0]
        return max(x, 0.0) + math.log1p(math.exp(-abs(x))) - y[0] * x
    if code == SOFTMAX:
        top = m.max()
        total = 0.0
        for c in range(m.shape[0]):
            total += math.exp(m[c] - top)
        return top + math.log(total) - m[int(y[0])]
    if code == ONE_VS_ALL:
        acc = 0.0
        for c in range(m.shape[0]):
            x = m[c]
            acc += max(x, 0.0) + math.log1p(math.exp(-abs(x))) - (x if y[0] == c else 0.0)
        return acc
    if code == MULTI_SQUARED:
        acc = 0.0
        for c in range(m.shape[0]):
            acc += 0.5 * (m[c] - y[c]) ** 2
        return acc
    x, t = m[0], y[0]
    if code == POISSON:
        return math.exp(x) - t * x - (t - t * math.log(t) if t > 0.0 else 0.0)
    if code == GAMMA:
        return t * math.exp(-x) + x - 1.0 - math.log(t)
    if code == TWEEDIE:
        rho = prm[1]
        return (t ** (2.0 - rho) / ((1.0 - rho) * (2.0 - rho)) - t * math.exp((1.0 - rho) * x) / (1.0 - rho)
                + math.exp((2.0 - rho) * x) / (2.0 - rho))
    r = x - t
    if code == HUBER:
        delta = prm[1]
        return 0.5 * r * r if abs(r) <= delta else delta * (abs(r) - 0.5 * delta)
    if code == PSEUDO_HUBER:
        delta = prm[1]
        return delta * delta * (math.sqrt(1.0 + (r / delta) ** 2) - 1.0)
    if code == FAIR:
        c = prm[1]
        return c * c * (abs(r) / c - math.log1p(abs(r) / c))
    if code == QUANTILE:
        return prm[2] * ((1.0 - prm[1]) * r if r >= 0.0 else -prm[1] * r)
    return 0.5 * r * r


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
    grad_hess_rows_into(code, prm, y, m, size, g, h)
    return g, h


@_internal
def grad_hess_rows_into(  # noqa: C901 -- one loop over the rows per loss, written out
    code: int, prm: NDArray[np.float64], y: NDArray[np.float64], m: NDArray[np.float64], size: int,
    g: NDArray[np.float64], h: NDArray[np.float64],
) -> None:
    """Each row's gradient ``g`` and hessian diagonal ``h`` (n, K) at its margins ``m`` (n, K),
    labels ``y`` (n, label width), ``size`` the loss's point size: :func:`point` then
    :func:`grad_hess`, the same arithmetic in the same order, written out for the losses of
    several outputs and as scalars for the others. Called per row, the two counted references to
    the arrays they are given at every row (measured on 32,561 rows, one thread: 2.9 -> 1.2 ms a
    call for a 3-class softmax, 1.7 -> 0.3 ms for log loss). The softmax is written out here and in
    :func:`.engine.reverse_multi._row_pass` alike: a helper for both, inlined, still counted
    references per row (measured: a 3-class LightGBM default's one test point 0.127 -> 0.138-0.177
    s, this function 10-20% slower)."""
    n, K = m.shape
    p4 = params4(prm)
    floor = p4[0]
    if code == SOFTMAX:
        z = np.empty(K)
        for j in range(n):
            for c in range(K):
                z[c] = m[j, c]
            top = z.max()
            total = 0.0
            for c in range(K):
                z[c] = math.exp(z[c] - top)
                total += z[c]
            for c in range(K):
                z[c] /= total
            yj = y[j, 0]
            for c in range(K):
                g[j, c] = z[c] - (1.0 if yj == c else 0.0)
                h[j, c] = max(p4[1] * z[c] * (1.0 - z[c]), floor)
    elif code == ONE_VS_ALL:
        for j in range(n):
            yj = y[j, 0]
            for c in range(K):
                p, q = sigmoid_pair(m[j, c])
                g[j, c] = p - (1.0 if yj == c else 0.0)
                h[j, c] = max(p * q, floor)
    elif code == MULTI_SQUARED:
        for j in range(n):
            for c in range(K):
                g[j, c] = m[j, c] - y[j, c]
                h[j, c] = max(1.0, floor)
    else:
        for j in range(n):
            z0, z1 = point1(code, p4, m[j, 0])
            gg, hh, _, _ = _scalar(code, p4, y[j, 0], z0, z1 if size > 1 else 0.0)
            g[j, 0] = gg
            h[j, 0] = max(hh, floor)
