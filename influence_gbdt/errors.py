"""The exceptions raised by influence-gbdt.

Every exception the library raises on purpose derives from :class:`InfluenceError`, so
``except InfluenceError`` catches them all. Where the cause is the caller's input the class is
also a :class:`ValueError` (or :class:`TypeError`), so code written for scikit-learn keeps working.
Each message says what is wrong and what to do about it.
"""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType


class InfluenceError(Exception):
    """Base class of every error raised by influence-gbdt."""


class UnsupportedModelError(InfluenceError, ValueError):
    """The model was trained with a setting whose leaf values cannot be reproduced.

    Examples: row subsampling, the dart booster, monotone constraints, CTR-encoded categorical
    features, an objective we do not model yet. The message names the setting and what to
    retrain with.
    """


class ReproductionError(InfluenceError, ValueError):
    """The self-check failed: the stored leaf values could not be recomputed from the data.

    Usually the training data given is not the data the model was trained on (other rows,
    shuffled rows, other labels, missing sample weights) or a training parameter is wrong.
    """


class NotFittedError(InfluenceError, AttributeError):
    """A method that needs :meth:`BoostingInfluence.fit` was called before it.

    When scikit-learn is imported in the process, the error raised is also scikit-learn's
    ``NotFittedError`` (so ``except sklearn.exceptions.NotFittedError`` catches it); scikit-learn is
    never imported for it (it would add a second to every import of this package).
    """

    def __new__(cls, *args: object, **kwargs: object) -> NotFittedError:
        if cls is NotFittedError and "sklearn.exceptions" in sys.modules:
            cls = _not_fitted_for_sklearn()
        return super().__new__(cls, *args, **kwargs)


def _not_fitted_for_sklearn() -> type[NotFittedError]:
    """:class:`NotFittedError` that also derives from scikit-learn's (made once)."""
    global SklearnNotFittedError
    if SklearnNotFittedError is None:
        from sklearn.exceptions import NotFittedError as theirs

        SklearnNotFittedError = type("SklearnNotFittedError", (NotFittedError, theirs),
                                     {"__module__": __name__, "__doc__": NotFittedError.__doc__})
    return SklearnNotFittedError


#: :class:`NotFittedError` and scikit-learn's, made at the first raise in a process that imported
#: scikit-learn (a module attribute, so that the error pickles).
SklearnNotFittedError: type[NotFittedError] | None = None


class InputError(InfluenceError, ValueError):
    """An argument has the wrong shape, type, or values (NaN labels, labels outside the domain)."""


class MissingDependencyError(InfluenceError, ImportError):
    """An optional package is not installed; the message names the extra that installs it, e.g.
    ``pip install "influence-gbdt[xgboost]"``."""


class LongRunWarning(UserWarning):
    """Scoring is projected to take hours; the message says what to score instead."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import an optional dependency, or say which extra installs it.

    Raises
    ------
    MissingDependencyError
        ``"<purpose> needs <module>: pip install "influence-gbdt[<extra>]""``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f'{purpose} needs {module} ({exc}): pip install "influence-gbdt[{extra}]"'
        ) from None


def booster_message(exc: BaseException) -> str:
    """A booster's error message without its source location prefixes, on one line."""
    text = " ".join(str(exc).split("Stack trace:")[0].split()) or type(exc).__name__
    text = re.sub(r"^\[[\d:]+\]\s*", "", text)  # XGBoost's timestamp
    text = re.sub(r"^[\w/.\-]+\.(?:cc|cpp|h|hpp):\d+:\s*", "", text)  # C++ source location
    text = re.sub(r"^Check failed: [^:]*:\s*", "", text)
    return text.rstrip(".")
