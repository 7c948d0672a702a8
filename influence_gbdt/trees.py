"""One immutable description of a trained tree ensemble's *structure*, shared by every library.

:class:`TreeStructure` is a frozen struct of flat numpy arrays (treelite's shape): every node of
every tree in one array per attribute, children as global node indices. The per-library readers in
``influence_gbdt.adapters`` (``xgboost_trees``, ``lightgbm_trees``, ``catboost_trees``) resolve each
library's quirks (XGBoost's strict ``<`` and float32 inputs, LightGBM's missing types and category
bitsets, CatBoost's oblivious trees, hashed categories, scale and bias) so that code reading the
structure never branches on a library. This module imports numpy only.

How a row travels down node ``n`` (``x`` is the row's value of ``feature[n]``, after rounding to
float32 when ``float32_inputs``; a value equal to ``missing_value`` counts as NaN):

1. ``missing_type[n] == MISSING_NAN``: NaN is missing. ``MISSING_NONE``: NaN is replaced by 0.0
   first and nothing is missing. ``MISSING_ZERO``: NaN is replaced by 0.0 and ``|x| <= 1e-35`` is
   missing (LightGBM's zero_as_missing). A missing value goes left iff ``default_left[n]``.
2. Numerical split: left iff ``x <= threshold[n]`` when ``inclusive[n]``, else iff ``x < threshold[n]``.
3. Categorical split (``is_categorical_split[n]``): ``x`` is a category *code* (truncated to an
   integer); left iff the code is in ``cat_codes[cat_offset[n]:cat_offset[n + 1]]``. Any other code
   (also a negative one) goes right. Readers whose library sends the listed set right (XGBoost,
   CatBoost one-hot) swap the two children, so this rule holds for all.

The margin of a row is ``base_margin + scale * sum_t value[leaf_t]`` (shape (n_outputs,)).

*Derived columns*: a model may split on numbers that are functions of several input columns (CatBoost's
CTRs, read from the tables the model stores). ``TreeStructure.derived`` computes them; they are the
last ``n_features - n_inputs`` columns, and every method here that takes rows accepts the input
columns alone and fills them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: ``missing_type`` codes (see the module docstring).
MISSING_NAN, MISSING_NONE, MISSING_ZERO = 0, 1, 2
#: LightGBM's kZeroThreshold: ``|x| <= ZERO_THRESHOLD`` is "zero" for MISSING_ZERO.
ZERO_THRESHOLD = 1e-35
#: The link between margin and prediction, as ``objective`` names it.
OBJECTIVES = ("binary", "multiclass", "regression")
_CHUNK = 1 << 16  # rows x trees per traversal block (bounds memory, keeps numpy arrays large)
#: The one-dimensional per-node arrays of TreeStructure and their dtypes.
_NODE_ARRAYS: dict[str, Any] = {
    "feature": np.int32,
    "threshold": np.float64,
    "inclusive": bool,
    "default_left": bool,
    "missing_type": np.int8,
    "left": np.int32,
    "right": np.int32,
    "is_categorical_split": bool,
    "leaf_id": np.int32,
}


class DerivedColumns(Protocol):
    """Columns a model splits on that are functions of its input rows (see the module docstring).

    Attributes
    ----------
    n_inputs : int
        Input columns the functions read.
    names : tuple of str
        One name per derived column.
    single_source : ndarray of shape (n_derived,), int64
        The categorical input column a derived column depends on when it depends on that one
        column alone, else -1.
    """

    n_inputs: int
    names: tuple[str, ...]
    single_source: NDArray[np.int64]

    def __call__(self, Z: NDArray[np.float64], like: NDArray[np.float64] | None = None
                 ) -> NDArray[np.float64]:
        """Derived columns of rows ``Z`` (n, n_inputs) as the trees compare them (floats already
        rounded as the library rounds them), shape (n, n_derived). ``like``: a prepared row
        (n_features,) whose derived values may serve rows that equal it on the columns they read."""
        ...


@dataclass(frozen=True, eq=False)
class ObliviousLevels:
    """A structure whose trees each test one split per level (:attr:`TreeStructure.oblivious`),
    the splits that several levels share numbered once.

    Attributes
    ----------
    depth : ndarray of shape (n_trees,), int64
        Levels of each tree.
    cond_node : ndarray of shape (n_splits,), int64
        A node testing each distinct split (every node of that split routes a row alike).
    level_cond : ndarray of shape (n_trees, max depth), int64
        The split of each level, root first (-1 past the tree's depth).
    leaf_start, leaf_node : ndarrays of shapes (n_trees + 1,) and (sum of 2 ** depth,), int64
        The leaf node tree ``t`` sends a row to is ``leaf_node[leaf_start[t] + code]``, where bit
        ``depth - 1 - k`` of ``code`` is 1 iff the row goes right at level ``k``.
    """

    depth: NDArray[np.int64]
    cond_node: NDArray[np.int64]
    level_cond: NDArray[np.int64]
    leaf_start: NDArray[np.int64]
    leaf_node: NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class TreeStructure:
    """Immutable struct of arrays describing a trained tree ensemble (all libraries alike).

    Node arrays have shape (n_nodes,) and are indexed by a *global* node index; the nodes of tree
    ``t`` are ``tree_offset[t] .. tree_offset[t + 1] - 1`` and its root is ``tree_offset[t]``.

    Attributes
    ----------
    n_features : int
        Number of columns the trees read: the model's input columns, then its derived columns.
    feature_names : tuple of str
        Column names as the model stores them (``f0, f1, ...`` when it stores none).
    feature_is_categorical : ndarray of shape (n_features,), bool
        Columns the model treats as categorical: their values are category codes.
    objective : {"binary", "multiclass", "regression"}
        How the margin becomes a prediction: ``binary`` is class 1 iff margin > 0 (log-odds),
        ``multiclass`` is the argmax of the ``n_outputs`` margins, ``regression`` the margin itself
        (before the objective's inverse link, e.g. exp for Poisson).
    tree_offset : ndarray of shape (n_trees + 1,), int64
        First global node index of each tree; ``tree_offset[-1] == n_nodes``.
    tree_class : ndarray of shape (n_trees,), int32
        Output column a tree adds to (the class of a one-vs-rest multiclass tree, 0 for a single
        output), or -1 for a tree with vector leaves that adds to every column.
    feature : ndarray of shape (n_nodes,), int32
        Split feature of an internal node; -1 marks a leaf.
    threshold : ndarray of shape (n_nodes,), float64
        Split value of a numerical node (exactly as the library stores it; float32 values widened);
        NaN on leaves and categorical nodes.
    inclusive : ndarray of shape (n_nodes,), bool
        True: left iff ``x <= threshold`` (LightGBM, CatBoost). False: left iff ``x < threshold``
        (XGBoost).
    default_left : ndarray of shape (n_nodes,), bool
        Direction of a missing value.
    missing_type : ndarray of shape (n_nodes,), int8
        ``MISSING_NAN``, ``MISSING_NONE`` or ``MISSING_ZERO`` (module docstring).
    left, right : ndarray of shape (n_nodes,), int32
        Global index of the children; -1 on leaves.
    is_categorical_split : ndarray of shape (n_nodes,), bool
        True where the node tests category membership.
    cat_offset : ndarray of shape (n_nodes + 1,), int64
        CSR row pointer into ``cat_codes`` (empty rows for non-categorical nodes).
    cat_codes : ndarray of shape (n_cat_entries,), int64
        Sorted category codes that go *left* at each categorical node.
    value : ndarray of shape (n_nodes, n_outputs), float64
        Leaf values (zero rows on internal nodes). A one-vs-rest tree has its value in column
        ``tree_class[t]`` only.
    leaf_id : ndarray of shape (n_nodes,), int32
        The library's own number for a leaf (XGBoost ``pred_leaf`` node id, LightGBM leaf index,
        CatBoost ``calc_leaf_indexes``); -1 on internal nodes.
    base_margin : ndarray of shape (n_outputs,), float64
        Margin before any tree (XGBoost base score in margin space, CatBoost bias; LightGBM's init
        score is folded into tree 0 by LightGBM itself, so 0 there).
    scale : float
        Multiplier of the summed leaf values (CatBoost's model scale; 1 elsewhere).
    float32_inputs : bool
        True when the library rounds feature values to float32 before comparing (XGBoost, CatBoost).
    missing_value : float
        A value the library treats as missing besides NaN (XGBoost's ``missing=``); NaN if none.
    category_labels : tuple
        Per feature, the labels of codes ``0, 1, ...`` when the model stores them (pandas categories
        of XGBoost and LightGBM), else None.
    derived : DerivedColumns or None
        Computes the derived columns from the input columns (None: the model has none).
    """

    n_features: int
    feature_names: tuple[str, ...]
    feature_is_categorical: NDArray[np.bool_]
    objective: str
    tree_offset: NDArray[np.int64]
    tree_class: NDArray[np.int32]
    feature: NDArray[np.int32]
    threshold: NDArray[np.float64]
    inclusive: NDArray[np.bool_]
    default_left: NDArray[np.bool_]
    missing_type: NDArray[np.int8]
    left: NDArray[np.int32]
    right: NDArray[np.int32]
    is_categorical_split: NDArray[np.bool_]
    cat_offset: NDArray[np.int64]
    cat_codes: NDArray[np.int64]
    value: NDArray[np.float64]
    leaf_id: NDArray[np.int32]
    base_margin: NDArray[np.float64]
    scale: float = 1.0
    float32_inputs: bool = False
    missing_value: float = float("nan")
    category_labels: tuple[Any, ...] = field(default=())
    derived: DerivedColumns | None = None

    def __post_init__(self) -> None:
        n = self.feature.shape[0]
        for name in _NODE_ARRAYS:
            if getattr(self, name).shape != (n,):
                raise ValueError(
                    f"TreeStructure.{name} must have shape ({n},), got {getattr(self, name).shape}."
                )
        if self.value.ndim != 2 or self.value.shape[0] != n:
            raise ValueError(f"TreeStructure.value must have shape ({n}, n_outputs), got {self.value.shape}.")
        if self.cat_offset.shape != (n + 1,) or self.tree_offset[-1] != n:
            raise ValueError("TreeStructure.cat_offset / tree_offset do not match the node count.")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"TreeStructure.objective must be one of {OBJECTIVES}, got {self.objective!r}.")
        for name in self.__dataclass_fields__:
            arr = getattr(self, name)
            if isinstance(arr, np.ndarray):
                arr.setflags(write=False)

    # ------------------------------------------------------------------ sizes
    @property
    def n_trees(self) -> int:
        return int(self.tree_offset.shape[0] - 1)

    @property
    def n_nodes(self) -> int:
        return int(self.feature.shape[0])

    @property
    def n_inputs(self) -> int:
        """Input columns of the model (``n_features`` less the derived columns)."""
        return self.n_features if self.derived is None else int(self.derived.n_inputs)

    @property
    def n_outputs(self) -> int:
        return int(self.value.shape[1])

    @cached_property
    def is_leaf(self) -> NDArray[np.bool_]:
        """ndarray of shape (n_nodes,): True on leaves."""
        return self.left < 0

    @cached_property
    def node_tree(self) -> NDArray[np.int64]:
        """Tree of every node, ndarray of shape (n_nodes,)."""
        return np.repeat(np.arange(self.n_trees), np.diff(self.tree_offset))

    @cached_property
    def max_depth(self) -> int:
        """Largest number of splits on a root-to-leaf path."""
        return int(self.node_depth.max(initial=0))

    @cached_property
    def node_depth(self) -> NDArray[np.int64]:
        """Depth of every node (roots 0), ndarray of shape (n_nodes,); unreachable nodes -1."""
        depth = np.full(self.n_nodes, -1, dtype=np.int64)
        frontier = self.tree_offset[:-1].copy()
        d = 0
        while frontier.size:
            depth[frontier] = d
            inner = frontier[self.left[frontier] >= 0]
            frontier = np.concatenate([self.left[inner], self.right[inner]]).astype(np.int64)
            d += 1
        return depth

    @cached_property
    def _cat_table(self) -> tuple[NDArray[np.int64], list[NDArray[np.int64]], NDArray[np.bool_]]:
        """Membership table of the categorical nodes: (row of each node or -1, known codes per
        feature (sorted), table of shape (n_cat_nodes, max known + 1) whose last column is "unknown")."""
        cat_nodes = np.flatnonzero(self.is_categorical_split)
        row = np.full(self.n_nodes, -1, dtype=np.int64)
        row[cat_nodes] = np.arange(cat_nodes.size)
        known: list[NDArray[np.int64]] = [np.empty(0, dtype=np.int64)] * self.n_features
        for f in np.unique(self.feature[cat_nodes]):
            nodes = cat_nodes[self.feature[cat_nodes] == f]
            codes = [self.cat_codes[self.cat_offset[n] : self.cat_offset[n + 1]] for n in nodes]
            known[int(f)] = np.unique(np.concatenate(codes)) if codes else np.empty(0, dtype=np.int64)
        width = 1 + max((k.size for k in known), default=0)
        table = np.zeros((cat_nodes.size, width), dtype=bool)
        for i, n in enumerate(cat_nodes):
            members = self.cat_codes[self.cat_offset[n] : self.cat_offset[n + 1]]
            table[i, np.searchsorted(known[int(self.feature[n])], members)] = True
        return row, known, table

    @cached_property
    def oblivious(self) -> ObliviousLevels | None:
        """Every tree as one split per level (CatBoost's symmetric trees), or None where a tree is
        not: each level's nodes test the same split and every leaf sits at the same depth."""
        splits: dict[tuple[Any, ...], int] = {}
        cond_node: list[int] = []
        depth = np.zeros(self.n_trees, dtype=np.int64)
        levels: list[list[int]] = []
        leaves: list[NDArray[np.int64]] = []
        for t in range(self.n_trees):
            level = self.tree_offset[t : t + 1].astype(np.int64)
            conds: list[int] = []
            while (self.left[level] >= 0).any():
                first = int(level[0])
                key = self._split_key(first)
                same = all(self._split_key(int(n)) == key for n in level[1:])
                if not (same and (self.left[level] >= 0).all()):
                    return None
                if key not in splits:
                    splits[key] = len(cond_node)
                    cond_node.append(first)
                conds.append(splits[key])
                level = np.column_stack([self.left[level], self.right[level]]).ravel().astype(np.int64)
            depth[t] = len(conds)
            levels.append(conds)
            leaves.append(level)
        level_cond = np.full((self.n_trees, int(depth.max(initial=0))), -1, dtype=np.int64)
        for t, conds in enumerate(levels):
            level_cond[t, : len(conds)] = conds
        leaf_start = np.zeros(self.n_trees + 1, dtype=np.int64)
        np.cumsum([leaf.size for leaf in leaves], out=leaf_start[1:])
        leaf_node = np.concatenate(leaves) if leaves else np.empty(0, dtype=np.int64)
        return ObliviousLevels(depth=depth, cond_node=np.array(cond_node, dtype=np.int64),
                               level_cond=level_cond, leaf_start=leaf_start, leaf_node=leaf_node)

    def _split_key(self, node: int) -> tuple[Any, ...]:
        """What a row's direction at ``node`` depends on (two nodes with one key route alike)."""
        threshold = float(self.threshold[node])
        return (int(self.feature[node]), None if np.isnan(threshold) else threshold,
                bool(self.inclusive[node]), bool(self.default_left[node]), int(self.missing_type[node]),
                bool(self.is_categorical_split[node]),
                tuple(self.cat_codes[self.cat_offset[node] : self.cat_offset[node + 1]].tolist()))

    # ------------------------------------------------------------------ evaluation
    def complete(self, X: ArrayLike, like: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """Rows with their derived columns, ndarray of shape (n_rows, n_features), float64 (a copy).

        ``X`` has shape (n_rows, n_inputs), or (n_rows, n_features) whose derived columns are
        recomputed; input columns are returned as given. ``like``: a prepared row (n_features,),
        e.g. the row candidates were made from, whose derived values serve rows alike (faster).
        """
        Z = self._widened(X)
        if self.derived is not None:
            Z[:, self.n_inputs :] = self.derived(self._rounded(Z.copy())[:, : self.n_inputs], like)
        return Z

    def _widened(self, X: ArrayLike) -> NDArray[np.float64]:
        """A float64 copy of rows ``X`` with room for the derived columns, shape (n_rows, n_features)
        (those columns not computed yet)."""
        Z = np.array(X, dtype=np.float64, ndmin=2, copy=True)
        width = Z.shape[1]
        if self.derived is not None and width == self.n_inputs < self.n_features:
            return np.hstack([Z, np.zeros((Z.shape[0], self.n_features - self.n_inputs))])
        if width != self.n_features:
            raise ValueError(f"X has {width} columns, the model reads {self.n_inputs}.")
        return Z

    def _rounded(self, Z: NDArray[np.float64]) -> NDArray[np.float64]:
        """``Z`` with numerical columns rounded as the library rounds them (in place) and
        ``missing_value`` as NaN."""
        if self.float32_inputs:
            num = ~self.feature_is_categorical
            Z[:, num] = Z[:, num].astype(np.float32).astype(np.float64)
        if not np.isnan(self.missing_value):
            Z[Z == self.missing_value] = np.nan
        return Z

    def prepare_inputs(self, X: ArrayLike, like: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """Rows as the trees compare them, ndarray of shape (n_rows, n_features), float64.

        Rounds numerical columns to float32 when ``float32_inputs`` (category codes stay exact:
        CatBoost's are 32-bit hashes), turns ``missing_value`` into NaN and fills in the derived
        columns from the rounded inputs (as :meth:`complete`, ``like`` as there).
        """
        Z = self._rounded(self._widened(X))
        if self.derived is not None:
            Z[:, self.n_inputs :] = self.derived(Z[:, : self.n_inputs], like)
        return Z

    def decide_left(self, nodes: NDArray[np.integer], x: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Whether value ``x`` goes left at internal node ``nodes`` (arrays of one shape)."""
        nan = np.isnan(x)
        mtype = self.missing_type[nodes]
        x = np.where(nan & (mtype != MISSING_NAN), 0.0, x)
        missing = (nan & (mtype == MISSING_NAN)) | ((mtype == MISSING_ZERO) & (np.abs(x) <= ZERO_THRESHOLD))
        thr = self.threshold[nodes]
        with np.errstate(invalid="ignore"):
            go = np.where(self.inclusive[nodes], x <= thr, x < thr)
        cat = self.is_categorical_split[nodes]
        if cat.any():
            go[cat] = self._in_category_set(nodes[cat], x[cat])
        return np.where(missing, self.default_left[nodes], go)

    def _in_category_set(self, nodes: NDArray[np.integer], x: NDArray[np.float64]) -> NDArray[np.bool_]:
        row, known, table = self._cat_table
        out = np.zeros(nodes.shape, dtype=bool)
        finite = np.isfinite(x)
        code = np.trunc(np.where(finite, x, -1.0)).astype(np.int64)
        feats = self.feature[nodes]
        for f in np.unique(feats):
            sel = feats == f
            kf = known[int(f)]
            pos = np.searchsorted(kf, code[sel])
            hit = (pos < kf.size) & (kf[np.minimum(pos, kf.size - 1)] == code[sel]) if kf.size else pos < 0
            col = np.where(hit & finite[sel], pos, table.shape[1] - 1)
            out[sel] = table[row[nodes[sel]], col]
        return out

    def apply_nodes(self, X: ArrayLike, prepared: bool = False) -> NDArray[np.int64]:
        """Global index of the leaf each row reaches in each tree, ndarray of shape (n_rows, n_trees).

        ``prepared=True`` skips :meth:`prepare_inputs` (``X`` already went through it).
        """
        Z = np.asarray(X, dtype=np.float64) if prepared else self.prepare_inputs(X)
        n = Z.shape[0]
        out = np.empty((n, self.n_trees), dtype=np.int64)
        step = max(1, _CHUNK // max(1, self.n_trees))
        roots = self.tree_offset[:-1]
        for lo in range(0, n, step):
            block = Z[lo : lo + step]
            node = np.broadcast_to(roots, (block.shape[0], self.n_trees)).copy()
            rows = np.broadcast_to(np.arange(block.shape[0])[:, None], node.shape)
            active = np.flatnonzero(self.left[node] >= 0)
            while active.size:
                nd = node.flat[active]
                x = block[rows.flat[active], self.feature[nd]]
                nxt = np.where(self.decide_left(nd, x), self.left[nd], self.right[nd])
                node.flat[active] = nxt
                active = active[self.left[nxt] >= 0]
            out[lo : lo + step] = node
        return out

    def apply(self, X: ArrayLike) -> NDArray[np.int32]:
        """The library's own leaf number per row and tree, ndarray of shape (n_rows, n_trees), int32,
        numbered as XGBoost ``pred_leaf``, LightGBM ``pred_leaf``, CatBoost ``calc_leaf_indexes``."""
        return self.leaf_id[self.apply_nodes(X)]

    def margin_of_nodes(self, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        """Margins of rows whose leaves are ``nodes`` (n_rows, n_trees): shape (n_rows, n_outputs)."""
        total = np.zeros((nodes.shape[0], self.n_outputs))
        for k in range(self.n_outputs):  # n_outputs is small (classes); keeps memory at (n, T)
            total[:, k] = self.value[nodes, k].sum(axis=1)
        return self.base_margin[None, :] + self.scale * total

    def predict_margin(self, X: ArrayLike) -> NDArray[np.float64]:
        """Raw margin of every row, ndarray of shape (n_rows, n_outputs), float64."""
        return self.margin_of_nodes(self.apply_nodes(X))

    def predict_class(self, margin: NDArray[np.float64]) -> NDArray[np.int64]:
        """Class index from margins (n_rows, n_outputs): binary margin > 0, multiclass argmax."""
        if self.objective == "binary":
            return (margin[:, 0] > 0).astype(np.int64)
        if self.objective == "multiclass":
            return np.argmax(margin, axis=1)
        raise ValueError("A regression model has no classes.")


class StructureBuilder:
    """Collects nodes tree by tree (for the readers) and freezes them into a :class:`TreeStructure`.

    Node indices returned by :meth:`add_node` are global; children are set with :meth:`set_children`.
    """

    def __init__(self, n_outputs: int) -> None:
        self.n_outputs = n_outputs
        self._cols: dict[str, list[Any]] = {k: [] for k in (*_NODE_ARRAYS, "cats", "value")}
        self._tree_offset = [0]
        self._tree_class: list[int] = []

    @property
    def n_nodes(self) -> int:
        return len(self._cols["feature"])

    def add_node(
        self,
        *,
        feature: int = -1,
        threshold: float = np.nan,
        inclusive: bool = True,
        default_left: bool = False,
        missing_type: int = MISSING_NAN,
        cats: ArrayLike | None = None,
        value: ArrayLike | float | None = None,
        leaf_id: int = -1,
    ) -> int:
        """Append a node (children -1); a leaf has ``feature == -1`` and a ``value``; return its index."""
        c = self._cols
        c["feature"].append(feature)
        c["threshold"].append(np.nan if cats is not None else threshold)
        c["inclusive"].append(inclusive)
        c["default_left"].append(default_left)
        c["missing_type"].append(missing_type)
        c["left"].append(-1)
        c["right"].append(-1)
        c["is_categorical_split"].append(cats is not None)
        c["cats"].append(None if cats is None else np.asarray(cats, dtype=np.int64).ravel())
        c["value"].append(np.zeros(self.n_outputs) if value is None else value)
        c["leaf_id"].append(leaf_id)
        return self.n_nodes - 1

    def set_children(self, node: int, left: int, right: int) -> None:
        self._cols["left"][node] = left
        self._cols["right"][node] = right

    def set_child(self, node: int, child: int, is_left: bool) -> None:
        self._cols["left" if is_left else "right"][node] = child

    def end_tree(self, tree_class: int) -> None:
        """Close the current tree (its nodes are those added since the last call)."""
        self._tree_offset.append(self.n_nodes)
        self._tree_class.append(tree_class)

    def build(self, **meta: Any) -> TreeStructure:
        """Freeze; ``meta`` holds the non-node fields (n_features, feature_names, objective, ...)."""
        c = self._cols
        values = np.zeros((self.n_nodes, self.n_outputs))
        for i, (v, t) in enumerate(
            zip(c["value"], np.repeat(self._tree_class, np.diff(self._tree_offset)), strict=True)
        ):
            v = np.asarray(v, dtype=np.float64).ravel()
            if v.size == self.n_outputs:
                values[i] = v
            else:
                values[i, max(int(t), 0)] = v[0]
        parts = [np.unique(s) if s is not None else np.empty(0, np.int64) for s in c["cats"]]
        cat_offset = np.zeros(self.n_nodes + 1, dtype=np.int64)
        cat_offset[1:] = np.cumsum([p.size for p in parts])
        nodes: dict[str, Any] = {name: np.asarray(c[name], dtype=t) for name, t in _NODE_ARRAYS.items()}
        return TreeStructure(
            tree_offset=np.asarray(self._tree_offset, dtype=np.int64),
            tree_class=np.asarray(self._tree_class, dtype=np.int32),
            cat_offset=cat_offset,
            cat_codes=np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64),
            value=values,
            **nodes,
            **meta,
        )
