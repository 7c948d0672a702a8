"""scikit-learn compositions around a booster: a ``Pipeline`` whose last step is the booster, and a
``TransformedTargetRegressor`` whose regressor is one (or such a pipeline; either may hold the other).

A pipeline such as ``make_pipeline(ColumnTransformer(...), LGBMClassifier())`` trains its booster on
``pipeline[:-1].transform(X)``... almost: ``Pipeline.fit`` gives the booster each step's
``fit_transform(X)``, which for nearly every transformer equals ``fit(X).transform(X)``. Where it
does not (scikit-learn's ``TargetEncoder`` encodes the training rows by cross fitting), the rows the
booster saw cannot be rebuilt from the fitted pipeline, so such a pipeline is refused by name; any
other step whose ``fit_transform`` differs fails the adapter's self-check, whose message then says
so (:data:`REPRODUCTION_HINT`). imbalanced-learn's pipelines (a ``Pipeline`` subclass) are refused
where they hold a sampler (a step with ``fit_resample``): it changes the training rows in ``fit``
only.

A ``TransformedTargetRegressor`` trains its regressor on ``transformer_.transform(y)`` (``func(y)``
for ``func=``), as a column, squeezed back to one dimension for a one-dimensional ``y``:
:func:`unwrap` rebuilds those labels the same way, so the booster is scored on the loss it
minimised, in the transformed target (its raw prediction is the regressor's, before
``inverse_func``).

A hyper-parameter search (``GridSearchCV``, ``RandomizedSearchCV``, the halving searches) predicts
with its ``best_estimator_``, refitted on all the rows the search was given, and a
``FrozenEstimator`` with the estimator it holds: :func:`selected` takes that model instead. Other
scikit-learn wrappers whose predictions are not one booster's (calibration, one booster per target
or class, ensembles of models) are refused with what to explain instead (:func:`why_not`).

scikit-learn is never imported here: an object can only be one of these if its module is already
imported (unpickling it imports it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from .errors import UnsupportedModelError

#: Added to the self-check's message when the model wraps its booster.
REPRODUCTION_HINT = (
    " The model wraps its booster (a Pipeline or a TransformedTargetRegressor): the booster is checked "
    "on the rows and labels they make of yours (pipeline[:-1].transform(X), the target transform of y), "
    "which must be what it was trained on. Pass the raw training rows and labels the model was fitted "
    "on (not transformed ones); a step whose fit_transform differs from fit(X).transform(X) (a "
    "cross-fitted or randomised encoding) breaks this: wrap the booster alone, with the rows it saw."
)

#: Transformers whose ``fit_transform`` of the training rows differs from their ``transform`` of
#: them by design: (module prefix, class name) -> why.
_CROSS_FITTED = {
    ("sklearn.", "TargetEncoder"): "encodes the training rows by cross fitting in fit_transform",
}


def _is(model: Any, module_name: str, class_name: str) -> bool:
    """Whether ``model`` is an instance of ``module_name.class_name``, if that module is imported
    (never importing it: an object of the class exists only once its module is imported)."""
    module = sys.modules.get(module_name)
    return module is not None and isinstance(model, getattr(module, class_name))


def is_pipeline(model: Any) -> bool:
    """Whether ``model`` is a scikit-learn ``Pipeline`` (without importing scikit-learn)."""
    return _is(model, "sklearn.pipeline", "Pipeline")


class Unwrapped(NamedTuple):
    """A model's booster and what turns the user's data into the booster's (None: nothing to do)."""

    rows: Callable[[Any], Any] | None  # X as the user passes it -> the booster's inputs
    labels: Callable[[Any], Any] | None  # y as the user passes it -> the booster's labels
    booster: Any


def is_target_transformed(model: Any) -> bool:
    """Whether ``model`` is a scikit-learn ``TransformedTargetRegressor`` (without importing
    scikit-learn)."""
    return _is(model, "sklearn.compose", "TransformedTargetRegressor")


def unwrap(model: Any) -> Unwrapped:
    """The booster inside ``model`` and the maps from the user's rows and labels to the booster's:
    a ``Pipeline``'s steps before its last (nested pipelines flattened), a
    ``TransformedTargetRegressor``'s target transform, composed where one holds the other, a
    search's or ``FrozenEstimator``'s model in its place (:func:`selected`); for a booster,
    ``Unwrapped(None, None, model)``.

    Raises
    ------
    UnsupportedModelError
        The pipeline ends in ``"passthrough"`` (no model), resamples its training rows (a sampler),
        or one of its steps encodes the training rows otherwise than it encodes other rows
        (:data:`_CROSS_FITTED`); a ``TransformedTargetRegressor`` that is not fitted; a search
        without its ``best_estimator_`` (:func:`selected`).
    """
    model = selected(model)
    if is_target_transformed(model):
        if not hasattr(model, "regressor_"):
            raise UnsupportedModelError(
                "The TransformedTargetRegressor is not fitted: fit it first (the explainer wraps a "
                "trained model)."
            )
        inner = unwrap(model.regressor_)
        return Unwrapped(inner.rows, _then(lambda y: _target(model, y), inner.labels), inner.booster)
    if not is_pipeline(model):
        return Unwrapped(None, None, model)
    steps = list(_flat_steps(model))
    name, last = steps[-1]
    if last is None or last == "passthrough":
        raise UnsupportedModelError(
            f"The Pipeline's last step {name!r} is {last!r}: there is no model to explain. Pass a "
            "pipeline whose last step is a trained XGBoost, LightGBM or CatBoost model."
        )
    for step_name, step in steps[:-1]:
        _check_step(step_name, step)
    transformers = [step for _, step in steps[:-1] if step is not None and step != "passthrough"]

    def transform(X: Any) -> Any:
        for step in transformers:
            X = step.transform(X)
        return X

    inner = unwrap(last)
    return Unwrapped(_then(transform if transformers else None, inner.rows), inner.labels, inner.booster)


def selected(model: Any) -> Any:
    """The model that ``model`` predicts with, when it is a fitted hyper-parameter search (its
    ``best_estimator_``) or a ``FrozenEstimator`` (its ``estimator``), repeatedly; else ``model``.

    Raises
    ------
    UnsupportedModelError
        A search that is not fitted, or was run with ``refit=False`` (no model was trained on all
        its rows).
    """
    while True:
        if _is(model, "sklearn.model_selection._search", "BaseSearchCV"):
            if not hasattr(model, "best_estimator_"):
                done = hasattr(model, "cv_results_")
                raise UnsupportedModelError(
                    f"The {type(model).__name__} has no best_estimator_: "
                    + ("it ran with refit=False, so no model was trained on all its rows. Train the best "
                       "parameters (search.best_params_) on the training rows and pass that model."
                       if done else "it is not fitted. Fit it first (the explainer wraps a trained model).")
                )
            model = model.best_estimator_
        elif _is(model, "sklearn.frozen", "FrozenEstimator"):
            model = model.estimator
        else:
            return model


_ONE_PER_TARGET = (
    "it trains one booster per target: explain each, BoostingInfluence(model.estimators_[k]).fit(X, Y[:, k])"
)
_CHAINED = (
    "each of its boosters also takes the earlier targets as features: explain model.estimators_[k] on X "
    "with those columns appended (in model.order_)"
)
_OWN_BOOSTING = (
    "it is scikit-learn's own gradient boosting, whose trees no adapter reads: train an XGBoost, "
    "LightGBM or CatBoost model instead (LightGBM's is the closest to HistGradientBoosting)"
)
_COMBINES = (
    "it combines several models' predictions: explain each booster inside it (model.estimators_) on "
    "the rows it was trained on"
)

#: scikit-learn wrappers whose predictions are not one booster's: class name -> why, and what to do.
_NOT_ONE_BOOSTER = {
    "CalibratedClassifierCV": (
        "its probabilities pass the booster's through a calibration map fitted on other rows, and with "
        "cv folds average copies of the booster each trained on one fold. Explain the booster it "
        "calibrates, on the rows that booster was trained on (with cv folds: "
        "model.calibrated_classifiers_[i].estimator and its fold's training rows)"
    ),
    "OneVsRestClassifier": (
        "it trains one booster per class on a binary label: explain model.estimators_[k] with labels "
        "(y == model.classes_[k]), or train the booster on all classes (every booster does multiclass)"
    ),
    "OneVsOneClassifier": (
        "it trains one booster per pair of classes on that pair's rows: train the booster on all "
        "classes instead (every booster does multiclass)"
    ),
    **dict.fromkeys(("MultiOutputRegressor", "MultiOutputClassifier"), _ONE_PER_TARGET),
    **dict.fromkeys(("RegressorChain", "ClassifierChain"), _CHAINED),
    **dict.fromkeys(("HistGradientBoostingClassifier", "HistGradientBoostingRegressor",
                     "GradientBoostingClassifier", "GradientBoostingRegressor"), _OWN_BOOSTING),
    **dict.fromkeys(("VotingClassifier", "VotingRegressor", "StackingClassifier", "StackingRegressor",
                     "BaggingClassifier", "BaggingRegressor"), _COMBINES),
}


def why_not(model: Any) -> str | None:
    """Why a scikit-learn wrapper ``model`` cannot be explained as one booster, and what to pass
    instead (None if it is none of those, :data:`_NOT_ONE_BOOSTER`)."""
    cls = type(model)
    if cls.__module__.split(".")[0] != "sklearn":
        return None
    why = _NOT_ONE_BOOSTER.get(cls.__name__)
    return None if why is None else f"scikit-learn's {cls.__name__} is not supported: {why}."


def _then(first: Callable[[Any], Any] | None,
          second: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """``second`` after ``first`` (either may be None: nothing to do)."""
    if first is None or second is None:
        return first or second
    return lambda value: second(first(value))


def _target(model: Any, y: Any) -> Any:
    """``y`` as ``model`` (a fitted ``TransformedTargetRegressor``) gave it to its regressor: its
    ``transformer_``'s transform of ``y`` as a column, squeezed back for a one-dimensional ``y``
    (as ``TransformedTargetRegressor.fit`` does)."""
    y = np.asarray(y)
    if y.dtype == object:
        y = y.astype(np.float64)
    out = np.asarray(model.transformer_.transform(y.reshape(-1, 1) if y.ndim == 1 else y))
    if out.ndim == 2 and out.shape[1] == 1 and y.ndim == 1:
        out = out[:, 0]
    return out


def _check_step(name: str, step: Any) -> None:
    """Refuse a pipeline step before the booster whose output for the training rows is not what
    the booster was trained on (a sampler, a cross-fitted encoder)."""
    if hasattr(step, "fit_resample"):
        raise UnsupportedModelError(
            f"The Pipeline's step {name!r} is a sampler ({type(step).__name__}): it resampled "
            "the training rows when the pipeline was fitted, so its booster was trained on other "
            "rows than those you pass. Wrap the booster alone, pipeline[-1], with the rows it was "
            "trained on (the steps' output, resampled as in training)."
        )
    for inner in _transformers(step):
        why = _cross_fitted(inner)
        if why:
            raise UnsupportedModelError(
                f"The Pipeline's step {name!r} holds a {type(inner).__name__}, which {why}: the "
                "rows its booster was trained on cannot be rebuilt from the fitted pipeline. Wrap "
                "the booster alone, pipeline[-1], with the exact rows it was trained on (for "
                "example: encode the training rows once, keep them, and train the booster on them)."
            )


def _flat_steps(pipeline: Any) -> Iterator[tuple[str, Any]]:
    """The pipeline's (name, step) pairs in order, those of nested pipelines in their place."""
    for name, step in pipeline.steps:
        if is_pipeline(step):
            yield from _flat_steps(step)
        else:
            yield name, step


def _transformers(step: Any) -> Iterator[Any]:
    """``step`` and the transformers it holds (a ColumnTransformer's, a FeatureUnion's, a nested
    pipeline's), depth first."""
    yield step
    inner = getattr(step, "transformers_", None) or getattr(step, "transformer_list", None) or []
    for entry in inner:
        child = entry[1]
        if not isinstance(child, str):
            yield from _transformers(child)
    if is_pipeline(step):
        for _, child in step.steps:
            yield from _transformers(child)


def _cross_fitted(step: Any) -> str | None:
    """Why ``step``'s ``fit_transform`` differs from its ``transform`` of the same rows (None if
    it is not a known such transformer)."""
    cls = type(step)
    for (prefix, name), why in _CROSS_FITTED.items():
        if cls.__name__ == name and cls.__module__.startswith(prefix):
            return why
    return None
