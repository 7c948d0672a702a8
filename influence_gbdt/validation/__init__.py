"""Validate influence scores against real leave-one-out retraining with the booster itself.

The scores of :class:`~influence_gbdt.BoostingInfluence` are *proxies*: ``leaf_refit`` recomputes
every leaf without a training row while keeping every tree's structure (the paper's Assumption 1),
``leaf_influence`` is its first-order (derivative) version, and the Fast update sets approximate
both. This module measures how close they come to what the booster really does when a row is
removed and the model is retrained from scratch with the same parameters and seed:

* :class:`TrainingRecipe` -- library + parameters + seed + rounds; ``fit`` / ``retrain`` /
  ``retrain_without`` train with the booster itself (XGBoost ``xgb.train``, LightGBM ``lgb.train``
  with ``deterministic=True`` and fixed threads, CatBoost with the original model's
  ``input_borders``, so that deleting a row does not re-quantise the features).
* :func:`same_structure` / :func:`structure_report` -- did the retrained model partition the
  remaining training rows (and the test rows) exactly as the original one?
* :func:`loo_study` -- leave-one-out for a set of rows, compared with every method / update set:
  exactness where the structure was kept, Pearson / Spearman correlation, sign agreement and
  NDCG@k (Sharchilev et al. 2018, Table 2) split into structure-kept and structure-changed rows.
* :func:`derivative_study` -- LeafInfluence against central finite differences of retraining with
  the row's weight moved by +-eps (the paper's Proxy 2).
* :func:`write_report` -- Markdown summary plus scatter plots (matplotlib optional).
* :func:`removal_curve` -- remove the top-m harmful rows (paper Figure 3) vs m random rows, retrain,
  measure the real change of the test loss.

Sign convention everywhere: ``actual = L(F) - L(F_without_rows)``, > 0 = the removed rows were
harmful (removing them lowered the loss), the same sign as the scores.

NDCG definition (documented choice; the paper says "NDCG with linear gains"): for one test point,
training rows are ranked by a method's score (descending); the gain of a row is its *true* change
clipped at zero, ``max(actual, 0)`` (only harmful rows are relevant: the search is for harmful
rows); ``DCG@k = sum_{r=1..k} gain_r / log2(r + 1)``, normalised by the DCG of the ideal order.
Test points whose ideal DCG is 0 (no harmful row among those studied) are left out of the mean.
"""

from .metrics import compare, ndcg_at_k
from .models import leaf_ids, raw_predict, same_structure, split_signature, structure_report
from .recipe import TrainingRecipe
from .report import markdown_table, render_study, write_report
from .retraining import Retraining, test_losses
from .studies import (
    DEFAULT_METHODS,
    DERIVATIVE_METHODS,
    LOOStudy,
    derivative_study,
    loo_study,
    method_label,
    removal_curve,
)

__all__ = [
    "DEFAULT_METHODS",
    "DERIVATIVE_METHODS",
    "LOOStudy",
    "Retraining",
    "TrainingRecipe",
    "compare",
    "derivative_study",
    "leaf_ids",
    "loo_study",
    "markdown_table",
    "method_label",
    "ndcg_at_k",
    "raw_predict",
    "removal_curve",
    "render_study",
    "same_structure",
    "split_signature",
    "structure_report",
    "test_losses",
    "write_report",
]
