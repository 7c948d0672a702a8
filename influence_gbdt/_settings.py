"""The scikit-learn conventions the package's estimators share: a repr of their settings."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any


def settings_repr(obj: Any, names: Iterable[str]) -> str:
    """``Type(model=..., setting=value, ...)``: the wrapped model (shortened when its repr is long)
    and every other setting of ``names`` that differs from its constructor default, as
    scikit-learn prints an estimator."""
    defaults = inspect.signature(type(obj).__init__).parameters
    shown = [f"model={_short_repr(obj.model)}"]
    for name in names:
        value = getattr(obj, name)
        if name != "model" and not _same_value(value, defaults[name].default):
            shown.append(f"{name}={value!r}")
    return f"{type(obj).__name__}({', '.join(shown)})"


def _short_repr(model: Any) -> str:
    text = repr(model)
    return text if len(text) <= 80 and "\n" not in text else f"{type(model).__name__}(...)"


def _same_value(value: Any, default: Any) -> bool:
    try:
        return value is default or bool(value == default)
    except (TypeError, ValueError):
        return False
