"""A brute-force reference for feature tweaking's tests: the cheapest candidate over every
combination of cells (the search space of the exact method), by plain enumeration."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from influence_gbdt._tweak_search import Cost


def cheapest_over_cells(
    ft: Any, row: np.ndarray, reached: Callable[[np.ndarray], np.ndarray], max_changes: int | None = None
) -> float:
    """The smallest "l2" cost of moving ``row`` (encoded, (n_features,)) to a combination of one
    cell per feature that ``reached`` accepts (``reached(V)``: a bool per candidate row of V (m,
    n_features)) and that changes at most ``max_changes`` features (None: any number); inf if none
    does. ``ft`` is a fitted ``FeatureTweaking``."""
    s = ft.reader_.structure
    con = ft._constraints(row[None, :])
    point = ft.grid_.point(row, con, ft.epsilon, None)
    g = ft.grid_
    choices = [np.flatnonzero(np.isfinite(point.dist[g.offset[f] : g.offset[f + 1]])) + g.offset[f]
               for f in range(row.size)]
    V = point.rep[np.array(list(itertools.product(*choices)))]
    if max_changes is not None:
        V = V[(V != row).sum(axis=1) <= max_changes]
    cost = Cost("l2", con.scale, con.weight, s.feature_is_categorical)(row, V[reached(V)])
    return float(cost.min(initial=np.inf))
