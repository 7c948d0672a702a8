"""The engine against independent ground truth on synthetic ensembles.

References: a plain per-row retraining loop (engine_reference.Spec), central finite differences of
that loop in the sample weight, forward vs reverse mode, and the paper's closed forms.
Tolerances: the engine and the reference compute the same sums in different orders, so they agree
to a few ulps of the largest score (1e-9 relative leaves room for 100 trees of accumulation). The
5-point finite-difference stencil with h = 1e-3 has truncation error O(h^4 f^(5)) ~ 1e-12 and
rounding error ~ 1e-16 / h ~ 1e-13 relative, far below the 1e-8 used.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_reference import Spec, random_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from influence_gbdt.engine import InfluenceEngine, TestPoints
from influence_gbdt.ensemble import TreeEnsemble
from influence_gbdt.errors import InputError, ReproductionError

CONFIGS = {
    "logloss-newton": dict(loss="logloss"),
    "logloss-gradient": dict(loss="logloss", newton=False),
    "squared-newton": dict(loss="squared_error"),
    "squared-gradient-weighted": dict(loss="squared_error", newton=False, weighted=True),
    "logloss-3steps-catboost-l2": dict(n_steps=3, l2pw=0.02, weighted=True, base_refit=True),
    "logloss-gradient-4steps": dict(newton=False, n_steps=4, base_refit=True),
    "squared-3steps-refit-base": dict(loss="squared_error", n_steps=3, base_refit=True, weighted=True),
    "logloss-l1-clip-weighted": dict(l1=0.3, mds=0.4, weighted=True),
    "squared-l1-clip": dict(loss="squared_error", l1=0.5, mds=0.3, l2=0.0),
}
ROWS = np.arange(0, 60, 5)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def _setup(name: str, seed: int = 3) -> tuple[Spec, InfluenceEngine, TestPoints]:
    spec = random_spec(seed, **CONFIGS[name])
    engine = InfluenceEngine(spec.ensemble())
    return spec, engine, TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)


def _without(spec: Spec, i: int, delta: float | None = None) -> np.ndarray:
    w = spec.w.copy()
    w[i] = 0.0 if delta is None else w[i] + delta
    return w


def _finite_difference(spec: Spec, rows: np.ndarray, h: float = 1e-3) -> np.ndarray:
    def loss(i: int, d: float) -> np.ndarray:
        return spec.test_loss(_without(spec, i, d))

    return np.array(
        [(loss(i, -2 * h) - 8 * loss(i, -h) + 8 * loss(i, h) - loss(i, 2 * h)) / (12 * h) for i in rows]
    )


@pytest.mark.parametrize("name", CONFIGS)
def test_replay_reproduces_stored_leaf_values_and_margins(name: str) -> None:
    spec, engine, test = _setup(name)
    assert engine.relative_residual < 1e-13
    np.testing.assert_allclose(engine.predict_margin(test), spec.test_margin(spec.w), rtol=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_leaf_refit_equals_plain_retraining_loop(name: str) -> None:
    spec, engine, test = _setup(name)
    expected = np.array([spec.test_loss(spec.w) - spec.test_loss(_without(spec, i)) for i in ROWS])
    assert _rel(engine.leaf_refit(test, rows=ROWS), expected) < 1e-9
    margin = np.array([spec.test_margin(spec.w) - spec.test_margin(_without(spec, i)) for i in ROWS])
    assert _rel(engine.leaf_refit(test, rows=ROWS, on="prediction"), margin) < 1e-9


@pytest.mark.parametrize("name", CONFIGS)
def test_leaf_influence_equals_finite_differences_of_retraining(name: str) -> None:
    spec, engine, test = _setup(name)
    fd = _finite_difference(spec, ROWS)
    assert _rel(engine.influence_reverse(test, rows=ROWS), fd) < 1e-8
    assert _rel(engine.influence_forward(test, rows=ROWS), fd) < 1e-8


@pytest.mark.parametrize("name", CONFIGS)
def test_reverse_mode_equals_forward_mode_and_aggregates(name: str) -> None:
    _, engine, test = _setup(name)
    forward = engine.influence_forward(test)
    reverse = engine.influence_reverse(test, chunk_size=3)
    assert _rel(reverse, forward) < 1e-9
    assert _rel(engine.influence_reverse(test, aggregate="mean"), forward.mean(axis=1)) < 1e-9
    assert _rel(engine.influence_reverse(test, aggregate="sum"), forward.sum(axis=1)) < 1e-9
    pred_fwd = engine.influence_forward(test, on="prediction")
    assert _rel(engine.influence_reverse(test, on="prediction"), pred_fwd) < 1e-9


@pytest.mark.parametrize("name", CONFIGS)
def test_top_k_with_every_leaf_equals_all_points(name: str) -> None:
    _, engine, test = _setup(name)
    k = int(engine.ensemble.n_leaves.max())
    for method in (engine.leaf_refit, engine.influence_forward):
        all_points = method(test, rows=ROWS, update_set="all_points")
        top = method(test, rows=ROWS, update_set="top_k_leaves", k=k)
        assert _rel(top, all_points) < 1e-12


def _margins_before(spec: Spec) -> list[np.ndarray]:
    A = spec.offset + spec.base
    out = []
    for t, f in enumerate(spec.leaf_values(spec.w, spec.base)):
        out.append(A)
        A = A + f[spec.leaf[t]]
    return out


@pytest.mark.parametrize("name", ["logloss-newton", "logloss-gradient", "squared-newton"])
def test_single_point_equals_closed_form_with_zero_jacobian(name: str) -> None:
    """Proposition 1 with J = 0 and Algorithm 3 with U = empty, written out for one-step trees."""
    spec, engine, test = _setup(name)
    values = spec.leaf_values(spec.w, spec.base)
    margins = _margins_before(spec)
    y_test, f_test = spec.y_test, spec.test_margin(spec.w)
    dloss = (1 / (1 + np.exp(-f_test)) - y_test) if spec.loss == "logloss" else f_test - y_test
    infl = np.zeros((ROWS.size, y_test.size))
    new_f = np.tile(f_test, (ROWS.size, 1))
    for t, f in enumerate(values):
        lf = spec.leaf[t]
        if spec.loss == "logloss":
            p = 1 / (1 + np.exp(-margins[t]))
            g, h = p - spec.y, p * (1 - p)
        else:
            g, h = margins[t] - spec.y, np.ones(spec.y.size)
        hh = h if spec.newton[t] else np.ones_like(h)
        G = np.bincount(lf, spec.w * g, spec.n_leaves[t])
        D = np.bincount(lf, spec.w * hh, spec.n_leaves[t]) + spec.l2[t]
        raw = f / spec.lr[t]
        for b, i in enumerate(ROWS):
            li = lf[i]
            on_test = spec.test_leaf[t] == li
            infl[b] += on_test * -spec.lr[t] * (g[i] + raw[li] * hh[i]) / D[li]
            refit = -spec.lr[t] * (G[li] - spec.w[i] * g[i]) / (D[li] - spec.w[i] * hh[i])
            new_f[b] += on_test * (refit - f[li])
    got = engine.influence_forward(test, rows=ROWS, update_set="single_point", refit_base=False)
    assert _rel(got, infl * dloss[None, :]) < 1e-12
    if spec.loss == "logloss":
        new_loss = np.logaddexp(0, new_f) - y_test * new_f
        old_loss = np.logaddexp(0, f_test) - y_test * f_test
    else:
        new_loss, old_loss = 0.5 * (new_f - y_test) ** 2, 0.5 * (f_test - y_test) ** 2
    refit = engine.leaf_refit(test, rows=ROWS, update_set="single_point", refit_base=False)
    assert _rel(refit, old_loss[None, :] - new_loss) < 1e-12


def test_update_sets_approach_all_points_as_k_grows() -> None:
    _spec, engine, test = _setup("logloss-newton")
    exact = engine.influence_reverse(test, rows=ROWS)
    errors = [
        _rel(engine.influence_forward(test, rows=ROWS, update_set="top_k_leaves", k=k), exact)
        for k in (1, 3, int(engine.ensemble.n_leaves.max()))
    ]
    single = _rel(engine.influence_forward(test, rows=ROWS, update_set="single_point"), exact)
    assert errors[-1] < 1e-12 < single
    assert errors[0] <= single * 1.5


def test_refit_leaf_values_and_derivatives_match_reference() -> None:
    spec, engine, _ = _setup("logloss-3steps-catboost-l2")
    values, base = engine.refit_leaf_values(ROWS[:4])
    for b, i in enumerate(ROWS[:4]):
        w = _without(spec, i)
        assert base[b] == pytest.approx(spec.base_for(w), rel=1e-13)
        np.testing.assert_allclose(values[b], np.concatenate(spec.leaf_values(w, base[b])), atol=1e-13)
    d_values, _d_base = engine.leaf_value_derivatives(ROWS[:2])
    h = 1e-3
    for b, i in enumerate(ROWS[:2]):
        stencil = [
            np.concatenate(spec.leaf_values(_without(spec, i, d), spec.base_for(_without(spec, i, d))))
            for d in (-2 * h, -h, h, 2 * h)
        ]
        fd = (stencil[0] - 8 * stencil[1] + 8 * stencil[2] - stencil[3]) / (12 * h)
        assert _rel(d_values[b], fd) < 1e-8


def test_weight_scale_reports_scores_per_unit_of_user_weight() -> None:
    spec = random_spec(5, weighted=True)
    plain = InfluenceEngine(spec.ensemble())
    e = spec.ensemble()
    scale = np.linspace(0.5, 3.0, e.n_rows)
    scaled = InfluenceEngine(TreeEnsemble.build(**{**_fields(e), "weight_scale": scale}))
    test = TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    np.testing.assert_allclose(
        scaled.influence_reverse(test), plain.influence_reverse(test) * scale[:, None], rtol=1e-12
    )


def _fields(e: TreeEnsemble) -> dict:
    return dict(
        leaf_index=e.leaf_index,
        leaf_values=e.leaf_values,
        n_leaves=e.n_leaves,
        y=e.y,
        loss=e.loss,
        learning_rate=e.learning_rate,
        newton=e.newton,
        l2=e.l2,
        l2_per_weight_sum=e.l2_per_weight_sum,
        l1=e.l1,
        max_delta_step=e.max_delta_step,
        step_scales=e.step_scales,
        n_steps=e.n_steps,
        hessian_floor=e.hessian_floor,
        base_margin=e.base_margin,
        base_margin_refit=e.base_margin_refit,
        init_offset=e.init_offset,
        sample_weight=e.sample_weight,
    )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    loss=st.sampled_from(["logloss", "squared_error"]),
    newton=st.booleans(),
    n_steps=st.integers(1, 3),
    l2pw=st.sampled_from([0.0, 0.01]),
    weighted=st.booleans(),
    base_refit=st.booleans(),
)
def test_reverse_equals_forward_property(
    seed: int, loss: str, newton: bool, n_steps: int, l2pw: float, weighted: bool, base_refit: bool
) -> None:
    spec = random_spec(
        seed,
        loss=loss,
        newton=newton,
        n_steps=n_steps,
        l2pw=l2pw,
        weighted=weighted,
        base_refit=base_refit,
        n=30,
        n_trees=4,
    )
    engine = InfluenceEngine(spec.ensemble())
    test = TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    forward = engine.influence_forward(test)
    reverse = engine.influence_reverse(test)
    assert np.abs(reverse - forward).max() <= 1e-9 * max(np.abs(forward).max(), 1e-12)


def test_self_check_detects_a_wrong_leaf_value() -> None:
    spec = random_spec(0)
    e = spec.ensemble()
    values = e.leaf_values.copy()
    values[5] += 1e-3
    engine = InfluenceEngine(TreeEnsemble.build(**{**_fields(e), "leaf_values": values}))
    assert engine.relative_residual > 1e-5
    with pytest.raises(ReproductionError, match=r"not reproduced.*check the weights"):
        engine.check_reproduction(rtol=1e-9, hint="check the weights")


def test_bad_inputs_are_refused() -> None:
    spec, engine, test = _setup("logloss-newton")
    with pytest.raises(InputError, match="needs k"):
        engine.leaf_refit(test, update_set="top_k_leaves")
    with pytest.raises(InputError, match="update_set"):
        engine.leaf_refit(test, update_set="some_points")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="out of range"):
        engine.leaf_refit(test, rows=[1000])
    with pytest.raises(InputError, match="needs test labels"):
        engine.leaf_influence(TestPoints(spec.test_leaf))
    with pytest.raises(InputError, match="shape"):
        engine.leaf_influence(TestPoints(spec.test_leaf[:2], None, spec.y_test))
    with pytest.raises(InputError, match="NaN"):
        engine.leaf_influence(TestPoints(spec.test_leaf, None, np.full(spec.y_test.size, np.nan)))
    with pytest.raises(InputError, match="aggregate"):
        engine.leaf_refit(test, aggregate="median")  # type: ignore[arg-type]
    fields = _fields(spec.ensemble())
    with pytest.raises(InputError, match="labels must lie in"):
        TreeEnsemble.build(**{**fields, "y": np.full(spec.y.size, 2.0)})
    with pytest.raises(InputError, match="outside"):
        TreeEnsemble.build(**{**fields, "leaf_index": spec.leaf + 10})
    with pytest.raises(InputError, match="NaN"):
        TreeEnsemble.build(**{**fields, "sample_weight": np.full(spec.y.size, np.nan)})
    boolean = np.zeros(spec.y.size, dtype=bool)
    boolean[[2, 7]] = True
    np.testing.assert_array_equal(engine.leaf_refit(test, rows=boolean), engine.leaf_refit(test, rows=[2, 7]))
