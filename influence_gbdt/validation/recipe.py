"""Train, and retrain on changed data, with the booster itself: :class:`TrainingRecipe`."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import InputError
from ..tabular import n_rows, take_rows
from .models import raw_predict

Library = Literal["xgboost", "lightgbm", "catboost"]
Removal = Literal["delete", "zero_weight"]


@dataclass
class TrainingRecipe:
    """How a model was trained, so that it can be retrained on changed data with the booster itself.

    Parameters
    ----------
    library : {"xgboost", "lightgbm", "catboost"}
    params : mapping
        Native training parameters (``xgb.train`` params, ``lgb.train`` params, CatBoost ``CatBoost``
        params), with any objective the adapters support (multiclass included).
    num_boost_round : int
        Number of boosting rounds (CatBoost: ``iterations``).
    seed : int
        Random seed (XGBoost ``seed``, LightGBM ``seed``, CatBoost ``random_seed``).
    n_threads : int
        Fixed thread count (LightGBM needs it for determinism).
    removal : {"delete", "zero_weight"}, optional
        How :meth:`retrain_without` removes rows. Default ``"delete"`` (true leave-one-out, what
        LeafRefit models). ``"zero_weight"`` keeps the row with weight 0, which for CatBoost is not
        the same model: its l2 term scales with the row count.

    Notes
    -----
    The recipe adds only what determinism needs: the seed and thread count for all three,
    ``deterministic=True`` and ``verbose=-1`` for LightGBM, ``allow_writing_files=False`` for
    CatBoost and, for CatBoost, the full quantization grid of the training data of :meth:`fit`
    (``Pool.quantize`` + ``save_quantization_borders``, passed back as ``input_borders``), so that
    removing a row does not re-quantise the features. (``model.save_borders`` would write only the
    borders the splits use, which restricts the candidate splits of every retrain.)
    """

    library: Library
    params: Mapping[str, Any]
    num_boost_round: int = 100
    seed: int = 0
    n_threads: int = 2
    removal: Removal | None = None
    _borders: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.library not in ("xgboost", "lightgbm", "catboost"):
            raise InputError(f"library must be 'xgboost', 'lightgbm' or 'catboost', got {self.library!r}.")
        if self.removal is None:
            self.removal = "delete"
        if self.removal not in ("delete", "zero_weight"):
            raise InputError(f"removal must be 'delete' or 'zero_weight', got {self.removal!r}.")

    # -- training ------------------------------------------------------------------------------

    def fit(self, X: Any, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Any:
        """Train the original model (CatBoost: and remember its feature borders).

        Returns
        -------
        xgboost.Booster, lightgbm.Booster or catboost.CatBoost
        """
        if self.library == "catboost":
            import catboost

            tmp = tempfile.mkdtemp(prefix="influence_gbdt_borders_")
            weakref.finalize(self, shutil.rmtree, tmp, True)
            path = os.path.join(tmp, "borders.tsv")
            grid = catboost.Pool(X, cat_features=self.params.get("cat_features"))
            options = ("border_count", "feature_border_type")
            grid.quantize(**{k: self.params[k] for k in options if k in self.params})
            grid.save_quantization_borders(path)
            self._borders = path
            return self._train(X, y, sample_weight)
        return self._train(X, y, sample_weight)

    def retrain(self, X: Any, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Any:
        """Train a model on ``(X, y, sample_weight)`` with the same parameters, seed and (CatBoost)
        borders as :meth:`fit`."""
        if self.library == "catboost" and self._borders is None:
            raise InputError("Call fit() first: CatBoost retraining reuses the original model's borders.")
        return self._train(X, y, sample_weight)

    def retrain_without(
        self, X: Any, y: ArrayLike, rows: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Any:
        """Retrain without the training rows ``rows`` (deleted, or weight 0 per :attr:`removal`)."""
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        n = n_rows(X)
        w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).copy()
        if self.removal == "zero_weight":
            w[rows] = 0.0
            return self.retrain(X, y, w)
        keep = np.ones(n, dtype=bool)
        keep[rows] = False
        y_arr = np.asarray(y)
        return self.retrain(take_rows(X, keep), y_arr[keep], None if sample_weight is None else w[keep])

    def _train(self, X: Any, y: ArrayLike, sample_weight: ArrayLike | None) -> Any:
        p = dict(self.params)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if self.library == "xgboost":
            import xgboost as xgb

            p.setdefault("seed", self.seed)
            p.setdefault("nthread", self.n_threads)
            dtrain = xgb.DMatrix(X, label=np.asarray(y), weight=w)
            return xgb.train(p, dtrain, num_boost_round=self.num_boost_round)
        if self.library == "lightgbm":
            import lightgbm as lgb

            p.update(seed=p.get("seed", self.seed), deterministic=True, num_threads=self.n_threads)
            p.setdefault("verbose", -1)
            ds = lgb.Dataset(X, label=np.asarray(y), weight=w, params={"verbose": -1}, free_raw_data=False)
            return lgb.train(p, ds, num_boost_round=self.num_boost_round)
        import catboost

        p.setdefault("random_seed", self.seed)
        p.setdefault("thread_count", self.n_threads)
        p.update(iterations=self.num_boost_round, allow_writing_files=False)
        p.setdefault("verbose", False)
        if self._borders is not None:
            p["input_borders"] = self._borders
        cat_features = p.pop("cat_features", None)
        model = catboost.CatBoost(p)
        model.fit(catboost.Pool(X, label=np.asarray(y), weight=w, cat_features=cat_features))
        return model

    # -- native predictions --------------------------------------------------------------------

    def raw_predict(self, model: Any, X: Any) -> NDArray[np.float64]:
        """The model's raw margin on ``X`` (the booster's own prediction), shape (n,), or (n, K)
        for a model with K outputs (classes, targets)."""
        return raw_predict(model, X)
