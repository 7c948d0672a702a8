"""XGBoost objective name -> the engine's loss, base-score rule and leaf rule (XGBoost 3.x). (The
float32 rounding bound of the self-check for each loss: :mod:`.xgboost_rounding`.)

Each supported objective maps onto one :class:`~influence_gbdt.losses.Loss` whose gradient and
hessian are XGBoost's, term for term (src/objective/*.cu at v3.2.0, measured against stored
leaves; project notes xgboost-facts Q3 to Q6):

=========================  ===================================  =====================================
objective                  loss (parameters)                    base score: stored -> start margin;
                                                                re-estimated by a retrain as
=========================  ===================================  =====================================
reg:squarederror           squared_error                        b; weighted label mean
  (K targets, one tree     multi_squared (K)                    b_k; per-column weighted mean
  per output)
binary:logistic,           logloss, hessian floor 1e-16         logit(clip(b)); weighted mean (spw 1)
reg:logistic                                                    or one Newton step from 0 (spw != 1)
binary:logitraw            logloss, hessian floor 1e-16         b itself (the mean is used as a
                                                                margin); mean, or Newton step
count:poisson              poisson (hessian_log_shift = the     log(b); weighted mean, log link
                           objective's max_delta_step, 0.7)
reg:tweedie                tweedie (power =                     log(b); weighted mean, log link
                           tweedie_variance_power)
reg:gamma                  gamma                                log(b); weighted mean, log link
reg:pseudohubererror       pseudo_huber (delta = huber_slope)   b; one Newton step from 0
reg:absoluteerror          quantile (alpha 0.5, scale 2:        b; XGBoost's (weighted) median
                           |y - F|), renewed
reg:quantileerror          quantile (alpha), renewed            b; XGBoost's (weighted) quantile
multi:softprob,            softmax (factor 2), hessian floor    b_k (margin space); weighted class
multi:softmax              1e-16                                shares, log(p + 1e-6) centred
=========================  ===================================  =====================================

XGBoost's multiclass hessian is ``max(2 p_k (1 - p_k) w, 1e-16)`` (multiclass_obj.cu
``GetGradient``): the factor 2 is the loss's ``factor``; the floor comes after the weight in XGBoost
and before it in the engine, which differs only for rows of weight 0 (1e-16 in H). For
``count:poisson`` the objective's ``max_delta_step`` (0.7 unless set) shifts the hessian to
``e^(m + max_delta_step)`` and is *also* injected as the trees' ``max_delta_step`` (learner.cc), so
leaf steps are clipped to +-0.7; the adapter reads the tree parameter from the model's config.

Renewed leaves (absolute and quantile error, hist and approx): the tree is grown with pinball
gradients, then each leaf becomes ``eta * Q_alpha(y - m)`` over its rows, XGBoost's quantile
definition (``quantile_method="xgboost"``: the (n + 1) interpolation without weights, a step
function of the float32 cumulative weight with weights; *any* weight vector, even all ones, takes
the weighted path). tree_method="exact" does not renew (its updater keeps no row positions) and is
refused for these objectives.

``multi_strategy="multi_output_tree"`` (vector leaves: one tree for every output, each output's
component its own Newton leaf) is described as one tree per output sharing the leaves (see
:meth:`~influence_gbdt.adapters.xgboost.XGBoostAdapter._l2_terms` for the components it zeroes).

Refused, by name: ``rank:*`` (a row's
gradient depends on every row of its query group and on the ranking itself; see docs), survival
objectives, ``reg:squaredlogerror`` (its hessian floor and margin clamp are not in the engine's
loss table), ``binary:hinge``, several quantile alphas or several targets for a renewed or
log-link objective (the engine renews single-output trees), and ``scale_pos_weight != 1`` outside
the logistic and squared-error objectives.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from influence_gbdt.errors import UnsupportedModelError
from influence_gbdt.losses import Loss

#: XGBoost's kRtEps (include/xgboost/base.h): the logistic base-score clip.
RT_EPS = 1e-6
#: The logistic and softmax hessian floor (regression_loss.h, multiclass_obj.cu).
HESSIAN_FLOOR = 1e-16
_LOGISTIC = ("binary:logistic", "reg:logistic")
_LOG_LINK = ("count:poisson", "reg:tweedie", "reg:gamma")
_RENEWED = ("reg:absoluteerror", "reg:quantileerror")
_MULTICLASS = ("multi:softprob", "multi:softmax")
SUPPORTED: tuple[str, ...] = (
    "reg:squarederror", *_LOGISTIC, "binary:logitraw", *_LOG_LINK, "reg:pseudohubererror", *_RENEWED,
    *_MULTICLASS,
)
#: Refused objectives (prefix or name) -> why.
_REFUSED: dict[str, str] = {
    "rank:": "a row's ranking gradient depends on every row of its query group and on the current "
    "ranking (pairs are chosen by rank), so it has no fixed-structure per-row form; train a pointwise "
    "objective or see docs/ for the design note",
    "survival:": "survival objectives (cox, aft) use interval or censored labels and risk sets that "
    "couple rows, which the engine's per-row losses do not model",
    "reg:squaredlogerror": "its hessian floor max(h, 1e-6) and margin clamp max(m, -1 + 1e-6) are not in "
    "the engine's loss table; retrain with reg:squarederror on log1p(y)",
    "binary:hinge": "its gradient is piecewise constant with a zero hessian region; not modelled",
}


@dataclass(frozen=True)
class Objective:
    """One XGBoost objective as the engine models it.

    Attributes
    ----------
    name : str
        XGBoost's objective name.
    loss : Loss
        The engine's loss (parameters and hessian floor included).
    estimated_rule : {"mean", "newton_step", "quantile"}
        How XGBoost estimates the base score (when it estimated it), before the spw exception.
    base_link : str
        Link of the ``"mean"`` rule.
    renewed : bool
        Leaves are renewed quantiles of residuals.
    spw_applies : bool
        ``scale_pos_weight`` multiplies label-1 rows' weights (XGBoost's ``reg_loss_param``).
    """

    name: str
    loss: Loss
    estimated_rule: str
    base_link: str
    renewed: bool
    spw_applies: bool

    @property
    def alpha(self) -> float:
        """The quantile level of a renewed objective (0.5 for absolute error)."""
        return float(self.loss.params.get("alpha", 0.5))

    def start_margin(self, stored: np.ndarray) -> np.ndarray:
        """The margin XGBoost starts from given the stored base score(s) (float32), shape (K,).

        ``ProbToMargin``: ``-logf(1 / b - 1)`` with ``b`` clipped to ``[1e-6, 1 - 1e-6]`` for the
        logistic link, ``logf(b)`` for the log link (the engine's ``logit32`` and ``log32`` links,
        which a re-estimated base takes the same way), the stored value else (also for logitraw and
        for multiclass, whose base score is already a margin).
        """
        b = np.asarray(stored, dtype=np.float32)
        if self.name in _MULTICLASS:
            return b.astype(np.float64)
        return self.loss.mean_link(b.astype(np.float64), self.base_link)  # as a retrain's estimate

    def as_estimated(self, stored: np.ndarray) -> Objective:
        """This objective with the base link of the release that estimated the ``stored`` base
        score (float32, shape (K,)).

        XGBoost 3.2 estimates a multiclass intercept as the centred logs of the weighted class
        shares (``log_share_centered32``, summing to 0); 3.1 stored the shares themselves and adds
        them to the margins as they are (measured at 3.1.3: margin minus leaves is the stored
        shares; XGBoost's #11786 changed it). A model trained by 3.1 keeps its shares when loaded
        into 3.2, so the rule is read off the stored value, which sums to 1 only as shares. Other
        objectives are returned as they are.
        """
        b = np.asarray(stored, dtype=np.float64)
        # Each float32 share is within 6e-8 of its value, so K shares sum to 1 within 1e-4 up to K ~ 1,600.
        shares = bool(np.all(b > 0.0) and abs(b.sum() - 1.0) < 1e-4)
        if self.name in _MULTICLASS and shares:
            return replace(self, base_link="identity")
        return self

    def clipped(self, stored: np.ndarray) -> bool:
        """Whether a logistic base estimate sits at XGBoost's clip (all labels of one class)."""
        b = np.asarray(stored, dtype=np.float32)
        return self.name in _LOGISTIC and not bool(np.all((RT_EPS < b) & (b < 1 - RT_EPS)))


def _param(section: dict[str, Any], key: str, default: float) -> float:
    return float(section.get(key, default))


def _refusal(name: str) -> str | None:
    for key, why in _REFUSED.items():
        if name == key or (key.endswith(":") and name.startswith(key)):
            return why
    return None


def objective_from_config(config: dict[str, Any]) -> Objective:
    """The :class:`Objective` of a model from its ``save_config()['learner']``.

    Raises
    ------
    UnsupportedModelError
        For an objective or setting refused above, naming why.
    """
    obj = config["objective"]
    name = str(obj["name"])
    why = _refusal(name)
    if why is not None:
        raise UnsupportedModelError(f"XGBoost objective {name!r} is not supported: {why}.")
    if name not in SUPPORTED:
        raise UnsupportedModelError(
            f"XGBoost objective {name!r} is not supported: retrain with one of {sorted(SUPPORTED)}."
        )
    model_param = config["learner_model_param"]
    n_targets = max(int(model_param.get("num_target", "1")), 1)
    spw = _param(obj.get("reg_loss_param", {}), "scale_pos_weight", 1.0)
    if abs(spw - 1.0) > RT_EPS and name not in (*_LOGISTIC, "binary:logitraw", "reg:squarederror"):
        raise UnsupportedModelError(
            f"XGBoost objective {name!r} with scale_pos_weight={spw:g} is not modelled (its base-score "
            "estimate then differs); retrain with scale_pos_weight=1 or pass class weights as sample weights."
        )
    if n_targets > 1 and name != "reg:squarederror":
        raise UnsupportedModelError(
            f"XGBoost objective {name!r} with {n_targets} outputs (targets or quantile alphas) is not "
            "modelled (only squared error has several outputs here); train one model per target or alpha."
        )
    return _objective(name, obj, n_targets, int(model_param.get("num_class", "0")), "reg_loss_param" in obj)


def _objective(name: str, obj: dict[str, Any], n_targets: int, n_class: int, spw: bool) -> Objective:
    if name in _MULTICLASS:
        loss = Loss("softmax", HESSIAN_FLOOR, n_class, {"factor": 2.0})
        return Objective(name, loss, "mean", "log_share_centered32", False, False)
    if name == "reg:squarederror":
        loss = Loss("multi_squared", 0.0, n_targets) if n_targets > 1 else Loss("squared_error")
        return Objective(name, loss, "mean", "identity", False, spw)
    if name in (*_LOGISTIC, "binary:logitraw"):
        link = "identity" if name == "binary:logitraw" else "logit32"
        return Objective(name, Loss("logloss", HESSIAN_FLOOR), "mean", link, False, spw)
    if name == "count:poisson":
        shift = _param(obj["poisson_regression_param"], "max_delta_step", 0.7)
        loss = Loss("poisson", params={"hessian_log_shift": shift})
        return Objective(name, loss, "mean", "log32", False, spw)
    if name == "reg:tweedie":
        power = _param(obj["tweedie_regression_param"], "tweedie_variance_power", 1.5)
        return Objective(name, Loss("tweedie", params={"power": power}), "mean", "log32", False, spw)
    if name == "reg:gamma":
        return Objective(name, Loss("gamma"), "mean", "log32", False, spw)
    if name == "reg:pseudohubererror":
        slope = _param(obj["pseudo_huber_param"], "huber_slope", 1.0)
        return Objective(name, Loss("pseudo_huber", params={"delta": slope}), "newton_step", "identity",
                         False, spw)
    alpha = 0.5
    if name == "reg:quantileerror":
        alphas = json.loads(obj["quantile_loss_param"]["quantile_alpha"])
        alphas = alphas if isinstance(alphas, list) else [alphas]
        if len(alphas) != 1:
            raise UnsupportedModelError(
                f"XGBoost reg:quantileerror with {len(alphas)} quantile_alpha values is not modelled (one "
                "tree per alpha and round; the engine renews single-output trees): train one model per alpha."
            )
        alpha = float(np.float32(alphas[0]))
    scale = 2.0 if name == "reg:absoluteerror" else 1.0  # its loss is |y - F| = 2 pinball_0.5(y - F)
    return Objective(name, Loss("quantile", params={"alpha": alpha, "scale": scale}), "quantile", "identity",
                     True, spw)
