"""Training-time leaves of CatBoost models with CTR (target statistic) splits.

CatBoost encodes a categorical feature (or a combination of them) with more values than
``one_hot_max_size`` by *CTRs*: per bucket (a category, or a tuple of categories, one-hot values
and float-border bits) a statistic of the labels. The final model's tables hold those statistics
over the whole learn set, but while training, a learn row's CTR value was computed *online*, from
the rows before it in a random permutation, so the leaf a training row visited when the leaf
values were estimated is not the leaf ``calc_leaf_indexes`` gives it. This module rebuilds that
leaf exactly (CPU, symmetric trees), from the model (``get_all_params``, the json export) and the
training data, following CatBoost's source (catboost 1.2, read, not copied):

1. One random stream, ``TRestorableFastRng64(random_seed)``: two PCG-32 LCG streams seeded through
   ``TReallyFastRng32`` (``util/random/fast.h``); ``Uniform(m)`` rejects draws at or above
   ``2^64 - 1 - (2^64 - 1) % m`` and returns ``draw % m`` (:class:`CatBoostRng`).
2. The whole learn set is shuffled first (Fisher-Yates, ``swap(a[i], a[Uniform(i + 1)])`` for
   ``i = 1..n-1``) whenever a feature is categorical and ``has_time`` is false
   (``preprocess.cpp``, ``ShuffleLearnDataIfNeeded``); the learn context continues the stream.
3. ``max(1, permutation_count - 1)`` learning folds (fold 0 not shuffled), then the *averaging
   fold*; a fold shuffle permutes blocks of ``fold_permutation_block`` rows (0 means
   ``min(256, n // 1000 + 1)``), all relative to the shuffled learn set (``learn_context.cpp``,
   ``fold.cpp``). ``has_time=True`` shuffles nothing. Only the averaging fold matters: every
   tree's leaves are estimated on it, with its own online CTRs (``train.cpp``,
   ``approx_calcer.cpp``) (:func:`fold_permutations`).
4. Online CTRs along the averaging fold (``online_ctr.cpp``): a **Borders** CTR of the row at
   position ``k`` is ``(good + prior) / (total + 1)`` over the rows *before* ``k`` in its bucket
   (``good``: those of target class 1); a **Counter** CTR is ``(bucket count + prior) / (largest
   bucket count + 1)`` over the whole learn set. The bin is ``ui8((ctr + shift) / norm *
   border_count)`` in float32 with ``shift = -min(0, prior)``, ``norm = max(1, prior) - min(0,
   prior)``; a split "bin >= k" is stored as border ``k - 1e-6``. Counts are *unweighted*:
   sample weights and class weights never enter a CTR statistic (:func:`online_ctr_bins`).

Every CTR feature the model uses is described in the json export (its elements, type, prior,
scale and borders), so the combination search of training need not be replayed. Non-CTR split
outcomes do not depend on the order and are taken from ``calc_leaf_indexes``.

Cost: one Fisher-Yates shuffle of ``n`` draws plus a few block shuffles (a numba kernel, about
2 ms per 100,000 rows once compiled), and per CTR feature one ``lexsort`` (O(n log n)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from influence_gbdt import _jit as numba
from influence_gbdt.errors import InputError, ReproductionError, UnsupportedModelError

from .catboost_stored_ctr import ctr_split_columns

_MASK64 = (1 << 64) - 1
_LCG_MUL = 6364136223846793005
_MODELLED_CTRS = ("Borders", "Counter")
#: Losses whose CTRs binarize the class index with K - 1 borders (target_border_idx b: class > b).
_MULTICLASS = ("MultiClass", "MultiClassOneVsAll")
_UNLIMITED = 2**64 - 1  # ctr_leaf_count_limit's default: every bucket kept


# ---------------------------------------------------------------------------------------------
# CatBoost's random stream
# ---------------------------------------------------------------------------------------------


def _pcg_output(x: int) -> int:
    """PCG XSH-RR output of a 64-bit LCG state (Python ints, used while seeding)."""
    shifted = (((x >> 18) ^ x) >> 27) & 0xFFFFFFFF
    rot = x >> 59
    return ((shifted >> rot) | (shifted << ((-rot) & 31))) & 0xFFFFFFFF


@numba.njit(cache=True, nogil=True)
def _next64(state: NDArray[np.uint64]) -> np.uint64:  # pragma: no cover - compiled
    """One ``TFastRng64::GenRand`` draw; ``state`` = (x1, c1, x2, c2), advanced in place."""
    mul = np.uint64(6364136223846793005)
    m32 = np.uint64(0xFFFFFFFF)
    out = np.uint64(0)
    for s in range(2):
        x = state[2 * s] * mul + state[2 * s + 1]
        state[2 * s] = x
        shifted = (((x >> np.uint64(18)) ^ x) >> np.uint64(27)) & m32
        rot = x >> np.uint64(59)
        word = ((shifted >> rot) | (shifted << ((np.uint64(32) - rot) & np.uint64(31)))) & m32
        out = (out << np.uint64(32)) | word
    return out


@numba.njit(cache=True, nogil=True)
def _uniform(state: NDArray[np.uint64], m: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """``Uniform(m)``: draws until one is below the largest multiple of ``m``, then ``draw % m``."""
    top = np.uint64(0xFFFFFFFFFFFFFFFF)
    limit = top - top % m
    while True:
        r = _next64(state)
        if r < limit:
            return r % m


@numba.njit(cache=True, nogil=True)
def _uniform_draws(state: NDArray[np.uint64], m: int, count: int) -> NDArray[np.int64]:  # pragma: no cover
    out = np.empty(count, np.int64)
    for k in range(count):
        out[k] = np.int64(_uniform(state, np.uint64(m)))
    return out


@numba.njit(cache=True, nogil=True)
def _shuffled_indices(state: NDArray[np.uint64], n: int) -> NDArray[np.int64]:  # pragma: no cover
    """Fisher-Yates as ``util/random/shuffle.h``: ``swap(a[i], a[Uniform(i + 1)])``, i = 1..n-1."""
    idx = np.arange(n)
    for i in range(1, n):
        j = np.int64(_uniform(state, np.uint64(i + 1)))
        idx[i], idx[j] = idx[j], idx[i]
    return idx


class CatBoostRng:
    """CatBoost's ``TRestorableFastRng64(seed)`` (a ``TFastRng64``): the stream every shuffle of
    training draws from, in order.

    Parameters
    ----------
    seed : int
        ``random_seed`` of the model.
    """

    def __init__(self, seed: int) -> None:
        x = seed & _MASK64

        def gen32() -> int:
            nonlocal x
            x = (x * _LCG_MUL + 1) & _MASK64
            return _pcg_output(x)

        seed1 = gen32() | (gen32() << 32)
        seq1 = gen32()
        seed2 = gen32() | (gen32() << 32)
        seq2 = gen32()
        if (seq1 & 0x7FFFFFFF) == (seq2 & 0x7FFFFFFF):
            seq2 = ~seq2 & 0xFFFFFFFF
        self._set(seed1, seq1, seed2, seq2)

    @classmethod
    def from_streams(cls, seed1: int, seq1: int, seed2: int, seq2: int) -> CatBoostRng:
        """``TFastRng64(seed1, seq1, seed2, seq2)`` with its streams given directly."""
        rng = cls.__new__(cls)
        rng._set(seed1, seq1, seed2, seq2)
        return rng

    def _set(self, seed1: int, seq1: int, seed2: int, seq2: int) -> None:
        self.state = np.array(
            [seed1 & _MASK64, ((seq1 << 1) | 1) & _MASK64, seed2 & _MASK64, ((seq2 << 1) | 1) & _MASK64],
            dtype=np.uint64,
        )

    def draw(self) -> int:
        """One raw 64-bit draw (``GenRand``)."""
        return int(_next64(self.state))

    def uniform(self, m: int, count: int) -> NDArray[np.int64]:
        """``count`` draws of ``Uniform(m)``, shape (count,)."""
        return np.asarray(_uniform_draws(self.state, int(m), int(count)))

    def shuffle(self, n: int, block: int = 1) -> NDArray[np.int64]:
        """A permutation of ``range(n)`` that moves blocks of ``block`` consecutive indices (the last
        one shorter), as ``NCB::Shuffle`` draws it; shape (n,)."""
        if block <= 1:
            return np.asarray(_shuffled_indices(self.state, int(n)))
        order = np.asarray(_shuffled_indices(self.state, -(-n // block)))
        starts = order * block
        sizes = np.minimum(starts + block, n) - starts
        return np.repeat(starts - np.r_[0, np.cumsum(sizes)[:-1]], sizes) + np.arange(n)


def fold_permutations(n: int, params: Mapping[str, Any]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The learn-set shuffle and the averaging fold of a model with categorical features and ``n``
    learn rows.

    Returns
    -------
    learn_shuffle, averaging : ndarray of shape (n,), int64
        Original row index at each position: of the shuffled learn set (the order CatBoost sums the
        backtracking objective in when no feature is encoded with CTRs), and of the averaging fold
        (whose leaves and online CTRs give every tree's leaf values, and whose order the objective
        is summed in when there are CTRs).
    """
    if params.get("has_time", False):
        identity = np.arange(n)
        return identity, identity
    rng = CatBoostRng(int(params["random_seed"]))
    learn = rng.shuffle(n)
    block = int(params.get("fold_permutation_block", 0) or 0) or min(256, n // 1000 + 1)
    for _ in range(1, max(1, int(params.get("permutation_count", 4)) - 1)):
        rng.shuffle(n, block)  # the learning folds after fold 0: drawn only to advance the stream
    return learn, learn[rng.shuffle(n, block)]


# ---------------------------------------------------------------------------------------------
# CTR features
# ---------------------------------------------------------------------------------------------


def ctr_refusal(params: Mapping[str, Any], model_json: Mapping[str, Any], loss: str) -> str | None:
    """Why the training-time CTR values of a model cannot be rebuilt, or None (also for a model
    without CTRs). ``loss`` is ``get_all_params()['loss_function']`` without its options."""
    ctrs = model_json["features_info"].get("ctrs") or []
    if not ctrs:
        return None
    descriptions = [str(d) for key in ("simple_ctr", "combinations_ctr", "per_feature_ctr")
                    for d in (params.get(key) or [])]
    target_borders = [int(f.split("=", 1)[1]) for d in descriptions for f in d.split(":")
                      if f.startswith("TargetBorderCount=")]
    types = sorted({str(c["ctr_type"]) for c in ctrs} - set(_MODELLED_CTRS))
    limit = int(params.get("ctr_leaf_count_limit", _UNLIMITED) or _UNLIMITED)
    checks = [
        (params.get("task_type", "CPU") != "CPU", "it was trained on GPU, whose CTRs are computed "
         "otherwise; train on CPU"),
        (params.get("grow_policy", "SymmetricTree") != "SymmetricTree",
         f"grow_policy={params.get('grow_policy')!r} with CTRs is not modelled; train with "
         "grow_policy='SymmetricTree' or one-hot encode the categorical features"),
        (bool(types), f"CTR types {types} are not modelled (Borders and Counter are); retrain with "
         "simple_ctr and combinations_ctr of types Borders and Counter (the defaults)"),
        (loss not in ("Logloss", "RMSE", *_MULTICLASS), f"CTRs with loss_function={loss!r} are not "
         "modelled (other losses have other target classes); CTR models are supported with Logloss, "
         "RMSE, MultiClass and MultiClassOneVsAll, or raise one_hot_max_size above every feature's "
         "number of categories"),
        (loss not in _MULTICLASS and (any(b != 1 for b in target_borders)
                                   or any(int(c.get("target_border_idx", 0)) for c in ctrs)),
         "its CTRs binarize the target with several borders (TargetBorderCount > 1); retrain with "
         "TargetBorderCount=1 (the default)"),
        (limit < _UNLIMITED, f"ctr_leaf_count_limit={limit} keeps only the most frequent categories "
         "(not modelled); retrain without it"),
        (params.get("boosting_type", "Plain") not in ("Plain", "Ordered"),
         f"boosting_type={params.get('boosting_type')!r} is not modelled with CTRs"),
    ]
    reasons = [why for bad, why in checks if bad]
    return reasons[0] if reasons else None


def _cat_value_hashes(values: Sequence[str]) -> NDArray[np.int32]:
    """CatBoost's hash of categorical values, shape (len(values),): the low 32 bits of CityHash64,
    computed by CatBoost itself (a group id is hashed by the same CityHash64)."""
    import catboost

    pool = catboost.Pool(np.zeros((len(values), 1)), group_id=list(values))
    full = np.asarray(pool.get_group_id_hash()).astype(np.uint64)
    return (full & np.uint64(0xFFFFFFFF)).astype(np.uint32).astype(np.int32)


@dataclass(frozen=True)
class _Columns:
    """The learn rows as CTR buckets read them: ``codes`` (n, n_cat) int64 category codes per
    categorical feature (CatBoost's categorical index order), ``values`` the category strings of
    each code, ``floats`` (n, n_features) float32-rounded numeric columns by flat index."""

    codes: NDArray[np.int64]
    values: list[list[str]]
    floats: NDArray[np.float64]

    @classmethod
    def read(cls, X: Any, cat_features: Sequence[int]) -> _Columns:
        frame = X if isinstance(X, pd.DataFrame) else pd.DataFrame(np.asarray(X, dtype=object))
        n, width = frame.shape
        codes = np.zeros((n, len(cat_features)), np.int64)
        values: list[list[str]] = []
        for pos, col in enumerate(cat_features):
            column = frame.iloc[:, col]
            if pd.api.types.is_float_dtype(column.dtype):
                raise InputError(f"Categorical column {col} holds floats; CatBoost trains on the "
                                 "categories as strings or integers: pass them as trained.")
            code, uniques = pd.factorize(column.astype(str))
            codes[:, pos] = code
            values.append([str(u) for u in uniques])
        floats = np.full((n, width), np.nan)
        for col in sorted(set(range(width)) - set(cat_features)):
            floats[:, col] = np.asarray(frame.iloc[:, col], dtype=np.float32)
        return cls(codes, values, floats)


def _bucket_keys(ctr: Mapping[str, Any], cols: _Columns, floats_info: Mapping[int, Mapping[str, Any]]
                 ) -> NDArray[np.int64]:
    """Bucket of every row for one CTR feature, shape (n,): the tuple of its elements' values
    (a category, a float-border bit, "category == a one-hot value"), numbered."""
    parts = []
    for e in ctr["elements"]:
        kind = e["combination_element"]
        if kind == "cat_feature_value":
            parts.append(cols.codes[:, e["cat_feature_index"]])
        elif kind == "float_feature":
            info = floats_info[e["float_feature_index"]]
            x = cols.floats[:, info["flat_feature_index"]]
            nan_true = info.get("nan_value_treatment") == "AsTrue"
            parts.append(np.where(np.isnan(x), nan_true, x > e["border"]).astype(np.int64))
        elif kind == "cat_feature_exact_value":
            f = e["cat_feature_index"]
            hashes = _cat_value_hashes(cols.values[f])
            parts.append((hashes[cols.codes[:, f]] == np.int32(e["value"])).astype(np.int64))
        else:
            raise UnsupportedModelError(
                f"Cannot reproduce this CatBoost model: its CTRs combine elements of kind {kind!r}, "
                "which is not modelled. Retrain with one_hot_max_size above every feature's number of "
                "categories."
            )
    keys = np.zeros(cols.codes.shape[0], np.int64)
    for part in parts:  # renumbered after each element: keys stay below n * (values of a part)
        width = int(part.max()) + 1
        keys = _numbered(keys * width + part, (int(keys.max()) + 1) * width)
    return keys


def _numbered(values: NDArray[np.int64], bound: int) -> NDArray[np.int64]:
    """Each of ``values`` (n,), all in ``[0, bound)``, replaced by its rank among the distinct
    values (``np.unique``'s inverse).

    Where ``bound`` is at most a few times ``n``, through a table of the possible values (present or
    not, cumulated): linear, no sort. Measured: ``np.unique`` took 3.2 of ``CatBoostClassifier()``'s
    9.7 s ``fit`` on Adult (1,208 sorts of 32,561 keys for its 499 CTRs; ``docs/performance.md``,
    stop 54). Otherwise, ``np.unique``.
    """
    if bound <= 8 * values.size + 65536:
        present = np.zeros(bound, np.int64)
        present[values] = 1
        return (np.cumsum(present) - 1)[values]
    _, inverse = np.unique(values, return_inverse=True)
    return inverse.ravel().astype(np.int64)


def _normalization(prior: np.float32) -> tuple[np.float32, np.float32]:
    """``CalcNormalization``: shift ``-min(0, prior)`` and norm ``max(1, prior) - min(0, prior)``."""
    low, high = min(np.float32(0), prior), max(np.float32(1), prior)
    return np.float32(-low), np.float32(high - low)


def online_ctr_bins(ctr: Mapping[str, Any], keys: NDArray[np.int64], classes: NDArray[np.float64],
                    order: NDArray[np.int64]) -> NDArray[np.int64]:
    """Training-time ui8 bin of every learn row for one CTR feature, shape (n,).

    ``keys`` (n,) bucket per row, ``classes`` (n,) target class per row (0 or 1; a multiclass
    model's class index), ``order`` (n,) the averaging fold (original row at each position).
    Borders: counts of the earlier rows of the bucket along ``order`` (a stable sort by bucket,
    cumulative counts), "good" ones those whose class is above the CTR's
    ``target_border_idx`` (class 1 of two; of K classes, the K - 1 borders between them); Counter: the
    bucket sizes over all rows. Counts, not weights.
    """
    f32 = np.float32
    prior = f32(ctr["prior_numerator"])
    shift, norm = _normalization(prior)
    border_count = f32(round(float(f32(ctr["scale"]) * norm)))
    n = keys.size
    if ctr["ctr_type"] == "Borders":
        k = keys[order]
        if k.max() < 1 << 16:  # the same order by numpy's radix sort (stable, linear) of 16-bit keys:
            srt = np.argsort(k.astype(np.uint16), kind="stable")  # 1.5-15x faster, measured (stop 54)
        else:
            srt = np.lexsort((np.arange(n), k))  # by bucket, then position
        ks = k[srt]
        ys = (classes[order][srt] > int(ctr.get("target_border_idx", 0))).astype(np.int64)
        starts = np.r_[0, np.flatnonzero(np.diff(ks)) + 1]
        first = np.repeat(starts, np.diff(np.r_[starts, n]))
        good_upto = np.cumsum(ys) - ys
        rows = order[srt]
        good = np.empty(n, np.int64)
        total = np.empty(n, np.int64)
        good[rows] = good_upto - good_upto[first]
        total[rows] = np.arange(n) - first
        numerator, denominator = good.astype(f32) + prior, (total + 1).astype(f32)
    else:  # Counter
        counts = np.bincount(keys)
        numerator, denominator = counts[keys].astype(f32) + prior, np.full(n, counts.max() + 1, f32)
    value = np.asarray(numerator / denominator, dtype=f32)  # float32 throughout, as CatBoost
    scaled = ((value + shift) / norm * border_count).astype(f32)
    return np.floor(scaled).astype(np.int64)


def ctr_target_classes(params: Mapping[str, Any], labels: NDArray[np.float64]) -> NDArray[np.float64]:
    """Target class of every learn row as the Borders CTRs count it, shape (n,).

    Logloss, MultiClass, MultiClassOneVsAll: the class index. RMSE: label above the one border
    CatBoost computes for CTRs
    (``TargetBorderType``, MinEntropy by default), found with CatBoost's own quantizer on the
    float32 labels.
    """
    import os
    import tempfile

    import catboost

    if str(params.get("loss_function", "")).split(":")[0] in ("Logloss", *_MULTICLASS):
        return labels
    descriptions = list(params.get("simple_ctr") or []) + list(params.get("combinations_ctr") or [])
    kinds = {f.split("=", 1)[1] for d in descriptions for f in str(d).split(":")
             if f.startswith("TargetBorderType=")}
    kind = kinds.pop() if len(kinds) == 1 else "MinEntropy"
    y32 = np.asarray(labels, np.float32)
    pool = catboost.Pool(y32.reshape(-1, 1))
    pool.quantize(border_count=1, feature_border_type=kind)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "borders.tsv")
        pool.save_quantization_borders(path)
        with open(path) as fh:
            borders = [float(line.split("\t")[1]) for line in fh if line.strip()]
    return (y32[:, None] > np.asarray(borders, np.float32)[None, :]).sum(axis=1).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Training-time leaves and the leaf-weight pre-check
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingLeaves:
    """Where every training row was when CatBoost estimated the leaf values.

    leaves : ndarray of shape (n_trees, n), int32
        Leaf index (bit ``d`` = outcome of the tree's split ``d``) with the online CTRs of the
        averaging fold.
    learn_shuffle, averaging : ndarray of shape (n,), int64
        Original row at each position of the shuffled learn set and of the averaging fold.
    """

    leaves: NDArray[np.int32]
    learn_shuffle: NDArray[np.int64]
    averaging: NDArray[np.int64]

    def check_leaf_weights(
        self, weights: NDArray[np.float64], model_json: Mapping[str, Any], hint: str
    ) -> None:
        """Compare per-leaf weight sums with the model's (``get_leaf_weights``).

        CatBoost books the weight of shuffled learn row ``d`` on the leaf of averaging position
        ``P[d]`` (``SumLeafWeights``; with unequal weights a row's weight lands on another row's
        leaf), and the sums are paired the same way here. ``weights`` (n,): sample weight times
        class weight.

        Raises
        ------
        ReproductionError
            In the first tree whose sums differ (the data or its order is not the training data's).
        """
        booked = self.averaging[np.argsort(self.learn_shuffle)[self.averaging]]  # row of each weight's leaf
        w = weights[self.learn_shuffle]
        for t, tree in enumerate(model_json["oblivious_trees"]):
            stored = np.asarray(tree.get("leaf_weights") or [], np.float64)
            if not stored.any():
                continue  # a model without stored leaf weights: the self-check decides alone
            got = np.bincount(self.leaves[t, booked], weights=w, minlength=stored.size)
            if np.abs(got - stored).max() > 1e-6 * max(1.0, float(np.abs(stored).max())):
                raise ReproductionError(
                    f"The CatBoost model's training-time CTR leaves are not reproduced: in tree {t} the "
                    f"rows' weights per leaf are {got.round(6).tolist()[:8]}..., the model stored "
                    f"{stored.round(6).tolist()[:8]}.... {hint}"
                )


def training_leaves(model_json: Mapping[str, Any], params: Mapping[str, Any], X: Any,
                    cat_features: Sequence[int], classes: NDArray[np.float64],
                    final_leaves: NDArray[np.int32]) -> TrainingLeaves:
    """Rebuild every training row's training-time leaf in every tree.

    Parameters
    ----------
    model_json : the model's json export; params : ``get_all_params()``.
    X : DataFrame or array of shape (n, n_features)
        The training rows in training order, categorical columns as trained.
    cat_features : the model's categorical column indices.
    classes : ndarray of shape (n,)
        Target class of each row (:func:`ctr_target_classes`).
    final_leaves : ndarray of shape (n_trees, n)
        ``calc_leaf_indexes`` of the rows: their non-CTR split outcomes are kept.
    """
    n = final_leaves.shape[1]
    cols = _Columns.read(X, sorted(cat_features))
    info = model_json["features_info"]
    floats_info = {f["feature_index"]: f for f in info.get("float_features") or []}
    ctrs = info["ctrs"]
    learn, averaging = fold_permutations(n, params)
    bins = [online_ctr_bins(c, _bucket_keys(c, cols, floats_info), classes, averaging) for c in ctrs]
    first_ctr, ctr_of = ctr_split_columns(info)
    threshold = np.concatenate([np.ceil(np.asarray(c["borders"], np.float64)) for c in ctrs]).astype(np.int64)
    leaves = np.array(final_leaves, dtype=np.int32, copy=True)
    for t, tree in enumerate(model_json["oblivious_trees"]):
        for d, split in enumerate(tree.get("splits") or []):
            k = int(split["split_index"]) - first_ctr
            if k >= 0:
                bit = (bins[ctr_of[k]] >= threshold[k]).astype(np.int32)
                leaves[t] = (leaves[t] & ~np.int32(1 << d)) | (bit << d)
    return TrainingLeaves(leaves, learn, averaging)
