"""The shared influence engine: LeafRefit, LeafInfluence, their update sets, exact reverse mode.

The engine takes a :class:`~influence_gbdt.ensemble.TreeEnsemble` (the ensemble as seen on its
training set) and knows nothing about any booster. This module is its one door: the rest of the
library imports these names only.

- :class:`InfluenceEngine` replays an ensemble (recomputing every leaf value: the adapters'
  self-check) and scores training rows against :class:`TestPoints`;
- :data:`DEFAULT_CACHE_BYTES`, :data:`REVERSE_BATCH_BYTES`: its memory budget;
- :mod:`.partitioned`: the engine over a training set split in partitions (Dask).

How it is organised (``docs/engine.md``): :mod:`.state` (the named groups of arrays the compiled
kernels share), :mod:`.common` (helpers every pass shares), one module per leaf rule
(:mod:`.plain`, :mod:`.joint`, :mod:`.renewed` with :mod:`.quantile`, :mod:`.backtracking` with
:mod:`.fastobj`), :mod:`.passes` (replay, reverse, forward and refit, choosing each round's rule),
:mod:`.base` (the base margin) and :mod:`.core` (the Python side).
"""

from __future__ import annotations

from . import partitioned
from .core import (
    DEFAULT_CACHE_BYTES,
    REVERSE_BATCH_BYTES,
    Aggregate,
    InfluenceEngine,
    Objective,
    Progress,
    TestPoints,
    UpdateSet,
    check_aggregate,
    resolve_rows,
)

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "REVERSE_BATCH_BYTES",
    "Aggregate",
    "InfluenceEngine",
    "Objective",
    "Progress",
    "TestPoints",
    "UpdateSet",
    "check_aggregate",
    "partitioned",
    "resolve_rows",
]
