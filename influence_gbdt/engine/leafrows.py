"""Each tree's training rows counted and grouped by leaf (numba), the trees split over a team of
threads. Private to the engine.

Grouping is a stable counting sort (O(n) per tree): the same permutation as
``np.argsort(leaf_index[t], kind="stable")``, which it replaces (measured on 300,000 rows x 100
trees: 1.0 s serial for the argsorts; LeafRefit and forward mode wait for it on first use).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from . import team


@numba.njit(cache=True, nogil=True)
def _leaf_rows(
    tid: int, n_team: int, bar: NDArray[np.int64], leaf: NDArray[np.integer], leaf_off: NDArray[np.int64],
    source: NDArray[np.int64], counts: NDArray[np.int64], grouped: NDArray[np.int32], group: bool,
) -> None:
    """Thread ``tid``'s trees (``tid``, ``tid + n_team``, ...): ``counts[leaf_off[t] + l]`` the
    rows of tree ``t`` in its leaf ``l``; if ``group``, ``grouped[t]`` tree ``source[t]``'s rows
    sorted by leaf, stable."""
    n = leaf.shape[1]
    most = 0
    for t in range(leaf.shape[0]):
        most = max(most, leaf_off[t + 1] - leaf_off[t])
    pos = np.empty(most, dtype=np.int64)
    for t in range(tid, leaf.shape[0], n_team):
        c = counts[leaf_off[t] : leaf_off[t + 1]]
        c[:] = 0
        for j in range(n):
            c[leaf[t, j]] += 1
        if not group:
            continue
        s = source[t]
        n_leaves = leaf_off[s + 1] - leaf_off[s]
        if s == t:
            pos[:n_leaves] = c
        else:  # tree s's own counts (another thread may be counting them into ``counts``)
            pos[:n_leaves] = 0
            for j in range(n):
                pos[leaf[s, j]] += 1
        first = 0
        for lf in range(n_leaves):  # each leaf's first position
            k = pos[lf]
            pos[lf] = first
            first += k
        for j in range(n):
            lf = leaf[s, j]
            grouped[t, pos[lf]] = j
            pos[lf] += 1


def leaf_rows(
    leaf: NDArray[np.integer], leaf_off: NDArray[np.int64], source: NDArray[np.int64] | None, threads: int,
) -> tuple[NDArray[np.int64], NDArray[np.int32] | None]:
    """Each tree's rows per leaf, ``counts`` (leaf_off[-1],) int64 by global leaf, and, unless
    ``source`` is None, ``grouped`` (T, n) int32: tree ``source[t]``'s rows sorted by leaf,
    stable, for each tree ``t``; ``leaf`` (T, n) each row's leaf in each tree; on up to
    ``threads`` threads (one per tree at most)."""
    T = leaf.shape[0]
    # One compiled signature whatever the caller holds (an ensemble's read-only matrix, a slice of
    # it, a fresh array): C-ordered, read-only int32.
    leaf = np.ascontiguousarray(leaf, dtype=np.int32).view()
    leaf.flags.writeable = False
    counts = np.empty(int(leaf_off[-1]), dtype=np.int64)
    group = source is not None
    grouped = np.empty((T, leaf.shape[1]) if group else (0, 0), dtype=np.int32)
    src = np.ascontiguousarray(source if group else np.arange(T), dtype=np.int64)
    off = np.ascontiguousarray(leaf_off, dtype=np.int64)
    team.run(_leaf_rows, max(1, min(int(threads), T)), leaf, off, src, counts, grouped, group)
    return counts, (grouped if group else None)
