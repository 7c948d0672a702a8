"""The search space of feature tweaking: each feature cut into *cells* by the ensemble's thresholds.

Every tree routes all values of one cell alike, so a tweaked point is determined, as far as the
ensemble is concerned, by one cell per feature. A numerical feature with sorted distinct thresholds
``T[0] < ... < T[m-1]`` has cells ``0 .. m``; cell ``k`` lies between ``T[k-1]`` and ``T[k]`` and a
node with threshold ``T[j]`` sends cells ``<= j`` left (for ``x <= T`` and for ``x < T`` alike, as
long as every node of the feature uses the same comparison, which every library does). A
categorical feature has one cell per known category code plus a last "other" cell for codes no
split lists. Cells are indexed globally (``offset[f] + k``).

A leaf of a tree is reached exactly by the points in a *box*: a cell range per numerical feature
and a set of allowed cells per categorical feature (the intersection of its path's conditions).
:class:`Grid` holds these boxes for every leaf; :class:`Point` holds, for one row ``x``, the cheapest
value in every cell (its *representative*: ``x`` itself in ``x``'s cell, else the cell's nearest
point to ``x`` moved ``epsilon * scale`` inside, as the paper's epsilon-satisfactory instances) and
its scaled distance from ``x`` (inf where a constraint forbids the cell).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from .trees import MISSING_ZERO, ZERO_THRESHOLD, TreeStructure

_FAR = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, eq=False)
class Constraints:
    """What a user allows per feature (all arrays of shape (n_features,)).

    ``mutable``: may change at all. ``lower`` / ``upper``: bounds on a changed value (inf if none).
    ``integer``: a changed value must be an integer. ``direction``: +1 only increase, -1 only
    decrease, 0 either way. ``scale``: distance unit (cost and epsilon). ``weight``: cost of
    changing a categorical feature.
    """

    mutable: NDArray[np.bool_]
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    integer: NDArray[np.bool_]
    direction: NDArray[np.int64]
    scale: NDArray[np.float64]
    weight: NDArray[np.float64]


class Grid:
    """Cells of every feature and the box of every leaf, for one :class:`TreeStructure`.

    Parameters
    ----------
    structure : TreeStructure
    extra_codes : list of ndarray, optional
        Per feature, category codes to offer besides those the splits list (e.g. every category
        the model or the training data knows), so that the "other" side of a split has values.

    Raises
    ------
    ValueError
        If the nodes of one feature mix ``<`` and ``<=`` (no library does).
    """

    def __init__(
        self, structure: TreeStructure, extra_codes: list[NDArray[np.float64]] | None = None
    ) -> None:
        s = self.structure = structure
        F = s.n_features
        inner = ~s.is_leaf
        self.categorical = s.feature_is_categorical.copy()
        self.strict = np.zeros(F, dtype=bool)
        self.thresholds: list[NDArray[np.float64]] = []
        self.codes: list[NDArray[np.float64]] = []
        self.node_cut = np.full(s.n_nodes, -1, dtype=np.int64)  # threshold index of a numeric node
        self.zero_missing = np.zeros(F, dtype=bool)
        sizes = np.zeros(F, dtype=np.int64)
        for f in range(F):
            nodes = np.flatnonzero(inner & (s.feature == f))
            self.zero_missing[f] = bool((s.missing_type[nodes] == MISSING_ZERO).any())
            if self.categorical[f]:
                listed = [s.cat_codes[s.cat_offset[n] : s.cat_offset[n + 1]] for n in nodes]
                extra = [] if extra_codes is None else [np.asarray(extra_codes[f], dtype=np.float64)]
                pool = np.concatenate(
                    [np.asarray(c, dtype=np.float64) for c in listed] + extra + [np.empty(0)]
                )
                self.codes.append(np.unique(pool[np.isfinite(pool)]))
                self.thresholds.append(np.empty(0))
                sizes[f] = self.codes[-1].size + 1  # + "other"
                continue
            thr = np.unique(s.threshold[nodes])
            kinds = np.unique(s.inclusive[nodes])
            if kinds.size > 1:
                raise ValueError(f"Feature {f} mixes '<' and '<=' splits; cells are undefined.")
            self.strict[f] = kinds.size == 1 and not bool(kinds[0])
            self.node_cut[nodes] = np.searchsorted(thr, s.threshold[nodes])
            self.thresholds.append(thr)
            self.codes.append(np.empty(0))
            sizes[f] = thr.size + 1
        self.offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.n_cells = int(self.offset[-1])
        self.cell_feature = np.repeat(np.arange(F), sizes)
        lo, hi, code = (np.full(self.n_cells, np.nan) for _ in range(3))
        for f in range(F):
            a, b = self.offset[f], self.offset[f + 1]
            if self.categorical[f]:
                code[a : b - 1] = self.codes[f]
            else:
                lo[a:b] = np.concatenate([[-np.inf], self.thresholds[f]])
                hi[a:b] = np.concatenate([self.thresholds[f], [np.inf]])
        self.cell_lo, self.cell_hi, self.cell_code = lo, hi, code

    # ------------------------------------------------------------------ leaves and their boxes
    @cached_property
    def leaves(self) -> NDArray[np.int64]:
        """Global node index of every reachable leaf, shape (n_leaves,)."""
        s = self.structure
        return np.flatnonzero(s.is_leaf & (s.node_depth >= 0))

    @cached_property
    def leaf_tree(self) -> NDArray[np.int64]:
        return self.structure.node_tree[self.leaves]

    @cached_property
    def paths(self) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
        """Path conditions of every leaf as CSR: (pointer (n_leaves + 1,), node, went left)."""
        s = self.structure
        parent = np.full(s.n_nodes, -1, dtype=np.int64)
        inner = np.flatnonzero(~s.is_leaf)
        parent[s.left[inner]] = inner
        parent[s.right[inner]] = inner
        depth = s.node_depth[self.leaves]
        ptr = np.concatenate([[0], np.cumsum(depth)]).astype(np.int64)
        node = np.empty(int(ptr[-1]), dtype=np.int64)
        went_left = np.empty(int(ptr[-1]), dtype=bool)
        child = self.leaves.copy()
        for d in range(int(depth.max(initial=0))):  # climb all leaves one level at a time
            alive = depth > d
            pos = ptr[:-1][alive] + d
            up = parent[child[alive]]
            node[pos] = up
            went_left[pos] = s.left[up] == child[alive]
            child[alive] = up
        return ptr, node, went_left

    @cached_property
    def cat_cells(self) -> NDArray[np.int64]:
        """Global indices of the categorical cells, shape (n_cat_cells,)."""
        return np.flatnonzero(self.categorical[self.cell_feature])

    @cached_property
    def boxes(self) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
        """(lo, hi) local cell range per leaf and input feature, shape (n_leaves, n_inputs) each, and
        the allowed categorical cells per leaf, shape (n_leaves, n_cat_cells) (columns as
        ``cat_cells``).

        Derived columns (CatBoost's CTRs) are not searched: they follow the input columns. A
        condition on a derived column that reads one categorical column alone becomes a condition on
        that column's categories (the categories whose derived value goes the path's way; the
        "other" cell takes an unseen category's value); one on a combination is left to
        :attr:`fixed_derived` (a leaf needing other values of it is out of reach)."""
        s = self.structure
        ptr, node, went_left = self.paths
        L, F = self.leaves.size, s.n_inputs
        leaf_of = np.repeat(np.arange(L), np.diff(ptr))
        feat = s.feature[node]
        lo = np.zeros((L, F), dtype=np.int64)
        hi = np.broadcast_to(self.offset[1 : F + 1] - self.offset[:F] - 1, (L, F)).copy()
        num = ~s.is_categorical_split[node] & (feat < F)
        cut = self.node_cut[node]
        np.minimum.at(hi, (leaf_of[num & went_left], feat[num & went_left]), cut[num & went_left])
        np.maximum.at(lo, (leaf_of[num & ~went_left], feat[num & ~went_left]), cut[num & ~went_left] + 1)
        allowed = np.ones((L, self.cat_cells.size), dtype=bool)
        column = np.full(self.n_cells, -1, dtype=np.int64)
        column[self.cat_cells] = np.arange(self.cat_cells.size)
        for i in np.flatnonzero(s.is_categorical_split[node]):  # one pass per categorical condition (few)
            n, f = node[i], feat[i]
            cols = column[self.offset[f] : self.offset[f + 1]]
            members = s.cat_codes[s.cat_offset[n] : s.cat_offset[n + 1]]
            in_set = np.append(np.isin(self.codes[f], members), False)  # "other" is in no set
            allowed[leaf_of[i], cols] &= in_set == went_left[i]
        for f, values in self.derived_values.items():  # conditions on one-column derived values
            on = np.flatnonzero(np.isin(feat, [F + j for j in values]))
            if on.size == 0:
                continue
            table = np.stack([values[j] for j in sorted(values)])  # (derived columns of f, cells of f)
            row = np.searchsorted(sorted(values), feat[on] - F)
            goes_left = table[row] <= s.threshold[node[on]][:, None]  # CTR splits are "<=" (inclusive)
            wrong = np.zeros((L, table.shape[1]), dtype=bool)
            np.logical_or.at(wrong, leaf_of[on], goes_left != went_left[on][:, None])
            allowed[:, column[self.offset[f] : self.offset[f + 1]]] &= ~wrong
        return lo, hi, allowed

    @cached_property
    def derived_values(self) -> dict[int, dict[int, NDArray[np.float64]]]:
        """For each categorical input column that derived columns read alone: {derived column j:
        its value in each cell of the source column, shape (n_cells of the source,)}; the last
        ("other") cell takes an unseen category's value."""
        s = self.structure
        out: dict[int, dict[int, NDArray[np.float64]]] = {}
        if s.derived is None:
            return out
        source = s.derived.single_source
        for f in np.unique(source[source >= 0]).tolist():
            cells = self._derived_cells(f)
            out[f] = {j: cells[:, j] for j in np.flatnonzero(source == f).tolist()}
        return out

    def _derived_cells(self, f: int) -> NDArray[np.float64]:
        """Every derived column's value for each cell of categorical input ``f`` (other inputs
        missing), shape (n_cells of f, n_derived); only the columns that read ``f`` alone mean
        anything."""
        s = self.structure
        assert s.derived is not None
        rows = np.full((self.codes[f].size + 1, s.n_inputs), np.nan)
        rows[:-1, f] = self.codes[f]
        return np.asarray(s.derived(rows))

    @cached_property
    def fixed_derived(self) -> NDArray[np.bool_]:
        """Columns whose path conditions a candidate inherits from ``x`` (shape (n_features,)): the
        derived columns that read more than one input (CatBoost's CTRs of combinations)."""
        s = self.structure
        out = np.zeros(s.n_features, dtype=bool)
        if s.derived is not None:
            out[s.n_inputs :] = s.derived.single_source < 0
        return out

    def leaves_agreeing(self, x: NDArray[np.float64], fixed: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Leaves whose path conditions on the ``fixed`` features (n_features,) hold for row ``x``
        (routed as the trees route it, missing values included), shape (n_leaves,)."""
        ptr, node, went_left = self.paths
        s = self.structure
        on_fixed = fixed[s.feature[node]]
        if not on_fixed.any():
            return np.ones(self.leaves.size, dtype=bool)
        z = s.prepare_inputs(x[None, :])[0]
        nodes = node[on_fixed]
        wrong = np.zeros(node.size)
        wrong[on_fixed] = s.decide_left(nodes, z[s.feature[nodes]]) != went_left[on_fixed]
        leaf_of = np.repeat(np.arange(self.leaves.size), np.diff(ptr))
        return np.bincount(leaf_of, weights=wrong, minlength=self.leaves.size) == 0

    # ------------------------------------------------------------------ one row
    def local_cell(self, f: int, values: NDArray[np.float64]) -> NDArray[np.int64]:
        """Local cell of each value of feature ``f`` (-1 for NaN, which no cell holds)."""
        out = np.full(values.shape, -1, dtype=np.int64)
        ok = ~np.isnan(values)
        if self.categorical[f]:
            pos = np.searchsorted(self.codes[f], values[ok])
            hit = pos < self.codes[f].size
            hit[hit] = self.codes[f][pos[hit]] == values[ok][hit]
            out[ok] = np.where(hit, pos, self.codes[f].size)
        else:
            out[ok] = np.searchsorted(
                self.thresholds[f], values[ok], side="right" if self.strict[f] else "left"
            )
        return out

    def point(
        self,
        x: NDArray[np.float64],
        constraints: Constraints,
        epsilon: float,
        decodable: NDArray[np.bool_] | None = None,
    ) -> Point:
        """Representatives and distances of every cell for row ``x`` (shape (n_features,), encoded,
        already through ``TreeStructure.prepare_inputs``); ``decodable`` marks categorical cells whose
        code has a label (others are not offered)."""
        return Point(self, x, constraints, epsilon, decodable)


class Point:
    """One row's view of a :class:`Grid` (see the module docstring).

    Attributes
    ----------
    x : ndarray of shape (n_features,)
    cell : ndarray of shape (n_features,), int64
        Local cell of ``x`` per feature; -1 where the feature is frozen (NaN, or a value the library
        treats as missing), which also makes every other cell of it infeasible.
    frozen : ndarray of shape (n_features,), bool
    rep : ndarray of shape (n_cells,)
        Value of the feature in each cell when moved there.
    dist : ndarray of shape (n_cells,)
        Scaled distance of ``rep`` from ``x`` (inf: forbidden by a constraint or not representable).
    """

    def __init__(
        self,
        grid: Grid,
        x: NDArray[np.float64],
        con: Constraints,
        epsilon: float,
        decodable: NDArray[np.bool_] | None,
    ) -> None:
        self.grid, self.x = grid, x
        cf = grid.cell_feature
        seen = grid.structure.prepare_inputs(x[None, :])[0]  # as the trees compare it
        cell = np.array([grid.local_cell(f, seen[f : f + 1])[0] for f in range(x.size)], dtype=np.int64)
        frozen = cell < 0
        frozen |= grid.zero_missing & (np.abs(np.nan_to_num(seen, nan=1.0)) <= ZERO_THRESHOLD)
        cell[frozen] = -1
        self.cell, self.frozen = cell, frozen
        local = np.arange(grid.n_cells) - grid.offset[cf]
        rel = np.sign(local - cell[cf])  # -1 below x's cell, 0 x's cell, +1 above
        rep, ok = self._numeric(rel, con, epsilon)
        cat = grid.categorical[cf]
        rep[cat] = grid.cell_code[cat]
        ok[cat] = np.isfinite(grid.cell_code[cat])
        if decodable is not None:
            ok[cat] &= decodable[cat]
        ok &= con.mutable[cf] & ~frozen[cf]
        ok &= cat | (con.direction[cf] == 0) | (rel == con.direction[cf])
        own = grid.offset[:-1][~frozen] + cell[~frozen]
        rep[own] = x[~frozen]
        ok[own] = True
        with np.errstate(invalid="ignore"):
            dist = np.where(cat, con.weight[cf], np.abs(rep - x[cf]) / con.scale[cf])
        dist[own] = 0.0
        self.rep = rep
        self.dist = np.where(ok, dist, np.inf)

    def _numeric(
        self, rel: NDArray[np.int64], con: Constraints, epsilon: float
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """Representatives of numerical cells (nearest point to x, epsilon inside) and validity."""
        g = self.grid
        cf = g.cell_feature
        lo, hi, strict, integer = g.cell_lo, g.cell_hi, g.strict[cf], con.integer[cf]
        with np.errstate(invalid="ignore"):
            width = hi - lo
            step = np.minimum(epsilon * con.scale[cf], np.where(np.isfinite(width), width / 2, np.inf))
            rep = np.where(rel > 0, lo + step, hi - step)
            int_up = np.where(strict, np.ceil(lo), np.floor(lo) + 1)  # smallest integer in the cell
            int_down = np.where(strict, np.ceil(hi) - 1, np.floor(hi))  # largest integer in the cell
            rep = np.where(integer, np.where(rel > 0, int_up, int_down), rep)
            lower = np.where(integer, np.ceil(con.lower[cf]), con.lower[cf])
            upper = np.where(integer, np.floor(con.upper[cf]), con.upper[cf])
            rep = np.where(rel > 0, np.maximum(rep, lower), np.minimum(rep, upper))
            if g.structure.float32_inputs:
                rep = rep.astype(np.float32).astype(np.float64)
            ok = self._in_cell(rep)
            if g.structure.float32_inputs and not ok.all():  # rounded onto a border: one step inside
                inward = np.where(rel > 0, np.inf, -np.inf).astype(np.float32)
                with np.errstate(over="ignore"):  # the float32 extremes step to inf: refused just below
                    nudged = np.nextafter(rep.astype(np.float32), inward).astype(np.float64)
                rep = np.where(ok, rep, nudged)
                ok = self._in_cell(rep)
            ok &= (rep >= con.lower[cf]) & (rep <= con.upper[cf]) & np.isfinite(rep)
            ok &= ~integer | (rep == np.round(rep))
        if g.zero_missing.any():  # LightGBM zero_as_missing routes an exact 0 as missing
            ok &= ~(g.zero_missing[cf] & (np.abs(rep) <= ZERO_THRESHOLD))
        return rep, ok

    def _in_cell(self, v: NDArray[np.float64]) -> NDArray[np.bool_]:
        g = self.grid
        strict = g.strict[g.cell_feature]
        with np.errstate(invalid="ignore"):
            above = np.where(strict, v >= g.cell_lo, v > g.cell_lo)
            below = np.where(strict, v < g.cell_hi, v <= g.cell_hi)
        return above & below
