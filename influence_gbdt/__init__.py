"""influence-gbdt: which training rows made my gradient-boosted model do this?"""

from .errors import InfluenceError, NotFittedError, ReproductionError, UnsupportedModelError

__all__ = ["InfluenceError", "NotFittedError", "ReproductionError", "UnsupportedModelError"]
__version__ = "0.1.0"
