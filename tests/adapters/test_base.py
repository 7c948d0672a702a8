"""The adapters' shared helpers (``influence_gbdt.adapters.base``), against plain numpy."""

from __future__ import annotations

import influence_gbdt.adapters.base as base
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def _plain(leaves: np.ndarray, n_trees: int) -> np.ndarray:
    """The transposition ``tree_major`` replaces, as the adapters wrote it."""
    return np.ascontiguousarray(np.asarray(leaves, dtype=np.int32).reshape(-1, n_trees).T)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), n_trees=st.integers(1, 40), threads=st.integers(1, 4),
       dtype=st.sampled_from([np.int32, np.uint32, np.int64, np.float32, np.float64]),
       flat=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_tree_major_is_the_transposition(n: int, n_trees: int, threads: int, dtype: type, flat: bool,
                                         seed: int) -> None:
    """Any shape, any of the boosters' leaf dtypes (LightGBM's int32, CatBoost's uint32, XGBoost's
    float32 node ids), flat or 2-D, blocks of a few rows split over several threads: the same
    matrix as the plain transposition."""
    leaves = np.random.default_rng(seed).integers(0, 1000, (n, n_trees)).astype(dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "TREE_MAJOR_BLOCK", 7)  # blocks of a row or a few: every boundary
        patch.setattr(base, "TREE_MAJOR_PER_THREAD", 16)
        out = base.tree_major(leaves.ravel() if flat else leaves, n_trees, threads)
    assert out.dtype == np.int32 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, _plain(leaves, n_trees))


@pytest.mark.parametrize(("n", "n_trees"), [(30_011, 100), (3, 70_000), (70_001, 1)])
def test_tree_major_on_the_default_blocks_and_threads(n: int, n_trees: int) -> None:
    """The default block (a block of whole rows, or of one row where a row alone is larger) and
    as many threads as the matrix takes (30,011 x 100: more than one)."""
    leaves = np.random.default_rng(n).integers(0, 64, (n, n_trees)).astype(np.uint32)
    np.testing.assert_array_equal(base.tree_major(leaves, n_trees), _plain(leaves, n_trees))
    np.testing.assert_array_equal(base.tree_major(leaves, n_trees, 1), _plain(leaves, n_trees))
