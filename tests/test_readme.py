"""The README's Python blocks run as written, on the shipped Adult data and a default model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from influence_gbdt.datasets import ADULT_CATEGORICAL, load_adult

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_the_blocks_this_file_runs() -> None:
    blocks = _python_blocks()
    assert any("BoostingInfluence(model)" in b for b in blocks)
    assert any("FeatureTweaking(model" in b for b in blocks)


@pytest.fixture(scope="module")
def adult_model() -> dict[str, object]:
    """``LGBMClassifier()`` at its defaults on all of Adult's training split, categorical columns as
    pandas categories (the names the README's blocks use)."""
    lightgbm = pytest.importorskip("lightgbm")
    X_train, y_train = load_adult("train")
    X_test, y_test = load_adult("test")
    for col in ADULT_CATEGORICAL:
        kinds = pd.CategoricalDtype(sorted(set(X_train[col]) | set(X_test[col])))
        X_train[col], X_test[col] = X_train[col].astype(kinds), X_test[col].astype(kinds)
    model = lightgbm.LGBMClassifier(verbose=-1).fit(X_train, y_train)
    rejected = X_test[model.predict(X_test) == 0].iloc[:3]
    return dict(model=model, X_train=X_train, y_train=y_train, X_test=X_test, y_test=y_test,
                X_rejected=rejected)


@pytest.mark.parametrize("marker", ["BoostingInfluence(model)", "FeatureTweaking(model"])
def test_readme_block_runs_on_adult(adult_model: dict[str, object], marker: str) -> None:
    (block,) = [b for b in _python_blocks() if marker in b]
    namespace = dict(adult_model)
    if marker.startswith("Boosting"):
        quiet = "ex = BoostingInfluence(model, progress=False)"
        block = block.replace("ex = BoostingInfluence(model)", quiet)
    exec(compile(block, str(README), "exec"), namespace)  # the README's own code
    if marker.startswith("Boosting"):
        assert namespace["S"].shape == (32561, 100)
        assert np.all(np.isfinite(namespace["s"].to_numpy()))
    else:
        tweaked = namespace["ft"].tweak(namespace["X_rejected"])
        assert len(tweaked) == 3
