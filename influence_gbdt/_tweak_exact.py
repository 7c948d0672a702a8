"""Exact cheapest tweak as a mixed-integer linear program (HiGHS through ``scipy.optimize.milp``).

The formulation follows Kantchelian et al. (2016, "Evasion and hardening of tree ensemble
classifiers") on the cells of :mod:`._tweak_space`, so it searches exactly the space the heuristic
searches (same representatives, same constraints) and its optimum measures the heuristic's gap:

* numerical feature ``f`` with ``m`` thresholds and x in cell ``c``: binaries ``u[j]``, ``j < m``,
  ``[cell <= j]`` for ``j < c`` and ``[cell > j]`` for ``j >= c``, monotone away from ``c``, so that
  all zeros is x's own cell and the cost needs no constant term (a constant would loosen the
  solver's relative optimality gap); a forbidden cell has its two neighbouring binaries tied;
* categorical feature: one binary per allowed cell, summing to 1;
* leaf ``l``: continuous ``y[l]`` in [0, 1], one per tree summing to 1; at each node ``n`` the leaves
  below its left child sum to at most "n goes left" (``u[j]`` or ``1 - u[j]``, or the sum of the categorical
  binaries of the listed codes) and those below its right child to at most one minus it, so ``y`` is
  the indicator of the leaf the chosen cells reach;
* the target score (a linear function of ``y``) is at least ``delta``;
* with ``max_changes``, the features changed number at most that: a numerical feature changes
  iff ``u[c - 1] + u[c]`` is 1 (its binaries next to x's cell; at most one of them is), a
  categorical one iff its binary of x's own category is 0;
* the objective is the separable cost: per-feature distance for "l1", its square for "l2" (same
  minimiser as the Euclidean norm).

Features that cannot change (immutable, missing, or one allowed cell) get no variables: the leaves
their fixed routing excludes get ``y = 0``. A CatBoost CTR of one categorical feature is a node on
that feature's binaries (the categories whose CTR value goes left); CTRs of combinations would be
fixed at the row's own values, which is not the model, so :class:`~influence_gbdt.FeatureTweaking`
refuses "exact" for models that have them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ._tweak_search import Cost, Goal
from ._tweak_space import Point


@dataclass
class ExactResult:
    """``values``: the optimal row (n_features,) or None; ``cost``; ``status``: "optimal",
    "time_limit" (best found so far, with ``gap`` the solver's relative bound gap) or "infeasible"."""

    values: NDArray[np.float64] | None
    cost: float
    status: str
    gap: float


class _Model:
    """Sparse rows of the MILP being built (triplets), variable bounds, costs and integrality."""

    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.c: list[float] = []
        self.integer: list[int] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []

    def var(self, n: int, lo: float, hi: float, integer: bool) -> NDArray[np.int64]:
        start = len(self.c)
        self.lo += [lo] * n
        self.hi += [hi] * n
        self.c += [0.0] * n
        self.integer += [int(integer)] * n
        return np.arange(start, start + n)

    def row(self, cols: NDArray[np.int64], vals: NDArray[np.float64] | float, lo: float, hi: float) -> None:
        r = len(self.row_lo)
        cols = np.asarray(cols)
        self.rows += [r] * cols.size
        self.cols += cols.tolist()
        self.vals += np.broadcast_to(np.asarray(vals, dtype=np.float64), cols.shape).tolist()
        self.row_lo.append(lo)
        self.row_hi.append(hi)


#: Relative optimality tolerance given to HiGHS (its default, 1e-4, would hide small heuristic gaps).
MIP_REL_GAP = 1e-7

#: "node n goes left" as a linear expression: (columns, coefficients, constant).
_Expr = tuple[NDArray[np.int64], NDArray[np.float64], float]


def _categorical(
    model: _Model, point: Point, f: int, d: NDArray[np.float64], left: dict[int, _Expr]
) -> NDArray[np.int64]:
    """One binary per allowed cell of categorical feature ``f`` (sum 1); returns their columns."""
    g = point.grid
    s = g.structure
    span = np.arange(g.offset[f], g.offset[f + 1])
    ok = np.flatnonzero(np.isfinite(point.dist[span]))
    z = model.var(ok.size, 0.0, 1.0, True)
    for v, k in zip(z.tolist(), ok.tolist(), strict=True):
        model.c[v] = float(d[k])
    model.row(z, 1.0, 1.0, 1.0)
    column_of = dict(zip(ok.tolist(), z.tolist(), strict=True))
    derived = g.derived_values.get(f, {})  # CTRs of f alone: a node on one goes left by its value
    on_f = np.isin(s.feature, [f] + [s.n_inputs + j for j in derived])
    for n in np.flatnonzero(~s.is_leaf & on_f).tolist():
        if s.feature[n] == f:
            members = s.cat_codes[s.cat_offset[n] : s.cat_offset[n + 1]]
            in_set = np.append(np.isin(g.codes[f], members), False)  # the "other" cell is in no set
        else:
            in_set = derived[int(s.feature[n]) - s.n_inputs] <= s.threshold[n]
        cols = np.array(
            [column_of[k] for k in np.flatnonzero(in_set).tolist() if k in column_of], dtype=np.int64
        )
        left[n] = (cols, np.ones(cols.size), 0.0)
    return z


def _numerical(
    model: _Model, point: Point, f: int, d: NDArray[np.float64], left: dict[int, _Expr]
) -> NDArray[np.int64]:
    """Binaries ``u[j]`` per threshold ``j`` of numerical feature ``f``, measured from x's cell ``c``:
    ``u[j] = [cell <= j]`` below it (``j < c``) and ``[cell > j]`` from it on, so all zeros is x
    itself and the cost has no constant (which would distort the solver's relative gap)."""
    g = point.grid
    s = g.structure
    feasible = np.isfinite(d)
    m, c = d.size - 1, int(point.cell[f])
    u = model.var(m, 0.0, 1.0, True)
    for j in range(m - 1):  # the cell indicator stays one-hot: monotone u away from x's cell
        if j + 1 < c:
            model.row(u[j : j + 2], np.array([1.0, -1.0]), -np.inf, 0.0)  # p_j <= p_j+1
        elif j + 1 == c:
            model.row(u[j : j + 2], np.array([1.0, 1.0]), -np.inf, 1.0)  # p_c-1 <= 1 - q_c
        else:
            model.row(u[j : j + 2], np.array([-1.0, 1.0]), -np.inf, 0.0)  # q_j+1 <= q_j
    # cost: sum over cells passed on the way from c, d_c = 0; a forbidden cell is passed, never chosen
    dd = np.where(feasible, d, 0.0)
    for j in range(m):
        model.c[int(u[j])] = float(dd[j] - dd[j + 1]) if j < c else float(dd[j + 1] - dd[j])
    for k in np.flatnonzero(~feasible).tolist():  # cell k chosen iff u[k] - u[k-1] (below c) = 1
        if k < c:
            model.row(u[k : k + 1], 1.0, 0.0, 0.0) if k == 0 else model.row(
                np.array([u[k], u[k - 1]]), np.array([1.0, -1.0]), 0.0, 0.0
            )
        elif k == m:
            model.hi[int(u[m - 1])] = 0.0
        else:
            model.row(np.array([u[k - 1], u[k]]), np.array([1.0, -1.0]), 0.0, 0.0)
    for n in np.flatnonzero(~s.is_leaf & (s.feature == f)).tolist():
        j = int(g.node_cut[n])  # "goes left" is [cell <= j] = u_j below c, 1 - u_j from c on
        left[n] = (u[j : j + 1], np.ones(1), 0.0) if j < c else (u[j : j + 1], -np.ones(1), 1.0)
    return u


def _numerical_cell(u: NDArray[np.bool_], c: int) -> int:
    """The cell the binaries of :func:`_numerical` choose."""
    below = np.flatnonzero(u[:c])
    if below.size:
        return int(below[0])
    above = np.flatnonzero(u[c:])
    return c + int(above[-1]) + 1 if above.size else c


def _node_rows(
    model: _Model, point: Point, variable: NDArray[np.bool_], y: NDArray[np.int64], left: dict[int, _Expr]
) -> None:
    """At each node on a variable feature: leaves below the left child sum to at most "goes left",
    those below the right child to at most one minus it."""
    g = point.grid
    ptr, node, went_left = g.paths
    leaf_of = np.repeat(np.arange(g.leaves.size), np.diff(ptr))
    on_var = variable[g.structure.feature[node]]
    for side in (True, False):
        sel = on_var & (went_left == side)
        order = np.argsort(node[sel], kind="stable")
        nodes, leaves = node[sel][order], leaf_of[sel][order]
        cuts = np.flatnonzero(np.diff(np.concatenate([[-1], nodes, [-2]])) != 0).tolist()
        for a, b in itertools.pairwise(cuts):
            cols, coef, const = left[int(nodes[a])]
            ys = y[leaves[a:b]]
            # left: sum y <= e; right: sum y <= 1 - e; with e = const + coef . cols
            model.row(
                np.concatenate([ys, cols]),
                np.concatenate([np.ones(ys.size), -coef if side else coef]),
                -np.inf,
                const if side else 1.0 - const,
            )


def _changed(point: Point, f: int, cols: NDArray[np.int64]) -> _Expr:
    """"Feature ``f`` changes" as a linear expression of its binaries ``cols`` (from
    :func:`_numerical` or :func:`_categorical`): 0 at x's own cell, 1 elsewhere."""
    g = point.grid
    c = int(point.cell[f])
    if not g.categorical[f]:  # u[c - 1] = [moved below c], u[c] = [moved above c]
        near = cols[max(c - 1, 0) : c + 1]
        return near, np.ones(near.size), 0.0
    allowed = np.flatnonzero(np.isfinite(point.dist[g.offset[f] : g.offset[f + 1]]))  # x's own among them
    return cols[allowed == c], -np.ones(1), 1.0


def solve(
    point: Point, goal: Goal, cost: Cost, time_limit: float, max_changes: int | None = None
) -> ExactResult:
    """Cheapest row reaching ``goal`` within the constraints encoded in ``point``, changing at
    most ``max_changes`` features (None: any number).

    Raises
    ------
    ImportError
        If SciPy (>= 1.9, for ``milp``) is not installed.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    g = point.grid
    model = _Model()
    feasible = np.isfinite(point.dist)
    n_allowed = np.add.reduceat(feasible, g.offset[:-1])
    variable = ~point.frozen & (n_allowed > 1)
    for f, derived in g.derived_values.items():  # a CTR of one category follows it
        variable[[g.structure.n_inputs + j for j in derived]] = variable[f]
    left: dict[int, _Expr] = {}
    columns: dict[int, NDArray[np.int64]] = {}
    for f in np.flatnonzero(variable[: g.structure.n_inputs]).tolist():
        d = point.dist[g.offset[f] : g.offset[f + 1]]
        d = d**2 if cost.kind == "l2" else d
        if g.categorical[f]:
            columns[f] = _categorical(model, point, f, d, left)
        else:
            columns[f] = _numerical(model, point, f, d, left)
    y = model.var(g.leaves.size, 0.0, 1.0, False)
    for v in y[~g.leaves_agreeing(point.x, ~variable)].tolist():  # routed elsewhere by fixed features
        model.hi[v] = 0.0
    for t in range(g.structure.n_trees):
        model.row(y[g.leaf_tree == t], 1.0, 1.0, 1.0)
    _node_rows(model, point, variable, y, left)
    _goal_rows(model, point, goal, y)
    if max_changes is not None and columns:
        parts = [_changed(point, f, cols) for f, cols in columns.items()]
        model.row(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                  -np.inf, max_changes - sum(p[2] for p in parts))
    A = coo_matrix((model.vals, (model.rows, model.cols)), shape=(len(model.row_lo), len(model.c))).tocsr()
    res = milp(
        c=np.asarray(model.c),
        integrality=np.asarray(model.integer),
        bounds=Bounds(np.asarray(model.lo), np.asarray(model.hi)),
        constraints=LinearConstraint(A, np.asarray(model.row_lo), np.asarray(model.row_hi)),
        options={"time_limit": time_limit, "disp": False, "mip_rel_gap": MIP_REL_GAP},
    )
    if res.x is None:
        return ExactResult(None, np.inf, "infeasible" if res.status == 2 else "time_limit", np.inf)
    values = point.x.copy()
    for f, cols in columns.items():
        chosen = np.round(res.x[cols]).astype(bool)
        span = np.arange(g.offset[f], g.offset[f + 1])
        if g.categorical[f]:
            cell = span[np.isfinite(point.dist[span])][int(np.argmax(chosen))]
        else:
            cell = span[_numerical_cell(chosen, int(point.cell[f]))]
        values[f] = point.rep[cell]
    status = "optimal" if res.status == 0 else "time_limit"
    gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
    return ExactResult(values, float(cost(point.x, values[None, :])[0]), status, gap)


def _goal_rows(model: _Model, point: Point, goal: Goal, y: NDArray[np.int64]) -> None:
    """Target score >= delta, linear in the leaf indicators ``y``."""
    s = point.grid.structure
    v = s.scale * s.value[point.grid.leaves]
    base = s.base_margin
    if s.objective == "regression":  # low + delta <= margin <= high - delta
        model.row(y, v[:, 0], goal.low + goal.delta - base[0], goal.high - goal.delta - base[0])
        return
    if s.objective == "binary":
        sign = 1.0 if goal.klass == 1 else -1.0
        model.row(y, sign * v[:, 0], goal.delta - sign * (base[0] - goal.threshold), np.inf)
        return
    for j in range(s.n_outputs):
        if j != goal.klass:
            model.row(y, v[:, goal.klass] - v[:, j], goal.delta - (base[goal.klass] - base[j]), np.inf)
