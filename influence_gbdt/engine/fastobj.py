"""CatBoost's backtracking objective for the exp-approx losses, bit for bit (numba). Private.

CatBoost (CPU, x86-64 with AVX2) decides each AnyImprovement backtracking try of a
``leaf_estimation_iterations > 1`` tree by comparing the weighted mean training loss ("Obj") of
the try with the current one, strictly (``new < cur``). For Logloss, CrossEntropy and Poisson it
keeps the approx in exp space and evaluates Obj with approximate arithmetic: a table-based exp of
the try's leaf deltas, the float32 "FastLogf" logarithm, and (Logloss / CrossEntropy) float32 sums
in four lanes per block of at most 4096 rows. Near convergence the true improvement of a try is
smaller than that arithmetic's error, so an exactly computed objective mis-decides some tries; this
module reproduces CatBoost's value bit for bit instead. The algorithm and the measurements behind it
are in the project notes (``catboost-obj.md``); this is our own implementation of that description.

Pieces (all compiled, callable from other compiled kernels):

- :func:`fastexp_vec` -- the vector exp CatBoost applies to a leaf-delta vector;
- :func:`fast_exp_scalar` -- the scalar table exp of a ``boost_from_average`` starting value;
- :func:`fastlogf` -- the float32 logarithm of the metric;
- :func:`exp_space_objective` with :func:`objective_ranges` -- Obj of one try;
- :class:`SumOrder` (:func:`new_sum_order`, :func:`fill_sum_order`, :func:`order_leaves`) -- the
  rows a try sums, with their float32 targets, weights and leaves, at their positions in the
  booster's summation order: laid out once, read in order by every try (:func:`block_stats`);
- :func:`cb_newton_step` -- CatBoost's Newton leaf step from the exp-space approx, in its summation
  order (for bit-identical leaves);
- :func:`update_point` -- CatBoost's exp-space update ``point *= dl[leaf]`` (accepted steps and the
  per-tree update).

What the walker needs
---------------------
Two ways to use the module (measured in the notes, section "partial mirror"):

- **Bit-identical.** Keep CatBoost's exp-space state per row: ``point`` starts at
  ``fast_exp_scalar(bias)`` (1.0 without a bias) and is multiplied by
  ``fastexp_vec(tree's leaf values)[leaf]`` after every earlier tree (:func:`update_point`); in the
  tree, each Newton step comes from :func:`cb_newton_step` at ``point``, each try ``s`` evaluates
  ``exp_space_objective(code, point, fastexp_vec(s * step), ...)``, an accepted try does
  ``update_point(point, dl, leaf)`` and ``u += s * step``; the leaves are ``float32(lr) * u``. Every
  decision and every leaf value is then CatBoost's, bit for bit.
- **Objective only.** ``point = exp(m)`` from the row's exact double margin ``m = A + u[leaf]`` and
  Newton steps in the engine's own arithmetic. Logloss and CrossEntropy: every decision matched
  CatBoost's on all measured models. Poisson: a few percent of the trees take another path, always
  at a try whose ``|s * step|`` is at most 2.5e-13 -- Newton steps at the rounding-noise floor of
  the leaf sums, whose acceptance depends on how they round. Leaves stay within ~2e-13 of
  CatBoost's, but are not bit-identical for any loss.

Why the tables are not built with numpy
---------------------------------------
CatBoost builds both tables at load time with the process's C library (``exp2`` for :data:`TBL`,
``exp`` for :data:`T16`). Python's :func:`math.exp2` and :func:`math.exp` call that same C library;
numpy's ``exp2``/``exp`` are numpy's own SIMD code and differ in about 100 entries. On glibc (2.36)
:data:`TBL` equals the correctly rounded values; :data:`T16` does too except at ``x = 2**-53`` and
``x = 2**-26``, where glibc's ``exp`` is one ulp low -- and so is CatBoost's table (its scalar
``fast_exp(2**-26)`` returns that low value), so a correctly rounded table would be wrong there.
The tests check both tables against exact decimal arithmetic and against the C library.

Numerics
--------
No ``fastmath`` (no contraction into FMA, no reassociation). Float32 quantities are typed float32
throughout; constants are wrapped in ``np.float32``. The scalar tail of :func:`fastexp_vec` needs one
fused multiply-add, which numba does not expose: :func:`_fma` computes it exactly with error-free
transformations and round-to-odd (Boldo and Melquiond, 2008). Bit casts are LLVM bitcasts.
"""

from __future__ import annotations

import math
import struct
from typing import Any, NamedTuple

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic
from numpy.typing import NDArray

from .. import _jit as numba
from .indexing import INDEX

_jit = numba.njit(cache=True, nogil=True)

#: Loss codes of :func:`exp_space_objective` (this module's own numbering).
CB_LOGLOSS = 0
CB_CROSS_ENTROPY = 1
CB_POISSON = 2

# ---------------------------------------------------------------------------------- bit casts


def _bitcast(name: str, src: Any, dst: Any, llvm_dst: Any) -> Any:
    """A compiled-only function reinterpreting the bits of a ``src`` value as ``dst`` (an LLVM
    bitcast: no conversion, no rounding)."""

    def typer(typingctx: Any, x: Any) -> Any:
        if x != src:
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.bitcast(args[0], llvm_dst)

        return dst(src), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


#: float64 -> its uint64 bit pattern, and back; float32 <-> uint32 likewise.
_f64_bits: Any = _bitcast("_f64_bits", types.float64, types.uint64, ir.IntType(64))
_f64_from: Any = _bitcast("_f64_from", types.uint64, types.float64, ir.DoubleType())
_f32_bits: Any = _bitcast("_f32_bits", types.float32, types.uint32, ir.IntType(32))
_f32_from: Any = _bitcast("_f32_from", types.uint32, types.float32, ir.FloatType())


# ---------------------------------------------------------------------------------- tables

_MANT = (1 << 52) - 1


def _bits(v: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", v))[0])


def _build_tbl() -> NDArray[np.uint64]:
    """``TBL[i]``: the 52 mantissa bits of ``2**(i/2048)``, i = 0..2047, from the C library's exp2."""
    return np.array([_bits(math.exp2(i / 2048.0)) & _MANT for i in range(2048)], dtype=np.uint64)


def _build_t16() -> NDArray[np.float64]:
    """``T16[h]``: ``exp`` (C library) of the float64 whose top 16 bits are ``h``, the rest 0.

    Only the entries with ``2**-55 <= |x| < 2**10`` are computed (about 2000 calls); outside that
    range (inf and NaN computed too) ``exp`` is 1.0 (``|x| < 2**-54`` rounds to 1) or inf / 0
    (``|x| >= 1024``), which is what every C library returns there.
    """
    out = np.empty(65536)
    for h in range(65536):
        expo = (h >> 4) & 0x7FF
        neg = h >> 15
        if expo < 1023 - 55:
            out[h] = 1.0
        elif expo < 1023 + 10 or expo == 0x7FF:
            x = struct.unpack("<d", struct.pack("<Q", h << 48))[0]
            try:
                out[h] = math.exp(x)
            except OverflowError:
                out[h] = math.inf
        else:
            out[h] = 0.0 if neg else math.inf
    return out


#: (2048,) uint64: mantissa bits of ``2**(i/2048)`` (C library; correctly rounded on glibc).
TBL: NDArray[np.uint64] = _build_tbl()
#: (65536,) float64: C-library ``exp`` of each float64 with 48 zero low bits (:func:`fast_exp_scalar`).
T16: NDArray[np.float64] = _build_t16()

# ---------------------------------------------------------------------------------- FastExp

_A = float.fromhex("0x1.71547652b82fep+11")  # 2048 / ln 2, rounded to double (2954.639443740597)
_RA = 1.0 / _A
_B = float(3 << 51)  # adding B leaves round_half_even(x * A) in the low mantissa bits
_C2 = 0.16666666685227835064
_C3 = 3.0000000027955394
_VMAX = 709.78272569338397  # clamps of the 4-wide body
_VMIN = -708.39641853226408
_SMAX = 709.78271289338397  # the scalar tail returns inf from here on (and 0 at or below _VMIN)
_EXP_ADD = np.uint64((1 << 21) - (1 << 11))  # 0x1FF800: exponent bias, shifted by the table bits
_SH11 = np.uint64(11)
_SH52 = np.uint64(52)
_IDX = np.uint64(2047)


@_jit
def _two_sum(a: float, b: float) -> tuple[float, float]:
    """``s + e == a + b`` exactly, ``s = RN(a + b)`` (Knuth)."""
    s = a + b
    bp = s - a
    ap = s - bp
    return s, (a - ap) + (b - bp)


@_jit
def _two_prod(a: float, b: float) -> tuple[float, float]:
    """``p + e == a * b`` exactly, ``p = RN(a * b)`` (Dekker's split product; no FMA used).

    Exact while ``|a|, |b| < 2**995`` and the product's error is not below the subnormal range.
    """
    p = a * b
    c = 134217729.0 * a  # 2**27 + 1
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


@_jit
def _fma(a: float, b: float, c: float) -> float:
    """``a * b + c`` rounded once (what an FMA instruction returns), for finite arguments in the
    range of :func:`_two_prod`: exact product and sum, the low part rounded to odd, then one
    round-to-nearest (Boldo and Melquiond's emulation, correct for binary64)."""
    uh, ul = _two_prod(a, b)
    th, tl = _two_sum(c, uh)
    v, e = _two_sum(tl, ul)
    if e != 0.0:
        bits = _f64_bits(v)
        if (bits & np.uint64(1)) == np.uint64(0):  # round to odd: step one ulp toward the exact sum
            if (e > 0.0) == (v > 0.0):
                v = _f64_from(bits + np.uint64(1))
            else:
                v = _f64_from(bits - np.uint64(1))
    return th + v


@_jit
def _expd(x: float, tail: bool) -> float:
    """One element of the vector exp: the 4-wide body's formula, or with ``tail`` the scalar one
    (0 / inf limits and a fused multiply-add in the polynomial)."""
    if tail:
        if x <= _VMIN:
            return 0.0
        if x >= _SMAX:
            return math.inf
    else:
        if x > _VMAX:
            x = _VMAX
        if x < _VMIN:
            x = _VMIN
    d = x * _A + _B
    di = _f64_bits(d)
    t = (d - _B) * _RA - x
    u = ((di + _EXP_ADD) >> _SH11) << _SH52
    if tail:
        y = _fma((_C3 - t) * (t * t), _C2, -t) + 1.0
    else:
        y = ((_C3 - t) * (t * t)) * _C2
        y = (y - t) + 1.0
    return y * _f64_from(u | TBL[di & _IDX])


@_jit
def fastexp_vec(x: NDArray[np.float64], out: NDArray[np.float64]) -> None:
    """``out[i] = exp(x[i])`` as CatBoost's vector FastExp computes it on one contiguous vector.

    ``x``, ``out``: (n,) float64; ``out`` may be ``x``. This mirrors the exp CatBoost applies to a
    leaf-delta vector (every backtracking try, every accepted step, the per-tree approx update) on
    an AVX2 machine: the first ``4 * (n // 4)`` elements take the 4-wide body (input clamped to
    [-708.396..., 709.782...], no FMA), the last ``n % 4`` the scalar routine (0 at or below the
    lower limit, inf from the upper one, one fused multiply-add). Relative error about 3e-15.
    NaN inputs are not mirrored.
    """
    n = x.shape[0]
    nv = n - n % 4
    for i in range(n):
        out[i] = _expd(x[i], i >= nv)


@_jit
def fast_exp_scalar(x: float) -> float:
    """CatBoost's scalar table exp (relative error up to ~3e-8; 1e-14 to 1e-11 for |x| < 3; its
    glibc-based table is not correctly rounded at 2**-53 and 2**-26), used for the exp-space starting
    approx ``fast_exp(bias)`` of a ``boost_from_average`` model: four rounds of "multiply by the
    table value of the top 16 bits and remove those bits", then times ``1 + remainder``."""
    res = 1.0
    arg = x
    top = np.uint64(0xFFFF000000000000)
    for _ in range(4):
        b = _f64_bits(arg)
        res *= T16[b >> np.uint64(48)]
        arg -= _f64_from(b & top)
    return res * (1.0 + arg)


# ---------------------------------------------------------------------------------- FastLogf

_L_SCALE = np.float32(1.1920928955078125e-7)  # 2**-23
_L_C0 = np.float32(124.22551499)
_L_C1 = np.float32(1.498030302)
_L_C2 = np.float32(1.72587999)
_L_C3 = np.float32(0.3520887068)
_L_LN2 = np.float32(0.69314718)
_L_MANT = np.uint32(0x007FFFFF)
_L_HALF = np.uint32(0x3F000000)
_ONE32 = np.float32(1.0)
_HALF32 = np.float32(0.5)
_DBL_MAX = 1.7976931348623157e308


@numba.njit(cache=True, nogil=True, error_model="numpy")
def fastlogf(v: float) -> np.float32:
    """CatBoost's FastLogf of a double: ``v`` rounded to float32, then a float32 rational
    approximation of ``log`` from its bit pattern (absolute error up to about 1e-4;
    ``fastlogf(1) = -1.65e-6``). Returns float32.

    Compiled so that a loop of it vectorizes (:func:`_ce_terms`): numpy's error model (its one
    division, by ``_L_C3 + m >= 0.85``, never divides by zero; numba's default model would branch
    to raise ZeroDivisionError there), and the bit pattern converted to float32 from uint32 directly
    (``uitofp``; the same single rounding as through int64, which x86-64 without AVX-512 has no
    vector instruction for)."""
    f = np.float32(v)
    b = _f32_bits(f)
    y = np.float32(b) * _L_SCALE
    m = _f32_from(np.uint32((b & _L_MANT) | _L_HALF))
    return (((y - _L_C0) - _L_C1 * m) - _L_C2 / (_L_C3 + m)) * _L_LN2


# ---------------------------------------------------------------------------------- objective


@_jit
def objective_ranges(n_rows: int, thread_count: int) -> int:
    """The number of row ranges CatBoost's metric evaluation splits ``n_rows`` rows into.

    ``min(thread_count, ceil(n_rows / min_block))`` with ``min_block`` 1000 for
    ``10000 < n_rows < 100000`` and 10000 otherwise (so 1 whenever ``n_rows <= 10000``); at least 1.
    ``thread_count`` is the model's training ``thread_count`` (a resolved positive count, not -1).
    ``n_rows`` is the number of rows CatBoost trained on (after a deletion: one less).
    """
    min_block = 1000 if 10000 < n_rows < 100000 else 10000
    k = min(thread_count, (n_rows + min_block - 1) // min_block)
    return max(k, 1)


class SumOrder(NamedTuple):
    """The rows the fast objective sums, at their positions in the booster's summation order, one
    row deleted or none (``n_eff`` rows; the arrays may hold more, which are not read). What a try
    reads per row and is the same for every try is kept here, at the row's position, so that the
    tries read it in order (:func:`fill_sum_order`, :func:`order_leaves`); so is the exp-space
    approx where it is computed for a try (``pt``, :func:`.objective.fresh_points`: by the try
    itself or by the refit's team beforehand)."""

    rows: NDArray[np.int64]  # (>= n_eff,) array row at each position
    prob: NDArray[np.float32]  # (>= n_eff,) its target as the loss reads it: Logloss float32(y) > 0.5
    # as 1 or 0, else float32(y)
    w: NDArray[np.float32]  # (>= n_eff,) its weight, float32 as CatBoost stores it
    leaf: NDArray[np.int32]  # (>= n_eff,) its leaf in the tree being decided
    pt: NDArray[np.float64]  # (>= n_eff,) its row's exp-space approx, where computed for a try
    here: NDArray[np.int64]  # (>= n_eff,) the position itself: ``pt`` is read through it


@_jit
def new_sum_order(n: int) -> SumOrder:
    """An unfilled :class:`SumOrder` for up to ``n`` rows."""
    f32 = np.float32
    return SumOrder(np.empty(n, np.int64), np.empty(n, f32), np.empty(n, f32), np.empty(n, np.int32),
                    np.empty(n), np.arange(n))


@_jit
def fill_sum_order(
    so: SumOrder, code: int, y: NDArray[np.float64], w: NDArray[np.float64], order: NDArray[np.int64],
    skip: int,
) -> None:
    """Fill ``so``'s rows, targets and weights for loss ``code`` (see :func:`exp_space_objective`):
    ``order`` (n,) the array row at each position, position ``skip`` left out (-1: none; the rows
    after it move up one place), ``y``, ``w`` (n,) in array order."""
    for j in range(order.shape[0] - (1 if skip >= 0 else 0)):
        i = order[j + 1 if 0 <= skip <= j else j]
        so.rows[j] = i
        y32 = np.float32(y[i])
        if code == CB_LOGLOSS:
            so.prob[j] = _ONE32 if y32 > _HALF32 else np.float32(0.0)
        else:
            so.prob[j] = y32
        so.w[j] = np.float32(w[i])


@_jit
def order_leaves(so: SumOrder, n_eff: int, leaf: NDArray[np.int32]) -> None:
    """``so.leaf`` of its first ``n_eff`` positions from ``leaf`` (n,), a tree's leaf of each row in
    array order: once per tree, for all of its tries."""
    for j in range(n_eff):
        so.leaf[j] = leaf[so.rows[j]]


@_jit
def _ce_terms(
    fa: NDArray[np.float32], fe: NDArray[np.float32], log_d: NDArray[np.float32], prob: NDArray[np.float32],
    w: NDArray[np.float32], out: NDArray[np.float32],
) -> None:
    """Each row's weighted float32 cross-entropy term of the 4-lane part into ``out`` (m,), from
    its exp-space approx and ``e = a * d`` as FastLogf reads them, ``fa = float32(a)`` and ``fe =
    float32(e + 1)``, ``log_d = fastlogf(d)``, ``prob`` and ``w`` (m,) float32: the term of a row
    whose ``e`` did not overflow (the caller mends those that did). All float32, no branch and no
    call survive compilation, so the loop runs on vectors as wide as the float32 lanes. The
    doubles' rounding to float32 (FastLogf's first step) is the caller's, which gathers them: with
    doubles in the loop the compiler filled half a vector's float32 lanes (``docs/performance.md``,
    stop 56)."""
    for j in range(fa.shape[0]):
        non_exp = fastlogf(fa[j]) + log_d[j]
        out[j] = w[j] * (fastlogf(fe[j]) - prob[j] * non_exp)


@_jit
def _ce_block(
    point: NDArray[np.float64], at: NDArray[np.int64], dl: NDArray[np.float64], so: SumOrder, j0: int,
    j1: int,
) -> tuple[float, float]:
    """(Stats0, Stats1) of one block, positions ``j0 <= j < j1``: float32 lanes for the first
    ``4 * ((j1 - j0) // 4)`` rows (lane k: rows k, k+4, ...), then the rest in double.

    Three passes over the block: the rows' approx and ``e`` gathered into position order as
    FastLogf reads them (rounded to float32; the rare row whose ``e`` overflows is counted), their
    terms computed on vectors (:func:`_ce_terms`; the counted rows' mended after), then the four
    lanes summed as four running sums. Measured (Adult-sized blocks, ns per row, one process):
    4.2-4.5 -> 2.8-3.2 with the portable target of the precompiled kernels, 2.3 -> 2.1 with
    AVX-512, against doubles gathered and rounded in the terms' loop (stop 56).
    FastLogf of each leaf's ``dl`` is taken once per leaf, not per row (the same float32 values:
    measured 10-15% of a block). The rows' target, weight and leaf are read in position order from
    ``so``: measured 1.2x faster than lanes picked by a branch per row from data gathered through
    the order where that order is the array's, 2.6x where it is a permutation
    (``docs/performance.md``, stop 41)."""
    log_dl = np.empty(dl.shape[0], dtype=np.float32)
    for lf in range(dl.shape[0]):
        log_dl[lf] = fastlogf(dl[lf])
    # the block's positions counted from 0, leaves and rows indexed ``& INDEX``: no wrap-around
    # (``indexing.INDEX``; no array passed per row: refcounts)
    rows, leaf, prob, w = at[j0:j1], so.leaf[j0:j1], so.prob[j0:j1], so.w[j0:j1]
    m = j1 - j0
    nv = m - m % 4
    fa = np.empty(m, dtype=np.float32)
    fe = np.empty(m, dtype=np.float32)
    log_d = np.empty(m, dtype=np.float32)
    n_over = 0
    for j in range(m):
        lf = leaf[j] & INDEX
        a = point[rows[j] & INDEX]
        e = a * dl[lf]
        fa[j] = np.float32(a)
        fe[j] = np.float32(e + 1.0)
        log_d[j] = log_dl[lf]
        n_over += e > _DBL_MAX
    term = np.empty(nv, dtype=np.float32)
    _ce_terms(fa[:nv], fe[:nv], log_d[:nv], prob[:nv], w[:nv], term)
    for j in range(nv if n_over > 0 else 0):  # rows whose ``e`` overflowed: the other term
        if point[rows[j] & INDEX] * dl[leaf[j] & INDEX] > _DBL_MAX:
            term[j] = w[j] * ((_ONE32 - prob[j]) * (fastlogf(fa[j]) + log_d[j]))
    z = np.float32(0.0)
    a0, a1, a2, a3 = z, z, z, z
    c0, c1, c2, c3 = z, z, z, z
    for j in range(0, nv, 4):
        a0 += term[j]
        c0 += w[j]
        a1 += term[j + 1]
        c1 += w[j + 1]
        a2 += term[j + 2]
        c2 += w[j + 2]
        a3 += term[j + 3]
        c3 += w[j + 3]
    s0 = 0.0
    s1 = 0.0
    if nv > 0:
        s0 = 0.0 + np.float64((a0 + a1) + (a2 + a3))
        s1 = 0.0 + np.float64((c0 + c1) + (c2 + c3))
    for j in range(nv, m):
        non_exp = np.float64(log_d[j]) + np.float64(fastlogf(fa[j]))
        if not point[rows[j] & INDEX] * dl[leaf[j] & INDEX] > _DBL_MAX:
            v = np.float64(fastlogf(fe[j])) - np.float64(prob[j]) * non_exp
        else:
            v = np.float64(_ONE32 - prob[j]) * non_exp
        wd = np.float64(w[j])
        s0 += wd * v
        s1 += wd
    return s0, s1


@_jit
def _poisson_block(
    point: NDArray[np.float64], at: NDArray[np.int64], dl: NDArray[np.float64], so: SumOrder, j0: int,
    j1: int,
) -> tuple[float, float]:
    """(Stats0, Stats1) of one Poisson block, all in double, positions in order: the rows' ``a d``
    gathered, their FastLogf computed on vectors, then summed."""
    # positions counted from 0, rows and leaves indexed ``& INDEX`` (as in :func:`_ce_block`)
    rows, leaf, y32, w = at[j0:j1], so.leaf[j0:j1], so.prob[j0:j1], so.w[j0:j1]
    m = j1 - j0
    e = np.empty(m)
    for j in range(m):
        e[j] = point[rows[j] & INDEX] * dl[leaf[j] & INDEX]
    log_e = np.empty(m, dtype=np.float32)
    for j in range(m):  # on vectors (:func:`fastlogf`)
        log_e[j] = fastlogf(e[j])
    s0 = 0.0
    s1 = 0.0
    for j in range(m):
        wd = np.float64(w[j])
        s0 += (e[j] - np.float64(y32[j]) * np.float64(log_e[j])) * wd
        s1 += wd
    return s0, s1


@_jit
def n_blocks(n_eff: int, n_ranges: int) -> int:
    """How many blocks :func:`exp_space_objective` sums ``n_eff`` rows in: each of ``n_ranges``
    equal ranges (size ``ceil(n_eff / n_ranges)``) cut into blocks of up to 4096 rows."""
    size = max((n_eff + n_ranges - 1) // n_ranges, 1)
    count = 0
    for frm in range(0, n_eff, size):
        count += (min(frm + size, n_eff) - frm + 4095) // 4096
    return count


@_jit
def block_bounds(n_eff: int, n_ranges: int, p: int) -> tuple[int, int, bool]:
    """Layout rows ``b0 .. b1 - 1`` of block ``p`` (see :func:`n_blocks`), and whether it is the
    last block of its range."""
    size = max((n_eff + n_ranges - 1) // n_ranges, 1)
    for frm in range(0, n_eff, size):
        to = min(frm + size, n_eff)
        here = (to - frm + 4095) // 4096
        if p < here:
            b0 = frm + 4096 * p
            return b0, min(b0 + 4096, to), p == here - 1
        p -= here
    return n_eff, n_eff, True


@_jit
def block_stats(
    code: int, point: NDArray[np.float64], at: NDArray[np.int64], dl: NDArray[np.float64], so: SumOrder,
    b0: int, b1: int,
) -> tuple[float, float]:
    """(Stats0, Stats1) of the block of positions ``b0 .. b1 - 1`` of ``so`` (its leaves those of
    the tree ``dl`` belongs to), the exp-space approx of position ``j`` being ``point[at[j]]``:
    ``point`` in array order read through ``at = so.rows`` (as :func:`exp_space_objective` takes
    it), or ``so.pt`` through ``at = so.here`` where a try computed it at the positions; other
    arguments as in :func:`exp_space_objective`.

    A try that computes the approx writes it at the positions: a thread's blocks are a contiguous
    run of them (:func:`.objective.part`). Written in array order instead, both threads of a team
    wrote the same cache lines wherever the booster's order is a permutation (categorical data):
    a team of two then took one deleted row's SinglePoint LeafRefit on ``CatBoostClassifier()``
    longer than one thread did (``docs/performance.md``, stop 53).
    """
    if code == CB_POISSON:
        return _poisson_block(point, at, dl, so, b0, b1)
    return _ce_block(point, at, dl, so, b0, b1)


@_jit
def combine_blocks(n_eff: int, n_ranges: int, stats: NDArray[np.float64]) -> float:
    """``Stats0 / Stats1`` (0 when the weights sum to 0) from each block's sums ``stats`` (blocks,
    2): blocks added into their range, ranges into the total, in order, in double."""
    S0 = 0.0
    S1 = 0.0
    r0 = 0.0
    r1 = 0.0
    for p in range(n_blocks(n_eff, n_ranges)):
        r0 += stats[p, 0]
        r1 += stats[p, 1]
        if block_bounds(n_eff, n_ranges, p)[2]:
            S0 += r0
            S1 += r1
            r0 = 0.0
            r1 = 0.0
    return S0 / S1 if S1 != 0.0 else 0.0


@_jit
def exp_space_objective(
    code: int, point: NDArray[np.float64], dl: NDArray[np.float64], leaf: NDArray[np.int32],
    y: NDArray[np.float64], w: NDArray[np.float64], n_ranges: int, skip: int = -1, order: Any = None,
) -> float:
    """CatBoost's Obj of one backtracking try: the weighted mean loss at exp-space approx
    ``point * dl[leaf]``, computed the way its metric evaluation does.

    Parameters
    ----------
    code : int
        :data:`CB_LOGLOSS` (``prob = float32(y) > 0.5``), :data:`CB_CROSS_ENTROPY` (``prob =
        float32(y)``) or :data:`CB_POISSON`.
    point : (n,) float64
        Each row's exp-space approx before the try (``exp`` of its margin), in training row order.
    dl : (n_leaf,) float64
        ``fastexp_vec`` of the try's leaf deltas ``s * step`` (all ones, i.e. ``fastexp_vec`` of
        zeros, for the walker's starting value).
    leaf : (n,) int32 (any integer dtype)
        Each row's leaf in this tree.
    y, w : (n,) float64
        Targets and effective weights (user weight times class weight; ones when unweighted). Both
        are used as float32, as CatBoost stores them, so pass float32-representable values.
    n_ranges : int
        :func:`objective_ranges` of the number of rows CatBoost trained on and its thread_count.
    skip : int
        An array row to leave out *as if deleted* from the arrays (the rows after it move up one
        place in the float32 lanes and 4096-row blocks); -1 for none. A row CatBoost trained with
        weight 0 is not deleted: keep it (``skip=-1``) with ``w = 0``. With ``order``, a position
        of ``order``.
    order : (n,) int64, optional
        The order CatBoost sums the rows in (array row at each position: its averaging fold, which
        differs from the data order for categorical data); None: array order.

    Rows are split into ``n_ranges`` equal ranges (size ``ceil(n_eff / n_ranges)``), each range into
    blocks of up to 4096 rows. Logloss / CrossEntropy blocks sum per-row float32 terms
    ``FastLogf(1 + a d) - prob (FastLogf(a) + FastLogf(d))`` in 4 float32 lanes (lane k: rows k,
    k+4, ...) and the last ``L % 4`` rows in double; Poisson blocks sum ``a d - y FastLogf(a d)`` in
    double. Blocks add into ranges and ranges into the total in order, in double. Returns
    ``Stats0 / Stats1`` (0 when the weights sum to 0).
    """
    n = point.shape[0]
    n_eff = n - (1 if skip >= 0 else 0)
    so = new_sum_order(n)
    fill_sum_order(so, code, y, w, np.arange(n) if order is None else order, skip)
    order_leaves(so, n_eff, leaf)
    nb = n_blocks(n_eff, n_ranges)
    stats = np.empty((nb, 2))
    for p in range(nb):
        b0, b1, _ = block_bounds(n_eff, n_ranges, p)
        stats[p, 0], stats[p, 1] = block_stats(code, point, so.rows, dl, so, b0, b1)
    return combine_blocks(n_eff, n_ranges, stats)


_FLT_EPS = 1.1920928955078125e-07


@_jit
def cb_newton_step(
    code: int, point: NDArray[np.float64], leaf: NDArray[np.int32], y: NDArray[np.float64],
    w: NDArray[np.float64], l2s: float, skip: int, step: NDArray[np.float64],
) -> None:
    """CatBoost's Newton leaf step from the exp-space approx, bit for bit: needed for leaf values
    bit-identical to CatBoost's (and for Poisson decisions at the noise floor; see the module doc).

    ``point``, ``leaf``, ``y``, ``w``: (n,) as in :func:`exp_space_objective` (``skip`` likewise);
    ``step``: (n_leaf,) output, ``step[l] = G[l] / (-H[l] + l2s)`` with CatBoost's signs
    (``der1 = t - p``, ``der2 = -p (1 - p)``, ``p = 1 - 1 / (1 + a)``, each times ``w``; Poisson
    ``der1 = t - a``, ``der2 = -a``; ``t = float32(y)``, ``a = point``). The sums follow CatBoost's
    order: the layout rows form 1 block (fewer than 10000 rows) or blocks of ``ceil(n / 128)`` rows;
    inside a block each leaf adds its rows in order; a leaf adds the block partial sums in block
    order, skipping a block where its weight sum is at most FLT_EPSILON. ``l2s`` is CatBoost's
    scaled L2, ``float32(l2_leaf_reg) * sum(w) / n``.
    """
    n_leaf = step.shape[0]
    n = point.shape[0] - (1 if skip >= 0 else 0)
    size = max((n + (1 if n < 10000 else 128) - 1) // (1 if n < 10000 else 128), 1)
    G = np.zeros(n_leaf)
    H = np.zeros(n_leaf)
    gb = np.empty(n_leaf)
    hb = np.empty(n_leaf)
    wb = np.empty(n_leaf)
    for b0 in range(0, n, size):
        gb[:] = 0.0
        hb[:] = 0.0
        wb[:] = 0.0
        for j in range(b0, min(b0 + size, n)):
            i = j + 1 if 0 <= skip <= j else j  # array row of layout row j
            a = point[i]
            t = np.float64(np.float32(y[i]))
            wd = np.float64(np.float32(w[i]))
            if code == CB_POISSON:
                d1 = t - a
                d2 = -a
            else:
                p = 1.0 - 1.0 / (1.0 + a)
                d1 = t - p
                d2 = -p * (1.0 - p)
            lf = leaf[i]
            gb[lf] += d1 * wd
            hb[lf] += d2 * wd
            wb[lf] += wd
        for lf in range(n_leaf):
            if wb[lf] > _FLT_EPS:
                G[lf] += gb[lf]
                H[lf] += hb[lf]
    for lf in range(n_leaf):
        step[lf] = G[lf] / (-H[lf] + l2s)


@_jit
def update_point(point: NDArray[np.float64], dl: NDArray[np.float64], leaf: NDArray[np.int32]) -> None:
    """CatBoost's exp-space update on an accepted step (and after each tree, with the tree's leaf
    values): ``point[i] *= dl[leaf[i]]`` in double. ``point`` (n,), ``dl`` (n_leaf,) from
    :func:`fastexp_vec`, ``leaf`` (n,)."""
    for i in range(point.shape[0]):
        point[i] *= dl[leaf[i]]
