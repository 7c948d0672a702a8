"""Plain reference implementations and random ensembles for the engine tests.

Everything here is written the slow, obvious way (a Python loop over rounds, trees and steps,
numpy per step), independently of the engine's compiled kernels, so the tests compare two
implementations. "Retraining" here means recomputing every leaf value of the fixed structure on
changed data: rows deleted (``present``) or reweighted (``v``), with the class factors, the row
count, the base margin and the backtracking decisions following the data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from influence_gbdt.ensemble import TreeEnsemble

FactorRule = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _derivs(loss: str, y: np.ndarray, m: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    if loss == "logloss":
        p = 1.0 / (1.0 + np.exp(-m))
        return p - y, np.maximum(p * (1.0 - p), floor)
    return m - y, np.ones_like(m)


def loss_values(loss: str, y: np.ndarray, m: np.ndarray) -> np.ndarray:
    if loss == "logloss":
        return np.logaddexp(0.0, m) - y * m
    return 0.5 * (m - y) ** 2


def balanced_counts(v: np.ndarray, groups: np.ndarray, present: np.ndarray) -> np.ndarray:
    """A class-weight rule from row counts (like CatBoost's Balanced): max count / count."""
    counts = np.bincount(groups[present], minlength=groups.max() + 1).astype(float)
    return counts.max() / counts


def balanced_weights(v: np.ndarray, groups: np.ndarray, present: np.ndarray) -> np.ndarray:
    """A class-weight rule from weight sums: total / (G * group sum)."""
    sums = np.bincount(groups, v * present, minlength=groups.max() + 1)
    return sums.sum() / (sums.size * sums)


@dataclass
class Spec:
    """Everything that defines a synthetic ensemble, for the reference model."""

    leaf: np.ndarray  # (T, n)
    n_leaves: np.ndarray  # (T,)
    test_leaf: np.ndarray  # (T, m)
    y: np.ndarray
    y_test: np.ndarray
    v: np.ndarray  # user weights
    groups: np.ndarray  # (n,) weight group
    dataset_rule: FactorRule | None  # (v, groups, present) -> dataset factor per group; None = 1
    objective_rule: FactorRule | None  # the objective factor (not in the base estimate); None = 1
    offset: np.ndarray
    offset_test: np.ndarray
    loss: str
    newton: np.ndarray
    lr: np.ndarray
    l1: float
    l2: list[np.ndarray]
    l2m: float  # l2 per unit of mean effective weight
    mds: float
    scales: np.ndarray  # (T, S) accepted scales (ignored where backtracking decides)
    rounds: np.ndarray  # (T,)
    backtrack: bool
    n_iter: int
    floor: float
    base: float
    base_refit: bool
    base_newton: bool = False  # the refit base is one Newton step from 0 instead of the mean link

    # -- the model on changed data ---------------------------------------------------------------
    def factors(self, v: np.ndarray, present: np.ndarray, rule: FactorRule | None) -> np.ndarray:
        if rule is None:
            return np.ones(self.groups.max() + 1)
        return rule(v, self.groups, present)

    def base_for(self, v: np.ndarray, present: np.ndarray) -> float:
        if not self.base_refit:
            return self.base
        u = v * present * self.factors(v, present, self.dataset_rule)[self.groups]
        if self.base_newton:
            g, h = _derivs(self.loss, self.y, np.zeros(self.y.size), self.floor)
            return float(-np.sum(u * g) / np.sum(u * h))
        mean = np.sum(u * self.y) / np.sum(u)
        return float(np.log(mean / (1 - mean))) if self.loss == "logloss" else float(mean)

    def train(
        self, v: np.ndarray, present: np.ndarray | None = None
    ) -> tuple[list[np.ndarray], list[list[float]], float]:
        """Leaf values of every tree, the accepted step scales, and the base margin, with user
        weights ``v`` on the rows ``present``."""
        present = np.ones(self.y.size, bool) if present is None else present
        w = (v * present * self.factors(v, present, self.dataset_rule)[self.groups]
             * self.factors(v, present, self.objective_rule)[self.groups])
        mean_w = w.sum() / present.sum()
        base = self.base_for(v, present)
        A = self.offset + base
        values: list[np.ndarray] = []
        accepted_all: list[list[float]] = []
        for r in np.unique(self.rounds):
            trees = np.flatnonzero(self.rounds == r)
            new = []
            for t in trees:
                f, acc = self._tree(t, A, w, mean_w)
                new.append(f)
                accepted_all.append(acc)
            for t, f in zip(trees, new, strict=True):
                A = A + f[self.leaf[t]]
                values.append(f)
        return values, accepted_all, base

    def _steps(self, t: int, A: np.ndarray, w: np.ndarray, mean_w: float, u: np.ndarray) -> np.ndarray:
        L, lf = self.n_leaves[t], self.leaf[t]
        g, h = _derivs(self.loss, self.y, A + u[lf], self.floor)
        G = np.bincount(lf, w * g, L)
        H = np.bincount(lf, w * h if self.newton[t] else w, L)
        lam = self.l2[t] + self.l2m * mean_w
        Gt = np.sign(G) * np.maximum(np.abs(G) - self.l1, 0.0)
        raw = np.where(H > 0, -Gt / np.where(H > 0, H + lam, 1.0), 0.0)
        return np.clip(raw, -self.mds, self.mds) if self.mds > 0 else raw

    def _tree(self, t: int, A: np.ndarray, w: np.ndarray, mean_w: float) -> tuple[np.ndarray, list[float]]:
        u = np.zeros(self.n_leaves[t])
        if not self.backtrack:
            for s in range(self.scales.shape[1]):
                u = u + self.scales[t, s] * self._steps(t, A, w, mean_w, u)
            return self.lr[t] * u, list(self.scales[t])
        # AnyImprovement: try the step, accept it if the weighted training loss falls, else halve.
        def total(uu: np.ndarray) -> float:
            return float(np.sum(w * loss_values(self.loss, self.y, A + uu[self.leaf[t]])))

        scale, accepted = 1.0, []
        d = self._steps(t, A, w, mean_w, u)
        current = total(u)
        for it in range(self.n_iter):
            trial = u + scale * d
            new = total(trial)
            if new < current:
                u, current = trial, new
                accepted.append(scale)
                scale = 1.0
                if it + 1 < self.n_iter:
                    d = self._steps(t, A, w, mean_w, u)
            else:
                scale *= 0.5
        return self.lr[t] * u, accepted

    def test_margin(self, v: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
        values, _, base = self.train(v, present)
        F = self.offset_test + base
        for t, f in enumerate(values):
            F = F + f[self.test_leaf[t]]
        return F

    def test_loss(self, v: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
        return loss_values(self.loss, self.y_test, self.test_margin(v, present))

    # -- the engine's description ----------------------------------------------------------------
    def ensemble(self) -> TreeEnsemble:
        n = self.y.size
        present = np.ones(n, bool)
        values, accepted, _ = self.train(self.v)
        n_steps = np.array([max(len(a), 1) for a in accepted])
        scales = np.zeros((len(accepted), int(n_steps.max())))
        for t, a in enumerate(accepted):
            scales[t, : len(a)] = a
        G = self.groups.max() + 1
        fields: dict = {}
        for name, rule in (("dataset", self.dataset_rule), ("objective", self.objective_rule)):
            fields[f"{name}_factor"] = self.factors(self.v, present, rule)
            if rule is not None:
                without = np.empty((n, G))
                deriv = np.empty((n, G))
                for i in range(n):
                    gone = present.copy()
                    gone[i] = False
                    without[i] = self.factors(self.v, gone, rule)
                    hh = 1e-6
                    up, down = self.v.copy(), self.v.copy()
                    up[i] += hh
                    down[i] -= hh
                    diff = self.factors(up, present, rule) - self.factors(down, present, rule)
                    deriv[i] = diff / (2 * hh)
                fields[f"{name}_factor_without"] = without
                fields[f"{name}_factor_derivative"] = np.where(np.abs(deriv) > 1e-9, deriv, 0.0)
        return TreeEnsemble.build(
            leaf_index=self.leaf,
            leaf_values=values,
            y=self.y,
            loss=self.loss,
            tree_round=self.rounds,
            learning_rate=self.lr,
            newton=self.newton,
            l2=self.l2,
            l2_per_mean_weight=self.l2m,
            l1=self.l1,
            max_delta_step=self.mds,
            step_scales=scales,
            n_steps=n_steps if self.backtrack else None,
            backtracking=self.backtrack,
            n_iterations=self.n_iter if self.backtrack else None,
            hessian_floor=self.floor,
            base_margin=self.base,
            base_rule=("newton_step" if self.base_newton else "mean") if self.base_refit else "fixed",
            init_offset=self.offset,
            user_weight=self.v,
            weight_group=self.groups,
            **fields,
        )


def random_spec(
    seed: int,
    loss: str = "logloss",
    newton: bool = True,
    n_steps: int = 1,
    n: int = 60,
    n_trees: int = 6,
    max_leaves: int = 6,
    l1: float = 0.0,
    l2: float = 1.0,
    l2m: float = 0.0,
    mds: float = 0.0,
    weighted: bool = False,
    base_refit: bool = False,
    m: int = 7,
    trees_per_round: int = 1,
    backtrack: bool = False,
    dataset_rule: FactorRule | None = None,
    objective_rule: FactorRule | None = None,
    offset_scale: float = 0.2,
    base_newton: bool = False,
) -> Spec:
    rng = np.random.default_rng(seed)
    n_leaves = rng.integers(2, max_leaves + 1, n_trees)
    leaf = np.stack([rng.integers(0, L, n) for L in n_leaves])
    test_leaf = np.stack([rng.integers(0, L, m) for L in n_leaves])
    if loss == "logloss":
        y, y_test = (rng.random(n) < 0.4).astype(float), (rng.random(m) < 0.4).astype(float)
    else:
        y, y_test = rng.normal(size=n) * 2, rng.normal(size=m) * 2
    v = rng.uniform(0.3, 2.5, n) if weighted else np.ones(n)
    scales = np.ones((n_trees, n_steps))
    if n_steps > 1 and not backtrack:
        scales[:, 1::2] = 0.5  # backtracking-like accepted half steps
    groups = (y > np.median(y)).astype(np.int64) if loss != "logloss" else y.astype(np.int64)
    spec = Spec(
        leaf=leaf,
        n_leaves=n_leaves,
        test_leaf=test_leaf,
        y=y,
        y_test=y_test,
        v=v,
        groups=groups,
        dataset_rule=dataset_rule,
        objective_rule=objective_rule,
        offset=rng.normal(size=n) * offset_scale,
        offset_test=rng.normal(size=m) * 0.2,
        loss=loss,
        newton=np.full(n_trees, newton),
        lr=rng.uniform(0.2, 0.6, n_trees),
        l1=l1,
        l2=[rng.uniform(0.5, 1.5, L) * l2 for L in n_leaves],
        l2m=l2m,
        mds=mds,
        scales=scales,
        rounds=np.arange(n_trees) // trees_per_round,
        backtrack=backtrack,
        n_iter=n_steps,
        floor=0.0,
        base=0.3,
        base_refit=base_refit,
        base_newton=base_newton,
    )
    if base_refit:
        spec.base = spec.base_for(v, np.ones(n, bool))
    return spec
