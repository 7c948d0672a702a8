"""Plain reference implementations and random ensembles for the engine tests.

Everything here is written the slow, obvious way (a Python loop over rounds, trees and steps,
numpy per step, the losses' formulas written out again), independently of the engine's compiled
kernels and of ``influence_gbdt.losses``, so the tests compare two implementations. "Retraining"
here means recomputing every leaf value of the fixed structure on changed data: rows deleted
(``present``) or reweighted (``v``), with the class factors, the row count, the base margin and
the backtracking decisions following the data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from influence_gbdt.ensemble import TreeEnsemble
from influence_gbdt.losses import Loss

FactorRule = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
CLASSES = ("softmax", "one_vs_all")
#: LightGBM's quantile methods: residuals in double, the percentile base rounded to float32.
LIGHTGBM = ("lightgbm", "lightgbm_4.6")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def derivs(loss: str, prm: dict, y: np.ndarray, m: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """The booster's gradient and hessian, shape (n, K), for margins ``m`` (n, K) and labels
    ``y`` (n,) or (n, K)."""
    y1 = y if y.ndim == 1 else None
    if loss == "logloss":
        s = prm.get("sigma", 1.0)
        p = _sigmoid(s * m[:, 0])
        return (s * (p - y1))[:, None], np.maximum(s * s * p * (1 - p), floor)[:, None]
    if loss == "softmax":
        e = np.exp(m - m.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        onehot = y1[:, None] == np.arange(m.shape[1])[None, :]
        return p - onehot, np.maximum(prm.get("factor", 1.0) * p * (1 - p), floor)
    if loss == "one_vs_all":
        p = _sigmoid(m)
        onehot = y1[:, None] == np.arange(m.shape[1])[None, :]
        return p - onehot, np.maximum(p * (1 - p), floor)
    if loss == "multi_squared":
        return m - y, np.ones_like(m)
    x = m[:, 0]
    if loss == "poisson":
        g, h = np.exp(x) - y1, np.exp(x + prm.get("hessian_log_shift", 0.0))
    elif loss == "gamma":
        g, h = 1 - y1 * np.exp(-x), y1 * np.exp(-x)
    elif loss == "tweedie":
        rho = prm["power"]
        a, b = y1 * np.exp((1 - rho) * x), np.exp((2 - rho) * x)
        g, h = b - a, (2 - rho) * b - (1 - rho) * a
    elif loss == "huber":
        r, d = x - y1, prm["delta"]
        inside = (np.abs(r) <= d) if prm.get("closed", 1.0) else (np.abs(r) < d)
        g, h = np.where(inside, r, d * np.sign(r)), np.where(inside, 1.0, prm.get("outside_hessian", 1.0))
    elif loss == "pseudo_huber":
        r, d = x - y1, prm["delta"]
        q = 1 + (r / d) ** 2
        g, h = r / np.sqrt(q), q ** -1.5
    elif loss == "fair":
        r, c = x - y1, prm["c"]
        g, h = c * r / (np.abs(r) + c), c * c / (np.abs(r) + c) ** 2
    else:  # squared_error
        g, h = x - y1, np.ones_like(x)
    return g[:, None], np.maximum(h, floor)[:, None]


def loss_values(loss: str, y: np.ndarray, m: np.ndarray, prm: dict | None = None) -> np.ndarray:
    """Per-row loss, shape (n,), for margins ``m`` (n,) or (n, K)."""
    prm = prm or {}
    m = m[:, None] if m.ndim == 1 else m
    y1 = y if y.ndim == 1 else None
    if loss == "logloss":
        s = prm.get("sigma", 1.0)
        return np.logaddexp(0.0, s * m[:, 0]) - y1 * s * m[:, 0]
    if loss == "softmax":
        top = m.max(axis=1)
        return top + np.log(np.exp(m - top[:, None]).sum(axis=1)) - m[np.arange(m.shape[0]), y1.astype(int)]
    if loss == "one_vs_all":
        onehot = y1[:, None] == np.arange(m.shape[1])[None, :]
        return (np.logaddexp(0.0, m) - onehot * m).sum(axis=1)
    if loss == "multi_squared":
        return 0.5 * ((m - y) ** 2).sum(axis=1)
    x = m[:, 0]
    if loss == "poisson":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.exp(x) - y1 * x - np.where(y1 > 0, y1 - y1 * np.log(y1), 0.0)
    if loss == "gamma":
        return y1 * np.exp(-x) + x - 1 - np.log(y1)
    if loss == "tweedie":
        rho = prm["power"]
        return (y1 ** (2 - rho) / ((1 - rho) * (2 - rho)) - y1 * np.exp((1 - rho) * x) / (1 - rho)
                + np.exp((2 - rho) * x) / (2 - rho))
    r = x - y1
    if loss == "quantile":
        a, scale = prm.get("alpha", 0.5), prm.get("scale", 1.0)
        return scale * np.where(r >= 0, (1 - a) * r, -a * r)
    if loss == "huber":
        d = prm["delta"]
        return np.where(np.abs(r) <= d, 0.5 * r * r, d * (np.abs(r) - 0.5 * d))
    if loss == "pseudo_huber":
        d = prm["delta"]
        return d * d * (np.sqrt(1 + (r / d) ** 2) - 1)
    if loss == "fair":
        c = prm["c"]
        return c * c * (np.abs(r) / c - np.log1p(np.abs(r) / c))
    return 0.5 * r * r


def _f32(x: np.ndarray | float) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def ref_quantile(  # noqa: C901 -- one branch per booster definition
    method: str, r: np.ndarray, w: np.ndarray, alpha: float, weighted: bool, delta: float,
    labels: bool = False,
) -> float:
    """The boosters' quantile definitions, written out again from the project notes. ``labels``:
    LightGBM's init score, a percentile of float32 labels (``label_t``), whose order statistics it
    subtracts in float32."""
    def gap(a: float, b: float) -> float:
        return float(_f32(a - b)) if labels else a - b

    n = r.size
    if n == 0:
        return 0.0
    order = np.argsort(r, kind="stable")
    v, ww = r[order], w[order]
    if method == "catboost":
        need = ww.sum() * alpha
        cum = np.cumsum(ww)
        hit = np.nonzero(cum >= need - 2.220446049250313e-16)[0]
        q = float(v[hit[0]] if hit.size else v[-1])
        if delta > 0:
            less, equal = ww[v < q].sum(), ww[v == q].sum()
            q = q - delta if less + equal * alpha >= need - 2.220446049250313e-16 else q + delta
        return float(_f32(q))
    if n == 1:
        return float(v[0])
    if method == "xgboost" and not weighted:
        if alpha <= 1 / (n + 1):
            return float(v[0])
        if alpha >= n / (n + 1):
            return float(v[-1])
        x = alpha * (n + 1)
        k = int(np.floor(x)) - 1
        d = x - 1 - k
        return float(_f32(v[k] + d * _f32(v[k + 1] - v[k])))
    if method == "xgboost":
        cdf = np.cumsum(ww.astype(np.float32), dtype=np.float32).astype(np.float64)
        idx = min(int(np.searchsorted(cdf, float(_f32(cdf[-1] * alpha)), side="left")), n - 1)
        return float(v[idx])
    if not weighted:  # lightgbm: linear interpolation at (n - 1) alpha
        desc = v[::-1]
        fp = (n - 1) * (1 - alpha)
        p = int(fp) + 1
        if p >= n:
            return float(desc[-1])
        b = fp - (p - 1)
        return float(desc[p - 1] - gap(desc[p - 1], desc[p]) * b)
    cdf = np.cumsum(_f32(ww))
    t = cdf[-1] * alpha
    above = np.nonzero(cdf > t)[0]
    p = min(int(above[0]) if above.size else n - 1, n - 1)
    if p in (0, n - 1):
        return float(v[p])
    if method == "lightgbm_4.6":  # WeightedPercentileFun of LightGBM 4.4 to 4.6, as its source reads
        if cdf[p + 1] - cdf[p] >= 1:
            return float((t - cdf[p]) / (cdf[p + 1] - cdf[p]) * gap(v[p], v[p - 1]) + v[p - 1])
        return float(v[p])
    if cdf[p] - cdf[p - 1] >= 1:
        return float(v[p - 1] + (t - cdf[p - 1]) / (cdf[p] - cdf[p - 1]) * gap(v[p], v[p - 1]))
    return float(v[p - 1])


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
    y: np.ndarray  # (n,) or (n, K)
    y_test: np.ndarray
    v: np.ndarray  # user weights
    groups: np.ndarray  # (n,) weight group
    dataset_rule: FactorRule | None  # (v, groups, present) -> dataset factor per group; None = 1
    objective_rule: FactorRule | None  # the objective factor (not in the base estimate); None = 1
    offset: np.ndarray  # (n, K)
    offset_test: np.ndarray  # (m, K)
    loss: str
    newton: np.ndarray
    lr: np.ndarray
    l1: float
    l2: list[np.ndarray]
    l2m: float  # l2 per unit of mean effective weight
    mds: float
    scales: np.ndarray  # (T, S) accepted scales (ignored where backtracking decides)
    rounds: np.ndarray  # (T,)
    outputs: np.ndarray  # (T,) output of each tree
    backtrack: bool
    n_iter: int
    floor: float
    base: np.ndarray  # (K,)
    base_refit: bool
    base_newton: bool = False  # the refit base is one Newton step from 0 instead of the mean link
    params: dict = field(default_factory=dict)
    K: int = 1
    renew: str | None = None  # renewed leaves: the quantile method (engine.quantile.METHODS)
    q_weighted: bool = False
    q_delta: float = 0.0
    joint: bool = False  # each round: one Newton step of its K trees with the full softmax hessian

    # -- the model on changed data ---------------------------------------------------------------
    def factors(self, v: np.ndarray, present: np.ndarray, rule: FactorRule | None) -> np.ndarray:
        if rule is None:
            return np.ones(self.groups.max() + 1)
        return rule(v, self.groups, present)

    def base_for(self, v: np.ndarray, present: np.ndarray) -> np.ndarray:
        if not self.base_refit:
            return self.base
        u = v * present * self.factors(v, present, self.dataset_rule)[self.groups]
        if self.renew:
            keep = present.astype(bool)
            q = ref_quantile(self.renew, self.y[keep], u[keep], self.params.get("alpha", 0.5),
                             self.q_weighted, self.q_delta, labels=self.renew in LIGHTGBM)
            # LightGBM's BoostFromScore returns its percentile as float32 (measured against retraining).
            return np.array([float(np.float32(q)) if self.renew in LIGHTGBM else q])
        if self.base_newton:
            g, h = derivs(self.loss, self.params, self.y, np.zeros((self.y.shape[0], self.K)), self.floor)
            return -np.sum(u[:, None] * g, axis=0) / np.sum(u[:, None] * h, axis=0)
        if self.loss in CLASSES:
            onehot = self.y[:, None] == np.arange(self.K)[None, :]
            share = np.sum(u[:, None] * onehot, axis=0) / u.sum()
            if self.loss == "softmax":
                return np.log(share)
            return np.log(share / (1 - share))
        mean = np.sum(u[:, None] * (self.y if self.y.ndim == 2 else self.y[:, None]), axis=0) / u.sum()
        if self.loss == "logloss":
            return np.log(mean / (1 - mean)) / self.params.get("sigma", 1.0)
        if self.loss in ("poisson", "gamma", "tweedie"):
            return np.log(mean)
        return mean

    def train(
        self, v: np.ndarray, present: np.ndarray | None = None
    ) -> tuple[list[np.ndarray], list[list[float]], np.ndarray]:
        """Leaf values of every tree, the accepted step scales, and the base margin, with user
        weights ``v`` on the rows ``present``."""
        present = np.ones(self.y.shape[0], bool) if present is None else present
        self._present = present
        w = (v * present * self.factors(v, present, self.dataset_rule)[self.groups]
             * self.factors(v, present, self.objective_rule)[self.groups])
        mean_w = w.sum() / present.sum()
        base = self.base_for(v, present)
        A = self.offset + base[None, :]
        values: list[np.ndarray] = []
        accepted_all: list[list[float]] = []
        for r in np.unique(self.rounds):
            trees = np.flatnonzero(self.rounds == r)
            new = []
            if self.joint:
                new = self._joint_round(trees, A, w, mean_w)
                accepted_all.extend([[1.0]] * len(trees))
            for t in trees[len(new):]:
                f, acc = self._tree(t, A, w, mean_w)
                new.append(f)
                accepted_all.append(acc)
            for t, f in zip(trees, new, strict=True):
                A = A.copy()
                A[:, self.outputs[t]] += f[self.leaf[t]]
                values.append(f)
        return values, accepted_all, base

    def _moved(self, t: int, A: np.ndarray, u: np.ndarray) -> np.ndarray:
        M = A.copy()
        M[:, self.outputs[t]] += u[self.leaf[t]]
        return M

    def _steps(self, t: int, A: np.ndarray, w: np.ndarray, mean_w: float, u: np.ndarray) -> np.ndarray:
        L, lf, c = self.n_leaves[t], self.leaf[t], self.outputs[t]
        g, h = derivs(self.loss, self.params, self.y, self._moved(t, A, u), self.floor)
        G = np.bincount(lf, w * g[:, c], L)
        H = np.bincount(lf, w * h[:, c] if self.newton[t] else w, L)
        D = H + self.l2[t] + self.l2m * mean_w
        Gt = np.sign(G) * np.maximum(np.abs(G) - self.l1, 0.0)
        raw = np.where(D > 0, -Gt / np.where(D > 0, D, 1.0), 0.0)
        return np.clip(raw, -self.mds, self.mds) if self.mds > 0 else raw

    def _joint_round(
        self, trees: np.ndarray, A: np.ndarray, w: np.ndarray, mean_w: float
    ) -> list[np.ndarray]:
        """Leaf values of a round of K trees sharing ``leaf[trees[0]]``: per leaf
        ``-(H + lam I)^{-1} G`` with the full softmax hessian ``sum w (diag(p) - p p^T)`` and
        ``lam = max(l2 + l2m * mean_w, f32(f32(max diag H) * FLT_EPSILON))``."""
        t0, K = trees[0], len(trees)
        e = np.exp(A - A.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        g = p - (self.y[:, None] == np.arange(K)[None, :])
        values = np.zeros((self.n_leaves[t0], K))
        for leaf in range(self.n_leaves[t0]):
            rows = self.leaf[t0] == leaf
            G = (w[rows, None] * g[rows]).sum(axis=0)
            wp = w[rows, None] * p[rows]
            H = np.diag(wp.sum(axis=0)) - wp.T @ p[rows]
            floor = float(np.float32(np.float32(H.diagonal().max()) * np.finfo(np.float32).eps))
            lam = max(self.l2[t0][leaf] + self.l2m * mean_w, floor)
            M = H + lam * np.eye(K)
            if np.linalg.matrix_rank(M) == K:
                values[leaf] = -np.linalg.solve(M, G)
        return [self.lr[t] * values[:, c] for c, t in enumerate(trees)]

    def _tree(self, t: int, A: np.ndarray, w: np.ndarray, mean_w: float) -> tuple[np.ndarray, list[float]]:
        u = np.zeros(self.n_leaves[t])
        if self.renew:
            r = self.y - A[:, 0]
            if self.renew not in LIGHTGBM:
                r = _f32(r)
            weights = np.ones_like(w) if self.renew == "catboost" else w
            for leaf in range(self.n_leaves[t]):
                rows = (self.leaf[t] == leaf) & self._present
                u[leaf] = ref_quantile(self.renew, r[rows], weights[rows], self.params.get("alpha", 0.5),
                                       self.q_weighted, self.q_delta)
            return self.lr[t] * u, [1.0]
        if not self.backtrack:
            for s in range(self.scales.shape[1]):
                u = u + self.scales[t, s] * self._steps(t, A, w, mean_w, u)
            return self.lr[t] * u, list(self.scales[t])

        # AnyImprovement: try the step, accept it if the weighted training loss falls, else halve.
        def total(uu: np.ndarray) -> float:
            return float(np.sum(w * loss_values(self.loss, self.y, self._moved(t, A, uu), self.params)))

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
        """Test margins, shape (m,) for one output, else (m, K)."""
        values, _, base = self.train(v, present)
        F = self.offset_test + base[None, :]
        for t, f in enumerate(values):
            F[:, self.outputs[t]] += f[self.test_leaf[t]]
        return F[:, 0] if self.K == 1 else F

    def test_loss(self, v: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
        return loss_values(self.loss, self.y_test, self.test_margin(v, present), self.params)

    # -- the engine's description ----------------------------------------------------------------
    def ensemble(self) -> TreeEnsemble:
        n = self.y.shape[0]
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
            loss=Loss(self.loss, hessian_floor=self.floor, n_outputs=self.K, params=self.params),
            tree_output=self.outputs,
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
            full_hessian=self.joint,
            n_iterations=self.n_iter if self.backtrack else None,
            base_margin=self.base,
            base_rule=(("quantile" if self.renew else "newton_step" if self.base_newton else "mean")
                       if self.base_refit else "fixed"),
            renewed=self.renew is not None,
            quantile_alpha=self.params.get("alpha", 0.5),
            quantile_method=self.renew or "lightgbm",
            quantile_weighted=self.q_weighted,
            float32_base=self.renew in LIGHTGBM,  # LightGBM's percentile base is a float (as above)
            quantile_delta=self.q_delta,
            init_offset=self.offset,
            user_weight=self.v,
            weight_group=self.groups,
            **fields,
        )


def _labels(loss: str, K: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if loss in CLASSES:
        return rng.integers(0, K, n).astype(float)
    if loss == "logloss":
        return (rng.random(n) < 0.4).astype(float)
    if loss == "multi_squared":
        return rng.normal(size=(n, K)) * 2
    if loss in ("poisson", "tweedie"):
        return rng.poisson(1.5, n).astype(float)
    if loss == "gamma":
        return rng.gamma(2.0, 1.0, n) + 0.05
    return rng.normal(size=n) * 2


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
    params: dict | None = None,
    K: int = 1,
    floor: float = 0.0,
    renew: str | None = None,
    q_weighted: bool = False,
    q_delta: float = 0.0,
    joint: bool = False,
) -> Spec:
    """A random structure with random labels, weights and offsets; multi-output losses get one
    tree per output per round (``K`` outputs), sharing one structure per round with ``joint``."""
    rng = np.random.default_rng(seed)
    if K > 1:
        trees_per_round = K
        n_trees = max(n_trees, K) // K * K
    n_leaves = rng.integers(2, max_leaves + 1, n_trees)
    leaf = np.stack([rng.integers(0, L, n) for L in n_leaves])
    test_leaf = np.stack([rng.integers(0, L, m) for L in n_leaves])
    if joint:  # the round's trees share the first one's structure
        first = np.arange(n_trees) // K * K
        n_leaves, leaf, test_leaf = n_leaves[first], leaf[first], test_leaf[first]
    y, y_test = _labels(loss, K, n, rng), _labels(loss, K, m, rng)
    # Weights on a float32-exact grid (multiples of 1/256), so that a booster's float32 weights and
    # the finite-difference steps of the tests (multiples of 2**-10) involve no rounding.
    v = np.round(rng.uniform(0.3, 2.5, n) * 256) / 256 if weighted else np.ones(n)
    scales = np.ones((n_trees, n_steps))
    if n_steps > 1 and not backtrack:
        scales[:, 1::2] = 0.5  # backtracking-like accepted half steps
    if loss in ("logloss", *CLASSES):
        groups = y.astype(np.int64)
    else:
        first = y if y.ndim == 1 else y[:, 0]
        groups = (first > np.median(first)).astype(np.int64)
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
        offset=rng.normal(size=(n, K)) * offset_scale,
        offset_test=rng.normal(size=(m, K)) * offset_scale,
        loss=loss,
        newton=np.full(n_trees, newton),
        lr=rng.uniform(0.2, 0.6, n_trees),
        l1=l1,
        l2=[rng.uniform(0.5, 1.5, L) * l2 for L in n_leaves],
        l2m=l2m,
        mds=mds,
        scales=scales,
        rounds=np.arange(n_trees) // trees_per_round,
        outputs=np.arange(n_trees) % K,
        backtrack=backtrack,
        n_iter=n_steps,
        floor=floor,
        base=np.full(K, 0.3),
        base_refit=base_refit,
        base_newton=base_newton,
        params=dict(params or {}),
        K=K,
        renew=renew,
        q_weighted=q_weighted,
        q_delta=q_delta,
        joint=joint,
    )
    if base_refit:
        spec.base = spec.base_for(v, np.ones(n, bool))
    return spec
