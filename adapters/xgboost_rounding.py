"""The float32 rounding bound of XGBoost's self-check (:func:`rounding_units`), in compiled code.

XGBoost computes each row's gradient and hessian from float32 margins, in float32, and sums them
in double; the engine recomputes every leaf in float64 from the exact sums. Where the stored
leaves differ from the recomputed ones by more than the adapter's relative tolerance (the
3-class ``XGBClassifier()`` on Adult: 1e-4), each leaf is held to its own float32 rounding bound
instead. The bound takes every row's derivatives at its margin and at the margin moved by its
float32 drift, round by round: a round is one compiled pass (:func:`_round_units`), and the rounds
run on a pool of threads, each round's figures the same whatever the threads (measured on Adult's
3-class ``XGBClassifier()``: docs/performance.md, stop 66).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from influence_gbdt import _jit as numba
from influence_gbdt.engine import InfluenceEngine
from influence_gbdt.losses import Loss, grad_hess_rows_into, probabilities

from .base import thread_pool

_EPS32 = float(np.finfo(np.float32).eps)

#: Most memory (bytes) the rounds in flight may hold (two (n, K) arrays of doubles each).
ROUND_BYTES = 512e6

#: How the float32 terms of each loss are bounded (:func:`_terms`): |m| + |y|, log loss, softmax,
#: Poisson, gamma, Tweedie, pseudo-Huber.
_ABS, _LOGLOSS, _SOFTMAX, _POISSON, _GAMMA, _TWEEDIE, _PSEUDO_HUBER = range(7)


def _kind(loss: Loss) -> tuple[int, NDArray[np.float64]]:
    """The loss's float32 terms (:func:`_terms`): its kind and parameters."""
    name, params = loss.name, loss.params
    if name in ("squared_error", "multi_squared", "quantile"):
        return _ABS, np.zeros(0)
    if name == "logloss":
        return _LOGLOSS, np.zeros(0)
    if name == "softmax":
        return _SOFTMAX, np.zeros(0)
    if name == "poisson":
        return _POISSON, np.array([params["hessian_log_shift"]])
    if name == "gamma":
        return _GAMMA, np.zeros(0)
    if name == "tweedie":
        return _TWEEDIE, np.array([1.0 - params["power"], 2.0 - params["power"]])
    if name == "pseudo_huber":
        return _PSEUDO_HUBER, np.array([params["delta"]])
    raise ValueError(f"no float32 bound for the {name} loss")


@numba.njit(cache=True, nogil=True, internal=True)
def _terms(
    kind: int, f32p: NDArray[np.float64], y: NDArray[np.float64], m: NDArray[np.float64],
    s: NDArray[np.float64], r: NDArray[np.float64],
) -> None:
    """How far XGBoost's float32 evaluation of each row's ``g`` and ``h`` can stray, in units of
    eps32, at margins ``m`` (n, K), labels ``y`` (n, label width):

    - ``s`` (n, K): the magnitude of the terms XGBoost adds to form ``g`` (``|p| + |y|`` for log
      loss), each exponential counted with its argument's rounding (``e^x (1 + |x|)``):
      ``|g_32 - g| <= c eps32 s``;
    - ``r`` (n, K): the relative error of ``h`` in eps32 (``1 + |x|`` for an exponential, the
      pseudo-Huber hessian's slope times its residual's rounding).

    ``f32p``: the loss's parameters (:func:`_kind`)."""
    n, K = m.shape
    same = y.shape[1] == K  # a label per output, else one label per row
    p = np.empty(K)
    for j in range(n):
        if kind == _SOFTMAX:
            probabilities(m, j, p)
            top = m[j, 0]
            for c in range(1, K):
                top = max(top, m[j, c])
            for c in range(K):
                r[j, c] = 2.0 + abs(m[j, c] - top)
                s[j, c] = p[c] * r[j, c] + (1.0 if y[j, 0] == c else 0.0)
            continue
        for c in range(K):
            x, yc = m[j, c], y[j, c if same else 0]
            if kind == _ABS:
                s[j, c], r[j, c] = abs(x) + abs(yc), 0.0
            elif kind == _LOGLOSS:
                s[j, c], r[j, c] = 1.0 / (1.0 + math.exp(-x)) + abs(yc), 1.0
            elif kind == _POISSON:
                s[j, c], r[j, c] = math.exp(x) * (1.0 + abs(x)) + abs(yc), 1.0 + abs(x + f32p[0])
            elif kind == _GAMMA:
                s[j, c], r[j, c] = 1.0 + yc * math.exp(-x) * (1.0 + abs(x)), 1.0 + abs(x)
            elif kind == _TWEEDIE:
                a, b = f32p[0], f32p[1]
                s[j, c] = (yc * math.exp(a * x) * (1.0 + abs(a * x))
                           + math.exp(b * x) * (1.0 + abs(b * x)))
                r[j, c] = 1.0 + abs(x)
            else:  # pseudo-Huber
                delta = f32p[0]
                z = x - yc
                q = 1.0 + (z / delta) * (z / delta)
                spread = abs(x) + abs(yc)  # the rounding of z = f32(m - y)
                h = 1.0 / (q * math.sqrt(q))
                s[j, c] = abs(z) / math.sqrt(q) + h * spread
                r[j, c] = 1.0 + 3.0 * abs(z) * spread / (delta * delta * q)


#: Rows whose derivatives a round takes at once (their few (rows, K) buffers stay in the cache).
CHUNK = 1024


@numba.njit(cache=True, nogil=True)
def _round_units(  # noqa: C901 -- one pass over the rows, then one over each tree's leaves
    code: int, prm: NDArray[np.float64], size: int, kind: int, f32p: NDArray[np.float64],
    y: NDArray[np.float64], w: NDArray[np.float64], margin: NDArray[np.float64], drift: NDArray[np.float64],
    trees: NDArray[np.int64], leaf_index: NDArray[np.int32], leaf_offset: NDArray[np.int64],
    tree_output: NDArray[np.int64], stored_all: NDArray[np.float64], l2: NDArray[np.float64],
    lr: NDArray[np.float64], renewed: NDArray[np.bool_], diff: NDArray[np.float64], out: NDArray[np.float64],
) -> None:
    """:func:`rounding_units` of one round's ``trees``, into ``out[t]``: the rows' margins entering
    the round ``margin`` (n, K) and the bound ``drift`` (n, K) on how far XGBoost's float32 margins
    are from them; ``code``, ``prm``, ``size`` the loss as the engine's kernels read it; ``diff``
    (n_total,) each leaf's |recomputed - stored|; the other arrays the ensemble's. The rows go
    :data:`CHUNK` at a time, in order: each leaf's sums run over its rows in row order."""
    n, K = margin.shape
    same = y.shape[1] == K  # a label per output, else one label per row
    most = 0
    for t in trees:
        most = max(most, leaf_offset[t + 1] - leaf_offset[t])
    # each tree's leaf sums of w h, w (eps32 s + dg), w (dh + eps32 h r); a renewed tree's worst row
    sums = np.zeros((trees.shape[0], 3, most))
    g, h, g2, h2 = np.empty((CHUNK, K)), np.empty((CHUNK, K)), np.empty((CHUNK, K)), np.empty((CHUNK, K))
    moved, dg, dh = np.empty((CHUNK, K)), np.empty((CHUNK, K)), np.empty((CHUNK, K))
    for j0 in range(0, n, CHUNK):
        j1 = min(n, j0 + CHUNK)
        m, d, yc, nc = margin[j0:j1], drift[j0:j1], y[j0:j1], j1 - j0
        gc, hc, g2c, h2c, mc = g[:nc], h[:nc], g2[:nc], h2[:nc], moved[:nc]
        grad_hess_rows_into(code, prm, yc, m, size, gc, hc)
        for i in range(nc):
            for c in range(K):
                dg[i, c], dh[i, c] = 0.0, h[i, c] * d[i, c]
        for sign in (1.0, -1.0):  # the derivatives' change where the margin moves by its drift
            for i in range(nc):
                for c in range(K):
                    mc[i, c] = m[i, c] + sign * d[i, c]
            grad_hess_rows_into(code, prm, yc, mc, size, g2c, h2c)
            for i in range(nc):
                for c in range(K):
                    dg[i, c] = max(dg[i, c], abs(g2[i, c] - g[i, c]))
                    dh[i, c] = max(dh[i, c], abs(h2[i, c] - h[i, c]))
        s, rel = g2c, h2c  # (their last values are no longer needed)
        _terms(kind, f32p, yc, m, s, rel)
        for ti in range(trees.shape[0]):
            t = trees[ti]
            rows, c, acc = leaf_index[t], tree_output[t], sums[ti]
            for i in range(nc):
                li = rows[j0 + i]
                if renewed[t]:  # a leaf's quantile moves by one row's residual rounding at most
                    row_bound = d[i, c] + _EPS32 * (abs(yc[i, c if same else 0]) + abs(m[i, c]))
                    acc[0, li] = max(acc[0, li], row_bound)
                else:
                    wj = w[j0 + i]
                    acc[0, li] += wj * h[i, c]
                    acc[1, li] += wj * (_EPS32 * s[i, c] + dg[i, c])
                    acc[2, li] += wj * (dh[i, c] + _EPS32 * h[i, c] * rel[i, c])
    for ti in range(trees.shape[0]):
        t = trees[ti]
        lo, hi = leaf_offset[t], leaf_offset[t + 1]
        worst = 0.0
        for li in range(hi - lo):
            stored = abs(stored_all[lo + li])
            acc = sums[ti, :, li]
            if renewed[t]:
                bound = lr[t] * acc[0] + _EPS32 * stored
            else:  # a Newton leaf: its sums' rounding, over its hessian sum
                den = acc[0] + l2[lo + li]
                bound = lr[t] * acc[1] / den + stored * (_EPS32 + acc[2] / den)
            if diff[lo + li] > 0.0:
                worst = max(worst, diff[lo + li] / max(bound, np.finfo(np.float64).tiny))
        out[t] = worst


def rounding_units(engine: InfluenceEngine) -> NDArray[np.float64]:
    """Each tree's worst leaf residual in units of that leaf's float32 rounding bound, shape (n_trees,).

    XGBoost computes each row's gradient and hessian from float32 margins, in float32, and sums in
    double; the engine works in float64 from the exact sums of the stored leaves. A Newton leaf's
    difference is bounded by ``eta * (eps32 * sum w s + sum w dg) / (H + lambda) + |leaf| * (eps32 +
    sum w (dh + eps32 h r) / (H + lambda))`` over its rows, where ``s`` and ``r`` bound the float32
    evaluation of ``g`` and ``h`` (:func:`_terms`: the magnitudes of the terms XGBoost adds, e.g.
    ``|p| + |y|`` for log loss), and ``dg, dh`` are the changes of the engine's own gradient and
    hessian when the margin moves by ``dm``, XGBoost's float32 margin rounding after ``t`` rounds
    (``dm <= t * eps32 / 2 * max|margin|``). A renewed leaf (quantile of residuals) is off by at
    most ``eta * (dm + eps32 (|y| + |m|))`` of one of its rows plus ``eps32 |leaf|``. Rows sharing
    one margin round alike, so the residual grows with them: 1.4e-5 relative on 20,000 rows of
    rounded features (log loss), every leaf still below 0.6 of its bound.

    The margins and drifts of each round are found one round after the other; the rounds' bounds
    are computed on the adapters' thread pool, up to ``engine.n_threads`` rounds at once, each
    round whole by one thread (the same figures for any number of threads).
    """
    e = engine.ensemble
    loss = e.loss
    kind, f32p = _kind(loss)
    code, prm, size = loss.code, loss.prm, loss.state_size
    y = np.ascontiguousarray(loss.as_labels(e.y), dtype=np.float64)
    w = np.ascontiguousarray(e.sample_weight, dtype=np.float64)
    margin = np.ascontiguousarray(e.init_offset + e.base_margin[None, :], dtype=np.float64)
    drift = np.zeros_like(margin)  # bound on |XGBoost's float32 margin - the exact sum|
    diff = np.abs(engine.leaf_values - e.leaf_values)
    out = np.zeros(e.n_trees)
    offsets = e.leaf_offset.astype(np.int64)
    outputs = e.tree_output.astype(np.int64)
    pool = thread_pool()
    pending = []
    # Rounds in flight, at most one per thread of the engine: each holds its margins and drifts.
    most = max(1, min(engine.n_threads, int(ROUND_BYTES // (2 * 8 * margin.size))))
    for r in range(int(e.tree_round[-1]) + 1):
        trees = np.flatnonzero(e.tree_round == r).astype(np.int64)
        pending.append(pool.submit(_round_units, code, prm, size, kind, f32p, y, w, margin, drift, trees,
                                   e.leaf_index, offsets, outputs, e.leaf_values, e.l2, e.learning_rate,
                                   e.renewed, diff, out))
        step = np.zeros_like(margin)
        for t in trees:
            step[:, outputs[t]] += e.leaf_values[offsets[t] : offsets[t + 1]][e.leaf_index[t]]
        margin = margin + step  # new arrays: the rounds in flight keep theirs
        drift = drift + _EPS32 / 2 * np.abs(margin)
        if len(pending) >= most:
            pending.pop(0).result()
    for job in pending:
        job.result()
    return out
