"""CatBoost ``loss_function`` -> the engine's loss, leaf rule and backtracking objective.

Every CatBoost objective is either reproduced exactly (the self-check then proves it on the
training data) or refused by name with the reason. Facts measured on CatBoost 1.2.10 (project
notes ``catboost-facts.md`` sections 2, 5-7; ``catboost-obj.md``):

=========================  ==================================================================
CatBoost objective         support
=========================  ==================================================================
Logloss                    exact: Newton / Gradient, any steps, AnyImprovement (its fast
                           exp-space objective, bit for bit), class weights
CrossEntropy               exact: labels are probabilities in [0, 1] (float32); like Logloss
                           (its own fast objective)
RMSE                       exact: Newton / Gradient, any steps, boost_from_average
Poisson                    exact: ``e^m`` hessian, any steps (fast exp-space objective)
Tweedie:variance_power=p   exact: the true hessian (not the expected one), any steps
Huber:delta=d              exact with one step, or several without backtracking (hessian 0
                           outside ``|r| < d``); refused: several steps with AnyImprovement
                           (CatBoost's Huber metric then rejects every step, all leaves are 0)
Quantile:alpha=a, MAE      exact with ``leaf_estimation_method='Exact'`` (the default): renewed
                           leaves, CatBoost's unweighted leaf quantile of float32 residuals
                           +- delta; refused: Gradient / Newton (a zero band of width delta
                           around each residual), and Exact with several iterations
MultiClassOneVsAll         exact: one tree per class and round sharing the structure,
                           diagonal Newton ``p(1-p)`` or Gradient steps, one step
MultiRMSE                  exact: one tree per target, diagonal Newton (h = 1) or Gradient,
                           one step, per-target boost_from_average
MultiClass                 exact: Newton (the default; one joint step per leaf with the full
                           K x K softmax hessian, ``-(H + lam I)^-1 G``, lam floored at
                           ``f32(max H_kk) * FLT_EPSILON``) or Gradient, one step
several steps, K > 1       refused: one backtracking decision and each step's softmax couple
                           the K trees of a round; retrain with leaf_estimation_iterations=1
Expectile, LogLinQuantile, refused: their leaf steps are not modelled (retrain with one of the
MAPE, LogCosh, Lq, ...     above)
=========================  ==================================================================

Loss parameters are taken in double: measured, Tweedie's ``variance_power``, Huber's ``delta`` and
the Exact quantile's ``alpha`` reproduce every leaf bit for bit in double and differ by ~1e-8 (a
whole order statistic for the quantile) in float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from influence_gbdt.errors import UnsupportedModelError

#: The engine's loss and parameters per CatBoost name; ``kind`` says how labels are read.
_KINDS = {
    "Logloss": ("logloss", "binary"),
    "CrossEntropy": ("logloss", "probability"),
    "RMSE": ("squared_error", "regression"),
    "Poisson": ("poisson", "regression"),
    "Tweedie": ("tweedie", "regression"),
    "Huber": ("huber", "regression"),
    "Quantile": ("quantile", "regression"),
    "MAE": ("quantile", "regression"),
    "MultiClass": ("softmax", "multiclass"),
    "MultiClassOneVsAll": ("one_vs_all", "multiclass"),
    "MultiRMSE": ("multi_squared", "multi_target"),
}
#: How CatBoost computes the loss an AnyImprovement step must lower: its exp-space losses.
_FAST = {"Logloss": "fast_logloss", "CrossEntropy": "fast_cross_entropy", "Poisson": "fast_poisson"}
#: CatBoost's default Quantile / MAE ``delta`` (the +- shift of an Exact leaf and of the base).
_QUANTILE_DELTA = 1e-6


@dataclass(frozen=True)
class CatBoostObjective:
    """How one CatBoost ``loss_function`` maps onto the engine.

    Attributes
    ----------
    name : str
        CatBoost's name (``"Quantile"``, ...).
    loss : str
        The engine's loss name (:mod:`influence_gbdt.losses`).
    params : dict
        The engine loss's parameters.
    kind : {"binary", "probability", "regression", "multiclass", "multi_target"}
        How labels are read: class indices (binary / multiclass), probabilities in [0, 1], numbers,
        or one number per target.
    renewed : bool
        Leaves are CatBoost's Exact quantiles of the residuals.
    quantile_alpha, quantile_delta : float
        The quantile level and CatBoost's ``delta`` (renewed leaves and the quantile base).
    """

    name: str
    loss: str
    params: dict[str, float] = field(default_factory=dict)
    kind: str = "regression"
    renewed: bool = False
    quantile_alpha: float = 0.5
    quantile_delta: float = 0.0

    @property
    def multi_output(self) -> bool:
        """Whether a leaf holds one value per class or target (one engine tree per output)."""
        return self.kind in ("multiclass", "multi_target")

    @property
    def classifier(self) -> bool:
        """Whether labels are classes (class weights apply, ``class_names`` encode them)."""
        return self.kind in ("binary", "multiclass")

    def backtracking_objective(self) -> str:
        """The engine's ``backtracking_objective`` for AnyImprovement steps of this loss."""
        return _FAST.get(self.name, "exact")


def _split(loss_function: str) -> tuple[str, dict[str, str]]:
    """``"Quantile:alpha=0.3;delta=1e-6"`` -> ``("Quantile", {"alpha": "0.3", "delta": "1e-6"})``."""
    name, _, rest = str(loss_function).partition(":")
    params = dict(part.split("=", 1) for part in rest.split(";") if "=" in part)
    return name.strip(), {k.strip(): v.strip() for k, v in params.items()}


def parse_objective(p: Mapping[str, Any]) -> CatBoostObjective:
    """The objective of a model's ``get_all_params()`` ``p``, its leaf rule checked.

    Raises
    ------
    UnsupportedModelError
        Naming the objective or leaf setting and what to retrain with.
    """
    name, raw = _split(p.get("loss_function", ""))
    if name not in _KINDS:
        raise UnsupportedModelError(
            f"CatBoost loss_function {name!r} is not supported: its leaf steps are not modelled. "
            f"Supported: {', '.join(_KINDS)} (see influence_gbdt.adapters.catboost_objectives)."
        )
    loss, kind = _KINDS[name]
    known = {"Tweedie": {"variance_power"}, "Huber": {"delta"}, "Quantile": {"alpha", "delta"},
             "MAE": {"delta"}}.get(name, set()) | {"use_weights"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UnsupportedModelError(f"CatBoost loss_function {p['loss_function']!r}: parameters {unknown} "
                                    "are not modelled; retrain without them.")
    if raw.get("use_weights", "true").lower() == "false":
        raise UnsupportedModelError("CatBoost loss_function with use_weights=false is not modelled; "
                                    "retrain without it.")
    num = {k: float(v) for k, v in raw.items() if k != "use_weights"}
    if name == "Tweedie":
        objective = CatBoostObjective(name, loss, {"power": num["variance_power"]}, kind)
    elif name == "Huber":
        objective = CatBoostObjective(name, loss, {"delta": num["delta"], "outside_hessian": 0.0,
                                                   "closed": 0.0}, kind)
    elif name in ("Quantile", "MAE"):
        alpha = num.get("alpha", 0.5)
        # MAE's value is |r| = 2 * pinball_0.5(r); a quantile's is the pinball loss.
        objective = CatBoostObjective(
            name, loss, {"alpha": alpha, "scale": 2.0 if name == "MAE" else 1.0}, kind, renewed=True,
            quantile_alpha=alpha, quantile_delta=float(raw.get("delta", _QUANTILE_DELTA)),
        )
    elif loss == "logloss":  # Logloss, CrossEntropy: p = 1 - 1 / (1 + e^m), as CatBoost computes it
        objective = CatBoostObjective(name, loss, {"one_minus": 1.0}, kind)
    else:
        objective = CatBoostObjective(name, loss, {}, kind)
    _check_leaf_rule(objective, p)
    return objective


def _check_leaf_rule(o: CatBoostObjective, p: Mapping[str, Any]) -> None:
    """Refuse leaf-estimation settings of objective ``o`` that are not reproduced."""
    method = p.get("leaf_estimation_method")
    iterations = int(p.get("leaf_estimation_iterations", 1))
    backtracking = iterations > 1 and p.get("leaf_estimation_backtracking", "No") == "AnyImprovement"
    refusals = [
        (o.renewed and method != "Exact",
         f"{o.name} with leaf_estimation_method={method!r} takes steps on a gradient that is 0 within "
         "delta of each residual, which is not modelled; retrain with leaf_estimation_method='Exact' "
         "(the default)"),
        (o.renewed and iterations > 1,
         f"{o.name} with leaf_estimation_iterations={iterations} repeats the same Exact step, "
         "accepted or not by the backtracking walk; retrain with leaf_estimation_iterations=1"),
        (not o.renewed and method not in ("Newton", "Gradient"),
         f"leaf_estimation_method={method!r} is not modelled for {o.name}; retrain with 'Newton' or "
         "'Gradient'"),
        (o.name == "Huber" and backtracking,
         "Huber with several leaf steps and AnyImprovement backtracking: CatBoost's Huber metric "
         "rejects every step (all leaves are 0); retrain with leaf_estimation_iterations=1 or "
         "leaf_estimation_backtracking='No'"),
        (o.multi_output and iterations > 1,
         f"{o.name} with leaf_estimation_iterations={iterations}: each step of one class is taken "
         "at the margins every class's earlier steps moved (and AnyImprovement decides for all "
         "classes at once), which is not modelled; retrain with leaf_estimation_iterations=1"),
    ]
    for bad, why in refusals:
        if bad:
            raise UnsupportedModelError(f"Cannot reproduce this CatBoost model: {why}.")
