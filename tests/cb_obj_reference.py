"""numpy reference for ``influence_gbdt.engine.fastobj``: CatBoost's backtracking objective of the exp-approx
losses (Logloss, CrossEntropy, Poisson) and the exp-space walker around it, bit for bit.

Ported from the project notes' mirror (``notes/scripts/catboost_obj_core.py``, our own code written from
the algorithm description in ``notes/catboost-obj.md``; measured bit-exact against CatBoost 1.2.10's
compiled functions and against 740 real trees plus 60 deletion retrains). It is written independently of
the numba module: vectorized numpy, tables built through ``ctypes`` from the C library, and the fused
multiply-add of the FastExp tail computed in exact rational arithmetic.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from fractions import Fraction

import numpy as np

F32 = np.float32
DBL_MAX = float(np.finfo(np.float64).max)
FLT_EPS = float(np.finfo(np.float32).eps)

# ----------------------------------------------------------------------------- FastExp
_S = 2048
_A = float(2048.0 / float(np.log(2.0)))
_RA = 1.0 / _A
_B = float(3 << 51)
_C2 = 0.16666666685227835064
_C3 = 3.0000000027955394
_VMAX = 709.78272569338397
_VMIN = -708.39641853226408
_SMAX = 709.78271289338397
_MANT = (1 << 52) - 1


def _libm():
    name = ctypes.util.find_library("m")
    return ctypes.CDLL(name) if name else None


def _table():
    lib = _libm()
    if lib is None:  # no separate libm (e.g. Windows): Python's math calls the same C library
        vals = np.array([math.exp2(i / _S) for i in range(_S)])
    else:
        lib.exp2.restype = ctypes.c_double
        lib.exp2.argtypes = [ctypes.c_double]
        vals = np.array([lib.exp2(i * (1.0 / _S)) for i in range(_S)], dtype=np.float64)
    return vals.view(np.uint64) & np.uint64(_MANT)


TBL = _table()


def fastexp_body(x):
    """4-wide vector body (no FMA), elementwise."""
    x = np.minimum(np.asarray(x, np.float64), _VMAX)
    x = np.maximum(x, _VMIN)
    d = x * _A + _B
    di = d.view(np.uint64)
    iax = TBL[(di & np.uint64(_S - 1)).astype(np.int64)]
    t = (d - _B) * _RA - x
    u = ((di + np.uint64((1 << 21) - (1 << 11))) >> np.uint64(11)) << np.uint64(52)
    y = ((_C3 - t) * (t * t)) * _C2
    y = (y - t) + 1.0
    return y * (u | iax).view(np.float64)


def fma(a, b, c):
    """Correctly rounded a*b+c for finite doubles (exact rationals)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _fastexp_tail(x):
    x = float(x)
    if x <= _VMIN:
        return 0.0
    if x >= _SMAX:
        return float("inf")
    d = x * _A + _B
    di = int(np.array([d]).view(np.uint64)[0])
    iax = int(TBL[di & (_S - 1)])
    t = (d - _B) * _RA - x
    u = (((di + (1 << 21) - (1 << 11)) >> 11) << 52) & ((1 << 64) - 1)
    y = fma((_C3 - t) * (t * t), _C2, -t) + 1.0
    return y * float(np.array([u | iax], dtype=np.uint64).view(np.float64)[0])


def fastexp(x):
    """FastExp of one contiguous vector: body for 4*floor(n/4) elements, FMA scalar tail for the rest."""
    x = np.asarray(x, np.float64).ravel()
    nv = x.size & ~3
    out = np.empty(x.size)
    out[:nv] = fastexp_body(x[:nv])
    for i in range(nv, x.size):
        out[i] = _fastexp_tail(x[i])
    return out


def _table16():
    lib = _libm()
    xs = (np.arange(65536, dtype=np.uint64) << np.uint64(48)).view(np.float64)
    if lib is None:
        def f(v):
            try:
                return math.exp(v)
            except OverflowError:
                return math.inf
    else:
        lib.exp.restype = ctypes.c_double
        lib.exp.argtypes = [ctypes.c_double]
        f = lib.exp
    return np.array([f(float(v)) for v in xs])


_T16 = None


def fast_exp_scalar(x):
    """The scalar table fast_exp, elementwise."""
    global _T16
    if _T16 is None:
        _T16 = _table16()
    arg = np.array(x, np.float64, ndmin=1)
    res = np.ones_like(arg)
    mask = np.uint64(0xFFFF000000000000)
    for _ in range(4):
        b = arg.view(np.uint64)
        res = res * _T16[(b >> np.uint64(48)).astype(np.int64)]
        arg = arg - (b & mask).view(np.float64)
    return res * (1 + arg)


# ----------------------------------------------------------------------------- FastLogf
_L_SCALE = F32(1.1920928955078125e-7)
_L_C0 = F32(124.22551499)
_L_C1 = F32(1.498030302)
_L_C2 = F32(1.72587999)
_L_C3 = F32(0.3520887068)
_L_LN2 = F32(0.69314718)


def fastlogf(xf):
    """FastLogf on float32 input (array), float32 output."""
    xf = np.asarray(xf, dtype=np.float32)
    bits = xf.view(np.uint32)
    y = bits.astype(np.int64).astype(np.float32) * _L_SCALE
    mx = ((bits & np.uint32(0x007FFFFF)) | np.uint32(0x3F000000)).view(np.float32)
    return (((y - _L_C0) - _L_C1 * mx) - _L_C2 / (_L_C3 + mx)) * _L_LN2


# ----------------------------------------------------------------------------- objective
def blocks(n, threads=1):
    """[[(start, end) of each <= 4096 block] of each range]."""
    min_block = 1000 if 10000 < n < 100000 else 10000
    k = max(1, min(threads, -(-n // min_block)))
    size = max(1, -(-n // k))
    out = []
    for frm in range(0, n, size):
        to = min(frm + size, n)
        out.append([(b, min(b + 4096, to)) for b in range(frm, to, 4096)])
    return out


def logloss_block(e_old, dlt, prob, w):
    """(Stats0, Stats1) of one Logloss / CrossEntropy block."""
    n = e_old.size
    nv = n & ~3
    s0 = s1 = 0.0
    if nv:
        ea, da, pa, wa = e_old[:nv], dlt[:nv], prob[:nv], w[:nv]
        non_exp = fastlogf(ea.astype(np.float32)) + fastlogf(da.astype(np.float32))
        e = ea * da
        l1 = fastlogf((e + 1.0).astype(np.float32))
        val = np.where(e > DBL_MAX, (F32(1.0) - pa) * non_exp, l1 - pa * non_exp)
        lane0 = np.cumsum((wa * val).reshape(-1, 4), axis=0, dtype=np.float32)[-1]
        lane1 = np.cumsum(wa.reshape(-1, 4), axis=0, dtype=np.float32)[-1]
        s0 = 0.0 + float((lane0[0] + lane0[1]) + (lane0[2] + lane0[3]))
        s1 = 0.0 + float((lane1[0] + lane1[1]) + (lane1[2] + lane1[3]))
    for i in range(nv, n):
        non_exp = float(fastlogf(np.float32(dlt[i]))) + float(fastlogf(np.float32(e_old[i])))
        e = e_old[i] * dlt[i]
        wi = float(w[i])
        if abs(e) != float("inf"):
            v = float(fastlogf(np.float32(e + 1.0))) - float(prob[i]) * non_exp
        else:
            v = float(F32(1.0) - prob[i]) * non_exp
        s0 += wi * v
        s1 += wi
    return s0, s1


def poisson_block(e_old, dlt, target, w):
    e = e_old * dlt
    non_exp = fastlogf(e.astype(np.float32)).astype(np.float64)
    c0 = (e - target.astype(np.float64) * non_exp) * w.astype(np.float64)
    s0 = float(np.cumsum(c0)[-1]) if c0.size else 0.0
    s1 = float(np.cumsum(w.astype(np.float64))[-1]) if c0.size else 0.0
    return s0, s1


def objective(loss, e_old, dl, leaf, target, w, threads=1):
    """Obj at exp-space point e_old with exponentiated leaf deltas dl (n_leaf,)."""
    dlt = np.asarray(dl, np.float64)[leaf]
    target = np.asarray(target, np.float32)
    w = np.asarray(w, np.float32)
    if loss == "Poisson":
        def blk(a, b):
            return poisson_block(e_old[a:b], dlt[a:b], target[a:b], w[a:b])
    else:
        prob = (target > F32(0.5)).astype(np.float32) if loss == "Logloss" else target

        def blk(a, b):
            return logloss_block(e_old[a:b], dlt[a:b], prob[a:b], w[a:b])
    S0 = S1 = 0.0
    for rng in blocks(e_old.size, threads):
        r0 = r1 = 0.0
        for a, b in rng:
            b0, b1 = blk(a, b)
            r0 += b0
            r1 += b1
        S0 += r0
        S1 += r1
    return S0 / S1 if S1 != 0 else 0.0


# ----------------------------------------------------------------------------- steps and the walker
def ders(loss, e, target, w):
    t = np.asarray(target, np.float32).astype(np.float64)
    if loss in ("Logloss", "CrossEntropy"):
        p = 1 - 1 / (1 + e)
        d1, d2 = t - p, -p * (1 - p)
    else:
        d1, d2 = t - e, -e
    wd = np.asarray(w, np.float32).astype(np.float64)
    return d1 * wd, d2 * wd


def leaf_sums(leaf, d1, d2, w, n_leaf):
    """CalcLeafDers order: 1 block (n < 10000) or blocks of ceil(n/128) rows; a leaf skips a block
    whose weight sum is <= FLT_EPSILON."""
    n = leaf.size
    bs = max(1, -(-n // (1 if n < 10000 else 128)))
    G = np.zeros(n_leaf)
    H = np.zeros(n_leaf)
    wd = np.asarray(w, np.float32).astype(np.float64)
    for b0 in range(0, n, bs):
        b1 = min(b0 + bs, n)
        lf = leaf[b0:b1]
        Wb = np.bincount(lf, wd[b0:b1], n_leaf)
        Gb = np.bincount(lf, d1[b0:b1], n_leaf)
        Hb = np.bincount(lf, d2[b0:b1], n_leaf)
        use = Wb > FLT_EPS
        G = np.where(use, G + Gb, G)
        H = np.where(use, H + Hb, H)
    return G, H


def newton_step(loss, e, target, w, leaf, n_leaf, l2s):
    d1, d2 = ders(loss, e, target, w)
    G, H = leaf_sums(leaf, d1, d2, w, n_leaf)
    return G / (-H + l2s)


def walk_tree(loss, e0, target, w, leaf, n_leaf, l2s, iters, threads=1, record=None):
    """FastGradientWalker (AnyImprovement) in exp space: returns the raw step sum (n_leaf,)."""
    point = np.array(e0, np.float64)
    total = np.zeros(n_leaf)
    cur = objective(loss, point, np.ones(n_leaf), leaf, target, w, threads)
    it = 0
    while it < iters:
        step = newton_step(loss, point, target, w, leaf, n_leaf, l2s)
        scale = 1.0
        while True:
            sstep = scale * step
            dl = fastexp(sstep)
            new = objective(loss, point, dl, leaf, target, w, threads)
            ok = new < cur
            if record is not None:
                record.append((it, scale, bool(ok)))
            if ok:
                cur = new
                point = point * dl[leaf]
                total = total + sstep
                break
            scale /= 2
            it += 1
            if it >= iters:
                break
        it += 1
    return total
