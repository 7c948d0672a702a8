"""scikit-learn ``Pipeline``\\ s that end in a booster: the preprocessing steps in front of it.

A pipeline such as ``make_pipeline(ColumnTransformer(...), LGBMClassifier())`` trains its booster on
``pipeline[:-1].transform(X)``... almost: ``Pipeline.fit`` gives the booster each step's
``fit_transform(X)``, which for nearly every transformer equals ``fit(X).transform(X)``. Where it
does not (scikit-learn's ``TargetEncoder`` encodes the training rows by cross fitting), the rows the
booster saw cannot be rebuilt from the fitted pipeline, so such a pipeline is refused by name; any
other step whose ``fit_transform`` differs fails the adapter's self-check, whose message then says
so (:data:`REPRODUCTION_HINT`). imbalanced-learn's pipelines (a ``Pipeline`` subclass) are refused
where they hold a sampler (a step with ``fit_resample``): it changes the training rows in ``fit``
only.

scikit-learn is never imported here: an object can only be a ``Pipeline`` if ``sklearn.pipeline``
is already imported (unpickling a pipeline imports it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from .errors import UnsupportedModelError

#: Added to the self-check's message when the model is a pipeline.
REPRODUCTION_HINT = (
    " The model is a Pipeline: its booster is checked on pipeline[:-1].transform(X), which must be "
    "the rows the booster was trained on. Pass the raw training rows the pipeline was fitted on (not "
    "rows already transformed); a step whose fit_transform differs from fit(X).transform(X) (a "
    "cross-fitted or randomised encoding) breaks this: wrap the booster alone, with the rows it saw."
)

#: Transformers whose ``fit_transform`` of the training rows differs from their ``transform`` of
#: them by design: (module prefix, class name) -> why.
_CROSS_FITTED = {
    ("sklearn.", "TargetEncoder"): "encodes the training rows by cross fitting in fit_transform",
}


def is_pipeline(model: Any) -> bool:
    """Whether ``model`` is a scikit-learn ``Pipeline`` (without importing scikit-learn)."""
    module = sys.modules.get("sklearn.pipeline")
    return module is not None and isinstance(model, module.Pipeline)


def split_pipeline(model: Any) -> tuple[Callable[[Any], Any] | None, Any]:
    """``(transform, booster)`` of ``model``: for a ``Pipeline``, the function that maps rows as
    the pipeline's users pass them (raw features) to the booster's inputs (every step before the
    last, nested pipelines flattened) and its last step; for any other model, ``(None, model)``.

    Raises
    ------
    UnsupportedModelError
        The pipeline ends in ``"passthrough"`` (no model), resamples its training rows (a sampler),
        or one of its steps encodes the training rows otherwise than it encodes other rows
        (:data:`_CROSS_FITTED`).
    """
    if not is_pipeline(model):
        return None, model
    steps = list(_flat_steps(model))
    name, booster = steps[-1]
    if booster is None or booster == "passthrough":
        raise UnsupportedModelError(
            f"The Pipeline's last step {name!r} is {booster!r}: there is no model to explain. Pass a "
            "pipeline whose last step is a trained XGBoost, LightGBM or CatBoost model."
        )
    for step_name, step in steps[:-1]:
        if hasattr(step, "fit_resample"):
            raise UnsupportedModelError(
                f"The Pipeline's step {step_name!r} is a sampler ({type(step).__name__}): it resampled "
                "the training rows when the pipeline was fitted, so its booster was trained on other "
                "rows than those you pass. Wrap the booster alone, pipeline[-1], with the rows it was "
                "trained on (the steps' output, resampled as in training)."
            )
        for inner in _transformers(step):
            why = _cross_fitted(inner)
            if why:
                raise UnsupportedModelError(
                    f"The Pipeline's step {step_name!r} holds a {type(inner).__name__}, which {why}: the "
                    "rows its booster was trained on cannot be rebuilt from the fitted pipeline. Wrap "
                    "the booster alone, pipeline[-1], with the exact rows it was trained on (for "
                    "example: encode the training rows once, keep them, and train the booster on them)."
                )
    transformers = [step for _, step in steps[:-1] if step is not None and step != "passthrough"]
    if not transformers:
        return None, booster

    def transform(X: Any) -> Any:
        for step in transformers:
            X = step.transform(X)
        return X

    return transform, booster


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
