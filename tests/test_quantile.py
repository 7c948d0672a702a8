"""The renewed leaves' order statistics (``engine.quantile``): selected in O(n) where no weights
are summed in sorted order, they must be the rows a stable sort puts there, ties included: a
quantile's derivative flows to that row's residual, so another row of equal residual would score
another training point."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from engine_reference import ref_quantile
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from influence_gbdt.engine.quantile import METHODS, _kth, quantile

#: Residuals with many ties (a few values, both zeros among them), as integer labels give.
TIED = hnp.arrays(np.float64, st.integers(1, 60), elements=st.sampled_from([-2.5, -1.0, -0.0, 0.0, 1.0, 3.0]))


@numba.njit(cache=False)
def _kth_all(r: np.ndarray) -> np.ndarray:
    out = np.empty(r.shape[0], dtype=np.int64)
    for k in range(r.shape[0]):
        out[k] = _kth(r, k)
    return out


@numba.njit(cache=False)
def _quantile(method: int, r: np.ndarray, w: np.ndarray, alpha: float, weighted: bool,
              delta: float) -> tuple[float, np.ndarray, np.ndarray]:
    sel, coef, wd = np.empty(2, dtype=np.int64), np.empty(2), np.empty(4)
    q = quantile(method, r, w, alpha, weighted, delta, sel, coef, wd, np.empty(r.shape[0], dtype=np.int64),
                 False)
    return q, sel, coef


@pytest.mark.calls_kernels  # compiles the test's own kernels
@settings(max_examples=200, deadline=None)
@given(TIED | hnp.arrays(np.float64, st.integers(1, 300), elements=st.floats(-1e3, 1e3)))
def test_the_kth_row_is_the_stable_sorts(r: np.ndarray) -> None:
    np.testing.assert_array_equal(_kth_all(r), np.argsort(r, kind="mergesort"))


@pytest.mark.calls_kernels
@settings(max_examples=200, deadline=None)
@given(TIED, st.sampled_from(sorted(METHODS)), st.floats(0.01, 0.99))
def test_an_unweighted_quantile_follows_the_rows_a_stable_sort_selects(
    r: np.ndarray, method: str, alpha: float
) -> None:
    """Its value is the reference definition's (``engine_reference.ref_quantile``, from a sort),
    and each row it follows holds the order statistic the stable sort puts at that place."""
    ones = np.ones_like(r)
    delta = 1e-6 if method == "catboost" else 0.0
    q, sel, coef = _quantile(METHODS[method], r, ones, alpha, False, delta)
    assert q == ref_quantile(method, r, ones, alpha, False, delta)
    order = np.argsort(r, kind="mergesort")
    place = {int(row): k for k, row in enumerate(order)}
    used = [int(row) for row, c in zip(sel, coef, strict=True) if row >= 0]
    assert used, "an unweighted quantile follows at least one order statistic"
    # the rows followed are order statistics at consecutive places of the stable order
    places = sorted(place[row] for row in used)
    assert places == list(range(places[0], places[0] + len(places)))
    assert all(r[row] == r[order[place[row]]] for row in used)
