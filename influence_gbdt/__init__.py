"""influence-gbdt: which training rows made my gradient-boosted model do this?

Wrap a trained XGBoost, LightGBM or CatBoost model and score every training row by its influence
on chosen test predictions (score > 0 = harmful)::

    from influence_gbdt import BoostingInfluence
    ex = BoostingInfluence(model).fit(X_train, y_train)
    scores = ex.score_training_points(X_test, y_test)   # (n_train, n_test)
"""

from .errors import (
    InfluenceError,
    InputError,
    LongRunWarning,
    MissingDependencyError,
    NotFittedError,
    ReproductionError,
    UnsupportedModelError,
)
from .explainer import BoostingInfluence
from .explanation import PredictionExplanation
from .tweaking import FeatureTweaking

__all__ = [
    "BoostingInfluence",
    "FeatureTweaking",
    "InfluenceError",
    "InputError",
    "LongRunWarning",
    "MissingDependencyError",
    "NotFittedError",
    "PredictionExplanation",
    "ReproductionError",
    "UnsupportedModelError",
]
__version__ = "0.1.0"
