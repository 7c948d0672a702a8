"""Reverse mode's last step: the scores of the training rows from a sweep's adjoints (numba), the
rows split over a team of threads. Private to the engine.

A reverse sweep of B objectives ends with each row's weight adjoints ``w_rows`` (n, B), the l2
term's ``big_w_bar`` (B,) and the base margin's adjoint; a row's score per unit of user weight is

    weight_factor[j] * (w_rows[j, b] + big_w_bar[b]) + sum_k base_bar[b, k] * d_base[j, k]

(the sum over the K outputs in order). Scores are written straight into the caller's result,
laid out (rows, objectives) as the adjoints are: done in numpy, the formula was a serial pass over
B x n doubles that took 0.7 of 1.77 s for 100 test points on 300,000 rows and 16 threads
(measured). Each entry is the same arithmetic, in the same order, as that numpy code, so the
scores do not depend on the number of threads.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import _jit as numba
from . import team

#: Fewest result rows per thread of the team.
ROWS_PER_THREAD = 4096


@numba.njit(cache=True, nogil=True)
def _scores_into(
    tid: int, n_team: int, bar: NDArray[np.int64], out: NDArray[np.float64], col0: int,
    rows: NDArray[np.int64], w_rows: NDArray[np.float64], big_w_bar: NDArray[np.float64],
    base_bar: NDArray[np.float64], d_base: NDArray[np.float64], weight_factor: NDArray[np.float64],
) -> None:
    """Thread ``tid``'s share (of ``n_team``) of ``out[i, col0 + b]`` = the score of row
    ``rows[i]`` for objective ``b``; see the module docstring for the formula and shapes."""
    B = big_w_bar.shape[0]
    K = base_bar.shape[1]
    m = rows.shape[0]
    for i in range(tid * m // n_team, (tid + 1) * m // n_team):
        j = rows[i]
        wf = weight_factor[j]
        for b in range(B):
            p = base_bar[b, 0] * d_base[j, 0]
            for k in range(1, K):
                p += base_bar[b, k] * d_base[j, k]
            out[i, col0 + b] = wf * (w_rows[j, b] + big_w_bar[b]) + p


def scores_into(
    out: NDArray[np.float64], col0: int, rows: NDArray[np.int64], w_rows: NDArray[np.float64],
    big_w_bar: NDArray[np.float64], base_bar: NDArray[np.float64], d_base: NDArray[np.float64],
    weight_factor: NDArray[np.float64], threads: int,
) -> None:
    """Write the scores per unit of user weight (> 0 = harmful) of training rows ``rows`` (m,)
    for B objectives into ``out[:, col0 : col0 + B]`` (``out`` (m, >= col0 + B), C-ordered), from
    the weight adjoints ``w_rows`` (n, >= B) (columns past B unused), ``big_w_bar`` (B,), the
    base margin's adjoint plus the direct channel ``base_bar`` (B, K), the base margin's
    derivative in each row's weight ``d_base`` (n, K) and ``weight_factor`` (n,); on up to
    ``threads`` threads."""
    m = rows.shape[0]
    n_team = max(1, min(int(threads), -(-m // ROWS_PER_THREAD)))
    team.run(_scores_into, n_team, out, int(col0), np.ascontiguousarray(rows, dtype=np.int64),
             np.ascontiguousarray(w_rows), np.ascontiguousarray(big_w_bar), np.ascontiguousarray(base_bar),
             np.ascontiguousarray(d_base), np.ascontiguousarray(weight_factor))
