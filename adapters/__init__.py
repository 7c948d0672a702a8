"""Adapters from trained boosters to the engine's :class:`~influence_gbdt.ensemble.TreeEnsemble`.

One module per library; each is imported only when a model of that library is wrapped.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from .base import BoosterAdapter
from .trees import ModelTrees, not_a_model, read_trees, trees_for
from .versions import require

#: Top-level module of the model's class -> "module:AdapterClass" (imported lazily).
_REGISTRY: dict[str, str] = {
    "xgboost": "influence_gbdt.adapters.xgboost:XGBoostAdapter",
    "lightgbm": "influence_gbdt.adapters.lightgbm:LightGBMAdapter",
    "catboost": "influence_gbdt.adapters.catboost:CatBoostAdapter",
}


def adapter_for(model: Any, params: Mapping[str, Any] | None = None) -> BoosterAdapter:
    """Return the adapter for ``model``, chosen by the library its class comes from.

    Raises
    ------
    UnsupportedModelError
        If the model's class does not come from XGBoost, LightGBM or CatBoost, or its library is
        older than the adapters' floor (:data:`.versions.MINIMUM`).
    """
    library = type(model).__module__.split(".")[0]
    target = _REGISTRY.get(library)
    if target is None:
        raise not_a_model(model)
    require(library)
    module_name, class_name = target.split(":")
    adapter_cls: type[BoosterAdapter] = getattr(importlib.import_module(module_name), class_name)
    return adapter_cls(model, params)


__all__ = ["BoosterAdapter", "ModelTrees", "adapter_for", "read_trees", "trees_for"]
