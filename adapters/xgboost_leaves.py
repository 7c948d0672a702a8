"""XGBoost's decision rule for numerical splits, run by a kernel of ours: every row's leaf in every tree.

XGBoost's ``predict(pred_leaf=True)`` is slow next to its own prediction: on Adult's 32,561
training rows and the default 100 trees (2 cores) 35-37 ms, 3x the same booster's margin
``inplace_predict`` (12 ms), and its node ids still have to be mapped onto our leaf numbers (7 ms
more). :class:`NumericTrees` walks the same trees in 16 ms (21 ms where values are missing) and
writes our leaf numbers directly. The rule, as XGBoost's CPU predictor applies it:

* features are read as float32 (a DMatrix stores float32, rounded to nearest from float64, as numpy
  rounds); a value that is NaN, or equal to the ``missing`` value as float32 (XGBoost's
  ``IsValidFunctor`` compares in float32), is missing;
* a node sends ``x`` left iff ``x < split_condition`` (float32), a missing value to its default
  child (``default_left``); nodes pruned by ``tree_method='exact'`` are never reached from the root.

Not covered (the adapter asks XGBoost's ``pred_leaf`` instead): categorical splits, and inputs that
are not dense numeric tables (sparse matrices, where an absent entry is missing, not 0; nullable,
categorical or object DataFrame columns) or that hold infinite values (XGBoost refuses them).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from influence_gbdt import _jit as numba

from .base import run_split

#: Rows walked together through one tree: enough independent walks in flight to hide each level's
#: chain of loads (node -> feature -> value -> child); one walk at a time ran 2.3x slower.
_BLOCK = 64
#: Levels walked between checks whether a block's rows all sit in leaves (deep, unbalanced trees).
_CHECK_LEVELS = 8
#: Fewest rows one thread walks (smaller inputs run on fewer threads).
_ROWS_PER_THREAD = 4096


@numba.njit(cache=True, nogil=True)
def _walk(X: NDArray[np.float32], feature: NDArray[np.int32], threshold: NDArray[np.float32],
          nan_right: NDArray[np.bool_], child: NDArray[np.int32], leaf: NDArray[np.int32],
          root: NDArray[np.int64], depth: NDArray[np.int64], has_missing: bool, r0: int, r1: int,
          out: NDArray[np.int32]) -> None:  # pragma: no cover - compiled
    """Leaves of rows ``r0 .. r1 - 1`` of ``X`` (n, F) float32 in every tree, into ``out`` (T, n).

    Node arrays are flat over the trees (global node numbers): ``child[2 i]`` / ``child[2 i + 1]``
    the left / right child of node ``i`` (a leaf is its own two children, so walking on from a leaf
    stays there: no branch per row), ``leaf[i]`` a leaf's number within its tree. ``has_missing``:
    whether ``X`` holds NaN (the compiler takes the test out of the loop)."""
    nodes = np.empty(_BLOCK, np.int32)
    for b0 in range(r0, r1, _BLOCK):
        m = min(r1, b0 + _BLOCK) - b0
        for t in range(root.size):
            for j in range(m):
                nodes[j] = root[t]
            for d in range(depth[t]):
                for j in range(m):
                    node = nodes[j]
                    x = X[b0 + j, feature[node]]
                    if has_missing:
                        right = (x >= threshold[node]) | ((x != x) & nan_right[node])
                    else:
                        right = x >= threshold[node]
                    nodes[j] = child[2 * node + right]
                if d % _CHECK_LEVELS == _CHECK_LEVELS - 1:
                    inner = False
                    for j in range(m):
                        inner |= child[2 * nodes[j]] != nodes[j]
                    if not inner:
                        break
            for j in range(m):
                out[t, b0 + j] = leaf[nodes[j]]


def _flat(trees: list[dict[str, Any]], key: str, dtype: Any, total: int) -> NDArray[Any]:
    return np.fromiter(itertools.chain.from_iterable(tree[key] for tree in trees), dtype=dtype, count=total)


@dataclass(frozen=True, eq=False)
class JsonTrees:
    """The JSON model's trees (``save_raw('json')``) as flat node arrays, nodes numbered globally
    (tree ``t``'s node ``i`` is ``start[t] + i``). Each of shape (n_nodes,): ``left``, ``right``
    int64 (global children, -1 at leaves), ``feature`` int64, ``condition`` float64 (a split's
    threshold, a leaf's value, as written), ``default_left`` bool, ``leaf_number`` int64 (a live
    leaf's number within its tree, ``0 .. n_leaves - 1`` in node order; -1 elsewhere: a live node
    is reachable from its root, while nodes pruned by ``tree_method='exact'`` stay in the arrays);
    ``start`` (n_trees + 1,), ``depth`` (n_trees,: levels below the root to the deepest live node) and
    ``n_leaves`` (n_trees,: live leaves) int64;
    ``categorical``: whether any node splits on categories."""

    start: NDArray[np.int64]
    left: NDArray[np.int64]
    right: NDArray[np.int64]
    feature: NDArray[np.int64]
    condition: NDArray[np.float64]
    default_left: NDArray[np.bool_]
    leaf_number: NDArray[np.int64]
    depth: NDArray[np.int64]
    n_leaves: NDArray[np.int64]
    categorical: bool

    @classmethod
    def read(cls, trees: list[dict[str, Any]]) -> JsonTrees:
        """From the JSON model's list of trees (no loop over trees beyond reading the lists)."""
        sizes = np.fromiter((len(tree["left_children"]) for tree in trees), dtype=np.int64, count=len(trees))
        start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        total = int(start[-1])
        tree_of = np.repeat(np.arange(len(trees)), sizes)
        local_left = _flat(trees, "left_children", np.int64, total)
        left = np.where(local_left >= 0, local_left + start[tree_of], -1)
        local_right = _flat(trees, "right_children", np.int64, total)
        right = np.where(local_left >= 0, local_right + start[tree_of], -1)
        live = np.zeros(total, dtype=bool)
        depth = np.zeros(len(trees), dtype=np.int64)
        frontier, level = start[:-1], 0
        while frontier.size:  # breadth-first from every root at once
            live[frontier] = True
            inner = frontier[left[frontier] >= 0]
            level += 1
            depth[tree_of[inner]] = level
            frontier = np.concatenate([left[inner], right[inner]])
        is_leaf = live & (left < 0)
        before = np.concatenate([[0], np.cumsum(is_leaf)])  # live leaves before each node
        leaf_number = np.where(is_leaf, before[:-1] - before[start[tree_of]], -1)
        categorical = any(any(tree.get("split_type", ())) for tree in trees)
        return cls(start=start, left=left, right=right,
                   feature=_flat(trees, "split_indices", np.int64, total),
                   condition=_flat(trees, "split_conditions", np.float64, total),
                   default_left=_flat(trees, "default_left", bool, total),
                   leaf_number=leaf_number, depth=depth, n_leaves=np.diff(before[start]),
                   categorical=categorical)


@dataclass(frozen=True, eq=False)
class NumericTrees:
    """The explained trees of an XGBoost model without categorical splits, as flat node arrays
    (see :func:`_walk`): ``feature`` int32, ``threshold`` float32, ``nan_right`` bool,
    ``leaf`` int32 (our leaf number; -1 at inner nodes), each of shape (n_nodes,); ``child``
    (2 n_nodes,) int32; ``root`` and ``depth`` (n_trees,) int64."""

    feature: NDArray[np.int32]
    threshold: NDArray[np.float32]
    nan_right: NDArray[np.bool_]
    child: NDArray[np.int32]
    leaf: NDArray[np.int32]
    root: NDArray[np.int64]
    depth: NDArray[np.int64]

    @classmethod
    def of(cls, trees: JsonTrees) -> NumericTrees | None:
        """The walk's arrays of ``trees``; None if a tree has a categorical split."""
        if trees.categorical:
            return None
        own = np.arange(trees.left.size)
        is_leaf = trees.left < 0
        child = np.stack([np.where(is_leaf, own, trees.left), np.where(is_leaf, own, trees.right)], axis=1)
        return cls(feature=np.where(is_leaf, 0, trees.feature).astype(np.int32),
                   threshold=trees.condition.astype(np.float32), nan_right=~trees.default_left,
                   child=child.ravel().astype(np.int32), leaf=trees.leaf_number.astype(np.int32),
                   root=trees.start[:-1].copy(), depth=trees.depth)

    def leaves(
        self, X: NDArray[np.float32], has_missing: bool, n_threads: int | None = None
    ) -> NDArray[np.int32]:
        """Leaf number of every row of ``X`` (n, F), C-ordered float32 (:func:`float32_rows`), in
        every tree: ndarray of shape (n_trees, n), int32. Rows are split over up to ``n_threads``
        threads (None: numba's thread count, as the engine's default) in contiguous runs; each row's
        leaves depend on that row alone."""
        n = X.shape[0]
        n_threads = n_threads or numba.get_num_threads()
        out = np.empty((self.root.size, n), np.int32)

        def walk(r0: int, r1: int) -> None:
            _walk(X, self.feature, self.threshold, self.nan_right, self.child, self.leaf, self.root,
                  self.depth, has_missing, r0, r1, out)

        run_split(walk, n, max(1, min(n_threads, n // _ROWS_PER_THREAD)), _BLOCK)
        return out


def float32_rows(X: Any, missing: float) -> tuple[NDArray[np.float32], bool] | None:
    """``X`` as XGBoost reads it: (C-ordered float32 copy of shape (n, F) with every missing value
    NaN, whether any value is missing); None where the walk does not cover ``X`` (module docstring):
    not a numpy array or a DataFrame of numpy numeric columns, or an infinite value."""
    with np.errstate(over="ignore"):  # beyond float32's range: infinite, refused below
        if isinstance(X, pd.DataFrame):
            if not all(isinstance(d, np.dtype) and d.kind in "biuf" for d in X.dtypes):
                return None
            rows = np.ascontiguousarray(X.to_numpy(dtype=np.float32))
        elif isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype.kind in "biuf":
            rows = np.array(X, dtype=np.float32, order="C")
        else:
            return None
    if not np.isnan(missing):
        rows[rows == np.float32(missing)] = np.nan
    odd = ~np.isfinite(rows)
    if not odd.any():
        return rows, False
    if np.isinf(rows[odd]).any():
        return None
    return rows, True
