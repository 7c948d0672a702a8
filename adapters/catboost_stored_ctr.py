"""Predict-time CTR values of CatBoost models, from the tables the model stores.

A CatBoost split on a CTR (a target statistic of a categorical feature, or of a combination of
categorical features, one-hot values and float-border bits) compares a number that, at predict time,
is a function of the row alone: CatBoost hashes the row's values of the CTR's elements into a bucket
and reads the bucket's counts from the table stored in the model (the json export's ``ctr_data``).
This module computes those numbers, so that a :class:`~influence_gbdt.trees.TreeStructure` can hold a
CTR split as a numerical split on a *derived column* (see ``TreeStructure.derived``) and route any
row, a tweaked one included, as the booster's own ``predict`` does. (Training-time CTRs, which
differ, are :mod:`.catboost_ctr`'s business.)

Following CatBoost's own model applier (its Python export, ``save_model(format="python")``, and
``ctr_provider``; read, not copied):

1. The bucket hash starts at 0 and takes, with ``CalcHash(a, b) = M * (a + M * b)`` modulo 2^64
   (``M = 0x4906ba494954cb65``), first every categorical element's 32-bit category hash
   (sign-extended to 64 bits), then every float-border bit (``x > border``; NaN as the feature's
   ``nan_value_treatment``), then every one-hot bit (``hash == value``), each kind in the json's
   order.
2. The table maps the hash to counts; a hash it lacks counts nothing. Borders:
   ``good / total`` with ``good`` the counts of the classes above ``target_border_idx``; Counter and
   FeatureFreq: the bucket's count over the table's ``counter_denominator``; Buckets: the count of
   class ``target_border_idx`` over the total.
3. ``value = ((good + prior_numerator) / (total + prior_denomerator) + shift) * scale`` in float32,
   and the split sends ``value > border`` right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from influence_gbdt import _jit as numba
from influence_gbdt.errors import UnsupportedModelError

_EMPTY = 2**64 - 1  # a slot of CatBoost's hash table that holds no bucket (it repeats bucket 0's counts)
_TYPES = ("Borders", "Counter", "FeatureFreq", "Buckets")
#: Element kinds in the compiled tables: a category hash, a float-border bit (NaN false or true), a
#: one-hot bit.
_CAT, _FLOAT, _FLOAT_NAN_TRUE, _ONEHOT = 0, 1, 2, 3
#: How a CTR's name shows an element's border or one-hot value (CatBoost stores the category's hash).
_SHOWN = {_FLOAT: ">{:g}", _FLOAT_NAN_TRUE: ">{:g}", _ONEHOT: " hash={:.0f}"}


def ctr_split_columns(features_info: Mapping[str, Any]) -> tuple[int, NDArray[np.int64]]:
    """Where CTR splits sit in CatBoost's numbering of splits (``split_index``): the first CTR
    split's index, and the CTR feature (position in ``features_info["ctrs"]``) of each CTR split
    after it, shape (n_ctr_borders,). Float borders come first, then one-hot values, then CTR
    borders, each in json order."""
    first = sum(len(f.get("borders") or []) for f in features_info.get("float_features") or []) + sum(
        len(c.get("values") or []) for c in features_info.get("categorical_features") or [])
    ctrs = features_info.get("ctrs") or []
    of = [np.full(len(c.get("borders") or []), i, np.int64) for i, c in enumerate(ctrs)]
    return first, np.concatenate(of) if of else np.empty(0, np.int64)


@numba.njit(cache=True, nogil=True)
def _ctr_values(  # noqa: C901 -- one loop nest; a helper taking the arrays would count references per row
        Z: NDArray[np.float64], like: NDArray[np.float64], elem_ptr: NDArray[np.int64],
                elem_kind: NDArray[np.int64], elem_col: NDArray[np.int64], elem_value: NDArray[np.float64],
                key_ptr: NDArray[np.int64], keys: NDArray[np.uint64], values: NDArray[np.float64],
                prior: NDArray[np.float64], out: NDArray[np.float64]
                ) -> None:  # pragma: no cover - compiled
    """CTR value of every row of ``Z`` (n, n_inputs) and CTR ``j`` into ``out[:, j]`` (module
    docstring): hash the row's elements, find the hash among the sorted ``keys[key_ptr[j]:key_ptr[j +
    1]]`` of the CTR's table and read the CTR's value of that bucket (``values`` is aligned with
    ``keys``), or ``prior[j]``. With a ``like`` row (n_inputs + n_ctr; empty: none), a row that equals it on
    every column a CTR reads takes its value."""
    n, width = Z.shape
    n_ctr = prior.size
    magic = np.uint64(0x4906BA494954CB65)
    same = np.empty(width, np.bool_)
    for i in range(n):
        if like.size:
            for c in range(width):
                same[c] = Z[i, c] == like[c] or (np.isnan(Z[i, c]) and np.isnan(like[c]))
        for j in range(n_ctr):
            if like.size:
                alike = True
                for e in range(elem_ptr[j], elem_ptr[j + 1]):
                    alike = alike and same[elem_col[e]]
                if alike:
                    out[i, j] = like[width + j]
                    continue
            h = np.uint64(0)
            missing = False
            for e in range(elem_ptr[j], elem_ptr[j + 1]):
                x = Z[i, elem_col[e]]
                kind = elem_kind[e]
                if kind == _CAT:
                    if not np.isfinite(x):
                        missing = True
                        break
                    b = np.uint64(np.int64(x))
                elif kind == _ONEHOT:
                    b = np.uint64(1) if x == elem_value[e] else np.uint64(0)
                elif np.isnan(x):
                    b = np.uint64(1) if kind == _FLOAT_NAN_TRUE else np.uint64(0)
                else:
                    b = np.uint64(1) if x > elem_value[e] else np.uint64(0)
                h = magic * (h + magic * b)
            value = prior[j]
            if not missing:
                lo, hi = key_ptr[j], key_ptr[j + 1]
                while lo < hi:
                    mid = (lo + hi) // 2
                    if keys[mid] < h:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < key_ptr[j + 1] and keys[lo] == h:
                    value = values[lo]
            out[i, j] = value


class _Table:
    """One stored table: sorted bucket hashes (n_buckets,) uint64 and counts (n_buckets, stride - 1)."""

    def __init__(self, stored: Mapping[str, Any]) -> None:
        stride = int(stored["hash_stride"])
        flat = list(stored["hash_map"])
        keys = np.array([int(k) for k in flat[::stride]], dtype=np.uint64)
        counts = np.array([flat[i + 1 : i + stride] for i in range(0, len(flat), stride)], dtype=np.float64)
        keep = keys != np.uint64(_EMPTY)
        order = np.argsort(keys[keep], kind="stable")
        self.keys = keys[keep][order]
        self.counts = counts[keep][order].reshape(-1, stride - 1)
        self.denominator = float(stored.get("counter_denominator", 0))


def _ctr_value(c: Mapping[str, Any], good: NDArray[np.float64], total: NDArray[np.float64]
               ) -> NDArray[np.float64]:
    """``((good + prior_numerator) / (total + prior_denomerator) + shift) * scale`` in float32."""
    f32 = np.float32
    ctr = (good.astype(f32) + f32(c["prior_numerator"])) / (total.astype(f32) + f32(c["prior_denomerator"]))
    return np.asarray(((ctr + f32(c["shift"])) * f32(c["scale"])).astype(f32), dtype=np.float64)


def _statistic(c: Mapping[str, Any], table: _Table) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(good, total) counts of every bucket of ``table`` for CTR ``c``, shapes (n_buckets,)."""
    counts = table.counts
    kind = str(c["ctr_type"])
    if kind in ("Counter", "FeatureFreq"):
        return counts[:, 0], np.full(counts.shape[0], table.denominator)
    border = int(c.get("target_border_idx", 0))
    total = counts.sum(axis=1)
    if kind == "Buckets":
        return counts[:, border], total
    return counts[:, border + 1 :].sum(axis=1), total


class StoredCtrs:
    """The CTR features of a CatBoost model as derived columns of its input rows.

    Parameters
    ----------
    model_json : mapping
        The model's json export (``save_model(format="json")``).
    n_inputs : int
        Number of input columns (the model's features, by flat index).

    Attributes
    ----------
    n_inputs : int
    names : tuple of str
        One readable name per CTR feature, e.g. ``"CTR Borders(workclass x education), prior 0.5"``.
    single_source : ndarray of shape (n_derived,), int64
        The input column a CTR reads when it reads one categorical column and nothing else, else -1
        (feature tweaking turns a split on such a CTR into a set of categories).

    Raises
    ------
    UnsupportedModelError
        A CTR type whose stored statistic is not modelled (target means), or a CTR without a table.
    """

    def __init__(self, model_json: Mapping[str, Any], n_inputs: int) -> None:
        info = model_json["features_info"]
        ctrs = info.get("ctrs") or []
        unknown = sorted({str(c["ctr_type"]) for c in ctrs} - set(_TYPES))
        if unknown:
            raise UnsupportedModelError(
                f"This CatBoost model uses CTRs of types {unknown}, whose stored statistics are not "
                f"modelled (types {list(_TYPES)} are). Retrain with simple_ctr / combinations_ctr of "
                "those types (the defaults are Borders and Counter)."
            )
        cats = {int(f["feature_index"]): f for f in info.get("categorical_features") or []}
        floats = {int(f["feature_index"]): f for f in info.get("float_features") or []}
        named = list(cats.values()) + list(floats.values())
        flat_names = {int(f["flat_feature_index"]): str(f.get("feature_id") or f"f{f['flat_feature_index']}")
                      for f in named}
        tables = {key: _Table(value) for key, value in (model_json.get("ctr_data") or {}).items()}
        self.n_inputs = n_inputs
        labels, single, elements, key_parts, value_parts = [], [], [], [], []
        prior = np.empty(len(ctrs))
        for j, c in enumerate(ctrs):
            parts = self._elements(c["elements"], cats, floats)
            table = tables.get(str(c["identifier"]))
            if table is None:
                raise UnsupportedModelError(
                    f"This CatBoost model's CTR {c['identifier']} has no stored table in its json export; "
                    "save it with a CatBoost version that exports ctr_data (1.0 or later)."
                )
            elements.append(parts)
            key_parts.append(table.keys)
            value_parts.append(_ctr_value(c, *_statistic(c, table)))
            prior[j] = _ctr_value(c, np.zeros(1), np.zeros(1))[0]
            shown = [flat_names.get(f, f"f{f}") + ("" if kind == _CAT else _SHOWN[kind].format(v))
                     for kind, f, v in parts]
            labels.append(f"CTR {c['ctr_type']}({' x '.join(shown)}), prior {float(c['prior_numerator']):g}")
            single.append(parts[0][1] if len(parts) == 1 and parts[0][0] == _CAT else -1)
        self.names = tuple(labels)
        self.single_source = np.asarray(single, dtype=np.int64)
        flat = [e for parts in elements for e in parts]
        self._tables = (
            np.concatenate([[0], np.cumsum([len(p) for p in elements])]).astype(np.int64),
            np.array([e[0] for e in flat], np.int64), np.array([e[1] for e in flat], np.int64),
            np.array([e[2] for e in flat], np.float64),
            np.concatenate([[0], np.cumsum([k.size for k in key_parts])]).astype(np.int64),
            np.concatenate([*key_parts, np.empty(0, np.uint64)]).astype(np.uint64),
            np.concatenate([*value_parts, np.empty(0)]), prior,  # values aligned with the keys
        )

    @staticmethod
    def _elements(elements: Sequence[Mapping[str, Any]], cats: Mapping[int, Mapping[str, Any]],
                  floats: Mapping[int, Mapping[str, Any]]) -> list[tuple[int, int, float]]:
        """The CTR's elements as (kind, flat input column, border or one-hot value), in the order
        CatBoost hashes them: categories, then float-border bits, then one-hot bits."""
        out: dict[int, list[tuple[int, int, float]]] = {_CAT: [], _FLOAT: [], _ONEHOT: []}
        for e in elements:
            kind = e["combination_element"]
            if kind == "cat_feature_value":
                out[_CAT].append((_CAT, int(cats[int(e["cat_feature_index"])]["flat_feature_index"]), 0.0))
            elif kind == "float_feature":
                f = floats[int(e["float_feature_index"])]
                nan_true = f.get("nan_value_treatment") == "AsTrue"
                out[_FLOAT].append((_FLOAT_NAN_TRUE if nan_true else _FLOAT, int(f["flat_feature_index"]),
                                    float(e["border"])))
            elif kind == "cat_feature_exact_value":
                out[_ONEHOT].append((_ONEHOT, int(cats[int(e["cat_feature_index"])]["flat_feature_index"]),
                                     float(e["value"])))
            else:
                raise UnsupportedModelError(
                    f"This CatBoost model's CTRs combine elements of kind {kind!r}, which is not modelled."
                )
        return out[_CAT] + out[_FLOAT] + out[_ONEHOT]

    @property
    def n_derived(self) -> int:
        return int(self.single_source.size)

    def __call__(self, Z: NDArray[np.float64], like: NDArray[np.float64] | None = None
                 ) -> NDArray[np.float64]:
        """CTR values of rows ``Z`` (n, n_inputs), shape (n, n_derived), float64 holding float32s.

        ``Z`` holds the inputs as the trees compare them: floats rounded to float32, categories as
        CatBoost's 32-bit hashes (NaN: a missing category, which reads the prior). ``like``: a row
        of shape (n_inputs + n_derived,) whose CTR values serve the rows equal to it on a CTR's
        columns (rows that differ from it in a few columns cost a few CTRs each).
        """
        out = np.empty((Z.shape[0], self.n_derived))
        _ctr_values(np.ascontiguousarray(Z, dtype=np.float64),
                    np.empty(0) if like is None else np.ascontiguousarray(like, dtype=np.float64),
                    *self._tables, out)
        return out

    def __repr__(self) -> str:
        return f"StoredCtrs({self.n_derived} CTR features of {self.n_inputs} inputs)"


def stored_ctrs(model_json: Mapping[str, Any], n_inputs: int) -> StoredCtrs | None:
    """The model's :class:`StoredCtrs`, or None when it has no CTR features."""
    if not (model_json["features_info"].get("ctrs") or []):
        return None
    return StoredCtrs(model_json, n_inputs)


__all__ = ["StoredCtrs", "ctr_split_columns", "stored_ctrs"]
