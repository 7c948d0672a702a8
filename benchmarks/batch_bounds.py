"""What bounds the reverse sweep of a batch of test points (issue 27's "100 test points <= 10x one").

The batch's margins pass (``engine/reverse1.py``, ``_logloss_margins``) did, until stop 76, for
each row and round, for each of the batch's ``B`` objectives: ``a = aT[j, b] + (GT[k, b] * wdg +
DT[k, b] * wdh)`` (the adjoints of the leaf's sums G and H + lam), stored ``a`` and added it to the
sums ``PT[g, b]`` of the row's leaf ``g`` in the next tree. This script times that loop alone on a
synthetic model of Adult's size (numba, one thread, no package code), and beside it:

- **factored** (the engine's loop since stop 76): ``DT[k, b]`` is ``GT[k, b]`` times the step's
  ratio ``rd / rg``, the same for every objective, so a row computes ``f = wdg + ratio * wdh`` once
  and each objective adds ``GT[k, b] * f``: one product and one adjoint read per objective instead
  of two (another rounding: the same sums to a few ulps);

and two ways of cutting its memory traffic:

- **rows that fit the L2 cache** (fewer rows): if the pass were bound by reading and writing the
  ``(rows, B)`` margin adjoints from the L3 cache or memory, a row would cost much less here;
- **blocked rounds**: one pass over the rows per ``K`` rounds, each row's adjoints updated through
  the ``K`` rounds in registers and gathered into the ``K`` next trees' leaves; each round's leaf
  sums then take the rounds above it in the block through per-leaf-pair sums of the rows'
  derivatives (precomputed, the same for every batch). The adjoints are read and written once
  per ``K`` rounds, but the leaf sums are added in another order: not bit-identical.

Then the cost per objective of one row and round by the batch's width, rows in the L2 cache.

Run: ``python benchmarks/batch_bounds.py [--rows 32561] [--rounds 100] [--leaves 31]``. Prints
Markdown; best of five calls each, the variants alternating.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numba
import numpy as np
from numpy.typing import NDArray


@numba.njit(inline="always")
def _derivs(p: float) -> tuple[float, float]:
    """w dg/dm and w dh/dm of log loss at probability ``p`` (weight 1)."""
    h = p * (1.0 - p)
    return h, h * (1.0 - 2.0 * p)


@numba.njit
def _leaf_level(r: int, u: NDArray[np.float64], GT: NDArray[np.float64], DT: NDArray[np.float64],
                c1: NDArray[np.float64], c2: NDArray[np.float64]) -> None:
    """A stand-in for a round's leaf level: leaf-sum adjoints (leaves, B) from leaf adjoints ``u``."""
    for leaf in range(u.shape[0]):
        for b in range(u.shape[1]):
            GT[leaf, b] = c1[r, leaf] * u[leaf, b]
            DT[leaf, b] = c2[r, leaf] * u[leaf, b]


@numba.njit
def per_round(leaf: NDArray[np.int32], p: NDArray[np.float64], c1: NDArray[np.float64],
              c2: NDArray[np.float64], c0: NDArray[np.float64], aT: NDArray[np.float64]) -> None:
    """The sweep as the engine runs it: a pass over the rows per round. ``leaf`` (R, n), ``p``
    (R, n) each row's probability entering each round, ``c0`` (leaves, B) the last round's leaf
    adjoints; ``aT`` (n, B) the rows' margin adjoints (zeros on entry)."""
    R, n = leaf.shape
    L, B = c0.shape
    PT, GT, DT = c0.copy(), np.empty((L, B)), np.empty((L, B))
    for r in range(R - 1, -1, -1):
        _leaf_level(r, PT, GT, DT, c1, c2)
        PT[:] = 0.0
        here, nxt = leaf[r], leaf[max(r - 1, 0)]
        for j in range(n):
            wdg, wdh = _derivs(p[r, j])
            k, g = here[j], nxt[j]
            for b in range(B):
                a = aT[j, b] + (GT[k, b] * wdg + DT[k, b] * wdh)
                aT[j, b] = a
                PT[g, b] += a


@numba.njit
def factored(leaf: NDArray[np.int32], p: NDArray[np.float64], c1: NDArray[np.float64],
             c2: NDArray[np.float64], c0: NDArray[np.float64], aT: NDArray[np.float64]) -> None:
    """:func:`per_round`'s sweep with each row's two derivatives folded into one factor by the
    leaf's ratio ``c2 / c1`` (the engine's ``GT`` times it is its ``DT``)."""
    R, n = leaf.shape
    L, B = c0.shape
    PT, GT, DT = c0.copy(), np.empty((L, B)), np.empty((L, B))
    for r in range(R - 1, -1, -1):
        _leaf_level(r, PT, GT, DT, c1, c2)
        ratio = c2[r] / c1[r]
        PT[:] = 0.0
        here, nxt = leaf[r], leaf[max(r - 1, 0)]
        for j in range(n):
            wdg, wdh = _derivs(p[r, j])
            k, g = here[j], nxt[j]
            f = wdg + ratio[k] * wdh
            for b in range(B):
                a = aT[j, b] + GT[k, b] * f
                aT[j, b] = a
                PT[g, b] += a


@numba.njit
def pair_sums(leaf: NDArray[np.int32], p: NDArray[np.float64], K: int, L: int) -> NDArray[np.float64]:
    """For each block of ``K`` rounds from the last (its first round ``r0``), each round ``r0 - i``
    of it and each round ``r0 - m`` above that (``m < i``): the sums of ``wdg``, ``wdh`` at round
    ``r0 - m`` over the rows in leaf ``l`` of tree ``r0 - i`` and leaf ``l2`` of tree ``r0 - m``:
    ``S[r0, i, m, l, l2, :]``."""
    R, n = leaf.shape
    S = np.zeros((R, K, K, L, L, 2))
    for r0 in range(R - 1, -1, -K):
        for i in range(1, min(K, r0 + 1)):
            for m in range(i):
                for j in range(n):
                    wdg, wdh = _derivs(p[r0 - m, j])
                    S[r0, i, m, leaf[r0 - i, j], leaf[r0 - m, j], 0] += wdg
                    S[r0, i, m, leaf[r0 - i, j], leaf[r0 - m, j], 1] += wdh
    return S


@numba.njit
def blocked(leaf: NDArray[np.int32], p: NDArray[np.float64], c1: NDArray[np.float64], c2: NDArray[np.float64],
            c0: NDArray[np.float64], aT: NDArray[np.float64], S: NDArray[np.float64]) -> None:
    """:func:`per_round`'s sweep, four rounds per pass over the rows (``R`` a multiple of 4)."""
    R, n = leaf.shape
    L, B = c0.shape
    PT, GT, DT = np.zeros((4, L, B)), np.empty((4, L, B)), np.empty((4, L, B))
    PT[0] = c0
    for r0 in range(R - 1, -1, -4):
        for i in range(4):  # each round's leaf adjoints: its gathered sums, plus the rounds above it
            u = PT[i].copy()
            for m in range(i):
                for l1 in range(L):
                    for l2 in range(L):
                        sg, sh = S[r0, i, m, l1, l2, 0], S[r0, i, m, l1, l2, 1]
                        for b in range(B):
                            u[l1, b] += GT[m, l2, b] * sg + DT[m, l2, b] * sh
            _leaf_level(r0 - i, u, GT[i], DT[i], c1, c2)
        PT[:] = 0.0
        last = r0 == 3
        for j in range(n):
            k0, k1, k2, k3 = leaf[r0, j], leaf[r0 - 1, j], leaf[r0 - 2, j], leaf[r0 - 3, j]
            w0, h0 = _derivs(p[r0, j])
            w1, h1 = _derivs(p[r0 - 1, j])
            w2, h2 = _derivs(p[r0 - 2, j])
            w3, h3 = _derivs(p[r0 - 3, j])
            g0, g1, g2, g3 = (0, 0, 0, 0) if last else (leaf[r0 - 4, j], leaf[r0 - 5, j], leaf[r0 - 6, j],
                                                        leaf[r0 - 7, j])
            for b in range(B):
                a = aT[j, b] + (GT[0, k0, b] * w0 + DT[0, k0, b] * h0)
                a = a + (GT[1, k1, b] * w1 + DT[1, k1, b] * h1)
                a = a + (GT[2, k2, b] * w2 + DT[2, k2, b] * h2)
                a = a + (GT[3, k3, b] * w3 + DT[3, k3, b] * h3)
                aT[j, b] = a
                PT[0, g0, b] += a
                PT[1, g1, b] += a
                PT[2, g2, b] += a
                PT[3, g3, b] += a


def _model(n: int, R: int, L: int, B: int, seed: int = 0) -> tuple[NDArray[np.int32], NDArray[np.float64],
                                                                    NDArray[np.float64], NDArray[np.float64],
                                                                    NDArray[np.float64]]:
    """A synthetic model: each row's leaf and probability in each round, the leaf level's
    stand-in factors, and the last round's leaf adjoints."""
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, L, (R, n)).astype(np.int32)
    p = rng.uniform(0.05, 0.95, (R, n))
    c1, c2 = rng.normal(size=(R, L)) * 0.01, rng.normal(size=(R, L)) * 0.01
    return leaf, p, c1, c2, rng.normal(size=(L, B))


def _best(calls: dict[str, Callable[[], object]], repeats: int = 5) -> dict[str, float]:
    for call in calls.values():  # compile
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    return {name: min(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32_561)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--leaves", type=int, default=31)
    parser.add_argument("--width", type=int, default=56, help="objectives in the batch (a multiple of 8)")
    args = parser.parse_args()
    R, L, B = args.rounds - args.rounds % 4, args.leaves, args.width
    print(f"One thread, {R} rounds of {L} leaves, {B} objectives; best of 5.\n")
    print("| rows | per round | factored | blocked, 4 rounds | per round, ns per row and round "
          "| factored: max difference | blocked: max difference |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (args.rows, 4_000, 2_000):
        leaf, p, c1, c2, c0 = _model(n, R, L, B)
        S = pair_sums(leaf, p, 4, L)
        out = {"per round": np.zeros((n, B)), "factored": np.zeros((n, B)), "blocked": np.zeros((n, B))}
        best = _best({"per round": partial(per_round, leaf, p, c1, c2, c0, out["per round"]),
                      "factored": partial(factored, leaf, p, c1, c2, c0, out["factored"]),
                      "blocked": partial(blocked, leaf, p, c1, c2, c0, out["blocked"], S)})
        for a in out.values():  # one more call of each from zero adjoints, to compare them
            a[:] = 0.0
        per_round(leaf, p, c1, c2, c0, out["per round"])
        factored(leaf, p, c1, c2, c0, out["factored"])
        blocked(leaf, p, c1, c2, c0, out["blocked"], S)
        largest = np.abs(out["per round"]).max()
        fdiff = np.abs(out["per round"] - out["factored"]).max() / largest
        diff = np.abs(out["per round"] - out["blocked"]).max() / largest
        print(f"| {n:,} | {best['per round'] * 1e3:.1f} ms | {best['factored'] * 1e3:.1f} ms | "
              f"{best['blocked'] * 1e3:.1f} ms | {best['per round'] / (n * R) * 1e9:.1f} | "
              f"{fdiff:.1e} of the largest | {diff:.1e} of the largest |")
    print("\nPer round, 1,000 rows (in the L2 cache), by the batch's width:\n")
    print("| objectives | ns per row and round | ns per objective, row and round |")
    print("|---:|---:|---:|")
    for width in (8, 16, 32, 56, 112):
        leaf, p, c1, c2, c0 = _model(1_000, R, L, width)
        aT = np.zeros((1_000, width))
        t = _best({"w": partial(per_round, leaf, p, c1, c2, c0, aT)})["w"]
        print(f"| {width} | {t / (1_000 * R) * 1e9:.1f} | {t / (1_000 * R * width) * 1e9:.2f} |")


if __name__ == "__main__":
    main()
