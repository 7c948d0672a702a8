"""The engine against independent ground truth on synthetic ensembles.

References: a plain per-row retraining loop (engine_reference.Spec: rows deleted or reweighted,
class factors, row count, base margin and backtracking decisions following the data), central
finite differences of that loop in the user's weight, forward vs reverse mode, and a plain loop
written from the paper's Algorithm 4 for the Fast update sets.
Tolerances: the engine and the reference compute the same sums in different orders, so they agree
to a few ulps of the largest score (1e-9 relative leaves room for tens of trees of accumulation).
The 5-point finite-difference stencil with h = 2**-10 (~1e-3) has truncation error O(h^4 f^(5)) ~ 1e-12
and rounding error ~ 1e-16 / h ~ 1e-13 relative, far below the 1e-8 used; weights and steps lie on a
float32-exact grid, so boosters that round weights to float32 add no noise.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_reference import Spec, balanced_counts, balanced_weights, loss_values, random_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from influence_gbdt.engine import InfluenceEngine, TestPoints, passes, resolve_rows, reverse1, reverse_multi
from influence_gbdt.engine.common import ALL
from influence_gbdt.engine.core import _team_batches
from influence_gbdt.engine.leafrows import leaf_rows
from influence_gbdt.engine.team import CHUNK_ROWS
from influence_gbdt.ensemble import TreeEnsemble
from influence_gbdt.errors import InputError, ReproductionError

CONFIGS = {
    "logloss-newton": dict(loss="logloss"),
    "logloss-gradient": dict(loss="logloss", newton=False),
    "squared-newton": dict(loss="squared_error"),
    "squared-gradient-weighted": dict(loss="squared_error", newton=False, weighted=True),
    "logloss-3steps-catboost-l2": dict(n_steps=3, l2m=1.5, weighted=True, base_refit=True),
    "logloss-gradient-4steps": dict(newton=False, n_steps=4, base_refit=True),
    "squared-3steps-refit-base": dict(loss="squared_error", n_steps=3, base_refit=True, weighted=True),
    "logloss-l1-clip-weighted": dict(l1=0.3, mds=0.4, weighted=True),
    "squared-l1-clip": dict(loss="squared_error", l1=0.5, mds=0.3, l2=0.0),
    "logloss-rounds-of-3": dict(trees_per_round=3, n_trees=9, base_refit=True, weighted=True),
    # Backtracking decisions far from convergence (rows at extreme margins, no l2: Newton steps
    # overshoot and are halved); near convergence "the loss fell" is decided by rounding.
    "logloss-backtracking": dict(n_steps=2, backtrack=True, l2=0.0, offset_scale=3.0, weighted=True,
                                 base_refit=True),
    "squared-backtracking-gradient": dict(loss="squared_error", newton=False, n_steps=5, backtrack=True,
                                          l2m=1.0),
    "logloss-count-factors": dict(dataset_rule=balanced_counts, base_refit=True, weighted=True),
    "logloss-objective-weight-factors": dict(objective_rule=balanced_weights, base_refit=True,
                                             weighted=True, l2m=1.0, n_steps=2),
    "squared-weight-factors": dict(loss="squared_error", dataset_rule=balanced_weights, base_refit=True,
                                   weighted=True),
    "logloss-both-factors": dict(dataset_rule=balanced_weights, objective_rule=balanced_counts,
                                 base_refit=True, weighted=True),
    "logloss-newton-step-base": dict(dataset_rule=balanced_weights, base_refit=True, base_newton=True,
                                     weighted=True),
    "squared-newton-step-base": dict(loss="squared_error", base_refit=True, base_newton=True, weighted=True),
    # The objectives of issue 14 (parameters as each booster sets them).
    "poisson-xgboost": dict(loss="poisson", params={"hessian_log_shift": 0.7}, mds=0.7, base_refit=True,
                            weighted=True),
    "poisson-3steps": dict(loss="poisson", n_steps=3, l2m=1.0, weighted=True),
    "gamma": dict(loss="gamma", base_refit=True, weighted=True),
    "tweedie": dict(loss="tweedie", params={"power": 1.3}, base_refit=True, l1=0.1),
    "huber-lightgbm": dict(loss="huber", params={"delta": 0.9}, base_refit=True, weighted=True),
    "huber-catboost": dict(loss="huber", params={"delta": 0.9, "outside_hessian": 0.0}, l2=0.0, l2m=1.0),
    "pseudo-huber": dict(loss="pseudo_huber", params={"delta": 1.2}, base_refit=True, base_newton=True),
    "fair": dict(loss="fair", params={"c": 0.8}, base_refit=True, weighted=True),
    "logloss-sigma": dict(params={"sigma": 1.7}, base_refit=True, weighted=True),
    # Renewed leaves (L1 / quantile): each booster's own quantile of the residuals, and of the labels
    # for the base margin.
    "quantile-xgboost": dict(loss="quantile", params={"alpha": 0.3}, renew="xgboost", base_refit=True),
    "quantile-xgboost-weighted": dict(loss="quantile", params={"alpha": 0.6}, renew="xgboost",
                                      q_weighted=True, weighted=True, base_refit=True),
    "mae-lightgbm": dict(loss="quantile", params={"alpha": 0.5, "scale": 2.0}, renew="lightgbm",
                         base_refit=True),
    "quantile-lightgbm-weighted": dict(loss="quantile", params={"alpha": 0.7}, renew="lightgbm",
                                       q_weighted=True, weighted=True, base_refit=True),
    "quantile-lightgbm-4.6-weighted": dict(loss="quantile", params={"alpha": 0.45}, renew="lightgbm_4.6",
                                           q_weighted=True, weighted=True, base_refit=True),
    "quantile-catboost": dict(loss="quantile", params={"alpha": 0.4}, renew="catboost", q_delta=1e-6,
                              weighted=True, base_refit=True),
    # Multi-output models of issue 13: one tree per output per round, fitted at the same margins.
    "softmax-3-classes": dict(loss="softmax", K=3, n_trees=9, params={"factor": 1.5}, base_refit=True,
                              weighted=True, dataset_rule=balanced_counts),
    "softmax-4-floored": dict(loss="softmax", K=4, n_trees=8, params={"factor": 2.0}, floor=1e-16, l1=0.05),
    "one-vs-all": dict(loss="one_vs_all", K=3, n_trees=6, base_refit=True, weighted=True),
    # CatBoost's MultiClass Newton: one joint step per round with the full softmax hessian.
    "softmax-joint-newton": dict(loss="softmax", K=3, n_trees=9, joint=True, base_refit=True, weighted=True,
                                 dataset_rule=balanced_counts, l2m=1.0),
    "softmax-joint-weight-factors": dict(loss="softmax", K=4, n_trees=8, joint=True, weighted=True,
                                         objective_rule=balanced_weights, l2=0.0, l2m=0.5),
    "softmax-joint-5-classes": dict(loss="softmax", K=5, n_trees=10, joint=True, weighted=True, l2=0.0,
                                    l2m=1.0),
    "multi-target": dict(loss="multi_squared", K=2, n_trees=6, base_refit=True, weighted=True, mds=0.5),
}
ROWS = np.arange(0, 60, 5)
K1 = [name for name, config in CONFIGS.items() if config.get("K", 1) == 1]
#: The multi-output models a team sweeps (``engine.reverse_multi``): softmax, its rounds plain or
#: joint, one-vs-all, multi-target; those with plain rounds only (the general sweep,
#: ``passes.reverse``, sweeps them too).
MULTI = [name for name, config in CONFIGS.items() if config.get("K", 1) > 1 and "renew" not in config]
MULTI_PLAIN = [name for name in MULTI if not CONFIGS[name].get("joint")]
#: The models with renewed leaves (one output: ``engine.reverse1`` sweeps them on a team).
RENEWED = [name for name, config in CONFIGS.items() if "renew" in config]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    """Max error relative to the largest expected value; values below 1e-4 (scores of these unit-scale
    losses are 1e-3 and more) count as zero, so a model that does not depend on the weights at all
    (an unweighted quantile) compares its exact 0 with finite-difference noise of 1e-14 correctly."""
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-4))


def _setup(name: str, seed: int = 3) -> tuple[Spec, InfluenceEngine, TestPoints]:
    spec = random_spec(seed, **CONFIGS[name])
    engine = InfluenceEngine(spec.ensemble())
    return spec, engine, TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)


def _deleted(spec: Spec, i: int) -> np.ndarray:
    present = np.ones(spec.y.shape[0], bool)
    present[i] = False
    return present


def _moved(spec: Spec, i: int, d: float) -> np.ndarray:
    v = spec.v.copy()
    v[i] += d
    return v


def _finite_difference(spec: Spec, rows: np.ndarray, h: float = 2.0**-10) -> np.ndarray:
    def loss(i: int, d: float) -> np.ndarray:
        return spec.test_loss(_moved(spec, i, d))

    return np.array(
        [(loss(i, -2 * h) - 8 * loss(i, -h) + 8 * loss(i, h) - loss(i, 2 * h)) / (12 * h) for i in rows]
    )


@pytest.mark.parametrize("name", CONFIGS)
def test_replay_reproduces_stored_leaf_values_and_margins(name: str) -> None:
    spec, engine, test = _setup(name)
    assert engine.relative_residual < 1e-13
    np.testing.assert_allclose(engine.predict_margin(test), spec.test_margin(spec.v), rtol=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_a_slice_of_trees_replays_at_the_full_replays_margins(name: str) -> None:
    """``trees(start, end)`` (the CatBoost adapter's one-tree thread probe) reproduces the stored
    leaves of its trees, with per-tree residuals bit-identical to the full replay's: its initial
    margins are the ones the full replay reaches ``start`` with."""
    spec, engine, _ = _setup(name)
    e = spec.ensemble()
    rounds = e.tree_round
    start = int(np.searchsorted(rounds, rounds[-1] // 2))
    end = int(np.searchsorted(rounds, rounds[-1]))  # leaves the last round out
    part = InfluenceEngine(e.trees(start, end))
    assert part.ensemble.n_trees == end - start
    np.testing.assert_array_equal(part.tree_residual, engine.tree_residual[start:end])
    assert part.residual <= 1e-13 * max(float(np.abs(e.leaf_values).max()), 1.0)


def _outputs(spec: Spec) -> list[dict]:
    """Keyword sets scoring each output's prediction (none needed for one output)."""
    return [{}] if spec.K == 1 else [{"output": c} for c in range(spec.K)]


def _column(margin: np.ndarray, output: dict) -> np.ndarray:
    return margin if not output else margin[..., output["output"]]


@pytest.mark.parametrize("name", CONFIGS)
def test_leaf_refit_equals_retraining_without_the_row(name: str) -> None:
    spec, engine, test = _setup(name)
    expected = np.array([spec.test_loss(spec.v) - spec.test_loss(spec.v, _deleted(spec, i)) for i in ROWS])
    assert _rel(engine.leaf_refit(test, rows=ROWS), expected) < 1e-9
    margin = np.array([spec.test_margin(spec.v) - spec.test_margin(spec.v, _deleted(spec, i)) for i in ROWS])
    for out in _outputs(spec):
        assert _rel(engine.leaf_refit(test, rows=ROWS, on="prediction", **out), _column(margin, out)) < 1e-9


@pytest.mark.parametrize("name", CONFIGS)
def test_leaf_influence_equals_finite_differences_of_retraining(name: str) -> None:
    spec, engine, test = _setup(name)
    fd = _finite_difference(spec, ROWS)
    # LightGBM rounds a re-estimated percentile base to float32: retraining's finite differences
    # then carry ~ulp32(base) / h = 6e-8 * 2**10 ~ 6e-5 of the base's slope (measured 2.6e-6).
    tol = 1e-5 if spec.renew in ("lightgbm", "lightgbm_4.6") and spec.base_refit else 1e-8
    assert _rel(engine.influence_reverse(test, rows=ROWS), fd) < tol
    assert _rel(engine.influence_forward(test, rows=ROWS), fd) < tol


@pytest.mark.parametrize("name", CONFIGS)
def test_reverse_mode_equals_forward_mode_and_aggregates(name: str) -> None:
    spec, engine, test = _setup(name)
    forward = engine.influence_forward(test)
    reverse = engine.influence_reverse(test, chunk_size=3)
    assert _rel(reverse, forward) < 1e-9
    assert _rel(engine.influence_reverse(test, aggregate="mean"), forward.mean(axis=1)) < 1e-9
    assert _rel(engine.influence_reverse(test, aggregate="sum"), forward.sum(axis=1)) < 1e-9
    for out in _outputs(spec):
        pred_fwd = engine.influence_forward(test, on="prediction", **out)
        assert _rel(engine.influence_reverse(test, on="prediction", **out), pred_fwd) < 1e-9


@pytest.mark.parametrize("name", CONFIGS)
def test_the_derivative_cache_changes_no_score(name: str) -> None:
    """The reverse sweep from the replay's cached derivatives equals the sweep recomputing them
    from margins rebuilt by subtraction: the same values up to the rounding of those margins
    (~1e-16 relative per round; 1e-12 leaves room for 20 rounds of it)."""
    spec, engine, test = _setup(name)
    e = engine.ensemble
    eligible = e.n_outputs == 1 and not e.renewed.any() and not e.full_hessian.any()
    cached, steps = engine.cached_steps
    assert cached == (steps if eligible else 0)
    bare = InfluenceEngine(spec.ensemble(), cache_bytes=0)
    assert bare.cached_steps == (0, steps)
    # A cache with room for about half the steps (each row's point per step: 8 bytes a number):
    # the sweep mixes cached and recomputed steps.
    half = InfluenceEngine(spec.ensemble(), cache_bytes=8 * e.loss.state_size * e.n_rows * max(steps // 2, 1))
    assert half.cached_steps[0] == (max(steps // 2, 1) if eligible else 0)
    for kw in ({}, {"aggregate": "mean"}, {"on": "prediction", **_outputs(spec)[0]}):
        expected = bare.influence_reverse(test, **kw)
        assert _rel(engine.influence_reverse(test, **kw), expected) < 1e-12
        assert _rel(half.influence_reverse(test, **kw), expected) < 1e-12


@pytest.mark.parametrize(("name", "n"), [(name, 60) for name in CONFIGS] + [
    (name, 3 * CHUNK_ROWS + 123) for name in K1 + MULTI  # the models a team sweeps (class
    # factors: small n only)
    if not {"dataset_rule", "objective_rule", "base_newton"} & set(CONFIGS[name])])
def test_a_batch_scores_each_point_as_its_own_sweep_for_any_thread_count(
    name: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bit for bit, not within a tolerance: test points swept together (for one-output models in
    the batched layout of ``engine.reverse1``, weight adjoints summed in the sweep, or after it for
    a log-loss model's batch of more than ``reverse1.DEFER_ABOVE``, or of 3 with that lowered) get
    the scores each gets from a sweep of its own, on 1, 2, 3 or 4 threads (a point alone or the
    aggregate: one sweep whose rows the threads split, in 4 chunks for the larger ``n``), in
    batches of 3 or all 11 (swept 16 wide: ``reverse1.padded``), with the derivative cache full,
    half or absent."""
    spec = random_spec(3, n=n, m=11, **CONFIGS[name])
    engine, test = InfluenceEngine(spec.ensemble()), TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    e = engine.ensemble
    steps = engine.cached_steps[1]
    engines = [engine, InfluenceEngine(spec.ensemble(), cache_bytes=0),
               InfluenceEngine(spec.ensemble(), cache_bytes=32 * e.n_rows * max(steps // 2, 1))]
    m = spec.y_test.shape[0]

    def point(i: int) -> TestPoints:
        return TestPoints(spec.test_leaf[:, [i]], spec.offset_test[[i]], spec.y_test[[i]])

    for eng in engines:
        for kw in ({}, {"on": "prediction", **_outputs(spec)[-1]}):
            eng.n_threads = 1
            alone = np.column_stack([eng.influence_reverse(point(i), **kw)[:, 0] for i in range(m)])
            mean = eng.influence_reverse(test, aggregate="mean", **kw)
            for threads in (1, 2, 3, 4):
                eng.n_threads = threads
                for chunk in (3, m):
                    np.testing.assert_array_equal(eng.influence_reverse(test, chunk_size=chunk, **kw), alone)
                np.testing.assert_array_equal(eng.influence_reverse(test, aggregate="mean", **kw), mean)
                np.testing.assert_array_equal(eng.influence_reverse(point(0), **kw)[:, 0], alone[:, 0])
            with monkeypatch.context() as patch:  # no memory to keep the steps: weights summed in the sweep
                patch.setattr(reverse1, "KEPT_BYTES", 0.0)
                np.testing.assert_array_equal(eng.influence_reverse(test, chunk_size=m, **kw), alone)
            with monkeypatch.context() as patch:  # a log-loss model's weights after the sweep, any batch
                patch.setattr(reverse1, "DEFER_ABOVE", 0)
                np.testing.assert_array_equal(eng.influence_reverse(test, chunk_size=3, **kw), alone)


#: The team sweeps, by name (the tests' parameters).
TEAM_SWEEPS = {"reverse1": reverse1, "reverse_multi": reverse_multi}


@pytest.mark.calls_kernels  # the general sweep: the reference alone runs it
@pytest.mark.parametrize(("sweep", "name", "n"), [("reverse_multi", name, 60) for name in MULTI_PLAIN] + [
    ("reverse_multi", name, 3 * CHUNK_ROWS + 123)
    for name in ("softmax-4-floored", "one-vs-all", "multi-target")
] + [("reverse1", name, n) for name in RENEWED for n in (60, 3 * CHUNK_ROWS + 123)] + [
    ("reverse1", name, 60) for name in K1 if name not in RENEWED
] + [("reverse1", name, 3 * CHUNK_ROWS + 123)
     for name in ("logloss-newton", "logloss-3steps-catboost-l2", "logloss-rounds-of-3")])
def test_a_team_sweep_equals_the_general_sweep(
    sweep: str, name: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``engine.reverse_multi`` (several outputs, plain rounds) and ``engine.reverse1`` (one output:
    plain rounds, each row's terms from its :func:`~influence_gbdt.engine.common.row_factors`,
    and renewed rounds, the order statistics' margin adjoints by the leaf level, the quantiles'
    weight adjoints and the gather by the team's rows) against the general sweep (``passes.reverse``),
    the reference they write out: bit for bit where the rows make one chunk (the same additions in
    the same order), and within 1e-13 relative where a leaf's sum over 4 chunks of rows runs chunk
    by chunk (each a sum of ~4,000 terms, off by a few ulps of the largest: measured 3e-16
    relative on Adult for several outputs, 2.3e-16 for LightGBM's weighted quantile)."""
    spec = random_spec(3, n=n, m=5, **CONFIGS[name])
    engine, test = InfluenceEngine(spec.ensemble()), TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    module = TEAM_SWEEPS[sweep]
    calls = {"n": 0}
    team_sweep = module.reverse

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return team_sweep(*args, **kwargs)

    kws = ({}, {"aggregate": "mean"}, {"on": "prediction", "output": spec.K - 1})
    with monkeypatch.context() as patch:
        patch.setattr(module, "reverse", counted)
        team = [engine.influence_reverse(test, **kw) for kw in kws]
    assert calls["n"] >= len(kws)  # the team's sweep ran (once per batch of test points)
    with monkeypatch.context() as patch:
        patch.setattr(module, "applies", lambda st: False)
        general = [engine.influence_reverse(test, **kw) for kw in kws]
    for got, expected in zip(team, general, strict=True):
        if n <= CHUNK_ROWS:
            np.testing.assert_array_equal(got, expected)
        else:
            assert _rel(got, expected) < 1e-13


@pytest.mark.parametrize("name", [name for name in MULTI if CONFIGS[name].get("joint")])
def test_the_joint_team_sweep_equals_forward_mode_over_chunks_of_rows(name: str) -> None:
    """Joint rounds have no general sweep to compare with: ``engine.reverse_multi`` sweeps them
    (on 12,411 rows, 4 chunks) against forward mode, an independent computation (each row's
    derivatives pushed through the rounds). Within 1e-9 relative: measured 1e-14 to 7e-13, while
    merely permuting the training rows moved the former general sweep's scores of these models by
    up to 1e-12 (the K x K solves amplify the sums' rounding)."""
    n = 3 * CHUNK_ROWS + 123
    spec = random_spec(3, n=n, m=5, **CONFIGS[name])
    engine, test = InfluenceEngine(spec.ensemble()), TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    rows = np.arange(0, n, n // 12)
    for kw in ({}, {"aggregate": "mean"}, {"on": "prediction", "output": spec.K - 1}):
        forward = engine.influence_forward(test, rows=rows, **kw)
        assert _rel(engine.influence_reverse(test, rows=rows, **kw), forward) < 1e-9


@given(st.integers(1, 400), st.integers(1, 100))
def test_test_points_are_batched_in_order_as_few_as_the_limit_allows(m: int, per_batch: int) -> None:
    """The batches of a team's sweeps: consecutive, every point once, none above ``per_batch``,
    and no more of them than ``ceil(m / per_batch)`` (widths rounded to the sweep's padding)."""
    batches = _team_batches(m, per_batch)
    np.testing.assert_array_equal(np.concatenate(batches), np.arange(m))
    assert max(b.size for b in batches) <= per_batch
    assert len(batches) == -(-m // per_batch)
    # the memory limit holds for the padded width too (the engine's batches are widest() at most)
    most = reverse1.widest(per_batch)
    assert 1 <= most <= per_batch
    assert max(reverse1.padded(b.size) for b in _team_batches(m, most)) <= per_batch


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_replay_is_the_same_on_any_number_of_threads(name: str) -> None:
    """Bit for bit: the replay's passes over the rows split over 1 to 4 threads (4 chunks of rows)
    give the same leaf values, decided steps, leaf sums (a joint round's full hessians too) and
    cached derivatives, and so the same scores (a renewed tree's leaves shared out, each leaf's
    quantile by one thread, its order statistics recorded)."""
    spec = random_spec(5, n=3 * CHUNK_ROWS + 123, **CONFIGS[name])
    test = TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    first = None
    for threads in (1, 2, 3, 4):
        engine = InfluenceEngine(spec.ensemble(), n_threads=threads)
        st = engine._state
        got = (engine.leaf_values, engine.train_margin, engine.n_steps, engine.step_scales, *st.sums,
               *(st.joint or ()), *(st.renewed or ()), st.cache.DER,
               engine.influence_reverse(test, aggregate="mean"))
        if first is None:
            first = got
            continue
        for a, b in zip(first, got, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", CONFIGS)
def test_refit_and_forward_rows_give_the_same_scores_on_any_number_of_threads(name: str) -> None:
    """Bit for bit: LeafRefit and forward mode, whose deleted rows are split over the threads (12
    rows on 4 threads: chunks of 3), score each row as on one thread in one chunk, for each update
    set."""
    _, engine, test = _setup(name)
    calls = [(engine.leaf_refit, {}), (engine.influence_forward, {}),
             (engine.leaf_refit, {"update_set": "top_k_leaves", "k": 2}),
             (engine.influence_forward, {"update_set": "single_point", "aggregate": "mean"})]
    engine.n_threads = 1
    expected = [method(test, rows=ROWS, **kw) for method, kw in calls]
    for threads, chunk in ((2, 64), (3, 5), (4, 1)):
        engine.n_threads = threads
        for (method, kw), want in zip(calls, expected, strict=True):
            np.testing.assert_array_equal(method(test, rows=ROWS, chunk_size=chunk, **kw), want)


#: Left out of the tests at 4 chunks of rows: one thread refits joint rounds; class factors and a
#: Newton-step base margin are tested at small n only.
_SMALL_ONLY = {"joint", "dataset_rule", "objective_rule", "base_newton"}


@pytest.mark.parametrize("name", [name for name in K1 if not _SMALL_ONLY & set(CONFIGS[name])])
def test_a_training_point_is_scored_the_same_by_a_team_of_any_size(name: str) -> None:
    """Bit for bit: LeafRefit and forward mode of fewer rows than threads, each row's passes over the
    rows (leaf sums and their derivatives, backtracking objectives, margins) split over a team (one
    row on 2, 3 or 4 threads; two rows on 4: teams of 2; 4 chunks of rows), give each row's scores,
    leaf values and leaf-value derivatives as one thread does, for every update set (a renewed
    tree's refit shares its leaves out; its forward mode moves the margins on the team)."""
    spec = random_spec(5, n=3 * CHUNK_ROWS + 123, **CONFIGS[name])
    engine = InfluenceEngine(spec.ensemble(), n_threads=1)
    test = TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    for forward in (False, True):  # the team is not one thread
        assert passes.point_team(engine._state, 4, ALL, 1, forward=forward) == 4
    rows = np.array([7, 3 * CHUNK_ROWS + 100])
    calls = [(method, kw) for method in (engine.leaf_refit, engine.influence_forward)
             for kw in ({}, {"update_set": "top_k_leaves", "k": 2}, {"update_set": "single_point"})]
    expected = [method(test, rows=rows, **kw) for method, kw in calls]
    values = [*engine.refit_leaf_values(rows[:1]), *engine.leaf_value_derivatives(rows[:1])]
    for threads in (2, 3, 4):
        engine.n_threads = threads
        for (method, kw), want in zip(calls, expected, strict=True):
            np.testing.assert_array_equal(method(test, rows=rows[:1], **kw), want[:1])
            if threads == 4:
                np.testing.assert_array_equal(method(test, rows=rows, **kw), want)
        got = [*engine.refit_leaf_values(rows[:1]), *engine.leaf_value_derivatives(rows[:1])]
        for a, b in zip(got, values, strict=True):
            np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 9), n=st.integers(1, 300), most=st.integers(1, 40), threads=st.integers(1, 5),
       seed=st.integers(0, 2**31 - 1))
def test_leaf_rows_is_a_stable_sort_by_leaf_on_any_number_of_threads(
    T: int, n: int, most: int, threads: int, seed: int
) -> None:
    """``leafrows.leaf_rows`` (a counting sort split over trees) against numpy: each tree's rows per
    leaf as ``np.bincount``, and its grouping as ``np.argsort(kind="stable")`` of the leaves of the
    tree's source (a joint round's first tree), trees of any size, some leaves empty."""
    rng = np.random.default_rng(seed)
    n_leaves = rng.integers(1, most + 1, T)
    off = np.concatenate([[0], np.cumsum(n_leaves)]).astype(np.int64)
    leaf = np.stack([rng.integers(0, k, n) for k in n_leaves]).astype(np.int32)
    source = np.arange(T)
    for t in range(1, T):  # some trees share an earlier tree's structure, as in a joint round
        if n_leaves[t] == n_leaves[t - 1] and rng.random() < 0.5:
            source[t], leaf[t] = source[t - 1], leaf[t - 1]
    counts, grouped = leaf_rows(leaf, off, source, threads)
    np.testing.assert_array_equal(counts, np.concatenate([np.bincount(leaf[t], minlength=k)
                                                          for t, k in enumerate(n_leaves)]))
    np.testing.assert_array_equal(grouped, np.stack([np.argsort(leaf[s], kind="stable") for s in source]))
    assert leaf_rows(leaf, off, None, threads)[1] is None


@pytest.mark.parametrize("name", CONFIGS)
def test_top_k_with_every_leaf_equals_all_points(name: str) -> None:
    _, engine, test = _setup(name)
    k = int(engine.ensemble.n_leaves.max())
    for method in (engine.leaf_refit, engine.influence_forward):
        all_points = method(test, rows=ROWS, update_set="all_points")
        top = method(test, rows=ROWS, update_set="top_k_leaves", k=k)
        assert _rel(top, all_points) < 1e-12


def test_backtracking_refit_re_decides_the_accepted_steps() -> None:
    """Deleting some rows changes which steps AnyImprovement accepts; the refit follows."""
    n_changed = 0
    for seed in (4, 5, 6, 7):
        spec = random_spec(seed, **CONFIGS["logloss-backtracking"])
        engine = InfluenceEngine(spec.ensemble())
        test = TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
        _, accepted, _ = spec.train(spec.v)
        rows = np.array([i for i in range(spec.y.shape[0])
                         if spec.train(spec.v, _deleted(spec, i))[1] != accepted])
        if rows.size:
            base = spec.test_loss(spec.v)
            expected = np.array([base - spec.test_loss(spec.v, _deleted(spec, i)) for i in rows])
            assert _rel(engine.leaf_refit(test, rows=rows), expected) < 1e-9
            n_changed += rows.size
    assert n_changed >= 3, "the configurations should contain rows whose deletion changes the decisions"


def test_deletion_differs_from_zero_weight_through_the_row_count() -> None:
    """CatBoost's l2 scales with the mean weight sum(w) / n: deleting a row is not weight 0."""
    spec, engine, test = _setup("logloss-3steps-catboost-l2")
    deleted = np.array([spec.test_loss(spec.v) - spec.test_loss(spec.v, _deleted(spec, i)) for i in ROWS])
    zero = np.array([spec.test_loss(spec.v) - spec.test_loss(_moved(spec, i, -spec.v[i])) for i in ROWS])
    refit = engine.leaf_refit(test, rows=ROWS)
    assert _rel(refit, deleted) < 1e-9 < _rel(refit, zero)


def _paper_forward(spec: Spec, i0: int, update: str, k: int = 0) -> list[np.ndarray]:
    """The paper's Algorithm 4 (Eq. 6 and 8) for one-step trees with update set U^t: SinglePoint
    U = {i0}; TopKLeaves U = rows of the k leaves of largest sum |J| (Eq. 3) plus i0, as in the
    paper's reference code. As in the paper's Algorithm 2 (line 14), every row's J accumulates its
    leaf's change; U^t decides whose J enters the leaf sums (the reference code accumulates U^t's
    only; for SinglePoint the two agree)."""
    values, _, base = spec.train(spec.v)
    w, n = spec.v, spec.y.shape[0]
    A = spec.offset[:, 0] + base[0]
    J = np.zeros(n)
    out = []
    for t, f_t in enumerate(values):
        lf, L = spec.leaf[t], spec.n_leaves[t]
        in_u = np.zeros(n, bool)
        in_u[i0] = True
        if update == "top_k":
            mass = np.bincount(lf, np.abs(J), L)
            in_u |= np.isin(lf, np.argsort(-mass, kind="stable")[:k])
        p = 1 / (1 + np.exp(-A))
        if spec.loss == "logloss":
            g, h, k3 = p - spec.y, p * (1 - p), p * (1 - p) * (1 - 2 * p)
        else:
            g, h, k3 = A - spec.y, np.ones(n), np.zeros(n)
        raw = f_t / spec.lr[t]
        d = np.zeros(L)
        for leaf in range(L):
            rows = in_u & (lf == leaf)
            if spec.newton[t]:
                den = np.sum(w[lf == leaf] * h[lf == leaf]) + spec.l2[t][leaf]
                num = np.sum(w[rows] * (k3[rows] * raw[leaf] + h[rows]) * J[rows])
                if lf[i0] == leaf:
                    num += h[i0] * raw[leaf] + g[i0]
            else:
                den = np.sum(w[lf == leaf]) + spec.l2[t][leaf]
                num = np.sum(w[rows] * h[rows] * J[rows])
                if lf[i0] == leaf:
                    num += raw[leaf] + g[i0]
            d[leaf] = -spec.lr[t] * num / den
        out.append(d)
        J = J + d[lf]
        A = A + f_t[lf]
    return out


@pytest.mark.parametrize("name", ["logloss-newton", "logloss-gradient", "squared-newton"])
def test_fast_update_sets_equal_the_papers_algorithm_4(name: str) -> None:
    spec, engine, _ = _setup(name)
    for update, kwargs in (("single", {}), ("top_k", {"k": 1}), ("top_k", {"k": 3})):
        update_set = "single_point" if update == "single" else "top_k_leaves"
        got, _ = engine.leaf_value_derivatives(ROWS, update_set=update_set, refit_base=False, **kwargs)
        expected = np.stack([np.concatenate(_paper_forward(spec, i, update, **kwargs)) for i in ROWS])
        assert _rel(got, expected) < 1e-12, (update, kwargs)


@pytest.mark.parametrize("name", ["logloss-newton", "logloss-gradient", "squared-newton"])
def test_single_point_refit_equals_algorithm_3_with_only_the_row_removed(name: str) -> None:
    """Algorithm 3 with U = {i}: the deleted row leaves its leaf's sums; nothing else moves."""
    spec, engine, test = _setup(name)
    values, _, base = spec.train(spec.v)
    A = spec.offset[:, 0] + base[0]
    f_test = spec.test_margin(spec.v)
    new_f = np.tile(f_test, (ROWS.size, 1))
    for t, f in enumerate(values):
        lf = spec.leaf[t]
        g, h = (1 / (1 + np.exp(-A)) - spec.y, None) if spec.loss == "logloss" else (A - spec.y, None)
        h = (lambda p: p * (1 - p))(1 / (1 + np.exp(-A))) if spec.loss == "logloss" else np.ones(A.size)
        hh = h if spec.newton[t] else np.ones_like(h)
        G = np.bincount(lf, spec.v * g, spec.n_leaves[t])
        D = np.bincount(lf, spec.v * hh, spec.n_leaves[t]) + spec.l2[t]
        for b, i in enumerate(ROWS):
            li = lf[i]
            refit = -spec.lr[t] * (G[li] - spec.v[i] * g[i]) / (D[li] - spec.v[i] * hh[i])
            new_f[b] += (spec.test_leaf[t] == li) * (refit - f[li])
        A = A + f[lf]
    old = loss_values(spec.loss, spec.y_test, f_test)
    expected = old[None, :] - np.array([loss_values(spec.loss, spec.y_test, f) for f in new_f])
    refit = engine.leaf_refit(test, rows=ROWS, update_set="single_point", refit_base=False)
    assert _rel(refit, expected) < 1e-12


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
        expected, _, expected_base = spec.train(spec.v, _deleted(spec, i))
        assert base[b] == pytest.approx(expected_base[0], rel=1e-13)
        np.testing.assert_allclose(values[b], np.concatenate(expected), atol=1e-13)
    d_values, _d_base = engine.leaf_value_derivatives(ROWS[:2])
    h = 1e-3
    for b, i in enumerate(ROWS[:2]):
        stencil = [np.concatenate(spec.train(_moved(spec, i, d))[0]) for d in (-2 * h, -h, h, 2 * h)]
        fd = (stencil[0] - 8 * stencil[1] + 8 * stencil[2] - stencil[3]) / (12 * h)
        assert _rel(d_values[b], fd) < 1e-8


def test_scores_are_per_unit_of_the_users_weight() -> None:
    """A constant class factor s: per unit of v the scores are s times those per unit of w = v s."""
    spec = random_spec(5, weighted=True)
    e = spec.ensemble()
    factor = np.array([0.7, 2.5])
    by_group = InfluenceEngine(TreeEnsemble.build(**{**_fields(e), "objective_factor": factor}))
    effective = InfluenceEngine(TreeEnsemble.build(
        **{**_fields(e), "user_weight": e.user_weight * factor[e.weight_group]}))
    assert effective.relative_residual > 1e-6  # the stored values are for v, not for v * s ...
    test = TestPoints(spec.test_leaf, spec.offset_test, spec.y_test)
    scale = factor[e.weight_group]
    np.testing.assert_allclose(  # ... but the derivative map is the same up to the chain rule
        by_group.influence_reverse(test), effective.influence_reverse(test) * scale[:, None], rtol=1e-12
    )


def _fields(e: TreeEnsemble) -> dict:
    return dict(
        leaf_index=e.leaf_index,
        leaf_values=e.leaf_values,
        n_leaves=e.n_leaves,
        y=e.y,
        loss=e.loss,
        tree_round=e.tree_round,
        learning_rate=e.learning_rate,
        newton=e.newton,
        l2=e.l2,
        l2_per_mean_weight=e.l2_per_mean_weight,
        l1=e.l1,
        max_delta_step=e.max_delta_step,
        step_scales=e.step_scales,
        n_steps=e.n_steps,
        base_margin=e.base_margin,
        base_rule=e.base_rule,
        init_offset=e.init_offset,
        user_weight=e.user_weight,
        weight_group=e.weight_group,
    )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    loss=st.sampled_from(["logloss", "squared_error"]),
    newton=st.booleans(),
    n_steps=st.integers(1, 3),
    l2m=st.sampled_from([0.0, 0.7]),
    weighted=st.booleans(),
    base_refit=st.booleans(),
    factors=st.sampled_from([None, balanced_counts, balanced_weights]),
)
def test_reverse_equals_forward_property(
    seed: int, loss: str, newton: bool, n_steps: int, l2m: float, weighted: bool, base_refit: bool,
    factors: object,
) -> None:
    spec = random_spec(
        seed, loss=loss, newton=newton, n_steps=n_steps, l2m=l2m, weighted=weighted,
        base_refit=base_refit, n=30, n_trees=4, dataset_rule=factors,  # type: ignore[arg-type]
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


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 50), st.data())
def test_training_rows_resolve_as_python_indexes_a_list(n: int, data: st.DataObject) -> None:
    """Indices (negative from the end), masks and None give the rows Python's own indexing of a
    list of ``n`` rows gives; the caller's array is left as it was; out of range is refused."""
    rows = list(range(n))
    picked = data.draw(st.lists(st.integers(-n, n - 1), max_size=20))
    given_rows = np.array(picked, dtype=data.draw(st.sampled_from([np.int64, np.int32, np.int16])))
    before = given_rows.copy()
    assert resolve_rows(given_rows, n).tolist() == [rows[i] for i in picked]
    assert np.array_equal(given_rows, before)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    assert resolve_rows(mask, n).tolist() == [r for r, keep in zip(rows, mask, strict=True) if keep]
    assert resolve_rows(None, n).tolist() == rows
    with pytest.raises(InputError, match="out of range"):
        resolve_rows(np.array([data.draw(st.sampled_from([n, -n - 1]))]), n)


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
    with pytest.raises(InputError, match="must lie in"):
        TreeEnsemble.build(**{**fields, "y": np.full(spec.y.shape[0], 2.0)})
    with pytest.raises(InputError, match="outside"):
        TreeEnsemble.build(**{**fields, "leaf_index": spec.leaf + 10})
    with pytest.raises(InputError, match="NaN"):
        TreeEnsemble.build(**{**fields, "user_weight": np.full(spec.y.shape[0], np.nan)})
    with pytest.raises(InputError, match="alone in its round"):
        TreeEnsemble.build(**{**fields, "tree_round": np.zeros(spec.leaf.shape[0], int),
                              "step_scales": np.ones((spec.leaf.shape[0], 2)), "n_steps": 2})
    boolean = np.zeros(spec.y.shape[0], dtype=bool)
    boolean[[2, 7]] = True
    np.testing.assert_array_equal(engine.leaf_refit(test, rows=boolean), engine.leaf_refit(test, rows=[2, 7]))
