"""Every loss against finite differences of its own value (independent ground truth).

For random labels in the loss's domain and random margins: the gradient equals the derivative of
the loss value; ``jvp`` equals the directional derivative of the gradient and of the booster's
hessian; ``vjp`` is the adjoint of ``jvp``; the hessian equals the second derivative where the
booster uses the true one; and the mean link minimises the weighted loss (boost_from_average).
Central differences with step 1e-5 on O(1) quantities carry truncation O(1e-10) and rounding
O(1e-16 / 1e-5 = 1e-11), so 1e-6 relative leaves a wide margin while catching any wrong formula
(which is off by O(1)).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from influence_gbdt import losses as L
from influence_gbdt.errors import InputError

# (name, params, K, exact hessian?)
CASES = [
    ("logloss", {}, 1, True),
    ("logloss", {"sigma": 1.7}, 1, True),
    ("squared_error", {}, 1, True),
    ("poisson", {}, 1, True),
    ("poisson", {"hessian_log_shift": 0.7}, 1, False),
    ("gamma", {}, 1, True),
    ("tweedie", {"power": 1.3}, 1, True),
    ("huber", {"delta": 0.8}, 1, False),  # LightGBM: hessian 1 also outside delta
    ("huber", {"delta": 0.8, "outside_hessian": 0.0}, 1, True),
    ("pseudo_huber", {"delta": 1.5}, 1, True),
    ("fair", {"c": 0.7}, 1, True),
    ("quantile", {"alpha": 0.3, "scale": 2.0}, 1, False),
    ("softmax", {}, 4, False),  # the booster hessian is the diagonal only
    ("softmax", {"factor": 2.0}, 3, False),
    ("one_vs_all", {}, 3, True),
    ("multi_squared", {}, 3, True),
]
IDS = [f"{n}-{'-'.join(f'{k}{v}' for k, v in p.items())}-K{k}" for n, p, k, _ in CASES]


def _labels(name: str, K: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if name in ("softmax", "one_vs_all"):
        return rng.integers(0, K, n).astype(float)
    if name == "logloss":
        return rng.random(n)  # probabilities (cross-entropy) include 0/1 classes
    if name in ("poisson", "tweedie"):
        return rng.poisson(2.0, n).astype(float)
    if name == "gamma":
        return rng.gamma(2.0, 1.0, n) + 0.05
    if name == "multi_squared":
        return rng.normal(size=(n, K))
    return rng.normal(size=n) * 2


def _loss(name: str, params: dict, K: int) -> L.Loss:
    return L.Loss(name, n_outputs=K, params=params)


def _away_from_kinks(name: str, params: dict, y: np.ndarray, m: np.ndarray, h: float) -> np.ndarray:
    """Rows whose residual is not within 3h of a kink (Huber's delta, the quantile's 0)."""
    if name == "huber":
        return np.abs(np.abs(m[:, 0] - y) - params["delta"]) > 3 * h
    if name == "quantile":
        return np.abs(m[:, 0] - y) > 3 * h
    return np.ones(m.shape[0], bool)


@pytest.mark.calls_kernels  # the row primitives through _row_derivatives
@pytest.mark.parametrize(("name", "params", "K", "exact_hessian"), CASES, ids=IDS)
def test_derivatives_against_finite_differences(name: str, params: dict, K: int, exact_hessian: bool) -> None:
    rng = np.random.default_rng(0)
    n, h = 64, 1e-5
    loss = _loss(name, params, K)
    y = _labels(name, K, n, rng)
    m = rng.normal(size=(n, K)) * 1.5
    keep = _away_from_kinks(name, params, np.asarray(y)[:, 0] if np.ndim(y) == 2 else y, m, h)
    g, hess = loss.grad_hess(y, m)
    fd_g = np.empty_like(m)
    for c in range(K):
        e = np.zeros(K)
        e[c] = h
        fd_g[:, c] = (loss.values(y, m + e) - loss.values(y, m - e)) / (2 * h)
    np.testing.assert_allclose(g[keep], fd_g[keep], rtol=1e-6, atol=1e-8)

    # jvp against directional derivatives of g and h; vjp as its adjoint.
    dm = rng.normal(size=(n, K))
    g_up, h_up = loss.grad_hess(y, m + h * dm)
    g_dn, h_dn = loss.grad_hess(y, m - h * dm)
    fd_dg, fd_dh = (g_up - g_dn) / (2 * h), (h_up - h_dn) / (2 * h)
    beta, gamma = rng.normal(size=K), rng.normal(size=K)
    dg, dh, out, hess_cols = _row_derivatives(loss.code, loss.prm, loss.as_labels(y), m, dm, beta, gamma,
                                              loss.state_size)
    np.testing.assert_allclose(dg[keep], fd_dg[keep], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dh[keep], fd_dh[keep], rtol=1e-6, atol=1e-8)
    # vjp is jvp's adjoint: out . dm = beta . dg + gamma . dh, row by row.
    np.testing.assert_allclose(np.einsum("ij,ij->i", out, dm)[keep], (dg @ beta + dh @ gamma)[keep],
                               rtol=1e-10, atol=1e-12)
    if exact_hessian:  # jvp along unit vectors gives the hessian's diagonal exactly
        np.testing.assert_allclose(hess[keep], np.einsum("icc->ic", hess_cols)[keep], rtol=1e-12, atol=1e-15)


@numba.njit
def _row_derivatives(code, prm, labels, m, dm, beta, gamma, size):
    """Each row's jvp along ``dm``, vjp of ``beta``, ``gamma``, and jvp along every unit vector,
    as the engine's kernels call the row primitives (they are compiled for kernels only)."""
    n, K = m.shape
    z = np.empty(size)
    dg, dh, out = np.empty((n, K)), np.empty((n, K)), np.empty((n, K))
    cols, scratch = np.empty((n, K, K)), np.empty(K)
    unit = np.zeros(K)
    for j in range(n):
        L.point(code, prm, m[j], z)
        L.jvp(code, prm, labels[j], z, dm[j], dg[j], dh[j])
        L.vjp(code, prm, labels[j], z, beta, gamma, out[j])
        for c in range(K):
            unit[:] = 0.0
            unit[c] = 1.0
            L.jvp(code, prm, labels[j], z, unit, cols[j, c], scratch)
    return dg, dh, out, cols


@pytest.mark.parametrize(("name", "params", "K", "exact_hessian"),
                         [c for c in CASES if c[0] not in ("huber", "pseudo_huber", "fair", "quantile")],
                         ids=[i for i, c in zip(IDS, CASES, strict=True)
                              if c[0] not in ("huber", "pseudo_huber", "fair", "quantile")])
def test_mean_link_minimises_the_weighted_loss(name: str, params: dict, K: int, exact_hessian: bool) -> None:
    """boost_from_average: the mean link of the weighted label mean is where the weighted loss is
    flat (its gradient sums to 0; for the softmax, up to the shared shift of all classes)."""
    rng = np.random.default_rng(1)
    n = 200
    loss = _loss(name, params, K)
    y = _labels(name, K, n, rng)
    labels = loss.as_labels(y)
    w = rng.uniform(0.2, 3.0, n)
    if name in ("softmax", "one_vs_all"):
        mean = np.array([[np.sum(w * (labels[:, 0] == c)) / w.sum() for c in range(K)]])
    else:
        mean = (np.sum(w[:, None] * labels, axis=0) / w.sum())[None, :]
    base = loss.mean_link(mean if K > 1 else mean[:, 0]).reshape(1, K)
    g = loss.gradients(y, np.broadcast_to(base, (n, K)))
    assert np.abs((w[:, None] * g).sum(axis=0)).max() < 1e-10 * w.sum()


def test_domains_and_parameters_are_checked() -> None:
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        L.Loss("logloss").values([1.5], [0.0])
    with pytest.raises(InputError, match=r"\(0, inf\)"):
        L.Loss("gamma").values([0.0], [0.0])
    with pytest.raises(InputError, match=r"class indices 0 \.\. 2"):
        L.Loss("softmax", n_outputs=3).values([3.0], [[0.0, 0.0, 0.0]])
    with pytest.raises(InputError, match="power must be in"):
        L.Loss("tweedie", params={"power": 1.0})
    with pytest.raises(InputError, match="no parameters"):
        L.Loss("huber", params={"alpha": 0.9})
    with pytest.raises(InputError, match="n_outputs >= 2"):
        L.Loss("softmax")


@settings(max_examples=60, deadline=None)
@given(x=st.floats(-40, 40), label=st.floats(0, 1))
@example(x=-1e-05, label=0.5)  # p next to the label (a CI run drew it)
def test_log_loss_is_stable_at_extreme_margins(x: float, label: float) -> None:
    """The point keeps p and 1 - p without cancellation: h = p (1 - p) keeps full relative precision."""
    loss = L.Loss("logloss")
    g, h = loss.grad_hess([label], [x])
    p = 1.0 / (1.0 + np.exp(-x))
    exact_h = np.exp(-abs(x)) / (1.0 + np.exp(-abs(x))) ** 2
    assert h[0, 0] == pytest.approx(exact_h, rel=1e-13)
    # g = p - y subtracts two numbers near 1 or 0.5 when p is near the label: whatever computes it
    # carries p's own rounding, up to an ulp of p absolute (x=-1e-5, y=0.5: both sides are 2e-17
    # from the true -2.49999999997917e-06, 1.5e-11 apart relative), so the bound is that ulp.
    assert g[0, 0] == pytest.approx(p - label, rel=1e-12, abs=2 * np.spacing(max(abs(p), abs(label))))


@numba.njit
def _points_apart_and_shared(code, prm, m):
    """Each margin's point and ``exp`` computed apart (``point1``, ``math.exp``) and shared
    (``point1_exp``), and the derivatives likewise (``derivs1``, ``derivs1_exp``), as the engine's
    kernels call them."""
    n = m.shape[0]
    apart, shared = np.empty((n, 7)), np.empty((n, 7))
    for j in range(n):
        z0, z1 = L.point1(code, prm, m[j])
        g, h, dg, dh = L.derivs1(code, prm, 1.0, m[j])
        apart[j, 0], apart[j, 1], apart[j, 2] = z0, z1, math.exp(m[j])
        apart[j, 3], apart[j, 4], apart[j, 5], apart[j, 6] = g, h, dg, dh
        shared[j, 0], shared[j, 1], shared[j, 2] = L.point1_exp(code, prm, m[j])
        g, h, dg, dh, e = L.derivs1_exp(code, prm, 1.0, m[j])
        shared[j, 3], shared[j, 4], shared[j, 5], shared[j, 6] = g, h, dg, dh
        if e != shared[j, 2]:
            shared[j, 2] = np.nan
    return apart, shared


@settings(max_examples=60, deadline=None)
@given(margins=st.lists(st.floats(-750.0, 750.0), min_size=1, max_size=40),
       code=st.sampled_from([L.LOGLOSS, L.POISSON, L.SQUARED_ERROR]), scale=st.sampled_from([1.0, 2.5]))
@example(margins=[0.0, -0.0, -1e-300, 1e-300, -745.2, 709.0], code=L.LOGLOSS, scale=1.0)
def test_shared_exponential_is_bit_for_bit_the_exponential_apart(
        margins: list[float], code: int, scale: float) -> None:
    """The replay and LeafRefit take a row's ``exp(m)`` (the fast backtracking objective's point)
    from the exponential its log-loss derivatives already took where that is the same number
    (``exp(-|m|)`` for ``m < 0`` at scale 1; Poisson's point): it must be the same bits as
    ``math.exp(m)`` and leave the point and derivatives unchanged, for any margin and scale."""
    m = np.array(margins)
    prm = (1e-16, scale, 0.0, 0.0)
    apart, shared = _points_apart_and_shared(code, prm, m)
    np.testing.assert_array_equal(apart.view(np.uint64), shared.view(np.uint64))


def test_float32_log_and_exp_without_a_c_library_are_a_rounding_away(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``ctypes`` finds no C math library, :mod:`influence_gbdt._cmath32` rounds the float64
    functions once to float32: within one float32 step of the C library's (which are within one
    of the exact value), and equal on most values."""
    from influence_gbdt import _cmath32

    x = np.random.default_rng(0).uniform(1e-6, 20.0, 20_000).astype(np.float32)
    c_log, c_exp = _cmath32.logf(x), _cmath32.expf(x)
    monkeypatch.setattr(_cmath32, "_c_function", lambda name: None)
    for c, own in ((c_log, _cmath32.logf(x)), (c_exp, _cmath32.expf(x))):
        assert c.dtype == own.dtype == np.float32 and c.shape == x.shape
        assert np.all(np.abs(c.astype(np.float64) - own) <= np.spacing(np.abs(own)))
        assert np.mean(c == own) > 0.99
