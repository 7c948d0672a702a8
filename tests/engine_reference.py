"""Plain reference implementations and random ensembles for the engine tests.

Everything here is written the slow, obvious way (a Python loop over trees and steps, numpy per
step), independently of the engine's compiled kernels, so the tests compare two implementations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from influence_gbdt.ensemble import TreeEnsemble


def _derivs(loss: str, y: np.ndarray, m: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    if loss == "logloss":
        p = 1.0 / (1.0 + np.exp(-m))
        return p - y, np.maximum(p * (1.0 - p), floor)
    return m - y, np.ones_like(m)


def _loss(loss: str, y: np.ndarray, m: np.ndarray) -> np.ndarray:
    if loss == "logloss":
        return np.logaddexp(0.0, m) - y * m
    return 0.5 * (m - y) ** 2


def constant(loss: str, y: np.ndarray, w: np.ndarray) -> float:
    mean = np.sum(w * y) / np.sum(w)
    return float(np.log(mean / (1 - mean))) if loss == "logloss" else float(mean)


@dataclass
class Spec:
    """Everything that defines a synthetic ensemble, for the reference model."""

    leaf: np.ndarray  # (T, n)
    n_leaves: np.ndarray  # (T,)
    test_leaf: np.ndarray  # (T, m)
    y: np.ndarray
    y_test: np.ndarray
    w: np.ndarray
    offset: np.ndarray
    offset_test: np.ndarray
    loss: str
    newton: np.ndarray
    lr: np.ndarray
    l1: float
    l2: list[np.ndarray]
    l2pw: float
    mds: float
    scales: np.ndarray  # (T, S)
    floor: float
    base: float
    base_refit: bool

    def leaf_values(self, w: np.ndarray, base: float) -> list[np.ndarray]:
        """Sequential leaf values of every tree trained with weights ``w`` from ``base``."""
        A = self.offset + base
        out = []
        for t in range(self.leaf.shape[0]):
            L = self.n_leaves[t]
            lf = self.leaf[t]
            u = np.zeros(L)
            for s in range(self.scales.shape[1]):
                g, h = _derivs(self.loss, self.y, A + u[lf], self.floor)
                G = np.bincount(lf, w * g, L)
                H = np.bincount(lf, w * h if self.newton[t] else w, L)
                lam = self.l2[t] + self.l2pw * w.sum()
                Gt = np.sign(G) * np.maximum(np.abs(G) - self.l1, 0.0)
                raw = np.where(H > 0, -Gt / np.where(H > 0, H + lam, 1.0), 0.0)
                if self.mds > 0:
                    raw = np.clip(raw, -self.mds, self.mds)
                u = u + self.scales[t, s] * raw
            f = self.lr[t] * u
            out.append(f)
            A = A + f[lf]
        return out

    def base_for(self, w: np.ndarray) -> float:
        return constant(self.loss, self.y, w) if self.base_refit else self.base

    def test_margin(self, w: np.ndarray) -> np.ndarray:
        values = self.leaf_values(w, self.base_for(w))
        F = self.offset_test + self.base_for(w)
        for t, f in enumerate(values):
            F = F + f[self.test_leaf[t]]
        return F

    def test_loss(self, w: np.ndarray) -> np.ndarray:
        return _loss(self.loss, self.y_test, self.test_margin(w))

    def ensemble(self) -> TreeEnsemble:
        return TreeEnsemble.build(
            leaf_index=self.leaf,
            leaf_values=self.leaf_values(self.w, self.base),
            y=self.y,
            loss=self.loss,
            learning_rate=self.lr,
            newton=self.newton,
            l2=self.l2,
            l2_per_weight_sum=self.l2pw,
            l1=self.l1,
            max_delta_step=self.mds,
            step_scales=self.scales,
            hessian_floor=self.floor,
            base_margin=self.base,
            base_margin_refit=self.base_refit,
            init_offset=self.offset,
            sample_weight=self.w,
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
    l2pw: float = 0.0,
    mds: float = 0.0,
    weighted: bool = False,
    base_refit: bool = False,
    m: int = 7,
) -> Spec:
    rng = np.random.default_rng(seed)
    n_leaves = rng.integers(2, max_leaves + 1, n_trees)
    leaf = np.stack([rng.integers(0, L, n) for L in n_leaves])
    test_leaf = np.stack([rng.integers(0, L, m) for L in n_leaves])
    if loss == "logloss":
        y, y_test = (rng.random(n) < 0.4).astype(float), (rng.random(m) < 0.4).astype(float)
    else:
        y, y_test = rng.normal(size=n) * 2, rng.normal(size=m) * 2
    w = rng.uniform(0.3, 2.5, n) if weighted else np.ones(n)
    scales = np.ones((n_trees, n_steps))
    if n_steps > 1:
        scales[:, 1::2] = 0.5  # backtracking-like accepted half steps
    base = constant(loss, y, w) if base_refit else 0.3
    return Spec(
        leaf=leaf,
        n_leaves=n_leaves,
        test_leaf=test_leaf,
        y=y,
        y_test=y_test,
        w=w,
        offset=rng.normal(size=n) * 0.2,
        offset_test=rng.normal(size=m) * 0.2,
        loss=loss,
        newton=np.full(n_trees, newton),
        lr=rng.uniform(0.2, 0.6, n_trees),
        l1=l1,
        l2=[rng.uniform(0.5, 1.5, L) * l2 for L in n_leaves],
        l2pw=l2pw,
        mds=mds,
        scales=scales,
        floor=0.0,
        base=base,
        base_refit=base_refit,
    )
