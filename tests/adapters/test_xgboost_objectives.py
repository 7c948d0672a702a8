"""XGBoost objectives beyond log loss and squared error, against XGBoost itself.

Per objective (count:poisson, reg:tweedie, reg:gamma, reg:pseudohubererror, binary:logitraw,
reg:absoluteerror, reg:quantileerror, multi:softprob / multi:softmax, multi-target squared error):

* the adapter's self-check passes (XGBoost's stored leaves recomputed from the training rows);
* the explained margins equal ``predict(output_margin=True)`` on training and test rows;
* ``leaf_refit`` equals retraining without the row with ``xgb.train`` (same parameters, base score
  re-estimated by XGBoost) wherever the retrained model keeps every tree's structure;
* ``leaf_influence`` equals central finite differences of retraining with the row's weight 1 +- EPS,
  where both retrains keep the structure;
* multiclass: reverse mode equals forward mode.

Data: two features of 2 and 5 levels (10 cells), 400 rows. Few distinct values keep XGBoost's
histogram cuts and most split choices when one row goes, so retraining keeps the structure for
several rows (Assumption 1; on continuous features almost no row keeps it).

Tolerances. XGBoost's margins are float32 sums of float32 leaves; ``margin_tol`` = 4 sqrt(T) eps32
max(1, max|margin|) (about 10 standard deviations of the rounding random walk). A refit difference
subtracts two such margins: the same tolerance over both. Finite differences: that tolerance over
2 EPS plus the central-difference truncation EPS^2 max|fd| (relative O(EPS^2), the weight response
is smooth where the structure is kept). Each comparison also asserts the compared quantity is far
above its tolerance, so the test is not comparing two roundings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from influence_gbdt.adapters import adapter_for
from influence_gbdt.adapters.xgboost import XGBoostAdapter, rounding_units
from sklearn.preprocessing import LabelEncoder
from xgboost_helpers import EPS32, kept_margins, margin_tol, train

from influence_gbdt.engine import InfluenceEngine, TestPoints
from influence_gbdt.errors import UnsupportedModelError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

N, ROUNDS, EPS = 400, 10, 0.05
#: Fewer rounds for the multiclass models compared with retraining: a later tree's splits are near
#: ties, which one deleted row flips. XGBoost 3.1's near-uniform start (the class shares as margins)
#: flips more: at 10 rounds no deletion of rows 0-39 kept softprob's structure there (measured at
#: 3.1.3; 9 at 3.2.0); at 6 rounds 12 do (9 at 3.2.0).
ROUNDS_OF = {"softprob": 6, "softmax_w": 6}
PROBE = np.arange(40)  # retraining these small models is cheap; about 1 in 5 keeps the structure


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.integers(0, 2, N), rng.integers(0, 5, N)]).astype(float)
    mu = np.exp(0.5 * X[:, 0] - 0.25 * X[:, 1])
    reg = X[:, 0] + np.sin(X[:, 1]) + rng.normal(size=N)
    return {
        "X": X,
        "Xt": np.array([[a, b] for a in range(2) for b in range(5)], dtype=float),  # every cell
        "count": rng.poisson(mu).astype(float),
        "claims": rng.poisson(mu) * rng.gamma(2.0, 1.0, N),
        "positive": rng.gamma(2.0, mu / 2.0),
        "outliers": reg + 6.0 * (rng.random(N) < 0.05),
        "prices": 1000.0 + 200.0 * reg,  # pseudo-Huber (slope 1): a hessian sum of ~1e-7, under kRtEps
        "binary": (reg > 0.6).astype(float),
        "regression": reg,
        "classes": np.digitize(reg, [-0.3, 0.6, 1.5]).astype(float),
        "targets": np.column_stack([reg, 0.5 * reg**2]),
        "w": rng.uniform(0.5, 2.0, N),
    }


# id: (params, target, weighted)
OBJECTIVES = {
    "poisson": ({"objective": "count:poisson"}, "count", False),
    "poisson_w_mds": ({"objective": "count:poisson", "max_delta_step": 0.3}, "count", True),
    "tweedie": ({"objective": "reg:tweedie", "tweedie_variance_power": 1.3}, "claims", True),
    "gamma": ({"objective": "reg:gamma"}, "positive", False),
    "pseudohuber": ({"objective": "reg:pseudohubererror", "huber_slope": 1.5}, "outliers", True),
    "logitraw": ({"objective": "binary:logitraw", "eta": 0.1}, "binary", False),
    "absoluteerror": ({"objective": "reg:absoluteerror"}, "regression", False),
    "quantile_w": ({"objective": "reg:quantileerror", "quantile_alpha": 0.3}, "regression", True),
    "softprob": ({"objective": "multi:softprob", "num_class": 4, "eta": 0.1}, "classes", False),
    "softmax_w": ({"objective": "multi:softmax", "num_class": 4, "lambda": 2.0}, "classes", True),
    "multi_target": ({"objective": "reg:squarederror", "tree_method": "hist"}, "targets", True),
    # vector leaves: one tree for every output; min_child_weight 20 zeroes some classes' components
    "softprob_vector": ({"objective": "multi:softprob", "num_class": 4, "min_child_weight": 20.0,
                         "multi_strategy": "multi_output_tree"}, "classes", True),
    "multi_target_vector": ({"objective": "reg:squarederror", "multi_strategy": "multi_output_tree"},
                            "targets", False),
}


def _columns(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], -1)


def _scores(engine: InfluenceEngine, method: str, test: TestPoints, rows, K: int) -> np.ndarray:
    """Scores on="prediction" for every output, shape (len(rows), m, K)."""
    fn = getattr(engine, method)
    if K == 1:
        return fn(test, rows=rows, on="prediction")[:, :, None]
    return np.stack([fn(test, rows=rows, on="prediction", output=c) for c in range(K)], axis=2)


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_objective_reproduces_and_matches_retraining(data, name):
    extra, target, weighted = OBJECTIVES[name]
    rounds = ROUNDS_OF.get(name, ROUNDS)
    params = {"max_depth": 2, "eta": 0.3, **extra}
    X, Xt, y = data["X"], data["Xt"], data[target]
    w = data["w"] if weighted else None
    bst = train(params, X, y, w, rounds)
    adapter = XGBoostAdapter(bst)
    engine = adapter.prepare(X, y, w)  # the self-check
    K = engine.ensemble.n_outputs
    assert rounding_units(engine).max() <= 2.0

    f_train = _columns(bst.predict(xgb.DMatrix(X), output_margin=True).astype(np.float64))
    f_test = _columns(bst.predict(xgb.DMatrix(Xt), output_margin=True).astype(np.float64))
    tol = margin_tol(rounds, f_train, f_test)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(_columns(engine.train_margin), f_train, rtol=0, atol=tol)
    np.testing.assert_allclose(_columns(engine.predict_margin(test)), f_test, rtol=0, atol=tol)
    np.testing.assert_allclose(_columns(adapter.raw_predict(Xt)), f_test, rtol=0, atol=0)

    refit = _scores(engine, "leaf_refit", test, PROBE, K)  # base score re-estimated, as xgb.train does
    v = np.ones(N) if w is None else w
    kept = []
    for r, i in enumerate(PROBE):
        keep = np.arange(N) != i
        retrained = train(params, X[keep], y[keep], None if w is None else w[keep], rounds)
        f_without = kept_margins(bst, retrained, X, keep, Xt)
        if f_without is None:
            continue
        kept.append(r)
        np.testing.assert_allclose(refit[r], f_test - _columns(f_without), rtol=0, atol=tol)
    assert len(kept) >= 2, f"only rows {PROBE[kept]} of {PROBE} keep the structure"
    assert max(np.abs(refit[r]).max() for r in kept) > 30 * tol  # a real comparison

    if adapter.objective.renewed:
        # Renewed leaves are order statistics of residuals: without weights XGBoost has no weight to
        # differentiate (any weight vector switches it to its weighted quantile), and with weights
        # every leaf and the base are step functions of the weights, so the derivative is 0 almost
        # everywhere (finite differences of retraining see only the steps they happen to cross).
        if w is not None:
            assert not np.any(_scores(engine, "leaf_influence", test, PROBE[:4], K))
        return
    compared = 0
    for r in sorted(kept, key=lambda r: -np.abs(refit[r]).max())[:5]:
        i = PROBE[r]
        margins = []
        for sign in (1, -1):
            v2 = v.copy()
            v2[i] += sign * EPS
            f2 = kept_margins(bst, train(params, X, y, v2, rounds), X, None, Xt)
            if f2 is not None:
                margins.append(_columns(f2))
        if len(margins) < 2:
            continue
        fd = (margins[0] - margins[1]) / (2 * EPS)
        influence = _scores(engine, "leaf_influence", test, [i], K)[0]
        np.testing.assert_allclose(influence, fd, rtol=0, atol=tol / EPS + EPS**2 * np.abs(fd).max())
        compared += 1
        if compared == 2:
            break
    assert compared >= 1


#: id -> XGBoost's default eval metric, equal to the objective's loss up to a term in y alone, so
#: that its change between two models is the change of the test loss the scores mean.
METRIC_OF = {"poisson": "poisson-nloglik", "tweedie": "tweedie-nloglik@1.3", "gamma": "gamma-nloglik",
             "pseudohuber": "mphe", "absoluteerror": "mae", "quantile_w": "quantile", "softprob": "mlogloss"}


def _metric(bst: xgb.Booster, dtest: xgb.DMatrix, name: str) -> float:
    """XGBoost's own evaluation of ``name`` on ``dtest`` (it prints 17 digits)."""
    line = bst.eval(dtest, "test")
    return float(line.split(f"test-{name}:")[1].split()[0])


@pytest.mark.parametrize("name", list(METRIC_OF))
def test_the_test_loss_is_xgboosts_metric(data, name):
    """``on="loss"`` scores the booster's own loss: LeafRefit of the mean test loss equals the
    change of XGBoost's eval metric between the model and its retrain without the row (ratio 1; the
    absolute error was once |y - F| / 2, half of XGBoost's)."""
    extra, target, weighted = OBJECTIVES[name]
    rounds = ROUNDS_OF.get(name, ROUNDS)
    params = {"max_depth": 2, "eta": 0.3, **extra, "eval_metric": METRIC_OF[name]}
    X, Xt, y = data["X"], data["Xt"], data[target]
    yt = data[target][:Xt.shape[0]]
    w = data["w"] if weighted else None
    bst = train(params, X, y, w, rounds)
    adapter = XGBoostAdapter(bst)
    engine = adapter.prepare(X, y, w)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt), y=yt)
    refit = engine.leaf_refit(test, rows=PROBE, aggregate="mean")
    dtest = xgb.DMatrix(Xt, yt)
    before = _metric(bst, dtest, METRIC_OF[name])
    # Float32 margins: a metric's change is good to ~1e-7 of the metric itself.
    noise = 1e-6 * abs(before)
    changes = []
    for r, i in enumerate(PROBE):
        keep = np.arange(N) != i
        retrained = train(params, X[keep], y[keep], None if w is None else w[keep], rounds)
        if kept_margins(bst, retrained, X, keep, Xt) is None:
            continue
        truth = before - _metric(retrained, dtest, METRIC_OF[name])
        assert abs(refit[r] - truth) <= 1e-4 * abs(truth) + noise, (r, refit[r], truth)
        changes.append(abs(truth))
    assert len(changes) >= 2 and max(changes) > 30 * noise  # real changes, not rounding


def test_poisson_default_max_delta_step_is_the_clip_and_the_hessian_shift(data):
    """count:poisson without max_delta_step: XGBoost injects 0.7 as the trees' clip and the hessian
    shift e^(m + 0.7); the description carries both and the stored leaves are reproduced."""
    X, y = data["X"], data["count"]
    bst = train({"objective": "count:poisson", "max_depth": 3, "eta": 0.5}, X, y, None, ROUNDS)
    adapter = XGBoostAdapter(bst)
    e = adapter.describe(X, y)
    assert np.all(e.max_delta_step == np.float32(0.7))
    assert np.float32(e.loss.params["hessian_log_shift"]) == np.float32(0.7)  # a float in XGBoost
    assert adapter.prepare(X, y).relative_residual < 1e-5


def test_softmax_hessian_has_the_factor_two(data):
    """XGBoost's multiclass hessian is 2 p (1 - p): the textbook p (1 - p) is refused by the self-check."""
    X, y = data["X"], data["classes"]
    bst = train({"objective": "multi:softprob", "num_class": 4, "max_depth": 3}, X, y, None, 5)
    e = XGBoostAdapter(bst).describe(X, y)
    assert e.loss.params["factor"] == 2.0
    assert InfluenceEngine(e).relative_residual < 1e-5
    from dataclasses import replace

    from influence_gbdt.losses import Loss

    textbook = replace(e, loss=Loss("softmax", 1e-16, 4, {"factor": 1.0}))
    assert InfluenceEngine(textbook).relative_residual > 0.1


def test_multiclass_reverse_mode_equals_forward_mode(data):
    """Exact LeafInfluence: the reverse sweep (one per test point) equals forward mode (one per row),
    on the loss (log loss of the true class) and on each class's margin."""
    X, Xt, y, w = data["X"], data["Xt"], data["classes"], data["w"]
    bst = train({"objective": "multi:softprob", "num_class": 4, "max_depth": 3}, X, y, w, ROUNDS)
    adapter = XGBoostAdapter(bst)
    engine = adapter.prepare(X, y, w)
    yt = np.argmax(bst.predict(xgb.DMatrix(Xt)), axis=1)[::-1].astype(float)  # some wrong classes
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt), y=yt)
    rows = np.arange(0, N, 7)
    for on, output in (("loss", None), ("prediction", 0), ("prediction", 3)):
        rev = engine.influence_reverse(test, rows=rows, on=on, output=output)
        fwd = engine.influence_forward(test, rows=rows, on=on, output=output)
        # Two summation orders of the same float64 derivatives.
        np.testing.assert_allclose(rev, fwd, rtol=0, atol=1e-10 * np.abs(fwd).max())
        assert np.abs(fwd).max() > 1e-3


N_USER = 300
# name: (estimator arguments, string labels, pandas, weights ("balanced" = class weights), early stop)
USER_MODELS = {
    "XGBClassifier() 3 classes, string labels": ({}, 3, True, False, None, False),
    "pandas, balanced class weights": ({"n_estimators": 30}, 5, False, True, "balanced", False),
    "sample_weight, multi:softmax": ({"n_estimators": 30, "objective": "multi:softmax"}, 4, False, False,
                                     "random", False),
    "early stopping, 10 classes": ({"n_estimators": 200, "early_stopping_rounds": 3, "max_depth": 3}, 10,
                                   False, False, None, True),
    "vector leaves, pandas, early stopping": ({"multi_strategy": "multi_output_tree", "n_estimators": 200,
                                              "early_stopping_rounds": 3}, 4, True, True, None, True),
    "vector leaves, sample_weight": ({"multi_strategy": "multi_output_tree", "n_estimators": 30}, 3, True,
                                     False, "random", False),
}


def _user_data(n_classes: int):
    rng = np.random.default_rng(n_classes)
    n = N_USER + 150
    X = np.column_stack([rng.integers(0, 2, n), rng.integers(0, 5, n)]).astype(float)
    score = 1.5 * X[:, 0] + 0.8 * X[:, 1] + rng.normal(size=n)
    cuts = np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])
    labels = np.array(["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay"])
    return X, labels[np.digitize(score, cuts)]


@pytest.mark.parametrize("name", list(USER_MODELS))
def test_multiclass_user_models(name):
    """XGBClassifier as users train it: labels encoded with LabelEncoder (XGBoost refuses strings),
    pandas, class weights passed as sample weights (XGBClassifier has no class_weight), early
    stopping. The self-check passes and the explained margins == predict(output_margin=True).
    (Retraining comparisons for multiclass: the softprob / softmax cases above; these default-depth
    models change structure on every deleted row of this data.)"""
    kwargs, n_classes, _, pandas, weights, early = USER_MODELS[name]
    X_all, labels = _user_data(n_classes)
    y_all = LabelEncoder().fit_transform(labels)
    if pandas:
        X_all = pd.DataFrame(X_all, columns=["plan", "region"])
    take = (lambda a, r: a.iloc[r]) if pandas else (lambda a, r: a[r])
    X, y = take(X_all, np.arange(N_USER)), y_all[:N_USER]
    Xt = take(X_all, np.arange(N_USER, N_USER + 30))
    rng = np.random.default_rng(1)
    w = None
    if weights == "balanced":
        from sklearn.utils.class_weight import compute_sample_weight

        w = compute_sample_weight("balanced", y)
    elif weights == "random":
        w = rng.uniform(0.5, 2.0, N_USER)
    valid = [(take(X_all, np.arange(N_USER, len(y_all))), y_all[N_USER:])]
    fit = {"eval_set": valid, "verbose": False} if early else {}
    model = xgb.XGBClassifier(n_jobs=1, **kwargs).fit(X, y, sample_weight=w, **fit)
    adapter = adapter_for(model)
    engine = adapter.prepare(X, y, w)
    K, rounds = engine.ensemble.n_outputs, adapter.n_rounds
    assert K == n_classes
    if early:
        assert rounds == model.get_booster().best_iteration + 1 < model.get_booster().num_boosted_rounds()
    f_train, f_test = model.predict(X, output_margin=True), model.predict(Xt, output_margin=True)
    tol = margin_tol(rounds, f_train, f_test)
    test = TestPoints(leaf_index=adapter.leaf_indices(Xt), offset=adapter.init_offset(Xt))
    np.testing.assert_allclose(engine.train_margin, f_train, rtol=0, atol=tol)
    np.testing.assert_allclose(engine.predict_margin(test), f_test, rtol=0, atol=tol)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"objective": "rank:pairwise"}, "query group"),
        ({"objective": "reg:squaredlogerror"}, "hessian floor"),
        ({"objective": "survival:cox"}, "risk sets"),
        ({"objective": "binary:hinge"}, "not modelled"),
        ({"objective": "reg:quantileerror", "quantile_alpha": [0.1, 0.9]}, "one model per target or alpha"),
        ({"objective": "reg:absoluteerror", "tree_method": "exact"}, "tree_method='exact'"),
        ({"objective": "reg:gamma", "scale_pos_weight": 2.0}, "scale_pos_weight"),
    ],
)
def test_refused_objectives_name_the_cause(data, params, match):
    X = data["X"]
    y = data["positive"]
    if params.get("multi_strategy"):
        y = data["targets"]
    if params["objective"] == "binary:hinge":
        y = data["binary"]
    if params["objective"] == "rank:pairwise":
        dm = xgb.DMatrix(X, np.round(data["count"]).clip(0, 3), group=[100] * 4)
        bst = xgb.train({**params, "nthread": 1}, dm, 2)
    else:
        bst = train({**params, "tree_method": params.get("tree_method", "hist")}, X, y, None, 2)
    with pytest.raises(UnsupportedModelError, match=match):
        XGBoostAdapter(bst)


def _float32_terms_reference(loss, y: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float32 terms ``s``, ``r`` of each loss (see ``xgboost_rounding._terms``), vectorized."""
    name, ones = loss.name, np.ones_like(m)
    if name in ("squared_error", "multi_squared", "quantile"):
        return np.abs(m) + np.abs(y), 0.0 * ones
    if name == "logloss":
        return 1.0 / (1.0 + np.exp(-m)) + np.abs(y), ones
    if name == "softmax":
        shifted = m - m.max(axis=1, keepdims=True)
        p = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        onehot = (y[:, :1] == np.arange(m.shape[1])[None, :]).astype(np.float64)
        return p * (2.0 + np.abs(shifted)) + onehot, 2.0 + np.abs(shifted)
    if name == "poisson":
        return np.exp(m) * (1.0 + np.abs(m)) + np.abs(y), 1.0 + np.abs(m + loss.params["hessian_log_shift"])
    if name == "gamma":
        return 1.0 + y * np.exp(-m) * (1.0 + np.abs(m)), 1.0 + np.abs(m)
    if name == "tweedie":
        a, b = 1.0 - loss.params["power"], 2.0 - loss.params["power"]
        s = y * np.exp(a * m) * (1.0 + np.abs(a * m)) + np.exp(b * m) * (1.0 + np.abs(b * m))
        return s, 1.0 + np.abs(m)
    delta = loss.params["delta"]  # pseudo-Huber
    z = m - y
    q = 1.0 + (z / delta) ** 2
    spread = np.abs(m) + np.abs(y)
    return np.abs(z) / np.sqrt(q) + spread / (q * np.sqrt(q)), 1.0 + 3.0 * np.abs(z) * spread / (delta**2 * q)


def _rounding_units_reference(engine: InfluenceEngine) -> np.ndarray:
    """``rounding_units`` written with numpy over whole arrays, one round after the other."""
    e = engine.ensemble
    w, loss, eps = e.sample_weight, e.loss, float(np.finfo(np.float32).eps)
    margin = e.init_offset + e.base_margin[None, :]
    drift = np.zeros_like(margin)
    diff = np.abs(engine.leaf_values - e.leaf_values)
    out = np.zeros(e.n_trees)
    labels = e.y if e.y.shape[1] == margin.shape[1] else np.repeat(e.y[:, :1], margin.shape[1], axis=1)
    for r in range(int(e.tree_round[-1]) + 1):
        g, h = loss.grad_hess(e.y, margin)
        moved = [loss.grad_hess(e.y, margin + sign * drift) for sign in (1.0, -1.0)]
        dg = np.maximum.reduce([np.abs(g2 - g) for g2, _ in moved])
        dh = np.maximum.reduce([h * drift] + [np.abs(h2 - h) for _, h2 in moved])
        s, rel = _float32_terms_reference(loss, e.y, margin)
        for t in np.flatnonzero(e.tree_round == r):
            rows, k, c = e.leaf_index[t], int(e.n_leaves[t]), int(e.tree_output[t])
            lo, hi = e.leaf_offset[t], e.leaf_offset[t + 1]
            stored = e.leaf_values[lo:hi]
            if e.renewed[t]:
                worst = np.zeros(k)
                np.maximum.at(worst, rows, drift[:, c] + eps * (np.abs(labels[:, c]) + np.abs(margin[:, c])))
                bound = e.learning_rate[t] * worst + eps * np.abs(stored)
            else:
                den = np.bincount(rows, w * h[:, c], k) + e.l2[lo:hi]
                grad = np.bincount(rows, w * (eps * s[:, c] + dg[:, c]), k)
                hess = np.bincount(rows, w * (dh[:, c] + eps * h[:, c] * rel[:, c]), k)
                bound = e.learning_rate[t] * grad / den + np.abs(stored) * (eps + hess / den)
            d = diff[lo:hi]
            out[t] = np.max(np.where(d > 0, d / np.maximum(bound, np.finfo(float).tiny), 0.0))
        step = np.zeros_like(margin)
        for t in np.flatnonzero(e.tree_round == r):
            lo, hi = e.leaf_offset[t], e.leaf_offset[t + 1]
            step[:, e.tree_output[t]] += e.leaf_values[lo:hi][e.leaf_index[t]]
        margin = margin + step
        drift = drift + eps / 2 * np.abs(margin)
    return out


@pytest.mark.parametrize("name", [*OBJECTIVES, "logistic", "squarederror"])
def test_the_compiled_rounding_bound_equals_a_numpy_reference(data, name):
    # The self-check's float32 bound, compiled and one round per thread, against the same formulas
    # in numpy over whole arrays. Tolerance 1e-12 relative: numpy's and libm's exp differ in the last
    # bit, and numpy sums more than 8 classes pairwise (about 1e-15 measured).
    extra, target, weighted = OBJECTIVES.get(name) or (
        ({"objective": "binary:logistic"}, "binary", True) if name == "logistic"
        else ({"objective": "reg:squarederror"}, "regression", False))
    X, y = data["X"], data[target]
    w = data["w"] if weighted else None
    engine = XGBoostAdapter(train({"max_depth": 2, "eta": 0.3, **extra}, X, y, w, ROUNDS)).prepare(X, y, w)
    expected = _rounding_units_reference(engine)
    assert expected.max() > 0  # leaves differ from the recomputed ones: the bound is exercised
    np.testing.assert_allclose(rounding_units(engine), expected, rtol=1e-12, atol=0)


# id: (params, target) of every objective whose base score XGBoost estimates
ESTIMATED = {
    **{name: (params, target) for name, (params, target, _) in OBJECTIVES.items()},
    "logistic": ({"objective": "binary:logistic"}, "binary"),
    "logistic_spw": ({"objective": "binary:logistic", "scale_pos_weight": 3.0}, "binary"),
    "squarederror": ({"objective": "reg:squarederror"}, "regression"),
    "squarederror_spw": ({"objective": "reg:squarederror", "scale_pos_weight": 2.0}, "count"),
    "pseudohuber_floored": ({"objective": "reg:pseudohubererror"}, "prices"),
}
# Where the re-estimated base is not XGBoost's bit for bit (measured), the tolerance and why:
# - XGBoost computes the pseudo-Huber gradients of its Newton step in float32 arithmetic (the engine
#   in float64, then rounds them), and its weighted median compares float32 cumulative weights: two
#   float32 steps of the margin;
# - weighted, it sums each class's weights for its multiclass intercept one row after another in
#   float32 (the engine in float64): that sum's rounding, a random walk of N steps of eps32 / 2 of
#   the running sum (x4 for the tails), is a relative error of each share, and so of its log.
NEAR = {("pseudohuber", False), ("pseudohuber", True), ("pseudohuber_floored", False),
        ("pseudohuber_floored", True), ("absoluteerror", True)}
SUMMED_IN_FLOAT32 = {("softprob", True), ("softmax_w", True), ("softprob_vector", True)}


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", list(ESTIMATED))
def test_the_base_margin_and_its_refit_are_xgboosts_own(data, name, weighted):
    """The margin the model starts from is XGBoost's, and so is the one a retrain without a row
    starts from (``base_score="refit"``), bit for bit: XGBoost stores its estimate as a float32
    and derives the margin in float32 with the C library's ``logf``. The truth is read off a model
    trained with ``eta=0`` (its margins are its base margin) on the same rows."""
    params, target = ESTIMATED[name]
    X, y, w = data["X"], data[target], data["w"] if weighted else None
    every = np.arange(N)

    def start(keep: np.ndarray) -> np.ndarray:
        zero = train({**params, "eta": 0.0}, X[keep], y[keep], None if w is None else w[keep], rounds=1)
        return np.asarray(zero.predict(xgb.DMatrix(X[:1]), output_margin=True), np.float64).ravel()

    engine = XGBoostAdapter(train(params, X, y, w, rounds=3)).prepare(X, y, w)
    assert engine.ensemble.base_rule != "fixed"
    np.testing.assert_array_equal(engine.ensemble.base_margin, start(every))
    rows = np.array([0, 1, 2, 3, 5, 8, 13, 21])
    _, base = engine.refit_leaf_values(rows, refit_base=True)
    moved = 0
    for b, i in zip(base.reshape(rows.size, -1), rows, strict=True):
        expected = start(every != i)
        moved += not np.array_equal(expected, engine.ensemble.base_margin)
        if (name, weighted) in NEAR:
            step = np.spacing(np.float32(np.abs(expected).max()))
            np.testing.assert_allclose(b, expected, rtol=0, atol=2 * step)
        elif (name, weighted) in SUMMED_IN_FLOAT32:
            np.testing.assert_allclose(b, expected, rtol=0, atol=4 * np.sqrt(N) * EPS32)
        else:
            np.testing.assert_array_equal(b, expected)
    assert moved > 0 or name in ("absoluteerror", "quantile_w")  # a real comparison (a quantile may stay)


def test_vector_leaf_components_below_min_child_weight_stay_zero(data):
    """A vector leaf's component is XGBoost's one-output leaf of that output's sums, 0 where their
    hessian sum is below min_child_weight (the split constraint is on the sum over the outputs, so
    such components sit in grown leaves). They are described as leaves that stay 0: recomputed 0,
    0 without any row (deleting rows only lowers the hessian sum), as in the retrained models."""
    extra, target, _ = OBJECTIVES["softprob_vector"]
    params = {"max_depth": 2, "eta": 0.3, **extra}
    X, y, w = data["X"], data[target], data["w"]
    bst = train(params, X, y, w, ROUNDS)
    engine = XGBoostAdapter(bst).prepare(X, y, w)
    e = engine.ensemble
    frozen = np.isinf(e.l2)
    assert 0 < frozen.sum() < frozen.size and (e.leaf_values[frozen] == 0).all()
    assert (engine.leaf_values[frozen] == 0).all()
    values, _ = engine.refit_leaf_values(PROBE[:10])
    assert (values[:, frozen] == 0).all()
    assert np.abs(values[:, ~frozen] - engine.leaf_values[~frozen]).max() > 0  # the others move
    compared = 0
    for i in PROBE[:10]:
        keep = np.arange(N) != i
        retrained = XGBoostAdapter(train(params, X[keep], y[keep], w[keep], ROUNDS))
        if kept_margins(bst, retrained.booster, X, keep, data["Xt"]) is None:
            continue
        assert (retrained.describe(X[keep], y[keep], w[keep]).leaf_values[frozen] == 0).all()
        compared += 1
    assert compared >= 1


def _xgboost31_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The training data of ``models/xgboost-3.1-multiclass.json``: 300 rows, 3 features, 4 classes,
    weights; written by XGBoost 3.1.3 as ``XGBClassifier(n_estimators=4, max_depth=2,
    learning_rate=0.3).fit(X, y, sample_weight=w).save_model(...)``."""
    rng = np.random.default_rng(31)
    X = rng.normal(size=(300, 3)).round(2)
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.7, size=300), [-0.6, 0.2, 0.9])
    w = rng.uniform(0.5, 2.0, 300).round(2)
    return X, y, w


def test_a_multiclass_model_trained_by_xgboost_3_1_starts_from_its_class_shares():
    """XGBoost 3.1 stored a multiclass intercept as the weighted class shares and added them to the
    margins as they are (3.2: their centred logs). Its model, loaded into any supported release, is
    read with that start and that re-estimation rule, and reproduces XGBoost's own margins."""
    X, y, w = _xgboost31_data()
    model = xgb.XGBClassifier()
    model.load_model(Path(__file__).parent / "models" / "xgboost-3.1-multiclass.json")
    adapter = XGBoostAdapter(model)
    w32 = w.astype(np.float32).astype(np.float64)
    shares = np.bincount(y, weights=w32) / w32.sum()
    assert adapter.objective.base_link == "identity"
    np.testing.assert_allclose(adapter.base_margin, shares, rtol=1e-6)  # stored as float32
    # prepare checks the stored base against the rule re-estimated on (y, w): the shares themselves.
    engine = adapter.prepare(X, y, w)
    assert engine.ensemble.base_rule == "mean" and rounding_units(engine).max() <= 2.0
    margins = model.get_booster().predict(xgb.DMatrix(X), output_margin=True).astype(np.float64)
    np.testing.assert_allclose(engine.train_margin, margins, rtol=0, atol=margin_tol(4, margins))
