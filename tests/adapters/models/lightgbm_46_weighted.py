"""Write ``lightgbm-4.6-weighted-*.txt`` and ``lightgbm-4.6-weighted.npz`` beside this file: weighted
L1 and quantile models trained by LightGBM 4.6 (whose weighted percentile 4.7 changed), and 4.6's own
retraining ground truth for them, for tests that run under any release.

Run it with LightGBM 4.6 installed, from the repository root::

    PYTHONPATH=tests/adapters python tests/adapters/models/lightgbm_46_weighted.py
"""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np
from lightgbm_helpers import MODELS_46, SETTINGS_46, finite_differences, lightgbm46_data, margin_changes

HERE = Path(__file__).parent


def main() -> None:
    assert lgb.__version__.startswith("4.6."), f"LightGBM 4.6 writes these models, not {lgb.__version__}"
    X, y, w, Xt = lightgbm46_data()
    truth: dict[str, np.ndarray] = {}
    for name, extra in MODELS_46.items():
        model = lgb.LGBMRegressor(objective=name, **extra, **SETTINGS_46).fit(X, y, sample_weight=w)
        model.booster_.save_model(HERE / f"lightgbm-4.6-weighted-{name}.txt")
        truth[f"{name}_refit_rows"], truth[f"{name}_refit"] = margin_changes(model, X, y, Xt, w, step=10)
        # eps as test_lightgbm_objectives' finite differences of renewed leaves
        truth[f"{name}_fd_rows"], truth[f"{name}_fd"] = finite_differences(model, X, y, Xt, w, step=25,
                                                                           eps=2.0**-10)
        print(name, {key: value.shape for key, value in truth.items() if key.startswith(name)})
    np.savez_compressed(HERE / "lightgbm-4.6-weighted.npz", **truth)


if __name__ == "__main__":
    main()
