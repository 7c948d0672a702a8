"""The exceptions raised by influence-gbdt.

Every exception the library raises on purpose derives from :class:`InfluenceError`, so
``except InfluenceError`` catches them all. Where the cause is the caller's input the class is
also a :class:`ValueError` (or :class:`TypeError`), so code written for scikit-learn keeps working.
Each message says what is wrong and what to do about it.
"""

from __future__ import annotations


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
    """A method that needs :meth:`BoostingInfluence.fit` was called before it."""


class InputError(InfluenceError, ValueError):
    """An argument has the wrong shape, type, or values (NaN labels, labels outside the domain)."""
